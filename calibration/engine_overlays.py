"""Per-engine overlays: each GPU's parameters fitted to the kernels one serving engine runs.

``python -m calibration.engine_overlays --write hardware_specs/gpu`` fits, for every GPU of
:data:`calibration.aiconfigurator.GPU_FOLDERS` and every engine measured on it (TensorRT-LLM, vLLM,
SGLang), the same parameters as the achievable overlays (:func:`calibration.fit.fit`: efficiencies per
kind and dtype, a start-up latency per kind fitted where compute binds, memory latencies, link
alpha-beta) to a fixed random sample of that engine's tables (GEMMs, prefill and decode attention, the
engine's own all-reduce) from the installed ``aiconfigurator-core``. Each is written as
``<gpu>-<engine>.yaml``, which ``extends`` the datasheet spec, is of kind ``achievable`` and is named
in every output (``--engine`` on ``llm``, ``serve``, ``size``, ``validate``). Its graph mode (the default:
the engines decode under CUDA graphs) carries the engine's host work per scheduler step
(``ENGINE_STEPS``: public profiles of the engines' loops, not the tables), which the serving simulator
charges beside each step's device time.

Fixed costs come from the small shapes and rates from the large ones because the tables span both
(m from 1 to 32k; KV from 2 to 128k tokens; messages from 128 elements to 512 Mi), which the older
published tables did not (FlashAttention rows of 16k tokens, XLA collectives timed with a launch), and
because the sample gives each decade of work its share of the rows (``aiconfigurator.sample``): the grids
are dense in small shapes (1.3% of H100 TensorRT-LLM's priced decode rows hold 1e9 cached elements or more),
and a uniform draw put that decode kernel's fp8-cache rate at 0.72 of HBM where its batch-256 rows of 512
and 1,024 cached tokens differ by 268 MB in 0.087 ms (0.92).

Only microbenchmarks are used; application rows (LLM throughput, latency) never fit anything.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

from calibration import aiconfigurator as tables
from calibration.achievable import device_time_hardware

# A GPU's shared memory feeds the tensor cores inside every GEMM and attention kernel: whole-kernel
# times cannot separate its bandwidth from the tensor-core rate (fitted together, the H100 SGLang
# GEMMs left bf16 compute at 3.8 +- 42 and shared memory at 0.56), so it stays at the datasheet.
DATASHEET_LEVELS = ("smem",)


# The engines decode under CUDA graphs by default, so an engine's overlay defaults to the graph mode
# (``--mode dynamic`` still prices eager execution).
ENGINE_GRAPHS_SOURCE = {
    "url": "https://docs.vllm.ai/en/latest/design/cuda_graphs.html", "kind": "vendor-code",
    "note": ("default_mode graph: vLLM captures CUDA graphs for decode batches unless enforce_eager is set (this page; "
             "vllm/config/compilation.py cudagraph_mode); SGLang captures them up to --cuda-graph-max-bs "
             "(https://docs.sglang.ai/advanced_features/server_arguments.html, --disable-cuda-graph to turn off); "
             "TensorRT-LLM's PyTorch backend through cuda_graph_config (tensorrt_llm/llmapi/llm_args.py)")}


@dataclass(frozen=True, kw_only=True)
class EngineStepEvidence:
    """An engine's host work per scheduler step (``hardware.model.EngineStep``) and where it comes from."""

    host_fixed_s: float
    host_per_sequence_s: float
    overlap: bool
    source: dict[str, str]
    fuses_mixed: bool = True  # prefill chunks and decode tokens in one forward pass (written only when False)


