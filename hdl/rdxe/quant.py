"""The VE's INT8 quantizer of fp32 vectors, bit-exact to :func:`golden.rdxe.dxe.quantize` and
:func:`~golden.rdxe.dxe.quantize_static` (docs/rdxe.md, "The VE's quantizer").

Per lane, from the shared units of :mod:`hdl.arith` (each with its golden twin)::

    w = fmul(x, k)                               FloatMultiplier
    code = RNE(127 w), saturated to +-127        split, Requantizer

and, over a token's beats, the running maximum of ``|x|`` (exact: the magnitude bits of an fp32
code order like its value). :class:`QuantCore` is that always-ready datapath; it is also the
tail of :class:`~hdl.rdxe.act.GatedActivation`, whose values ``v`` it quantizes, so the VE has
one quantizer. :class:`Quantizer` puts the core behind a :class:`~hdl.pipeline.ResultQueue`: a
stream with back-pressure, as the activation unit is.

A token quantized with its own scale (:func:`golden.rdxe.dxe.quantize`: the DXE's residual before
each RMSNorm-GEMV, the attention output, Q) runs twice: first for ``M = max |x|`` (``max`` at its
last beat; any ``k``, the codes are dropped), then with ``k = reciprocal(M)`` in every lane for
the codes. The reciprocal, one per token, is the DXE controller's (a :class:`~hdl.arith.recip.
Reciprocal` on its per-token scalar path, which needs ``M`` and ``k`` anyway for RMSNorm's
epsilon, the score PPU's factor and the dequantization of the plain projections), not the
quantizer's: the quantizer stays a per-lane datapath, and one Reciprocal serves it and the
activation unit. A static quantization (:func:`~golden.rdxe.dxe.quantize_static`: K and V into
the cache) is one pass with each channel's factor in its lane.
"""

from __future__ import annotations


from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.format import FP32
from ..arith.fpmul import FP32_ONE_BLOCK
from ..arith.requant import SHIFT_BITS, Requantizer
from ..latency import unit_latencies
from ..pipeline import delay, queued_pipeline
from ..validate import power_of_two
from .spec import CODE_BITS
from .ve import P_ONE_REQUANTIZER, times_p_one

__all__ = ["QuantCore", "Quantizer", "quant_in_layout", "quant_out_layout", "UNITS"]

#: Register between ``fmul(x, k)``'s split into a significand and a shift and the requantizer.
_SPLIT = 1
#: Magnitude bits of an fp32 code (its order is the value's order for non-negative values).
_MAG_BITS = 31

#: The shared units of a lane, by name: the fp32 multiplier (``"dsp18"`` with the narrow pieces
#: in logic: one multiplier block, the products of the significands' top 6 bits in logic) and
#: the requantizer of ``127 sig`` (:data:`~hdl.rdxe.ve.P_ONE_REQUANTIZER`).
UNITS = {
    "mul": FP32_ONE_BLOCK,
    "quant": P_ONE_REQUANTIZER,
}


def _lanes(lanes) -> int:
    power_of_two(lanes, "Quantizer lane count", 1, 64)
    return lanes


def quant_in_layout(lanes: int) -> data.StructLayout:
    """Payload of a beat: ``lanes`` fp32 codes ``x``, each lane's fp32 factor ``k`` (a token's
    ``reciprocal(M)`` in every lane, or each channel's static factor), and ``first``, the token's
    first beat (the running maximum restarts)."""
    lanes = _lanes(lanes)
    return data.StructLayout({"x": data.ArrayLayout(32, lanes), "k": data.ArrayLayout(32, lanes),
                              "first": 1})


def quant_out_layout(lanes: int) -> data.StructLayout:
    """Payload of a result: ``lanes`` INT8 ``codes`` and ``max``, the fp32 code of the largest
    ``|x|`` of the token's beats so far (this one included)."""
    return data.StructLayout({"codes": data.ArrayLayout(signed(CODE_BITS), _lanes(lanes)),
                              "max": 32})


