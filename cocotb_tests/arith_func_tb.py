"""cocotb testbench of the fp32 function units: exp2, reciprocal and reciprocal square root.

The launcher names the block and its parameters; each test picks the TB class for that block.
Expected outputs come from :mod:`golden.arith.func`, fed by the input monitor (what the design
really received). The units are always ready: inputs get random idle cycles (bubbles in the valid
stream), outputs cannot be back-pressured. Every result is compared bit for bit (NaN payloads and
signed zeros included).
"""

from __future__ import annotations

import abc
import collections
import struct

import cocotb
import numpy as np

from golden.arith import func as golden
from hdl.arith.format import FP32

from .arith_float_tb import float_class
from .functional import sampler
from .tb import BlockTB, select_tb


def _bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


#: fp32 codes every unit sees: signed zeros, subnormals (read as zeros), infinities, NaNs (quiet,
#: signalling, negative, all ones), smallest and largest normals, one, and their neighbours.
SPECIALS = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x007FFFFF, 0x80000001,
            0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001, 0xFFFFFFFF, 0x7FFFFFFF,
            0x00800000, 0x80800000, 0x00800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,
            0x3F800000, 0xBF800000, 0x3F7FFFFF, 0x3F800001, 0x3FFFFFFF, 0xBFFFFFFF]


def _kind(code: int) -> str:
    """An fp32 code's class with its sign (``+normal``, ``-zero``...; NaN has no sign); a
    subnormal is a zero to every unit."""
    kind = float_class(code, FP32).replace("subnormal", "zero")
    return kind if kind == "nan" else ("-" if code >> 31 else "+") + kind


def _power_of_two(code: int) -> bool:
    return float_class(code, FP32) == "normal" and code & 0x7FFFFF == 0


class FuncTB(BlockTB):
    """One fp32 ``x`` in, one fp32 ``y`` out; subclasses name the golden function and corners.

    Functional coverage (sampled per result with the input the design took): the unit's
    ``case``, what the specification does with the input's class (:attr:`CASES`, from the
    classes of ``x`` and ``y``), and ``exact``, the inputs whose result is a power of two
    (:attr:`EXACT`: exp2 of an integer, the reciprocal of a power of two, rsqrt of a power of
    four), whose bits the scoreboard checks.
    """

    #: The cases of the unit's specification; :meth:`case` names one per (x, y).
    CASES: tuple[str, ...] = ()
    #: ``{(class of x, class of y): case}``; ``(class of x, "*")`` for any result.
    CASE_OF: dict[tuple[str, str], str] = {}
    #: The name of the inputs :meth:`exact` picks.
    EXACT = "power_of_two"

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)
        self.seen: collections.deque = collections.deque()     # inputs whose results are due
        block = self.block.name
        self.sample = sampler({
            f"{block}.case": (lambda pair: self.case(*pair), self.CASES),
            f"{block}.exact": (lambda pair: self.EXACT if self.exact(pair[0]) else None,
                               (self.EXACT,))})

    def case(self, x: int, y: int) -> str | None:
        """The specification's case of input ``x`` giving ``y``."""
        kinds = (_kind(x), _kind(y))
        return self.CASE_OF.get(kinds, self.CASE_OF.get((kinds[0], "*")))

    def exact(self, x: int) -> bool:
        """Whether ``x`` is an input whose result is a power of two."""
        return _power_of_two(x)

    def observe(self, stream, item, cycle):
        if stream == "i":
            self.seen.append(item["x"])
        else:
            self.sample((self.seen.popleft(), item["y"]))

    @abc.abstractmethod
    def golden(self, bits: np.ndarray) -> np.ndarray:
        """Defined by each unit's testbench."""

    def model(self, stream, item):
        return {"o": [{"y": int(self.golden(np.array([item["x"]], dtype=np.uint32))[0])}]}

    def corners(self) -> list[int]:
        return list(SPECIALS)

    def random_codes(self, count: int) -> list[int]:
        """Uniformly random bit patterns (every exponent alike)."""
        return [self.rng.getrandbits(32) for _ in range(count)]

    def stimulus(self, count: int) -> list[dict]:
        return [{"x": v} for v in self.corners() + self.random_codes(count)]


