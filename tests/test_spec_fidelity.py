"""The shipped specs say what the hardware is: binary capacities, sourced per-step link latencies, the
memory order rule, matmul kernel candidates, and what-if capacity changes that move the usable share."""


import pytest

from perfmodel.errors import SpecError
from perfmodel.hardware.loader import catalog, load_hardware, validate_spec_file
from tests.test_spec_errors import write

GIB = 2**30
MIB = 2**20


def alternatives_of(hardware):
    return {alternative.field: alternative for alternative in hardware.alternatives}


# --- capacities are what the device reports, not the decimal reading of the product figure ------------

@pytest.mark.parametrize("name, level, expected, product_bytes", [
    ("a100-sxm-80gb", "hbm", 80 * GIB, 80e9),
    ("h100-sxm", "hbm", 81559 * MIB, 80e9),
    ("h200-sxm", "hbm", 143771 * MIB, 141e9),
    ("b200", "hbm", 183359 * MIB, 180e9),
    ("mi300x", "hbm", 206141652992, 192e9),
    ("tpu-v5e", "hbm", 16 * GIB, 16e9),
    ("tpu-v6e", "hbm", 32 * GIB, 32e9),
])
def test_hbm_capacities_are_binary(name, level, expected, product_bytes):
    hardware = load_hardware(name)
    capacity = hardware.level(level).capacity_bytes
    assert capacity == expected
    assert capacity > 1.05 * product_bytes  # the decimal reading was ~7% too little memory
    assert hardware.source_of(f"memory.{level}.capacity").url.startswith("https://")
    alternative = alternatives_of(hardware)[f"memory.{level}.capacity"]
    assert alternative.others and alternative.reason


# --- B200 -------------------------------------------------------------------------------------------

def test_b200_l2_is_not_slower_than_its_hbm():
    b200 = load_hardware("b200")
    assert b200.level("l2").bandwidth_bytes_per_s >= b200.level("hbm").bandwidth_bytes_per_s
    assert b200.source_of("memory.l2.bandwidth").kind == "estimate"


def test_b200_hbm_is_7_7_tb_per_s_and_8_is_recorded():
    b200 = load_hardware("b200")
    assert b200.level("hbm").bandwidth_bytes_per_s == 7.7e12
    assert b200.source_of("memory.hbm.bandwidth").kind == "measured"
    others = [value for value, _source in alternatives_of(b200)["memory.hbm.bandwidth"].others]
    assert "8 TB/s" in others


def test_b200_host_link_is_pcie_gen5():
    b200 = load_hardware("b200")
    assert b200.links["pcie"].bandwidth_bytes_per_s_per_direction == 64e9  # Gen5 x16, not Gen6
    assert "Gen5" in b200.source_of("links.pcie.bandwidth_per_direction").note


# --- link latencies are per step, and sourced ----------------------------------------------------------

@pytest.mark.parametrize("name, link", [("a100-sxm-80gb", "nvlink"), ("h100-sxm", "nvlink"), ("h200-sxm", "nvlink"),
                                        ("b200", "nvlink"), ("mi300x", "xgmi")])
def test_gpu_link_latency_is_a_sourced_per_step_figure(name, link):
    hardware = load_hardware(name)
    latency = hardware.links[link].latency_s
    assert latency is not None and 0.5e-6 <= latency <= 3e-6  # a step, not a whole small all-reduce (6-10 us)
    source = hardware.source_of(f"links.{link}.latency")
    assert source.kind == "vendor-code" and "step" in source.note


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "h100-sxm", "b200"])
def test_the_whole_small_all_reduce_figure_is_kept_as_an_alternative(name):
    hardware = load_hardware(name)
    others = alternatives_of(hardware)["links.nvlink.latency"].others
    assert ("8 us", "nccl-small") in others
    assert "all-reduce" in hardware.sources["nccl-small"].note


def test_groq_has_node_local_and_global_links_with_per_hop_latency():
    groq = load_hardware("groq-lpu-v1")
    local, global_ = groq.links["c2c_local"], groq.links["c2c_global"]
    assert (local.links_per_chip, local.topology, local.max_chips) == (7, "fully_connected", 8)
    assert (global_.links_per_chip, global_.topology, global_.max_chips) == (4, "dragonfly", 10440)
    assert local.latency_s < 3e-6 and global_.latency_s < 3e-6  # < 3 us is end to end, not per hop
    assert groq.source_of("links.c2c_local.latency").kind == "estimate"
    assert ("3 us", "isca2022") in alternatives_of(groq)["links.c2c_local.latency"].others


