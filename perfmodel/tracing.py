"""Record the arithmetic a computation does on a few input numbers; replay it as straight-line Python.

A prediction of one LLM scenario runs hundreds of small numpy calls through generic machinery
(graph building, cost rules, fusion, the roofline evaluation) whose structure does not depend on the
scenario's numbers, only its arithmetic does. Run once with ``Traced`` numbers in place of the inputs,
the computation leaves on a ``Tape`` every operation that involved an input (everything else is
folded to constants as it runs) and every decision it took on one (a comparison, a truth test,
a conversion to a plain number). ``Tape.compile`` turns that into one Python function of the inputs
that redoes the arithmetic and checks each decision; where a decision would come out differently
(another kernel, another bound, weights that no longer fit) it answers None and the caller runs the
computation itself. The replay does the same IEEE operations in the same order as the traced run,
except sums that numpy pairs up on float arrays (it adds object arrays left to right): results agree
to about 1e-15 relative.

Numbers enter numpy code inside object arrays (``np.asarray`` keeps an object array's dtype, and
numpy's object loops call the numbers' own operators); ``floats`` is the one place the cost rules turn
dimensions into float64, and it keeps traced numbers traced. ``Traced`` refuses numpy's ufunc protocol
(``__array_ufunc__ = None``) so that ``np.float64(2) * traced`` comes back to ``Traced.__rmul__``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%"}
_UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": operator.neg, "abs": abs, "ceil": math.ceil, "floor": math.floor, "sqrt": math.sqrt, "float": float,
    "trunc": math.trunc,
}
_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
}
_RELATIONS = {"equal": "==", "at_least": ">=", "greater": ">"}  # computed comparisons (not decisions)
_COMPARISON_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_PLAIN = (int, float, np.integer, np.floating)
# Operations whose replayed text names each operand once and evaluates it every time (a select: its
# condition only), so that an operand's own expression may stand there (``Tape._inlined``).
_INLINE_READERS = frozenset([*_SYMBOLS, "pow", "ceil", "floor", "sqrt", "trunc", "float", "abs", "neg", "pick",
                             *_RELATIONS, "select"])
_INLINE_DEPTH = 12
# Operand positions where a constant identity leaves the operation's other operand as its value.
_IDENTITIES = {"mul": (0, 1), "add": (0, 1), "sub": (1,), "truediv": (1,)}


def _plain(value: Any) -> int | float:
    """A constant as the Python number it is (numpy scalars become int or float, exactly)."""
    return int(value) if isinstance(value, (int, np.integer)) else float(value)


class Tape:
    """The operations and decisions of one traced run: ``nodes[i]`` is (operation, operands), an operand
    being ("input", position), ("node", index) or ("const", number); ``guards`` are the decisions, as
    (text of a Python condition over the nodes, its value in the traced run)."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
        self._seen: dict[tuple[str, tuple[tuple[str, Any], ...]], int] = {}
        self.guards: dict[str, bool] = {}
        self.inputs = 0

    def input(self, value: int | float) -> Traced:
        """A new input of the traced computation, with its value in this run."""
        self.nodes.append(("input", (("input", self.inputs),)))
        self.inputs += 1
        return Traced(value, len(self.nodes) - 1, self)

    def record(self, operation: str, operands: Sequence[Any], value: Any) -> Traced:
        """A new traced number, or one the tape already has: an operation with an identity operand
        (x * 1, x + 0, x - 0, x / 1) is its other operand, and an operation already recorded on the
        same operands is that node (the replay computes each once). Both are exact, bar a zero's sign."""
        parts = tuple(self._operand(item) for item in operands)
        if len(parts) == 2 and operation in _IDENTITIES:
            for position in _IDENTITIES[operation]:
                kind, constant = parts[position]
                if kind == "const" and constant == (1 if operation in ("mul", "truediv") else 0) \
                        and isinstance(operands[1 - position], Traced):
                    return operands[1 - position]
        key = (operation, parts)
        index = self._seen.get(key)
        if index is None:
            self.nodes.append(key)
            index = self._seen[key] = len(self.nodes) - 1
        return Traced(value, index, self)

    def _operand(self, item: Any) -> tuple[str, Any]:
        if isinstance(item, Traced):
            if item.tape is not self:
                raise ValueError("a traced number from another tape")
            return ("node", item.index)
        return ("const", _plain(item))

    def decide(self, condition: str, outcome: bool) -> None:
        self.guards[condition] = outcome

    def text(self, item: Any) -> str:
        """Python text of an operand (a node's variable or a constant's exact literal)."""
        if isinstance(item, Traced):
            return f"v{item.index}"
        value = _plain(item)
        if not math.isfinite(value):
            return f"float({str(value)!r})"
        return f"({value!r})" if value < 0 else repr(value)  # -2.0 ** x is -(2.0 ** x) in Python

    def scalings_folded(self, outputs: Sequence[Any]) -> Tape:
        """This tape with each product by a constant of a product by a constant that nothing else reads,
        ``(x * a) * b``, written ``x * (a * b)`` where one of ``a``, ``b`` is a power of two (a unit
        conversion, a factor of 2 for a multiply-add): scaling by a power of two is exact, so both round
        once, to the same float (the operands of a multiply are converted to float exactly; no
        intermediate is near the overflow or subnormal range in a cost model's seconds, bytes and FLOPs).
        Not for an integer constant that is no power of two with a float one: an integer ``x`` times it is
        exact before it is rounded, which ``x`` converted to float first need not be past 2**53. The
        nodes keep their indices (a decision's text names them); the outer one reads ``x``, and the inner
        one, read by nothing now, is not computed. About a tenth of an LLM scenario's operations."""
        folded = list(self.nodes)
        reads: dict[int, int] = {}
        for index in self.needed(outputs):
            for kind, value in self.nodes[index][1]:
                if kind == "node":
                    reads[value] = reads.get(value, 0) + 1
        for item in outputs:  # a returned node, or one a decision reads, is kept as it is
            if isinstance(item, Traced):
                reads[item.index] = reads.get(item.index, 0) + 2
        for condition in self.guards:
            for node in _nodes_in(condition):
                reads[node] = reads.get(node, 0) + 2
        for index, (operation, operands) in enumerate(folded):
            outer = _scaling(operation, operands)
            if outer is None or reads.get(outer[0], 0) != 1:
                continue
            inner = _scaling(*folded[outer[0]])
            if inner is None or not _exact_refold(inner[1], outer[1]):
                continue
            folded[index] = ("mul", (("node", inner[0]), ("const", inner[1] * outer[1])))
        tape = Tape()
        tape.nodes, tape.guards, tape.inputs = folded, self.guards, self.inputs
        return tape

    def compile(self, outputs: Sequence[Any], name: str = "replay") -> Callable[..., tuple | None]:
        """A function of the inputs giving ``outputs`` (traced numbers or constants), or None where a
        decision of the traced run comes out differently. Only the nodes the outputs and the decisions
        need are computed, products by constants folded where that is exact (``scalings_folded``)."""
        return self.scalings_folded(outputs)._compiled(outputs, name)

    def _compiled(self, outputs: Sequence[Any], name: str, *, inline: bool = True) -> Callable[..., tuple | None]:
        needed = sorted(self.needed(outputs))
        guards_by_node = self._guards_after_nodes()
        returned = {item.index for item in outputs if isinstance(item, Traced)}
        inlined = self._inlined(needed, returned) if inline else {}
        # A node written into the expression of the one that reads it is computed where that one is.
        at: dict[int, int] = {}
        for index in reversed(needed):
            at[index] = at[inlined[index]] if index in inlined else index
        # Variables are reused: a node's variable takes a later node's value once the node has been read
        # for the last time (by an operation or a decision), so a few dozen variables are live instead of
        # one per node and each float goes back to Python's free list at once: about half the time per
        # operation of a replay of thousands. The operations and their order are unchanged.
        last_read: dict[int, int] = {}
        for index in needed:
            for kind, value in self.nodes[index][1]:
                if kind == "node":  # (an earlier node inlined into a later one reads later)
                    last_read[value] = max(last_read.get(value, 0), at[index])
            for condition, _ in guards_by_node.get(index, ()):
                for node in _nodes_in(condition):
                    last_read[node] = max(last_read.get(node, 0), index)
        freed_after: dict[int, list[int]] = {}
        for node, index in last_read.items():
            if node not in returned and node not in inlined:  # (an inlined node holds no variable)
                freed_after.setdefault(index, []).append(node)
        names: dict[int, str] = {}
        free: list[str] = []
        variables = 0
        lines = [f"def {name}({', '.join(f'x{i}' for i in range(self.inputs))}):"]
        for index in needed:
            if index in inlined:  # its text, in parentheses, stands where its one reader names it
                names[index] = f"({self._expression(index, names)})"
                continue
            if not free:
                free.append(f"v{variables}")
                variables += 1
            names[index] = free.pop()
            lines += self._statements(index, names)
            for condition, outcome in guards_by_node.get(index, ()):
                named = _NODE_NAME.sub(lambda match: names[int(match.group(1))], condition)
                lines.append(f"    if {'not ' if outcome else ''}({named}): return None")
            free += [names[node] for node in freed_after.get(index, ())]  # after the decisions that read them
        lines.append(f"    return ({''.join(self._text_named(item, names) + ', ' for item in outputs)})")
        namespace: dict[str, Any] = {"_ceil": math.ceil, "_floor": math.floor, "_sqrt": math.sqrt, "_trunc": math.trunc,
                                     "_isfinite": math.isfinite, "_power": _real_power}
        exec(compile("\n".join(lines), f"<{name}>", "exec"), namespace)  # noqa: S102 - code built from our own tape
        function: Callable[..., tuple | None] = namespace[name]
        return function

    def _inlined(self, needed: list[int], returned: set[int]) -> dict[int, int]:
        """The nodes written into the expression of the one node that reads them (node -> its reader),
        as ``a * b + c`` instead of ``v = a * b`` and ``v + c``: the same operations in the same order,
        without storing and loading a variable between them. Only a node read once, by an operation whose
        text names that operand once and always evaluates it (not a max or min, which name theirs twice,
        not a branch of a select), and neither returned nor read by a decision (both need a variable);
        at most ``_INLINE_DEPTH`` deep (Python's parser bounds nesting)."""
        reads: dict[int, int] = {}
        reader: dict[int, int] = {}
        for index in needed:
            operation, operands = self.nodes[index]
            for position, (kind, value) in enumerate(operands):
                if kind != "node":
                    continue
                reads[value] = reads.get(value, 0) + 1
                if operation in _INLINE_READERS and (operation != "select" or position == 0):
                    reader[value] = index
        decided = {node for condition in self.guards for node in _nodes_in(condition)}
        inlined: dict[int, int] = {}
        depth: dict[int, int] = {}
        for index in needed:
            operation, operands = self.nodes[index]
            depth[index] = 1 + max((depth.get(value, 0) for kind, value in operands
                                    if kind == "node" and value in inlined), default=0)
            if (reads.get(index) == 1 and index in reader and index not in returned and index not in decided
                    and operation not in ("input", "argmax", "argmin") and depth[index] <= _INLINE_DEPTH):
                inlined[index] = reader[index]
        return inlined

    def needed(self, outputs: Sequence[Any]) -> set[int]:
        """The nodes a replay of ``outputs`` computes: those the outputs and the decisions read."""
        return self._needed([item.index for item in outputs if isinstance(item, Traced)]
                            + [index for condition in self.guards for index in _nodes_in(condition)])

    def _needed(self, roots: list[int]) -> set[int]:
        needed: set[int] = set()
        stack = list(roots)
        while stack:
            index = stack.pop()
            if index in needed:
                continue
            needed.add(index)
            stack += [value for kind, value in self.nodes[index][1] if kind == "node"]
        return needed

    def _guards_after_nodes(self) -> dict[int, list[tuple[str, bool]]]:
        """Each decision checked right after the last node it reads is computed (early exit; every
        decision reads a node: it is taken on a traced number)."""
        placed: dict[int, list[tuple[str, bool]]] = {}
        for condition, outcome in self.guards.items():
            placed.setdefault(max(_nodes_in(condition)), []).append((condition, outcome))
        return placed

    def _statements(self, index: int, names: dict[int, str]) -> list[str]:
        """The lines that compute node ``index`` into its variable (``names``: each node's): one
        assignment, but for ``argmax``/``argmin`` a scan written out (as ``_first_largest``/
        ``_first_smallest`` do it: the first strictly better value wins), which costs a few comparisons
        instead of a Python call over a tuple of the values. A node's variable is never one its
        operands still hold (``compile`` frees those after the node), so a scan may write it early."""
        operation, operands = self.nodes[index]
        target = names[index]
        if operation not in ("argmax", "argmin"):
            return [f"    {target} = {self._expression(index, names)}"]
        texts = self._texts(operands, names)
        better = ">" if operation == "argmax" else "<"
        lines = [f"    {target} = 0; _best = {texts[0]}"]
        lines += [f"    if {text} {better} _best: {target} = {position}; _best = {text}"
                  for position, text in enumerate(texts[1:], start=1)]
        return lines

    def _texts(self, operands: tuple[tuple[str, Any], ...], names: dict[int, str]) -> list[str]:
        return [f"x{value}" if kind == "input" else names[value] if kind == "node" else
                self.text(value) for kind, value in operands]

    def _text_named(self, item: Any, names: dict[int, str]) -> str:
        return names[item.index] if isinstance(item, Traced) else self.text(item)

    def _expression(self, index: int, names: dict[int, str]) -> str:
        operation, operands = self.nodes[index]
        texts = self._texts(operands, names)
        if operation == "input":
            return texts[0]
        if operation == "pow":
            return f"_power({texts[0]}, {texts[1]})"
        if operation in _SYMBOLS:
            return f"{texts[0]} {_SYMBOLS[operation]} {texts[1]}"
        if operation in ("ceil", "floor", "sqrt", "trunc"):
            return f"_{operation}({texts[0]})"
        if operation in ("max", "min"):
            keep = ">=" if operation == "max" else "<="
            return f"({texts[0]} if {texts[0]} {keep} {texts[1]} else {texts[1]})"
        if operation == "pick":
            return f"({', '.join(texts[1:])},)[{texts[0]}]"
        if operation in _RELATIONS:
            return f"({texts[0]} {_RELATIONS[operation]} {texts[1]})"
        if operation == "select":
            return f"({texts[1]} if {texts[0]} else {texts[2]})"
        if operation == "neg":
            return f"-{texts[0]}"
        return f"{operation}({texts[0]})"  # abs, float


