"""Pipelined floating-point multiplier for any pair of input formats and a chosen result format."""

from __future__ import annotations

import operator
from functools import partial
from typing import Callable, Sequence

from amaranth import Cat, Const, Module, Mux, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import Pipeline, cut_order
from ..validate import integer
from .dsp import ECP5_MULT_WIDTH, ecp5_product, family
from .float import hidden_bit_init, normal_significand, round_pack, unpack
from .format import FP32, FloatFormat, float_format

__all__ = ["FloatMultiplier", "exact_product", "logic_product", "narrow_piece", "CUT_POINTS",
           "SPLITS", "FP32_ONE_BLOCK", "NARROW_LOGIC_BITS"]

#: Cut points of the multiplier datapath: 0 after unpacking, 1 after the partial products of
#: the significand pieces, 2 after their sum, 3 after normalization, 4 inside the rounding (after
#: the increment, before the choice among the special results).
#: Order in which they become registers as ``stages`` grows.
_CUT_ORDER = (1, 2, 0, 3, 4)
#: The cut points by index: where each one sits in the datapath.
CUT_POINTS = ("unpacked", "partial products", "product", "normalized", "rounding increment")
#: Widest significand multiplied in one piece by the ``"both"`` split (both operands are halved
#: when either is wider, so that each piece is at most 12 x 12 bits).
_DSP_BITS = 12
#: Widest operand of one hardware multiplier: the ``"wide"`` split halves only the operands wider
#: than this.
_DSP_WIDTH = ECP5_MULT_WIDTH
#: How the significand product is cut into pieces (see :class:`FloatMultiplier`).
SPLITS = ("both", "wide", "dsp18")
#: The ``"dsp18"`` split computes a partial product in logic (shifts and adds, no multiplier
#: block) when its narrower piece has at most this many bits and its wider one at most
#: :data:`_LOGIC_WIDE` (6 x 6 and 6 x 8 products: a few dozen LUTs).
_LOGIC_NARROW = 6
_LOGIC_WIDE = 8
#: The units' ``narrow_in_logic`` options (this multiplier's, ``Reciprocal``/``RSqrt``'s,
#: ``Requantizer``'s): a partial product whose narrower side has at most this many bits is
#: computed in logic whatever its wider side (:func:`narrow_piece`).
NARROW_LOGIC_BITS = 8


def narrow_piece(a_bits: int, b_bits: int, bits: int = NARROW_LOGIC_BITS) -> bool:
    """Whether a partial product of ``a_bits`` x ``b_bits`` is narrow enough for logic under a
    unit's ``narrow_in_logic``: its narrower side at most ``bits`` (:data:`NARROW_LOGIC_BITS`)."""
    return min(a_bits, b_bits) <= bits


def _first(values):
    return values[0]


def _pairwise(rows: Sequence, levels: int | None = None, add=operator.add) -> list:
    """``rows`` after ``levels`` levels of pairwise sums by ``add`` (``None``: down to one
    row)."""
    rows, level = list(rows), 0
    while len(rows) > 1 and (levels is None or level < levels):
        rows = [add(rows[n], rows[n + 1]) if n + 1 < len(rows) else rows[n]
                for n in range(0, len(rows), 2)]
        level += 1
    return rows


def _add_rows(low: tuple[Value, int], high: tuple[Value, int]) -> tuple[Value, int]:
    """The sum of two shifted rows, with the shift below which both are zero."""
    return low[0] + high[0], min(low[1], high[1])


def logic_rows(x: Value, y: Value, levels: int | None = None) -> list[tuple[Value, int]]:
    """The rows of :func:`logic_product` ``(x, y)`` after ``levels`` levels of its pairwise
    sums (``None``: every level, one row), each as ``(value, shift)`` for ``value << shift``:
    a product split across a register registers the values, not the shifts' zeros (flip-flops
    of a constant input), and sums them by :func:`logic_sum`. The sums are of the whole
    shifted rows, as :func:`logic_product`'s (its carry chains and LUTs as synthesized)."""
    if len(x) < len(y):
        x, y = y, x
    rows = [Mux(y[j], x, 0) << j for j in range(len(y))]
    if y.shape().signed:
        rows[-1] = -rows[-1]
    summed = _pairwise(list(zip(rows, range(len(y)))), levels, _add_rows)
    return [(value[shift:].as_signed() if value.shape().signed else value[shift:], shift)
            for value, shift in summed]


