"""The DXE's global post-processing unit (GPPU): INT8 codes to fp32, the residual add and RoPE,
bit-exact to :mod:`golden.rdxe.dxe` (the numerics and their error bounds are there and in
docs/rdxe.md, "The DXE's layer in hardware numerics").

A beat is one op on ``lanes`` elements; per lane (``x = fp32(code)``, ``1 = 1.0``)::

    op                 multiplier a        multiplier b           adder
    DEQUANTIZE         x * scale[n]        a * 1                  -0 + b
    DEQUANTIZE_TOKEN   x * c[n]            a * top                -0 + b
    RESIDUAL_ADD       h[n] * 1            y[n] * 1               a + b
    ROPE, even lane    x0 * cos            x1 * sin               a + (-b)
    ROPE, odd lane     x0 * sin            x1 * cos               a + b

The two multipliers of a lane run in series, the second ``mul`` cycles behind the first, so
that ``dequantize_token``'s two products in series and RoPE's two in parallel share them: two
FloatMultipliers and one FloatAdder a lane (and an IntToFloat). Two multipliers in parallel and
a third in series would save the registers that hold the second product's operands for ``mul``
cycles and 5 cycles of latency, at a third multiplier: at 4 lanes on the ECP5 (``synth_ecp5``)
this unit takes 7,017 LUT4, 7,368 FF and 32 MULT18X18D, that one 7,961, 6,931 and 48
(docs/rdxe.md, "The GPPU"; with the multipliers' default split, four blocks each: they are now
``"dsp18"``, three). The identities are
exact on every code the units see: ``fmul(p, 1.0) = p`` for a multiplier's own result ``p``
(flushed, canonical NaN), ``fmul(h, 1.0)`` flushes a subnormal ``h`` to the zero of its sign as
the adder reads it anyway (a NaN becomes the canonical one, which the adder returns for any NaN),
and ``fadd(-0, p) = p`` for every such ``p``.

RoPE (NORM) rotates pairs ``(2i, 2i + 1)`` of adjacent lanes: a pair's two outputs come from one
beat, which carries ``cos[i]`` and ``sin[i]`` of its ``lanes / 2`` pairs (hence at least 2
lanes).

The unit takes a stream with back-pressure, as :class:`~hdl.rdxe.act.GatedActivation` does: the
core is an always-ready pipeline behind a :class:`~hdl.pipeline.ResultQueue` whose credits gate
the input.
"""

from __future__ import annotations

from functools import partial

from amaranth import Cat, Const, Module, Mux, signed
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.convert import IntToFloat
from ..arith.format import FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmul import FP32_ONE_BLOCK, FloatMultiplier
from ..latency import unit_latencies
from ..pipeline import delay, queued_pipeline
from ..validate import power_of_two
from .spec import CODE_BITS

__all__ = ["Gppu", "GppuOp", "gppu_in_layout", "gppu_out_layout"]

_UNITS = {
    "to_fp32": partial(IntToFloat, CODE_BITS, FP32),
    "mul": FP32_ONE_BLOCK,
    "add": partial(FloatAdder, FP32, stages=8),     # every cut: the alignment and the rounding
}
#: The register on the adder's operands, chosen by op behind multiplier b.
_ADD_IN = 1

#: fp32 1.0, the multiplier's identity.
_ONE = Const(FP32.pack(0, FP32.bias, 0), FP32.width)
#: The fp32 sign bit; alone, -0, the adder's identity.
_SIGN = Const(1 << (FP32.width - 1), FP32.width)


class GppuOp(enum.Enum, shape=2):
    """What a beat computes (named after its :mod:`golden.rdxe.dxe` function)."""

    DEQUANTIZE = 0
    DEQUANTIZE_TOKEN = 1
    RESIDUAL_ADD = 2
    ROPE = 3


#: The ops whose first operand is an INT8 code.
_DEQUANTIZE = (GppuOp.DEQUANTIZE, GppuOp.DEQUANTIZE_TOKEN)


def _is(op, *ops):
    """Whether the op code ``op`` (a plain value) is one of ``ops``."""
    return Cat(*(op == o.value for o in ops)).any()


def _lanes(lanes) -> int:
    power_of_two(lanes, "GPPU lane count", 2, 64)
    return lanes


