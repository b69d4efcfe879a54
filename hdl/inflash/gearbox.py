"""The page-stream gearbox: ``W`` bytes per cycle in, beats of ``F`` elements of one row out."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import SkidBuffer
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
        still needs one, so the next matrix's words may follow at once. ``i.ready`` is a
        register: the room for a word is worked out a cycle ahead.
    o : Out(stream.Signature(beat_layout(cfg)))
        Beats in stream order from a skid buffer (:class:`~hdl.pipeline.SkidBuffer`):
        ``valid`` and ``payload`` are registers, and ``ready`` enters registers only.

    Throughput: one beat per cycle and one word per cycle at once (the buffer holds the widest
    beat plus a word), so the slower of ``W`` bytes and one beat per cycle sets the pace; latency
    :attr:`latency` cycles from a word to the first beat it completes: one into the buffer, one
    in the output register. The next beat's size and flags are registers, set as a beat leaves,
    so that the buffer's update starts from flip-flops; the output register ends the
    mode-dependent byte selection (the lanes, the mask, the flags), so that it does not run on
    into the PE's arithmetic. When ``o`` stalls, one more beat waits in the skid register.
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

    def _decode(self, m, name, *, w4, wide, at_last, group_last, header, one_left,
                last_elems):
        """The size and flags of a beat, from tests of the position it starts at (the row's last
        beat position, the group's last code beat, the matrix's last row): ``row_end``,
        ``group_end``, ``final``, ``need`` (nibbles) and ``inside`` (lanes within the row)."""
        F = self.cfg.fmacs
        group_end = w4 & group_last
        row_end = at_last & (~w4 | group_end)
        elems = Signal(range(F + 1), name=f"{name}_elems")
        m.d.comb += elems.eq(Mux(row_end & ~w4, last_elems, F))
        need = Signal(range(4 * self.widest + 1), name=f"{name}_need")
        with m.If(wide):
            m.d.comb += need.eq(elems << 2)
        with m.Elif(w4):
            m.d.comb += need.eq(Mux(header, 2 * SCALE_BYTES + F, F))
        with m.Else():
            m.d.comb += need.eq(elems << 1)
        return {"row_end": row_end, "group_end": group_end, "final": row_end & one_left,
                "need": need, "inside": Cat(i < elems for i in range(F))}

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
        w4, wide = Signal(name="w4"), Signal(name="wide")   # the mode: w4a16; fp16, bf16
        rows_left = Signal(max(cfg.rows_bits, cfg.tokens_bits))   # rows, or K/V entries
        beat = Signal(range(cfg.max_beats))
        last_beat_m1 = Signal(range(cfg.max_beats + 1))   # ceil(cols / F) - 2, modulo
        one_beat = Signal()                         # rows of one beat
        last_elems = Signal(range(F + 1))           # elements of a row's last beat, 1 .. F
        left = Signal(cfg.stream_bits)              # stream bytes not yet taken
        header = Signal()                           # w4a16: the beat starts a record
        group_beat = Signal(range(group_beats))     # w4a16: code beat within the group
        first = Signal()                            # the beat is a row's first
        ready = self.i.ready                        # a register, set a cycle ahead
        # The beat at the head of the buffer: its size and flags, registers.
        cur = {"row_end": Signal(name="cur_row_end"), "group_end": Signal(name="cur_group_end"),
               "final": Signal(name="cur_final"),
               "need": Signal(range(4 * self.widest + 1), name="cur_need"),
               "inside": Signal(F, name="cur_inside")}
        enough = Signal()                           # count >= cur["need"], a register

        job = self.job.payload
        start = self.job.valid & ~active
        m.d.comb += self.job.ready.eq(~active)
        cols_m1 = job.cols - 1
        job_w4 = job.mode == Mode.W4A16
        job_wide = (job.mode == Mode.FP16) | (job.mode == Mode.BF16)
        at_start = self._decode(m, "start", w4=job_w4, wide=job_wide,
                                at_last=(cols_m1 >> log_f) == 0, group_last=group_beats == 1,
                                header=job_w4, one_left=job.rows == 1,
                                last_elems=(cols_m1 & (F - 1)) + 1)
        # After the current beat leaves: the next position, and its tests from registers only
        # (equalities, no adder in front of them).
        next_pos = {"beat": Mux(cur["row_end"], 0, beat + 1),
                    "group_beat": Mux(cur["group_end"], 0, group_beat + 1),
                    "header": cur["group_end"], "rows_left": rows_left - cur["row_end"]}
        after = self._decode(
            m, "after", w4=w4, wide=wide, header=next_pos["header"], last_elems=last_elems,
            at_last=Mux(cur["row_end"], one_beat, beat == last_beat_m1),
            group_last=Mux(cur["group_end"], group_beats == 1, group_beat == group_beats - 2),
            one_left=Mux(cur["row_end"], rows_left == 2, rows_left == 1))

        # ---- the beat at the head of the buffer, into the skid buffer --------------------------
        lanes = []
        for i in range(F):
            value = Signal(16, name=f"lane{i}")
            with m.If(wide):
                m.d.comb += value.eq(Mux(cur["inside"][i], buf[16 * i:16 * (i + 1)],
                                         _NEG_ZERO16))
            with m.Elif(w4):
                codes = buf[4 * i:4 * (i + 1)]
                after_header = buf[8 * SCALE_BYTES + 4 * i:8 * SCALE_BYTES + 4 * (i + 1)]
                m.d.comb += value.eq(Mux(header, after_header, codes))
            with m.Else():
                m.d.comb += value.eq(Mux(cur["inside"][i], buf[8 * i:8 * (i + 1)], 0))
            lanes.append(value)
        m.submodules.skid = skid = SkidBuffer(beat_layout(cfg))
        wiring.connect(m, skid.o, wiring.flipped(self.o))
        o = skid.i.payload
        m.d.comb += [skid.i.valid.eq(active & enough),
                     o.data.eq(Cat(lanes)), o.mask.eq(cur["inside"]), o.beat.eq(beat),
                     o.first.eq(first), o.last.eq(cur["row_end"]), o.final.eq(cur["final"]),
                     o.header.eq(header), o.group_end.eq(cur["group_end"]),
                     o.scale.eq(buf[0:16]), o.offset.eq(buf[16:32])]
        fire = skid.i.valid & skid.i.ready

        with m.If(start):
            m.d.sync += [active.eq(1), w4.eq(job_w4), wide.eq(job_wide), rows_left.eq(job.rows),
                         beat.eq(0), last_beat_m1.eq((cols_m1 >> log_f) - 1),
                         one_beat.eq((cols_m1 >> log_f) == 0), first.eq(1),
                         last_elems.eq((cols_m1 & (F - 1)) + 1), header.eq(job_w4),
                         group_beat.eq(0),
                         *[cur[k].eq(v) for k, v in at_start.items()]]
        with m.Elif(fire):
            m.d.sync += [beat.eq(next_pos["beat"]), rows_left.eq(next_pos["rows_left"]),
                         first.eq(cur["row_end"]), *[cur[k].eq(v) for k, v in after.items()]]
            with m.If(w4):
                m.d.sync += [group_beat.eq(next_pos["group_beat"]),
                             header.eq(next_pos["header"])]
        self._buffer(m, buf, count, left, active, start, fire, cur, after["need"], enough)
        return m

    def _buffer(self, m, buf, count, left, active, start, fire, cur, after_need, enough):
        """Drop a leaving beat's nibbles, append a word after what is left; ``i.ready`` and
        ``enough`` (the buffer holds the head beat) for the next cycle. Both outcomes of ``fire``
        are worked out from registers, then selected."""
        W, nib = self.cfg.transfer_bytes, 2 * self.capacity
        need = cur["need"]
        take = self.i.valid & self.i.ready
        valid_bytes = self.i.payload.bytes
        # The bytes past the word's valid ones are cleared: the buffer holds 0 above ``count``.
        keep = Array(Const((1 << 8 * v) - 1, 8 * W) for v in range(W + 1))[valid_bytes]
        word = self.i.payload.data.as_value() & keep

        def placed(at, name):
            out = Signal(4 * nib, name=name)
            with m.Switch(at):
                for k in range(nib - 2 * W + 1):
                    with m.Case(k):
                        m.d.comb += out.eq(Cat(Const(0, 4 * k), word))
            return out

        widest = 2 * self.widest
        shifted = Array(Cat(buf[4 * k:], Const(0, 4 * k)) for k in range(widest + 1))[need]
        kept = Signal(range(nib + 1))
        m.d.comb += kept.eq(count - need)
        added = Mux(take, valid_bytes << 1, 0)
        count_next = Signal(range(nib + 1))
        m.d.comb += count_next.eq(Mux(fire, kept, count) + added)
        m.d.sync += [buf.eq(Mux(fire, shifted | Mux(take, placed(kept, "placed_kept"), 0),
                                buf | Mux(take, placed(count, "placed"), 0))),
                     count.eq(count_next)]
        # ``left > bytes`` split at the word's width: no carry chain through all of ``left``
        # on the way to ``i.ready``.
        low = W.bit_length()
        more = (left[low:] != 0) | (left[:low] > valid_bytes)
        with m.If(take):
            m.d.sync += left.eq(Mux(more, left - valid_bytes, 0))
        active_next = Mux(start, 1, active & ~(fire & cur["final"]))
        # Room for a word after this cycle, for each outcome of its beat and word, each from
        # registers (``bytes`` is one in the page reader): ``fire`` and ``take``, the latest
        # signals, only choose, so the long sums do not wait for them.
        added2 = valid_bytes << 1
        room = Mux(fire, Mux(take, kept + added2 <= nib - 2 * W, kept <= nib - 2 * W),
                   Mux(take, count + added2 <= nib - 2 * W, count <= nib - 2 * W))
        m.d.sync += self.i.ready.eq(active_next & room & Mux(
            start, self.job.payload.bytes != 0, Mux(take, more, left != 0)))
        # Likewise whether the next head beat is in: ``fire``, which enables most registers
        # here, is then an AND of registers. A job starts on an empty buffer and takes no word.
        fits = Mux(fire, Mux(take, kept + added2 >= after_need, kept >= after_need),
                   Mux(take, count + added2 >= need, count >= need))
        m.d.sync += enough.eq(active_next & ~start & fits)
        with m.If(start):
            m.d.sync += left.eq(self.job.payload.bytes)
        with m.If(fire & cur["final"]):
            # The erased tail of the last word goes; the next matrix starts on a clean buffer.
            m.d.sync += [active.eq(0), buf.eq(0), count.eq(0)]