# --- memory levels -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, mib, cores", [("tpu-v4", 16, 2), ("tpu-v5p", 64, 2), ("tpu-v5e", 128, 1),
                                               ("tpu-v6e", 128, 1)])
def test_tpu_vmem_is_per_tensorcore(name, mib, cores):
    vmem = load_hardware(name).level("vmem")
    assert (vmem.capacity_bytes, vmem.instances) == (mib * MIB, cores)
    assert load_hardware(name).source_of("memory.vmem.capacity").url.endswith("jax/_src/tpu_info.py")


def test_cerebras_cs2_memoryx_starts_at_4_tb():
    wse2 = load_hardware("cerebras-wse-2")
    assert wse2.level("memoryx").capacity_bytes == 4e12
    others = [value for value, _source in alternatives_of(wse2)["memory.memoryx.capacity"].others]
    assert "2.4 PB" in others


def test_spyre_keeps_the_lpddr_peak_and_records_the_measured_rate():
    spyre = load_hardware("ibm-spyre")
    assert spyre.level("lpddr5").bandwidth_bytes_per_s == 204.8e9
    others = dict(alternatives_of(spyre)["memory.lpddr5.bandwidth"].others)
    assert spyre.sources[others["107 GB/s"]].kind == "dev-measured"


@pytest.mark.parametrize("name", [entry.name for entry in catalog()])
def test_every_inner_level_is_at_least_as_fast_as_the_one_behind_it(name):
    on_device = [level for level in load_hardware(name).memory if not level.off_device]
    for inner, outer in zip(on_device, on_device[1:], strict=False):
        assert inner.bandwidth_bytes_per_s >= outer.bandwidth_bytes_per_s, (inner.name, outer.name)


# --- the memory order rule -----------------------------------------------------------------------------

TWO_LEVELS = """\
schema_version: 1
name: tiny
family: gpu
vendor: Test
description: a spec with a cache in front of its DRAM
sources:
  sheet: {url: https://example.com/sheet, kind: datasheet}
compute:
  mma:
    kind: matrix
    units: 4
    peak: {bf16: 100 TFLOP/s}
    source: sheet
memory:
  l2:
    kind: cache
    managed: hardware
    capacity: 8 MiB
    bandwidth: L2_BANDWIDTH
    source: sheet
  hbm:
    kind: dram
    managed: hardware
    capacity: 16 GiB
    bandwidth: 2 TB/s
    source: sheet
  store:
    kind: external
    managed: software
    capacity: 1 TB
    bandwidth: 100 GB/s
    off_device: true
    source: sheet
scheduling:
  default_mode: dynamic
  modes:
    dynamic: {kernel_launch: 5 us, source: sheet}
power: {tdp: 300 W, source: sheet}
"""


def test_an_inner_level_slower_than_the_level_behind_it_is_an_error(tmp_path):
    path = write(tmp_path, TWO_LEVELS.replace("L2_BANDWIDTH", "1 TB/s"))
    [problem] = validate_spec_file(path)
    assert (problem.file, problem.line, problem.field) == (str(path), 19, "memory.l2.bandwidth")
    assert "less than the bandwidth of the level behind it, memory.hbm (2 TB/s)" in problem.message
    assert "slower_than_outer" in problem.message
    with pytest.raises(SpecError) as error:
        load_hardware(path)
    assert f"{path}:19: memory.l2.bandwidth: 1 TB/s is less than" in str(error.value)


def test_the_override_field_accepts_a_slower_level_that_says_why(tmp_path):
    text = TWO_LEVELS.replace("L2_BANDWIDTH", "1 TB/s").replace(
        "    bandwidth: 1 TB/s\n", "    bandwidth: 1 TB/s\n    slower_than_outer: a narrow cache, measured (source x)\n")
    hardware = load_hardware(write(tmp_path, text))
    assert hardware.level("l2").bandwidth_bytes_per_s < hardware.level("hbm").bandwidth_bytes_per_s


def test_a_stale_override_is_an_error(tmp_path):
    text = TWO_LEVELS.replace("L2_BANDWIDTH", "4 TB/s").replace(
        "    bandwidth: 4 TB/s\n", "    bandwidth: 4 TB/s\n    slower_than_outer: no longer true\n")
    [problem] = validate_spec_file(write(tmp_path, text))
    assert (problem.line, problem.field) == (20, "memory.l2.slower_than_outer")
    assert "remove slower_than_outer" in problem.message