def logic_sum(rows: Sequence[tuple[Value, int]], width: int, signed_: bool) -> Value:
    """The product of :func:`logic_rows`' ``rows``: their pairwise sums, ``width`` bits, signed
    when ``signed_`` (either operand was)."""
    product = _pairwise([value << shift for value, shift in rows])[0][:width]
    return product.as_signed() if signed_ else product


def logic_product(x: Value, y: Value) -> Value:
    """``x * y`` as a tree of shifted, gated copies of the wider operand (no multiplier block:
    Yosys maps every product of 2 x 2 bits or more to a ``MULT18X18D`` on the ECP5).

    ``len(x) + len(y)`` bits, signed when either operand is (two's complement: a signed
    narrower operand's top row is subtracted)."""
    return logic_sum(logic_rows(x, y), len(x) + len(y),
                     x.shape().signed or y.shape().signed)


def _sum_rows(terms) -> Value:
    """Sum ``(value, shift)`` terms: terms that do not overlap share a row (concatenation, no
    adder), and the rows are added pairwise."""
    rows = []                               # each: list of (value, shift), ordered by shift
    for value, shift in sorted(terms, key=lambda t: t[1]):
        for row in rows:
            last, last_shift = row[-1]
            if last_shift + len(last) <= shift:
                row.append((value, shift))
                break
        else:
            rows.append([(value, shift)])
    values = []
    for row in rows:
        parts, position = [], 0
        for value, shift in row:
            parts += [Const(0, shift - position), value] if shift > position else [value]
            position = shift + len(value)
        values.append(Cat(*parts))
    return _pairwise(values)[0]


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


def _product_flags(operands):
    """The product's ``Cat(sign, is_nan, is_inf, is_zero)`` from its sign and the operands'
    classes, ``Cat(sign, a.is_nan, a.is_inf, a.is_zero, b.is_nan, b.is_inf, b.is_zero)``: NaN
    from a NaN, or zero times infinity."""
    sign, a_nan, a_inf, a_zero, b_nan, b_inf, b_zero = (operands[k] for k in range(7))
    return Cat(sign, a_nan | b_nan | (a_zero & b_inf) | (a_inf & b_zero), a_inf | b_inf,
               a_zero | b_zero)