def gppu_in_layout(lanes: int) -> data.StructLayout:
    """Payload of a beat: ``op`` (:class:`GppuOp`) and ``args``, a union of one member per
    operation's operands:

    * ``dequantize`` (both dequantizations): INT8 ``codes``, fp32 ``scale`` per lane (``s`` of
      ``dequantize``, ``c`` of ``dequantize_token``), fp32 ``top``, the token's ``M`` (read by
      ``DEQUANTIZE_TOKEN`` only);
    * ``add``: fp32 ``h`` and ``y`` per lane;
    * ``rope``: fp32 ``x`` per lane (pair ``i`` in lanes ``2i``, ``2i + 1``), fp32 ``cos`` and
      ``sin`` per pair.
    """
    lanes = _lanes(lanes)
    fp32s = data.ArrayLayout(FP32.width, lanes)
    pairs = data.ArrayLayout(FP32.width, lanes // 2)
    return data.StructLayout({
        "op": GppuOp,
        "args": data.UnionLayout({
            "dequantize": data.StructLayout({"codes": data.ArrayLayout(signed(CODE_BITS), lanes),
                                             "scale": fp32s, "top": FP32.width}),
            "add": data.StructLayout({"h": fp32s, "y": fp32s}),
            "rope": data.StructLayout({"x": fp32s, "cos": pairs, "sin": pairs}),
        }),
    })


def gppu_out_layout(lanes: int) -> data.StructLayout:
    """Payload of a result: ``lanes`` fp32 codes ``y``."""
    return data.StructLayout({"y": data.ArrayLayout(FP32.width, _lanes(lanes))})


class Gppu(wiring.Component):
    """Compute ``lanes`` fp32 results a beat of one of the DXE's post-processing ops (module
    notes): dequantization of INT8 codes with a per-channel scale, or with a per-channel one and
    the token's ``M``, the residual add, or NORM RoPE.

    Parameters
    ----------
    lanes : int
        Elements per beat, a power of two from 2 to 64 (a RoPE pair's two outputs share a beat).

    Members
    -------
    i : In(stream.Signature(gppu_in_layout(lanes)))
        Beats, taken while the result queue has a place for them (``ready`` is a register).
    o : Out(stream.Signature(gppu_out_layout(lanes)))
        One result per beat, in order, equal bit for bit to :mod:`golden.rdxe.dxe`: lane ``n``
        of ``dequantize(codes, scale)``, ``dequantize_token(codes, scale, top)``,
        ``residual_add(h, y)`` or ``rope(x, cos, sin)`` on the beat's operands.

    Latency :meth:`latency_of` cycles from a beat taken to its result written into the queue
    (``to_fp32 3 + mul 6 + mul 6 + 1 + add 8 = 24``: the 1 registers the adder's operands),
    then two to ``o.valid`` in an empty
    queue; one beat per cycle of any mix of ops while ``o`` is ready (the queue has
    :meth:`~hdl.pipeline.ResultQueue.full_rate_depth` places: a place's round trip). Hardware
    per lane: one IntToFloat (INT8), two FloatMultipliers in series, one FloatAdder, and
    registers holding the operands until their unit's turn. Bad ``lanes`` raise
    ``TypeError``/``ValueError`` naming it.
    """

    def __init__(self, lanes: int):
        self.lanes = _lanes(lanes)
        super().__init__({"i": In(stream.Signature(gppu_in_layout(lanes))),
                          "o": Out(stream.Signature(gppu_out_layout(lanes)))})

    @staticmethod
    def latencies() -> dict:
        """Return the latency of each shared unit of a lane, by its name in the module's unit
        table (``to_fp32``, ``mul``, ``add``)."""
        return unit_latencies(_UNITS)

    @classmethod
    def latency_of(cls, lanes: int) -> int:
        """Return the cycles from a beat taken to its result at the queue, without building the
        unit (``lanes`` does not change it; checked)."""
        _lanes(lanes)
        lat = cls.latencies()
        return lat["to_fp32"] + 2 * lat["mul"] + _ADD_IN + lat["add"]

    @property
    def latency(self) -> int:
        """Cycles from a beat taken to its result at the queue: :meth:`latency_of`."""
        return self.latency_of(self.lanes)

    def elaborate(self, platform):
        m = Module()
        lat = self.latencies()
        go, queue = queued_pipeline(m, self.i, self.o, gppu_out_layout(self.lanes), self.latency)
        op, args = self.i.payload.op.as_value(), self.i.payload.args
        t_a = lat["to_fp32"]                   # multiplier a starts once the codes are fp32
        t_b = t_a + lat["mul"]                 # multiplier b takes a's product
        t_s = t_b + lat["mul"]                 # the adder takes b's
        # The op travels beside the operands in one register chain, tapped where a unit starts.
        op_at = {0: op}
        for before, t in ((0, t_a), (t_a, t_b), (t_b, t_s)):
            op_at[t] = delay(m, op_at[before], t - before, name=f"op_{t}")
        top = delay(m, args.dequantize.top, t_b, name="top")
        adds = []
        for i in range(self.lanes // 2):
            p, q, r = self._pair_operands(m, i, _is(op, GppuOp.ROPE), args, t_b)
            for n in (2 * i, 2 * i + 1):
                odd = n % 2
                mul_a = self._first_product(m, n, go, op_at, args, t_a)
                # Pair i's x1, or the lane's y; RoPE's sin (even lane) or cos (odd lane).
                a_b = Mux(_is(op_at[t_b], GppuOp.RESIDUAL_ADD), q, p) if odd else p
                b_b = Mux(_is(op_at[t_b], GppuOp.ROPE), q if odd else r,
                          Mux(_is(op_at[t_b], GppuOp.DEQUANTIZE_TOKEN), top, _ONE))
                m.submodules[f"mul_b{n}"] = mul_b = _UNITS["mul"]()
                m.d.comb += [mul_b.i.valid.eq(mul_a.o.valid),
                             mul_b.i.payload.a.eq(Mux(_is(op_at[t_b], *_DEQUANTIZE),
                                                      mul_a.o.payload.y, a_b)),
                             mul_b.i.payload.b.eq(b_b)]
                held = delay(m, mul_a.o.payload.y, lat["mul"], name=f"held{n}")
                product = mul_b.o.payload.y
                if not odd:                                 # x0 cos - x1 sin
                    product = Mux(_is(op_at[t_s], GppuOp.ROPE), product ^ _SIGN, product)
                m.submodules[f"add{n}"] = add = _UNITS["add"]()
                m.d.comb += [
                    add.i.valid.eq(delay(m, mul_b.o.valid, _ADD_IN, name=f"add_valid{n}",
                                         reset=True)),
                    add.i.payload.a.eq(delay(m, Mux(_is(op_at[t_s], *_DEQUANTIZE), _SIGN, held),
                                             _ADD_IN, name=f"add_a{n}")),
                    add.i.payload.b.eq(delay(m, product, _ADD_IN, name=f"add_b{n}"))]
                adds.append(add)
        m.d.comb += queue.w.valid.eq(adds[0].o.valid)
        for n, add in enumerate(adds):
            m.d.comb += queue.w.payload.y[n].eq(add.o.payload.y)
        return m

    @staticmethod
    def _pair_operands(m: Module, i: int, rope, args, t_b: int):
        """Pair ``i``'s operands of multiplier b, chosen at the beat and held ``t_b`` cycles:
        ``p`` (RoPE's ``x1``, else the even lane's ``y``), ``q`` (``cos``, else the odd lane's
        ``y``) and ``r`` (``sin``): three words a pair, where RoPE and the add need them."""
        rot, add = args.rope, args.add
        p = Mux(rope, rot.x[2 * i + 1], add.y[2 * i])
        q = Mux(rope, rot.cos[i], add.y[2 * i + 1])
        return (delay(m, p, t_b, name=f"p{i}"), delay(m, q, t_b, name=f"q{i}"),
                delay(m, rot.sin[i], t_b, name=f"r{i}"))

    @staticmethod
    def _first_product(m: Module, n: int, go, op_at: dict, args, t_a: int) -> FloatMultiplier:
        """Lane ``n``'s multiplier a, ``t_a`` cycles after the beat: ``fp32(code)`` times the
        scale, or ``h`` times 1, or RoPE's ``x0`` times the pair's ``cos`` (even lane) or
        ``sin`` (odd lane); its operands held until the code's conversion is done."""
        i, odd = n // 2, n % 2
        rot, deq, op = args.rope, args.dequantize, op_at[0]
        m.submodules[f"to_fp32{n}"] = to_fp32 = _UNITS["to_fp32"]()
        m.d.comb += [to_fp32.i.valid.eq(go), to_fp32.i.payload.x.eq(deq.codes[n])]
        word = Mux(_is(op, GppuOp.ROPE), rot.x[2 * i], args.add.h[n])
        scale = Mux(_is(op, GppuOp.ROPE), rot.sin[i] if odd else rot.cos[i],
                    Mux(_is(op, GppuOp.RESIDUAL_ADD), _ONE, deq.scale[n]))
        m.submodules[f"mul_a{n}"] = mul_a = _UNITS["mul"]()
        m.d.comb += [mul_a.i.valid.eq(to_fp32.o.valid),
                     mul_a.i.payload.a.eq(Mux(_is(op_at[t_a], *_DEQUANTIZE), to_fp32.o.payload.y,
                                              delay(m, word, t_a, name=f"word{n}"))),
                     mul_a.i.payload.b.eq(delay(m, scale, t_a, name=f"scale{n}"))]
        return mul_a
