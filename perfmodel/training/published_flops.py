"""How published training results count model FLOPs, to compare like with like (pure core).

A published "TFLOP/s per chip" or MFU divides the source's own FLOP count by the measured step time.
Reproducing it means dividing the same count by the predicted step time: the count is a definition,
not a prediction. Each formula is quoted in ``workloads/validation/TRAINING_SOURCES.md``.

* ``maxtext-2023``: MaxText at 76bd53b (Dec 2023, ``train.py calculate_training_tflops``), per device
  per step: ``6 P S B + 12 H L D S^2 B / 2`` with P every parameter (a tied embedding once), causal
  attention halved.
* ``maxtext``: MaxText from 2024-05 until PR #1988 (July 2025, ``calculate_tflops_training_per_device``):
  ``3 [L (FFN + QKV + O) + 2 B S E V] + 3 L 4 B S^2 Hq D``: the weight matmuls (a MoE layer counts its
  router and the top-k experts), the LM head once, attention not halved. ``maxtext-causal``: the same
  after PR #1988, attention halved.
* ``palm``: PaLM (arXiv 2204.02311, Appendix B), per token: ``6 N + 12 L H Q T`` with N every parameter,
  attention not halved.
"""

from __future__ import annotations

from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import GATED_MLP_MATRICES, PLAIN_MLP_MATRICES, Architecture

CONVENTIONS = ("maxtext-2023", "maxtext", "maxtext-causal", "palm")


def flops_per_sequence(architecture: Architecture, seq_len: int, convention: str) -> float:
    """Model FLOPs to train on one sequence of ``seq_len`` tokens, as ``convention`` counts them."""
    a, s = architecture, float(seq_len)
    if convention == "maxtext-2023":
        return 6 * a.parameter_count() * s + 12 * a.heads * a.layers * a.head_dim * s * s / 2
    if convention == "palm":
        return s * (6 * a.parameter_count() + 12 * a.layers * a.heads * a.head_dim * s)
    if convention in ("maxtext", "maxtext-causal"):
        matrices = GATED_MLP_MATRICES if a.gated_mlp else PLAIN_MLP_MATRICES
        ffn = 2 * s * a.intermediate * a.hidden * matrices
        if a.experts > 1:
            ffn = 2 * s * a.hidden * a.experts + a.experts_per_token * ffn
        qkv = 2 * s * a.hidden * (a.heads + 2 * a.kv_heads) * a.head_dim
        projection = 2 * s * a.hidden * a.heads * a.head_dim
        head = 2 * s * a.hidden * a.vocab
        attention = 3 * a.layers * 4 * s * s * a.heads * a.head_dim
        attention = attention / 2 if convention == "maxtext-causal" else attention
        return 3 * (a.layers * (ffn + qkv + projection) + head) + attention
    raise PerfmodelError(f"unknown FLOP convention {convention!r}; allowed: {', '.join(CONVENTIONS)}")