def _scaling(operation: str, operands: tuple[tuple[str, Any], ...]) -> tuple[int, int | float] | None:
    """(node, constant) of a product of a node by a finite constant; None for any other node."""
    if operation != "mul":
        return None
    (first_kind, first), (second_kind, second) = operands
    if first_kind == "node" and second_kind == "const":
        node, constant = first, second
    elif first_kind == "const" and second_kind == "node":
        node, constant = second, first
    else:
        return None
    return (node, constant) if math.isfinite(constant) else None


def _power_of_two(value: int | float) -> bool:
    return value != 0 and math.isfinite(value) and math.frexp(abs(value))[0] == 0.5


def _exact_refold(inner: int | float, outer: int | float) -> bool:
    """Whether ``(x * inner) * outer`` is ``x * (inner * outer)`` to the bit (``Tape.scalings_folded``)."""
    if not (_power_of_two(inner) or _power_of_two(outer)) or not math.isfinite(inner * outer):
        return False
    if type(inner) is type(outer):  # both integers (exact), or both floats
        return True
    integer = inner if type(inner) is int else outer
    return _power_of_two(integer)


def _real_power(base: Any, exponent: Any) -> Any:
    """``base ** exponent``, refusing what Python makes complex (numpy's nan: the caller evaluates)."""
    result = base ** exponent
    if isinstance(result, complex):
        raise ValueError("a complex power")
    return result