# Per engine, not per GPU: the host work is the engine's Python loop on the host CPU (the hosts behind the
# evidence differ: x86 beside B200 and H100, Grace on GB200), so every GPU's overlay of an engine carries the
# same figures. A fixed and a per-sequence part because every engine's step time grows with its batch
# (wuklab's vLLM and SGLang profiles; TensorRT-LLM's 45 ms steps at 1536 requests). All three engines overlap
# the host work with the device by default in the versions the overlays' tables come from (vLLM 0.14-0.24,
# SGLang 0.5.10-0.5.14, TensorRT-LLM 1.0-1.3). Sampling kernels run on the device and are not in here.
ENGINE_STEPS = {
    "trtllm": EngineStepEvidence(host_fixed_s=2.88e-3, host_per_sequence_s=27.5e-6, overlap=True, source={
        "url": "https://github.com/NVIDIA/TensorRT-LLM/issues/13957", "kind": "estimate",
        "note": ("TensorRT-LLM PyTorch backend host work per step = 2.88 ms + 27.5 us a running sequence, the line "
                 "through two measured per-iteration host times of its PyExecutor loop: 45.11 ms at 1536 requests a "
                 "rank (https://github.com/NVIDIA/TensorRT-LLM/pull/10273: GB200, GPT-OSS-120B, attention DP 2, "
                 "max_batch_size 1536, concurrency 3072, a run its authors call host-bound: host_step_time 45.11 ms) "
                 "and 4.64 ms at 64 (this issue: Llama-3.1-8B FP8 on B200, ISL=OSL=1000, concurrency 64, "
                 "13,806 output tok/s = 64/13806 = 4.64 ms a step, with ~580 us a step of host time left exposed by "
                 "the one-step overlap loop, so host work ~ step time; vLLM 0.20.1's two-batch pipeline reaches "
                 "15,638 tok/s = 4.09 ms, the device step): (45.11 - 4.64) ms / (1536 - 64) = 27.5 us, "
                 "4.64 ms - 64 x 27.5 us = 2.88 ms. overlap: the overlap scheduler is on by default since "
                 "https://github.com/NVIDIA/TensorRT-LLM/pull/4174 (disable_overlap_scheduler turns it off; "
                 "https://nvidia.github.io/TensorRT-LLM/latest/features/overlap-scheduler.html)")}),
    "vllm": EngineStepEvidence(host_fixed_s=1.37e-3, host_per_sequence_s=16.1e-6, overlap=True, source={
        "url": "https://github.com/vllm-project/vllm/issues/56975", "kind": "estimate",
        "note": ("vLLM V1 host work per step = 1.37 ms + 16.1 us a running sequence, the line through two measured "
                 "host times between decode steps: 2.4 ms at 64 running (this issue: GLM-5.3-Flash on 4 GB200, TP 4, "
                 "concurrency 64, decode-only full-CUDA-graph steps, host time to forward return p50 2.4 ms, n = 7301) "
                 "and 5-6 ms (5.5) at 256 (https://github.com/vllm-project/vllm/issues/10634: V1 AsyncLLM, "
                 "Llama-2-7B, batch 256, ShareGPT, the gap between two decode steps): (5.5 - 2.4) ms / (256 - 64) = "
                 "16.1 us, 2.4 ms - 64 x 16.1 us = 1.37 ms; consistent with a Llama-3.2-1B TPOT of 2.73 ms at one "
                 "running request before async scheduling (https://github.com/vllm-project/vllm/pull/17866). "
                 "overlap: async scheduling (the scheduler one step ahead of the GPU) is the default since v0.14.0 "
                 "(https://github.com/vllm-project/vllm/pull/27614; --no-async-scheduling turns it off)")}),
    "sglang": EngineStepEvidence(host_fixed_s=0.74e-3, host_per_sequence_s=7.8e-6, overlap=True, source={
        "url": "https://github.com/sgl-project/sglang/pull/38131", "kind": "estimate",
        "note": ("SGLang host work per step = 740 us + 7.8 us a running sequence. Fixed part measured here: LFM2 on "
                 "an RTX 5090 at batch 1 decodes 364.3 tok/s with the synchronous loop (2.745 ms = device + host) "
                 "and 498.5 tok/s with the overlap scheduler (2.006 ms = the device step), so host = 740 us. "
                 "Per-sequence part: wuklab's profile of SGLang v0.2.13 (https://mlsys.wuklab.io/posts/"
                 "scheduling_overhead/, figure 6, bar heights read from its SVG: Llama-3-8B on an A100, 1024:1024, "
                 "300 requests at once) spends 2.70 ms a step scheduling beside 42.1 ms forward; with about 250 "
                 "running (the KV cache: 80 GB x 0.88 - 16 GB of weights ~ 54 GB at 128 KiB a token ~ 410k tokens, "
                 "about 1.5k tokens a request mid-run) that is (2.70 - 0.74) ms / 250 = 7.8 us. overlap: the "
                 "zero-overhead (overlap) scheduler is the default since v0.4 "
                 "(https://lmsys.org/blog/2024-12-04-sglang-v0-4/; --disable-overlap-schedule turns it off). "
                 "fuses_mixed false: SGLang runs a prefill batch and a decode batch as separate forward passes "
                 "unless --enable-mixed-chunk is set, which is off by default (ServerArgs.enable_mixed_chunk = False, "
                 "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py)")},
        fuses_mixed=False),
}


