"""Traced computations replayed as straight-line Python (``perfmodel.tracing``), and the compiled path of
one LLM scenario built on it: it must give what the evaluation gives, or nothing."""

import dis
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from perfmodel.hardware.loader import catalog_index, load_hardware
from perfmodel.llm import metrics
from perfmodel.llm.catalog import load_architecture
from perfmodel.llm.graphs import Parallelism, Scenario, stage_graph
from perfmodel.tracing import (
    Replays,
    Tape,
    _rebuilder,
    argmax,
    equal,
    maximum,
    minimum,
    plain_record,
    replaced,
    trace,
    where,
)


def _objects(*values):
    return np.asarray(values, dtype=object)


def test_arithmetic_is_replayed_for_new_inputs_and_constants_are_folded():
    def function(x, y):
        scale = np.float64(3.0) * 2  # no input: folded while tracing
        return {"sum": x * scale + y / 4, "ceil": math.ceil(x / 7), "plain": scale}

    replay = trace(function, (10, 3.0))
    for x, y in [(10, 3.0), (11, -2.5), (1000, 1e9)]:
        assert replay(x, y) == function(x, y)


@dataclass(frozen=True, kw_only=True)
class _Inner:
    low: float
    tags: tuple = ()


@dataclass(frozen=True, kw_only=True)
class _Outer:
    name: str
    inner: _Inner
    shares: dict
    values: list
    table: np.ndarray
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Checked:
    value: float

    def __post_init__(self):
        if self.value < 0:
            raise ValueError("negative")


def test_a_rebuilt_result_is_the_traced_function_s_with_fresh_containers():
    def function(x, y):
        return _Outer(name="n", inner=_Inner(low=x / 2, tags=(x, 3)), shares={"a": {"b": x * y}, "c": 1.5},
                      values=[x + 1, (y, "k")], table=np.arange(3.0), extra={"z": _Checked(value=2.0)})

    replay = trace(function, (4, 2.5))
    for x, y in [(4, 2.5), (7, -1.0)]:
        got, expected = replay(x, y), function(x, y)
        assert type(got) is _Outer and type(got.inner) is _Inner and got.inner.tags == (x, 3)
        assert (got.name, got.inner, got.shares, got.values, got.extra) == \
            (expected.name, expected.inner, expected.shares, expected.values, expected.extra)
        np.testing.assert_array_equal(got.table, expected.table)
        assert vars(got).keys() == vars(expected).keys()  # every field stored, nothing else
    first, second = replay(4, 2.5), replay(4, 2.5)
    assert first.shares is not second.shares and first.values is not second.values  # a caller may change them
    assert first.table is not second.table
    with pytest.raises(AttributeError):
        first.name = "changed"  # still frozen


def test_replaced_is_dataclasses_replace():
    record = _Outer(name="n", inner=_Inner(low=1.0), shares={}, values=[], table=np.zeros(1))
    assert plain_record(_Outer) and not plain_record(_Checked) and not plain_record(dict)
    changed = replaced(record, name="m", shares={"a": 1})
    assert vars(changed) == {**vars(record), "name": "m", "shares": {"a": 1}} and vars(record)["name"] == "n"
    assert replace(record, name="m", shares={"a": 1}).__dict__.keys() == changed.__dict__.keys()
    with pytest.raises(TypeError):
        replaced(record, nonsense=1)  # as dataclasses.replace: an unknown field is refused
    with pytest.raises(ValueError):
        replaced(_Checked(value=1.0), value=-1.0)  # a __post_init__ check still runs (through replace)


def test_max_and_min_hold_on_both_sides_of_their_crossover():
    def function(x):
        values = _objects(x)
        return (maximum(values * 2.0, 10.0)[0], minimum(values, 5.0)[0], argmax(_objects(x, 7.0, 3.0), axis=0))

    replay = trace(function, (1,))
    assert replay.decisions == 0
    for x in (1, 6, 100):
        traced_max, traced_min, index = replay(x)
        assert (traced_max, traced_min) == (max(2.0 * x, 10.0), min(x, 5.0))
        assert index == int(np.argmax([x, 7.0, 3.0]))


