"""Per-op latencies measured inside serving engines: NVIDIA AIConfigurator's tables, as measurement records.

``aiconfigurator-core`` (PyPI, Apache-2.0) ships per-op latencies that NVIDIA collected inside
TensorRT-LLM, vLLM and SGLang on each GPU, one Parquet table per op family and engine version:
``aiconfigurator_core/systems/data/<gpu>/<family>/<engine>/<version>/<table>.parquet``, each folder
with a ``collection_meta.yaml``. They are microbenchmarks of the kernels those engines run when they
serve (GEMMs by m, n, k and dtype; attention by phase, batch, sequence, heads, KV heads and head
dimension; the engine's own all-reduce by message size and GPU count), so they may fit parameters.

The tables are read at calibration time from the installed package (the ``calibration`` extra);
perfmodel ships the fitted overlays (``hardware_specs/gpu/<gpu>-<engine>.yaml``), this code, and a small
sample under ``calibration/data/aiconfigurator/`` for the tests, with the license notice.

Conventions (read from the tables and from how aiconfigurator's own SDK queries them):
* ``latency`` is milliseconds of device time (the collectors time the op under CUDA graphs);
* GEMM: ``m x k`` activations times ``k x n`` weights; ``bfloat16``, ``fp8`` (per-tensor scaled),
  ``fp8_block`` (fp8 activations with 1x128 scales against fp8 weights with 128x128 ones: DeepGEMM and
  the engines' other block-scaled kernels, their own kernel class, ``costs.rules.BLOCK_FP8_MATMUL``) and
  ``nvfp4`` are priced; the weight-only ``int8_wo``/``int4_wo`` are skipped (counted). Rows a collector
  timed without a CUDA graph (``EAGER_TIMED_GEMMS``: vLLM's fp8_block) are skipped: their times hold the
  host's Python path, which serving under CUDA graphs does not pay;
* context attention: causal prefill of ``isl`` tokens per sequence, no cached prefix (``step`` 0);
  generation attention: one query token against ``isl + step`` cached tokens. Full attention
  (``window_size`` 0) with bf16 activations and a bf16 KV cache are used, for generation an fp8 KV cache
  too (``DECODE_KV_DTYPES``), for context fp8 throughout (``PREFILL_ATTENTION_DTYPES``); windowed rows and
  16-bit context kernels writing an fp8 cache are skipped (counted) until the cost rules price them;
* all-reduce: ``message_size`` counts elements (aiconfigurator's ``CustomAllReduce(name, tokens,
  hidden, tp)`` looks up ``tokens x hidden``), bf16, over NVLink (over PCIe on the L40S and RTX PRO 6000,
  which have none: ``SCALE_UP_LINKS``); where a table holds both the CUDA-graph
  and the eager variant of the engine's custom all-reduce, the graph one is what serving runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from calibration.records import MeasurementRecord
from perfmodel.costs.all_reduce import NCCL_LIBRARY
from perfmodel.errors import PerfmodelError
from perfmodel.llm.caveats import TRTLLM_SHARED_KV_GROUP_MAX
from perfmodel.llm.graphs import QUANTIZED_ACTIVATION_GEMMS, quantize_activations_op
from perfmodel.workload.io import dumps
from perfmodel.workload.ir import Graph, Op, TensorSpec

PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
LICENSE = "Apache-2.0 (NVIDIA CORPORATION & AFFILIATES; SPDX header of every collection_meta.yaml)"
SOURCE_URL = "https://pypi.org/project/aiconfigurator-core/"
#: perfmodel's spec name -> the package's data folder.
GPU_FOLDERS = {"a100-sxm-80gb": "a100_sxm", "h100-sxm": "h100_sxm", "h200-sxm": "h200_sxm", "b200": "b200_sxm",
               "b300": "b300_sxm", "gb200": "gb200", "gb300": "gb300", "l40s": "l40s",
               "rtx-pro-6000": "rtx_pro_6000_server"}
#: The chip-to-chip link an engine's all-reduce runs on, where it is not NVLink: the L40S and the RTX PRO
#: 6000 have none, and their engines' custom all-reduce goes GPU to GPU over PCIe (the specs' ``pcie_p2p``).
SCALE_UP_LINKS = {"l40s": "pcie_p2p", "rtx-pro-6000": "pcie_p2p"}
ENGINES = ("trtllm", "vllm", "sglang")
#: Each GPU's compute capability, as the engines' all-reduce rules key their tables (TensorRT-LLM maps
#: every pre-Blackwell GPU to its SM90 table and every later one to SM100; vLLM has 9.0, 10.0 and 10.3).
GPU_ARCHITECTURES = {"a100-sxm-80gb": "sm80", "h100-sxm": "sm90", "h200-sxm": "sm90", "b200": "sm100",
                     "gb200": "sm100", "b300": "sm103", "gb300": "sm103", "l40s": "sm89", "rtx-pro-6000": "sm120"}
#: GPUs whose tables were measured on an NVL72 rack (4-GPU compute trays; costs.all_reduce.NVL72_TRAY_GPUS).
NVL72_GPUS = ("gb200", "gb300")


def all_reduce_policy(gpu: str, engine: str) -> str:
    """The name of the all-reduce rule ``engine`` runs on ``gpu``'s scale-up link (``costs.all_reduce``)."""
    if gpu in SCALE_UP_LINKS:
        return f"{engine}-pcie"
    architecture = GPU_ARCHITECTURES[gpu]
    if engine == "trtllm":
        return "trtllm-sm80" if architecture == "sm80" else "trtllm-sm90" if architecture == "sm90" else "trtllm-sm100"
    rack = "-nvl72" if gpu in NVL72_GPUS else ""  # vLLM and SGLang run NCCL across its 4-GPU trays
    if engine == "vllm":
        return f"vllm-{architecture}{rack}"
    return "sglang-sm80" if architecture == "sm80" else "sglang-nvl72" if rack else "sglang-nvlink"

