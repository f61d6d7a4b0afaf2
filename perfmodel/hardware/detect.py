"""Write a spec for the local CPU from what the operating system reports (edge module).

Core count, model name, clock, ISA features (AVX2, AVX-512, AVX512_BF16, AMX) and cache sizes are
read from ``/proc/cpuinfo`` and ``/sys/devices/system/cpu``; peaks and bandwidths cannot be read
from the OS, so they are estimates whose derivation is written into the spec's sources. Fit them
with ``perfmodel calibrate`` against ``perfmodel bench`` measurements.

The DRAM bandwidth is the one estimate a caller may replace with a measurement made on this machine
(:class:`MeasuredBandwidth`: the labs' STREAM-triad probe, ``calibration.timing.dram_triad``); the spec
then records it as a ``measured`` source. ``perfmodel specs detect`` itself stays OS-only: it times nothing.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from perfmodel.units import FLOPS_PER_FMA

# FLOP per cycle per core for fp32 by widest FMA datapath: 2 FMA pipes x lanes x 2 FLOP per FMA.
FMA_PIPES = 2
FP32_LANES_AVX512_NATIVE = 16
FP32_LANES_256_BIT = 8
FP32_LANES_128_BIT = 4
# Cache bandwidths per core per cycle assumed for the estimate (typical of recent x86 cores).
L1_BYTES_PER_CYCLE = 64
OUTER_CACHE_BYTES_PER_CYCLE = 32
# No OS interface reports DRAM bandwidth; without a measurement a per-core sustainable share is assumed.
DRAM_BYTES_PER_S_PER_CORE = 12e9
DRAM_MEASUREMENT_SOURCE = "dram-measurement"  # the sources key of a measured DRAM bandwidth
DETECT_URL = "file:///proc/cpuinfo"
WATTS_PER_CORE = 5.0


@dataclass(frozen=True, kw_only=True)
class CpuFacts:
    model_name: str
    vendor: str
    cores: int
    clock_hz: float
    flags: frozenset[str]
    caches: tuple[tuple[int, str, int, int], ...]  # (level, type, bytes per instance, instances)
    memory_bytes: float


@dataclass(frozen=True, kw_only=True)
class MeasuredBandwidth:
    """A DRAM bandwidth measured on this machine, and where and how (the spec's ``measured`` source)."""

    bytes_per_s: float
    url: str   # repo:PATH of the code that measured it
    note: str  # what was measured, when, over how many blocks, with what IQR


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _size_bytes(text: str) -> int:
    match = re.match(r"^\s*(\d+)\s*([KMG]?)", text)
    if not match:
        return 0
    return int(match.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2)]


