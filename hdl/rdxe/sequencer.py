"""The DXT's sequencer: commands in, one request per cycle out (docs/rdxe.md section 5)."""

from __future__ import annotations

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..arith.requant import SHIFT_BITS
from ..pipeline import SkidBuffer, SkidQueue, delay
from ..validate import index_bits, integer
from .spec import (CODE_BITS, DESTS, OPS, DxtConfig, check_config, chunk_layout,
                   command_layout)
from .ve import act_request_layout

__all__ = ["Sequencer", "DECODE", "request_layout", "op_layout", "store_layout",
           "normalize_request_layout", "SCORE"]

_GEMV, _RMS, _QK, _PV = (OPS.index(n) for n in ("gemv", "rmsnorm", "qk", "pv"))
_OUT, _KEY, _VALUE = (DESTS.index(n) for n in ("out", "key", "value"))
#: Gatherer operation kinds: the three GEMV destinations and the Q.K^T scores.
SCORE = 3
#: Places of the gatherer's operation queue and the RMSNorm constants' queue ahead of the
#: sequencer: it writes a command a cycle after taking it, and takes one while a queue had
#: three places free a cycle ago (a register), so they hold 8 and 4 operations, sometimes two
#: more.
_OP_QUEUE = 10
#: Registers a command passes before the sequencer can take it: the skid buffer it enters and
#: the one it waits in, decoded (``golden.rdxe.Latency.decode``).
DECODE = 2
_CONST_QUEUE = 6


def _link_control(cfg: DxtConfig) -> data.StructLayout:
    """The HLINK fields other than the data (hdl.rdxe.spec.hlink_layout)."""
    vcfg = cfg.vac_config()
    return data.StructLayout({
        "row": unsigned(vcfg.row_bits), "first": 1, "last": 1,
        "out": unsigned(vcfg.out_bits), "rcu": 1, "rc_last": 1, "kv": 1})


def chunk_flags() -> dict:
    """What a chunk does besides its HLINK fields: ``hlink``, it goes to the VACs; ``tap``, the
    VE's sum takes it (``tap_first``, ``tap_last``, ``softmax`` and ``seq`` are the tap's
    fields)."""
    return {"hlink": 1, "tap": 1, "tap_first": 1, "tap_last": 1, "softmax": 1, "seq": 1}


def request_layout(cfg: DxtConfig) -> data.StructLayout:
    """Payload of a request: ``act``, the chunk is made by the VE's activation path (else read
    from the token buffer); ``half`` and ``j``, the token buffer's half and chunk; ``buf_write``,
    an activation chunk is also stored there; ``link``, its HLINK fields; the chunk flags."""
    return data.StructLayout({
        "act": 1, "half": 1, "j": unsigned(index_bits(cfg.chunks)), "link": _link_control(cfg),
        "buf_write": 1, **chunk_flags()})


def queued_layout(cfg: DxtConfig) -> data.StructLayout:
    """Payload of the chunk queue: the chunk's ``data``, its HLINK fields and its flags."""
    return data.StructLayout({"data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes),
                              "link": _link_control(cfg), **chunk_flags()})


