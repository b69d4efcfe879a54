"""The rDXE vector engine (VE): the half of VRC that computes the RC factors, the softmax
activations and the sequential mode's normalization, all from the shared numeric units.

Three units, each fully pipelined and always ready (the DXT, :mod:`hdl.rdxe.dxt`, schedules
them); every arithmetic step is a shared unit of :mod:`hdl.arith` whose golden twin
``golden.rdxe`` uses (docs/rdxe_models.md sections 3.2 to 3.4):

* :class:`RcUnit`: from the chunks the VACs consume, ``S = sum x**2`` (RMSNorm) or ``P = sum p``
  (softmax) with an :class:`~hdl.arith.idot.IntDot` and an INT32 accumulator, then
  ``rsqrt(fmac(fp32(S), fp32(1/K), eps))`` (:class:`~hdl.arith.convert.IntToFloat`,
  :class:`~hdl.arith.fpmac.FloatMAC`, :class:`~hdl.arith.recip.RSqrt`) or ``reciprocal(fp32(P))``
  (:class:`~hdl.arith.recip.Reciprocal`), and the conversion to the 25-bit RC factor ``(m,
  shift)`` in a :class:`~hdl.arith.requant.Requantizer` (``golden.rdxe.to_rc``).
* :class:`Activations`: the score buffer with the running maximum of the INT8 scores written back
  by Q.K^T, and ``lanes`` copies of ``p = RNE(127 * exp2(fp32(s - max) * c))``
  (:class:`~hdl.arith.convert.IntToFloat`, :class:`~hdl.arith.fpmul.FloatMultiplier`,
  :class:`~hdl.arith.exp2.Exp2`, a :class:`~hdl.arith.requant.Requantizer`):
  ``golden.rdxe.softmax_activations``.
* :class:`Normalizer`: ``lanes`` requantizers that scale activations by an RC factor, the
  sequential mode's ``x_n = requantize(x, m, shift)``.
"""

from __future__ import annotations

from functools import partial

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.convert import IntToFloat
from ..arith.exp2 import Exp2
from ..arith.format import BF16, FP32
from ..arith.fpmac import FloatMAC
from ..arith.fpmul import FloatMultiplier
from ..arith.idot import IntDot
from ..arith.recip import Reciprocal, RSqrt
from ..arith.requant import SHIFT_BITS, Requantizer
from ..latency import unit_latency
from ..pipeline import delay
from ..validate import index_bits
from .spec import (ACC_BITS, CODE_BITS, GBUS_BYTES, VeConfig, check_config, chunk_layout,
                   ve_rc_layout, ve_tap_layout)
from .vac import dot_accumulator

__all__ = ["RcUnit", "Activations", "Normalizer", "ToRc", "P_ONE", "P_ONE_REQUANTIZER", "TAP_LEAD",
           "NORMALIZER_NARROW_BITS", "times_p_one"]

#: INT8 activation of exp(0) = 1 (``golden.rdxe.P_ONE``).
P_ONE = 127
#: ``P_ONE = 127 = 2**7 - 1``: ``127 x`` is ``(x << 7) - x``, one subtraction and no multiplier
#: block (Yosys maps every product of 2 x 2 bits or more, a constant one too, to a
#: ``MULT18X18D``).
P_ONE_SHIFT = P_ONE.bit_length()
#: The requantizer of ``127 sig`` for a signed fp32 significand ``sig`` (:func:`times_p_one`),
#: whose multiplier is 1: ``requantize(127 sig, 1, shift) = requantize(sig, 127, shift)`` (a
#: product by the constant 1 is a wire in synthesis, as in :class:`ToRc`). The VE's activation
#: lanes and the DXE's quantizer (:mod:`hdl.rdxe.quant`) use it.
P_ONE_REQUANTIZER = partial(Requantizer, FP32.precision + 1 + P_ONE_SHIFT, CODE_BITS,
                            clamp="symmetric", mult_bits=2)


