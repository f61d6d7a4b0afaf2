"""Where the bytes of a workload live: the one definition of "fits" and "weights streamed".

A device holds a workload when its weights and everything else it keeps (KV cache, activations,
workspace) fit in its on-device memory (every level that is not off-device, all instances). A
device with an off-device store (Cerebras MemoryX) may instead stream the weights from it, layer by
layer, as long as everything else still fits on the device. Otherwise the workload does not fit.
The evaluation prices weight traffic from this decision, and the LLM metrics, the largest batch
and sizing all read it from here, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfmodel.hardware.execution_models import SIValue
from perfmodel.hardware.model import Hardware


def on_device_capacity_bytes(hardware: Hardware) -> SIValue:
    """Bytes the device itself can hold: every on-device level, all instances (an array when a
    sweep varies a capacity)."""
    return sum((level.total_capacity_bytes for level in hardware.memory if not level.off_device), 0)


def has_external_store(hardware: Hardware) -> bool:
    return any(level.off_device for level in hardware.memory)


@dataclass(frozen=True, kw_only=True)
class Residency:
    """Bytes per chip and what they mean; array-valued bytes (sweeps) must fit at every point."""

    weight_bytes: SIValue
    other_bytes: SIValue
    # An SIValue (an array when a sweep varies a capacity), typed Any only because two readers outside
    # the strict core store it in fields declared float (``roofline.arrays.ArrayEvaluation.on_device_bytes``,
    # ``llm.metrics.LLMResult.capacity_bytes``).
    capacity_bytes: Any
    external_store: bool

    @property
    def weights_resident(self) -> bool:
        return bool(np.all(np.asarray(self.weight_bytes) + self.other_bytes <= self.capacity_bytes))

    @property
    def weights_streamed(self) -> bool:
        return (not self.weights_resident and self.external_store
                and bool(np.all(np.asarray(self.other_bytes) <= self.capacity_bytes)))

    @property
    def fits(self) -> bool:
        return self.weights_resident or self.weights_streamed

    @property
    def room_for_state_bytes(self) -> SIValue:
        """The most per-sequence state (KV cache, activations) that still ``fits``: everything but
        the weights when they can be streamed from a store, else what the weights leave."""
        capacity: SIValue = self.capacity_bytes
        return capacity - (0.0 if self.external_store else float(np.max(self.weight_bytes)))


def residency(hardware: Hardware, weight_bytes: SIValue, other_bytes: SIValue = 0.0) -> Residency:
    return Residency(weight_bytes=weight_bytes, other_bytes=other_bytes,
                     capacity_bytes=on_device_capacity_bytes(hardware), external_store=has_external_store(hardware))