#: A kind of measurement -> (family folder, table file).
TABLES = {
    "gemm": ("gemm", "gemm_perf.parquet"),
    "prefill_attention": ("attention", "context_attention_perf.parquet"),
    "decode_attention": ("attention", "generation_attention_perf.parquet"),
    "all_reduce": ("comm", "custom_allreduce_perf.parquet"),
}
#: A library's own tables, read beside the engine's (``nccl_records``), not part of an engine's fit:
#: NCCL's (``comm/nccl/<nccl version>``: ``ncclAllReduce`` and the other collectives by GPU count and message
#: size, every GPU) time the class the engine hands NCCL (``<link>/nccl``) at every size, where the engine's
#: own tables time it at a few. They agree with the engines' NCCL rows (``nccl_agreement``), but joined to the
#: fit they make the held-out all-reduce error worse (H100 TensorRT-LLM 7.0% -> 7.7%, vLLM 5.6% -> 6.5%;
#: ``benchmarks/all_reduce_heldout.py``): NCCL's small messages (6, 9.5, 16 us on 2, 4, 8 H100s) and its
#: large ones (an intercept of about 70 us on 8 beside 4 us a MiB) are two protocols (LL/LL128 and Simple),
#: which one alpha and one efficiency per class cannot both price.
LIBRARY_TABLES = {"nccl_all_reduce": ("comm", "nccl_perf.parquet")}
#: The folder a library's table lies under instead of the engine's.
TABLE_OWNERS = {"nccl_all_reduce": "nccl"}
#: The op class of NCCL's own all-reduces: priced as the engine's NCCL class, reported apart from the
#: engine's all-reduces (whose held-out error is the one the overlays are judged on).
NCCL_OP_CLASS = "all_reduce:nccl"
#: The largest ratio (either way) of the engine's all-reduce rows the model hands NCCL to NCCL's own table at
#: the same GPU count and size (the median over the shared sizes) for NCCL's rows of that GPU count to join
#: the engine's fit. On H100, H200, A100 and B200 every engine agrees within 4% (the same NCCL, the same
#: machine); on the L40S vLLM and SGLang on 4 GPUs take 1.34-1.41x NCCL's table at every large size and on 8
#: GPUs 0.4-0.9x at mid sizes (another PCIe topology or NCCL setting than the NCCL table's, which TensorRT-LLM
#: on the L40S matches within 2%): there NCCL's table is not the engine's NCCL and is not used.
NCCL_AGREEMENT = 1.15
#: The KV-cache dtypes of the generation-attention tables the rules price (table name -> perfmodel's): bf16, and
#: fp8 (E4M3 with a per-tensor scale, every engine's ``kv_cache_dtype fp8``), whose decode kernels are a kernel
#: class of their own (``costs.rules.DECODE_ATTENTION_FP8_CACHE``). Their records are the op class
#: ``decode_attention:fp8_kv``, reported apart.
DECODE_KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
#: The (compute, KV-cache) dtypes of the context-attention tables the rules price (-> the kernel's compute dtype):
#: bf16, and fp8 throughout (TensorRT-LLM's ``--use_fp8_context_fmha``, SGLang's fp8 FlashAttention-3: Q, K and V
#: in E4M3, both matmuls at the tensor cores' fp8 rate, the softmax's exponentials as in bf16), the graphs'
#: attention op of an fp8 model (``llm.graphs._sdpa``: ``attention_dtype`` None). Their records are the op class
#: ``prefill_attention:fp8``, reported apart. A 16-bit kernel writing an fp8 cache is not among them (yet).
PREFILL_ATTENTION_DTYPES = {("bfloat16", "bfloat16"): "bf16", ("fp8", "fp8"): "fp8"}
#: Tables read only to test extrapolation (``benchmarks/engine_extrapolation.py``), never fitted.
UNFITTED_TABLES = {"moe": ("moe", "moe_perf.parquet")}
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
#: The activations a GEMM of a weight format reads, where not the weights' own dtype: NVFP4 GEMMs quantize
#: the activations to E2M1 too (the tables time the fp4 x fp4 tensor-core product; Blackwell applies the
#: block scales inside the MMA); fp8_block GEMMs quantize them to fp8 in groups of 128 along k (every
#: collector calls the engine's per-token-group quantization before the GEMM, as the engines do for a
#: checkpoint with ``activation_scheme: dynamic``).
GEMM_ACTIVATIONS = {"nvfp4": "fp4", "fp8_block": "fp8"}
#: GEMM rows a collector timed as eager calls, not as the replay of a captured CUDA graph: (engine, gemm
#: dtype) -> where it says so. Eager timing puts the host's Python path and kernel launches inside the time
#: whenever they outrun the device, so such rows cannot inform device parameters (every other GEMM row of the
#: tables is a graph replay). vLLM 0.24's fp8_block rows hold a floor flat in m (about 55-90 us on H100 and
#: H200, 150-240 us on B200 and GB200, whose Grace host is slower still) that SGLang's graph-timed DeepGEMM
#: rows of the same shapes do not, and agree with them at 1 TFLOP and above (within 3% on Hopper, 5-14% on
#: Blackwell; ``benchmarks/fp8_block_gap.py``).
EAGER_TIMED_GEMMS = {
    ("vllm", "fp8_block"): "https://github.com/ai-dynamo/aiconfigurator/blob/d5bad971c95729437ff611e559ed2fc1db6d4318/"
                           "collector/vllm/collect_gemm.py#L247 (use_cuda_graph=gemm_type != \"fp8_block\"; the "
                           "collector that wrote the vLLM 0.24.0 tables)"}

#: The attention backend an engine serves with by default, per GPU architecture, where its attention tables (prefill
#: and decode alike: the engine runs one backend for both) time a shape with several backends: (engine, architecture)
#: -> (kernel_source, where it is chosen). SGLang picks its attention backend at start-up for models without MLA:
#: FlashAttention-3 on Hopper and TensorRT-LLM's MHA kernels on Blackwell; its Blackwell tables also time 1,292
#: prefill shapes with FlashInfer and 2,584 with Triton (B200: 1.38x and 2.31x the trtllm_mha time, medians), and
#: 3,570 and 2,908 decode shapes (1.12x and 1.18x; Triton 0.68-5.4x between its 10th and 90th percentiles), backends it
#: serves with only when asked to (``benchmarks/served_backends.py``).
_SGLANG_ON_BLACKWELL = ("trtllm_mha", "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
                                      "(_get_default_attn_backend: trtllm_mha on SM100)")
SERVED_ATTENTION_BACKENDS = {
    ("sglang", "sm90"): ("fa3", "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py "
                                "(_get_default_attn_backend: fa3 on Hopper for models without MLA)"),
    ("sglang", "sm100"): _SGLANG_ON_BLACKWELL,
    # Blackwell Ultra (B300, GB300: compute capability 10.3) passes the same check: SGLang's is_sm100_supported()
    # (python/sglang/srt/utils) asks for major version 10 (later versions: at least 10.0), not exactly 10.0; its
    # B300 and GB300 tables time the same three backends as its B200 ones.
    ("sglang", "sm103"): _SGLANG_ON_BLACKWELL,
}
#: The columns that name one attention shape in a prefill or decode table (those a table has).
ATTENTION_SHAPE_COLUMNS = ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "window_size",
                           "attn_dtype", "kv_cache_dtype")
