"""How a serving engine runs an all-reduce: its algorithm by message size and GPU count (pure core).

An engine does not run one all-reduce. It picks, by payload and group size, between its own kernels
that read or write peers' memory over the scale-up link (one-shot: every chip reads all ``p - 1``
peers' whole buffers, one step; two-shot: a reduce-scatter and an all-gather, ``2 (p - 1) / p``
payloads, two steps), a multicast all-reduce on an NVSwitch that reduces in the switch (PyTorch's
symmetric-memory ``multimem`` kernels), and NCCL (a ring: ``2 (p - 1) / p`` payloads in ``2 (p - 1)``
steps). Each choice is a rule in the engine's source, listed in :data:`POLICIES` with that source; a
link names its engine's rule in the spec (``links.<name>.all_reduce``, written by the per-engine
overlays). A link without one keeps the default, :data:`FASTEST`: the faster of one- and two-shot on a
switch (judged at the datasheet), a ring elsewhere.

Implementations differ in more than bytes and steps: TensorRT-LLM's two-shot kernel reaches about 225
GB/s on 8 H100s where NCCL's ring or vLLM's multicast reach more, so each implementation is its own
kernel class of the link (``nvlink`` for the engine's kernels, ``nvlink/nccl``, ``nvlink/multimem``),
with its own fitted bandwidth efficiency and per-collective latency (alpha); a class without its own
falls back to the link's (``Parameters.link``). The engine's kernels step at the link's
``kernel_latency`` (measured on the smallest all-reduces); NCCL's ring steps at the link's ``latency``
(NCCL's own per-step figure from its tuning model, the datasheet spec's source).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import ALL_REDUCE_POLICY_NAMES

KiB = 1024
MiB = 1024 * KiB
BF16_BYTES = 2  # the engines' tables and the thresholds below count bf16 elements

#: Algorithms: payload multiples each chip moves per direction, and latency-bound steps, for group size p.
ONE_SHOT, TWO_SHOT, MULTIMEM, RING, NVLS = "one_shot", "two_shot", "multimem", "ring", "nvls"
TRAFFIC: dict[str, Callable[[int], float]] = {
    ONE_SHOT: lambda p: float(p - 1),
    TWO_SHOT: lambda p: 2 * (p - 1) / p,
    # multimem.ld_reduce: the switch reads each chip's whole buffer (1/p to each chip's reduced share)
    # and returns the share; multimem.st then sends the share to every chip: out D + D/p, in D/p + D.
    MULTIMEM: lambda p: 1 + 1 / p,
    RING: lambda p: 2 * (p - 1) / p,
    NVLS: lambda p: 1 + 1 / p,  # NCCL's NVLink SHARP all-reduce: the same multicast reduce and store
}
STEPS: dict[str, Callable[[int], float]] = {
    ONE_SHOT: lambda p: 1.0, TWO_SHOT: lambda p: 2.0, MULTIMEM: lambda p: 2.0, RING: lambda p: 2.0 * (p - 1),
    NVLS: lambda p: 2.0,
}
#: The implementation each algorithm belongs to: its kernel class of the link (None: the engine's one-shot
#: kernel, priced with the link's own parameters). Two-shot is a class of its own: TensorRT-LLM's costs
#: about 20 us more than its one-shot at any size (its 8-B200 rows: 39 us at 4 MiB, +16 us per 4 MiB).
IMPLEMENTATION: dict[str, str | None] = {ONE_SHOT: None, TWO_SHOT: "two_shot", MULTIMEM: "multimem",
                                         RING: "nccl", NVLS: "nccl"}
#: Algorithms that step at the engine kernels' latency (the rest at the link's, NCCL's).
KERNEL_STEPPED = frozenset({ONE_SHOT, TWO_SHOT, MULTIMEM})

Choice = Callable[[int, float], str]  # (group size, payload bytes) -> algorithm


@dataclass(frozen=True, kw_only=True)
class Policy:
    """An engine's all-reduce choice on one kind of scale-up link: ``choose(group, payload_bytes)``."""

    name: str
    choose: Choice
    source: str  # where the rule is written (file, version)
    # NCCL can reduce in the switch here (NVLink SHARP: an NVSwitch with multicast, Hopper and later).
    # NCCL turns NVLS off for 2 GPUs (src/transport/nvls.cc ncclNvlsInit: ``gpuCount <= 2``), so there
    # its all-reduce is a ring; on more it runs NVLS, whose bandwidth NCCL's tuner prefers at the sizes
    # the engines hand it (on 8 H100s the ring's 2(p-1)/p payloads would need 99% of NVLink's 450 GB/s
    # to give the table's 2.1 ms for 512 Mi elements; NVLS's 1 + 1/p need 64%, as on 4, 65%).
    multicast: bool = False