def times_p_one(x):
    """``127 x`` as ``(x << 7) - x`` (:data:`P_ONE_SHIFT`): exact in :data:`P_ONE_REQUANTIZER`'s
    input for an fp32 significand."""
    return (x << P_ONE_SHIFT) - x
#: The normalizer's requantizer slices in logic (``Requantizer(narrow_bits=...)``): at 19-bit RC
#: factors the INT8 x 2-bit piece (one add); the INT8 x 17-bit piece stays on its block, whose
#: three adder levels in logic cost the DXT its 100 MHz (docs/rdxe.md 14.4).
NORMALIZER_NARROW_BITS = 4
#: Largest requantizer shift.
_SHIFT_MAX = (1 << SHIFT_BITS) - 1
#: Cycles of the score buffer's read: the synchronous read and a register behind it.
_READ = 2
#: Registers between exp2's result, split into a significand and a shift, and the activation
#: requantizer (``golden.rdxe.Latency.split``).
_SPLIT = 1
#: Registers on the RC factor after its conversion (``golden.rdxe.Latency.rc_out``).
_RC_OUT = 1
#: Registers on the tap inside the RC unit, in front of its dot product's multiplier blocks:
#: the feed's register sat 6.6 ns of route from them (docs/rdxe.md 14.4, round 16). The DXT
#: taps its chunks this many cycles earlier, so the factor comes at the same cycle.
TAP_LEAD = 1
#: The RC unit's floating-point units. The sum's conversion registers its magnitude (four
#: stages), so that the negation's carry chain does not share a cycle with the leading-zero
#: count. The multiply-add's adder registers its compare too
#: (cut 0), so that it does not share a cycle with the alignment's choice, and its multiplier's
#: pieces run between their blocks' own registers, then land in fabric registers before their
#: sum (step 20); the Newton-Raphson products likewise, each
#: route to and from a block with a cycle of its own (docs/rdxe.md section 9.1, step 16). The
#: reciprocal's extra cycles hide behind the RMSNorm path's.
_TO_FLOAT_UNIT = partial(IntToFloat, ACC_BITS, FP32, stages=4)
_FMAC_UNIT = partial(FloatMAC, FP32, FP32, add_stages=7, add_cuts=(3, 5, 1, 4, 6, 0),
                     block_registers=True, land_pieces=True)
_RSQRT_UNIT = partial(RSqrt, block_registers=True, land_products=True)
_RECIPROCAL_UNIT = partial(Reciprocal, round_register=True, block_registers=True,
                           land_products=True)


def _check(cfg) -> VeConfig:
    return check_config(cfg, VeConfig, "VE")


def _fp32_fields(m: Module, bits, name: str):
    """Split an fp32 code of a non-negative value: ``(sig, exp, inf)`` with ``sig`` the 24-bit
    significand of a normal value (0 for a zero or subnormal), ``exp`` its biased exponent field
    and ``inf`` set for +inf."""
    field = bits[FP32.man_bits:FP32.man_bits + FP32.exp_bits]
    normal = (field != 0) & (field != FP32.exp_max_field)
    sig = Signal(FP32.precision + 1, name=f"{name}_sig")          # as a signed 25-bit operand
    m.d.comb += sig.eq(Mux(normal, Cat(bits[:FP32.man_bits], Const(1, 1)), 0))
    return sig, field, field == FP32.exp_max_field


