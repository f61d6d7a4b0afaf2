"""Numeric data types: their names, aliases and storage sizes.

Storage sizes are in bits so that sub-byte formats (int4, fp4) are exact; ``bytes_per_element`` is a
float (0.5 for int4). ``tf32`` is a compute format stored as fp32 (4 bytes).

Block-scaled formats store each element in a narrow format (``element``) and one scale per block of
``scale_block`` elements: their ``bytes_per_element`` includes each element's share of its block's
scale, so every byte count made from them (weights in memory, the traffic of reading them) carries
the scale traffic:

* ``fp8_block``: fp8 (E4M3) elements and one fp32 scale per 128 x 128 block of a weight matrix
  (DeepSeek-V3's ``quantization_config``: ``"weight_block_size": [128, 128]``, ``weight_scale_inv``
  float32 tensors; arXiv 2412.19437, section 3.3.2): 8 + 32/16384 bits an element.
* ``mxfp8`` / ``mxfp4``: OCP Microscaling formats (OCP MX specification v1.0, section 5): E4M3 or E2M1
  elements and one E8M0 (8-bit) scale per 32 consecutive elements: 8.25 and 4.25 bits. gpt-oss ships
  its experts' weights so (``quant_method: mxfp4``; ``*_blocks`` uint8 tensors of two E2M1 elements a
  byte, ``*_scales`` uint8 of one E8M0 scale per 32).
* ``nvfp4``: NVIDIA's E2M1 elements with one E4M3 (8-bit) scale per 16 elements (NVIDIA technical
  blog "Introducing NVFP4", 2025; TensorRT-LLM / ModelOpt NVFP4 checkpoints): 4.5 bits. Its second-level
  fp32 scale is one per tensor, not counted (under 10^-6 of a matrix's bytes).

They are storage formats for weights (``Scenario.weight_dtype``); a matrix engine's peak is listed for
their ``element`` format.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.errors import PerfmodelError

BITS_PER_BYTE = 8


@dataclass(frozen=True, kw_only=True)
class DType:
    """A numeric format: canonical name, storage bits and whether it is a float or an integer."""

    name: str
    bits: int
    kind: str  # "float", "int", "bool" or "complex"
    scale_bits: int = 0  # block-scaled formats: the bits of one block's scale
    scale_block: int = 1  # ... and the elements sharing it
    element: str | None = None  # ... and the format of an element (None: not block-scaled)

    @property
    def bytes_per_element(self) -> float:
        """Storage bytes an element takes, its share of a block scale included."""
        return (self.bits + self.scale_bits / self.scale_block) / BITS_PER_BYTE

    @property
    def block_scaled(self) -> bool:
        return self.element is not None


_DTYPES = (
    DType(name="fp64", bits=64, kind="float"),
    DType(name="fp32", bits=32, kind="float"),
    DType(name="tf32", bits=32, kind="float"),
    DType(name="bf16", bits=16, kind="float"),
    DType(name="fp16", bits=16, kind="float"),
    DType(name="fp8", bits=8, kind="float"),
    DType(name="fp6", bits=6, kind="float"),
    DType(name="fp4", bits=4, kind="float"),
    DType(name="int64", bits=64, kind="int"),
    DType(name="int32", bits=32, kind="int"),
    DType(name="int16", bits=16, kind="int"),
    DType(name="int8", bits=8, kind="int"),
    DType(name="uint8", bits=8, kind="int"),
    DType(name="int4", bits=4, kind="int"),
    DType(name="fp8_block", bits=8, kind="float", scale_bits=32, scale_block=128 * 128, element="fp8"),
    DType(name="mxfp8", bits=8, kind="float", scale_bits=8, scale_block=32, element="fp8"),
    DType(name="mxfp4", bits=4, kind="float", scale_bits=8, scale_block=32, element="fp4"),
    DType(name="nvfp4", bits=4, kind="float", scale_bits=8, scale_block=16, element="fp4"),
    DType(name="bool", bits=8, kind="bool"),
    DType(name="complex64", bits=64, kind="complex"),
    DType(name="complex128", bits=128, kind="complex"),
)
DTYPES: dict[str, DType] = {dtype.name: dtype for dtype in _DTYPES}
# Same-width floats a matrix engine runs at one rate: a device that lists a peak (or a fitted
# efficiency) for one of them runs the other so, for lack of a separate figure.
EQUIVALENT_DTYPES: dict[str, tuple[str, ...]] = {"bf16": ("fp16",), "fp16": ("bf16",)}

# Spellings from PyTorch, NumPy and vendor documents mapped to the canonical names above.
ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "dl16": "fp16",
    "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "e4m3": "fp8", "e5m2": "fp8",
    "long": "int64", "int": "int32", "short": "int16",
}


def get_dtype(name: str) -> DType:
    """Return the :class:`DType` for a canonical name or an alias; raise a clear error otherwise."""
    if not isinstance(name, str):
        raise PerfmodelError(f"dtype must be a string such as 'bf16', got {name!r}")
    if name in DTYPES:  # the common case: a canonical name
        return DTYPES[name]
    key = name.strip().lower().removeprefix("torch.")
    key = ALIASES.get(key, key)
    if key not in DTYPES:
        raise PerfmodelError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)} (and aliases such as "
                             "'bfloat16', 'float16', 'float32')")
    return DTYPES[key]
