"""Pipelined binary reduction trees, shared by the integer and floating dot products.

One function, :func:`reduce_tree`, reduces a list of values with a two-input combine step into one
value, pipelined, with a valid bit travelling alongside. The combine step is either

* a plain function ``combine(m, a, b) -> Value`` that adds combinational logic (an integer
  ``a + b``); the tree puts a register after every ``register_every`` levels and after the last
  level, or
* a :class:`PipelinedCombine`: an object with a ``latency`` (int) that, called as
  ``combine(m, a, b, valid)``, instantiates a pipelined unit and returns its result, valid
  ``latency`` cycles later (a floating-point adder). :func:`unit_combine` makes one from a
  component class with ``i``/``o`` always-ready streams and a ``latency_of``.

Summation order (the golden models of the dot products depend on it)
--------------------------------------------------------------------
Level by level, neighbours are combined in order, the left operand being the lower index::

    level 1:  c0 = v0 + v1,  c1 = v2 + v3,  c2 = v4 + v5, ...
    level 2:  d0 = c0 + c1,  d1 = c2 + c3, ...

until one value is left. When a level has an odd number of values, the last one is passed
through unchanged to the end of the next level (delayed like the combined ones), so with five
inputs the tree computes ``((v0 + v1) + (v2 + v3)) + v4``. The number of levels is
``ceil(log2(n))``.

Latency
-------
With a combinational combine: ``ceil(levels / register_every)`` cycles (``register_every = 0``:
no registers, 0 cycles). With a pipelined combine: ``levels * combine.latency`` cycles. The tree
itself never stalls: it takes a new set of values every cycle.

Serial trees
------------
:func:`serial_tree` computes the same order over values that arrive one at a time (the beat sums
of a long dot product, a stream of exponentials): one pipelined combine unit per level, a hold
register for the left operand, and the group's odd last value combined with an identity element
(``x + -0 = x`` for every float an adder can produce) so that it keeps its place in the level's
pipeline. A group ends with a value flagged ``last``; its result leaves ``levels *
combine.latency`` cycles after that value, whatever gaps the group had.
"""

from __future__ import annotations

import abc

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence, Union

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import wiring

from ..latency import unit_latency
from ..pipeline import delay
from ..validate import integer

__all__ = ["PipelinedCombine", "unit_combine", "tree_levels", "tree_latency", "reduce_tree",
           "serial_tree", "TreeResult"]


class PipelinedCombine(abc.ABC):
    """A combine step with its own pipeline: ``latency`` cycles from operands to result.

    Subclasses (or :func:`unit_combine`) implement ``__call__(m, a, b, valid) -> Value``: add the
    unit to ``m``, drive its operands ``a``, ``b`` and input valid ``valid``, and return its result,
    which must correspond to those operands exactly ``latency`` cycles later.
    """

    latency: int = 0

    @abc.abstractmethod
    def __call__(self, m: Module, a: Value, b: Value, valid: Value) -> Value:
        """Add the unit to ``m`` and return its result for operands ``a``, ``b``."""


class _UnitCombine(PipelinedCombine):
    def __init__(self, unit: partial, a, b, result):
        self.latency = integer(unit_latency(unit), "Combine unit latency", 0, 1 << 16)
        self._unit, self._a, self._b, self._result = unit, a, b, result

    def __call__(self, m, a, b, valid):
        unit = self._unit()
        m.submodules += unit
        m.d.comb += [unit.i.valid.eq(valid),
                     getattr(unit.i.payload, self._a).eq(a),
                     getattr(unit.i.payload, self._b).eq(b)]
        return getattr(unit.o.payload, self._result)


def unit_combine(unit: type, *args, a: str = "a", b: str = "b", result: str = "y",
                 **kwargs) -> PipelinedCombine:
    """Return a combine step that instantiates ``unit(*args, **kwargs)`` for every pair.

    Parameters
    ----------
    unit : type
        A pipelined unit: a ``wiring.Component`` class with ``i`` and ``o`` always-ready streams
        and a ``latency_of`` that takes the constructor's arguments and returns the latency
        without building a unit (for example ``unit_combine(FloatAdder, FP32)``).
    args, kwargs
        The unit's constructor arguments.
    a, b, result : str
        Names of the two operand fields of ``i.payload`` and of the result field of
        ``o.payload``.
    """
    if not (isinstance(unit, type) and issubclass(unit, wiring.Component)
            and callable(getattr(unit, "latency_of", None))):
        raise TypeError(f"Combine unit must be a wiring.Component class with a latency_of, "
                        f"not {unit!r}")
    return _UnitCombine(partial(unit, *args, **kwargs), a, b, result)


Combine = Union[Callable[[Module, Value, Value], Value], PipelinedCombine]


@dataclass(frozen=True)
class TreeResult:
    """What :func:`reduce_tree` returns: the reduced value, its valid bit and the latency."""

    value: Value
    valid: Value
    latency: int

    def __iter__(self):                       # allows ``value, valid, latency = reduce_tree(...)``
        return iter((self.value, self.valid, self.latency))


def tree_levels(count: int) -> int:
    """Return the number of levels of a tree over ``count`` inputs: ``ceil(log2(count))``."""
    integer(count, "Tree input count", 1, 1 << 16)
    return (count - 1).bit_length()


