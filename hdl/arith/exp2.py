"""Pipelined fp32 base-2 exponential: table of chords, one multiply, one rounding."""

from __future__ import annotations

import math

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import Pipeline
from ..validate import integer
from .dsp import ECP5_MULT_WIDTH, ecp5_product, family
from .float import round_pack, unpack
from .format import FP32

__all__ = ["Exp2", "exp2_tables", "EXP2_FRAC", "EXP2_C0_FRAC", "EXP2_C1_FRAC"]

#: Fraction bits of the fixed-point argument ``x * 2**24``.
EXP2_FRAC = 24
#: Fraction bits of the chord table values C0 and of the significand ``y`` of ``2**f``.
EXP2_C0_FRAC = 30
#: Fraction bits of the chord slopes C1.
EXP2_C1_FRAC = 17
#: Integer bits of ``|x|`` handled by the datapath (``|x| < 2**7``; larger overflow/underflow).
_INT_BITS = 7
#: Register cut points of the datapath (see :class:`Exp2`): 0 after unpacking, 1 after the
#: fixed-point shift, 2 after its negation, 3 after the table read, 4 a second table register, 5
#: after the multiply, 6 after the add, 7 inside the rounding.
_CUTS = 8
#: Order in which the cut points become registers as ``stages`` grows: the first six spread
#: over the datapath without cuts 2 and 7, then the negation and the rounding. Cut 1 comes before
#: cut 2 so that the negation (a carry chain) shares a stage with the table index (a block RAM's
#: address when the tables map to one) rather than with the barrel shift (docs/arith_func.md).
_CUT_ORDER = (3, 1, 4, 0, 5, 6, 2, 7)
#: The cut point after the multiply.
_MULTIPLY_CUT = 5


def exp2_tables(table_bits: int) -> tuple[list[int], list[int]]:
    """Return the chord tables ``C0, C1`` (Python integers) for ``2**table_bits`` segments.

    ``C0[k] = round(2**(k / 2**T) * 2**30)``: the value at the segment's start (``C0[0] = 2**30``
    exactly). ``C1[k] = floor((2**((k+1)/2**T) - 2**(k/2**T)) * 2**T * 2**17)``: the chord's slope,
    rounded down so that ``y`` stays below 2 at the end of the last segment.
    """
    segments = 1 << table_bits
    c0, c1 = [], []
    for k in range(segments):
        lo, hi = 2.0 ** (k / segments), 2.0 ** ((k + 1) / segments)
        c0.append(round(lo * 2 ** EXP2_C0_FRAC))
        c1.append(math.floor((hi - lo) * 2 ** (table_bits + EXP2_C1_FRAC)))
    return c0, c1


