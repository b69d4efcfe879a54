"""cocotb testbench of the integer arithmetic units: requantizer and integer dot product.

The launcher names the block and its parameters; each test picks the TB class for that block.
Expected outputs come from :mod:`golden.arith.requant` and :mod:`golden.arith.idot`, fed by the
input monitor (what the design really received). The units are always ready: inputs get random
idle cycles (bubbles in the valid stream), outputs cannot be back-pressured.
"""

from __future__ import annotations

import cocotb

from golden.arith import idot as idot_golden
from golden.arith import requant as requant_golden

from .streams import to_signed, to_unsigned
from .tb import BlockTB, select_tb


class RequantTB(BlockTB):
    """``x``, ``m``, ``shift`` in; ``y = clamp(round_half_even(x * m / 2**shift))`` out."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        p = self.params
        self.m_range = ((-(1 << (p.mult_bits - 1)), (1 << (p.mult_bits - 1)) - 1)
                        if p.mult_signed else (0, (1 << p.mult_bits) - 1))

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
    """Operand vectors in, their exact dot product out."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        self.lanes = self.params.lanes

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


def make_tb(dut, **kwargs):
    return select_tb(dut, _TB, **kwargs)


@cocotb.test()
async def random_and_corners(dut):
    """Directed corner cases then random operands, with random bubbles in the valid stream."""
    tb = make_tb(dut, idle=0.3)
    await tb.reset()
    tb.send("i", tb.corners() + tb.random_items(3000))
    await tb.drain()
    tb.log.info("%d outputs matched the golden model", tb.scoreboards["o"].matched)


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles, one result per cycle, ``component.latency`` cycles after the input."""
    tb = make_tb(dut, idle=0.0)
    await tb.run_full_rate(tb.random_items(500))
