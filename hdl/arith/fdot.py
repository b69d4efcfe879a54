"""Lane-parallel floating-point dot product: exact products summed by a pipelined adder tree."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import power_of_two
from .format import BF16, FP32, FloatFormat, float_format
from .fpadd import FloatAdder
from .fpmul import FloatMultiplier
from .tree import reduce_tree, tree_latency, unit_combine

__all__ = ["FloatDot"]


class FloatDot(wiring.Component):
    """Compute the dot product of two vectors of ``lanes`` floats each, every cycle.

    Parameters
    ----------
    in_fmt : FloatFormat or str
        Format of the vector elements (default bf16).
    lanes : int
        Vector length, a power of two from 1 to 64 (default 8).
    acc_fmt : FloatFormat or str
        Format of the products, of every partial sum and of the result (default fp32).
    mul_stages, add_stages : int
        Register stages of each :class:`FloatMultiplier` (1 to 6, default 5) and each
        :class:`FloatAdder` (1 to 9, default 6).
    balanced : bool
        The adders' ``balanced`` option (shallower alignment and normalization logic; default
        ``False``). No result bit nor the latency changes.
    block_registers : bool
        The multipliers' ``block_registers`` option (the ECP5 multiplier blocks' own registers,
        :mod:`hdl.arith.dsp`; default ``False``). No result bit nor the latency changes.

    Members
    -------
    i : In(stream.Signature(StructLayout({"a": ArrayLayout(in_fmt.width, lanes),
                                          "b": ArrayLayout(in_fmt.width, lanes)}),
                            always_ready=True))
    o : Out(stream.Signature(StructLayout({"y": acc_fmt.width}), always_ready=True))
        ``y = sum(a[k] * b[k])`` in the order below.

    Latency ``mul_stages + log2(lanes) * add_stages`` cycles from ``i.valid`` to ``o.valid``; one
    dot product per cycle.

    Summation order and numerics: each product ``a[k] * b[k]`` is rounded to ``acc_fmt`` (exact for
    bf16 or fp16 into fp32, apart from bf16 products beyond the fp32 range); the products are then
    added pairwise, each sum rounded to ``acc_fmt``: ``(p0 + p1), (p2 + p3), ...``, then
    neighbouring pairs of those, down to one value (:mod:`hdl.arith.tree`). Each addition follows
    :class:`FloatAdder` (round to nearest even, flush-to-zero, IEEE specials: a NaN or
    ``inf - inf`` anywhere gives the canonical NaN).
    """

    def __init__(self, in_fmt: FloatFormat | str = BF16, lanes: int = 8,
                 acc_fmt: FloatFormat | str = FP32, *, mul_stages: int = 5,
                 add_stages: int = 6, balanced: bool = False, block_registers: bool = False):
        self._in_fmt = float_format(in_fmt)
        self._acc_fmt = float_format(acc_fmt)
        self._lanes = lanes
        # The lane count's and the units' checks, at configuration.
        self.latency_of(self._in_fmt, lanes, self._acc_fmt, mul_stages=mul_stages,
                        add_stages=add_stages, balanced=balanced, block_registers=block_registers)
        self._mul_stages, self._add_stages = mul_stages, add_stages
        self._balanced = balanced
        self._blocks = block_registers
        element = self._in_fmt.width
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "a": data.ArrayLayout(element, lanes), "b": data.ArrayLayout(element, lanes)}),
                always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": self._acc_fmt.width}),
                                      always_ready=True)),
        })

    @staticmethod
    def latency_of(in_fmt: FloatFormat | str = BF16, lanes: int = 8,
                   acc_fmt: FloatFormat | str = FP32, *, mul_stages: int = 5,
                   add_stages: int = 6, balanced: bool = False,
                   block_registers: bool = False) -> int:
        """Return the latency of a dot product with these arguments, without building it.

        The arguments are the constructor's, checked as it and its units check them (the same
        exceptions): :meth:`FloatMultiplier.latency_of` plus ``log2(lanes)`` times
        :meth:`FloatAdder.latency_of`.
        """
        in_fmt, acc_fmt = float_format(in_fmt), float_format(acc_fmt)
        power_of_two(lanes, "Lane count", 1, 64)
        mul = FloatMultiplier.latency_of(in_fmt, in_fmt, acc_fmt, stages=mul_stages,
                                         block_registers=block_registers)
        add = FloatAdder.latency_of(acc_fmt, stages=add_stages, balanced=balanced)
        return mul + tree_latency(lanes, combine_latency=add)

    in_fmt = property(lambda self: self._in_fmt)
    acc_fmt = property(lambda self: self._acc_fmt)
    lanes = property(lambda self: self._lanes)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: ``mul_stages + log2(lanes) * add_stages``."""
        return self.latency_of(self._in_fmt, self._lanes, self._acc_fmt,
                               mul_stages=self._mul_stages, add_stages=self._add_stages)

    def elaborate(self, platform):
        m = Module()
        products = []
        for k in range(self._lanes):
            mul = FloatMultiplier(self._in_fmt, self._in_fmt, self._acc_fmt,
                                  stages=self._mul_stages, block_registers=self._blocks)
            m.submodules[f"mul{k}"] = mul
            m.d.comb += [mul.i.valid.eq(self.i.valid),
                         mul.i.payload.a.eq(self.i.payload.a[k]),
                         mul.i.payload.b.eq(self.i.payload.b[k])]
            products.append(mul.o.payload.y)
        valid = mul.o.valid
        combine = unit_combine(FloatAdder, self._acc_fmt, stages=self._add_stages,
                               balanced=self._balanced)
        value, valid, _ = reduce_tree(m, products, combine, valid=valid, name="sum")
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.y.eq(value)]
        return m
