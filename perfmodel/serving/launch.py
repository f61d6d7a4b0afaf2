"""Launch settings of a chosen deployment for vLLM, SGLang or TensorRT-LLM (pure core).

Only flags each engine's documentation defines are written (``DOCUMENTED_FLAGS``, with the page each
list was read from; a test checks every exported flag against them):

* vLLM, ``vllm serve`` engine arguments (https://docs.vllm.ai/en/latest/configuration/engine_args.html):
  ``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--data-parallel-size``, ``--enable-expert-parallel``,
  ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--gpu-memory-utilization``, ``--block-size``,
  ``--kv-cache-dtype``, ``--speculative-config`` (JSON: ``method`` eagle / eagle3 / deepseek_mtp /
  draft_model, ``model``, ``num_speculative_tokens``; https://docs.vllm.ai/en/latest/features/spec_decode.html)
  and ``--kv-transfer-config`` (disaggregated prefill, JSON ``kv_connector`` NixlConnector, ``kv_role`` kv_both;
  https://docs.vllm.ai/en/latest/features/disagg_prefill.html).
* SGLang, ``python -m sglang.launch_server`` server arguments
  (https://docs.sglang.ai/advanced_features/server_arguments.html): ``--tp-size``, ``--pp-size``,
  ``--ep-size``, ``--dp-size`` and ``--enable-dp-attention`` (``--tp-size`` then counts all the
  worker's chips), ``--max-running-requests``, ``--chunked-prefill-size``, ``--mem-fraction-static``,
  ``--page-size``, ``--kv-cache-dtype``, ``--speculative-algorithm`` (EAGLE, EAGLE3, NEXTN for MTP;
  https://docs.sglang.ai/advanced_features/speculative_decoding.html), ``--speculative-num-steps``,
  ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``, ``--speculative-draft-model-path``,
  ``--disaggregation-mode`` (prefill / decode; https://docs.sglang.ai/advanced_features/pd_disaggregation.html).
* TensorRT-LLM, ``trtllm-serve`` (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html):
  ``--tp_size``, ``--pp_size``, ``--ep_size``, ``--max_batch_size``, ``--max_num_tokens``,
  ``--kv_cache_free_gpu_memory_fraction``, ``--extra_llm_api_options`` (a YAML file of LLM API
  options: ``enable_attention_dp`` with ``--tp_size`` counting all the worker's chips,
  ``speculative_config`` with ``decoding_type`` Eagle / MTP / DraftTarget, ``max_draft_len``,
  ``num_nextn_predict_layers``, ``speculative_model_dir``;
  https://nvidia.github.io/TensorRT-LLM/advanced/speculative-decoding.html).

A disaggregated deployment gives one command per role (prefill, decode). Settings the engines have
no flag for (replica counts, the router) are left to the deployment and listed as notes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from perfmodel.errors import PerfmodelError
from perfmodel.llm.graphs import Parallelism
from perfmodel.serving.speculation import Speculation

ENGINES = ("vllm", "sglang", "trtllm")
COMMANDS = {"vllm": "vllm serve", "sglang": "python -m sglang.launch_server", "trtllm": "trtllm-serve"}
DOCUMENTED_FLAGS = {
    "vllm": {"source": "https://docs.vllm.ai/en/latest/configuration/engine_args.html",
             "flags": ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                       "--enable-expert-parallel",
                       "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization", "--block-size",
                       "--kv-cache-dtype", "--speculative-config", "--kv-transfer-config")},
    "sglang": {"source": "https://docs.sglang.ai/advanced_features/server_arguments.html",
               "flags": ("--tp-size", "--pp-size", "--ep-size", "--dp-size", "--enable-dp-attention",
                         "--max-running-requests", "--chunked-prefill-size",
                         "--mem-fraction-static", "--page-size", "--kv-cache-dtype", "--speculative-algorithm",
                         "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                         "--speculative-draft-model-path", "--disaggregation-mode")},
    "trtllm": {"source": "https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html",
               "flags": ("--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens",
                         "--kv_cache_free_gpu_memory_fraction", "--extra_llm_api_options")},
}
KV_DTYPES = {"vllm": {"fp8": "fp8", "bf16": "auto", "fp16": "auto"},
             "sglang": {"fp8": "fp8_e4m3", "bf16": "auto", "fp16": "auto"}}


@dataclass(frozen=True, kw_only=True)
class Worker:
    """One engine process's settings: its role (serve, prefill or decode) and limits."""

    role: str
    parallelism: Parallelism
    max_batch: int
    max_tokens_per_step: int
    memory_utilization: float
    block_size: int
    kv_dtype: str
    speculation: Speculation | None = None
    count: int = 1  # identical workers (replicas) to start


