"""cocotb testbench of the integer arithmetic units: requantizer and integer dot product.

The launcher names the block and its parameters; each test picks the TB class for that block.
Expected outputs come from :mod:`golden.arith.requant` and :mod:`golden.arith.idot`, fed by the
input monitor (what the design really received). The units are always ready: inputs get random
idle cycles (bubbles in the valid stream), outputs cannot be back-pressured.
"""

from __future__ import annotations

from fractions import Fraction

import cocotb

from golden.arith import idot as idot_golden
from golden.arith import requant as requant_golden
from hdl.arith.requant import SHIFT_BITS

from .functional import sampler, value_class, value_classes
from .streams import to_signed, to_unsigned
from .tb import BlockTB, select_tb

#: How ``x * m / 2**shift`` rounds to an integer (half to even): no fraction; below or above
#: one half; a tie that stays on its even floor or goes up to the even ceiling.
ROUNDING = ("exact", "below_half", "tie_even_floor", "tie_odd_floor", "above_half")


class RequantTB(BlockTB):
    """``x``, ``m``, ``shift`` in; ``y = clamp(round_half_even(x * m / 2**shift))`` out.

    Functional coverage, of each input the design took: how the exact quotient rounds
    (:data:`ROUNDING`), whether the rounded value saturates at either limit, the sign of the
    product and the shift's class (zero, between, the largest)."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        p = self.params
        self.m_range = ((-(1 << (p.mult_bits - 1)), (1 << (p.mult_bits - 1)) - 1)
                        if p.mult_signed else (0, (1 << p.mult_bits) - 1))
        self.lo, self.hi = requant_golden.limits(p.out_bits, p.clamp)
        block = self.block.name
        self.samplers = {"i": sampler({
            f"{block}.rounding": (self._rounding, ROUNDING),
            f"{block}.saturation": (self._saturation, ("inside", "high", "low")),
            f"{block}.product_sign": (lambda i: self._sign(self._quotient(i)),
                                      ("negative", "zero", "positive")),
            f"{block}.shift": (lambda i: value_class(i["shift"], SHIFT_BITS),
                               value_classes(SHIFT_BITS))})}

    def _quotient(self, item) -> Fraction:
        p = self.params
        x = to_signed(item["x"], p.in_bits)
        m = to_signed(item["m"], p.mult_bits) if p.mult_signed else item["m"]
        return Fraction(x * m, 2 ** item["shift"])

    @staticmethod
    def _sign(q: Fraction) -> str:
        return "negative" if q < 0 else "zero" if q == 0 else "positive"

    def _rounding(self, item) -> str:
        q = self._quotient(item)
        floor = q.numerator // q.denominator
        frac = q - floor
        if frac == 0:
            return "exact"
        if frac == Fraction(1, 2):
            return "tie_even_floor" if floor % 2 == 0 else "tie_odd_floor"
        return "below_half" if frac < Fraction(1, 2) else "above_half"

    def _saturation(self, item) -> str:
        rounded = round(self._quotient(item))           # Python rounds half to even
        return "high" if rounded > self.hi else "low" if rounded < self.lo else "inside"

    def model(self, stream, item):
        p = self.params
        x = to_signed(item["x"], p.in_bits)
        m = to_signed(item["m"], p.mult_bits) if p.mult_signed else item["m"]
        y = int(requant_golden.requantize(x, m, item["shift"], out_bits=p.out_bits,
                                          clamp=p.clamp))
        return {"o": [{"y": to_unsigned(y, p.out_bits)}]}

    def item(self, x, m, shift):
        p = self.params
        return {"x": to_unsigned(x, p.in_bits), "m": to_unsigned(m, p.mult_bits), "shift": shift}

    def corners(self):
        p = self.params
        return [self.item(*c) for c in requant_golden.corner_cases(
            p.in_bits, p.mult_bits, p.mult_signed, p.out_bits)]

    def random_items(self, count: int):
        """Random operands; the shift is drawn so that most results land inside the clamp range
        (the product's magnitude shifted down to about ``out_bits``) and some saturate."""
        p, rng = self.params, self.rng
        items = []
        for _ in range(count):
            x = rng.randint(-(1 << (p.in_bits - 1)), (1 << (p.in_bits - 1)) - 1)
            m = rng.randint(*self.m_range)
            magnitude = abs(x * m).bit_length()
            shift = max(0, min(63, magnitude - p.out_bits + rng.randint(-2, 3)))
            if rng.random() < 0.1:
                shift = rng.randint(0, 63)
            items.append(self.item(x, m, shift))
        return items


class IntDotTB(BlockTB):
    """Operand vectors in, their exact dot product out.

    Functional coverage, of each result the design gave: its sign, and whether it is the
    largest or the least sum the operand widths allow (every lane at its extreme product)."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        p = self.params
        self.lanes = p.lanes
        a_lo, a_hi = -(1 << (p.a_bits - 1)), (1 << (p.a_bits - 1)) - 1
        b_lo, b_hi = -(1 << (p.b_bits - 1)), (1 << (p.b_bits - 1)) - 1
        self.largest = self.lanes * a_lo * b_lo
        self.least = self.lanes * min(a_lo * b_hi, a_hi * b_lo)
        self.samplers = {"o": sampler({f"{self.block.name}.result": (
            self._result, ("least", "negative", "zero", "positive", "largest"))})}

    def _result(self, item) -> str:
        y = to_signed(item["y"], self.params.acc_bits)
        if y in (self.largest, self.least):
            return "largest" if y == self.largest else "least"
        return "negative" if y < 0 else "zero" if y == 0 else "positive"

    def model(self, stream, item):
        p = self.params
        a = [to_signed(item[f"a.{k}"], p.a_bits) for k in range(self.lanes)]
        b = [to_signed(item[f"b.{k}"], p.b_bits) for k in range(self.lanes)]
        y = int(idot_golden.dot(a, b))
        return {"o": [{"y": to_unsigned(y, p.acc_bits)}]}

    def item(self, a, b):
        p = self.params
        out = {f"a.{k}": to_unsigned(v, p.a_bits) for k, v in enumerate(a)}
        out.update({f"b.{k}": to_unsigned(v, p.b_bits) for k, v in enumerate(b)})
        return out

    def corners(self):
        """Every lane at the extremes (the largest and least sums), mixed signs, one hot."""
        p, n = self.params, self.lanes
        a_lo, a_hi = -(1 << (p.a_bits - 1)), (1 << (p.a_bits - 1)) - 1
        b_lo, b_hi = -(1 << (p.b_bits - 1)), (1 << (p.b_bits - 1)) - 1
        vectors = [([a_lo] * n, [b_lo] * n), ([a_lo] * n, [b_hi] * n), ([a_hi] * n, [b_lo] * n),
                   ([a_hi] * n, [b_hi] * n), ([0] * n, [0] * n), ([a_lo] * n, [0] * n),
                   ([a_lo if k % 2 else a_hi for k in range(n)], [b_lo] * n),
                   ([a_lo] * n, [b_lo if k % 2 else b_hi for k in range(n)]),
                   ([-1] * n, [-1] * n), ([1] * n, [-1] * n)]
        for k in range(n):
            a, b = [0] * n, [0] * n
            a[k], b[k] = a_lo, b_lo
            vectors.append((a, b))
        return [self.item(a, b) for a, b in vectors]

    def random_items(self, count: int):
        p, rng = self.params, self.rng
        items = []
        for _ in range(count):
            extreme = rng.random() < 0.2       # some vectors drawn from the extremes only
            a_lo, a_hi = -(1 << (p.a_bits - 1)), (1 << (p.a_bits - 1)) - 1
            b_lo, b_hi = -(1 << (p.b_bits - 1)), (1 << (p.b_bits - 1)) - 1
            a = [rng.choice((a_lo, a_hi)) if extreme else rng.randint(a_lo, a_hi)
                 for _ in range(self.lanes)]
            b = [rng.choice((b_lo, b_hi)) if extreme else rng.randint(b_lo, b_hi)
                 for _ in range(self.lanes)]
            items.append(self.item(a, b))
        return items


_TB = {"arith-requant": RequantTB, "arith-idot": IntDotTB}


@cocotb.test()
async def random_and_corners(dut):
    """Directed corner cases then random operands, with random bubbles in the valid stream."""
    tb = select_tb(dut, _TB, idle=0.3)
    await tb.reset()
    await tb.check_items(tb.corners() + tb.random_items(3000))


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles, one result per cycle, ``component.latency`` cycles after the input."""
    tb = select_tb(dut, _TB, idle=0.0)
    await tb.run_full_rate(tb.random_items(500))
