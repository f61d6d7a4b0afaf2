"""Every shipped spec loads, every number in it traces to a source, the catalog covers all families."""

import re

import pytest

from perfmodel.hardware.loader import catalog, load_hardware, spec_files
from perfmodel.yaml_source import read_yaml

SPEC_FILES = spec_files()
NAMES = [entry.name for entry in catalog()]


def test_catalog_has_at_least_14_devices_across_all_families():
    entries = catalog()
    assert len(entries) >= 14
    assert {entry.family for entry in entries} == {"gpu", "tpu", "wafer", "lpu", "spyre", "cpu"}
    for required in ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e",
                     "cerebras-wse-2", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre", "epyc-zen4-2vcpu"):
        assert required in NAMES


def _numeric_leaves(data, prefix=""):
    """Every (dotted path, value) in the raw YAML that is a number or a quantity string."""
    if isinstance(data, dict):
        for key, value in data.items():
            if key in ("sources", "alternatives", "field_sources", "schema_version", "notes", "description"):
                continue
            yield from _numeric_leaves(value, f"{prefix}{key}.")
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        yield prefix[:-1], data
    elif isinstance(data, str) and re.match(r"^\s*[\d.]+(e[+-]?\d+)?\s*\S+", data):
        yield prefix[:-1], data


@pytest.mark.parametrize("path", SPEC_FILES, ids=lambda p: p.stem)
def test_every_number_has_a_source(path):
    hardware = load_hardware(path)
    raw = read_yaml(path).data
    leaves = dict(_numeric_leaves(raw))
    assert leaves, "a spec without numbers?"
    for dotted in leaves:
        if dotted in ("name", "vendor", "family", "extends"):
            continue
        assert dotted in hardware.field_sources, f"{path.name}: {dotted} has no source"
        source = hardware.source_of(dotted)
        assert re.match(r"^(https?://|repo:|file://)", source.url)
        if source.kind == "estimate":
            assert len(source.note) > 20, f"{dotted}: an estimate must state its derivation"
        if source.url.startswith("repo:"):
            from perfmodel.paths import _PACKAGE
            assert (_PACKAGE.parent / source.url.removeprefix("repo:")).exists(), source.url


@pytest.mark.parametrize("name", NAMES)
def test_physical_sanity(name):
    hardware = load_hardware(name)
    assert hardware.memory, "a device needs memory"
    for inner, outer in zip(hardware.memory, hardware.memory[1:], strict=False):
        assert inner.capacity_bytes * inner.instances <= outer.capacity_bytes * outer.instances * 1.01 or outer.off_device
    assert any(engine.peak_flops_per_s for engine in hardware.compute.values())
    assert hardware.scheduling.default_mode in hardware.scheduling.modes


def test_h200_extends_h100_with_other_memory():
    h100, h200 = load_hardware("h100-sxm"), load_hardware("h200-sxm")
    assert h200.peak_flops_per_s("bf16") == h100.peak_flops_per_s("bf16") == 989.4e12
    assert h200.level("hbm").capacity_bytes == 143771 * 2**20  # nvidia-smi: 143771 MiB, not 141e9 B
    assert h200.level("hbm").bandwidth_bytes_per_s == 4.8e12
    assert h200.level("l2").capacity_bytes == h100.level("l2").capacity_bytes
    assert h200.source_of("memory.hbm.bandwidth").url.startswith("https://lzwjava")
    assert h200.source_of("compute.tensor_cores.peak.bf16").url == h100.source_of("compute.tensor_cores.peak.bf16").url


@pytest.mark.parametrize("name, field", [
    ("ibm-spyre", "compute.pt_array.peak.fp16"), ("cerebras-wse-3", "compute.pe_array.peak.fp16"),
    ("groq-lpu-v1", "memory.sram.capacity"), ("groq-lpu-v1", "compute.mxm.peak.int8")])
def test_disagreements_are_recorded(name, field):
    hardware = load_hardware(name)
    alternatives = {alternative.field: alternative for alternative in hardware.alternatives}
    assert field in alternatives and alternatives[field].reason
    for _value, source in alternatives[field].others:
        assert source in hardware.sources


def test_spyre_native_granularity_comes_from_the_spec():
    spyre = load_hardware("ibm-spyre")
    assert spyre.level("lx").transfer_granule_bytes == 128
    assert spyre.level("lx").instances == 32
    assert spyre.level("lx").usable_bytes_per_instance == 1.6e6
    assert spyre.scheduling.mode().program_launch_s == pytest.approx(3e-3)


def test_overrides_make_a_what_if_spec():
    faster = load_hardware("h100-sxm", overrides={"memory.hbm.bandwidth": "6.4 TB/s"})
    assert faster.level("hbm").bandwidth_bytes_per_s == 6.4e12
    assert faster.source_of("memory.hbm.bandwidth").kind == "what-if"
    assert load_hardware("h100-sxm").level("hbm").bandwidth_bytes_per_s == 3.35e12
