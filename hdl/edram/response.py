"""The SHIELD controller's response path: merge what the macros read, queue it for ``resp``."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import ResultQueue
from ..validate import integer, power_of_two
from .ports import response_layout
from .spec import SEGMENT_BITS, SEGMENTS

__all__ = ["answer_layout", "ResponsePath"]


def answer_layout(bank_bits: int) -> data.StructLayout:
    """A committing request that answers: a READ (``bank`` and its mantissa segment) or a
    refusal."""
    return data.StructLayout({"valid": 1, "error": 1, "live": 1, "qo": 1,
                              "bank": max(bank_bits, 1)})


class ResponsePath(wiring.Component):
    """Wait for the macros' read data, merge the BF16 word, and queue the responses.

    The queue gives a credit per place (:class:`hdl.pipeline.ResultQueue`): the controller admits
    a request only with a credit in hand (``can_issue``), takes it on admission (``issue``) and
    gives it back when the request commits without an answer (``cancel``).

    Parameters
    ----------
    banks : int
        Banks per segment.
    depth : int
        Responses that may wait (the queue's places).

    Members
    -------
    answer : In(answer_layout(bank_bits))
        The committing request's answer, if it has one.
    std_rdata, kv_mant_rdata, qo_mant_rdata : In(data.ArrayLayout(width, banks))
        The segments' ``rdata`` (not plain ``std``: SystemVerilog's built-in package): a read the bank port shows in cycle ``c + 1`` returns in
        ``c + 2``. It is registered before anything else (a block RAM's output comes late in its
        cycle).
    resp : Out(stream.Signature(response_layout()))
        Responses, in commit order; valid from ``c + latency`` (5) for an answer given in ``c``
        (empty queue).
    can_issue : Out(1)
        A register: a place is free for one more request.
    issue, cancel : In(1)
        A request was admitted (it takes a place); a request committed without an answer (its
        place comes back, through a register: ``can_issue`` shows it two cycles later).
    """

    #: Cycles from an answer at commit to its response's ``valid`` (queue empty).
    latency = 5

    def __init__(self, *, banks: int, depth: int):
        self.bank_bits = power_of_two(banks, "Bank count (banks)", 1, 256)
        integer(depth, "Response queue depth (depth)", 4, 64)
        self.depth = depth
        super().__init__({
            "answer": In(answer_layout(self.bank_bits)),
            **{f"{segment}_rdata": In(data.ArrayLayout(SEGMENT_BITS[segment], banks))
               for segment in SEGMENTS},
            "resp": Out(stream.Signature(response_layout())),
            "can_issue": Out(1),
            "issue": In(1),
            "cancel": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = ResultQueue(response_layout(), self.depth)
        wiring.connect(m, queue.o, wiring.flipped(self.resp))
        # A refusal (and so whether a request answers) is decided late in the commit cycle.
        cancel = Signal()
        m.d.sync += cancel.eq(self.cancel)
        m.d.comb += [self.can_issue.eq(queue.can_issue), queue.issue.eq(self.issue),
                     queue.cancel.eq(cancel)]
        # Three stages: the port register (the macro acts), the macro's read, the data register.
        stages = [Signal.like(self.answer, name=f"{name}_stage")
                  for name in ("port", "read", "data")]
        m.d.sync += [stages[0].eq(self.answer), stages[1].eq(stages[0]), stages[2].eq(stages[1])]
        rdata = {segment: Signal.like(getattr(self, f"{segment}_rdata"), name=f"{segment}_data")
                 for segment in SEGMENTS}
        m.d.sync += [rdata[segment].eq(getattr(self, f"{segment}_rdata")) for segment in SEGMENTS]
        last = stages[-1]
        sel = last.bank if self.bank_bits else 0
        mant = Mux(last.qo, rdata["qo_mant"][sel], rdata["kv_mant"][sel])
        merged = Signal(response_layout())
        m.d.comb += [
            merged.data.eq(Mux(last.error, 0, Cat(mant, rdata["std"][sel]))),
            merged.live.eq(last.live),
            merged.error.eq(last.error),
            queue.w.valid.eq(last.valid),
            queue.w.payload.eq(merged),
        ]
        return m
