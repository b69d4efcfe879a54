"""Registry entries of the floating-point units: multiplier, adder, multiply-add, conversions and
the lane-parallel dot product."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.arith.convert import FloatConvert, IntToFloat
from hdl.arith.fdot import FloatDot
from hdl.arith.format import float_format
from hdl.arith.fpadd import FloatAdder
from hdl.arith.fpmac import FloatMAC
from hdl.arith.fpmul import FloatMultiplier

from ..params import BlockParams
from ..registry import Block, Size, pipelined, register
from . import units

_GOLDEN = "golden.arith.float"
_TB = "cocotb_tests.arith_float_tb"

#: FloatConvert's cells (a rounding and a repack; the formats hardly change them).
_CONV_CELLS = 52


def _mul_size(a_fmt: str, b_fmt: str) -> Size:
    """FloatMultiplier's default ("both") split: both significands halved when either is wider
    than 12 bits, four products; else one."""
    wide = max(float_format(a_fmt).precision, float_format(b_fmt).precision) > 12
    return Size(storage_bits=0, multipliers=4 if wide else 1,
                cells=units.FPMUL_WIDE_CELLS if wide else units.FPMUL_CELLS)


def _mac_size(in_fmt: str, lanes: int = 1) -> Size:
    """``lanes`` products and ``lanes`` adders (a MAC's one, a dot product's tree and final
    conversion), as :func:`_mul_size` and an adder each."""
    mul = _mul_size(in_fmt, in_fmt)
    return Size(storage_bits=0, multipliers=lanes * mul.multipliers,
                cells=lanes * (mul.cells + units.FPADD_CELLS))


@dataclass(frozen=True)
class FpMulParams(BlockParams):
    """Input formats, result format, register stages and ``block_registers`` of
    :class:`FloatMultiplier`."""

    a_fmt: str = "fp32"
    b_fmt: str = "fp32"
    out_fmt: str = "fp32"
    stages: int = 5
    block_registers: bool = False


@dataclass(frozen=True)
class FpAddParams(BlockParams):
    """Format and register stages of :class:`FloatAdder`."""

    fmt: str = "fp32"
    stages: int = 6


@dataclass(frozen=True)
class FpMacParams(BlockParams):
    """Input and accumulator formats and the stages of the multiplier and the adder of
    :class:`FloatMAC`."""

    in_fmt: str = "bf16"
    acc_fmt: str = "fp32"
    mul_stages: int = 5
    add_stages: int = 6


@dataclass(frozen=True)
class FpConvParams(BlockParams):
    """Source and result formats and register stages of :class:`FloatConvert`."""

    in_fmt: str = "fp32"
    out_fmt: str = "bf16"
    stages: int = 2


@dataclass(frozen=True)
class IntToFpParams(BlockParams):
    """Integer width, result format and register stages of :class:`IntToFloat`."""

    int_bits: int = 32
    fmt: str = "fp32"
    stages: int = 3


@dataclass(frozen=True)
class FDotParams(BlockParams):
    """Element format, lane count, accumulation format, stages and ``block_registers`` of
    :class:`FloatDot`."""

    in_fmt: str = "bf16"
    lanes: int = 8
    acc_fmt: str = "fp32"
    mul_stages: int = 5
    add_stages: int = 6
    block_registers: bool = False


register(Block(
    name="arith-fpmul",
    family="arith",
    summary="Float multiplier, any input formats to a chosen format (bf16 x bf16 -> fp32 exact)",
    params=FpMulParams,
    presets={
        "small": FpMulParams(a_fmt="bf16", b_fmt="bf16", out_fmt="bf16", stages=2),
        "default": FpMulParams(),
        # FlowKV / VAC products: bf16 x bf16 into fp32, exact.
        "paper": FpMulParams(a_fmt="bf16", b_fmt="bf16", out_fmt="fp32"),
    },
    build=lambda p: FloatMultiplier(float_format(p.a_fmt), float_format(p.b_fmt),
                                    float_format(p.out_fmt), stages=p.stages,
                                    block_registers=p.block_registers),
    golden=_GOLDEN,
    testbench=_TB,
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: _mul_size(p.a_fmt, p.b_fmt),
))

register(Block(
    name="arith-fpadd",
    family="arith",
    summary="Float adder, fp32 / bf16 / fp16, round to nearest even, flush-to-zero",
    params=FpAddParams,
    presets={
        "small": FpAddParams(fmt="bf16", stages=2),
        "default": FpAddParams(),
        # The fp32 accumulation of FlowKV and the floating dot products.
        "paper": FpAddParams(fmt="fp32"),
    },
    build=lambda p: FloatAdder(float_format(p.fmt), stages=p.stages),
    golden=_GOLDEN,
    testbench=_TB,
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: Size(storage_bits=0, multipliers=0, cells=units.FPADD_CELLS),
))

register(Block(
    name="arith-fpmac",
    family="arith",
    summary="Float multiply-add a*b + c (two roundings), bf16 inputs into an fp32 sum",
    params=FpMacParams,
    presets={
        "small": FpMacParams(in_fmt="bf16", acc_fmt="bf16", mul_stages=2, add_stages=2),
        "default": FpMacParams(),
        "paper": FpMacParams(in_fmt="bf16", acc_fmt="fp32"),
    },
    build=lambda p: FloatMAC(float_format(p.in_fmt), float_format(p.acc_fmt),
                             mul_stages=p.mul_stages, add_stages=p.add_stages),
    golden=_GOLDEN,
    testbench=_TB,
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: _mac_size(p.in_fmt),
))

register(Block(
    name="arith-fpconv",
    family="arith",
    summary="Float conversion fp32 -> bf16 / fp16 (and any pair), round to nearest even",
    params=FpConvParams,
    presets={
        "small": FpConvParams(in_fmt="fp32", out_fmt="bf16", stages=1),
        "default": FpConvParams(in_fmt="fp32", out_fmt="bf16"),
        "paper": FpConvParams(in_fmt="fp32", out_fmt="fp16"),
    },
    build=lambda p: FloatConvert(float_format(p.in_fmt), float_format(p.out_fmt),
                                 stages=p.stages),
    golden=_GOLDEN,
    testbench=_TB,
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: Size(storage_bits=0, multipliers=0, cells=_CONV_CELLS),
))

register(Block(
    name="arith-int2fp",
    family="arith",
    summary="Signed integer to float conversion, round to nearest even",
    params=IntToFpParams,
    presets={
        "small": IntToFpParams(int_bits=16, fmt="bf16", stages=1),
        "default": IntToFpParams(),
        "paper": IntToFpParams(int_bits=32, fmt="fp32"),
    },
    build=lambda p: IntToFloat(p.int_bits, float_format(p.fmt), stages=p.stages),
    golden=_GOLDEN,
    testbench=_TB,
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: Size(storage_bits=0, multipliers=0, cells=units.INT2FP_CELLS),
))

register(Block(
    name="arith-fdot",
    family="arith",
    summary="Float dot product: lanes x bf16/fp16 products (exact) summed in fp32 by a tree",
    params=FDotParams,
    presets={
        "small": FDotParams(in_fmt="bf16", lanes=2),
        "default": FDotParams(in_fmt="bf16", lanes=8),
        # FlowKV: bf16 inputs, fp32 accumulation, 16 lanes. Seven adder stages: with six the
        # 16-lane tree misses 100 MHz on ECP5 (docs/arith_float.md).
        "paper": FDotParams(in_fmt="bf16", lanes=16, add_stages=7),
    },
    build=lambda p: FloatDot(float_format(p.in_fmt), p.lanes, float_format(p.acc_fmt),
                             mul_stages=p.mul_stages, add_stages=p.add_stages,
                             block_registers=p.block_registers),
    golden=_GOLDEN,
    testbench=_TB,
    timing=lambda p, c: pipelined(c.latency),
    size=lambda p: _mac_size(p.in_fmt, p.lanes),
))
