"""Requantizer: a wide integer times a multiplier, shifted right, rounded half to even, saturated."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import delay
from ..validate import integer
from .dsp import ecp5_product, family
from .fpmul import NARROW_LOGIC_BITS, logic_product, narrow_piece

__all__ = ["Requantizer", "CLAMPS", "SHIFT_BITS"]

#: Saturation ranges: "symmetric" [-(2**(b-1) - 1), 2**(b-1) - 1], "full" [-2**(b-1), 2**(b-1) - 1].
CLAMPS = ("symmetric", "full")
#: Width of the per-item shift field: shifts 0 to 63.
SHIFT_BITS = 6
#: Operand slice width of one partial product: a 17-bit unsigned slice is an 18-bit signed
#: operand, the width of an ECP5 MULT18X18D, so each partial product is one DSP multiplier.
_SLICE = 17
#: Pipeline boundaries present at each ``stages`` value (see the class docstring).
_BOUNDARIES = {1: ("saturated",), 2: ("product", "saturated"),
               3: ("partial", "product", "saturated"),
               4: ("partial", "product", "shifted", "saturated"),
               5: ("partial", "product", "coarse", "shifted", "saturated"),
               6: ("partial", "landed", "product", "coarse", "shifted", "saturated"),
               7: ("operands", "partial", "landed", "product", "coarse", "shifted",
                   "saturated")}
#: The shift in two steps at the ``coarse`` boundary: by whole groups of this many bits first.
_COARSE = 8


def _slices(value, width: int, is_signed: bool):
    """Split ``value`` into (offset, slice) pairs of at most ``_SLICE`` bits from the LSB; the top
    slice carries the sign of a signed operand, the others are unsigned."""
    out = []
    for lsb in range(0, width, _SLICE):
        msb = min(width, lsb + _SLICE)
        piece = value[lsb:msb]
        out.append((lsb, piece.as_signed() if is_signed and msb == width else piece))
    return out


def _shift_right_sticky(m: Module, value, shift, name: str = "halved"):
    """``value >> shift`` (arithmetic) and the OR of the bits it drops."""
    shifted = Signal(signed(len(value)), name=name)
    m.d.comb += shifted.eq(value >> shift)
    most = (1 << len(shift)) - 1           # from j = most on, shift > j cannot hold
    below = Cat(*((shift > j) if j < most else Const(0) for j in range(len(value))))
    return shifted, (value.as_unsigned() & below).any()


class Requantizer(wiring.Component):
    """Requantize a stream: ``y = clamp(round_half_even(x * m / 2**shift))``.

    The multiplier ``m`` and the ``shift`` travel with every item, so one unit serves per-tensor
    and per-channel scales alike (TFLite's quantized multiplier: ``mult_bits=32``, ``m`` in
    ``[2**30, 2**31)``, ``shift = 31 + right_shift``). The product ``x * m`` is exact
    (``in_bits + mult_bits`` bits); the shift is an arithmetic right shift with the dropped bits
    rounding to nearest, ties to even (``2.5 -> 2``, ``3.5 -> 4``, ``-2.5 -> -2``); the result
    saturates to the clamp range and never wraps.

    Parameters
    ----------
    in_bits : int
        Width of the signed input ``x``, 2 to 48 (32: int32 accumulators).
    out_bits : int
        Width of the signed output ``y``, 2 to ``in_bits`` (8: int8).
    clamp : str
        ``"symmetric"`` (default): ``[-(2**(out_bits-1) - 1), 2**(out_bits-1) - 1]``, int8
        ``[-127, 127]``; ``"full"``: ``[-2**(out_bits-1), 2**(out_bits-1) - 1]``, int8
        ``[-128, 127]``.
    mult_bits : int
        Width of the multiplier ``m``, 2 to 32.
    mult_signed : bool
        ``m`` is signed (default, like TFLite's int32 multiplier) or unsigned.
    stages : int
        Pipeline depth, 1 to 7; the latency equals it. Registers sit after: 4: the partial
        products, the full product, the shift and rounding decision, the saturated result;
        3: all but the shift; 2: the product and the result; 1: the result only; 5: as 4, with
        the shift in two steps (by whole bytes, then by the bits left) and a register between
        them; 6: as 5, and each partial product registered again in the fabric before the sum
        (with ``block_registers``, a register on the far side of the route from a multiplier
        block placed away from the adder); 7: as 6, with the operands registered first (with
        ``block_registers``, in each multiplier block's own input registers, so that only a
        route leads to them: without them a block's inputs need 3.5 ns of setup).
    block_registers : bool
        ``True``: elaborated for the ECP5 (``platform=hdl.arith.dsp.Target("ecp5")``) with the
        partial products registered (``stages`` 3 to 5), each partial product is one
        ``MULT18X18D`` whose output register is that partial-product register
        (:func:`hdl.arith.dsp.ecp5_product` without input registers): the multiply no longer
        sits between two fabric routes. The same latency and bits. Default ``False``: generic
        registers for every target.
    narrow_in_logic : bool
        ``True``: every partial product whose narrower slice has at most 8 bits is computed in
        logic (:func:`~hdl.arith.fpmul.logic_product`, shifts and adds) instead of a multiplier
        block: an INT32 input times a 19-bit unsigned multiplier takes two blocks instead of
        four, an INT8 input none. With ``block_registers`` the other pieces stay on their blocks
        (the ones in logic get a fabric register at the same cut). The same latency and bits.
        Default ``False``.
    logic_operands : bool
        With ``narrow_in_logic``: ``True`` adds the member ``logic``, the operands of the pieces
        in logic, which must equal ``i.payload``'s ``x`` and ``m`` in every cycle. A writer
        that drives the blocks from a register beside them feeds the logic pieces from another
        register beside that logic, so that neither register sits between the two (the VAC's
        RCU, docs/rdxe.md 14.4, session 37). The same latency and bits. Default ``False``.
    narrow_bits : int
        With ``narrow_in_logic``, the narrower slice's greatest width for logic, 1 to
        :data:`~hdl.arith.fpmul.NARROW_LOGIC_BITS` (the default): a piece of ``n`` rows is
        ``ceil(log2(n))`` adder levels in the partial-product cycle, so a lower bound keeps a deep
        piece (INT8 x 17 bits: three levels) on its block and a shallow one (x 2 bits) in logic.

    Members
    -------
    i : In(stream.Signature(StructLayout({"x": signed(in_bits), "m": mult_bits, "shift": 6}),
        always_ready=True))
        Operands; ``m`` is ``signed(mult_bits)`` or ``unsigned(mult_bits)``; ``shift`` 0 to 63.
    o : Out(stream.Signature(StructLayout({"y": signed(out_bits)}), always_ready=True))
        Results, ``latency`` cycles after their operands, in order.
    logic : In(StructLayout({"x": signed(in_bits), "m": mult_shape}))
        With ``logic_operands`` only: the logic pieces' copy of ``i.payload.x`` and ``m``.

    Latency ``stages`` cycles; a new item every cycle (no back-pressure: always ready).
    The product is built from ``ceil(in_bits/17) * ceil(mult_bits/17)`` partial products of at
    most 18 x 18 signed bits (four for 32 x 32). Bad parameters raise ``TypeError`` or
    ``ValueError`` naming the parameter, the allowed values and the value given.
    """

    def __init__(self, in_bits: int = 32, out_bits: int = 8, *, clamp: str = "symmetric",
                 mult_bits: int = 32, mult_signed: bool = True, stages: int = 4,
                 block_registers: bool = False, narrow_in_logic: bool = False,
                 narrow_bits: int = NARROW_LOGIC_BITS, logic_operands: bool = False):
        self.latency_of(in_bits, out_bits, clamp=clamp, mult_bits=mult_bits,
                        mult_signed=mult_signed, stages=stages,
                        block_registers=block_registers, narrow_in_logic=narrow_in_logic,
                        narrow_bits=narrow_bits,
                        logic_operands=logic_operands)            # one copy of the checks
        self._in_bits, self._out_bits, self._clamp = in_bits, out_bits, clamp
        self._mult_bits, self._mult_signed = mult_bits, mult_signed
        self._stages, self._blocks, self._narrow = stages, block_registers, narrow_in_logic
        self._narrow_bits, self._logic_operands = narrow_bits, logic_operands
        mult_shape = signed(mult_bits) if mult_signed else unsigned(mult_bits)
        members = {
            "i": In(stream.Signature(data.StructLayout({
                "x": signed(in_bits), "m": mult_shape, "shift": unsigned(SHIFT_BITS)}),
                always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": signed(out_bits)}),
                                      always_ready=True)),
        }
        if logic_operands:
            members["logic"] = In(data.StructLayout({"x": signed(in_bits), "m": mult_shape}))
        super().__init__(members)

    @staticmethod
    def latency_of(in_bits: int = 32, out_bits: int = 8, *, clamp: str = "symmetric",
                   mult_bits: int = 32, mult_signed: bool = True, stages: int = 4,
                   block_registers: bool = False, narrow_in_logic: bool = False,
                   narrow_bits: int = NARROW_LOGIC_BITS, logic_operands: bool = False) -> int:
        """Return the latency of a requantizer with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``stages`` cycles.
        """
        integer(in_bits, "Input width", 2, 48)
        integer(out_bits, "Output width", 2, in_bits)
        if clamp not in CLAMPS:
            raise ValueError(f"Clamp must be 'symmetric' ([-(2**(b-1) - 1), 2**(b-1) - 1]) or "
                             f"'full' ([-2**(b-1), 2**(b-1) - 1]), not {clamp!r}")
        integer(mult_bits, "Multiplier width", 2, 32)
        if not isinstance(mult_signed, bool):
            raise TypeError(f"Multiplier signedness must be True or False, not {mult_signed!r}")
        stages = integer(stages, "Pipeline stages", 1, len(_BOUNDARIES))
        for flag, value in (("block_registers", block_registers),
                            ("narrow_in_logic", narrow_in_logic),
                            ("logic_operands", logic_operands)):
            if not isinstance(value, bool):
                raise TypeError(f"Requantizer {flag} must be True or False, not {value!r}")
        integer(narrow_bits, "Requantizer narrow_bits", 1, NARROW_LOGIC_BITS)
        if logic_operands and not narrow_in_logic:
            raise ValueError("Requantizer logic_operands needs narrow_in_logic=True (without it "
                             "no piece is in logic)")
        return stages

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: :meth:`latency_of` its arguments."""
        return self.latency_of(self._in_bits, self._out_bits, clamp=self._clamp,
                               mult_bits=self._mult_bits, mult_signed=self._mult_signed,
                               stages=self._stages)

    @staticmethod
    def _two_step_shift(m: Module, doubled, shift, stage):
        """``doubled >> shift`` and its sticky bit, by whole groups of :data:`_COARSE` bits, the
        ``coarse`` register, then by the bits left."""
        step = _COARSE.bit_length() - 1
        coarse, coarse_sticky = _shift_right_sticky(m, doubled, Cat(Const(0, step),
                                                                    shift[step:]), "coarse")
        coarse, coarse_sticky = stage("coarse", coarse), stage("coarse", coarse_sticky)
        fine, fine_sticky = _shift_right_sticky(m, coarse, stage("coarse", shift[:step]))
        return fine, coarse_sticky | fine_sticky

    @property
    def limits(self) -> tuple[int, int]:
        """The saturation range ``(least, greatest)``."""
        hi = (1 << (self._out_bits - 1)) - 1
        return (-hi if self._clamp == "symmetric" else -hi - 1), hi

    def elaborate(self, platform):
        m = Module()
        registered = _BOUNDARIES[self._stages]
        product_bits = self._in_bits + self._mult_bits

        def stage(name, value):
            return delay(m, value, int(name in registered), name=name)

        # Partial products: at most 18 x 18 signed each (one DSP multiplier apiece). A block
        # takes the operands themselves (its own input registers are the ``operands`` cut); the
        # fabric's pieces take them from that cut's registers.
        x, mult = self.i.payload.x, self.i.payload.m
        x_cut, m_cut = stage("operands", x), stage("operands", mult)
        logic = self.logic if self._logic_operands else self.i.payload
        lx_cut, lm_cut = ((stage("operands", logic.x), stage("operands", logic.m))
                          if self._logic_operands else (x_cut, m_cut))
        blocks = self._blocks and family(platform) == "ecp5" and "partial" in registered
        partials = []
        x_slices = zip(*(_slices(v, self._in_bits, True) for v in (x, x_cut, lx_cut)))
        for (x_lsb, x_piece), (_, x_reg), (_, x_logic) in x_slices:
            m_slices = zip(*(_slices(v, self._mult_bits, self._mult_signed)
                             for v in (mult, m_cut, lm_cut)))
            for (m_lsb, m_piece), (_, m_reg), (_, m_logic) in m_slices:
                product = Signal(signed(x_piece.shape().width + m_piece.shape().width + 1),
                                 name=f"pp_{x_lsb}_{m_lsb}")
                in_logic = self._narrow and narrow_piece(len(x_piece), len(m_piece),
                                                             self._narrow_bits)
                if blocks and not in_logic:
                    m.d.comb += product.eq(ecp5_product(
                        m, x_piece.as_unsigned(), m_piece.as_unsigned(),
                        name=f"dsp_{x_lsb}_{m_lsb}",
                        input_registers="operands" in registered,
                        signs=(x_piece.shape().signed, m_piece.shape().signed)))
                    partials.append((x_lsb + m_lsb, stage("landed", product)))
                    continue
                m.d.comb += product.eq(logic_product(x_logic, m_logic) if in_logic
                                       else x_reg * m_reg)
                partials.append((x_lsb + m_lsb, stage("landed", stage("partial", product))))
        shift = stage("landed", stage("partial", stage("operands", self.i.payload.shift)))

        # Exact product x * m (fits product_bits as a signed number).
        total = sum(piece << offset for offset, piece in partials)
        product = Signal(signed(product_bits))
        m.d.comb += product.eq(total)
        product = stage("product", product)
        shift = stage("product", shift)

        # Floor of (2 * product) / 2**shift: bit 0 is the round bit, the rest the floor of
        # product / 2**shift. Sticky: any product bit below the round bit.
        doubled = Cat(Const(0, 1), product).as_signed()
        if "coarse" in registered:
            halved, sticky = self._two_step_shift(m, doubled, shift, stage)
        else:
            halved, sticky = _shift_right_sticky(m, doubled, shift)
        floor = halved[1:].as_signed()
        round_up = Signal()
        m.d.comb += round_up.eq(halved[0] & (sticky | floor[0]))
        floor = stage("shifted", floor)
        round_up = stage("shifted", round_up)

        # Saturate: the floor decides, except when rounding up takes the greatest value past it.
        lo, hi = self.limits
        y = Signal(signed(self._out_bits))
        with m.If(floor >= hi):
            m.d.comb += y.eq(hi)
        with m.Elif(floor < lo):
            m.d.comb += y.eq(lo)
        with m.Else():
            m.d.comb += y.eq(floor[:self._out_bits] + round_up)
        m.d.comb += self.o.payload.y.eq(stage("saturated", y))
        m.d.comb += self.o.valid.eq(delay(m, self.i.valid, self.latency, name="valid",
                                          reset=True))
        return m
