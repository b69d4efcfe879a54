"""The KVNAND in-flash PE: page reads, ``x`` broadcast, gearbox, ``F``-lane dot products and
multiply-accumulates; GEMV on weight pages, Logit and Attend on the KV pages of one head."""

from __future__ import annotations

import struct

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.fdot import FloatDot
from ..arith.format import BF16, FP16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmac import FloatMAC
from ..arith.fpmul import FloatMultiplier
from ..arith.idot import IntDot
from ..arith.tree import delay, serial_tree, tree_levels, unit_combine
from ..pipeline import ResultQueue
from .divider import SerialDivider
from .gearbox import Gearbox
from .spec import (IMPLEMENTED_MODES, MAX_KV_HEADS, MAX_LAYERS, MAX_TOKENS, FlashGeometry,
                   Mapping, Mode, Op, PEConfig, command_layout, page_data_layout, read_layout,
                   x_layout, y_layout)

__all__ = ["InflashPE"]

#: fp32 ``-0``: the identity of the serial beat tree (``x + -0 = x`` for every ``x``) and the
#: seed of every Attend accumulator.
_NEG_ZERO32 = 0x80000000
#: Cycles from a ``y`` result written into the output queue to ``y.valid`` (SyncFIFOBuffered).
_QUEUE_LATENCY = 2
#: fp16 1.0: the weight of the lanes that sum ``x`` into the w4a16 group sums ``X``.
_ONE16 = 0x3C00
#: fp16 codes of the uint4 weight codes 0 .. 15 (``int_to_float(q, 5, FP16)``, exact).
_INT4_FP16 = [struct.unpack("<H", struct.pack("<e", q))[0] for q in range(16)]
#: The arithmetic paths; a command's arithmetic starts on a path when the results of the other
#: paths are out (their latencies differ, and results leave in command order).
_FLOAT, _INT, _W4, _LOGIT_FLOAT, _LOGIT_INT, _ATTEND = range(6)
#: Reads a page stream may have outstanding: one in the array or the data register, one in the
#: cache register (docs/inflash.md, section 3), one being taken; the FIFO of their sizes.
_READS_IN_FLIGHT = 4


