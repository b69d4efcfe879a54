"""The in-flash PE's dot-product lanes: a beat's ``F`` products summed, then a row's beats."""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.fdot import FloatDot
from ..arith.format import BF16, FP16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.idot import IntDot
from ..arith.tree import serial_tree, tree_levels, unit_combine
from ..pipeline import delay
from .issuer import issue_layout
from .spec import PEConfig, pe_config

__all__ = ["DotLanes", "NEG_ZERO32", "result_layout"]

#: fp32 ``-0``: the identity of the serial trees (``x + -0 = x`` for every ``x``) and the seed of
#: every Attend accumulator.
NEG_ZERO32 = 0x80000000
#: fp16 1.0: the weight of the lanes that sum ``x`` into the w4a16 group sums ``X``.
_ONE16 = 0x3C00


def result_layout(**flags: int) -> data.StructLayout:
    """A 32-bit ``value`` with one-bit ``flags`` (``final``: the command's last result)."""
    return data.StructLayout({"value": 32, **flags})


def _out(layout) -> Out:
    return Out(stream.Signature(layout, always_ready=True))


class DotLanes(wiring.Component):
    """Sum a beat's ``F`` products, then a row's beat sums, in the order of the golden model.

    Float beats (fp16, bf16; w4a16 codes as fp16; Logit's query against a K entry) go through
    one ``F``-lane :class:`~hdl.arith.fdot.FloatDot` per format and the shared
    :func:`~hdl.arith.tree.serial_tree` over a row's beat sums (identity ``-0``): one result per
    row on ``floats``. In w4a16 a group is a row of that tree and its sum ``D`` goes to
    ``dsum``; meanwhile the ``x`` beats (``xs``) go through the fp16 lanes with weights 1.0, and
    their sums leave on ``xsum`` for the group sums ``X``. Integer beats (w8a8, int8 Logit)
    go through one :class:`~hdl.arith.idot.IntDot` and an int32 accumulator per row: ``ints``.
    The lanes never stall: a beat enters every cycle its valid is set.

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    i : In(issue_layout(cfg))
        The issue stage's register (:class:`~hdl.inflash.issuer.Issuer`): ``w``, ``x``, the
        ``dot`` valids, ``first``, ``last``, ``final``, ``group_end``, ``w4``.
    xs : In(stream.Signature(StructLayout({"data": 16 * F, "end": 1}), always_ready=True))
        w4a16: an ``x`` beat to sum (never in a cycle with ``i.dot.fp16``: ``x`` of a w4a16
        GEMV is all in before its first beat).
    floats : Out(stream.Signature(result_layout(final=1), always_ready=True))
        A float row's result (not w4a16), :attr:`float_latency` cycles after its last beat.
    dsum : Out(stream.Signature(result_layout(row_end=1, final=1), always_ready=True))
        w4a16: a group's ``D``, at the same latency; ``row_end`` on a row's last group.
    xsum : Out(stream.Signature(result_layout(end=1), always_ready=True))
        w4a16: the sum of an ``x`` beat, :attr:`dot_latency` cycles after it; ``end`` on a
        group's last beat.
    ints : Out(stream.Signature(result_layout(final=1), always_ready=True))
        An integer row's int32 sum, :attr:`int_latency` cycles after its last beat.
    """

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "Dot lanes")
        F = cfg.fmacs
        super().__init__({
            "i": In(issue_layout(cfg)),
            "xs": In(stream.Signature(data.StructLayout({"data": 16 * F, "end": 1}),
                                      always_ready=True)),
            "floats": _out(result_layout(final=1)),
            "dsum": _out(result_layout(row_end=1, final=1)),
            "xsum": _out(result_layout(end=1)),
            "ints": _out(result_layout(final=1)),
        })

    # The latencies are functions of the configuration (``*_of(cfg)``), read without building
    # the lanes; the properties give the same for this instance.

    @staticmethod
    def dot_latency_of(cfg: PEConfig) -> int:
        """Cycles of the float dot product (:class:`~hdl.arith.fdot.FloatDot`)."""
        return FloatDot.latency_of(FP16, pe_config(cfg, "Dot lanes").fmacs, FP32)

    @staticmethod
    def tree_latency_of(cfg: PEConfig) -> int:
        """Cycles of the serial beat tree: ``ceil(log2(max_cols / F))`` adder latencies."""
        return tree_levels(pe_config(cfg, "Dot lanes").max_beats) * FloatAdder.latency_of(FP32)

    @classmethod
    def float_latency_of(cls, cfg: PEConfig) -> int:
        """Cycles from a row's last beat on ``i`` to its result on ``floats`` or ``dsum``."""
        return cls.dot_latency_of(cfg) + cls.tree_latency_of(cfg)

    @staticmethod
    def int_latency_of(cfg: PEConfig) -> int:
        """Cycles from a row's last beat on ``i`` to its sum on ``ints`` (the
        :class:`~hdl.arith.idot.IntDot`; the accumulator's sum is combinational)."""
        return IntDot.latency_of(pe_config(cfg, "Dot lanes").fmacs, acc_bits=32)

    dot_latency = property(lambda self: self.dot_latency_of(self.cfg))
    tree_latency = property(lambda self: self.tree_latency_of(self.cfg))
    float_latency = property(lambda self: self.float_latency_of(self.cfg))
    int_latency = property(lambda self: self.int_latency_of(self.cfg))

    def elaborate(self, platform):
        m = Module()
        cfg, i = self.cfg, self.i
        F = cfg.fmacs
        xs_valid = self.xs.valid
        # ---- float: F-lane dot per beat, serial pairwise tree per row ----------------------
        # (w4a16: a group is a "row" of this tree; x beats go to their own group tree. Logit:
        # a (token, head) is a row.)
        sums = []
        for name, fmt in (("fp16", FP16), ("bf16", BF16)):
            dot = FloatDot(fmt, F, FP32)
            m.submodules[f"dot_{name}"] = dot
            m.d.comb += [dot.i.valid.eq(i.dot[name]), dot.i.payload.a.eq(i.w),
                         dot.i.payload.b.eq(i.x)]
            sums.append(dot)
        m.d.comb += sums[0].i.valid.eq(i.dot.fp16 | xs_valid)
        with m.If(xs_valid):
            m.d.comb += [sums[0].i.payload.a.eq(Const(_ONE16, 16).replicate(F)),
                         sums[0].i.payload.b.eq(self.xs.payload.data)]
        lat = sums[0].latency
        dot_x = delay(m, xs_valid, lat, name="dot_x", reset=True)
        dot_valid = (sums[0].o.valid & ~dot_x) | sums[1].o.valid
        dot_value = Mux(sums[0].o.valid, sums[0].o.payload.y, sums[1].o.payload.y)
        dot_last = delay(m, Mux(i.w4, i.group_end, i.last), lat, name="dot_last")
        dot_row_end = delay(m, i.last, lat, name="dot_row_end")
        dot_final = delay(m, i.final, lat, name="dot_final")
        dot_w4 = delay(m, i.w4, lat, name="dot_w4")
        adder = unit_combine(FloatAdder, FP32)
        row = serial_tree(m, dot_value, dot_valid, dot_last, max_count=cfg.max_beats,
                          combine=adder, identity=NEG_ZERO32, name="row")
        row_final = delay(m, dot_final, row.latency, name="row_final")
        row_end = delay(m, dot_row_end, row.latency, name="row_end")
        row_w4 = delay(m, dot_w4, row.latency, name="row_w4")
        m.d.comb += [self.floats.valid.eq(row.valid & ~row_w4),
                     self.floats.payload.value.eq(row.value),
                     self.floats.payload.final.eq(row_final),
                     self.dsum.valid.eq(row.valid & row_w4), self.dsum.payload.value.eq(row.value),
                     self.dsum.payload.row_end.eq(row_end), self.dsum.payload.final.eq(row_final),
                     self.xsum.valid.eq(sums[0].o.valid & dot_x),
                     self.xsum.payload.value.eq(sums[0].o.payload.y),
                     self.xsum.payload.end.eq(delay(m, self.xs.payload.end, lat,
                                                    name="dot_x_end"))]

        # ---- integer: F-lane dot per beat, int32 accumulator per row ------------------------
        m.submodules.idot = idot = IntDot(F, a_bits=8, b_bits=8, acc_bits=32)
        m.d.comb += idot.i.valid.eq(i.dot.int)
        for lane in range(F):
            m.d.comb += [idot.i.payload.a[lane].eq(i.w[16 * lane:16 * lane + 8]),
                         idot.i.payload.b[lane].eq(i.x[16 * lane:16 * lane + 8])]
        i_first = delay(m, i.first, idot.latency, name="idot_first")
        i_last = delay(m, i.last, idot.latency, name="idot_last")
        i_final = delay(m, i.final, idot.latency, name="idot_final")
        acc = Signal(32)
        acc_sum = Signal(32)
        m.d.comb += acc_sum.eq(Mux(i_first, 0, acc) + idot.o.payload.y)
        with m.If(idot.o.valid):
            m.d.sync += acc.eq(acc_sum)
        m.d.comb += [self.ints.valid.eq(idot.o.valid & i_last),
                     self.ints.payload.value.eq(acc_sum), self.ints.payload.final.eq(i_final)]
        return m
