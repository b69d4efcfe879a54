"""SHIELD description: word segments, refresh policies, cycle counts and the refresh sweep.

A pure description (no hardware), shared by the controller (:mod:`hdl.edram.controller`), the golden
model (:mod:`golden.edram`) and the testbenches, in the way :mod:`hdl.arith.format` is shared.
Every conversion from microseconds to clock cycles happens here, in :func:`us_to_cycles`.

Segments
--------
A BF16 word (``hdl.arith.format.BF16``) is split into its sign and exponent (``STD_BITS = 9``,
bits 15..7, the ``std`` segment) and its mantissa (``MANT_BITS = 7``, bits 6..0), which goes to
``kv_mant`` or ``qo_mant`` by the word's tensor class.

The sweep
---------
A refreshed segment walks its rows with a timer: every ``step`` cycles one *slot* comes up, and the
slots visit rows ``0, 1, ..., rows - 1, 0, ...`` of every bank of the segment at once, so each row
has a slot every ``period = rows * step`` cycles. Counting cycles from the phase origin (the first
cycle after reset, or the cycle after a policy change is accepted), row ``r`` has its slots at
cycles ``r * step + k * period`` for ``k >= 0``.

A row that holds live data in that segment both before and after its slot cycle gets one refresh,
which waits while accesses use the bank and is forced through at most ``slack`` cycles later.
Between two restores of a live row (macro write or refresh) at most ``period + slack + 1`` cycles
pass: the worst case is a write in the very cycle of the row's slot, which the slot does not see,
followed by a refresh of the next slot delayed by the full slack; the one extra cycle is the write's
path through the bank-port register. The step is therefore the largest that keeps that bound
within the interval::

    step = (interval - slack - 1) // rows,    period + slack + 1 <= interval

and it must leave room for a pending refresh to finish before the next slot, ``step >= slack + 1``,
and a cycle in every step for accesses to a bank whose rows are all live, ``step >= 2``; so
``interval >= rows * max(slack + 1, 2) + slack + 1`` (checked, with the message naming the
parameter).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from fractions import Fraction

from ..arith.format import BF16

__all__ = ["WORD_BITS", "STD_BITS", "MANT_BITS", "SEGMENTS", "SEGMENT_BITS", "Policy",
           "us_to_cycles", "Sweep", "RefreshPlan"]

#: Bits of a stored word (BF16) and of its segments: sign with exponent, and mantissa.
WORD_BITS = BF16.width
STD_BITS = 1 + BF16.exp_bits
MANT_BITS = BF16.man_bits
#: Segment names, in port order: sign and exponent of every word, KV mantissas, QO mantissas.
SEGMENTS = ("std", "kv_mant", "qo_mant")
#: Bits per word of each segment.
SEGMENT_BITS = {"std": STD_BITS, "kv_mant": MANT_BITS, "qo_mant": MANT_BITS}


class Policy(enum.IntEnum):
    """Refresh policy, selected at run time (its code is the ``SET_POLICY`` request's data)."""

    SHIELD = 0      #: std at T_std, KV mantissas at T_rel, QO mantissas never refreshed
    STANDARD = 1    #: every segment at T_std (the paper's baseline)
    KELLE = 2       #: std and QO mantissas at T_std, KV mantissas at T_kelle (KV-only relaxation)


def us_to_cycles(t_us: float, clk_mhz: float, what: str) -> int:
    """Return the whole number of clock cycles in ``t_us`` microseconds, rounded down.

    Rounding down keeps the refresh on the safe side: the hardware never waits longer than the
    physical interval. The product is taken exactly on the decimal values given, so 45 us at
    100 MHz is 4500 cycles, not 4499.

    Raises
    ------
    ValueError
        If either value is not a positive finite number, or the interval is shorter than one cycle.
    """
    for value, name in ((t_us, what), (clk_mhz, "Clock frequency clk_mhz")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number, not {value!r}")
    cycles = math.floor(Fraction(str(t_us)) * Fraction(str(clk_mhz)))
    if cycles < 1:
        raise ValueError(f"{what} = {t_us} us at {clk_mhz} MHz rounds to 0 cycles; it must be at "
                         f"least one clock period ({1 / clk_mhz:g} us)")
    return cycles


@dataclass(frozen=True)
class Sweep:
    """The distributed-refresh schedule of one segment under one policy.

    Parameters
    ----------
    interval : int
        Longest allowed age of a live row, in cycles.
    rows : int
        Rows per bank (the sweep's length).
    slack : int
        Cycles a due refresh may wait for accesses before it takes the bank.
    """

    interval: int
    rows: int
    slack: int

    @property
    def step(self) -> int:
        """Cycles between consecutive slots."""
        return (self.interval - self.slack - 1) // self.rows

    @property
    def period(self) -> int:
        """Cycles between two slots of the same row."""
        return self.step * self.rows

    @property
    def max_age(self) -> int:
        """Largest age a live row can reach between restores (at most ``interval``)."""
        return self.period + self.slack + 1

    @staticmethod
    def shortest_interval(rows: int, slack: int) -> int:
        """The shortest interval a sweep of ``rows`` rows with ``slack`` cycles can keep."""
        return rows * max(slack + 1, 2) + slack + 1


@dataclass(frozen=True)
class RefreshPlan:
    """Refresh intervals of every segment under every policy, in cycles, validated once.

    Parameters
    ----------
    clk_mhz : float
        Controller clock frequency in MHz.
    t_std_us, t_rel_us, t_kelle_us : float
        The standard, relaxed (SHIELD KV mantissa) and Kelle-like KV-mantissa intervals in us.
    rows : int
        Rows per bank.
    slack : int
        Refresh slack in cycles.

    Raises
    ------
    ValueError
        If an interval rounds to zero cycles or is shorter than one refresh sweep allows.
    """

    clk_mhz: float
    t_std_us: float
    t_rel_us: float
    t_kelle_us: float
    rows: int
    slack: int

    def __post_init__(self):
        for policy in Policy:
            for segment in SEGMENTS:
                self.sweep(policy, segment)

    def interval_us(self, policy: Policy, segment: str) -> float | None:
        """The segment's interval under ``policy`` in us, or ``None`` for a refresh-less segment."""
        policy = Policy(policy)
        if segment not in SEGMENTS:
            raise ValueError(f"Segment must be one of {', '.join(SEGMENTS)}, not {segment!r}")
        if segment == "std" or policy == Policy.STANDARD:
            return self.t_std_us
        if segment == "kv_mant":
            return self.t_rel_us if policy == Policy.SHIELD else self.t_kelle_us
        return None if policy == Policy.SHIELD else self.t_std_us

    def _parameter(self, policy: Policy, segment: str) -> str:
        """Name of the parameter that sets the segment's interval under ``policy``."""
        if segment != "kv_mant" or Policy(policy) == Policy.STANDARD:
            return "t_std_us"
        return "t_rel_us" if Policy(policy) == Policy.SHIELD else "t_kelle_us"

    def interval(self, policy: Policy, segment: str) -> int | None:
        """The segment's interval under ``policy`` in cycles, or ``None`` (refresh-less)."""
        t = self.interval_us(policy, segment)
        if t is None:
            return None
        return us_to_cycles(t, self.clk_mhz, f"Refresh interval {self._parameter(policy, segment)}")

    def sweep(self, policy: Policy, segment: str) -> Sweep | None:
        """The segment's sweep under ``policy``, or ``None`` (refresh-less)."""
        cycles = self.interval(policy, segment)
        if cycles is None:
            return None
        shortest = Sweep.shortest_interval(self.rows, self.slack)
        if cycles < shortest:
            name = self._parameter(policy, segment)
            raise ValueError(
                f"Refresh interval {name} = {self.interval_us(policy, segment)} us is "
                f"{cycles} cycles at {self.clk_mhz} MHz, shorter than one refresh sweep of "
                f"{self.rows} rows with a slack of {self.slack} cycles allows; it must be at least "
                f"{shortest} cycles ({shortest / self.clk_mhz:g} us)")
        return Sweep(cycles, self.rows, self.slack)
