"""Registry entries of the integer arithmetic units: requantizer and lane-parallel dot product."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.arith.idot import IntDot
from hdl.arith.requant import Requantizer

from ..params import BlockParams
from ..registry import Block, Size, pipelined, register
from . import units


@dataclass(frozen=True)
class RequantParams(BlockParams):
    """Requantizer widths, clamp range, multiplier width and signedness, pipeline depth,
    ``block_registers`` and ``narrow_in_logic``.

    The parameters are checked by :class:`hdl.arith.requant.Requantizer` (the registry builds the
    component to validate them).
    """

    in_bits: int = 32
    out_bits: int = 8
    clamp: str = "symmetric"
    mult_bits: int = 32
    mult_signed: bool = True
    stages: int = 4
    block_registers: bool = False
    narrow_in_logic: bool = False


@dataclass(frozen=True)
class IntDotParams(BlockParams):
    """Dot-product lane count, operand and accumulator widths, tree register spacing and
    ``block_registers`` of :class:`IntDot`."""

    lanes: int = 16
    a_bits: int = 8
    b_bits: int = 8
    acc_bits: int = 32
    register_every: int = 1
    block_registers: bool = False


def _requant_size(p: "RequantParams") -> Size:
    """The partial products of x * m, then about 14 cells for each one's sum and 40 for the
    rounding and the clamp (calibrated on the presets' netlists)."""
    products = units.requant_products(p.in_bits, p.mult_bits + (not p.mult_signed),
                                      p.narrow_in_logic)
    return Size(storage_bits=0, multipliers=products, cells=40 + 14 * products)


register(Block(
    name="arith-requant",
    family="arith",
    summary="Requantizer: clamp(round_half_even(x * m / 2**shift)), int32 -> int8, saturating",
    params=RequantParams,
    presets={
        # 16-bit input and multiplier: one partial product, the cheapest useful configuration.
        "small": RequantParams(in_bits=16, out_bits=8, mult_bits=16, stages=2),
        # int32 accumulators, TFLite-style 32-bit signed multiplier, int8 in [-127, 127].
        "default": RequantParams(),
        # The GEMV PE / FlowKV int8 path: full int8 range [-128, 127] as TFLite's int8 kernels.
        "paper": RequantParams(clamp="full"),
    },
    build=lambda p: Requantizer(p.in_bits, p.out_bits, clamp=p.clamp, mult_bits=p.mult_bits,
                                mult_signed=p.mult_signed, stages=p.stages,
                                block_registers=p.block_registers,
                                narrow_in_logic=p.narrow_in_logic),
    golden="golden.arith.requant",
    testbench="cocotb_tests.arith_int_tb",
    timing=lambda p, c: pipelined(c.latency),
    size=_requant_size,
))

register(Block(
    name="arith-idot",
    family="arith",
    summary="Integer dot product: lanes x (int8 x int8 or int8 x int4) summed exactly to int32",
    params=IntDotParams,
    presets={
        "small": IntDotParams(lanes=4, a_bits=8, b_bits=4),
        "default": IntDotParams(lanes=16, a_bits=8, b_bits=8),
        # In-flash GEMV PE: int8 activations x int4 weights, 16 lanes.
        "paper": IntDotParams(lanes=16, a_bits=8, b_bits=4),
    },
    build=lambda p: IntDot(p.lanes, a_bits=p.a_bits, b_bits=p.b_bits, acc_bits=p.acc_bits,
                           register_every=p.register_every,
                           block_registers=p.block_registers),
    golden="golden.arith.idot",
    testbench="cocotb_tests.arith_int_tb",
    timing=lambda p, c: pipelined(c.latency),
    # A product per lane and its adder (the tree's registers are wide, one cell each).
    size=lambda p: Size(storage_bits=0, multipliers=p.lanes, cells=4 * p.lanes + 2),
))