def test_a_decision_that_comes_out_differently_gives_none():
    def function(x):
        return x * 2 if x > 5 else x - 1

    replay = trace(function, (10,))
    assert replay(6) == 12 and replay(100) == 200
    assert replay(5) is None and replay(-3) is None


def test_a_conversion_to_a_plain_number_or_to_text_freezes_the_value():
    replay = trace(lambda x: float(x) * 2.0, (3,))
    assert replay(3) == 6.0
    assert replay(4) is None
    labelled = trace(lambda x: {"label": f"batch {x}", "twice": x * 2}, (3,))
    assert labelled(3) == {"label": "batch 3", "twice": 6}
    assert labelled(4) is None  # a stale label would be a wrong answer
    for text in (repr, lambda x: str(_objects(x)), lambda x: f"{x!r}"):
        assert trace(lambda x, text=text: text(x), (3,))(4) is None


def test_a_traced_condition_is_computed_not_decided():
    replay = trace(lambda x: where(equal(_objects(x), 0), 1.0, _objects(x) * 3)[0], (0,))
    assert replay.decisions == 0
    assert replay(0) == 1.0 and replay(2) == 6


def test_a_replay_reuses_variables_once_their_nodes_are_read_for_the_last_time():
    def function(x, y):
        early = x * 3.0  # returned: kept to the end
        chain = y
        for step in range(200):  # each link read once, by the next
            chain = chain * 1.5 + step
        checked = x + 1 > 4  # a decision reads x + 1 after the chain
        picked = argmax(_objects(chain, early, x * 2.0), axis=0)
        return {"early": early, "chain": chain, "checked": checked, "picked": picked}

    replay = trace(function, (2, 0.5))
    assert replay.computed > 400 and replay.decisions == 1
    for x, y in [(2, 0.5), (3, -1.0), (-7, 1e-3)]:
        assert replay(x, y) == function(x, y)
    assert replay(5, 0.5) is None  # x + 1 > 4 comes out differently
    code = replay.function.__code__
    assert code.co_nlocals < 12  # not one variable per node


def test_identities_and_repeated_operations_add_no_nodes():
    tape = Tape()
    x = tape.input(3)
    assert (x * 1) is x and (x + 0) is x and (x - 0.0) is x and (x / 1) is x
    first, second = x * 2, x * 2
    assert first.index == second.index
    assert len(tape.nodes) == 2


def test_products_by_constants_fold_only_where_that_is_exact():
    tape = Tape()
    x, n = tape.input(3.7), tape.input(5)
    outputs = [(x * 3.0) * 0.5,  # a power of two: folded to x * 1.5
               ((n * 2) * 1000.0) * 0.25,  # folded twice: n * 500.0
               (n * 3) * 0.5,  # an integer that is no power of two with a float: kept
               (x * 6.0) * 7.0]  # no power of two: kept
    shared = x * 5.0  # read twice: kept
    outputs += [shared * 4.0, shared + 1]
    folded = tape.scalings_folded(outputs)
    assert folded.nodes[outputs[0].index] == ("mul", (("node", x.index), ("const", 1.5)))
    assert folded.nodes[outputs[1].index] == ("mul", (("node", n.index), ("const", 500.0)))
    for kept in outputs[2:]:
        assert folded.nodes[kept.index] == tape.nodes[kept.index]
    assert len(folded.needed(outputs)) == len(tape.needed(outputs)) - 3
    plain, compiled = tape._compiled(outputs, "plain", inline=False), tape.compile(outputs)
    for values in [(3.7, 5), (-1e-3, 2 ** 60 + 1), (1e300, -7), (0.0, 0), (-0.0, 1)]:
        assert repr(compiled(*values)) == repr(plain(*values))  # to the bit, the sign of zero included