def store_layout(cfg: DxtConfig) -> data.StructLayout:
    """Payload of a token buffer write: chunk ``j`` of ``half``."""
    return data.StructLayout({"half": 1, "j": unsigned(index_bits(cfg.chunks)),
                              "data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes)})


def normalize_request_layout(cfg: DxtConfig) -> data.StructLayout:
    """Payload of an in-place normalization: chunk ``j`` of ``half`` by the factor ``(m,
    shift)``."""
    return data.StructLayout({"half": 1, "j": unsigned(index_bits(cfg.chunks)),
                              "m": unsigned(cfg.rc_bits - SHIFT_BITS),
                              "shift": unsigned(SHIFT_BITS)})


def op_layout(cfg: DxtConfig) -> data.StructLayout:
    """An operation as the gatherer sees it: ``kind`` (a DESTS index or :data:`SCORE`),
    ``refused``, the ``outputs`` that exist, the ``total`` outputs the VACs produce (whole
    passes), the KV ``group`` and the ``token`` a key or value belongs to."""
    most = max(cfg.max_outputs, cfg.capacity)
    return data.StructLayout({
        "kind": 2, "refused": 1, "outputs": unsigned(index_bits(most + 1)),
        "total": unsigned(index_bits(most + cfg.vacs + 1)),
        "group": unsigned(index_bits(cfg.kv_groups)),
        "token": unsigned(index_bits(cfg.capacity + 1))})


def _decode_layout(cfg: DxtConfig) -> data.StructLayout:
    """A command's decoded fields: its kind, whether it is refused (``bad``), the outputs the
    gatherer sends, the passes, the KV group, and the index of its last chunk in a pass and of
    its last pass (so that the sequencer compares its counters with registers)."""
    most = max(cfg.max_outputs, cfg.capacity)
    return data.StructLayout({
        "is_rms": 1, "is_qk": 1, "is_pv": 1, "gemv_like": 1, "writes_kv": 1, "bad": 1,
        "kind": 2, "outputs": unsigned(index_bits(most + 1)),
        "passes": unsigned(index_bits(most + 1)), "group": unsigned(index_bits(cfg.kv_groups)),
        "last_chunk": unsigned(index_bits(cfg.chunks + 2)),
        "last_pass": unsigned(index_bits(most + 1))})


def _decode(m: Module, cfg: DxtConfig, cmd) -> data.View:
    """Decode ``cmd`` combinationally (docs/rdxe.md section 4.2: what is refused)."""
    N, L = cfg.vacs, cfg.lanes
    dec = Signal(_decode_layout(cfg), name="decoded")
    is_rms, is_qk, is_pv = cmd.op == _RMS, cmd.op == _QK, cmd.op == _PV
    gemv_like = (cmd.op == _GEMV) | is_rms
    writes_kv = gemv_like & ((cmd.dest == _KEY) | (cmd.dest == _VALUE))
    outputs = Mux(gemv_like, cmd.outputs, Mux(is_qk, cmd.tokens, cfg.head_dim))
    passes = (outputs + N - 1) >> (N.bit_length() - 1)
    pv_chunks = (cmd.tokens + L - 1) >> (L.bit_length() - 1)
    m.d.comb += [
        dec.is_rms.eq(is_rms), dec.is_qk.eq(is_qk), dec.is_pv.eq(is_pv),
        dec.gemv_like.eq(gemv_like), dec.writes_kv.eq(writes_kv),
        dec.bad.eq(Mux(gemv_like,
                       (cmd.outputs == 0) | (cmd.chunks == 0) | (cmd.chunks > cfg.chunks) |
                       (cmd.dest > _VALUE) |
                       (writes_kv & ((cmd.outputs != cfg.head_dim) |
                                     (cmd.head >= cfg.kv_groups) |
                                     (cmd.tokens >= cfg.capacity))),
                       (cmd.tokens == 0) | (cmd.tokens > cfg.capacity) |
                       (cmd.head >= cfg.heads))),
        dec.kind.eq(Mux(gemv_like, cmd.dest, Mux(is_qk, SCORE, _OUT))),
        dec.outputs.eq(outputs),
        dec.passes.eq(passes),
        dec.group.eq(Mux(gemv_like, cmd.head, cmd.head // cfg.group_size)),
        dec.last_chunk.eq(Mux(gemv_like, cmd.chunks, Mux(is_qk, cfg.key_rows, pv_chunks)) - 1),
        dec.last_pass.eq(passes - 1)]
    return dec


class _State:
    """The sequencer's registers, and the combinational controls its states drive."""

    def __init__(self, cfg: DxtConfig):
        vcfg = cfg.vac_config()
        most = max(cfg.max_outputs, cfg.capacity)
        self.seq, self.fused, self.softmax, self.kv, self.rcu = (
            Signal(name=n) for n in ("o_seq", "o_fused", "o_softmax", "o_kv", "o_rcu"))
        self.last_chunk = Signal(range(cfg.chunks + 2), name="o_last_chunk")
        self.last_pass = Signal(range(most + 2), name="o_last_pass")
        self.row_pass, self.row = Signal(vcfg.row_bits, name="o_row_pass"), Signal(
            vcfg.row_bits, name="o_row")
        self.row_step = Signal(vcfg.row_bits, name="o_row_step")
        self.pass_step = Signal(vcfg.row_bits, name="o_pass_step")
        self.out, self.out_step = Signal(vcfg.out_bits, name="o_out"), Signal(name="o_out_step")
        # The pass that ended last cycle moved the output on (its ``out_step``): ``out`` takes it
        # a cycle late and a request adds it, so that the pass's end, decided
        # from the chunk queue's inputs, reaches one flip-flop here, not every bit of ``out``.
        self.moved = Signal(name="o_out_moved")
        self.tokens = Signal(range(cfg.capacity + 2), name="o_tokens")
        self.scale = Signal(32, name="o_scale")
        self.half = Signal()
        self.p = Signal(range(most + 2), name="p")
        self.pass0 = Signal(name="pass0")        # p == 0, as a register
        # In RUN, LOAD, ACTGEN; in pass 0 of an operation whose first pass takes ``x`` chunks,
        # or activations (else it reads the token buffer): registers, so that the issue
        # decision is a function of flip-flops and the chunk queue's two inputs.
        self.running = Signal(name="running")
        self.loading, self.generating = Signal(name="loading"), Signal(name="generating")
        # In WAIT_RC, NORM: registers too, so that the factor's valid and the normalizer's
        # request are not decoded from the state across the tile (docs/rdxe.md 14.4, session 34).
        self.awaiting_rc, self.normalizing = Signal(name="awaiting_rc"), Signal(name="normalizing")
        self.from_x, self.from_act = Signal(name="from_x"), Signal(name="from_act")
        self.j = Signal(range(cfg.chunks + 2), name="j")
        self.left = Signal(range(cfg.capacity + cfg.lanes + 1), name="left")   # P.V tokens left
        self.drain = Signal(range(cfg.chunks + 2), name="drain")
        self.norm_rc = Signal(data.StructLayout({"m": unsigned(cfg.rc_bits - SHIFT_BITS),
                                                 "shift": unsigned(SHIFT_BITS)}), name="norm_rc")
        # Whether ``j`` is the operation's last chunk, and whether ``j + 1`` is: registers kept
        # beside ``j`` (``restart_chunks``, ``next_chunk``), so that the pass's end (``o_out``,
        # the row) is decided from flip-flops and the next one is not behind the decision.
        self.last_j = Signal(init=1, name="last_j")
        self.penult_j = Signal(name="penult_j")
        self.last_p = self.p == self.last_pass
        self.issue = Signal()
        self.x_take = Signal()       # x.ready: the sequencer takes a chunk if one is there
        self.accepted = Signal()     # a command starts (not refused)
        self.issued = Signal()       # the operation has issued a request
        self.norm_read = Signal()

    def restart_chunks(self, last_chunk=None) -> list:
        """Statements that move to chunk 0 of an operation whose last chunk is ``last_chunk``
        (the one held by default)."""
        last = self.last_chunk if last_chunk is None else last_chunk
        return [self.j.eq(0), self.last_j.eq(last == 0), self.penult_j.eq(last == 1)]

    def next_chunk(self) -> list:
        """Statements that move to chunk ``j + 1`` (not past the last)."""
        return [self.j.eq(self.j + 1), self.last_j.eq(self.penult_j),
                self.penult_j.eq(self.j + 2 == self.last_chunk)]


class Sequencer(wiring.Component):
    """Turn DXT commands into one request per cycle, each a chunk for HLINK or the VE's sum.

    One command at a time: a refused one (docs/rdxe.md section 4.2) drains its ``x`` chunks;
    an accepted one goes to ``ops`` (an RMSNorm's constants also to ``consts``) and issues its
    requests pass by pass (``RUN``), after filling the token buffer (sequential RMSNorm,
    ``LOAD``; sequential P.V, ``ACTGEN``) and normalizing it in place (``WAIT_RC``, ``NORM``).
    Operations alternate between the token buffer's halves.

    Parameters
    ----------
    cfg : DxtConfig
    request_latency : int
        Cycles from a request's issue to its chunk in the chunk queue (``landed``), 1 to 1024.

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        Commands, taken into a :class:`~hdl.pipeline.SkidBuffer` (``ready`` a register), then
        into a :class:`~hdl.pipeline.SkidQueue` with their decode; the sequencer starts one when
        it is idle and ``ops`` and ``consts`` have room.
    x : In(stream.Signature(chunk_layout(lanes)))
        Token chunks: pass 0 of a GEMV, an RMSNorm and a Q.K^T, and those of a refused command.
    req : Out(stream.Signature(request_layout(cfg), always_ready=True))
        One request per cycle at most, only while ``can_issue``.
    store : Out(stream.Signature(store_layout(cfg), always_ready=True))
        An ``x`` chunk to store in the token buffer, in the cycle its request issues.
    act : Out(stream.Signature(act_request_layout(ve), always_ready=True))
        The score buffer row, token count and scale of an activation request, as it issues.
    norm : Out(stream.Signature(normalize_request_layout(cfg), always_ready=True))
        One chunk per cycle to normalize in place by the sequential factor.
    ops : Out(stream.Signature(op_layout(cfg)))
        Every command, refused ones too, in order (a queue of 10), a cycle after it is taken.
    consts : Out(stream.Signature(StructLayout({"inv_k": 32, "eps": 32})))
        The constants of each accepted RMSNorm, in order (a queue of 6), a cycle after it is
        taken.
    rc : In(stream.Signature(StructLayout({"m", "shift"}), always_ready=True))
        The sequential mode's factor; held in a register until the sequencer takes it.
    can_issue : In(1)
        The chunk queue has a place for a request's chunk (``ResultQueue.can_issue``).
    landed : In(stream.Signature(unsigned(1), always_ready=True))
        A request of token buffer half ``payload`` reached the chunk queue.
    kv_done, qk_done : In(1)
        A key or value write, a Q.K^T, is complete (a Q.K^T waits for the former, a P.V for
        both).
    issue, start : Out(1)
        A request issues; it is its operation's first (for cycle measurements).

    Timing: a command that waits for nothing issues its first request ``decode + accept`` = 3
    cycles after it is taken alone, and ``accept + 1`` = 2 cycles after the previous
    operation's last when it was already waiting (``golden.rdxe.Latency``); then one request
    per cycle while ``can_issue`` (and, for ``x`` chunks, ``x.valid``). Assumes every request
    lands ``request_latency`` cycles after it issues, and that ``can_issue`` counts places for
    their chunks. Bad parameters raise ``TypeError``/``ValueError`` naming them.
    """

    def __init__(self, cfg: DxtConfig, *, request_latency: int):
        self.cfg = check_config(cfg, DxtConfig, "DXT")
        self.request_latency = integer(request_latency, "Request latency", 1, 1024)
        rc = data.StructLayout({"m": unsigned(cfg.rc_bits - SHIFT_BITS),
                                "shift": unsigned(SHIFT_BITS)})
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "x": In(stream.Signature(chunk_layout(cfg.lanes))),
            "req": Out(stream.Signature(request_layout(cfg), always_ready=True)),
            "store": Out(stream.Signature(store_layout(cfg), always_ready=True)),
            "act": Out(stream.Signature(act_request_layout(cfg.ve_config()),
                                        always_ready=True)),
            "norm": Out(stream.Signature(normalize_request_layout(cfg), always_ready=True)),
            "ops": Out(stream.Signature(op_layout(cfg))),
            "consts": Out(stream.Signature(data.StructLayout({"inv_k": 32, "eps": 32}))),
            "rc": In(stream.Signature(rc, always_ready=True)),
            "can_issue": In(1),
            "landed": In(stream.Signature(unsigned(1), always_ready=True)),
            "kv_done": In(1), "qk_done": In(1),
            "issue": Out(1), "start": Out(1),
        })

    def _queues(self, m: Module, dec):
        """The operation and constants queues, written from the decoded command."""
        cfg, cmd = self.cfg, self._command.payload.cmd
        layout = op_layout(cfg)
        m.submodules.ops = ops = SyncFIFOBuffered(width=layout.size, depth=_OP_QUEUE)
        m.submodules.consts = consts = SyncFIFOBuffered(width=64, depth=_CONST_QUEUE)
        descriptor = Signal(layout)
        m.d.comb += [descriptor.kind.eq(dec.kind), descriptor.refused.eq(dec.bad),
                     descriptor.outputs.eq(dec.outputs),
                     descriptor.total.eq(dec.passes << (cfg.vacs.bit_length() - 1)),
                     descriptor.group.eq(dec.group), descriptor.token.eq(cmd.tokens)]
        # Written a cycle after the command is taken, from registers: the decision to take it
        # does not reach into the queues' levels (docs/rdxe.md section 9.1, step 17).
        self._ops_write, self._consts_write = Signal(), Signal()
        m.d.sync += [ops.w_en.eq(self._ops_write), consts.w_en.eq(self._consts_write),
                     ops.w_data.eq(descriptor), consts.w_data.eq(Cat(cmd.inv_k, cmd.eps))]
        m.d.comb += [self.ops.valid.eq(ops.r_rdy), self.ops.payload.eq(ops.r_data),
                     ops.r_en.eq(self.ops.ready),
                     self.consts.valid.eq(consts.r_rdy),
                     self.consts.payload.eq(consts.r_data),
                     consts.r_en.eq(self.consts.ready)]
        return ops, consts

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        # The command enters a skid buffer (cmd.ready is a register of its own, which the placer
        # can put beside the sender's stage across the engine, and the decode starts from
        # registers here, not from the sender's), then waits, decoded, in a skid queue: the
        # decision to start an operation starts from registers and moves only the queue's
        # pointer, not the enable of every decoded bit.
        m.submodules.intake = intake = SkidBuffer(command_layout(cfg), ready_copy=True)
        command = data.StructLayout({"cmd": command_layout(cfg), "dec": _decode_layout(cfg)})
        m.submodules.command = skid = SkidQueue(command)
        wiring.connect(m, wiring.flipped(self.cmd), intake.i)
        m.d.comb += [skid.i.valid.eq(intake.o.valid), intake.o.ready.eq(skid.i.ready),
                     skid.i.payload.cmd.eq(intake.o.payload),
                     skid.i.payload.dec.eq(_decode(m, cfg, intake.o.payload))]
        self._command = skid.o
        dec = skid.o.payload.dec
        ops, consts = self._queues(m, dec)
        s = _State(cfg)

        # The sequential factor, kept until the sequencer takes it.
        self.seq_rc = Signal.like(s.norm_rc, name="seq_rc")
        self.seq_rc_valid, self.seq_rc_take = Signal(name="seq_rc_valid"), Signal()
        with m.If(self.rc.valid):
            m.d.sync += [self.seq_rc.eq(self.rc.payload), self.seq_rc_valid.eq(1)]
        with m.Elif(self.seq_rc_take):
            m.d.sync += self.seq_rc_valid.eq(0)

        # In-flight requests per half: an operation starts on a half only when the one two
        # operations back has no request left between the issue and the chunk queue.
        self.inflight = Array(Signal(range(self.request_latency + 2), name=f"inflight{h}")
                              for h in range(2))
        for h in range(2):
            m.d.sync += self.inflight[h].eq(
                self.inflight[h] + (s.issue & (s.half == h))
                - (self.landed.valid & (self.landed.payload == h)))
        self.kv_pending = Signal(range(_OP_QUEUE + 2))
        self.qk_pending = Signal(range(_OP_QUEUE + 2))
        # An accepted operation counts a cycle later, from a register (round 16): the accept's
        # decision no longer reaches the counts' adders. No check misses it: the next accept is
        # two cycles on at the earliest, and an operation in START waits only for others' counts.
        kv_add = delay(m, s.accepted & dec.writes_kv, 1, name="kv_accepted", reset=True)
        qk_add = delay(m, s.accepted & dec.is_qk, 1, name="qk_accepted", reset=True)
        m.d.sync += [self.kv_pending.eq(self.kv_pending + kv_add - self.kv_done),
                     self.qk_pending.eq(self.qk_pending + qk_add - self.qk_done)]

        with m.If(s.accepted):
            m.d.sync += s.issued.eq(0)
        with m.Elif(s.issue):
            m.d.sync += s.issued.eq(1)
        self._fsm(m, s, dec, ops, consts)
        L = cfg.lanes
        m.d.comb += [self.req.valid.eq(s.issue), self.issue.eq(s.issue),
                     self.start.eq(s.issue & ~s.issued),
                     self.x.ready.eq(s.x_take),
                     self.act.valid.eq(s.issue & self.req.payload.act),
                     self.act.payload.row.eq(s.j),
                     self.act.payload.count.eq(Mux(s.left >= L, L, s.left)),
                     self.act.payload.scale.eq(s.scale),
                     self.store.valid.eq(s.issue & ~self.req.payload.act & s.x_take &
                                         self.x.valid),
                     self.store.payload.half.eq(s.half), self.store.payload.j.eq(s.j),
                     self.store.payload.data.eq(self.x.payload.data),
                     self.norm.valid.eq(s.norm_read),
                     self.norm.payload.half.eq(s.half), self.norm.payload.j.eq(s.j),
                     self.norm.payload.m.eq(s.norm_rc.m),
                     self.norm.payload.shift.eq(s.norm_rc.shift)]
        return m

    def _ready_to_start(self, on_half, qk, pv):
        """The requests of the operation two back on the half have landed; a Q.K^T waits for
        the key and value writes before it, a P.V also for the Q.K^Ts before it."""
        return (self.inflight[on_half] == 0) & Mux(
            qk, self.kv_pending == 0, Mux(pv, (self.kv_pending == 0) & (self.qk_pending == 0),
                                          1))

    def _request(self, m: Module, s: _State, *, act, link, hlink, tap, buf_write=0):
        req = self.req.payload
        m.d.comb += [req.act.eq(act), req.half.eq(s.half), req.j.eq(s.j), req.hlink.eq(hlink),
                     req.tap.eq(tap), req.tap_first.eq(s.j == 0), req.tap_last.eq(s.last_j),
                     req.softmax.eq(s.softmax), req.seq.eq(s.seq), req.buf_write.eq(buf_write)]
        if link:
            m.d.comb += [req.link.row.eq(s.row), req.link.first.eq(s.j == 0),
                         req.link.last.eq(s.last_j), req.link.out.eq(s.out + s.moved),
                         req.link.rcu.eq(s.rcu), req.link.rc_last.eq(s.rcu & s.last_p),
                         req.link.kv.eq(s.kv)]

    @staticmethod
    def _advance_chunk(m: Module, s: _State, lanes: int):
        with m.If(s.last_j):
            m.d.sync += s.restart_chunks()
        with m.Else():
            m.d.sync += s.next_chunk()
        m.d.sync += s.left.eq(s.left - lanes)

    @staticmethod
    def _begin(m: Module, s: _State, seq_pv, seq_rms):
        with m.If(seq_pv):
            m.next = "ACTGEN"
            m.d.sync += s.generating.eq(1)
        with m.Elif(seq_rms):
            m.next = "LOAD"
            m.d.sync += s.loading.eq(1)
        with m.Else():
            m.next = "RUN"
            m.d.sync += s.running.eq(1)

    def _accept(self, m: Module, s: _State, dec, ops, consts):
        """IDLE: take a command, register what the operation keeps, start or refuse it."""
        cfg, cmd = self.cfg, self._command.payload.cmd
        key_rows, value_rows = cfg.key_rows, cfg.value_rows
        # A register: whether both queues had three places free a cycle ago, so one is free now
        # whatever the two commands taken before wrote (each queue two places deeper for it).
        # Asked of every command, not only an RMSNorm of the constants queue: the start is then
        # decided from flip-flops, not the decode (docs/rdxe.md 14.4, round 5). A command other
        # than an RMSNorm now waits too while four RMSNorms' constants are still queued.
        room = Signal(init=1)
        m.d.sync += room.eq((ops.level < _OP_QUEUE - 2) & (consts.level < _CONST_QUEUE - 2))
        m.d.comb += self._command.ready.eq(room)
        # The first output entry on every idle cycle, not only on the accept: no operation reads
        # ``out`` while idle, and the accept's decode reached its register late (session 33).
        m.d.sync += s.out.eq(cmd.entry)
        with m.If(self._command.valid & room):
            m.d.comb += [self._ops_write.eq(1), self._consts_write.eq(dec.is_rms & ~dec.bad)]
            vrc = dec.is_rms | dec.is_pv
            m.d.sync += [
                s.seq.eq(cmd.seq & vrc), s.fused.eq(~cmd.seq & vrc), s.rcu.eq(~cmd.seq & vrc),
                s.softmax.eq(dec.is_pv), s.kv.eq(dec.is_qk | dec.is_pv),
                s.last_chunk.eq(dec.last_chunk), s.last_pass.eq(dec.last_pass),
                s.tokens.eq(cmd.tokens), s.scale.eq(cmd.scale),
                s.out_step.eq(~dec.is_qk),
                s.row_step.eq(Mux(dec.is_pv, value_rows, 1)),
                s.pass_step.eq(Mux(dec.is_pv, 1, Mux(dec.is_qk, key_rows, cmd.chunks))),
                s.from_x.eq(~(cmd.seq & vrc) & ~dec.is_pv),
                s.from_act.eq(~cmd.seq & dec.is_pv),
                s.p.eq(0), s.pass0.eq(1), *s.restart_chunks(dec.last_chunk), s.left.eq(cmd.tokens),
                s.drain.eq(Mux(dec.gemv_like, cmd.chunks, Mux(dec.is_qk, key_rows, 0))),
            ]
            base = Mux(dec.is_qk, dec.group * cfg.group_rows,
                       Mux(dec.is_pv, cfg.kv_rows // 2 + dec.group * cfg.group_rows, cmd.row))
            m.d.sync += [s.row.eq(base), s.row_pass.eq(base)]
            with m.If(dec.bad):
                m.next = "DRAIN"
            with m.Else():
                m.d.comb += s.accepted.eq(1)
                m.d.sync += s.half.eq(~s.half)
                # Start at once unless a dependency or the half's last requests hold it.
                with m.If(~self._ready_to_start(~s.half, dec.is_qk, dec.is_pv)):
                    m.next = "START"
                with m.Else():
                    self._begin(m, s, cmd.seq & dec.is_pv, cmd.seq & dec.is_rms)

    def _fsm(self, m: Module, s: _State, dec, ops, consts):
        L = self.cfg.lanes
        # Before the FSM: an accepted command's ``out`` (IDLE) overrides the step.
        m.d.sync += [s.out.eq(s.out + s.moved),
                     s.moved.eq(s.running & s.issue & s.last_j & s.out_step)]
        with m.FSM(name="sequencer"):
            with m.State("IDLE"):
                self._accept(m, s, dec, ops, consts)
            with m.State("DRAIN"):
                m.d.comb += s.x_take.eq(s.drain != 0)
                with m.If(s.drain == 0):
                    m.next = "IDLE"
                with m.Elif(self.x.valid):
                    m.d.sync += s.drain.eq(s.drain - 1)
            with m.State("START"):
                with m.If(self._ready_to_start(s.half, s.kv & ~s.softmax, s.softmax)):
                    self._begin(m, s, s.seq & s.softmax, s.seq & ~s.softmax)
            for name in ("LOAD", "ACTGEN"):           # their work under ``loading``, ``generating``
                with m.State(name):
                    with m.If(s.issue & s.last_j):
                        m.next = "WAIT_RC"
            with m.State("WAIT_RC"):                  # its work under ``awaiting_rc``
                with m.If(self.seq_rc_valid):
                    m.next = "NORM"
            with m.State("NORM"):                     # its work under ``normalizing``
                with m.If(s.last_j):
                    m.next = "RUN"
            with m.State("RUN"):
                with m.If(s.issue & s.last_j & s.last_p):
                    m.next = "IDLE"
        # The issuing states' work, under registers rather than the state's decode.
        with m.If(s.loading):
            # Sequential RMSNorm: x into the token buffer and the VE's sum, not to HLINK.
            self._request(m, s, act=0, link=False, hlink=0, tap=1)
            m.d.comb += [s.x_take.eq(self.can_issue), s.issue.eq(s.x_take & self.x.valid)]
        with m.If(s.generating):
            # Sequential P.V: the activations into the token buffer and the VE's sum.
            self._request(m, s, act=1, link=False, hlink=0, tap=1, buf_write=1)
            m.d.comb += s.issue.eq(self.can_issue)
        with m.If((s.loading | s.generating) & s.issue):
            self._advance_chunk(m, s, L)
            with m.If(s.last_j):
                m.d.sync += [s.loading.eq(0), s.generating.eq(0), s.awaiting_rc.eq(1)]
        with m.If(s.awaiting_rc & self.seq_rc_valid):
            m.d.comb += self.seq_rc_take.eq(1)
            # ``j`` is 0 already: LOAD and ACTGEN end on their last chunk's wrap.
            m.d.sync += [s.norm_rc.eq(self.seq_rc), s.awaiting_rc.eq(0), s.normalizing.eq(1)]
        with m.If(s.normalizing):
            m.d.comb += s.norm_read.eq(1)
            with m.If(s.last_j):
                m.d.sync += [*s.restart_chunks(), s.left.eq(s.tokens), s.running.eq(1),
                             s.normalizing.eq(0)]
            with m.Else():
                m.d.sync += s.next_chunk()
        with m.If(s.running):
            self._run(m, s)

    def _run(self, m: Module, s: _State):
        """RUN (``running``): the operation's passes, one request per cycle."""
        self._request(m, s, act=s.from_act, link=True, hlink=1, tap=s.pass0 & s.fused,
                      buf_write=s.from_act)
        m.d.comb += [s.x_take.eq(self.can_issue & s.from_x),
                     s.issue.eq(self.can_issue & (~s.from_x | self.x.valid))]
        with m.If(s.issue):
            self._advance_chunk(m, s, self.cfg.lanes)
            m.d.sync += s.row.eq(s.row + s.row_step)
            with m.If(s.last_j):
                m.d.sync += [s.p.eq(s.p + 1), s.pass0.eq(0), s.from_x.eq(0), s.from_act.eq(0),
                             s.row.eq(s.row_pass + s.pass_step),
                             s.row_pass.eq(s.row_pass + s.pass_step),
                             s.left.eq(s.tokens)]
                with m.If(s.last_p):
                    m.d.sync += s.running.eq(0)