class ToRc:
    """Build into ``m`` the RC conversion ``golden.rdxe.to_rc`` of an fp32 code ``r >= 0`` with
    ``frac`` fraction bits kept: the significand rounded half to even to ``b = rc_bits - 6`` bits
    in a shared Requantizer (``requantize(sig, 1, 24 - b)``), then, at its output and without a
    register, the carry renormalization, the shift ``(b - 1) - e - frac`` and the saturation and
    flush. One place for the conversion: :class:`RcUnit` and the DXE controller's
    :class:`~hdl.rdxe.scalar.ScalarUnit` build it (one per module: its Requantizer is the
    submodule ``to_rc``). The sign bit is not read, and a NaN saturates as +inf does (the golden
    refuses both: no VE factor is negative or NaN).

    Parameters
    ----------
    m : Module
    cfg : VeConfig
        Its ``rc_mant_bits`` is ``b``.
    valid, bits, frac : Value
        The input's valid bit, its fp32 code and the fraction bits kept (a constant or a Value).
    tags : dict of Value
        Signals carried beside the conversion.

    Members (Signals): ``valid``, ``m``, ``shift`` and every ``tags`` entry, ``latency``
    (the Requantizer's, :meth:`latency_of`) cycles after the input.
    """

    @staticmethod
    def unit(cfg: VeConfig) -> partial:
        """Return the conversion's Requantizer (a significand and a carry bit wide) as a unit."""
        b = cfg.rc_mant_bits
        return partial(Requantizer, max(FP32.precision + 1, b + 2), b + 2, clamp="full",
                       mult_bits=2)

    @classmethod
    def latency_of(cls, cfg: VeConfig) -> int:
        """Return the conversion's latency for configuration ``cfg``, without building it."""
        return unit_latency(cls.unit(cfg))

    def __init__(self, m: Module, cfg: VeConfig, valid, bits, frac, tags: dict):
        b = cfg.rc_mant_bits
        sig, field, inf = _fp32_fields(m, bits, "to_rc")
        m.submodules.to_rc = rq = self.unit(cfg)()
        m.d.comb += [rq.i.valid.eq(valid), rq.i.payload.x.eq(sig), rq.i.payload.m.eq(1),
                     rq.i.payload.shift.eq(FP32.precision - b)]
        self.latency = rq.latency
        # e + 127 = field: shift = (b - 1) - (field - 127) - frac, before the carry.
        base = Signal(signed(11), name="to_rc_base")
        m.d.comb += base.eq((b - 1 + FP32.bias) - field - frac)
        lat = rq.latency
        base = delay(m, base, lat, name="to_rc_base_d")
        zero = delay(m, sig == 0, lat, name="to_rc_zero")
        inf = delay(m, inf, lat, name="to_rc_inf")
        self.tags = {k: delay(m, v, lat, name=f"to_rc_{k}") for k, v in tags.items()}
        y = rq.o.payload.y
        carry = y == (1 << b)
        shift = Signal(signed(12), name="to_rc_shift")
        m.d.comb += shift.eq(base - carry)
        big = inf | (~zero & (shift < 0))
        tiny = (zero & ~inf) | (~zero & (shift > _SHIFT_MAX))
        self.valid = rq.o.valid
        self.m = Signal(b, name="to_rc_m")
        self.shift = Signal(SHIFT_BITS, name="to_rc_shift_out")
        m.d.comb += [
            self.m.eq(Mux(big, (1 << b) - 1, Mux(tiny, 0, Mux(carry, 1 << (b - 1), y[:b])))),
            self.shift.eq(Mux(big, 0, Mux(tiny, _SHIFT_MAX, shift[:SHIFT_BITS]))),
        ]