def engine_step_overrides(engine: str) -> tuple[dict, dict]:
    """The overlay's ``scheduling`` section (graph mode the default, and the engine's host work per step in
    it) and its ``sources`` entries. The dynamic (eager) mode keeps no engine step: its host launches every
    kernel, which that mode already prices op by op (``--mode dynamic`` prices as it did)."""
    from perfmodel.units import format_quantity

    step = ENGINE_STEPS[engine]
    graph = {"engine_step": {"host_fixed": format_quantity(step.host_fixed_s, "seconds", digits=4),
                             "host_per_sequence": format_quantity(step.host_per_sequence_s, "seconds", digits=4),
                             "overlap": step.overlap, **({} if step.fuses_mixed else {"fuses_mixed": False})},
             "field_sources": {"engine_step": "engine-step"}}
    return ({"default_mode": "graph", "modes": {"graph": graph}},
            {"engine-cuda-graphs": ENGINE_GRAPHS_SOURCE, "engine-step": step.source})


@dataclass(frozen=True, kw_only=True)
class EngineFit:
    gpu: str
    engine: str
    result: object          # calibration.fit.FitResult
    records: list
    skipped: dict[str, int]
    versions: dict[str, str]
    step_latency_s: float = 0.0  # the step latency of the engine's own all-reduce kernels the fit ran with
    package_version: str = ""    # the aiconfigurator-core version the rows come from
    k_step_s: float = 0.0        # the matrix engines' k-loop step floor the fit ran with (``chosen_k_step``)

    @property
    def name(self) -> str:
        return overlay_name(self.gpu, self.engine)


def overlay_name(gpu: str, engine: str) -> str:
    return f"{gpu}-{engine}"


def measured_engines(gpu: str, root: Path | None = None) -> tuple[str, ...]:
    """Engines with at least a GEMM table on ``gpu``."""
    return tuple(engine for engine in tables.ENGINES if tables.versions(gpu, engine, "gemm", root))


# All-reduces of at most this payload are latency alone in every engine's table (128 elements to 8 Ki
# flat within 10% on 2-8 H100s), so their median time is one step of the one-shot kernel.
SMALL_MESSAGE_BYTES = 16 * 1024


def with_measured_step_latency(hardware, records, policy: str | None = None):
    """The spec with its scale-up link's engine kernels measured: the median time of the engine's
    smallest all-reduces that its rule (``policy``, ``costs.all_reduce.POLICIES``; None: every small one)
    runs with its own one-shot kernel, as the link's ``kernel_latency`` (one step each), and the rule
    named on the link. Fixed costs come from the small shapes; the fit then finds the bandwidth
    efficiency from the large ones (and any alpha on top). The engines' kernels read peers' memory over
    NVLink, so their step (2.4-4.7 us on H100) is not NCCL's, which stays the link's ``latency`` and
    prices the sizes the engine hands to NCCL (on PCIe, every all-reduce of more than 2 GPUs: a median
    over those too made the L40S's step 13.7 us, three times its 2-GPU kernel's). Without such
    all-reduces the kernel step is left at zero, the fit's alpha then standing for the whole fixed cost."""
    from perfmodel.costs.all_reduce import ONE_SHOT, algorithms

    def one_shot(record) -> bool:
        attrs = record.graph().ops[0].attrs
        return policy is None or algorithms(policy, int(attrs["group_size"]), attrs["bytes"]) == ONE_SHOT

    small = [record.duration_s for record in records if record.op_class == "all_reduce"
             and record.graph().ops[0].attrs["bytes"] <= SMALL_MESSAGE_BYTES and one_shot(record)]
    step = statistics.median(small) if small else 0.0
    links = {name: dataclasses.replace(link, kernel_latency_s=step, all_reduce=policy)
             if link.kind == "chip_to_chip" else link for name, link in hardware.links.items()}
    return dataclasses.replace(hardware, links=links)


