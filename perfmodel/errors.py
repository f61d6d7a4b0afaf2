"""Exceptions of perfmodel.

Every error raised for bad input derives from :class:`PerfmodelError`, so that the command line
can turn it into a one-paragraph message and exit code 2 instead of a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class PerfmodelError(Exception):
    """Base class of every error that reports bad input (a spec, a workload, an option)."""


class NoEngineError(PerfmodelError):
    """A device has no engine for an op's dtype. The command line adds which of its options set the
    dtypes (each command's ``dtype_hint``), since the library does not know how they were chosen."""


class UnitError(PerfmodelError, ValueError):
    """A quantity string could not be parsed, or it has the wrong dimension."""


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One problem found in an input file: where it is and what is wrong."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class ProblemsError(PerfmodelError):
    """Several problems in one input, reported all at once (file, line, dotted field path)."""

    kind = "input"

    def __init__(self, problems: list[Problem] | tuple[Problem, ...]):
        self.problems = tuple(problems)
        count = len(self.problems)
        header = f"{count} problem{'s' if count != 1 else ''} in {self.kind}:"
        super().__init__("\n".join([header, *(f"  {problem}" for problem in self.problems)]))


class SpecError(ProblemsError):
    """A hardware spec is invalid."""

    kind = "hardware spec"


class WorkloadError(ProblemsError):
    """A workload graph is invalid."""

    kind = "workload"
