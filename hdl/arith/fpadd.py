"""Pipelined floating-point adder."""

from __future__ import annotations

from typing import Sequence

from amaranth import Array, Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import Pipeline, cut_order
from ..validate import integer
from .float import at_least, normalize, round_pack, shift_right_sticky, unpack
from .format import FP32, FloatFormat, float_format

__all__ = ["FloatAdder", "CUT_POINTS"]

#: Cut points: 0 after unpacking and the magnitude compare (before the operands are ordered), 1
#: after ordering them, 2 after the coarse alignment shift, 3 after the fine one, 4 after the add,
#: 5 after the coarse normalizing shift, 6 after the fine one, 7 inside the rounding (after the
#: increment, before the choice among the special results).
#: Order in which they become registers as ``stages`` grows.
_CUT_ORDER = (3, 5, 1, 4, 6, 2, 7, 0)
#: The cut points by index: where each one sits in the datapath.
CUT_POINTS = ("compared", "ordered", "coarse alignment", "fine alignment", "sum",
              "coarse normalization", "fine normalization", "rounding increment")
#: Guard, round and sticky bits kept below the significand during alignment.
_EXTRA = 3


class FloatAdder(wiring.Component):
    """Add two floats of one format.

    Parameters
    ----------
    fmt : FloatFormat or str
        Format of both inputs and the result (``"fp32"``, ``"bf16"``, ``"fp16"``).
    stages : int
        Register stages, 1 to 9 (default 6): the latency in cycles. The eighth cuts the rounding
        in two (increment, then the choice among the special results), the ninth the first step
        (magnitude compare, then ordering the operands).
    cuts : sequence of int or None
        The cut points to register (``stages - 1`` indices into :data:`CUT_POINTS`) instead of
        the default choice for ``stages``. The latency is still ``stages``; no result bit
        changes.
    balanced : bool
        ``True``: the coarse alignment's sticky bit is ORed from whole bytes before the shift
        (at the cut before it), and the fine normalization also tests all its windows at once
        (:func:`~hdl.arith.float.normalize` with ``parallel=True``; the coarse one always
        does). More LUTs; no result bit nor the latency changes. Default ``False``, which
        is the faster one since the default's alignment was shortened (docs/arith_float.md).

    Members
    -------
    i : In(stream.Signature(StructLayout({"a": fmt.width, "b": fmt.width}), always_ready=True))
    o : Out(stream.Signature(StructLayout({"y": fmt.width}), always_ready=True))
        ``y = round(a + b)``.

    Latency ``stages`` cycles from ``i.valid`` to ``o.valid``; one sum per cycle. Subtraction is
    addition of a negated operand (flip the sign bit).

    Numerics: the correctly rounded IEEE 754 sum (round to nearest even) with subnormal inputs read
    as zero and subnormal results flushed to zero of their sign. A sum of two normal numbers that
    falls below the smallest normal is exact on the subnormal grid, so it is always flushed (never
    rounded up to the smallest normal). ``x + (-x)`` is +0; ``(+0) + (-0)`` is +0, ``(-0) + (-0)``
    is -0; ``inf + (-inf)`` and NaN inputs give the canonical NaN; overflow gives infinity.
    """

    def __init__(self, fmt: FloatFormat | str = FP32, *, stages: int = 6,
                 cuts: Sequence[int] | None = None, balanced: bool = False):
        self._fmt, self._stages, self._order, self._balanced = self._checked(fmt, stages, cuts,
                                                                             balanced)
        width = self._fmt.width
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"a": width, "b": width}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": width}), always_ready=True)),
        })

    @staticmethod
    def _checked(fmt, stages, cuts, balanced) -> tuple:
        """The constructor's arguments checked and normalized, in the order of its fields."""
        fmt = float_format(fmt)
        stages = integer(stages, "Adder stage count", 1, len(_CUT_ORDER) + 1)
        order = cut_order(_CUT_ORDER, stages, cuts, "Adder")
        if not isinstance(balanced, bool):
            raise TypeError(f"Adder balanced must be True or False, not {balanced!r}")
        return fmt, stages, order, balanced

    @classmethod
    def latency_of(cls, fmt: FloatFormat | str = FP32, *, stages: int = 6,
                   cuts: Sequence[int] | None = None, balanced: bool = False) -> int:
        """Return the latency of an adder with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``stages`` cycles.
        """
        return cls._checked(fmt, stages, cuts, balanced)[1]                  # stages

    fmt = property(lambda self: self._fmt)
    stages = property(lambda self: self._stages)
    balanced = property(lambda self: self._balanced)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: :meth:`latency_of` its arguments."""
        return self.latency_of(self._fmt, stages=self._stages)

    def elaborate(self, platform):
        m = Module()
        fmt = self._fmt
        p = fmt.precision
        pipe = Pipeline(m, self.i.valid, cuts=len(_CUT_ORDER), stages=self._stages,
                        order=self._order)
        a = unpack(fmt, self.i.payload.a)
        b = unpack(fmt, self.i.payload.b)
        # Magnitude order on the codes without sign (flushed subnormals are zeros: whichever
        # of two zeros counts as the bigger makes no difference).
        magnitude = fmt.width - 1
        swap = self.i.payload.b[:magnitude] > self.i.payload.a[:magnitude]
        subtract = a.sign ^ b.sign
        is_nan = a.is_nan | b.is_nan | (a.is_inf & b.is_inf & subtract)
        is_inf = a.is_inf | b.is_inf
        inf_sign = Mux(a.is_inf, a.sign, b.sign)
        both_zero_sign = a.sign & b.sign       # the sign of an exact zero sum under RNE
        # Exponent differences from the biased fields (the bias cancels: one carry chain, not
        # one per unbiasing and one for the difference).
        diff_bits = fmt.exp_bits + 1
        a_field, b_field = fmt.fields(self.i.payload.a)[1], fmt.fields(self.i.payload.b)[1]
        diff_ba, diff_ab = (b_field - a_field)[:diff_bits], (a_field - b_field)[:diff_bits]
        # Whether the alignment shifts the smaller operand out entirely, worked out beside the
        # magnitude compare for both orders (gates on the difference, no second chain): the
        # alignment stage then starts from a flag.
        width = p + _EXTRA
        out_ba, out_ab = at_least(diff_ba, width), at_least(diff_ab, width)
        (a_sig, b_sig, a_exp, b_exp, a_sign, b_sign, swap, diff_ba, diff_ab, out_ba, out_ab,
         subtract, is_nan, is_inf, inf_sign, both_zero_sign) = pipe.cut(
            a.sig, b.sig, a.exp, b.exp, a.sign, b.sign, swap, diff_ba, diff_ab, out_ba, out_ab,
            subtract, is_nan, is_inf, inf_sign, both_zero_sign)
        big_sig = Mux(swap, b_sig, a_sig)
        small_sig = Mux(swap, a_sig, b_sig)
        big_exp = Mux(swap, b_exp, a_exp)
        diff = Mux(swap, diff_ba, diff_ab)
        shifted_out = Mux(swap, out_ba, out_ab)
        big_sign = Mux(swap, b_sign, a_sign)
        flags = Cat(big_sign, subtract, is_nan, is_inf, inf_sign, both_zero_sign)
        # Align the smaller operand: shift right by the exponent difference, keeping guard and
        # round bits and folding everything shifted further out into a sticky LSB. Coarse
        # (multiples of 8) and fine steps, each ORing what it shifts out into the sticky bit.
        if not self._balanced:
            big_sig, small_sig, big_exp, diff, shifted_out, flags = pipe.cut(
                big_sig, small_sig, big_exp, diff, shifted_out, flags)
            small_ext = Cat(Const(0, _EXTRA), small_sig)
            # Below ``width`` the coarse shift is a multiple of 8 under ``width``: a choice
            # among those by the exponent difference's bits 3 and up (no comparator); at
            # ``width`` and beyond everything goes to the sticky bit.
            groups = (width - 1) // 8 + 1
            select = diff[3:3 + max(1, (groups - 1).bit_length())]
            wide = Cat(Const(0, width), small_ext) >> Cat(Const(0, 3), select)
            aligned = Mux(shifted_out, 0, wide[width:])
            sticky = Mux(shifted_out, small_ext.any(), wide[:width].any())
            fine = diff[:3]
        else:
            # The same shift as a choice among the ``groups`` multiples of 8 below ``width``
            # (everything goes to sticky at ``width`` and beyond), with the sticky bit as the
            # OR of whole bytes, computed before the shift.
            small_ext = Cat(Const(0, _EXTRA), small_sig)
            groups = (width - 1) // 8 + 1
            select = diff[3:3 + max(1, (groups - 1).bit_length())]
            flush = shifted_out
            dropped = [Const(0, 1)]
            for g in range(groups - 1):
                dropped.append(dropped[-1] | small_ext[8 * g:8 * g + 8].any())
            big_sig, small_ext, big_exp, select, flush, dropped, everything, fine, flags = \
                pipe.cut(big_sig, small_ext, big_exp, select, flush, Cat(*dropped),
                         small_ext.any(), diff[:3], flags)
            shifted = Array(small_ext >> (8 * g) for g in range(groups))[select]
            aligned = Mux(flush, 0, shifted)
            sticky = Mux(flush, everything, Array(dropped[g] for g in range(groups))[select])
        big_sig, aligned, sticky, fine, big_exp, flags = pipe.cut(big_sig, aligned, sticky,
                                                                  fine, big_exp, flags)
        aligned, sticky_fine = shift_right_sticky(aligned, fine, 7)
        aligned = Cat(aligned[0] | sticky | sticky_fine, aligned[1:])
        big_ext = Cat(Const(0, _EXTRA), big_sig)
        big_ext, aligned, big_exp, flags = pipe.cut(big_ext, aligned, big_exp, flags)

        subtract = flags[1]
        total = Mux(subtract, big_ext - aligned, big_ext + aligned)[:width + 1]
        total, big_exp, flags = pipe.cut(total, big_exp, flags)

        # The MSB of ``total`` has weight 2**(big_exp + 1).
        coarse_steps = [step for step in (32, 16, 8) if step < width + 1]
        shift_coarse, normalized = normalize(total, m, steps=coarse_steps,
                                             parallel=True)
        exp = big_exp + 1 - shift_coarse
        normalized, exp, flags, total_zero = pipe.cut(normalized, exp, flags, total == 0)
        shift_fine, normalized = normalize(normalized, m, steps=(4, 2, 1),
                                           parallel=self._balanced)
        exp = exp - shift_fine
        normalized, exp, flags, total_zero = pipe.cut(normalized, exp, flags, total_zero)

        big_sign, is_nan, is_inf, inf_sign, both_zero_sign = \
            flags[0], flags[2], flags[3], flags[4], flags[5]
        sign = Mux(is_inf, inf_sign, Mux(total_zero, both_zero_sign, big_sign))
        y = round_pack(fmt, sign, exp, normalized, 0, is_zero=total_zero, is_inf=is_inf,
                       is_nan=is_nan, cut=pipe.cut)
        pipe.output(self.o, {"y": y})
        return m
