"""Pipelined conversions: float to float (fp32 to bf16/fp16 and any other pair) and integer to
float."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import Pipeline
from ..validate import integer
from .float import normalize, round_pack, unpack
from .format import BF16, FP32, FloatFormat, float_format

__all__ = ["FloatConvert", "IntToFloat"]


class FloatConvert(wiring.Component):
    """Convert floats from one format to another.

    Parameters
    ----------
    in_fmt, out_fmt : FloatFormat or str
        Source and result formats (default fp32 to bf16).
    stages : int
        Register stages, 1 or 2 (default 2): the latency in cycles.

    Members
    -------
    i : In(stream.Signature(StructLayout({"x": in_fmt.width}), always_ready=True))
    o : Out(stream.Signature(StructLayout({"y": out_fmt.width}), always_ready=True))

    Latency ``stages`` cycles from ``i.valid`` to ``o.valid``; one conversion per cycle.

    Numerics: round to nearest even; overflow (fp32 above the fp16 range, ``>= 65520``) gives
    infinity; subnormal inputs read as zero and results below the smallest normal of ``out_fmt``
    follow the flush rule of :mod:`hdl.arith.float`; signed zeros and infinities keep their sign;
    NaN becomes the canonical NaN of ``out_fmt``. Widening conversions (bf16/fp16 to fp32) are
    exact.
    """

    def __init__(self, in_fmt: FloatFormat | str = FP32, out_fmt: FloatFormat | str = BF16, *,
                 stages: int = 2):
        self._in_fmt = float_format(in_fmt)
        self._out_fmt = float_format(out_fmt)
        self.latency_of(self._in_fmt, self._out_fmt, stages=stages)   # one copy of the checks
        self._stages = stages
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"x": self._in_fmt.width}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": self._out_fmt.width}),
                                      always_ready=True)),
        })

    @staticmethod
    def latency_of(in_fmt: FloatFormat | str = FP32, out_fmt: FloatFormat | str = BF16, *,
                   stages: int = 2) -> int:
        """Return the latency of a conversion with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``stages`` cycles.
        """
        float_format(in_fmt), float_format(out_fmt)
        return integer(stages, "Conversion stage count", 1, 2)

    in_fmt = property(lambda self: self._in_fmt)
    out_fmt = property(lambda self: self._out_fmt)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: :meth:`latency_of` its arguments."""
        return self.latency_of(self._in_fmt, self._out_fmt, stages=self._stages)

    def elaborate(self, platform):
        m = Module()
        inf, outf = self._in_fmt, self._out_fmt
        pipe = Pipeline(m, self.i.valid, cuts=1, stages=self._stages)
        x = unpack(inf, self.i.payload.x)
        sig = x.sig
        if inf.precision < outf.precision:
            sig = Cat(Const(0, outf.precision - inf.precision), sig)
        flags = Cat(x.sign, x.is_zero, x.is_inf, x.is_nan)
        exp, sig, flags = pipe.cut(x.exp, sig, flags)
        y = round_pack(outf, flags[0], exp, sig, 0, is_zero=flags[1], is_inf=flags[2],
                       is_nan=flags[3])
        pipe.output(self.o, {"y": y})
        return m


class IntToFloat(wiring.Component):
    """Convert two's complement integers to floats.

    Parameters
    ----------
    int_bits : int
        Integer width, 2 to 32.
    fmt : FloatFormat or str
        Result format (default fp32).
    stages : int
        Register stages, 1 to 4 (default 3): the latency in cycles.

    Members
    -------
    i : In(stream.Signature(StructLayout({"x": int_bits}), always_ready=True))
        A signed integer.
    o : Out(stream.Signature(StructLayout({"y": fmt.width}), always_ready=True))

    Latency ``stages`` cycles from ``i.valid`` to ``o.valid``; one conversion per cycle.

    Numerics: round to nearest even (exact when the magnitude fits the precision: any int16 to
    fp32; int32 to fp32 rounds above ``2**24``); 0 gives +0; a magnitude above the format's range
    (int32 to fp16 above 65519) gives infinity of the sign. The most negative integer converts
    like any other.
    """

    def __init__(self, int_bits: int = 32, fmt: FloatFormat | str = FP32, *, stages: int = 3):
        self.latency_of(int_bits, fmt, stages=stages)                 # one copy of the checks
        self._int_bits, self._fmt, self._stages = int_bits, float_format(fmt), stages
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"x": self._int_bits}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": self._fmt.width}),
                                      always_ready=True)),
        })

    @staticmethod
    def latency_of(int_bits: int = 32, fmt: FloatFormat | str = FP32, *, stages: int = 3) -> int:
        """Return the latency of a conversion with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``stages`` cycles.
        """
        integer(int_bits, "Integer width", 2, 32)
        float_format(fmt)
        return integer(stages, "Integer conversion stage count", 1, 4)

    int_bits = property(lambda self: self._int_bits)
    fmt = property(lambda self: self._fmt)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: :meth:`latency_of` its arguments."""
        return self.latency_of(self._int_bits, self._fmt, stages=self._stages)

    def elaborate(self, platform):
        m = Module()
        n, fmt = self._int_bits, self._fmt
        pipe = Pipeline(m, self.i.valid, cuts=3, stages=self._stages, order=(1, 2, 0))
        x = self.i.payload.x
        sign = x[n - 1]
        magnitude = Mux(sign, -x.as_signed(), x)[:n]     # 2**(n-1) fits n unsigned bits
        magnitude, sign = pipe.cut(magnitude, sign)
        coarse_steps = [step for step in (32, 16, 8) if step < n]
        shift_coarse, normalized = normalize(magnitude, m, steps=coarse_steps)
        normalized, shift_coarse, sign = pipe.cut(normalized, shift_coarse, sign)
        shift_fine, normalized = normalize(normalized, m, steps=[s for s in (4, 2, 1) if s < n])
        exp = (n - 1) - shift_coarse - shift_fine
        normalized, exp, sign = pipe.cut(normalized, exp, sign)
        if n < fmt.precision:
            normalized = Cat(Const(0, fmt.precision - n), normalized)
        y = round_pack(fmt, sign, exp, normalized, 0)
        pipe.output(self.o, {"y": y})
        return m
