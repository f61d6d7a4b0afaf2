"""Malformed YAML made by mutating the real specs never raises anything but SpecError."""

import random

import pytest

from perfmodel.errors import SpecError
from perfmodel.hardware.loader import load_hardware, spec_files

CASES_PER_SPEC = 25
TOKENS = ["", "0", "-1 GB", "3.35", "nan", "1e400 TB/s", "!!python/name:os.system", "[", "{a: 1}", "- x",
          "~", "true", "80 GB", "4 us", "&anchor x", "*missing", "'unterminated", "<<: {}", "\t", "12 TFLOPs"]


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    index = rng.randrange(len(lines))
    operation = rng.randrange(8)
    if operation == 0:
        del lines[index]
    elif operation == 1:
        lines.insert(index, lines[index])
    elif operation == 2 and ":" in lines[index]:
        key, _, _ = lines[index].partition(":")
        lines[index] = f"{key}: {rng.choice(TOKENS)}"
    elif operation == 3:
        lines[index] = " " * rng.randrange(6) + lines[index].lstrip()
    elif operation == 4:
        return text[: rng.randrange(len(text))]
    elif operation == 5:
        lines.insert(index, " " * rng.randrange(6) + f"{rng.choice(['extra', 'source', 'peak', 'modes'])}: "
                     f"{rng.choice(TOKENS)}")
    elif operation == 6:
        lines[index] = lines[index].replace("GB", rng.choice(["GiB", "Gb", "KB", "GHz", ""]))
    else:
        lines[index] = lines[index].replace(":", rng.choice(["", "::", ": :"]), 1)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("spec", spec_files(), ids=lambda p: p.stem)
def test_mutated_specs_raise_only_spec_errors(spec, tmp_path):
    rng = random.Random(spec.stem)
    original = spec.read_text()
    outcomes = {"loaded": 0, "spec_error": 0}
    for case in range(CASES_PER_SPEC):
        text = original
        for _ in range(rng.randrange(1, 4)):
            text = _mutate(text, rng)
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
