"""What one shared numeric unit builds, for the size estimates of the blocks made of them
(:class:`memwall.registry.Size`): its latency at the defaults the blocks build it with,
and the cells of its own netlist (Amaranth RTLIL, read off once per unit: they do not depend on
the block around it). tests/test_size.py holds every block built of them to its netlist."""

from __future__ import annotations

from hdl.arith.convert import IntToFloat
from hdl.arith.exp2 import Exp2
from hdl.arith.fdot import FloatDot
from hdl.arith.fpadd import FloatAdder
from hdl.arith.fpmul import NARROW_LOGIC_BITS, FloatMultiplier, narrow_piece
from hdl.arith.requant import _SLICE, Requantizer

__all__ = ["ADD_STAGES", "MUL_STAGES", "DOT_MUL_STAGES", "DOT_ADD_STAGES", "INT2FP_STAGES",
           "EXP2_STAGES", "REQUANT_STAGES", "FPADD_CELLS", "FPMUL_CELLS", "FPMUL_WIDE_CELLS",
           "INT2FP_CELLS", "EXP2_CELLS", "RECIP_CELLS", "REQUANT_CELLS", "requant_products"]

#: Latencies at the constructors' defaults (the register stages).
ADD_STAGES = FloatAdder.latency_of()
MUL_STAGES = FloatMultiplier.latency_of()
#: A dot product's multiplier stages, then its adder stages per tree level.
DOT_MUL_STAGES = FloatDot.latency_of(lanes=1)
DOT_ADD_STAGES = FloatDot.latency_of(lanes=2) - DOT_MUL_STAGES
#: The activation path's units (the DXT's request latency).
INT2FP_STAGES, EXP2_STAGES, REQUANT_STAGES = (IntToFloat.latency_of(), Exp2.latency_of(),
                                              Requantizer.latency_of())

#: FloatAdder(FP32).
FPADD_CELLS = 197
#: FloatMultiplier with one product (bf16 or fp16 significands into FP32) and with four (an
#: FP32 operand: both significands halved).
FPMUL_CELLS, FPMUL_WIDE_CELLS = 85, 103
#: IntToFloat(32, FP32), Exp2 (128 segments), Reciprocal (two Newton-Raphson steps) and the
#: INT32 x 32-bit Requantizer.
INT2FP_CELLS, EXP2_CELLS, RECIP_CELLS, REQUANT_CELLS = 67, 138, 187, 60


def requant_products(in_bits: int, mult_bits: int, narrow_in_logic: bool = False,
                     narrow_bits: int = NARROW_LOGIC_BITS) -> int:
    """Partial products of a :class:`~hdl.arith.requant.Requantizer`'s ``x * m``: it cuts each
    operand into 17-bit slices from the LSB and multiplies every pair; with ``narrow_in_logic``
    the narrow pairs (:func:`~hdl.arith.fpmul.narrow_piece` at ``narrow_bits``) are logic, not
    products."""
    def widths(bits):
        return [min(_SLICE, bits - lsb) for lsb in range(0, bits, _SLICE)]
    return sum(1 for a in widths(in_bits) for b in widths(mult_bits)
               if not (narrow_in_logic and narrow_piece(a, b, narrow_bits)))