def _by_ceiling(table: Mapping[int, tuple[tuple[float, str], ...]], beyond: str = RING) -> Choice:
    """A choice from ceilings: per group size, (largest payload in bf16 elements, algorithm), ascending;
    larger payloads and group sizes not listed take ``beyond``."""
    def choose(group: int, payload: float) -> str:
        for ceiling, algorithm in table.get(group, ()):
            if payload <= ceiling * BF16_BYTES:
                return algorithm
        return beyond
    return choose


# TensorRT-LLM (1.3, PyTorch backend, AllReduceStrategy.AUTO with the autotuner off, as NVIDIA's
# collector runs it): cpp/tensorrt_llm/thop/allreduceOp.cpp ``selectImplementation`` falls back to NCCL
# above the fusion workspace (64 MiB, customAllReduceUtils.h ``getMaxRequiredWorkspaceSize``) or without
# NVLink and P2P, else reads ``AllReduceBestStrategyTableSM90`` / ``SM100`` (pre-Blackwell GPUs use the
# SM90 table) at (tp, fusion NONE, hidden, tokens). The ceilings below are its hidden-4096 rows (the
# tables' tokens x 4096 elements; NVIDIA's collector shapes every message above 4096 elements so):
# SM90 tp8 one-shot up to 64 tokens, NCCL at 128, two-shot at 256-512, NCCL from 1024 (the 1.8x slower
# band of the 8-H100 table is these NCCL and two-shot rows); out of the table (16384 tokens) NCCL.
TRTLLM_WORKSPACE_BYTES = 64 * MiB
_TOKENS = 4096  # elements per token row of the tables' hidden-4096 column
TRTLLM_SM90 = {2: ((2048 * _TOKENS, ONE_SHOT),),
               4: ((128 * _TOKENS, ONE_SHOT), (1024 * _TOKENS, TWO_SHOT)),
               8: ((64 * _TOKENS, ONE_SHOT), (128 * _TOKENS, RING), (512 * _TOKENS, TWO_SHOT))}
TRTLLM_SM100 = {2: ((2048 * _TOKENS, ONE_SHOT),),
                4: ((512 * _TOKENS, ONE_SHOT), (2048 * _TOKENS, TWO_SHOT)),
                8: ((256 * _TOKENS, ONE_SHOT), (4096 * _TOKENS, TWO_SHOT))}
TRTLLM_SOURCE = ("https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/tensorrt_llm/common/customAllReduceUtils.h "
                 "(AllReduceBestStrategyTableSM90/SM100, fusion NONE) and cpp/tensorrt_llm/thop/allreduceOp.cpp "
                 "(selectImplementation, ifFallbackToNCCL)")


def _trtllm(table: Mapping[int, tuple[tuple[float, str], ...]]) -> Choice:
    within = _by_ceiling(table)

    def choose(group: int, payload: float) -> str:
        return RING if payload > TRTLLM_WORKSPACE_BYTES else within(group, payload)
    return choose


