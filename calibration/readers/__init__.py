"""Readers that map real measurement files into :class:`calibration.records.MeasurementRecord`."""

from calibration.readers.common import ReaderError
from calibration.readers.detect import FORMATS, detect_format, load_measurements
from calibration.readers.generic import read_generic_csv, read_generic_ops
from calibration.readers.ncu import read_ncu_csv
from calibration.readers.spyre import read_flex_trace, read_spyre_torch_trace
from calibration.readers.torch_trace import read_torch_trace
from calibration.readers.trace_ops import read_trace_ops

__all__ = ["FORMATS", "ReaderError", "detect_format", "load_measurements", "read_flex_trace", "read_generic_csv",
           "read_generic_ops", "read_ncu_csv", "read_spyre_torch_trace", "read_torch_trace", "read_trace_ops"]
