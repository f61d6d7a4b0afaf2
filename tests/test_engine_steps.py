"""Serving engines' host work per scheduler step (issue 29, item 3): the ``EngineStep`` record, the per-engine
figures the overlays are written with (``calibration.engine_overlays.ENGINE_STEPS``), and how the serving
simulator charges a step: the longer of host and device work when the engine overlaps them, their sum when
it does not or when the engine starts from idle."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from calibration.engine_overlays import ENGINE_STEPS, engine_step_overrides
from perfmodel.hardware.loader import SERVING_ENGINES, load_for_prediction, load_hardware
from perfmodel.hardware.model import EngineStep, Hardware
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving import ArrivalProcess, ClosedLoop, Server, ServingConfig, parse_length
from perfmodel.units import format_quantity


def with_engine_step(hardware: Hardware, step: EngineStep | None, mode: str = "graph") -> Hardware:
    """``hardware`` with ``step`` as the host work per step of its ``mode``."""
    modes = dict(hardware.scheduling.modes)
    modes[mode] = dataclasses.replace(modes[mode], engine_step=step)
    return dataclasses.replace(hardware, scheduling=dataclasses.replace(hardware.scheduling, modes=modes))


def evidence_step(engine: str, *, overlap: bool | None = None) -> EngineStep:
    evidence = ENGINE_STEPS[engine]
    return EngineStep(host_fixed_s=evidence.host_fixed_s, host_per_sequence_s=evidence.host_per_sequence_s,
                      overlap=evidence.overlap if overlap is None else overlap)


def test_a_step_is_the_longer_part_under_overlap_and_the_sum_without():
    step = EngineStep(host_fixed_s=1e-3, host_per_sequence_s=10e-6, overlap=True)
    assert step.host_s(100) == pytest.approx(2e-3)
    assert step.step_s(5e-3, 100) == pytest.approx(5e-3)      # the device hides the host
    assert step.step_s(1.5e-3, 100) == pytest.approx(2e-3)    # the host paces the device
    assert step.step_s(1.5e-3, 100, pipelined=False) == pytest.approx(3.5e-3)  # from idle: nothing to hide behind
    serial = dataclasses.replace(step, overlap=False)
    assert serial.step_s(5e-3, 100) == pytest.approx(7e-3)
    assert serial.step_s(1.5e-3, 100) == pytest.approx(3.5e-3)


@pytest.mark.parametrize("engine", SERVING_ENGINES)
def test_every_engine_has_sourced_step_figures_its_note_derives(engine):
    """Each engine's figures name a public source whose note states the numbers it writes (a figure changed
    without its derivation fails here)."""
    evidence = ENGINE_STEPS[engine]
    assert evidence.overlap  # all three overlap by default in the versions the overlays' tables come from
    assert re.match(r"^https://\S+$", evidence.source["url"])
    assert evidence.source["kind"] in ("measured", "estimate")
    note = evidence.source["note"]
    for value in (evidence.host_fixed_s, evidence.host_per_sequence_s):
        assert format_quantity(value, "seconds", digits=4) in note
    assert 0 < evidence.host_per_sequence_s < evidence.host_fixed_s < 10e-3


def test_an_overlay_written_with_the_engine_step_loads_it_into_the_graph_mode_only(tmp_path):
    """What the overlay writer puts in ``scheduling`` (``engine_step_overrides``) loads, merged over the
    datasheet spec's graph mode, with its source; the eager (dynamic) mode keeps no engine step."""
    import yaml

    scheduling, sources = engine_step_overrides("sglang")
    path = tmp_path / "h100-sxm-step.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "name": "h100-sxm-step", "extends": "h100-sxm",
                                    "sources": sources, "scheduling": scheduling}, sort_keys=False))
    hardware = load_hardware(path)
    assert hardware.scheduling.default_mode == "graph"
    step = hardware.scheduling.modes["graph"].engine_step
    evidence = ENGINE_STEPS["sglang"]
    assert step == EngineStep(host_fixed_s=pytest.approx(evidence.host_fixed_s),
                              host_per_sequence_s=pytest.approx(evidence.host_per_sequence_s), overlap=True,
                              fuses_mixed=False)  # SGLang's prefill and decode passes stay separate by default
    assert hardware.scheduling.modes["dynamic"].engine_step is None
    assert hardware.scheduling.modes["graph"].program_launch_s == load_hardware("h100-sxm").scheduling.modes[
        "graph"].program_launch_s  # merged over the datasheet's graph mode, not in place of it
    source = hardware.field_sources["scheduling.modes.graph.engine_step.host_per_sequence"]
    assert source == "engine-step" and hardware.sources[source].url == evidence.source["url"]


def test_a_bare_number_for_the_host_work_is_refused(tmp_path):
    from perfmodel.errors import SpecError

    path = tmp_path / "bad-step.yaml"
    path.write_text("schema_version: 1\nname: bad-step\nextends: h100-sxm\nscheduling:\n  modes:\n    graph:\n"
                    "      engine_step: {host_fixed: 2, host_per_sequence: 10 us, overlap: true}\n")
    with pytest.raises(SpecError, match="host_fixed"):
        load_hardware(path)


