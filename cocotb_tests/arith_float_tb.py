"""cocotb testbench of the floating-point units: multiplier, adder, multiply-add, conversions and
the dot product.

The launcher names the block and its parameters; each test picks the TB class for that block.
Expected outputs come from :mod:`golden.arith.float`, fed by the input monitor (what the design
really received). The units are always ready: inputs get random idle cycles (bubbles in the valid
stream), outputs cannot be back-pressured. Results are compared bit for bit (NaN codes and signed
zeros included).
"""

from __future__ import annotations

import abc

import cocotb
import numpy as np

from golden.arith import float as golden
from hdl.arith.format import float_format

from .tb import BlockTB, select_tb


class FloatTB(BlockTB):
    """Always-ready unit with input stream ``i`` and output ``o.y``; subclasses give the golden
    call and the stimulus."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        self.np_rng = np.random.default_rng(self.seed)

    @abc.abstractmethod
    def expected(self, item) -> int:
        """Defined by each unit's testbench."""

    def model(self, stream, item):
        return {"o": [{"y": int(self.expected(item))}]}

    @abc.abstractmethod
    def stimulus(self, count: int) -> list[dict]:
        """Defined by each unit's testbench."""


class MulTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        p = self.params
        self.fmts = float_format(p.a_fmt), float_format(p.b_fmt), float_format(p.out_fmt)

    def expected(self, item):
        return golden.fmul([item["a"]], [item["b"]], *self.fmts)[0]

    def stimulus(self, count):
        a, b = golden.operand_pairs(self.np_rng, self.fmts[0], self.fmts[1], count)
        return [{"a": int(x), "b": int(y)} for x, y in zip(a, b)]


class AddTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        self.fmt = float_format(self.params.fmt)

    def expected(self, item):
        return golden.fadd([item["a"]], [item["b"]], self.fmt)[0]

    def stimulus(self, count):
        a, b = golden.operand_pairs(self.np_rng, self.fmt, self.fmt, count, add=True)
        return [{"a": int(x), "b": int(y)} for x, y in zip(a, b)]


class MacTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        self.in_fmt, self.acc_fmt = float_format(self.params.in_fmt), \
            float_format(self.params.acc_fmt)

    def expected(self, item):
        return golden.fmac([item["a"]], [item["b"]], [item["c"]], self.in_fmt, self.acc_fmt)[0]

    def stimulus(self, count):
        a, b = golden.operand_pairs(self.np_rng, self.in_fmt, self.in_fmt, count)
        # Addends: corners, values near the product (cancellation), random codes.
        prod = golden.fmul(a, b, self.in_fmt, self.in_fmt, self.acc_fmt).astype(np.uint64)
        c = golden.random_codes(self.np_rng, self.acc_fmt, len(a), exp_spread=20).astype(np.uint64)
        near = self.np_rng.random(len(a)) < 0.4
        sign = np.uint64(1 << (self.acc_fmt.width - 1))
        c = np.where(near, (prod ^ sign) ^ self.np_rng.integers(0, 256, len(a)).astype(np.uint64),
                     c)
        corners = golden.corner_codes(self.acc_fmt)
        c[:len(corners)] = corners
        return [{"a": int(x), "b": int(y), "c": int(z)} for x, y, z in zip(a, b, c)]


class ConvTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        self.in_fmt, self.out_fmt = float_format(self.params.in_fmt), \
            float_format(self.params.out_fmt)

    def expected(self, item):
        return golden.fconvert([item["x"]], self.in_fmt, self.out_fmt)[0]

    def stimulus(self, count):
        f, o = self.in_fmt, self.out_fmt
        codes = list(golden.corner_codes(f)) + [o.max_normal, o.min_normal]
        codes += list(golden.random_codes(self.np_rng, f, count // 2))
        # Exponents across the result format's range, and its overflow / underflow thresholds.
        codes += list(golden.random_codes(self.np_rng, f, count // 2, exp_spread=o.bias + 2))
        if f.precision > o.precision:       # ties and the rounding carry into the next binade
            drop = f.precision - o.precision
            for base in golden.random_codes(self.np_rng, f, 64, exp_spread=o.bias):
                base = int(base) & ~((1 << drop) - 1)
                codes += [base | (1 << (drop - 1)), base | ((1 << drop) - 1),
                          base | (1 << (drop - 1)) | 1]
        return [{"x": int(x)} for x in codes]


class IntToFloatTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        self.bits, self.fmt = self.params.int_bits, float_format(self.params.fmt)

    def expected(self, item):
        return golden.int_to_float([item["x"]], self.bits, self.fmt)[0]

    def stimulus(self, count):
        n, mask = self.bits, (1 << self.bits) - 1
        codes = [0, 1, mask, 1 << (n - 1), (1 << (n - 1)) - 1, (1 << (n - 1)) + 1]
        p = self.fmt.precision
        for k in range(n):                       # every magnitude, ties above the precision
            codes += [1 << k, (-(1 << k)) & mask]
            if k > p:
                tie = (1 << k) | (1 << (k - p))
                codes += [tie & mask, (tie + (1 << (k - p + 1))) & mask, (-tie) & mask,
                          (tie + 1) & mask]
        codes += [int(x) for x in self.np_rng.integers(0, 1 << n, count // 2, dtype=np.uint64)]
        # Random magnitudes of every length.
        lengths = self.np_rng.integers(1, n, count // 2)
        codes += [int(self.np_rng.integers(0, 1 << int(k))) * (1 if self.np_rng.random() < 0.5
                                                               else -1) & mask for k in lengths]
        return [{"x": x & mask} for x in codes]


class DotTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        p = self.params
        self.in_fmt, self.acc_fmt, self.lanes = float_format(p.in_fmt), float_format(p.acc_fmt), \
            p.lanes

    def expected(self, item):
        a = np.array([[item[f"a.{k}"] for k in range(self.lanes)]])
        b = np.array([[item[f"b.{k}"] for k in range(self.lanes)]])
        return golden.fdot(a, b, self.in_fmt, self.acc_fmt)[0]

    def stimulus(self, count):
        f, lanes = self.in_fmt, self.lanes
        a, b = golden.operand_pairs(self.np_rng, f, f, count * lanes)
        order = self.np_rng.permutation(len(a))
        a, b = a[order], b[order]
        rows = len(a) // lanes
        a, b = a[:rows * lanes].reshape(rows, lanes), b[:rows * lanes].reshape(rows, lanes)
        # Mostly finite values near 1.0 so that the sums do not all end in NaN or infinity; some
        # rows of exact cancellation (a row and its negation).
        keep = rows // 4
        tame_a = golden.random_codes(self.np_rng, f, (rows - keep) * lanes, exp_spread=6)
        tame_b = golden.random_codes(self.np_rng, f, (rows - keep) * lanes, exp_spread=6)
        a[keep:] = tame_a.reshape(-1, lanes)
        b[keep:] = tame_b.reshape(-1, lanes)
        if lanes > 1:
            half = lanes // 2
            cancel = slice(keep, keep + rows // 8)
            a[cancel, half:] = a[cancel, :half] ^ (1 << (f.width - 1))
            b[cancel, half:] = b[cancel, :half]
        return [{**{f"a.{k}": int(r[k]) for k in range(lanes)},
                 **{f"b.{k}": int(s[k]) for k in range(lanes)}} for r, s in zip(a, b)]


_TB = {"arith-fpmul": MulTB, "arith-fpadd": AddTB, "arith-fpmac": MacTB,
       "arith-fpconv": ConvTB, "arith-int2fp": IntToFloatTB, "arith-fdot": DotTB}

#: Random items per run (on top of the directed corners): each cocotb run stays a few seconds.
RANDOM_ITEMS = 1500


def make_tb(dut, **kwargs):
    return select_tb(dut, _TB, **kwargs)


@cocotb.test()
async def corners_and_random(dut):
    """Directed corners (every pair of special codes) and random operands, with input bubbles."""
    tb = make_tb(dut, idle=0.3)
    await tb.reset()
    items = tb.stimulus(RANDOM_ITEMS)
    tb.send("i", items)
    await tb.drain()
    assert tb.scoreboards["o"].matched == len(items)
    tb.log.info("%d outputs matched the golden model", tb.scoreboards["o"].matched)


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles, one result per cycle, ``component.latency`` cycles after the input."""
    tb = make_tb(dut, idle=0.0)
    await tb.run_full_rate(tb.stimulus(500)[-500:])
