"""A pipelined unit named by its class and constructor arguments, and its latency from those.

Units of :mod:`hdl.arith` give their latency as a function of their parameters
(``FloatAdder.latency_of(fmt, stages=...)``) that runs the constructor's checks without building
the unit. A component that builds a unit and needs its latency beforehand names it once as a
``functools.partial(UnitClass, *args, **kwargs)``: calling it builds the unit, and
:func:`unit_latency` reads its latency, so the two cannot disagree.
"""

from __future__ import annotations

from functools import partial

__all__ = ["unit_latency", "unit_latencies"]


def unit_latency(unit: partial) -> int:
    """Return the latency of the unit ``unit()`` builds, without building it."""
    return unit.func.latency_of(*unit.args, **unit.keywords)


def unit_latencies(units: dict[str, partial]) -> dict[str, int]:
    """Return the latency of each unit of a table of named units, by its name."""
    return {name: unit_latency(unit) for name, unit in units.items()}