# vLLM (0.24): vllm/distributed/device_communicators/cuda_communicator.py tries its custom all-reduce,
# then PyTorch symmetric memory, then NCCL (pynccl). The custom kernel takes payloads under ``max_size``
# (custom_all_reduce.py: 8 MiB, capped per capability and world size by all_reduce_utils.py
# CUSTOM_ALL_REDUCE_MAX_SIZES when symmetric memory is on, its default), one stage on 2 GPUs, under 512
# KiB on 4 or 256 KiB on 8 (csrc/custom_all_reduce.cuh), else two; symmetric memory (symm_mem.py, a
# multimem all-reduce on the NVSwitch) takes payloads under SYMM_MEM_ALL_REDUCE_MAX_SIZES. Without
# NVLink it runs its kernel on 2 GPUs (P2P over PCIe) and NCCL on more ("not supported on more than two
# PCIe-only GPUs").
VLLM_DEFAULT_MAX_BYTES = 8 * MiB
VLLM_CUSTOM_MAX_BYTES = {"sm90": {2: 64 * MiB, 4: 32 * MiB, 8: MiB // 4},
                         "sm100": {2: 2 * MiB, 4: 2 * MiB, 8: 1 * MiB},
                         "sm103": {2: 4 * MiB, 4: 4 * MiB, 8: 4 * MiB}}
VLLM_SYMM_MEM_MAX_BYTES = {"sm90": {2: 64 * MiB, 4: 32 * MiB, 8: 64 * MiB},
                           "sm100": {2: 8 * MiB, 4: 32 * MiB, 8: 128 * MiB},
                           "sm103": {2: 4 * MiB, 4: 32 * MiB, 8: 64 * MiB}}
VLLM_SOURCE = ("https://github.com/vllm-project/vllm/blob/main/vllm/distributed/device_communicators/"
               "all_reduce_utils.py (CUSTOM_ALL_REDUCE_MAX_SIZES, SYMM_MEM_ALL_REDUCE_MAX_SIZES), "
               "custom_all_reduce.py (should_custom_ar), cuda_communicator.py (all_reduce), "
               "csrc/custom_all_reduce.cuh (one or two stages)")


def _custom_stages(group: int, payload: float) -> str:
    """vLLM's (and SGLang's, derived from it) kernel: one stage on 2 GPUs, under 512 KiB on 4 or
    256 KiB on 8; two stages otherwise."""
    if group == 2 or (group <= 4 and payload < 512 * KiB) or (group <= 8 and payload < 256 * KiB):
        return ONE_SHOT
    return TWO_SHOT


def _vllm(arch: str | None) -> Choice:
    def choose(group: int, payload: float) -> str:
        custom = min(VLLM_CUSTOM_MAX_BYTES.get(arch or "", {}).get(group, VLLM_DEFAULT_MAX_BYTES),
                     VLLM_DEFAULT_MAX_BYTES)
        if payload < custom:
            return _custom_stages(group, payload)
        if payload < VLLM_SYMM_MEM_MAX_BYTES.get(arch or "", {}).get(group, 0):
            return MULTIMEM
        return RING
    return choose


# SGLang (0.5.14) as NVIDIA's collector runs it (custom all-reduce on, symmetric memory and MSCCL++
# off): python/sglang/srt/distributed/device_communicators/custom_all_reduce.py, _MAX_CAR_SIZE 8 MiB,
# vLLM's stage rule (sgl-kernel's copy of custom_all_reduce.cuh), NCCL above and on more than two
# PCIe-only GPUs.
SGLANG_MAX_BYTES = 8 * MiB
SGLANG_SOURCE = ("https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/distributed/device_communicators/"
                 "custom_all_reduce.py (_MAX_CAR_SIZE, should_custom_ar)")


def _sglang(group: int, payload: float) -> str:
    return _custom_stages(group, payload) if payload < SGLANG_MAX_BYTES else RING


def _pcie(custom: Choice) -> Choice:
    """vLLM's and SGLang's rule without NVLink: their kernel (P2P over PCIe) on 2 GPUs, NCCL on more."""
    def choose(group: int, payload: float) -> str:
        return custom(group, payload) if group == 2 else RING
    return choose


# A Grace-Blackwell NVL72 rack joins 18 compute trays of 4 GPUs over one NVLink fabric
# (https://www.nvidia.com/en-us/data-center/gb300-nvl72/: 72 GPUs, 36 Grace CPUs; likewise GB200 NVL72).
# vLLM's custom all-reduce needs every rank on one node and is disabled otherwise ("Custom allreduce is
# disabled because this process group spans across nodes": custom_all_reduce.py, in_the_same_node_as; its
# symmetric-memory path likewise), and SGLang's copy of that file does the same: a group larger than a tray
# runs NCCL. NVIDIA's GB300 tables show the change at that size: SGLang's graph-timed 1 KiB all-reduce takes
# 3.6-3.8 us on 2 and 4 GPUs, 28 us on 8 and 49 us on 16.
NVL72_TRAY_GPUS = 4


def _within_tray(custom: Choice) -> Choice:
    def choose(group: int, payload: float) -> str:
        return custom(group, payload) if group <= NVL72_TRAY_GPUS else RING
    return choose


def _fastest(group: int, payload: float) -> str:  # a stand-in; the cost rule judges the default itself
    raise PerfmodelError("the default all-reduce is judged by bandwidth, not by a table")


FASTEST = "fastest"
_POLICIES = (
    Policy(name=FASTEST, choose=_fastest, source="perfmodel: the faster of one- and two-shot on a switch, else a ring"),
    Policy(name="trtllm-sm80", choose=_trtllm(TRTLLM_SM90), source=TRTLLM_SOURCE),
    Policy(name="trtllm-sm90", choose=_trtllm(TRTLLM_SM90), source=TRTLLM_SOURCE, multicast=True),
    Policy(name="trtllm-sm100", choose=_trtllm(TRTLLM_SM100), source=TRTLLM_SOURCE, multicast=True),
    # Without NVLink TensorRT-LLM falls back to NCCL at every size (ifFallbackToNCCL: !mIsNVLINKSupported).
    Policy(name="trtllm-pcie", choose=lambda group, payload: RING, source=TRTLLM_SOURCE),
    Policy(name="vllm-sm80", choose=_vllm(None), source=VLLM_SOURCE),
    Policy(name="vllm-sm90", choose=_vllm("sm90"), source=VLLM_SOURCE, multicast=True),
    Policy(name="vllm-sm100", choose=_vllm("sm100"), source=VLLM_SOURCE, multicast=True),
    Policy(name="vllm-sm103", choose=_vllm("sm103"), source=VLLM_SOURCE, multicast=True),
    Policy(name="vllm-pcie", choose=_pcie(_vllm(None)), source=VLLM_SOURCE),
    Policy(name="sglang-sm80", choose=_sglang, source=SGLANG_SOURCE),
    Policy(name="sglang-nvlink", choose=_sglang, source=SGLANG_SOURCE, multicast=True),
    Policy(name="sglang-pcie", choose=_pcie(_sglang), source=SGLANG_SOURCE),
    Policy(name="vllm-sm100-nvl72", choose=_within_tray(_vllm("sm100")), source=VLLM_SOURCE, multicast=True),
    Policy(name="vllm-sm103-nvl72", choose=_within_tray(_vllm("sm103")), source=VLLM_SOURCE, multicast=True),
    Policy(name="sglang-nvl72", choose=_within_tray(_sglang), source=SGLANG_SOURCE, multicast=True),
)
POLICIES: dict[str, Policy] = {}
for _policy in _POLICIES:
    if _policy.name in POLICIES:
        raise PerfmodelError(f"all-reduce policy {_policy.name!r} is registered twice")
    POLICIES[_policy.name] = _policy
if tuple(POLICIES) != ALL_REDUCE_POLICY_NAMES:
    raise PerfmodelError(f"all-reduce policies {tuple(POLICIES)} differ from the names specs may use "
                         f"(hardware.model.ALL_REDUCE_POLICY_NAMES: {ALL_REDUCE_POLICY_NAMES}); keep them one list")


def policy(name: str | None) -> Policy:
    """The registered policy ``name`` (None: the default), or a clear error listing the known ones."""
    chosen = POLICIES.get(name or FASTEST)
    if chosen is None:
        raise PerfmodelError(f"unknown all-reduce policy {name!r}; known: {', '.join(POLICIES)}")
    return chosen


#: An all-reduce op's ``library`` attribute: the collective library called directly, whatever the engine's
#: rule would pick (NCCL's own tables time ``ncclAllReduce`` at every size; calibration fits the engine's
#: NCCL class on them too).
NCCL_LIBRARY = "nccl"
LIBRARIES = (NCCL_LIBRARY,)


def algorithms(name: str | None, group: int, payload, library: str | None = None) -> np.ndarray | str:
    """The algorithm ``name``'s engine runs for each payload (bytes; a number or an array over sweep
    points): a name, or an array of names. NCCL's is NVLS where the policy's fabric multicasts and the
    group has more than 2 GPUs, else a ring. ``library`` ``"nccl"``: NCCL's at every payload (an op that
    calls NCCL itself, not through the engine's rule)."""
    chosen = policy(name)
    if library not in (None, *LIBRARIES):
        raise PerfmodelError(f"unknown all-reduce library {library!r}; known: {', '.join(LIBRARIES)}")

    def choose(value) -> str:
        algorithm = RING if library == NCCL_LIBRARY else chosen.choose(group, value)
        return NVLS if algorithm == RING and chosen.multicast and group > 2 else algorithm

    if np.ndim(payload) == 0:
        return choose(payload.item() if isinstance(payload, np.ndarray) else payload)
    flat = np.asarray(payload, dtype=object).ravel()
    return np.asarray([choose(value) for value in flat], dtype=object).reshape(np.shape(payload)).astype(str)
