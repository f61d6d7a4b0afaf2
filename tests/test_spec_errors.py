"""Golden error messages: every kind of spec mistake names file, line, dotted field and what is allowed."""

import textwrap

import pytest

from perfmodel.errors import SpecError
from perfmodel.hardware.loader import load_hardware, validate_spec_file

VALID = """\
schema_version: 1
name: tiny
family: gpu
vendor: Test
description: a minimal valid spec
sources:
  sheet: {url: https://example.com/sheet, kind: datasheet}
compute:
  mma:
    kind: matrix
    units: 4
    peak: {bf16: 100 TFLOP/s}
    source: sheet
memory:
  hbm:
    kind: dram
    managed: hardware
    capacity: 16 GB
    bandwidth: 1 TB/s
    source: sheet
scheduling:
  default_mode: dynamic
  modes:
    dynamic: {kernel_launch: 5 us, source: sheet}
power: {tdp: 300 W, source: sheet}
"""


def write(tmp_path, text, name="tiny.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems_of(tmp_path, text):
    path = write(tmp_path, text)
    return [f"{p.line}|{p.field}|{p.message}" for p in validate_spec_file(path)]


def test_the_valid_base_loads(tmp_path):
    hardware = load_hardware(write(tmp_path, VALID))
    assert hardware.level("hbm").bandwidth_bytes_per_s == 1e12


def test_unknown_key(tmp_path):
    text = VALID.replace("    bandwidth: 1 TB/s\n", "    bandwidth: 1 TB/s\n    bandwith: 2 TB/s\n")
    assert problems_of(tmp_path, text) == [
        "20|memory.hbm.bandwith|unknown key; check the spelling against hardware_specs/README.md"]


def test_duplicate_key(tmp_path):
    text = VALID.replace("    capacity: 16 GB\n", "    capacity: 16 GB\n    capacity: 32 GB\n")
    assert problems_of(tmp_path, text) == [
        "19|memory.hbm.capacity|duplicate key 'capacity' (first at line 18); keep one of them"]


def test_bare_number(tmp_path):
    text = VALID.replace("bandwidth: 1 TB/s", "bandwidth: 1000000000000.0")
    assert problems_of(tmp_path, text) == [
        "19|memory.hbm.bandwidth|bare number 1000000000000.0 has no unit: expected a bandwidth with a unit, "
        "for example '3.35 TB/s'"]


def test_wrong_dimension(tmp_path):
    text = VALID.replace("tdp: 300 W", "tdp: 300 GB")
    assert problems_of(tmp_path, text) == [
        "25|power.tdp|'300 GB' is a data size, but a power with a unit, for example '700 W' is expected"]


def test_missing_source(tmp_path):
    text = VALID.replace("    bandwidth: 1 TB/s\n    source: sheet\n", "    bandwidth: 1 TB/s\n")
    assert problems_of(tmp_path, text) == ["15|memory.hbm.source|required field is missing"]


def test_undefined_source_id(tmp_path):
    text = VALID.replace("power: {tdp: 300 W, source: sheet}", "power: {tdp: 300 W, source: shet}")
    assert problems_of(tmp_path, text) == [
        "25|power.source|source 'shet' is not defined in the top-level 'sources' table (defined: sheet)"]


@pytest.mark.parametrize("bad", ["0 TB/s", "-1 TB/s"])
def test_zero_or_negative_rate(tmp_path, bad):
    text = VALID.replace("bandwidth: 1 TB/s", f"bandwidth: {bad}")
    [problem] = problems_of(tmp_path, text)
    assert problem.startswith("19|memory.hbm.bandwidth|must be more than zero")


def test_zero_capacity(tmp_path):
    [problem] = problems_of(tmp_path, VALID.replace("capacity: 16 GB", "capacity: 0 GB"))
    assert problem.startswith("18|memory.hbm.capacity|must be more than zero")


def test_python_tag_is_refused(tmp_path):
    text = VALID.replace("vendor: Test", "vendor: !!python/object/apply:os.system ['echo hi']")
    problems = problems_of(tmp_path, text)
    assert problems[0].startswith("4|vendor|tag 'tag:yaml.org,2002:python/object/apply:os.system' is not allowed")


def test_yaml_syntax_error_has_a_line(tmp_path):
    text = VALID.replace("  mma:\n", "  mma:\n   - [unclosed\n")
    [problem] = problems_of(tmp_path, text)
    assert problem.split("|")[1] == "" and "not valid YAML" in problem
    assert problem.split("|")[0].isdigit()


def test_wrong_schema_version_and_enum(tmp_path):
    text = VALID.replace("schema_version: 1", "schema_version: 2").replace("kind: matrix", "kind: systolic")
    assert problems_of(tmp_path, text) == [
        "1|schema_version|must be 1 (the schema this perfmodel reads)",
        "10|compute.mma.kind|Input should be 'matrix', 'vector' or 'scalar'"]


def test_many_problems_reported_at_once_with_file_and_line(tmp_path):
    text = (VALID.replace("bandwidth: 1 TB/s", "bandwidth: 1")
                 .replace("tdp: 300 W", "tdp: 300 GB")
                 .replace("units: 4", "units: 4\n    colour: red"))
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as error:
        load_hardware(path)
    message = str(error.value)
    assert message.startswith("3 problems in hardware spec:")
    assert f"{path}:12: compute.mma.colour: unknown key" in message
    assert f"{path}:20: memory.hbm.bandwidth: bare number 1" in message
    assert f"{path}:26: power.tdp: '300 GB' is a data size" in message


def test_extends_resolves_catalog_names_and_files_beside(tmp_path):
    write(tmp_path, VALID, "base.yaml")
    child = write(tmp_path, """\
        schema_version: 1
        name: child
        extends: base.yaml
        family: gpu
        vendor: Test
        description: base with more bandwidth
        memory:
          hbm: {bandwidth: 2 TB/s, source: sheet}
        """, "child.yaml")
    hardware = load_hardware(child)
    assert hardware.level("hbm").bandwidth_bytes_per_s == 2e12
    assert hardware.level("hbm").capacity_bytes == 16e9
    catalog_child = write(tmp_path, "schema_version: 1\nname: h100-fast\nextends: h100-sxm\nfamily: gpu\n"
                                    "vendor: NVIDIA\ndescription: what-if\n", "fast.yaml")
    assert load_hardware(catalog_child).peak_flops_per_s("bf16") == 989.4e12


def test_extends_outside_the_directory_is_refused(tmp_path):
    path = write(tmp_path, VALID.replace("name: tiny\n", "name: tiny\nextends: ../etc/passwd\n"))
    [problem] = validate_spec_file(path)
    assert problem.field == "extends" and problem.line == 3
    assert "must name a catalog spec" in problem.message and "same directory" in problem.message


def test_extends_cycle(tmp_path):
    write(tmp_path, VALID.replace("name: tiny\n", "name: a\nextends: b.yaml\n"), "a.yaml")
    path = write(tmp_path, VALID.replace("name: tiny\n", "name: b\nextends: a.yaml\n"), "b.yaml")
    messages = [problem.message for problem in validate_spec_file(path)]
    assert any("extends cycle: b.yaml -> a.yaml -> b.yaml" in message for message in messages)


def test_field_sources_must_name_real_fields(tmp_path):
    text = VALID.replace("power: {tdp: 300 W, source: sheet}",
                         "power: {tdp: 300 W, source: sheet, field_sources: {tpd: sheet}}")
    [problem] = problems_of(tmp_path, text)
    assert "field_sources names ['tpd'], which are not numeric fields" in problem


def test_inner_level_slower_than_the_level_behind_it(tmp_path):
    l2 = "  l2:\n    kind: cache\n    managed: hardware\n    capacity: 8 MiB\n    bandwidth: 500 GB/s\n    source: sheet\n"
    text = VALID.replace("memory:\n", "memory:\n" + l2)
    assert problems_of(tmp_path, text) == [
        "19|memory.l2.bandwidth|500 GB/s is less than the bandwidth of the level behind it, memory.hbm (1 TB/s); "
        "memory is listed innermost first and an inner level must not be slower than the on-device level behind "
        "it. Fix the figure (or the order of the levels), or, if this level really is slower, say why with "
        "'slower_than_outer: \"reason\"' on memory.l2"]
    excused = text.replace("bandwidth: 500 GB/s\n", "bandwidth: 500 GB/s\n    slower_than_outer: measured, see sheet\n")
    assert problems_of(tmp_path, excused) == []


def test_field_sources_may_name_a_group_of_fields(tmp_path):
    text = VALID.replace("    peak: {bf16: 100 TFLOP/s}\n", "    peak: {bf16: 100 TFLOP/s}\n    tile: {m: 8, n: 8, k: 8}\n"
                         "    field_sources: {tile: sheet, tiel: sheet}\n")
    [problem] = problems_of(tmp_path, text)
    assert "field_sources names ['tiel'], which are not numeric fields (or groups of them)" in problem


def test_empty_file_and_non_mapping(tmp_path):
    assert problems_of(tmp_path, "") == ["1||the file is empty"]
    assert problems_of(tmp_path, "- a\n- b\n") == ["1||a spec must be a YAML mapping"]


def test_unknown_override_path():
    with pytest.raises(SpecError, match="memory.hmb.bandwidth: no such field"):
        load_hardware("h100-sxm", overrides={"memory.hmb.bandwidth": "6 TB/s"})
