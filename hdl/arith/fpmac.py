"""Pipelined floating-point multiply-add ``a * b + c`` built from the multiplier and the adder."""

from __future__ import annotations

from collections.abc import Sequence

from amaranth import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .format import BF16, FP32, FloatFormat, float_format
from .fpadd import FloatAdder
from .fpmul import FloatMultiplier
from ..pipeline import delay

__all__ = ["FloatMAC"]


class FloatMAC(wiring.Component):
    """Compute ``a * b + c`` with two roundings (not fused).

    Parameters
    ----------
    in_fmt : FloatFormat or str
        Format of ``a`` and ``b`` (default bf16).
    acc_fmt : FloatFormat or str
        Format of ``c``, of the product and of the result (default fp32).
    mul_stages, add_stages : int
        Register stages of the :class:`FloatMultiplier` (1 to 6, default 5) and the
        :class:`FloatAdder` (1 to 9, default 6).
    add_cuts : sequence of int or None
        The adder's cut points to register (:class:`FloatAdder`'s ``cuts``: ``add_stages - 1``
        indices into ``hdl.arith.fpadd.CUT_POINTS``), default ``None``: the adder's own choice.
    block_registers : bool
        The multiplier's (:class:`FloatMultiplier`'s ``block_registers``): for the ECP5, its
        pieces between their ``MULT18X18D`` blocks' own registers. Default ``False``.
    land_pieces : bool
        The multiplier's (:class:`FloatMultiplier`'s ``land_pieces``): its pieces registered
        again before their sum, one cycle more. Default ``False``.
    late_c : bool
        ``True``: ``c`` is taken when the product reaches the adder, :attr:`mul_latency` cycles
        after its ``a`` and ``b``, and the caller delays it. Units that share ``c`` then
        register their own copies over those cycles (:func:`~hdl.pipeline.distinct_copies`)
        instead of one delay line that synthesis merges and fans out to all. Default
        ``False``: ``c`` is taken with ``a`` and ``b`` and delayed here. No result bit changes.

    Members
    -------
    i : In(stream.Signature(StructLayout({"a": in_fmt.width, "b": in_fmt.width,
                                          "c": acc_fmt.width}), always_ready=True))
    o : Out(stream.Signature(StructLayout({"y": acc_fmt.width}), always_ready=True))
        ``y = round(round(a * b) + c)``.

    Latency ``mul_stages + add_stages`` cycles (one more with ``land_pieces``) from ``i.valid``
    to ``o.valid``; one result per
    cycle. The product is rounded to ``acc_fmt`` first (exact for bf16 or fp16 inputs into fp32
    whenever it is a normal fp32), then the sum is rounded; both follow the numerics of the two
    units. A running accumulator feeds ``y`` back as ``c`` (a loop of that latency) outside this
    unit.
    """

    def __init__(self, in_fmt: FloatFormat | str = BF16, acc_fmt: FloatFormat | str = FP32, *,
                 mul_stages: int = 5, add_stages: int = 6, add_cuts: Sequence[int] | None = None,
                 block_registers: bool = False, land_pieces: bool = False,
                 late_c: bool = False):
        self._in_fmt = float_format(in_fmt)
        self._acc_fmt = float_format(acc_fmt)
        self.latency_of(self._in_fmt, self._acc_fmt, mul_stages=mul_stages,
                        add_stages=add_stages, add_cuts=add_cuts,
                        block_registers=block_registers,
                        land_pieces=land_pieces)  # the units' checks, at configuration
        self._mul_stages, self._add_stages, self._add_cuts = mul_stages, add_stages, add_cuts
        self._blocks, self._land, self._late_c = block_registers, land_pieces, bool(late_c)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"a": self._in_fmt.width,
                                                        "b": self._in_fmt.width,
                                                        "c": self._acc_fmt.width}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": self._acc_fmt.width}),
                                      always_ready=True)),
        })

    @staticmethod
    def latency_of(in_fmt: FloatFormat | str = BF16, acc_fmt: FloatFormat | str = FP32, *,
                   mul_stages: int = 5, add_stages: int = 6,
                   add_cuts: Sequence[int] | None = None, block_registers: bool = False,
                   land_pieces: bool = False) -> int:
        """Return the latency of a multiply-add with these arguments, without building it.

        The arguments are the constructor's, checked as it and its two units check them (the
        same exceptions): :meth:`FloatMultiplier.latency_of` plus :meth:`FloatAdder.latency_of`.
        """
        in_fmt, acc_fmt = float_format(in_fmt), float_format(acc_fmt)
        return (FloatMultiplier.latency_of(in_fmt, in_fmt, acc_fmt, stages=mul_stages,
                                           block_registers=block_registers,
                                           land_pieces=land_pieces)
                + FloatAdder.latency_of(acc_fmt, stages=add_stages, cuts=add_cuts))

    in_fmt = property(lambda self: self._in_fmt)
    acc_fmt = property(lambda self: self._acc_fmt)

    @property
    def mul_latency(self) -> int:
        """Cycles from ``a`` and ``b`` to their product at the adder (``c``'s cycle with
        ``late_c``)."""
        return FloatMultiplier.latency_of(self._in_fmt, self._in_fmt, self._acc_fmt,
                                          stages=self._mul_stages,
                                          block_registers=self._blocks, land_pieces=self._land)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: ``mul_stages + add_stages`` (+1 with
        ``land_pieces``)."""
        return self.latency_of(self._in_fmt, self._acc_fmt, mul_stages=self._mul_stages,
                               add_stages=self._add_stages, land_pieces=self._land)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = mul = FloatMultiplier(self._in_fmt, self._in_fmt, self._acc_fmt,
                                                 stages=self._mul_stages,
                                                 block_registers=self._blocks,
                                                 land_pieces=self._land)
        m.submodules.add = add = FloatAdder(self._acc_fmt, stages=self._add_stages,
                                            cuts=self._add_cuts)
        c = self.i.payload.c if self._late_c else delay(m, self.i.payload.c, mul.latency,
                                                        name="c")
        m.d.comb += [
            mul.i.valid.eq(self.i.valid),
            mul.i.payload.a.eq(self.i.payload.a),
            mul.i.payload.b.eq(self.i.payload.b),
            add.i.valid.eq(mul.o.valid),
            add.i.payload.a.eq(mul.o.payload.y),
            add.i.payload.b.eq(c),
            self.o.valid.eq(add.o.valid),
            self.o.payload.y.eq(add.o.payload.y),
        ]
        return m
