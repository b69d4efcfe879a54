"""The in-flash PE's issue stage: what enters the arithmetic each cycle, and its operands."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..validate import integer
from .setup import plan_layout
from .spec import Mode, Op, PEConfig, beat_layout, pe_config

__all__ = ["Issuer", "issue_layout"]

#: fp16 codes of the uint4 weight codes 0 .. 15 (``int_to_float(q, 5, FP16)``, exact).
_INT4_FP16 = [struct.unpack("<H", struct.pack("<e", q))[0] for q in range(16)]
#: The arithmetic paths; a command's arithmetic starts on a path when the results of the other
#: paths are out (their latencies differ, and results leave in command order).
_FLOAT, _INT, _W4, _LOGIT_FLOAT, _LOGIT_INT, _ATTEND = range(6)


def issue_layout(cfg: PEConfig) -> data.StructLayout:
    """What the issue stage hands the arithmetic each cycle (:class:`Issuer`'s ``o``).

    ``w``: the ``F`` weights (GEMV: the beat, w4a16 codes as fp16; Logit and Attend: the K or V
    beat from the ring); ``x``: the ``F`` elements of ``x`` (lanes outside the row or entry
    ``+0``); ``p``: Attend's ``p[h, t]``. ``dot``: a beat enters the fp16, bf16 or integer dot
    product; ``mac``: an Attend issue enters the fp16, bf16 or int8 accumulate lanes. ``first``,
    ``last``: the row's (Logit: the (token, head)'s) first and last beat; ``final``: the
    command's last; ``group_end``, ``w4``: w4a16's group end and mode. ``k``: Attend's
    accumulator (``b G + h``); ``seed``: the first token's issue (the accumulator starts from
    ``-0``, int8 from 0).
    """
    F = cfg.fmacs
    paths = data.StructLayout({"fp16": 1, "bf16": 1, "int": 1})
    return data.StructLayout({
        "w": 16 * F, "x": 16 * F, "p": 16, "dot": paths, "mac": paths, "first": 1, "last": 1,
        "final": 1, "group_end": 1, "w4": 1, "k": range(cfg.max_beats + 1), "seed": 1})


class Issuer(wiring.Component):
    """Choose what enters the arithmetic each cycle, and register it with its operands.

    **GEMV**: a beat of the gearbox enters when its ``x`` word is in (w4a16: all of ``x``,
    whose group sums the lanes compute meanwhile), its path is free (a command on another
    arithmetic path waits until the results of the previous one are out, so results keep
    command order), a row's last beat has a place in the output queue, and a w4a16 header has a
    place in the header FIFO. **Logit and Attend**: the gearbox fills a two-entry K/V ring
    (an entry is kept until its last use while the next one streams in); issues are one a cycle
    in token order, Logit head by head (``ceil(d / F)`` beats each: the tree needs a dot
    product's beats together), Attend beat by beat and head by head (accumulator
    ``k = b G + h``), an Attend issue only when the token's ``p`` is in and its accumulator is
    not in the MAC (``hazard``).

    Parameters
    ----------
    cfg : PEConfig
    header_depth : int
        Places of the w4a16 header FIFO: headers wait there for their group's ``D``.

    Members
    -------
    beats : In(stream.Signature(beat_layout(cfg)))
        The gearbox's beats.
    plan : In(plan_layout(cfg))
        The command: ``op``, ``mode``, ``tokens``, ``heads``, ``nb``, ``pb``, ``last_mask``.
    att_start : In(1)
        An attention command starts (its issues begin).
    x_count, x_done, p_ready : In
        The ``x`` buffer's state (:class:`~hdl.inflash.xbuffer.XBuffer`).
    x_addr : Out(range(cfg.x_depth))
        The ``x`` word the issue reads (its data a cycle later, ``x_data``).
    x_data : In(16 * F)
    p_release : Out(1)
        Attend: the oldest token's ``p`` is used up.
    can_issue : In(1)
        The output queue has a credit: a row's last beat may enter.
    drained : In(1)
        No result is in the arithmetic.
    attend_busy : In(1)
        An Attend's results are not all out.
    hazard : In(1)
        Attend: the candidate accumulator ``k`` is in the MAC (the issue waits).
    k : Out(range(cfg.max_beats + 1))
        Attend: the candidate accumulator of this cycle.
    mac_issue : Out(1)
        A float Attend issue this cycle (the accumulator loop tracks it).
    attend_issue : Out(1)
        An Attend issue this cycle.
    attend_end : Out(1)
        The command's last Attend issue this cycle.
    row_issue : Out(1)
        A row's (Logit: a score's) last beat enters the arithmetic this cycle: it takes a
        credit of the output queue.
    busy : Out(1)
        The attention issues are not all made.
    headers : Out(stream.Signature(StructLayout({"scale": 16, "offset": 16})))
        w4a16: the groups' scales and offsets, in order.
    o : Out(issue_layout(cfg))
        The issue, registered: one cycle after the beat or issue is chosen.
    """

    def __init__(self, cfg: PEConfig, *, header_depth: int):
        self.cfg = cfg = pe_config(cfg, "Issuer")
        self.header_depth = integer(header_depth, "Header FIFO depth", 1, 4096)
        F = cfg.fmacs
        super().__init__({
            "beats": In(stream.Signature(beat_layout(cfg))),
            "plan": In(plan_layout(cfg)),
            "att_start": In(1),
            "x_count": In(range(cfg.x_depth)), "x_done": In(1), "p_ready": In(1),
            "x_addr": Out(range(cfg.x_depth)), "x_data": In(16 * F),
            "p_release": Out(1),
            "can_issue": In(1), "drained": In(1), "attend_busy": In(1), "hazard": In(1),
            "k": Out(range(cfg.max_beats + 1)),
            "mac_issue": Out(1), "attend_issue": Out(1), "attend_end": Out(1),
            "row_issue": Out(1), "busy": Out(1),
            "headers": Out(stream.Signature(data.StructLayout({"scale": 16, "offset": 16}))),
            "o": Out(issue_layout(cfg)),
        })

    #: Cycles from a beat taken (or an issue chosen) to its registered issue on ``o``.
    latency = 1

    def elaborate(self, platform):
        m = Module()
        p = self.plan
        s = SimpleNamespace(
            att=(p.op == Op.LOGIT) | (p.op == Op.ATTEND), logit=p.op == Op.LOGIT,
            attend=p.op == Op.ATTEND, is_int=p.mode == Mode.W8A8)
        s.is_w4 = (p.mode == Mode.W4A16) & ~s.att
        self._gemv(m, s)
        self._ring(m, s)
        self._attention(m, s)
        self._stage(m, s)
        return m

    def _gemv(self, m, s):
        """GEMV beats: the path, ``x`` and the header FIFO."""
        p, beat = self.plan, self.beats.payload
        s.path = Signal(3)
        m.d.comb += s.path.eq(Mux(s.attend, _ATTEND,
                                  Mux(s.logit, Mux(s.is_int, _LOGIT_INT, _LOGIT_FLOAT),
                                      Mux(s.is_int, _INT, Mux(s.is_w4, _W4, _FLOAT)))))
        s.last_path = Signal(3)
        s.path_free = ~self.attend_busy & ((s.path == s.last_path) | self.drained)
        # Beat b needs x word b only: the first row starts while x is still coming in (w4a16
        # waits for all of x: its lanes are computing the group sums meanwhile).
        x_there = self.x_done | ((beat.beat < self.x_count) & ~s.is_w4)
        m.submodules.headers = headers = SyncFIFO(width=32, depth=self.header_depth)
        s.gemv_ready = (x_there & s.path_free & (~beat.last | self.can_issue)
                        & (~beat.header | headers.w_rdy))
        m.d.comb += [headers.w_en.eq(self.beats.valid & self.beats.ready & ~s.att & beat.header),
                     headers.w_data.eq(Cat(beat.scale, beat.offset)),
                     self.headers.valid.eq(headers.r_rdy),
                     self.headers.payload.as_value().eq(headers.r_data),
                     headers.r_en.eq(self.headers.ready)]

    def _ring(self, m, s):
        """The two-entry K/V ring, filled by the gearbox: every query head of the group uses an
        entry (Logit: head by head, Attend: beat by beat), so an entry stays until its last use
        while the next one streams in."""
        cfg, beat = self.cfg, self.beats.payload
        s.slot_log = cfg.slot_beats.bit_length() - 1
        m.submodules.ring = ring = Memory(shape=16 * cfg.fmacs, depth=2 * cfg.slot_beats, init=[])
        ring_wr = ring.write_port()
        s.ring_rd = ring.read_port()
        s.occ = Signal(range(3))                    # entries begun and not used up
        s.wbeats = Signal(cfg.cols_bits)            # beats of the newest entry written (0: all)
        s.wslot, s.rslot = Signal(), Signal()
        ring_room = (beat.beat != 0) | (s.occ < 2)
        m.d.comb += self.beats.ready.eq(Mux(s.att, ring_room, s.gemv_ready))
        s.fire = self.beats.valid & self.beats.ready & ~s.att
        s.ring_fire = self.beats.valid & self.beats.ready & s.att
        m.d.comb += [ring_wr.addr.eq(Cat(beat.beat[:s.slot_log], s.wslot)),
                     ring_wr.data.eq(beat.data.as_value()), ring_wr.en.eq(s.ring_fire)]
        with m.If(s.ring_fire):
            m.d.sync += s.wbeats.eq(Mux(beat.last, 0, beat.beat + 1))
            with m.If(beat.last):
                m.d.sync += s.wslot.eq(~s.wslot)

    def _attention(self, m, s):
        """Issues, one per cycle, in token order. Logit: head h, beat b; Attend: beat b, head h.
        ``ck`` counts the token's issues: the query word of a Logit, Attend's accumulator."""
        cfg, p = self.cfg, self.plan
        F = cfg.fmacs
        s.tok_left = tok_left = Signal(cfg.tokens_bits)
        s.ck = ck = self.k
        s.cb = cb = Signal(cfg.cols_bits)
        ch = Signal(cfg.query_bits)
        s.h_lane = h_lane = Signal(range(F))        # Attend: p[h] is lane h mod F ...
        h_word = Signal(cfg.query_bits)             # ... of the token's word h // F
        pslot = Signal()
        s.first_token = first_token = Signal()
        cons_active = self.busy
        s.beat_end = beat_end = cb == p.nb - 1
        head_end = ch == p.heads - 1
        s.token_end = token_end = beat_end & head_end
        avail = (s.occ == 2) | ((s.occ == 1) & ((s.wbeats == 0) | (cb < s.wbeats)))
        logit_ok = ((self.x_done | (ck < self.x_count)) & (~beat_end | self.can_issue)
                    & s.path_free)
        issue = Signal()
        m.d.comb += issue.eq(cons_active & avail
                             & Mux(s.logit, logit_ok, self.p_ready & ~self.hazard))
        s.logit_issue = issue & s.logit
        s.attend_issue = issue & s.attend
        m.d.comb += [self.attend_issue.eq(s.attend_issue),
                     self.mac_issue.eq(s.attend_issue & ~s.is_int),
                     self.attend_end.eq(s.attend_issue & token_end & (tok_left == 1)),
                     self.p_release.eq(s.attend_issue & token_end)]
        m.d.sync += s.occ.eq(s.occ + (s.ring_fire & (self.beats.payload.beat == 0))
                             - (issue & token_end))
        with m.If(self.att_start):
            m.d.sync += [cons_active.eq(1), tok_left.eq(p.tokens), ck.eq(0), cb.eq(0), ch.eq(0),
                         h_lane.eq(0), h_word.eq(0), pslot.eq(0), first_token.eq(1),
                         s.occ.eq(0), s.wbeats.eq(0), s.wslot.eq(0), s.rslot.eq(0)]
        with m.If(issue):
            m.d.sync += ck.eq(Mux(token_end, 0, ck + 1))
            with m.If(s.logit):
                m.d.sync += [cb.eq(Mux(beat_end, 0, cb + 1)),
                             ch.eq(Mux(beat_end, Mux(head_end, 0, ch + 1), ch))]
            with m.Else():
                lane_end = h_lane == F - 1
                m.d.sync += [ch.eq(Mux(head_end, 0, ch + 1)),
                             cb.eq(Mux(head_end, Mux(beat_end, 0, cb + 1), cb)),
                             h_lane.eq(Mux(head_end | lane_end, 0, h_lane + 1)),
                             h_word.eq(Mux(head_end, 0, Mux(lane_end, h_word + 1, h_word)))]
            with m.If(token_end):
                m.d.sync += [tok_left.eq(tok_left - 1), s.rslot.eq(~s.rslot), pslot.eq(~pslot),
                             first_token.eq(0)]
                with m.If(tok_left == 1):
                    m.d.sync += cons_active.eq(0)
        with m.If(s.fire | s.logit_issue):
            m.d.sync += s.last_path.eq(s.path)
        m.d.comb += [s.ring_rd.addr.eq(Cat(cb[:s.slot_log], s.rslot)),
                     self.x_addr.eq(Mux(s.att, Mux(s.logit, ck, Mux(pslot, p.pb, 0) + h_word),
                                        self.beats.payload.beat)),
                     self.row_issue.eq((s.fire & self.beats.payload.last)
                                       | (s.logit_issue & beat_end))]

    def _stage(self, m, s):
        """The issue register: a beat (GEMV) or an issue (Logit, Attend), a cycle later."""
        cfg, p, beat, o = self.cfg, self.plan, self.beats.payload, self.o
        F = cfg.fmacs
        codes = Array(Const(c, 16) for c in _INT4_FP16)
        w4_lanes = Cat(codes[beat.data[i][:4]] for i in range(F))
        w_reg = Signal(16 * F)
        mask_reg = Signal(F)
        ring_reg = Signal()
        lane_reg = Signal(range(F))
        dot_issue = s.fire | s.logit_issue
        fmt_fp16 = (p.mode == Mode.FP16) | s.is_w4
        m.d.sync += [w_reg.eq(Mux(s.is_w4, w4_lanes, beat.data.as_value())),
                     mask_reg.eq(Mux(s.att, Mux(s.beat_end, p.last_mask, (1 << F) - 1),
                                     beat.mask)),
                     o.first.eq(Mux(s.att, s.cb == 0, beat.first)),
                     o.last.eq(Mux(s.att, s.beat_end, beat.last)),
                     o.final.eq(Mux(s.att, s.token_end & (s.tok_left == 1), beat.final)),
                     o.group_end.eq(beat.group_end), o.w4.eq(s.is_w4), ring_reg.eq(s.att),
                     o.dot.fp16.eq(dot_issue & fmt_fp16),
                     o.dot.bf16.eq(dot_issue & (p.mode == Mode.BF16)),
                     o.dot.int.eq(dot_issue & s.is_int),
                     o.mac.fp16.eq(s.attend_issue & (p.mode == Mode.FP16)),
                     o.mac.bf16.eq(s.attend_issue & (p.mode == Mode.BF16)),
                     o.mac.int.eq(s.attend_issue & s.is_int),
                     o.k.eq(s.ck), o.seed.eq(s.first_token), lane_reg.eq(s.h_lane)]
        # Lanes past the row's end: x = +0 (float, against a -0 weight) or 0 (int).
        m.d.comb += [o.w.eq(Mux(ring_reg, s.ring_rd.data, w_reg)),
                     o.x.eq(Cat(Mux(mask_reg[i], self.x_data[16 * i:16 * (i + 1)], 0)
                                for i in range(F))),
                     o.p.eq(self.x_data.word_select(lane_reg, 16))]
