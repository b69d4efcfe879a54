"""Stream plumbing shared by every memwall block."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .arith.tree import delay
from .validate import integer

__all__ = ["stream_stage", "next_values", "ResultQueue", "SkidBuffer", "DelayLine"]


def next_values(m: Module, *registers: Signal) -> list[Signal]:
    """Assign ``registers`` through their next values: one combinational ``<name>_next`` signal
    per register, equal to the register unless the design assigns it (``m.d.comb``), which the
    register takes at the clock edge. Logic that must know next cycle's state now (a ``ready``
    computed a cycle ahead, so that it can come from a register) reads these."""
    nexts = []
    for reg in registers:
        nxt = Signal.like(reg, name=f"{reg.name}_next")
        m.d.comb += nxt.eq(reg)
        m.d.sync += reg.eq(nxt)
        nexts.append(nxt)
    return nexts


def stream_stage(m: Module, source, sink, payload: Value, *, registered: bool = True):
    """Connect ``source`` to ``sink`` through a function of the payload, honouring back-pressure.

    Parameters
    ----------
    m : Module
        Module to add the logic to (``sync`` domain for the register).
    source : stream interface (flipped; ``valid``/``payload`` in, ``ready`` out)
        The stage's input.
    sink : stream interface (``valid``/``payload`` out, ``ready`` in)
        The stage's output.
    payload : Value
        The output payload, computed combinationally from ``source.payload``.
    registered : bool
        ``True``: one register stage (latency 1, one transfer per cycle under any back-pressure:
        the input is ready whenever the output register is empty or being drained).
        ``False``: combinational (latency 0; ``ready`` passes straight through).
    """
    if registered:
        advance = sink.ready | ~sink.valid
        with m.If(advance):
            m.d.sync += [sink.valid.eq(source.valid), sink.payload.eq(payload)]
        m.d.comb += source.ready.eq(advance)
    else:
        m.d.comb += [sink.valid.eq(source.valid), sink.payload.eq(payload),
                     source.ready.eq(sink.ready)]


class ResultQueue:
    """A FIFO that takes the results of always-ready pipelines and drains them into a stream.

    A pipelined unit (:mod:`hdl.arith`) cannot stall, so an item may enter it only if its result
    will have a place to land. The queue keeps a credit count: ``depth`` free places less the
    items already in flight or queued. Drive ``issue`` when an item enters the pipeline (only
    while ``can_issue``), and ``w_en``/``w_data`` when its result comes out. With ``depth`` at
    least the pipeline latency plus 2 the queue never limits a full-rate producer whose consumer
    is always ready.

    Parameters
    ----------
    m : Module
        Module to add the FIFO and the counter to.
    sink : stream interface
        The stream the queue drives (``valid``/``payload`` out, ``ready`` in).
    depth : int
        FIFO places, 3 to 4096. (The FIFO is ``SyncFIFOBuffered``: an output register in front
        of a ``depth - 1`` FIFO. At ``depth = 2`` that inner FIFO has one place, and a result
        written the cycle after another into an empty queue finds it full while its first result
        moves to the output register: it would be lost although a credit allowed it.)
    name : str
        Submodule name of the FIFO.

    Members
    -------
    can_issue : Signal, out
        A credit is available: an item may enter the pipeline this cycle. A register (its
        value every cycle equals ``credits != 0`` as long as ``issue`` is driven only while
        ``can_issue``), so the producer's issue logic starts from a flip-flop.
    issue : Signal, in
        An item enters the pipeline this cycle (takes a credit).
    cancel : Signal, in
        An item that took a credit will write no result after all: its credit comes back. A
        producer that must take the credit before it knows whether the item answers (a
        ``ready`` from registers) gives it back with this once it knows. Never more often than
        credits were taken and not yet returned or written.
    w_en : Signal, in
        A result is written this cycle.
    w_data : Signal, in
        The result, shaped like ``sink.payload``.
    """

    def __init__(self, m: Module, sink, *, depth: int, name: str):
        integer(depth, "Result queue depth", 3, 4096)
        width = len(Value.cast(sink.payload))
        m.submodules[name] = fifo = SyncFIFOBuffered(width=width, depth=depth)
        self.issue = Signal(name=f"{name}_issue")
        self.cancel = Signal(name=f"{name}_cancel")
        # ``credits != 0``, kept in a register of its own (below).
        self.can_issue = Signal(init=1, name=f"{name}_can_issue")
        self.w_en = Signal(name=f"{name}_w_en")
        self.w_data = Signal(width, name=f"{name}_w_data")
        credits = Signal(range(depth + 1), init=depth, name=f"{name}_credits")
        popped = sink.valid & sink.ready
        returned = popped + self.cancel            # credits back this cycle: 0, 1 or 2
        m.d.sync += credits.eq(credits - self.issue + returned)
        # Its next value is chosen by ``issue`` and the returns among tests of the present count:
        # the producer's issue logic then starts from a flip-flop, not from a comparison of the
        # counter.
        m.d.sync += self.can_issue.eq(Mux(self.issue & (returned == 0), credits > 1,
                                          (credits != 0) | (returned > self.issue)))
        m.d.comb += [
            fifo.w_en.eq(self.w_en),
            fifo.w_data.eq(self.w_data),
            sink.valid.eq(fifo.r_rdy),
            sink.payload.eq(fifo.r_data),
            fifo.r_en.eq(sink.ready),
        ]


class SkidBuffer(wiring.Component):
    """Pass a stream through two registers so that no path crosses it, in either direction.

    A register stage (:func:`stream_stage`) still passes ``o.ready`` combinationally to
    ``i.ready``. A skid buffer cuts that path as well: ``i.ready`` is a flip-flop, and so are
    ``o.valid`` and ``o.payload``. When ``o`` stalls, the item accepted in that cycle waits in
    a second register (the skid) and ``i.ready`` drops the cycle after.

    Parameters
    ----------
    shape : shape-castable
        The payload shape.

    Members
    -------
    i : In(stream.Signature(shape))
        Input; ``i.ready`` is a register (high while the skid register is empty).
    o : Out(stream.Signature(shape))
        Output, in order; ``o.valid`` and ``o.payload`` are registers, and ``o.valid`` never
        depends on ``o.ready`` in the same cycle.

    Latency one cycle; one item per cycle under any pattern of ``o.ready`` that is high at
    least as often as items arrive; nothing is dropped or duplicated.
    """

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        skid = Signal.like(i.payload, name="held")
        skid_valid = Signal()
        m.d.comb += i.ready.eq(~skid_valid)
        with m.If(o.ready | ~o.valid):
            # The output register is free: it takes the skid's item first, else the input's.
            with m.If(skid_valid):
                m.d.sync += [o.valid.eq(1), o.payload.eq(skid), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [o.valid.eq(i.valid), o.payload.eq(i.payload)]
        with m.Elif(i.valid & ~skid_valid):
            m.d.sync += [skid.eq(i.payload), skid_valid.eq(1)]
        return m


class DelayLine(wiring.Component):
    """Delay an always-ready stream by a fixed number of register stages.

    Parameters
    ----------
    shape : shape-castable
        The payload shape.
    cycles : int
        Register stages, 1 to 4096: the latency.

    Members
    -------
    i : In(stream.Signature(shape, always_ready=True))
        Input; taken every cycle (no back-pressure).
    o : Out(stream.Signature(shape, always_ready=True))
        ``i`` exactly ``cycles`` cycles later: ``o.valid`` from registers with a reset (no item
        comes out of reset), ``o.payload`` from reset-less registers (qualified by ``valid``).

    One item per cycle, in order; nothing is dropped. Assumes its consumer takes every item
    (``o`` has no ``ready``). A bad ``cycles`` raises ``TypeError``/``ValueError`` naming it.
    """

    def __init__(self, shape, cycles: int):
        self.cycles = integer(cycles, "Delay line length", 1, 4096)
        super().__init__({"i": In(stream.Signature(shape, always_ready=True)),
                          "o": Out(stream.Signature(shape, always_ready=True))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.valid.eq(delay(m, self.i.valid, self.cycles, name="valid",
                                           reset=True)),
                     self.o.payload.eq(delay(m, Value.cast(self.i.payload), self.cycles,
                                             name="payload"))]
        return m