class RcUnit(wiring.Component):
    """Compute the RC factor of each operation from the chunks the VACs consume.

    RMSNorm (``softmax`` clear on the tap): ``S = sum x**2`` over the operation's chunks (an
    ``IntDot(x, x)`` and an INT32 accumulator, exact), ``v = fmac(fp32(S), inv_k, eps)``,
    ``r = rsqrt(v)``, ``(m, shift) = to_rc(r, norm_frac)`` (``golden.rdxe.rms_rc``). Softmax
    (``softmax`` set): ``P = sum p`` (the same IntDot with ones), ``r = reciprocal(fp32(P))``,
    ``(m, shift) = to_rc(r, prob_frac)`` (``golden.rdxe.softmax_rc``). The reciprocal's result
    waits in registers until the RMSNorm path would be done, so that both paths take the same
    time and the factors leave in the order the operations' inputs came: one converter serves
    both, and the VACs take the factors in order.

    Parameters
    ----------
    cfg : VeConfig

    Members
    -------
    tap : In(stream.Signature(ve_tap_layout(cfg), always_ready=True))
        The chunks, ``first`` and ``last`` marking an operation's input (one chunk may be both);
        ``b`` must be ``data``, or ones with ``softmax`` (the sender chooses it; not checked
        here). Registered :data:`TAP_LEAD` times before the unit's products.
    consts : In(stream.Signature(StructLayout({"inv_k": 32, "eps": 32})))
        fp32 ``fp32(1/K)`` and ``eps_q`` of each RMSNorm operation, in order; taken
        (``ready``) when its sum reaches the multiply-add, ``TAP_LEAD + 1 + dot_latency +
        int_to_float`` cycles after its last chunk. It must be valid then (the DXT queues it
        when the operation starts).
    rc : Out(stream.Signature(ve_rc_layout(cfg), always_ready=True))
        One factor per operation, :attr:`latency` cycles after its last chunk, with the
        operation's ``seq`` tag.

    Latency (defaults): ``tap 1 + dot 5 + accumulate 1 + int_to_float 4 + fmac 13 + rsqrt 28 +
    requant 4 + rc_out 1 = 57`` cycles at 16 lanes (``golden.rdxe.Latency``); one chunk per
    cycle.
    """

    def __init__(self, cfg: VeConfig):
        self.cfg = _check(cfg)
        super().__init__({
            "tap": In(stream.Signature(ve_tap_layout(cfg), always_ready=True)),
            "consts": In(stream.Signature(data.StructLayout({"inv_k": 32, "eps": 32}))),
            "rc": Out(stream.Signature(ve_rc_layout(cfg), always_ready=True)),
        })

    @staticmethod
    def latencies_of(cfg: VeConfig) -> dict:
        """Return the latencies of the shared units of an RC unit of configuration ``cfg``:
        ``dot``, ``int_to_float``, ``fmac``, ``rsqrt``, ``reciprocal``, ``requant``."""
        cfg = _check(cfg)
        return {"dot": IntDot.latency_of(cfg.lanes, a_bits=CODE_BITS, b_bits=CODE_BITS,
                                         acc_bits=ACC_BITS),
                "int_to_float": unit_latency(_TO_FLOAT_UNIT),
                "fmac": unit_latency(_FMAC_UNIT), "rsqrt": unit_latency(_RSQRT_UNIT),
                "reciprocal": unit_latency(_RECIPROCAL_UNIT),
                "requant": ToRc.latency_of(cfg)}

    @property
    def latencies(self) -> dict:
        """Latencies of the shared units: :meth:`latencies_of` the configuration."""
        return self.latencies_of(self.cfg)

    @property
    def latency(self) -> int:
        """Cycles from an operation's last chunk on ``tap`` to its factor on ``rc``."""
        lat = self.latencies
        return (TAP_LEAD + lat["dot"] + 1 + lat["int_to_float"] + max(lat["fmac"] + lat["rsqrt"],
                                                            lat["reciprocal"]) + lat["requant"]
                + _RC_OUT)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        tap = data.View(self.tap.payload.shape(),
                        delay(m, self.tap.payload.as_value(), TAP_LEAD, name="tap"))
        m.submodules.dot = dot = IntDot(cfg.lanes, a_bits=CODE_BITS, b_bits=CODE_BITS,
                                        acc_bits=ACC_BITS, block_registers=True)
        m.d.comb += dot.i.valid.eq(delay(m, self.tap.valid, TAP_LEAD, name="tap_valid",
                                         reset=True))
        for k in range(cfg.lanes):
            m.d.comb += [dot.i.payload.a[k].eq(tap.data[k]),
                         dot.i.payload.b[k].eq(tap.b[k])]
        # The INT32 accumulator (S < 2**30, P < 2**23: exact); registered, it feeds the
        # conversion.
        total, flags = dot_accumulator(m, dot, {"first": tap.first, "last": tap.last,
                                                "softmax": tap.softmax, "seq": tap.seq})
        done, sum_final = Signal(), Signal(signed(ACC_BITS))
        done_softmax, done_seq = Signal(), Signal()
        m.d.sync += [done.eq(dot.o.valid & flags["last"]), sum_final.eq(total),
                     done_softmax.eq(flags["softmax"]), done_seq.eq(flags["seq"])]

        m.submodules.to_float = to_float = _TO_FLOAT_UNIT()
        m.d.comb += [to_float.i.valid.eq(done), to_float.i.payload.x.eq(sum_final)]
        softmax = delay(m, done_softmax, to_float.latency, name="softmax_f")
        seq = delay(m, done_seq, to_float.latency, name="seq_f")
        value = to_float.o.payload.y

        # RMSNorm: v = fmac(S, 1/K, eps), r = rsqrt(v).
        m.submodules.fmac = fmac = _FMAC_UNIT()
        m.submodules.rsqrt = rsqrt = _RSQRT_UNIT()
        rms = to_float.o.valid & ~softmax
        m.d.comb += [fmac.i.valid.eq(rms), fmac.i.payload.a.eq(value),
                     fmac.i.payload.b.eq(self.consts.payload.inv_k),
                     fmac.i.payload.c.eq(self.consts.payload.eps), self.consts.ready.eq(rms),
                     rsqrt.i.valid.eq(fmac.o.valid), rsqrt.i.payload.x.eq(fmac.o.payload.y)]
        rms_lat = fmac.latency + rsqrt.latency
        rms_seq = delay(m, seq, rms_lat, name="rms_seq")

        # Softmax: r = reciprocal(P), held back to the RMSNorm path's latency (so its rounding's
        # register costs no cycle).
        m.submodules.recip = recip = _RECIPROCAL_UNIT()
        m.d.comb += [recip.i.valid.eq(to_float.o.valid & softmax), recip.i.payload.x.eq(value)]
        pad = rms_lat - recip.latency
        sm_valid = delay(m, recip.o.valid, pad, name="recip_valid", reset=True)
        sm_value = delay(m, recip.o.payload.y, pad, name="recip_y")
        sm_seq = delay(m, seq, recip.latency + pad, name="sm_seq")

        r = Signal(32)
        m.d.comb += r.eq(Mux(sm_valid, sm_value, rsqrt.o.payload.y))
        frac = Mux(sm_valid, cfg.prob_frac, cfg.norm_frac)
        conv = ToRc(m, cfg, rsqrt.o.valid | sm_valid, r, frac,
                    {"seq": Mux(sm_valid, sm_seq, rms_seq)})
        # Registered: the factor fans out to every VAC's factor queue across the tile.
        m.d.comb += [
            self.rc.valid.eq(delay(m, conv.valid, _RC_OUT, name="rc_valid", reset=True)),
            self.rc.payload.m.eq(delay(m, conv.m, _RC_OUT, name="rc_m")),
            self.rc.payload.shift.eq(delay(m, conv.shift, _RC_OUT, name="rc_shift")),
            self.rc.payload.seq.eq(delay(m, conv.tags["seq"], _RC_OUT, name="rc_seq"))]
        return m


