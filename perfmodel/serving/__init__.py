"""Request-level serving simulation on the engine's step costs (pure core: numpy only)."""

from perfmodel.serving.simulator import Percentiles, Server, ServingConfig, ServingResult, max_context
from perfmodel.serving.steps import KVCapacity, StepCosts, kv_capacity
from perfmodel.serving.workload import ArrivalProcess, ClosedLoop, LengthDistribution, parse_length

__all__ = ["ArrivalProcess", "ClosedLoop", "KVCapacity", "LengthDistribution", "Percentiles", "Server",
           "ServingConfig", "ServingResult", "StepCosts", "kv_capacity", "max_context", "parse_length"]
