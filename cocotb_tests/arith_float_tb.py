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
import collections
from fractions import Fraction

import cocotb
import numpy as np

from golden.arith import float as golden
from hdl.arith.format import float_format

from .functional import sampler
from .streams import to_signed
from .tb import BlockTB, select_tb

#: Classes of a float code (a subnormal code is read as zero by every unit: flush to zero).
CLASSES = ("zero", "subnormal", "normal", "inf", "nan")
#: How a result was rounded: equal to the exact value; rounded (to nearest); a tie (exactly
#: halfway); rounded up into the next binade (carry out of the fraction); overflow to infinity;
#: a non-zero result flushed to zero.
ROUNDING = ("exact", "inexact", "tie", "carry", "overflow", "flush")


def float_class(code: int, fmt) -> str:
    field = (code >> fmt.man_bits) & fmt.exp_max_field
    man = code & ((1 << fmt.man_bits) - 1)
    if field == fmt.exp_max_field:
        return "nan" if man else "inf"
    return ("subnormal" if man else "zero") if field == 0 else "normal"


def value(code: int, fmt) -> Fraction:
    """The exact value of a finite code (a subnormal code reads as zero, as in the units)."""
    return Fraction(float(golden.to_float([code], fmt)[0]))


def rounding_case(exact: Fraction, code: int, fmt) -> str:
    """How the result ``code`` of ``fmt`` rounds the exact (finite) value ``exact``."""
    kind = float_class(code, fmt)
    if kind in ("inf", "nan"):
        return "overflow"
    got = value(code, fmt)
    if got == exact:
        return "exact"
    if got == 0:
        return "flush"
    field = (code >> fmt.man_bits) & fmt.exp_max_field
    ulp = Fraction(2) ** (field - fmt.bias - fmt.man_bits)
    if abs(got) > abs(exact) and (code & ((1 << fmt.man_bits) - 1)) == 0:
        return "carry"        # a power of two above the exact value: it left its binade
    return "tie" if 2 * abs(got - exact) == ulp else "inexact"


def _limits(fmt) -> tuple[Fraction, Fraction]:
    """The largest finite value and the smallest normal value of ``fmt``."""
    return value(fmt.max_normal, fmt), value(fmt.min_normal, fmt)


def _unreachable(bits: int, out_fmt, largest: Fraction, smallest: Fraction, what: str
                 ) -> dict[str, str]:
    """The rounding cases an exact ``what`` of at most ``bits`` significand bits, at most
    ``largest`` and, when not zero, at least ``smallest`` in magnitude, cannot reach in
    ``out_fmt``."""
    o_max, o_min = _limits(out_fmt)
    gone = {}
    if bits <= out_fmt.precision:
        why = f"every {what} has at most {bits} significand bits: {out_fmt.precision} hold it"
        gone.update({case: why for case in ("inexact", "tie", "carry")})
    if largest <= o_max:
        gone["overflow"] = f"no {what} exceeds the largest finite result ({float(largest):.4g})"
    if smallest >= o_min:
        gone["flush"] = (f"no non-zero {what} is below the smallest normal result "
                         f"({float(smallest):.4g})")
    return gone


