"""The README's printed figures are what the commands print today (regenerate the README when a
test here fails: each block names the command that produced it)."""

import re
from pathlib import Path

import pytest

from perfmodel.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def _block_after(marker: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(marker)
    fence = text.index("```\n", start) + len("```\n")
    return text[fence:text.index("```", fence)]


def _run(argv, capsys) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def test_size_table(capsys):
    marker = "`perfmodel size --model llama-3.1-70b --ttft 500ms --tpot 50ms --rate 10/s --prompt 1024 --gen 256`"
    argv = ["size", "--model", "llama-3.1-70b", "--ttft", "500ms", "--tpot", "50ms", "--rate", "10/s", "--prompt",
            "1024", "--gen", "256"]
    assert _run(argv, capsys) == _block_after(marker)


@pytest.mark.parametrize(("marker", "extra"), [("Summary of the current run:", []),
                                               ("With `--ideal` (datasheet everywhere):", ["--ideal"])])
def test_validation_summaries(marker, extra, capsys):
    printed = _run(["validate", *extra], capsys)
    summary = printed[printed.index("\nparameters:") + 1:]
    block = _block_after(marker)
    # The README keeps the summary lines; the per-reason list of skipped rows is shown only in full.
    wanted = [line for line in block.splitlines() if not line.startswith("skipped")]
    assert wanted == [line for line in summary.splitlines() if line and not line.startswith("skipped")][:len(wanted)]


def test_every_predicted_row(capsys):
    printed = _run(["validate"], capsys)
    table = printed[:printed.index("\n\nparameters:")]
    assert table + "\n" == _block_after("<details><summary>Every predicted row</summary>")


def test_specs_compare_table(capsys):
    printed = _run(["specs", "compare"], capsys)
    block = _block_after("`perfmodel specs compare` on the bundled specs")
    assert re.sub(r"\s+\n", "\n", printed.strip()) == re.sub(r"\s+\n", "\n", block.strip())


def test_predict_summary_on_the_bundled_specs(capsys):
    argv = ["predict", "transformer_block", "--on", "h100-sxm,tpu-v5e,cerebras-wse-3,groq-lpu-v1,ibm-spyre,"
            "epyc-zen4-2vcpu", "--ideal"]
    printed = _run(argv, capsys)
    marker = "`perfmodel predict transformer_block --on h100-sxm,tpu-v5e,cerebras-wse-3,groq-lpu-v1,ibm-spyre,"
    assert printed[printed.rindex("\nspec ") + 1:] == _block_after(marker)


@pytest.mark.parametrize("argv", [
    ["train", "--model", "llama-2-7b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "64", "--seq", "4096",
     "--recompute", "selective"],
    ["train", "--model", "llama-3.1-70b", "--on", "h100-sxm", "--chips", "64", "--global-batch", "256", "--seq", "4096",
     "--search", "--recompute", "selective"],
])
def test_train_examples(argv, capsys):
    marker = "`perfmodel " + " ".join(argv) + "`:"
    assert _run(argv, capsys) == _block_after(marker)
