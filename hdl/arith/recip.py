"""Pipelined fp32 reciprocal and reciprocal square root: seed table plus Newton-Raphson steps.

Both units share one datapath (:class:`_NewtonRaphson`): unpack, read a seed from a table indexed by
the top :data:`SEED_BITS` mantissa bits (and, for rsqrt, the exponent parity), refine it with
``iterations`` Newton-Raphson steps in fixed point, normalize and round once to fp32. The
fixed-point algorithm, bit for bit, is specified in :mod:`golden.arith.func`.
"""

from __future__ import annotations

import math
import operator
from functools import partial, reduce

from amaranth import Array, Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import Pipeline
from ..validate import integer
from .dsp import ecp5_product, family
from .fpmul import logic_product, logic_rows, logic_sum, narrow_piece
from .float import hidden_bit_init, normal_significand, round_pack, unpack
from .format import FP32

__all__ = ["Reciprocal", "RSqrt", "recip_seeds", "rsqrt_seeds", "error_width", "SEED_BITS",
           "SEED_FRAC", "NR_FRAC", "MAX_ITERATIONS", "RECIP_SIX_BLOCKS",
           "RECIP_LANDED"]

#: Mantissa bits indexing the seed table (128 segments of [1, 2)).
SEED_BITS = 7
#: Fraction bits of the seeds.
SEED_FRAC = 10
#: Fraction bits of the Newton-Raphson iterate after the first step.
NR_FRAC = 30
#: Most Newton-Raphson steps a unit can be built with.
MAX_ITERATIONS = 3

_MAN = FP32.man_bits


def recip_seeds() -> list[int]:
    """Return ``round(2 / (a + b) * 2**10)`` for every segment ``[a, b)`` of [1, 2)."""
    n = 1 << SEED_BITS
    return [round(2 / ((1 + k / n) + (1 + (k + 1) / n)) * (1 << SEED_FRAC)) for k in range(n)]


def rsqrt_seeds() -> list[list[int]]:
    """Return ``round(sqrt(2 / (a + b)) * 2**10)`` per parity (segments of [1, 2), [2, 4))."""
    n = 1 << SEED_BITS
    return [[round(math.sqrt(2 / ((1 + k / n) * 2 ** p + (1 + (k + 1) / n) * 2 ** p))
                   * (1 << SEED_FRAC)) for k in range(n)] for p in (0, 1)]


def error_width(step: int) -> int:
    """Signed width of the error term ``e`` (units 2**-30) in Newton-Raphson step ``step``.

    The seed is within ``2**-8`` of the answer and each step squares the error, so ``|e|`` is
    below ``2**(30 - 8 * 2**step)`` plus the truncation error of a few units; the width has one
    bit of margin over that bound, which tests/test_arith_func_golden.py checks exhaustively over
    every significand.
    """
    return max(NR_FRAC - (SEED_BITS + 1) * (1 << step) + 3, 5)