class FloatTB(BlockTB):
    """Always-ready unit with input stream ``i`` and output ``o.y``; subclasses give the golden
    call, the stimulus and, for a unit that rounds once, the exact value of an input
    (:meth:`exact`).

    Functional coverage: the class of every float operand and of the result, and how the result
    rounds the exact value; bins the formats make unreachable are excluded (:meth:`unreachable`,
    :meth:`results_unreachable`).
    """

    #: The input fields that are float codes, with the name of their format's attribute.
    operands: dict[str, str] = {}
    #: The attribute holding the result's format.
    result_fmt = "out_fmt"

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        self.np_rng = np.random.default_rng(self.seed)
        self.seen: collections.deque = collections.deque()    # inputs whose results are due

    def _coverage(self):
        block = self.block.name
        points = {f"{block}.operand.{name}": (lambda pair, n=name, f=getattr(self, attr):
                                              float_class(pair[0][n], f), CLASSES)
                  for name, attr in self.operands.items()}
        out_fmt = getattr(self, self.result_fmt)
        gone = self.unreachable() if self.rounds_once else {}
        points[f"{block}.result"] = (lambda pair: float_class(pair[1]["y"], out_fmt),
                                     ("zero", "normal", "inf", "nan"))
        if self.rounds_once:
            points[f"{block}.rounding"] = (self._rounding, ROUNDING)
        self.sample = sampler(points, unreachable={f"{block}.rounding": gone,
                                                   f"{block}.result":
                                                       self.results_unreachable(gone)})

    @property
    def rounds_once(self) -> bool:
        """Whether the unit rounds its exact result once: it defines :meth:`exact`."""
        return type(self).exact is not FloatTB.exact

    def _rounding(self, pair):
        exact = self.exact(pair[0])
        return None if exact is None else rounding_case(exact, pair[1]["y"],
                                                        getattr(self, self.result_fmt))

    def exact(self, item) -> Fraction | None:
        """The exact value the unit rounds, None where an operand is not finite."""
        return None

    def unreachable(self) -> dict[str, str]:
        """The rounding cases these formats cannot reach, with the reason."""
        return {}

    def results_unreachable(self, rounding: dict[str, str]) -> dict[str, str]:
        """The result classes the unit cannot produce, with the reason (``rounding``: the
        rounding cases it cannot reach)."""
        return {}

    def observe(self, stream, item, cycle):
        if not hasattr(self, "sample"):     # the subclass sets its formats after __init__
            self._coverage()
        if stream == "i":
            self.seen.append(item)
        else:
            self.sample((self.seen.popleft(), item))

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
        self.a_fmt, self.b_fmt, self.out_fmt = self.fmts

    operands = {"a": "a_fmt", "b": "b_fmt"}

    def expected(self, item):
        return golden.fmul([item["a"]], [item["b"]], *self.fmts)[0]

    def exact(self, item):
        a, b = item["a"], item["b"]
        finite = all(float_class(c, f) not in ("inf", "nan")
                     for c, f in ((a, self.a_fmt), (b, self.b_fmt)))
        return value(a, self.a_fmt) * value(b, self.b_fmt) if finite else None

    def unreachable(self):
        (a_max, a_min), (b_max, b_min) = map(_limits, self.fmts[:2])
        return _unreachable(self.a_fmt.precision + self.b_fmt.precision, self.out_fmt,
                            a_max * b_max, a_min * b_min, "product")

    def stimulus(self, count):
        a, b = golden.operand_pairs(self.np_rng, self.fmts[0], self.fmts[1], count)
        return [{"a": int(x), "b": int(y)} for x, y in zip(a, b)]


class AddTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        self.fmt = float_format(self.params.fmt)

    operands = {"a": "fmt", "b": "fmt"}
    result_fmt = "fmt"

    def expected(self, item):
        return golden.fadd([item["a"]], [item["b"]], self.fmt)[0]

    def exact(self, item):
        codes = (item["a"], item["b"])
        if any(float_class(c, self.fmt) in ("inf", "nan") for c in codes):
            return None
        return sum(value(c, self.fmt) for c in codes)

    def stimulus(self, count):
        a, b = golden.operand_pairs(self.np_rng, self.fmt, self.fmt, count, add=True)
        return [{"a": int(x), "b": int(y)} for x, y in zip(a, b)]


class MacTB(FloatTB):
    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        self.in_fmt, self.acc_fmt = float_format(self.params.in_fmt), \
            float_format(self.params.acc_fmt)

    operands = {"a": "in_fmt", "b": "in_fmt", "c": "acc_fmt"}
    result_fmt = "acc_fmt"

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

    operands = {"x": "in_fmt"}

    def expected(self, item):
        return golden.fconvert([item["x"]], self.in_fmt, self.out_fmt)[0]

    def exact(self, item):
        finite = float_class(item["x"], self.in_fmt) not in ("inf", "nan")
        return value(item["x"], self.in_fmt) if finite else None

    def unreachable(self):
        big, small = _limits(self.in_fmt)
        return _unreachable(self.in_fmt.precision, self.out_fmt, big, small, "input")

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

    result_fmt = "fmt"

    def expected(self, item):
        return golden.int_to_float([item["x"]], self.bits, self.fmt)[0]

    def exact(self, item):
        return Fraction(to_signed(item["x"], self.bits))

    def unreachable(self):
        # Magnitudes up to 2**(n-1); the powers of two among them are exact.
        return _unreachable(self.bits - 1, self.fmt, Fraction(2) ** (self.bits - 1),
                            Fraction(1), "integer")

    def results_unreachable(self, rounding):
        never = {"nan": "an integer converts to a number, never NaN"}
        if "overflow" in rounding:
            never["inf"] = rounding["overflow"]
        return never

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

    operands = {"a.0": "in_fmt", "b.0": "in_fmt"}
    result_fmt = "acc_fmt"

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


@cocotb.test()
async def corners_and_random(dut):
    """Directed corners (every pair of special codes) and random operands, with input bubbles."""
    tb = select_tb(dut, _TB, idle=0.3)
    await tb.reset()
    items = tb.stimulus(RANDOM_ITEMS)
    assert await tb.check_items(items) == len(items)


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles, one result per cycle, ``component.latency`` cycles after the input."""
    tb = select_tb(dut, _TB, idle=0.0)
    await tb.run_full_rate(tb.stimulus(500)[-500:])
