"""``perfmodel capture FILE.py:factory --input-shape 1x512 [--dtype bf16] [--train] -o workloads/NAME.yaml``."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

from perfmodel.errors import PerfmodelError


def register(commands) -> None:
    capture = commands.add_parser("capture",
                                  help="capture a PyTorch nn.Module into a workload file (no weights, no device)",
                                  description="Import (that is, execute) FILE.py, call its factory and trace the "
                                              "module it returns on the meta device into a workload file. Capture "
                                              "only files you trust: importing runs their code.")
    capture.add_argument("target",
                         help="FILE.py:factory, a function that returns the nn.Module (build it on the meta device); "
                              "the file is executed")
    capture.add_argument("--input-shape", action="append", required=True, metavar="1x512",
                         help="shape of each forward input, in order (repeatable)")
    capture.add_argument("--input-dtype", action="append", metavar="DTYPE",
                         help="dtype of each input (default: int64 when the module has an embedding, else --dtype)")
    capture.add_argument("--dtype", default=None, help="convert the module's parameters to this dtype (e.g. bf16)")
    capture.add_argument("--name", help="workload name (default: the factory's name)")
    capture.add_argument("--train", action="store_true",
                         help="capture a training step: the forward, a loss (the sum of the output), the backward as "
                              "autograd runs it and an AdamW step; op names start with their phase (forward, "
                              "backward, recompute, optimizer)")
    capture.add_argument("--no-optimizer", action="store_true", help="with --train: leave out the optimizer step")
    capture.add_argument("-o", "--output", type=Path, required=True, help="workload file to write (.yaml or .json)")
    capture.set_defaults(handler=_capture)


def parse_shape(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)*", text.strip()):
        raise PerfmodelError(f"--input-shape {text!r}: expected dimensions joined by 'x', e.g. 1x512")
    shape = tuple(int(part) for part in text.strip().split("x"))
    if any(dim <= 0 for dim in shape):
        raise PerfmodelError(f"--input-shape {text!r}: every dimension must be more than zero")
    return shape


def load_factory(target: str):
    path_text, sep, factory_name = target.rpartition(":")
    if not sep or not path_text or not factory_name:
        raise PerfmodelError(f"{target!r}: expected FILE.py:factory")
    path = Path(path_text)
    if path.suffix != ".py":
        raise PerfmodelError(f"{target!r}: the target is a Python file and a function in it, FILE.py:factory; "
                             f"{path} does not end in .py")
    if not path.is_file():
        raise PerfmodelError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(f"perfmodel_capture_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise PerfmodelError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:  # the user's file failed to import (or exited): bad input
        raise PerfmodelError(f"{path}: importing it raised {type(error).__name__}: {error}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise PerfmodelError(f"{path} has no function {factory_name!r}")
    return factory


def torch_dtype(name: str):
    import torch

    from perfmodel.dtypes import get_dtype

    canonical = get_dtype(name).name
    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64,
             "int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "bool": torch.bool}
    if canonical not in table:
        raise PerfmodelError(f"dtype {name!r} cannot be used for module parameters or inputs here")
    return table[canonical]


def _capture(args) -> int:
    from perfmodel.yaml_source import check_output_path

    check_output_path(args.output, "-o/--output", (".yaml", ".yml", ".json"))
    shapes = [parse_shape(text) for text in args.input_shape]
    factory = load_factory(args.target)

    import torch

    from perfmodel.workload.capture import capture
    from perfmodel.workload.io import save_graph

    try:
        module = factory()
    except (Exception, SystemExit) as error:  # the user's factory failed (or exited)
        raise PerfmodelError(f"{args.target}: the factory raised {type(error).__name__}: {error}") from None
    if not isinstance(module, torch.nn.Module):
        raise PerfmodelError(f"{args.target} returned {type(module).__name__}, not a torch.nn.Module")
    if args.dtype:
        module = module.to(torch_dtype(args.dtype))
    has_embedding = any(isinstance(sub, torch.nn.Embedding) for sub in module.modules())
    default_input = torch.int64 if has_embedding else torch_dtype(args.dtype or "fp32")
    dtypes = [torch_dtype(name) for name in (args.input_dtype or [])]
    dtypes += [default_input] * (len(shapes) - len(dtypes))
    name = args.name or args.target.rpartition(":")[2]
    if args.no_optimizer and not args.train:
        raise PerfmodelError("--no-optimizer goes with --train")
    if args.train:
        from perfmodel.workload.capture import capture_training

        result = capture_training(module, input_shapes=shapes, input_dtypes=dtypes, name=name,
                                  optimizer=None if args.no_optimizer else "adamw")
    else:
        result = capture(module, input_shapes=shapes, input_dtypes=dtypes, name=name)
    save_graph(result.graph, args.output)
    kinds: dict[str, int] = {}
    for op in result.graph.ops:
        kinds[op.kind] = kinds.get(op.kind, 0) + 1
    print(f"captured {len(result.graph.ops)} ops ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), "
          f"{result.free_ops} free views, {len(result.graph.edges)} edges -> {args.output}")
    if result.unsupported:
        print("unsupported ops (estimated from tensor sizes): "
              + ", ".join(f"{name} x{count}" for name, count in result.unsupported.items()), file=sys.stderr)
    return 0
