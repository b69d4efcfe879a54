"""Combinational floating-point building blocks shared by the arithmetic units.

:func:`unpack` splits a bit pattern into sign, unbiased exponent and significand (hidden bit
included) plus class flags; :func:`round_pack` rounds a normalized significand to a format and packs
it, handling overflow, underflow and the special values. Both follow the conventions of
:mod:`hdl.arith.format`:

* subnormal inputs read as zero of the same sign (``sig = 0``, ``is_zero = 1``);
* rounding is to nearest, ties to even;
* **underflow rule.** The packed result is the IEEE 754 result (gradual underflow, rounded to
  nearest even on the subnormal grid) with every subnormal result then flushed to zero of the same
  sign. Equivalently: a value below the smallest normal ``2**emin`` becomes ``2**emin`` exactly when
  it is at least ``2**emin - 2**(emin - precision)`` (the IEEE rounding of such a value on the
  subnormal grid is ``2**emin``), otherwise zero of its sign. So a unit's result equals NumPy's
  result in the same format with subnormal results flushed (``golden.arith.float.from_float``);
* overflow (an exponent above ``emax`` after rounding) gives infinity of the result's sign;
* every NaN result is the canonical quiet NaN of the result format.

The units place their pipeline registers with :class:`hdl.pipeline.Pipeline`.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from amaranth import Array, Cat, Const, Module, Mux, Value, signed

from ..pipeline import shared
from .format import FloatFormat

__all__ = ["Unpacked", "unpack", "normal_significand", "hidden_bit_init", "round_pack",
           "exponent_shape", "leading_zeros", "normalize", "shift_right_sticky", "at_least"]


def exponent_shape(fmt: FloatFormat):
    """Shape of :attr:`Unpacked.exp` for ``fmt``: ``signed(exp_bits + 2)``."""
    return signed(fmt.exp_bits + 2)


class Unpacked(NamedTuple):
    """A float split into fields (all Amaranth Values).

    Attributes
    ----------
    sign : Value
        1 bit.
    exp : Value
        ``signed(exp_bits + 2)``: the unbiased exponent ``exp_field - bias`` (``-bias`` for zero
        and subnormal inputs, ``emax + 1`` for infinity and NaN).
    sig : Value
        ``fmt.precision`` bits, hidden bit included: value ``sig * 2**(exp - man_bits)``. 0 for
        zero and subnormal inputs (flush-to-zero), and for infinity and NaN.
    is_zero, is_inf, is_nan : Value
        1 bit each; ``is_zero`` is set for zeros and subnormals.
    """

    sign: Value
    exp: Value
    sig: Value
    is_zero: Value
    is_inf: Value
    is_nan: Value


def unpack(fmt: FloatFormat, bits) -> Unpacked:
    """Split the ``fmt.width``-bit pattern ``bits`` into an :class:`Unpacked` (combinational)."""
    bits = Value.cast(bits)
    sign, exp_field, frac = fmt.fields(bits)
    is_special = exp_field == fmt.exp_max_field
    is_zero = exp_field == 0
    exp = (Cat(exp_field, Const(0, 2)).as_signed() - fmt.bias)[:fmt.exp_bits + 2].as_signed()
    sig = Mux(is_zero | is_special, 0, Cat(frac, Const(1, 1)))
    return Unpacked(sign, exp, sig, is_zero, is_special & (frac == 0), is_special & (frac != 0))


def normal_significand(fmt: FloatFormat, bits) -> Value:
    """Return the significand of ``bits`` read as a normal number: the fraction with the hidden
    bit set, whatever the input's class (no logic, ``fmt.precision`` bits).

    For a unit whose result, when an input is zero, subnormal, infinite or NaN, comes from the
    class flags alone (as :func:`round_pack`'s special results do), so that the significand of
    such an input is never used.
    """
    return Cat(fmt.fields(Value.cast(bits))[2], Const(1, 1))


def hidden_bit_init(width: int, lo: int = 0, hi: int | None = None) -> int:
    """The power-on value of a register holding bits ``lo`` to ``hi`` (default: all) of a
    ``width``-bit :func:`normal_significand`: the hidden bit (the top one, always 1) set, so that
    synthesis replaces its flip-flop by the constant (:meth:`hdl.pipeline.Pipeline.cut`)."""
    hi = width if hi is None else hi
    return 1 << (width - 1 - lo) if lo <= width - 1 < hi else 0


def round_pack(fmt: FloatFormat, sign, exp, sig, sticky, *, is_zero=0, is_inf=0,
               is_nan=0, cut=None) -> Value:
    """Round a normalized significand to ``fmt`` and return the packed ``fmt.width``-bit pattern.

    Parameters
    ----------
    fmt : FloatFormat
        Result format.
    sign : Value
        1 bit.
    exp : Value
        Signed unbiased exponent of the MSB of ``sig`` (any width that holds it).
    sig : Value
        ``W >= fmt.precision`` bits, normalized: its MSB is the leading 1 and has weight
        ``2**exp``. All zero means a zero result of sign ``sign``.
    sticky : Value
        OR of every bit of the exact value below ``sig``'s LSB.
    is_zero, is_inf, is_nan : Value or int
        Special results, in increasing priority: zero of sign ``sign``, infinity of sign ``sign``,
        canonical NaN.

    cut : callable or None
        A pipeline cut between the rounding increment and the choice among the special results
        (:meth:`~hdl.pipeline.Pipeline.cut`): called with the rounded value and the five
        selection flags, it returns them (registered or not). ``None``: one combinational step.

    Rounds to nearest, ties to even. A carry out of rounding renormalizes (``exp + 1``). Above
    ``emax`` after rounding: infinity of the sign. Below ``emin``: the underflow rule of this
    module (IEEE 754 result with subnormal results flushed to zero of the sign; only values in
    ``[2**emin - 2**(emin - precision), 2**emin)`` round up to the smallest normal).
    """
    sig = Value.cast(sig)
    exp = Value.cast(exp)
    p = fmt.precision
    width = len(sig)
    if width < p:
        raise ValueError(f"Significand width must be at least the precision {p} of {fmt}, "
                         f"not {width}")
    kept = sig[width - p:]
    if width == p:
        guard, rest = Const(0, 1), Value.cast(sticky)
    else:
        guard = sig[width - p - 1]
        rest = (sig[:width - p - 1].any() if width - p - 1 else Const(0, 1)) | sticky
    up = guard & (rest | kept[0])
    # The fraction's increment is one carry chain; its carry out (all ones + 1 = next binade)
    # picks the biased exponent plus one, worked out beside it from ``exp``, as are the range
    # checks (comparisons of ``exp`` with constants, no bias added in front of them). They only
    # combine with ``kept.all() & up`` at the end.
    man = fmt.man_bits
    all_ones = kept.all()
    fraction = (kept[:man] + up)[:man]
    carry = kept[:man].all() & up
    exp_field = Mux(carry, (exp + (fmt.bias + 1))[:fmt.exp_bits], (exp + fmt.bias)[:fmt.exp_bits])
    normal = Cat(fraction, exp_field, sign)
    max_field = fmt.exp_max_field - fmt.bias          # exp at the biased field of inf/NaN
    overflow = (exp >= max_field) | ((exp == max_field - 1) & all_ones & up)
    tiny = exp < 1 - fmt.bias
    # IEEE rounding on the subnormal grid of [2**(emin-1), 2**emin) reaches 2**emin exactly when the
    # kept bits are all ones (value >= 2**emin - half a subnormal ulp); everything else is flushed.
    to_min_normal = (exp == -fmt.bias) & all_ones
    is_zero = Value.cast(is_zero) | (sig == 0)
    if cut is not None:
        # The result's sign is the top bit of ``normal``.
        selection = Cat(Value.cast(is_nan), Value.cast(is_inf), is_zero, overflow, tiny,
                        to_min_normal)
        normal, selection = cut(normal, selection)
        sign = normal[fmt.width - 1]
        is_nan, is_inf, is_zero, overflow, tiny, to_min_normal = (selection[n] for n in range(6))
    zero = Cat(Const(0, fmt.width - 1), sign)
    infinity = Cat(Const(0, fmt.man_bits), Const(fmt.exp_max_field, fmt.exp_bits), sign)
    min_normal = Cat(Const(0, fmt.man_bits), Const(1, fmt.exp_bits), sign)
    nan = Const(fmt.canonical_nan, fmt.width)
    return Mux(is_nan, nan,
               Mux(is_inf, infinity,
                   Mux(is_zero, zero,
                       Mux(overflow, infinity,
                           Mux(tiny, Mux(to_min_normal, min_normal, zero), normal)))))


def leading_zeros(value) -> Value:
    """Return the number of leading zero bits of ``value`` (``len(value)`` when it is zero)."""
    return normalize(value)[0]


def normalize(value, m: Module | None = None, steps: Sequence[int] | None = None, *,
              parallel: bool = False):
    """Shift ``value`` left until its MSB is 1; return ``(shift, shifted)`` (combinational).

    A logarithmic shifter: for each power of two ``2**k`` from the largest down, if the top
    ``2**k`` bits are zero, shift by ``2**k``. An all-zero ``value`` gives ``shift`` =
    ``2**K - 1`` (the sum of all steps, at least ``len(value) - 1``) and ``shifted`` = 0; callers
    test for zero separately. ``steps`` (descending powers of two) does only those levels, for a
    normalization split across pipeline stages. Each level uses the previous one twice, so pass
    ``m`` to hold every level in a signal (else the generated expression grows exponentially with
    the levels).

    ``parallel=True`` computes the same result with shallower logic for a few levels: the zero
    test of each level is made on ``value`` itself for every shift the levels above may have
    chosen (their decisions then select among them), and the shifted value is one choice among
    all the combined shifts.
    """
    value = Value.cast(value)
    width = len(value)
    levels = max(1, (width - 1).bit_length())
    if steps is None:
        steps = [1 << k for k in reversed(range(levels))]
    if parallel:
        return _normalize_parallel(value, [s for s in steps if s < width], levels)
    shift = Const(0, levels)
    shifted = value
    for step in steps:
        k = step.bit_length() - 1
        if step >= width:
            continue
        top_zero = shifted[width - step:] == 0
        shifted = Mux(top_zero, Cat(Const(0, step), shifted[:width - step]), shifted)
        shift = shift | Mux(top_zero, step, 0)
        if m is not None:
            shifted, shift = shared(m, shifted, f"norm{k}"), shared(m, shift, f"norm{k}_shift")
    return shift, shifted


def _normalize_parallel(value: Value, steps: Sequence[int], levels: int):
    width = len(value)
    taken = []                                     # one decision bit per step, MSB step first
    # tests[offset]: the zero test of the next window for a shift of ``offset`` so far.
    for n, step in enumerate(steps):
        tests = []
        for choice in range(1 << n):
            offset = sum(s for j, s in enumerate(steps[:n]) if choice >> (n - 1 - j) & 1)
            hi, lo = width - offset, max(0, width - offset - step)
            tests.append(value[lo:hi] == 0 if hi > 0 else Const(1, 1))
        taken.append(Array(tests)[Cat(*reversed(taken))] if n else tests[0])
    shift = Const(0, levels)
    for step, bit in zip(steps, taken):
        shift = shift | Mux(bit, step, 0)
    choices = []
    for choice in range(1 << len(steps)):
        offset = sum(s for j, s in enumerate(steps) if choice >> (len(steps) - 1 - j) & 1)
        choices.append(Cat(Const(0, min(offset, width)), value[:max(0, width - offset)]))
    shifted = Array(choices)[Cat(*reversed(taken))] if steps else value
    return shift, shifted


def shift_right_sticky(value, amount, limit: int):
    """Return ``(value >> amount, sticky)``: ``sticky`` is the OR of the bits shifted out.

    ``amount`` is clamped to ``limit`` (at least ``len(value)``: everything goes to sticky)."""
    value, amount = Value.cast(value), Value.cast(amount)
    width = len(value)
    if amount.shape().signed or limit < (1 << len(amount)) - 1:   # else no dead compare
        amount = Mux(amount > limit, limit, amount)
    wide = Cat(Const(0, width), value) >> amount
    return wide[width:], wide[:width].any()


def at_least(value, bound: int) -> Value:
    """Return ``value >= bound`` (``value`` read unsigned) as gates on its bits, MSB first.

    Yosys maps a comparison to a carry chain; against a constant the test is a small function of
    the bits, which synthesis then packs into a few LUTs, so it does not add a chain behind the
    one that computed ``value``.
    """
    value = Value.cast(value)
    bound = int(bound)
    if bound <= 0:
        return Const(1, 1)
    if bound >= 1 << len(value):
        return Const(0, 1)
    result = Const(1, 1)                       # the empty suffix is >= the empty bound
    for i in range(len(value)):                # from the LSB up: value[:i+1] >= bound[:i+1]
        result = (value[i] & result) if bound >> i & 1 else (value[i] | result)
    return result