class _NewtonRaphson(wiring.Component):
    """Shared datapath of :class:`Reciprocal` and :class:`RSqrt` (``sqrt`` selects)."""

    _sqrt = False
    _CUTS_PER_STEP = 4
    _MULTIPLIES_PER_STEP = 2

    def __init__(self, *, iterations: int = 2, block_registers: bool = False,
                 round_register: bool = False, land_products: bool = False,
                 narrow_in_logic: bool = False):
        self.latency_of(iterations=iterations, block_registers=block_registers,
                        round_register=round_register, land_products=land_products,
                        narrow_in_logic=narrow_in_logic)          # one copy of the checks
        self._iterations, self._blocks = iterations, block_registers
        self._round_register, self._land = round_register, land_products
        self._narrow = narrow_in_logic
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"x": 32}), always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": 32}), always_ready=True)),
        })

    @classmethod
    def latency_of(cls, *, iterations: int = 2, block_registers: bool = False,
                   round_register: bool = False, land_products: bool = False,
                   narrow_in_logic: bool = False) -> int:
        """Return the latency of a unit with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``4 + cycles_per_step * iterations`` cycles, one more with
        ``round_register``.
        """
        name = "RSqrt" if cls._sqrt else "Reciprocal"
        integer(iterations, f"{name} Newton-Raphson iteration count", 0, MAX_ITERATIONS)
        for flag, value in (("block_registers", block_registers),
                            ("round_register", round_register),
                            ("land_products", land_products),
                            ("narrow_in_logic", narrow_in_logic)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} {flag} must be True or False, not {value!r}")
        return 4 + cls.cycles_per_step(land_products) * iterations + round_register

    @classmethod
    def cycles_per_step(cls, land_products: bool = False) -> int:
        """Cycles of one Newton-Raphson step: two per multiply, plus the correction's addition
        (and, for rsqrt, the square's sum); two more per multiply with ``land_products``."""
        return cls._CUTS_PER_STEP + 2 * cls._MULTIPLIES_PER_STEP * land_products

    @property
    def iterations(self) -> int:
        return self._iterations

    @property
    def block_registers(self) -> bool:
        return self._blocks

    @property
    def land_products(self) -> bool:
        return self._land

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: ``4 + cycles_per_step * iterations``, one more
        with ``round_register``."""
        return self.latency_of(iterations=self._iterations, round_register=self._round_register,
                               land_products=self._land)

    def elaborate(self, platform):
        m = Module()
        # Every cut is a register, so each partial product's register may be its block's own.
        self._ecp5 = self._blocks and family(platform) == "ecp5"
        cuts = 3 + self.cycles_per_step(self._land) * self._iterations + self._round_register
        pipe = Pipeline(m, self.i.valid, cuts=cuts, stages=cuts + 1)

        x = unpack(FP32, self.i.payload.x)
        # The significand read as a normal number's (no class test in front of the seed table):
        # a zero, subnormal, infinite or NaN operand takes its result from the flags.
        sig = normal_significand(FP32, self.i.payload.x)
        index = sig[_MAN - SEED_BITS:_MAN]
        if self._sqrt:
            parity = x.exp[0]
            seeds = rsqrt_seeds()
            seeds = seeds[0] + seeds[1]
            table = Array(Const(v, SEED_FRAC + 1) for v in seeds)
            y = table[Cat(index, parity)]
            # result exponent: -(e - parity) / 2 (e - parity is even)
            exp_out = -((x.exp - parity) >> 1)
            u = Mux(parity, Cat(Const(0, 1), sig), sig)                # u = m * 2**parity
            is_nan = x.is_nan | (x.sign & ~x.is_zero)
            is_inf = x.is_zero
            is_zero = x.is_inf & ~x.sign
            u_init = 0
        else:
            seeds = recip_seeds()
            y = Array(Const(v, SEED_FRAC + 1) for v in seeds)[index]
            exp_out = -x.exp
            u = sig
            u_init = hidden_bit_init(len(sig))
            is_nan, is_inf, is_zero = x.is_nan, x.is_zero, x.is_inf
        flags = (x.sign, exp_out, is_nan, is_inf, is_zero)
        # The bits every seed has set and the hidden bit are constants: their registers power on
        # at them, so synthesis keeps no flip-flop for them (Pipeline.cut).
        y, u, *flags = pipe.cut(y, u, *flags,
                                inits=[reduce(operator.and_, seeds), u_init, *[0] * len(flags)])
        # A second register: a seed table mapped to block RAM has a slow clock-to-output.
        y, u, *flags = pipe.cut(y, u, *flags)

        frac = SEED_FRAC                          # fraction bits of y
        for step in range(self._iterations):
            y, frac, u, flags = self._step(m, pipe, step, y, frac, u, flags)

        # y in [2**28, 2**31) (units 2**-30 when frac = 30): normalize, then round.
        sign, exp_out, is_nan, is_inf, is_zero = flags
        y30 = Cat(Const(0, NR_FRAC - frac), y)[:NR_FRAC + 1]
        sig = Mux(y30[NR_FRAC], y30,
                  Mux(y30[NR_FRAC - 1], Cat(Const(0, 1), y30[:NR_FRAC]),
                      Cat(Const(0, 2), y30[:NR_FRAC - 1])))
        exp = Mux(y30[NR_FRAC], exp_out, Mux(y30[NR_FRAC - 1], exp_out - 1, exp_out - 2))
        # Keep the precision and guard bits; the bits below only matter through their OR.
        keep = FP32.precision + 1
        top, sticky = sig[len(sig) - keep:], sig[:len(sig) - keep].any()
        top, sticky, exp, *flags = pipe.cut(top, sticky, exp, sign, is_nan, is_inf, is_zero)
        sign, is_nan, is_inf, is_zero = flags
        result = round_pack(FP32, sign, exp, top, sticky,
                            is_zero=is_zero, is_inf=is_inf, is_nan=is_nan,
                            cut=pipe.cut if self._round_register else None)
        pipe.output(self.o, {"y": result})
        return m

    def _registered_partials(self, m, pipe, a, b, keep, name):
        """The partial products of ``a * b`` registered at the next cut, with ``keep`` (the
        values that travel along: ``y``, ``u``, then the flags): ``(parts, keep)``. For the ECP5 with ``block_registers`` each
        partial product's register is its ``MULT18X18D``'s output register."""
        if self._land:
            return self._landed_partials(m, pipe, a, b, keep, name)
        if self._ecp5:
            if not self._narrow:
                return (_block_partials(m, a, b, name, input_registers=False),
                        list(pipe.cut(*keep)))
            # The narrow products in logic, registered at the cut in fabric beside the values
            # kept; the others on blocks, their registers the blocks' output registers.
            pairs, logic = _piece_pairs(a, b)
            y, u, *rest = pipe.cut(keep[0], keep[1],
                                   *[logic_product(pairs[n][0][1], pairs[n][1][1])
                                     for n in logic], *keep[2:])
            parts = [rest[logic.index(n)] if n in logic
                     else _block_piece(m, sa, sb, f"{name}{n}", input_registers=False)
                     for n, ((_, sa), (_, sb)) in enumerate(pairs)]
            return parts, [y, u, *rest[len(logic):]]
        parts = _partials(a, b, self._narrow)
        # The registers in the order they had before block_registers: the generic Verilog is
        # then the same, and arith-recip's and arith-rsqrt's measured figures still hold.
        y, u, *rest = pipe.cut(keep[0], keep[1], *parts, *keep[2:])
        return rest[:len(parts)], [y, u, *rest[len(parts):]]

    def _landed_partials(self, m, pipe, a, b, keep, name):
        """As :meth:`_registered_partials`, in three cuts instead of one: the operands'
        register, the product's, and a register the product lands in beside its sum. For the ECP5 with
        ``block_registers`` the first two are the ``MULT18X18D``'s input and output registers,
        so that the multiply runs inside the block and each route to and from it has a cycle to
        itself, wherever the placer puts the block."""
        if self._ecp5 and self._narrow:
            parts, keep = self._landed_with_logic(m, pipe, a, b, keep, name)
        elif self._ecp5:
            parts = _block_partials(m, a, b, name, input_registers=True)
            keep = pipe.cut(*pipe.cut(*keep))
        else:
            a, b, *keep = pipe.cut(a, b, *keep)
            parts = _partials(a, b, self._narrow)
            out = pipe.cut(*parts, *keep)
            parts, keep = out[:len(parts)], out[len(parts):]
        out = pipe.cut(*parts, *keep)
        return out[:len(parts)], out[len(parts):]

    @staticmethod
    def _landed_with_logic(m, pipe, a, b, keep, name):
        """The first two cuts of :meth:`_landed_partials` for the ECP5 with ``narrow_in_logic``:
        a narrow piece's operands in fabric registers, then its rows after one level of sums
        (:func:`~hdl.arith.fpmul.logic_rows`), finished before the landing register, as
        ``FP32_ONE_BLOCK``'s landed pieces (docs/arith.md); the other pieces on blocks with
        their input and output registers. Returns ``(parts, keep)``."""
        pairs, logic = _piece_pairs(a, b)
        operands, inits = [], []
        for n in logic:
            for (shift, piece), whole in zip(pairs[n], (a, b)):
                init = pipe.init_of(whole) >> shift & ((1 << len(piece)) - 1)
                if piece.shape().signed and init >> (len(piece) - 1):
                    init -= 1 << len(piece)
                operands.append(piece)
                inits.append(init)
        *held, = pipe.cut(*operands, *keep, inits=[*inits, *[None] * len(keep)])
        rows = [logic_rows(held[2 * k], held[2 * k + 1], 1) for k in range(len(logic))]
        *held, = pipe.cut(*[value for r in rows for value, _ in r], *held[len(operands):])
        parts, start = [], 0
        for n, ((_, sa), (_, sb)) in enumerate(pairs):
            if n in logic:
                shifts = [shift for _, shift in rows[logic.index(n)]]
                parts.append(logic_sum(list(zip(held[start:], shifts)), len(sa) + len(sb),
                                       sa.shape().signed or sb.shape().signed))
                start += len(shifts)
            else:
                parts.append(_block_piece(m, sa, sb, f"{name}{n}", input_registers=True))
        return parts, held[start:]

    def _step(self, m, pipe, step, y, frac, u, flags):
        """One Newton-Raphson step on ``y`` (``frac`` fraction bits): ``(y, 30, u, flags)`` out.

        Every multiply takes two cycles: the partial products of 17-bit slices (one DSP each),
        then their sum.
        """
        width = error_width(step)
        if self._sqrt:
            parts, (y, u, *flags) = self._registered_partials(m, pipe, y, y, (y, u, *flags),
                                                              f"dsp_square{step}_")
            sq_frac = min(2 * frac, NR_FRAC)
            square = _sum(parts, y, y) >> (2 * frac - sq_frac)   # y**2, sq_frac fraction bits
            y, u, square, *flags = pipe.cut(y, u, square, *flags)
            a, b = u, square
            scale = _MAN + sq_frac
            drop = scale + 1 - NR_FRAC                         # e = (1 - u * y**2) / 2
        else:
            a, b = u, y
            scale = _MAN + frac
            drop = scale - NR_FRAC                             # e = 1 - u * y
        parts, (y, u, *flags) = self._registered_partials(m, pipe, a, b, (y, u, *flags),
                                                          f"dsp_product{step}_")
        product = _sum(parts, a, b)
        diff = (Const(1 << scale, scale + 2) - product).as_signed()
        e = (diff >> drop)[:width].as_signed()
        y, u, e, *flags = pipe.cut(y, u, e, *flags)
        parts, (y, u, *flags) = self._registered_partials(m, pipe, y, e, (y, u, *flags),
                                                          f"dsp_correction{step}_")
        correction = _sum(parts, y, e) >> frac                 # 30 fraction bits
        y_new = (Cat(Const(0, NR_FRAC - frac), y) + correction)[:NR_FRAC + 1]
        y_new, u, *flags = pipe.cut(y_new, u, *flags)
        return y_new, NR_FRAC, u, tuple(flags)


#: Slice width of the split multiplies: a 17-bit unsigned slice fits an 18x18 signed DSP.
_SLICE = 17


def _slices(value):
    """Split ``value`` into ``(shift, slice)`` pairs of at most 17 bits (the top one signed if
    ``value`` is; a signed top slice may take 18 bits)."""
    width, signed = len(value), value.shape().signed
    out, low = [], 0
    while width - low > (_SLICE + 1 if signed else _SLICE):
        out.append((low, value[low:low + _SLICE]))
        low += _SLICE
    top = value[low:]
    out.append((low, top.as_signed() if signed else top))
    return out


def _piece_pairs(a, b):
    """Every pair of a slice of ``a`` and one of ``b`` (each ``(shift, slice)``, as
    :func:`_slices`), in :func:`_partials`' order, and the indices of the narrow pairs
    (:func:`~hdl.arith.fpmul.narrow_piece`) that ``narrow_in_logic`` puts in logic."""
    pairs = [(pa, pb) for pa in _slices(a) for pb in _slices(b)]
    logic = [n for n, ((_, sa), (_, sb)) in enumerate(pairs) if narrow_piece(len(sa), len(sb))]
    return pairs, logic


def _block_piece(m, sa, sb, name: str, *, input_registers: bool):
    """``sa * sb`` on one ECP5 ``MULT18X18D`` (:func:`hdl.arith.dsp.ecp5_product`), the slices'
    signs passed to the block: the product in its output register, the operands in its input
    registers too when ``input_registers``."""
    return ecp5_product(m, sa.as_unsigned(), sb.as_unsigned(), name=name,
                        input_registers=input_registers,
                        signs=(sa.shape().signed, sb.shape().signed))


def _block_partials(m, a, b, name: str, *, input_registers: bool) -> list:
    """:func:`_partials` on ECP5 ``MULT18X18D`` blocks (:func:`_block_piece`)."""
    return [_block_piece(m, sa, sb, f"{name}{n}", input_registers=input_registers)
            for n, ((_, sa), (_, sb)) in enumerate(_piece_pairs(a, b)[0])]


def _partials(a, b, narrow_in_logic: bool = False) -> list:
    """The partial products of ``a * b``, one per pair of slices (each fits one 18x18 DSP); with
    ``narrow_in_logic`` the narrow ones (:func:`~hdl.arith.fpmul.narrow_piece`: the slices of 7
    and 8 bits of a 24- or 25-bit operand's top) in logic (:func:`~hdl.arith.fpmul.
    logic_product`)."""
    return [logic_product(sa, sb) if narrow_in_logic and narrow_piece(len(sa), len(sb))
            else sa * sb for _, sa in _slices(a) for _, sb in _slices(b)]


def _sum(parts, a, b):
    """Sum registered partial products of ``a * b`` (from :func:`_partials`) with their shifts."""
    shifts = [ka + kb for ka, _ in _slices(a) for kb, _ in _slices(b)]
    total = parts[0] << shifts[0]
    for part, shift in zip(parts[1:], shifts[1:]):
        total = total + (part << shift)
    width = len(a) + len(b) + 1
    return total[:width].as_signed() if (a.shape().signed or b.shape().signed) else total[:width]


class Reciprocal(_NewtonRaphson):
    """Compute ``1 / x`` of fp32 values, one per cycle.

    A seed accurate to about 8 bits comes from a 128-entry table indexed by the top 7 mantissa
    bits; each Newton-Raphson step ``y += y * (1 - m * y)`` (fixed point, 30 fraction bits, every
    shift a floor) roughly doubles its correct bits; the result is rounded once to fp32 (nearest
    even). See :mod:`golden.arith.func` for the bit-exact specification.

    Parameters
    ----------
    iterations : int
        Newton-Raphson steps, 0 to 3 (default 2). Worst relative error over all fp32 inputs with a
        normal result: about ``2**-7.9`` (0 steps), ``2**-15.8`` (1), below ``2**-23`` (2, 3).
    block_registers : bool
        ``True``: elaborated for the ECP5 (``platform=hdl.arith.dsp.Target("ecp5")``), each
        partial product is one ``MULT18X18D`` whose output register is the partial-product
        register (:func:`hdl.arith.dsp.ecp5_product` without input registers). The same latency
        and bits. Default ``False``: generic registers for every target.
    round_register : bool
        ``True``: a register between the rounding increment and the choice among the special
        results (:func:`~hdl.arith.float.round_pack`'s ``cut``): one cycle more, the same bits.
        Default ``False``.
    land_products : bool
        ``True``: every multiply between registers of its own, its operands registered once
        more, its product registered, then registered again beside the sum that takes it; with
        ``block_registers`` on the ECP5 the first two are the ``MULT18X18D``'s own input and
        output registers, so that neither route to a block the placer puts far away shares a
        cycle with logic. Two cycles more per multiply (``4 * iterations`` here), the same bits.
        Default ``False``.
    narrow_in_logic : bool
        ``True``: the partial products whose narrower slice has at most 8 bits (the top 7 bits
        of the significand times the seed and times ``y``, the seed times the first error's
        top 8 bits: four of the ten pieces of 2 steps) are shifts and adds in logic instead of
        multiplier blocks. With ``block_registers`` on the ECP5 the narrow pieces stay in logic
        (their products in fabric registers) and the others use their blocks' output
        registers; with ``land_products`` too, a narrow piece's operands are registered in
        fabric, its rows after one level of sums at the product's cut, and its sum finished
        before the landing register. The same latency and bits. Default ``False``.

    Members
    -------
    i : In(stream.Signature(StructLayout({"x": 32}), always_ready=True))
        Arguments (fp32); a new one may come every cycle.
    o : Out(stream.Signature(StructLayout({"y": 32}), always_ready=True))
        Results (fp32), ``latency`` cycles after their arguments.

    Latency is ``4 + 4 * iterations`` cycles (``4 + 8 * iterations`` with ``land_products``, one
    more with ``round_register``); throughput one result per cycle.

    Special values: 1/(+-0) = +-inf (subnormals are zeros), 1/(+-inf) = +-0, NaN gives the
    canonical NaN. ``|x| > 2**126`` gives +-0 (the result would be subnormal);
    1/(+-2**126) = +-2**-126. Powers of two give exact results.
    """

    _sqrt = False
    _CUTS_PER_STEP = 4
    _MULTIPLIES_PER_STEP = 2


class RSqrt(_NewtonRaphson):
    """Compute ``1 / sqrt(x)`` of fp32 values, one per cycle.

    The argument is written ``u * 2**(2k)`` with ``u`` in [1, 4); a seed accurate to about 8 bits
    comes from a 256-entry table indexed by the exponent parity and the top 7 mantissa bits; each
    Newton-Raphson step ``y += y * (1 - u * y**2) / 2`` (fixed point, 30 fraction bits, every shift
    a floor) roughly doubles its correct bits; the result is rounded once to fp32.

    Parameters
    ----------
    iterations : int
        Newton-Raphson steps, 0 to 3 (default 2). Worst relative error over all positive normal
        fp32 inputs: about ``2**-8.7`` (0 steps), ``2**-16.8`` (1), below ``2**-23`` (2, 3).
    block_registers, round_register, land_products, narrow_in_logic : bool
        As :class:`Reciprocal`'s (``land_products``: three multiplies a step, ``6 * iterations``
        cycles more).

    Members
    -------
    i, o
        As :class:`Reciprocal`'s: fp32 arguments ``x``, fp32 results ``y``.

    Latency is ``4 + 6 * iterations`` cycles (``4 + 12 * iterations`` with ``land_products``, one
    more with ``round_register``); throughput one result per cycle.

    Special values (IEEE 754 rSqrt with flush-to-zero): rsqrt(+0) = +inf, rsqrt(-0) = -inf
    (subnormals are zeros of their sign), rsqrt(x < 0) = NaN (also for -inf), rsqrt(+inf) = +0,
    NaN gives the canonical NaN. Results never overflow or underflow (they lie in
    ``(2**-64, 2**63]``). Even powers of two give exact results.
    """

    _sqrt = True
    _CUTS_PER_STEP = 6
    _MULTIPLIES_PER_STEP = 3


#: A reciprocal on six multiplier blocks (the four narrow pieces of its 2 steps in logic,
#: ``narrow_in_logic``), as a unit factory; the DXE controller's scalar path and activation
#: unit used it in sessions 29 and 30 (docs/rdxe.md 14.4). On the ECP5 each block's product is
#: in its own output register: the fabric register -> route -> multiply -> route -> fabric
#: register paths through the blocks were the engine's largest failing group at session 29.
#: The same latency and bits as the default unit.
RECIP_SIX_BLOCKS = partial(Reciprocal, narrow_in_logic=True, block_registers=True)
#: A reciprocal with its products landed (``land_products``: the operands in the blocks' input
#: registers, each product a cycle in a fabric register after its block's own), as a unit
#: factory; the DXE controller's scalar path and activation unit use it since session 31: the
#: six-block unit's pieces in logic and its correction's sum after a distant block failed by
#: 0.4 to 1.3 ns at every seed (docs/rdxe.md 14.4, round 5). 8 cycles more. Ten blocks: with
#: ``narrow_in_logic`` too (six) the engine routed worse (session 37, round 17).
RECIP_LANDED = partial(Reciprocal, block_registers=True, land_products=True)