SERVED_ATTENTION_KINDS = ("prefill_attention", "decode_attention")


def served_attention_rows(source: Table, frame, skipped: dict[str, int] | None = None):
    """The rows of an attention table (prefill or decode, ``frame``) its engine serves with: where a shape is timed by
    several backends (``kernel_source``), the one the engine chooses by default (``SERVED_ATTENTION_BACKENDS``);
    shapes timed by one backend keep it (the engine's own choice for that shape). ``skipped`` counts the others."""
    served = SERVED_ATTENTION_BACKENDS.get((source.engine, GPU_ARCHITECTURES.get(source.gpu, "")))
    if served is None or "kernel_source" not in frame.columns or frame["kernel_source"].nunique() < 2:
        return frame
    shape = [column for column in ATTENTION_SHAPE_COLUMNS if column in frame.columns]
    backends = frame.groupby(shape, dropna=False)["kernel_source"].transform("nunique")
    dropped = (backends > 1) & (frame["kernel_source"] != served[0])
    if skipped is not None and dropped.any():
        _count(skipped, f"{source.kind}: a shape also timed with the backend {source.engine} serves with by default "
                        f"({served[0]}); the other backends' rows", int(dropped.sum()))
    return frame[~dropped]


class AIConfiguratorDataError(PerfmodelError):
    """The installed tables are missing or not in the layout this reader knows."""


@dataclass(frozen=True, kw_only=True)
class Table:
    """One measured table: which GPU, engine and engine version, and where it lies."""

    gpu: str
    engine: str
    version: str
    kind: str
    path: Path
    package_version: str = ""  # the aiconfigurator-core release the table came from (read when empty)


def data_root() -> Path:
    """The installed package's ``systems/data`` folder, or a clear error naming the extra to install."""
    import importlib.util

    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise AIConfiguratorDataError(
            f"{PACKAGE} is not installed; the serving-engine tables come from it at calibration time: "
            "pip install '.[calibration]'")
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def package_version() -> str:
    from importlib.metadata import version

    return version(PACKAGE)


def _version_key(text: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def versions(gpu: str, engine: str, kind: str, root: Path | None = None) -> tuple[str, ...]:
    """Engine versions measured for ``kind`` on ``gpu``, oldest first."""
    family, filename = {**TABLES, **UNFITTED_TABLES, **LIBRARY_TABLES}[kind]
    folder = (root or data_root()) / GPU_FOLDERS[gpu] / family / TABLE_OWNERS.get(kind, engine)
    if not folder.is_dir():
        return ()
    found = [child.name for child in folder.iterdir() if (child / filename).is_file()]
    return tuple(sorted(found, key=_version_key))


def table(gpu: str, engine: str, kind: str, version: str | None = None, root: Path | None = None) -> Table | None:
    """The table of ``kind`` for ``engine`` on ``gpu`` (the newest version unless one is named); None if
    the package measured none."""
    if gpu not in GPU_FOLDERS:
        raise AIConfiguratorDataError(f"no aiconfigurator folder is known for {gpu!r}; known: {', '.join(GPU_FOLDERS)}")
    measured = versions(gpu, engine, kind, root)
    if not measured:
        return None
    chosen = version or measured[-1]
    if chosen not in measured:
        raise AIConfiguratorDataError(f"{gpu} {engine} {kind}: no version {chosen!r}; measured: {', '.join(measured)}")
    family, filename = {**TABLES, **UNFITTED_TABLES, **LIBRARY_TABLES}[kind]
    owner = TABLE_OWNERS.get(kind, engine)
    path = (root or data_root()) / GPU_FOLDERS[gpu] / family / owner / chosen / filename
    return Table(gpu=gpu, engine=owner, version=chosen, kind=kind, path=path)


def read_rows(source: Table):
    """The table as a pandas DataFrame, with the columns each kind needs checked."""
    import pandas as pd

    frame = pd.read_csv(source.path) if source.path.suffix == ".csv" else pd.read_parquet(source.path)
    if source.kind.endswith("attention") and "window_size" not in frame.columns:
        # Older collections (vLLM 0.14 on A100) predate sliding windows: every row is full attention.
        frame = frame.assign(window_size=0)
    needed = {"gemm": ("gemm_dtype", "m", "n", "k", "latency"),
              "prefill_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                                    "attn_dtype", "kv_cache_dtype", "window_size", "latency"),
              "decode_attention": ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
                                   "kv_cache_dtype", "window_size", "latency"),
              "all_reduce": ("num_gpus", "message_size", "latency"),
              "nccl_all_reduce": ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"),
              "moe": ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                      "moe_ep_size", "distribution", "latency")}[source.kind]
    missing = [column for column in needed if column not in frame.columns]
    if missing:
        raise AIConfiguratorDataError(f"{source.path}: columns {', '.join(missing)} missing; this reader knows "
                                      f"{PACKAGE} 0.12's layout (columns found: {', '.join(frame.columns)})")
    return frame


def _family(kind: str) -> str:
    return {**TABLES, **UNFITTED_TABLES, **LIBRARY_TABLES}[kind][0]


def _filename(kind: str) -> str:
    return {**TABLES, **UNFITTED_TABLES, **LIBRARY_TABLES}[kind][1]


def _record(source: Table, name: str, op_class: str, latency_ms: float, op: Op | tuple[Op, ...],
            row: int) -> MeasurementRecord:
    ops = op if isinstance(op, tuple) else (op,)
    return MeasurementRecord(
        name=name, op_class=op_class, duration_s=float(latency_ms) * 1e-3, device=source.gpu,
        tool=f"aiconfigurator:{source.engine}", tool_version=f"{source.engine} {source.version}; {PACKAGE} "
        f"{source.package_version or package_version()}", flops_source="analytic_shapes", bytes_source="model_derived",
        source_file=f"{GPU_FOLDERS[source.gpu]}/{_family(source.kind)}/{source.engine}/{source.version}/"
                    f"{_filename(source.kind)}",
        source_row=int(row), clock="device", workload_json=dumps(Graph(name=name, ops=list(ops)), "json"))


def gemm_op(m: int, n: int, k: int, dtype: str) -> Op:
    """An ``m x k`` by ``k x n`` product of ``dtype`` weights; quantized GEMMs write bf16 (the engines'
    scaled GEMMs do)."""
    activations = GEMM_ACTIVATIONS.get(dtype, dtype)
    output = "bf16" if dtype in ("fp8", *GEMM_ACTIVATIONS) else dtype
    weight = TensorSpec(shape=(k, n), dtype=dtype, role="weight")
    return Op(name="gemm", kind="matmul", inputs=(TensorSpec(shape=(m, k), dtype=activations), weight),
              outputs=(TensorSpec(shape=(m, n), dtype=output),),
              attrs={"m": m, "n": n, "k": k, "dtype": activations})


