"""The rDXE decoder execution tile (DXT): N VACs on HLINK, the vector engine, the token buffer,
the GBUS and the iWuR KV cache, behind a command stream."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.tree import delay
from ..pipeline import ResultQueue
from ..validate import index_bits
from .spec import (CODE_BITS, DESTS, GBUS_BYTES, OPS, DxtConfig, check_config, chunk_layout,
                   command_layout, response_layout, word_layout)
from .vac import HlinkSource, Vac
from .ve import Activations, Normalizer, RcUnit

__all__ = ["Dxt"]

_GEMV, _RMS, _QK, _PV = (OPS.index(n) for n in ("gemv", "rmsnorm", "qk", "pv"))
_OUT, _KEY, _VALUE = (DESTS.index(n) for n in ("out", "key", "value"))
#: Gatherer operation kinds: the three GEMV destinations and the Q.K^T scores.
_SCORE = 3
#: Operations the gatherer and the constants queue hold ahead of the sequencer.
_OP_QUEUE = 8
_CONST_QUEUE = 4
_RESP_QUEUE = 4


def _link_control(vcfg) -> data.StructLayout:
    """The HLINK fields other than the data (hdl.rdxe.spec.hlink_layout)."""
    return data.StructLayout({
        "row": unsigned(vcfg.row_bits), "first": 1, "last": 1,
        "out": unsigned(vcfg.out_bits), "rcu": 1, "rc_last": 1, "kv": 1})


def _flags() -> dict:
    # to_hlink: the chunk goes to the VACs; tap: the VE's sum takes it (first, last, softmax,
    # seq as the tap's fields).
    return {"hlink": 1, "tap": 1, "tap_first": 1, "tap_last": 1, "softmax": 1, "seq": 1}


class Dxt(wiring.Component):
    """Run GEMVs, RMSNorm-GEMVs, Q.K^T and softmax-P.V on ``vacs`` VACs behind one command
    stream (rDXE Sec. III; docs/rdxe.md).

    **Operations** (``cmd``, :func:`~hdl.rdxe.spec.command_layout`; one response on ``resp``
    each, in order, when it is done):

    * ``gemv``: ``out = PPU(W . x)`` (``golden.rdxe.gemv``), ``x`` from ``x``. Output ``o`` runs
      on VAC ``o mod N`` in pass ``o // N``; the results go to ``o`` (``dest`` out), or into the
      KV cache as token ``tokens``' key (``key``: over the GBUS to VAC ``t mod N``, byte
      enables, one key per ``head_dim / lanes`` rows) or value (``value``: each VAC writes its
      own results, one byte per row, column ``t mod lanes``) of KV group ``head``
      (``golden.rdxe.kv_address``). A key or value of a token at or past the group's capacity is
      refused: ``resp.error``, nothing stored.
    * ``rmsnorm``: the same with the RMSNorm of ``x`` (``golden.rdxe.rmsnorm_gemv``). Fused: the
      VE sums ``x**2`` from the chunks entering HLINK and broadcasts the RC factor to the RCUs.
      Sequential (``seq``): the VE sums ``x**2`` as ``x`` fills the token buffer, then normalizes
      it in place, then the plain GEMV runs on it.
    * ``qk``: ``s = PPU(K_g . q)`` for query head ``head`` against the ``tokens`` keys of KV group
      ``head // group_size`` (``golden.rdxe.qk_scores``), ``q`` from ``x``; token ``t`` on VAC
      ``t mod N``, one key row per cycle. The INT8 scores go over the GBUS into the VE's score
      buffer (the running maximum follows them) and to ``o``.
    * ``pv``: ``softmax(s) . V_g`` of the last Q.K^T's scores (``golden.rdxe.softmax_pv``). Fused:
      the VE's activations ``p`` are the chunks on HLINK and fill the token buffer for the later
      passes; the RC factor ``1 / sum p`` goes to the RCUs. Sequential: the activations fill the
      token buffer, are normalized in place, then a plain P.V runs. Results to ``o``.

    Q.K^T waits until every earlier key and value write is done; P.V waits for those and for
    every earlier Q.K^T.

    **Streams.** ``wmem``, ``ppu``: loads routed to VAC ``vac`` (always ready; the host orders
    them against the operations that read those places, as for the VAC). ``x``: the token
    chunks of every ``gemv``, ``rmsnorm`` and ``qk`` (``chunks`` of them, ``head_dim /
    lanes`` for Q.K^T), zero-padded past ``K``, also those of refused commands. ``o``: GBUS words
    of 4 results in output order. Every stream is valid/ready and honours back-pressure.

    Parameters
    ----------
    cfg : DxtConfig

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
    x : In(stream.Signature(chunk_layout(lanes)))
    wmem : In(stream.Signature({vac, addr, data}))
    ppu : In(stream.Signature({vac, addr, m, shift}))
    o : Out(stream.Signature(word_layout()))
    resp : Out(stream.Signature(response_layout()))

    Timing: ``golden.rdxe``'s cycle model, exactly (docs/rdxe.md section 6): an operation's first
    request goes out ``Latency.lead`` (28) cycles before its first chunk meets VAC 0's lane tree;
    its last GBUS word ``done - 1`` cycles after that, its response ``response`` (2) cycles later;
    one chunk per cycle into HLINK, one GBUS word of 4 results per cycle out.
    """

    def __init__(self, cfg: DxtConfig):
        self.cfg = check_config(cfg, DxtConfig, "DXT")
        vcfg = cfg.vac_config()
        sel = index_bits(cfg.vacs)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "x": In(stream.Signature(chunk_layout(cfg.lanes))),
            "wmem": In(stream.Signature(data.StructLayout({
                "vac": sel, "addr": unsigned(index_bits(vcfg.wmem_depth)),
                "data": data.ArrayLayout(signed(CODE_BITS), cfg.lanes)}))),
            "ppu": In(stream.Signature(data.StructLayout({
                "vac": sel, "addr": unsigned(vcfg.out_bits), "m": signed(cfg.mult_bits),
                "shift": 6}))),
            "o": Out(stream.Signature(word_layout())),
            "resp": Out(stream.Signature(response_layout())),
        })
        self.vacs = [Vac(vcfg) for _ in range(cfg.vacs)]
        self.source = HlinkSource(vcfg, vacs=cfg.vacs)
        ve = cfg.ve_config()
        self.rc_unit, self.acts, self.norm = RcUnit(ve), Activations(ve), Normalizer(ve)
        # Built here so that tests can watch them; a tile built only to be checked (the
        # registry) elaborates none of them.
        for unit in (*self.vacs, self.source, self.rc_unit, self.acts, self.norm):
            unit._MustUse__used = True
        # For cycle measurements in simulation (not ports): a request issued (``start``: an
        # operation's first), and a GBUS word taken from the VACs.
        self.issue = Signal()
        self.start = Signal()
        self.gbus = Signal()

    # --- latencies --------------------------------------------------------------------------

    @property
    def request_latency(self) -> int:
        """Cycles from a request's issue to its chunk in the chunk queue: the activation path
        (score read and ``E``); token-buffer chunks are read after the same delay."""
        return self.acts.latency

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        vcfg = cfg.vac_config()
        N, L = cfg.vacs, cfg.lanes
        log_n, log_l = N.bit_length() - 1, L.bit_length() - 1
        R, c = cfg.key_rows, cfg.value_rows
        lat = self.request_latency

        # ---- VACs, source, VE ----------------------------------------------------------------
        m.submodules.source = src = self.source
        upstream = src.o
        for v, vac in enumerate(self.vacs):
            m.submodules[f"vac{v}"] = vac
            wiring.connect(m, upstream, vac.hlink_i)
            upstream = vac.hlink_o
            m.d.comb += [
                vac.wmem.valid.eq(self.wmem.valid & (self.wmem.payload.vac == v)),
                vac.wmem.payload.addr.eq(self.wmem.payload.addr),
                vac.wmem.payload.data.eq(self.wmem.payload.data),
                vac.ppu.valid.eq(self.ppu.valid & (self.ppu.payload.vac == v)),
                vac.ppu.payload.addr.eq(self.ppu.payload.addr),
                vac.ppu.payload.m.eq(self.ppu.payload.m),
                vac.ppu.payload.shift.eq(self.ppu.payload.shift),
                src.credit[v].eq(vac.credit),
            ]
        m.d.comb += [upstream.ready.eq(1), self.wmem.ready.eq(1), self.ppu.ready.eq(1)]
        m.submodules.rc_unit = rcu = self.rc_unit
        m.submodules.acts = acts = self.acts
        m.submodules.norm = norm = self.norm

        # RC factors: fused ones to every RCU, sequential ones to the sequencer.
        seq_rc = Signal(data.StructLayout({"m": unsigned(cfg.rc_bits - 6), "shift": 6}))
        seq_rc_valid = Signal()
        seq_rc_take = Signal()
        for vac in self.vacs:
            m.d.comb += [vac.rc.valid.eq(rcu.rc.valid & ~rcu.rc.payload.seq),
                         vac.rc.payload.m.eq(rcu.rc.payload.m),
                         vac.rc.payload.shift.eq(rcu.rc.payload.shift)]
        with m.If(rcu.rc.valid & rcu.rc.payload.seq):
            m.d.sync += [seq_rc.m.eq(rcu.rc.payload.m), seq_rc.shift.eq(rcu.rc.payload.shift),
                         seq_rc_valid.eq(1)]
        with m.Elif(seq_rc_take):
            m.d.sync += seq_rc_valid.eq(0)

        # ---- token buffer: two halves, operations alternate ---------------------------------
        chunk_bits = index_bits(cfg.chunks)
        row_shape = data.ArrayLayout(signed(CODE_BITS), L)
        halves = []
        for h in range(2):
            m.submodules[f"buffer{h}"] = mem = Memory(shape=row_shape, depth=cfg.chunks, init=[])
            wr = mem.write_port()
            # Transparent: a one-chunk P.V's second pass reads its row in the very cycle the
            # activation is written.
            halves.append((wr, mem.read_port(transparent_for=[wr])))

        # ---- requests: issued by the sequencer, all with the same latency --------------------
        link_ctl = _link_control(vcfg)
        req_layout = data.StructLayout({
            "act": 1, "half": 1, "j": unsigned(chunk_bits), "link": link_ctl,
            "buf_write": 1, **_flags()})
        req = Signal(req_layout)
        req_valid = Signal()
        req_e = data.View(req_layout, delay(m, req.as_value(), lat - 1, name="req_e"))
        req_e_valid = delay(m, req_valid, lat - 1, name="req_e_valid", reset=True)
        req_f = data.View(req_layout, delay(m, req_e.as_value(), 1, name="req_f"))
        req_f_valid = delay(m, req_e_valid, 1, name="req_f_valid", reset=True)

        queued_layout = data.StructLayout({"data": row_shape, "link": link_ctl, **_flags()})
        chunks = stream.Signature(queued_layout).create()
        queue = ResultQueue(m, chunks, depth=lat + 4, name="chunk_queue")

        # In-flight requests per half: an operation starts on a half only when the one two
        # operations back has no request left between the issue and the chunk queue.
        inflight = Array(Signal(range(lat + 2), name=f"inflight{h}") for h in range(2))
        for h in range(2):
            m.d.sync += inflight[h].eq(inflight[h] + (req_valid & (req.half == h))
                                       - (req_f_valid & (req_f.half == h)))

        # ---- the sequencer ---------------------------------------------------------------------
        cmd = self.cmd.payload
        op_layout = data.StructLayout({
            "kind": 2, "refused": 1,
            "outputs": unsigned(index_bits(max(cfg.max_outputs, cfg.capacity) + 1)),
            "total": unsigned(index_bits(max(cfg.max_outputs, cfg.capacity) + N + 1)),
            "group": unsigned(index_bits(cfg.kv_groups)),
            "token": unsigned(index_bits(cfg.capacity + 1))})
        m.submodules.ops = ops = SyncFIFOBuffered(width=op_layout.size, depth=_OP_QUEUE)
        m.submodules.consts = consts = SyncFIFOBuffered(width=64, depth=_CONST_QUEUE)
        m.d.comb += [rcu.consts.valid.eq(consts.r_rdy),
                     rcu.consts.payload.as_value().eq(consts.r_data),
                     consts.r_en.eq(rcu.consts.ready)]
        kv_pending = Signal(range(_OP_QUEUE + 2))
        qk_pending = Signal(range(_OP_QUEUE + 2))
        kv_done, qk_done = Signal(), Signal()

        # Decode (combinational, from cmd).
        is_rms, is_qk, is_pv = cmd.op == _RMS, cmd.op == _QK, cmd.op == _PV
        gemv_like = (cmd.op == _GEMV) | is_rms
        writes_kv = gemv_like & ((cmd.dest == _KEY) | (cmd.dest == _VALUE))
        pv_chunks = (cmd.tokens + L - 1) >> log_l
        bad = Mux(gemv_like,
                  (cmd.outputs == 0) | (cmd.chunks == 0) | (cmd.chunks > cfg.chunks) |
                  (cmd.dest > _VALUE) |
                  (writes_kv & ((cmd.outputs != cfg.head_dim) | (cmd.head >= cfg.kv_groups) |
                                (cmd.tokens >= cfg.capacity))),
                  (cmd.tokens == 0) | (cmd.tokens > cfg.capacity) | (cmd.head >= cfg.heads))
        outputs = Mux(gemv_like, cmd.outputs, Mux(is_qk, cmd.tokens, cfg.head_dim))
        passes = (outputs + N - 1) >> log_n
        group = Mux(gemv_like, cmd.head, cmd.head // cfg.group_size)
        kind = Mux(gemv_like, cmd.dest, Mux(is_qk, _SCORE, _OUT))
        descriptor = Signal(op_layout)
        m.d.comb += [descriptor.kind.eq(kind), descriptor.refused.eq(bad),
                     descriptor.outputs.eq(outputs), descriptor.total.eq(passes << log_n),
                     descriptor.group.eq(group), descriptor.token.eq(cmd.tokens),
                     ops.w_data.eq(descriptor), consts.w_data.eq(Cat(cmd.inv_k, cmd.eps))]

        # Operation registers.
        o_src0 = Signal(2)                    # pass 0 from: 0 token buffer, 1 x, 2 activations
        o_seq, o_fused, o_softmax, o_kv, o_rcu = (Signal(name=n) for n in
                                                  ("o_seq", "o_fused", "o_softmax", "o_kv",
                                                   "o_rcu"))
        o_chunks = Signal(range(cfg.chunks + 2))
        o_passes = Signal(range(max(cfg.max_outputs, cfg.capacity) + 2))
        o_row_pass, o_row = Signal(vcfg.row_bits), Signal(vcfg.row_bits)
        o_row_step, o_pass_step = Signal(vcfg.row_bits), Signal(vcfg.row_bits)
        o_out, o_out_step = Signal(vcfg.out_bits), Signal()
        o_tokens = Signal(range(cfg.capacity + 2))
        o_scale = Signal(32)
        half = Signal()
        p = Signal(range(max(cfg.max_outputs, cfg.capacity) + 2))
        j = Signal(range(cfg.chunks + 2))
        left = Signal(range(cfg.capacity + L + 1))       # tokens from chunk j on (P.V)
        drain = Signal(range(cfg.chunks + 2))
        norm_rc = Signal.like(seq_rc)

        last_j = j == o_chunks - 1
        last_p = p == o_passes - 1
        issue = Signal()
        x_take = Signal()              # x.ready: the sequencer takes a chunk if one is there
        accepted = Signal()            # a command starts (not refused)
        issued = Signal()               # the operation has issued a request
        with m.If(accepted):
            m.d.sync += issued.eq(0)
        with m.Elif(issue):
            m.d.sync += issued.eq(1)
        m.d.comb += [req_valid.eq(issue), self.issue.eq(issue), self.start.eq(issue & ~issued),
                     queue.issue.eq(issue)]

        def request(*, act, link, hlink, tap, buf_write=0):
            m.d.comb += [req.act.eq(act), req.half.eq(half), req.j.eq(j), req.hlink.eq(hlink),
                         req.tap.eq(tap), req.tap_first.eq(j == 0), req.tap_last.eq(last_j),
                         req.softmax.eq(o_softmax), req.seq.eq(o_seq),
                         req.buf_write.eq(buf_write)]
            if link:
                m.d.comb += [req.link.row.eq(o_row), req.link.first.eq(j == 0),
                             req.link.last.eq(last_j), req.link.out.eq(o_out),
                             req.link.rcu.eq(o_rcu), req.link.rc_last.eq(o_rcu & last_p),
                             req.link.kv.eq(o_kv)]

        def advance_chunk():
            with m.If(last_j):
                m.d.sync += j.eq(0)
            with m.Else():
                m.d.sync += j.eq(j + 1)
            m.d.sync += left.eq(left - L)

        # Activation requests read the score buffer at issue.
        act_count = Mux(left >= L, L, left)
        m.d.comb += [acts.req.payload.row.eq(j), acts.req.payload.count.eq(act_count),
                     acts.req.payload.scale.eq(o_scale)]

        def ready_to_start(on_half, qk, pv):
            """An operation may issue: the requests of the one two back on its half have left
            the delay line; a Q.K^T waits for the key and value writes before it, a P.V also for
            the Q.K^Ts before it."""
            return (inflight[on_half] == 0) & Mux(
                qk, kv_pending == 0, Mux(pv, (kv_pending == 0) & (qk_pending == 0), 1))

        def begin(seq_pv, seq_rms):
            with m.If(seq_pv):
                m.next = "ACTGEN"
            with m.Elif(seq_rms):
                m.next = "LOAD"
            with m.Else():
                m.next = "RUN"

        norm_read = Signal()
        with m.FSM(name="sequencer"):
            with m.State("IDLE"):
                room = ops.w_rdy & (consts.w_rdy | ~is_rms)
                m.d.comb += self.cmd.ready.eq(room)
                with m.If(self.cmd.valid & room):
                    m.d.comb += [ops.w_en.eq(1), consts.w_en.eq(is_rms & ~bad)]
                    m.d.sync += [
                        o_seq.eq(cmd.seq & (is_rms | is_pv)),
                        o_fused.eq(~cmd.seq & (is_rms | is_pv)),
                        o_rcu.eq(~cmd.seq & (is_rms | is_pv)),
                        o_softmax.eq(is_pv), o_kv.eq(is_qk | is_pv),
                        o_chunks.eq(Mux(gemv_like, cmd.chunks, Mux(is_qk, R, pv_chunks))),
                        o_passes.eq(passes), o_tokens.eq(cmd.tokens), o_scale.eq(cmd.scale),
                        o_out_step.eq(~is_qk), o_out.eq(cmd.entry),
                        o_row_step.eq(Mux(is_pv, c, 1)),
                        o_pass_step.eq(Mux(is_pv, 1, Mux(is_qk, R, cmd.chunks))),
                        o_src0.eq(Mux(cmd.seq & (is_rms | is_pv), 0, Mux(is_pv, 2, 1))),
                        p.eq(0), j.eq(0), left.eq(cmd.tokens),
                        drain.eq(Mux(gemv_like, cmd.chunks, Mux(is_qk, R, 0))),
                    ]
                    base = Mux(is_qk, group * cfg.group_rows,
                               Mux(is_pv, cfg.kv_rows // 2 + group * cfg.group_rows, cmd.row))
                    m.d.sync += [o_row.eq(base), o_row_pass.eq(base)]
                    with m.If(bad):
                        m.next = "DRAIN"
                    with m.Else():
                        m.d.comb += accepted.eq(1)
                        m.d.sync += half.eq(~half)
                        # Start at once unless a dependency or the half's last requests hold it.
                        with m.If(~ready_to_start(~half, is_qk, is_pv)):
                            m.next = "START"
                        with m.Else():
                            begin(cmd.seq & is_pv, cmd.seq & is_rms)
            with m.State("DRAIN"):
                m.d.comb += x_take.eq(drain != 0)
                with m.If(drain == 0):
                    m.next = "IDLE"
                with m.Elif(self.x.valid):
                    m.d.sync += drain.eq(drain - 1)
            with m.State("START"):
                with m.If(ready_to_start(half, o_kv & ~o_softmax, o_softmax)):
                    begin(o_seq & o_softmax, o_seq & ~o_softmax)
            with m.State("LOAD"):
                # Sequential RMSNorm: x into the token buffer and the VE's sum, not to HLINK.
                request(act=0, link=False, hlink=0, tap=1)
                m.d.comb += [x_take.eq(queue.can_issue), issue.eq(x_take & self.x.valid)]
                with m.If(issue):
                    advance_chunk()
                    with m.If(last_j):
                        m.next = "WAIT_RC"
            with m.State("ACTGEN"):
                # Sequential P.V: the activations into the token buffer and the VE's sum.
                request(act=1, link=False, hlink=0, tap=1, buf_write=1)
                m.d.comb += issue.eq(queue.can_issue)
                with m.If(issue):
                    advance_chunk()
                    with m.If(last_j):
                        m.next = "WAIT_RC"
            with m.State("WAIT_RC"):
                with m.If(seq_rc_valid):
                    m.d.comb += seq_rc_take.eq(1)
                    m.d.sync += [norm_rc.eq(seq_rc), j.eq(0)]
                    m.next = "NORM"
            with m.State("NORM"):
                m.d.comb += norm_read.eq(1)
                with m.If(last_j):
                    m.d.sync += [j.eq(0), left.eq(o_tokens)]
                    m.next = "RUN"
                with m.Else():
                    m.d.sync += j.eq(j + 1)
            with m.State("RUN"):
                from_x = (p == 0) & (o_src0 == 1)
                from_act = (p == 0) & (o_src0 == 2)
                request(act=from_act, link=True, hlink=1, tap=(p == 0) & o_fused,
                        buf_write=from_act)
                m.d.comb += [x_take.eq(queue.can_issue & from_x),
                             issue.eq(queue.can_issue & (~from_x | self.x.valid))]
                with m.If(issue):
                    advance_chunk()
                    m.d.sync += o_row.eq(o_row + o_row_step)
                    with m.If(last_j):
                        m.d.sync += [p.eq(p + 1), o_row.eq(o_row_pass + o_pass_step),
                                     o_row_pass.eq(o_row_pass + o_pass_step),
                                     o_out.eq(o_out + o_out_step), left.eq(o_tokens)]
                        with m.If(last_p):
                            m.next = "IDLE"
        m.d.sync += [kv_pending.eq(kv_pending + (accepted & writes_kv) - kv_done),
                     qk_pending.eq(qk_pending + (accepted & is_qk) - qk_done)]
        m.d.comb += [self.x.ready.eq(x_take), acts.req.valid.eq(issue & req.act)]

        # ---- token buffer writes and reads ----------------------------------------------------
        # The normalizer reads a chunk, registers it (a block RAM's clock-to-output leaves no
        # time for a multiplier behind it), requantizes it and writes it back.
        norm_j = delay(m, j, 2, name="norm_j")
        norm_valid = delay(m, norm_read, 2, name="norm_valid", reset=True)
        norm_out_j = delay(m, norm_j, norm.latency, name="norm_out_j")
        norm_half = delay(m, half, 2 + norm.latency, name="norm_half")
        act_write = req_f_valid & req_f.act & req_f.buf_write
        for h, (wr, rd) in enumerate(halves):
            mine_x = issue & ~req.act & (req.half == h) & x_take & self.x.valid
            mine_act = act_write & (req_f.half == h)
            mine_norm = norm.o.valid & (norm_half == h)
            m.d.comb += [
                wr.en.eq(mine_x | mine_act | mine_norm),
                wr.addr.eq(Mux(mine_x, req.j, Mux(mine_act, req_f.j, norm_out_j))),
                wr.data.eq(Mux(mine_x, self.x.payload.data,
                               Mux(mine_act, acts.p.payload.data, norm.o.payload.data))),
                rd.addr.eq(Mux(norm_read & (half == h), j, req_e.j)),
                rd.en.eq((norm_read & (half == h)) | (req_e_valid & ~req_e.act & (req_e.half == h))),
            ]
        read_half = delay(m, Mux(norm_read, half, req_e.half), 1, name="read_half")
        read_data = Mux(read_half, halves[1][1].data.as_value(), halves[0][1].data.as_value())
        m.d.comb += [norm.i.valid.eq(norm_valid),
                     norm.i.payload.data.eq(delay(m, read_data, 1, name="norm_data")),
                     norm.i.payload.m.eq(norm_rc.m), norm.i.payload.shift.eq(norm_rc.shift)]

        # ---- into the chunk queue -----------------------------------------------------------------
        queued = Signal(queued_layout)
        m.d.comb += [queued.data.eq(Mux(req_f.act, acts.p.payload.data.as_value(), read_data)),
                     queued.link.eq(req_f.link)]
        for name in _flags():
            m.d.comb += queued[name].eq(req_f[name])
        m.d.comb += [queue.w_en.eq(req_f_valid), queue.w_data.eq(queued)]

        # ---- out of the chunk queue: to HLINK (through the source) and to the VE's tap ----------
        head = chunks.payload
        link = src.i.payload
        m.d.comb += [src.i.valid.eq(chunks.valid & head.hlink), link.data.eq(head.data),
                     chunks.ready.eq(~head.hlink | src.i.ready)]
        for name in ("row", "first", "last", "out", "rcu", "rc_last", "kv"):
            m.d.comb += link[name].eq(head.link[name])
        taken = chunks.valid & chunks.ready
        # The VE taps the chunk where VAC 0's lane tree meets it: row_latency later.
        row_lat = self.vacs[0].row_latency
        tap_valid = delay(m, taken & head.tap, row_lat, name="tap_valid", reset=True)
        tap_data = delay(m, head.data.as_value(), row_lat, name="tap_data")
        tap_flags = delay(m, Cat(head.tap_first, head.tap_last, head.softmax, head.seq),
                          row_lat, name="tap_flags")
        m.d.comb += [rcu.tap.valid.eq(tap_valid), rcu.tap.payload.data.eq(tap_data),
                     rcu.tap.payload.first.eq(tap_flags[0]), rcu.tap.payload.last.eq(tap_flags[1]),
                     rcu.tap.payload.softmax.eq(tap_flags[2]), rcu.tap.payload.seq.eq(tap_flags[3])]

        # ---- the gatherer: GBUS words of 4 results, in output order -----------------------------
        op = data.View(op_layout, ops.r_data)
        w = Signal(range(max(cfg.max_outputs, cfg.capacity) // GBUS_BYTES + N + 2))
        base_o = w << 2
        # Outputs left from this word on (registers, so that no adder sits in front of the
        # word's checks): all of them at the operation's first word.
        rem_total, rem_out = Signal.like(op.total), Signal.like(op.outputs)
        left_t = Mux(w == 0, op.total, rem_total)
        left_o = Mux(w == 0, op.outputs, rem_out)
        # The word's first VAC: (4 w) mod N.
        slot_vac = Cat(Const(0, 2), w[:log_n - 2]) if N > GBUS_BYTES else Const(0, 2)
        need = [left_t > k for k in range(GBUS_BYTES)]
        keep = [left_o > k for k in range(GBUS_BYTES)]
        valids = Array(vac.o.valid for vac in self.vacs)
        ys = Array(vac.o.payload.y for vac in self.vacs)
        ready_all = Const(1, 1)
        word = Signal(word_layout())
        for k in range(GBUS_BYTES):
            ready_all = ready_all & (~need[k] | valids[slot_vac + k])
            m.d.comb += [word.data[k].eq(ys[slot_vac + k]), word.keep[k].eq(keep[k])]
        last_word = left_t <= GBUS_BYTES
        # Words of padding outputs only (past M in the last pass) are taken, not sent.
        m.d.comb += word.last.eq(left_o <= GBUS_BYTES)
        out_free = ~self.o.valid | self.o.ready
        m.submodules.responses = resp = SyncFIFOBuffered(width=1, depth=_RESP_QUEUE)
        m.d.comb += [self.resp.valid.eq(resp.r_rdy), self.resp.payload.error.eq(resp.r_data),
                     resp.r_en.eq(self.resp.ready)]
        emits = ((op.kind == _OUT) | (op.kind == _SCORE)) & keep[0]
        fire = Signal()
        m.d.comb += fire.eq(ops.r_rdy & ~op.refused & ready_all & (~emits | out_free) &
                            resp.w_rdy)
        m.d.comb += self.gbus.eq(fire)
        refused = ops.r_rdy & op.refused & resp.w_rdy
        done = (fire & last_word) | refused
        m.d.comb += [ops.r_en.eq(done), resp.w_en.eq(done), resp.w_data.eq(refused)]
        # The writes below land a cycle after the word, and the VE's maximum follows its last
        # score two cycles later: so do the completions that release Q.K^T and P.V.
        m.d.sync += kv_done.eq(fire & last_word & ((op.kind == _KEY) | (op.kind == _VALUE)))
        m.d.comb += qk_done.eq(delay(m, fire & last_word & (op.kind == _SCORE), 3,
                                     name="qk_done", reset=True))
        with m.If(fire):
            m.d.sync += [w.eq(Mux(last_word, 0, w + 1)), rem_total.eq(left_t - GBUS_BYTES),
                         rem_out.eq(Mux(left_o > GBUS_BYTES, left_o - GBUS_BYTES, 0))]
        with m.If(fire & emits):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.eq(word)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        for v, vac in enumerate(self.vacs):
            in_word = (v >> 2) == (slot_vac >> 2) if N > GBUS_BYTES else Const(1, 1)
            m.d.comb += vac.o.ready.eq(fire & in_word & need[v & 3])
        # Scores to the VE, registered.
        m.d.sync += [acts.scores.valid.eq(fire & (op.kind == _SCORE)),
                     acts.scores.payload.word.eq(w), acts.scores.payload.first.eq(w == 0),
                     acts.scores.payload.data.eq(word.data), acts.scores.payload.keep.eq(word.keep)]
        # KV-cache writes, registered: a key over the GBUS to its owner, values into their own
        # VAC.
        t = op.token
        key_row = op.group * cfg.group_rows + (t >> log_n) * R + (base_o >> log_l)
        key_en = Cat(*word.keep) << base_o[:log_l]          # shift amounts cut to their range
        value_row = (cfg.kv_rows // 2 + op.group * cfg.group_rows + (t >> log_l) * c +
                     (base_o >> log_n))
        for v, vac in enumerate(self.vacs):
            slot = v & 3
            mine_key = (op.kind == _KEY) & ((t & (N - 1)) == v)
            in_word = (v >> 2) == (slot_vac >> 2) if N > GBUS_BYTES else Const(1, 1)
            mine_value = (op.kind == _VALUE) & in_word & keep[slot]
            bytes_ = Signal(data.ArrayLayout(signed(CODE_BITS), GBUS_BYTES), name=f"kv_word{v}")
            m.d.sync += [
                vac.kv.valid.eq(fire & (mine_key | mine_value)),
                vac.kv.payload.addr.eq(Mux(op.kind == _KEY, key_row, value_row)),
                vac.kv.payload.en.eq(Mux(op.kind == _KEY, key_en, Const(1, L) << t[:log_l])),
            ]
            for k in range(GBUS_BYTES):
                m.d.sync += bytes_[k].eq(Mux(op.kind == _KEY, word.data[k], vac.o.payload.y))
            for lane in range(L):
                m.d.comb += vac.kv.payload.data[lane].eq(bytes_[lane % GBUS_BYTES])
        return m