class InflashPE(wiring.Component):
    """Compute a GEMV on weight pages, or Logit and Attend on the KV pages of one head.

    **GEMV** (``op = GEMV``): ``y = W x`` for a weight matrix laid out as
    ``golden.inflash.weight_pages`` lays it out. The PE takes the command, reads ``x`` into its
    buffer while it issues the matrix's page reads in order, cuts the page stream into beats of
    ``F`` elements of one row (:class:`~hdl.inflash.gearbox.Gearbox`), and sends one output per
    row: ``golden.inflash.gemv`` bit for bit.

    * fp16, bf16: one ``F``-lane :class:`~hdl.arith.fdot.FloatDot` per format (products exact
      in fp32, lane tree), then a serial pairwise tree over the beat sums
      (:func:`~hdl.arith.tree.serial_tree`, identity ``-0``); padded lanes give ``-0`` products.
    * w8a8: one :class:`~hdl.arith.idot.IntDot` (``F`` lanes of int8 x int8) and an int32
      accumulator, exact.
    * w4a16 (docs/inflash_models.md 5.3): the fp16 ``FloatDot`` on the codes converted to fp16,
      the serial tree per group giving ``D``; ``X[j]``, the group sums of ``x``, computed by the
      same lanes with weights 1.0 while ``x`` comes in; per group ``t = s D + o X`` (two
      ``FloatMultiplier(fp16, fp32, fp32)`` and a ``FloatAdder``), then a serial tree over the
      row's groups.

    **Logit and Attend** (``op = LOGIT, ATTEND``) on the K or V entries of KV head ``head`` of
    layer ``layer`` (``golden.inflash.kv_address``, offset by ``page``). The PE walks the
    mapping itself: it reads exactly the pages of ``golden.inflash.kv_page_sequence``, each
    once, streaming only the head's entries of each page (a gather of runs under the naive
    mapping), and keeps two entries in a ring so that the ``G`` query heads of the group
    (GQA) use each entry while the next one streams in.

    * Logit: ``x`` holds the ``G`` query vectors; per token and head the entry goes through the
      GEMV's ``FloatDot`` and serial tree (``IntDot`` and int32 accumulator for int8):
      ``golden.inflash.logit`` bit for bit, outputs in token order, the ``G`` heads of a token
      together.
    * Attend: ``x`` streams ``p[:, t]`` per token; per element and head ``acc = p v + acc`` in
      ``F`` :class:`~hdl.arith.fpmac.FloatMAC` lanes per format, accumulators seeded with
      ``-0``, token order (int8: exact int32 lanes): ``golden.inflash.attend`` bit for bit. An
      accumulator is revisited at least :attr:`acc_loop` cycles apart (the MAC's loop, with a
      bypass), so a token takes ``max(G ceil(d / F), acc_loop)`` cycles. The ``G d`` results
      leave after the last token, head by head.

    Parameters
    ----------
    geometry : FlashGeometry
        The plane (page size, transfer width, FMAC count ``F``, pages).
    max_rows, max_cols : int
        Largest matrix shape (:class:`~hdl.inflash.spec.PEConfig`); ``max_cols`` also sizes the
        attention buffers (``G ceil(d / F) <= max_cols / F``, ``d <= max_cols / 2``).
    group_size : int
        ``g`` of the w4a16 mode (:class:`~hdl.inflash.spec.PEConfig`).
    max_query_heads : int
        ``G_max``, the largest GQA group (:class:`~hdl.inflash.spec.PEConfig`).

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        One operation (:func:`~hdl.inflash.spec.command_layout`). Taken when the previous
        command's last beat has entered the arithmetic and its page reads are all issued.
    x : In(stream.Signature(x_layout(cfg)))
        After each accepted command: GEMV, ``ceil(cols / F)`` beats of ``x`` (lanes past
        ``cols`` ignored); Logit, ``G ceil(d / F)`` beats, query head ``h``'s vector in beats
        ``h ceil(d / F) ..`` (lanes past ``d`` ignored); Attend, ``ceil(G / F)`` beats per token
        in token order, ``p[h, t]`` in lane ``h mod F`` of the token's beat ``h // F`` (lanes past
        ``G`` ignored). fp16/bf16 codes, or an int8 in the low byte.
    rd_cmd : Out(stream.Signature(read_layout(cfg)))
        Page reads to the plane, in stream order, as fast as the plane takes them. GEMV: pages
        ``page .. page + n - 1``, ``bytes = page_bytes`` except on the last page. Logit, Attend:
        the head's K or V pages in token order, each once, streaming its entries of the head.
    rd_data : In(stream.Signature(page_data_layout(cfg)))
        The reads' bytes, ``W`` per transfer, ``last`` on a read's final word; back-pressured.
    y : Out(stream.Signature(y_layout(cfg)))
        GEMV, ``rows`` outputs in row order; Logit, ``T G`` scores, token by token, the heads of
        a token in order; Attend, ``G d`` sums, head by head. fp32 codes, or int32 (w8a8, int8
        KV). ``last`` on the command's final output.

    Refused commands (no page read, no ``x`` beat; one ``y`` word with ``error`` and ``last``,
    after every earlier output): an unknown ``op``; GEMV with ``rows`` or ``cols`` of 0 or above
    the maximum, w4a16 with ``cols`` not a multiple of ``group_size``, or pages beyond the
    plane's last page; Logit and Attend in w4a16, with ``tokens`` of 0 or above
    ``MAX_TOKENS``, ``query_heads`` of 0 or above ``G_max``, ``head_dim`` of 0 or above
    ``max_cols / 2``, an entry larger than a page, ``G ceil(d / F)`` above ``max_cols / F``,
    ``layers`` or ``kv_heads`` of 0 or above 1024, ``layer`` or ``head`` out of them, or a page
    of the walk beyond the plane's last page.

    Throughput: one beat (``F`` elements, or ``F`` MACs) per cycle and ``W`` bytes per cycle at
    once; the page period is ``max(tR, transfer, compute)`` as in ``golden.inflash.gemv_timing``
    and ``golden.inflash.attention_timing``. Latency: :meth:`pe_latency` cycles from the last
    page word to the last ``y``. An attention command spends a few tens of cycles computing its
    page walk (a serial divider) before its first read.
    """

    def __init__(self, *, geometry: FlashGeometry, max_rows: int, max_cols: int,
                 group_size: int = 128, max_query_heads: int = 8):
        self.cfg = cfg = PEConfig(geometry=geometry, max_rows=max_rows, max_cols=max_cols,
                                  group_size=group_size, max_query_heads=max_query_heads)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "x": In(stream.Signature(x_layout(cfg))),
            "rd_cmd": Out(stream.Signature(read_layout(cfg))),
            "rd_data": In(stream.Signature(page_data_layout(cfg))),
            "y": Out(stream.Signature(y_layout(cfg))),
        })

    # --- latencies, read off the shared units ------------------------------------------------

    def _units(self):
        dots = (FloatDot(FP16, self.cfg.fmacs, FP32), IntDot(self.cfg.fmacs, acc_bits=32))
        add, mul, mac = FloatAdder(FP32), FloatMultiplier(FP16, FP32, FP32), FloatMAC(FP16, FP32)
        for unit in (*dots, add, mul, mac):
            unit._MustUse__used = True
        return dots[0].latency, dots[1].latency, add.latency, mul.latency, mac.latency

    @property
    def tree_latency(self) -> int:
        """Cycles of the serial beat tree: ``ceil(log2(max_cols / F))`` adder latencies."""
        return tree_levels(self.cfg.max_beats) * self._units()[2]

    @property
    def float_latency(self) -> int:
        """Cycles from a row's last beat leaving the gearbox (or a Logit's last issue) to its
        result in the output queue: the beat register, the ``FloatDot`` and the serial tree."""
        return 1 + self._units()[0] + self.tree_latency

    @property
    def w4_latency(self) -> int:
        """The same for w4a16: the float path to a group's ``D``, the epilogue
        ``fadd(fmul(s, D), fmul(o, X))`` and the serial tree over the row's groups."""
        _, _, add, mul, _ = self._units()
        return self.float_latency + mul + add + tree_levels(self.cfg.max_groups) * add

    @property
    def int_latency(self) -> int:
        """The same for w8a8: the beat register and the ``IntDot`` (the sum is combinational)."""
        return 1 + self._units()[1]

    @property
    def acc_loop(self) -> int:
        """Cycles between two updates of one Attend accumulator, at least: the latency of a
        :class:`~hdl.arith.fpmac.FloatMAC` (``golden.inflash.ACC_LOOP``). The accumulator
        memory's read is hidden by a bypass from the MAC's output."""
        return self._units()[4]

    @property
    def latency(self) -> int:
        """Cycles from the transfer of a float matrix's last page word to its last ``y``
        transfer, with no back-pressure: the gearbox (2), :attr:`float_latency`, and the
        output queue. The ``pe_latency`` of ``golden.inflash.gemv_timing``."""
        return self.pe_latency(Mode.FP16)

    def pe_latency(self, mode: Mode, op: Op = Op.GEMV, *, query_heads: int = 1,
                   head_dim: int = 1, last_page: tuple[int, int] | None = None) -> int:
        """Cycles from the model's end of a command's last page to its last ``y`` (no
        back-pressure): the ``pe_latency`` of ``golden.inflash.gemv_timing`` and
        ``attention_timing``, whose last page ends ``max(transfer, compute)`` cycles after it
        enters the cache register.

        GEMV: the gearbox (:attr:`~hdl.inflash.gearbox.Gearbox.latency`, 2: into its buffer
        and its output register), the path (:attr:`float_latency`, :attr:`int_latency` for
        w8a8, :attr:`w4_latency`), the output queue.

        Logit and Attend: the model lets a page's compute start with its first word; the PE
        starts it once the page's first beat is in, which needs ``ceil(min(F, d) e / W)`` words
        (``e`` bytes per element), and the issues that need the beat of the page's last word
        (``tail``: Logit, which goes head by head, ``1 + (G - 1) ceil(d / F)``; Attend, which
        goes beat by beat, ``G``) come after it. The issues of a page's first token also wait
        for its beats as they stream in (``stall``: Logit's head 0 takes the entry's beats one
        per cycle, so a beat of two words costs a cycle each: ``ceil(d / F) - 1`` cycles at
        ``F = 4``, ``W = 4``; in compute-bound pages the stall of the first page is never made
        up, in read-bound ones the last page's counts). So the PE's compute of the last page
        lags the model's end of it by
        ``max(words + stall + compute - credit, transfer + tail) - max(transfer, compute)``
        (``credit``:
        the part of the last token's loop minimum, ``max(G ceil(d / F), acc_loop)`` cycles that
        ``attention_timing`` charges to float Attend, that its results need not wait for), which
        depends on whether transfer or compute sets the page's pace: hence ``last_page``, the
        ``(transfer, compute)`` cycles of the model's last page. Then the gearbox's output
        register, one cycle from a beat to its issue, and Logit: the GEMV's path and the queue;
        Attend: the accumulator read and the MAC (:attr:`acc_loop`; int8: one product stage),
        two cycles to start the results, the ``G d`` results one per cycle and the queue.
        (docs/inflash.md, section 5.)

        Raises
        ------
        ValueError
            Logit or Attend without ``last_page``.
        """
        mode, op = Mode(mode), Op(op)
        if op == Op.GEMV:
            path = {Mode.W8A8: self.int_latency, Mode.W4A16: self.w4_latency}.get(
                mode, self.float_latency)
            return Gearbox.latency + path + _QUEUE_LATENCY
        if last_page is None:
            raise ValueError(f"The latency of {op.name} needs last_page, the (transfer, "
                             f"compute) cycles of the model's last page, not None")
        transfer, compute = (int(v) for v in last_page)
        F, W = self.cfg.fmacs, self.cfg.transfer_bytes
        elem = 1 if mode == Mode.W8A8 else 2
        nb = -(-head_dim // F)
        # Words of the page before beat b is in the gearbox: the first beat's ``words``, and
        # the stall of the page's first token, whose issues wait for its beats as they stream.
        ready = [-(-min((b + 1) * F, head_dim) * elem // W) for b in range(nb)]
        words = ready[0]
        order = range(nb) if op == Op.LOGIT else [b for b in range(nb)
                                                  for _ in range(query_heads)]
        at = words - 1
        for b in order:
            at = max(at + 1, ready[b])
        stall = at - (words + len(order) - 1)
        issues = query_heads * nb
        mac, credit = 1, 0                      # int8 Attend: the products, then the sum
        if op == Op.ATTEND and mode != Mode.W8A8:
            mac, credit = self.acc_loop, max(0, self.acc_loop - issues)
        # Issues that need the page's last beat and those after it: Logit (head by head) the
        # last beat of head 0 and every beat of the later heads; Attend (beat by beat) the
        # last beat's G heads.
        tail = 1 + (query_heads - 1) * nb if op == Op.LOGIT else query_heads
        lag = max(words + stall + compute - credit, transfer + tail) - max(transfer, compute)
        lag += Gearbox.latency - 1                 # the gearbox's output register
        if op == Op.LOGIT:
            path = self.int_latency if mode == Mode.W8A8 else self.float_latency
            return lag + 1 + path + _QUEUE_LATENCY
        # beat -> issue (1), accumulator read (1), MAC, drain start (2), G d words, the queue.
        return lag + 1 + 1 + mac + 2 + query_heads * head_dim + _QUEUE_LATENCY

    @property
    def queue_depth(self) -> int:
        """Output queue places: enough for one result per cycle (rows of at most ``F``
        columns) behind the longest pipeline."""
        return max(self.float_latency, self.w4_latency) + 4

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, P, W, g = cfg.fmacs, cfg.page_bytes, cfg.transfer_bytes, cfg.group_size
        log_f = F.bit_length() - 1
        log_p = P.bit_length() - 1
        log_g = g.bit_length() - 1
        group_beats = g // F
        slot_log = cfg.slot_beats.bit_length() - 1
        m.submodules.gearbox = gearbox = Gearbox(cfg)
        queue = ResultQueue(m, self.y, depth=self.queue_depth, name="y_queue")

        # ---- page words into the gearbox: the last word of a read holds its tail only ---------
        r = self.rd_cmd.payload
        m.submodules.read_tails = tails = SyncFIFO(width=W.bit_length(), depth=_READS_IN_FLIGHT)
        read_taken = self.rd_cmd.valid & self.rd_cmd.ready
        word = self.rd_data.payload
        # A read's last word waits for its size (its read was taken before it). ``last`` is
        # looked at only with ``valid``: the payload of an idle stream may be anything (X in a
        # simulator), and ``ready`` must not follow it.
        last_word = self.rd_data.valid & word.last
        m.d.comb += [tails.w_en.eq(read_taken), tails.w_data.eq(((r.bytes - 1) & (W - 1)) + 1),
                     gearbox.i.valid.eq(self.rd_data.valid & (~last_word | tails.r_rdy)),
                     self.rd_data.ready.eq(gearbox.i.ready & (~last_word | tails.r_rdy)),
                     gearbox.i.payload.data.eq(word.data),
                     gearbox.i.payload.bytes.eq(Mux(word.last, tails.r_data, W)),
                     tails.r_en.eq(last_word & self.rd_data.ready)]

        # ---- command: latch ---------------------------------------------------------------------
        c = self.cmd.payload
        op = Signal(2)
        mode = Signal(2)
        rows = Signal(cfg.rows_bits)
        cols = Signal(cfg.cols_bits)
        page = Signal(cfg.page_bits)
        tokens = Signal(cfg.tokens_bits)
        head_dim = Signal(cfg.cols_bits)
        heads = Signal(cfg.query_bits)              # G, query heads per KV head
        mapping = Signal()
        layers = Signal(cfg.layout_bits)
        kv_heads = Signal(cfg.layout_bits)
        layer = Signal(cfg.layout_bits)
        head = Signal(cfg.layout_bits)
        entry = Signal(cfg.cols_bits + 1)           # bytes of one K or V entry, d x (1 or 2)
        nb = Signal(cfg.cols_bits)                  # beats of an entry, ceil(d / F)
        pb = Signal(cfg.query_bits)                 # x beats of a token's p, ceil(G / F)
        last_mask = Signal(F)                       # lanes of an entry's last beat
        att = Signal()                              # op is Logit or Attend
        logit = op == Op.LOGIT
        attend = op == Op.ATTEND
        is_int = Signal()
        is_w4 = Signal()
        m.d.comb += [att.eq(logit | attend), is_int.eq(mode == Mode.W8A8),
                     is_w4.eq((mode == Mode.W4A16) & ~att)]

        # ---- command: sizes (one shared multiplier, one serial divider) -----------------------
        size = Signal(cfg.stream_bits)              # bytes of the matrix's page stream
        pages = Signal(cfg.stream_bits)
        m.d.comb += pages.eq((size + P - 1) >> log_p)
        wide = 2 * cfg.layout_bits + 1              # 2 L H and the entry index c
        div_bits = max(cfg.tokens_bits, wide, P.bit_length(), cfg.cols_bits + 1)
        mul_a = Signal(max(cfg.rows_bits, div_bits, cfg.page_bits + 1))
        mul_b = Signal(max(cfg.cols_bits + 1, wide, P.bit_length(), cfg.query_bits))
        product = Signal(len(mul_a) + len(mul_b))
        # Operands and product registered (a multiply takes three states): the set-up's paths
        # were the PE's critical ones, state decode -> operand mux -> multiplier -> sum.
        m.d.sync += product.eq(mul_a * mul_b)
        div = SerialDivider(m, div_bits, "walk_div")
        tp = Signal(div_bits)                       # entries per page, T_p = P // entry
        page_used = Signal(P.bit_length() + 1)      # T_p entry: bytes of a full KV page
        stride = Signal(wide)                       # S = 2 L H, entries per token
        first_entry = Signal(wide)                  # c = (2 layer + kind) H + head
        total = Signal(len(product))                # T entry: bytes of the K or V stream
        ops = Signal(len(product))                  # G nb: issues per token
        x_beats = Signal(len(product))              # x beats of the command
        wraps = Signal(div_bits)                    # page-level: (T - 1) // T_p
        last_page = Signal(len(product) + 1)        # page-level: the walk's last page
        page_step = Signal(div_bits)                # naive: S // T_p (pages per token)
        slot_step = Signal(div_bits)                # naive: S mod T_p (entries per token)
        first_page = Signal(len(product) + 1)
        first_col = Signal(len(product))            # naive: (c mod T_p) entry
        col_step = Signal(len(product))             # naive: (S mod T_p) entry
        end_entry = Signal(len(product) + 1)        # naive: (T - 1) S + c
        limit = Signal(len(product))                # naive: (pages - page) T_p
        plane_pages = cfg.geometry.pages

        remaining = Signal(cfg.stream_bits)         # GEMV bytes still to be read
        next_page = Signal(cfg.page_bits)
        x_left = Signal(cfg.tokens_bits + cfg.query_bits)   # x beats still to be taken
        x_addr = Signal(range(cfg.x_depth))
        inflight = Signal(range(self.queue_depth + 1))   # results in the arithmetic
        error_write = Signal()
        x_start = Signal()                          # the command's x, pages and beats begin
        att_start = Signal()
        cons_active = Signal()                      # the attention issues are not all made
        pl_active, pl_offer = Signal(), Signal()    # the attention reads are not all taken
        attend_active = Signal()                    # an Attend's results are not all out

        implemented = Cat(mode == code for code in IMPLEMENTED_MODES).any()
        gemv_bad = ((rows == 0) | (rows > cfg.max_rows) | (cols == 0) | (cols > cfg.max_cols)
                    | ~implemented | (op == 3)
                    | ((mode == Mode.W4A16) & (cols[:log_g] != 0))
                    | (page + pages > plane_pages))
        fits = Mux(mapping == Mapping.PAGE, last_page < plane_pages,
                   (page < plane_pages) & (end_entry < limit))
        att_bad = ((mode == Mode.W4A16) | (tokens == 0) | (tokens > MAX_TOKENS)
                   | (heads == 0) | (heads > cfg.max_query_heads)
                   | (head_dim == 0) | (head_dim > cfg.max_head_dim) | (entry > P)
                   | (ops > cfg.max_beats)
                   | (layers == 0) | (layers > MAX_LAYERS) | (kv_heads == 0)
                   | (kv_heads > MAX_KV_HEADS) | (layer >= layers) | (head >= kv_heads) | ~fits)
        bad = Mux(att, att_bad, gemv_bad)
        gemv_idle = ~gearbox.o.valid & gearbox.job.ready & (remaining == 0) & (x_left == 0)
        idle = gemv_idle & ~cons_active & ~pl_active & ~pl_offer

        def multiply(name, after, a, b, *assignments, then=None):
            """States ``name``, ``name_MUL`` and ``name_SUM``: the operands into their
            registers, the product into its register, then ``assignments`` (or ``then()``)
            from the product and on to ``after``."""
            with m.State(name):
                m.d.sync += [mul_a.eq(a), mul_b.eq(b)]
                m.next = f"{name}_MUL"
            with m.State(f"{name}_MUL"):
                m.next = f"{name}_SUM"
            with m.State(f"{name}_SUM"):
                m.d.sync += [target.eq(value) for target, value in assignments]
                if then is not None:
                    then()
                else:
                    m.next = after

        def divide(name, after, dividend, divisor, quotient, remainder=None):
            with m.State(name):
                m.d.comb += [div.start.eq(1), div.dividend.eq(dividend),
                             div.divisor.eq(divisor)]
                m.next = f"{name}_WAIT"
            with m.State(f"{name}_WAIT"):
                with m.If(~div.busy):
                    m.d.sync += quotient.eq(div.quotient)
                    if remainder is not None:
                        m.d.sync += remainder.eq(div.remainder)
                    m.next = after

        with m.FSM(name="command"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(idle)
                with m.If(self.cmd.valid & idle):
                    d_m1 = c.head_dim - 1
                    m.d.sync += [op.eq(c.op), mode.eq(c.mode), rows.eq(c.rows), cols.eq(c.cols),
                                 page.eq(c.page), tokens.eq(c.tokens), head_dim.eq(c.head_dim),
                                 heads.eq(c.query_heads), mapping.eq(c.mapping),
                                 layers.eq(c.layers), kv_heads.eq(c.kv_heads),
                                 layer.eq(c.layer), head.eq(c.head),
                                 entry.eq(Mux(c.mode == Mode.W8A8, c.head_dim, c.head_dim << 1)),
                                 nb.eq((d_m1 >> log_f) + 1),
                                 pb.eq(((c.query_heads - 1) >> log_f) + 1),
                                 last_mask.eq(Cat(i <= d_m1[:log_f] for i in range(F)))]
                    with m.If((c.op == Op.LOGIT) | (c.op == Op.ATTEND)):
                        m.next = "PER_PAGE"
                    with m.Else():
                        m.next = "SIZE"
            def gemv_size():
                # One multiplication per GEMV: rows x cols x (bytes per element); w4a16 has
                # half a byte per code and a 4-byte header per g codes.
                with m.Switch(mode):
                    with m.Case(Mode.W8A8):
                        m.d.sync += size.eq(product)
                    with m.Case(Mode.W4A16):
                        m.d.sync += size.eq((product >> 1) + (product >> (log_g - 2)))
                    with m.Default():
                        m.d.sync += size.eq(product << 1)
                m.next = "CHECK"

            multiply("SIZE", None, rows, cols, then=gemv_size)
            # The page walk of an attention command (docs/inflash.md, section 5): entries per
            # page, the stream's size, the first page and the steps, and the last page's check.
            divide("PER_PAGE", "PAGE_USED", P, entry, tp)
            multiply("PAGE_USED", "STRIDE", tp, entry, (page_used, product))
            multiply("STRIDE", "ENTRY", layers << 1, kv_heads, (stride, product))
            multiply("ENTRY", "TOTAL", Cat(attend, layer), kv_heads,
                     (first_entry, product + head))
            multiply("TOTAL", "OPS", tokens, entry, (total, product))
            multiply("OPS", "X_BEATS", heads, nb, (ops, product))
            def walk_next():
                with m.If(mapping == Mapping.PAGE):
                    m.next = "WRAPS"
                with m.Else():
                    m.next = "FIRST_PAGE"

            multiply("X_BEATS", None, tokens, pb, (x_beats, Mux(logit, ops, product)),
                     then=walk_next)
            divide("WRAPS", "LAST_PAGE", tokens - 1, tp, wraps)
            multiply("LAST_PAGE", "CHECK", wraps, stride,
                     (last_page, product + page + first_entry),
                     (first_page, page + first_entry))
            divide("FIRST_PAGE", "PAGE_STEP", first_entry, tp, first_page, first_col)
            divide("PAGE_STEP", "FIRST_COLUMN", stride, tp, page_step, slot_step)
            multiply("FIRST_COLUMN", "COLUMN_STEP", first_col, entry,
                     (first_col, product), (first_page, first_page + page))
            multiply("COLUMN_STEP", "END_ENTRY", slot_step, entry, (col_step, product))
            multiply("END_ENTRY", "LIMIT", tokens - 1, stride, (end_entry, product + first_entry))
            multiply("LIMIT", "CHECK", plane_pages - page, tp, (limit, product))
            with m.State("CHECK"):
                with m.If(bad):
                    m.next = "REFUSE"
                with m.Elif(att):
                    # An Attend reuses the accumulators: the previous one's results must be out.
                    with m.If(~attend | ~attend_active):
                        m.d.comb += [att_start.eq(1), gearbox.job.valid.eq(1)]
                        m.d.sync += [x_left.eq(x_beats), x_addr.eq(0)]
                        m.next = "IDLE"
                # w4a16: the group sums X of the previous GEMV must be used up first.
                with m.Elif((mode != Mode.W4A16) | (inflight == 0)):
                    m.d.comb += x_start.eq(1)
                    m.d.comb += gearbox.job.valid.eq(1)
                    m.d.sync += [remaining.eq(size), next_page.eq(page),
                                 x_left.eq(((cols - 1) >> log_f) + 1), x_addr.eq(0)]
                    m.next = "IDLE"
            with m.State("REFUSE"):
                # After every earlier result, so that answers keep command order.
                with m.If((inflight == 0) & queue.can_issue & ~attend_active):
                    m.d.comb += error_write.eq(1)
                    m.next = "IDLE"
        m.d.comb += [gearbox.job.payload.mode.eq(mode),
                     gearbox.job.payload.rows.eq(Mux(att, tokens, rows)),
                     gearbox.job.payload.cols.eq(Mux(att, head_dim, cols)),
                     gearbox.job.payload.bytes.eq(Mux(att, total, size))]

        # ---- page reads: in order, as fast as the plane takes them ------------------------------
        # GEMV: pages page .. page + n - 1. Attention: the walk of golden.inflash.kv_address. Only
        # one command's reads are outstanding at a time (a command is taken when they are issued).
        rq = Signal(read_layout(cfg))               # the attention read on offer
        gemv_bytes = Mux(remaining >= P, P, remaining)
        with m.If(pl_offer):
            m.d.comb += r.eq(rq)
        with m.Else():
            m.d.comb += [r.page.eq(next_page), r.bytes.eq(gemv_bytes), r.run.eq(gemv_bytes),
                         r.stride.eq(gemv_bytes)]
        m.d.comb += self.rd_cmd.valid.eq(((remaining != 0) | pl_offer) & tails.w_rdy)
        with m.If(read_taken & ~pl_offer):
            m.d.sync += [remaining.eq(remaining - gemv_bytes), next_page.eq(next_page + 1)]
        with m.If(read_taken & pl_offer):
            m.d.sync += pl_offer.eq(0)

        # Attention walk: page-level, one read per T_p tokens (page += S); naive, token by token
        # (column += (S mod T_p) entry, page += S // T_p, carrying a column past the page's
        # entries into the next page), a read per run of tokens on one page.
        pl_page = Signal(len(first_page))
        pl_col = Signal(len(first_col))
        pl_left = Signal(len(total))                # page-level: bytes not yet read
        pl_tokens = Signal(cfg.tokens_bits)         # naive: tokens not yet in a read
        pl_build = Signal()                         # naive: rq holds a read being built
        with m.If(att_start):
            m.d.sync += [pl_active.eq(1), pl_page.eq(first_page), pl_left.eq(total),
                         pl_tokens.eq(tokens), pl_build.eq(0),
                         pl_col.eq(Mux(mapping == Mapping.PAGE, 0, first_col))]
        with m.Elif(pl_active & ~pl_offer):
            with m.If(mapping == Mapping.PAGE):
                full = pl_left >= page_used
                nbytes = Mux(full, page_used, pl_left)
                m.d.sync += [rq.page.eq(pl_page), rq.column.eq(0), rq.bytes.eq(nbytes),
                             rq.run.eq(nbytes), rq.stride.eq(nbytes), pl_offer.eq(1),
                             pl_page.eq(pl_page + stride), pl_left.eq(pl_left - nbytes)]
                with m.If(pl_left == nbytes):
                    m.d.sync += pl_active.eq(0)
            with m.Else():
                column = pl_col + col_step
                carry = column >= page_used
                advance = [pl_col.eq(Mux(carry, column - page_used, column)),
                           pl_page.eq(pl_page + page_step + carry),
                           pl_tokens.eq(pl_tokens - 1)]
                with m.If(~pl_build):
                    m.d.sync += [rq.page.eq(pl_page), rq.column.eq(pl_col), rq.bytes.eq(entry),
                                 pl_build.eq(1), *advance]
                with m.Elif((pl_tokens != 0) & (pl_page == rq.page)):
                    m.d.sync += [rq.bytes.eq(rq.bytes + entry), *advance]
                with m.Else():
                    gather = rq.bytes != entry
                    m.d.sync += [pl_offer.eq(1), pl_build.eq(0),
                                 rq.run.eq(Mux(gather, entry, rq.bytes)),
                                 rq.stride.eq(Mux(gather, col_step, rq.bytes))]
                    with m.If(pl_tokens == 0):
                        m.d.sync += pl_active.eq(0)

        # ---- x: broadcast into the buffer ---------------------------------------------------
        # GEMV and Logit: word b holds elements b F .. b F + F - 1. Attend: two tokens of p, a
        # ring of 2 ceil(G / F) words, filled while the older token's p is in use.
        m.submodules.xmem = xmem = Memory(shape=16 * F, depth=cfg.x_depth, init=[])
        x_wr = xmem.write_port()
        x_rd = xmem.read_port()
        p_occ = Signal(range(3))                    # tokens of p in the ring, not used up
        p_wbeat = Signal(cfg.query_bits)            # beats of the newest token written
        p_room = (p_wbeat != 0) | (p_occ < 2)
        m.d.comb += [self.x.ready.eq((x_left != 0) & (~attend | p_room)),
                     x_wr.addr.eq(x_addr), x_wr.data.eq(self.x.payload.data.as_value()),
                     x_wr.en.eq(self.x.valid & self.x.ready)]
        x_take = self.x.valid & self.x.ready
        with m.If(x_take):
            m.d.sync += x_left.eq(x_left - 1)
            with m.If(attend):
                m.d.sync += [x_addr.eq(Mux(x_addr == 2 * pb - 1, 0, x_addr + 1)),
                             p_wbeat.eq(Mux(p_wbeat == pb - 1, 0, p_wbeat + 1))]
            with m.Else():
                m.d.sync += x_addr.eq(x_addr + 1)
        # w4a16: the x beats also go through the fp16 lanes with weights 1.0 (X[j]).
        xs_valid = Signal()
        xs_data = Signal(16 * F)
        xs_end = Signal()
        m.d.sync += [xs_valid.eq(x_take & is_w4),
                     xs_data.eq(self.x.payload.data.as_value()),
                     xs_end.eq((x_addr & (group_beats - 1)) == group_beats - 1)]

        # ---- GEMV beats into the arithmetic -------------------------------------------------
        # The float and integer paths have different latencies: a command on the other path
        # starts only when the results of the previous one are out, so results stay in order.
        beat = gearbox.o.payload
        path = Signal(3)
        m.d.comb += path.eq(Mux(attend, _ATTEND,
                                Mux(logit, Mux(is_int, _LOGIT_INT, _LOGIT_FLOAT),
                                    Mux(is_int, _INT, Mux(is_w4, _W4, _FLOAT)))))
        last_path = Signal(3)
        path_free = ~attend_active & ((path == last_path) | (inflight == 0))
        # Beat b needs x word b only: the first row starts while x is still coming in (w4a16
        # waits for all of x: its lanes are computing the group sums meanwhile).
        x_there = (x_left == 0) | ((beat.beat < x_addr) & ~is_w4)
        m.submodules.headers = headers = SyncFIFO(width=32, depth=self.float_latency // 2 + 2)
        gemv_ready = (x_there & path_free & (~beat.last | queue.can_issue)
                      & (~beat.header | headers.w_rdy))
        m.d.comb += [headers.w_en.eq(gearbox.o.valid & gearbox.o.ready & ~att & beat.header),
                     headers.w_data.eq(Cat(beat.scale, beat.offset))]

        # ---- attention: the two-entry K/V ring, filled by the gearbox -------------------------
        # Every query head of the group uses an entry (Logit: head by head, Attend: beat by
        # beat), so an entry stays until its last use while the next one streams in.
        m.submodules.ring = ring = Memory(shape=16 * F, depth=2 * cfg.slot_beats, init=[])
        ring_wr = ring.write_port()
        ring_rd = ring.read_port()
        occ = Signal(range(3))                      # entries begun and not used up
        wbeats = Signal(cfg.cols_bits)              # beats of the newest entry written (0: all)
        wslot, rslot = Signal(), Signal()
        ring_room = (beat.beat != 0) | (occ < 2)
        m.d.comb += gearbox.o.ready.eq(Mux(att, ring_room, gemv_ready))
        fire = gearbox.o.valid & gearbox.o.ready & ~att
        ring_fire = gearbox.o.valid & gearbox.o.ready & att
        m.d.comb += [ring_wr.addr.eq(Cat(beat.beat[:slot_log], wslot)),
                     ring_wr.data.eq(beat.data.as_value()), ring_wr.en.eq(ring_fire)]
        with m.If(ring_fire):
            m.d.sync += wbeats.eq(Mux(beat.last, 0, beat.beat + 1))
            with m.If(beat.last):
                m.d.sync += wslot.eq(~wslot)

        # ---- attention: issues, one per cycle, in token order ----------------------------------
        # Logit: head h, beat b (the tree needs a dot product's beats together); Attend: beat b,
        # head h (accumulator k = b G + h). k counts the token's issues: the query word of a Logit.
        tok_left = Signal(cfg.tokens_bits)
        ck = Signal(range(cfg.max_beats + 1))
        cb = Signal(cfg.cols_bits)
        ch = Signal(cfg.query_bits)
        h_lane = Signal(range(F))                   # Attend: p[h] is lane h mod F ...
        h_word = Signal(cfg.query_bits)             # ... of the token's word h // F
        pslot = Signal()
        first_token = Signal()
        beat_end = cb == nb - 1
        head_end = ch == heads - 1
        token_end = beat_end & head_end
        avail = (occ == 2) | ((occ == 1) & ((wbeats == 0) | (cb < wbeats)))
        p_there = (p_occ == 2) | ((p_occ == 1) & (p_wbeat == 0))
        acc_hazard = Signal()
        logit_ok = ((x_left == 0) | (ck < x_addr)) & (~beat_end | queue.can_issue) & path_free
        issue = Signal()
        m.d.comb += issue.eq(cons_active & avail & Mux(logit, logit_ok, p_there & ~acc_hazard))
        logit_issue = issue & logit
        attend_issue = issue & attend
        ring_release = issue & token_end
        m.d.sync += occ.eq(occ + (ring_fire & (beat.beat == 0)) - ring_release)
        m.d.sync += p_occ.eq(p_occ + (x_take & attend & (p_wbeat == 0))
                             - (attend_issue & token_end))
        with m.If(att_start):
            m.d.sync += [cons_active.eq(1), tok_left.eq(tokens), ck.eq(0), cb.eq(0), ch.eq(0),
                         h_lane.eq(0), h_word.eq(0), pslot.eq(0), first_token.eq(1),
                         occ.eq(0), wbeats.eq(0), wslot.eq(0), rslot.eq(0), p_occ.eq(0),
                         p_wbeat.eq(0)]
        with m.If(issue):
            m.d.sync += ck.eq(Mux(token_end, 0, ck + 1))
            with m.If(logit):
                m.d.sync += [cb.eq(Mux(beat_end, 0, cb + 1)),
                             ch.eq(Mux(beat_end, Mux(head_end, 0, ch + 1), ch))]
            with m.Else():
                lane_end = h_lane == F - 1
                m.d.sync += [ch.eq(Mux(head_end, 0, ch + 1)),
                             cb.eq(Mux(head_end, Mux(beat_end, 0, cb + 1), cb)),
                             h_lane.eq(Mux(head_end | lane_end, 0, h_lane + 1)),
                             h_word.eq(Mux(head_end, 0, Mux(lane_end, h_word + 1, h_word)))]
            with m.If(token_end):
                m.d.sync += [tok_left.eq(tok_left - 1), rslot.eq(~rslot), pslot.eq(~pslot),
                             first_token.eq(0)]
                with m.If(tok_left == 1):
                    m.d.sync += cons_active.eq(0)
        with m.If(fire | logit_issue):
            m.d.sync += last_path.eq(path)
        m.d.comb += [ring_rd.addr.eq(Cat(cb[:slot_log], rslot)),
                     x_rd.addr.eq(Mux(att, Mux(logit, ck, Mux(pslot, pb, 0) + h_word),
                                      beat.beat))]

        # ---- the compute stage: a beat (GEMV) or an issue (Logit, Attend) a cycle later --------
        codes = Array(Const(c, 16) for c in _INT4_FP16)
        w4_lanes = Cat(codes[beat.data[i][:4]] for i in range(F))
        w_reg = Signal(16 * F)
        mask_reg = Signal(F)
        first_reg, last_reg, final_reg = Signal(), Signal(), Signal()
        valid = {name: Signal(name=f"{name}_valid") for name in ("fp16", "bf16", "int")}
        mac_valid = {name: Signal(name=f"mac_{name}_valid") for name in ("fp16", "bf16", "int")}
        gend_reg, w4_reg, ring_reg = Signal(), Signal(), Signal()
        k_reg = Signal.like(ck)
        seed_reg = Signal()                         # Attend: the first token seeds with -0 (0)
        lane_reg = Signal(range(F))
        dot_issue = fire | logit_issue
        fmt_fp16 = (mode == Mode.FP16) | is_w4
        m.d.sync += [w_reg.eq(Mux(is_w4, w4_lanes, beat.data.as_value())),
                     mask_reg.eq(Mux(att, Mux(beat_end, last_mask, (1 << F) - 1), beat.mask)),
                     first_reg.eq(Mux(att, cb == 0, beat.first)),
                     last_reg.eq(Mux(att, beat_end, beat.last)),
                     final_reg.eq(Mux(att, token_end & (tok_left == 1), beat.final)),
                     gend_reg.eq(beat.group_end), w4_reg.eq(is_w4), ring_reg.eq(att),
                     valid["fp16"].eq(dot_issue & fmt_fp16),
                     valid["bf16"].eq(dot_issue & (mode == Mode.BF16)),
                     valid["int"].eq(dot_issue & is_int),
                     mac_valid["fp16"].eq(attend_issue & (mode == Mode.FP16)),
                     mac_valid["bf16"].eq(attend_issue & (mode == Mode.BF16)),
                     mac_valid["int"].eq(attend_issue & is_int),
                     k_reg.eq(ck), seed_reg.eq(first_token), lane_reg.eq(h_lane)]
        w_lanes = Mux(ring_reg, ring_rd.data, w_reg)
        # Lanes past the row's end: x = +0 (float, against a -0 weight) or 0 (int).
        x_lanes = Cat(Mux(mask_reg[i], x_rd.data[16 * i:16 * (i + 1)], 0) for i in range(F))

        # ---- float modes: F-lane dot per beat, serial pairwise tree per row --------------------
        # (w4a16: a group is a "row" of this tree; x beats go to their own group tree. Logit:
        # a (token, head) is a row.)
        sums = []
        for name, fmt in (("fp16", FP16), ("bf16", BF16)):
            dot = FloatDot(fmt, F, FP32)
            m.submodules[f"dot_{name}"] = dot
            m.d.comb += [dot.i.valid.eq(valid[name]), dot.i.payload.a.eq(w_lanes),
                         dot.i.payload.b.eq(x_lanes)]
            sums.append(dot)
        m.d.comb += sums[0].i.valid.eq(valid["fp16"] | xs_valid)
        with m.If(xs_valid):
            m.d.comb += [sums[0].i.payload.a.eq(Const(_ONE16, 16).replicate(F)),
                         sums[0].i.payload.b.eq(xs_data)]
        lat = sums[0].latency
        dot_x = delay(m, xs_valid, lat, name="dot_x", reset=True)
        dot_valid = (sums[0].o.valid & ~dot_x) | sums[1].o.valid
        dot_value = Mux(sums[0].o.valid, sums[0].o.payload.y, sums[1].o.payload.y)
        dot_last = delay(m, Mux(w4_reg, gend_reg, last_reg), lat, name="dot_last")
        dot_row_end = delay(m, last_reg, lat, name="dot_row_end")
        dot_final = delay(m, final_reg, lat, name="dot_final")
        dot_w4 = delay(m, w4_reg, lat, name="dot_w4")
        adder = unit_combine(lambda: FloatAdder(FP32))
        row = serial_tree(m, dot_value, dot_valid, dot_last, max_count=cfg.max_beats,
                          combine=adder, identity=_NEG_ZERO32, name="row")
        row_final = delay(m, dot_final, row.latency, name="row_final")
        row_end = delay(m, dot_row_end, row.latency, name="row_end")
        row_w4 = delay(m, dot_w4, row.latency, name="row_w4")
        float_done = row.valid & ~row_w4

        # ---- w4a16: X[j] from the x beats; t = s D + o X per group; tree over the groups ------
        xsum = serial_tree(m, sums[0].o.payload.y, sums[0].o.valid & dot_x,
                           delay(m, xs_end, lat, name="dot_x_end"), max_count=group_beats,
                           combine=adder, identity=_NEG_ZERO32, name="xsum")
        m.submodules.group_sums = gmem = Memory(shape=32, depth=cfg.max_groups, init=[])
        g_wr = gmem.write_port()
        g_rd = gmem.read_port(transparent_for=(g_wr,))
        g_wr_addr = Signal(range(cfg.max_groups))
        m.d.comb += [g_wr.addr.eq(g_wr_addr), g_wr.data.eq(xsum.value), g_wr.en.eq(xsum.valid)]
        with m.If(xsum.valid):
            m.d.sync += g_wr_addr.eq(g_wr_addr + 1)
        with m.If(x_start & (mode == Mode.W4A16)):
            # After the previous GEMV's rows (CHECK waits for them), so all its X are written;
            # a float or integer GEMV leaves the address alone (the last X may still be coming).
            m.d.sync += g_wr_addr.eq(0)
        d_valid = row.valid & row_w4
        group = Signal(range(cfg.max_groups))       # group of the next D; X[group] is read
        next_group = Mux(row_end, 0, group + 1)
        m.d.comb += [g_rd.addr.eq(Mux(d_valid, next_group, group)), headers.r_en.eq(d_valid)]
        with m.If(d_valid):
            m.d.sync += group.eq(next_group)
        scale_mul, offset_mul = FloatMultiplier(FP16, FP32, FP32), FloatMultiplier(FP16, FP32, FP32)
        m.submodules.scale_mul, m.submodules.offset_mul = scale_mul, offset_mul
        m.d.comb += [scale_mul.i.valid.eq(d_valid), scale_mul.i.payload.a.eq(headers.r_data[:16]),
                     scale_mul.i.payload.b.eq(row.value),
                     offset_mul.i.valid.eq(d_valid),
                     offset_mul.i.payload.a.eq(headers.r_data[16:]),
                     offset_mul.i.payload.b.eq(g_rd.data)]
        m.submodules.epilogue = epilogue = FloatAdder(FP32)
        m.d.comb += [epilogue.i.valid.eq(scale_mul.o.valid),
                     epilogue.i.payload.a.eq(scale_mul.o.payload.y),
                     epilogue.i.payload.b.eq(offset_mul.o.payload.y)]
        t_lat = scale_mul.latency + epilogue.latency
        t_row_end = delay(m, row_end, t_lat, name="t_row_end")
        t_final = delay(m, row_final, t_lat, name="t_final")
        groups = serial_tree(m, epilogue.o.payload.y, epilogue.o.valid, t_row_end,
                             max_count=cfg.max_groups, combine=adder, identity=_NEG_ZERO32,
                             name="groups")
        groups_final = delay(m, t_final, groups.latency, name="groups_final")

        # ---- w8a8 and int8 Logit: F-lane integer dot per beat, int32 accumulator per row -------
        m.submodules.idot = idot = IntDot(F, a_bits=8, b_bits=8, acc_bits=32)
        m.d.comb += [idot.i.valid.eq(valid["int"])]
        for i in range(F):
            m.d.comb += [idot.i.payload.a[i].eq(w_lanes[16 * i:16 * i + 8]),
                         idot.i.payload.b[i].eq(x_lanes[16 * i:16 * i + 8])]
        i_first = delay(m, first_reg, idot.latency, name="idot_first")
        i_last = delay(m, last_reg, idot.latency, name="idot_last")
        i_final = delay(m, final_reg, idot.latency, name="idot_final")
        acc = Signal(32)
        acc_sum = Signal(32)
        m.d.comb += acc_sum.eq(Mux(i_first, 0, acc) + idot.o.payload.y)
        with m.If(idot.o.valid):
            m.d.sync += acc.eq(acc_sum)
        int_done = idot.o.valid & i_last

        # ---- Attend: F accumulate lanes; accumulator k = b G + h in a memory -------------------
        # acc[k] = fadd(fmul(p, v), acc[k]) (FloatMAC) or acc[k] + p v (int8, exact), seeded with
        # -0 (0) by the first token. The memory is read at issue; a MAC result written in the
        # cycle of a read is passed through (transparent port), one written a cycle later is
        # bypassed into the MAC, and an issue waits while its accumulator is in the MAC earlier
        # than that (acc_hazard): one update per acc_loop cycles at most.
        m.submodules.accumulators = amem = Memory(shape=32 * F, depth=cfg.max_beats, init=[])
        a_wr = amem.write_port()
        a_rd = amem.read_port(transparent_for=(a_wr,))
        p_value = x_rd.data.word_select(lane_reg, 16)
        macs = {}
        for name, fmt in (("fp16", FP16), ("bf16", BF16)):
            macs[name] = lanes = [FloatMAC(fmt, FP32) for _ in range(F)]
            for i, mac in enumerate(lanes):
                m.submodules[f"mac_{name}{i}"] = mac
        mac_lat = macs["fp16"][0].latency
        mac_out_valid = macs["fp16"][0].o.valid | macs["bf16"][0].o.valid
        mac_out = Mux(macs["fp16"][0].o.valid, Cat(u.o.payload.y for u in macs["fp16"]),
                      Cat(u.o.payload.y for u in macs["bf16"]))
        mac_out_k = delay(m, k_reg, mac_lat, name="mac_k")
        float_issue = attend_issue & ~is_int
        recent = [float_issue]
        recent_k = [ck]
        for index in range(mac_lat - 1):            # issues of the last acc_loop - 1 cycles
            recent.append(delay(m, recent[-1], 1, name=f"mac_issue_{index}", reset=True))
            recent_k.append(delay(m, recent_k[-1], 1, name=f"mac_issue_k_{index}"))
        m.d.comb += acc_hazard.eq(Cat(v & (k == ck) for v, k in zip(recent[1:], recent_k[1:]))
                                  .any())
        bypass = mac_out_valid & (mac_out_k == k_reg)
        for i in range(F):
            held = a_rd.data[32 * i:32 * (i + 1)]
            addend = Mux(seed_reg, _NEG_ZERO32, Mux(bypass, mac_out[32 * i:32 * (i + 1)], held))
            for name in ("fp16", "bf16"):
                mac = macs[name][i]
                m.d.comb += [mac.i.valid.eq(mac_valid[name]), mac.i.payload.a.eq(p_value),
                             mac.i.payload.b.eq(ring_rd.data[16 * i:16 * (i + 1)]),
                             mac.i.payload.c.eq(addend)]
        # int8: exact products, sums modulo 2**32 (golden.inflash.attend's int32), in two
        # stages: the products and the accumulator into registers, then the sum written back.
        # A sum being written in the cycle its accumulator is read again is forwarded (the
        # transparent port covers the cycle after); one update per cycle and accumulator.
        sum_valid = Signal()
        sum_k = Signal.like(k_reg)
        products = [Signal(signed(32), name=f"int_product{i}") for i in range(F)]
        held_acc = Signal(32 * F)
        int_sums = Signal(32 * F)
        m.d.comb += int_sums.eq(Cat((held_acc[32 * i:32 * (i + 1)] + products[i])[:32]
                                    for i in range(F)))
        forward = sum_valid & (sum_k == k_reg)
        m.d.sync += [sum_valid.eq(mac_valid["int"]), sum_k.eq(k_reg),
                     held_acc.eq(Mux(seed_reg, 0, Mux(forward, int_sums, a_rd.data)))]
        m.d.sync += [lane.eq(p_value[:8].as_signed()
                                * ring_rd.data[16 * i:16 * i + 8].as_signed())
                     for i, lane in enumerate(products)]
        m.d.comb += [a_wr.en.eq(mac_out_valid | sum_valid),
                     a_wr.addr.eq(Mux(sum_valid, sum_k, mac_out_k)),
                     a_wr.data.eq(Mux(sum_valid, int_sums, mac_out))]
        mac_busy = (Cat(delay(m, float_issue, n, name=f"mac_busy_{n}", reset=True)
                        for n in range(1, mac_lat + 2)).any() | mac_valid["int"] | sum_valid)

        # ---- Attend: the results, head by head, after the last token ---------------------------
        drain_wait = Signal()                       # the last token is issued, results pending
        drain_active = Signal()
        dG, dnb = Signal.like(heads), Signal.like(nb)
        d_last_lane = Signal(range(F))
        dh, dbeat = Signal.like(heads), Signal.like(nb)
        dlane = Signal(range(F))
        daddr = Signal.like(ck)
        with m.If(attend_issue & token_end & (tok_left == 1)):
            m.d.sync += [drain_wait.eq(1), dG.eq(heads), dnb.eq(nb),
                         d_last_lane.eq((head_dim - 1)[:log_f] if log_f else 0)]
        with m.If(att_start & attend):
            m.d.sync += attend_active.eq(1)
        with m.If(drain_wait & ~mac_busy & (inflight == 0) & ~attend_issue):
            m.d.sync += [drain_wait.eq(0), drain_active.eq(1), dh.eq(0), dbeat.eq(0),
                         dlane.eq(0), daddr.eq(0)]
        drain_issue = drain_active & queue.can_issue
        head_done = (dbeat == dnb - 1) & (dlane == d_last_lane)
        drain_last = head_done & (dh == dG - 1)
        with m.If(drain_issue):
            with m.If(head_done):
                m.d.sync += [dh.eq(dh + 1), dbeat.eq(0), dlane.eq(0), daddr.eq(dh + 1)]
            with m.Elif(dlane == F - 1):
                m.d.sync += [dbeat.eq(dbeat + 1), dlane.eq(0), daddr.eq(daddr + dG)]
            with m.Else():
                m.d.sync += dlane.eq(dlane + 1)
            with m.If(drain_last):
                m.d.sync += [drain_active.eq(0), attend_active.eq(0)]
        m.d.comb += a_rd.addr.eq(Mux(drain_active, daddr, ck))
        drain_write = Signal()
        drain_lane = Signal(range(F))
        drain_final = Signal()
        m.d.sync += [drain_write.eq(drain_issue), drain_lane.eq(dlane),
                     drain_final.eq(drain_last)]

        # ---- results: in order ----------------------------------------------------------------
        out = Signal(y_layout(cfg))
        with m.If(float_done):
            m.d.comb += [out.value.eq(row.value), out.last.eq(row_final)]
        with m.Elif(groups.valid):
            m.d.comb += [out.value.eq(groups.value), out.last.eq(groups_final)]
        with m.Elif(int_done):
            m.d.comb += [out.value.eq(acc_sum), out.last.eq(i_final)]
        with m.Elif(drain_write):
            m.d.comb += [out.value.eq(a_rd.data.word_select(drain_lane, 32)),
                         out.last.eq(drain_final)]
        with m.Elif(error_write):
            m.d.comb += [out.error.eq(1), out.last.eq(1)]
        done = float_done | groups.valid | int_done | drain_write
        row_issue = (fire & beat.last) | (logit_issue & beat_end)
        m.d.comb += [queue.issue.eq(row_issue | drain_issue | error_write),
                     queue.w_en.eq(done | error_write), queue.w_data.eq(out)]
        m.d.sync += inflight.eq(inflight + (row_issue | drain_issue) - done)
        return m
