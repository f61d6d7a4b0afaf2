"""What a serving engine's overlay does not price for a model, said aloud instead of guessed.

The engine overlays are fitted to the kernels each engine measured (``calibration.engine_overlays``); where
an engine runs a model's op with a kernel those tables show behaving unlike the rules' price, and no rule
prices that kernel yet, the prediction carries a caveat (the CLI prints it as a note).
"""

from __future__ import annotations

from perfmodel.hardware.model import Hardware
from perfmodel.llm.architecture import Architecture

#: The largest query group (query heads a KV head) whose decode attention TensorRT-LLM's tables show
#: reading the KV cache once: at groups of 48-128 its kernel takes 14-33x the time of one read (about one
#: read every 3.5 query heads), where vLLM's and SGLang's stay within 10% of one read (aiconfigurator-core
#: 0.12.0, H100 generation-attention tables, TensorRT-LLM 1.3.0rc20). The fits skip those rows.
TRTLLM_SHARED_KV_GROUP_MAX = 32


def engine_caveats(architecture: Architecture, hardware: Hardware) -> list[str]:
    """Notes on what ``hardware``'s engine overlay prices optimistically for ``architecture``."""
    notes = []
    group = architecture.heads // max(architecture.kv_heads, 1)
    if hardware.name.endswith("-trtllm") and architecture.latent is None and group > TRTLLM_SHARED_KV_GROUP_MAX:
        notes.append(f"{architecture.name} has {group} query heads a KV head; TensorRT-LLM's decode attention for "
                     f"groups above {TRTLLM_SHARED_KV_GROUP_MAX} re-reads the KV cache (14-33x one read in its "
                     "tables), which is not priced: decode is optimistic here (try --engine vllm or sglang)")
    return notes
