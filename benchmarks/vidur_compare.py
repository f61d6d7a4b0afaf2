"""perfmodel's serving simulator next to Vidur (issue 14, item 5) on scenarios both can express.

Vidur (https://github.com/microsoft/vidur, the `vidur` package on PyPI, MLSys'24) predicts each
operator's time from measurements on real GPUs (a random forest per operator, trained on profiled
medians); perfmodel prices the same steps from a roofline over the chip spec. This benchmark runs the
same request stream (perfmodel draws the arrival times and lengths with the seed; Vidur replays them)
through both and prints TTFT, TPOT, throughput and wall time side by side, plus a table of step costs:
Vidur's profiled per-layer medians (mlp.csv) against perfmodel's step times, which needs only the
profile, not Vidur itself.

Run (perfmodel's environment; Vidur runs as a subprocess in a virtual environment of its own):

    python -m venv /tmp/vidur-venv && /tmp/vidur-venv/bin/pip install vidur==0.0.26
    git clone https://github.com/microsoft/vidur /tmp/vidur-repo
    python benchmarks/vidur_compare.py --vidur-profiling /tmp/vidur-repo/data/profiling

Profiling data. Vidur 0.0.26's wheel ships none: at run time it downloads the profile from the
Hugging Face hub (`huggingface_hub.snapshot_download` of the datasets named by
`--random_forrest_execution_time_predictor_config_model_profiling_dataset`, default
project-vajra/dev-staging-meta-llama-llama-3-8b-h100, and ..._network_profiling_dataset, default
project-vajra/dev-staging-h100-dgx), so it cannot run without network access as installed. The
GitHub repository keeps the same profile in git (data/profiling/compute/<device>/<model>/mlp.csv and
attention.csv, data/profiling/network/<node>/all_reduce.csv and send_recv.csv). With
--vidur-profiling DIR this script lays those files out as a local Hugging Face cache (xz-compressed,
with the config.json Vidur checks) and runs Vidur with HF_HUB_OFFLINE=1: nothing is downloaded.

Settings matched between the two: model shape (Vidur's hard-coded config for the model equals
perfmodel's catalog entry), device, tensor parallelism, the arrival times and the prompt and output
lengths of every request, the scheduler (Vidur's "sarathi" scheduler: running decodes first, then
chunked prefills, then new requests first come first served, up to a token budget per step and a
batch cap; perfmodel's is the same rule), max batch, the step's token budget (Vidur's chunk size),
KV block size and the number of KV blocks (perfmodel's count is passed to Vidur, Vidur's watermark set
to 0). Not matched exactly, and noted in the JSON:
  * Vidur reserves a new request's whole prompt in KV blocks at admission; perfmodel only its first
    chunk (the same unless the cache runs short).
  * Vidur's step time is the sum over layers of its per-operator predictions (norms, QKV and output
    projections, RoPE, attention, MLP, residual add, all-reduce); it leaves out the embedding, the
    LM head, sampling and CPU overheads. perfmodel's step includes the LM head and, in "graph" mode,
    no host overhead.
  * A mixed step (a prefill chunk with decodes): Vidur prices its linear layers once on the total
    tokens; perfmodel as a prefill pass plus a decode pass (the weights read twice: conservative).
  * Vidur rounds a batch's decode context to 256 tokens and predicts decode attention from the batch's
    mean context; perfmodel interpolates on its context grid with the mean context.
  * Vidur's profile is fp16 on A100 80GB / H100 DGX nodes; perfmodel uses the catalog spec with its
    achievable-efficiency overlay (`load_for_prediction`), fp16 weights, KV and activations.

Vidur trains its random forests on the first run of a (model, device, tp) and caches them under
--vidur-cache; later runs reuse them (its default 27-setting 10-fold grid search takes roughly half an
hour per (model, device, tp) on 2 cores; --vidur-quick-fit fits one setting, 2-fold, in ~20 s). The wall
times in the table are the simulations' own; Vidur's setup (loading or training the forests) is in
the JSON as setup_s.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import lzma
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from perfmodel import __version__
from perfmodel.hardware.loader import load_for_prediction
from perfmodel.llm import Parallelism
from perfmodel.llm.catalog import load_architecture
from perfmodel.serving import ArrivalProcess, Server, ServingConfig, max_context, parse_length
from perfmodel.yaml_source import write_text_atomically

VIDUR_VERSION = "0.0.26"
INSTALL = f"python -m venv /tmp/vidur-venv && /tmp/vidur-venv/bin/pip install vidur=={VIDUR_VERSION}"
PROFILE_HELP = ("git clone https://github.com/microsoft/vidur /tmp/vidur-repo, then pass "
                "--vidur-profiling /tmp/vidur-repo/data/profiling")
DEFAULT_PYTHON = "/tmp/vidur-venv/bin/python"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "vidur-compare-cache"
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "vidur_compare.json"

MAX_BATCH, TOKENS_PER_STEP, BLOCK_SIZE, MEMORY_UTILIZATION = 128, 2048, 16, 0.9
DTYPE, MODE = "fp16", "graph"
VIDUR_MAX_MODEL_LEN = 4096  # Vidur's prediction grid (Llama-2-7B's context)
STEP_TOKENS = (1, 8, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class Scenario:
    name: str
    model: str  # perfmodel catalog name
    hardware: str  # perfmodel spec
    vidur_model: str  # Vidur 0.0.26's model name
    profile_model: str  # folder under compute/<device>/ in microsoft/vidur's data/profiling
    device: str  # Vidur's device SKU (and profile folder)
    network: str  # Vidur's node SKU (and network profile folder)
    tp: int
    prompt: str
    output: str
    rates: tuple[float, ...]  # Poisson rates (requests/s): below, near and past perfmodel's knee


LLAMA2 = dict(model="llama-2-7b", vidur_model="meta-llama/Llama-2-7b-hf", profile_model="meta-llama/Llama-2-7b-hf",
              prompt="fixed:512", output="fixed:256")
SCENARIOS = (
    Scenario(name="llama-2-7b a100 tp1", hardware="a100-sxm-80gb", device="a100", network="a100_dgx", tp=1,
             rates=(4.0, 10.0, 16.0), **LLAMA2),
    Scenario(name="llama-2-7b h100 tp1", hardware="h100-sxm", device="h100", network="h100_dgx", tp=1,
             rates=(6.0, 16.0, 28.0), **LLAMA2),
    Scenario(name="llama-2-7b a100 tp2", hardware="a100-sxm-80gb", device="a100", network="a100_dgx", tp=2,
             rates=(6.0, 16.0, 24.0), **LLAMA2),
)
NOT_MATCHED = [
    "Vidur reserves a new request's whole prompt in KV blocks at admission; perfmodel only its first chunk",
    "Vidur's step leaves out the embedding, LM head, sampling and CPU overheads; perfmodel's includes the LM head",
    "Vidur rounds the decode batch's mean context up to 256 tokens (kv_cache_prediction_granularity)",
    "Vidur's profile: fp16 kernels measured on A100 80GB / H100 (DGX) with the attention backend of its "
    "profiling run; perfmodel: catalog spec with its achievable-efficiency overlay, fp16",
    "Vidur's operator times are random-forest predictions from profiled medians (GridSearchCV, 10-fold)",
    "a mixed step (prefill chunk + decodes): Vidur prices its linear layers once on the total tokens; perfmodel "
    "as a prefill pass plus a decode pass (weights read twice), which is conservative",
    "Vidur's Llama-2-7B config has vocab 32768 (perfmodel's catalog: 32000); only the LM head, which Vidur omits",
]


# --- perfmodel --------------------------------------------------------------------------------

def perfmodel_server(scenario: Scenario) -> Server:
    prompt, output = parse_length(scenario.prompt), parse_length(scenario.output)
    return Server(load_architecture(scenario.model), load_for_prediction(scenario.hardware),
                  Parallelism(tp=scenario.tp),
                  config=ServingConfig(max_batch=MAX_BATCH, max_tokens_per_step=TOKENS_PER_STEP,
                                       block_size=BLOCK_SIZE, memory_utilization=MEMORY_UTILIZATION),
                  max_context=max_context(prompt, output), weight_dtype=DTYPE, kv_dtype=DTYPE,
                  activation_dtype=DTYPE, mode=MODE)


def summary(arrival: np.ndarray, first: np.ndarray, finish: np.ndarray, outputs: np.ndarray) -> dict:
    """The metrics both tools report, computed the same way (perfmodel's definitions)."""
    ttft = first - arrival
    tpot = (finish - first)[outputs > 1] / (outputs[outputs > 1] - 1)
    duration = float(finish.max() - arrival.min())
    return {"ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p99_s": float(np.percentile(ttft, 99)),
            "tpot_mean_s": float(tpot.mean()) if tpot.size else math.nan,
            "e2e_p50_s": float(np.percentile(finish - arrival, 50)),
            "tokens_per_s": float(outputs.sum() / duration), "duration_s": duration}


def run_perfmodel(server: Server, scenario: Scenario, rate: float, requests: int, seed: int) -> tuple[dict, dict]:
    start = time.perf_counter()
    result = server.simulate(ArrivalProcess(kind="poisson", rate_per_s=rate), requests,
                             parse_length(scenario.prompt), parse_length(scenario.output), seed=seed)
    wall = time.perf_counter() - start
    arrival = np.asarray(result.arrival_s)
    outputs = np.asarray(result.output_tokens)
    first = arrival + np.asarray(result.ttft_s)
    finish = arrival + np.asarray(result.e2e_s)
    metrics = summary(arrival, first, finish, outputs)
    metrics.update(wall_s=wall, preemptions=result.preemptions, steps=result.steps,
                   steady_state=result.steady_state)
    stream = {"arrival_s": result.arrival_s, "prompt_tokens": result.prompt_tokens,
              "output_tokens": result.output_tokens}
    return metrics, stream


# --- Vidur's profile --------------------------------------------------------------------------

def profile_files(profiling: Path, scenario: Scenario) -> dict[str, Path]:
    compute = profiling / "compute" / scenario.device / scenario.profile_model
    network = profiling / "network" / scenario.network
    return {"mlp": compute / "mlp.csv", "attention": compute / "attention.csv",
            "all_reduce": network / "all_reduce.csv", "send_recv": network / "send_recv.csv"}


def profile_source(profiling: Path) -> str | None:
    """Where the profile came from: the git commit of a checkout, or the folder's SOURCE.txt."""
    probe = subprocess.run(["git", "-C", str(profiling), "rev-parse", "HEAD"], capture_output=True, text=True)
    if probe.returncode == 0:
        origin = subprocess.run(["git", "-C", str(profiling), "remote", "get-url", "origin"], capture_output=True,
                                text=True).stdout.strip()
        return f"{origin or 'git checkout'} @ {probe.stdout.strip()}"
    note = profiling / "SOURCE.txt"
    return note.read_text().strip() if note.exists() else None


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
             "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


def profiled_layer_ms(mlp_csv: Path, tp: int) -> dict[int, float]:
    """Vidur's profiled medians: one layer's non-attention operators (ms) by token count, at ``tp``."""
    table: dict[int, float] = {}
    with open(mlp_csv, newline="") as stream:
        for row in csv.DictReader(stream):
            if int(row["num_tensor_parallel_workers"]) != tp:
                continue
            cells = [row.get(f"time_stats.{op}.median") or "0" for op in LAYER_OPS]
            table[int(row["num_tokens"])] = sum(float(cell) for cell in cells)
    return table


NCCL_LAUNCH_MS = 0.02  # Vidur's nccl_cpu_launch_overhead_ms, added to each all-reduce


def profiled_all_reduce_ms(all_reduce_csv: Path, tp: int, sizes: np.ndarray) -> np.ndarray:
    """Vidur's profiled all-reduce medians (ms) among ``tp`` chips of one node, interpolated at ``sizes`` bytes."""
    points: dict[int, float] = {}
    with open(all_reduce_csv, newline="") as stream:
        for row in csv.DictReader(stream):
            if int(row["num_workers"]) == tp and int(row["devices_per_node"]) == tp:
                points[int(row["size"])] = float(row["time_stats.all_reduce.median"])
    if not points:
        return np.full(sizes.shape, math.nan)
    grid = np.array(sorted(points))
    return np.interp(sizes, grid, [points[size] for size in grid])


def step_costs(server: Server, scenario: Scenario, files: dict[str, Path]) -> list[dict]:
    """Measured (Vidur's profile) against modelled (perfmodel) step times for n tokens, attention aside.

    Vidur's column is what its predictor sums for a step with context ~0: the layers times (the
    profiled medians of one layer's norms, projections, RoPE, MLP and residual add, plus two
    all-reduces of n x hidden fp16 values and their launch overhead when tp > 1), before its random
    forest smooths them. perfmodel's are its prefill step of n fresh tokens and its decode step of n
    sequences at context 1, both with the LM head (which Vidur leaves out) and attention at a context of
    ~1: negligible work, but its fixed per-kernel latency where the spec's achievable overlay fits one
    (h100-sxm: 64 us per attention kernel, ~2 ms a step over 32 layers; Vidur's profile has ~9 us)."""
    architecture = server.architecture
    profiled = profiled_layer_ms(files["mlp"], scenario.tp)
    tokens = np.array([n for n in STEP_TOKENS if n in profiled])
    layer = np.array([profiled[n] for n in tokens])
    if scenario.tp > 1:
        sizes = tokens * architecture.hidden * 2
        if files["all_reduce"].exists():
            layer = layer + 2 * (profiled_all_reduce_ms(files["all_reduce"], scenario.tp, sizes) + NCCL_LAUNCH_MS)
        else:
            layer = layer + math.nan
    rows = []
    for n, per_layer in zip(tokens.tolist(), layer.tolist(), strict=True):
        vidur_ms = architecture.layers * per_layer
        prefill_ms = 1e3 * server.costs.prefill_s(n, 0.0)
        decode_ms = 1e3 * server.costs.decode_s(n, 1.0) if n <= MAX_BATCH else math.nan
        rows.append({"tokens": n, "vidur_profiled_ms": vidur_ms, "perfmodel_prefill_ms": prefill_ms,
                     "perfmodel_decode_ms": decode_ms, "prefill_ratio": prefill_ms / vidur_ms,
                     "decode_ratio": decode_ms / vidur_ms})
    return rows


HF_COMMIT = "0" * 40


def _hf_dataset(cache_dir: Path, repo_id: str, files: dict[str, Path], config: dict) -> None:
    """``files`` (name -> csv) as a cached Hugging Face dataset snapshot, xz-compressed, once."""
    folder = cache_dir / ("datasets--" + repo_id.replace("/", "--"))
    snapshot = folder / "snapshots" / HF_COMMIT
    stamp = snapshot / ".sources.json"
    sources = {name: str(path.resolve()) + f"@{path.stat().st_size}:{path.stat().st_mtime_ns}"
               for name, path in files.items()}
    if stamp.exists() and json.loads(stamp.read_text()) == sources:
        return
    shutil.rmtree(folder, ignore_errors=True)
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(HF_COMMIT)
    for name, path in files.items():
        with open(path, "rb") as source, lzma.open(snapshot / f"{name}.csv.xz", "wb", preset=1) as target:
            shutil.copyfileobj(source, target)
    (snapshot / "config.json").write_text(json.dumps(config))
    stamp.write_text(json.dumps(sources))


def local_datasets(cache: Path, scenario: Scenario, files: dict[str, Path], digests: dict[str, str]) -> tuple[str, str]:
    """Vidur's two profiling datasets, served from ``cache`` (no network). Their names carry a digest of
    the files, since Vidur keys its cached forests by the dataset's name."""
    compute_digest = hashlib.sha256((digests["mlp"] + digests["attention"]).encode()).hexdigest()[:10]
    network_digest = hashlib.sha256((digests["all_reduce"] + digests["send_recv"]).encode()).hexdigest()[:10]
    compute_id = f"local/{scenario.device}-{scenario.profile_model.replace('/', '-')}-{compute_digest}"
    network_id = f"local/{scenario.network}-{network_digest}"
    _hf_dataset(cache / "profiling_data" / "compute", compute_id,
                {"mlp": files["mlp"], "attention": files["attention"]},
                {"model": scenario.vidur_model, "device_sku": scenario.device})
    _hf_dataset(cache / "profiling_data" / "network", network_id,
                {"all_reduce": files["all_reduce"], "send_recv": files["send_recv"]}, {"sku": scenario.network})
    return compute_id, network_id


# --- Vidur ------------------------------------------------------------------------------------

# Runs in Vidur's interpreter: builds Vidur's simulator from CLI arguments, replaces its generated
# requests with the given stream, runs it and prints per-request times as one JSON line.
RUNNER = r"""
import json, sys, time
spec = json.loads(sys.stdin.read())
sys.argv = ["vidur"] + spec["args"]
start = time.perf_counter()
import vidur
from vidur.config import SimulationConfig
from vidur.entities import Request
from vidur.events import RequestArrivalEvent
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
simulator = Simulator(config)
setup = time.perf_counter() - start
requests = [Request(arrived_at=float(a), num_prefill_tokens=int(p), num_decode_tokens=int(d))
            for a, p, d in zip(spec["arrival_s"], spec["prompt_tokens"], spec["output_tokens"])]
simulator._event_queue = []
for request in requests:
    simulator._add_event(RequestArrivalEvent(request.arrived_at, request))
start = time.perf_counter()
simulator.run()
wall = time.perf_counter() - start
restarts = sum(r.num_restarts for r in requests)
print("VIDUR_RESULT " + json.dumps({
    "version": getattr(vidur, "__version__", None), "setup_s": setup, "wall_s": wall, "restarts": restarts,
    "first_s": [r.prefill_completed_at for r in requests], "finish_s": [r.completed_at for r in requests]}))
"""


def vidur_version(python: str) -> str | None:
    """Vidur's installed version in ``python``, or None when it cannot be imported there."""
    if not Path(python).exists():
        return None
    probe = subprocess.run([python, "-c", "import importlib.metadata as m, vidur; print(m.version('vidur'))"],
                           capture_output=True, text=True, timeout=300)
    return probe.stdout.strip() if probe.returncode == 0 else None


QUICK_FIT = {"num_estimators": "250", "max_depth": "16", "min_samples_split": "2", "k_fold_cv_splits": "2"}


def vidur_args(scenario: Scenario, kv_blocks: int, compute_id: str, network_id: str, cache: Path,
               output_dir: Path, seed: int, quick_fit: bool) -> list[str]:
    predictor = "--random_forrest_execution_time_predictor_config_"
    fit = [arg for key, value in QUICK_FIT.items() for arg in (predictor + key, value)] if quick_fit else []
    return fit + [
        "--seed", str(seed), "--log_level", "warning",
        "--cluster_config_num_replicas", "1", "--global_scheduler_config_type", "round_robin",
        "--replica_config_model_name", scenario.vidur_model, "--replica_config_device", scenario.device,
        "--replica_config_network_device", scenario.network,
        "--replica_config_tensor_parallel_size", str(scenario.tp), "--replica_config_num_pipeline_stages", "1",
        "--replica_config_gpu_memory_utilization", str(MEMORY_UTILIZATION),
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_batch_size_cap", str(MAX_BATCH),
        "--sarathi_scheduler_config_chunk_size", str(TOKENS_PER_STEP),
        "--cache_config_block_size", str(BLOCK_SIZE), "--cache_config_num_blocks", str(kv_blocks),
        "--cache_config_watermark_blocks_fraction", "0",
        # A placeholder generator (its one request is replaced by the stream in RUNNER).
        "--request_generator_config_type", "synthetic", "--synthetic_request_generator_config_num_requests", "1",
        "--synthetic_request_generator_config_max_tokens", str(VIDUR_MAX_MODEL_LEN),
        "--length_generator_config_type", "fixed", "--fixed_request_length_generator_config_prefill_tokens", "16",
        "--fixed_request_length_generator_config_decode_tokens", "16",
        "--fixed_request_length_generator_config_max_tokens", str(VIDUR_MAX_MODEL_LEN),
        "--interval_generator_config_type", "static",
        "--execution_time_predictor_config_type", "random_forrest",
        predictor + "model_profiling_dataset", compute_id, predictor + "network_profiling_dataset", network_id,
        predictor + "prediction_hf_org", "local", predictor + "cache_dir", str(cache),
        predictor + "prediction_max_tokens_per_request", str(VIDUR_MAX_MODEL_LEN),
        predictor + "prediction_max_batch_size", str(MAX_BATCH),
        predictor + "prediction_max_prefill_chunk_size", str(TOKENS_PER_STEP),
        "--metrics_config_output_dir", str(output_dir), "--no-metrics_config_write_metrics",
        "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_write_json_trace", "--no-metrics_config_store_request_metrics",
        "--no-metrics_config_store_batch_metrics", "--no-metrics_config_store_operation_metrics",
        "--no-metrics_config_store_utilization_metrics", "--no-metrics_config_store_token_completion_metrics",
    ]


class VidurError(RuntimeError):
    pass


def run_vidur(python: str, args: list[str], stream: dict, timeout_s: float) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled", WANDB_SILENT="true",
               HF_HUB_DISABLE_TELEMETRY="1")
    spec = json.dumps({"args": args, **{key: list(value) for key, value in stream.items()}})
    with tempfile.TemporaryDirectory(prefix="vidur-run-") as folder:
        done = subprocess.run([python, "-c", RUNNER], input=spec, capture_output=True, text=True, env=env,
                              cwd=folder, timeout=timeout_s)
    lines = [line for line in done.stdout.splitlines() if line.startswith("VIDUR_RESULT ")]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise VidurError(f"Vidur exited with {done.returncode}:\n{tail}")
    return json.loads(lines[-1].removeprefix("VIDUR_RESULT "))


