"""Timings a student can trust: the labs' one timing helper (issue 37).

Every lab that times a kernel on this machine does it here, with ``torch.utils.benchmark``
(``Timer.blocked_autorange``: warm-up, blocks of runs, the thread count set, CUDA synchronised), and
prints what it measured in one format, ``median 1.234 ms, IQR 3% over 12 blocks``, followed on the same
line by a ``WARNING`` whenever the measurement cannot carry a conclusion:

* **noisy**: fewer than :data:`MIN_BLOCKS` blocks (no meaningful IQR), or an IQR above
  :data:`NOISY_IQR_FRACTION` of the median (another program competed for the cores);
* **contradicts the text**: a comparison the lab's prose makes (``compile is faster``, ``the add is
  memory-bound``) that the measurement does not bear out (:func:`claim_warning`), or a speed-up whose
  two inter-quartile ranges overlap (:func:`speedup_line`: the difference is within the noise).

:func:`pick_threads` chooses how many intra-op threads to measure with **by measuring** a probe on one
thread and on all of them: on a machine of at most two vCPUs (a laptop running other work, a Colab or CI
runner) one thread unless more is measurably faster; on a larger one all of them unless they are
measurably slower. :func:`cpu_spec` returns the detected spec of exactly that many cores
(``perfmodel specs detect``), so a prediction is for the cores that were measured.

No operating-system interface reports a DRAM bandwidth, so ``perfmodel specs detect`` assumes a per-core
share; the machine can measure it instead. :func:`dram_triad` is the labs' one bandwidth probe: a STREAM
triad (``a = b + 3 c``, fp32) over arrays several times the detected last-level cache, on the threads the lab
measures with. Passed to :func:`cpu_spec`, a steady probe becomes the spec's DRAM bandwidth, recorded in its
sources as a measurement (what, when, how many blocks, the IQR); a noisy one is not used, the assumed
per-core figure stays, and the note says so.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

NOISY_IQR_FRACTION = 0.20  # an IQR above this share of the median: noisy
MIN_BLOCKS = 5             # fewer blocks than this: no usable IQR
SMALL_MACHINE_CPUS = 2     # at most this many vCPUs: one thread unless more is measurably faster
FALLBACK_CPU_SPEC = "epyc-zen4-2vcpu-fitted"  # the shipped fitted spec, when detection gives none
MAX_RUN_S = 5.0            # a re-measurement for more blocks never asks for more than this
# The DRAM probe: STREAM's triad counts 12 bytes per fp32 element (read b and c, write a; the write-allocate
# read of a is not counted, as in STREAM). Its three arrays together span at least TRIAD_LLC_MULTIPLE times the
# detected last-level cache (all instances), so almost every byte comes from DRAM.
TRIAD_BYTES_PER_ELEMENT = 12
# What the triad moves with regular stores: the write-allocate read of ``a`` too. A kernel that only reads can
# therefore stream up to 16/12 of the triad's counted bandwidth.
TRIAD_BYTES_MOVED_PER_ELEMENT = 16
TRIAD_LLC_MULTIPLE = 4
TRIAD_MIN_ELEMENTS = 2**22  # 48 MiB in all when the OS reports no cache
TRIAD_URL = "repo:calibration/timing.py"
# A noisy triad is measured again, up to this many times in all, and the steadiest kept: on a shared machine
# another program's burst spoils one measurement of a second, not the machine's bandwidth.
TRIAD_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True)
class Timing:
    """One ``blocked_autorange`` measurement: per-run seconds of each block, and how it was taken."""

    label: str
    times_s: tuple[float, ...]  # per-run time of each block
    runs_per_block: int
    threads: int
    measurement: object = dataclasses.field(default=None, compare=False, repr=False)  # torch's Measurement

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def quartiles_s(self) -> tuple[float, float]:
        """(25th, 75th) percentiles of the blocks, interpolated as numpy's default (torch's ``iqr`` too)."""
        ordered = sorted(self.times_s)
        return _percentile(ordered, 0.25), _percentile(ordered, 0.75)

    @property
    def iqr_s(self) -> float:
        q1, q3 = self.quartiles_s
        return q3 - q1

    @property
    def blocks(self) -> int:
        return len(self.times_s)

    @property
    def spread(self) -> float:
        """IQR / median."""
        return self.iqr_s / self.median_s

    @property
    def warning(self) -> str | None:
        """Why this measurement is noisy, or None."""
        reasons = []
        if self.blocks < MIN_BLOCKS:
            reasons.append(f"only {self.blocks} block{'s' * (self.blocks != 1)} (< {MIN_BLOCKS}: no usable IQR)")
        if self.spread > NOISY_IQR_FRACTION:
            reasons.append(f"IQR {self.spread:.0%} of the median (> {NOISY_IQR_FRACTION:.0%})")
        if not reasons:
            return None
        return f"WARNING: {self.label or 'this measurement'} is noisy: {', '.join(reasons)}; do not trust it " \
               "(close other programs, raise min_run_s, or measure on fewer threads)"

    @property
    def noisy(self) -> bool:
        return self.warning is not None

    def summary(self, unit: str = "ms") -> str:
        """``median 1.234 ms, IQR 3% over 12 blocks of 40 runs on 1 thread`` (+ the warning, if noisy)."""
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        text = (f"median {self.median_s * scale:.4g} {unit}, IQR {self.spread:.0%} over {self.blocks} blocks "
                f"of {self.runs_per_block} runs on {self.threads} thread{'s' * (self.threads != 1)}")
        return text + (f"  {self.warning}" if self.warning else "")


def _percentile(ordered: list[float], q: float) -> float:
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def from_measurement(measurement, *, label: str = "", threads: int = 1) -> Timing:
    """A :class:`Timing` of a ``torch.utils.benchmark.Measurement``."""
    return Timing(label=label or measurement.description or measurement.label or "",
                  times_s=tuple(float(t) for t in measurement.times), runs_per_block=int(measurement.number_per_run),
                  threads=threads, measurement=measurement)


def measure(stmt: str, *, globals: dict, threads: int, label: str = "", min_run_s: float = 0.2,
            min_blocks: int = MIN_BLOCKS, setup: str = "pass", max_run_s: float = MAX_RUN_S) -> Timing:
    """Time ``stmt`` with ``torch.utils.benchmark.Timer(...).blocked_autorange`` on ``threads`` threads.

    If the first measurement has fewer than ``min_blocks`` blocks (a slow statement), it is measured
    again for long enough to get them (at most ``max_run_s``); if it still has too few, the returned
    :class:`Timing` carries the warning."""
    import torch.utils.benchmark as benchmark

    timer = benchmark.Timer(stmt, setup=setup, globals=globals, num_threads=threads, label=label, description=label)
    measurement = timer.blocked_autorange(min_run_time=min_run_s)
    if len(measurement.times) < min_blocks:
        block_s = measurement.median * measurement.number_per_run
        longer = min(max_run_s, block_s * (min_blocks + 1))
        if longer > min_run_s:
            measurement = timer.blocked_autorange(min_run_time=longer)
    timing = from_measurement(measurement, label=label, threads=threads)
    # blocked_autorange re-estimates its block size each call: on a loaded machine the retake can pick
    # blocks as long as the whole run and still return one. Top up with blocks of the size it chose.
    number, times, spent = measurement.number_per_run, list(timing.times_s), sum(timing.times_s) * measurement.number_per_run
    while len(times) < min_blocks and spent < max_run_s:
        block = timer.timeit(number)
        times.append(float(block.median))
        spent += float(block.median) * number
    if len(times) == len(timing.times_s):
        return timing
    return dataclasses.replace(timing, times_s=tuple(times))


def measurably_faster(fast: Timing, slow: Timing) -> bool:
    """``fast``'s upper quartile is below ``slow``'s lower quartile, and neither is noisy."""
    return not fast.noisy and not slow.noisy and fast.quartiles_s[1] < slow.quartiles_s[0]


def speedup_line(name: str, slow: Timing, fast: Timing, *, claimed_faster: bool | None = None) -> str:
    """``name: 3.21x (slow-label median ... / fast-label median ...)``, with a WARNING when either timing is
    noisy, when the quartiles overlap (the difference is within the noise), or when ``claimed_faster`` (what
    the text says: ``fast`` is faster) is contradicted."""
    ratio = slow.median_s / fast.median_s
    text = (f"{name}: {ratio:.2f}x ({slow.label} {slow.summary()}; {fast.label} {fast.summary()})")
    warnings = [timing.warning for timing in (slow, fast) if timing.warning]
    if not warnings and not (measurably_faster(fast, slow) or measurably_faster(slow, fast)):
        warnings.append(f"WARNING: the quartiles of {slow.label} and {fast.label} overlap: "
                        f"{ratio:.2f}x is within the noise")
    if claimed_faster is not None:
        warning = claim_warning(f"{fast.label} is faster than {slow.label}", (ratio > 1) == claimed_faster)
        if warning:
            warnings.append(warning)
    return text + "".join(f"\n  {warning}" for warning in warnings if warning not in text)


def claim_warning(claim: str, holds: bool) -> str | None:
    """A warning when what the lab's text says (``claim``) is not what was measured."""
    return None if holds else f"WARNING: contradicts the text: the text says {claim}, the measurement does not"


