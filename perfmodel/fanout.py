"""Fan independent pieces of work out: in this process, or over a Dask cluster.

The core never imports Dask: a function that fans out (``roofline.sweep``, ``training.search``,
``validation.validate``, the deployment search of ``perfmodel size``) takes a *mapper*, a callable
``mapper(function, items)`` that yields ``function(item)`` for every item **in the order of the
items**. :func:`serial_map` is the default; :func:`mapper` gives a Dask one for a
``dask.distributed`` scheduler address or a ``LocalCluster`` of ``workers`` processes. Dask does the
scheduling, retries a piece whose worker died (``retries``) and spills; this module only keeps a
bounded number of pieces in flight (``window``, so a sweep of 10^7 points streams) and hands the
results back in order, so the tables built from them are identical to the last bit whichever mapper
made them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from perfmodel.errors import PerfmodelError

T = TypeVar("T")
R = TypeVar("R")

RETRIES = 3  # a piece whose worker died or raised is run again this many times before the run fails
WINDOW_PER_THREAD = 2  # pieces in flight per worker thread: enough to keep every worker busy, few to hold


class Mapper(Protocol):
    def __call__(self, function: Callable[[T], R], items: Iterable[T], /) -> Iterator[R]: ...


def serial_map(function: Callable[[T], R], items: Iterable[T], /) -> Iterator[R]:
    """``function(item)`` for every item, one after the other, in this process."""
    for item in items:
        yield function(item)


DASK_MISSING = ("--workers/--scheduler need dask.distributed, which is not installed: pip install 'perfmodel[dask]' "
                "(or pip install 'dask[distributed]')")


@contextlib.contextmanager
def mapper(*, workers: int | None = None, scheduler: str | None = None, retries: int = RETRIES,
           threads_per_worker: int = 1, processes: bool = True) -> Iterator[Mapper]:
    """A mapper for the duration of the block: :func:`serial_map` when neither ``workers`` nor
    ``scheduler`` is given; else one that runs on the Dask scheduler at ``scheduler`` (e.g.
    ``tcp://10.0.0.5:8786``) or on a ``LocalCluster`` of ``workers`` worker processes (threads with
    ``processes=False``) started here and closed at the end of the block."""
    if scheduler is None and workers is None:
        yield serial_map
        return
    if scheduler is not None and workers is not None:
        raise PerfmodelError("give --workers N (a local cluster) or --scheduler ADDRESS (a running one), not both")
    try:
        import logging

        from distributed import Client, LocalCluster
    except ImportError:
        raise PerfmodelError(DASK_MISSING) from None
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            try:
                client = stack.enter_context(Client(scheduler, timeout="20s"))
            except OSError as error:  # distributed raises OSError (TimeoutError) for an unreachable scheduler
                raise PerfmodelError(f"--scheduler {scheduler}: cannot reach a Dask scheduler there ({error}); start "
                                     "one (dask scheduler; dask worker ADDRESS) or check the address") from None
        else:
            if workers is not None and workers < 1:
                raise PerfmodelError(f"--workers must be at least 1, got {workers}")
            cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=threads_per_worker,
                                                       processes=processes, dashboard_address=":0",
                                                       silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        yield _DaskMapper(client, retries)


class _DaskMapper:
    """Submits ``function(item)`` as Dask tasks, at most ``window`` at a time, and yields the results in
    the order of the items (a finished piece waits for those before it; none is held longer)."""

    def __init__(self, client: Any, retries: int) -> None:
        self.client = client
        self.retries = retries

    def __call__(self, function: Callable[[T], R], items: Iterable[T], /) -> Iterator[R]:
        threads = sum(self.client.nthreads().values()) or 1
        window = max(2, WINDOW_PER_THREAD * threads)
        pending = iter(items)
        in_flight: list[Any] = []

        def submit() -> bool:
            for item in pending:
                in_flight.append(self.client.submit(function, item, pure=False, retries=self.retries))
                return True
            return False

        while len(in_flight) < window and submit():
            pass
        try:
            while in_flight:
                future = in_flight.pop(0)
                result = future.result()
                future.release()
                submit()
                yield result
        finally:
            for future in in_flight:
                future.cancel()


class _Each:
    """``function`` over every item of a chunk: one piece of work of :func:`in_chunks`."""

    def __init__(self, function: Callable[[Any], Any]) -> None:
        self.function = function

    def __call__(self, chunk: list) -> list:
        return [self.function(item) for item in chunk]


def in_chunks(inner: Mapper, size: int) -> Mapper:
    """``inner`` sending ``size`` items a piece of work (the last piece: what is left), the results
    yielded one per item, in order: for items that take a few milliseconds each, a Dask task's own
    cost (tens of milliseconds on a loaded machine) would otherwise outweigh them."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")

    def run(function: Callable[[T], R], items: Iterable[T], /) -> Iterator[R]:
        listed = list(items)
        chunks = [listed[start:start + size] for start in range(0, len(listed), size)]
        for results in inner(_Each(function), chunks):
            yield from results

    return run


def progress(results: Iterable[R], total: int, what: str, *, enabled: bool = True,
             count: Callable[[R], int] | None = None) -> Iterator[R]:
    """``results`` with a progress bar on stderr, drawn while the iteration runs: ``total`` ``what``s
    (the unit, e.g. 'pt'), each result counting ``count(result)`` of them (default 1)."""
    from tqdm import tqdm

    with tqdm(total=total, unit=what, disable=not enabled, file=sys.stderr, leave=False) as bar:
        for result in results:
            bar.update(1 if count is None else count(result))
            yield result


def with_progress(inner: Mapper, what: str, *, enabled: bool = True) -> Mapper:
    """``inner`` drawing a progress bar over the items it maps (``what``: their unit, e.g. 'system')."""

    def run(function: Callable[[T], R], items: Iterable[T], /) -> Iterator[R]:
        items = list(items)
        return progress(inner(function, items), len(items), what, enabled=enabled)

    return run


__all__ = ["Mapper", "in_chunks", "mapper", "progress", "serial_map", "with_progress"]
