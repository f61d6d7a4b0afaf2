"""The engines' all-reduce choices (perfmodel.costs.all_reduce) and their pricing and fit."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pytest

from perfmodel.costs import all_reduce as A
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import load_hardware

BF16 = 2


def _choice(policy: str, group: int, elements: int) -> str:
    return A.algorithms(policy, group, elements * BF16)


def test_tensorrt_llm_on_8_h100s_hands_the_mid_sizes_to_nccl_and_its_two_shot_kernel():
    # customAllReduceUtils.h AllReduceBestStrategyTableSM90, tp 8, hidden 4096: one-shot up to 64 tokens,
    # NCCL at 128, two-shot at 256-512, NCCL from 1024 (the workspace and the table's end beyond).
    assert _choice("trtllm-sm90", 8, 64 * 4096) == A.ONE_SHOT
    assert _choice("trtllm-sm90", 8, 128 * 4096) == A.NVLS  # NCCL, which runs NVLink SHARP on more than 2
    assert _choice("trtllm-sm90", 8, 256 * 4096) == A.TWO_SHOT
    assert _choice("trtllm-sm90", 8, 1024 * 4096) == A.NVLS
    assert _choice("trtllm-sm90", 2, 2048 * 4096) == A.ONE_SHOT
    assert _choice("trtllm-sm90", 2, 4096 * 4096) == A.RING  # NCCL without NVLS on 2 GPUs
    assert _choice("trtllm-sm100", 8, 256 * 4096) == A.ONE_SHOT  # Blackwell keeps one-shot longer
    assert _choice("trtllm-sm80", 8, 1024 * 4096) == A.RING  # A100's NVSwitch has no multicast
    assert _choice("trtllm-pcie", 2, 128) == A.RING  # no NVLink: NCCL at every size


def test_vllm_and_sglang_choices_follow_their_size_caps():
    # vLLM on H100: custom kernel under 256 KiB on 8 (then symmetric memory), one stage under 256 KiB.
    assert _choice("vllm-sm90", 8, 64 * 1024) == A.ONE_SHOT
    assert _choice("vllm-sm90", 8, 128 * 1024) == A.MULTIMEM
    assert _choice("vllm-sm90", 8, 64 * 1024 * 1024) == A.NVLS
    assert _choice("vllm-sm90", 4, 256 * 1024) == A.TWO_SHOT  # 512 KiB: two stages on 4
    assert _choice("vllm-sm80", 2, 8 * 1024 * 1024) == A.RING  # 16 MiB > 8 MiB, no symmetric memory
    assert _choice("vllm-pcie", 2, 1024 * 1024) == A.ONE_SHOT  # P2P kernel on 2 PCIe GPUs
    assert _choice("vllm-pcie", 4, 128) == A.RING  # "not supported on more than two PCIe-only GPUs"
    assert _choice("sglang-nvlink", 8, 4 * 1024 * 1024) == A.NVLS  # 8 MiB: not under _MAX_CAR_SIZE
    assert _choice("sglang-pcie", 8, 128) == A.RING


def test_choices_over_a_sweep_are_the_choices_of_each_point():
    payload = np.asarray([64, 128, 256, 1024]) * 4096 * BF16
    swept = A.algorithms("trtllm-sm90", 8, payload)
    assert list(swept) == [A.algorithms("trtllm-sm90", 8, float(value)) for value in payload]


def test_an_unknown_policy_is_refused_with_the_known_ones():
    with pytest.raises(PerfmodelError, match="unknown all-reduce policy 'nccl2'.*trtllm-sm90"):
        A.policy("nccl2")


def test_a_spec_naming_an_unknown_all_reduce_rule_does_not_load(tmp_path):
    (tmp_path / "bad.yaml").write_text("schema_version: 1\nname: bad\nextends: h100-sxm\n"
                                       "links:\n  nvlink:\n    all_reduce: bogus\n")
    with pytest.raises(Exception, match="unknown all_reduce 'bogus'"):
        load_hardware(tmp_path / "bad.yaml")


def _engine_link(policy: str, kernel_step_s: float = 3e-6):
    spec = load_hardware("h100-sxm")
    link = dataclasses.replace(spec.links["nvlink"], all_reduce=policy, kernel_latency_s=kernel_step_s)
    return dataclasses.replace(spec, links={**spec.links, "nvlink": link}, efficiency=None)


def _collective_cost(hardware, elements, group: int, **attrs):
    from perfmodel.costs.rules import CostContext, collective_cost
    from perfmodel.workload.ir import Op

    op = Op(name="ar", kind="collective", attrs={"collective": "all_reduce", "bytes": np.asarray(elements) * BF16,
                                                  "group_size": group, "dtype": "bf16", "link": "nvlink", **attrs})
    return collective_cost(op, CostContext(hardware=hardware))


def test_nccl_rows_are_priced_as_nccls_algorithm_at_its_step_and_class():
    hardware = _engine_link("trtllm-sm90")
    link = hardware.links["nvlink"]
    payload = 4096 * 4096 * BF16  # NCCL on 2 GPUs: a ring of 2 (p - 1) steps at the link's (NCCL's) latency
    ring = _collective_cost(hardware, 4096 * 4096, 2)
    assert ring.link_class == "nvlink/nccl"
    assert float(ring.link_latency_s) == pytest.approx(2 * link.latency_s)
    assert float(ring.link_bytes) == pytest.approx(payload / link.links_per_chip)
    one_shot = _collective_cost(hardware, 4096, 8)  # the engine's kernel: one step at its measured latency
    assert one_shot.link_class == "nvlink" and float(one_shot.link_latency_s) == pytest.approx(3e-6)
    assert float(one_shot.link_bytes) == pytest.approx(7 * 4096 * BF16 / link.links_per_chip)
    nvls = _collective_cost(hardware, 1024 * 4096, 8)
    assert float(nvls.link_bytes) == pytest.approx((1 + 1 / 8) * 1024 * 4096 * BF16 / link.links_per_chip)


def test_a_swept_collective_takes_each_points_class_and_price():
    from perfmodel.hardware.model import Parameters
    from perfmodel.roofline.arrays import link_parameters

    hardware = _engine_link("trtllm-sm90")
    elements = np.asarray([64, 128, 256]) * 4096
    swept = _collective_cost(hardware, elements, 8)
    assert list(swept.link_class) == ["nvlink", "nvlink/nccl", "nvlink/two_shot"]
    for index, value in enumerate(elements):
        alone = _collective_cost(hardware, int(value), 8)
        assert float(np.asarray(swept.link_bytes)[index]) == pytest.approx(float(alone.link_bytes))
        assert float(np.asarray(swept.link_latency_s)[index]) == pytest.approx(float(alone.link_latency_s))
    parameters = Parameters(link_efficiency={"nvlink": 0.5, "nvlink/nccl": 0.8},
                            collective_latency_s={"nvlink/nccl": 5e-6})
    efficiency, alpha = link_parameters(parameters, swept)
    assert list(efficiency) == [0.5, 0.8, 0.5]  # two-shot without its own falls back to the link's
    assert list(alpha) == [0.0, 5e-6, 0.0]


def test_a_link_without_an_engine_rule_prices_as_before():
    spec = load_hardware("h100-sxm")
    cost = _collective_cost(spec, 4096, 8)
    assert cost.link_class is None
    assert float(cost.link_latency_s) == pytest.approx(spec.links["nvlink"].latency_s)  # one-shot, one step


def _fit_all_reduce(gpu: str, engine: str, policy: str | None):
    from calibration.achievable import device_time_hardware
    from calibration.aiconfigurator import all_reduce_sample_records
    from calibration.engine_overlays import with_measured_step_latency
    from calibration.fit import components, heldout_errors, split_half, spread_weights

    records = all_reduce_sample_records(gpu, engine)
    hardware = with_measured_step_latency(device_time_hardware(load_hardware(gpu)), records, policy)
    parts = components(records, hardware, "graph")
    measured = np.asarray([record.duration_s for record in records])
    train, test = split_half(tuple(record.op_class for record in records), 0)
    errors = heldout_errors(parts, measured, train, test, spread_weights(records))
    groups = [int(records[index].graph().ops[0].attrs["group_size"]) for index in test]
    return hardware, errors, groups


def test_tensorrt_llm_on_h100_is_predicted_from_its_own_choices():
    # The shipped 8-H100 table: held out, the engine's rule beats judging one- vs two-shot by bandwidth.
    _, with_rule, groups = _fit_all_reduce("h100-sxm", "trtllm", "trtllm-sm90")
    _, without, _ = _fit_all_reduce("h100-sxm", "trtllm", None)
    on_8 = [index for index, group in enumerate(groups) if group == 8]
    assert statistics.median(abs(with_rule[index]) for index in on_8) < 0.15
    assert statistics.median(abs(with_rule[index]) for index in on_8) < statistics.median(
        abs(without[index]) for index in on_8)


def test_vllm_on_pcie_measures_its_kernel_step_on_two_gpus_and_prices_nccl_on_more():
    hardware, errors, groups = _fit_all_reduce("l40s", "vllm", "vllm-pcie")
    step = hardware.links["pcie_p2p"].kernel_latency_s
    assert 3e-6 < step < 8e-6  # the 2-GPU P2P kernel (5.2-5.7 us), not NCCL's 12-25 us on 4 and 8
    assert hardware.links["pcie_p2p"].latency_s == load_hardware("l40s").links["pcie_p2p"].latency_s
    on_2_and_4 = [abs(error) for error, group in zip(errors, groups, strict=True) if group in (2, 4)]
    assert statistics.median(on_2_and_4) < 0.15
    _, without, _ = _fit_all_reduce("l40s", "vllm", None)
    assert statistics.median(np.abs(errors)) < 0.5 * statistics.median(np.abs(without))


def test_an_op_that_calls_nccl_runs_nccls_algorithm_whatever_the_engines_rule():
    # NCCL's own tables call ncclAllReduce at every size: the engine's rule (one-shot at 64 tokens of 4096 on 8
    # H100s under TensorRT-LLM) does not apply; NCCL's algorithm does (NVLS on more than 2, a ring on 2).
    assert A.algorithms("trtllm-sm90", 8, 64 * 4096 * BF16, A.NCCL_LIBRARY) == A.NVLS
    assert A.algorithms("trtllm-sm90", 2, 64 * 4096 * BF16, A.NCCL_LIBRARY) == A.RING
    assert A.algorithms("trtllm-sm80", 8, 128, A.NCCL_LIBRARY) == A.RING  # no multicast on A100's switch
    swept = A.algorithms("vllm-sm90", 8, np.asarray([256, 1 << 20, 1 << 28]) * BF16, A.NCCL_LIBRARY)
    assert list(swept) == [A.NVLS] * 3
    hardware = _engine_link("trtllm-sm90")
    nccl = _collective_cost(hardware, 64 * 4096, 8, library="nccl")
    assert nccl.link_class == "nvlink/nccl"
    assert float(nccl.link_latency_s) == pytest.approx(2 * hardware.links["nvlink"].latency_s)  # NVLS: 2 steps
    assert _collective_cost(hardware, 64 * 4096, 8).link_class == "nvlink"  # the engine's own one-shot
    # on a link that names no engine's rule, the op still prices as NCCL's class
    assert _collective_cost(load_hardware("h100-sxm"), 4096, 8, library="nccl").link_class == "nvlink/nccl"
    with pytest.raises(PerfmodelError, match="unknown all-reduce library 'mpi'.*nccl"):
        _collective_cost(hardware, 4096, 8, library="mpi")


def test_nccls_own_table_agrees_with_tensorrt_llms_nccl_rows_on_h100_but_not_vllms_on_l40s():
    """The committed tables: NCCL's all-reduce (2.29.2 on H100, 2.27.3 on L40S) against the rows the engines
    hand NCCL. TensorRT-LLM on 8 H100s (512K elements and from 4M) matches NCCL's table within 3% at every GPU
    count, so all of NCCL's rows may join; vLLM on the L40S runs 1.3x slower than NCCL's table on 4 GPUs and
    faster on 8 (another machine's PCIe), so only its 2-GPU rows join and the skipped count says why."""
    from calibration import aiconfigurator as t

    nccl_h100, _ = t.committed_rows("nccl_all_reduce", "h100-sxm", "nccl")
    trtllm, _ = t.committed_rows("all_reduce", "h100-sxm", "trtllm")
    agreement = t.nccl_agreement(trtllm, nccl_h100, "trtllm-sm90")
    assert set(agreement) == {2, 4, 8} and all(compared >= 4 for _, compared in agreement.values())
    assert all(abs(ratio - 1) < 0.03 for ratio, _ in agreement.values())
    assert len(t.agreeing_nccl_rows(trtllm, nccl_h100, "trtllm-sm90")) == len(nccl_h100) == 63

    nccl_l40s, _ = t.committed_rows("nccl_all_reduce", "l40s", "nccl")
    vllm, _ = t.committed_rows("all_reduce", "l40s", "vllm")
    agreement = t.nccl_agreement(vllm, nccl_l40s, "vllm-pcie")
    assert abs(agreement[2][0] - 1) < 0.1 and agreement[4][0] > 1.25 and agreement[8][0] < 0.85
    skipped: dict[str, int] = {}
    kept = t.agreeing_nccl_rows(vllm, nccl_l40s, "vllm-pcie", skipped)
    assert set(kept["num_gpus"]) == {2}
    assert sum(skipped.values()) == len(nccl_l40s) - len(kept) and any("4 GPUs" in reason for reason in skipped)
    assert len(t.agreeing_nccl_rows(None, nccl_l40s, "vllm-pcie")) == 0  # no engine table: no class to fit


def test_nccls_rows_become_records_of_the_engines_nccl_class():
    from calibration import aiconfigurator as t
    from calibration.achievable import device_time_hardware
    from calibration.engine_overlays import with_measured_step_latency
    from calibration.fit import components

    nccl = t.nccl_sample_records("h100-sxm")
    assert len(nccl) == 63 and {record.op_class for record in nccl} == {t.NCCL_OP_CLASS}
    assert {record.tool_version.split(";")[0] for record in nccl} == {"nccl 2.29.2"}
    own = t.all_reduce_sample_records("h100-sxm", "trtllm")
    hardware = with_measured_step_latency(device_time_hardware(load_hardware("h100-sxm")), own + nccl,
                                          "trtllm-sm90")
    # NCCL's small rows do not set the engine kernels' step (their class is NCCL's, not the engine's one-shot)
    alone = with_measured_step_latency(device_time_hardware(load_hardware("h100-sxm")), own, "trtllm-sm90")
    assert hardware.links["nvlink"].kernel_latency_s == alone.links["nvlink"].kernel_latency_s
    assert set(components(nccl, hardware, "graph").link_names) == {"nvlink/nccl"}


def test_vllm_and_sglang_on_an_nvl72_rack_run_nccl_beyond_a_tray():
    """On GB200/GB300 NVL72 (4-GPU compute trays) vLLM's and SGLang's custom all-reduce needs every rank on one
    node: a group of 8 or 16 runs NCCL at every size; within a tray the rule is the one on an 8-GPU node."""
    from calibration import aiconfigurator as tables
    from perfmodel.costs.all_reduce import NVL72_TRAY_GPUS, POLICIES, RING, policy
    from perfmodel.hardware.model import ALL_REDUCE_POLICY_NAMES

    assert tuple(POLICIES) == ALL_REDUCE_POLICY_NAMES
    for gpu in tables.NVL72_GPUS:
        for engine, node_rule in (("vllm", f"vllm-{tables.GPU_ARCHITECTURES[gpu]}"), ("sglang", "sglang-nvlink")):
            rack, node = policy(tables.all_reduce_policy(gpu, engine)), policy(node_rule)
            for payload in (2e3, 2e5, 2e6):
                for group in (2, NVL72_TRAY_GPUS):
                    assert rack.choose(group, payload) == node.choose(group, payload)
                for group in (8, 16):
                    assert rack.choose(group, payload) == RING
    assert tables.all_reduce_policy("b300", "vllm") == "vllm-sm103"  # an 8-GPU HGX node: the node's rule