def memory_streams(gpu: str, spec) -> list:
    """The device's published L2 and HBM stream rows (``calibration/data/published``): the memory system
    is the engine's too, and kernel times alone cannot tell the L2's bandwidth from the tensor-core rate
    (the tiled model has big GEMMs moving about as long through L2 as they compute: fitted on GEMMs only,
    H100's bf16 efficiency came out 1.4 +- 4.7)."""
    from calibration.achievable import published_records

    return [record for record in published_records(gpu, spec).records if record.op_class.startswith("stream:")]


def _with_measured_l2(hardware, streams, seed: int):
    """The L2's bandwidth efficiency from the device's own L2 stream rows, fitted first and then held:
    fitted together with the GEMMs, the tiled model's L2 traffic (about as long as a big GEMM's compute
    at the datasheet's L2 rate) and the tensor-core rate trade places (H200 with TensorRT-LLM's tables
    left bf16 compute unidentified and the L2 at 0.93 where its streams measure 1.83). Without L2 rows
    (B200) the L2 stays at the datasheet. Returns the spec with the L2 so scaled, and the parameter to write."""
    from calibration.fit import fit

    l2_rows = [record for record in streams if record.op_class == "stream:l2"]
    if len(l2_rows) < 4:
        return hardware, {}
    result = fit(l2_rows, hardware, mode="graph", seed=seed, folds=0, extra_seeds=0)
    if "memory:l2" not in result.identified():
        return hardware, {}
    efficiency, error = result.params["memory:l2"]
    memory = tuple(dataclasses.replace(level, bandwidth_bytes_per_s=level.bandwidth_bytes_per_s * efficiency)
                   if level.name == "l2" else level for level in hardware.memory)
    return dataclasses.replace(hardware, memory=memory), {"memory:l2": (efficiency, error)}


def with_held_parameters(result, held: dict[str, tuple[float, float]]):
    """``result`` with parameters fitted beforehand and held during its fit (the L2 from its own stream
    rows) added: their relative variance (relative standard error squared; to first order also the log
    variance) joins the covariances, uncorrelated with the rest (held fixed while the rest was fitted)."""
    import numpy as np

    if not held:
        return result
    names = tuple(result.covariance_names) + tuple(held)
    size = len(result.covariance_names)

    def extended(matrix):
        if matrix is None:
            return None
        out = np.zeros((len(names), len(names)))
        out[:size, :size] = matrix
        for offset, (value, error) in enumerate(held.values()):
            out[size + offset, size + offset] = (error / value) ** 2
        return out

    return dataclasses.replace(result, params={**result.params, **held}, log_covariance=extended(result.log_covariance),
                               posterior_relative_covariance=extended(result.posterior_relative_covariance),
                               covariance_names=names)


#: The engines whose prefill attention kernels pack a KV head's query heads into one block's rows
#: (``hardware.model.ComputeEngine.attention_packs_query_groups``), by GPU architecture: vLLM and SGLang run
#: FlashAttention-3's variable-length kernel for prefill on Hopper, which always packs them. TensorRT-LLM's context
#: kernels, FlashAttention-2 (Ampere) and the Blackwell kernels the tables time give each query head its own blocks
#: (their times grow with the query heads at batch 64 and 16 tokens a prompt; FA3's do not).
PACKED_PREFILL_ENGINES = {("vllm", "sm90"), ("sglang", "sm90")}
PACKED_PREFILL_SOURCE = {
    "url": "https://github.com/Dao-AILab/flash-attention/blob/main/hopper/heuristics.h", "kind": "vendor-code",
    "note": ("attention_packs_query_groups: FlashAttention-3's should_pack_gqa returns true for variable-length "
             "batches (PackGQA: the query heads of a KV head share a thread block's rows); vLLM "
             "(vllm/v1/attention/backends/flash_attn.py) and SGLang (python/sglang/srt/layers/attention/"
             "flashattention_backend.py) prefill through flash_attn_varlen_func on Hopper. NVIDIA's context-attention "
             "tables agree: at batch 64, one KV head and one token a prompt, 1 to 96 query heads take 12-13 us on "
             "H100 in both engines")}


def packs_query_groups(gpu: str, engine: str) -> bool:
    """Whether ``engine``'s prefill attention kernels on ``gpu`` pack query groups (``PACKED_PREFILL_ENGINES``)."""
    return (engine, tables.GPU_ARCHITECTURES.get(gpu, "")) in PACKED_PREFILL_ENGINES


