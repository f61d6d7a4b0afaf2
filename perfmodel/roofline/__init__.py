"""The three-bottleneck evaluation (compute, memory at every level, scheduling) and its results."""

from perfmodel.roofline.arrays import DATASHEET, Parameters, evaluate_arrays
from perfmodel.roofline.results import Evaluation, OpTiming, evaluate

__all__ = ["DATASHEET", "Evaluation", "OpTiming", "Parameters", "evaluate", "evaluate_arrays"]