class FloatMultiplier(wiring.Component):
    """Multiply two floats, rounding once to the result format.

    Parameters
    ----------
    a_fmt, b_fmt : FloatFormat or str
        Input formats (``"bf16"``, ``"fp16"``, ``"fp32"`` or a :class:`FloatFormat`).
    out_fmt : FloatFormat or str
        Result format (default fp32).
    stages : int
        Register stages, 1 to 6 (default 5): the latency in cycles. The sixth cuts the rounding
        in two (increment, then the choice among the special results).
    cuts : sequence of int or None
        The cut points to register (``stages - 1`` indices into :data:`CUT_POINTS`) instead of
        the default choice for ``stages``. For example ``stages=5, cuts=(0, 1, 2, 4)`` cuts
        the rounding instead of registering the one-bit normalization on its own. The latency
        is still ``stages``; no result bit changes.
    split : str
        How the significand product is cut into pieces, each one hardware multiplier (an ECP5
        ``MULT18X18D``) summed in the next step. ``"both"`` (default): when either significand
        is wider than 12 bits, both are halved (fp32 x fp32 and fp32 x bf16: four pieces).
        ``"wide"``: only significands wider than 18 bits are halved (fp32 x fp32: four pieces,
        fp32 x bf16: two). ``"dsp18"``: significands wider than 18 bits are cut into their low
        18 bits and the rest, and the small products of the rests (6 x 6, 6 x 8 bits) are
        computed in logic: fp32 x fp32 takes three multiplier blocks, fp32 x bf16 one. None
        changes a result bit.
    private_operands : bool
        ``True``: every piece gets its own registered copy of its operand slices (at cut 0,
        registered from ``stages = 4`` on), so that each register feeds one multiplier block,
        and copies of one slice stay separate flip-flops in synthesis (see
        :func:`~hdl.pipeline.distinct_copies`). Place-and-route can then put every copy beside its
        block wherever the blocks land. Default ``False``: one register per significand.
        No result bit changes, nor the latency.
    operand_copy : int
        0 (default) or 1. With ``private_operands``, copy 1 inverts the power-on values of the
        operand registers, so that two multipliers fed by the same operands (lanes that share
        a scale factor) keep separate registers in synthesis instead of one register driving
        both units' blocks. No result bit changes, nor the latency.

    block_registers : bool
        ``True``: elaborated for the ECP5 (``platform=hdl.arith.dsp.Target("ecp5")``), a unit
        whose cuts 0 (operands) and 1 (pieces) are both registers instantiates one
        ``MULT18X18D`` per piece on a block and uses the block's input and output registers for
        those two cuts (:func:`hdl.arith.dsp.ecp5_product`); pieces in logic (``"dsp18"``'s
        narrow ones, ``narrow_in_logic``) keep fabric registers there, and ``private_operands``
        and ``operand_copy`` are not applied to them. The same latency and bits. Default
        ``False``: generic registers for every target (whether the blocks' registers help
        depends on the placement around them: docs/arith.md).

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
    land_pieces : bool
        ``True``: the pieces' products registered once more before their sum (one cycle more
        than ``stages``), so that the route from a multiplier block the placer puts far away
        has a cycle to itself; a piece in logic registers its rows after one level of its sums
        at the pieces' cut and finishes them before the landing register (:func:`logic_rows`,
        :func:`logic_sum`). The same bits. Default ``False``.
    narrow_in_logic : bool
        ``True``: every piece whose narrower side has at most 8 bits is computed in logic
        (:func:`logic_product`) instead of a multiplier block: with ``split="dsp18"`` an fp32 x
        fp32 product takes one block (the low 18 x 18 bits; the 18 x 6, 6 x 18 and 6 x 6 pieces
        in logic, about 300 LUT4 more). A piece in logic keeps fabric registers with
        ``block_registers``. The same latency and bits. Default ``False``.
    """

    def __init__(self, a_fmt: FloatFormat | str = FP32, b_fmt: FloatFormat | str = FP32,
                 out_fmt: FloatFormat | str = FP32, *, stages: int = 5,
                 cuts: Sequence[int] | None = None, split: str = "both",
                 private_operands: bool = False, operand_copy: int = 0,
                 block_registers: bool = False, land_pieces: bool = False,
                 narrow_in_logic: bool = False):
        (self._a_fmt, self._b_fmt, self._out_fmt, self._stages, self._order, self._split,
         self._private, self._blocks, self._copy, self._narrow, self._land) = self._checked(
            a_fmt, b_fmt, out_fmt, stages, cuts, split, private_operands, operand_copy,
            block_registers, land_pieces, narrow_in_logic)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"a": self._a_fmt.width,
                                                        "b": self._b_fmt.width}),
                                     always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": self._out_fmt.width}),
                                      always_ready=True)),
        })

    @staticmethod
    def _checked(a_fmt, b_fmt, out_fmt, stages, cuts, split, private_operands, operand_copy,
                 block_registers, land_pieces, narrow_in_logic=False) -> tuple:
        """The constructor's arguments checked and normalized, in the order of its fields."""
        fmts = float_format(a_fmt), float_format(b_fmt), float_format(out_fmt)
        stages = integer(stages, "Multiplier stage count", 1, len(_CUT_ORDER) + 1)
        order = cut_order(_CUT_ORDER, stages, cuts, "Multiplier")
        if split not in SPLITS:
            raise ValueError(f"Multiplier split must be one of {', '.join(map(repr, SPLITS))}, "
                             f"not {split!r}")
        if not isinstance(private_operands, bool):
            raise TypeError(f"Multiplier private_operands must be True or False, not "
                            f"{private_operands!r}")
        for flag, value in (("block_registers", block_registers), ("land_pieces", land_pieces),
                            ("narrow_in_logic", narrow_in_logic)):
            if not isinstance(value, bool):
                raise TypeError(f"Multiplier {flag} must be True or False, not {value!r}")
        copy = integer(operand_copy, "Multiplier operand copy", 0, 1)
        return (*fmts, stages, order, split, private_operands, block_registers, copy,
                narrow_in_logic, land_pieces)

    @classmethod
    def latency_of(cls, a_fmt: FloatFormat | str = FP32, b_fmt: FloatFormat | str = FP32,
                   out_fmt: FloatFormat | str = FP32, *, stages: int = 5,
                   cuts: Sequence[int] | None = None, split: str = "both",
                   private_operands: bool = False, operand_copy: int = 0,
                   block_registers: bool = False, land_pieces: bool = False,
                   narrow_in_logic: bool = False) -> int:
        """Return the latency of a multiplier with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``stages`` cycles, one more with ``land_pieces``.
        """
        checked = cls._checked(a_fmt, b_fmt, out_fmt, stages, cuts, split, private_operands,
                               operand_copy, block_registers, land_pieces, narrow_in_logic)
        return checked[3] + checked[-1]                            # stages + land_pieces

    a_fmt = property(lambda self: self._a_fmt)
    b_fmt = property(lambda self: self._b_fmt)
    out_fmt = property(lambda self: self._out_fmt)
    stages = property(lambda self: self._stages)
    split = property(lambda self: self._split)
    private_operands = property(lambda self: self._private)
    block_registers = property(lambda self: self._blocks)

    land_pieces = property(lambda self: self._land)
    narrow_in_logic = property(lambda self: self._narrow)

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: :meth:`latency_of` its arguments."""
        return self.latency_of(self._a_fmt, self._b_fmt, self._out_fmt, stages=self._stages,
                               land_pieces=self._land)

    @property
    def exact(self) -> str:
        """``"always"``, ``"in range"`` or ``"no"``: see :func:`exact_product`."""
        return exact_product(self._a_fmt, self._b_fmt, self._out_fmt)

    def _pieces(self, wa: int, wb: int):
        """The bit ranges ``(lo, hi)`` of each significand's pieces."""
        def halves(width):
            return [(0, (width + 1) // 2), ((width + 1) // 2, width)]
        if self._split == "both":
            if max(wa, wb) <= _DSP_BITS:
                return [(0, wa)], [(0, wb)]
            return halves(wa), halves(wb)
        if self._split == "wide":
            return ([(0, wa)] if wa <= _DSP_WIDTH else halves(wa),
                    [(0, wb)] if wb <= _DSP_WIDTH else halves(wb))
        return ([(0, wa)] if wa <= _DSP_WIDTH else [(0, _DSP_WIDTH), (_DSP_WIDTH, wa)],
                [(0, wb)] if wb <= _DSP_WIDTH else [(0, _DSP_WIDTH), (_DSP_WIDTH, wb)])

    def _in_logic(self, pa, pb) -> bool:
        """Whether the product of pieces ``pa`` and ``pb`` is computed without a multiplier."""
        widths = sorted((pa[1] - pa[0], pb[1] - pb[0]))
        if self._narrow and narrow_piece(*widths):
            return True
        return (self._split == "dsp18" and widths[0] <= _LOGIC_NARROW
                and widths[1] <= _LOGIC_WIDE)

    def _in_blocks(self, platform, pipe, pairs) -> bool:
        """Whether the pieces on multiplier blocks use the ECP5 blocks' own registers
        (:mod:`hdl.arith.dsp`): when asked for, for that target, when cuts 0 (operands) and 1
        (pieces) are both registers and at least one piece is on a block (pieces in logic keep
        fabric registers at the same two cuts)."""
        return (self._blocks and family(platform) == "ecp5" and pipe.registered(0)
                and pipe.registered(1) and not all(self._in_logic(*pair) for pair in pairs))

    def _logic_terms(self, x, y) -> tuple[list, Callable]:
        """A piece in logic at the pieces' cut: its product, or with ``land_pieces`` its rows
        after one level of sums, finished between that cut and the landing register (a logic
        piece's tree took the whole cycle, docs/rdxe.md 14.4, round 16); and the function that
        makes the product of what the cut registered."""
        if not self._land:
            return [logic_product(x, y)], _first
        width, signed_ = len(x) + len(y), x.shape().signed or y.shape().signed
        rows = logic_rows(x, y, 1)
        shifts = [shift for _, shift in rows]
        return ([value for value, _ in rows],
                lambda held: logic_sum(list(zip(held, shifts)), width, signed_))

    @staticmethod
    def _cut_pieces(pipe, terms, *rest) -> tuple[list, list]:
        """Register the pieces' ``terms`` (``(values, finish)`` each) and ``rest`` at the
        pieces' cut; return each piece's ``finish`` of its registered values, and ``rest``."""
        flat = [value for values, _ in terms for value in values]
        held = list(pipe.cut(*flat, *rest))
        pieces, k = [], 0
        for values, finish in terms:
            pieces.append(finish(held[k:k + len(values)]))
            k += len(values)
        return pieces, held[k:]

    def elaborate(self, platform):
        m = Module()
        af, bf, of = self._a_fmt, self._b_fmt, self._out_fmt
        if self._land:
            # One more cut point after the pieces' (index 2), always a register; the others
            # keep their order.
            pipe = Pipeline(m, self.i.valid, cuts=len(_CUT_ORDER) + 1, stages=self._stages + 1,
                            order=(2, *(c + (c >= 2) for c in self._order)))
        else:
            pipe = Pipeline(m, self.i.valid, cuts=len(_CUT_ORDER), stages=self._stages,
                            order=self._order)
        a = unpack(af, self.i.payload.a)
        b = unpack(bf, self.i.payload.b)
        exp = a.exp + b.exp
        # Each operand's class as it is, combined into the product's after the operands' cut
        # (_product_flags): the combination behind a select of the operands failed at 100 MHz
        # (docs/arith_float.md).
        flags = Cat(a.sign ^ b.sign, a.is_nan, a.is_inf, a.is_zero, b.is_nan, b.is_inf, b.is_zero)

        # The significands multiplied have their hidden bit set whatever the input's class: when
        # either input is zero, subnormal, infinite or NaN, the flags alone give the result
        # (round_pack's special results take priority), so such a product is never used. The
        # operand bits then reach the multipliers through no logic at all.
        a = a._replace(sig=normal_significand(af, self.i.payload.a))
        b = b._replace(sig=normal_significand(bf, self.i.payload.b))
        # The significand product as partial products of pieces, one hardware multiplier each
        # (no glue logic around them), summed in the next step: multipliers and adders get their
        # own stages.
        wa, wb = len(a.sig), len(b.sig)
        pieces_a, pieces_b = self._pieces(wa, wb)
        pairs = [(pa, pb) for pa in pieces_a for pb in pieces_b]
        if self._in_blocks(platform, pipe, pairs):
            # The operand and product registers of each piece on a block are the ECP5 block's
            # own (the same two cuts, the same bits): hdl.arith.dsp. A piece in logic keeps its
            # fabric registers at those cuts.
            logic = [n for n, pair in enumerate(pairs) if self._in_logic(*pair)]
            slices = [(a.sig[pa[0]:pa[1]], b.sig[pb[0]:pb[1]]) for pa, pb in pairs]
            # The hidden bit powers on at its constant (Pipeline.cut): no flip-flop holds it.
            inits = [hidden_bit_init(w, *piece) for n in logic
                     for w, piece in zip((wa, wb), pairs[n])]
            *held, exp, flags = pipe.cut(*[v for n in logic for v in slices[n]], exp, flags,
                                         inits=inits + [0, 0])
            flags = _product_flags(flags)
            products, (exp, flags) = self._cut_pieces(
                pipe, [self._logic_terms(held[2 * k], held[2 * k + 1])
                       for k in range(len(logic))], exp, flags)
            parts = [products[logic.index(n)] if n in logic
                     else ecp5_product(m, *slices[n], name=f"dsp{n}")
                     for n in range(len(pairs))]
            factors = None
        elif self._private:
            # One copy of each slice per piece; the copies of a slice differ in power-on value.
            operands, inits, uses = [], [], {}
            for pa, pb in pairs:
                for slice_, value in ((("a",) + pa, a.sig), (("b",) + pb, b.sig)):
                    width = slice_[2] - slice_[1]
                    operands.append(value[slice_[1]:slice_[2]])
                    inits.append((1 << width) - 1 if (uses.get(slice_, 0) + self._copy) % 2
                                 else hidden_bit_init(len(value), *slice_[1:]))
                    uses[slice_] = uses.get(slice_, 0) + 1
            *operands, exp, flags = pipe.cut(*operands, exp, flags, inits=inits + [0, 0])
            flags = _product_flags(flags)
            factors = [(operands[2 * n], operands[2 * n + 1]) for n in range(len(pairs))]
        else:
            sig_a, sig_b, exp, flags = pipe.cut(a.sig, b.sig, exp, flags,
                                                inits=[hidden_bit_init(wa), hidden_bit_init(wb),
                                                       0, 0])
            flags = _product_flags(flags)
            factors = [(sig_a[pa[0]:pa[1]], sig_b[pb[0]:pb[1]]) for pa, pb in pairs]
        if factors is not None:
            parts, (exp, flags) = self._cut_pieces(
                pipe, [self._logic_terms(x, y) if self._in_logic(*pair) else ([x * y], _first)
                       for (x, y), pair in zip(factors, pairs)], exp, flags)
        if self._land:
            *parts, exp, flags = pipe.cut(*parts, exp, flags)
        if len(parts) == 1:
            product = parts[0]
        else:
            shifted = [(part, pa[0] + pb[0]) for part, (pa, pb) in zip(parts, pairs)]
            if self._split == "both":
                product = None
                for part, shift in shifted:
                    term = part << shift if shift else part
                    product = term if product is None else product + term
            else:
                product = _sum_rows(shifted)
            product = product[:wa + wb]
        product, exp, flags = pipe.cut(product, exp, flags)

        width = len(product)
        top = product[width - 1]
        # Leading one at the top bit (weight 2**(exp+1)) or the one below it (weight 2**exp).
        sig = Mux(top, product, Cat(Const(0, 1), product[:width - 1]))
        exp = exp + top
        low = width - of.precision - 1          # bits below the guard bit
        if low >= 2:
            # The OR of the bits below the guard, taken from the product beside the choice
            # (round_pack's sticky, the same bits): in the rounding's cycle it stood in front of
            # the increment's carry chain (docs/arith_float.md).
            sticky = product[:low - 1].any() | (top & product[low - 1])
            sig, exp, flags, sticky = pipe.cut(sig[low:], exp, flags, sticky)
        else:
            if width < of.precision:
                sig = Cat(Const(0, of.precision - width), sig)
            sticky = Const(0, 1)
            sig, exp, flags = pipe.cut(sig, exp, flags)

        sign, is_nan, is_inf, is_zero = flags[0], flags[1], flags[2], flags[3]
        y = round_pack(of, sign, exp, sig, sticky, is_zero=is_zero, is_inf=is_inf,
                       is_nan=is_nan, cut=pipe.cut)
        pipe.output(self.o, {"y": y})
        return m



#: An fp32 x fp32 -> fp32 multiplier on one multiplier block (``"dsp18"`` with
#: ``narrow_in_logic``: the 18 x 6, 6 x 18 and 6 x 6 pieces in logic), as a unit factory; the
#: DXE controller's units use it (docs/rdxe.md 14.2). Six stages: the rounding cut in two. On
#: the ECP5 the block's own registers hold its piece's operands and product: the routes to and
#: from a block far from its fabric registers were most of the engine's failing paths (14.4).
#: The pieces land (seven cycles): the logic pieces' trees are cut in two (round 16).
FP32_ONE_BLOCK = partial(FloatMultiplier, FP32, FP32, FP32, split="dsp18", narrow_in_logic=True,
                         stages=6, block_registers=True, land_pieces=True)
