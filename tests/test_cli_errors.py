"""No traceback on any input: bad input exits 2 with a clear error; a bug exits 70 with one paragraph
(the traceback only with --debug); mutated shipped workloads never crash the command line."""

from __future__ import annotations

import random

import pytest

from perfmodel.cli import INTERNAL_ERROR, main
from perfmodel.paths import data_directory

CASES_PER_WORKLOAD = 40
TOKENS = ["", "0", "-1", "3.5", "nan", "1e400", "[1, 2]", "{a: 1}", "~", "true", "'x'", "bf17", "matmul",
          "-7", "1.5", "9999999999999999999999", "!!python/name:os.system", "&a x", "*missing", "[", "'unterminated"]


def test_an_internal_error_is_one_paragraph_and_exit_70(monkeypatch, capsys):
    from perfmodel.cli import predict_command

    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(predict_command, "_predict", broken)
    assert main(["predict", "elementwise_chain", "--on", "h100-sxm"]) == INTERNAL_ERROR == 70
    error = capsys.readouterr().err
    assert "internal error: ZeroDivisionError: division by zero" in error and "--debug" in error
    assert "Traceback" not in error
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "predict", "elementwise_chain", "--on", "h100-sxm"])


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    index = rng.randrange(len(lines))
    operation = rng.randrange(6)
    if operation == 0:
        del lines[index]
    elif operation == 1 and ":" in lines[index]:
        key, _, _ = lines[index].partition(":")
        lines[index] = f"{key}: {rng.choice(TOKENS)}"
    elif operation == 2 and "[" in lines[index]:
        lines[index] = lines[index].replace("[", f"[{rng.choice(TOKENS)}, ", 1)
    elif operation == 3:
        lines.insert(index, lines[index])
    elif operation == 4:
        return text[: rng.randrange(len(text))]
    else:
        lines[index] = " " * rng.randrange(5) + lines[index].lstrip()
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", ["elementwise_chain", "transformer_block", "small_cnn", "attention_naive"])
def test_mutated_workloads_exit_0_or_2_never_crash(name, tmp_path, capsys):
    """Seeded mutations of a shipped workload file: every run either predicts (0) or reports bad input
    (2); an internal error (70) or an escaping exception fails with the mutated file attached."""
    text = (data_directory("workloads") / f"{name}.yaml").read_text(encoding="utf-8")
    rng = random.Random(name)
    outcomes = {0: 0, 2: 0}
    for case in range(CASES_PER_WORKLOAD):
        mutated = _mutate(text, rng)
        path = tmp_path / f"case{case}.yaml"
        path.write_text(mutated, encoding="utf-8")
        code = main(["predict", str(path), "--on", "h100-sxm", "--json"])
        captured = capsys.readouterr()
        assert code in outcomes, f"exit {code} on case {case}:\n{captured.err}\n--- file ---\n{mutated}"
        if code == 2:
            assert captured.err.startswith("perfmodel: error:") and "Traceback" not in captured.err
        outcomes[code] += 1
    assert outcomes[2] > 0  # the mutations do produce bad input, and it is reported
