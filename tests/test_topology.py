"""Where a collective's group lies on a torus, and the links it drives (perfmodel.costs.topology).

Oracles, worked by hand from the sources the module names:
* standard slice shapes (Cloud TPU topology tables): v5p 4x4x4 (64 chips), 4x4x8 (128), 8x8x8 (512),
  8x8x16 (1024); v5e/v6e 2x4 (8 chips), 4x8 (32), 16x16 (256);
* JAX's ``mesh_utils`` assignment: "logical mesh (4, 16) is compatible with physical mesh 4x4x4 since
  4=4 and 16=4x4" (its error message), the most network-intensive axis placed first;
* the scaling book's AllGather cost: ``V / (W_bidirectional * n_axes)`` over wrapped axes, and its pop
  quiz 2 (sharding chapter): an AllGather of a bf16[2048, 8192] array over the Y axis (4 chips, no
  wraparound) of a TPU v5e {'X': 8, 'Y': 4} mesh at 4.5e10 B/s one way takes 3 x 8.4 MB / 4.5e10 = 560 us.
"""

import pytest

from perfmodel.costs.rules import CostContext, op_cost
from perfmodel.costs.topology import AxisSpan, group_span, ring_links, slice_shape, span_steps
from perfmodel.errors import SpecError
from perfmodel.hardware.loader import load_hardware
from perfmodel.hardware.model import ComputeEngine, ExecutionMode, Hardware, Link, MemoryLevel, Power, Scheduling
from perfmodel.workload.ir import Op

V5P = Link(name="ici", kind="chip_to_chip", bandwidth_bytes_per_s_per_direction=100e9, topology="torus3d",
           links_per_chip=6, latency_s=1e-6, wraparound_chips=4, wraparound_whole_slice=True)
V5E = Link(name="ici", kind="chip_to_chip", bandwidth_bytes_per_s_per_direction=45e9, topology="torus2d",
           links_per_chip=4, latency_s=1e-6, wraparound_chips=16)
EVERY_AXIS_WRAPS = Link(name="ici", kind="chip_to_chip", bandwidth_bytes_per_s_per_direction=45e9,
                        topology="torus2d", links_per_chip=4, latency_s=1e-6)


@pytest.mark.parametrize(("chips", "dimensions", "shape"), [
    (64, 3, (4, 4, 4)), (128, 3, (4, 4, 8)), (256, 3, (4, 8, 8)), (512, 3, (8, 8, 8)), (1024, 3, (8, 8, 16)),
    (4, 3, (1, 2, 2)), (8, 2, (2, 4)), (32, 2, (4, 8)), (256, 2, (16, 16)), (96, 3, None), (1, 2, (1, 1))])
def test_standard_slice_shapes(chips, dimensions, shape):
    assert slice_shape(chips, dimensions) == shape


def test_tensor_axis_of_4_lies_on_one_ring_of_a_4x4x4_slice():
    # logical mesh (fsdp 16, tensor 4) on 4x4x4: tensor takes one axis of 4, fsdp the other two
    assert group_span(V5P, 4, stride=1, slice_chips=64) == (AxisSpan(chips=4, ring=True),)
    assert group_span(V5P, 16, stride=4, slice_chips=64) == (AxisSpan(chips=4, ring=True),) * 2
    assert ring_links(V5P, group_span(V5P, 4, 1, 64)) == 2  # both directions of one ring, not 6 ports
    assert ring_links(V5P, group_span(V5P, 16, 4, 64)) == 4
    assert ring_links(V5P, group_span(V5P, 64, 1, 64)) == 6  # the whole cube: every port


def test_jax_prefers_more_axes_for_the_inner_axis():
    # tensor 16 on 4x4x4 takes two axes (4 x 4): mapping "to more physical axes first"
    assert group_span(V5P, 16, stride=1, slice_chips=64) == (AxisSpan(chips=4, ring=True),) * 2
    # tensor 8 on 4x4x8 (128 chips): only the axis of 8 gives 8
    assert group_span(V5P, 8, stride=1, slice_chips=128) == (AxisSpan(chips=8, ring=True),)


def test_a_size_no_whole_axes_give_takes_a_segment_of_one_more():
    # tensor 16 on 8x8x8: one ring of 8 and a line of 2 along another axis
    assert group_span(V5P, 16, stride=1, slice_chips=512) == (AxisSpan(chips=8, ring=True),
                                                              AxisSpan(chips=2, ring=False))
    assert ring_links(V5P, group_span(V5P, 16, 1, 512)) == 2 + 1


def test_cubes_wrap_only_as_whole_slices():
    # 4 chips of a v5p are a 2x2x1 slice: no full cube, no wraparound, so two lines of 2
    assert group_span(V5P, 4) == (AxisSpan(chips=2, ring=False),) * 2
    assert ring_links(V5P, group_span(V5P, 4)) == 2