def test_nodes_read_once_are_inlined_into_their_reader_with_the_same_results():
    def function(x, y):
        x, y = _objects(x), _objects(y)
        a = (x * 1.5 + y) / (y - 2.5)  # read once each: one expression
        b = maximum(a * 2.0 - 1.0, x / 3.0)  # a max names its operands twice: they keep variables
        c = where(equal(argmax(np.stack([a, b, x]), axis=0), 1), b + 1.0, a - 1.0)  # a condition inlined
        shared = b * b  # read twice: a variable
        return [(c * 3.0)[0], (shared + 1.0)[0], (shared - x)[0], math.ceil(c[0])]

    tape = Tape()
    outputs = function(tape.input(3.0), tape.input(7))
    inline, plain = tape._compiled(outputs, "inlined"), tape._compiled(outputs, "plain", inline=False)
    assert inline.__code__.co_code != plain.__code__.co_code
    def stores(function):
        return sum(instruction.opname == "STORE_FAST" for instruction in dis.get_instructions(function))

    assert stores(inline) <= stores(plain) - 5  # a * 2.0 - 1.0, x * 1.5 + y, y - 2.5, c * 3.0, the equal
    for values in [(3.0, 7), (-2.0, 1), (1e-3, 40), (9.0, 3), (0.5, -4)]:
        assert repr(inline(*values)) == repr(plain(*values))
    replay = trace(function, (3.0, 7))
    assert replay(-2.0, 1) == function(-2.0, 1)


@pytest.mark.parametrize("combination", [("llama-2-7b", "a100-sxm-80gb", Parallelism()),
                                         ("mixtral-8x7b", "h100-sxm", Parallelism(tp=4, ep=2))])
def test_an_llm_replay_with_products_folded_is_the_unfolded_one_to_the_bit(combination):
    model, spec, parallelism = combination
    architecture, hardware = load_architecture(model), load_hardware(spec)
    execution = hardware.scheduling.default_mode
    numbers = metrics.prediction_numbers(architecture, hardware, Scenario(batch=8, prompt_tokens=1000,
                                                                         generated_tokens=128), parallelism, execution)
    tape = Tape()
    result = numbers(*(tape.input(value) for value in (8, 1000, 128)))
    leaves: list = []
    _rebuilder(result, leaves)
    # Folding removes nodes (4-8% of an LLM's tape: 2,786 -> 2,661 for Llama-2-7B on A100 once attention
    # counts its blocks and GEMMs their k-steps); what it must never change is a bit of the result, below.
    assert len(tape.scalings_folded(leaves).needed(leaves)) < 0.98 * len(tape.needed(leaves))
    plain, compiled = tape._compiled(leaves, "plain", inline=False), tape.compile(leaves)
    rng = np.random.default_rng(3)
    held = 0
    for batch, prompt, generated in zip(rng.integers(1, 64, 200), rng.integers(800, 1200, 200),
                                        rng.integers(64, 512, 200), strict=True):
        values = (int(batch), int(prompt), int(generated))
        got = compiled(*values)
        assert repr(got) == repr(plain(*values))
        held += got is not None
    assert held > 20  # most draws replayed (not every one: another kernel or bound gives None)


def test_arithmetic_errors_of_the_replay_give_none():
    replay = trace(lambda x: 1.0 / (x - 2), (3,))
    assert replay(4) == 0.5
    assert replay(2) is None
    assert trace(lambda x: (x - 5) ** 0.5, (9,))(1) is None  # Python would go complex, numpy to nan


def test_negative_constants_keep_their_sign_in_the_generated_code():
    replay = trace(lambda x: (-2.0) ** x + (-3) * x - (-1.5), (2,))
    assert replay(3) == (-2.0) ** 3 + (-3) * 3 + 1.5


def test_replays_compile_after_a_few_requests_and_keep_a_few_variants():
    replays = Replays(trace_after=2, variants=2)
    anchor = object()

    def function(x):
        return x + 1 if x < 10 else x - 1 if x < 100 else x * 2

    def ask(x):
        return replays("key", (anchor,), function, (x,))

    assert ask(1) is None  # one run is not worth a trace
    assert ask(2) == 3 and replays.traced == 1  # the second run no replay held for: traced
    assert ask(5) == 6 and replays.replayed == 1
    assert ask(20) is None and ask(21) == 20 and replays.traced == 2  # another region: a second variant
    assert ask(50) == 49 and ask(3) == 4 and replays.replayed == 3
    assert ask(200) is None and ask(300) == 600 and replays.traced == 3  # a third region
    assert ask(400) == 800 and ask(5) == 6  # the first variant (held twice) is kept...
    assert ask(50) is None and replays.traced == 3  # ... the second (held once) made room
    other = object()  # the same key for another object (a reused id) starts over
    assert replays("key", (other,), function, (5,)) is None
    off = Replays(trace_after=1, variants=0)
    assert off("key", (anchor,), function, (5,)) is None and off.traced == 0