def test_off_device_levels_are_not_compared_and_equal_bandwidth_is_fine(tmp_path):
    hardware = load_hardware(write(tmp_path, TWO_LEVELS.replace("L2_BANDWIDTH", "2 TB/s")))
    assert hardware.level("store").bandwidth_bytes_per_s < hardware.level("hbm").bandwidth_bytes_per_s


def test_what_if_bandwidths_are_exempt_from_the_rule():
    faster = load_hardware("h100-sxm", overrides={"memory.hbm.bandwidth": "16 TB/s"})  # above its 11.2 TB/s L2
    assert faster.level("hbm").bandwidth_bytes_per_s > faster.level("l2").bandwidth_bytes_per_s


# --- kernel candidates and kernel fixed time -----------------------------------------------------------

KERNELS = """\
schema_version: 1
name: tiny
family: gpu
vendor: Test
description: an engine with kernel candidates
sources:
  sheet: {url: https://example.com/sheet, kind: datasheet}
  tiles: {url: https://example.com/tiles, kind: vendor-code}
  mma: {url: https://example.com/mma, kind: datasheet}
  fixed: {url: https://example.com/fixed, kind: measured}
compute:
  mma:
    kind: matrix
    units: 4
    peak: {bf16: 100 TFLOP/s}
    tile: {m: 128, n: 128, k: 64}
    kernels:
      small_m: {m: 16, n: 128, k: 64}
      big: {m: 256, n: 128, k: 64, split_k: false}
    kernel_fixed_time: FIXED
    source: sheet
    field_sources: {kernels: tiles, kernels.small_m.m: mma, kernel_fixed_time: fixed}
memory:
  hbm:
    kind: dram
    managed: hardware
    capacity: 16 GiB
    bandwidth: 1 TB/s
    source: sheet
scheduling:
  default_mode: dynamic
  modes:
    dynamic: {kernel_launch: 5 us, source: sheet}
power: {tdp: 300 W, source: sheet}
"""


def test_kernels_and_fixed_time_reach_the_record_with_their_sources(tmp_path):
    hardware = load_hardware(write(tmp_path, KERNELS.replace("FIXED", "1.5 us")))
    engine = hardware.compute["mma"]
    assert [(k.name, k.m, k.n, k.k, k.split_k) for k in engine.kernels] == [
        ("small_m", 16, 128, 64, True), ("big", 256, 128, 64, False)]
    assert engine.kernel_candidates == engine.kernels
    assert engine.kernel_fixed_s == pytest.approx(1.5e-6)
    assert hardware.field_sources["compute.mma.kernels.small_m.m"] == "mma"  # the most specific key wins
    assert hardware.field_sources["compute.mma.kernels.small_m.n"] == "tiles"
    assert hardware.field_sources["compute.mma.kernels.big.k"] == "tiles"
    assert hardware.field_sources["compute.mma.kernel_fixed_time"] == "fixed"
    assert hardware.field_sources["compute.mma.tile.m"] == "sheet"


def test_kernel_fixed_time_may_be_zero_but_needs_a_unit(tmp_path):
    assert load_hardware(write(tmp_path, KERNELS.replace("FIXED", "0 s"))).compute["mma"].kernel_fixed_s == 0
    [problem] = validate_spec_file(write(tmp_path, KERNELS.replace("FIXED", "2"), "bare.yaml"))
    assert (problem.line, problem.field) == (20, "compute.mma.kernel_fixed_time")
    assert problem.message.startswith("bare number 2 has no unit")
    [problem] = validate_spec_file(write(tmp_path, KERNELS.replace("FIXED", "-1 us"), "negative.yaml"))
    assert problem.field == "compute.mma.kernel_fixed_time" and "zero or more" in problem.message


def test_kernel_mistakes_are_reported_with_file_line_and_field(tmp_path):
    text = (KERNELS.replace("FIXED", "1 us").replace("big: {m: 256,", "big: {m: 0,")
            .replace("split_k: false}", "split_k: false, splitk: true}"))
    problems = {(p.line, p.field): p.message for p in validate_spec_file(write(tmp_path, text))}
    assert problems[(19, "compute.mma.kernels.big.m")].startswith("Input should be greater than 0")
    assert problems[(19, "compute.mma.kernels.big.splitk")].startswith("unknown key")


def test_field_sources_must_name_a_kernel_field_or_group(tmp_path):
    text = KERNELS.replace("FIXED", "1 us").replace("kernels.small_m.m: mma", "kernels.tiny.m: mma")
    [problem] = validate_spec_file(write(tmp_path, text))
    assert "field_sources names ['kernels.tiny.m']" in problem.message


