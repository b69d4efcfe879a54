"""Pipelined floating-point multiplier for any pair of input formats and a chosen result format."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer
from .float import Pipeline, round_pack, unpack
from .format import FP32, FloatFormat, float_format

__all__ = ["FloatMultiplier", "exact_product"]

#: Cut points of the multiplier datapath: 0 after unpacking, 1 after the four partial products of
#: the significand halves, 2 after their sum, 3 after normalization.
#: Order in which they become registers as ``stages`` grows.
_CUT_ORDER = (1, 2, 0, 3)
#: Widest significand multiplied in one piece (an ECP5 MULT18X18D multiplies 18 x 18 bits).
_DSP_BITS = 12


def exact_product(a_fmt: FloatFormat, b_fmt: FloatFormat, out_fmt: FloatFormat) -> str:
    """Say when ``a_fmt x b_fmt -> out_fmt`` is exact: ``"always"``, ``"in range"`` or ``"no"``.

    ``"in range"``: every product whose result is neither above the largest normal nor below the
    smallest normal of ``out_fmt`` is exact (the significand fits); ``"always"``: in addition the
    exponent range of ``out_fmt`` holds every product of finite nonzero inputs.
    """
    if a_fmt.precision + b_fmt.precision > out_fmt.precision:
        return "no"
    lo = a_fmt.emin + b_fmt.emin
    hi = a_fmt.emax + b_fmt.emax + 1
    return "always" if out_fmt.emin <= lo and hi <= out_fmt.emax else "in range"


class FloatMultiplier(wiring.Component):
    """Multiply two floats, rounding once to the result format.

    Parameters
    ----------
    a_fmt, b_fmt : FloatFormat or str
        Input formats (``"bf16"``, ``"fp16"``, ``"fp32"`` or a :class:`FloatFormat`).
    out_fmt : FloatFormat or str
        Result format (default fp32).
    stages : int
        Register stages, 1 to 5 (default 5): the latency in cycles.

    Members
    -------
    i : In(stream.Signature(StructLayout({"a": a_fmt.width, "b": b_fmt.width}), always_ready=True))
    o : Out(stream.Signature(StructLayout({"y": out_fmt.width}), always_ready=True))
        ``y = round(a * b)``.

    Latency ``stages`` cycles from ``i.valid`` to ``o.valid``; one product per cycle.

    Numerics: round to nearest even; subnormal inputs read as zero, subnormal results flushed to
    zero (IEEE result, then flushed: see :mod:`hdl.arith.float`); overflow gives infinity;
    ``0 x inf`` and NaN inputs give the canonical NaN; the sign of a zero or infinite result is the
    XOR of the input signs. When the significands fit (``a.precision + b.precision <=
    out.precision``) the product is exact: fp16 x fp16 -> fp32 always (its exponent range fits
    too), bf16 x bf16 -> fp32 whenever the result is a normal fp32 (products above the fp32
    maximum overflow to infinity, below the fp32 minimum normal they flush to zero). See
    :func:`exact_product`.
    """

    def __init__(self, a_fmt: FloatFormat | str = FP32, b_fmt: FloatFormat | str = FP32,
                 out_fmt: FloatFormat | str = FP32, *, stages: int = 5):
        self._a_fmt = float_format(a_fmt)
        self._b_fmt = float_format(b_fmt)
        self._out_fmt = float_format(out_fmt)
        self._stages = integer(stages, "Multiplier stage count", 1, len(_CUT_ORDER) + 1)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"a": self._a_fmt.width,
                                                        "b": self._b_fmt.width}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": self._out_fmt.width}),
                                      always_ready=True)),
        })

    a_fmt = property(lambda self: self._a_fmt)
    b_fmt = property(lambda self: self._b_fmt)
    out_fmt = property(lambda self: self._out_fmt)
    stages = property(lambda self: self._stages)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: ``stages``."""
        return self._stages

    @property
    def exact(self) -> str:
        """``"always"``, ``"in range"`` or ``"no"``: see :func:`exact_product`."""
        return exact_product(self._a_fmt, self._b_fmt, self._out_fmt)

    def elaborate(self, platform):
        m = Module()
        af, bf, of = self._a_fmt, self._b_fmt, self._out_fmt
        pipe = Pipeline(m, self.i.valid, cuts=4, stages=self._stages, order=_CUT_ORDER)
        a = unpack(af, self.i.payload.a)
        b = unpack(bf, self.i.payload.b)
        sign = a.sign ^ b.sign
        exp = a.exp + b.exp
        is_nan = a.is_nan | b.is_nan | (a.is_zero & b.is_inf) | (a.is_inf & b.is_zero)
        is_inf = a.is_inf | b.is_inf
        is_zero = a.is_zero | b.is_zero
        flags = Cat(sign, is_nan, is_inf, is_zero)
        sig_a, sig_b, exp, flags = pipe.cut(a.sig, b.sig, exp, flags)

        # Wider significands (fp32) as four partial products of halves (at most 12 x 12 bits:
        # one ECP5 DSP each with no glue logic), summed in the next step: DSPs and adders get
        # their own stages.
        # Significands of up to _DSP_BITS bits (bf16, fp16) fit one DSP and are not split.
        if max(len(sig_a), len(sig_b)) <= _DSP_BITS:
            product, exp, flags = pipe.cut(sig_a * sig_b, exp, flags)
        else:
            ha, hb = (len(sig_a) + 1) // 2, (len(sig_b) + 1) // 2
            a_lo, a_hi, b_lo, b_hi = sig_a[:ha], sig_a[ha:], sig_b[:hb], sig_b[hb:]
            parts = (a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi)
            *parts, exp, flags = pipe.cut(*parts, exp, flags)
            ll, lh, hl, hh = parts
            product = (ll + (lh << hb) + (hl << ha) + (hh << (ha + hb)))[:len(sig_a) +
                                                                         len(sig_b)]
        product, exp, flags = pipe.cut(product, exp, flags)

        width = len(product)
        top = product[width - 1]
        # Leading one at the top bit (weight 2**(exp+1)) or the one below it (weight 2**exp).
        sig = Mux(top, product, Cat(Const(0, 1), product[:width - 1]))
        exp = exp + top
        if width < of.precision:
            sig = Cat(Const(0, of.precision - width), sig)
        sig, exp, flags = pipe.cut(sig, exp, flags)

        sign, is_nan, is_inf, is_zero = flags[0], flags[1], flags[2], flags[3]
        y = round_pack(of, sign, exp, sig, 0, is_zero=is_zero, is_inf=is_inf, is_nan=is_nan)
        pipe.output(self.o, {"y": y})
        return m
