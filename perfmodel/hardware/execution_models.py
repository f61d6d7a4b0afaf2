"""Execution models: how the host drives the device, in one registry (pure core).

A spec's ``scheduling.modes`` gives the *numbers* of each mode it offers (launch costs, DMA set-up,
barriers: :class:`~perfmodel.hardware.model.ExecutionMode`); an :class:`ExecutionModel` here gives
its *behaviour*, once, for the evaluator, the fit, the charts and every command line:

* ``fuses``: whether chains of element-wise work are fused into their producer's kernel;
* ``kernel_overhead``: the ``ExecutionMode`` field paid once per launched kernel (a fused group is one
  kernel); ``host_op_overhead``: the field paid per op that launches no kernel (eager views and
  reshapes: Python and the dispatcher still run); and ``host_dispatched``: whether the host pays
  them, so that they overlap device work where the spec says ``host_overlap`` (the op then takes
  ``max(busy, scheduling)``), or add to it;
* ``program_overhead``: what one launch of the whole program costs;
* ``spatial``: layer-pipelined dataflow (Cerebras): each weight-holding op instance owns a region of
  the device proportional to its weights (weightless ops an average region); an op instance runs at
  its region's share of the compute and memory rates, and pays ``2 sqrt(region cores)`` fabric
  hops (broadcast of its input along the region's rows, reduction of partial sums along its
  columns) of ``fabric_hop_s`` each; an op uses no more of its region than lowers its latency (a
  small op on a wide region would only wait longer on the fabric: ``roofline.arrays.spatial_regions``).
  A token crosses every region in turn, so per-token latency is
  the sum over op instances (no other token overlaps it at batch 1). Weights that do not fit the
  device are streamed (weight-streaming mode): then each op runs on the whole device, as in ``static``;
* ``style``: ``eager`` (the host runs the model op by op) or ``compiled`` (a captured graph or a
  compiled program). A request for a mode the spec lacks falls back to an offered mode of the same
  style (``--mode graph`` on Groq runs its static program), never across styles.

Names are one vocabulary for every command; ``aliases`` add PyTorch's words (``eager``) and
``compiled`` ("whichever compiled mode the spec offers"). Adding a mode is one
:func:`register` call plus its numbers in the specs that offer it (DESIGN.md, "Adding an execution
mode"); a test registers a toy mode from outside the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from perfmodel.errors import PerfmodelError
from perfmodel.tracing import maximum

if TYPE_CHECKING:
    from perfmodel.hardware.model import ExecutionMode, Hardware

STYLES = ("eager", "compiled")
# An SI value of a spec field: a float, or an array of them when a sweep varies the field.
SIValue = float | np.ndarray
# A launched Spyre program moves its inputs in and outputs out, plus a host-built correction blob:
# torch-spyre runtime docs, "launch_jobplan: HostCompute -> H2D DMA of correction blob -> Compute;
# H2D/D2H DMA steps for graph inputs/outputs".
RUNTIME_DMAS_PER_PROGRAM = 3


def _no_program_cost(execution: ExecutionMode) -> float:
    return 0.0


@dataclass(frozen=True, kw_only=True)
class ExecutionModel:
    """The behaviour of one execution mode (see the module docstring)."""

    name: str
    style: str
    summary: str
    fuses: bool
    kernel_overhead: str | None = None
    host_op_overhead: str | None = None   # field paid per op that launches no kernel (eager views)
    host_dispatched: bool = False
    program_overhead: Callable[[ExecutionMode], SIValue] = _no_program_cost
    aliases: tuple[str, ...] = ()
    # Spatial dataflow: every weight-holding op instance runs on its own region of the device, sized
    # by its share of the weights, and a token crosses the regions in turn (roofline.arrays).
    spatial: bool = False

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"execution model {self.name!r}: style must be one of {STYLES}, got {self.style!r}")

    def per_kernel_s(self, execution: ExecutionMode) -> SIValue:
        """Scheduling cost of one launched kernel in this mode."""
        value: SIValue = getattr(execution, self.kernel_overhead) if self.kernel_overhead else 0.0
        return value

    def per_host_op_s(self, execution: ExecutionMode) -> SIValue:
        """Host cost of an op that launches no kernel (a view in eager PyTorch); 0 in compiled modes."""
        value: SIValue = getattr(execution, self.host_op_overhead) if self.host_op_overhead else 0.0
        return value

    def per_program_s(self, execution: ExecutionMode) -> SIValue:
        return self.program_overhead(execution)

    def overlapped(self, execution: ExecutionMode) -> bool:
        """Whether per-kernel scheduling overlaps device work (host dispatch ahead of the device)."""
        return self.host_dispatched and execution.host_overlap

    def combine(self, busy: np.ndarray, scheduling: np.ndarray, execution: ExecutionMode) -> np.ndarray:
        """An op's time from its device-busy time and its scheduling time."""
        combined: np.ndarray = maximum(busy, scheduling) if self.overlapped(execution) else busy + scheduling
        return combined

    def launch_field(self, execution: ExecutionMode) -> str:
        """The spec field (``ExecutionMode`` attribute) that sets this mode's launch ceiling: the
        per-kernel cost where there is one, else the program launch."""
        if self.kernel_overhead and np.all(np.asarray(self.per_kernel_s(execution)) > 0):
            return self.kernel_overhead
        return "program_launch_s"

    def launch_ceiling_s(self, execution: ExecutionMode) -> SIValue:
        """The launch cost a scheduling-aware roofline and the fit scale: per kernel, or per program."""
        value: SIValue = getattr(execution, self.launch_field(execution))
        return value


