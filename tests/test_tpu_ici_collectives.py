"""TPU v6e's ICI all-reduces as XLA runs them, measured (collectives.csv, ``tpu-irregular-memory-study``):
the achievable overlay's link fitted to them. vLLM TPU's jitted decode step runs two such all-reduces a layer
(calibration/data/published/TPU_SEARCH.md), so the serving rows of group G rest on this fit."""

from __future__ import annotations

import statistics

from calibration.achievable import device_time_hardware, fit_overlay, published_records
from calibration.published import load_published
from perfmodel.hardware.loader import load_hardware
from perfmodel.roofline.arrays import evaluate_arrays

SOURCE = "tpu-irregular-memory-study"


def _rows() -> list[dict]:
    return [row for row in load_published("collectives") if row["source"] == SOURCE]


def _relative_errors(spec: str) -> list[float]:
    """|predicted / measured - 1| of every published v6e all-reduce on ``spec`` (device time: no dispatch)."""
    hardware = device_time_hardware(load_hardware(spec))
    records = [record for record in published_records("tpu-v6e", hardware).records
               if record.op_class.startswith("collective:")]
    assert len(records) == 12
    return [abs(float(evaluate_arrays(record.graph(), hardware, mode="graph").total_s.sum()) / record.duration_s - 1)
            for record in records]


def test_the_rows_are_the_published_table_in_si_units():
    rows = _rows()
    assert len(rows) == 12 and {row["device"] for row in rows} == {"tpu-v6e"}
    assert {row["collective"] for row in rows} == {"all_reduce"}
    assert {int(row["gpus"]) for row in rows} == {8, 16, 32}
    assert {int(row["message_bytes"]) for row in rows} == {2**18, 2**20, 2**22, 2**24}
    assert all(10e-6 < float(row["time_s"]) < 1e-3 for row in rows)
    # device-timed (the host dispatch amortised over 32 chained psums): no host floor is subtracted
    assert all("device-timed" in row["conditions"] for row in rows)


def test_the_fitted_link_reproduces_the_all_reduces_the_datasheet_link_misses():
    """The datasheet ICI (100 GB/s a link, 1 us a hop) prices these XLA all-reduces at about half their
    measured time; the fitted link is within 15% at the median, and every row within 30%."""
    before, after = _relative_errors("tpu-v6e"), _relative_errors("tpu-v6e-achievable")
    assert statistics.median(before) > 0.3, before
    assert statistics.median(after) < 0.15 and max(after) < 0.3, after


def test_the_fit_identifies_both_link_parameters_with_a_small_error():
    result, _records, _spec, _skipped = fit_overlay("tpu-v6e")
    efficiency, efficiency_error = result.params["link:ici"]
    latency, latency_error = result.params["collective_latency:ici"]
    assert 0.5 < efficiency < 1 and efficiency_error < 0.15 * efficiency
    # The smallest rows (0.25 MiB on 8 chips: 30.5 us) bound the fixed part from above.
    smallest = min(float(row["time_s"]) for row in _rows())
    assert 5e-6 < latency < smallest and latency_error < 0.25 * latency


def test_a_tp8_decode_step_pays_the_measured_all_reduces():
    """Llama-3.1-70B TP8 decode at batch 64: 160 all-reduces of 1 MiB a step; at XLA's measured ~44 us each
    they add about 4 ms over the datasheet link's ~17 us."""
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph

    architecture = load_architecture("llama-3.1-70b")
    scenario = Scenario(batch=64, prompt_tokens=1500, generated_tokens=2, weight_dtype="bf16", kv_dtype="bf16",
                        activation_dtype="bf16")
    graph = stage_graph(architecture, scenario, Parallelism(tp=8), phase="decode", context=1500)
    links = {name: float(evaluate_arrays(graph, load_hardware(name), mode="graph").link_s.sum())
             for name in ("tpu-v6e", "tpu-v6e-achievable")}
    assert 2.5e-3 < links["tpu-v6e-achievable"] - links["tpu-v6e"] < 6e-3, links