def _first_largest(*values: Any) -> int:
    """The index of the first largest of ``values``, as ``np.argmax``."""
    best = 0
    for index in range(1, len(values)):
        if values[index] > values[best]:
            best = index
    return best


def _first_smallest(*values: Any) -> int:
    """The index of the first smallest of ``values``, as ``np.argmin``."""
    best = 0
    for index in range(1, len(values)):
        if values[index] < values[best]:
            best = index
    return best


_INDEX_OF = {"argmax": _first_largest, "argmin": _first_smallest}


_NODE_NAME = re.compile(r"\bv(\d+)\b")  # a node in a decision's text (``Tape.text``)


def _nodes_in(condition: str) -> list[int]:
    return [int(word[1:]) for word in condition.replace("(", " ").replace(")", " ").split()
            if word.startswith("v") and word[1:].isdigit()]


class Traced:
    """A number computed from the traced inputs: its value in this run, and the node that made it."""

    __slots__ = ("value", "index", "tape")
    __array_ufunc__ = None  # numpy hands binary operations back to our operators
    __hash__ = None  # type: ignore[assignment]  # a traced number is never a key: its value would be frozen

    def __init__(self, value: Any, index: int, tape: Tape) -> None:
        self.value, self.index, self.tape = value, index, tape

    def __repr__(self) -> str:  # text, as ``__str__``: frozen (an object array's str() uses it)
        return repr(self._frozen())

    def _binary(self, operation: str, left: Any, right: Any) -> Any:
        if not isinstance(left, (Traced, *_PLAIN)) or not isinstance(right, (Traced, *_PLAIN)):
            return NotImplemented
        return self.tape.record(operation, (left, right), _BINARY[operation](_value(left), _value(right)))

    def _unary(self, operation: str) -> Traced:
        return self.tape.record(operation, (self,), _UNARY[operation](self.value))

    def _compare(self, operation: str, other: Any) -> bool:
        if not isinstance(other, (Traced, *_PLAIN)):
            return NotImplemented
        outcome = _COMPARISONS[operation](self.value, _value(other))
        self.tape.decide(f"{self.tape.text(self)} {_COMPARISON_SYMBOLS[operation]} {self.tape.text(other)}",
                         bool(outcome))
        return bool(outcome)

    def __add__(self, other: Any) -> Any: return self._binary("add", self, other)
    def __radd__(self, other: Any) -> Any: return self._binary("add", other, self)
    def __sub__(self, other: Any) -> Any: return self._binary("sub", self, other)
    def __rsub__(self, other: Any) -> Any: return self._binary("sub", other, self)
    def __mul__(self, other: Any) -> Any: return self._binary("mul", self, other)
    def __rmul__(self, other: Any) -> Any: return self._binary("mul", other, self)
    def __truediv__(self, other: Any) -> Any: return self._binary("truediv", self, other)
    def __rtruediv__(self, other: Any) -> Any: return self._binary("truediv", other, self)
    def __floordiv__(self, other: Any) -> Any: return self._binary("floordiv", self, other)
    def __rfloordiv__(self, other: Any) -> Any: return self._binary("floordiv", other, self)
    def __mod__(self, other: Any) -> Any: return self._binary("mod", self, other)
    def __rmod__(self, other: Any) -> Any: return self._binary("mod", other, self)
    def __pow__(self, other: Any) -> Any: return self._binary("pow", self, other)
    def __rpow__(self, other: Any) -> Any: return self._binary("pow", other, self)
    def __neg__(self) -> Traced: return self._unary("neg")
    def __pos__(self) -> Traced: return self
    def __abs__(self) -> Traced: return self._unary("abs")
    def __ceil__(self) -> Traced: return self._unary("ceil")
    def __floor__(self) -> Traced: return self._unary("floor")
    ceil, floor = __ceil__, __floor__  # numpy's object loops call these methods for np.ceil, np.floor
    def __lt__(self, other: Any) -> bool: return self._compare("lt", other)
    def __le__(self, other: Any) -> bool: return self._compare("le", other)
    def __gt__(self, other: Any) -> bool: return self._compare("gt", other)
    def __ge__(self, other: Any) -> bool: return self._compare("ge", other)
    def __eq__(self, other: Any) -> bool: return self._compare("eq", other)
    def __ne__(self, other: Any) -> bool: return self._compare("ne", other)

    def item(self) -> Traced:  # as a numpy scalar's: an object array's element is the number itself
        return self

    def finite(self) -> bool:
        outcome = math.isfinite(self.value)
        self.tape.decide(f"_isfinite({self.tape.text(self)})", outcome)
        return outcome

    def __bool__(self) -> bool:
        return self._compare("ne", 0)

    # A conversion to a plain number or to text freezes the value: the replay checks it is still the same.
    def _frozen(self) -> int | float:
        return self.__float__() if isinstance(self.value, float) else self.__int__()

    def __str__(self) -> str:
        return str(self._frozen())

    def __format__(self, spec: str) -> str:
        return format(self._frozen(), spec)

    def __float__(self) -> float:
        self.tape.decide(f"float({self.tape.text(self)}) == {float(self.value)!r}", True)
        return float(self.value)

    def __int__(self) -> int:
        self.tape.decide(f"int({self.tape.text(self)}) == {int(self.value)!r}", True)
        return int(self.value)

    __index__ = __int__


