"""Named request-length datasets (workloads/lengths/): they load, keep the statistics their README
states, are chosen by side, and bad or unshipped names are clear errors (exit 2)."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel.cli import main
from perfmodel.errors import PerfmodelError
from perfmodel.paths import data_directory
from perfmodel.serving import parse_length
from perfmodel.serving.workload import LENGTH_DATASETS, LENGTH_SIDES, dataset_lengths

# The upstream data's statistics as workloads/lengths/README.md states them (mean, median), per
# dataset and side; the histograms must keep the mean to rounding and the median to within a bin.
STATED = {("sharegpt-8k", "prompt"): (2340.0, 1730), ("sharegpt-8k", "output"): (438.7, 415),
          ("arxiv-summarization-4k", "prompt"): (2588.1, 2730), ("arxiv-summarization-4k", "output"): (291.4, 167)}


def _median(distribution) -> int:
    cumulative = np.cumsum(distribution.probabilities)
    return distribution.values[int(np.searchsorted(cumulative, 0.5))]


def test_every_shipped_dataset_has_both_sides_and_a_row_in_the_readme():
    readme = (data_directory("workloads") / "lengths" / "README.md").read_text(encoding="utf-8")
    assert set(STATED) == {(name, side) for name in LENGTH_DATASETS for side in LENGTH_SIDES}
    for name in LENGTH_DATASETS:
        assert f"`{name}` (data)" in readme and f"`{name}` (histogram)" in readme


@pytest.mark.parametrize(("name", "side"), sorted(STATED))
def test_histograms_keep_the_stated_statistics(name, side):
    mean, median = STATED[(name, side)]
    distribution = dataset_lengths(name, side)
    assert distribution.kind == "empirical" and 40 <= len(distribution.values) <= 130  # compact
    assert distribution.mean == pytest.approx(mean, rel=0.002)
    assert _median(distribution) == pytest.approx(median, rel=0.07)  # one geometric bin is ~7% wide
    draws = distribution.sample(np.random.default_rng(0), 100_000)
    assert draws.mean() == pytest.approx(mean, rel=0.02)


def test_a_bare_name_takes_the_side_its_flag_names():
    assert parse_length("sharegpt-8k", "--prompt-dist") == dataset_lengths("sharegpt-8k", "prompt")
    assert parse_length("sharegpt-8k", "--output-dist") == dataset_lengths("sharegpt-8k", "output")
    assert parse_length("ShareGPT-8k:output", "--prompt-dist") == dataset_lengths("sharegpt-8k", "output")
    assert parse_length("arxiv-summarization-4k", "output").mean < parse_length("arxiv-summarization-4k",
                                                                              "prompt").mean


@pytest.mark.parametrize(("text", "says"), [
    ("openorca", "294.45"),                   # MLPerf documents no input-length statistic: not invented
    ("sharegpt", "first turn"),               # vLLM's sampling differs from the shipped sharegpt-8k
    ("sharegpt-8k:middle", "sharegpt-8k:output"),
    ("sharegtp", "sharegpt-8k, arxiv-summarization-4k"),
])
def test_bad_or_unshipped_names_are_clear_errors(text, says):
    with pytest.raises(PerfmodelError, match="--prompt-dist") as error:
        parse_length(text, "--prompt-dist")
    assert says in str(error.value)


@pytest.mark.parametrize("text", ["openorca", "sharegtp", "arxiv-summarization-4k:both"])
def test_serve_refuses_a_bad_name_with_exit_2(text, capsys):
    code = main(["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--rate", "1/s", "--requests", "5",
                 "--prompt-dist", text])
    error = capsys.readouterr().err
    assert code == 2 and "--prompt-dist" in error and "Traceback" not in error


def test_serve_runs_a_named_dataset(capsys):
    code = main(["serve", "--model", "llama-3.1-8b", "--on", "h100-sxm", "--rate", "1/s", "--requests", "20",
                 "--prompt-dist", "arxiv-summarization-4k", "--output-dist", "arxiv-summarization-4k"])
    out = capsys.readouterr().out
    assert code == 0
    assert "arxiv-summarization-4k_prompt.csv" in out and "arxiv-summarization-4k_output.csv" in out