def test_only_a_matrix_engine_has_kernels(tmp_path):
    text = KERNELS.replace("FIXED", "1 us").replace("kind: matrix", "kind: vector")
    [problem] = validate_spec_file(write(tmp_path, text))
    assert problem.field == "compute.mma" and "only a matrix engine has them" in problem.message


GPU_ENGINES = [("a100-sxm-80gb", "tensor_cores"), ("h100-sxm", "tensor_cores"), ("h200-sxm", "tensor_cores"),
               ("b200", "tensor_cores"), ("l4", "tensor_cores"), ("mi300x", "matrix_cores")]


@pytest.mark.parametrize("name, engine", GPU_ENGINES)
def test_gpus_offer_cta_tiles_and_a_small_m_kernel(name, engine):
    hardware = load_hardware(name)
    kernels = {kernel.name: kernel for kernel in hardware.compute[engine].kernels}
    assert kernels["small_m"].m == 16 and all(kernel.split_k for kernel in kernels.values())
    assert any(kernel.m >= 128 and kernel.n >= 128 for kernel in kernels.values())
    assert hardware.compute[engine].tile is not None  # the native tile stays
    assert 0 < hardware.compute[engine].kernel_fixed_s <= 5e-6
    for field in ("kernels.small_m.m", "kernel_fixed_time"):
        source = hardware.source_of(f"compute.{engine}.{field}")
        assert source.url.startswith("https://") and source.note


@pytest.mark.parametrize("name, width", [("tpu-v4", 128), ("tpu-v5e", 128), ("tpu-v5p", 128), ("tpu-v6e", 256)])
def test_tpus_offer_the_mxu_pass(name, width):
    mxu = load_hardware(name).compute["mxu"]
    # A systolic array is its own (only) kernel: the native tile, with the accumulator-capacity reuse model.
    assert mxu.kernels == () and [(k.m, k.n, k.k) for k in mxu.kernel_candidates] == [(8, width, width)]
    assert mxu.kernel_fixed_s == 0


def test_other_families_say_what_they_offer():
    assert [(k.m, k.n, k.k) for k in load_hardware("groq-lpu-v1").compute["mxm"].kernel_candidates] == [
        (1, 320, 320)]
    assert [(k.m, k.n, k.k) for k in load_hardware("ibm-spyre").compute["pt_array"].kernel_candidates] == [
        (8, 64, 64)]
    for name in ("cerebras-wse-2", "cerebras-wse-3"):
        wafer = load_hardware(name)
        assert wafer.compute["pe_array"].kernels == () and "kernel" in wafer.notes
    assert "no matrix engine" in load_hardware("epyc-zen4-2vcpu").notes


# --- what-if on a level's capacity moves its usable capacity -------------------------------------------

def test_setting_capacity_scales_the_usable_capacity():
    spyre = load_hardware("ibm-spyre")
    assert spyre.level("lx").capacity_bytes == 2e6 and spyre.level("lx").usable_capacity_bytes == 1.6e6
    four = load_hardware("ibm-spyre", {"memory.lx.capacity": "4 MB"}).level("lx")
    eight = load_hardware("ibm-spyre", {"memory.lx.capacity": "8 MB"})
    assert four.usable_capacity_bytes == pytest.approx(3.2e6)
    assert eight.level("lx").usable_capacity_bytes == pytest.approx(2 * four.usable_capacity_bytes)
    source = eight.source_of("memory.lx.usable_capacity")
    assert source.kind == "what-if" and "usable share is kept" in source.note
    assert eight.source_of("memory.lx.capacity").kind == "what-if"


def test_a_usable_capacity_set_by_the_user_wins():
    spyre = load_hardware("ibm-spyre", {"memory.lx.usable_capacity": "7 MB", "memory.lx.capacity": "8 MB"})
    assert spyre.level("lx").usable_capacity_bytes == 7e6
    assert "scaled" not in spyre.source_of("memory.lx.usable_capacity").note


def test_capacity_of_a_level_without_usable_capacity_changes_alone():
    h100 = load_hardware("h100-sxm", {"memory.hbm.capacity": "160 GiB"})
    assert h100.level("hbm").capacity_bytes == 160 * GIB and h100.level("hbm").usable_capacity_bytes is None


def test_the_capacity_what_if_changes_the_prediction():
    from perfmodel import evaluate, load_graph

    graph = load_graph("transformer_block")
    base = evaluate(graph, load_hardware("ibm-spyre")).total_s
    bigger = evaluate(graph, load_hardware("ibm-spyre", {"memory.lx.capacity": "8 MB"})).total_s
    assert bigger < base
