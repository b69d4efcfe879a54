"""FlowKV tile 0: stream key chunks; compute scores, running maximum, ``F``, ``C`` and ``l``."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.exp2 import Exp2
from ..arith.fdot import FloatDot
from ..arith.format import BF16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmul import FloatMultiplier
from ..arith.tree import serial_tree, tree_levels, unit_combine
from ..pipeline import ResultQueue, delay, next_values
from .spec import (FlowKVConfig, Kind, beat_layout, check_tile_config, command_layout,
                   item_layout)

__all__ = ["ScoreTile", "total_order_max"]

_SIGN = 1 << 31
_NEG_ZERO = _SIGN
_NEG_INF = FP32.infinity(1)

# Bank states of the double-buffered score memory.
_FREE, _FILLING, _FULL, _READING = range(4)


def total_order_max(a, b):
    """Return the larger of two fp32 codes in IEEE 754 total order (``-0 < +0``, NaN largest).

    A code maps to a signed key that orders like the value: negative codes get their magnitude
    bits inverted. Equal keys mean equal codes.
    """
    def key(x):
        return Cat(x[:31] ^ x[31].replicate(31), x[31]).as_signed()
    return Mux(key(a) >= key(b), a, b)


class ScoreTile(wiring.Component):
    """Tile 0 of a FlowKV pair: scores, running maximum, numerators and denominators.

    For each decode step (a ``cmd`` and the ``G * d / P`` beats of its query vectors on ``q``) the
    tile takes the key rows of every chunk the sweep visits on ``k`` and sends, per chunk and per
    head, ``C`` then ``F`` for each row of the chunk (``+0`` for a masked row) on ``items``, and
    after the last chunk ``l`` per head. The operation order is docs/flowkv_models.md section 3,
    steps 1 to 7, bit for bit.

    Parameters
    ----------
    cfg : FlowKVConfig
        Head dimension, lanes, group, chunk, maximum length.

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        Decode steps. A step is taken when the tile is idle; it is refused (one ``REFUSED`` item)
        for the bad values listed in :func:`~hdl.flowkv.spec.command_layout`.
    q : In(stream.Signature(beat_layout(cfg)))
        After each command, ``G * d / P`` beats: head 0's query row, then head 1's, ...
    k : In(stream.Signature(beat_layout(cfg)))
        For an accepted command, the key rows of every visited chunk that the cache holds
        (positions ``c * L_c .. min(c * L_c + L_c, L) - 1`` for chunks ``lo // L_c .. p // L_c``),
        ``d / P`` beats each, in position order.
    items : Out(stream.Signature(item_layout(cfg)))
        The inter-tile stream (docs/flowkv.md).

    Throughput: one key beat per cycle while the score bank of the chunk is free. Both banks of
    the score memory are free again once the exponential engine has read them, which takes
    ``G * (rows + 1)`` cycles per chunk (plus one wait per head for the previous chunk's ``l``);
    the K stream runs without a stall when this fits in the ``rows * d / P`` cycles of the next
    chunk's keys.
    """

    def __init__(self, cfg: FlowKVConfig):
        self.cfg = check_tile_config(cfg)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "q": In(stream.Signature(beat_layout(cfg))),
            "k": In(stream.Signature(beat_layout(cfg))),
            "items": Out(stream.Signature(item_layout(cfg))),
        })

    @staticmethod
    def score_latency_of(cfg: FlowKVConfig) -> int:
        """Return the cycles from taking a row's last key beat to writing its scaled scores in a
        tile of configuration ``cfg``, without building it (the shared units' ``latency_of``)."""
        cfg = check_tile_config(cfg)
        return (1 + FloatDot.latency_of(BF16, cfg.lanes, FP32)
                + tree_levels(cfg.beats) * FloatAdder.latency_of(FP32)
                + FloatMultiplier.latency_of(FP32, FP32, FP32))

    @staticmethod
    def item_latency_of(cfg: FlowKVConfig) -> int:
        """Return the cycles from issuing an item in the exponential engine to queueing it in a
        tile of configuration ``cfg``, without building it."""
        check_tile_config(cfg)
        return 2 + FloatAdder.latency_of(FP32) + Exp2.latency_of()

    @property
    def score_latency(self) -> int:
        """Cycles from taking a row's last key beat to writing its scaled scores."""
        return self.score_latency_of(self.cfg)

    @property
    def item_latency(self) -> int:
        """Cycles from issuing an item in the exponential engine to queueing it."""
        return self.item_latency_of(self.cfg)

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace(adder=unit_combine(FloatAdder, FP32))
        self._command(m, s)
        self._banks(m, s)
        self._query_memory(m, s)
        self._rows(m, s)
        self._input(m, s)
        self._scores(m, s)
        self._score_memory(m, s)
        self._engine(m, s)
        self._items(m, s)
        self._k_ready(m, s)
        self._denominators(m, s)
        return m

    def _aligned(self, x):
        """Return position ``x`` rounded down to its chunk's first row."""
        slot_log = self.cfg.chunk.bit_length() - 1
        return Cat(Const(0, slot_log), x[slot_log:]) if slot_log else x

    def _command(self, m, s):
        """Build the command's checks and sweep bounds; assumes nothing built before."""
        cfg, c = self.cfg, self.cmd.payload
        s.position = Signal(cfg.pos_bits)
        s.lo = Signal(cfg.pos_bits)
        s.last_start = Signal(cfg.len_bits)
        s.refused = Signal()
        s.bad = Signal()
        window_lo = Signal(signed(cfg.len_bits + 2))
        pos_s = Signal(signed(cfg.len_bits + 2))
        win_s = Signal(signed(cfg.len_bits + 2))
        s.lo_next = Signal(cfg.pos_bits)
        m.d.comb += [
            s.bad.eq((c.length == 0) | (c.length > cfg.max_tokens) | (c.position >= c.length)
                     | (c.sliding & ((c.window == 0) | (c.window > cfg.max_tokens)))),
            pos_s.eq(c.position), win_s.eq(c.window),
            window_lo.eq(pos_s + 1 - win_s),
            s.lo_next.eq(Mux(c.sliding & (window_lo > 0), window_lo, 0)),
        ]

    def _banks(self, m, s):
        """Build the state of the score memory's two banks; assumes nothing built before."""
        G, Lc = self.cfg.group, self.cfg.chunk
        s.bank_state = Array(Signal(2, name=f"bank{b}_state") for b in range(2))
        # Next values of the registers ``k.ready`` depends on (assigned below, registered here),
        # so that ``k.ready`` itself can come from a register (see the input side).
        s.bank_state_n = Array(next_values(m, *s.bank_state))
        s.bank_refused = Array(Signal(name=f"bank{b}_refused") for b in range(2))
        s.bank_first = Array(Signal(name=f"bank{b}_first") for b in range(2))
        s.bank_final = Array(Signal(name=f"bank{b}_final") for b in range(2))
        s.bank_last = Array(Signal(range(Lc), name=f"bank{b}_last") for b in range(2))  # rows - 1
        s.bank_max = Array(Array(Signal(32, name=f"bank{b}_max{h}") for h in range(G))
                           for b in range(2))

    def _query_memory(self, m, s):
        """Build the query memory (word b holds beat b of every head) and its write side."""
        G, P, B = self.cfg.group, self.cfg.lanes, self.cfg.beats
        qw = P * BF16.width
        m.submodules.qmem = qmem = Memory(shape=G * qw, depth=B, init=[])
        q_wr = qmem.write_port(granularity=qw)
        s.q_rd = qmem.read_port()
        s.q_beat = q_beat = Signal(range(B))
        s.q_head = q_head = Signal(range(G))
        m.d.comb += [q_wr.addr.eq(q_beat),
                     q_wr.data.eq(self.q.payload.data.as_value().replicate(G)),
                     q_wr.en.eq(Cat((q_head == h) & self.q.valid & self.q.ready
                                    for h in range(G)))]

    def _rows(self, m, s):
        """Build the input side's row registers and the row tag FIFO; assumes the command's."""
        cfg = self.cfg
        B, Lc = cfg.beats, cfg.chunk
        s.ib = ib = Signal()                            # bank the next chunk fills
        s.chunk_start = Signal(cfg.len_bits)
        s.slot = slot = Signal(range(Lc))
        s.beat = Signal(range(B))
        s.ib_n, = next_values(m, ib)
        # Where the current row stands, kept in registers that move with ``slot`` and
        # ``chunk_start`` (set in QUERY, updated per row): ``k.ready``'s next value and the bank
        # bookkeeping then start from flip-flops, not from an adder and comparators.
        s.row_pos = row_pos = Signal(cfg.len_bits + 1)  # chunk_start + slot
        s.end_pos = Signal(cfg.len_bits)                # length - 1, the cache's last row
        s.row_chunk_last = Signal()                     # the chunk's last row (or the cache's)
        s.job_last_chunk = Signal()                     # chunk_start == last_start
        s.first_chunk = Signal()                        # chunk_start == first_start
        row_valid = Signal()
        m.d.comb += row_valid.eq((row_pos >= s.lo) & (row_pos <= s.position))
        # Next values of ``row_chunk_last`` when the row advances inside a chunk or to the next.
        slot_before_last = (slot == Lc - 2) if Lc > 1 else Const(0)
        s.next_row_last = (Mux(s.row_chunk_last, Const(int(Lc == 1)), slot_before_last)
                           | (row_pos + 1 == s.end_pos))
        s.tag_layout = data.StructLayout({"bank": 1, "slot": cfg.slot_bits, "valid": 1,
                                          "chunk_last": 1, "first_row": 1})
        s.tag_depth = 1 << ((self.score_latency + B - 1) // B + 2).bit_length()
        m.submodules.tags = tags = SyncFIFO(width=s.tag_layout.size, depth=s.tag_depth)
        s.tags = tags
        tag_in = Signal(s.tag_layout)
        m.d.comb += [tag_in.bank.eq(ib), tag_in.slot.eq(slot), tag_in.valid.eq(row_valid),
                     tag_in.chunk_last.eq(s.row_chunk_last),
                     tag_in.first_row.eq(s.first_chunk & (slot == 0)), tags.w_data.eq(tag_in)]

    def _input(self, m, s):
        """Build the input state machine (command, queries, key rows); assumes the rows'."""
        G, B, Lc = self.cfg.group, self.cfg.beats, self.cfg.chunk
        c = self.cmd.payload
        ib, slot, beat, row_pos = s.ib, s.slot, s.beat, s.row_pos
        s.k_take = self.k.valid & self.k.ready
        s.chunk_begins = (beat == 0) & (slot == 0)
        s.enter_stream = Signal()
        s.leave_stream = Signal()
        with m.FSM(name="input") as s.input_fsm:
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [s.position.eq(c.position), s.lo.eq(s.lo_next),
                                 s.end_pos.eq(c.length - 1),
                                 s.last_start.eq(self._aligned(c.position)),
                                 s.chunk_start.eq(self._aligned(s.lo_next)),
                                 row_pos.eq(self._aligned(s.lo_next)), s.first_chunk.eq(1),
                                 s.refused.eq(s.bad), s.q_beat.eq(0), s.q_head.eq(0)]
                    m.d.sync += [slot.eq(0), beat.eq(0)]
                    m.next = "QUERY"
            with m.State("QUERY"):
                # At least one cycle: the row-position registers of the first row settle here.
                m.d.sync += [s.row_chunk_last.eq(Const(int(Lc == 1)) | (row_pos == s.end_pos)),
                             s.job_last_chunk.eq(s.chunk_start == s.last_start)]
                m.d.comb += self.q.ready.eq(1)
                with m.If(self.q.valid):
                    m.d.sync += s.q_beat.eq(Mux(s.q_beat == B - 1, 0, s.q_beat + 1))
                    with m.If(s.q_beat == B - 1):
                        m.d.sync += s.q_head.eq(s.q_head + 1)
                        with m.If((s.q_head == G - 1) & s.refused):
                            m.next = "REFUSE"
                        with m.Elif(s.q_head == G - 1):
                            m.d.comb += s.enter_stream.eq(1)
                            m.next = "STREAM"
            with m.State("REFUSE"):
                # A refused step takes a bank so that its item keeps its place in the sequence.
                with m.If(s.bank_state[ib] == _FREE):
                    m.d.sync += s.bank_refused[ib].eq(1)
                    m.d.comb += [s.bank_state_n[ib].eq(_FULL), s.ib_n.eq(~ib)]
                    m.next = "IDLE"
            with m.State("STREAM"):
                with m.If(s.k_take):
                    with m.If(s.chunk_begins):
                        m.d.sync += [s.bank_refused[ib].eq(0), s.bank_first[ib].eq(s.first_chunk),
                                     s.bank_final[ib].eq(s.job_last_chunk)]
                        m.d.comb += s.bank_state_n[ib].eq(_FILLING)
                    m.d.sync += beat.eq(Mux(beat == B - 1, 0, beat + 1))
                    with m.If(beat == B - 1):
                        m.d.comb += s.tags.w_en.eq(1)
                        m.d.sync += slot.eq(slot + 1)
                        m.d.sync += [row_pos.eq(row_pos + 1),
                                     s.row_chunk_last.eq(s.next_row_last)]
                        with m.If(s.row_chunk_last):
                            m.d.sync += [s.chunk_start.eq(s.chunk_start + Lc),
                                         s.first_chunk.eq(0),
                                         s.job_last_chunk.eq(s.chunk_start + Lc == s.last_start)]
                            m.d.sync += slot.eq(0)
                            m.d.comb += s.ib_n.eq(~ib)
                            with m.If(s.job_last_chunk):
                                m.d.comb += s.leave_stream.eq(1)
                                m.next = "IDLE"

    def _scores(self, m, s):
        """Build the scores: G lane-parallel dot products, beat trees, scale; assumes the input."""
        cfg = self.cfg
        G, P, B = cfg.group, cfg.lanes, cfg.beats
        qw = P * BF16.width
        m.d.comb += s.q_rd.addr.eq(s.beat)
        k_reg = Signal(P * BF16.width)
        k_valid = Signal()
        k_last = Signal()
        m.d.sync += [k_reg.eq(self.k.payload.data.as_value()), k_valid.eq(s.k_take),
                     k_last.eq(s.k_take & (s.beat == B - 1))]
        s.scores = []
        for h in range(G):
            dot = FloatDot(BF16, P, FP32, block_registers=True)
            m.submodules[f"dot{h}"] = dot
            m.d.comb += [dot.i.valid.eq(k_valid),
                         dot.i.payload.a.eq(s.q_rd.data[h * qw:(h + 1) * qw]),
                         dot.i.payload.b.eq(k_reg)]
            last = delay(m, k_last, dot.latency, name=f"dot{h}_last", reset=True)
            row = serial_tree(m, dot.o.payload.y, dot.o.valid, last, max_count=B,
                              combine=s.adder, identity=_NEG_ZERO, name=f"row{h}")
            scale = FloatMultiplier(FP32, FP32, FP32, block_registers=True)
            m.submodules[f"scale{h}"] = scale
            m.d.comb += [scale.i.valid.eq(row.valid), scale.i.payload.a.eq(row.value),
                         scale.i.payload.b.eq(cfg.scale)]
            s.scores.append(scale.o.payload.y)
            s.score_valid = scale.o.valid
            s.row_sums_valid = row.valid
        s.scale_latency = scale.latency

    def _score_memory(self, m, s):
        """Build the score memory's write side, the running maximum and chunk completion."""
        G, Lc = self.cfg.group, self.cfg.chunk
        slot_log = Lc.bit_length() - 1
        scores = s.scores
        m.submodules.smem = smem = Memory(shape=G * 32 + 1, depth=2 * Lc, init=[])
        s_wr = smem.write_port()
        s.s_rd = smem.read_port()
        # The row's tag is read from the FIFO as its sums enter the score scale and travels
        # beside them, so that the running maximum's update starts from registers.
        tag = Signal(s.tag_layout)
        running = [Signal(32, name=f"running_max{h}", init=_NEG_INF) for h in range(G)]
        updated = []
        for h in range(G):
            base = Mux(tag.first_row, _NEG_INF, running[h])
            new = Signal(32, name=f"max_update{h}")
            m.d.comb += new.eq(Mux(tag.valid, total_order_max(base, scores[h]), base))
            updated.append(new)
        m.d.comb += [tag.eq(delay(m, s.tags.r_data, s.scale_latency, name="score_tag")),
                     s.tags.r_en.eq(s.row_sums_valid),
                     s_wr.addr.eq(Cat(tag.slot[:slot_log], tag.bank)),
                     s_wr.data.eq(Cat(*scores, tag.valid)), s_wr.en.eq(s.score_valid)]
        with m.If(s.score_valid):
            m.d.sync += [running[h].eq(updated[h]) for h in range(G)]
            with m.If(tag.chunk_last):
                m.d.sync += s.bank_last[tag.bank].eq(tag.slot)
                m.d.comb += s.bank_state_n[tag.bank].eq(_FULL)
                m.d.sync += [s.bank_max[tag.bank][h].eq(updated[h]) for h in range(G)]

    def _engine(self, m, s):
        """Build the exponential engine's issue: C and F per head, then l; assumes full banks."""
        cfg = self.cfg
        G, Lc = cfg.group, cfg.chunk
        slot_log = Lc.bit_length() - 1
        m.submodules.item_queue = s.queue = queue = ResultQueue(item_layout(cfg), 32)
        wiring.connect(m, queue.o, wiring.flipped(self.items))
        s.eb = eb = Signal()
        e_head = Signal(range(G))
        e_slot = Signal(range(Lc))
        e_is_c = Signal()
        e_first = Signal()
        e_final = Signal()
        e_last = Signal(range(Lc))         # the chunk's last slot
        s.m_prev = m_prev = Array(Signal(32, name=f"m_prev{h}") for h in range(G))
        s.l_prev = Array(Signal(32, name=f"l_prev{h}") for h in range(G))
        s.pending = pending = Array(Signal(name=f"l_pending{h}") for h in range(G))
        s.issue = issue = Signal(data.StructLayout({"kind": 2, "head": cfg.head_bits,
                                                    "slot": cfg.slot_bits, "first": 1,
                                                    "final": 1, "last": 1, "head_last": 1,
                                                    "bank": 1}))
        s.issuing = issuing = Signal()
        m.d.comb += [queue.issue.eq(issuing), s.s_rd.addr.eq(Cat(e_slot[:slot_log], eb))]
        # ``e_slot == e_last`` (the head's last slot) and ``e_head == G - 1`` in registers moved
        # with the counters, so that the engine's decision to free a bank (which ``k.ready``'s
        # next value reads) starts from flip-flops.
        head_done = Signal()
        head_last = Signal()
        bank_state_n = s.bank_state_n
        with m.FSM(name="engine"):
            with m.State("IDLE"):
                with m.If(s.bank_state[eb] == _FULL):
                    with m.If(s.bank_refused[eb]):
                        with m.If(queue.can_issue):
                            m.d.comb += [issuing.eq(1), issue.kind.eq(Kind.REFUSED),
                                         issue.last.eq(1)]
                            m.d.sync += eb.eq(~eb)
                            m.d.comb += bank_state_n[eb].eq(_FREE)
                    with m.Else():
                        m.d.comb += bank_state_n[eb].eq(_READING)
                        m.d.sync += [e_head.eq(0), e_slot.eq(0),
                                     e_is_c.eq(1), e_first.eq(s.bank_first[eb]),
                                     e_final.eq(s.bank_final[eb]), e_last.eq(s.bank_last[eb]),
                                     head_done.eq(s.bank_last[eb] == 0), head_last.eq(G == 1)]
                        m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += [issue.kind.eq(Mux(e_is_c, Kind.C, Kind.F)), issue.head.eq(e_head),
                             issue.slot.eq(e_slot), issue.first.eq(e_first),
                             issue.final.eq(e_final), issue.bank.eq(eb),
                             issue.head_last.eq(~e_is_c & head_done),
                             issue.last.eq(~e_is_c & head_done & head_last)]
                # C of a head waits for that head's previous l (its product C * l_prev).
                with m.If(queue.can_issue & (~e_is_c | ~pending[e_head])):
                    m.d.comb += issuing.eq(1)
                    with m.If(e_is_c):
                        m.d.sync += [e_is_c.eq(0), pending[e_head].eq(1)]
                    with m.Elif(~head_done):
                        m.d.sync += [e_slot.eq(e_slot + 1), head_done.eq(e_slot + 1 == e_last)]
                    with m.Elif(~head_last):
                        m.d.sync += [e_slot.eq(0), e_is_c.eq(1), e_head.eq(e_head + 1),
                                     head_done.eq(e_last == 0), head_last.eq(e_head + 1 == G - 1)]
                    with m.Else():
                        m.d.sync += eb.eq(~eb)
                        m.d.comb += bank_state_n[eb].eq(_FREE)
                        m.d.sync += [m_prev[h].eq(s.bank_max[eb][h]) for h in range(G)]
                        with m.If(e_final):
                            m.next = "FINAL"
                        with m.Else():
                            m.next = "IDLE"
            with m.State("FINAL"):
                with m.If(~Cat(pending).any()):
                    m.d.sync += e_head.eq(0)
                    m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += [issue.kind.eq(Kind.L), issue.head.eq(e_head),
                             issue.last.eq(e_head == G - 1)]
                with m.If(queue.can_issue):
                    m.d.comb += issuing.eq(1)
                    m.d.sync += e_head.eq(e_head + 1)
                    with m.If(e_head == G - 1):
                        m.next = "IDLE"

    def _items(self, m, s):
        """Build the issued items' pipeline (score read, S' - m, exp2) into the item queue."""
        G = self.cfg.group
        issue = s.issue
        # Cycle 1: the score row is read; the operands of S' - m (or m_prev - m) are chosen.
        issued1 = Signal.like(issue, name="issued1")
        valid1 = Signal()
        m.d.sync += [issued1.eq(issue), valid1.eq(s.issuing)]
        row_scores = [s.s_rd.data[32 * h:32 * (h + 1)] for h in range(G)]
        slot_valid1 = s.s_rd.data[32 * G]
        head_score = Array(row_scores)[issued1.head]
        prev = Mux(issued1.first, _NEG_INF, s.m_prev[issued1.head])
        sub_a = Signal(32)
        sub_b = Signal(32)
        exp_kind = (issued1.kind == Kind.C) | (issued1.kind == Kind.F)
        sub_valid = Signal()
        m.d.sync += [sub_a.eq(Mux(issued1.kind == Kind.C, prev, head_score)),
                     sub_b.eq(s.bank_max[issued1.bank][issued1.head] ^ _SIGN),
                     sub_valid.eq(valid1 & exp_kind)]
        issued2 = Signal.like(issue, name="issued2")
        valid2 = Signal()
        slot_valid2 = Signal()
        m.d.sync += [issued2.eq(issued1), valid2.eq(valid1), slot_valid2.eq(slot_valid1)]
        # Cycles 2 ..: fadd, then exp2.
        m.submodules.sub = sub = FloatAdder(FP32)
        m.submodules.exp = exp = Exp2()
        m.d.comb += [sub.i.valid.eq(sub_valid), sub.i.payload.a.eq(sub_a),
                     sub.i.payload.b.eq(sub_b),
                     exp.i.valid.eq(sub.o.valid), exp.i.payload.x.eq(sub.o.payload.y)]
        lat = sub.latency + exp.latency
        s.out = out = Signal.like(issue, name="item_out")
        s.out_valid = delay(m, valid2, lat, name="item_valid", reset=True)
        out_slot_valid = delay(m, slot_valid2, lat, name="item_slot_valid")
        m.d.comb += out.eq(delay(m, issued2, lat, name="item_ctl"))
        s.is_f = out.kind == Kind.F
        s.f_value = Mux(out_slot_valid, exp.o.payload.y, 0)
        s.value = value = Signal(32)
        with m.Switch(out.kind):
            with m.Case(Kind.C):
                m.d.comb += value.eq(exp.o.payload.y)
            with m.Case(Kind.F):
                m.d.comb += value.eq(s.f_value)
            with m.Case(Kind.L):
                m.d.comb += value.eq(s.l_prev[out.head])
        item = Signal(item_layout(self.cfg))
        m.d.comb += [item.kind.eq(out.kind), item.head.eq(out.head), item.slot.eq(out.slot),
                     item.valid.eq(s.is_f & out_slot_valid), item.first.eq(out.first),
                     item.final.eq(out.final), item.last.eq(out.last), item.value.eq(value),
                     s.queue.w.valid.eq(s.out_valid), s.queue.w.payload.eq(item)]

    def _k_ready(self, m, s):
        """Build ``k.ready`` from a register; assumes every next value of the state it reads."""
        B = self.cfg.beats
        # ``k.ready`` (STREAM, a free tag slot, and a free bank when a chunk begins) is computed
        # one cycle ahead from the next values of the state it reads, so that no combinational
        # path runs from the tile's state out of the pair and back.
        # The tag FIFO holds one tag per row between its last key beat and its row sum, at most
        # ``score_latency / B + 1`` rows, and is deeper than that plus two: the test on its
        # present level (room for the tag a beat taken now may write) never binds.
        k_ready = Signal()
        stream_n = (s.input_fsm.ongoing("STREAM") & ~s.leave_stream) | s.enter_stream
        # Whether the next cycle's beat begins a chunk (``beat`` and ``slot`` both 0 next cycle
        # wherever ``stream_n`` holds), from registers.
        begins_n = Mux(s.k_take, (s.beat == B - 1) & s.row_chunk_last, s.chunk_begins)
        m.d.sync += k_ready.eq(stream_n & (s.tags.level < s.tag_depth - 1)
                               & ~(begins_n & (s.bank_state_n[s.ib_n] != _FREE)))
        m.d.comb += self.k.ready.eq(k_ready)

    def _denominators(self, m, s):
        """Build l = C * l_prev + tree(F) per head from the item pipeline's C and F."""
        G, Lc = self.cfg.group, self.cfg.chunk
        out, l_prev = s.out, s.l_prev
        m.submodules.lmul = lmul = FloatMultiplier(FP32, FP32, FP32, block_registers=True)
        c_out = s.out_valid & (out.kind == Kind.C)
        m.d.comb += [lmul.i.valid.eq(c_out), lmul.i.payload.a.eq(s.value),
                     lmul.i.payload.b.eq(Mux(out.first, 0, l_prev[out.head]))]
        prod = Array(Signal(32, name=f"l_prod{h}") for h in range(G))
        prod_head = delay(m, out.head, lmul.latency, name="l_prod_head")
        with m.If(lmul.o.valid):
            m.d.sync += prod[prod_head].eq(lmul.o.payload.y)
        total = serial_tree(m, s.f_value, s.out_valid & s.is_f, out.head_last, max_count=Lc,
                            combine=s.adder, identity=_NEG_ZERO, name="chunk_sum")
        # The product must be ready before the sum (only a 1-slot chunk has no tree levels).
        extra = max(0, lmul.latency - total.latency)
        sum_value = delay(m, total.value, extra, name="chunk_sum")
        sum_valid = delay(m, total.valid, extra, name="chunk_sum_valid", reset=True)
        sum_head = Signal(range(G))
        with m.If(sum_valid):
            m.d.sync += sum_head.eq(Mux(sum_head == G - 1, 0, sum_head + 1))
        m.submodules.ladd = ladd = FloatAdder(FP32)
        m.d.comb += [ladd.i.valid.eq(sum_valid), ladd.i.payload.a.eq(prod[sum_head]),
                     ladd.i.payload.b.eq(sum_value)]
        l_head = delay(m, sum_head, ladd.latency, name="l_head")
        with m.If(ladd.o.valid):
            m.d.sync += [l_prev[l_head].eq(ladd.o.payload.y), s.pending[l_head].eq(0)]
        # A head's pending flag is set when its C is issued (above) and cleared when its l is
        # written; the two never fall on the same cycle for one head (C waits for ~pending).
