"""Disaggregated prefill/decode serving, and pools of replicas, on the request-level simulator (pure core).

A disaggregated deployment ``xPyD`` runs ``x`` prefill workers and ``y`` decode workers, each a
``Server`` with its own parallelism and batch limits (DistServe, arXiv 2401.09670; Splitwise, arXiv
2311.18677; NVIDIA Dynamo, SGLang and vLLM's disaggregated prefill):

1. **Prefill.** Requests are dealt round robin to the prefill workers in arrival order; each worker
   simulates its stream with every request's output set to one token (the scheduler, chunked
   prefill, batching and queueing of ``serving.simulator``). A request's prefill ends at its first
   token. **Assumption:** a prefill worker frees a request's KV blocks when its prefill ends (the
   transfer's hold on them is not modelled).
2. **KV transfer.** The prompt's KV cache, ``Architecture.kv_cache_bytes(prompt)`` at the KV dtype
   (every layer; a sliding window's rolling buffer; a hybrid's state too), goes over the link between the workers priced
   alpha-beta: ``latency + bytes / bandwidth``, where the bandwidth is the link's per-direction rate
   x links per chip x the chips sending at once (each prefill chip sends its own shard to a decode
   chip: ``min(prefill chips, decode chips)``). The link is the spec's ``network`` link when there
   is one (workers on different nodes), else its chip-to-chip link (``--kv-link`` picks one by
   name). Each prefill worker's link is first come first served: a transfer starts when its prefill
   has ended and the worker's previous transfer is done.
3. **Decode.** Requests are dealt round robin to the decode workers in the order their transfers
   end (to each attention-data-parallel group of a worker with ``dp`` > 1: wide expert parallelism,
   ``llm.graphs.Parallelism``; the groups step together, each with its own batch, and are simulated
   as equal shares of the stream); each worker simulates its stream with the prompts already computed and the first token
   generated (``handed_off``): admission takes the prompt's KV blocks, then it decodes (queueing
   when the batch or the KV cache is full; preemption recomputes on the decode worker).

TTFT = the decode worker's admission - the arrival (prefill queueing and compute, the transfer, and
the wait for a decode slot: the first token, sampled by the prefill worker, reaches the user with
the decode worker's stream); TPOT and inter-token latencies are the decode worker's. A request of
one output token ends at its prefill (no transfer).

An aggregated pool (``simulate_pool``) deals the same stream round robin to ``replicas`` identical
replicas (each runs its share); the two are compared at the same chip count by
``compare_aggregated``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfmodel.dtypes import DTYPES
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.model import Hardware, Link
from perfmodel.llm.architecture import Architecture
from perfmodel.serving.simulator import Percentiles, Server, ServingResult, steady_state
from perfmodel.serving.workload import ArrivalProcess, LengthDistribution, Trace


@dataclass(frozen=True, kw_only=True)
class KVLink:
    """The link a KV cache crosses from a prefill to a decode worker, priced alpha-beta."""

    name: str
    latency_s: float
    bandwidth_bytes_per_s: float  # all the chips sending at once, together

    def transfer_s(self, payload_bytes):
        """``latency + bytes / bandwidth`` (arrays broadcast)."""
        return self.latency_s + np.asarray(payload_bytes, dtype=float) / self.bandwidth_bytes_per_s


def kv_link(hardware: Hardware, senders: int, receivers: int, name: str | None = None) -> KVLink:
    """The prefill-to-decode link of ``hardware`` (module docstring, step 2)."""
    links = hardware.links
    if name is not None:
        if name not in links:
            raise PerfmodelError(f"--kv-link {name}: {hardware.name} has links {', '.join(links) or 'none'}")
        link: Link = links[name]
    else:
        ordered = [link for kind in ("network", "chip_to_chip") for link in links.values() if link.kind == kind]
        if not ordered:
            raise PerfmodelError(f"{hardware.name} has no network or chip-to-chip link in its spec, so prefill "
                                 "workers cannot hand their KV cache to decode workers; add one, or serve aggregated")
        link = ordered[0]
    parallel = max(min(senders, receivers), 1)
    return KVLink(name=link.name, latency_s=link.latency_s or 0.0,
                  bandwidth_bytes_per_s=link.bandwidth_bytes_per_s_per_direction * link.links_per_chip * parallel)


def kv_transfer_bytes(architecture: Architecture, prompt_tokens, kv_dtype: str):
    """Bytes of the KV cache of prompts of ``prompt_tokens`` tokens (every layer; the helper that sizes
    the cache, ``Architecture.kv_cache_bytes``), and a hybrid's recurrent and conv state after the prompt
    (``Architecture.state_bytes``: the decode worker resumes from it)."""
    element = DTYPES[kv_dtype].bytes_per_element
    return architecture.kv_cache_bytes(np.asarray(prompt_tokens), element) + architecture.state_bytes(element)


def parse_disagg(text: str) -> tuple[int, int]:
    """``xPyD`` (e.g. 1P2D) -> (x, y)."""
    cleaned = text.strip().upper()
    if "P" in cleaned and cleaned.endswith("D"):
        left, right = cleaned[:-1].split("P", 1)
        if left.isdigit() and right.isdigit() and int(left) >= 1 and int(right) >= 1:
            return int(left), int(right)
    raise PerfmodelError(f"--disagg {text!r}: expected xPyD with x prefill and y decode workers, e.g. 1P1D or 2P4D")


@dataclass(frozen=True, kw_only=True)
class PoolResult:
    """Requests served by a pool (aggregated replicas, or prefill + decode workers), per request and summed."""

    label: str
    chips: int
    arrival_s: np.ndarray
    output_tokens: np.ndarray
    first_s: np.ndarray  # first token reaches the user
    finish_s: np.ndarray
    itl_s: np.ndarray  # every inter-token gap
    preemptions: int
    transfer_s: np.ndarray | None = None  # disaggregated: each request's KV transfer (NaN: none)
    prefill_done_s: np.ndarray | None = None
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None

    @property
    def ttft(self) -> Percentiles:
        return Percentiles.of(self.first_s - self.arrival_s)

    @property
    def tpot_s(self) -> np.ndarray:
        out = self.output_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(out > 1, (self.finish_s - self.first_s) / np.maximum(out - 1, 1), math.nan)

    @property
    def tpot(self) -> Percentiles:
        return Percentiles.of(self.tpot_s)

    @property
    def e2e(self) -> Percentiles:
        return Percentiles.of(self.finish_s - self.arrival_s)

    @property
    def itl(self) -> Percentiles:
        return Percentiles.of(self.itl_s)

    @property
    def duration_s(self) -> float:
        return max(float(self.finish_s.max() - self.arrival_s.min()), 1e-30)

    @property
    def tokens_per_s(self) -> float:
        return float(self.output_tokens.sum()) / self.duration_s

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.chips

    @property
    def goodput(self) -> float | None:
        if self.ttft_slo_s is None and self.tpot_slo_s is None:
            return None
        ok = np.ones(len(self.arrival_s), dtype=bool)
        if self.ttft_slo_s is not None:
            ok &= self.first_s - self.arrival_s <= self.ttft_slo_s
        if self.tpot_slo_s is not None:
            tpot = self.tpot_s
            ok &= np.isnan(tpot) | (tpot <= self.tpot_slo_s)
        return float(ok.mean())

    @property
    def steady_state(self) -> bool | None:
        return steady_state(self.arrival_s, self.first_s - self.arrival_s)

    def to_dict(self) -> dict:
        data = {"label": self.label, "chips": self.chips, "requests": len(self.arrival_s),
                "duration_s": self.duration_s, "ttft_s": self.ttft.to_dict(), "tpot_s": self.tpot.to_dict(),
                "e2e_s": self.e2e.to_dict(), "itl_s": self.itl.to_dict(), "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_chip": self.tokens_per_s_per_chip, "goodput": self.goodput,
                "preemptions": self.preemptions, "steady_state": self.steady_state}
        if self.transfer_s is not None:
            data["kv_transfer_s"] = Percentiles.of(self.transfer_s).to_dict()
        return data


def _deal(count: int, workers: int, order: np.ndarray | None = None) -> list[np.ndarray]:
    """Request indices for each worker, dealt round robin in ``order`` (default: index order)."""
    order = np.arange(count) if order is None else order
    return [order[worker::workers] for worker in range(workers)]


def _run(server: Server, times: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, *,
         handed_off: bool = False, prefix_share: float = 0.0) -> ServingResult:
    return server._run(ArrivalProcess(kind="poisson", rate_per_s=1.0), times, prompts, outputs, "pool share",
                       seed=0, ttft_slo_s=None, tpot_slo_s=None, prefix_share=prefix_share, progress=None,
                       handed_off=handed_off)


def _samples(lengths: LengthDistribution, rng: np.random.Generator, count: int) -> np.ndarray:
    return np.asarray(lengths.sample(rng, count), dtype=np.int64)


def draw(arrivals: ArrivalProcess | Trace, requests: int, prompt: LengthDistribution | None,
         output: LengthDistribution | None, *, seed: int, max_positions: int) -> tuple[np.ndarray, ...]:
    """Arrival times, prompt and output lengths of a stream, drawn as ``Server.simulate`` draws them."""
    if isinstance(arrivals, Trace):
        return (np.asarray(arrivals.arrival_s, dtype=float), np.asarray(arrivals.prompt_tokens, dtype=np.int64),
                np.asarray(arrivals.output_tokens, dtype=np.int64))
    if not isinstance(arrivals, ArrivalProcess):
        raise PerfmodelError("disaggregated serving takes open-loop arrivals (a rate or a trace), not closed-loop "
                             "users")
    assert prompt is not None and output is not None
    rng = np.random.default_rng(seed)
    prompts = np.minimum(_samples(prompt, rng, requests), max_positions - 1)
    outputs = np.maximum(np.minimum(_samples(output, rng, requests), max_positions - prompts), 1)
    times = np.asarray(arrivals.times(rng, requests), dtype=float)
    return times, prompts, outputs


def simulate_pool(server: Server, replicas: int, times: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, *,
                  prefix_share: float = 0.0, ttft_slo_s: float | None = None,
                  tpot_slo_s: float | None = None) -> PoolResult:
    """``replicas`` aggregated replicas of ``server``, the stream dealt round robin (module docstring)."""
    if replicas < 1:
        raise PerfmodelError(f"replicas must be at least 1, got {replicas}")
    first, finish = np.full(len(times), math.nan), np.full(len(times), math.nan)
    gaps, preemptions = [], 0
    for share in _deal(len(times), replicas * server.parallelism.dp):  # each attention-dp group its share
        if not share.size:
            continue
        result = _run(server, times[share], prompts[share], outputs[share], prefix_share=prefix_share)
        first[share] = np.asarray(result.arrival_s) + np.asarray(result.ttft_s)
        finish[share] = np.asarray(result.arrival_s) + np.asarray(result.e2e_s)
        gaps.append(result.itl_samples_s)
        preemptions += result.preemptions
    return PoolResult(label=f"aggregated {replicas} x (tp {server.parallelism.tp}, pp {server.parallelism.pp})",
                      chips=replicas * server.parallelism.chips, arrival_s=times, output_tokens=outputs,
                      first_s=first, finish_s=finish, itl_s=np.concatenate(gaps) if gaps else np.zeros(0),
                      preemptions=preemptions, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)


@dataclass(frozen=True, kw_only=True)
class Disaggregated:
    """``prefill_workers`` prefill ``Server``s and ``decode_workers`` decode ``Server``s joined by ``link``."""

    prefill: Server
    decode: Server
    prefill_workers: int
    decode_workers: int
    link: KVLink
    kv_dtype: str = "bf16"

    def __post_init__(self) -> None:
        if self.prefill_workers < 1 or self.decode_workers < 1:
            raise PerfmodelError("a disaggregated deployment needs at least one prefill and one decode worker")
        if self.prefill.architecture.name != self.decode.architecture.name:
            raise PerfmodelError("prefill and decode workers must serve the same model")

    @property
    def chips(self) -> int:
        return self.prefill_workers * self.prefill.parallelism.chips + \
            self.decode_workers * self.decode.parallelism.chips

    @property
    def label(self) -> str:
        p, d = self.prefill.parallelism, self.decode.parallelism
        wide = f" dp {d.dp} ep {d.ep}" if d.dp > 1 else f" ep {d.ep}" if d.ep > 1 else ""
        return (f"disaggregated {self.prefill_workers}P{self.decode_workers}D: prefill tp {p.tp} pp {p.pp}, "
                f"decode tp {d.tp} pp {d.pp}{wide}, KV over {self.link.name}")

    def simulate(self, times: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, *, prefix_share: float = 0.0,
                 ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> PoolResult:
        """The stream through the prefill workers, the links and the decode workers (module docstring)."""
        count = len(times)
        prefill_done = np.full(count, math.nan)
        transfer_end = np.full(count, math.nan)
        transfer = np.full(count, math.nan)
        preemptions = 0
        payload = kv_transfer_bytes(self.prefill.architecture, prompts, self.kv_dtype)
        for share in _deal(count, self.prefill_workers * self.prefill.parallelism.dp):
            if not share.size:
                continue
            result = _run(self.prefill, times[share], prompts[share], np.ones(share.size, dtype=np.int64),
                          prefix_share=prefix_share)
            done = np.asarray(result.arrival_s) + np.asarray(result.ttft_s)
            prefill_done[share] = done
            preemptions += result.preemptions
            free = -math.inf  # this worker's link: first come, first served
            for index in share[np.argsort(done, kind="stable")]:
                if outputs[index] <= 1:
                    continue
                start = max(float(prefill_done[index]), free)
                took = float(self.link.transfer_s(payload[index]))
                free = transfer_end[index] = start + took
                transfer[index] = transfer_end[index] - prefill_done[index]
        first, finish = prefill_done.copy(), prefill_done.copy()
        going = np.flatnonzero(outputs > 1)
        gaps = []
        if going.size:
            order = going[np.argsort(transfer_end[going], kind="stable")]
            ranks = self.decode_workers * self.decode.parallelism.dp  # attention-dp groups run their own batches
            for share in _deal(order.size, ranks, order):
                if not share.size:
                    continue
                result = _run(self.decode, transfer_end[share], prompts[share], outputs[share], handed_off=True)
                first[share] = np.asarray(result.arrival_s) + np.asarray(result.ttft_s)
                finish[share] = np.asarray(result.arrival_s) + np.asarray(result.e2e_s)
                gaps.append(result.itl_samples_s)
                preemptions += result.preemptions
        return PoolResult(label=self.label, chips=self.chips, arrival_s=times, output_tokens=outputs, first_s=first,
                          finish_s=finish, itl_s=np.concatenate(gaps) if gaps else np.zeros(0),
                          preemptions=preemptions, transfer_s=transfer, prefill_done_s=prefill_done,
                          ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
