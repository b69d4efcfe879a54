"""The in-flash PE's result path: the arithmetic's results, in command order, onto ``y``."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import ResultQueue
from ..validate import integer
from .lanes import result_layout
from .spec import PEConfig, pe_config, y_layout

__all__ = ["ResultPath"]


def _in() -> In:
    return In(stream.Signature(result_layout(final=1), always_ready=True))


class ResultPath(wiring.Component):
    """Queue the arithmetic's results and send them on ``y``, with credits for what is in flight.

    The arithmetic cannot stall, so an item that will give a result (a row's last beat, a
    score, an Attend sum, an error word) enters only with a credit of the output queue
    (``can_issue``), taken by ``issue``; the result is written when it comes out. At most one
    result arrives per cycle: the paths that produce them are never busy at once (a command on
    another path starts when ``drained``). ``drained`` says no result is in the arithmetic.

    Parameters
    ----------
    cfg : PEConfig
    depth : int
        Places of the output queue, at least the longest path's latency plus 2 for one result
        per cycle (3 to 4096).

    Members
    -------
    floats, groups, ints, drains : In(stream.Signature(result_layout(final=1), always_ready=True))
        Results of the float rows, the w4a16 rows, the integer rows and Attend's drain; ``final``
        on the command's last.
    refuse : In(1)
        A refused command's error word (``error``, ``last``, ``value`` 0): written and issued
        in this cycle.
    row_issue, drain_issue : In(1)
        An item that will give a result enters the arithmetic (takes a credit).
    y : Out(stream.Signature(y_layout(cfg)))
        The PE's results.
    can_issue : Out(1)
        A credit is available (a register).
    drained : Out(1)
        No result is in the arithmetic (a register).

    Latency: a result written is on ``y`` 2 cycles later (:attr:`latency`).
    """

    #: Cycles from a result written into the queue to ``y.valid``.
    latency = ResultQueue.LATENCY

    def __init__(self, cfg: PEConfig, *, depth: int):
        self.cfg = pe_config(cfg, "Result path")
        self.depth = integer(depth, "Result queue depth", 3, 4096)
        super().__init__({
            "floats": _in(), "groups": _in(), "ints": _in(), "drains": _in(),
            "refuse": In(1), "row_issue": In(1), "drain_issue": In(1),
            "y": Out(stream.Signature(y_layout(self.cfg))),
            "can_issue": Out(1), "drained": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.y_queue = queue = ResultQueue(y_layout(self.cfg), self.depth)
        wiring.connect(m, queue.o, wiring.flipped(self.y))
        inflight = Signal(range(self.depth + 1))    # results in the arithmetic
        out = Signal(y_layout(self.cfg))
        sources = (self.floats, self.groups, self.ints, self.drains)
        with m.If(self.floats.valid):
            m.d.comb += [out.value.eq(self.floats.payload.value),
                         out.last.eq(self.floats.payload.final)]
        for source in sources[1:]:
            with m.Elif(source.valid):
                m.d.comb += [out.value.eq(source.payload.value),
                             out.last.eq(source.payload.final)]
        with m.Elif(self.refuse):
            m.d.comb += [out.error.eq(1), out.last.eq(1)]
        done = self.floats.valid | self.groups.valid | self.ints.valid | self.drains.valid
        issue = self.row_issue | self.drain_issue
        m.d.comb += [queue.issue.eq(issue | self.refuse), queue.w.valid.eq(done | self.refuse),
                     queue.w.payload.eq(out), self.can_issue.eq(queue.can_issue)]
        # Both outcomes of the late ``issue`` from registers, selected last.
        left = Signal.like(inflight)
        m.d.comb += left.eq(inflight - done)
        m.d.sync += [inflight.eq(Mux(issue, inflight + 1 - done, left)),
                     self.drained.eq(~issue & Mux(done, inflight == 1, inflight == 0))]
        return m
