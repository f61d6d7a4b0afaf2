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

import numpy as np

from perfmodel.costs.conventions import FLASH_TILES_ON_CHIP, OUTPUT_BLOCK_SHARE


def matmul_elements_moved(m, n, k, capacity_elements):
    """Elements (A read, B read, C written) at the outer level by a tiled (m x k)(k x n) product."""
    m, n, k = (np.asarray(value, dtype=float) for value in (m, n, k))
    block = np.maximum(np.asarray(capacity_elements, dtype=float) * OUTPUT_BLOCK_SHARE, 1.0)
    block_m = np.minimum(m, np.sqrt(block))
    block_n = np.maximum(np.minimum(n, block / block_m), 1.0)
    reads_a = m * k * np.ceil(n / block_n)
    reads_b = k * n * np.ceil(m / np.maximum(block_m, 1.0))
    return reads_a, reads_b, m * n


def flash_attention_elements_moved(seq_q, seq_kv, head_dim, capacity_elements):
    """Elements moved per (batch, head) by flash attention: Q and O once, K and V once per Q block."""
    seq_q, seq_kv, head_dim = (np.asarray(value, dtype=float) for value in (seq_q, seq_kv, head_dim))
    rows = np.clip(np.asarray(capacity_elements, dtype=float) / (FLASH_TILES_ON_CHIP * head_dim), 1.0, None)
    q_blocks = np.ceil(seq_q / np.minimum(rows, seq_q))
    return 2 * seq_q * head_dim + 2 * seq_kv * head_dim * q_blocks


def padded_bytes(shape, bytes_per_element: float, granule_bytes: float | None):
    """Bytes of a tensor whose innermost dimension is padded to the transfer granule (Spyre sticks)."""
    if not shape:
        return bytes_per_element
    rows = 1.0
    for dim in shape[:-1]:
        rows = rows * np.asarray(dim, dtype=float)
    row_bytes = np.asarray(shape[-1], dtype=float) * bytes_per_element
    if granule_bytes:
        row_bytes = np.ceil(row_bytes / granule_bytes) * granule_bytes
    return rows * row_bytes
