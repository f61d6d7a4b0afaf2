"""The stored catalog of shipped specs (``perfmodel.hardware.compiled``): current, equal to a fresh load,
used only when it is current, and never needed."""

import os
import subprocess
import sys

import pytest

from perfmodel.errors import SpecError
from perfmodel.hardware import compiled, loader

REGENERATE = "the stored catalog is out of date: run `python -m perfmodel.hardware.compiled` and commit it"


def test_the_committed_catalog_is_current_and_equal_to_fresh_loads():
    payload = compiled._read(compiled.shipped_directory() / compiled.FILE_NAME)
    assert payload is not None, REGENERATE
    shipped = {name: path for name, path in loader.catalog_index().items()
               if path.resolve().is_relative_to(compiled.shipped_directory().resolve())}
    assert set(payload["specs"]) == set(shipped), REGENERATE
    for name, path in shipped.items():
        fresh = loader.full_load(path)
        stored = compiled.stored_hardware(name)
        assert stored == fresh, f"{name}: {REGENERATE}"
        assert stored.origin == fresh.origin


def test_a_catalog_name_loads_from_it_without_the_schema_or_yaml():
    code = ("import sys; from perfmodel.hardware.loader import load_for_prediction; "
            "h = load_for_prediction('h100-sxm'); "
            "print(h.name, 'pydantic' in sys.modules, 'yaml' in sys.modules)")
    environment = {key: value for key, value in os.environ.items() if key != "PERFMODEL_SPEC_PATH"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment)
    assert result.stdout.split() == ["h100-sxm-achievable", "False", "False"]


def test_loads_by_name_come_from_the_catalog_and_others_from_the_files():
    stored = compiled.stored_hardware("a100-sxm-80gb")
    assert stored is not None and loader.load_hardware("a100-sxm-80gb") is stored
    # A path, or overrides, go through the full loader (what-if sources on the overridden field).
    by_path = loader.load_hardware(loader.catalog_index()["a100-sxm-80gb"])
    assert by_path == stored and by_path is not stored
    changed = loader.load_hardware("a100-sxm-80gb", {"memory.hbm.bandwidth": "1 TB/s"})
    assert changed.memory[-1].bandwidth_bytes_per_s == pytest.approx(1e12)
    assert changed.field_sources["memory.hbm.bandwidth"] == loader.WHAT_IF_SOURCE
    assert compiled.stored_hardware("no-such-spec") is None
    with pytest.raises(SpecError):
        loader.load_hardware("no-such-spec")


@pytest.mark.parametrize("damage", ["truncated", "other digest", "not a pickle"])
def test_a_damaged_or_stale_catalog_is_not_used(tmp_path, damage):
    good = compiled.compile_catalog()
    path = tmp_path / compiled.FILE_NAME
    assert compiled._read(path) is None  # missing
    path.write_bytes(good)
    assert compiled._read(path) is not None
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "other digest":
        import pickle

        payload = pickle.loads(good)
        payload["catalog"] = "0" * 64  # as if a spec file had been edited since
        path.write_bytes(pickle.dumps({key: value for key, value in payload.items() if key != "specs"}))
    else:
        path.write_text("schema_version: 1\n")
    assert compiled._read(path) is None


def test_an_extra_spec_directory_turns_the_catalog_off(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFMODEL_SPEC_PATH", str(tmp_path))
    assert compiled.stored_hardware("h100-sxm") is None and compiled.stored_names() is None
    assert loader.load_hardware("h100-sxm").name == "h100-sxm"  # from its file


def test_the_catalog_is_compiled_from_the_files_as_they_are_now(monkeypatch):
    """A process that read the catalog and then wrote or removed spec files (``calibration.achievable
    --write``) compiles the files as they are, not its cached index (a new overlay was left out)."""
    every = loader.spec_files()
    assert "tpu-v5p-achievable" in loader.catalog_index()  # the index is cached now
    monkeypatch.setattr(loader, "spec_files", lambda: [path for path in every if path.stem != "tpu-v5p-achievable"])
    import pickle

    payload = pickle.loads(compiled.compile_catalog())
    assert "tpu-v5p-achievable" not in payload["specs"] and "tpu-v5p" in payload["specs"]
    monkeypatch.undo()
    loader.forget_spec_files()
    assert "tpu-v5p-achievable" in loader.catalog_index()