def _maximum(m: Module, values: list):
    """Return the largest of ``values`` by every pairwise comparison at once and one selection
    (one comparator deep instead of ``log2(len)`` levels of compare-and-select)."""
    n = len(values)
    ge = {(i, j): values[i] >= values[j] for i in range(n) for j in range(i + 1, n)}
    result = values[-1]
    for i in reversed(range(n - 1)):
        # Ties go to the lower index, so exactly one value wins.
        win = Signal(name=f"max_win{i}")
        m.d.comb += win.eq(Cat(*(ge[i, j] if i < j else ~ge[j, i]
                                 for j in range(n) if j != i)).all())
        result = Mux(win, values[i], result)
    return result


def score_write_layout(cfg: VeConfig) -> data.StructLayout:
    """Payload of a score write-back: GBUS word ``word`` (scores ``4 word .. 4 word + 3``), its
    INT8 ``data``, the ``keep`` mask of the scores that exist, and ``first``, the first word of a
    Q.K^T (the running maximum restarts)."""
    return data.StructLayout({"word": unsigned(index_bits(cfg.score_words)),
                              "data": data.ArrayLayout(signed(CODE_BITS), GBUS_BYTES),
                              "keep": GBUS_BYTES, "first": 1})


def act_request_layout(cfg: VeConfig) -> data.StructLayout:
    """Payload of an activation request: score buffer ``row``, ``count`` (1 to ``lanes``) of its
    scores that are tokens (the rest give 0), and ``scale``, the fp32 ``log2(e)`` times one score
    step (``golden.rdxe.log2_scale``)."""
    return data.StructLayout({"row": unsigned(index_bits(cfg.score_rows)),
                              "count": unsigned((cfg.lanes).bit_length()), "scale": 32})