#: GEMM dtypes whose rows time the activations' quantization too (``perfmodel.llm.graphs``'s
#: ``QUANTIZED_ACTIVATION_GEMMS``, the one list the LLM graphs quantize by): the collectors call the engine's own
#: linear method, which quantizes its bf16 input to fp8 (dynamic scales) in a kernel before the GEMM. Every
#: engine's table shows that kernel's floor: on H100 the smallest fp8 GEMMs take 4.8 us (vLLM), 4.6 us
#: (SGLang) and 12.2 us (TensorRT-LLM, whose scale is computed by several torch ops) where bf16's take 2.6 us,
#: and the time of a fixed GEMM grows with m where bf16's does not (vLLM, n = k = 32: 3.8 us bf16, 239 us fp8
#: at m = 32768; ``calibration/data``'s quantize tables time the same kernels alone).


#: GEMM rows whose activation scale is one per tensor, computed on the device from the activations by a
#: reduction whose thread blocks (one per token, m of them) each end in an atomic max on the same word, before
#: the quantize pass reads the activations again: (engine, gemm dtype) -> where it says so. vLLM 0.24's
#: collector builds ``Fp8Config(activation_scheme="dynamic")`` with per-tensor weights, whose CUTLASS linear
#: quantizes with ``dynamic_scaled_fp8_quant`` (a memset of the scale, ``segmented_max_reduction_strided`` with
#: ``grid(num_tokens)`` and ``atomicMaxFloat(scale, ...)`` per block, then ``scaled_fp8_quant_kernel_strided_
#: dynamic``). Its tables show the m blocks' floor: with n = k = 32 the fp8 row grows ~7 ns a row (239 us at
#: m = 32768 on H100, 213 us on B200) while the static quantize kernel alone, the same grid, takes 22 us
#: (``quantize/vllm`` tables) and TensorRT-LLM's fp8 row 15 us.
ATOMIC_SCALE_GEMMS = {
    ("vllm", "fp8"): "https://github.com/ai-dynamo/aiconfigurator/blob/095f58a51/collector/vllm/collect_gemm.py "
                     "(activation_scheme=\"dynamic\", per-tensor weight scale); https://github.com/vllm-project/"
                     "vllm/blob/main/csrc/quantization/w8a8/fp8/common.cu (dynamic_scaled_fp8_quant)"}


def gemm_ops(m: int, n: int, k: int, dtype: str, engine: str = "") -> tuple[Op, ...]:
    """The ops one GEMM row of ``engine``'s tables times: the GEMM (``gemm_op``), after the quantization of its
    bf16 activations (an element-wise kernel over m x k) where ``QUANTIZED_ACTIVATION_GEMMS`` says so, and
    before that the reduction of the activations to their one scale, one block a row, where
    ``ATOMIC_SCALE_GEMMS`` says so (``costs.rules.reduction_cost``)."""
    gemm = gemm_op(m, n, k, dtype)
    if dtype not in QUANTIZED_ACTIVATION_GEMMS:
        return (gemm,)
    quantize = quantize_activations_op(m, k, dtype)  # the op the LLM graphs emit before such a GEMM
    if (engine, dtype) not in ATOMIC_SCALE_GEMMS:
        return quantize, gemm
    activations = TensorSpec(shape=(m, k), dtype="bf16")
    scale = Op(name="activation_scale", kind="reduction", inputs=(activations,),
               outputs=(TensorSpec(shape=(1,), dtype="fp32"),), attrs={"dtype": "bf16", "blocks": m})
    return scale, quantize, gemm


#: Attention tables collected with a keys-only KV cache, as (engine, version): NVIDIA's TensorRT-LLM 1.0.0 collector
#: built its cache manager with ``CacheType.SELFKONLY`` (MLA's layout: one K buffer, no V) for every attention it
#: timed (https://github.com/ai-dynamo/aiconfigurator/blob/9f2bf08ba/collector/trtllm/collect_attn.py, lines
#: 97-108, "fix: collector 1.0.0 compatibility"); the 1.3.0rc20 collector replaced it with ``CacheType.SELF``
#: because "Regular GQA/MHA has separate K and V tensors" (commit dec5f4cd2, collect_attn.py lines 279-283). Only
#: A100's TensorRT-LLM table is of that version. Its grouped-query decode rows (XQA: a one-pass flash-style kernel
#: that reads a tile's keys and values together) stream the one buffer once: priced as K and V of equal width they
#: reach 3.3 TB/s on a 2.04 TB/s HBM (64 sequences x 1 KV head x 65,536 tokens: 2.1 GB "read" in 655 us), and the
#: fit put the class's HBM efficiency at 1.41 of the datasheet. Its multi-head rows (the masked multi-head
#: attention kernel: a pass over the keys, then one over the values) read the buffer twice, which is the
#: traffic of a full cache (32 x 64 heads x 4,096 tokens: 4.3 GB in 2.44 ms, 0.86 of HBM): priced as they are.
K_ONLY_CACHE_TABLES = frozenset({("trtllm", "1.0.0")})


#: Prefill-table backends that are an engine's decode kernel: vLLM's FlashInfer backend runs every request whose
#: query is one token through its decode path (``vllm/v1/attention/backends/flashinfer.py``: requests of query
#: length at most the reorder threshold, 1, go to the decode wrapper, TensorRT-LLM's generation kernel on
#: Blackwell), and NVIDIA's collector labels those rows so: ``trtllmdecode`` (B200, B300, GB200, GB300, vLLM
#: 0.24.0) and ``fidecode`` (L40S, RTX Pro 6000), only at isl = 1. Such a row is decode over a one-token cache
#: (B200: 64 sequences x 48 heads in 8.8 us, where the prefill rule's thread blocks, one a sequence and head,
#: priced 65 us).
DECODE_KERNEL_SOURCES = frozenset({"vllm_flashinfer_trtllmdecode", "vllm_flashinfer_fidecode"})


