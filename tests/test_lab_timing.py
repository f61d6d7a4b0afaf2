"""The labs' one timing helper (calibration.timing, issue 37): noise and contradiction warnings, the thread
choice by measurement, and the spec of the cores measured."""

import pytest

from calibration import timing
from calibration.timing import Timing, claim_warning, measurably_faster, speedup_line


def steady(label, median_s, blocks=10, spread=0.02):
    return Timing(label=label, times_s=tuple(median_s * (1 + spread * (i / (blocks - 1) - 0.5)) for i in range(blocks)),
                  runs_per_block=10, threads=1)


def test_a_steady_measurement_has_no_warning():
    t = steady("add", 1e-3)
    assert t.median_s == pytest.approx(1e-3) and t.blocks == 10 and t.spread < 0.05
    assert t.warning is None and "WARNING" not in t.summary()
    assert "median 1 ms, IQR 1% over 10 blocks of 10 runs on 1 thread" == t.summary()


@pytest.mark.parametrize("times, reason", [((1e-3, 1e-3, 1e-3, 1e-3), "only 4 blocks"),
                                           ((1e-3, 1e-3, 2e-3, 3e-3, 3e-3, 3e-3), "IQR 70% of the median")])
def test_few_blocks_or_a_wide_iqr_is_flagged_noisy(times, reason):
    t = Timing(label="eager", times_s=times, runs_per_block=1, threads=2)
    assert t.noisy and reason in t.warning and t.warning in t.summary()


def test_the_boundaries_are_the_issues():
    assert timing.MIN_BLOCKS == 5 and timing.NOISY_IQR_FRACTION == 0.20
    five = Timing(label="x", times_s=(1.0,) * 5, runs_per_block=1, threads=1)
    assert not five.noisy


def test_a_speedup_within_the_noise_says_so():
    slow, fast = steady("eager", 1.00e-3, spread=0.1), steady("compiled", 0.98e-3, spread=0.1)
    assert not measurably_faster(fast, slow)
    line = speedup_line("torch.compile speed-up", slow, fast)
    assert line.startswith("torch.compile speed-up: 1.02x") and "within the noise" in line


def test_a_resolved_speedup_has_no_warning_unless_it_contradicts_the_text():
    slow, fast = steady("eager", 2e-3), steady("compiled", 1e-3)
    assert measurably_faster(fast, slow)
    assert "WARNING" not in speedup_line("speed-up", slow, fast, claimed_faster=True)
    assert "contradicts the text" in speedup_line("speed-up", fast, slow, claimed_faster=True)


def test_a_noisy_side_is_warned_once():
    slow = Timing(label="eager", times_s=(70e-3, 1e-3), runs_per_block=1, threads=2)
    line = speedup_line("speed-up", slow, steady("compiled", 1e-3))
    assert line.count("WARNING: eager is noisy") == 1


def test_claim_warning():
    assert claim_warning("the add is memory-bound", True) is None
    assert "the add is memory-bound" in claim_warning("the add is memory-bound", False)


def test_measure_uses_blocked_autorange_and_gets_enough_blocks():
    import torch
    t = timing.measure("torch.add(x, y, out=out)", globals={"torch": torch, "x": torch.ones(1000),
                                                          "y": torch.ones(1000), "out": torch.empty(1000)},
                       threads=1, label="add 1000", min_run_s=0.05)
    assert t.blocks >= timing.MIN_BLOCKS and t.median_s > 0 and t.threads == 1 and t.label == "add 1000"


def test_measure_retakes_a_slow_statement_for_more_blocks():
    import time
    t = timing.measure("sleep(0.004)", globals={"sleep": time.sleep}, threads=1, min_run_s=0.01)
    assert t.blocks >= timing.MIN_BLOCKS


def test_pick_threads_measures_one_and_all_and_follows_its_rule(monkeypatch):
    def fake_measure(stmt, *, globals, threads, label, min_run_s):
        return steady(label, 1e-3 if threads == 1 else 0.5e-3)  # more threads measurably faster
    monkeypatch.setattr(timing, "measure", fake_measure)
    assert timing.pick_threads(cpus=2).threads == 2
    assert timing.pick_threads(cpus=8).threads == 8
    monkeypatch.setattr(timing, "measure", lambda stmt, *, globals, threads, label, min_run_s:
                        steady(label, 1e-3, spread=0.3))  # no measurable difference
    choice = timing.pick_threads(cpus=2)
    assert choice.threads == 1 and "<= 2 vCPUs" in choice.reason
    assert timing.pick_threads(cpus=8).threads == 8
    assert timing.pick_threads(cpus=1).threads == 1


def test_cpu_spec_is_for_the_cores_measured():
    spec, note = timing.cpu_spec(1)
    assert note.startswith("perfmodel specs detect:") or note.startswith("NOTE:")
    if note.startswith("perfmodel"):
        assert spec.name == "local-cpu-1-core"
        whole, _ = timing.cpu_spec()
        assert spec.peak_flops_per_s("fp32") <= whole.peak_flops_per_s("fp32")


