"""Calibration: readers for measured counters, the measurement harness and model fitting.

Depends on :mod:`perfmodel`, never the reverse. (Readers, harness and fitting arrive with the
calibration issue.)
"""
