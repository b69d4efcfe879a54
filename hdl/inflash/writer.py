"""The KV page writer: page buffers per KV stream, page programs, the flush and the mapping
table (docs/inflash.md, section 6)."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .divider import SerialDivider
from .spec import (MAX_KV_HEADS, MAX_LAYERS, MAX_TOKENS, FlashGeometry, Mapping, Mode,
                   WriteError, WriterConfig, kv_open_layout, kv_record_layout, kv_status_layout,
                   kv_word_layout, page_data_layout, program_layout)

__all__ = ["KVWriter"]

#: An erased flash byte: the bytes of a page past its entries.
_ERASED = 0xFF


class KVWriter(wiring.Component):
    """Buffer a sequence's KV entries page by page and program each page when it is full.

    The entries arrive in generation order (per token, per layer, the K vectors of every head,
    then the V vectors): entry ``c = (2 layer + kind) H + head`` of token ``t``. Each goes to
    its page of ``golden.inflash.kv_address`` (relative to the sequence's first page) at its
    offset, in a buffer of ``slots`` whole pages:

    * page-level mapping: buffer page ``c`` holds stream ``c``'s current page, ``T_p = P // e``
      tokens of one (layer, K|V, head) (``e`` bytes per entry); the ``S = 2 L H`` streams fill
      together, so a sequence needs ``S <= slots`` (else ``BUFFER``);
    * naive mapping: the entries fill pages in generation order, ``T_p`` per page, page ``q``
      in buffer page ``q mod slots`` (two or more slots double-buffer).

    A page is programmed (``pg_cmd`` then ``page_bytes / W`` words on ``pg_data``, the bytes
    past its entries erased, ``0xFF``) as soon as its ``T_p`` entries are in; its buffer page is
    free again when its last word has left. An entry waits (``kv`` not ready) while its buffer
    page is still being programmed. ``last`` on ``kv`` ends the sequence: the flush programs
    the partly filled pages, in page order (a sequence ending inside a token or an entry keeps
    the whole entries it has). Every page is programmed once, in increasing page order, and
    each program is followed by its record on ``table``: the mapping table from (layer, head,
    token) to page, one record per page. ``status`` ends the sequence.

    A token is taken only if all its pages lie in the region (checked at its first entry); a
    token that does not fit, and every later one, is dropped (``PAGES``): nothing stored
    before it is lost, the flush still programs it. A refused command (``LAYOUT``, ``BUFFER``)
    stores nothing; its words are taken and dropped up to ``last``.

    Parameters
    ----------
    geometry : FlashGeometry
        The plane: page size ``P``, transfer width ``W`` (at most 64), pages.
    slots : int
        Pages of the KV buffer (1 to 4096).

    Members
    -------
    cmd : In(stream.Signature(kv_open_layout(cfg)))
        One sequence: KV format, mapping, layout, region (:func:`~.spec.kv_open_layout`).
        Taken when the previous sequence's ``status`` has left.
    kv : In(stream.Signature(kv_word_layout(cfg)))
        After each command, the sequence's entries, ``ceil(e / W)`` words each, ``last`` on
        the final word. Every sequence has at least one word.
    pg_cmd : Out(stream.Signature(program_layout(cfg)))
        Page programs, in page order.
    pg_data : Out(stream.Signature(page_data_layout(cfg)))
        Each program's ``page_bytes / W`` words, ``last`` on the final one.
    table : Out(stream.Signature(kv_record_layout(cfg)))
        One mapping-table record per page programmed, after its data
        (``golden.inflash.KVWrite.table``).
    status : Out(stream.Signature(kv_status_layout(cfg)))
        One word per sequence, after its last record: entries stored and the
        :class:`~.spec.WriteError`.

    Throughput: one ``kv`` word per cycle while buffer pages are free, one ``pg_data`` word per
    cycle. A command spends about ``log2 P + 10`` cycles on its page arithmetic (a serial
    division for ``T_p``).
    """

    def __init__(self, *, geometry: FlashGeometry, slots: int):
        self.cfg = cfg = WriterConfig(geometry=geometry, slots=slots)
        super().__init__({
            "cmd": In(stream.Signature(kv_open_layout(cfg))),
            "kv": In(stream.Signature(kv_word_layout(cfg))),
            "pg_cmd": Out(stream.Signature(program_layout(cfg))),
            "pg_data": Out(stream.Signature(page_data_layout(cfg))),
            "table": Out(stream.Signature(kv_record_layout(cfg))),
            "status": Out(stream.Signature(kv_status_layout(cfg))),
        })

    def elaborate(self, platform):
        m = Module()
        P, W = self.cfg.page_bytes, self.cfg.transfer_bytes
        s = SimpleNamespace(log_w=W.bit_length() - 1, wpp=P // W)    # wpp: words per page
        s.log_wpp = s.wpp.bit_length() - 1
        # Relative pages, with room for a group's end S past the region.
        s.qbits = max(self.cfg.region_bits, 2 * self.cfg.layout_bits + 1) + 2
        self._sequence_registers(m, s)
        self._position(m, s)
        self._buffer(m, s)
        self._buffer_write(m, s)
        self._sequence(m, s)
        self._program(m, s)
        return m

    def _sequence_registers(self, m, s):
        """Build the sequence's registers, its multiplier and the T_p divider."""
        cfg = self.cfg
        P, lb = cfg.page_bytes, cfg.layout_bits
        s.fmt = Signal(2)
        s.mapping = Signal()
        s.page_level = s.mapping == Mapping.PAGE
        layers, kv_heads = Signal(lb), Signal(lb)
        s.layers, s.kv_heads = layers, kv_heads
        s.head_dim = Signal(cfg.dim_bits)
        s.base = Signal(cfg.page_bits)
        s.region = Signal(cfg.region_bits)
        s.entry = Signal(cfg.dim_bits + 1)          # e, bytes of an entry
        s.tp = Signal(P.bit_length() + 1)           # T_p, entries per page
        s.S = Signal(2 * lb + 1)                    # entries per token
        s.limit = Signal(cfg.region_bits + P.bit_length() + 1)  # naive: region T_p entries
        s.last_k = Signal(cfg.dim_bits + 1)         # words of an entry, less one
        s.tail = Signal(range(cfg.transfer_bytes + 1))  # bytes of an entry's last word
        s.error = Signal(2)
        s.mul_a = mul_a = Signal(max(cfg.region_bits, 2 * lb + 1))
        s.mul_b = mul_b = Signal(max(P.bit_length() + 1, lb))
        s.product = product = Signal(len(mul_a) + len(mul_b))
        m.d.comb += product.eq(mul_a * mul_b)
        s.div = SerialDivider(m, max(P.bit_length(), cfg.dim_bits + 1), "tp_div")

    def _position(self, m, s):
        """Build the write position, the entry's page and whether its token fits or waits."""
        cfg = self.cfg
        P, slots, lb, qbits = cfg.page_bytes, cfg.slots, cfg.layout_bits, s.qbits
        page_level = s.page_level
        s.k = k = Signal(cfg.dim_bits + 1)          # word of the entry
        s.cc = cc = Signal(2 * lb + 1)              # entry of the token: the stream c
        layer_c, head_c = Signal(lb), Signal(lb)    # c as (layer, kind, head)
        s.layer_c, s.head_c = layer_c, head_c
        s.kind_c = Signal()
        s.t = Signal(cfg.entry_count_bits)          # token
        s.n = Signal(cfg.entry_count_bits)          # entries stored
        s.j = j = Signal(P.bit_length() + 1)        # entry within its page
        s.jb = Signal(P.bit_length() + 1)           # its byte offset, j e
        s.gp = gp = Signal(qbits)                   # page-level: the group's first page, g S
        s.group_end = Signal(qbits)                 # page-level: (g + 1) S
        s.np_ = np_ = Signal(qbits)                 # naive: the page being filled
        s.nslot = Signal(range(slots))              # naive: its buffer page
        s.full = Signal(qbits)                      # pages complete: 0 .. full - 1
        s.refusing = Signal()                       # a token did not fit: drop to `last`
        s.done = Signal(qbits)                      # pages programmed: 0 .. done - 1
        s.eslot = Signal(range(slots))              # buffer page of page `done`
        s.flushing = Signal()

        s.q = q = Signal(qbits)                     # the entry's page
        s.slot = Signal(range(slots))
        m.d.comb += [q.eq(Mux(page_level, gp + cc, np_)),
                     s.slot.eq(Mux(page_level, cc, s.nslot))]
        s.word_last = k == s.last_k
        token_start = (k == 0) & (cc == 0)
        fits = (Mux(page_level, (j != 0) | (s.group_end <= s.region), s.n + s.S <= s.limit)
                & (s.t < MAX_TOKENS))
        s.buffer_pages = Mux(page_level, s.S, slots)
        s.free = q < s.done + s.buffer_pages
        s.drop = s.refusing | (token_start & ~fits)

    def _buffer(self, m, s):
        """Build the buffer: two banks of W-byte words (even and odd words), and the page meta."""
        cfg = self.cfg
        W, slots, lb = cfg.transfer_bytes, cfg.slots, cfg.layout_bits
        s.words = words = slots * s.wpp
        banks = [Memory(shape=8 * W, depth=max(1, (words + 1) // 2), init=[]) for _ in range(2)]
        m.submodules.bank0, m.submodules.bank1 = banks
        s.wr = [bank.write_port(granularity=8) for bank in banks]
        s.rd = [bank.read_port() for bank in banks]
        s.meta_layout = {"token": len(s.t), "layer": lb, "kind": 1, "head": lb}
        meta_bits = sum(s.meta_layout.values())
        m.submodules.meta = meta = Memory(shape=meta_bits, depth=slots, init=[])
        s.meta_wr = meta.write_port()
        s.meta_rd = meta.read_port()

    def _buffer_write(self, m, s):
        """Build the byte-rotated write of an entry word into the buffer and its page meta."""
        P, W = self.cfg.page_bytes, self.cfg.transfer_bytes
        log_w, wr = s.log_w, s.wr
        # An entry word lands at byte jb + k W of its buffer page: rotated by r = jb mod W, its
        # low part in word w, the rest in word w + 1 (the other bank).
        addr = Signal(P.bit_length() + 1)
        m.d.comb += addr.eq(s.jb + (s.k << log_w))
        r = addr[:log_w] if log_w else Const(0, 1)
        gw = Signal(range(2 * s.words + 1))
        m.d.comb += gw.eq((s.slot << s.log_wpp) + (addr >> log_w))
        gw_next = gw + 1
        valid_bytes = Mux(s.word_last, s.tail, W)
        data = self.kv.payload.data.as_value()
        rotated = Array(Cat(Const(0, 8 * i), data, Const(0, 8 * (W - i)))
                        for i in range(W))[r]
        top = (1 << len(r)) - 1                  # b >= r cannot fail from there on
        en_lo = Cat(((b >= r) if b < top else 1) & (b < r + valid_bytes) for b in range(W))
        en_hi = Cat(b + W < r + valid_bytes for b in range(W))

        s.write = write = Signal()
        for bank in range(2):
            low_here = gw[0] == bank
            m.d.comb += [wr[bank].addr.eq(Mux(low_here, gw >> 1, gw_next >> 1)),
                         wr[bank].data.eq(Mux(low_here, rotated[:8 * W], rotated[8 * W:])),
                         wr[bank].en.eq(Mux(write, Mux(low_here, en_lo, en_hi), 0))]
        m.d.comb += [s.meta_wr.addr.eq(s.slot),
                     s.meta_wr.data.eq(Cat(s.t, s.layer_c, s.kind_c, s.head_c)),
                     s.meta_wr.en.eq(write & (s.j == 0) & (s.k == 0))]

    def _sequence(self, m, s):
        """Build the sequence state machine: command, page arithmetic, checks, entries, flush."""
        cfg = self.cfg
        P, W, slots = cfg.page_bytes, cfg.transfer_bytes, cfg.slots
        c, div, entry, error, S = self.cmd.payload, s.div, s.entry, s.error, s.S
        layers, kv_heads, head_dim, region = s.layers, s.kv_heads, s.head_dim, s.region
        s.touched = Signal(s.qbits)                 # pages holding an entry: 0 .. touched - 1
        m.d.comb += s.touched.eq(Mux(s.page_level, s.gp + Mux(s.j != 0, S, s.cc),
                                     s.np_ + (s.j != 0)))
        s.engine_idle = Signal()
        take = self.kv.valid & self.kv.ready
        with m.FSM(name="sequence"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [s.fmt.eq(c.mode), s.mapping.eq(c.mapping), layers.eq(c.layers),
                                 kv_heads.eq(c.kv_heads), head_dim.eq(c.head_dim),
                                 s.base.eq(c.page), region.eq(c.pages),
                                 entry.eq(Mux(c.mode == Mode.W8A8, c.head_dim,
                                              c.head_dim << 1))]
                    m.next = "PER_PAGE"
            with m.State("PER_PAGE"):
                m.d.comb += [div.start.eq(1), div.dividend.eq(P), div.divisor.eq(entry)]
                m.d.sync += [s.last_k.eq((entry - 1) >> s.log_w),
                             s.tail.eq(((entry - 1) & (W - 1)) + 1)]
                m.next = "PER_PAGE_WAIT"
            with m.State("PER_PAGE_WAIT"):
                with m.If(~div.busy):
                    m.d.sync += s.tp.eq(div.quotient)
                    m.next = "STREAMS"
            with m.State("STREAMS"):
                m.d.comb += [s.mul_a.eq(layers << 1), s.mul_b.eq(kv_heads)]
                m.d.sync += S.eq(s.product)
                m.next = "LIMIT"
            with m.State("LIMIT"):
                m.d.comb += [s.mul_a.eq(region), s.mul_b.eq(s.tp)]
                m.d.sync += s.limit.eq(s.product)
                m.next = "CHECK"
            with m.State("CHECK"):
                fmt = s.fmt
                layout_bad = (((fmt != Mode.FP16) & (fmt != Mode.BF16) & (fmt != Mode.W8A8))
                              | (head_dim == 0) | (entry > P)
                              | (layers == 0) | (layers > MAX_LAYERS)
                              | (kv_heads == 0) | (kv_heads > MAX_KV_HEADS)
                              | (region == 0) | (s.base + region > cfg.geometry.pages))
                m.d.sync += [s.k.eq(0), s.cc.eq(0), s.layer_c.eq(0), s.kind_c.eq(0),
                             s.head_c.eq(0), s.t.eq(0), s.n.eq(0), s.j.eq(0), s.jb.eq(0),
                             s.gp.eq(0), s.group_end.eq(S), s.np_.eq(0), s.nslot.eq(0),
                             s.full.eq(0), s.refusing.eq(0), s.done.eq(0), s.eslot.eq(0),
                             error.eq(WriteError.NONE)]
                with m.If(layout_bad):
                    m.d.sync += error.eq(WriteError.LAYOUT)
                    m.next = "DISCARD"
                with m.Elif(s.page_level & (S > slots)):
                    m.d.sync += error.eq(WriteError.BUFFER)
                    m.next = "DISCARD"
                with m.Else():
                    m.next = "ACTIVE"
            with m.State("ACTIVE"):
                m.d.comb += [self.kv.ready.eq(s.drop | (s.k != 0) | s.free),
                             s.write.eq(take & ~s.drop)]
                with m.If(take & s.drop):
                    m.d.sync += [s.refusing.eq(1), error.eq(WriteError.PAGES)]
                with m.If(s.write):
                    with m.If(s.word_last):
                        self._advance(m, s)
                    with m.Else():
                        m.d.sync += s.k.eq(s.k + 1)
                with m.If(take & self.kv.payload.last):
                    m.next = "FLUSH"
            with m.State("DISCARD"):
                m.d.comb += self.kv.ready.eq(1)
                with m.If(take & self.kv.payload.last):
                    m.next = "STATUS"
            with m.State("FLUSH"):
                m.d.comb += s.flushing.eq(1)
                # Every page holding an entry is programmed and recorded.
                with m.If(s.engine_idle & (s.done == s.touched)):
                    m.next = "STATUS"
            with m.State("STATUS"):
                m.d.comb += [self.status.valid.eq(1), self.status.payload.entries.eq(s.n),
                             self.status.payload.error.eq(error)]
                with m.If(self.status.ready):
                    m.next = "IDLE"

    def _program(self, m, s):
        """Build the program engine: pages in order, each when complete (or at the flush)."""
        P, W = self.cfg.page_bytes, self.cfg.transfer_bytes
        log_w, wpp, rd, done, eslot = s.log_w, s.wpp, s.rd, s.done, s.eslot
        complete = done < s.full
        pending = complete | (s.flushing & (done < s.touched))
        entries = Mux(complete, s.tp, Mux(s.page_level, s.j + ((done - s.gp) < s.cc), s.j))
        pg_entries = Signal(P.bit_length() + 1)
        fill = Signal(2 * P.bit_length() + 2)       # bytes of the page's entries
        pg_page = Signal(self.cfg.page_bits)
        ri = Signal(range(wpp + 1))
        out_valid, out_bank = Signal(), Signal()
        out_index = Signal(range(wpp))
        m.d.comb += s.meta_rd.addr.eq(eslot)
        read_gw = (eslot << s.log_wpp) + ri
        for bank in range(2):
            m.d.comb += rd[bank].addr.eq(read_gw >> 1)
        advance = ~out_valid | self.pg_data.ready
        word = Mux(out_bank, rd[1].data, rd[0].data)
        index = out_index << log_w
        m.d.comb += [self.pg_data.valid.eq(out_valid),
                     self.pg_data.payload.last.eq(out_index == wpp - 1)]
        for b in range(W):
            m.d.comb += self.pg_data.payload.data[b].eq(
                Mux(index + b < fill, word[8 * b:8 * (b + 1)], _ERASED))
        meta_view = s.meta_rd.data
        record = self.table.payload
        offsets = {}
        at = 0
        for name, width in s.meta_layout.items():
            offsets[name] = (at, width)
            at += width
        with m.FSM(name="program"):
            with m.State("IDLE"):
                m.d.comb += s.engine_idle.eq(~pending)
                with m.If(pending):
                    m.d.sync += [pg_entries.eq(entries), fill.eq(entries * s.entry),
                                 pg_page.eq(s.base + done), ri.eq(0), out_valid.eq(0)]
                    m.next = "COMMAND"
            with m.State("COMMAND"):
                m.d.comb += [self.pg_cmd.valid.eq(1), self.pg_cmd.payload.page.eq(pg_page)]
                with m.If(self.pg_cmd.ready):
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [rd[0].en.eq(advance), rd[1].en.eq(advance)]
                with m.If(advance):
                    with m.If(ri != wpp):
                        m.d.sync += [out_valid.eq(1), out_index.eq(ri),
                                     out_bank.eq(read_gw[0]), ri.eq(ri + 1)]
                    with m.Else():
                        m.d.sync += out_valid.eq(0)
                with m.If(out_valid & self.pg_data.ready & (out_index == wpp - 1)):
                    m.d.sync += out_valid.eq(0)
                    m.next = "RECORD"
            with m.State("RECORD"):
                m.d.comb += [self.table.valid.eq(1), record.page.eq(pg_page),
                             record.entries.eq(pg_entries)]
                for name, (at, width) in offsets.items():
                    m.d.comb += record[name].eq(meta_view[at:at + width])
                with m.If(self.table.ready):
                    m.d.sync += [done.eq(done + 1),
                                 eslot.eq(Mux(eslot == s.buffer_pages - 1, 0, eslot + 1))]
                    m.next = "IDLE"

    def _advance(self, m, s):
        """An entry is complete: step the stream, the token and the page position."""
        k, cc, S, n, t, j, jb = s.k, s.cc, s.S, s.n, s.t, s.j, s.jb
        layer_c, kind_c, head_c, page_level = s.layer_c, s.kind_c, s.head_c, s.page_level
        m.d.sync += [k.eq(0), n.eq(n + 1)]
        token_end = cc == S - 1
        head_end = head_c == s.kv_heads - 1
        m.d.sync += [cc.eq(Mux(token_end, 0, cc + 1)),
                     head_c.eq(Mux(head_end, 0, head_c + 1))]
        with m.If(head_end):
            m.d.sync += kind_c.eq(~kind_c)
            with m.If(kind_c):
                m.d.sync += layer_c.eq(Mux(layer_c == s.layers - 1, 0, layer_c + 1))
        with m.If(token_end):
            m.d.sync += t.eq(t + 1)
        page_end = j == s.tp - 1
        with m.If(page_end):
            m.d.sync += s.full.eq(s.q + 1)
        # The page position moves per token (page-level: every stream at entry j of its page)
        # or per entry (naive).
        with m.If(~page_level | token_end):
            with m.If(page_end):
                m.d.sync += [j.eq(0), jb.eq(0)]
                with m.If(page_level):
                    m.d.sync += [s.gp.eq(s.gp + S), s.group_end.eq(s.group_end + S)]
                with m.Else():
                    m.d.sync += [s.np_.eq(s.np_ + 1),
                                 s.nslot.eq(Mux(s.nslot == self.cfg.slots - 1, 0, s.nslot + 1))]
            with m.Else():
                m.d.sync += [j.eq(j + 1), jb.eq(jb + s.entry)]
