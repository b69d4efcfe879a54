"""The page-stream gearbox: ``W`` bytes per cycle in, beats of ``F`` elements of one row out."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import stream_stage
from .spec import (SCALE_BYTES, Mode, PEConfig, beat_layout, job_layout, pe_config,
                   word_layout)

__all__ = ["Gearbox"]

#: A padding lane of a float beat: weight ``-0``, so that its product with ``x = +0`` is ``-0``.
_NEG_ZERO16 = 0x8000


class Gearbox(wiring.Component):
    """Cut the byte stream of a weight matrix into beats of ``F`` elements of one row.

    The matrix's page stream (docs/inflash_models.md section 4: row-major, rows packed densely
    across page boundaries) arrives as ``W``-byte words. A realignment buffer of
    the widest beat plus ``W`` bytes, kept in nibbles, turns it into beats: a row of ``cols``
    elements gives ``ceil(cols / F)`` beats starting at the row's first element, the last one
    padded past the row's end with ``-0`` weights (fp16, bf16) or 0 (w8a8). In w4a16 each
    record gives ``g / F`` beats of ``F`` codes (``F`` divides ``g``, so no padding), the first
    of which also carries the record's header (scale and offset): a header costs no beat, as in
    the golden cycle model. A beat that straddles two words, or two pages, waits for the
    next word. Only the first ``bytes`` bytes of a word enter the buffer: the rest of a read's
    last word (the erased tail of a matrix, or the bytes after a read of K/V entries) is dropped.

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    job : In(stream.Signature(job_layout(cfg)))
        The mode, shape and stream length of the next matrix; taken when the previous matrix's
        last beat has left. ``rows`` and ``cols`` must be at least 1 (w4a16: ``cols`` a
        multiple of ``group_size``) and ``bytes`` the stream length
        (``golden.inflash.stream_bytes``): the PE checks and computes them.
    i : In(stream.Signature(word_layout(cfg)))
        The matrices' page streams, one after the other, ``data`` with ``bytes`` of it valid
        (``W`` but in the last word of a read). A word is taken only while the current matrix
        still needs one, so the next matrix's words may follow at once.
    o : Out(stream.Signature(beat_layout(cfg)))
        Beats in stream order; ``valid`` does not depend on ``ready``.

    Throughput: one beat per cycle and one word per cycle at once (the buffer holds the widest
    beat plus a word), so the slower of ``W`` bytes and one beat per cycle sets the pace; latency
    :attr:`latency` cycles from a word to the first beat it completes: one into the buffer, one
    in the output register. The output register ends the mode-dependent byte selection (the
    lanes, the mask, the flags), so that it does not run on into the PE's arithmetic.
    """

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "Gearbox")
        super().__init__({
            "job": In(stream.Signature(job_layout(cfg))),
            "i": In(stream.Signature(word_layout(cfg))),
            "o": Out(stream.Signature(beat_layout(cfg))),
        })

    #: Cycles from a word taken to the first beat it completes on ``o``.
    latency = 2

    @property
    def widest(self) -> int:
        """Bytes of the widest beat: ``F`` fp16 elements, or a w4a16 header with ``F`` codes."""
        F = self.cfg.fmacs
        return max(2 * F, SCALE_BYTES + (F + 1) // 2)

    @property
    def capacity(self) -> int:
        """Bytes the realignment buffer holds: the widest beat plus one word."""
        return self.widest + self.cfg.transfer_bytes

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, W, cap = cfg.fmacs, cfg.transfer_bytes, self.capacity
        log_f = F.bit_length() - 1
        group_beats = cfg.group_size // F
        nib = 2 * cap                               # the buffer in nibbles

        buf = Signal(4 * nib)                       # nibble k of the stream window in bits 4k..
        count = Signal(range(nib + 1))              # nibbles held; nibbles above are 0
        active = Signal()
        mode = Signal(2)
        rows_left = Signal(max(cfg.rows_bits, cfg.tokens_bits))   # rows, or K/V entries
        beat = Signal(range(cfg.max_beats))
        last_beat = Signal(range(cfg.max_beats))    # ceil(cols / F) - 1
        last_elems = Signal(range(F + 1))           # elements of a row's last beat, 1 .. F
        left = Signal(cfg.stream_bits)              # stream bytes not yet taken
        header = Signal()                           # w4a16: the next beat starts a record
        group_beat = Signal(range(group_beats))     # w4a16: code beat within the group
        w4 = mode == Mode.W4A16
        wide = (mode == Mode.FP16) | (mode == Mode.BF16)

        job = self.job.payload
        m.d.comb += self.job.ready.eq(~active)
        with m.If(self.job.valid & ~active):
            cols_m1 = job.cols - 1
            m.d.sync += [active.eq(1), mode.eq(job.mode), rows_left.eq(job.rows), beat.eq(0),
                         last_beat.eq(cols_m1 >> log_f), last_elems.eq((cols_m1 & (F - 1)) + 1),
                         left.eq(job.bytes), header.eq(job.mode == Mode.W4A16),
                         group_beat.eq(0)]

        # ---- the beat at the head of the buffer ------------------------------------------------
        group_end = w4 & (group_beat == group_beats - 1)
        row_end = (beat == last_beat) & (~w4 | group_end)
        elems = Mux(row_end & ~w4, last_elems, F)
        need = Signal(range(2 * nib + 1))           # nibbles of the beat
        with m.If(wide):
            m.d.comb += need.eq(elems << 2)
        with m.Elif(w4):
            m.d.comb += need.eq(Mux(header, 2 * SCALE_BYTES + F, F))
        with m.Else():
            m.d.comb += need.eq(elems << 1)
        lanes = []
        for i in range(F):
            inside = i < elems
            value = Signal(16, name=f"lane{i}")
            with m.If(wide):
                m.d.comb += value.eq(Mux(inside, buf[16 * i:16 * (i + 1)], _NEG_ZERO16))
            with m.Elif(w4):
                codes = buf[4 * i:4 * (i + 1)]
                after_header = buf[8 * SCALE_BYTES + 4 * i:8 * SCALE_BYTES + 4 * (i + 1)]
                m.d.comb += value.eq(Mux(header, after_header, codes))
            with m.Else():
                m.d.comb += value.eq(Mux(inside, buf[8 * i:8 * (i + 1)], 0))
            lanes.append(value)
        # The beat is computed into `core` and registered onto `o` (stream_stage).
        core = stream.Signature(beat_layout(cfg)).create()
        stream_stage(m, core, self.o, core.payload)
        o = core.payload
        final = row_end & (rows_left == 1)
        m.d.comb += [core.valid.eq(active & (count >= need)),
                     o.data.eq(Cat(lanes)), o.mask.eq(Cat(i < elems for i in range(F))),
                     o.beat.eq(beat), o.first.eq(beat == 0), o.last.eq(row_end),
                     o.final.eq(final), o.header.eq(header), o.group_end.eq(group_end),
                     o.scale.eq(buf[0:16]), o.offset.eq(buf[16:32])]
        fire = core.valid & core.ready

        # ---- buffer update: drop the beat's nibbles, append the word after what is left --------
        m.d.comb += self.i.ready.eq(active & (left != 0) & (count <= nib - 2 * W))
        take = self.i.valid & self.i.ready
        valid_bytes = self.i.payload.bytes
        with m.If(take):
            m.d.sync += left.eq(Mux(left > valid_bytes, left - valid_bytes, 0))
        drop = Mux(fire, need, 0)
        kept = Signal(range(nib + 1))
        m.d.comb += kept.eq(count - drop)
        widest = 2 * self.widest
        shifted = Array(Cat(buf[4 * k:], Const(0, 4 * k)) for k in range(widest + 1))[drop]
        # The bytes past the word's valid ones are cleared: the buffer holds 0 above ``count``.
        keep = Array(Const((1 << 8 * v) - 1, 8 * W) for v in range(W + 1))[valid_bytes]
        word = self.i.payload.data.as_value() & keep
        placed = Signal(4 * nib)
        with m.Switch(kept):
            for k in range(nib - 2 * W + 1):
                with m.Case(k):
                    m.d.comb += placed.eq(Cat(Const(0, 4 * k), word))
        m.d.sync += [buf.eq(shifted | Mux(take, placed, 0)),
                     count.eq(kept + Mux(take, valid_bytes << 1, 0))]

        with m.If(fire):
            m.d.sync += beat.eq(Mux(row_end, 0, beat + 1))
            with m.If(w4):
                m.d.sync += [group_beat.eq(Mux(group_end, 0, group_beat + 1)),
                             header.eq(group_end)]
            with m.If(row_end):
                m.d.sync += rows_left.eq(rows_left - 1)
            with m.If(final):
                # The erased tail of the last word goes; the next matrix starts on a clean buffer.
                m.d.sync += [active.eq(0), buf.eq(0), count.eq(0)]
        return m
