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
from .spec import Mode, PEConfig, beat_layout, pe_config

__all__ = ["Issuer", "issue_layout"]

#: fp16 codes of the uint4 weight codes 0 .. 15 (``int_to_float(q, 5, FP16)``, exact).
_INT4_FP16 = [struct.unpack("<H", struct.pack("<e", q))[0] for q in range(16)]


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
    ``k = b G + h``). An Attend issue waits for the token's ``p`` and, in float formats, for
    its accumulator's loop: an accumulator is updated at most once in ``acc_loop`` cycles, and
    since the ``n = G ceil(d / F)`` accumulators are issued in turn, the candidate's last
    update is in the loop exactly when the last ``acc_loop - 1`` cycles hold ``n`` issues.

    The decision of each cycle starts from registers: the tests of the counters (the last beat
    and head, the last token, the ring's next beat, the ``x`` word, the loop) are worked out a
    cycle ahead for both outcomes of the decision and registered.

    Parameters
    ----------
    cfg : PEConfig
    header_depth : int
        Places of the w4a16 header FIFO: headers wait there for their group's ``D``.
    acc_loop : int
        Cycles between two updates of one Attend accumulator, at least
        (:attr:`~hdl.inflash.accumulators.AttendAccumulators.acc_loop`).

    Members
    -------
    beats : In(stream.Signature(beat_layout(cfg)))
        The gearbox's beats.
    plan : In(plan_layout(cfg))
        The command: ``att``, ``logit``, ``attend``, ``int``, ``w4``, ``path``, ``mode``,
        ``tokens``, ``heads``, ``nb``, ``pb``, ``ops``, ``last_mask``. It must not change
        within a cycle of a command's first beat or its ``att_start`` (the set-up takes
        cycles between taking a command and starting it).
    gemv_start, att_start : In(1)
        A GEMV (its beats begin) or an attention command (its issues begin) starts.
    x_count, x_done, x_take, x_done_next : In
        The ``x`` buffer's state (:class:`~hdl.inflash.xbuffer.XBuffer`).
    p_ready : In(1)
        Attend: the oldest token's ``p`` is in the ``x`` buffer.
    x_addr : Out(range(cfg.x_depth))
        The ``x`` word the issue reads (its data a cycle later, ``x_data``); from registers.
    x_data : In(16 * F)
    p_release : Out(1)
        Attend: the oldest token's ``p`` is used up.
    can_issue : In(1)
        The output queue has a credit: a row's last beat may enter.
    drained : In(1)
        No result is in the arithmetic. A beat or Logit issue on another path than the last
        one waits for it, a cycle later (the test is a register).
    attend_busy : In(1)
        An Attend's results are not all out (beats and Logit issues wait, a cycle later).
    k : Out(range(cfg.max_beats + 1))
        Attend: the accumulator of this cycle's candidate issue (a register).
    read_k : Out(range(cfg.max_beats + 1))
        The accumulator of the issue a cycle before it reaches ``o`` (a register): the
        accumulators read it then.
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
        The issue, registered: :attr:`latency` cycles after the beat or issue is chosen.
    """

    def __init__(self, cfg: PEConfig, *, header_depth: int, acc_loop: int):
        self.cfg = cfg = pe_config(cfg, "Issuer")
        self.header_depth = integer(header_depth, "Header FIFO depth", 1, 4096)
        self.acc_loop = integer(acc_loop, "Accumulator loop", 1, 1024)
        F = cfg.fmacs
        super().__init__({
            "beats": In(stream.Signature(beat_layout(cfg))),
            "plan": In(plan_layout(cfg)),
            "gemv_start": In(1), "att_start": In(1),
            "x_count": In(range(cfg.x_depth)), "x_done": In(1), "x_take": In(1),
            "x_done_next": In(1), "p_ready": In(1),
            "x_addr": Out(range(cfg.x_depth)), "x_data": In(16 * F),
            "p_release": Out(1),
            "can_issue": In(1), "drained": In(1), "attend_busy": In(1),
            "k": Out(range(cfg.max_beats + 1)), "read_k": Out(range(cfg.max_beats + 1)),
            "attend_end": Out(1),
            "row_issue": Out(1), "busy": Out(1),
            "headers": Out(stream.Signature(data.StructLayout({"scale": 16, "offset": 16}))),
            "o": Out(issue_layout(cfg)),
        })

    #: Cycles from a beat taken (or an issue chosen) to its issue on ``o``: the flags' register,
    #: then the operands' (read from the memories in between).
    latency = 2

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace()
        self._gemv(m, s)
        self._ring(m, s)
        self._decision(m, s)
        self._counters(m, s)
        self._lookahead(m, s)
        self._stage(m, s)
        return m

    def _gemv(self, m, s):
        """GEMV beats: the path, ``x`` and the header FIFO, each a register."""
        p, beat = self.plan, self.beats.payload
        # Whether the command's path is the last one issued on: worked out a cycle ahead from
        # the plan, which holds for cycles before a command's first issue.
        s.last_path = Signal(3)
        # A register: ``drained`` and ``attend_busy`` are a cycle old in it, so that a command
        # on another path starts a cycle after the results before it are out.
        s.path_free = Signal(name="path_free")
        s.moved = Signal()                          # a beat or a Logit issue: last_path moves
        same_next = s.moved | (p.path == s.last_path)
        m.d.sync += s.path_free.eq(~self.attend_busy & (same_next | self.drained))
        with m.If(s.moved):
            m.d.sync += s.last_path.eq(p.path)
        x_there = self._x_there(m, s)
        # The header FIFO is written a cycle after its beat; its room counts that write, as a
        # register: the four outcomes (a read, this cycle's header beat) are tested on the
        # level and the pending write, registers, so the late read and beat only choose.
        depth = self.header_depth
        m.submodules.headers = headers = SyncFIFO(width=32, depth=depth)
        header_room = Signal(init=1)
        held = Signal(range(depth + 2))             # the level after the pending write
        m.d.comb += held.eq(headers.w_level + headers.w_en)
        stay = Mux(headers.r_en, held <= depth, held < depth)
        grow = Mux(headers.r_en, held < depth, held + 1 < depth)
        header_fire = self.beats.valid & self.beats.ready & ~p.att & beat.header
        m.d.sync += [header_room.eq(Mux(header_fire, grow, stay)),
                     headers.w_en.eq(header_fire),
                     headers.w_data.eq(Cat(beat.scale, beat.offset))]
        s.gemv_ready = (x_there & s.path_free & (~beat.last | self.can_issue)
                        & (~beat.header | header_room))
        m.d.comb += [self.headers.valid.eq(headers.r_rdy),
                     self.headers.payload.as_value().eq(headers.r_data),
                     headers.r_en.eq(self.headers.ready)]

    def _x_there(self, m, s):
        """Beat b needs x word b only: the first row starts while x is still coming in (w4a16
        waits for all of x: its lanes are computing the group sums meanwhile). The test is a
        register, of the beat that comes next (beats come in order: b + 1 after b, 0 after a
        row's last) against the x buffer's count after this cycle's take."""
        p, beat = self.plan, self.beats.payload
        want = Signal(range(self.cfg.max_beats + 1))    # the next beat's b
        want1 = Signal.like(want, init=1)               # b + 1
        there = Signal(name="x_there")
        taken = self.beats.valid & self.beats.ready & ~p.att
        count, take = self.x_count, self.x_take
        # After a beat b leaves, b + 1 (or 0) comes: b + 1 < count + take, or count + take > 0.
        after = Mux(beat.last, take | (count != 0), Mux(take, want < count, want1 < count))
        stay = Mux(take, want <= count, want < count)
        m.d.sync += there.eq(self.x_done_next | (Mux(taken, after, stay) & ~p.w4))
        with m.If(taken):
            m.d.sync += [want.eq(Mux(beat.last, 0, want1)),
                         want1.eq(Mux(beat.last, 1, want1 + 1))]
        with m.If(self.gemv_start):
            m.d.sync += [want.eq(0), want1.eq(1), there.eq(0)]
        return there

    def _ring(self, m, s):
        """The two-entry K/V ring, filled by the gearbox: every query head of the group uses an
        entry (Logit: head by head, Attend: beat by beat), so an entry stays until its last use
        while the next one streams in."""
        cfg, p, beat = self.cfg, self.plan, self.beats.payload
        slot_log = cfg.slot_beats.bit_length() - 1
        m.submodules.ring = ring = Memory(shape=16 * cfg.fmacs, depth=2 * cfg.slot_beats, init=[])
        ring_wr = ring.write_port()
        s.ring_rd = ring.read_port()
        s.occ = Signal(range(3))                    # entries begun and not used up
        s.wbeats = Signal(cfg.cols_bits)            # beats of the newest entry written (0: all)
        s.wslot, s.rslot = Signal(name="wslot"), Signal(name="rslot")
        ring_room = ~beat.first | (s.occ < 2)
        m.d.comb += self.beats.ready.eq(Mux(p.att, ring_room, s.gemv_ready))
        s.fire = self.beats.valid & self.beats.ready & ~p.att
        s.ring_fire = self.beats.valid & self.beats.ready & p.att
        s.cb = Signal(cfg.cols_bits)
        m.d.comb += [ring_wr.addr.eq(Cat(beat.beat[:slot_log], s.wslot)),
                     ring_wr.data.eq(beat.data.as_value()), ring_wr.en.eq(s.ring_fire),
                     s.ring_rd.addr.eq(Cat(s.cb[:slot_log], s.rslot))]
        with m.If(s.ring_fire):
            m.d.sync += s.wbeats.eq(Mux(beat.last, 0, beat.beat + 1))
            with m.If(beat.last):
                m.d.sync += s.wslot.eq(~s.wslot)

    def _decision(self, m, s):
        """This cycle's issue, from registers: the candidate's beat is in the ring (``avail``),
        Logit: its query word is in, a score's last beat has a credit, the path is free;
        Attend: the token's ``p`` is in and the accumulator's loop allows it."""
        p = self.plan
        for name in ("avail", "x_ok", "hazard", "beat_end", "head_end", "last_token"):
            setattr(s, name, Signal(name=name))
        s.token_end = s.beat_end & s.head_end
        issue = Signal(name="issue")
        m.d.comb += issue.eq(self.busy & s.avail & Mux(
            p.logit, s.x_ok & (~s.beat_end | self.can_issue) & s.path_free,
            self.p_ready & ~s.hazard))
        s.issue = issue
        s.logit_issue = issue & p.logit
        s.attend_issue = issue & p.attend
        s.mac_issue = Signal(name="mac_issue")     # a float Attend issue
        m.d.comb += [s.mac_issue.eq(s.attend_issue & ~p.int),
                     self.attend_end.eq(s.attend_issue & s.token_end & s.last_token),
                     self.p_release.eq(s.attend_issue & s.token_end),
                     self.row_issue.eq((s.fire & self.beats.payload.last)
                                       | (s.logit_issue & s.beat_end)),
                     s.moved.eq(s.fire | s.logit_issue)]

    def _counters(self, m, s):
        """Issues in token order. Logit: head h, beat b; Attend: beat b, head h. ``k`` counts
        the token's issues: the query word of a Logit, Attend's accumulator; ``pw`` is
        Attend's ``p`` word, ``pslot pb + h // F``."""
        cfg, p = self.cfg, self.plan
        F = cfg.fmacs
        s.tok_left = tok_left = Signal(cfg.tokens_bits)
        ck, cb = self.k, s.cb
        s.ch = ch = Signal(cfg.query_bits)
        s.h_lane = h_lane = Signal(range(F))        # Attend: p[h] is lane h mod F ...
        h_word = Signal(cfg.query_bits)             # ... of the token's word h // F
        pslot = Signal()
        s.pw = pw = Signal(range(cfg.x_depth))
        s.first_token = first_token = Signal()
        cons_active = self.busy
        beat_end, head_end, token_end = s.beat_end, s.head_end, s.token_end
        m.d.sync += s.occ.eq(s.occ + (s.ring_fire & self.beats.payload.first)
                             - (s.issue & token_end))
        with m.If(self.att_start):
            m.d.sync += [cons_active.eq(1), tok_left.eq(p.tokens), ck.eq(0), cb.eq(0), ch.eq(0),
                         h_lane.eq(0), h_word.eq(0), pslot.eq(0), pw.eq(0), first_token.eq(1),
                         s.occ.eq(0), s.wbeats.eq(0), s.wslot.eq(0), s.rslot.eq(0)]
        with m.If(s.issue):
            m.d.sync += ck.eq(Mux(token_end, 0, ck + 1))
            with m.If(p.logit):
                m.d.sync += [cb.eq(Mux(beat_end, 0, cb + 1)),
                             ch.eq(Mux(beat_end, Mux(head_end, 0, ch + 1), ch))]
            with m.Else():
                lane_end = h_lane == F - 1
                slot = Mux(token_end, ~pslot, pslot)
                m.d.sync += [ch.eq(Mux(head_end, 0, ch + 1)),
                             cb.eq(Mux(head_end, Mux(beat_end, 0, cb + 1), cb)),
                             h_lane.eq(Mux(head_end | lane_end, 0, h_lane + 1)),
                             h_word.eq(Mux(head_end, 0, Mux(lane_end, h_word + 1, h_word))),
                             pw.eq(Mux(head_end, Mux(slot, p.pb, 0),
                                       Mux(lane_end, pw + 1, pw)))]
            with m.If(token_end):
                m.d.sync += [tok_left.eq(tok_left - 1), s.rslot.eq(~s.rslot), pslot.eq(~pslot),
                             first_token.eq(0)]
                with m.If(s.last_token):
                    m.d.sync += cons_active.eq(0)
        m.d.comb += self.x_addr.eq(Mux(p.att, Mux(p.logit, ck, pw), self.beats.payload.beat))

    def _lookahead(self, m, s):
        """The decision's tests for the next cycle, for both outcomes of this one's: each a
        single comparison of registers (``cb + 1`` and ``ck + 1`` are registers too)."""
        cfg, p, beat = self.cfg, self.plan, self.beats.payload
        ck, cb, ch, issue = self.k, s.cb, s.ch, s.issue
        nb1, g1 = Signal(name="nb1"), Signal(name="g1")   # a one-beat entry; one head
        nb_m2 = Signal(cfg.cols_bits)               # ceil(d / F) - 2, G - 2
        g_m2 = Signal(cfg.query_bits)
        cb1, ck1 = Signal.like(cb, name="cb1"), Signal.like(ck, name="ck1")
        # After an issue: Logit goes beat by beat within a head, Attend head by head.
        step = p.logit | s.head_end                 # the issue moves cb
        beat_end_i = Mux(step, Mux(s.beat_end, nb1, cb == nb_m2), s.beat_end)
        head_end_i = Mux(~p.logit | s.beat_end, Mux(s.head_end, g1, ch == g_m2), s.head_end)
        # The candidate's beat is in the ring: (entries begun, beats of the newest written, 0
        # for all) against cb, after this cycle's issue (i) and fill (f).
        occ_i = s.occ - s.token_end
        written = Array([cb < s.wbeats,                             # cb, wbeats
                         ~beat.last & (cb <= beat.beat)])           # cb, the beat filled
        written_i = Array([Mux(step, Mux(s.beat_end, s.wbeats != 0, cb1 < s.wbeats),
                               cb < s.wbeats),
                           ~beat.last & Mux(step, s.beat_end | (cb < beat.beat),
                                            cb <= beat.beat)])
        whole = Array([s.wbeats == 0, beat.last])   # the newest entry is all written

        def avail(occ, partly):
            return (occ == 2) | ((occ == 1) & partly)

        f = s.ring_fire
        fill = f & beat.first
        part, part_i = whole[f] | written[f], whole[f] | written_i[f]
        avail_no = Mux(fill, avail(s.occ + 1, part), avail(s.occ, part))
        avail_i = Mux(fill, avail(occ_i + 1, part_i), avail(occ_i, part_i))
        # Logit's query word is in: ck against the x buffer's count after this cycle's take.
        count = self.x_count
        x_ok_i = Mux(self.x_take, s.token_end | (ck < count),
                     Mux(s.token_end, count != 0, ck1 < count))
        x_ok_no = Mux(self.x_take, ck <= count, ck < count)
        m.d.sync += [s.avail.eq(Mux(issue, avail_i, avail_no)),
                     s.x_ok.eq(self.x_done_next | Mux(issue, x_ok_i, x_ok_no)),
                     s.last_token.eq(Mux(issue & s.token_end, s.tok_left == 2, s.last_token))]
        with m.If(issue):
            m.d.sync += [s.beat_end.eq(beat_end_i), s.head_end.eq(head_end_i),
                         cb1.eq(Mux(step, Mux(s.beat_end, 1, cb1 + 1), cb1)),
                         ck1.eq(Mux(s.token_end, 1, ck1 + 1))]
        self._loop(m, s)
        with m.If(self.att_start):
            m.d.sync += [nb1.eq(p.nb == 1), g1.eq(p.heads == 1), nb_m2.eq(p.nb - 2),
                         g_m2.eq(p.heads - 2), cb1.eq(1), ck1.eq(1), s.beat_end.eq(p.nb == 1),
                         s.head_end.eq(p.heads == 1), s.last_token.eq(p.tokens == 1),
                         s.avail.eq(0), s.x_ok.eq(0), s.hazard.eq(0)]

    def _loop(self, m, s):
        """``hazard``: the last ``acc_loop - 1`` cycles hold ``n = G ceil(d / F)`` float
        Attend issues, so the candidate's previous update is still in the MAC."""
        loop = self.acc_loop
        window = Signal(range(loop))                # float issues of the last loop - 1 cycles
        n = Signal(range(loop + 1))                 # min(n, loop): never reached beyond it
        recent = Signal(max(1, loop - 1))           # recent[j]: a float issue j + 1 cycles ago
        mac = s.mac_issue
        if loop > 1:
            leaving = recent[-1]
            m.d.sync += [recent.eq(Cat(mac, recent[:-1])),
                         window.eq(window + mac - leaving)]
            stay = window - leaving
            m.d.sync += s.hazard.eq(Mux(mac, stay + 1 >= n, stay >= n))
        with m.If(self.att_start):
            ops = self.plan.ops
            m.d.sync += n.eq(Mux(ops >= loop, loop, ops))

    def _stage(self, m, s):
        """The issue registers: a beat (GEMV) or an issue (Logit, Attend) with its flags a
        cycle later, while the ``x`` buffer and the ring read its operands; its operands from
        those memories a cycle after that, in registers (a block RAM's output is slow)."""
        cfg, p, beat, o = self.cfg, self.plan, self.beats.payload, self.o
        F = cfg.fmacs
        codes = Array(Const(c, 16) for c in _INT4_FP16)
        w4_lanes = Cat(codes[beat.data[i][:4]] for i in range(F))
        one = Signal(issue_layout(cfg))             # the first stage: the flags, the beat
        w_reg = Signal(16 * F)
        mask_reg = Signal(F)
        ring_reg = Signal()
        lane_reg = Signal(range(F))
        dot_issue = s.fire | s.logit_issue
        fmt_fp16 = (p.mode == Mode.FP16) | p.w4
        m.d.sync += [w_reg.eq(Mux(p.w4, w4_lanes, beat.data.as_value())),
                     mask_reg.eq(Mux(p.att, Mux(s.beat_end, p.last_mask, (1 << F) - 1),
                                     beat.mask)),
                     one.first.eq(Mux(p.att, s.cb == 0, beat.first)),
                     one.last.eq(Mux(p.att, s.beat_end, beat.last)),
                     one.final.eq(Mux(p.att, s.token_end & s.last_token, beat.final)),
                     one.group_end.eq(beat.group_end), one.w4.eq(p.w4), ring_reg.eq(p.att),
                     one.dot.fp16.eq(dot_issue & fmt_fp16),
                     one.dot.bf16.eq(dot_issue & (p.mode == Mode.BF16)),
                     one.dot.int.eq(dot_issue & p.int),
                     one.mac.fp16.eq(s.attend_issue & (p.mode == Mode.FP16)),
                     one.mac.bf16.eq(s.attend_issue & (p.mode == Mode.BF16)),
                     one.mac.int.eq(s.attend_issue & p.int),
                     one.k.eq(self.k), one.seed.eq(s.first_token), lane_reg.eq(s.h_lane)]
        m.d.comb += self.read_k.eq(one.k)
        # Lanes past the row's end: x = +0 (float, against a -0 weight) or 0 (int).
        m.d.sync += [o.eq(one),
                     o.w.eq(Mux(ring_reg, s.ring_rd.data, w_reg)),
                     o.x.eq(Cat(Mux(mask_reg[i], self.x_data[16 * i:16 * (i + 1)], 0)
                                for i in range(F))),
                     o.p.eq(self.x_data.word_select(lane_reg, 16))]