@dataclass(frozen=True, kw_only=True)
class ThreadChoice:
    threads: int
    cpus: int
    one: Timing | None
    many: Timing | None
    reason: str


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, else ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pick_threads(*, cpus: int | None = None, probe_n: int = 384, min_run_s: float = 0.2) -> ThreadChoice:
    """Choose the intra-op thread count by measuring a probe (an ``probe_n`` x ``probe_n`` fp32 matmul) on one
    thread and on ``cpus`` threads (default: the CPUs this process may use, at most torch's thread count).

    At most :data:`SMALL_MACHINE_CPUS` CPUs: one thread, unless ``cpus`` threads are measurably faster (their
    upper quartile below one thread's lower quartile, neither noisy); a multi-threaded kernel waits for its
    slowest thread, and on a busy small machine that is whichever thread lost its core. On a larger machine:
    all of them, unless one thread is measurably faster."""
    import torch

    # the CPUs the process may use, not torch's current thread count (which defaults to physical cores:
    # one on a 2-vCPU guest whose vCPUs are one core's hyper-threads); the probe decides
    cpus = cpus or available_cpus()
    if cpus <= 1:
        return ThreadChoice(threads=1, cpus=1, one=None, many=None, reason="one CPU available")
    a, b, out = (torch.randn(probe_n, probe_n) for _ in range(3))
    env = {"torch": torch, "a": a, "b": b, "out": out}
    stmt = "torch.mm(a, b, out=out)"
    one = measure(stmt, globals=env, threads=1, label="probe on 1 thread", min_run_s=min_run_s)
    many = measure(stmt, globals=env, threads=cpus, label=f"probe on {cpus} threads", min_run_s=min_run_s)
    if cpus <= SMALL_MACHINE_CPUS:
        threads = cpus if measurably_faster(many, one) else 1
        rule = f"<= {SMALL_MACHINE_CPUS} vCPUs: 1 thread unless {cpus} are measurably faster"
    else:
        threads = 1 if measurably_faster(one, many) else cpus
        rule = f"> {SMALL_MACHINE_CPUS} vCPUs: all {cpus} unless 1 thread is measurably faster"
    reason = (f"{probe_n}x{probe_n} fp32 matmul probe: 1 thread {one.summary()}; {cpus} threads {many.summary()}; "
              f"{rule} -> {threads}")
    return ThreadChoice(threads=threads, cpus=cpus, one=one, many=many, reason=reason)


