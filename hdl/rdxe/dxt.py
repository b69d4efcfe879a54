"""The rDXE decoder execution tile (DXT): N VACs on HLINK, the vector engine, the token buffer,
the GBUS and the iWuR KV cache, behind a command stream. A short parent wiring named
sub-components (docs/rdxe.md section 5.1)."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import DelayLine, SkidBuffer, delay
from ..validate import index_bits
from .chunks import READ_LATENCY, ChunkFeed, TokenBuffer
from .gbus import Gatherer, KvWriter
from .sequencer import Sequencer, chunk_flags, request_layout
from .spec import (CODE_BITS, DxtConfig, check_config, chunk_layout, command_layout,
                   response_layout, word_layout)
from .vac import HlinkSource, Vac
from .ve import TAP_LEAD, Activations, RcUnit

__all__ = ["Dxt"]

#: Places in the chunk queue beyond the request latency: 3 cover a place's round trip at one
#: request per cycle (``ChunkFeed``), the fourth is slack.
_QUEUE_SLACK = 4


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

    **Sub-components** (docs/rdxe.md section 5.1): the :class:`~hdl.rdxe.sequencer.Sequencer`
    issues requests; a :class:`~hdl.pipeline.DelayLine` carries them for the activation path's
    time (the :class:`~hdl.rdxe.ve.Activations` compute theirs meanwhile) to the
    :class:`~hdl.rdxe.chunks.TokenBuffer`'s read; the :class:`~hdl.rdxe.chunks.ChunkFeed` queues
    the chunks for the :class:`~hdl.rdxe.vac.HlinkSource` and the VE's
    :class:`~hdl.rdxe.ve.RcUnit`; the VACs' results leave through the
    :class:`~hdl.rdxe.gbus.Gatherer`, keys and values through the
    :class:`~hdl.rdxe.gbus.KvWriter`.

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
    request goes out ``Latency.lead`` cycles (29 at ``operand_stages`` 4) before its first chunk meets VAC 0's lane tree;
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
        # For cycle measurements in simulation (not ports): a request issued (``start``: an
        # operation's first), a GBUS word taken from the VACs, a result leaving any VAC's PPU.
        self.issue = Signal()
        self.start = Signal()
        self.gbus = Signal()
        self.result = Signal()

    # --- latencies --------------------------------------------------------------------------

    @property
    def row_latency(self) -> int:
        """A VAC's ``row_latency``: a chunk on its ``hlink_i`` to its lane tree."""
        return Vac.row_latency_of(self.cfg)

    @property
    def act_latency(self) -> int:
        """Cycles from a request's issue to its activation chunk (score read and ``E``): the
        token buffer is read a cycle before, so that the read of a one-chunk P.V's second pass
        meets the write of its first pass's activation."""
        return Activations.latency_of(self.cfg.ve_config())

    @property
    def request_latency(self) -> int:
        """Cycles from a request's issue to its chunk in the chunk queue: the token buffer's
        read, a cycle before the activation, and its :data:`~hdl.rdxe.chunks.READ_LATENCY`
        (``golden.rdxe.Latency.request``)."""
        return self.act_latency - 1 + READ_LATENCY

    @staticmethod
    def _fresh(m, read, write):
        """Whether the token buffer's read this cycle is of the chunk whose activation is
        stored in it (the request tail's), from the requests a cycle before (``read`` the
        request about to reach the read, ``write`` the one about to reach the tail): a
        register."""
        r, w = read.payload, write.payload
        same = (r.half == w.half) & (r.j == w.j)
        return delay(m, read.valid & ~r.act & write.valid & w.act & w.buf_write & same, 1,
                     name="read_fresh", reset=True)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        vcfg = cfg.vac_config()
        ve = cfg.ve_config()
        lat = self.request_latency
        m.submodules.sequencer = seq = Sequencer(cfg, request_latency=lat)
        # The requests' line ends in a stage of its own: a read's request is there a cycle before
        # the token buffer reads, when the activation it may read is one stage further on.
        m.submodules.requests = early = DelayLine(request_layout(cfg), self.act_latency - 2)
        m.submodules.request_read = line = DelayLine(request_layout(cfg), 1)
        m.submodules.request_tail = tail = DelayLine(request_layout(cfg), 1)
        m.submodules.request_feed = to_feed = DelayLine(request_layout(cfg), READ_LATENCY - 1)
        m.submodules.tokens = tokens = TokenBuffer(cfg)
        m.submodules.feed = feed = ChunkFeed(cfg, depth=lat + _QUEUE_SLACK,
                                             tap_delay=self.row_latency - TAP_LEAD)
        m.submodules.gatherer = gather = Gatherer(cfg)
        m.submodules.kv_writer = kv_writer = KvWriter(cfg)
        m.submodules.source = src = HlinkSource(vcfg, vacs=cfg.vacs)
        m.submodules.rc_unit = rcu = RcUnit(ve)
        m.submodules.acts = acts = Activations(ve)
        # Kept for tests that read the VACs' memories; built here so that a tile built only to
        # be checked leaves no unused component behind.
        self.vacs = vacs = [Vac(vcfg) for _ in range(cfg.vacs)]

        # Commands and chunks in; requests through the delay line, the token buffer and the
        # activation path into the chunk queue.
        wiring.connect(m, wiring.flipped(self.cmd), seq.cmd)
        wiring.connect(m, wiring.flipped(self.x), seq.x)
        wiring.connect(m, seq.req, early.i)
        wiring.connect(m, early.o, line.i)
        wiring.connect(m, line.o, tail.i)
        wiring.connect(m, tail.o, to_feed.i)
        wiring.connect(m, seq.store, tokens.store)
        wiring.connect(m, seq.norm, tokens.norm)
        wiring.connect(m, seq.act, acts.req)
        # Through a skid buffer: the RC unit takes a constant as a sum reaches its multiply-add,
        # and that decision must not reach the sequencer's queue placed apart (a cycle of its
        # lead is spent; the constant is queued as the operation starts).
        m.submodules.consts = consts = SkidBuffer(seq.consts.payload.shape())
        wiring.connect(m, seq.consts, consts.i)
        wiring.connect(m, consts.o, rcu.consts)
        # A request as the token buffer is read, a cycle later as its activation comes (and is
        # stored), and as its chunk reaches the feed, from registers on both paths.
        req_read, req_act, req_feed = line.o.payload, tail.o.payload, to_feed.o.payload
        act_data = delay(m, acts.p.payload.data.as_value(), READ_LATENCY - 1, name="act_data")
        m.d.comb += [
            tokens.read.valid.eq(line.o.valid & ~req_read.act),
            tokens.read.payload.half.eq(req_read.half), tokens.read.payload.j.eq(req_read.j),
            tokens.read.payload.fresh.eq(self._fresh(m, early.o, line.o)),
            tokens.act.valid.eq(tail.o.valid & req_act.act & req_act.buf_write),
            tokens.act.payload.half.eq(req_act.half), tokens.act.payload.j.eq(req_act.j),
            tokens.act.payload.data.eq(acts.p.payload.data),
            seq.landed.valid.eq(to_feed.o.valid), seq.landed.payload.eq(req_feed.half),
            seq.can_issue.eq(feed.can_issue), feed.issue.eq(seq.issue),
            feed.i.valid.eq(to_feed.o.valid),
            feed.i.payload.data.eq(Mux(req_feed.act, act_data, tokens.data.as_value())),
            feed.i.payload.link.eq(req_feed.link),
            self.issue.eq(seq.issue), self.start.eq(seq.start),
        ]
        for name in chunk_flags():
            m.d.comb += feed.i.payload[name].eq(req_feed[name])
        wiring.connect(m, feed.tap, rcu.tap)
        wiring.connect(m, feed.hlink, src.i)

        # The ring: the source, then every VAC; loads routed by their ``vac`` field.
        upstream = src.o
        for v, vac in enumerate(vacs):
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
                # Registered: the gatherer's decision to take a word ends here, not at the
                # source's counters across the tile.
                src.credit[v].eq(delay(m, vac.credit, 1, name=f"credit{v}", reset=True)),
                # RC factors: fused ones to every RCU, sequential ones to the sequencer.
                vac.rc.valid.eq(rcu.rc.valid & ~rcu.rc.payload.seq),
                vac.rc.payload.m.eq(rcu.rc.payload.m),
                vac.rc.payload.shift.eq(rcu.rc.payload.shift),
            ]
            wiring.connect(m, vac.o, gather.results[v])
            wiring.connect(m, kv_writer.kv[v], vac.kv)
        m.d.comb += [upstream.ready.eq(1), self.wmem.ready.eq(1), self.ppu.ready.eq(1),
                     seq.rc.valid.eq(rcu.rc.valid & rcu.rc.payload.seq),
                     seq.rc.payload.m.eq(rcu.rc.payload.m),
                     seq.rc.payload.shift.eq(rcu.rc.payload.shift),
                     self.result.eq(Cat(vac.result_valid for vac in vacs).any())]

        # Results out: GBUS words to ``o``, the VE's score buffer and the KV caches.
        wiring.connect(m, seq.ops, gather.ops)
        wiring.connect(m, gather.o, wiring.flipped(self.o))
        wiring.connect(m, gather.resp, wiring.flipped(self.resp))
        wiring.connect(m, gather.scores, acts.scores)
        wiring.connect(m, gather.kv, kv_writer.i)
        m.d.comb += [seq.kv_done.eq(gather.kv_done), seq.qk_done.eq(gather.qk_done),
                     self.gbus.eq(gather.fire)]
        return m
