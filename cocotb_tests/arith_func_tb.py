"""cocotb testbench of the fp32 function units: exp2, reciprocal and reciprocal square root.

The launcher names the block and its parameters; each test picks the TB class for that block.
Expected outputs come from :mod:`golden.arith.func`, fed by the input monitor (what the design
really received). The units are always ready: inputs get random idle cycles (bubbles in the valid
stream), outputs cannot be back-pressured. Every result is compared bit for bit (NaN payloads and
signed zeros included).
"""

from __future__ import annotations

import abc

import struct

import cocotb
import numpy as np

from golden.arith import func as golden

from .tb import BlockTB, select_tb


def _bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


#: fp32 codes every unit sees: signed zeros, subnormals (read as zeros), infinities, NaNs (quiet,
#: signalling, negative, all ones), smallest and largest normals, one, and their neighbours.
SPECIALS = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x007FFFFF, 0x80000001,
            0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001, 0xFFFFFFFF, 0x7FFFFFFF,
            0x00800000, 0x80800000, 0x00800001, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,
            0x3F800000, 0xBF800000, 0x3F7FFFFF, 0x3F800001, 0x3FFFFFFF, 0xBFFFFFFF]


class FuncTB(BlockTB):
    """One fp32 ``x`` in, one fp32 ``y`` out; subclasses name the golden function and corners."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, ("i",), ("o",), **kwargs)

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


def make_tb(dut, **kwargs):
    return select_tb(dut, _TB, **kwargs)


@cocotb.test()
async def random_and_corners(dut):
    """Special values, thresholds and their neighbours, then random codes, with bubbles."""
    tb = make_tb(dut, idle=0.3)
    await tb.reset()
    tb.send("i", tb.stimulus(3000))
    await tb.drain()
    tb.log.info("%d results matched the golden model bit for bit", tb.scoreboards["o"].matched)


@cocotb.test()
async def full_rate(dut):
    """With no idle cycles, one result per cycle, ``component.latency`` cycles after its input."""
    tb = make_tb(dut, idle=0.0)
    await tb.run_full_rate([{"x": v} for v in tb.random_codes(1000)])
