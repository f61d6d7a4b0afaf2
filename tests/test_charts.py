"""Roofline chart data checked numerically; every format renders a non-empty file headless."""

import pytest

from perfmodel import plotting
from perfmodel.cli import main
from perfmodel.hardware.loader import catalog, load_hardware
from perfmodel.roofline import evaluate
from perfmodel.roofline.charts import classic_roofline, hierarchical_roofline, scheduling_roofline
from perfmodel.workload import builders
from perfmodel.workload.ir import Graph, Op, TensorSpec

TOLERANCE = 1 + 1e-9


@pytest.mark.parametrize("name", [entry.name for entry in catalog()])
def test_ridge_point_is_peak_over_bandwidth(name):
    hardware = load_hardware(name)
    data = classic_roofline(hardware)
    memory = hardware.outermost_on_device
    assert data.ridge_flop_per_byte == pytest.approx(data.peak_flops_per_s / memory.bandwidth_bytes_per_s)
    assert data.attainable_flops_per_s(data.ridge_flop_per_byte) == pytest.approx(data.peak_flops_per_s)
    assert data.attainable_flops_per_s(data.ridge_flop_per_byte / 10) == pytest.approx(data.peak_flops_per_s / 10)


@pytest.mark.parametrize("name, dtype, ridge", [
    ("h100-sxm", "bf16", 989.4e12 / 3.35e12),        # 295 FLOP/B: 989.4 TFLOP/s dense bf16, 3.35 TB/s HBM3
    ("tpu-v5e", "bf16", 197e12 / 819e9),             # 241 FLOP/B: 197 TFLOP/s bf16, 819 GB/s HBM2e
    ("ibm-spyre", "fp16", 98.304e12 / 204.8e9),      # 480 FLOP/B: 98.3 TFLOP/s fp16, 204.8 GB/s LPDDR5
    ("groq-lpu-v1", "fp16", 188e12 / 18.4e12),       # 10.2 FLOP/B: 188 TFLOP/s fp16, 18.4 TB/s SRAM streams
])
def test_ridge_points_by_hand(name, dtype, ridge):
    data = classic_roofline(load_hardware(name))
    assert data.dtype == dtype
    assert data.ridge_flop_per_byte == pytest.approx(ridge, rel=1e-9)


def test_points_sit_on_the_roof_that_binds_them():
    """Hand-worked points on a round-number device (tests/test_rule_oracles.py): 100 TFLOP/s bf16
    matrix engine, 10 TFLOP/s fp32 vector engine, one DRAM level at 1 TB/s."""
    from tests.test_rule_oracles import FLAT, matmul

    add = Op(name="add", kind="elementwise", outputs=(TensorSpec(shape=(1024, 1024), dtype="fp32"),),
             inputs=(TensorSpec(shape=(1024, 1024), dtype="fp32"),) * 2)
    graph = Graph(name="two", ops=[matmul(4096, 4096, 4096), add])
    data = classic_roofline(FLAT, evaluate(graph, FLAT))
    assert data.dtype == "bf16" and data.peak_flops_per_s == 100e12  # the matmul's time dominates
    assert data.ridge_flop_per_byte == pytest.approx(100e12 / 1e12)
    points = {point.name: point for point in data.points}
    # 4096^3 matmul: 2 x 4096^3 FLOPs over 3 x 4096^2 x 2 bytes = 1365.3 FLOP/B, compute bound at the peak.
    assert points["mm"].intensity_flop_per_byte == pytest.approx(2 * 4096**3 / (3 * 4096**2 * 2), rel=1e-12)
    assert points["mm"].achieved_flops_per_s == pytest.approx(100e12, rel=1e-12)
    # fp32 add of 1M elements: 1 FLOP per 12 bytes, memory bound on the 1 TB/s roof: 83.3 GFLOP/s.
    assert points["add"].intensity_flop_per_byte == pytest.approx(1 / 12, rel=1e-12)
    assert points["add"].achieved_flops_per_s == pytest.approx(1e12 / 12, rel=1e-12)
    assert (points["mm"].bound, points["add"].bound) == ("compute", "memory:dram")


@pytest.mark.parametrize("name, dtype", [("h100-sxm", "bf16"), ("tpu-v5e", "bf16"), ("ibm-spyre", "fp16"),
                                         ("groq-lpu-v1", "fp16"), ("epyc-zen4-2vcpu", "bf16")])
