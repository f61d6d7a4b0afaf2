"""Fan-out over Dask (``perfmodel.fanout``, ``--workers``/``--scheduler``): the same answers, to the
last bit, as the run in one process; a worker killed mid-run loses nothing; a sweep streams in chunks."""

from __future__ import annotations

import io
import json
import os

import cloudpickle
import numpy as np
import pandas as pd
import pytest

import tests.test_fanout as this_module
from perfmodel.cli import main
from perfmodel.fanout import mapper, serial_map
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.roofline.sweep import concatenate, sweep, sweep_chunks, sweep_plan
from perfmodel.workload.builders import transformer_block

# The workers are other processes that cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(this_module)

GRID = ["--grid", "batch=1,4,16", "--grid", "seq=1,64,512,2048", "--grid", "memory.hbm.bandwidth=2TB/s,3.35TB/s,4TB/s"]


@pytest.fixture(scope="module")
def cluster():
    """One LocalCluster of 2 worker processes for the library-level tests of this module."""
    with mapper(workers=2) as dask_map:
        yield dask_map


def _sweep_cli(tmp_path, name, *extra):
    output = tmp_path / name
    assert main(["sweep", "--on", "h100-sxm", *GRID, "--chunk-points", "5", "-o", str(output), *extra]) == 0
    return output


def test_sweep_on_two_workers_writes_the_same_parquet_bytes(tmp_path, capsys):
    local = _sweep_cli(tmp_path, "local.parquet")
    spread = _sweep_cli(tmp_path, "spread.parquet", "--workers", "2")
    assert local.read_bytes() == spread.read_bytes()
    # the table streamed chunk by chunk is the table of the whole grid evaluated at once
    hardware = load_for_prediction("h100-sxm")
    whole = sweep(transformer_block, hardware, scenario={"batch": [1, 4, 16], "seq": [1, 64, 512, 2048]},
                  spec={"memory.hbm.bandwidth": [2e12, 3.35e12, 4e12]})
    pd.testing.assert_frame_equal(pd.read_parquet(local), _with_what_if_interval(whole.to_columns(), hardware))
    # the points are the grid in C order, as numpy's meshgrid(indexing="ij") flattens it
    assert list(pd.read_parquet(local)["seq"][:5]) == [1, 1, 1, 64, 64]


def _with_what_if_interval(columns: dict, hardware) -> pd.DataFrame:
    """The whole grid's table as the sweep command writes it: interval columns after ``total_s`` (empty:
    the grid sweeps a spec field, so its points are what-if devices)."""
    from perfmodel.cli.predict_command import _sweep_band, _with_interval

    return pd.DataFrame(_with_interval(columns, _sweep_band(hardware, True, 0.8)))


def test_streamed_csv_and_json_equal_the_whole_table(tmp_path, capsys):
    csv_path = _sweep_cli(tmp_path, "table.csv", "--json")
    streamed = capsys.readouterr().out
    hardware = load_for_prediction("h100-sxm")
    frame = _with_what_if_interval(sweep(transformer_block, hardware,
                                         scenario={"batch": [1, 4, 16], "seq": [1, 64, 512, 2048]},
                                         spec={"memory.hbm.bandwidth": [2e12, 3.35e12, 4e12]}).to_columns(), hardware)
    assert frame["total_s_low"].isna().all()  # swept spec values: what-if devices, no interval
    # Chunks of 5 points against the whole grid of 36: the same numbers to the float noise of evaluating
    # points in arrays of other shapes (the last chunk, one point, takes the scalar kernel choice);
    # runs with the same --chunk-points are equal to the bit (the Parquet test above).
    pd.testing.assert_frame_equal(pd.read_csv(csv_path), frame, check_exact=False, rtol=1e-12, check_dtype=False)
    table = json.loads(streamed)
    assert table["confidence"] == 0.8 and "what-if" in table["basis"]
    pd.testing.assert_frame_equal(pd.read_json(io.StringIO(json.dumps(table["rows"]))), frame, check_exact=False, rtol=1e-12,
                                  check_dtype=False)


