"""Speculative decoding: what a drafter and a verifier step cost, and how many tokens a step yields (pure core).

A speculative decode step of ``b`` running sequences, each at context ``c``:

1. **Draft**: the drafter proposes ``k`` tokens per sequence, one after another: ``k`` decode steps of
   the drafter's graph at batch ``b`` and context ``c`` (``drafter``):

   * ``draft``: a separate, smaller model (``--draft-model``; Leviathan et al. 2023, arXiv 2211.17192;
     Chen et al. 2023, arXiv 2302.01318), on the target's tensor parallelism when its heads allow
     (else unsplit), one pipeline stage; its weights and KV cache share the chips' memory.
   * ``mtp``: multi-token-prediction modules (DeepSeek-V3, arXiv 2412.19437 section 2.2): one more
     decoder layer of the target's own shape (MoE where the target's last layer is) with the target's
     embedding and head, run once per drafted token.
   * ``eagle``: an EAGLE-style head (EAGLE, arXiv 2401.15077; EAGLE-3, arXiv 2503.01840): one dense
     decoder layer of the target's width and the target's head, run once per drafted token.
2. **Verify**: the target runs the ``k + 1`` tokens of each sequence (its last accepted token and the
   ``k`` drafts) in one batched pass: the prefill graph of ``b`` sequences of ``k + 1`` new tokens
   attending causally to ``c + k + 1`` positions, with logits for every one of those tokens.

With a per-token acceptance rate ``a`` (each draft accepted independently with probability ``a``
until the first rejection; the verifier adds one token of its own), a step yields on average
``(1 - a^(k+1)) / (1 - a)`` tokens (``k + 1`` at ``a = 1``; Leviathan et al. 2023, eq. 1).

**Assumption (expected-value stepping):** the request-level simulator advances every decoding
sequence one token per simulated step and charges each step ``(draft + verify) / tokens_per_step``:
TPOT, throughput, KV growth and context are exact in expectation; the burstiness of tokens within a
step (several tokens at once, then a gap) is not shown in the inter-token latencies.

Published acceptance rates used as defaults (``DEFAULT_ACCEPTANCE``; override with ``--acceptance``):

* mtp 0.85: DeepSeek-V3 technical report (arXiv 2412.19437, section 5.4.3): "the acceptance rate of
  the second token prediction ranges between 85% and 90%" with one MTP module (k = 1), 1.8x TPS;
  the lower end is used.
* eagle 0.93: derived from EAGLE-3 (arXiv 2503.01840): average acceptance length tau = 6.48 tokens a
  step (LLaMA-3.1-8B-Instruct, GSM8K, drafts of depth 8): the chain rate with the same tau at k = 7
  solves (1 - a^8) / (1 - a) = 6.48, a = 0.93. EAGLE-3 drafts a tree; a chain of one candidate per
  position accepts less, so this is an upper figure for chains.
* draft 0.7: an estimate from Leviathan et al. 2023 (arXiv 2211.17192, Table 3), whose measured
  acceptance rates for target / draft-model pairs span about 0.55-0.9; the middle is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.llm.architecture import Architecture
from perfmodel.llm.graphs import Parallelism, Scenario, check, stage_graph
from perfmodel.llm.metrics import memory_per_chip
from perfmodel.workload.builders import linear
from perfmodel.workload.ir import Graph, Op, TensorSpec

METHODS = ("draft", "mtp", "eagle")
DEFAULT_ACCEPTANCE = {"mtp": 0.85, "eagle": 0.93, "draft": 0.7}
DEFAULT_TOKENS = {"mtp": 1, "eagle": 3, "draft": 4}  # drafted tokens a step (DeepSeek-V3: 1 MTP module)
MAX_SPECULATIVE_TOKENS = 16


def tokens_per_step(acceptance: float, tokens: int) -> float:
    """Expected tokens one verifier step yields: ``(1 - a^(k+1)) / (1 - a)`` (``k + 1`` at ``a = 1``)."""
    if acceptance >= 1.0:
        return float(tokens + 1)
    return (1.0 - acceptance ** (tokens + 1)) / (1.0 - acceptance)


def acceptance_for_length(length: float, tokens: int) -> float:
    """The per-token acceptance rate whose chain of ``tokens`` drafts yields ``length`` tokens a step
    (the inverse of ``tokens_per_step``, by bisection)."""
    if not 1.0 <= length <= tokens + 1:
        raise PerfmodelError(f"an acceptance length of {length:g} is outside [1, {tokens + 1}] for {tokens} drafts")
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if tokens_per_step(middle, tokens) < length else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True, kw_only=True)
class Speculation:
    """``method`` (draft, mtp or eagle) drafting ``tokens`` tokens a step, each accepted with
    probability ``acceptance``; ``draft_model`` is the drafter of method ``draft``."""

    method: str
    tokens: int
    acceptance: float
    draft_model: Architecture | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise PerfmodelError(f"speculative method {self.method!r}: expected one of {', '.join(METHODS)}")
        if not 1 <= self.tokens <= MAX_SPECULATIVE_TOKENS:
            raise PerfmodelError(f"speculative tokens must be 1 to {MAX_SPECULATIVE_TOKENS}, got {self.tokens}")
        if not (math.isfinite(self.acceptance) and 0.0 <= self.acceptance <= 1.0):
            raise PerfmodelError(f"acceptance rate must be in [0, 1], got {self.acceptance!r}")
        if (self.method == "draft") != (self.draft_model is not None):
            raise PerfmodelError("method draft needs a draft model (--draft-model), and only it takes one")

    @property
    def tokens_per_step(self) -> float:
        return tokens_per_step(self.acceptance, self.tokens)

    @property
    def label(self) -> str:
        what = f"draft model {self.draft_model.name}" if self.draft_model is not None else self.method.upper()
        return (f"speculative decoding: {what}, {self.tokens} token{'s' if self.tokens > 1 else ''} drafted, "
                f"acceptance {self.acceptance:g} -> {self.tokens_per_step:.2f} tokens a step")

    def to_dict(self) -> dict:
        return {"method": self.method, "tokens": self.tokens, "acceptance": self.acceptance,
                "draft_model": None if self.draft_model is None else self.draft_model.name,
                "tokens_per_step": self.tokens_per_step}


def drafter(target: Architecture, speculation: Speculation, scenario: Scenario,
            parallelism: Parallelism) -> tuple[Architecture, Parallelism]:
    """The drafter's architecture and the parallelism it runs with (see the module docstring)."""
    if speculation.method == "draft":
        model = speculation.draft_model
        assert model is not None
        if model.vocab != target.vocab:
            raise PerfmodelError(f"draft model {model.name} has a vocabulary of {model.vocab} tokens, the target "
                                 f"{target.name} {target.vocab}: a drafter must share the target's tokenizer")
    else:
        last = target.layers - 1
        moe = speculation.method == "mtp" and target.is_moe_layer(last)
        model = replace(target, name=f"{target.name}.{speculation.method}", layers=1, moe_layers=None, mtp_modules=0,
                        layer_windows=None if target.layer_windows is None else (target.layer_windows[last],),
                        experts=target.experts if moe else 1, experts_per_token=target.experts_per_token if moe else 1)
    tp = parallelism.tp
    one = Parallelism(tp=tp, ep=parallelism.ep if model.experts > 1 else 1)
    try:
        check(model, replace(scenario, batch=1), one)
    except PerfmodelError:
        one = Parallelism()
    return model, one