@dataclass(frozen=True, kw_only=True)
class DramProbe:
    """One STREAM-triad measurement (:func:`dram_triad`): its timing, its array length, and when it ran."""

    timing: Timing
    elements: int      # per array
    llc_bytes: int     # the detected last-level cache it was sized against
    when_utc: str      # ISO 8601, to the second
    attempts: int = 1  # measurements taken: a noisy one is retaken (:data:`TRIAD_ATTEMPTS`), the steadiest kept

    @property
    def bytes_per_run(self) -> int:
        return TRIAD_BYTES_PER_ELEMENT * self.elements

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bytes_per_run / self.timing.median_s

    @property
    def bandwidth_quartiles(self) -> tuple[float, float]:
        """(low, high): the bandwidth at the slow and at the fast quartile of the blocks."""
        q1, q3 = self.timing.quartiles_s
        return self.bytes_per_run / q3, self.bytes_per_run / q1

    @property
    def noisy(self) -> bool:
        return self.timing.noisy

    def spec_bandwidth(self):
        """The measurement as a spec's DRAM bandwidth (``perfmodel.hardware.detect.MeasuredBandwidth``), or
        None when the probe is noisy: then the spec keeps the assumed per-core figure."""
        from perfmodel.hardware.detect import MeasuredBandwidth

        if self.noisy:
            return None
        return MeasuredBandwidth(bytes_per_s=self.bandwidth_bytes_per_s, url=TRIAD_URL, note=self.describe())

    def describe(self) -> str:
        """What was measured, when, and how steadily (the spec source's note)."""
        t = self.timing
        total = 3 * 4 * self.elements
        cache = (f"{total / self.llc_bytes:.1f}x the detected {self.llc_bytes / 2**20:.0f} MiB last-level cache"
                 if self.llc_bytes else "no cache reported")
        return (f"STREAM triad a = b + 3c, fp32, 3 arrays of {self.elements:,} elements ({total / 2**20:.0f} MiB, "
                f"{cache}), {TRIAD_BYTES_PER_ELEMENT} bytes counted per element; torch.utils.benchmark "
                f"blocked_autorange on {t.threads} thread{'s' * (t.threads != 1)} at {self.when_utc}: "
                f"{self.bandwidth_bytes_per_s / 1e9:.1f} GB/s ({t.summary()})"
                + (f"; the steadiest of {self.attempts} attempts" if self.attempts > 1 else ""))