def test_predicted_points_lie_on_or_under_every_roof(name, dtype):
    hardware = load_hardware(name)
    evaluation = evaluate(builders.transformer_block(seq=256, dtype=dtype), hardware)
    data = hierarchical_roofline(hardware, evaluation, dtype=dtype)
    assert len(data.roofs) == len(hardware.memory) and data.points
    bandwidth = {roof.label: roof.bandwidth_bytes_per_s for roof in data.roofs}
    for point in data.points:
        op = next(op for op in evaluation.ops if op.name == point.name)
        peak = hardware.compute[op.engine].peak_flops_per_s[op.dtype]
        assert point.achieved_flops_per_s <= peak * TOLERANCE
        assert point.achieved_flops_per_s <= point.intensity_flop_per_byte * bandwidth[point.level] * TOLERANCE


def test_scheduling_ceiling_bounds_every_launching_op():
    h100 = load_hardware("h100-sxm")
    evaluation = evaluate(builders.transformer_block(seq=16), h100, mode="dynamic")
    data = scheduling_roofline(h100, evaluation)
    assert data.launch_s == pytest.approx(20e-6)
    assert data.scheduling_ridge_flops_per_launch == pytest.approx(989.4e12 * 20e-6)
    launching = [p for p in data.points if p.granularity_flops_per_launch > 0]
    assert launching
    for point in launching:
        assert point.achieved_flops_per_s <= point.granularity_flops_per_launch / data.launch_s * TOLERANCE
    # Small element-wise ops sit on the ceiling: they are the scheduling-bound ones.
    assert any(p.bound == "scheduling" for p in launching)


def test_static_programs_get_a_whole_program_point():
    spyre = load_hardware("ibm-spyre")
    evaluation = evaluate(builders.elementwise_chain(), spyre)
    data = scheduling_roofline(spyre, evaluation)
    [program] = [p for p in data.points if p.kind == "program"]
    assert program.achieved_flops_per_s <= program.granularity_flops_per_launch / data.launch_s * TOLERANCE
    # By hand: 8 element-wise ops of 2^20 bf16 elements (2 bytes), 1 FLOP each, fused into one kernel
    # whose input is read and output written once at LPDDR5 (the first and last op, 2 MiB each), while
    # every op moves its 4 MiB through the LX scratchpad; the program pays its launch and 3 runtime DMAs
    # (torch-spyre launch_jobplan: correction blob, inputs, outputs).
    static, lx, dram = spyre.scheduling.modes["static"], spyre.level("lx"), spyre.level("lpddr5")
    assert program.granularity_flops_per_launch == 8 * (1 << 20)
    total = (static.program_launch_s + 3 * static.dma_setup_s + 2 * (2 << 20) / dram.bandwidth_bytes_per_s
             + 6 * (4 << 20) / lx.bandwidth_bytes_per_s)
    assert program.achieved_flops_per_s == pytest.approx(8 * (1 << 20) / total, rel=1e-9)
    assert data.launch_s == static.program_launch_s


@pytest.mark.parametrize("suffix", ["png", "svg", "pdf"])
@pytest.mark.parametrize("kind", ["classic", "hierarchical", "scheduling", "breakdown"])
def test_each_format_renders(tmp_path, capsys, suffix, kind):
    target = tmp_path / f"chart.{suffix}"
    specs = "h100-sxm" if kind != "breakdown" else "h100-sxm,ibm-spyre"
    assert main(["roofline", "transformer_block", "--on", specs, "--kind", kind, "-o", str(target)]) == 0
    assert target.stat().st_size > 2000
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_side_by_side_with_measured_points(tmp_path):
    measured = tmp_path / "measured.csv"
    measured.write_text("name,flops,bytes,duration_s\ngemm,1.37e11,1.0e8,2.0e-4\nadd,1.0e6,6.0e6,2.5e-5\n")
    target = tmp_path / "side.png"
    assert main(["roofline", "transformer_block", "--on", "h100-sxm,ibm-spyre,groq-lpu-v1", "--measured",
                 str(measured), "-o", str(target)]) == 0
    assert target.stat().st_size > 5000


def test_bad_measured_file_names_row_and_column(tmp_path, capsys):
    measured = tmp_path / "measured.csv"
    measured.write_text("name,flops,bytes,duration_s\ngemm,1e9,1e6,fast\n")
    assert main(["roofline", "gemm_sweep", "--on", "h100-sxm", "--measured", str(measured), "-o",
                 str(tmp_path / "x.png")]) == 2
    assert f"{measured}:2: column 'duration_s'" in capsys.readouterr().err


def test_pareto_chart(tmp_path):
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.sizing import Targets, size_system

    targets = Targets(ttft_s=1.0, tpot_s=0.1, rate_per_s=1, prompt_tokens=256, generated_tokens=64)
    options = {name: size_system(load_architecture("llama-3.1-8b"), load_hardware(name), targets)
               for name in ("h100-sxm", "tpu-v5e")}
    ax = plotting.plot_pareto(options)
    assert ax.get_xlabel() == "chips" and ax.get_yscale() == "log"
    plotting.save_figure(ax, tmp_path / "pareto.svg")
    assert (tmp_path / "pareto.svg").stat().st_size > 2000


