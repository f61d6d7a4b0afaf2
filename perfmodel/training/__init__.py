"""Training: forward, backward and optimizer steps from one chip to thousands (DESIGN.md 6.2)."""

from perfmodel.training.layout import Layout, TrainingSetup
from perfmodel.training.step import TrainingResult, train_predict

__all__ = ["Layout", "TrainingResult", "TrainingSetup", "train_predict"]