def drafter_weight_bytes(target: Architecture, drafter: tuple[Architecture, Parallelism], scenario: Scenario) -> float:
    """Bytes of the drafter's weights on each chip. The target's own multi-token-prediction modules
    (``Architecture.mtp_modules``, DeepSeek-V3): their parameters exactly (``mtp_parameters``: each
    module's norms, ``eh_proj`` and decoder layer; the embedding and head are the target's, shared),
    split over the drafter's tensor parallelism like the target's layers. Otherwise (a draft model, an
    EAGLE head, MTP on a model that ships no module): the drafter as ``memory_per_chip`` counts it, a
    copy of the embedding and head included."""
    model, parallelism = drafter
    if is_mtp_drafter(target, model):
        projections = target.mtp_modules * mtp_projection_parameters(target)  # replicated on every chip
        return ((target.mtp_parameters - projections) / parallelism.tp + projections) \
            * DTYPES[scenario.weight_dtype].bytes_per_element
    return float(np.max(memory_per_chip(model, scenario, parallelism).weights))


def is_mtp_drafter(target: Architecture, model: Architecture) -> bool:
    """``model`` is ``drafter``'s stand-in for ``target``'s own multi-token-prediction modules."""
    return model.name == f"{target.name}.mtp" and target.mtp_modules > 0


def mtp_projection_parameters(target: Architecture) -> int:
    """An MTP module's ``eh_proj`` (2 x hidden -> hidden, no bias)."""
    return 2 * target.hidden * target.hidden


def drafter_graph(target: Architecture, drafter: tuple[Architecture, Parallelism], scenario: Scenario, *,
                  phase: str, context) -> Graph:
    """The drafter's stage graph for ``phase``. For the target's own MTP modules, the decoder layer and
    shared head of ``stage_graph`` plus what the module adds before its layer (arXiv 2412.19437, section
    2.2): the RMSNorms of the hidden state and of the next token's embedding, and ``eh_proj`` on their
    concatenation (2 x hidden -> hidden), unsplit on every chip as vLLM's ``DeepSeekMTP`` holds it."""
    model, parallelism = drafter
    graph = stage_graph(model, scenario, parallelism, phase=phase, context=context)
    if not is_mtp_drafter(target, model):
        return graph
    act, hidden = scenario.activation_dtype, target.hidden
    tokens = np.asarray(scenario.batch) * (scenario.prompt_tokens if phase in ("prefill", "train") else 1)
    if not np.ndim(tokens):
        tokens = int(tokens)
    state = TensorSpec(shape=(tokens, hidden), dtype=act)
    norms = Op(name="mtp.enorm_hnorm", kind="norm", count=2, inputs=(state,), outputs=(state,),
               attrs={"flops_per_element": 1, "norm": "rms"})
    projection = linear("mtp.eh_proj", tokens, 2 * hidden, hidden, act, scenario.weight_dtype)
    return Graph(name=graph.name, ops=[*graph.ops, norms, projection])