class Exp2(wiring.Component):
    """Compute ``2**x`` of fp32 values, one per cycle.

    ``x`` becomes a fixed-point number with 24 fraction bits (magnitude truncated), split into its
    floor ``n`` and fraction ``f``; ``2**f`` is read off the chord of ``2**t`` over the
    ``2**table_bits`` segment holding ``f`` (``y = C0[k] + (C1[k] * r >> 11)``, 30 fraction bits),
    and the result ``y * 2**n`` is rounded to fp32 (nearest even). See
    :mod:`golden.arith.func` for the bit-exact specification.

    Parameters
    ----------
    table_bits : int
        Segments of the chord table, ``2**table_bits``; 4 to 10 (default 7: 128 segments,
        worst relative error below ``2**-17.9`` over all inputs with a normal result).
    stages : int
        Register stages, 1 to 9 (default 7). Up to 7, ``stages - 1`` of six cut points (after
        unpacking, after the fixed-point conversion, two after the table read, after the
        multiply, after the add), spread evenly, get registers, and the output is registered;
        the eighth stage splits the fixed-point conversion (shift, then negation), the ninth the
        rounding (increment, then the choice among the special results).
    block_registers : bool
        ``True``: elaborated for the ECP5 (``platform=hdl.arith.dsp.Target("ecp5")``) with the
        product registered (``stages`` 6 or more) and its operands 18 bits or less
        (``table_bits`` 6 or more), the multiply is one ``MULT18X18D`` whose output register is
        the product register (:func:`hdl.arith.dsp.ecp5_product` without input registers). The
        same latency and bits. Default ``False``: generic registers for every target.

    Members
    -------
    i : In(stream.Signature(StructLayout({"x": 32}), always_ready=True))
        Arguments (fp32 bit patterns); a new one may come every cycle.
    o : Out(stream.Signature(StructLayout({"y": 32}), always_ready=True))
        Results (fp32), ``latency`` cycles after their arguments.

    Latency is ``stages`` cycles; throughput one result per cycle.

    Special values: NaN gives the canonical NaN; +inf and ``x >= 128`` give +inf; -inf and
    ``x < -126`` give +0 (2**x below the smallest normal is flushed to zero); a zero or subnormal
    ``x`` gives 1; an integer ``x`` in [-126, 127] gives ``2**x`` exactly.
    """

    def __init__(self, *, table_bits: int = 7, stages: int = 7, block_registers: bool = False):
        self.latency_of(table_bits=table_bits, stages=stages,
                        block_registers=block_registers)          # one copy of the checks
        self._table_bits, self._stages, self._blocks = table_bits, stages, block_registers
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"x": 32}), always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": 32}), always_ready=True)),
        })

    @staticmethod
    def latency_of(*, table_bits: int = 7, stages: int = 7, block_registers: bool = False) -> int:
        """Return the latency of an exp2 unit with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``stages`` cycles.
        """
        integer(table_bits, "Exp2 table index bits", 4, 10)
        integer(stages, "Exp2 pipeline stages", 1, _CUTS + 1)
        if not isinstance(block_registers, bool):
            raise TypeError(f"Exp2 block_registers must be True or False, not "
                            f"{block_registers!r}")
        return stages

    @property
    def table_bits(self) -> int:
        return self._table_bits

    @property
    def stages(self) -> int:
        return self._stages

    @property
    def block_registers(self) -> bool:
        return self._blocks

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: :meth:`latency_of` its arguments."""
        return self.latency_of(table_bits=self._table_bits, stages=self._stages)

    def elaborate(self, platform):
        m = Module()
        T = self._table_bits
        rem_bits = EXP2_FRAC - T
        pipe = Pipeline(m, self.i.valid, cuts=_CUTS, stages=self._stages, order=_CUT_ORDER)
        fixed_bits = _INT_BITS + EXP2_FRAC                       # |x| * 2**24 < 2**31

        # Unpack; |x| >= 128 (exp >= 7) overflows to +inf or underflows to +0.
        x = unpack(FP32, self.i.payload.x)
        big = ~x.is_inf & ~x.is_nan & (x.exp >= _INT_BITS)
        inf = (big | x.is_inf) & ~x.sign
        zero = (big | x.is_inf) & x.sign
        # |x| * 2**24 = sig * 2**(exp + 1) = (sig << 7) >> (6 - exp), for exp <= 6.
        shift = Signal(range(fixed_bits + 1))
        m.d.comb += shift.eq(Mux(x.exp > _INT_BITS - 1 - fixed_bits,
                                 (_INT_BITS - 1 - x.exp)[:shift.shape().width], fixed_bits))
        sign, sig, shift, inf, zero, nan = pipe.cut(x.sign, x.sig, shift, inf, zero, x.is_nan)

        # Two's-complement fixed point X; n = floor(x), f = x - n.
        mag = (Cat(Const(0, _INT_BITS), sig) >> shift)[:fixed_bits]
        sign, mag, inf, zero, nan = pipe.cut(sign, mag, inf, zero, nan)
        fixed = Mux(sign, -mag, mag).as_signed()
        n = fixed[EXP2_FRAC:].as_signed()                        # signed 8 bits, -128..127
        f = fixed[:EXP2_FRAC]
        n, f, inf, zero, nan = pipe.cut(n, f, inf, zero, nan)

        # Chord table.
        c0_table, c1_table = exp2_tables(T)
        c0 = Array(Const(v, EXP2_C0_FRAC + 1) for v in c0_table)[f[rem_bits:]]
        c1 = Array(Const(v, max(v.bit_length() for v in c1_table)) for v in c1_table)[
            f[rem_bits:]]
        r = f[:rem_bits]
        c0, c1, r, n, inf, zero, nan = pipe.cut(c0, c1, r, n, inf, zero, nan)
        # A second register: a table mapped to block RAM has a slow clock-to-output.
        c0, c1, r, n, inf, zero, nan = pipe.cut(c0, c1, r, n, inf, zero, nan)

        if (self._blocks and family(platform) == "ecp5" and pipe.registered(_MULTIPLY_CUT)
                and max(len(c1), len(r)) <= ECP5_MULT_WIDTH):
            product = ecp5_product(m, c1, r, name="dsp", input_registers=False)
            c0, n, inf, zero, nan = pipe.cut(c0, n, inf, zero, nan)
        else:
            product = c1 * r
            c0, product, n, inf, zero, nan = pipe.cut(c0, product, n, inf, zero, nan)

        shift_out = EXP2_FRAC + EXP2_C1_FRAC - EXP2_C0_FRAC
        y = (c0 + (product >> shift_out))[:EXP2_C0_FRAC + 1]       # in [1, 2): MSB is set
        # Keep the precision and guard bits; the bits below only matter through their OR.
        keep = FP32.precision + 1
        top, sticky = y[len(y) - keep:], y[:len(y) - keep].any()
        zero = zero | (n < FP32.emin)                            # x < -126: below min normal
        top, sticky, n, inf, zero, nan = pipe.cut(top, sticky, n, inf, zero, nan)

        result = round_pack(FP32, Const(0, 1), n, top, sticky,
                            is_zero=zero, is_inf=inf, is_nan=nan, cut=pipe.cut)
        pipe.output(self.o, {"y": result})
        return m