class QuantCore(wiring.Component):
    """Quantize ``lanes`` fp32 values a beat to INT8 codes ``RNE(127 fmul(x, k))``, keeping the
    running maximum of ``|x|`` (module notes): the always-ready datapath of :class:`Quantizer`
    and the tail of :class:`~hdl.rdxe.act.GatedActivation`.

    Parameters
    ----------
    lanes : int
        Values per beat, a power of two from 1 to 64.

    Members
    -------
    i : In(stream.Signature(quant_in_layout(lanes), always_ready=True))
        Beats, one a cycle at most.
    o : Out(stream.Signature(quant_out_layout(lanes), always_ready=True))
        One result per beat, :meth:`latency_of` cycles later, in order: ``codes`` is
        ``golden.rdxe.act.act_codes(x, k)`` (NaN ``w``, as ``0 x inf``, gives 0; infinities
        saturate), ``max`` the running ``max |x|`` (``golden.rdxe.act.act_scale``'s ``M`` at a
        token's last beat).

    Latency ``mul 5 + split 1 + quant 4 = 10`` cycles (defaults). Bad ``lanes`` raise
    ``TypeError``/``ValueError`` naming it.
    """

    def __init__(self, lanes: int):
        self.lanes = _lanes(lanes)
        super().__init__({
            "i": In(stream.Signature(quant_in_layout(lanes), always_ready=True)),
            "o": Out(stream.Signature(quant_out_layout(lanes), always_ready=True))})

    @staticmethod
    def latencies() -> dict:
        """Return the latency of each shared unit of a lane, by its name in :data:`UNITS`."""
        return unit_latencies(UNITS)

    @classmethod
    def latency_of(cls, lanes: int) -> int:
        """Return the cycles from a beat to its result, without building the core (``lanes``
        does not change it; checked)."""
        _lanes(lanes)
        lat = cls.latencies()
        return lat["mul"] + _SPLIT + lat["quant"]

    @property
    def latency(self) -> int:
        return self.latency_of(self.lanes)

    def elaborate(self, platform):
        m = Module()
        beat = self.i.payload
        mags, quants = [], []
        for n in range(self.lanes):
            m.submodules[f"mul_w{n}"] = mul_w = UNITS["mul"]()
            m.d.comb += [mul_w.i.valid.eq(self.i.valid), mul_w.i.payload.a.eq(beat.x[n]),
                         mul_w.i.payload.b.eq(beat.k[n])]
            mags.append(beat.x[n][:_MAG_BITS])
            quants.append(self._requantize(m, n, mul_w))
        # Running maximum of |x|: the beat's by a tree with a register behind each level, so that
        # a cycle holds one 31-bit comparison (docs/rdxe.md: two do not reach 100 MHz); its
        # log2(lanes) levels, at most 6, hide in the requantizer's cycles. Then the token's.
        depth = 0
        while len(mags) > 1:
            mags = [delay(m, Mux(p > q, p, q), 1, name=f"max{depth}_{j}")
                    for j, (p, q) in enumerate(zip(mags[::2], mags[1::2]))]
            depth += 1
        running, now = Signal(_MAG_BITS), Signal(_MAG_BITS)
        first = delay(m, beat.first, depth, name="first")
        x_go = delay(m, self.i.valid, depth, name="x_go", reset=True)
        m.d.comb += now.eq(Mux(first | (mags[0] > running), mags[0], running))
        with m.If(x_go):
            m.d.sync += running.eq(now)
        m.d.comb += [self.o.valid.eq(quants[0].o.valid),
                     self.o.payload.max.eq(delay(m, now, self.latency - depth, name="max"))]
        for n, quant in enumerate(quants):
            m.d.comb += self.o.payload.codes[n].eq(quant.o.payload.y)
        return m

    @staticmethod
    def _requantize(m: Module, n: int, mul_w) -> Requantizer:
        """``RNE(127 w)`` of lane ``n``'s ``w`` in a requantizer: the signed significand (0 for
        a zero, subnormal or NaN; ``2**23`` for an infinity, which saturates) and the shift
        ``150 - field`` held between 0 and 63."""
        w = mul_w.o.payload.y
        frac = w[:FP32.man_bits]
        field = w[FP32.man_bits:FP32.man_bits + FP32.exp_bits]
        nan = (field == FP32.exp_max_field) & (frac != 0)
        # The sign applied to the normal significand straight from the product's register, the
        # class tests beside it, and zero chosen last: the tests in front of the negation's
        # carry chain failed at 100 MHz (docs/rdxe.md 14.4, session 38).
        mag = Cat(frac, Const(1, 1))
        signed_mag = Signal(signed(FP32.precision + 1), name=f"w_signed{n}")
        m.d.comb += signed_mag.eq(Mux(w[31], -mag, mag))
        sig = Signal(signed(FP32.precision + 1), name=f"w_sig{n}")
        m.d.comb += sig.eq(Mux((field == 0) | nan, 0, signed_mag))
        top = FP32.bias + FP32.man_bits                          # shift 0 at this field
        shift_max = (1 << SHIFT_BITS) - 1
        shift = Signal(SHIFT_BITS, name=f"w_shift{n}")
        m.d.comb += shift.eq(Mux(field >= top, 0, Mux(field < top - shift_max, shift_max,
                                                         (top - field)[:SHIFT_BITS])))
        m.submodules[f"quant{n}"] = quant = UNITS["quant"]()
        # 127 sig after the split's register, in the requantizer's product cycle (exact: it
        # fits 32 bits), where the product by 1 leaves a cycle's room for the subtraction.
        split = delay(m, sig, _SPLIT, name=f"split_sig{n}")
        m.d.comb += [
            quant.i.valid.eq(delay(m, mul_w.o.valid, _SPLIT, name=f"split_go{n}", reset=True)),
            quant.i.payload.x.eq(times_p_one(split)),
            quant.i.payload.m.eq(1),
            quant.i.payload.shift.eq(delay(m, shift, _SPLIT, name=f"split_shift{n}"))]
        return quant


