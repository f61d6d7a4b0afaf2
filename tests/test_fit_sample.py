"""The fit's sample of a kernel table is spread over decades of work (``calibration.aiconfigurator.sample``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibration import aiconfigurator as tables


def _gemm_grid(small: int, large: int) -> pd.DataFrame:
    """``small`` GEMM rows of 1e6-1e8 multiply-adds and ``large`` rows of 1e11-1e12 (a grid dense in small shapes)."""
    rng = np.random.default_rng(3)
    m = np.r_[rng.integers(100, 460, small), rng.integers(4096, 8192, large)]
    n = np.r_[rng.integers(100, 460, small), np.full(large, 16384)]
    k = np.r_[np.full(small, 100), np.full(large, 4096)]
    return pd.DataFrame({"m": m, "n": n, "k": k, "gemm_dtype": "bfloat16", "latency": 1.0})


def test_a_spread_sample_keeps_the_few_large_shapes_a_uniform_draw_loses():
    frame = _gemm_grid(small=990, large=10)
    large = frame.m.astype(float) * frame.n * frame.k >= 1e11
    spread = tables.sample(frame, 100, 0, ("gemm_dtype",), "gemm")
    uniform = tables.sample(frame, 100, 0, ("gemm_dtype",))
    assert large[spread.index].sum() == 10          # every large row: its decades' quota exceeds them
    assert large[uniform.index].sum() <= 4          # about 1 expected (10 of 1000)
    assert len(spread) <= 100 + tables.work_decades("gemm", frame).nunique()
    assert spread.index.equals(tables.sample(frame, 100, 0, ("gemm_dtype",), "gemm").index)  # a fixed sample


def test_each_decade_gets_an_even_share():
    frame = _gemm_grid(small=990, large=200)
    chosen = tables.sample(frame, 120, 0, (), "gemm")
    shares = tables.work_decades("gemm", chosen).value_counts()
    quota = -(-120 // tables.work_decades("gemm", frame).nunique())
    assert shares.max() <= quota
    assert shares[11] == quota  # the large decade (200 rows) fills its quota: a uniform draw gives it ~20


def test_a_table_smaller_than_the_sample_is_taken_whole():
    frame = _gemm_grid(small=30, large=5)
    assert len(tables.sample(frame, 100, 0, (), "gemm")) == 35


def test_decode_work_is_the_cached_elements_read():
    frame = pd.DataFrame({"batch_size": [2], "isl": [1], "step": [1023], "num_key_value_heads": [8],
                          "head_dim": [128], "num_heads": [32]})
    assert tables.work_decades("decode_attention", frame).iloc[0] == int(np.floor(np.log10(2 * 1024 * 8 * 128)))
    prefill = frame.assign(isl=[1000])
    assert tables.work_decades("prefill_attention", prefill).iloc[0] == int(np.floor(np.log10(2 * 32 * 1e6 * 128)))


def test_a_table_without_a_measure_of_work_is_refused():
    with pytest.raises(ValueError, match="no measure of work"):
        tables.work_decades("all_reduce", pd.DataFrame({"message_size": [1]}))
