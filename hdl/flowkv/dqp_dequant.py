"""FusedDQP's dequantizer: ``w = bf16(d q + m)`` for ``lanes`` codes of one Q4NX row record."""

from __future__ import annotations

import struct

from amaranth import Array, Cat, Const, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.convert import FloatConvert
from ..arith.format import BF16, FP32
from ..arith.fpmac import FloatMAC
from ..pipeline import distinct_copies
from .dqp_spec import CODE_BITS, DQPConfig, check_lanes

__all__ = ["Dequantizer", "INT4_BF16"]

#: bf16 codes of the 4-bit codes 0 .. 15 (the top half of their fp32 codes; exact).
INT4_BF16 = [struct.unpack("<I", struct.pack("<f", q))[0] >> 16 for q in range(16)]


class Dequantizer(wiring.Component):
    """Dequantize ``lanes`` 4-bit codes of one group: ``w = bf16(fp32(fp32(d q) + m))``.

    Per lane a :class:`~hdl.arith.fpmac.FloatMAC` (bf16 ``d`` times the code as bf16, exact
    into fp32, then ``+ m`` rounded once in fp32) and a :class:`~hdl.arith.convert.FloatConvert`
    to bf16 (round to nearest even): the order of :func:`golden.flowkv_dqp.dequantize`. The
    units flush subnormal inputs and results and give the canonical NaN.

    Parameters
    ----------
    lanes : int
        Codes per cycle (:attr:`DQPConfig.lanes`).

    Members
    -------
    i : In(stream.Signature(StructLayout({"codes": 4 * lanes, "scale": 16, "minimum": 16}),
                            always_ready=True))
        Code ``k`` in bits ``4 k .. 4 k + 3``; the record's bf16 ``d`` and ``m``.
    o : Out(stream.Signature(StructLayout({"data": ArrayLayout(16, lanes)}), always_ready=True))
        The bf16 weights.

    Latency :meth:`DQPConfig.dequant_latency_of` cycles; one group of codes per cycle.
    """

    def __init__(self, lanes: int):
        self.lanes = check_lanes(lanes)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "codes": CODE_BITS * lanes, "scale": BF16.width, "minimum": BF16.width}),
                always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({
                "data": data.ArrayLayout(BF16.width, lanes)}), always_ready=True)),
        })

    @property
    def latency(self) -> int:
        return DQPConfig.dequant_latency_of()

    def elaborate(self, platform):
        m = Module()
        i = self.i
        table = Array(Const(code, BF16.width) for code in INT4_BF16)
        macs = [FloatMAC(BF16, FP32, block_registers=True, late_c=True)   # the blocks' registers
                for _ in range(self.lanes)]
        # Every lane adds the same minimum: over the products' cycles it doubles into a copy a
        # lane that synthesis keeps apart, so no register drives all the lanes' adders.
        minimums = [i.payload.minimum]
        for level in range(macs[0].mul_latency):
            minimums = distinct_copies(m, minimums, min(2 * len(minimums), self.lanes),
                                       name=f"minimum{level}")
        for lane, mac in enumerate(macs):
            convert = FloatConvert(FP32, BF16)
            m.submodules[f"mac{lane}"], m.submodules[f"convert{lane}"] = mac, convert
            # bf16 is the upper half of fp32: the minimum widens exactly (a subnormal one is
            # read as zero by the adder, as the golden model's conversion flushes it).
            minimum = Cat(Const(0, FP32.width - BF16.width), minimums[lane % len(minimums)])
            m.d.comb += [mac.i.valid.eq(i.valid), mac.i.payload.a.eq(i.payload.scale),
                         mac.i.payload.b.eq(table[i.payload.codes.word_select(lane, CODE_BITS)]),
                         mac.i.payload.c.eq(minimum),
                         convert.i.valid.eq(mac.o.valid), convert.i.payload.x.eq(mac.o.payload.y),
                         self.o.payload.data[lane].eq(convert.o.payload.y)]
        m.d.comb += self.o.valid.eq(convert.o.valid)
        return m