def _notebook_printing(*lines):
    from nbformat.v4 import new_code_cell, new_notebook, new_output
    cell = new_code_cell("print(...)")
    cell.outputs = [new_output("stream", name="stdout", text="\n".join(lines) + "\n")]
    return new_notebook(cells=[cell])


def test_the_notebook_scan_finds_a_noisy_timing_printed_without_its_warning():
    from tests.notebook_runs import unwarned_noisy_timings

    noisy = Timing(label="eager", times_s=(1e-3, 1e-3, 3e-3, 3e-3, 3e-3, 3e-3), runs_per_block=1, threads=1)
    steady_line = steady("compiled", 1e-3).summary()
    assert unwarned_noisy_timings(_notebook_printing(noisy.summary(), steady_line)) == []  # warned on its line
    bare = "speed-up 1.7x: median 11 ms, IQR 38% over 43 blocks"
    assert unwarned_noisy_timings(_notebook_printing(bare, steady_line)) == [bare]
    assert unwarned_noisy_timings(_notebook_printing("median 2 ms, IQR 3% over 3 blocks")) != []  # too few blocks
    assert unwarned_noisy_timings(_notebook_printing(bare, "  WARNING: the quartiles overlap")) == []  # next line


def test_the_load_generator_keeps_two_cpus_busy_and_stops():
    from tests.notebook_runs import background_load

    with background_load(2) as spinners:
        assert len(spinners) == 2 and all(spinner.poll() is None for spinner in spinners)
    assert all(spinner.poll() is not None for spinner in spinners)


# --- the DRAM probe: the bandwidth no OS interface reports, measured (issue 37, lab 1's roof) -------------------

FAKE_CPU = dict(model_name="Test CPU", vendor="AuthenticAMD", clock_hz=3.0e9, flags=frozenset({"avx2"}),
                caches=((1, "Data", 32 * 1024, 2), (3, "Unified", 32 * 2**20, 1)), memory_bytes=16 * 2**30)


@pytest.fixture
def two_core_cpu(monkeypatch):
    """Detection returns a fixed 2-core CPU, so the spec does not depend on the machine running the test."""
    import perfmodel.hardware.detect as detect

    monkeypatch.setattr(detect, "read_cpu_facts", lambda: detect.CpuFacts(cores=2, **FAKE_CPU))


def probe(median_s, *, spread=0.02, blocks=10, threads=1, elements=2**24):
    t = steady("DRAM triad", median_s, blocks=blocks, spread=spread)
    return timing.DramProbe(timing=timing.Timing(label=t.label, times_s=t.times_s, runs_per_block=1, threads=threads),
                            elements=elements, llc_bytes=32 * 2**20, when_utc="2026-01-02T03:04:05Z")


def test_the_triad_spans_four_times_the_last_level_cache():
    from perfmodel.hardware.detect import CpuFacts, last_level_cache_bytes

    assert last_level_cache_bytes(CpuFacts(cores=2, **FAKE_CPU)) == 32 * 2**20
    for llc in (0, 2**20, 32 * 2**20, 300 * 2**20):
        n = timing.triad_elements(llc)
        assert 3 * 4 * n >= timing.TRIAD_LLC_MULTIPLE * llc and n >= timing.TRIAD_MIN_ELEMENTS and n % 2**20 == 0
    assert timing.triad_elements(0) == timing.TRIAD_MIN_ELEMENTS


def test_a_probe_reports_what_when_how_many_blocks_and_its_iqr():
    p = probe(10e-3)
    assert p.bandwidth_bytes_per_s == pytest.approx(12 * 2**24 / 10e-3)
    low, high = p.bandwidth_quartiles
    assert low < p.bandwidth_bytes_per_s < high
    text = p.describe()
    for part in ("STREAM triad a = b + 3c", "16,777,216 elements", "192 MiB", "6.0x the detected 32 MiB",
                 "on 1 thread at 2026-01-02T03:04:05Z", f"{p.bandwidth_bytes_per_s / 1e9:.1f} GB/s", "over 10 blocks",
                 "IQR 1%"):
        assert part in text, (part, text)


def test_a_steady_probe_becomes_the_specs_measured_dram_bandwidth(two_core_cpu):
    from perfmodel.hardware.detect import DRAM_MEASUREMENT_SOURCE

    p = probe(8e-3, threads=2)
    spec, note = timing.cpu_spec(dram=p)
    dram = spec.outermost_on_device
    assert dram.bandwidth_bytes_per_s == pytest.approx(p.bandwidth_bytes_per_s, rel=1e-3)
    source = spec.source_of(f"memory.{dram.name}.bandwidth")
    assert spec.field_sources[f"memory.{dram.name}.bandwidth"] == DRAM_MEASUREMENT_SOURCE
    assert source.kind == "measured" and source.url == "repo:calibration/timing.py" and source.note == p.describe()
    assert "DRAM bandwidth measured now" in note and "NOTE" not in note
    assert "DRAM" not in spec.sources["bandwidth-estimate"].note  # nothing calls the measured figure assumed


