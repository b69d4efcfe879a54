"""The DXE controller's scalar path: the few fp32 scalars a token needs between the vector passes,
bit-exact to :mod:`golden.rdxe.dxe` (docs/rdxe.md, "The controller's scalar path").

A beat is one op on two fp32 operands, ``x`` (the token's scalar) and ``c`` (a layer constant)::

    op              x      c                     result                       golden
    RECIP           M                            y = reciprocal(x)            act_scale's k
    RMS_EPS         k      e = fp32(127**2 eps)  y = fmul(fmul(c, x), x)      dxe.rms_eps(k, eps)
    SCORE_FACTOR    M_q    score constant        rc = to_rc(fmul(x, c), 0)    dxe.score_factor

with RMS_EPS's special cases: +0 for ``k = +inf`` (an all-zero token) and the largest normal
where the product is +inf. Hardware: one :class:`~hdl.arith.recip.Reciprocal`, one
:class:`~hdl.arith.fpmul.FloatMultiplier` and the VE's RC conversion (:class:`~hdl.rdxe.ve.ToRc`,
one small Requantizer), all from :mod:`hdl.arith`. RMS_EPS's two products in series use the one
multiplier twice: its product goes back in ``mul`` cycles later with ``k`` held beside it, and
no beat is taken in that cycle. A token needs a handful of these ops against thousands of GEMV
cycles, so a second multiplier would buy nothing for its cost (on the ECP5, 269 LUT4, 277 FF
and 4 ``MULT18X18D``: docs/rdxe.md); the bubble is the whole cost. Every op has one latency,
the reciprocal's (the multiplier's path is shorter and waits for it), so results leave in order
through one :class:`~hdl.pipeline.ResultQueue`.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.format import FP32
from ..arith.fpmul import FP32_ONE_BLOCK
from ..arith.recip import RECIP_LANDED
from ..latency import unit_latencies
from ..pipeline import control_copies, delay, queued_pipeline
from .spec import VeConfig, check_config, rc_layout
from .ve import ToRc

__all__ = ["ScalarOp", "ScalarUnit", "scalar_in_layout", "scalar_out_layout", "UNITS"]

#: The shared units by name. The reciprocal with its products landed (``RECIP_LANDED``: 20
#: cycles, 8 more than the six-block unit of sessions 29 and 30, whose routes to and from its
#: blocks failed in the engine's placements; docs/rdxe.md 14.4, round 5).
UNITS = {
    "recip": RECIP_LANDED,
    "mul": FP32_ONE_BLOCK,
}

_INF = Const(FP32.infinity(0), FP32.width)
_MAX = Const(FP32.max_normal, FP32.width)
#: The register between the multiplier's operand selects and the multiplier (docs/rdxe.md 14.4,
#: session 39): hidden behind the reciprocal's 20 cycles (two passes take 16).
_OPERANDS = 1


class ScalarOp(enum.Enum, shape=2):
    """What a beat computes (code 3 is no op: its beat gives the reciprocal's result)."""

    RECIP = 0
    RMS_EPS = 1
    SCORE_FACTOR = 2


def _check(cfg) -> VeConfig:
    return check_config(cfg, VeConfig, "Scalar unit")


def scalar_in_layout() -> data.StructLayout:
    """Payload of a beat: ``op`` (:class:`ScalarOp`), fp32 ``x`` (``M``, ``k`` or ``M_q``) and
    fp32 ``c`` (``e = fp32(127**2 eps)`` or the score constant; not read by ``RECIP``)."""
    return data.StructLayout({"op": ScalarOp, "x": FP32.width, "c": FP32.width})


def scalar_out_layout(cfg: VeConfig) -> data.UnionLayout:
    """Payload of a result: ``y``, the fp32 code of ``RECIP`` and ``RMS_EPS``, or ``rc``
    (:func:`~hdl.rdxe.spec.rc_layout`'s ``m`` and ``shift``) of ``SCORE_FACTOR``, in its low
    bits."""
    return data.UnionLayout({"y": FP32.width, "rc": rc_layout(_check(cfg))})


class ScalarUnit(wiring.Component):
    """Compute the DXE controller's per-token fp32 scalars, one op a beat (module notes):
    ``k = reciprocal(M)``, RMSNorm's epsilon ``rms_eps(k, eps)`` and the score PPU's factor
    ``score_factor(M_q, c)``.

    Parameters
    ----------
    cfg : VeConfig
        Its ``rc_bits`` sets the RC factor's width (``rc_bits - 6`` significand bits and a 6-bit
        shift), as the DXT's (``DxtConfig.ve_config()``).

    Members
    -------
    i : In(stream.Signature(scalar_in_layout()))
        Beats. ``ready`` is the result queue's credit register, low too in the cycle in which an
        ``RMS_EPS`` beat taken ``mul`` cycles earlier uses the multiplier a second time.
    o : Out(stream.Signature(scalar_out_layout(cfg)))
        One result per beat, in order, bit for bit: ``y = golden.arith.func.reciprocal(x)``,
        ``y = golden.rdxe.dxe.rms_eps(x, eps)`` with ``c = fp32(127**2 eps)``, or
        ``rc = golden.rdxe.dxe.score_factor(x, c, params)`` for ``x * c >= 0`` and not NaN
        (a NaN product saturates like +inf, a negative one reads as its magnitude: the golden
        refuses both, and ``M_q`` and ``c`` are never negative).

    Latency :meth:`latency_of` cycles from a beat taken to its result written into the queue
    (the reciprocal's, 20 with ``RECIP_LANDED``), then two to ``o.valid`` in an empty queue. A
    beat a cycle while ``o`` is ready, except the cycle ``pass`` (8: the multiplier's operand
    register and its 7 stages, :meth:`latencies_of`) after each ``RMS_EPS`` beat.
    Bad ``cfg`` raises ``TypeError`` naming it.
    """

    def __init__(self, cfg: VeConfig):
        self.cfg = _check(cfg)
        super().__init__({"i": In(stream.Signature(scalar_in_layout())),
                          "o": Out(stream.Signature(scalar_out_layout(cfg)))})

    @staticmethod
    def latencies_of(cfg: VeConfig) -> dict:
        """Return the latency of each unit by name: :data:`UNITS`' and ``to_rc``, and ``pass``,
        one pass through the multiplier from its operands' selects (their register, then
        ``mul``)."""
        units = unit_latencies(UNITS)
        return {**units, "to_rc": ToRc.latency_of(_check(cfg)), "pass": _OPERANDS + units["mul"]}

    @classmethod
    def latency_of(cls, cfg: VeConfig) -> int:
        """Return the cycles from a beat taken to its result at the queue, without building the
        unit: the longest of the reciprocal, two products in series, and a product then its RC
        conversion."""
        lat = cls.latencies_of(cfg)
        return max(lat["recip"], cls._mul_path(lat))

    @property
    def latency(self) -> int:
        """Cycles from a beat taken to its result at the queue: :meth:`latency_of`."""
        return self.latency_of(self.cfg)

    @staticmethod
    def _mul_path(lat: dict) -> int:
        """Cycles from a beat to its multiplier path's result (RMS_EPS's or SCORE_FACTOR's)."""
        return max(2 * lat["pass"], lat["pass"] + lat["to_rc"])

    def elaborate(self, platform):
        m = Module()
        lat = self.latencies_of(self.cfg)
        t_mul, t_end, t_out = lat["pass"], self._mul_path(lat), self.latency
        beat = self.i.payload
        # The second pass of an RMS_EPS beat taken t_mul cycles ago owns the multiplier now:
        # the input waits that cycle (a gate in front of the queue's credit).
        second = Signal()
        gate = stream.Signature(scalar_in_layout()).create(path=("gate",))
        m.d.comb += [gate.valid.eq(self.i.valid & ~second), gate.payload.eq(beat),
                     self.i.ready.eq(gate.ready & ~second)]
        go, queue = queued_pipeline(m, gate, self.o, scalar_out_layout(self.cfg), t_out)
        op = beat.op.as_value()
        early = delay(m, go & (op == ScalarOp.RMS_EPS.value), t_mul - 1, name="second",
                      reset=True)
        m.d.comb += second.eq(delay(m, early, 1, name="second_gate", reset=True))
        # The operands' selects from registers of their own, not from the input's gate: the
        # multiplier's operand failed by 0.34 ns at round 16 (docs/rdxe.md 14.4, session 37).
        # Their result is registered before the multiplier (round 22: -0.18 ns through the
        # controller's constant select, these selects and the operands' class tests).
        take_a, take_b = control_copies(m, early, 2, name="second_sel")

        m.submodules.recip = recip = UNITS["recip"]()
        m.d.comb += [recip.i.valid.eq(go), recip.i.payload.x.eq(beat.x)]

        # First pass: c * x (e * k, or M_q * c); second pass: the product times k.
        m.submodules.mul = mul = UNITS["mul"]()
        k_held = delay(m, beat.x, t_mul, name="k_held")
        m.d.comb += [
            mul.i.valid.eq(delay(m, go | second, _OPERANDS, name="mul_valid", reset=True)),
            mul.i.payload.a.eq(delay(m, Mux(take_a, mul.o.payload.y, beat.c), _OPERANDS,
                                     name="mul_a")),
            mul.i.payload.b.eq(delay(m, Mux(take_b, k_held, beat.x), _OPERANDS, name="mul_b"))]
        product = mul.o.payload.y
        conv = ToRc(m, self.cfg, mul.o.valid, product, 0, {})
        rc = Signal(rc_layout(self.cfg))
        m.d.comb += [rc.m.eq(conv.m), rc.shift.eq(conv.shift)]
        rc_word = delay(m, rc.as_value(), t_end - t_mul - lat["to_rc"], name="rc_word")

        # RMS_EPS's special cases on the second product: +inf -> the largest normal; k = +inf
        # (an all-zero token) -> +0, whatever the product (NaN for e = 0).
        k_inf = delay(m, beat.x == _INF, 2 * t_mul, name="k_inf")
        eps = Signal(FP32.width)
        m.d.comb += eps.eq(Mux(k_inf, 0, Mux(product == _INF, _MAX, product)))
        eps = delay(m, eps, t_end - 2 * t_mul, name="eps_word")

        op_end = delay(m, op, t_end, name="op_end")
        word = delay(m, Mux(op_end == ScalarOp.SCORE_FACTOR.value, rc_word, eps),
                     t_out - t_end, name="mul_word")
        recip_y = delay(m, recip.o.payload.y, t_out - lat["recip"], name="recip_y")
        op_out = delay(m, op_end, t_out - t_end, name="op_out")
        m.d.comb += [queue.w.valid.eq(delay(m, go, t_out, name="done", reset=True)),
                     queue.w.payload.y.eq(Mux(_is_mul_op(op_out), word, recip_y))]
        return m


def _is_mul_op(op):
    """Whether the op code ``op`` takes its result from the multiplier's path."""
    return (op == ScalarOp.RMS_EPS.value) | (op == ScalarOp.SCORE_FACTOR.value)