def with_query_packing(hardware, packed: bool):
    """The spec with its matrix engines' prefill attention packing query groups or not."""
    compute = {name: dataclasses.replace(engine, attention_packs_query_groups=packed) if engine.kind == "matrix"
               else engine for name, engine in hardware.compute.items()}
    return dataclasses.replace(hardware, compute=compute)


#: The k-loop step floors (``hardware.model.ComputeEngine.k_step_s``) a fit chooses among: the one whose fit
#: of the training half costs least, up to the engine's own tile step (``k_step_ceiling_s``). On H100 a single
#: output tile's time grows ~75 ns per 64 of k in every engine's bf16 table (``costs.rules.k_step_flops``); zero:
#: no floor. The grid goes past 100 ns because the A100's three engines chose that, its former top, and given more
#: choose 400-700 ns: a 16-row tile's step then takes about as long as a 128-row one's, as the A100's tables show
#: (products of n = k = 4096 take 24-27.5 us for every m from 1 to 64, and 34-37 us from 80 to 160).
K_STEP_CANDIDATES_S = (0.0, 25e-9, 50e-9, 75e-9, 100e-9, 150e-9, 200e-9, 300e-9, 400e-9, 500e-9, 700e-9, 1000e-9)


def k_step_ceiling_s(hardware) -> float:
    """The longest k-loop step floor a fit may choose: the time the engine's native tile (``ComputeEngine.tile``)
    takes for one step of its k at a unit's share of the bf16 peak (the A100's 128 x 128 x 64: 726 ns; H100's 280
    ns). A longer floor would slow the native tile's own step, a lower compute rate in disguise (which the fitted
    efficiency prices), not the operand loads of a small tile it stands for: given 1 us, the A100's TensorRT-LLM
    and vLLM fits took it. Unbounded where no matrix engine declares a tile and kernels."""
    ceilings = [2.0 * engine.tile.m * engine.tile.n * engine.tile.k * engine.units / engine.peak_flops_per_s["bf16"]
                for engine in hardware.compute.values()
                if engine.kind == "matrix" and engine.kernels and engine.tile is not None
                and "bf16" in engine.peak_flops_per_s]
    return min(ceilings) if ceilings else float("inf")


def with_k_step(hardware, step_s: float):
    """The spec with its matrix engines' k-loop step floor at ``step_s`` (engines that declare kernels)."""
    compute = {name: dataclasses.replace(engine, k_step_s=step_s) if engine.kind == "matrix" and engine.kernels
               else engine for name, engine in hardware.compute.items()}
    return dataclasses.replace(hardware, compute=compute)


def chosen_k_step(records, hardware, seed: int, candidates=K_STEP_CANDIDATES_S) -> float:
    """The k-loop step floor (``K_STEP_CANDIDATES_S``) under which the fit of the training half of the
    held-out split (``calibration.fit.split_half`` with ``seed``) costs least: the floor changes which
    kernel prices a product (a split or not), so each candidate re-prices the records. Chosen on that half
    only, so the held-out half of the same split stays unseen."""
    import numpy as np

    from calibration.fit import _solve, components, split_half, spread_weights

    if not any(engine.kind == "matrix" and engine.kernels for engine in hardware.compute.values()):
        return 0.0
    if len(candidates) == 1:  # nothing to choose (a refit of a shipped overlay with its own floor)
        return candidates[0]
    ceiling = k_step_ceiling_s(hardware)
    candidates = tuple(step for step in candidates if step <= ceiling) or (0.0,)
    measured = np.asarray([record.duration_s for record in records])
    train, _ = split_half(tuple(record.op_class for record in records), seed)
    weights = spread_weights(records)
    costs: dict[float, float] = {}
    for step in candidates:
        parts = components(records, with_k_step(hardware, step), "graph", DATASHEET_LEVELS + ("l2",))
        costs[step] = float(_solve(parts, measured, train, weights[train])[0].cost)
    return min(costs, key=lambda step: costs[step])


