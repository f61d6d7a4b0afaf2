"""Each lab's workload on the six systems' rooflines (perfmodel.lab_workloads; Lab 1's chart and
notebooks/figures/five_systems.png): the workloads mirror the labs' code, the points are perfmodel's predictions
and sit under their roofs, the chart is legible, and one command redraws the committed figure."""

import math
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import perfmodel
from perfmodel import plotting
from perfmodel.lab_workloads import FIVE_SYSTEMS, LAB_WORKLOADS, labs_roofline, six_systems_rooflines
from perfmodel.landscape import landscape_row
from perfmodel.roofline import evaluate
from perfmodel.workload.builders import transformer_block

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# lab -> (notebook, what its code must still contain for the workload of perfmodel.lab_workloads to be its own)
LAB_CODE = {
    1: ("01_accelerator_landscape", ["landscape_row(hardware)"]),
    2: ("02_dataflow_execution_models", ["BATCH, SEQ, D_MODEL = 1, 128, 256",
                                         "def __init__(self, d_model: int = 256, heads: int = 4)",
                                         "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                                         "self.norm = nn.LayerNorm(d_model)"]),
    3: ("03_compilation_for_dataflow", ["big = MLPBlock(1024).eval()", "input_shapes=[(8, 128, 1024)]",
                                        "self.up = nn.Linear(width, 4 * width)", "h = F.gelu(h) * 1.5 + 0.1"]),
    4: ("04_memory_systems", ['arch = load_architecture("llama-3.1-8b")', "torch.bfloat16, arch.max_positions",
                              "return F.scaled_dot_product_attention(q, k, v)"]),
    5: ("05_debugging_across_the_stack", ["builders.transformer_block(batch=1, seq=1, kv_len=2048, layers=32)"]),
    6: ("06_performance_modeling", ['arch = load_architecture("llama-3.1-8b")', "Scenario(batch=1, prompt_tokens=1024",
                                    'stage_graph(arch, scenario, Parallelism(), phase="decode", context=1024)']),
    7: ("07_spyre_deep_dive", ["def __init__(self, width=4096, hidden=12800)", "input_shapes=[(1, 2048, 4096)]",
                               "self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))"]),
}


@pytest.fixture(scope="module")
def charts():
    return six_systems_rooflines()


def test_one_workload_per_lab_and_each_lab_still_uses_it():
    assert [workload.lab for workload in LAB_WORKLOADS] == list(range(1, 8))
    for lab, (name, snippets) in LAB_CODE.items():
        code = "\n".join(cell.source for cell in nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells
                         if cell.cell_type == "code")
        for snippet in snippets:
            assert snippet in code, f"lab {lab} no longer has {snippet!r}: update perfmodel.lab_workloads"


def test_every_point_is_finite_and_under_its_roofs(charts):
    assert [chart.hardware for chart in charts] == ["epyc-zen4-2vcpu-fitted", *FIVE_SYSTEMS]
    for chart in charts:
        assert [point.name for point in chart.points] == [workload.label for workload in LAB_WORKLOADS]
        for point in chart.points:
            assert point.achieved_flops_per_s > 0 and math.isfinite(point.achieved_flops_per_s), (chart.hardware, point)
            assert point.intensity_flop_per_byte > 0
            roof = chart.attainable_flops_per_s(point.intensity_flop_per_byte)
            assert point.achieved_flops_per_s <= roof * (1 + 1e-9), (chart.hardware, point.name, point, roof)


def test_the_points_are_the_models_predictions(charts):
    """Lab 1's point is the landscape table's 4096 matmul (another path through the model); lab 5's is the
    worked example's decode step: its FLOPs over its predicted time."""
    for chart in charts:
        hardware = perfmodel.load_hardware(chart.hardware)
        lab1, lab5 = chart.points[0], chart.points[4]
        gemm_s = landscape_row(hardware)["gemm 4096 (ms)"] / 1e3
        assert lab1.achieved_flops_per_s == pytest.approx(2 * 4096**3 / gemm_s, rel=1e-9)
        step = evaluate(transformer_block(batch=1, seq=1, kv_len=2048, layers=32, dtype=chart.dtype), hardware)
        assert lab5.achieved_flops_per_s == pytest.approx(step.flops_total / step.total_s, rel=1e-9)


def test_a_decode_step_sits_left_of_the_ridge_and_a_matmul_far_right_of_it(charts):
    """The physics the chart is there to show: a batch-1 decode step (every weight read once per token: ~1 FLOP
    per byte in 16 bits, 0.5 in fp32) is left of every ridge but the wafer's (Cerebras' SRAM feeds its peak at
    under 1 FLOP per byte), and a 4096 matmul far right of it (its tiles re-read from the roof's memory where the
    on-chip buffers are small: Groq's, Spyre's)."""
    for chart in charts:
        matmul, decode = chart.points[0], chart.points[5]
        assert matmul.intensity_flop_per_byte > 10 * decode.intensity_flop_per_byte, chart.hardware
        assert 0.4 < decode.intensity_flop_per_byte < 2.5, (chart.hardware, decode)
        assert (decode.intensity_flop_per_byte < chart.ridge_flop_per_byte) == (chart.hardware != "cerebras-wse-3")


def test_the_chart_is_legible(charts):
    axes = plotting.plot_labs_rooflines(charts)
    figure = axes.flat[0].figure
    try:
        panels = [ax for ax in axes.flat if ax.get_visible()]
        assert len(panels) == 6
        for ax, chart in zip(panels, charts, strict=True):
            low, high = ax.get_ylim()
            roof = ax.get_lines()[0].get_ydata()
            assert ((roof >= low) & (roof <= high)).sum() > len(roof) / 4, f"{chart.hardware}: the roof is off the axes"
            assert ax.get_legend() is not None and chart.hardware in ax.get_title()
        legends = figure.legends
        assert len(legends) == 1 and [text.get_text() for text in legends[0].get_texts()] == \
            [workload.label for workload in LAB_WORKLOADS]
        texts = [text for text in figure.findobj(lambda artist: hasattr(artist, "get_fontsize") and
                                                 hasattr(artist, "get_text")) if text.get_text() and text.get_visible()]
        small = [(text.get_text(), text.get_fontsize()) for text in texts if text.get_fontsize() < plotting.MIN_FONT_PT]
        assert texts and not small, small
    finally:
        plotting.pyplot().close(figure)


def test_labs_roofline_takes_the_cpu_it_is_given():
    cpu = perfmodel.load_hardware("epyc-zen4-2vcpu-fitted", overrides={"memory.dram.bandwidth": "30 GB/s"})
    chart = labs_roofline(cpu)
    assert chart.dtype == "fp32" and chart.roofs[0].bandwidth_bytes_per_s == pytest.approx(30e9)


def test_one_command_redraws_five_systems_png(tmp_path):
    done = subprocess.run([sys.executable, str(NOTEBOOKS / "export_figures.py"), str(tmp_path), "five_systems"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    written = tmp_path / "five_systems.png"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["five_systems.png"]
    from matplotlib.image import imread

    committed = NOTEBOOKS / "figures" / "five_systems.png"
    assert imread(written).shape == imread(committed).shape
    # the chart is predicted, not measured: drawn by the matplotlib that drew the committed copy, it is that copy
    # pixel for pixel, so a committed figure left stale by a change to the specs or the labs' workloads fails here
    # (another matplotlib may render text a pixel apart: then only the size above is compared)
    import matplotlib
    from PIL import Image

    drawn_by = Image.open(committed).info.get("Software", "")
    if drawn_by.startswith(f"Matplotlib version{matplotlib.__version__},"):
        assert (imread(written) == imread(committed)).all(), \
            "notebooks/figures/five_systems.png is stale: python notebooks/export_figures.py notebooks/figures five_systems"