def floats(value: Any) -> np.ndarray:
    """Dimensions and sizes as float64 (a scalar or an array), the one conversion the cost rules make
    before multiplying sizes (an integer array's product could wrap around); traced numbers stay
    traced (as floats), in an object array where they come in one."""
    if is_traced(value):  # a traced number stands where numpy has a 0-d array
        return cast(np.ndarray, _each("float", value))
    return np.asarray(value, dtype=float)


def whole(value: Any) -> Any:
    """Whole numbers by truncation, as ``astype(np.int64)`` (an array) or ``int`` (a scalar) give them;
    traced numbers are truncated by the replay, not frozen."""
    if is_traced(value):
        return _each("trunc", value)
    return value.astype(np.int64) if isinstance(value, np.ndarray) and value.ndim else int(value)


def all_finite(value: Any) -> bool:
    """Whether every number of ``value`` is finite (``np.isfinite`` takes no object arrays); for a
    traced number, a decision the replay checks."""
    if not is_traced(value):
        return bool(np.all(np.isfinite(value)))
    items = value.flat if isinstance(value, np.ndarray) else [value]
    return all(item.finite() if isinstance(item, Traced) else math.isfinite(item) for item in items)


def _value(item: Any) -> Any:
    return item.value if isinstance(item, Traced) else item


