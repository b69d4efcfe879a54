"""Several DXTs behind one DXT side (docs/rdxe.md 16.5): how a GEMV's outputs are split across
them, the cycle model of their result words sharing ``ext``, and the operand plumbing (the
``_Io`` of :mod:`hdl.rdxe.dxtside` for ``D`` DXTs).

A GEMV runs on every DXT at once, each on its own share of the outputs (:func:`output_shares`);
each chunk is read once from the rr-SRAM and goes to every DXT that takes part (one read, D
consumers). The KV appends and attention heads run one at a time on the DXT that holds the KV
group: its chunks to that DXT only. Each DXT's result words wait in a queue of
:func:`result_queue_depth` words; ``ext`` takes one word a cycle, the lowest DXT first.
"""

from __future__ import annotations

import math

from amaranth import Array, Cat, Const, Mux, Signal
from amaranth.lib.fifo import SyncFIFO

from ..pipeline import SkidQueue, fifo_ready
from ..validate import index_bits, integer
from .ctrl import Store
from .spec import CODE_BITS, GBUS_BYTES, DxtConfig

__all__ = ["MAX_DXTS", "check_dxts", "output_shares", "result_queue_depth", "shared_cycles",
           "BroadcastIo", "count_reads", "one_hot"]

#: Most DXTs a DXE holds (the paper's eight).
MAX_DXTS = 8


def check_dxts(dxts) -> int:
    """``dxts`` if it is a count of DXTs a DXE can hold."""
    return integer(dxts, "DXTs", 1, MAX_DXTS)