def fit_engine(gpu: str, engine: str, *, seed: int = 0, heldout: bool = True,
               versions_by_kind: dict[str, str] | None = None, root: Path | None = None,
               rows: Path | None = None, nccl: bool = False,
               k_step_candidates: tuple[float, ...] = K_STEP_CANDIDATES_S) -> EngineFit:
    """Fit ``gpu``'s parameters to ``engine``'s tables (a fixed sample); ``heldout=False`` skips the extra
    held-out splits (the one random-half split per class is always reported). ``rows``: a folder of the
    rows that sample chose, committed (``aiconfigurator.write_fit_rows``), read instead of the package.
    ``nccl``: NCCL's own all-reduce rows join (``aiconfigurator.nccl_records``, read from the package); off
    for the shipped overlays (``aiconfigurator.LIBRARY_TABLES`` says why). ``k_step_candidates``: the k-loop step
    floors the training half chooses among (``chosen_k_step``; most of a fit's time: one solve each)."""
    from calibration.fit import fit
    from perfmodel.hardware.loader import load_hardware

    if rows is not None:
        records, skipped, read = tables.sample_records(rows, gpu, engine)
    else:
        records, skipped, read = tables.engine_records(gpu, engine, seed=seed, versions_by_kind=versions_by_kind,
                                                       root=root)
    if nccl:
        records += tables.nccl_records(gpu, engine, seed=seed, root=root, skipped=skipped)
    spec = load_hardware(gpu)
    streams = memory_streams(gpu, spec)
    records += streams
    stepped = with_measured_step_latency(with_query_packing(device_time_hardware(spec), packs_query_groups(gpu, engine)),
                                         records, tables.all_reduce_policy(gpu, engine))
    hardware, on_die = _with_measured_l2(stepped, streams, seed)
    k_step = chosen_k_step(records, hardware, seed, k_step_candidates)
    hardware = with_k_step(hardware, k_step)
    result = fit(records, hardware, mode="graph", seed=seed, datasheet_levels=DATASHEET_LEVELS + ("l2",),
                 posterior_draws=True,
                 **({} if heldout else {"folds": 0, "extra_seeds": 0}))
    result = with_held_parameters(result, on_die)
    step = max((link.kernel_latency_s or 0.0 for link in stepped.links.values() if link.kind == "chip_to_chip"),
               default=0.0)
    package = tables.rows_package_version(rows, gpu, engine) if rows is not None else tables.package_version()
    return EngineFit(gpu=gpu, engine=engine, result=result, records=records, skipped=skipped, versions=read,
                     step_latency_s=step, package_version=package, k_step_s=k_step)


def overlay_text(fitted: EngineFit) -> str:
    from calibration.report import fitted_spec_yaml
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.units import format_quantity

    spec = load_hardware(fitted.gpu)
    result = fitted.result
    read = ", ".join(f"{kind} {version}" for kind, version in fitted.versions.items())
    by_class = ", ".join(f"{name} {100 * error:.1f}%" for name, error in result.heldout_by_class.items())
    note = (f"fitted by perfmodel (calibration.engine_overlays) on {len(fitted.records)} per-op latencies that NVIDIA "
            f"measured inside {fitted.engine} ({read}) on {fitted.gpu}: {tables.PACKAGE} {fitted.package_version}, "
            f"license {tables.LICENSE}; a fixed random sample (seed 0) of each table; held-out median |error| "
            f"{100 * (result.heldout_median_abs_error or 0):.1f}% ({by_class})"
            + (f"; left at the datasheet: {', '.join(result.unidentified + result.at_bounds)}"
               if result.unidentified or result.at_bounds else "")
            + f"; {', '.join(f'memory:{level}' for level in DATASHEET_LEVELS)} held at the datasheet "
              "(calibration.engine_overlays.DATASHEET_LEVELS)")
    provenance = {"url": tables.SOURCE_URL, "kind": "measured", "note": note}
    description = f"{spec.description} ({fitted.engine} kernels: {len(fitted.records)} measurements)"
    output = Path(f"{fitted.name}.yaml")
    links, params = {}, dict(result.params)
    for name, link in spec.links.items():
        if link.kind == "chip_to_chip":
            # The engine's all-reduce rule and its kernels' step latency the fit ran with (measured on the
            # smallest all-reduces); the link's latency stays NCCL's; the fitted alphas, if any, stay
            # per-collective latencies (per implementation: ``nvlink/nccl``) in the efficiency block.
            step = fitted.step_latency_s
            links[name] = {"all_reduce": tables.all_reduce_policy(fitted.gpu, fitted.engine),
                           "field_sources": {"all_reduce": "engine-all-reduce"}}
            if step > 0:  # none where the engine runs no kernel of its own (TensorRT-LLM on PCIe: NCCL only)
                links[name]["kernel_latency"] = format_quantity(step, "seconds", digits=4)
                links[name]["field_sources"]["kernel_latency"] = "calibration"
    result = dataclasses.replace(result, params=params)
    # The k-loop step floor the fit ran with (chosen by the training half's cost), on the matrix engines.
    compute = {name: {"k_step_time": format_quantity(fitted.k_step_s, "seconds", digits=4),
                      "field_sources": {"k_step_time": "calibration"}}
               for name, engine in spec.compute.items() if engine.kind == "matrix" and engine.kernels} \
        if fitted.k_step_s > 0 else {}
    packed = packs_query_groups(fitted.gpu, fitted.engine)
    if packed:  # the engine's prefill kernels pack query groups (the fit ran with it); its source is the
        # overlay's ``engine-attention-packing`` entry (field_sources name numeric fields only)
        for name, engine in spec.compute.items():
            if engine.kind == "matrix":
                compute.setdefault(name, {})["attention_packs_query_groups"] = True
    scheduling, sources = engine_step_overrides(fitted.engine)
    return fitted_spec_yaml(result, spec, fitted.gpu, Path(tables.SOURCE_URL), output, fitted.records,
                            name=fitted.name, kind="achievable", provenance=provenance, description=description,
                            overrides={"links": links, "scheduling": scheduling, **({"compute": compute} if compute else {}),
                                       "sources": {**sources, "engine-all-reduce": engine_all_reduce_source(fitted),
                                                   **({"engine-attention-packing": PACKED_PREFILL_SOURCE}
                                                      if packed else {})}})