@dataclass(frozen=True, kw_only=True)
class Launch:
    engine: str
    model: str
    commands: tuple[tuple[str, int, tuple[str, ...]], ...]  # (role, workers, argv)
    files: dict[str, str] = field(default_factory=dict)  # name -> text (TensorRT-LLM's extra options YAML)
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [f"# {self.engine}: launch settings for {self.model} (flags from {DOCUMENTED_FLAGS[self.engine]['source']})"]
        for role, count, argv in self.commands:
            lines.append(f"# {role}: {count} worker{'s' if count > 1 else ''}")
            lines.append(" ".join(_quote(word) for word in argv))
        for name, text in self.files.items():
            lines.append(f"# {name}:")
            lines += [f"#   {line}" for line in text.splitlines()]
        lines += [f"# note: {note}" for note in self.notes]
        return "\n".join(lines)

    def flags(self) -> list[str]:
        return [word.split("=", 1)[0] for _, _, argv in self.commands for word in argv if word.startswith("--")]

    def to_dict(self) -> dict:
        return {"engine": self.engine, "model": self.model,
                "commands": [{"role": role, "workers": count, "argv": list(argv)} for role, count, argv in self.commands],
                "files": dict(self.files), "notes": list(self.notes)}


def _quote(word: str) -> str:
    return f"'{word}'" if any(ch in word for ch in " {}\"") else word


def launch_settings(engine: str, model: str, workers: list[Worker], *, draft_model_path: str | None = None) -> Launch:
    """The launch commands of ``workers`` for ``engine`` (module docstring)."""
    if engine not in ENGINES:
        raise PerfmodelError(f"export engine {engine!r}: expected one of {', '.join(ENGINES)}")
    commands, files, notes = [], {}, []
    for worker in workers:
        argv, extra = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}[engine](model, worker, draft_model_path)
        commands.append((worker.role, worker.count, tuple(argv)))
        if extra:
            files[f"{worker.role}-extra-llm-api-options.yaml"] = extra
    if len(workers) > 1:
        notes.append("prefill and decode workers need the engine's KV-transfer setup and a router in front "
                     "(vLLM: a kv_connector; SGLang: --disaggregation-mode with its mini load balancer; "
                     "TensorRT-LLM: trtllm-serve disaggregated with a context/generation config)")
    if any(worker.parallelism.dp > 1 for worker in workers):
        notes.append("the batch limit is perfmodel's per attention-data-parallel group; check whether the engine's "
                     "flag counts requests per group or per worker")
    if any(worker.count > 1 for worker in workers):
        notes.append("start the stated number of identical workers behind a load balancer")
    return Launch(engine=engine, model=model, commands=tuple(commands), files=files, notes=tuple(notes))