# --- the comparison ---------------------------------------------------------------------------

def ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def compare(args: argparse.Namespace) -> dict:
    report: dict = {"benchmark": "vidur_compare", "perfmodel_version": __version__,
                    "python": platform.python_version(), "requests": args.requests, "seed": args.seed,
                    "settings": {"max_batch": MAX_BATCH, "max_tokens_per_step": TOKENS_PER_STEP,
                                 "block_size": BLOCK_SIZE, "memory_utilization": MEMORY_UTILIZATION,
                                 "dtype": DTYPE, "perfmodel_mode": MODE, "vidur_scheduler": "sarathi",
                                 "vidur_predictor": "random_forrest", "arrivals": "poisson",
                                 "vidur_fit": QUICK_FIT if args.vidur_quick_fit else "Vidur's default grid search"},
                    "not_matched": NOT_MATCHED, "vidur": {}, "scenarios": []}
    version = vidur_version(args.vidur_python)
    report["vidur"]["version"] = version
    if version is None:
        message = f"Vidur is not installed: {INSTALL} (or pass --vidur-python PATH)"
        print(message)
        report["vidur"]["status"] = message
    profiling = Path(args.vidur_profiling) if args.vidur_profiling else None
    if profiling is None:
        message = ("Vidur's profiling data is not available: vidur 0.0.26 ships none and downloads it from the "
                   f"Hugging Face hub at run time (datasets project-vajra/...); {PROFILE_HELP}")
        print(message)
        report["vidur"].setdefault("status", message)
        return report
    report["vidur"]["profiling"] = str(profiling)
    report["vidur"]["profiling_source"] = profile_source(profiling)
    selected = [s for s in SCENARIOS if not args.scenario or any(key in s.name for key in args.scenario)]
    cache = Path(args.vidur_cache)
    for scenario in selected:
        entry: dict = {"scenario": asdict(scenario), "runs": []}
        report["scenarios"].append(entry)
        files = profile_files(profiling, scenario)
        entry["profile_files"] = {name: {"path": str(path), "sha256": _sha(path)} if path.exists() else None
                                  for name, path in files.items()}
        server = perfmodel_server(scenario)
        entry["kv_blocks"] = server.kv.blocks
        if files["mlp"].exists():
            entry["step_costs"] = step_costs(server, scenario, files)
        missing = [name for name in ("mlp", "attention") + (("all_reduce",) if scenario.tp > 1 else ())
                   if not files[name].exists()]
        runnable = version is not None and not missing
        if missing:
            entry["vidur_status"] = f"profile files missing: {', '.join(str(files[n]) for n in missing)}"
        elif version is None:
            entry["vidur_status"] = "Vidur is not installed"
        if runnable:
            digests = {name: (entry["profile_files"][name] or {}).get("sha256", "") for name in files}
            compute_id, network_id = local_datasets(cache, scenario, files, digests)
        for rate in scenario.rates:
            pm, stream = run_perfmodel(server, scenario, rate, args.requests, args.seed)
            run: dict = {"rate_per_s": rate, "perfmodel": pm}
            entry["runs"].append(run)
            if not runnable:
                continue
            with tempfile.TemporaryDirectory(prefix="vidur-out-") as output_dir:
                argv = vidur_args(scenario, server.kv.blocks, compute_id, network_id, cache, Path(output_dir),
                                  args.seed, args.vidur_quick_fit)
                try:
                    raw = run_vidur(args.vidur_python, argv, stream, args.vidur_timeout)
                except (VidurError, subprocess.TimeoutExpired) as error:
                    run["vidur_error"] = str(error)
                    print(f"{scenario.name} @ {rate:g}/s: {error}", file=sys.stderr)
                    continue
            arrival = np.asarray(stream["arrival_s"], dtype=float)
            outputs = np.asarray(stream["output_tokens"], dtype=float)
            vd = summary(arrival, np.asarray(raw["first_s"]), np.asarray(raw["finish_s"]), outputs)
            vd.update(wall_s=raw["wall_s"], setup_s=raw["setup_s"], restarts=raw["restarts"])
            run["vidur"] = vd
            run["ratio_perfmodel_over_vidur"] = {key: ratio(pm[key], vd[key]) for key in
                                                 ("ttft_p50_s", "ttft_p99_s", "tpot_mean_s", "tokens_per_s",
                                                  "wall_s")}
    return report


