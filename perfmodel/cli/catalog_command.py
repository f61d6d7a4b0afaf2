"""``perfmodel models list`` and ``perfmodel workloads list``: what ships with perfmodel."""

from __future__ import annotations

from perfmodel.jsonable import json_text
from perfmodel.tables import format_table


def register(commands) -> None:
    models = commands.add_parser("models", help="the shipped LLM architectures (Hugging Face configs)")
    models_commands = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    listing = models_commands.add_parser("list", help="one line per shipped model")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_models)

    workloads = commands.add_parser("workloads", help="the shipped workload graphs (for predict, sweep, roofline)")
    workloads_commands = workloads.add_subparsers(dest="workloads_command", metavar="ACTION", required=True)
    listing = workloads_commands.add_parser("list", help="one line per shipped workload")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_workloads)


def _models(args) -> int:
    from perfmodel.llm.catalog import load_architecture, model_names

    rows = []
    for name in model_names():
        a = load_architecture(name)
        rows.append({"name": name, "parameters": a.parameter_count(), "active_parameters": a.active_parameter_count(),
                     "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads,
                     "attention": attention_kind(a), "experts": a.experts, "experts_per_token": a.experts_per_token,
                     "shared_experts_width": a.shared_intermediate, "moe_layers": a.moe_layer_count,
                     "kv_bytes_per_token_bf16": a.kv_bytes_per_token(2), "max_positions": a.max_positions,
                     "sliding_window": a.sliding_window, "mtp_modules": a.mtp_modules,
                     "mtp_parameters": a.mtp_parameters, "attention_layers": a.attention_layer_count,
                     "linear_layers": a.linear_layers_in(range(a.layers)),
                     "linear_mixer": None if a.mixer is None else a.mixer.kind,
                     "mixerless_layers": sum(not a.has_mixer(layer) for layer in range(a.layers)),
                     "state_bytes_per_sequence_bf16": a.state_bytes(2)})
    if args.json:
        print(json_text(rows, indent=1))
        return 0
    print(format_table(["model", "parameters (active)", "layers", "hidden", "attention", "heads / kv", "experts",
                        "KV/token bf16", "state/sequence", "context"],
                       [[row["name"], f"{row['parameters'] / 1e9:.2f} B ({row['active_parameters'] / 1e9:.2f} B)",
                         _layers(row), row["hidden"], row["attention"], f"{row['heads']} / {row['kv_heads']}",
                         _experts(row), f"{row['kv_bytes_per_token_bf16'] / 1024:.1f} KiB",
                         f"{row['state_bytes_per_sequence_bf16'] / 2**20:.1f} MiB" if row["linear_layers"] else "-",
                         row["max_positions"]]
                        for row in rows]))
    print("KV/token: every attention layer holding the whole context (windowed layers hold at most their window). "
          "state/sequence: a hybrid's linear-attention / Mamba-2 layers' recurrent and conv state, fixed whatever the "
          "context (bf16, or the dtype the config fixes for the recurrent state).")
    for row in rows:
        if row["mtp_modules"]:
            print(f"{row['name']}: {row['mtp_modules']} multi-token-prediction module(s) of "
                  f"{row['mtp_parameters'] / 1e9:.2f} B parameters beside these (held with serve --speculative mtp)")
    return 0


def attention_kind(a) -> str:
    """MHA / GQA / MQA / MLA, and the windows its layers use (sliding W or chunks of W, or W/full when they
    alternate)."""
    kind = "MLA" if a.latent is not None else "MHA" if a.kv_heads == a.heads else "MQA" if a.kv_heads == 1 else "GQA"
    windows = sorted({a.window(layer) or 0 for layer in range(a.layers)})
    if windows == [0]:
        return kind
    window = "chunk" if a.chunked_attention else "window"
    return f"{kind}, " + "/".join(f"{window} {w}" if w else "full" for w in windows)


def _layers(row) -> str:
    """The layer count, and for a hybrid its mix: attention + linear-attention (gated delta net) / Mamba-2 layers
    (+ Nemotron-H's blocks that hold an MLP or MoE alone)."""
    if not row["linear_layers"]:
        return str(row["layers"])
    mixer = {"gated_delta_net": "gated delta net", "mamba2": "Mamba-2"}.get(row["linear_mixer"], row["linear_mixer"])
    blocks = f" + {row['mixerless_layers']} MLP/MoE alone" if row["mixerless_layers"] else ""
    return f"{row['layers']} ({row['attention_layers']} attention + {row['linear_layers']} {mixer}{blocks})"


def _experts(row) -> str:
    if row["experts"] <= 1:
        return "-"
    shared = f" + shared ({row['shared_experts_width']} wide)" if row["shared_experts_width"] else ""
    layers = f", {row['moe_layers']} of {row['layers']} layers" if row["moe_layers"] < row["layers"] else ""
    return f"{row['experts_per_token']} of {row['experts']}{shared}{layers}"


def _workloads(args) -> int:
    from perfmodel.paths import data_directory
    from perfmodel.workload.io import load_graph

    rows = []
    for path in sorted(data_directory("workloads").glob("*.yaml")):
        graph = load_graph(path)
        kinds = sorted({op.kind for op in graph.ops})
        rows.append({"name": path.stem, "ops": len(graph.ops), "kinds": kinds})
    if args.json:
        print(json_text(rows, indent=1))
        return 0
    print(format_table(["workload", "ops", "op kinds"], [[row["name"], row["ops"], ", ".join(row["kinds"])]
                                                          for row in rows]))
    return 0