def _node_wise(operation: str, plain: Callable[..., Any], arity: int) -> np.ufunc:
    """An element-wise numpy function (over object arrays) that applies ``plain`` to plain numbers and
    records ``operation`` (one node of the replay) where a traced number takes part."""
    def apply(*items: Any) -> Any:
        tape = _tape_of(items)
        if tape is None:
            return plain(*items)
        return tape.record(operation, items, plain(*(_value(item) for item in items)))
    return np.frompyfunc(apply, arity, 1)


def _each(operation: str, value: Any) -> Any:
    """A one-operand ``_NODE_WISE`` operation on a traced number or on each number of an object array
    (a lone traced number refuses numpy's ufuncs)."""
    return value._unary(operation) if isinstance(value, Traced) else _NODE_WISE[operation](value)


# Operations the replay computes rather than checks, as the generated code writes them (``Tape._expression``):
# numpy's own object loops would decide them by comparisons, each a decision of the replay.
_NODE_WISE = {
    "max": _node_wise("max", lambda left, right: left if left >= right else right, 2),
    "min": _node_wise("min", lambda left, right: left if left <= right else right, 2),
    "equal": _node_wise("equal", lambda left, right: left == right, 2),
    "at_least": _node_wise("at_least", lambda left, right: left >= right, 2),
    "greater": _node_wise("greater", lambda left, right: left > right, 2),
    "select": _node_wise("select", lambda condition, chosen, otherwise: chosen if condition else otherwise, 3),
    "float": _node_wise("float", float, 1),
    "trunc": _node_wise("trunc", math.trunc, 1),
    "sqrt": _node_wise("sqrt", math.sqrt, 1),  # numpy's object loop would ask for a ``sqrt`` method
}


def maximum(left: Any, right: Any) -> np.ndarray:
    """``np.maximum``; over traced numbers one operation of the replay, not a decision, so that the
    replay holds on both sides of the point where the larger one changes."""
    return _NODE_WISE["max"](left, right) if is_traced(left) or is_traced(right) else np.maximum(left, right)


def minimum(left: Any, right: Any) -> np.ndarray:
    """``np.minimum``, as ``maximum``."""
    return _NODE_WISE["min"](left, right) if is_traced(left) or is_traced(right) else np.minimum(left, right)


def clip(value: Any, low: Any, high: Any) -> np.ndarray:
    """``np.clip`` (either bound may be None), as ``maximum``."""
    if not (is_traced(value) or is_traced(low) or is_traced(high)):
        return np.clip(value, low, high)
    value = value if low is None else maximum(value, low)
    return value if high is None else minimum(value, high)