def test_plot_functions_return_axes_and_accept_one():
    import matplotlib.pyplot as plt

    h100 = load_hardware("h100-sxm")
    evaluation = evaluate(builders.gemm_sweep(), h100)
    figure, ax = plt.subplots()
    assert plotting.plot_roofline(classic_roofline(h100, evaluation), ax) is ax
    assert "TFLOP/s" in ax.get_ylabel() and ax.get_xscale() == "log"
    plt.close(figure)


def test_ops_that_move_no_outer_bytes_are_still_drawn(tmp_path):
    """A decode step's small ops keep their data in inner caches: they move nothing at HBM, yet they
    take time, so the classic and scheduling charts draw them (at the right edge) instead of dropping
    them; every op with FLOPs is on both charts and their time shares add up."""
    from perfmodel.llm import Parallelism, Scenario
    from perfmodel.llm.catalog import load_architecture
    from perfmodel.llm.graphs import stage_graph

    hardware = load_hardware("h100-sxm")
    graph = stage_graph(load_architecture("llama-2-7b"), Scenario(batch=1, prompt_tokens=128, generated_tokens=1),
                        Parallelism(), phase="decode", context=128)
    evaluation = evaluate(graph, hardware, mode="dynamic")
    with_flops = {op.name for op in evaluation.ops if op.flops > 0 and op.total_s > 0}
    classic, scheduling = classic_roofline(hardware, evaluation), scheduling_roofline(hardware, evaluation)
    unmoved = [p for p in classic.points if p.intensity_flop_per_byte == float("inf")]
    assert unmoved, "the decode step has ops with no HBM traffic"
    for data in (classic, scheduling):
        assert {p.name for p in data.points} == with_flops
    share = sum(op.total_s for op in evaluation.ops if op.name in with_flops) / evaluation.total_s
    assert sum(p.time_share for p in classic.points) == pytest.approx(share, rel=1e-9)
    for data, draw in ((classic, plotting.plot_roofline), (scheduling, plotting.plot_scheduling_roofline)):
        plotting.save_figure(draw(data), tmp_path / "chart.png")
        assert (tmp_path / "chart.png").stat().st_size > 0


@pytest.mark.parametrize("kind", ["hierarchical", "scheduling"])
def test_the_slowest_ops_are_named_and_marker_sizes_have_a_legend(kind):
    hardware = load_hardware("h100-sxm")
    evaluation = evaluate(builders.transformer_block(batch=1, seq=1, kv_len=2048), hardware, mode="dynamic")
    if kind == "hierarchical":
        data = hierarchical_roofline(hardware, evaluation)
        ax = plotting.plot_roofline(data)
    else:
        data = scheduling_roofline(hardware, evaluation)
        ax = plotting.plot_scheduling_roofline(data)
    slowest = [op.name for op in sorted(evaluation.ops, key=lambda op: -op.total_s) if op.kind != "launch"][:3]
    names = [text.get_text() for text in ax.texts if text.get_text() in {point.name for point in data.points}]
    assert names == slowest  # each named once, slowest first
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert [entry for entry in legend if entry.startswith("size:")] == [
        "size: 1% of time", "size: 10% of time", "size: 50% of time"]
    plotting.pyplot().close(ax.figure)


def test_a_hierarchical_roofline_is_legible():
    """Issue 37: every roof visible (two levels of equal bandwidth drawn in different line styles), no text
    under 8 pt, and the marker key in the legend rather than in the axis label."""
    hardware = load_hardware("h100-sxm")
    evaluation = evaluate(builders.transformer_block(batch=1, seq=1, kv_len=2048), hardware, mode="dynamic")
    data = hierarchical_roofline(hardware, evaluation)
    ax = plotting.plot_roofline(data)
    roofs = [line for line in ax.get_lines() if line.get_label().endswith("FLOP/B)")]
    assert len(roofs) == len(data.roofs) > 1
    assert len({line.get_linestyle() for line in roofs}) == min(len(roofs), len(plotting.ROOF_STYLES))
    texts = [*ax.texts, *ax.get_legend().get_texts(), ax.xaxis.label, ax.yaxis.label, ax.title]
    assert min(text.get_fontsize() for text in texts if text.get_text()) >= plotting.MIN_FONT_PT == 8
    assert "marker" not in ax.get_xlabel()
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any(entry.startswith("marker: ") and entry.endswith("-bound") for entry in legend), legend
    plotting.pyplot().close(ax.figure)
