"""Request-level serving simulation on the engine's step costs (pure core: numpy only)."""

from perfmodel.serving.simulator import (
    Percentiles,
    Server,
    ServerScenario,
    ServingConfig,
    ServingResult,
    knee_rate,
    max_context,
    server_scenario,
)
from perfmodel.serving.steps import KVCapacity, StepCosts, kv_capacity
from perfmodel.serving.workload import ArrivalProcess, ClosedLoop, LengthDistribution, Trace, parse_length, read_trace

__all__ = ["ArrivalProcess", "ClosedLoop", "KVCapacity", "LengthDistribution", "Percentiles", "Server",
           "ServerScenario", "ServingConfig", "ServingResult", "StepCosts", "Trace", "knee_rate", "kv_capacity",
           "max_context", "parse_length", "read_trace", "server_scenario"]
