"""Registry entries of the fp32 function units: exp2, reciprocal and reciprocal square root."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.arith.exp2 import Exp2
from hdl.arith.recip import Reciprocal, RSqrt

from ..params import BlockParams
from ..registry import Block, Size, pipelined, register
from . import units


def _newton_size(iterations: int, products_per_step: int, cells_per_step: int) -> Size:
    """The seed table, unpacking and rounding (about 80 cells), then per Newton-Raphson step its
    products split into 17-bit slices (1/x: m*y and y*e, about 5; 1/sqrt(x): y*y, u*y*y and
    y*e, about 12) and their sums; cells per step calibrated on the presets' netlists."""
    return Size(storage_bits=0, multipliers=products_per_step * iterations,
                cells=80 + cells_per_step * iterations)


@dataclass(frozen=True)
class Exp2Params(BlockParams):
    """Chord-table size (``2**table_bits`` segments), register stages (the latency) and
    ``block_registers``.

    Checked by :class:`hdl.arith.exp2.Exp2` (the registry builds the component to validate).
    """

    table_bits: int = 7
    stages: int = 7
    block_registers: bool = False


@dataclass(frozen=True)
class NewtonParams(BlockParams):
    """Newton-Raphson iteration count (0 to 3; the latency grows with it), ``block_registers``
    and ``land_products`` (every multiply between registers of its own: two cycles more each).

    Checked by :class:`hdl.arith.recip.Reciprocal` / :class:`~hdl.arith.recip.RSqrt`.
    """

    iterations: int = 2
    block_registers: bool = False
    land_products: bool = False


register(Block(
    name="arith-exp2",
    family="arith",
    summary="fp32 exp2: 128-segment chord table + one multiply, rel. error < 2**-17.9, FTZ",
    params=Exp2Params,
    presets={
        # 16 segments, combinational but for the output register: the cheapest build.
        "small": Exp2Params(table_bits=4, stages=1),
        "default": Exp2Params(),
        # FlowKV softmax: exp(x) = exp2(x * log2 e) on fp32 scores; the default accuracy.
        "paper": Exp2Params(),
    },
    build=lambda p: Exp2(table_bits=p.table_bits, stages=p.stages,
                       block_registers=p.block_registers),
    golden="golden.arith.func",
    testbench="cocotb_tests.arith_func_tb",
    timing=lambda p, c: pipelined(c.latency),
    # One chord multiply; the table is constants, so the size hardly moves.
    size=lambda p: Size(storage_bits=0, multipliers=1, cells=units.EXP2_CELLS),
))

_NEWTON_PRESETS = {
    # No Newton-Raphson step: the 8-bit seed alone (cheapest, for fast tests).
    "small": NewtonParams(iterations=0),
    # Two steps: worst relative error below 2**-23 (the 2**-20 target with margin).
    "default": NewtonParams(iterations=2),
    # FlowKV softmax normalization and layer-norm: the default accuracy.
    "paper": NewtonParams(iterations=2),
}

register(Block(
    name="arith-recip",
    family="arith",
    summary="fp32 reciprocal: 7-bit seed table + Newton-Raphson steps (2: rel. error < 2**-23)",
    params=NewtonParams,
    presets=_NEWTON_PRESETS,
    build=lambda p: Reciprocal(iterations=p.iterations, block_registers=p.block_registers,
                        land_products=p.land_products),
    golden="golden.arith.func",
    testbench="cocotb_tests.arith_func_tb",
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: _newton_size(p.iterations, 5, 55),
))

register(Block(
    name="arith-rsqrt",
    family="arith",
    summary="fp32 1/sqrt(x): parity + 7-bit seed table + Newton-Raphson steps, IEEE rSqrt specials",
    params=NewtonParams,
    presets=_NEWTON_PRESETS,
    build=lambda p: RSqrt(iterations=p.iterations, block_registers=p.block_registers,
                        land_products=p.land_products),
    golden="golden.arith.func",
    testbench="cocotb_tests.arith_func_tb",
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: _newton_size(p.iterations, 12, 100),
))