def engine_all_reduce_source(fitted: EngineFit) -> dict[str, str]:
    """The source of the engine's all-reduce rule the overlay names (``costs.all_reduce.POLICIES``)."""
    from perfmodel.costs.all_reduce import policy

    chosen = policy(tables.all_reduce_policy(fitted.gpu, fitted.engine))
    url, _, where = chosen.source.partition(" ")
    return {"url": url, "kind": "vendor-code",
            "note": f"all_reduce {chosen.name}: the algorithm {fitted.engine} runs by message size and GPU count "
                    f"(perfmodel.costs.all_reduce) {where}".strip()}


def write_overlay(fitted: EngineFit, directory: Path) -> Path:
    from perfmodel.hardware.loader import load_hardware
    from perfmodel.yaml_source import write_text_atomically

    output = directory / f"{fitted.name}.yaml"
    write_text_atomically(output, overlay_text(fitted))
    load_hardware(output)  # the overlay must load like any spec
    return output


def main(argv=None) -> int:
    """``python -m calibration.engine_overlays [--write DIR] [--gpu GPU ...] [--engine ENGINE ...]``."""
    import argparse

    from calibration.report import text_report
    from perfmodel.hardware.loader import load_hardware

    parser = argparse.ArgumentParser(prog="python -m calibration.engine_overlays", description=main.__doc__)
    parser.add_argument("--gpu", nargs="*", default=list(tables.GPU_FOLDERS), choices=list(tables.GPU_FOLDERS))
    parser.add_argument("--engine", nargs="*", default=list(tables.ENGINES), choices=list(tables.ENGINES))
    parser.add_argument("--write", type=Path, help="directory for the <gpu>-<engine>.yaml overlays")
    parser.add_argument("--reports", type=Path, help="directory for the fit reports (<gpu>-<engine>.txt)")
    args = parser.parse_args(argv)
    from perfmodel.yaml_source import write_text_atomically

    for gpu in args.gpu:
        for engine in measured_engines(gpu):
            if engine not in args.engine:
                continue
            fitted = fit_engine(gpu, engine, heldout=False)
            report = text_report(fitted.result, fitted.records, device_time_hardware(load_hardware(gpu)))
            if fitted.skipped:
                report += "\nskipped rows: " + ", ".join(f"{count} x {reason}" for reason, count in fitted.skipped.items())
            if args.write:
                print(f"wrote {write_overlay(fitted, args.write)}")
            if args.reports:
                write_text_atomically(args.reports / f"{fitted.name}.txt", report + "\n")
            print(report.split("\n\nmeasurement")[0])
    if args.write:
        from perfmodel.hardware import compiled

        if args.write.resolve().is_relative_to(compiled.shipped_directory().resolve()):
            print(f"wrote {compiled.write_catalog()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
