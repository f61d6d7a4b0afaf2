"""Rebuild the shipped request-length histograms from their upstream per-request token counts.

    python workloads/lengths/build_histograms.py NAME UPSTREAM.csv OUT_DIR [SOURCE-TEXT]

``UPSTREAM.csv`` has one request a row with ``num_prefill_tokens`` and ``num_decode_tokens`` columns
(Vidur's and Sarathi-Serve's processed traces, see README.md). Writes ``OUT_DIR/NAME_prompt.csv`` and
``OUT_DIR/NAME_output.csv``: ``value,weight`` rows, one per bin of 128 geometric bins from 1 token to the
longest, each bin's value the rounded mean of its lengths and its weight the number of requests in it
(so the histogram's mean is the data's within rounding). Prints the statistics README.md quotes.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

BINS = 128


def histogram(lengths: np.ndarray) -> list[tuple[int, int]]:
    edges = np.unique(np.rint(np.geomspace(1, lengths.max() + 1, BINS + 1)).astype(np.int64))
    index = np.searchsorted(edges, lengths, side="right") - 1
    rows: list[tuple[int, int]] = []
    for bin_index in np.unique(index):
        members = lengths[index == bin_index]
        rows.append((int(np.rint(members.mean())), int(members.size)))
    merged: dict[int, int] = {}
    for value, count in rows:
        merged[value] = merged.get(value, 0) + count
    return sorted(merged.items())


def statistics(values: np.ndarray, weights: np.ndarray | None = None) -> str:
    if weights is None:
        weights = np.ones_like(values)
    order = np.argsort(values)
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights) / weights.sum()

    def quantile(q: float) -> int:
        return int(values[np.searchsorted(cumulative, q)])

    mean = float(np.dot(values, weights) / weights.sum())
    return (f"mean {mean:.1f}, median {quantile(0.5)}, p10 {quantile(0.1)}, p90 {quantile(0.9)}, "
            f"p99 {quantile(0.99)}, max {int(values.max())}")


def main(name: str, upstream: str, out_dir: str, source: str = "") -> None:
    with open(upstream, newline="", encoding="utf-8") as stream:
        rows = list(csv.DictReader(stream))
    columns = {"prompt": "num_prefill_tokens", "output": "num_decode_tokens"}
    print(f"{name}: {len(rows)} requests")
    for side, column in columns.items():
        lengths = np.array([int(row[column]) for row in rows], dtype=np.int64)
        bins = histogram(lengths)
        path = Path(out_dir) / f"{name}_{side}.csv"
        tmp = path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as stream:
            stream.write(f"# {name} {side} tokens: {len(rows)} requests binned into {len(bins)} bins "
                         f"(workloads/lengths/README.md); {source}\n")
            writer = csv.writer(stream, lineterminator="\n")
            writer.writerow(["value", "weight"])
            writer.writerows(bins)
        tmp.replace(path)
        values = np.array([value for value, _ in bins])
        weights = np.array([weight for _, weight in bins])
        print(f"  {side}: data {statistics(lengths)}")
        print(f"  {side}: histogram {statistics(values, weights)} ({len(bins)} rows)")


if __name__ == "__main__":
    main(*sys.argv[1:])