def attention_op(batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int, head_dim: int,
                 kv_dtype: str = "bf16", dtype: str = "bf16", keys_only: bool = False, decode: bool = False) -> Op:
    """Attention as the LLM graphs shape it: causal prefill when ``seq_q == seq_kv`` (and not ``decode``), else
    ``seq_q`` new tokens against a KV cache of ``seq_kv`` tokens of ``kv_dtype`` read from HBM; queries, output
    and the matmuls in ``dtype``. ``keys_only``: the cache holds the keys alone and the kernel reads its values
    from the same buffer (``K_ONLY_CACHE_TABLES``), so it streams one ``head_dim``-wide cache, not two.
    ``decode``: a one-token query run by the decode kernel over its cache (``DECODE_KERNEL_SOURCES``)."""
    prefill = seq_q == seq_kv and not decode
    query = TensorSpec(shape=(batch, heads, seq_q, head_dim), dtype=dtype)
    keys = TensorSpec(shape=(batch, kv_heads, seq_kv, head_dim), dtype=kv_dtype,
                      role="activation" if prefill else "kv_cache")
    return Op(name="sdpa", kind="attention", inputs=(query, keys) if keys_only else (query, keys, keys),
              outputs=(query,),
              attrs={"batch": batch, "heads": heads, "kv_heads": kv_heads, "seq_q": seq_q, "seq_kv": seq_kv,
                     "head_dim": head_dim, "causal": prefill, "implementation": "flash", "dtype": dtype,
                     **({"kv_shared": True} if keys_only else {}), **({"decode_kernel": True} if decode else {})})


def all_reduce_op(elements: int, gpus: int, link: str = "nvlink", library: str | None = None) -> Op:
    """A bf16 all-reduce of ``elements``; ``library`` ``"nccl"``: NCCL called directly (its own tables), not
    the engine's choice (``costs.all_reduce.algorithms``)."""
    return Op(name="all_reduce", kind="collective", attrs={"collective": "all_reduce", "bytes": 2.0 * elements,
                                                           "group_size": gpus, "dtype": "bf16", "link": link,
                                                           **({"library": library} if library else {})})


def _engine_of(row) -> str:
    """The engine that measured ``row`` (its ``framework`` column: ``VLLM``, ``SGLang``, ``TRTLLM``)."""
    return str(row.get("framework", "")).lower()


def _eager(row) -> bool:
    """The eager variant of an engine's all-reduce (``kernel_source`` names it: ``vLLM_custom_eager``,
    ``SGLang_CustomAllReduce_eager``); TensorRT-LLM's tables hold only the one it serves with."""
    return "eager" in str(row.get("kernel_source", "")).lower()


def unpriced(kind: str, row) -> str | None:
    """Why the cost rules cannot price this row yet (the reason it is skipped), or None."""
    if kind == "gemm":
        dtype = row["gemm_dtype"]
        if dtype not in GEMM_DTYPES:
            return (f"gemm {dtype}: not priced from these tables yet (the weight-only int8/int4 and SmoothQuant "
                    "kernels)")
        if (_engine_of(row), dtype) in EAGER_TIMED_GEMMS:
            return f"gemm {dtype}: timed without a CUDA graph (host time inside; serving replays graphs)"
        return None
    if kind in ("prefill_attention", "decode_attention"):
        cache = row["kv_cache_dtype"]
        if int(row["window_size"]) != 0 or (cache not in DECODE_KV_DTYPES if kind == "decode_attention" else
                                            (row["attn_dtype"], cache) not in PREFILL_ATTENTION_DTYPES):
            return (f"{kind}: windowed rows or cache dtypes not priced (the rules price full attention"
                    + (" on a bf16 or fp8 cache)" if kind == "decode_attention"
                       else " in bf16 or fp8 throughout; not a 16-bit kernel writing an fp8 cache)"))
        if (kind == "decode_attention" and str(row.get("framework", "")).upper() == "TRTLLM"
                and int(row["num_heads"]) > TRTLLM_SHARED_KV_GROUP_MAX * int(row["num_key_value_heads"])):
            return (f"decode_attention: TensorRT-LLM query groups above {TRTLLM_SHARED_KV_GROUP_MAX} heads a KV head "
                    "(its kernel re-reads the cache for every few query heads; not priced)")
        return None
    if kind == "nccl_all_reduce":
        if row["op_name"] != "all_reduce" or row["nccl_dtype"] != "half":
            return "nccl: not a half-precision all-reduce (the engines' NCCL class is fitted on those)"
        return "nccl all_reduce on one GPU" if int(row["num_gpus"]) < 2 else None
    if _eager(row):
        return "all_reduce: eager variant (serving runs the CUDA-graph one)"
    if "MNNVL" in str(row.get("kernel_source", "")).upper():
        # TensorRT-LLM's multi-node NVLink kernels timed with their strategy forced (GB300's table), not the
        # AUTO choice serving makes (costs.all_reduce)
        return "all_reduce: TensorRT-LLM MNNVL kernels forced one- or two-shot (not the AUTO strategy)"
    return "all_reduce on one GPU" if int(row["num_gpus"]) < 2 else None


def _count(skipped: dict[str, int], reason: str, count: int = 1) -> None:
    skipped[reason] = skipped.get(reason, 0) + count