def output_shares(outputs: int, dxts: int, vacs: int) -> list[tuple[int, int]]:
    """Each DXT's ``(first output, count)`` of a GEMV of ``outputs`` on ``dxts`` DXTs of
    ``vacs`` VACs: the outputs in units of ``lcm(vacs, 4)`` (whole passes whose results fill
    whole GBUS words, so that a share starts on a word), DXT ``j`` taking units ``floor(j U /
    D)`` to ``floor((j + 1) U / D) - 1`` of the ``U`` (``golden.rdxe.vlink.place``'s rule for
    heads), the last share ending at ``outputs``; a DXT may take none when ``U < D``."""
    integer(outputs, "Output count", 1, 1 << 30)
    check_dxts(dxts)
    unit = math.lcm(vacs, GBUS_BYTES)
    units = -(-outputs // unit)
    bounds = [min(outputs, j * units // dxts * unit) for j in range(dxts + 1)]
    return [(bounds[j], bounds[j + 1] - bounds[j]) for j in range(dxts)]


def result_queue_depth(cfg: DxtConfig) -> int:
    """Words in each DXT's result queue: sixteen passes' GBUS words (``ceil(vacs / 4)`` each),
    so that the burst of an RMSNorm-GEMV's results held for its factor waits there, not in the
    DXT (a share of 64 outputs of the reduced layer at 4 VACs, docs/rdxe.md 16.5)."""
    return 16 * -(-cfg.vacs // GBUS_BYTES)


def shared_cycles(commands, depth: int) -> int:
    """Cycles from a command taken by ``D`` DXTs at once to the cycle the DXT side sees it end:
    every DXT's response in and every result word written. ``commands``: per DXT that takes part
    ``(cycles, words)``: its cycles to the response (``golden.rdxe.command_cycles``) and the
    cycles its result words leave its ``o`` (``golden.rdxe.word_cycles``; none for words that
    are dropped). A word goes into the DXT's queue of ``depth`` words the cycle it leaves and is
    written on ``ext`` a cycle later at the earliest, one word a cycle, the lowest DXT's first;
    the side sees the end the cycle after the last write. Raises ``ValueError`` when a word
    would find its queue full (the DXT would wait, and its cycles would not be its model's)."""
    commands = [(int(c), [int(w) for w in words]) for c, words in commands]
    end = max(c for c, _ in commands)
    queues = [[] for _ in commands]
    left = [list(words) for _, words in commands]
    t = min((w[0] for w in left if w), default=None)
    while t is not None and (any(queues) or any(left)):
        for j, (queue, words) in enumerate(zip(queues, left)):
            if words and words[0] == t and len(queue) >= depth:
                raise ValueError(f"DXT {j}'s result queue of {depth} words is full at cycle {t}: "
                                 f"its results would wait, outside the cycle model")
        writer = next((q for q in queues if q and q[0] < t), None)
        if writer is not None:
            writer.pop(0)
            end = max(end, t + 1)
        for queue, words in zip(queues, left):
            while words and words[0] == t:
                queue.append(words.pop(0))
        t += 1
    return end


class BroadcastIo:
    """The operands of a command on ``D`` DXTs on ``ext`` (:class:`hdl.rdxe.dxtside._Io`'s
    contract): chunk reads from an rr row on, each through one queue to the ``x`` of every DXT
    in ``on`` (a chunk leaves the queue when all of them took it); each DXT's GBUS words through
    its result queue to rr rows from its own byte address, or dropped; ``resp`` when every DXT
    in ``on`` has answered and every queue is empty, ``error`` if one refused."""

    def __init__(self, m, side, tiles, chunks: int):
        ctrl, lanes, D = side.ctrl, side.ctrl.lanes, len(tiles)
        rows = max(ctrl.rows(s) for s in Store)
        self.row = Signal(index_bits(rows), name="chunk_row")
        self.left = Signal(index_bits(tiles[0].cfg.chunks + 1), name="chunks_left")
        self.dst = [Signal(index_bits(ctrl.space.rr_bytes + 1), name=f"result_byte{j}")
                    for j in range(D)]
        self.keep = Signal(name="write_results")
        self.on = Signal(D, name="dxts_on")
        got, answered = Signal(D, name="chunk_taken"), Signal(D, name="answered")
        refused = Signal(name="refused")
        fifo, skid, popped = chunk_queue(m, lanes, chunks)
        pending = Signal(range(chunks + 1))
        ext = side.requests
        word_bits = CODE_BITS * GBUS_BYTES
        queues = []
        for j, tile in enumerate(tiles):
            m.submodules[f"results{j}"] = q = SyncFIFO(width=word_bits + GBUS_BYTES,
                                                       depth=result_queue_depth(tile.cfg))
            o = tile.o
            m.d.comb += [q.w_data.eq(Cat(o.payload.data.as_value(), o.payload.keep)),
                         q.w_en.eq(o.valid & self.keep),
                         o.ready.eq(Mux(self.keep, q.w_rdy, 1))]
            queues.append(q)
        # The lowest DXT with a word writes it; a chunk read when none has one.
        sel = Signal(range(D), name="writer")
        for j in reversed(range(D)):
            with m.If(queues[j].r_rdy):
                m.d.comb += sel.eq(j)
        write = Cat(q.r_rdy for q in queues).any()
        read = ~write & (self.left != 0) & (pending < chunks)
        lg = index_bits(lanes)
        dst = Array(self.dst)[sel]
        head = Array(q.r_data for q in queues)[sel]
        offset = dst[:lg]
        m.d.comb += [
            ext.valid.eq(write | read),
            ext.payload.store.eq(Store.RR),
            ext.payload.write.eq(write),
            ext.payload.row.eq(Mux(write, dst >> lg, self.row)),
            ext.payload.data.eq(head[:word_bits] << (offset * CODE_BITS)),
            ext.payload.mask.eq(head[word_bits:] << offset),
            fifo.w_data.eq(side.ext_data.payload.data),
        ]
        for j, q in enumerate(queues):
            m.d.comb += q.r_en.eq(write & (sel == j) & ext.ready)
            with m.If(q.r_en):
                m.d.sync += self.dst[j].eq(self.dst[j] + GBUS_BYTES)
        # Every DXT in ``on`` takes the queue's head once; it leaves when all have.
        took = Cat(~self.on[j] | got[j] | t.x.ready for j, t in enumerate(tiles)).all()
        head = skid.o
        for j, tile in enumerate(tiles):
            m.d.comb += [tile.x.valid.eq(head.valid & self.on[j] & ~got[j]),
                         tile.x.payload.data.as_value().eq(head.payload),
                         tile.resp.ready.eq(1)]
        m.d.sync += got.eq(Mux(head.valid & took, 0,
                               got | Cat(t.x.valid & t.x.ready for t in tiles)))
        m.d.comb += head.ready.eq(took)
        count_reads(m, side, fifo, self, read, popped, pending)
        now = Cat(t.resp.valid for t in tiles)
        errors = Cat(t.resp.valid & t.resp.payload.error for t in tiles).any()
        m.d.sync += [answered.eq(answered | now), refused.eq(refused | errors)]
        self.resp = (Cat(~self.on[j] | answered[j] | now[j] for j in range(D)).all()
                     & ~Cat(q.r_rdy for q in queues).any())
        self.error = refused | errors
        self._clear = [got.eq(0), answered.eq(0), refused.eq(0)]

    def start(self, row, count, dst, keep, on, firsts=None) -> list:
        """Statements that start a command's operands on the DXTs in ``on``: ``count`` chunks
        from rr row ``row``, DXT ``j``'s results from byte ``dst + firsts[j]`` (``dst`` for all
        without ``firsts``) (``keep``) or dropped."""
        firsts = firsts or [0] * len(self.dst)
        return [self.row.eq(row), self.left.eq(count), self.keep.eq(keep), self.on.eq(on),
                *(d.eq(dst + f) for d, f in zip(self.dst, firsts)), *self._clear]


def chunk_queue(m, lanes: int, depth: int):
    """A DXT side's chunk queue: a ``SyncFIFO`` of ``depth`` chunks of ``lanes`` codes, then a
    :class:`~hdl.pipeline.SkidQueue` whose ``o`` is the DXTs' ``x``: the sequencer's issue
    decision reads ``x.valid`` from a flip-flop that sits beside it, and its ``x.ready`` moves
    that flip-flop and the read pointer, not the enable of every payload bit (a skid buffer's
    output register: docs/rdxe.md 14.4, session 34); a cycle later than the queue's head
    (:data:`hdl.rdxe.dxtside.CHUNK_DELAY`).

    Returns ``(fifo, skid, popped)``: the side writes ``fifo``, the DXTs take ``skid.o``;
    ``popped`` is high when a chunk leaves the FIFO (for :func:`count_reads`)."""
    m.submodules.chunks = fifo = SyncFIFO(width=CODE_BITS * lanes, depth=depth)
    m.submodules.chunk_skid = skid = SkidQueue(CODE_BITS * lanes)
    ready = fifo_ready(m, fifo, name="chunks_ready")
    m.d.comb += [skid.i.valid.eq(ready), skid.i.payload.eq(fifo.r_data),
                 fifo.r_en.eq(skid.i.ready)]
    return fifo, skid, ready & skid.i.ready


def count_reads(m, side, fifo, io, read, popped, pending):
    """A DXT side's chunk reads (``read`` offered on its ``requests``, ``popped`` chunks leaving
    the queue ``fifo``): the reads in flight or queued (``pending``), ``io``'s next row and
    chunks left; ``ext_data`` answers whoever read, so only the rows this side asked for
    (``side.asked``) go into the queue."""
    issued = read & side.requests.ready
    m.d.comb += fifo.w_en.eq(side.ext_data.valid & side.asked)
    m.d.sync += pending.eq(pending + issued - popped)
    with m.If(issued):
        m.d.sync += [io.row.eq(io.row + 1), io.left.eq(io.left - 1)]


def one_hot(index, count: int):
    """A ``count``-bit value with bit ``index`` set."""
    return (Const(1, count) << index)[:count]
