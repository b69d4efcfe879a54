"""FlowKV tile 1: stream value chunks, accumulate ``Y = C * Y + F . V``, output ``O = Y / l``."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.format import BF16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmul import FloatMultiplier
from ..arith.recip import Reciprocal
from ..pipeline import ResultQueue, delay, distinct_copies, next_values
from .spec import (FlowKVConfig, Kind, beat_layout, check_tile_config, item_layout,
                   output_layout)

__all__ = ["ValueTile"]

_ONE = 0x3F800000
#: The lane multipliers register the rounding increment rather than the one-bit normalization
#: (:class:`~hdl.arith.fpmul.FloatMultiplier` ``cuts``): same latency, no result bit changes.
_LANE_CUTS = (0, 1, 2, 4)

# Bank states of the double-buffered F memory.
_FREE, _FILLING, _FULL, _BUSY = range(4)


class ValueTile(wiring.Component):
    """Tile 1 of a FlowKV pair: value accumulation and the output division.

    Items from tile 0 fill one of two chunk banks (``C`` and ``F`` of every head, the attended
    rows) while the other bank's chunk is accumulated from the value rows on ``v``. Each value
    beat updates ``P`` elements of ``Y`` for all ``G`` heads at once (``G * P`` lanes of
    ``fmul``, rescale ``fmul`` and ``fadd``): ``Y = fadd(F * V, C' * Y)`` with ``C'`` the chunk's
    ``C`` on its first attended row and ``1.0`` after it (docs/flowkv_models.md steps 8 and 9).
    After the job's last chunk, ``O = Y * reciprocal(l)`` is rounded once to ``out_fmt`` and sent
    head by head (step 10).

    Parameters
    ----------
    cfg : FlowKVConfig

    Members
    -------
    items : In(stream.Signature(item_layout(cfg)))
        The inter-tile stream from :class:`~hdl.flowkv.tile0.ScoreTile`.
    v : In(stream.Signature(beat_layout(cfg)))
        The value rows of every visited chunk, the same rows as tile 0's keys, ``d / P`` beats
        each; masked rows are taken and ignored.
    o : Out(stream.Signature(output_layout(cfg)))
        Per job, ``G * d / P`` beats (head 0 first), ``last`` on the final one; a refused job
        gives one beat with ``error`` and ``last`` set.

    Throughput: one value beat per cycle when ``d / P`` is at least :attr:`loop_latency`
    (an element's accumulator is revisited every ``d / P`` beats); otherwise one row per
    ``loop_latency`` cycles. Per job, ``G`` reciprocals and ``G * d / P`` output beats follow the
    last row.
    """

    def __init__(self, cfg: FlowKVConfig):
        self.cfg = check_tile_config(cfg)
        super().__init__({
            "items": In(stream.Signature(item_layout(cfg))),
            "v": In(stream.Signature(beat_layout(cfg))),
            "o": Out(stream.Signature(output_layout(cfg))),
        })

    @staticmethod
    def loop_latency_of(cfg: FlowKVConfig) -> int:
        """Return the cycles between two updates of one accumulator word (read, multiply, add,
        write) in a tile of configuration ``cfg``, without building it."""
        check_tile_config(cfg)
        return 1 + FloatMultiplier.latency_of(FP32, FP32, FP32) + FloatAdder.latency_of(FP32) + 1

    @property
    def loop_latency(self) -> int:
        """Cycles between two updates of one accumulator word: read, multiply, add, write."""
        return self.loop_latency_of(self.cfg)

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace()
        self._banks(m, s)
        self._fill(m, s)
        self._process_registers(m, s)
        self._process(m, s)
        self._accumulate(m, s)
        self._v_ready(m, s)
        self._reciprocals(m, s)
        self._output(m, s)
        return m

    def _banks(self, m, s):
        """Build the two chunk banks (registers, F memory, fill bank); assumes nothing before."""
        G, P, Lc = self.cfg.group, self.cfg.lanes, self.cfg.chunk

        def per_bank(shape, name, **kw):
            return Array(Signal(shape, name=f"bank{b}_{name}", **kw) for b in range(2))

        s.state = per_bank(2, "state")
        s.refused = per_bank(1, "refused")
        s.first = per_bank(1, "first")
        s.final = per_bank(1, "final")
        s.rows = per_bank(range(Lc + 1), "rows")
        s.vlo = per_bank(range(Lc), "vlo")
        s.vhi = per_bank(range(Lc), "vhi")
        s.seen = per_bank(1, "seen")
        s.l_count = per_bank(range(G + 1), "l_count")
        # C is kept twice (power-on values 0 and all ones, so synthesis keeps both): each copy
        # feeds at most two lanes' rescale operand registers (see the accumulation below).
        s.c_sources = c_sources = min(2, (P + 1) // 2)
        s.c_reg = [Array(Array(Signal(32, name=f"bank{b}_c{h}_{n}", init=(-n) & 0xFFFFFFFF)
                               for h in range(G)) for b in range(2)) for n in range(c_sources)]
        s.l_reg = Array(Array(Signal(32, name=f"bank{b}_l{h}") for h in range(G))
                        for b in range(2))
        m.submodules.fmem = fmem = Memory(shape=G * 32, depth=2 * Lc, init=[])
        s.f_wr = fmem.write_port(granularity=32)
        s.f_rd = fmem.read_port()
        s.fb = Signal()          # bank the item stream fills
        s.lb = Signal()          # bank of the job whose l values arrive
        # The bank states and ``fb`` are assigned through their next values (registered here), so
        # that ``items.ready`` can come from registers: whether the bank the stream fills next
        # cycle is free or filling (below, after the last assignment).
        s.fb_n, *state_n = next_values(m, s.fb, *s.state)
        s.state_n = Array(state_n)
        s.fill_free = Signal(init=1)
        s.fill_filling = Signal()

    def _fill(self, m, s):
        """Build the item stream's side: take C, F, l and refusals into the filling bank."""
        cfg = self.cfg
        G = cfg.group
        slot_log = cfg.chunk.bit_length() - 1
        it = self.items.payload
        fb, state, state_n, fb_n = s.fb, s.state, s.state_n, s.fb_n
        with m.Switch(it.kind):
            with m.Case(Kind.C):
                m.d.comb += self.items.ready.eq(s.fill_free | s.fill_filling)
            with m.Case(Kind.F):
                m.d.comb += self.items.ready.eq(s.fill_filling)
            with m.Case(Kind.L):
                m.d.comb += self.items.ready.eq(1)
            with m.Case(Kind.REFUSED):
                m.d.comb += self.items.ready.eq(s.fill_free)
        take = self.items.valid & self.items.ready
        # C and F values are written one cycle after they are taken, from registers: the wide
        # write enables then do not hang off the handshake. Nothing reads them sooner (a bank is
        # processed from the cycle after it is full).
        wr_c, wr_f = Signal(), Signal()
        wr_bank = Signal()
        wr_head = Signal(range(G))
        wr_slot = Signal(cfg.slot_bits)
        wr_value = Signal(32)
        m.d.sync += [wr_c.eq(take & (it.kind == Kind.C)), wr_f.eq(take & (it.kind == Kind.F)),
                     wr_bank.eq(fb),
                     wr_head.eq(it.head), wr_slot.eq(it.slot), wr_value.eq(it.value)]
        m.d.comb += [s.f_wr.addr.eq(Cat(wr_slot[:slot_log], wr_bank)),
                     s.f_wr.data.eq(wr_value.replicate(G)),
                     s.f_wr.en.eq(Cat((wr_head == h) & wr_f for h in range(G)))]
        with m.If(wr_c):
            m.d.sync += [c[wr_bank][wr_head].eq(wr_value) for c in s.c_reg]
        with m.If(take):
            with m.Switch(it.kind):
                with m.Case(Kind.C):
                    with m.If(state[fb] == _FREE):
                        m.d.comb += state_n[fb].eq(_FILLING)
                        m.d.sync += [s.refused[fb].eq(0), s.seen[fb].eq(0),
                                     s.l_count[fb].eq(0), s.first[fb].eq(it.first),
                                     s.final[fb].eq(it.final)]
                with m.Case(Kind.F):
                    with m.If((it.head == 0) & it.valid):
                        m.d.sync += s.vhi[fb].eq(it.slot)
                        with m.If(~s.seen[fb]):
                            m.d.sync += [s.vlo[fb].eq(it.slot), s.seen[fb].eq(1)]
                    with m.If(it.last):
                        m.d.sync += s.rows[fb].eq(it.slot + 1)
                        m.d.comb += [state_n[fb].eq(_FULL), fb_n.eq(~fb)]
                        with m.If(it.final):
                            m.d.sync += s.lb.eq(fb)
                with m.Case(Kind.L):
                    m.d.sync += [s.l_reg[s.lb][it.head].eq(it.value),
                                 s.l_count[s.lb].eq(s.l_count[s.lb] + 1)]
                with m.Case(Kind.REFUSED):
                    m.d.sync += s.refused[fb].eq(1)
                    m.d.comb += [state_n[fb].eq(_FULL), fb_n.eq(~fb)]

    def _process_registers(self, m, s):
        """Build the accumulator memory, the output queue and the processed bank's registers."""
        G, P, B, Lc = self.cfg.group, self.cfg.lanes, self.cfg.beats, self.cfg.chunk
        # Accumulator word k holds elements k*P .. k*P+P-1 of every head.
        s.lane_bits = 32
        m.submodules.ymem = ymem = Memory(shape=G * P * s.lane_bits, depth=B, init=[])
        s.y_wr = ymem.write_port()
        s.y_rd = ymem.read_port()
        s.busy = Signal(B)        # a word's update is in flight

        m.submodules.out_queue = s.queue = ResultQueue(output_layout(self.cfg), 16)
        wiring.connect(m, s.queue.o, wiring.flipped(self.o))
        s.rb = Signal()           # bank being processed
        s.t = t = Signal(range(Lc))
        s.k = k = Signal(range(B))
        s.p_rows = Signal(range(Lc + 1))
        s.p_vlo = Signal(range(Lc))
        s.p_vhi = Signal(range(Lc))
        s.p_first = Signal()
        s.p_final = Signal()
        # ``t == p_vlo`` (the chunk's first attended row: rescale by C) kept in a register, updated
        # with ``t`` and ``p_vlo``: it selects every lane's rescale operand, so it should not be
        # a comparator placed far from most of them.
        s.chunk_row0 = Signal(init=1)
        s.accept = self.v.valid & self.v.ready
        s.row_valid = (t >= s.p_vlo) & (t <= s.p_vhi)
        s.acc_issue = Signal()
        m.d.comb += s.acc_issue.eq(s.accept & s.row_valid)
        s.row_last_beat = k == B - 1
        s.chunk_done = s.row_last_beat & (t == s.p_rows - 1)

        s.rec_issue = Signal()
        s.rec_head = Signal(range(G + 1))
        s.rec_head_n, = next_values(m, s.rec_head)
        s.rec_done = Signal(range(G + 1))
        s.recips = Array(Signal(32, name=f"recip{h}") for h in range(G))
        s.d_issue = Signal()
        s.d_head = Signal(range(G))
        s.d_beat = Signal(range(B))
        s.e_issue = Signal()      # error beat of a refused job

    def _start(self, m, s, bank):
        """Begin processing ``bank``: load its chunk's rows and flags."""
        m.d.comb += s.state_n[bank].eq(_BUSY)
        m.d.sync += [s.t.eq(0), s.k.eq(0), s.p_rows.eq(s.rows[bank]),
                     s.chunk_row0.eq(s.vlo[bank] == 0),
                     s.p_vlo.eq(s.vlo[bank]), s.p_vhi.eq(s.vhi[bank]),
                     s.p_first.eq(s.first[bank]), s.p_final.eq(s.final[bank])]

    def _process(self, m, s):
        """Build the process state machine (rows, wait, reciprocals, drain) and the fill flags."""
        G, B = self.cfg.group, self.cfg.beats
        rb, t, k, state, state_n, refused = s.rb, s.t, s.k, s.state, s.state_n, s.refused
        queue, d_head, d_beat = s.queue, s.d_head, s.d_beat
        with m.FSM(name="process") as s.process:
            with m.State("IDLE"):
                with m.If(state[rb] == _FULL):
                    with m.If(refused[rb]):
                        with m.If(queue.can_issue):
                            m.d.comb += s.e_issue.eq(1)
                            m.d.comb += state_n[rb].eq(_FREE)
                            m.d.sync += rb.eq(~rb)
                    with m.Else():
                        self._start(m, s, rb)
                        m.next = "ROWS"
            with m.State("ROWS"):
                with m.If(s.accept):
                    m.d.sync += k.eq(Mux(s.row_last_beat, 0, k + 1))
                    with m.If(s.row_last_beat):
                        m.d.sync += [t.eq(t + 1), s.chunk_row0.eq(t + 1 == s.p_vlo)]
                    with m.If(s.chunk_done):
                        with m.If(s.p_final):
                            m.next = "WAIT"
                        with m.Else():
                            m.d.comb += state_n[rb].eq(_FREE)
                            m.d.sync += rb.eq(~rb)
                            # Go straight on with the next chunk if it is there: no bubble.
                            with m.If((state[~rb] == _FULL) & ~refused[~rb]):
                                self._start(m, s, ~rb)
                            with m.Else():
                                m.next = "IDLE"
            with m.State("WAIT"):
                with m.If((s.busy == 0) & (s.l_count[rb] == G)):
                    m.d.comb += s.rec_head_n.eq(0)
                    m.d.sync += s.rec_done.eq(0)
                    m.next = "RECIP"
            with m.State("RECIP"):
                m.d.comb += s.rec_issue.eq(s.rec_head != G)
                with m.If(s.rec_issue):
                    m.d.comb += s.rec_head_n.eq(s.rec_head + 1)
                with m.If(s.rec_done == G):
                    m.d.sync += [d_head.eq(0), d_beat.eq(0)]
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(queue.can_issue):
                    m.d.comb += s.d_issue.eq(1)
                    m.d.sync += d_beat.eq(Mux(d_beat == B - 1, 0, d_beat + 1))
                    with m.If(d_beat == B - 1):
                        m.d.sync += d_head.eq(d_head + 1)
                        with m.If(d_head == G - 1):
                            m.d.comb += state_n[rb].eq(_FREE)
                            m.d.sync += rb.eq(~rb)
                            m.next = "IDLE"
        m.d.sync += [s.fill_free.eq(state_n[s.fb_n] == _FREE),
                     s.fill_filling.eq(state_n[s.fb_n] == _FILLING)]

    def _accumulate(self, m, s):
        """Build the accumulation lanes: cycle 0 accept, 1 operands, +mul, +add, write."""
        cfg = self.cfg
        G, P, B = cfg.group, cfg.lanes, cfg.beats
        slot_log = cfg.chunk.bit_length() - 1
        lane_bits, k, rb = s.lane_bits, s.k, s.rb
        m.d.comb += [s.f_rd.addr.eq(Cat(s.t[:slot_log], rb)),
                     s.y_rd.addr.eq(Mux(s.d_issue, s.d_beat, k))]
        issue1 = Signal()
        k1 = Signal(range(B))
        m.d.sync += [issue1.eq(s.acc_issue), k1.eq(k)]
        # The job's first attended row reads the accumulator as +0 (``Y`` starts at +0, step 8):
        # the rescale multiplier's ``Y`` operand gets a zero sign and exponent field, which makes
        # it +0 for the multiplier (flush to zero; its significand bits are then not used), so
        # the product is ``fmul(C, +0)`` as in the golden model. Two copies of the flag, each
        # for half of the lanes; it reaches no adder input.
        zeros1 = distinct_copies(m, [s.p_first & s.chunk_row0], 2, name="zero")
        man = FP32.man_bits
        # Operand registers that synthesis keeps apart (distinct power-on values), so that no
        # one register drives the multiplier blocks of lanes spread over the die: V per head,
        # the rescale factor per lane (up to four copies per head, from the two copies of C).
        v_regs = distinct_copies(m, [self.v.payload.data.as_value()], G, name="v_reg")
        scale1 = [distinct_copies(m, [Mux(s.chunk_row0, c[rb][h], _ONE) for c in s.c_reg],
                                  min(P, 2 * s.c_sources), name=f"rescale{h}") for h in range(G)]
        results = []
        written = None
        for h in range(G):
            f_val = s.f_rd.data[32 * h:32 * (h + 1)]
            for i in range(P):
                lane = h * P + i
                fv = FloatMultiplier(FP32, BF16, FP32, cuts=_LANE_CUTS, split="wide",
                                     private_operands=True, operand_copy=i % 2,
                                     block_registers=True)
                cy = FloatMultiplier(FP32, FP32, FP32, cuts=_LANE_CUTS, split="wide",
                                     private_operands=True, block_registers=True)
                add = FloatAdder(FP32)
                m.submodules[f"fv{lane}"] = fv
                m.submodules[f"cy{lane}"] = cy
                m.submodules[f"acc{lane}"] = add
                y_old = s.y_rd.data[lane_bits * lane:lane_bits * (lane + 1)]
                zero = zeros1[lane * len(zeros1) // (G * P)]
                m.d.comb += [fv.i.valid.eq(issue1), fv.i.payload.a.eq(f_val),
                             fv.i.payload.b.eq(v_regs[h][16 * i:16 * (i + 1)]),
                             cy.i.valid.eq(issue1),
                             cy.i.payload.a.eq(scale1[h][i % len(scale1[h])]),
                             cy.i.payload.b.eq(Cat(y_old[:man], Mux(zero, 0, y_old[man:])))]
                m.d.comb += [add.i.valid.eq(fv.o.valid), add.i.payload.a.eq(fv.o.payload.y),
                             add.i.payload.b.eq(cy.o.payload.y)]
                results.append(add.o.payload.y)
                written = add.o.valid
        s.write_k = write_k = delay(m, k1, fv.latency + add.latency, name="write_word")
        s.written = written
        m.d.comb += [s.y_wr.addr.eq(write_k), s.y_wr.data.eq(Cat(*results)),
                     s.y_wr.en.eq(written)]
        for j in range(B):
            with m.If(s.acc_issue & (k == j)):
                m.d.sync += s.busy[j].eq(1)
            with m.If(written & (write_k == j)):
                m.d.sync += s.busy[j].eq(0)

    def _v_ready(self, m, s):
        """Build ``v.ready`` from a register; assumes the process state machine and lanes."""
        B = self.cfg.beats
        k, rb, state, refused, process = s.k, s.rb, s.state, s.refused, s.process
        # ``v.ready`` is ``~busy[k]`` in ROWS, computed one cycle ahead from the next state so that
        # no combinational path runs from the state machine out of the pair and back. The next
        # state is worked out for both outcomes of ``v.valid`` from registers alone; the input's
        # valid bit only selects between them.
        v_ready = Signal()
        clear = Signal(B)
        m.d.comb += clear.eq(Cat(s.written & (s.write_k == j) for j in range(B)))
        hold_busy = s.busy & ~clear                                 # no beat taken this cycle
        take_busy = (s.busy | Cat(s.row_valid & (k == j) for j in range(B))) & ~clear  # taken
        k_step = Mux(s.row_last_beat, 0, k + 1)
        next_bank_ready = (state[~rb] == _FULL) & ~refused[~rb]
        leave = s.chunk_done & (s.p_final | ~next_bank_ready)
        enter = process.ongoing("IDLE") & (state[rb] == _FULL) & ~refused[rb]
        if_hold = Mux(process.ongoing("ROWS"), ~hold_busy.bit_select(k, 1),
                      enter & ~hold_busy[0])
        if_take = ~leave & ~take_busy.bit_select(k_step, 1)
        m.d.sync += v_ready.eq(Mux(self.v.valid & v_ready, if_take, if_hold))
        m.d.comb += self.v.ready.eq(v_ready)

    def _reciprocals(self, m, s):
        """Build the reciprocals of the final l, one per head, issued in RECIP."""
        G = self.cfg.group
        m.submodules.recip = recip = Reciprocal()
        # Its operands wait in a chain of registers, head 0 first: loaded from the bank's l values
        # in every state but RECIP (they are all written by the cycle the state machine leaves
        # WAIT), shifted by one head per reciprocal issued. No head multiplexer, and nothing of
        # WAIT's exit test (every accumulator word written back), reaches them.
        rec_chain = [Signal(32, name=f"rec_x{h}") for h in range(G)]
        with m.If(s.process.ongoing("RECIP")):
            with m.If(s.rec_issue):
                m.d.sync += [rec_chain[h].eq(rec_chain[h + 1]) for h in range(G - 1)]
        with m.Else():
            m.d.sync += [rec_chain[h].eq(s.l_reg[s.rb][h]) for h in range(G)]
        rec_x = rec_chain[0]
        m.d.comb += [recip.i.valid.eq(s.rec_issue), recip.i.payload.x.eq(rec_x)]
        recip_head = delay(m, s.rec_head, recip.latency, name="recip_head")
        with m.If(recip.o.valid):
            m.d.sync += [s.recips[recip_head].eq(recip.o.payload.y),
                         s.rec_done.eq(s.rec_done + 1)]

    def _output(self, m, s):
        """Build the output O = Y * reciprocal(l), rounded once, and the error beats."""
        cfg = self.cfg
        G, P, B = cfg.group, cfg.lanes, cfg.beats
        lane_bits, queue, e_issue, d_issue = s.lane_bits, s.queue, s.e_issue, s.d_issue
        d_head, d_beat = s.d_head, s.d_beat
        out_ctl = data.StructLayout({"head": cfg.head_bits, "beat": cfg.beat_bits, "last": 1,
                                     "error": 1})
        ctl0 = Signal(out_ctl)
        m.d.comb += [ctl0.head.eq(Mux(e_issue, 0, d_head)), ctl0.beat.eq(Mux(e_issue, 0, d_beat)),
                     ctl0.error.eq(e_issue),
                     ctl0.last.eq(e_issue | ((d_head == G - 1) & (d_beat == B - 1))),
                     queue.issue.eq(d_issue | e_issue)]
        ctl1 = Signal(out_ctl)
        out_valid1 = Signal()
        m.d.sync += [ctl1.eq(ctl0), out_valid1.eq(d_issue | e_issue)]
        # The head selects every lane's word and reciprocal: two copies of ``ctl1.head`` (kept
        # apart by their power-on values), each steering half of the lanes.
        heads1 = distinct_copies(m, [ctl0.head], min(P, 2), name="out_head")
        lanes_out = []
        for i in range(P):
            head1 = heads1[i % len(heads1)]
            word = Array(s.y_rd.data[lane_bits * (P * h + i):lane_bits * (P * h + i + 1)]
                         for h in range(G))
            mul = FloatMultiplier(FP32, FP32, cfg.out_fmt, split="wide", private_operands=True,
                                  operand_copy=i % 2, block_registers=True)
            m.submodules[f"out{i}"] = mul
            m.d.comb += [mul.i.valid.eq(out_valid1), mul.i.payload.a.eq(word[head1]),
                         mul.i.payload.b.eq(s.recips[head1])]
            lanes_out.append(mul.o.payload.y)
        ctl_out = Signal(out_ctl)
        m.d.comb += ctl_out.eq(delay(m, ctl1, mul.latency, name="out_ctl"))
        beat_out = Signal(output_layout(cfg))
        m.d.comb += [beat_out.data.eq(Mux(ctl_out.error, 0, Cat(*lanes_out))),
                     beat_out.head.eq(ctl_out.head), beat_out.beat.eq(ctl_out.beat),
                     beat_out.last.eq(ctl_out.last), beat_out.error.eq(ctl_out.error),
                     queue.w.valid.eq(delay(m, out_valid1, mul.latency, name="out_valid",
                                            reset=True)),
                     queue.w.payload.eq(beat_out)]