def records(source: Table, frame, skipped: dict[str, int]) -> Iterator[MeasurementRecord]:
    """Measurement records of the rows of ``frame`` (rows of ``source``) that the cost rules price;
    ``skipped`` counts the others by reason."""
    kind = source.kind
    for index, row in frame.iterrows():
        latency = float(row["latency"])
        reason = unpriced(kind, row) or (None if math.isfinite(latency) and latency > 0
                                         else f"{kind}: latency not a positive number")
        if reason:
            _count(skipped, reason)
            continue
        if kind == "gemm":
            dtype = GEMM_DTYPES[row["gemm_dtype"]]
            m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
            yield _record(source, f"gemm_{dtype}_{m}x{n}x{k}", f"gemm:{dtype}", latency,
                          gemm_ops(m, n, k, dtype, source.engine), index)
        elif kind in ("prefill_attention", "decode_attention"):
            batch, heads, kv_heads, head_dim = (int(row[column]) for column in
                                                ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
            if kind == "prefill_attention":
                seq_q = seq_kv = int(row["isl"])
                cache = compute = PREFILL_ATTENTION_DTYPES[(row["attn_dtype"], row["kv_cache_dtype"])]
                suffix = "" if compute == "bf16" else f"_{compute}"
                op_class = kind if compute == "bf16" else f"{kind}:{compute}"
            else:
                seq_q, seq_kv = 1, int(row["isl"]) + int(row["step"])
                cache, compute = DECODE_KV_DTYPES[row["kv_cache_dtype"]], "bf16"
                suffix = "" if cache == "bf16" else f"_{cache}_kv"
                op_class = kind if cache == "bf16" else f"{kind}:{cache}_kv"
            keys_only = kind == "decode_attention" and heads > kv_heads and \
                (source.engine, source.version) in K_ONLY_CACHE_TABLES
            by_decode_kernel = kind == "prefill_attention" and seq_q == 1 and \
                row.get("kernel_source") in DECODE_KERNEL_SOURCES
            name = f"{kind}_{batch}x{heads}/{kv_heads}x{seq_q}:{seq_kv}x{head_dim}{suffix}"
            yield _record(source, name, op_class, latency,
                          attention_op(batch, heads, kv_heads, seq_q, seq_kv, head_dim, cache, compute, keys_only,
                                       decode=by_decode_kernel),
                          index)
        elif kind == "nccl_all_reduce":
            gpus, elements = int(row["num_gpus"]), int(row["message_size"])
            yield _record(source, f"nccl_all_reduce_{gpus}x_{elements}", NCCL_OP_CLASS, latency,
                          all_reduce_op(elements, gpus, SCALE_UP_LINKS.get(source.gpu, "nvlink"), NCCL_LIBRARY), index)
        else:
            gpus, elements = int(row["num_gpus"]), int(row["message_size"])
            yield _record(source, f"all_reduce_{gpus}x_{elements}", "all_reduce", latency,
                          all_reduce_op(elements, gpus, SCALE_UP_LINKS.get(source.gpu, "nvlink")), index)


def sample(frame, rows: int, seed: int, strata: tuple[str, ...] = (), kind: str | None = None):
    """At most ``rows`` rows of ``frame`` per stratum, drawn at random with ``seed`` (a fixed seed: the
    same sample on every machine). With ``kind`` (a table in ``SIZE_STRATIFIED``), each stratum's rows are
    spread evenly over the decades of the work a row measures (``work_decades``): the grids are dense in
    small shapes, and a uniform draw leaves the rates (which only large shapes bind: the issue's "fixed costs
    from small shapes, rates from large ones") a handful of rows against hundreds of fixed-cost ones."""
    import pandas as pd

    def draw(group, count: int):
        return group if len(group) <= count else group.sample(n=count, random_state=seed)

    def spread(group):
        if kind not in SIZE_STRATIFIED or len(group) <= rows:
            return draw(group, rows)
        decades = work_decades(kind, group)
        quota = -(-rows // decades.nunique())
        return pd.concat([draw(part, quota) for _, part in group.groupby(decades, sort=True)])

    if not strata:
        return spread(frame).sort_index()
    parts = [spread(group) for _, group in frame.groupby(list(strata), sort=True)]
    return pd.concat(parts).sort_index() if parts else frame.iloc[:0]


#: The tables whose fit sample is spread over decades of work (``sample``).
SIZE_STRATIFIED = ("gemm", "prefill_attention", "decode_attention")


def work_decades(kind: str, frame):
    """The decade of the work each row of a ``kind`` table measures (floor of log10): a GEMM's and a prefill
    kernel's multiply-adds (m n k; batch x heads x prompt^2 x head dim), a decode kernel's cached elements
    (batch x KV length x KV heads x head dim), which its time follows once the fixed costs are paid."""
    import numpy as np

    if kind == "gemm":
        work = frame.m.astype(float) * frame.n * frame.k
    elif kind == "prefill_attention":
        work = frame.batch_size.astype(float) * frame.num_heads * frame.isl.astype(float) ** 2 * frame.head_dim
    elif kind == "decode_attention":
        work = (frame.batch_size.astype(float) * (frame.isl + frame.step) * frame.num_key_value_heads
                * frame.head_dim)
    else:
        raise ValueError(f"work_decades: no measure of work for a {kind!r} table (one of {SIZE_STRATIFIED})")
    return np.floor(np.log10(work)).astype(int)


#: Rows per table (and per GEMM dtype) that one fit takes, spread over the decades of work the grids hold (``sample``).
SAMPLE_ROWS = {"gemm": 400, "prefill_attention": 300, "decode_attention": 300, "all_reduce": 200,
               "nccl_all_reduce": 200}
#: Sampled apart, so each GEMM dtype, each decode cache dtype and each prefill compute dtype gets its rows (and the
#: bf16 decode and prefill samples are the ones drawn before fp8 rows were priced).
STRATA = {"gemm": ("gemm_dtype",), "decode_attention": ("kv_cache_dtype",), "prefill_attention": ("attn_dtype",)}


def nccl_agreement(engine_rows, nccl_rows, policy: str) -> dict[int, tuple[float, int]]:
    """Per GPU count: the median ratio of the engine's all-reduce rows (priced rows of its table) that its rule
    (``policy``) hands NCCL to NCCL's own table (priced rows) at the same message size, and how many sizes
    were compared. GPU counts without a shared size are absent."""
    import statistics

    from perfmodel.costs.all_reduce import NVLS, RING, algorithms

    own = {(int(gpus), int(size)): float(latency) for gpus, size, latency in
           zip(nccl_rows["num_gpus"], nccl_rows["message_size"], nccl_rows["latency"], strict=True)}
    ratios: dict[int, list[float]] = {}
    for gpus, size, latency in zip(engine_rows["num_gpus"], engine_rows["message_size"], engine_rows["latency"],
                                   strict=True):
        key = (int(gpus), int(size))
        if key in own and algorithms(policy, key[0], 2.0 * key[1]) in (NVLS, RING):
            ratios.setdefault(key[0], []).append(float(latency) / own[key])
    return {gpus: (statistics.median(values), len(values)) for gpus, values in sorted(ratios.items())}


def agreeing_nccl_rows(engine_rows, nccl_rows, policy: str, skipped: dict[str, int] | None = None):
    """NCCL's own rows that may join the engine's fit: those of the GPU counts where the engine's NCCL rows
    agree with them within :data:`NCCL_AGREEMENT` (or where the engine hands NCCL no size NCCL's table
    holds: nothing contradicts it); ``skipped`` counts the others with the ratio found. None of them
    without an engine all-reduce table (nothing would use the class)."""
    if engine_rows is None:
        if skipped is not None and len(nccl_rows):
            _count(skipped, "nccl all_reduce: the engine has no all-reduce table", len(nccl_rows))
        return nccl_rows.iloc[:0]
    keep = nccl_rows["num_gpus"].astype(int).map(lambda gpus: True)
    for gpus, (ratio, compared) in nccl_agreement(engine_rows, nccl_rows, policy).items():
        if max(ratio, 1 / ratio) > NCCL_AGREEMENT:
            dropped = nccl_rows["num_gpus"].astype(int) == gpus
            keep &= ~dropped
            if skipped is not None:
                _count(skipped, f"nccl all_reduce on {gpus} GPUs: the engine's NCCL rows take {ratio:.2f}x NCCL's "
                                f"table ({compared} sizes; not the engine's NCCL)", int(dropped.sum()))
    return nccl_rows[keep]


def priced_rows(kind: str, frame, skipped: dict[str, int] | None = None, source: Table | None = None):
    """The rows of ``frame`` (a ``kind`` table) the rules price (so every one becomes a record); ``skipped`` counts
    the rest by reason. With its ``source``, an attention table's shapes timed with several backends keep the one the
    engine serves with (``served_attention_rows``)."""
    if kind in SERVED_ATTENTION_KINDS and source is not None:
        frame = served_attention_rows(source, frame, skipped)
    reasons = frame.apply(lambda row: unpriced(kind, row), axis=1)
    if skipped is not None:
        for reason, count in reasons.dropna().value_counts().items():
            _count(skipped, str(reason), int(count))
    return frame[reasons.isna()]


def fit_sample(kind: str, priced, seed: int):
    """The fixed sample of a ``kind`` table's priced rows (``priced_rows``) one fit takes (``sample``)."""
    return sample(priced, SAMPLE_ROWS[kind], seed, STRATA.get(kind, ()), kind)


def chosen_rows(kind: str, frame, seed: int, skipped: dict[str, int] | None, source: Table | None = None):
    """The rows of ``frame`` (a ``kind`` table) one fit takes: the fit's sample of the priced ones."""
    return fit_sample(kind, priced_rows(kind, frame, skipped, source), seed)


def engine_records(gpu: str, engine: str, *, seed: int = 0, versions_by_kind: dict[str, str] | None = None,
                   root: Path | None = None) -> tuple[list[MeasurementRecord], dict[str, int], dict[str, str]]:
    """Records of every table measured for ``engine`` on ``gpu`` (a fixed random sample of each); the
    reasons rows were skipped; the version of each table read."""
    found: list[MeasurementRecord] = []
    skipped: dict[str, int] = {}
    read: dict[str, str] = {}
    for kind in TABLES:
        source = table(gpu, engine, kind, (versions_by_kind or {}).get(kind), root)
        if source is None:
            continue
        read[kind] = source.version
        found.extend(records(source, chosen_rows(kind, read_rows(source), seed, skipped, source), skipped))
    return found, skipped, read


def nccl_records(gpu: str, engine: str, *, seed: int = 0, root: Path | None = None,
                 skipped: dict[str, int] | None = None) -> list[MeasurementRecord]:
    """NCCL's own all-reduces on ``gpu`` (its newest table; a fixed sample), as records of the NCCL class of
    ``engine``'s link, for the GPU counts where they agree with the engine's NCCL rows
    (``agreeing_nccl_rows``); none where either table is missing. ``skipped`` counts the rows left out."""
    mine, library = table(gpu, engine, "all_reduce", root=root), table(gpu, "nccl", "nccl_all_reduce", root=root)
    if library is None:
        return []
    counts = {} if skipped is None else skipped
    frame = read_rows(library)
    reasons = frame.apply(lambda row: unpriced("nccl_all_reduce", row), axis=1)
    for reason, count in reasons.dropna().value_counts().items():
        _count(counts, str(reason), int(count))
    agreeing = agreeing_nccl_rows(None if mine is None else priced_rows("all_reduce", read_rows(mine)),
                                  frame[reasons.isna()], all_reduce_policy(gpu, engine), counts)
    return list(records(library, sample(agreeing, SAMPLE_ROWS["nccl_all_reduce"], seed), counts))


SAMPLE_DIRECTORY = Path(__file__).resolve().parent / "data" / "aiconfigurator"
SAMPLE_GPU, SAMPLE_ENGINE, SAMPLE_SEED, SAMPLE_ROWS_PER_KIND = "h100-sxm", "sglang", 1, 40


FIT_ROWS_DIRECTORY = SAMPLE_DIRECTORY / "fit_rows"
#: The one engine fit whose chosen rows ship, so tests can rerun that fit without the package.
FIT_ROWS_GPU, FIT_ROWS_ENGINE = "h100-sxm", "vllm"


def sample_path(kind: str, directory: Path = SAMPLE_DIRECTORY, gpu: str = SAMPLE_GPU,
                engine: str = SAMPLE_ENGINE) -> Path:
    return directory / f"{GPU_FOLDERS[gpu]}-{engine}-{kind}.csv"


def write_sample(directory: Path = SAMPLE_DIRECTORY) -> list[Path]:
    """The committed test sample: ``SAMPLE_ROWS_PER_KIND`` raw rows of each table of SGLang on H100, drawn
    with a seed (1) other than the overlays' (0), so most are rows the shipped overlay was not fitted on."""
    return _write_rows(directory, SAMPLE_GPU, SAMPLE_ENGINE,
                       lambda kind, frame: sample(frame, SAMPLE_ROWS_PER_KIND, SAMPLE_SEED))


def write_fit_rows(directory: Path = FIT_ROWS_DIRECTORY, gpu: str = FIT_ROWS_GPU, engine: str = FIT_ROWS_ENGINE,
                   seed: int = 0) -> list[Path]:
    """The raw rows ``engine_records`` chooses for ``gpu``'s ``engine`` fit (seed 0: the shipped overlay's),
    so ``sample_records(directory, gpu, engine)`` gives that fit's records without the package."""
    return _write_rows(directory, gpu, engine,
                       lambda kind, frame: chosen_rows(kind, frame, seed, None, table(gpu, engine, kind)))


def _write_rows(directory: Path, gpu: str, engine: str, choose) -> list[Path]:
    from perfmodel.yaml_source import write_text_atomically

    written = []
    for kind in TABLES:
        source = table(gpu, engine, kind)
        if source is None:
            continue
        frame = read_rows(source).assign(package_version=package_version())
        output = sample_path(kind, directory, gpu, engine)
        output.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(output, choose(kind, frame).to_csv(index=False))
        written.append(output)
    return written


#: Whole all-reduce tables (the CUDA-graph rows, 69 each) shipped so tests can fit an engine's collective
#: model without the package: TensorRT-LLM on 8 H100s hands mid sizes to NCCL, vLLM on PCIe L40S runs its
#: kernel on 2 GPUs and NCCL on more (``costs.all_reduce``).
ALL_REDUCE_SAMPLES = (("h100-sxm", "trtllm"), ("l40s", "vllm"))


def write_all_reduce_samples(directory: Path = SAMPLE_DIRECTORY) -> list[Path]:
    """The all-reduce tables of :data:`ALL_REDUCE_SAMPLES`, every row the rules price."""
    from perfmodel.yaml_source import write_text_atomically

    written = []
    for gpu, engine in ALL_REDUCE_SAMPLES:
        source = table(gpu, engine, "all_reduce")
        if source is None:
            raise AIConfiguratorDataError(f"{PACKAGE} has no all-reduce table of {engine} on {gpu}")
        priced = priced_rows("all_reduce", read_rows(source).assign(package_version=package_version()))
        output = sample_path("all_reduce", directory, gpu, engine)
        write_text_atomically(output, priced.to_csv(index=False))
        written.append(output)
    return written


def all_reduce_sample_records(gpu: str, engine: str, directory: Path = SAMPLE_DIRECTORY) -> list[MeasurementRecord]:
    """Records of a shipped all-reduce table (:data:`ALL_REDUCE_SAMPLES`; no package needed)."""
    frame, source = committed_rows("all_reduce", gpu, engine, directory)
    return list(records(source, frame, {}))


#: NCCL's own all-reduce rows (half precision, every GPU count and size: 63 each) shipped beside
#: :data:`ALL_REDUCE_SAMPLES`' engine tables on the same GPUs, so tests can compare the two and fit the NCCL
#: class on both without the package.
NCCL_SAMPLES = ("h100-sxm", "l40s")


def write_nccl_samples(directory: Path = SAMPLE_DIRECTORY) -> list[Path]:
    """NCCL's newest all-reduce table on each GPU of :data:`NCCL_SAMPLES`, every row the rules price."""
    from perfmodel.yaml_source import write_text_atomically

    written = []
    for gpu in NCCL_SAMPLES:
        source = table(gpu, "nccl", "nccl_all_reduce")
        if source is None:
            raise AIConfiguratorDataError(f"{PACKAGE} has no NCCL table on {gpu}")
        priced = priced_rows("nccl_all_reduce",
                         read_rows(source).assign(package_version=package_version(), version=source.version))
        output = sample_path("nccl_all_reduce", directory, gpu, "nccl")
        write_text_atomically(output, priced.to_csv(index=False))
        written.append(output)
    return written


def committed_rows(kind: str, gpu: str, engine: str, directory: Path = SAMPLE_DIRECTORY):
    """A committed table sample (``engine`` ``"nccl"`` for NCCL's) as read_rows gives it, and its Table."""
    return _read_committed(sample_path(kind, directory, gpu, engine), gpu, engine, kind)


def _read_committed(path: Path, gpu: str, engine: str, kind: str):
    """Rows written by one of the ``write_*`` functions here (they carry ``version`` and ``package_version``
    columns), as read_rows gives them, and their Table."""
    import pandas as pd

    frame = pd.read_csv(path)
    source = Table(gpu=gpu, engine=engine, version=str(frame["version"].iloc[0]), kind=kind, path=path,
                   package_version=str(frame["package_version"].iloc[0]))
    return read_rows(source), source


def nccl_sample_records(gpu: str, directory: Path = SAMPLE_DIRECTORY) -> list[MeasurementRecord]:
    """Records of a shipped NCCL all-reduce table (:data:`NCCL_SAMPLES`; no package needed)."""
    frame, source = committed_rows("nccl_all_reduce", gpu, "nccl", directory)
    return list(records(source, frame, {}))


#: The committed fp8 GEMM sample: ``FP8_SAMPLE_ROWS`` per-tensor (``fp8``) and as many block-scaled
#: (``fp8_block``) rows of TensorRT-LLM's H100 GEMM table, seed 1: its two kernels differ in rate and fixed cost
#: (``benchmarks/fp8_block_gap.py``), which the tests of the block-scaled kernel class need.
FP8_SAMPLE_ENGINE, FP8_SAMPLE_ROWS, FP8_SAMPLE_DTYPES = "trtllm", 80, ("fp8", "fp8_block")


def fp8_sample_path(directory: Path = SAMPLE_DIRECTORY) -> Path:
    return directory / f"{GPU_FOLDERS[SAMPLE_GPU]}-{FP8_SAMPLE_ENGINE}-gemm_fp8.csv"


def write_fp8_sample(directory: Path = SAMPLE_DIRECTORY) -> Path:
    """Write the committed fp8 GEMM sample (``FP8_SAMPLE_ENGINE``'s newest GEMM table on ``SAMPLE_GPU``)."""
    from perfmodel.yaml_source import write_text_atomically

    source = table(SAMPLE_GPU, FP8_SAMPLE_ENGINE, "gemm")
    if source is None:
        raise AIConfiguratorDataError(f"{PACKAGE} holds no {FP8_SAMPLE_ENGINE} GEMM table for {SAMPLE_GPU}")
    frame = read_rows(source)
    chosen = sample(frame[frame.gemm_dtype.isin(FP8_SAMPLE_DTYPES)], FP8_SAMPLE_ROWS, SAMPLE_SEED, STRATA["gemm"])
    output = fp8_sample_path(directory)
    write_text_atomically(output, chosen.assign(package_version=package_version()).to_csv(index=False))
    return output


def fp8_sample_records(directory: Path = SAMPLE_DIRECTORY) -> list[MeasurementRecord]:
    """Records of the committed fp8 GEMM sample (no package needed)."""
    frame, source = _read_committed(fp8_sample_path(directory), SAMPLE_GPU, FP8_SAMPLE_ENGINE, "gemm")
    return list(records(source, frame, {}))


def rows_package_version(directory: Path, gpu: str, engine: str) -> str:
    """The package version committed rows were read from (their ``package_version`` column)."""
    for kind in TABLES:
        if sample_path(kind, directory, gpu, engine).is_file():
            return committed_rows(kind, gpu, engine, directory)[1].package_version
    raise AIConfiguratorDataError(f"no committed rows of {engine} on {gpu} in {directory}")


def sample_records(directory: Path = SAMPLE_DIRECTORY, gpu: str = SAMPLE_GPU, engine: str = SAMPLE_ENGINE
                   ) -> tuple[list[MeasurementRecord], dict[str, int], dict[str, str]]:
    """Records of committed rows (no package needed): the test sample, or a fit's rows (``write_fit_rows``);
    the reasons rows were skipped; the engine version of each table."""
    found: list[MeasurementRecord] = []
    skipped: dict[str, int] = {}
    read: dict[str, str] = {}
    for kind in TABLES:
        frame, source = committed_rows(kind, gpu, engine, directory)
        read[kind] = source.version
        found.extend(records(source, frame, skipped))
    return found, skipped, read


if __name__ == "__main__":  # python -m calibration.aiconfigurator: rewrite the committed test rows
    for written in (write_sample() + write_fit_rows() + write_all_reduce_samples() + write_nccl_samples()
                    + [write_fp8_sample()]):
        print(f"wrote {written}")