class Exp2TB(FuncTB):
    CASES = ("normal", "overflow", "underflow", "zero_in", "+inf_in", "-inf_in", "nan")
    CASE_OF = {("+normal", "+normal"): "normal", ("-normal", "+normal"): "normal",
               ("+normal", "+inf"): "overflow", ("-normal", "+zero"): "underflow",
               ("+zero", "+normal"): "zero_in", ("-zero", "+normal"): "zero_in",
               ("+inf", "+inf"): "+inf_in", ("-inf", "+zero"): "-inf_in", ("nan", "*"): "nan"}

    EXACT = "integer"

    def exact(self, x):
        """An integer from -126 to 127: its result is a normal power of two."""
        value = struct.unpack("<f", struct.pack("<I", x))[0]
        return float_class(x, FP32) == "normal" and -126 <= value < 128 and value == int(value)

    def golden(self, bits):
        return golden.exp2(bits, self.params.table_bits)

    def corners(self):
        near = [_bits(v) for v in (128.0, -126.0, -127.0, -128.0, 0.5, -0.5, 1e-30, -1e-30,
                                   1e-7, -1e-7, 127.5, -126.5, 0.9999999, -0.9999999)]
        # the thresholds' fp32 neighbours: 128 - ulp, -126 - ulp (below min normal), -126 + ulp
        near += [0x42FFFFFF, 0x43000001, 0xC2FC0001, 0xC2FBFFFF, 0xC3000000, 0xC3000001]
        integers = [_bits(float(n)) for n in range(-130, 131)]
        return super().corners() + near + integers

    def random_codes(self, count):
        """Half uniformly random bit patterns, half values spread over [-130, 130] (where the
        results are finite and normal)."""
        rng = self.rng
        out = []
        for _ in range(count):
            if rng.random() < 0.5:
                out.append(rng.getrandbits(32))
            else:
                out.append(_bits(rng.uniform(-130.0, 130.0) * 2.0 ** -rng.randint(0, 30)))
        return out


class RecipTB(FuncTB):
    CASES = ("normal", "flushed", "zero_in", "inf_in", "nan")
    CASE_OF = {("+normal", "+normal"): "normal", ("-normal", "-normal"): "normal",
               ("+normal", "+zero"): "flushed", ("-normal", "-zero"): "flushed",
               ("+zero", "+inf"): "zero_in", ("-zero", "-inf"): "zero_in",
               ("+inf", "+zero"): "inf_in", ("-inf", "-zero"): "inf_in", ("nan", "*"): "nan"}

    def golden(self, bits):
        return golden.reciprocal(bits, self.params.iterations)

    def corners(self):
        # 2**126 (result 2**-126, the smallest normal) and its neighbours (results flushed);
        # powers of two; every seed segment's first and last significand.
        near = [0x7E800000, 0x7E800001, 0x7E7FFFFF, 0xFE800000, 0xFE800001, 0xFE7FFFFF]
        powers = [_bits(2.0 ** k) for k in range(-126, 128, 7)]
        segments = [(127 << 23) | (k << 16) | low for k in range(128) for low in (0, 0xFFFF)]
        return super().corners() + near + powers + segments


class RSqrtTB(FuncTB):
    CASES = ("even_exponent", "odd_exponent", "zero_in", "inf_in", "negative", "nan")
    CASE_OF = {("+zero", "+inf"): "zero_in", ("-zero", "-inf"): "zero_in",
               ("+inf", "+zero"): "inf_in", ("-normal", "nan"): "negative",
               ("-inf", "nan"): "negative", ("nan", "*"): "nan"}

    def case(self, x, y):
        """A positive normal input by its exponent's parity (the seed and the square root of
        the power of two differ), else the classes' case."""
        if (_kind(x), _kind(y)) == ("+normal", "+normal"):
            return ("even_exponent", "odd_exponent")[((x >> 23) - 127) & 1]
        return super().case(x, y)

    EXACT = "power_of_four"

    def exact(self, x):
        """A positive power of four: its reciprocal square root is a power of two."""
        return _power_of_two(x) and not x >> 31 and ((x >> 23) - 127) % 2 == 0

    def golden(self, bits):
        return golden.rsqrt(bits, self.params.iterations)

    def corners(self):
        powers = [_bits(2.0 ** k) for k in range(-126, 128, 5)]
        negative = [_bits(-v) for v in (1.0, 4.0, 1e-30, 1e30)]
        # both exponent parities, every seed segment's first and last significand
        segments = [(e << 23) | (k << 16) | low for e in (127, 128) for k in range(128)
                    for low in (0, 0xFFFF)]
        return super().corners() + powers + negative + segments


_TB = {"arith-exp2": Exp2TB, "arith-recip": RecipTB, "arith-rsqrt": RSqrtTB}


@cocotb.test()
async def random_and_corners(dut):
    """Special values, thresholds and their neighbours, then random codes, with bubbles."""
    tb = select_tb(dut, _TB, idle=0.3)
    await tb.reset()
    await tb.check_items(tb.stimulus(3000))


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles, one result per cycle, ``component.latency`` cycles after its input."""
    tb = select_tb(dut, _TB, idle=0.0)
    await tb.run_full_rate([{"x": v} for v in tb.random_codes(1000)])
