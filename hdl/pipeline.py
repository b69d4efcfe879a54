"""Stream plumbing shared by every memwall block."""

from __future__ import annotations

from amaranth import Module, Value

__all__ = ["stream_stage"]


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
