"""Columnar pricing and the other fast paths give the numbers of the plain paths (issue 17, speed)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfmodel.cli import COMMAND_MODULES, build_parser
from perfmodel.costs.columns import op_costs
from perfmodel.costs.rules import CostContext, OpCost, op_cost
from perfmodel.errors import PerfmodelError
from perfmodel.hardware.loader import _file_named, catalog_index, load_hardware, spec_files
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph
from perfmodel.llm.metrics import llm_predict
from perfmodel.roofline import evaluate_arrays
from perfmodel.roofline.arrays import at_point
from perfmodel.roofline.sweep import hardware_with
from perfmodel.workload.builders import gemm_sweep, linear, small_cnn, transformer_block
from perfmodel.workload.io import load_graph
from perfmodel.workload.ir import Graph, graph_problems

SPECS = ["h100-sxm-achievable", "a100-sxm-80gb", "tpu-v5e", "cerebras-wse-3", "groq-lpu-v1", "ibm-spyre",
         "epyc-zen4-2vcpu-fitted"]
MODELS = ["llama-2-7b", "mixtral-8x7b", "mistral-7b"]


def _llm_graphs() -> list[Graph]:
    graphs = []
    for model in MODELS:
        architecture = load_architecture(model)
        scenario = Scenario(batch=4, prompt_tokens=512, generated_tokens=256)
        for phase, context in (("prefill", 512), ("decode", 700), ("decode", np.array([513, 640, 768])),
                               ("train", 512)):
            graphs.append(stage_graph(architecture, scenario, Parallelism(tp=2), phase=phase, context=context))
    return graphs


def _graphs() -> list[Graph]:
    shipped = [load_graph(name) for name in ("transformer_block", "attention_flash", "attention_naive", "small_cnn",
                                             "elementwise_chain", "gemm_sweep")]
    return [*shipped, gemm_sweep(), small_cnn(), transformer_block(batch=np.array([1, 8, 64]), seq=1, kv_len=4096),
            *_llm_graphs()]


def _same(reference: object, columnar: object) -> bool:
    if isinstance(reference, tuple):
        return len(reference) == len(columnar) and all(map(_same, reference, columnar))  # type: ignore[arg-type]
    if reference is None or isinstance(reference, str) or np.asarray(reference).dtype.kind in "US":
        return bool(np.all(np.asarray(reference) == np.asarray(columnar)))
    return np.allclose(np.asarray(reference, dtype=float), np.asarray(columnar, dtype=float), rtol=1e-12, atol=0)


@pytest.mark.parametrize("spec", SPECS)
def test_columnar_costs_equal_op_by_op_costs(spec):
    context = CostContext(hardware=load_hardware(spec))
    compared = 0
    for graph in _graphs():
        try:
            reference = [op_cost(op, context) for op in graph.ops]
        except PerfmodelError:  # a collective on a device without links: both paths refuse it
            with pytest.raises(PerfmodelError):
                op_costs(graph.ops, context)
            continue
        columnar = op_costs(graph.ops, context)
        for op, one, other in zip(graph.ops, reference, columnar, strict=True):
            for field in dataclasses.fields(OpCost):
                assert _same(getattr(one, field.name), getattr(other, field.name)), (graph.name, op.name, field.name)
            compared += 1
    assert compared > 50


def test_alike_ops_are_priced_in_one_run_and_numbers_beyond_float_precision_alone(monkeypatch):
    from perfmodel.costs import rules

    hardware = load_hardware("h100-sxm")
    ops = [linear(f"proj.{index}", 64 + index, 1024, 1024, "bf16") for index in range(50)]
    calls = []
    context = CostContext(hardware=hardware)
    original = rules.COST_RULES["matmul"]
    monkeypatch.setitem(rules.COST_RULES, "matmul", lambda op, ctx: calls.append(op) or original(op, ctx))
    costs = op_costs(ops, context)
    assert len(calls) == 1 and len(costs) == 50
    calls.clear()
    huge = [linear("huge", 2**60, 1024, 1024, "bf16"), linear("huge2", 2**60 + 1, 1024, 1024, "bf16")]
    exact = op_costs(huge, context)
    assert len(calls) == 2  # 2**60 + 1 has no float64: each op is priced alone, in Python integers
    assert exact[1].flops == 2 * (2**60 + 1) * 1024 * 1024


def test_a_swept_device_is_priced_op_by_op_with_the_same_numbers():
    hardware = hardware_with(load_hardware("h100-sxm"), {"memory.hbm.bandwidth": np.linspace(1e12, 4e12, 3)})
    assert hardware.is_swept and not load_hardware("h100-sxm").is_swept
    graph = load_graph("transformer_block")
    context = CostContext(hardware=hardware)
    for one, other in zip([op_cost(op, context) for op in graph.ops], op_costs(graph.ops, context), strict=True):
        assert _same(one.bytes_by_level, other.bytes_by_level)


@pytest.mark.parametrize("spec", ["h100-sxm-achievable", "tpu-v5e", "cerebras-wse-3"])
def test_a_point_of_a_decode_context_sweep_equals_that_context_evaluated_alone(spec):
    hardware = load_hardware(spec)
    architecture = load_architecture("llama-2-7b")
    scenario = Scenario(batch=2, prompt_tokens=256, generated_tokens=128)
    contexts = np.array([257, 320, 384])
    swept = evaluate_arrays(stage_graph(architecture, scenario, Parallelism(), phase="decode", context=contexts),
                            hardware, stream_items=2)
    for index, context in enumerate(contexts):
        alone = evaluate_arrays(stage_graph(architecture, scenario, Parallelism(), phase="decode", context=int(context)),
                                hardware, stream_items=2)
        point = at_point(swept, index)
        np.testing.assert_allclose(point.total_s, alone.total_s, rtol=1e-12)
        np.testing.assert_allclose(point.memory_s, alone.memory_s, rtol=1e-12)
        assert list(point.bound_index) == list(alone.bound_index)
        assert [str(c.kernel) for c in point.costs] == [str(c.kernel) for c in alone.costs]


def test_llm_predict_with_the_decode_contexts_as_one_sweep_matches_three_graphs():
    """The fast path (one array-valued decode graph) against the general one (a builder that is not
    ``stage_graph``, so it is called once per context)."""
    architecture, hardware = load_architecture("llama-2-70b"), load_hardware("h100-sxm-achievable")
    scenario = Scenario(batch=8, prompt_tokens=2048, generated_tokens=512)

    def builder(*args, **kwargs):
        return stage_graph(*args, **kwargs)

    fast = llm_predict(architecture, hardware, scenario, Parallelism(tp=4))
    general = llm_predict(architecture, hardware, scenario, Parallelism(tp=4), graphs=builder)
    assert fast.tpot_s == pytest.approx(general.tpot_s, rel=1e-12)
    assert fast.ttft_s == general.ttft_s
    assert fast.time_by_bound_by_phase["decode"] == pytest.approx(general.time_by_bound_by_phase["decode"], rel=1e-12)
    assert fast.ops_per_decode_step == general.ops_per_decode_step


def test_graphs_the_llm_builder_marks_prechecked_pass_every_graph_check():
    for graph in _llm_graphs():
        assert graph_problems(graph) == [], graph.name


def test_every_command_is_registered_by_the_module_the_lazy_parser_imports():
    parser = build_parser()
    choices = next(action.choices for action in parser._actions if action.dest == "command")
    assert set(choices) == set(COMMAND_MODULES)
    for command in COMMAND_MODULES:
        alone = build_parser(command)
        assert command in next(action.choices for action in alone._actions if action.dest == "command")


def test_a_catalog_name_resolves_to_the_same_file_by_its_file_name():
    index = catalog_index()
    for path in spec_files():
        assert path.stem in index and index[path.stem] == path, f"{path}: a shipped spec is named after its file"
        assert _file_named(path.stem) == path
    assert _file_named("no-such-spec") is None
    assert _file_named("../h100-sxm") is None


def test_every_stage_graph_that_check_accepts_passes_the_graph_checks():
    """``Graph.prechecked`` trusts ``llm.graphs.check``: whatever it lets through must be a whole graph
    (a tp that leaves no MLP width once gave NaN times instead of an error)."""
    import itertools

    from perfmodel.errors import PerfmodelError
    from perfmodel.llm.catalog import from_hf_config
    from perfmodel.llm.graphs import check

    accepted = refused = 0
    for intermediate, vocab, heads, kv_heads, experts in itertools.product((4, 48), (6, 1000), (8,), (1, 8), (0, 4)):
        config = {"model_type": "mixtral" if experts else "llama", "hidden_size": 64, "intermediate_size": intermediate,
                  "num_hidden_layers": 2, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                  "vocab_size": vocab, "max_position_embeddings": 512,
                  **({"num_local_experts": experts, "num_experts_per_tok": 2} if experts else {})}
        architecture = from_hf_config(config, name="tiny")
        for tp, ep, batch in itertools.product((1, 2, 8), (1, 2), (1, 3)):
            parallelism, scenario = Parallelism(tp=tp, ep=ep), Scenario(batch=batch, prompt_tokens=16, generated_tokens=4)
            try:
                check(architecture, scenario, parallelism)
            except PerfmodelError:
                refused += 1
                continue
            accepted += 1
            for phase, context in (("prefill", 16), ("decode", 17), ("train", 16)):
                graph = stage_graph(architecture, scenario, parallelism, phase=phase, context=context)
                assert graph_problems(graph) == [], (config, tp, ep, phase)
    assert accepted > 20 and refused > 5


def test_a_prediction_that_is_not_a_finite_time_is_an_error_not_an_output():
    from perfmodel.workload.ir import Op, TensorSpec

    architecture, hardware = load_architecture("llama-2-7b"), load_hardware("h100-sxm")

    def broken(*args, **kwargs):  # a builder whose graph skipped the checks and has an empty matmul
        graph = stage_graph(*args, **kwargs)
        empty = Op(name="empty", kind="matmul", inputs=(TensorSpec(shape=(1, 0), dtype="bf16"),
                                                        TensorSpec(shape=(0, 8), dtype="bf16", role="weight")),
                   outputs=(TensorSpec(shape=(1, 8), dtype="bf16"),),
                   attrs={"m": 1, "n": 8, "k": 0, "batch": 1, "dtype": "bf16"})  # alike the projections: priced with them
        return Graph.prechecked(graph.name, [*graph.ops, empty])

    with pytest.raises(FloatingPointError, match="not a finite time"), np.errstate(divide="ignore", invalid="ignore"):
        llm_predict(architecture, hardware, Scenario(batch=1, prompt_tokens=16, generated_tokens=4), graphs=broken)


def test_split_costs_are_whole_records():
    """``columns._split`` fills each op's OpCost field by field without its __init__: valid only while the
    record has no __post_init__ and no slots; the split records equal ones built by __init__."""
    from perfmodel.costs.columns import _split
    from perfmodel.costs.rules import OpCost

    assert not hasattr(OpCost, "__post_init__") and not hasattr(OpCost, "__slots__")
    stacked = OpCost(flops=np.array([1.0, 2.0]), executed_flops=np.array([1.0, 2.0]), engine="simd",
                     peak_dtype="fp32", bytes_by_level=(np.array([3.0, 4.0]), 5.0))
    first, second = _split(stacked, 2)
    assert first == OpCost(flops=1.0, executed_flops=1.0, engine="simd", peak_dtype="fp32", bytes_by_level=(3.0, 5.0))
    assert second == OpCost(flops=2.0, executed_flops=2.0, engine="simd", peak_dtype="fp32", bytes_by_level=(4.0, 5.0))
    assert hash(first) == hash(OpCost(flops=1.0, executed_flops=1.0, engine="simd", peak_dtype="fp32",
                                      bytes_by_level=(3.0, 5.0)))


def test_attention_ops_with_their_own_kernel_blocks_price_together_as_one_by_one():
    """Causal attention ops that configure different flash blocks (``kv_block``, a training run's
    sa_block) are stacked into one op whose block is an array: the rule must price each row with its own
    block (a truthiness test on the array raised), as op by op."""
    from perfmodel.training.step import blocked_attention

    graph = transformer_block(batch=2, seq=2048)
    attention = [op for op in graph.ops if op.kind == "attention"]
    assert attention, "the block has an attention op"
    ops = [*blocked_attention(attention, 512), *blocked_attention(attention, 2048)]
    ops = [dataclasses.replace(op, name=f"{op.name}_{index}") for index, op in enumerate(ops)]
    context = CostContext(hardware=load_hardware("tpu-v5p-achievable"))
    one_by_one = [op_cost(op, context) for op in ops]
    together = op_costs(ops, context)
    assert all(_same(dataclasses.astuple(a), dataclasses.astuple(b)) for a, b in zip(one_by_one, together, strict=True))
    # the larger block wastes more of the causal square's masked pairs
    assert float(one_by_one[-1].executed_flops) > float(one_by_one[0].executed_flops)
    assert float(one_by_one[-1].flops) == float(one_by_one[0].flops)