def print_report(report: dict) -> None:
    for entry in report["scenarios"]:
        scenario = entry["scenario"]
        print(f"\n== {scenario['name']}: prompt {scenario['prompt']}, output {scenario['output']}, "
              f"{report['requests']} requests, seed {report['seed']}, KV blocks {entry['kv_blocks']}")
        if entry.get("vidur_status"):
            print(f"   Vidur: {entry['vidur_status']}")
        if entry.get("step_costs"):
            print("   step time, attention aside (ms): Vidur's profiled layer medians x layers | perfmodel")
            print(f"   {'tokens':>6} {'vidur':>8} {'pm prefill':>10} {'pm decode':>10} {'pf/vd':>6} {'dec/vd':>6}")
            for row in entry["step_costs"]:
                print(f"   {row['tokens']:>6} {row['vidur_profiled_ms']:>8.2f} {row['perfmodel_prefill_ms']:>10.2f} "
                      f"{row['perfmodel_decode_ms']:>10.2f} {row['prefill_ratio']:>6.2f} {row['decode_ratio']:>6.2f}")
        print(f"   {'rate/s':>6} {'tool':<9} {'TTFT p50 ms':>11} {'TTFT p99 ms':>11} {'TPOT ms':>8} "
              f"{'tok/s':>7} {'wall s':>7}")
        for run in entry["runs"]:
            for tool in ("perfmodel", "vidur"):
                m = run.get(tool)
                if m is None:
                    continue
                print(f"   {run['rate_per_s']:>6g} {tool:<9} {1e3 * m['ttft_p50_s']:>11.1f} "
                      f"{1e3 * m['ttft_p99_s']:>11.1f} {1e3 * m['tpot_mean_s']:>8.2f} {m['tokens_per_s']:>7.0f} "
                      f"{m['wall_s']:>7.2f}")
            r = run.get("ratio_perfmodel_over_vidur")
            if r:
                print(f"   {'':>6} {'pm/vidur':<9} {r['ttft_p50_s']:>11.2f} {r['ttft_p99_s']:>11.2f} "
                      f"{r['tpot_mean_s']:>8.2f} {r['tokens_per_s']:>7.2f} {r['wall_s']:>7.2f}")
            if run.get("vidur_error"):
                print(f"   {'':>6} vidur failed: {run['vidur_error'].splitlines()[-1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vidur-python", default=os.environ.get("VIDUR_PYTHON", DEFAULT_PYTHON),
                        help=f"interpreter with vidur installed (default {DEFAULT_PYTHON})")
    parser.add_argument("--vidur-profiling", default=os.environ.get("VIDUR_PROFILING"),
                        help="microsoft/vidur's data/profiling folder (compute/<device>/<model>/, network/<node>/)")
    parser.add_argument("--vidur-cache", default=str(DEFAULT_CACHE),
                        help="Vidur's cache: the local profile datasets and its trained forests")
    parser.add_argument("--vidur-quick-fit", action="store_true",
                        help="one forest setting and 2-fold CV instead of Vidur's 27-setting 10-fold grid search "
                             f"({QUICK_FIT}): minutes instead of about half an hour per (model, device, tp) on 2 cores")
    parser.add_argument("--vidur-timeout", type=float, default=3600.0, help="seconds per Vidur run")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", action="append", help="run the scenarios whose name contains this")
    parser.add_argument("--json", default=str(DEFAULT_JSON))
    args = parser.parse_args(argv)
    report = compare(args)
    if not report["scenarios"]:
        print(f"nothing compared; {args.json} left as it is")
        return 0
    print_report(report)
    write_text_atomically(args.json, json.dumps(report, indent=1, allow_nan=True) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