def test_replays_keep_at_most_their_keys_least_recently_used_out():
    replays = Replays(trace_after=1, keys=2)
    anchor = object()
    for key in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" comes
        assert replays(key, (anchor,), lambda x: x + 1, (1,)) == 2
    assert replays.traced == 3 and replays.replayed == 1
    assert replays("a", (anchor,), lambda x: x + 1, (2,)) == 3 and replays.replayed == 2  # kept
    assert replays("b", (anchor,), lambda x: x + 1, (2,)) == 3 and replays.traced == 4  # dropped: traced anew


def _assert_close(got, expected, path="result"):
    if isinstance(expected, dict):
        assert list(got) == list(expected), path
        for key in expected:
            _assert_close(got[key], expected[key], f"{path}.{key}")
    elif hasattr(expected, "__dataclass_fields__"):
        for field in fields(expected):
            _assert_close(getattr(got, field.name), getattr(expected, field.name), f"{path}.{field.name}")
    elif isinstance(expected, (float, np.floating)):
        assert got == pytest.approx(expected, rel=1e-12, abs=0.0), path
    else:
        assert got == expected, path


@pytest.fixture()
def fresh_replays(monkeypatch):
    replays = Replays(trace_after=2)
    monkeypatch.setattr(metrics, "_REPLAYS", replays)
    return replays


COMBINATIONS = [
    ("llama-2-70b", "h100-sxm", Parallelism(tp=8), "dynamic"),
    ("llama-2-70b", "h100-sxm", Parallelism(tp=8), "graph"),
    ("mixtral-8x7b", "h100-sxm", Parallelism(tp=4, ep=2)),
    ("llama-2-7b", "groq-lpu-v1", Parallelism(tp=8, pp=11)),
    ("llama-3.1-8b", "cerebras-wse-3", Parallelism()),
    ("llama-2-7b", "epyc-zen4-2vcpu", Parallelism()),
    ("llama-3.1-8b", "tpu-v5e", Parallelism(tp=4)),
]


@settings(max_examples=60, deadline=None)
@given(combination=st.sampled_from(COMBINATIONS), batch=st.integers(1, 512), prompt=st.integers(1, 4000),
       generated=st.integers(1, 2000))
def test_a_replayed_scenario_is_what_the_evaluation_gives(combination, batch, prompt, generated):
    model, spec, parallelism, *mode = combination
    architecture, hardware = load_architecture(model), load_hardware(spec)
    execution = mode[0] if mode else hardware.scheduling.default_mode
    scenario = Scenario(batch=batch, prompt_tokens=prompt, generated_tokens=generated)
    assume(prompt + generated <= architecture.max_positions)
    expected = metrics._predict_one(architecture, hardware, scenario, parallelism, execution, stage_graph)
    replays = Replays(trace_after=2)
    for _ in range(2):  # the second request compiles
        got = replays((model, spec, parallelism, execution), (),
                      metrics.prediction_numbers(architecture, hardware, scenario, parallelism, execution),
                      _values(scenario))
    assert got is not None and replays.failed == 0
    _assert_close(metrics._named_bounds(got), metrics.replace(expected, scenario=got.scenario))


def _values(scenario):
    return (scenario.batch, scenario.prompt_tokens, scenario.generated_tokens)


def test_llm_predict_replays_from_its_second_call_and_matches_the_evaluation(fresh_replays):
    architecture, hardware = load_architecture("llama-2-70b"), load_hardware("h100-sxm")
    results = {}
    for prompt in (1000, 1001, 1500, 3000):
        scenario = Scenario(batch=8, prompt_tokens=prompt, generated_tokens=128)
        results[prompt] = metrics.llm_predict(architecture, hardware, scenario, Parallelism(tp=8))
        _assert_close(results[prompt], metrics._predict_one(architecture, hardware, scenario, Parallelism(tp=8),
                                                            "dynamic", stage_graph))
    assert fresh_replays.traced >= 1 and fresh_replays.replayed >= 2 and fresh_replays.failed == 0


