"""The VE's activation unit: SiLU with SwiGLU's gate, and GELU, on INT8 codes with per-channel
scales, bit-exact to :mod:`golden.rdxe.act` (the numerics and their error bounds are there and in
docs/rdxe.md, "VE activations").

Per lane, from the shared units of :mod:`hdl.arith` (each with its golden twin)::

    e = exp2(fmul(bf16(x), a))                   IntToFloat, FloatMultiplier, Exp2
    r = reciprocal(fadd(e, 1.0))                 FloatAdder, Reciprocal
    v = fmul(fmul(fp32(x * y), r), c)            IntToFloat, FloatMultiplier (twice)
    code = RNE(127 * fmul(v, k))                 QuantCore (hdl/rdxe/quant.py)

``x`` converts to bf16 exactly (8 bits), and a bf16 x fp32 product rounded to fp32 is the
golden's fp32 x fp32 product: one rounding of the same exact product. The tail is the VE's
quantizer's core (:class:`~hdl.rdxe.quant.QuantCore`, one quantizer for the VE): it quantizes
``v`` with the beat's ``k`` in every lane and keeps the running maximum of ``|v|`` over a
vector's beats, which is the per-token scale's ``M``: a token
runs through the unit twice, first for ``M`` (any ``k``; the codes are dropped), then with ``k
= reciprocal(M)`` (:func:`golden.rdxe.act.act_scale`, one reciprocal per token for the DXE's
controller to compute) for the codes.

The unit takes a stream with back-pressure: the core is an always-ready pipeline behind a
:class:`~hdl.pipeline.ResultQueue` whose credits gate the input, so a consumer that is not
ready (ffn_down's GEMV takes its input at its own pace) stalls the producer instead of losing
results.

Built with ``quantizer=True``, the unit is also the VE's quantizer (:class:`~hdl.rdxe.quant.
Quantizer`'s contract on a second input ``q``): its beats enter the same core directly, so the
DXE's controller, which runs one instruction at a time, needs one core and one result queue
for both (docs/rdxe.md 14.2, "Area"). The core belongs to one input at a time: a ``q`` beat
waits until no activation beat is left before the core, and an activation beat is not taken
in a cycle that offers a ``q`` beat, so the two never meet in the core and the results leave in
the order the beats entered it.
"""

from __future__ import annotations

from functools import partial

from amaranth import Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.convert import IntToFloat
from ..arith.exp2 import Exp2
from ..arith.format import BF16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmul import FloatMultiplier, logic_product
from ..arith.recip import RECIP_LANDED
from ..latency import unit_latencies
from ..pipeline import control_copies, delay, queued_pipeline
from ..validate import power_of_two
from .quant import UNITS as QUANT_UNITS
from .quant import QuantCore, quant_in_layout, quant_out_layout
from .spec import CODE_BITS

__all__ = ["GatedActivation", "act_in_layout", "act_out_layout"]

_UNITS = {
    "to_bf16": partial(IntToFloat, CODE_BITS, BF16),
    # Every cut: the rounding's increment and choice fed exp2's first stage (synth.depth).
    # Its one block's own registers take the routes to and from it (the blocks are 80 % used).
    "arg": partial(FloatMultiplier, BF16, FP32, FP32, split="dsp18", stages=6,
                   block_registers=True),
    # Its product on its block's own output register: the route from the block left no room
    # for a fabric register's setup (docs/rdxe.md 14.4, session 37).
    "exp2": partial(Exp2, block_registers=True),
    "add": partial(FloatAdder, FP32, stages=8),     # every cut: the alignment and the rounding
    "recip": RECIP_LANDED,
    "to_fp32": partial(IntToFloat, 2 * CODE_BITS, FP32),
    **QUANT_UNITS,                                     # "mul" and the tail's "quant"
}


def _lanes(lanes) -> int:
    power_of_two(lanes, "Activation lane count", 1, 64)
    return lanes


def act_in_layout(lanes: int) -> data.StructLayout:
    """Payload of a beat: ``lanes`` INT8 gate codes ``x`` and up codes ``y`` (1 for GELU), their
    channels' fp32 constants ``a`` and ``c`` (``golden.rdxe.act.act_constants``), the token's
    fp32 factor ``k``, and ``first``, the token's first beat (the running maximum restarts)."""
    lanes = _lanes(lanes)
    return data.StructLayout({"x": data.ArrayLayout(signed(CODE_BITS), lanes),
                              "y": data.ArrayLayout(signed(CODE_BITS), lanes),
                              "a": data.ArrayLayout(32, lanes), "c": data.ArrayLayout(32, lanes),
                              "k": 32, "first": 1})


def act_out_layout(lanes: int) -> data.StructLayout:
    """Payload of a result: ``lanes`` INT8 ``codes`` and ``max``, the fp32 code of the largest
    ``|v|`` of the token's beats so far (this one included): the quantizer's
    (:func:`~hdl.rdxe.quant.quant_out_layout`)."""
    return quant_out_layout(_lanes(lanes))