def largest(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """``values.max(axis)``, as ``maximum``."""
    return _NODE_WISE["max"].reduce(values, axis=axis) if is_traced(values) else values.max(axis=axis)


def argmax(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """``np.argmax(values, axis)`` (the first of equal largest); over traced numbers each position's
    index is one operation of the replay (a number it goes on computing with), not a decision."""
    if is_traced(values):
        return _index_of(values, axis, "argmax")
    return _first_index_along_0(values, np.greater) if axis == 0 else np.argmax(values, axis=axis)


def argmin(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """``np.argmin(values, axis)``, as ``argmax``."""
    if is_traced(values):
        return _index_of(values, axis, "argmin")
    return _first_index_along_0(values, np.less) if axis == 0 else np.argmin(values, axis=axis)


# Below this many positions numpy's own arg-reduction costs less than a pass per row.
_ROW_PASSES_FROM = 256


def _first_index_along_0(values: np.ndarray, better: np.ufunc) -> np.ndarray:
    """``np.argmax`` (``better`` np.greater) or ``np.argmin`` (np.less) along the first axis, the first
    of equals, as numpy gives it, in a few passes per row: numpy reduces a short first axis position
    by position, several times slower over large sweeps (an evaluation's bound index over ops x
    points). The extreme comes from numpy's reduction; the index counts the rows before the first one
    equal to it. A NaN (which numpy's rule picks, first occurrence) is left to numpy."""
    values = np.asarray(values)
    if values.ndim < 2 or values.shape[0] < 2 or values[0].size < _ROW_PASSES_FROM or values.dtype.kind != "f" \
            or values.shape[0] > 255:  # (the index is counted in uint8)
        return np.argmax(values, axis=0) if better is np.greater else np.argmin(values, axis=0)
    extreme = values.max(axis=0) if better is np.greater else values.min(axis=0)
    if np.isnan(extreme).any():
        return np.argmax(values, axis=0) if better is np.greater else np.argmin(values, axis=0)
    found = np.zeros(extreme.shape, dtype=bool)
    scratch = np.empty(extreme.shape, dtype=bool)
    index = np.zeros(extreme.shape, dtype=np.uint8)
    for row in range(values.shape[0] - 1):
        np.equal(values[row], extreme, out=scratch)
        found |= scratch
        np.logical_not(found, out=scratch)
        index += scratch
    return index.astype(np.intp)


def _index_of(values: np.ndarray, axis: int, operation: str) -> np.ndarray:
    moved = np.moveaxis(values, axis, 0)
    result = np.empty(moved.shape[1:], dtype=object)
    for position in np.ndindex(*moved.shape[1:]):
        column = list(moved[(slice(None), *position)])
        index = _INDEX_OF[operation](*(_value(item) for item in column))
        tape = _tape_of(column)
        result[position] = index if tape is None else tape.record(operation, column, index)
    return result


def pick(values: Any, index: Any) -> np.ndarray:
    """``values[index[...], ...]`` along the first axis (``np.take_along_axis`` of one index per
    position); a traced index is one operation of the replay."""
    values = np.asarray(values)
    if not is_traced(index):
        index = np.asarray(index)
        return np.take_along_axis(np.broadcast_to(values, values.shape[:1] + index.shape), index[None], axis=0)[0]
    values = np.broadcast_to(values, values.shape[:1] + np.shape(index))
    result = np.empty(np.shape(index), dtype=object)
    for position in np.ndindex(*np.shape(index)):
        chosen, column = index[position], list(values[(slice(None), *position)])
        result[position] = (column[chosen] if not isinstance(chosen, Traced) else
                            chosen.tape.record("pick", (chosen, *column), _value(column[chosen.value])))
    return result


def peek(value: Any) -> Any:
    """A traced value as the traced run had it, with no check in the replay: only for what the replayed
    result does not contain (the name of the kernel a rule chose, which reports show and predictions
    do not)."""
    if isinstance(value, Traced):
        return value.value
    if isinstance(value, np.ndarray) and value.dtype == object:
        return np.asarray([peek(item) for item in value.flat]).reshape(value.shape)
    return value


def _tape_of(items: Sequence[Any]) -> Tape | None:
    return next((item.tape for item in items if isinstance(item, Traced)), None)


def equal(values: Any, constant: Any) -> np.ndarray:
    """``values == constant`` element by element (True/False; over traced numbers, computed by the
    replay, not decided)."""
    return _NODE_WISE["equal"](values, constant) if is_traced(values) else values == constant


def at_least(values: Any, bound: Any) -> np.ndarray:
    """``values >= bound`` element by element, as ``equal``."""
    return _NODE_WISE["at_least"](values, bound) if is_traced(values) or is_traced(bound) else values >= bound


def greater(values: Any, bound: Any) -> np.ndarray:
    """``values > bound`` element by element, as ``equal``."""
    return _NODE_WISE["greater"](values, bound) if is_traced(values) or is_traced(bound) else values > bound


def where(condition: Any, chosen: Any, otherwise: Any) -> np.ndarray:
    """``np.where``; a traced condition is computed by the replay, not decided."""
    if not is_traced(condition):
        return np.where(condition, chosen, otherwise)
    return _NODE_WISE["select"](condition, chosen, otherwise)


def sqrt(value: Any) -> np.ndarray:
    """``np.sqrt``, as ``maximum``."""
    return cast(np.ndarray, _each("sqrt", value)) if is_traced(value) else np.sqrt(value)


def is_traced(value: Any) -> bool:
    """Whether ``value`` holds traced numbers (a traced number, or an object array of them)."""
    return isinstance(value, Traced) or (isinstance(value, np.ndarray) and value.dtype == object)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity (a cache key)
class Replay:
    """A traced computation compiled: ``function(*inputs)`` gives the numbers of the result (or None
    where a decision differs), ``rebuild`` puts them back into a result shaped like the traced one."""

    function: Callable[..., tuple | None]
    rebuild: Callable[[tuple], Any]
    nodes: int  # operations on the tape
    decisions: int
    computed: int = 0  # of them, those the replay computes (the others fed nothing it returns or checks)
    traced_operations: int = 0  # those the traced run did that the outputs and decisions need (before folding)

    def __call__(self, *values: Any) -> Any:
        try:
            numbers = self.function(*values)
        except (ArithmeticError, ValueError, TypeError):
            # Where numpy gives inf or nan (x / 0, the square root or fractional power of a negative),
            # Python raises or goes complex: the caller runs the computation and reports it.
            return None
        return None if numbers is None else self.rebuild(numbers)


def trace(function: Callable[..., Any], values: Sequence[int | float]) -> Replay:
    """Run ``function`` once on traced ``values`` and compile what it did."""
    tape = Tape()
    result = function(*(tape.input(value) for value in values))
    leaves: list[Traced] = []
    rebuild = _rebuilder(result, leaves)
    return Replay(function=tape.compile(leaves), rebuild=rebuild, nodes=len(tape.nodes), decisions=len(tape.guards),
                  computed=len(tape.scalings_folded(leaves).needed(leaves)), traced_operations=len(tape.needed(leaves)))


def _rebuilder(value: Any, leaves: list[Traced]) -> Callable[[tuple], Any]:
    """A function that builds ``value`` again with its traced numbers taken from a replay's output.
    Containers are built anew each time (a caller may change a result's dict); frozen records and
    other immutable values are shared. The function is compiled from one Python expression (a record's
    constructor called with its fields' expressions, dict and list displays, ``numbers[i]`` for each
    traced number), as the replay is: a result of a few dozen numbers in nested records and dicts is
    built in about a quarter of the time closures nested per container take."""
    constants: list[Any] = []
    expression = _rebuild_text(value, leaves, constants)
    namespace: dict[str, Any] = {f"_c{index}": constant for index, constant in enumerate(constants)}
    namespace["_array"], namespace["_record"] = np.array, record
    exec(compile(f"def rebuild(n):\n    return {expression}\n", "<rebuild>", "exec"), namespace)  # noqa: S102
    rebuild: Callable[[tuple], Any] = namespace["rebuild"]
    return rebuild


def _rebuild_text(value: Any, leaves: list[Traced], constants: list[Any]) -> str:
    """The expression ``_rebuilder`` compiles for ``value``: every object it cannot write as a literal
    (a record type, a shared record, a dict key, an array) is a name bound to it (``constants``)."""
    def constant(item: Any) -> str:
        constants.append(item)
        return f"_c{len(constants) - 1}"

    if isinstance(value, Traced):
        leaves.append(value)
        return f"n[{len(leaves) - 1}]"
    if isinstance(value, dict):
        parts = [f"{constant(key)}: {_rebuild_text(item, leaves, constants)}" for key, item in value.items()]
        built = f"{{{', '.join(parts)}}}"
        return built if type(value) is dict else f"{constant(type(value))}({built})"
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        items = "".join(f"{_rebuild_text(item, leaves, constants)}, " for item in value)
        if type(value) is list:
            return f"[{items}]"
        return f"({items})" if type(value) is tuple else f"{constant(type(value))}(({items}))"
    if isinstance(value, np.ndarray):
        if value.dtype != object:
            return f"{constant(value)}.copy()"
        items = "".join(f"{_rebuild_text(item, leaves, constants)}, " for item in value.flat)
        return f"_array([{items}]).reshape({constant(value.shape)})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        count = len(leaves)
        fields = [(field.name, _rebuild_text(getattr(value, field.name), leaves, constants))
                  for field in dataclasses.fields(value) if field.init]
        if len(leaves) == count and not _holds_containers(value):
            return constant(value)
        # Built from its fields' parts, not from the traced record (which would keep the whole tape alive).
        if plain_record(type(value)):  # its fields set at once (``record``), not one __setattr__ call each
            items = ", ".join(f"{name!r}: {text}" for name, text in fields)
            return f"_record({constant(type(value))}, {{{items}}})"
        return f"{constant(type(value))}({', '.join(f'{name}={text}' for name, text in fields)})"
    return constant(value)


@functools.cache
def _field_names(record_type: Any) -> frozenset[str] | None:
    """The fields of a dataclass whose ``__init__`` only stores its arguments (no ``__post_init__``, no
    ``InitVar``, every field an argument, no ``__slots__``); None for any other type."""
    if not dataclasses.is_dataclass(record_type) or hasattr(record_type, "__post_init__") \
            or "__slots__" in vars(record_type):
        return None
    fields = dataclasses.fields(record_type)
    if len(fields) != len(record_type.__dataclass_fields__) or not all(field.init for field in fields):
        return None
    return frozenset(field.name for field in fields)


def plain_record(record_type: type) -> bool:
    """Whether ``record`` and ``replaced`` may build ``record_type``'s instances (``_field_names``)."""
    return _field_names(record_type) is not None


def record(record_type: type, values: dict[str, Any]) -> Any:
    """``record_type(**values)`` for a ``plain_record`` type given every field: what its ``__init__``
    would store, stored at once. A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``: 21 fields take about 3 us, a third of a replayed LLM scenario's own
    bookkeeping (the record stays frozen: only its ``__setattr__`` refuses)."""
    made: Any = object.__new__(record_type)
    made.__dict__.update(values)
    return made


def replaced(instance: Any, /, **changes: Any) -> Any:
    """``dataclasses.replace(instance, **changes)``, for a ``plain_record`` type without its per-field
    ``__init__`` calls (``record``); any other record goes through ``dataclasses.replace``."""
    kind: Any = type(instance)
    names = _field_names(kind)
    if names is None or not changes.keys() <= names:  # (replace names an unknown field)
        return dataclasses.replace(instance, **changes)
    held = instance.__dict__
    return record(kind, {**{name: held[name] for name in names}, **changes})


def _holds_containers(record: Any) -> bool:
    return any(isinstance(getattr(record, field.name), (dict, list, np.ndarray)) for field in dataclasses.fields(record))


class Replays:
    """Compiled replays of a computation, kept per key (what the computation depends on besides its
    input numbers), a few variants each (one per region of the inputs where its decisions hold).

    A trace costs about as much as 20 runs of the computation and a replay less than a tenth of one (a
    70B step on 8 H100s: about 40 ms, 1.8 ms and 0.14 ms, ``benchmarks/engine_speed.py``), so a key is
    traced only after ``trace_after`` runs that no replay held for: a key asked a few times (a sizing
    search's layouts) is never traced, and a long series of requests pays at most about twice what it
    would without replays, whatever its inputs do. The same rule adds a variant for a new region of the
    inputs; beyond ``variants`` the one that held least often makes room. ``keys`` bounds the memory
    (least recently used first out; the benchmark reports what one replay holds). Objects the
    computation depends on are held by the cache and compared by identity (``anchors``), so that a key
    built from their ``id`` cannot be taken by another object later given the same id. Threads may share
    it (its bookkeeping is locked; two threads missing at once may both trace)."""

    def __init__(self, *, trace_after: int = 32, variants: int = 4, keys: int = 32) -> None:
        self.trace_after, self.variants, self.keys = trace_after, variants, keys
        self._entries: dict[Any, _Entry] = {}
        self._lock = threading.Lock()  # the bookkeeping; replays and traces run outside it
        self.traced = self.replayed = self.missed = self.failed = 0

    def __call__(self, key: Any, anchors: tuple[Any, ...], function: Callable[..., Any],
                 values: Sequence[int | float]) -> Any:
        """``function(*values)`` replayed (None: run it yourself)."""
        with self._lock:
            entries = self._entries
            # The key asked last (a series of one model's scenarios) is already last: not moved.
            entry = entries[key] if entries and next(reversed(entries)) == key else entries.pop(key, None)
            if entry is None or len(entry.anchors) != len(anchors) or any(map(operator.is_not, entry.anchors, anchors)):
                entry = _Entry(anchors)
            entries[key] = entry  # most recently used last
            if len(entries) > self.keys:
                del entries[next(iter(entries))]
            replays = tuple(entry.replays)
        for replay in replays:
            result = replay(*values)
            if result is not None:
                with self._lock:
                    entry.hits[replay] = entry.hits.get(replay, 0) + 1
                    self.replayed += 1
                return result
        with self._lock:
            entry.misses += 1
            if entry.misses < self.trace_after or entry.broken or self.variants < 1:  # variants=0: replays off
                self.missed += 1
                return None
            entry.misses = 0
        try:
            replay = trace(function, values)
            result = replay(*values)
        except Exception:  # noqa: BLE001 - a computation the tracer cannot follow is run as it is
            result = None
        with self._lock:
            if result is None:  # or its own inputs did not replay: a decision the tape wrote down wrongly
                entry.broken = True
                self.failed += 1
                return None
            if len(entry.replays) >= self.variants:
                least = min(entry.replays, key=lambda held: entry.hits.get(held, 0))
                entry.replays.remove(least)
                entry.hits.pop(least, None)
            entry.replays.append(replay)
            self.traced += 1
        return result


class _Entry:
    """One key's replays (mutable cache state, not a value)."""

    def __init__(self, anchors: tuple[Any, ...]) -> None:
        self.anchors = anchors
        self.replays: list[Replay] = []
        self.hits: dict[Replay, int] = {}  # how often each replay held
        self.misses = 0  # runs no replay held for, since the last trace
        self.broken = False