def test_every_shipped_spec_and_mode_compiles(fresh_replays):
    """The tracer follows every execution model of every shipped spec (a computation it could not follow
    would silently fall back to the evaluation: correct, but slow)."""
    architecture = load_architecture("llama-3.1-8b")
    keys = 0
    for spec in sorted(catalog_index()):
        hardware = load_hardware(spec)
        for mode in hardware.scheduling.modes:
            keys += 1
            for prompt in (700, 702, 705):  # evaluated, traced, replayed
                scenario = Scenario(batch=4, prompt_tokens=prompt, generated_tokens=100)
                got = metrics.llm_predict(architecture, hardware, scenario, mode=mode)
                _assert_close(got, metrics._predict_one(architecture, hardware, scenario, Parallelism(), mode,
                                                        stage_graph))
    assert (fresh_replays.failed, fresh_replays.traced) == (0, keys)
    assert fresh_replays.replayed >= 0.9 * keys


@pytest.mark.parametrize("combination", COMBINATIONS, ids=lambda combination: f"{combination[0]}-{combination[1]}")
def test_one_trace_holds_across_scenarios_on_the_same_side_of_residency(combination):
    """Kernel choices, bounds, cache fits and MoE routing are computed by the replay, not decided: one
    trace serves scenarios far from the traced one (only residency is a decision: where weights live
    picks how they are priced, and whether it fits at all is part of the result)."""
    model, spec, parallelism, *mode = combination
    architecture, hardware = load_architecture(model), load_hardware(spec)
    execution = mode[0] if mode else hardware.scheduling.default_mode
    traced = Scenario(batch=4, prompt_tokens=700, generated_tokens=100)
    replay = trace(metrics.prediction_numbers(architecture, hardware, traced, parallelism, execution), _values(traced))
    def placed(scenario):
        residency = metrics.placement(architecture, hardware, scenario, parallelism)
        return residency.weights_resident, residency.fits

    resident = placed(traced)
    checked = 0
    for batch, prompt, gen in [(1, 16, 1), (2, 100, 10), (32, 2000, 500), (8, 3500, 64), (4, 1000, 200), (3, 600, 80)]:
        scenario = Scenario(batch=batch, prompt_tokens=prompt, generated_tokens=gen)
        got = replay(*_values(scenario))
        if placed(scenario) != resident:
            assert got is None, (batch, prompt, gen)  # weights (or state) now fit or no longer: a decision
            continue
        assert got is not None, (batch, prompt, gen)
        checked += 1
        expected = metrics._predict_one(architecture, hardware, scenario, parallelism, execution, stage_graph)
        _assert_close(metrics._named_bounds(got), metrics.replace(expected, scenario=got.scenario))
    assert checked >= 3


def test_threads_share_the_replays(fresh_replays):
    architecture, hardware = load_architecture("llama-2-7b"), load_hardware("h100-sxm")
    scenarios = [Scenario(batch=1 + index % 7, prompt_tokens=100 + 13 * index, generated_tokens=50)
                 for index in range(64)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda scenario: metrics.llm_predict(architecture, hardware, scenario), scenarios))
    for scenario, result in zip(scenarios, results, strict=True):
        _assert_close(result, metrics._predict_one(architecture, hardware, scenario, Parallelism(), "dynamic",
                                                   stage_graph))
    assert fresh_replays.replayed > 0 and fresh_replays.failed == 0


def test_numpy_integer_scenarios_are_priced_as_python_integers(fresh_replays):
    """An np.int32 batch times a hidden size wraps around in int32 (numpy's promotion rules); the same
    scenario in Python integers does not, and a replayed call must not differ from an evaluated one."""
    architecture, hardware = load_architecture("llama-3.1-8b"), load_hardware("tpu-v5e")
    values = {"batch": 100_000, "prompt_tokens": 4_000, "generated_tokens": 4_000}
    plain = metrics.llm_predict(architecture, hardware, Scenario(**values), Parallelism(tp=4))
    assert plain.memory_bytes.workspace > 0
    for kind in (np.int32, np.uint32, np.int16, np.int64):
        if any(value > np.iinfo(kind).max for value in values.values()):
            continue
        scenario = Scenario(**{name: kind(value) for name, value in values.items()})
        for _ in range(3):  # evaluated, traced, replayed
            _assert_close(metrics.llm_predict(architecture, hardware, scenario, Parallelism(tp=4)), plain)
