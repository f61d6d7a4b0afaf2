"""Readers that map real measurement files into :class:`calibration.records.MeasurementRecord`."""

from calibration.readers.common import ReaderError
from calibration.readers.generic import read_generic_csv
from calibration.readers.ncu import read_ncu_csv
from calibration.readers.spyre import read_flex_trace, read_spyre_torch_trace
from calibration.readers.torch_trace import read_torch_trace

__all__ = ["ReaderError", "read_flex_trace", "read_generic_csv", "read_ncu_csv", "read_spyre_torch_trace",
           "read_torch_trace"]