class GatedActivation(wiring.Component):
    """Compute ``lanes`` activations ``x sigmoid(beta x) y`` a beat, as INT8 codes of one
    token's scale (module notes; ``beta`` and the scales are in the constants ``a``, ``c``).

    Parameters
    ----------
    lanes : int
        Elements per beat, a power of two from 1 to 64.
    quantizer : bool
        ``True``: add the input ``q``, the VE's quantizer on the same core (module notes).
        Default ``False``.

    Members
    -------
    i : In(stream.Signature(act_in_layout(lanes)))
        Beats, taken while the result queue has a place for them (``ready`` is a register; with
        ``quantizer``, also not while ``q.valid`` is high).
    q : In(stream.Signature(quant_in_layout(lanes)))
        With ``quantizer`` only: values to quantize, taken while the result queue has a place
        and no activation beat is on its way to the core.
    o : Out(stream.Signature(act_out_layout(lanes)))
        One result per beat, in order: ``golden.rdxe.act`` bit for bit (``act_codes`` of
        ``act_values`` with the beat's ``k``; ``max`` is ``act_scale``'s ``M`` at a token's last
        beat); for a ``q`` beat, :class:`~hdl.rdxe.quant.Quantizer`'s result. The running
        maximum is the core's: a token's beats must not interleave with the other input's.

    Latency :meth:`latency_of` cycles from a beat taken to its result written into the queue
    (defaults: ``to_bf16 3 + arg 6 + exp2 7 + add 8 + recip 20 + mul 6 + mul 6 + mul 6 + split
    1 + quant 4 = 67``, the last three :class:`~hdl.rdxe.quant.QuantCore`'s), then two to
    ``o.valid`` in an empty queue; a ``q`` beat's is the core's
    (:meth:`~hdl.rdxe.quant.QuantCore.latency_of`, 11). One beat per cycle while ``o`` is
    ready. Bad ``lanes`` raise ``TypeError``/``ValueError`` naming it, a ``quantizer`` not a
    bool ``TypeError``.
    """

    def __init__(self, lanes: int, *, quantizer: bool = False):
        self.lanes = _lanes(lanes)
        if not isinstance(quantizer, bool):
            raise TypeError(f"Activation quantizer must be True or False, not {quantizer!r}")
        self.quantizer = quantizer
        ports = {"i": In(stream.Signature(act_in_layout(lanes))),
                 "o": Out(stream.Signature(act_out_layout(lanes)))}
        if quantizer:
            ports["q"] = In(stream.Signature(quant_in_layout(lanes)))
        super().__init__(ports)

    @staticmethod
    def latencies() -> dict:
        """Return the latency of each shared unit of a lane, by its name in the module's unit
        table (``to_bf16``, ``arg``, ``exp2``, ``add``, ``recip``, ``to_fp32``, ``mul``,
        ``quant``)."""
        return unit_latencies(_UNITS)

    @classmethod
    def latency_of(cls, lanes: int) -> int:
        """Return the cycles from a beat taken to its result at the queue, without building the
        unit (``lanes`` does not change it; checked)."""
        _lanes(lanes)
        lat = cls.latencies()
        return cls._sigmoid_latency(lat) + 2 * lat["mul"] + QuantCore.latency_of(lanes)

    @staticmethod
    def _sigmoid_latency(lat: dict) -> int:
        """Cycles from a beat to its sigmoid ``r``, of the unit latencies ``lat``."""
        return lat["to_bf16"] + lat["arg"] + lat["exp2"] + lat["add"] + lat["recip"]

    @property
    def latency(self) -> int:
        return self.latency_of(self.lanes)

    def elaborate(self, platform):
        m = Module()
        lat = self.latencies()
        request = stream.Signature(1).create(path=("request",))
        # In LUT RAM: at 70 places (since the landed reciprocal) Yosys chose a block RAM, whose
        # unregistered output into the rr-SRAM's write failed 150 paths (docs/rdxe.md 14.4).
        go, queue = queued_pipeline(m, request, self.o, act_out_layout(self.lanes), self.latency,
                                    lut_ram=True)
        beat = self.i.payload
        t_r = self._sigmoid_latency(lat)
        t_v = t_r + 2 * lat["mul"]
        # The quantizer's core takes each lane's v with the beat's k, delayed to meet it.
        m.submodules.tail = tail = QuantCore(self.lanes)
        wiring.connect(m, tail.o, queue.w)
        k = delay(m, beat.k, t_v, name="k")
        first = delay(m, beat.first, t_v, name="first")
        arrived = Signal(name="act_arrived")                  # an activation beat at the core
        act_go, quant_go = self._owner(m, request, go, arrived, t_v)
        # The core's operands are chosen by ``arrived``, a register, not by ``quant_go``: a q
        # beat is never taken in a cycle an activation beat arrives (``_owner``), so the choice
        # is the same, and the queue's credits stay out of the core's first multiplier stage.
        # Each lane chooses by a copy of ``arrived`` of its own (the same cycles, from ``act_go``
        # a cycle before): the last multiplier's valid otherwise crosses the die to every lane.
        choose = control_copies(m, delay(m, act_go, t_v - 1, name="act_way", reset=True),
                                self.lanes, name="act_arrived") if self.quantizer else None
        for n in range(self.lanes):
            v_valid, v = self._value(m, n, act_go, beat, lat, t_r)
            if self.quantizer:
                q = self.q.payload
                m.d.comb += [tail.i.payload.x[n].eq(Mux(choose[n], v, q.x[n])),
                             tail.i.payload.k[n].eq(Mux(choose[n], k, q.k[n]))]
            else:
                m.d.comb += [tail.i.payload.x[n].eq(v), tail.i.payload.k[n].eq(k)]
        if self.quantizer:
            m.d.comb += tail.i.payload.first.eq(Mux(choose[0], first, self.q.payload.first))
        else:
            m.d.comb += tail.i.payload.first.eq(first)
        m.d.comb += [arrived.eq(v_valid), tail.i.valid.eq(v_valid | quant_go)]
        return m

    def _owner(self, m: Module, request, go, arrived, t_v: int):
        """Drive ``request`` (one credit of the result queue a cycle) from ``i`` and, with the
        quantizer, ``q``; return ``(act_go, quant_go)``, the cycles each input's beat is taken.

        A ``q`` beat enters the core at once, an activation beat ``t_v`` cycles later (when
        ``arrived``): ``q`` waits while an activation beat is on its way (a count of them),
        ``i`` while ``q`` offers a beat, so no cycle has two beats at the core."""
        if not self.quantizer:
            m.d.comb += [request.valid.eq(self.i.valid), self.i.ready.eq(request.ready)]
            return go, Const(0)
        on_way = Signal(range(t_v + 1), name="act_on_way")
        m.d.comb += self.i.ready.eq(request.ready & ~self.q.valid)
        free = on_way == 0
        m.d.comb += [self.q.ready.eq(request.ready & free),
                     request.valid.eq(self.i.ready & self.i.valid | self.q.ready & self.q.valid)]
        act_go, quant_go = Signal(name="act_go"), Signal(name="quant_go")
        m.d.comb += [quant_go.eq(go & self.q.valid & free), act_go.eq(go & ~quant_go)]
        m.d.sync += on_way.eq(on_way + act_go - arrived)
        return act_go, quant_go

    @staticmethod
    def _value(m: Module, n: int, go, beat, lat: dict, t_r: int):
        """Lane ``n``'s ``v`` (valid, fp32 code), ``t_r + 2 mul`` cycles after the beat (``t_r``:
        the sigmoid's)."""
        to_bf16, arg, exp2, add, recip, to_fp32, mul_q, mul_v = (
            _UNITS[name]() for name in ("to_bf16", "arg", "exp2", "add", "recip", "to_fp32",
                                        "mul", "mul"))
        for name, unit in (("to_bf16", to_bf16), ("arg", arg), ("exp2", exp2), ("add", add),
                           ("recip", recip), ("to_fp32", to_fp32), ("mul_q", mul_q),
                           ("mul_v", mul_v)):
            m.submodules[f"{name}{n}"] = unit
        one = Const(FP32.pack(0, FP32.bias, 0), 32)
        # The INT16 product waits for the sigmoid in a register chain; its conversion is exact.
        # In logic: an 8 x 8 product would take a whole MULT18X18D. Its operands are the chain's
        # first registers: the beat's payload fans out to every lane, and the adder tree
        # behind it then starts at the lane's own flip-flops.
        wait = t_r - lat["to_fp32"]
        product = Signal(signed(2 * CODE_BITS), name=f"product{n}")
        m.d.comb += product.eq(logic_product(delay(m, beat.x[n], 1, name=f"product_x{n}"),
                                             delay(m, beat.y[n], 1, name=f"product_y{n}")))
        m.d.comb += [
            to_bf16.i.valid.eq(go), to_bf16.i.payload.x.eq(beat.x[n]),
            arg.i.valid.eq(to_bf16.o.valid), arg.i.payload.a.eq(to_bf16.o.payload.y),
            arg.i.payload.b.eq(delay(m, beat.a[n], lat["to_bf16"], name=f"a{n}")),
            exp2.i.valid.eq(arg.o.valid), exp2.i.payload.x.eq(arg.o.payload.y),
            add.i.valid.eq(exp2.o.valid), add.i.payload.a.eq(exp2.o.payload.y),
            add.i.payload.b.eq(one),
            recip.i.valid.eq(add.o.valid), recip.i.payload.x.eq(add.o.payload.y),
            to_fp32.i.valid.eq(delay(m, go, wait, name=f"product_go{n}", reset=True)),
            to_fp32.i.payload.x.eq(delay(m, product, wait - 1, name=f"product_d{n}")),
            mul_q.i.valid.eq(recip.o.valid), mul_q.i.payload.a.eq(to_fp32.o.payload.y),
            mul_q.i.payload.b.eq(recip.o.payload.y),
            mul_v.i.valid.eq(mul_q.o.valid), mul_v.i.payload.a.eq(mul_q.o.payload.y),
            mul_v.i.payload.b.eq(delay(m, beat.c[n], t_r + lat["mul"], name=f"c{n}")),
        ]
        return mul_v.o.valid, mul_v.o.payload.y
