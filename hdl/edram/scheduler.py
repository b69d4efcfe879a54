"""One segment's refresh scheduler: the sweep's timer, its pending refreshes and their deadline."""

from __future__ import annotations

from typing import Mapping

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer, power_of_two
from .spec import Policy, Sweep

__all__ = ["SweepScheduler"]


class SweepScheduler(wiring.Component):
    """Walk one segment's rows and refresh the live ones within their slack, around the accesses.

    Every ``step`` cycles of the active policy's :class:`~hdl.edram.spec.Sweep` a *slot* comes up
    for row ``ptr`` of every bank (``slot``). The banks whose row is live both in the slot cycle
    and in the cycle after (live before and after the slot cycle) get a pending refresh. The
    liveness table answers each cycle with the state of the cycle before (``slot_live``), so the
    refreshes are pending from two cycles after the slot. A pending refresh is issued (``issue``,
    row ``row``) in the first cycle its bank has no access (``access``), and in the cycle
    ``slack + 1`` after its slot at the latest: the *forced* cycle. No access may commit in a
    forced cycle; the scheduler asks for that ``lead + 1`` cycles ahead with ``hold``, which the
    controller honours by admitting nothing in the cycle after (its requests commit ``lead``
    cycles after admission). It raises ``hold`` only when the refresh would still be pending by
    then: when ``access`` and every element of ``planned`` use the bank. (With the smallest slack,
    ``lead + 1``, that decision falls in the cycle after the slot, before the answer is whole: the
    banks live in the slot cycle stand for it, a superset, and that cycle counts as busy.)

    A slot whose rows are all dead leaves the pending refreshes alone (in steady state there are
    none: each is issued before the next slot, since ``step >= slack + 1``). After a ``restart``,
    the sweep's new origin slot finds nothing live (a policy change is refused while a row is
    live), so a refresh still pending from before keeps its own deadline.

    Parameters
    ----------
    plan : mapping of Policy to Sweep or None
        The segment's sweep under every policy (``None``: the segment is not refreshed).
    rows, banks : int
        Rows per bank and banks (powers of two).
    slack : int
        Cycles a pending refresh may wait for accesses, at least ``lead + 1``.
    lead : int
        Cycles from a request's admission to its commit (the controller's pipeline).

    Members
    -------
    policy : In(2)
        The active policy's code.
    restart : In(1)
        The sweep restarts: its phase origin is the next cycle.
    slot : Out(1)
        A slot comes up this cycle, for row ``ptr``.
    ptr : Out(row_bits)
        The row the sweep visits.
    slot_live : In(banks)
        Every cycle: the banks whose row ``ptr`` of the cycle before was live in this segment in
        that cycle (the liveness table's registered view).
    access : In(banks)
        Banks of this segment that the request committing this cycle accesses.
    planned : In(data.ArrayLayout(banks, lead))
        Banks the requests committing in the next ``lead`` cycles may access (a superset): element
        ``k`` is cycle ``k + 1`` from now, the last one the request admitted this cycle.
    issue : Out(banks)
        Banks to refresh this cycle (never a bank in ``access``).
    row : Out(row_bits)
        The row they refresh.
    hold : Out(1)
        A register: admit no request this cycle (it would commit in a forced cycle).

    Attributes ``pending``, ``pending_row`` and ``countdown_now`` are the refreshes pending this
    cycle, their row and the cycles left before they are forced (``load``: a slot's answer is
    taken this cycle; ``early``: the cycle after a slot, with the banks live in the slot cycle);
    with the registers ``pend``, ``pend_row``, ``countdown`` and ``tick`` they are for formal
    harnesses.
    """

    def __init__(self, *, plan: Mapping[Policy, Sweep | None], rows: int, banks: int,
                 slack: int, lead: int):
        self.plan = dict(plan)
        if set(self.plan) != set(Policy):
            raise ValueError(f"Plan (plan) must give a sweep or None for each of "
                             f"{', '.join(p.name for p in Policy)}, not for "
                             f"{', '.join(getattr(p, 'name', repr(p)) for p in self.plan)}")
        power_of_two(rows, "Rows per bank (rows)", 2, 65536)
        power_of_two(banks, "Bank count (banks)", 1, 256)
        integer(lead, "Admission lead (lead)", 1, 64)
        integer(slack, "Refresh slack in cycles (slack)", lead + 1, 1024)
        self.rows, self.banks, self.slack, self.lead = rows, banks, slack, lead
        self.row_bits = (rows - 1).bit_length()
        super().__init__({
            "policy": In(2),
            "restart": In(1),
            "slot": Out(1),
            "ptr": Out(self.row_bits),
            "slot_live": In(banks),
            "access": In(banks),
            "planned": In(data.ArrayLayout(banks, lead)),
            "issue": Out(banks),
            "row": Out(self.row_bits),
            "hold": Out(1),
        })
        steps = [s.step for s in self.plan.values() if s is not None]
        self.tick = Signal(range(max(steps, default=1)), name="tick")
        self.pend = Signal(banks, name="pend")
        self.pend_row = Signal(self.row_bits, name="pend_row")
        self.countdown = Signal(range(slack + 1), name="countdown")
        self.load = Signal(name="load")
        self.early = Signal(banks, name="early")
        self.pending = Signal(banks, name="pending")
        self.pending_row = Signal(self.row_bits, name="pending_row")
        self.countdown_now = Signal(range(slack + 1), name="countdown_now")

    def elaborate(self, platform):
        m = Module()
        self._sweep(m)
        pend, countdown = self.pend, self.countdown
        # The view answers with the previous cycle's state: the slot cycle's a cycle after the
        # slot, the next cycle's two cycles after; live in both = live before and after the slot.
        after1, after2 = Signal(), Signal()
        live_then = Signal(self.banks)
        m.d.sync += [after1.eq(self.slot), after2.eq(after1), live_then.eq(self.slot_live)]
        both = live_then & self.slot_live
        m.d.comb += [
            self.early.eq(Mux(after1, self.slot_live, 0)),
            self.load.eq(after2 & both.any()),
            self.pending.eq(Mux(self.load, both, pend)),
            self.pending_row.eq(Mux(self.load, self.ptr, self.pend_row)),
            self.row.eq(self.pending_row),
            self.countdown_now.eq(Mux(self.load, self.slack - 1, countdown)),
            self.issue.eq(self.pending & ~self.access),
        ]
        m.d.sync += [pend.eq(self.pending & ~self.issue), self.pend_row.eq(self.pending_row),
                     countdown.eq(Mux(self.countdown_now != 0, self.countdown_now - 1, 0))]

        # Still pending when the request admitted next cycle would commit: every bank busy
        # until then. The countdown is ``lead + 1`` exactly ``lead + 1`` cycles before it is 0.
        busy = self.access
        for k in range(self.lead):
            busy = busy & self.planned[k]
        hold = (self.countdown_now == self.lead + 1) & (self.pending & busy).any()
        if self.slack == self.lead + 1:
            # The decision for a slot's refreshes falls in the cycle after it (see above).
            later = self.planned[0]
            for k in range(1, self.lead):
                later = later & self.planned[k]
            hold = hold | (self.early & later).any()
        m.d.sync += self.hold.eq(hold)
        return m

    def _sweep(self, m: Module):
        """The timer: ``tick`` counts the step, ``ptr`` the row; a slot at tick 0."""
        tick, ptr = self.tick, self.ptr
        enabled = Signal()
        step_last = Signal.like(tick)
        with m.Switch(self.policy):
            for policy, sweep in self.plan.items():
                with m.Case(policy.value):
                    m.d.comb += [enabled.eq(sweep is not None),
                                 step_last.eq(sweep.step - 1 if sweep else 0)]
        m.d.comb += self.slot.eq(enabled & (tick == 0))
        with m.If(self.restart | ~enabled):
            m.d.sync += [tick.eq(0), ptr.eq(0)]
        with m.Elif(tick == step_last):
            m.d.sync += [tick.eq(0), ptr.eq(ptr + 1)]
        with m.Else():
            m.d.sync += tick.eq(tick + 1)
