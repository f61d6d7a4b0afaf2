"""Rewrite the README's generated blocks with what the commands print today.

tests/test_readme.py and tests/test_serving.py::test_readme_example_is_current check these blocks; run
`python .ci/regen_readme.py` after a change that moves a printed figure, then review `git diff README.md`.
"""

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfmodel.cli import main  # noqa: E402

README = ROOT / "README.md"


def _printed(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    if code != 0:
        raise SystemExit(f"`perfmodel {' '.join(argv)}` exited {code}")
    return out.getvalue()


def _replace_block(text: str, marker: str, body: str) -> str:
    start = text.index(marker)
    fence = text.index("```\n", start) + len("```\n")
    end = text.index("```", fence)
    return text[:fence] + body + text[end:]


def _block(text: str, marker: str) -> str:
    start = text.index(marker)
    fence = text.index("```\n", start) + len("```\n")
    return text[fence:text.index("```", fence)]


def _summary(printed: str, old_block: str) -> str:
    summary = printed[printed.index("\nparameters:") + 1:]
    lines = [line for line in summary.splitlines() if line and not line.startswith("skipped")]
    kept = [line for line in old_block.splitlines() if not line.startswith("skipped")]
    return "\n".join(lines[:max(len(kept), 1)]) + "\n"


def regenerate(text: str) -> str:
    size = ["size", "--model", "llama-3.1-70b", "--ttft", "500ms", "--tpot", "50ms", "--rate", "10/s", "--prompt",
            "1024", "--gen", "256"]
    text = _replace_block(text, "`perfmodel " + " ".join(size) + "`", _printed(size))
    validate = _printed(["validate"])
    marker = "Summary of the current run:"
    text = _replace_block(text, marker, _summary(validate, _block(text, marker)))
    text = _replace_block(text, "<details><summary>Every predicted row</summary>",
                          validate[:validate.index("\n\nparameters:")] + "\n")
    marker = "With `--ideal` (datasheet everywhere):"
    text = _replace_block(text, marker, _summary(_printed(["validate", "--ideal"]), _block(text, marker)))
    text = _replace_block(text, "`perfmodel specs compare` on the bundled specs",
                          _printed(["specs", "compare"]).strip() + "\n")
    predict = ["predict", "transformer_block", "--on",
               "h100-sxm,tpu-v5e,cerebras-wse-3,groq-lpu-v1,ibm-spyre,epyc-zen4-2vcpu", "--ideal"]
    printed = _printed(predict)
    text = _replace_block(text, "`perfmodel predict transformer_block --on h100-sxm,tpu-v5e,cerebras-wse-3,"
                          "groq-lpu-v1,ibm-spyre,", printed[printed.rindex("\nspec ") + 1:])
    for train in (["train", "--model", "llama-2-7b", "--on", "h100-sxm", "--chips", "8", "--global-batch", "64",
                   "--seq", "4096", "--recompute", "selective"],
                  ["train", "--model", "llama-3.1-70b", "--on", "h100-sxm", "--chips", "64", "--global-batch", "256",
                   "--seq", "4096", "--search", "--recompute", "selective"]):
        text = _replace_block(text, "`perfmodel " + " ".join(train) + "`:", _printed(train))
    serve = ["serve", "--model", "llama-2-7b", "--on", "h100-sxm", "--rate", "4/s", "--requests", "200",
             "--ttft-slo", "1s", "--tpot-slo", "50ms"]
    text = _replace_block(text, "`perfmodel " + " ".join(serve) + "`\n(", _printed(serve))
    return text


if __name__ == "__main__":
    new = regenerate(README.read_text(encoding="utf-8"))
    fd, tmp = tempfile.mkstemp(dir=README.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(new)
    os.replace(tmp, README)
    print("README.md regenerated; review `git diff README.md`")