def test_max_points_refuses_an_absurd_grid_before_computing(tmp_path, capsys):
    axis = ",".join(str(n) for n in range(1, 1001))
    code = main(["sweep", "--on", "h100-sxm", "--grid", f"batch={axis}", "--grid", f"seq={axis}", "--grid",
                 f"kv_len={axis}", "-o", str(tmp_path / "huge.parquet")])
    error = capsys.readouterr().err
    assert code == 2
    assert "1,000,000,000 points" in error and "--max-points 100,000,000" in error and "1000 x 1000 x 1000" in error
    assert not (tmp_path / "huge.parquet").exists()


def test_a_plan_chunk_is_self_contained_and_bounded():
    hardware = load_for_prediction("h100-sxm")
    plan = sweep_plan(transformer_block, hardware, scenario={"batch": np.arange(1, 101), "seq": np.arange(1, 101)},
                      spec={"memory.hbm.bandwidth": np.linspace(1e12, 4e12, 100)}, chunk_points=10_000)
    assert plan.size == 10 ** 6 and len(plan.spans()) == 100
    part = plan.evaluate(plan.spans()[57])
    assert part.size == 10_000  # one chunk holds only its own points
    index = 570_000 + 123
    expected = sweep(transformer_block, hardware, scenario={"batch": [index // 10_000 + 1], "seq": [index // 100 % 100 + 1]},
                     spec={"memory.hbm.bandwidth": [np.linspace(1e12, 4e12, 100)[index % 100]]})
    # numpy sums the ops of a chunk of many points in another order than those of one point: equal to
    # within rounding (runs with the same --chunk-points are equal to the bit, wherever they run)
    assert part.total_s[123] == pytest.approx(expected.total_s[0], rel=1e-12)


def test_train_search_on_a_cluster_equals_the_local_search(cluster):
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.training import TrainingSetup
    from perfmodel.training.search import search

    architecture, hardware = load_architecture("llama-3.1-8b"), load_for_prediction("h100-sxm")
    setup = TrainingSetup(global_batch=64, seq_len=4096)
    local = search(architecture, hardware, setup, 8, recompute=("none", "full"))
    spread = search(architecture, hardware, setup, 8, recompute=("none", "full"), mapper=cluster)
    assert local.tried > 20 and local.best is not None
    assert spread == local


def test_validate_on_a_cluster_equals_the_local_rows(cluster, tmp_path):
    from perfmodel.validation import default_csv, validate

    lines = default_csv().read_text(encoding="utf-8").splitlines()
    subset = tmp_path / "subset.csv"
    subset.write_text("\n".join([lines[0], *lines[1:12], *lines[113:125]]) + "\n", encoding="utf-8")
    local = validate(subset)
    assert sum(row.predicted is not None for row in local) >= 10
    assert validate(subset, mapper=cluster) == local


def _address(cluster) -> str:
    """The scheduler address of the module's cluster: the commands below reach it with ``--scheduler``
    (a running cluster, as on Slurm; starting one per command would cost each test seconds)."""
    return cluster.client.scheduler.address


def test_size_on_a_running_scheduler_prints_the_same_json(cluster, capsys):
    words = ["size", "--model", "llama-3.1-8b", "--on", "h100-sxm,groq-lpu-v1", "--rate", "2/s", "--tpot", "60ms",
             "--requests", "10", "--json"]
    assert main(words) == 0
    local = capsys.readouterr().out
    assert main([*words, "--scheduler", _address(cluster)]) == 0
    assert capsys.readouterr().out == local
    assert '"rank": 1' in local


def test_in_chunks_sends_pieces_of_several_items_and_yields_one_result_per_item(cluster):
    from perfmodel.fanout import in_chunks

    sent = []

    def recording(function, items):
        items = list(items)
        sent.extend(len(chunk) for chunk in items)
        return serial_map(function, items)

    assert list(in_chunks(recording, 4)(abs, range(-5, 5))) == [5, 4, 3, 2, 1, 0, 1, 2, 3, 4]
    assert sent == [4, 4, 2]
    assert list(in_chunks(cluster, 3)(abs, range(-5, 5))) == [abs(n) for n in range(-5, 5)]


def test_deployment_search_on_a_cluster_equals_the_local_search(cluster):
    from perfmodel.jsonable import json_text
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.serving.search import search
    from perfmodel.serving.speculation import Speculation

    architecture = load_architecture("llama-3.1-8b")
    hardware = {engine: load_for_prediction("h100-sxm", engine=engine) for engine in ("trtllm", "vllm")}
    kwargs = dict(prompt_tokens=1024, output_tokens=128, batches=(8, 64), max_pp=2, simulate=2, requests=40,
                  speculations=(None, Speculation(method="eagle", tokens=3, acceptance=0.8)), tpot_slo_s=0.02)
    local = search(architecture, hardware, 4, **kwargs)
    spread = search(architecture, hardware, 4, mapper=cluster, **kwargs)
    assert local.workers_built > 8 and len(local.configurations) > 100 and len(local.simulated) == 2
    assert spread.configurations == local.configurations and spread.front == local.front
    # the simulated front points too (their results hold arrays: compared through their exact JSON text)
    assert json_text(spread.to_dict()) == json_text(local.to_dict())


def test_search_on_a_running_scheduler_prints_the_same_json(cluster, capsys):
    words = ["search", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--chips", "2", "--engines", "trtllm,vllm",
             "--batches", "8,32", "--max-pp", "1", "--simulate", "1", "--speculative", "none,eagle", "--json"]
    assert main(words) == 0
    local = capsys.readouterr().out
    assert main([*words, "--scheduler", _address(cluster)]) == 0
    assert capsys.readouterr().out == local
    assert json.loads(local)["front"]


class _DiesOnce:
    """Evaluates a sweep chunk, but the first time it meets chunk ``victim`` its worker process dies."""

    def __init__(self, plan, victim, marker):
        self.plan, self.victim, self.marker = plan, victim, marker

    def __call__(self, span):
        if span == self.plan.spans()[self.victim] and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)  # the worker process is killed mid-run
        return self.plan.evaluate(span)


def test_a_worker_killed_mid_run_loses_no_chunk(cluster, tmp_path):
    hardware = load_for_prediction("h100-sxm")
    plan = sweep_plan(transformer_block, hardware, scenario={"batch": [1, 2, 8, 32], "seq": [16, 128, 1024]},
                      chunk_points=2)
    marker = tmp_path / "killed"
    parts = list(cluster(_DiesOnce(plan, 3, str(marker)), plan.spans()))
    assert marker.exists()  # a worker did die
    expected = concatenate(list(sweep_chunks(plan, serial_map)))
    got = concatenate(parts)
    for name, values in expected.to_columns().items():
        np.testing.assert_array_equal(got.to_columns()[name], values)


def test_calibration_fit_on_a_cluster_equals_the_local_fit(cluster):
    import math

    from calibration.fit import fit
    from perfmodel.roofline import evaluate
    from tests.test_calibration import _record, _synthetic_suite

    spec = load_for_prediction("epyc-zen4-2vcpu", ideal=True)
    rng = np.random.default_rng(7)
    records = [_record(graph, evaluate(graph, spec, fuse=False).total_s * math.exp(rng.normal(0, 0.05)), op_class)
               for op_class, graph in _synthetic_suite()]
    local, spread = fit(records, spec), fit(records, spec, mapper=cluster)
    assert local.kfold_median_abs_error is not None and len(local.heldout_other_seeds) == 4
    for name in ("params", "heldout_median_abs_error", "heldout_by_class", "kfold_median_abs_error",
                 "heldout_other_seeds", "cost"):
        assert getattr(spread, name) == getattr(local, name), name
    np.testing.assert_array_equal(spread.predicted_s, local.predicted_s)
