"""LLM inference: architectures from HF configs, prefill/decode graphs, metrics, sizing."""

from perfmodel.llm.architecture import Architecture, from_hf_config
from perfmodel.llm.graphs import Parallelism, Scenario
from perfmodel.llm.metrics import LLMResult, continuous_batching_throughput, llm_predict, max_batch

__all__ = ["Architecture", "LLMResult", "Parallelism", "Scenario", "continuous_batching_throughput", "from_hf_config",
           "llm_predict", "max_batch"]