def read_cpu_facts(root: Path = Path("/")) -> CpuFacts:
    """Read the local CPU's facts; ``root`` lets tests point at a fake /proc and /sys tree."""
    cpuinfo = _read(root / "proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    cores = len(os.sched_getaffinity(0)) if root == Path("/") and hasattr(os, "sched_getaffinity") else 0
    cores = cores or cpuinfo.count("processor\t:") or os.cpu_count() or 1
    mhz = float(fields.get("cpu MHz", "0") or 0)
    caches = []
    seen = set()
    cache_root = root / "sys/devices/system/cpu/cpu0/cache"
    for index in sorted(cache_root.glob("index*")):
        level = int(_read(index / "level").strip() or 0)
        kind = _read(index / "type").strip()
        size = _size_bytes(_read(index / "size"))
        shared = _read(index / "shared_cpu_list").strip()
        sharing = sum(len(range(int(a), int(b or a) + 1)) for a, _, b in
                      (part.partition("-") for part in shared.split(",") if part)) or 1
        if kind == "Instruction" or not size or (level, kind) in seen:
            continue
        seen.add((level, kind))
        caches.append((level, kind, size, max(1, cores // sharing)))
    meminfo = _read(root / "proc/meminfo")
    match = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
    memory_bytes = int(match.group(1)) * 1024 if match else 0
    return CpuFacts(model_name=fields.get("model name", platform.processor() or "unknown CPU"),
                    vendor=fields.get("vendor_id", "unknown"), cores=cores, clock_hz=mhz * 1e6,
                    flags=frozenset(fields.get("flags", "").split()), caches=tuple(caches),
                    memory_bytes=memory_bytes)


def last_level_cache_bytes(facts: CpuFacts) -> int:
    """The largest cache level's total capacity over its instances (0 when the OS reports no caches)."""
    return max((size * instances for _level, _kind, size, instances in facts.caches), default=0)


def fp32_flops_per_cycle(facts: CpuFacts) -> int:
    """Per core: AMD Zen 4 executes AVX-512 on 256-bit pipes, so only Intel gets 16 native lanes."""
    if "avx512f" in facts.flags and facts.vendor == "GenuineIntel":
        lanes = FP32_LANES_AVX512_NATIVE
    elif "avx2" in facts.flags or "avx512f" in facts.flags:
        lanes = FP32_LANES_256_BIT
    else:
        lanes = FP32_LANES_128_BIT
    return FMA_PIPES * lanes * FLOPS_PER_FMA


def _quantity(value: float, unit: str) -> str:
    return f"{value:.4g} {unit}"


def detected_spec(facts: CpuFacts, name: str = "local-cpu", dram: MeasuredBandwidth | None = None) -> dict:
    """A spec mapping (ready to dump as YAML) for the CPU described by ``facts``; its DRAM bandwidth is
    ``dram``'s measurement when one is given, else the assumed per-core share."""
    clock = facts.clock_hz or 2.0e9
    per_cycle = fp32_flops_per_cycle(facts)
    fp32 = facts.cores * clock * per_cycle
    peak = {"fp64": _quantity(fp32 / 2 / 1e9, "GFLOP/s"), "fp32": _quantity(fp32 / 1e9, "GFLOP/s")}
    bf16_factor = 2 if ("avx512_bf16" in facts.flags or "amx_bf16" in facts.flags) else 1
    peak["bf16"] = _quantity(fp32 * bf16_factor / 1e9, "GFLOP/s")
    isa = sorted(flag for flag in facts.flags if flag.startswith(("avx", "amx", "fma", "sse4")))
    sources = {
        "detected": {"url": DETECT_URL, "kind": "detected",
                     "note": f"{facts.model_name}; {facts.cores} cores; clock {clock / 1e9:.3g} GHz; ISA: {' '.join(isa)}"},
        "peak-estimate": {"url": DETECT_URL, "kind": "estimate",
                          "note": f"{facts.cores} cores x {clock / 1e9:.3g} GHz x {per_cycle} fp32 FLOP/cycle "
                                  f"({FMA_PIPES} FMA pipes; AVX-512 counted as 256-bit unless Intel); bf16 x{bf16_factor} "
                                  "with AVX512_BF16/AMX; fp64 half of fp32"},
        "bandwidth-estimate": {"url": DETECT_URL, "kind": "estimate",
                               "note": f"L1 {L1_BYTES_PER_CYCLE} B/cycle/core, outer caches {OUTER_CACHE_BYTES_PER_CYCLE} "
                                       "B/cycle/core" + ("" if dram else f", DRAM {DRAM_BYTES_PER_S_PER_CORE / 1e9:g} "
                                                                       "GB/s per core (assumed)")},
        "power-estimate": {"url": DETECT_URL, "kind": "estimate",
                           "note": f"~{WATTS_PER_CORE:g} W per core; the OS does not report a TDP"},
        "dispatch-estimate": {"url": "repo:benchmarks/cpu_probe.py", "kind": "estimate",
                              "note": "PyTorch eager CPU dispatch ~2-3 us per op as measured on a Zen 4 VM; "
                                      "measure this machine with 'perfmodel bench'"},
        "host-op-estimate": {"url": "repo:calibration/data/host_dispatch.json", "kind": "estimate",
                             "note": "host cost of an eager op that launches no kernel (view, reshape, transpose): "
                                     "median 2.06 us over ops on a Zen 4 VM (benchmarks/host_dispatch.py); measure "
                                     "this machine with that benchmark"},
    }
    if dram:
        sources[DRAM_MEASUREMENT_SOURCE] = {"url": dram.url, "kind": "measured", "note": dram.note}
    memory: dict[str, dict] = {}
    for level, _kind, size, instances in facts.caches:
        per_cycle_bytes = L1_BYTES_PER_CYCLE if level == 1 else OUTER_CACHE_BYTES_PER_CYCLE
        memory[f"l{level}"] = {
            "kind": "cache", "managed": "hardware", "capacity": f"{size // 1024} KiB", "instances": instances,
            "bandwidth": _quantity(facts.cores * per_cycle_bytes * clock / 1e9, "GB/s"),
            "source": "detected", "field_sources": {"bandwidth": "bandwidth-estimate"}}
    memory["dram"] = {
        "kind": "dram", "managed": "hardware",
        "capacity": f"{max(facts.memory_bytes, 2**30) / 2**30:.4g} GiB",
        "bandwidth": _quantity((dram.bytes_per_s if dram else facts.cores * DRAM_BYTES_PER_S_PER_CORE) / 1e9, "GB/s"),
        "source": "detected",
        "field_sources": {"bandwidth": DRAM_MEASUREMENT_SOURCE if dram else "bandwidth-estimate"}}
    return {
        "schema_version": 1, "name": name, "family": "cpu",
        "vendor": {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(facts.vendor, facts.vendor),
        "description": f"{facts.model_name}, {facts.cores} cores (detected; peaks are estimates)",
        "sources": sources,
        "compute": {"simd": {"kind": "vector", "units": facts.cores, "clock": _quantity(clock / 1e9, "GHz"),
                             "peak": peak, "source": "peak-estimate",
                             "field_sources": {"units": "detected", "clock": "detected"}}},
        "memory": memory,
        "scheduling": {"default_mode": "dynamic",
                       "modes": {"dynamic": {"kernel_launch": "2.5 us", "host_op": "2.06 us", "host_overlap": False,
                                              "source": "dispatch-estimate",
                                              "field_sources": {"host_op": "host-op-estimate"}}}},
        "power": {"tdp": _quantity(facts.cores * WATTS_PER_CORE, "W"), "source": "power-estimate"},
        "notes": "Written by 'perfmodel specs detect'; calibrate the estimates with 'perfmodel calibrate'.",
    }


def detected_spec_yaml(facts: CpuFacts, name: str = "local-cpu", dram: MeasuredBandwidth | None = None) -> str:
    header = "# Written by 'perfmodel specs detect'; values marked 'estimate' should be calibrated.\n"
    return header + yaml.safe_dump(detected_spec(facts, name, dram), sort_keys=False, width=120)
