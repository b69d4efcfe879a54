"""The DXT's chunk path behind the sequencer: the token buffer, and the chunk queue that feeds
HLINK and the VE's tap (docs/rdxe.md section 5)."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..pipeline import ResultQueue, delay
from ..validate import index_bits, integer
from .sequencer import normalize_request_layout, queued_layout, store_layout
from .spec import CODE_BITS, DxtConfig, check_config, hlink_layout, ve_tap_layout
from .ve import Normalizer

__all__ = ["TokenBuffer", "ChunkFeed"]

#: Cycles from a read (or a normalization request) to its chunk on ``data``: the block RAM's
#: read and a register behind each half (a block RAM's 5.8 ns clock-to-output leaves no time for
#: the half's selection and a queue's write, nor for a multiplier).
READ_LATENCY = 2
#: The register a normalization request passes before the halves' read (``norm_latency``).
_NORM_IN = 1


class TokenBuffer(wiring.Component):
    """Keep two halves of ``chunks`` token chunks: stored, read back, normalized in place.

    Operations alternate between the halves (the sequencer's ``half``). Each half has one write
    port, taken in the order ``store`` (a cycle late), ``act``, normalized chunk; the sequencer
    never gives two of them the same half in one cycle.

    Parameters
    ----------
    cfg : DxtConfig

    Members
    -------
    store : In(stream.Signature(store_layout(cfg), always_ready=True))
        An ``x`` chunk written into chunk ``j`` of ``half`` one cycle later (readable from the
        second cycle after the transfer).
    act : In(stream.Signature(store_layout(cfg), always_ready=True))
        An activation chunk written likewise (a P.V's pass 0, kept for its later passes).
    read : In(stream.Signature(StructLayout({"half": 1, "j": ..., "fresh": 1}),
                               always_ready=True))
        A chunk to read: on ``data`` :data:`READ_LATENCY` (2) cycles later. With ``fresh``, the
        chunk ``act`` writes in the same cycle (a one-chunk P.V's second pass reads the
        activation being stored): its data is that write's. The requester knows it a cycle
        ahead, so no address compare sits between ``act`` and the read's register (the
        memories are not transparent).
    norm : In(stream.Signature(normalize_request_layout(cfg), always_ready=True))
        Chunk ``j`` of ``half`` to rewrite as ``requantize(x, m, shift)`` (the sequential
        mode): registered, read, registered, scaled by a :class:`~hdl.rdxe.ve.Normalizer`,
        written back :attr:`norm_latency` cycles later. Its read (a cycle after the request)
        not in the same cycle as a ``read``; the sequencer's plain GEMV after ``NORM`` reads
        its first chunk ``Dxt.act_latency - 1`` cycles after its issue, long after the
        normalized chunks are written (23 cycles against 8 at every preset).
    data : Out(ArrayLayout(signed(8), lanes))
        The chunk read (``read``; ``norm``'s a cycle later) :data:`READ_LATENCY` cycles before,
        from a register behind each half and the selection of the half.

    One read and one write per half per cycle; no back-pressure.
    """

    def __init__(self, cfg: DxtConfig):
        self.cfg = check_config(cfg, DxtConfig, "DXT")
        chunk = data.StructLayout({"half": 1, "j": unsigned(index_bits(cfg.chunks)), "fresh": 1})
        super().__init__({
            "store": In(stream.Signature(store_layout(cfg), always_ready=True)),
            "act": In(stream.Signature(store_layout(cfg), always_ready=True)),
            "read": In(stream.Signature(chunk, always_ready=True)),
            "norm": In(stream.Signature(normalize_request_layout(cfg), always_ready=True)),
            "data": Out(data.ArrayLayout(signed(CODE_BITS), cfg.lanes)),
        })

    @property
    def norm_latency(self) -> int:
        """Cycles from a ``norm`` request to the write of its normalized chunk."""
        return _NORM_IN + READ_LATENCY + Normalizer.latency_of(self.cfg.ve_config())

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        row_shape = data.ArrayLayout(signed(CODE_BITS), cfg.lanes)
        m.submodules.normalizer = norm = Normalizer(cfg.ve_config())
        # A normalization request is registered first: the sequencer's state decode then ends
        # here, not at the halves' LUT-RAM read address (docs/rdxe.md 14.4).
        req = data.View(self.norm.payload.shape(),
                        delay(m, self.norm.payload.as_value(), _NORM_IN, name="norm_req"))
        norm_valid = delay(m, self.norm.valid, _NORM_IN, name="norm_req_valid", reset=True)
        norm_j = delay(m, req.j, READ_LATENCY + norm.latency, name="norm_j")
        norm_half = delay(m, req.half, READ_LATENCY + norm.latency, name="norm_half")
        # An x chunk is written a cycle after it is taken: the sequencer's decision to issue then
        # ends in registers, not at the block RAMs' write ports.
        store = data.View(self.store.payload.shape(),
                          delay(m, self.store.payload.as_value(), 1, name="store"))
        store_valid = delay(m, self.store.valid, 1, name="store_valid", reset=True)
        reads, rows = [], []
        # A fresh read's chunk: the activation written with it, beside the memories' registers.
        fresh = delay(m, self.read.valid & self.read.payload.fresh, 1, name="read_fresh")
        written = delay(m, self.act.payload.data.as_value(), 1, name="act_written")
        for h in range(2):
            m.submodules[f"half{h}"] = mem = Memory(shape=row_shape, depth=cfg.chunks, init=[])
            wr = mem.write_port()
            rd = mem.read_port()
            mine_x = store_valid & (store.half == h)
            mine_act = self.act.valid & (self.act.payload.half == h)
            mine_norm = norm.o.valid & (norm_half == h)
            norm_read = norm_valid & (req.half == h)
            m.d.comb += [
                wr.en.eq(mine_x | mine_act | mine_norm),
                wr.addr.eq(Mux(mine_x, store.j, Mux(mine_act, self.act.payload.j, norm_j))),
                wr.data.eq(Mux(mine_x, store.data,
                               Mux(mine_act, self.act.payload.data, norm.o.payload.data))),
                rd.addr.eq(Mux(norm_read, req.j, self.read.payload.j)),
                rd.en.eq(norm_read | (self.read.valid & (self.read.payload.half == h))),
            ]
            rows.append(rd.data.as_value())
            reads.append(delay(m, Mux(fresh, written, rows[h]), READ_LATENCY - 1,
                               name=f"read{h}"))
        half = delay(m, Mux(norm_valid, req.half, self.read.payload.half), READ_LATENCY,
                     name="read_half")
        m.d.comb += self.data.eq(Mux(half, reads[1], reads[0]))
        # The normalizer's chunk: its half chosen before the register at the multiplier blocks
        # (7 ns of route from a half mux there failed at 100 MHz, docs/rdxe.md 14.4); never
        # fresh (a normalization's read is not in a ``read``'s cycle).
        norm_from = delay(m, req.half, READ_LATENCY - 1, name="norm_read_half")
        m.d.comb += [
            norm.i.valid.eq(delay(m, norm_valid, READ_LATENCY, name="norm_valid",
                                  reset=True)),
            norm.i.payload.data.eq(delay(m, Mux(norm_from, rows[1], rows[0]), READ_LATENCY - 1,
                                         name="norm_chunk")),
            norm.i.payload.m.eq(delay(m, req.m, READ_LATENCY, name="norm_m")),
            norm.i.payload.shift.eq(delay(m, req.shift, READ_LATENCY, name="norm_shift"))]
        return m


class ChunkFeed(wiring.Component):
    """Queue the requests' chunks in issue order and feed them to HLINK and to the VE's tap.

    Parameters
    ----------
    cfg : DxtConfig
    depth : int
        Chunk queue places, 3 to 4096 (:class:`~hdl.pipeline.ResultQueue`): at least the
        request latency plus 3 (a place's round trip: the landing, the queue's two cycles, the
        credit's return) for one request per cycle.
    tap_delay : int
        Cycles from a chunk leaving the queue to the VE's tap, 0 to 64: where VAC 0's lane
        tree meets it (``Vac.row_latency``).

    Members
    -------
    can_issue : Out(1)
        A register: a request issued now has a place for its chunk.
    issue : In(1)
        A request issues (takes a place).
    i : In(stream.Signature(queued_layout(cfg), always_ready=True))
        A chunk with its HLINK fields and flags, written into the queue.
    hlink : Out(stream.Signature(hlink_layout(vac)))
        The chunks flagged ``hlink``, in order (to the HLINK source); a chunk without it leaves
        the queue without waiting.
    tap : Out(stream.Signature(ve_tap_layout(ve), always_ready=True))
        The chunks flagged ``tap``, ``tap_delay`` cycles after they leave the queue.

    Latency: the queue's 2 cycles (``SyncFIFOBuffered``) from ``i`` to ``hlink``; one chunk per
    cycle. Assumes ``i`` carries one chunk per issued request and nothing else.
    """

    def __init__(self, cfg: DxtConfig, *, depth: int, tap_delay: int):
        self.cfg = check_config(cfg, DxtConfig, "DXT")
        self.depth = integer(depth, "Chunk queue depth", 3, 4096)
        self.tap_delay = integer(tap_delay, "Tap delay", 0, 64)
        super().__init__({
            "can_issue": Out(1), "issue": In(1),
            "i": In(stream.Signature(queued_layout(cfg), always_ready=True)),
            "hlink": Out(stream.Signature(hlink_layout(cfg.vac_config()))),
            "tap": Out(stream.Signature(ve_tap_layout(cfg.ve_config()), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.chunk_queue = queue = ResultQueue(queued_layout(self.cfg), self.depth)
        chunks = queue.o
        m.d.comb += [self.can_issue.eq(queue.can_issue), queue.issue.eq(self.issue),
                     queue.w.valid.eq(self.i.valid), queue.w.payload.eq(self.i.payload)]
        head = chunks.payload
        link = self.hlink.payload
        m.d.comb += [self.hlink.valid.eq(chunks.valid & head.hlink), link.data.eq(head.data),
                     chunks.ready.eq(~head.hlink | self.hlink.ready)]
        for name in ("row", "first", "last", "out", "rcu", "rc_last", "kv"):
            m.d.comb += link[name].eq(head.link[name])
        taken = chunks.valid & chunks.ready
        lat = self.tap_delay
        tap = self.tap.payload
        # The RC unit's second operand chosen before the tap's last register (7 ns of route
        # from that mux to the unit's multiplier blocks failed at 100 MHz, docs/rdxe.md 14.4).
        before = max(lat - 1, 0)
        early = delay(m, Cat(head.tap_first, head.tap_last, head.softmax, head.seq), before,
                      name="tap_flags")
        flags = delay(m, early, lat - before, name="tap_flags_last")
        chunk = delay(m, head.data.as_value(), before, name="tap_data")
        ones = Cat(Const(1, CODE_BITS) for _ in range(self.cfg.lanes))
        m.d.comb += [
            self.tap.valid.eq(delay(m, taken & head.tap, lat, name="tap_valid", reset=True)),
            tap.data.eq(delay(m, chunk, lat - before, name="tap_data_last")),
            tap.b.eq(delay(m, Mux(early[2], ones, chunk), lat - before, name="tap_b")),
            tap.first.eq(flags[0]), tap.last.eq(flags[1]), tap.softmax.eq(flags[2]),
            tap.seq.eq(flags[3])]
        return m
