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
        rows.append({"name": name, "parameters": a.parameter_count(), "layers": a.layers, "hidden": a.hidden,
                     "heads": a.heads, "kv_heads": a.kv_heads, "experts": a.experts,
                     "experts_per_token": a.experts_per_token, "max_positions": a.max_positions,
                     "sliding_window": a.sliding_window})
    if args.json:
        print(json_text(rows, indent=1))
        return 0
    print(format_table(["model", "parameters", "layers", "hidden", "heads / kv", "experts", "context"],
                       [[row["name"], f"{row['parameters'] / 1e9:.2f} B", row["layers"], row["hidden"],
                         f"{row['heads']} / {row['kv_heads']}",
                         f"{row['experts_per_token']} of {row['experts']}" if row["experts"] > 1 else "-",
                         row["max_positions"]] for row in rows]))
    return 0


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