class Quantizer(wiring.Component):
    """Quantize a stream of ``lanes`` fp32 values a beat to INT8 codes with each lane's factor
    ``k``, reporting the running maximum of ``|x|`` per token (module notes).

    Parameters
    ----------
    lanes : int
        Values per beat, a power of two from 1 to 64.

    Members
    -------
    i : In(stream.Signature(quant_in_layout(lanes)))
        Beats, taken while the result queue has a place for them (``ready`` is a register).
    o : Out(stream.Signature(quant_out_layout(lanes)))
        One result per beat, in order: ``codes`` bit for bit ``golden.rdxe.dxe.quantize_static(x,
        k)`` (with ``k = reciprocal(M)`` in every lane, :func:`golden.rdxe.dxe.quantize`'s
        codes), ``max`` the running ``max |x|`` (``quantize``'s ``top`` at a token's last
        beat).

    Latency :meth:`latency_of` cycles (:class:`QuantCore`'s, 10 by default) from a beat taken to
    its result written into the queue, then two to ``o.valid`` in an empty queue; one beat per
    cycle while ``o`` is ready. Bad ``lanes`` raise ``TypeError``/``ValueError`` naming it.
    """

    def __init__(self, lanes: int):
        self.lanes = _lanes(lanes)
        super().__init__({"i": In(stream.Signature(quant_in_layout(lanes))),
                          "o": Out(stream.Signature(quant_out_layout(lanes)))})

    @staticmethod
    def latency_of(lanes: int) -> int:
        """Return the cycles from a beat taken to its result at the queue, without building the
        unit."""
        return QuantCore.latency_of(lanes)

    @property
    def latency(self) -> int:
        return self.latency_of(self.lanes)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = QuantCore(self.lanes)
        go, queue = queued_pipeline(m, self.i, self.o, quant_out_layout(self.lanes),
                                    self.latency)
        wiring.connect(m, core.o, queue.w)
        m.d.comb += [core.i.valid.eq(go), core.i.payload.eq(self.i.payload)]
        return m
