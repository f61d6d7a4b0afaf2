"""The dtypes a model's published checkpoint runs in, read from its config (``quantization_config``).

A Hugging Face config names its checkpoint's weight format in ``quantization_config`` (absent: the
weights are stored in ``torch_dtype``, or ``dtype`` in newer configs). The formats read here:

* ``quant_method: fp8`` with ``weight_block_size: [128, 128]``: DeepSeek-V3's fine-grained recipe
  (arXiv 2412.19437, section 3.3.2; DeepSeek-V3/R1's and the Qwen3 ``-FP8`` checkpoints): fp8 weights
  with one fp32 scale per 128 x 128 block (``dtypes``: ``fp8_block``), the activations quantized to fp8
  in groups of 1 x 128 at every GEMM (``activation_scheme: dynamic``): the engines' block-scaled kernels,
  priced as their own kernel class (``costs.rules.BLOCK_FP8_MATMUL``);
* ``quant_method: fp8`` without ``weight_block_size``: per-tensor (or per-channel) scaled fp8 weights and
  activations (``fp8``);
* ``quant_method: mxfp4``: gpt-oss's layout, the routed experts in MXFP4 and the rest (attention, router,
  embedding, head: its ``modules_to_not_convert``) in the 16-bit type.

Activations: the engines quantize only each GEMM's input and keep the rest in 16 bits. A per-tensor fp8
checkpoint's graphs do so (``Scenario.carried_dtype``: bf16 between the GEMMs, and the quantization op before
each GEMM, ``graphs.quantize_activations_op``; the attention kernels run in fp8 and write fp8); a block-scaled
one (fp8_block) is still priced with fp8 activations throughout (norms, residuals and collectives on fp8
bytes), its per-token-group quantization inside its GEMM class. The KV cache stays in the 16-bit type the
checkpoint's config names (the engines' ``kv_cache_dtype`` default, ``auto``). Any other ``quant_method``
or block shape is refused: perfmodel does not guess a format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfmodel.dtypes import DTYPES, get_dtype
from perfmodel.errors import PerfmodelError

#: The weight block DeepSeek-V3's recipe scales (``dtypes``: fp8_block's ``scale_block``): rows x columns.
FP8_WEIGHT_BLOCK = (128, 128)
KNOWN_METHODS = ("fp8 (weight_block_size [128, 128] or none)", "mxfp4")


def _stored_dtype(config: Mapping[str, Any]) -> str:
    """The 16-bit (or wider) float the config stores unquantized tensors in; bf16 where it names none."""
    named = config.get("torch_dtype", config.get("dtype"))
    if named is None:
        return "bf16"
    try:
        dtype = get_dtype(str(named))
    except PerfmodelError:
        raise PerfmodelError(f"config torch_dtype {named!r} is not a dtype perfmodel knows ({', '.join(DTYPES)})") from None
    if dtype.kind != "float" or dtype.bytes_per_element < 2:
        raise PerfmodelError(f"config torch_dtype {named!r}: a checkpoint's unquantized tensors are bf16, fp16 or fp32")
    return dtype.name


def checkpoint_dtypes(config: Mapping[str, Any]) -> dict[str, str | None]:
    """``Scenario`` dtype fields (``weight_dtype``, ``activation_dtype``, ``kv_dtype``,
    ``expert_weight_dtype``) of the checkpoint ``config`` describes (see the module docstring); a clear
    error for a quantization this module does not read."""
    stored = _stored_dtype(config)
    plain: dict[str, str | None] = {"weight_dtype": stored, "activation_dtype": stored, "kv_dtype": stored,
                                    "expert_weight_dtype": None}
    quantization = config.get("quantization_config")
    if quantization is None:
        return plain
    if not isinstance(quantization, Mapping):
        raise PerfmodelError(f"config quantization_config must be a JSON object, got {type(quantization).__name__}")
    method = quantization.get("quant_method")
    if method == "fp8":
        block = quantization.get("weight_block_size")
        if block is None:
            return {**plain, "weight_dtype": "fp8", "activation_dtype": "fp8"}
        if list(block) != list(FP8_WEIGHT_BLOCK):
            raise PerfmodelError(f"quantization_config weight_block_size {block!r}: perfmodel prices fp8 blocks of "
                                 f"{list(FP8_WEIGHT_BLOCK)} (DeepSeek-V3's recipe, dtype fp8_block) only; give the "
                                 "dtypes with --weights and --activations")
        return {**plain, "weight_dtype": "fp8_block", "activation_dtype": "fp8"}
    if method == "mxfp4":
        return {**plain, "expert_weight_dtype": "mxfp4"}
    raise PerfmodelError(f"quantization_config quant_method {method!r} is not a format perfmodel reads (known: "
                         f"{'; '.join(KNOWN_METHODS)}); give the dtypes with --weights and --activations")