def test_v5e_and_v6e_axes_wrap_only_at_16():
    assert group_span(V5E, 8) == (AxisSpan(chips=2, ring=False), AxisSpan(chips=4, ring=False))  # a v6e-8
    assert ring_links(V5E, group_span(V5E, 8)) == 2
    assert ring_links(V5E, group_span(V5E, 256)) == 4  # the 16x16 pod wraps both ways
    assert group_span(V5E, 16, stride=1, slice_chips=128) == (AxisSpan(chips=16, ring=True),)  # 8x16: the 16 axis


def test_not_a_torus_or_not_a_standard_slice_is_left_to_the_port_count():
    switch = Link(name="nvlink", kind="chip_to_chip", bandwidth_bytes_per_s_per_direction=450e9, topology="switch")
    assert group_span(switch, 8) is None
    assert group_span(V5P, 6, stride=1, slice_chips=96) is None
    assert group_span(V5P, 1) is None


def test_steps_are_chips_minus_one_per_axis():
    assert span_steps((AxisSpan(chips=4, ring=True), AxisSpan(chips=4, ring=True))) == 2 * (4 - 1)


def device(link: Link) -> Hardware:
    dram = MemoryLevel(name="dram", kind="dram", managed="hardware", capacity_bytes=16e9, instances=1,
                       bandwidth_bytes_per_s=1e12)
    vpu = ComputeEngine(name="vpu", kind="vector", units=1, peak_flops_per_s={"bf16": 10e12})
    return Hardware(name="torus", family="tpu", vendor="test", description="a torus of round numbers",
                    compute={"vpu": vpu},
                    memory=(dram,), links={link.name: link},
                    scheduling=Scheduling(default_mode="graph", modes={"graph": ExecutionMode(name="graph")}),
                    power=Power(tdp_watts=100.0))


def gather(link: Link, **placement) -> float:
    payload = 2048 * 8192 * 2  # bf16[2048, 8192]
    op = Op(name="ag", kind="collective", attrs={"collective": "all_gather", "bytes": payload, "group_size": 4,
                                                  "dtype": "bf16", **placement})
    cost = op_cost(op, CostContext(hardware=device(link)))
    return cost.link_bytes / link.bandwidth_bytes_per_s_per_direction + cost.link_latency_s


def test_scaling_book_pop_quiz_all_gather_over_an_unwrapped_axis_of_4():
    # Y (4 chips, the inner axis) of an 8x4 v5e mesh: a line, so the edge chip takes 3 shards of 8.4 MB one way
    assert gather(V5E, stride=1, slice_chips=32) == pytest.approx(3 * 8 * 1024 * 1024 / 45e9 + 3e-6, rel=1e-12)
    assert gather(V5E, stride=1, slice_chips=32) == pytest.approx(560e-6, rel=0.01)
    # the same axis if it wrapped: both directions, half the time on the wire (the book's 377 us bidirectional)
    assert gather(EVERY_AXIS_WRAPS, stride=1, slice_chips=32) == pytest.approx(3 * 8 * 1024 * 1024 / 90e9 + 3e-6,
                                                                               rel=1e-12)


def test_wraparound_never_makes_a_collective_slower():
    for group, stride, chips in ((4, 1, 32), (8, 1, 8), (16, 1, 128), (16, 16, 256), (256, 1, 256)):
        spans_wrapped = group_span(EVERY_AXIS_WRAPS, group, stride, chips)
        spans_v5e = group_span(V5E, group, stride, chips)
        assert ring_links(EVERY_AXIS_WRAPS, spans_wrapped) >= ring_links(V5E, spans_v5e)


SPEC = """\
schema_version: 1
name: tiny
family: tpu
vendor: Test
description: a minimal spec with a link
sources:
  sheet: {url: https://example.com/sheet, kind: datasheet}
compute:
  mxu: {kind: matrix, units: 4, peak: {bf16: 100 TFLOP/s}, source: sheet}
memory:
  hbm: {kind: dram, managed: hardware, capacity: 16 GB, bandwidth: 1 TB/s, source: sheet}
links:
  ici: {kind: chip_to_chip, bandwidth_per_direction: 50 GB/s, links_per_chip: 4, topology: TOPOLOGY, WRAP source: sheet}
scheduling:
  default_mode: graph
  modes:
    graph: {program_launch: 5 us, source: sheet}
power: {tdp: 300 W, source: sheet}
"""


def test_wraparound_loads_onto_the_link(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC.replace("TOPOLOGY", "torus3d").replace("WRAP", "wraparound: 4, wraparound_whole_slice: true,"))
    link = load_hardware(path).links["ici"]
    assert (link.wraparound_chips, link.wraparound_whole_slice) == (4, True)


@pytest.mark.parametrize(("topology", "wrap", "message"), [
    ("switch", "wraparound: 16,", "wraparound describes the rings of a torus; topology 'switch' has none"),
    ("torus3d", "wraparound_whole_slice: true,", "wraparound_whole_slice needs wraparound")])
def test_wraparound_errors(tmp_path, topology, wrap, message):
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC.replace("TOPOLOGY", topology).replace("WRAP", wrap))
    with pytest.raises(SpecError, match=message):
        load_hardware(path)
