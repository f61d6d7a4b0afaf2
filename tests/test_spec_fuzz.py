"""Malformed YAML made by mutating the real specs never raises anything but SpecError."""

import random

import pytest

from perfmodel.errors import SpecError
from perfmodel.hardware.loader import load_hardware, spec_files
from tests.fuzzing import mutate_lines

CASES_PER_SPEC = 25
TOKENS = ["", "0", "-1 GB", "3.35", "nan", "1e400 TB/s", "!!python/name:os.system", "[", "{a: 1}", "- x",
          "~", "true", "80 GB", "4 us", "&anchor x", "*missing", "'unterminated", "<<: {}", "\t", "12 TFLOPs"]


@pytest.mark.parametrize("spec", spec_files(), ids=lambda p: p.stem)
def test_mutated_specs_raise_only_spec_errors(spec, tmp_path):
    rng = random.Random(spec.stem)
    original = spec.read_text()
    outcomes = {"loaded": 0, "spec_error": 0}
    for case in range(CASES_PER_SPEC):
        text = original
        for _ in range(rng.randrange(1, 4)):
            text = mutate_lines(text, rng, TOKENS)
        path = tmp_path / f"case{case}.yaml"
        path.write_text(text)
        try:
            load_hardware(path)
            outcomes["loaded"] += 1
        except SpecError as error:
            outcomes["spec_error"] += 1
            assert error.problems and all(problem.message for problem in error.problems)
            assert str(path) in str(error) or any(p.file != str(path) for p in error.problems)
    assert outcomes["spec_error"] > 0  # the mutations do break specs