class Activations(wiring.Component):
    """Keep the INT8 scores of one head with their running maximum, and turn a row of them into
    the softmax activations ``p = RNE(127 * exp2(fp32(s - max) * scale))``.

    Parameters
    ----------
    cfg : VeConfig

    Members
    -------
    scores : In(stream.Signature(score_write_layout(cfg), always_ready=True))
        Score write-back, one GBUS word per transfer, stored with byte enables into the row of
        ``lanes`` scores holding it; the running maximum of the kept scores restarts with a
        ``first`` word. Usable by a request two cycles later (the maximum lags the write by one).
    req : In(stream.Signature(act_request_layout(cfg), always_ready=True))
        A row to turn into activations.
    p : Out(stream.Signature(chunk_layout(cfg.lanes), always_ready=True))
        ``lanes`` INT8 activations in [0, 127] (the maximum's score gives 127; lanes at and past
        ``count`` give 0), :attr:`latency` cycles after the request:
        ``golden.rdxe.softmax_activations`` bit for bit.
    max : Out(signed(8))
        The running maximum.

    Latency (defaults): the score read 2 (the read and a register), then ``int_to_float 4 +
    fmul 6 + exp2 7 + split 1 + requant 4``: 24 cycles; one row per cycle. ``s - max`` is an
    integer in [-255, 0], exact in bf16, so the conversion is to bf16 and the multiply bf16 x
    fp32 -> fp32: the same single rounding as ``golden.rdxe``'s fp32 x fp32 with a narrower
    multiplier.
    """

    def __init__(self, cfg: VeConfig):
        self.cfg = _check(cfg)
        super().__init__({
            "scores": In(stream.Signature(score_write_layout(cfg), always_ready=True)),
            "req": In(stream.Signature(act_request_layout(cfg), always_ready=True)),
            "p": Out(stream.Signature(chunk_layout(cfg.lanes), always_ready=True)),
            "max": Out(signed(CODE_BITS)),
        })

    @staticmethod
    def _units() -> tuple[partial, ...]:
        # The multipliers' registers are the ECP5 blocks' own when built for that target
        # (hdl.arith.dsp): the VE's blocks sit far from its logic, so the scale multiply's
        # pieces (two: "wide") land in a register of their own before their sum. The
        # conversion registers its magnitude (four stages): ``s - max`` and its negation are
        # two carry chains. ``127 sig`` is a subtraction, not a product (docs/rdxe.md 14.2).
        return (partial(IntToFloat, CODE_BITS + 1, BF16, stages=4),
                partial(FloatMultiplier, BF16, FP32, FP32, split="wide", block_registers=True,
                        land_pieces=True),
                partial(Exp2, block_registers=True),
                P_ONE_REQUANTIZER)

    @classmethod
    def latencies_of(cls, cfg: VeConfig) -> dict:
        """Return the latencies of an activation lane's units in a unit of configuration
        ``cfg``: ``int_to_float``, ``fmul``, ``exp2``, ``requant``."""
        _check(cfg)
        return dict(zip(("int_to_float", "fmul", "exp2", "requant"),
                        (unit_latency(u) for u in cls._units())))

    @classmethod
    def exp_latency_of(cls, cfg: VeConfig) -> int:
        """Return the cycles from the score read's data to the activation in a unit of
        configuration ``cfg``, without building it: ``int_to_float + fmul + exp2 + split +
        requant`` (``E`` of golden.rdxe; ``split`` the register in front of the requantizer)."""
        return sum(cls.latencies_of(cfg).values()) + _SPLIT

    @classmethod
    def latency_of(cls, cfg: VeConfig) -> int:
        """Return the cycles from a request to its activations in a unit of configuration
        ``cfg``, without building it: the score read (and its register) and
        :meth:`exp_latency_of`."""
        return _READ + cls.exp_latency_of(cfg)

    @property
    def exp_latency(self) -> int:
        """Cycles from the score read's data to the activation: :meth:`exp_latency_of`."""
        return self.exp_latency_of(self.cfg)

    @property
    def latency(self) -> int:
        """Cycles from a request to its activations: :meth:`latency_of`."""
        return self.latency_of(self.cfg)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        L = cfg.lanes
        per_row = L // GBUS_BYTES

        # ---- score buffer and running maximum ----------------------------------------------
        m.submodules.buffer = buf = Memory(shape=data.ArrayLayout(signed(CODE_BITS), L),
                                           depth=cfg.score_rows, init=[])
        wr = buf.write_port(granularity=1)
        w = self.scores.payload
        offset = w.word[:(per_row - 1).bit_length()] if per_row > 1 else Const(0, 1)
        m.d.comb += wr.addr.eq(w.word >> (per_row - 1).bit_length())
        for k in range(L):
            m.d.comb += wr.data[k].eq(w.data[k % GBUS_BYTES])
        en = Signal(L)
        m.d.comb += [en.eq(w.keep << (offset * GBUS_BYTES)),
                     wr.en.eq(Mux(self.scores.valid, en, 0))]
        # The running maximum (it follows a write by two cycles): one level of compare-and-select
        # per cycle, the pairs' maxima registered, then the running value's update with both.
        values = [Mux(w.keep[k], w.data[k], -128) for k in range(GBUS_BYTES)]
        while len(values) > 2:
            values = [Mux(a > b, a, b) for a, b in zip(values[::2], values[1::2])]
        pair_max = [delay(m, v, 1, name=f"pair_max{i}") for i, v in enumerate(values)]
        word_first = delay(m, w.first, 1, name="word_first")
        word_valid = delay(m, self.scores.valid, 1, name="word_valid", reset=True)
        running = Signal(signed(CODE_BITS), init=-128)
        with m.If(word_valid):
            m.d.sync += running.eq(Mux(word_first, _maximum(m, pair_max),
                                       _maximum(m, pair_max + [running])))
        m.d.comb += self.max.eq(running)

        # ---- activations: lanes copies of the exp path --------------------------------------
        rd = buf.read_port()
        req = self.req.payload
        # The row is read every cycle (what no request asked for is dropped by its valid bit):
        # the sequencer's decision to issue does not reach the block RAM.
        m.d.comb += rd.addr.eq(req.row)
        # The row is registered once more: a block RAM's clock-to-output leaves no time for the
        # subtraction and the conversion's first step behind it.
        scores = delay(m, rd.data.as_value(), 1, name="scores")
        scores = data.View(data.ArrayLayout(signed(CODE_BITS), L), scores)
        valid = delay(m, self.req.valid, _READ, name="read_valid", reset=True)
        count = delay(m, req.count, _READ, name="count")
        scale = delay(m, req.scale, _READ, name="scale")
        keep_lat = self.exp_latency
        for k in range(L):
            to_float, mul, exp, quant = (unit() for unit in self._units())
            if k == 0:
                scale = delay(m, scale, to_float.latency, name="scale_f")
            m.submodules[f"to_float{k}"] = to_float
            m.submodules[f"mul{k}"] = mul
            m.submodules[f"exp{k}"] = exp
            m.submodules[f"quant{k}"] = quant
            diff = Signal(signed(CODE_BITS + 1), name=f"diff{k}")
            m.d.comb += [diff.eq(scores[k] - running),
                         to_float.i.valid.eq(valid), to_float.i.payload.x.eq(diff),
                         mul.i.valid.eq(to_float.o.valid), mul.i.payload.a.eq(to_float.o.payload.y),
                         mul.i.payload.b.eq(scale),
                         exp.i.valid.eq(mul.o.valid), exp.i.payload.x.eq(mul.o.payload.y)]
            # p = RNE(127 * e) = requantize(127 sig, 1, 23 - exp), the shift capped at 63; the
            # split is registered, and 127 sig made in the requantizer's first cycle.
            sig, field, _ = _fp32_fields(m, exp.o.payload.y, f"exp{k}")
            shift = Signal(SHIFT_BITS, name=f"pshift{k}")
            m.d.comb += shift.eq(Mux(field < FP32.bias + FP32.man_bits - _SHIFT_MAX, _SHIFT_MAX,
                                     (FP32.bias + FP32.man_bits - field)[:SHIFT_BITS]))
            m.d.comb += [
                quant.i.valid.eq(delay(m, exp.o.valid, _SPLIT, name=f"split_valid{k}",
                                       reset=True)),
                quant.i.payload.x.eq(times_p_one(delay(m, sig, _SPLIT, name=f"split_sig{k}"))),
                quant.i.payload.m.eq(1),
                quant.i.payload.shift.eq(delay(m, shift, _SPLIT, name=f"split_shift{k}"))]
            live = delay(m, k < count, keep_lat, name=f"live{k}")
            m.d.comb += self.p.payload.data[k].eq(Mux(live, quant.o.payload.y, 0))
        m.d.comb += self.p.valid.eq(delay(m, valid, keep_lat, name="p_valid", reset=True))
        return m