def triad_elements(llc_bytes: int) -> int:
    """Elements per array so that the triad's three fp32 arrays span :data:`TRIAD_LLC_MULTIPLE` x ``llc_bytes``
    (rounded up to a multiple of 2**20; at least :data:`TRIAD_MIN_ELEMENTS`)."""
    wanted = TRIAD_LLC_MULTIPLE * llc_bytes / (3 * 4)
    return max(TRIAD_MIN_ELEMENTS, math.ceil(wanted / 2**20) * 2**20)


def dram_triad(*, threads: int, llc_bytes: int | None = None, min_run_s: float = 0.5,
               attempts: int = TRIAD_ATTEMPTS) -> DramProbe:
    """Measure this machine's DRAM bandwidth now: a STREAM triad (``torch.add(b, c, alpha=3.0, out=a)``)
    over arrays sized by :func:`triad_elements` against ``llc_bytes`` (default: the detected last-level
    cache), timed by :func:`measure` on ``threads`` threads; a noisy measurement is taken again, up to
    ``attempts`` in all, and the steadiest (lowest IQR / median) is kept. The arrays are freed on return."""
    import torch

    from perfmodel.hardware.detect import last_level_cache_bytes, read_cpu_facts

    llc = last_level_cache_bytes(read_cpu_facts()) if llc_bytes is None else llc_bytes
    n = triad_elements(llc)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = {"torch": torch, **{name: torch.full((n,), value) for name, value in (("a", 0.0), ("b", 1.0), ("c", 2.0))}}
    def once() -> Timing:
        return measure("torch.add(b, c, alpha=3.0, out=a)", globals=env, threads=threads, label="DRAM triad",
                       min_run_s=min_run_s)

    taken = [once()]
    while taken[-1].noisy and len(taken) < attempts:
        taken.append(once())
    steadiest = min(taken, key=lambda t: (t.noisy, t.spread))
    return DramProbe(timing=dataclasses.replace(steadiest, measurement=None), elements=n, llc_bytes=llc,
                     when_utc=when, attempts=len(taken))