EXECUTION_MODELS: dict[str, ExecutionModel] = {}


def register(model: ExecutionModel) -> ExecutionModel:
    taken = {name for known in EXECUTION_MODELS.values() for name in (known.name, *known.aliases)}
    clashes = {model.name, *model.aliases} & taken
    if clashes:
        raise ValueError(f"execution model {model.name!r}: name(s) {sorted(clashes)} already registered")
    EXECUTION_MODELS[model.name] = model
    return model


def execution_model(name: str) -> ExecutionModel:
    """The registered model named ``name`` (a mode name, not an alias)."""
    try:
        return EXECUTION_MODELS[name]
    except KeyError:
        raise PerfmodelError(f"unknown execution mode {name!r}; known: {', '.join(EXECUTION_MODELS)}") from None


def mode_choices() -> list[str]:
    """Every word ``--mode`` accepts, in every command: mode names, then aliases."""
    return [*EXECUTION_MODELS, *(alias for model in EXECUTION_MODELS.values() for alias in model.aliases)]


def mode_help() -> str:
    described = "; ".join(f"{model.name}: {model.summary}" for model in EXECUTION_MODELS.values())
    aliases = ", ".join(f"{alias} = {model.name}" for model in EXECUTION_MODELS.values() for alias in model.aliases
                        if alias != "compiled")
    return (f"execution mode (default: the spec's). {described}. Aliases: {aliases}; compiled = the spec's compiled "
            "mode. A mode the spec lacks falls back to one of the same style (graph <-> static).")


def resolve_mode(hardware: Hardware, requested: str | None) -> str:
    """The spec's mode for a requested name or alias (None: the spec's default). Falls back within a
    style (eager or compiled), never across: eager on a compiler-scheduled machine is an error."""
    offered = hardware.scheduling.modes
    if requested is None:
        return hardware.scheduling.default_mode
    if requested == "compiled":
        style, wanted = "compiled", None
    else:
        matches = [model for model in EXECUTION_MODELS.values() if requested in (model.name, *model.aliases)]
        if not matches:
            raise PerfmodelError(f"unknown execution mode {requested!r}; known: {', '.join(mode_choices())}")
        style, wanted = matches[0].style, matches[0].name
    if wanted is not None and wanted in offered:
        return wanted
    same_style = [name for name in offered if name in EXECUTION_MODELS and EXECUTION_MODELS[name].style == style]
    if same_style:
        return hardware.scheduling.default_mode if hardware.scheduling.default_mode in same_style else same_style[0]
    raise PerfmodelError(f"{hardware.name} offers execution modes {', '.join(offered)}, none of them {style}; "
                         f"not {requested!r}")


def _graph_program_s(execution: ExecutionMode) -> SIValue:
    return execution.program_launch_s


def _static_program_s(execution: ExecutionMode) -> SIValue:
    return execution.program_launch_s + RUNTIME_DMAS_PER_PROGRAM * execution.dma_setup_s


register(ExecutionModel(
    name="dynamic", style="eager", aliases=("eager",), fuses=False, kernel_overhead="kernel_launch_s",
    host_op_overhead="host_op_s", host_dispatched=True,
    summary="the host dispatches every kernel (GPU eager PyTorch, CPU)"))
register(ExecutionModel(
    name="graph", style="compiled", aliases=("compiled",), fuses=True, kernel_overhead="per_node_s",
    program_overhead=_graph_program_s,
    summary="a captured graph: fused chains, one launch, a device-side gap per node (CUDA graphs, XLA)"))
register(ExecutionModel(
    name="spatial", style="compiled", fuses=True, program_overhead=_static_program_s, spatial=True,
    summary="layer-pipelined dataflow (Cerebras): each layer's ops on their own wafer region, a token crosses them "
            "in turn, paying the fabric's broadcast and reduction latency in every region"))
register(ExecutionModel(
    name="static", style="compiled", fuses=True, program_overhead=_static_program_s,
    summary="the compiler fixed the schedule (Groq, Cerebras, Spyre): one program launch and its runtime DMAs"))
