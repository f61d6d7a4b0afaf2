"""Hardware: the core records (``model``) and, as edges, the YAML schema, loader and CPU detection."""

from perfmodel.hardware.model import (
    ComputeEngine,
    ExecutionMode,
    Hardware,
    Link,
    MemoryLevel,
    Power,
    Scheduling,
    Source,
    Tile,
)

__all__ = ["ComputeEngine", "ExecutionMode", "Hardware", "Link", "MemoryLevel", "Power", "Scheduling",
           "Source", "Tile"]
