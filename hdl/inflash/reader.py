"""The in-flash PE's page reader: the page reads of a command, and the read data cut to size."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..pipeline import stream_stage
from .setup import plan_layout
from .spec import (Mapping, PEConfig, page_data_layout, pe_config, read_layout,
                   word_layout)

__all__ = ["PageReader"]

#: Reads a page stream may have outstanding: one in the array or the data register, one in the
#: cache register (docs/inflash.md, section 3), one being taken; the FIFO of their sizes.
_READS_IN_FLIGHT = 4


class PageReader(wiring.Component):
    """Issue a command's page reads in order, and pass their words on with their valid bytes.

    GEMV: pages ``page .. page + n - 1`` from column 0, ``page_bytes`` each but the last (the
    ``size`` bytes of the stream). Logit and Attend: the page walk of
    ``golden.inflash.kv_address`` offset by ``page`` (docs/inflash.md, section 5): page-level,
    one read per ``T_p`` tokens, ``page += S``; naive, token by token (``column += (S mod T_p)
    e``, ``page += S // T_p``, a column past the page's entries carried into the next page), one
    read per run of tokens on one page, a gather when they are not adjacent. Reads are offered
    as fast as the plane takes them.

    The read data go on to the gearbox as words with their valid byte count: ``W`` but in a
    read's last word, whose size comes from a FIFO of the sizes of the reads taken (a read's
    last word waits for it, so a word never needs the size of a read not yet taken).

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    plan : In(plan_layout(cfg))
        The command (:class:`~hdl.inflash.setup.CommandSetup`): ``page``, ``size`` (GEMV);
        ``mapping``, ``tokens``, ``entry``, ``total``, ``page_used``, ``stride``,
        ``first_page``, ``first_col``, ``col_step``, ``page_step`` (attention). Held from the
        start pulse until :attr:`busy` falls.
    gemv_start, att_start : In(1)
        Start the reads of a GEMV or an attention command (while not :attr:`busy`).
    rd_cmd : Out(stream.Signature(read_layout(cfg)))
        The page reads, in stream order.
    rd_data : In(stream.Signature(page_data_layout(cfg)))
        The reads' words; ``last`` on a read's final word. A word enters a register stage
        (:func:`~hdl.pipeline.stream_stage`): ``ready`` is high while that register is empty or
        being drained and a read is taken whose last word has not come (words sent before
        their read wait), and never looks at the payload.
    words : Out(stream.Signature(word_layout(cfg)))
        The same words, :attr:`latency` cycle later, with ``bytes``, the stream bytes they
        hold: ``valid`` and the payload are registers.
    busy : Out(1)
        Reads of the current command remain to be offered or taken.

    A read is offered one cycle after the previous one is taken (GEMV: in the cycle after the
    start); an attention read a cycle after it is built (naive: a cycle per token of its run).
    """

    #: Cycles from a word taken on ``rd_data`` to it on ``words``.
    latency = 1

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "Page reader")
        super().__init__({
            "plan": In(plan_layout(cfg)),
            "gemv_start": In(1), "att_start": In(1),
            "rd_cmd": Out(stream.Signature(read_layout(cfg))),
            "rd_data": In(stream.Signature(page_data_layout(cfg))),
            "words": Out(stream.Signature(word_layout(cfg))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, p = self.cfg, self.plan
        P, W = cfg.page_bytes, cfg.transfer_bytes
        r = self.rd_cmd.payload

        # ---- the read data: the last word of a read holds its tail only ------------------
        # One register stage, which also looks up the size of a read's last word as it enters:
        # ``words`` (valid, data, bytes) and the ``ready`` the plane sees start from flip-flops.
        # Words enter only while a read is taken and not yet ended, so a last word finds its
        # read's size (a plane sends a read's words after taking it; this costs it nothing).
        m.submodules.read_tails = tails = SyncFIFO(width=W.bit_length(), depth=_READS_IN_FLIGHT)
        read_taken = self.rd_cmd.valid & self.rd_cmd.ready
        word = self.rd_data.payload
        gated = stream.Signature(page_data_layout(cfg)).create(path=("gated",))
        entering = Signal(word_layout(cfg))
        m.d.comb += [gated.valid.eq(self.rd_data.valid & tails.r_rdy), gated.payload.eq(word),
                     self.rd_data.ready.eq(gated.ready & tails.r_rdy),
                     entering.data.eq(word.data),
                     entering.bytes.eq(Mux(word.last, tails.r_data, W))]
        stream_stage(m, gated, self.words, entering)
        # ``last`` is looked at only with ``valid``: the payload of an idle stream may be anything.
        m.d.comb += [tails.w_en.eq(read_taken), tails.w_data.eq(((r.bytes - 1) & (W - 1)) + 1),
                     tails.r_en.eq(self.rd_data.valid & self.rd_data.ready & word.last)]

        # ---- GEMV: pages page .. page + n - 1 ----------------------------------------------
        remaining = Signal(cfg.stream_bits)         # GEMV bytes still to be read
        more = Signal()                             # remaining != 0, a register: it gates commands
        next_page = Signal(cfg.page_bits)
        pl_active = Signal()                        # the attention reads are not all taken
        pl_offer = Signal()
        rq = Signal(read_layout(cfg))               # the attention read on offer
        gemv_bytes = Mux(remaining >= P, P, remaining)
        with m.If(pl_offer):
            m.d.comb += r.eq(rq)
        with m.Else():
            m.d.comb += [r.page.eq(next_page), r.bytes.eq(gemv_bytes), r.run.eq(gemv_bytes),
                         r.stride.eq(gemv_bytes)]
        m.d.comb += [self.rd_cmd.valid.eq((more | pl_offer) & tails.w_rdy),
                     self.busy.eq(more | pl_active | pl_offer)]
        with m.If(self.gemv_start):
            m.d.sync += [remaining.eq(p.size), more.eq(p.size != 0), next_page.eq(p.page)]
        with m.If(read_taken & ~pl_offer):
            # What is left after the read of min(remaining, P) bytes.
            m.d.sync += [remaining.eq(remaining - gemv_bytes), more.eq(remaining > P),
                         next_page.eq(next_page + 1)]
        with m.If(read_taken & pl_offer):
            m.d.sync += pl_offer.eq(0)
        self._walk(m, rq, pl_active, pl_offer)
        return m

    def _walk(self, m, rq, pl_active, pl_offer):
        """The attention walk: build the next read into ``rq`` and offer it."""
        cfg, p = self.cfg, self.plan
        # Pages of a walk the plane holds, columns within a page, bytes of one K or V stream:
        # no wider, so that the walk's sums stay short carry chains.
        pl_page = Signal(cfg.page_bits + 1)
        pl_col = Signal(len(p.first_col))
        pl_left = Signal(cfg.stream_bits)           # page-level: bytes not yet read
        pl_tokens = Signal(cfg.tokens_bits)         # naive: tokens not yet in a read
        pl_build = Signal()                         # naive: rq holds a read being built
        # Naive: the next token's column is past the page's entries when pl_col >= room; then
        # the column is pl_col - room and the page moves one further. Both sums and the test
        # start from registers, side by side.
        room = Signal(len(p.page_used))             # page_used - col_step
        step1 = Signal(len(p.page_step) + 1)        # page_step + 1
        with m.If(self.att_start):
            m.d.sync += [pl_active.eq(1), pl_page.eq(p.first_page), pl_left.eq(p.total),
                         pl_tokens.eq(p.tokens), pl_build.eq(0),
                         pl_col.eq(Mux(p.mapping == Mapping.PAGE, 0, p.first_col)),
                         room.eq(p.page_used - p.col_step), step1.eq(p.page_step + 1)]
        with m.Elif(pl_active & ~pl_offer):
            with m.If(p.mapping == Mapping.PAGE):
                full = pl_left >= p.page_used
                nbytes = Mux(full, p.page_used, pl_left)
                m.d.sync += [rq.page.eq(pl_page), rq.column.eq(0), rq.bytes.eq(nbytes),
                             rq.run.eq(nbytes), rq.stride.eq(nbytes), pl_offer.eq(1),
                             pl_page.eq(pl_page + p.stride), pl_left.eq(pl_left - nbytes)]
                # pl_left == nbytes without the select in front of the compare
                with m.If(~full | (pl_left == p.page_used)):
                    m.d.sync += pl_active.eq(0)
            with m.Else():
                carry = pl_col >= room
                advance = [pl_col.eq(Mux(carry, pl_col - room, pl_col + p.col_step)),
                           pl_page.eq(Mux(carry, pl_page + step1, pl_page + p.page_step)),
                           pl_tokens.eq(pl_tokens - 1)]
                with m.If(~pl_build):
                    m.d.sync += [rq.page.eq(pl_page), rq.column.eq(pl_col),
                                 rq.bytes.eq(p.entry), pl_build.eq(1), *advance]
                with m.Elif((pl_tokens != 0) & (pl_page == rq.page)):
                    m.d.sync += [rq.bytes.eq(rq.bytes + p.entry), *advance]
                with m.Else():
                    gather = rq.bytes != p.entry
                    m.d.sync += [pl_offer.eq(1), pl_build.eq(0),
                                 rq.run.eq(Mux(gather, p.entry, rq.bytes)),
                                 rq.stride.eq(Mux(gather, p.col_step, rq.bytes))]
                    with m.If(pl_tokens == 0):
                        m.d.sync += pl_active.eq(0)