@pytest.fixture(scope="module")
def small_model_on_b200():
    """Llama-3.1-8B in fp8 on one B200 with TensorRT-LLM's kernels: a batch-1 decode step of about 2.6 ms on
    the device, the size of TensorRT-LLM's host work per step (2.9 ms)."""
    architecture = load_architecture("llama-3.1-8b")
    hardware = with_engine_step(load_for_prediction("b200", engine="trtllm"), None)
    return architecture, hardware


def _lone_requests(architecture, hardware, *, mode=None):
    server = Server(architecture, hardware, config=ServingConfig(max_batch=8), max_context=512 + 64,
                    weight_dtype="fp8", mode=mode)
    # one request at a time: every request starts on an idle engine, then decodes at batch 1
    result = server.simulate(ArrivalProcess(kind="fixed", rate_per_s=1.0), 4, parse_length("fixed:512"),
                             parse_length("fixed:64"))
    assert result.max_queue <= 1
    return server, result


def test_serve_at_batch_one_pays_the_host_work_as_the_engine_overlaps_it(small_model_on_b200):
    architecture, device_only = small_model_on_b200
    server, without = _lone_requests(architecture, device_only)
    device_steps = [server.costs.decode_s(1, 512 + j) for j in range(1, 64)]
    assert without.tpot.mean == pytest.approx(np.mean(device_steps), rel=1e-9)
    evidence = evidence_step("trtllm")
    host = evidence.host_s(1)
    assert 0.8 < host / np.mean(device_steps) < 1.5  # comparable: the case where the overlap matters

    _, overlapped = _lone_requests(architecture, with_engine_step(device_only, evidence))
    assert overlapped.tpot.mean == pytest.approx(np.mean(np.maximum(device_steps, host)), rel=1e-9)
    # the prefill starts on an idle engine: its host work is not hidden
    assert overlapped.ttft.mean == pytest.approx(without.ttft.mean + host, rel=1e-9)

    _, serial = _lone_requests(architecture, with_engine_step(device_only, evidence_step("trtllm", overlap=False)))
    assert serial.tpot.mean == pytest.approx(without.tpot.mean + host, rel=1e-9)
    assert serial.ttft.mean == pytest.approx(without.ttft.mean + host, rel=1e-9)


def test_eager_mode_prices_as_before(small_model_on_b200):
    """The engine step belongs to the graph mode: ``--mode dynamic`` (eager) gives what it gave without it."""
    architecture, device_only = small_model_on_b200
    _, before = _lone_requests(architecture, device_only, mode="dynamic")
    _, after = _lone_requests(architecture, with_engine_step(device_only, evidence_step("trtllm")), mode="dynamic")
    assert after.to_dict() == before.to_dict()


def test_the_host_work_grows_with_the_batch(small_model_on_b200):
    """At a large batch the per-sequence part dominates: once a burst of 256 requests is prefilled, every
    decode step of the 256 takes the host's time for 256 sequences (longer than the device's step here)."""
    architecture, device_only = small_model_on_b200
    slow_host = EngineStep(host_fixed_s=1e-3, host_per_sequence_s=100e-6, overlap=True)
    server = Server(architecture, with_engine_step(device_only, slow_host),
                    config=ServingConfig(max_batch=256, max_tokens_per_step=256 * 128), max_context=128 + 32,
                    weight_dtype="fp8")
    result = server.simulate(ArrivalProcess(kind="burst"), 256, parse_length("fixed:128"), parse_length("fixed:32"))
    assert server.costs.decode_s(256, 160) < slow_host.host_s(256)
    # one prefill step for all, then 31 decode steps of all 256: every gap after the first token is one of them
    assert result.itl.p50 == pytest.approx(slow_host.host_s(256), rel=1e-9)
    assert result.tpot.mean == pytest.approx(slow_host.host_s(256), rel=1e-9)


@pytest.mark.parametrize("case", ["burst", "poisson", "closed"])
def test_decode_stretches_equal_step_by_step_with_an_engine_step(small_model_on_b200, monkeypatch, case):
    """The shortcut over stretches of pure decode steps charges the engine's host work as the scheduler's
    step-by-step path does, idle starts included, to the last bit."""
    architecture, device_only = small_model_on_b200
    server = Server(architecture, with_engine_step(device_only, evidence_step("trtllm")),
                    config=ServingConfig(max_batch=32), max_context=1200, weight_dtype="fp8")
    arrivals = {"burst": ArrivalProcess(kind="burst"), "poisson": ArrivalProcess(kind="poisson", rate_per_s=8),
                "closed": ClosedLoop(users=8, think_s=0.5)}[case]
    prompt, output = parse_length("uniform:16-900"), parse_length("uniform:1-200")

    def run():
        result = server.simulate(arrivals, 80, prompt, output, seed=5)
        data = result.to_dict()
        data["itl_samples"] = result.itl_samples_s.tolist()
        return data, result.steps

    fast, fast_steps = run()
    monkeypatch.setattr(Server, "_decode_only", lambda *args: False)
    slow, slow_steps = run()
    assert fast == slow and fast_steps == slow_steps > 80
