"""What one shared numeric unit builds, for the size estimates of the blocks made of them
(:class:`memwall.registry.Size`): its register stages at the defaults the blocks build it with,
and the cells of its own netlist (Amaranth RTLIL, read off once per unit: they do not depend on
the block around it). tests/test_size.py holds every block built of them to its netlist."""

from __future__ import annotations

from hdl.arith.convert import IntToFloat
from hdl.arith.exp2 import Exp2
from hdl.arith.fdot import FloatDot
from hdl.arith.fpadd import FloatAdder
from hdl.arith.fpmul import FloatMultiplier
from hdl.arith.requant import Requantizer

__all__ = ["default_stages", "ADD_STAGES", "MUL_STAGES", "DOT_MUL_STAGES", "DOT_ADD_STAGES",
           "FPADD_CELLS", "FPMUL_CELLS", "FPMUL_WIDE_CELLS", "INT2FP_CELLS", "EXP2_CELLS",
           "RECIP_CELLS", "REQUANT_CELLS"]


def default_stages(unit: type, name: str = "stages") -> int:
    """The register stages ``unit``'s constructor builds with by default (its latency)."""
    return unit.__init__.__kwdefaults__[name]


ADD_STAGES = default_stages(FloatAdder)
MUL_STAGES = default_stages(FloatMultiplier)
DOT_MUL_STAGES = default_stages(FloatDot, "mul_stages")
DOT_ADD_STAGES = default_stages(FloatDot, "add_stages")
#: Register stages of the activation path's units (the DXT's request latency).
INT2FP_STAGES, EXP2_STAGES, REQUANT_STAGES = map(default_stages, (IntToFloat, Exp2, Requantizer))

#: FloatAdder(FP32).
FPADD_CELLS = 197
#: FloatMultiplier with one product (bf16 or fp16 significands into FP32) and with four (an
#: FP32 operand: both significands halved).
FPMUL_CELLS, FPMUL_WIDE_CELLS = 85, 103
#: IntToFloat(32, FP32), Exp2 (128 segments), Reciprocal (two Newton-Raphson steps) and the
#: INT32 x 32-bit Requantizer.
INT2FP_CELLS, EXP2_CELLS, RECIP_CELLS, REQUANT_CELLS = 67, 138, 187, 60