def tree_latency(count: int, *, register_every: int = 1, combine_latency: int | None = None) -> int:
    """Return the latency in cycles of a tree over ``count`` inputs (see the module docstring).

    ``combine_latency`` is the latency of a pipelined combine step; ``None`` means a
    combinational one registered every ``register_every`` levels.
    """
    levels = tree_levels(count)
    if combine_latency is not None:
        return levels * combine_latency
    integer(register_every, "Tree register spacing (levels per register, 0: none)", 0, 64)
    return 0 if register_every == 0 else math.ceil(levels / register_every)


@dataclass(frozen=True)
class SerialTreeResult:
    """What :func:`serial_tree` returns: one value per group, its valid bit and the latency."""
    value: Value
    valid: Value
    latency: int


def serial_tree(m: Module, value: Value, valid: Value, last: Value, *, max_count: int,
                combine: PipelinedCombine, identity: Value | int,
                name: str = "stree") -> SerialTreeResult:
    """Reduce groups of values that arrive one per cycle at most, in the pairwise tree order.

    Parameters
    ----------
    m : Module
        Module to add the tree to (``sync`` domain).
    value, valid, last : Value
        The input: a value with its valid bit; ``last`` marks the final value of a group.
    max_count : int
        The largest group size (1 to 65536): ``ceil(log2(max_count))`` levels are built. Shorter
        groups are allowed and reduce in the same order as :func:`reduce_tree` over their values.
    combine : PipelinedCombine
        The pipelined two-input step (see :func:`unit_combine`).
    identity : Value or int
        An operand ``e`` with ``combine(x, e) == x`` bit for bit for every ``x`` the input or the
        combine step can produce (``-0.0`` for an IEEE adder with round to nearest).
    name : str
        Prefix of the signal names.

    Returns
    -------
    SerialTreeResult
        ``(value, valid, latency)``: one result per group, ``latency = levels * combine.latency``
        cycles after the group's ``last`` value, in group order.
    """
    if not isinstance(combine, PipelinedCombine):
        raise TypeError(f"Serial tree combine step must be a PipelinedCombine, not {combine!r}")
    levels = tree_levels(max_count)
    for level in range(levels):
        hold = Signal.like(value, name=f"{name}_l{level}_hold", reset_less=True)
        odd = Signal(name=f"{name}_l{level}_odd")       # a left operand is held
        issue = valid & (odd | last)
        with m.If(valid):
            m.d.sync += odd.eq(~odd & ~last)
            with m.If(~odd):
                m.d.sync += hold.eq(value)
        a = Mux(odd, hold, value)
        b = Mux(odd, value, identity)
        value = combine(m, a, b, issue)
        valid = delay(m, issue, combine.latency, name=f"{name}_l{level}_valid", reset=True)
        last = delay(m, issue & last, combine.latency, name=f"{name}_l{level}_last", reset=True)
    return SerialTreeResult(value, valid, levels * combine.latency)


def reduce_tree(m: Module, values: Sequence[Value], combine: Combine, *, valid: Value,
                register_every: int = 1, name: str = "tree") -> TreeResult:
    """Reduce ``values`` pairwise with ``combine``, pipelined; return value, valid and latency.

    Parameters
    ----------
    m : Module
        Module to add the tree to (``sync`` domain for its registers).
    values : sequence of Value
        The inputs, at least one. They may have different shapes.
    combine : callable or PipelinedCombine
        ``combine(m, a, b) -> Value``: combinational (``lambda m, a, b: a + b`` for an exact
        integer sum: Amaranth widens the result by one bit per level). Or a
        :class:`PipelinedCombine` (see :func:`unit_combine`).
    valid : Value
        Valid bit of ``values``; delayed alongside and returned.
    register_every : int
        For a combinational combine: put a register after every ``register_every`` levels
        (1: after every level) and after the last level; 0: no registers at all. Ignored for a
        pipelined combine, which brings its own registers.
    name : str
        Prefix of the signal names.

    Returns
    -------
    TreeResult
        ``(value, valid, latency)``: the reduction in the order given in the module docstring,
        its valid bit and the latency in cycles (:func:`tree_latency`).

    Raises
    ------
    ValueError
        For an empty ``values`` or a ``register_every`` outside 0..64.
    """
    values = list(values)
    if not values:
        raise ValueError("Tree input count must be between 1 and 65536, not 0")
    pipelined = isinstance(combine, PipelinedCombine)
    latency = tree_latency(len(values), register_every=register_every,
                           combine_latency=combine.latency if pipelined else None)
    levels = tree_levels(len(values))
    level_valid = valid
    for level in range(1, levels + 1):
        if pipelined:
            cycles = combine.latency
        else:
            cycles = int(register_every != 0 and (level % register_every == 0 or level == levels))
        pairs = [(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        combined = []
        for index, (a, b) in enumerate(pairs):
            if pipelined:
                combined.append(combine(m, a, b, level_valid))
            else:
                result = Value.cast(combine(m, a, b))
                combined.append(delay(m, result, cycles, name=f"{name}_l{level}_{index}"))
        if len(values) % 2:                   # the odd one out passes to the next level
            combined.append(delay(m, values[-1], cycles, name=f"{name}_l{level}_pass"))
        values = combined
        level_valid = delay(m, level_valid, cycles, name=f"{name}_l{level}_valid", reset=True)
    return TreeResult(values[0], level_valid, latency)