def normalize_layout(cfg: VeConfig) -> data.StructLayout:
    return data.StructLayout({"data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes),
                              "m": unsigned(cfg.rc_mant_bits), "shift": unsigned(SHIFT_BITS)})


class Normalizer(wiring.Component):
    """Scale a chunk of INT8 activations by an RC factor: ``requantize(x, m, shift)`` to INT8 in
    the ``clamp`` range, per lane (the sequential mode's normalization: ``golden.rdxe``'s
    ``x_n`` and ``probs``).

    Members
    -------
    i : In(stream.Signature(normalize_layout(cfg), always_ready=True))
    o : Out(stream.Signature(chunk_layout(cfg.lanes), always_ready=True))
        ``latency`` (the Requantizer's, 5: its shift in two steps) cycles later.
    """

    def __init__(self, cfg: VeConfig):
        self.cfg = _check(cfg)
        super().__init__({
            "i": In(stream.Signature(normalize_layout(cfg), always_ready=True)),
            "o": Out(stream.Signature(chunk_layout(cfg.lanes), always_ready=True)),
        })

    @staticmethod
    def _unit(cfg: VeConfig) -> partial:
        # The shift in two steps: in one it took ten LUT levels and a carry chain from the
        # product register (docs/rdxe.md 14.4, session 30); its writes land in the background.
        return partial(Requantizer, CODE_BITS, CODE_BITS, clamp=cfg.clamp,
                       mult_bits=cfg.rc_mant_bits, mult_signed=False, stages=5,
                       block_registers=True, narrow_in_logic=True,
                       narrow_bits=NORMALIZER_NARROW_BITS)

    @classmethod
    def latency_of(cls, cfg: VeConfig) -> int:
        """Return the latency of a normalizer of configuration ``cfg``, without building it."""
        return unit_latency(cls._unit(_check(cfg)))

    @property
    def latency(self) -> int:
        return self.latency_of(self.cfg)

    def elaborate(self, platform):
        m = Module()
        for k in range(self.cfg.lanes):
            m.submodules[f"lane{k}"] = unit = self._unit(self.cfg)()
            m.d.comb += [unit.i.valid.eq(self.i.valid),
                         unit.i.payload.x.eq(self.i.payload.data[k]),
                         unit.i.payload.m.eq(self.i.payload.m),
                         unit.i.payload.shift.eq(self.i.payload.shift),
                         self.o.payload.data[k].eq(unit.o.payload.y)]
            if k == 0:
                m.d.comb += self.o.valid.eq(unit.o.valid)
        return m
