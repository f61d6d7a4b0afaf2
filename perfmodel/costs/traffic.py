"""Bytes moved at each memory level: compulsory traffic plus what tiling cannot reuse.

Tiled matmul (the I/O bound of Hong & Kung, 1981, and its tiled achievability, e.g. Irony, Toledo
and Tiskin 2004 / the "communication lower bound" of Ballard et al.):
an (m x k) by (k x n) product computed with an output block of b_m x b_n resident in an inner memory
of S elements (the block fills it; operand slabs stream past) reads
``A: m*k*ceil(n/b_n)``, ``B: k*n*ceil(m/b_m)`` and writes ``C: m*n`` elements from the outer level,
with ``b_m = min(m, sqrt(S))`` and ``b_n = min(n, S/b_m)``. When S holds whole operands the
result falls to the compulsory traffic ``m*k + k*n + m*n``; as S shrinks it grows like
``2*m*n*k/sqrt(S/2)``. A bigger inner memory never increases traffic (b_m and b_n only grow).

On a scratchpad machine (Spyre LX, TPU VMEM, GPU shared memory) S is the usable scratchpad of
one instance, so DRAM traffic is a result of scratchpad size: the software-managed roofline.
All functions broadcast over numpy arrays (sweeps).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from perfmodel.costs.conventions import FLASH_TILES_ON_CHIP, OUTPUT_BLOCK_SHARE
from perfmodel.hardware.execution_models import SIValue
from perfmodel.tracing import clip, floats, maximum, minimum
from perfmodel.workload.ir import Dimension


def matmul_elements_moved(m: ArrayLike, n: ArrayLike, k: ArrayLike,
                          capacity_elements: ArrayLike) -> tuple[SIValue, SIValue, SIValue]:
    """Elements (A read, B read, C written) at the outer level by a tiled (m x k)(k x n) product."""
    m, n, k = (floats(value) for value in (m, n, k))
    block = maximum(floats(capacity_elements) * OUTPUT_BLOCK_SHARE, 1.0)
    block_m = minimum(m, np.sqrt(block))
    block_n = maximum(minimum(n, block / block_m), 1.0)
    reads_a = m * k * np.ceil(n / block_n)
    reads_b = k * n * np.ceil(m / maximum(block_m, 1.0))
    return reads_a, reads_b, m * n


def tile_elements_moved(m: ArrayLike, n: ArrayLike, k: ArrayLike, tile_m: SIValue,
                        tile_n: SIValue) -> tuple[SIValue, SIValue, SIValue]:
    """Elements (A read, B read, C written) when each unit computes a ``tile_m x tile_n`` output block
    from the level that feeds it: A is re-read once per column of tiles, B once per row of tiles."""
    m, n, k = (floats(value) for value in (m, n, k))
    return m * k * np.ceil(n / tile_n), k * n * np.ceil(m / tile_m), m * n


def flash_attention_elements_moved(query_rows: ArrayLike, seq_kv: ArrayLike, head_dim: ArrayLike,
                                   capacity_elements: ArrayLike, kv_fraction: SIValue = 1.0) -> SIValue:
    """Elements moved per (batch, KV head) by a flash-style kernel.

    ``query_rows`` are the rows that share one KV head: ``seq_q x (heads / kv_heads)`` under grouped
    (GQA/MQA) attention, packed into the same Q blocks as flash-decoding and FlashInfer do. Q and O
    move once; K and V once per Q block (a block of rows fills the on-chip tiles), times
    ``kv_fraction``, the share of K/V blocks the kernel visits (causal and sliding-window masks skip
    whole blocks). Decode (a few rows) reads each KV head once."""
    query_rows, seq_kv, head_dim = (floats(value) for value in (query_rows, seq_kv, head_dim))
    rows = clip(floats(capacity_elements) / (FLASH_TILES_ON_CHIP * head_dim), 1.0, None)
    q_blocks = np.ceil(query_rows / minimum(rows, query_rows))
    moved: SIValue = 2 * query_rows * head_dim + 2 * seq_kv * head_dim * q_blocks * kv_fraction
    return moved


def attended_pairs(seq_q: ArrayLike, seq_kv: ArrayLike, causal: bool | np.bool_,
                   window: ArrayLike | None = None, chunked: bool = False) -> SIValue:
    """(query, key) pairs one head scores. Queries are the last ``seq_q`` of ``seq_kv`` positions; a
    causal query at position p sees keys ``max(0, p - window + 1) .. p``; without a mask every query
    sees the last ``window`` keys (all of them without a window). ``chunked`` (Llama 4's chunked local
    attention): the positions fall in chunks of ``window``, and a causal query at p sees its own chunk's
    keys up to itself, ``(p mod window) + 1``; without a mask every query sees the last position's chunk."""
    seq_q, seq_kv = floats(seq_q), floats(seq_kv)
    if chunked and window is not None:
        return _chunked_pairs(seq_q, seq_kv, causal, floats(window))
    width: SIValue = np.inf if window is None else floats(window)
    if not causal:
        pairs: SIValue = seq_q * minimum(seq_kv, width)
        return pairs

    def visible_up_to(n: SIValue) -> SIValue:  # sum_{j=1..n} min(j, window)
        capped: SIValue = minimum(n, width)
        return capped * (capped + 1) / 2 + maximum(n - capped, 0.0) * np.where(np.isinf(width), 0.0, capped)

    return visible_up_to(seq_kv) - visible_up_to(seq_kv - seq_q)


def chunk_start(position: SIValue, chunk: SIValue) -> SIValue:
    """The first position of the chunk of ``chunk`` positions that holds ``position``."""
    return (position // chunk) * chunk


def _chunked_pairs(seq_q: SIValue, seq_kv: SIValue, causal: bool | np.bool_, chunk: SIValue) -> SIValue:
    if not causal:
        last_chunk: SIValue = seq_kv - chunk_start(seq_kv - 1, chunk)
        return seq_q * last_chunk

    def seen_before(n: SIValue) -> SIValue:  # sum over positions 0 .. n-1 of (p mod chunk) + 1
        whole = chunk_start(n, chunk)
        rest = n - whole
        return whole * (chunk + 1) / 2 + rest * (rest + 1) / 2

    return seen_before(seq_kv) - seen_before(seq_kv - seq_q)


def padded_bytes(shape: Sequence[Dimension], bytes_per_element: float, granule_bytes: float | None) -> SIValue:
    """Bytes of a tensor whose innermost dimension is padded to the transfer granule (Spyre sticks)."""
    if not shape:
        return bytes_per_element
    rows: SIValue = 1.0  # a float, or an array over sweep points
    for dim in shape[:-1]:
        rows = rows * floats(dim)
    row_bytes = floats(shape[-1]) * bytes_per_element
    if granule_bytes:
        row_bytes = np.ceil(row_bytes / granule_bytes) * granule_bytes
    return rows * row_bytes