def cpu_spec(threads: int | None = None, *, dram: DramProbe | None = None):
    """(spec, note): this CPU's spec from ``perfmodel specs detect`` for ``threads`` cores (all of them if None),
    built in a temporary directory (nothing written to the working directory); the shipped fitted spec
    (:data:`FALLBACK_CPU_SPEC`) with a note saying why if the detected one does not load.

    ``dram``, a :func:`dram_triad` probe on the same number of threads, replaces the assumed DRAM bandwidth
    with the measured one (a ``measured`` source in the spec) unless it is noisy; the note says which."""
    import perfmodel
    from perfmodel.hardware.detect import DRAM_BYTES_PER_S_PER_CORE, detected_spec_yaml, read_cpu_facts

    def fallback(error: Exception):  # a CPU the detector cannot describe: use the shipped fitted spec
        return perfmodel.load_hardware(FALLBACK_CPU_SPEC), (
            f"NOTE: perfmodel specs detect gave no loadable spec ({type(error).__name__}: {error}); "
            f"using the shipped fitted spec {FALLBACK_CPU_SPEC} instead")

    try:
        facts = read_cpu_facts()
    except Exception as error:
        return fallback(error)
    cores = facts.cores if threads is None else min(threads, facts.cores)
    if dram is not None and dram.timing.threads != cores:  # a caller's mistake, not the CPU's: say so
        raise ValueError(f"the DRAM probe ran on {dram.timing.threads} thread(s) but the spec is for {cores} "
                         f"core(s); probe with dram_triad(threads={cores})")
    facts = dataclasses.replace(facts, cores=cores)
    bandwidth = dram.spec_bandwidth() if dram is not None else None
    name = "local-cpu" if threads is None else f"local-cpu-{cores}-core"
    try:
        with tempfile.TemporaryDirectory() as folder:  # the spec file lives only inside this block
            path = Path(folder) / f"{name}.yaml"
            path.write_text(detected_spec_yaml(facts, name=name, dram=bandwidth))
            spec = perfmodel.load_hardware(path)
    except Exception as error:
        return fallback(error)
    per_core = DRAM_BYTES_PER_S_PER_CORE / 1e9
    assumed = f"{per_core:g} GB/s per core x {cores} = {cores * per_core:g} GB/s"
    if dram is None:
        dram_note = f"DRAM bandwidth assumed ({assumed}; no probe run)"
    elif bandwidth is not None:
        dram_note = f"DRAM bandwidth measured now: {dram.describe()}"
    else:
        dram_note = (f"NOTE: the DRAM probe is noisy, so the spec keeps the assumed DRAM bandwidth ({assumed}), "
                     f"not a measurement: {dram.describe()}")
    return spec, (f"perfmodel specs detect: {facts.model_name}, {facts.cores} cores at "
                  f"{facts.clock_hz / 1e9:.2f} GHz; {dram_note}")


def measured_cpu_spec(threads: int | None = None):
    """(spec, note): :func:`cpu_spec` for ``threads`` cores (all of them if None) with its DRAM bandwidth measured
    now by :func:`dram_triad` on the same number of cores (the spec keeps the assumed figure if the probe is
    noisy, and the note says so), so that a lab's predictions and roofs use what this machine streams rather
    than ``perfmodel specs detect``'s assumed per-core figure. Without a detectable CPU: :func:`cpu_spec`'s
    fallback, with no probe run."""
    from perfmodel.hardware.detect import read_cpu_facts

    try:
        cores = read_cpu_facts().cores
    except Exception:  # cpu_spec falls back to the shipped spec, and its note says why
        return cpu_spec(threads)
    return cpu_spec(threads, dram=dram_triad(threads=cores if threads is None else min(threads, cores)))
