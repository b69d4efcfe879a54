"""The SHIELD controller's status port: active policy, refusals and per-segment event counters."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer, power_of_two
from .spec import SEGMENTS

__all__ = ["counter_layout", "status_layout", "event_layout", "StatusCounters"]


def counter_layout(width: int) -> data.StructLayout:
    """Per-segment event counters (each saturates at its maximum)."""
    return data.StructLayout({"refreshes": width, "reads": width, "writes": width,
                              "stalls": width})


def status_layout(width: int) -> data.StructLayout:
    """Status port: active policy, refused requests and the counters of every segment."""
    return data.StructLayout({"policy": 2, "refused": width,
                              **{segment: counter_layout(width) for segment in SEGMENTS}})


def event_layout(banks: int) -> data.StructLayout:
    """One cycle's events: a refusal, and per segment the banks refreshed, a read, a write and a
    stall (a cycle in which a valid request waited for a forced refresh of the segment)."""
    return data.StructLayout({"refused": 1, **{
        segment: data.StructLayout({"refreshes": banks, "read": 1, "write": 1, "stall": 1})
        for segment in SEGMENTS}})


class StatusCounters(wiring.Component):
    """Count the controller's events into saturating counters.

    Parameters
    ----------
    width : int
        Bits of every counter.
    banks : int
        Banks per segment (a cycle may refresh one row in each).

    Members
    -------
    events : In(event_layout(banks))
        This cycle's events. They are registered first and counted a cycle later, so that no
        logic before them shares a cycle with a counter's carry chain: ``status`` shows an event
        two cycles after the cycle it happened in.
    policy : In(2)
        The active policy, passed to ``status``.
    status : Out(status_layout(width))
        The counters (registers) and the policy. A counter stops at ``2 ** width - 1``.
    """

    def __init__(self, *, width: int, banks: int):
        integer(width, "Counter width (width)", 8, 64)
        power_of_two(banks, "Bank count (banks)", 1, 256)
        self.width, self.banks = width, banks
        super().__init__({"events": In(event_layout(banks)), "policy": In(2),
                          "status": Out(status_layout(width))})

    def elaborate(self, platform):
        m = Module()
        st = self.status
        ev = Signal.like(self.events, name="events_q")
        m.d.sync += ev.eq(self.events)
        for segment in SEGMENTS:
            e, counters = ev[segment], st[segment]
            refreshes = Signal(range(self.banks + 1), name=f"{segment}_refreshes")
            m.d.comb += refreshes.eq(sum(e.refreshes[b] for b in range(self.banks)))
            _saturating_add(m, counters.refreshes, refreshes)
            _saturating_add(m, counters.reads, e.read)
            _saturating_add(m, counters.writes, e.write)
            _saturating_add(m, counters.stalls, e.stall)
        _saturating_add(m, st.refused, ev.refused)
        m.d.comb += st.policy.eq(self.policy)
        return m


def _saturating_add(m: Module, counter: Value, increment: Value):
    total = Signal(len(counter) + 1)
    m.d.comb += total.eq(counter + increment)
    m.d.sync += counter.eq(Mux(total[-1], (1 << len(counter)) - 1, total))