def _vllm(model: str, w: Worker, draft: str | None) -> tuple[list[str], str]:
    p = w.parallelism
    argv = ["vllm", "serve", model, "--tensor-parallel-size", str(p.tp), "--pipeline-parallel-size", str(p.pp)]
    if p.dp > 1:
        argv += ["--data-parallel-size", str(p.dp)]
    if p.ep > 1:
        argv.append("--enable-expert-parallel")
    argv += ["--max-num-seqs", str(w.max_batch), "--max-num-batched-tokens", str(w.max_tokens_per_step),
             "--gpu-memory-utilization", f"{w.memory_utilization:g}", "--block-size", str(w.block_size),
             "--kv-cache-dtype", KV_DTYPES["vllm"].get(w.kv_dtype, "auto")]
    s = w.speculation
    if s is not None:
        config: dict = {"method": {"eagle": "eagle3", "mtp": "deepseek_mtp", "draft": "draft_model"}[s.method],
                        "num_speculative_tokens": s.tokens}
        if s.method != "mtp":
            config["model"] = draft or (s.draft_model.name if s.draft_model is not None else "<EAGLE-3 head>")
        argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
    if w.role in ("prefill", "decode"):
        argv += ["--kv-transfer-config",
                 json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))]
    return argv, ""


def _sglang(model: str, w: Worker, draft: str | None) -> tuple[list[str], str]:
    p = w.parallelism
    # SGLang's --tp-size counts every chip of the worker; --dp-size groups them for DP attention
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--tp-size", str(p.tp * p.dp),
            "--pp-size", str(p.pp)]
    if p.dp > 1:
        argv += ["--dp-size", str(p.dp), "--enable-dp-attention"]
    if p.ep > 1:
        argv += ["--ep-size", str(p.ep)]
    argv += ["--max-running-requests", str(w.max_batch), "--chunked-prefill-size", str(w.max_tokens_per_step),
             "--mem-fraction-static", f"{w.memory_utilization:g}", "--page-size", str(w.block_size),
             "--kv-cache-dtype", KV_DTYPES["sglang"].get(w.kv_dtype, "auto")]
    s = w.speculation
    if s is not None:
        algorithm = {"eagle": "EAGLE3", "mtp": "NEXTN", "draft": "STANDALONE"}[s.method]
        argv += ["--speculative-algorithm", algorithm, "--speculative-num-steps", str(s.tokens),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(s.tokens + 1)]
        if s.method != "mtp":
            argv += ["--speculative-draft-model-path",
                     draft or (s.draft_model.name if s.draft_model is not None else "<EAGLE-3 head>")]
    if w.role in ("prefill", "decode"):
        argv += ["--disaggregation-mode", w.role]
    # "--model-path" is the model, not a tuning flag: checked apart from DOCUMENTED_FLAGS
    return argv, ""


def _trtllm(model: str, w: Worker, draft: str | None) -> tuple[list[str], str]:
    p = w.parallelism
    # TensorRT-LLM's tp_size counts every chip; attention data parallelism is an LLM API option
    argv = ["trtllm-serve", model, "--tp_size", str(p.tp * p.dp), "--pp_size", str(p.pp)]
    if p.ep > 1:
        argv += ["--ep_size", str(p.ep)]
    argv += ["--max_batch_size", str(w.max_batch), "--max_num_tokens", str(w.max_tokens_per_step),
             "--kv_cache_free_gpu_memory_fraction", f"{w.memory_utilization:g}"]
    s = w.speculation
    lines = ["enable_attention_dp: true"] if p.dp > 1 else []
    if s is not None:
        lines.append("speculative_config:")
        if s.method == "mtp":
            lines += ["  decoding_type: MTP", f"  num_nextn_predict_layers: {s.tokens}"]
        else:
            kind = "Eagle" if s.method == "eagle" else "DraftTarget"
            path = draft or (s.draft_model.name if s.draft_model is not None else "<EAGLE-3 head>")
            lines += [f"  decoding_type: {kind}", f"  max_draft_len: {s.tokens}", f"  speculative_model_dir: {path}"]
    extra = "\n".join(lines) + "\n" if lines else ""
    if extra:
        argv += ["--extra_llm_api_options", f"{w.role}-extra-llm-api-options.yaml"]
    return argv, extra