def test_a_noisy_probe_leaves_the_assumed_figure_and_says_so(two_core_cpu):
    from perfmodel.hardware.detect import DRAM_BYTES_PER_S_PER_CORE, DRAM_MEASUREMENT_SOURCE

    noisy = probe(8e-3, threads=2, spread=0.6)
    assert noisy.noisy
    spec, note = timing.cpu_spec(dram=noisy)
    dram = spec.outermost_on_device
    assert dram.bandwidth_bytes_per_s == pytest.approx(2 * DRAM_BYTES_PER_S_PER_CORE)
    assert DRAM_MEASUREMENT_SOURCE not in spec.sources
    assert spec.source_of(f"memory.{dram.name}.bandwidth").kind == "estimate"
    assert "NOTE: the DRAM probe is noisy" in note and "assumed" in note and "WARNING" in note
    _, bare = timing.cpu_spec()
    assert "DRAM bandwidth assumed" in bare and "measured" not in bare


def test_a_probe_on_other_threads_than_the_spec_is_refused(two_core_cpu):
    with pytest.raises(ValueError, match=r"probe ran on 2 thread\(s\) but the spec is for 1 core"):
        timing.cpu_spec(1, dram=probe(8e-3, threads=2))
    spec, _ = timing.cpu_spec(1, dram=probe(8e-3, threads=1))
    assert spec.name == "local-cpu-1-core"


def test_dram_triad_measures_a_triad_beyond_the_cache():
    p = timing.dram_triad(threads=1, llc_bytes=0, min_run_s=0.05)
    assert p.elements == timing.TRIAD_MIN_ELEMENTS and p.timing.threads == 1 and p.timing.blocks >= 1
    assert p.bandwidth_bytes_per_s > 0 and p.when_utc.endswith("Z") and p.timing.measurement is None


def test_a_noisy_triad_is_retaken_and_the_steadiest_kept(monkeypatch):
    calls = []

    def fake_measure(stmt, *, globals, threads, label, min_run_s):
        calls.append(stmt)
        return steady(label, 4e-3, spread=[0.9, 0.5, 0.02][len(calls) - 1])
    monkeypatch.setattr(timing, "measure", fake_measure)
    p = timing.dram_triad(threads=1, llc_bytes=0)
    assert len(calls) == 3 and p.attempts == 3 and not p.noisy and "the steadiest of 3 attempts" in p.describe()
    calls.clear()
    monkeypatch.setattr(timing, "measure", lambda stmt, **kw: calls.append(stmt) or steady("DRAM triad", 4e-3, spread=0.6))
    p = timing.dram_triad(threads=1, llc_bytes=0, attempts=2)
    assert len(calls) == 2 and p.noisy  # never steady: kept noisy, so cpu_spec keeps the assumed figure
    calls.clear()
    monkeypatch.setattr(timing, "measure", lambda stmt, **kw: calls.append(stmt) or steady("DRAM triad", 4e-3))
    assert timing.dram_triad(threads=1, llc_bytes=0).attempts == 1 and len(calls) == 1


def test_the_measured_spec_probes_the_dram_on_the_cores_it_describes(two_core_cpu, monkeypatch):
    from perfmodel.hardware.detect import DRAM_MEASUREMENT_SOURCE

    probed = []

    def fake_triad(*, threads):
        probed.append(threads)
        return probe(8e-3, threads=threads)
    monkeypatch.setattr(timing, "dram_triad", fake_triad)
    for threads, cores in ((None, 2), (1, 1), (8, 2)):  # all the cores, one, more than the CPU has
        spec, note = timing.measured_cpu_spec(threads)
        assert probed[-1] == cores and DRAM_MEASUREMENT_SOURCE in spec.sources, (threads, note)
        assert spec.outermost_on_device.bandwidth_bytes_per_s == pytest.approx(12 * 2**24 / 8e-3, rel=1e-3)
        assert "DRAM bandwidth measured now" in note
    monkeypatch.setattr(timing, "dram_triad", lambda *, threads: probe(8e-3, threads=threads, spread=0.6))
    spec, note = timing.measured_cpu_spec()
    assert DRAM_MEASUREMENT_SOURCE not in spec.sources and "NOTE: the DRAM probe is noisy" in note


def test_the_measured_spec_runs_no_probe_without_a_detectable_cpu(monkeypatch):
    import perfmodel.hardware.detect as detect

    def unreadable():
        raise OSError("no /proc/cpuinfo")
    monkeypatch.setattr(detect, "read_cpu_facts", unreadable)
    monkeypatch.setattr(timing, "dram_triad", lambda **kw: pytest.fail("probed a CPU it could not detect"))
    spec, note = timing.measured_cpu_spec()
    assert spec.name == timing.FALLBACK_CPU_SPEC and "NOTE: perfmodel specs detect gave no loadable spec" in note
