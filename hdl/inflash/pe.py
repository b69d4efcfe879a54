"""The KVNAND in-flash PE: page reads, ``x`` broadcast, gearbox, ``F``-lane dot products and
multiply-accumulates; GEMV on weight pages, Logit and Attend on the KV pages of one head.

The PE is a short parent wiring named sub-components (docs/inflash.md, section 4):
:class:`~.setup.CommandSetup`, :class:`~.reader.PageReader`, :class:`~.gearbox.Gearbox`,
:class:`~.xbuffer.XBuffer`, :class:`~.issuer.Issuer`, :class:`~.lanes.DotLanes`,
:class:`~.epilogue.GroupEpilogue`, :class:`~.accumulators.AttendAccumulators` and
:class:`~.results.ResultPath`.
"""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .accumulators import AttendAccumulators
from .epilogue import GroupEpilogue
from .gearbox import Gearbox
from .issuer import Issuer
from .lanes import DotLanes
from .reader import PageReader
from .results import ResultPath
from .setup import CommandSetup
from .spec import (FlashGeometry, Mode, Op, PEConfig, command_layout, page_data_layout,
                   read_layout, x_layout, y_layout)
from .xbuffer import XBuffer

__all__ = ["InflashPE"]


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

    # --- latencies, from the sub-components' ----------------------------------------------

    @property
    def tree_latency(self) -> int:
        """Cycles of the serial beat tree: ``ceil(log2(max_cols / F))`` adder latencies."""
        return DotLanes.tree_latency_of(self.cfg)

    @property
    def float_latency(self) -> int:
        """Cycles from a row's last beat leaving the gearbox (or a Logit's last issue) to its
        result in the output queue: the issue register, the ``FloatDot`` and the serial tree."""
        return Issuer.latency + DotLanes.float_latency_of(self.cfg)

    @property
    def w4_latency(self) -> int:
        """The same for w4a16: the float path to a group's ``D``, the epilogue
        ``fadd(fmul(s, D), fmul(o, X))`` and the serial tree over the row's groups."""
        return self.float_latency + GroupEpilogue.latency_of(self.cfg)

    @property
    def int_latency(self) -> int:
        """The same for w8a8: the issue register and the ``IntDot`` (the sum is
        combinational)."""
        return Issuer.latency + DotLanes.int_latency_of(self.cfg)

    @property
    def acc_loop(self) -> int:
        """Cycles between two updates of one Attend accumulator, at least: the latency of a
        :class:`~hdl.arith.fpmac.FloatMAC` (``golden.inflash.ACC_LOOP``). The accumulator
        memory's read is hidden by a bypass from the MAC's output."""
        return AttendAccumulators.acc_loop_of(self.cfg)

    @property
    def latency(self) -> int:
        """Cycles from the transfer of a float matrix's last page word to its last ``y``
        transfer, with no back-pressure: the read data's register (1), the gearbox (2),
        :attr:`float_latency`, and the output queue. The ``pe_latency`` of
        ``golden.inflash.gemv_timing``."""
        return self.pe_latency(Mode.FP16)

    def pe_latency(self, mode: Mode, op: Op = Op.GEMV, *, query_heads: int = 1,
                   head_dim: int = 1, last_page: tuple[int, int] | None = None) -> int:
        """Cycles from the model's end of a command's last page to its last ``y`` (no
        back-pressure): the ``pe_latency`` of ``golden.inflash.gemv_timing`` and
        ``attention_timing``, whose last page ends ``max(transfer, compute)`` cycles after it
        enters the cache register.

        GEMV: the page reader's register (:attr:`~hdl.inflash.reader.PageReader.latency`, 1),
        the gearbox (:attr:`~hdl.inflash.gearbox.Gearbox.latency`, 2: into its buffer and its
        output register), the path (:attr:`float_latency`, :attr:`int_latency` for w8a8,
        :attr:`w4_latency`), the output queue.

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
        register, one cycle from a beat to its issue, and Logit: the GEMV's path (the issue
        registers, the dot product, the tree) and the queue; Attend: the issue registers
        (:attr:`~hdl.inflash.issuer.Issuer.latency`; the accumulator is read between them), the
        MAC (:attr:`acc_loop`; int8: one product stage), a cycle to start the drain and its
        :attr:`~hdl.inflash.accumulators.AttendAccumulators.drain_latency` to the first result, the
        ``G d`` results one per cycle and the queue.
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
            return PageReader.latency + Gearbox.latency + path + ResultPath.latency
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
        lag += PageReader.latency + Gearbox.latency - 1     # the read data's register, the
        # gearbox's output register
        if op == Op.LOGIT:
            path = self.int_latency if mode == Mode.W8A8 else self.float_latency
            return lag + 1 + path + ResultPath.latency
        # beat -> issue (1), the issue registers (the accumulator is read between them), MAC,
        # drain start, its first result, G d words, the queue.
        return (lag + 1 + Issuer.latency + mac + 1 + AttendAccumulators.drain_latency
                + query_heads * head_dim + ResultPath.latency)

    @property
    def queue_depth(self) -> int:
        """Output queue places: enough for one result per cycle (rows of at most ``F``
        columns) behind the longest pipeline."""
        return max(self.float_latency, self.w4_latency) + 4

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.setup = setup = CommandSetup(cfg)
        m.submodules.reader = reader = PageReader(cfg)
        m.submodules.gearbox = gearbox = Gearbox(cfg)
        m.submodules.xbuf = xbuf = XBuffer(cfg)
        m.submodules.issuer = issuer = Issuer(cfg, header_depth=self.float_latency // 2 + 2,
                                              acc_loop=self.acc_loop)
        m.submodules.lanes = lanes = DotLanes(cfg)
        m.submodules.epilogue = epilogue = GroupEpilogue(cfg)
        m.submodules.accumulators = acc = AttendAccumulators(cfg)
        m.submodules.results = results = ResultPath(cfg, depth=self.queue_depth)
        plan = setup.plan

        # ---- the ports ---------------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.cmd), setup.cmd)
        wiring.connect(m, wiring.flipped(self.x), xbuf.x)
        wiring.connect(m, reader.rd_cmd, wiring.flipped(self.rd_cmd))
        wiring.connect(m, wiring.flipped(self.rd_data), reader.rd_data)
        wiring.connect(m, results.y, wiring.flipped(self.y))

        # ---- the streams between the sub-components ------------------------------------------
        wiring.connect(m, setup.job, gearbox.job)
        wiring.connect(m, reader.words, gearbox.i)
        wiring.connect(m, gearbox.o, issuer.beats)
        wiring.connect(m, issuer.headers, epilogue.headers)
        wiring.connect(m, xbuf.sums, lanes.xs)
        wiring.connect(m, lanes.xsum, epilogue.xsum)
        wiring.connect(m, lanes.dsum, epilogue.dsum)
        wiring.connect(m, lanes.floats, results.floats)
        wiring.connect(m, epilogue.groups, results.groups)
        wiring.connect(m, lanes.ints, results.ints)
        wiring.connect(m, acc.results, results.drains)

        # ---- the command, its start and the order of results ---------------------------------
        # A command is taken once the previous one's beats, reads and x are all taken.
        m.d.comb += [setup.idle.eq(~gearbox.o.valid & gearbox.job.ready & ~reader.busy
                                   & xbuf.done & ~issuer.busy),
                     setup.drained.eq(results.drained), setup.attend_busy.eq(acc.busy),
                     setup.can_refuse.eq(results.can_issue),
                     reader.plan.eq(plan), xbuf.plan.eq(plan), issuer.plan.eq(plan),
                     acc.plan.eq(plan),
                     reader.gemv_start.eq(setup.gemv_start), reader.att_start.eq(setup.att_start),
                     xbuf.gemv_start.eq(setup.gemv_start), xbuf.att_start.eq(setup.att_start),
                     issuer.gemv_start.eq(setup.gemv_start), issuer.att_start.eq(setup.att_start),
                     acc.start.eq(setup.att_start & (plan.op == Op.ATTEND)),
                     epilogue.restart.eq(setup.gemv_start & (plan.mode == Mode.W4A16)),
                     results.refuse.eq(setup.refuse)]

        # ---- issues: x, the queue's credits, the accumulators ----------------------------------
        m.d.comb += [issuer.x_count.eq(xbuf.count), issuer.x_done.eq(xbuf.done),
                     issuer.x_take.eq(xbuf.take), issuer.x_done_next.eq(xbuf.done_next),
                     issuer.p_ready.eq(xbuf.p_ready), xbuf.rd_addr.eq(issuer.x_addr),
                     issuer.x_data.eq(xbuf.rd_data), xbuf.p_release.eq(issuer.p_release),
                     issuer.can_issue.eq(results.can_issue), issuer.drained.eq(results.drained),
                     issuer.attend_busy.eq(acc.busy),
                     lanes.i.eq(issuer.o), acc.i.eq(issuer.o), acc.k.eq(issuer.read_k),
                     acc.attend_end.eq(issuer.attend_end), acc.drained.eq(results.drained),
                     acc.can_issue.eq(results.can_issue),
                     results.row_issue.eq(issuer.row_issue),
                     results.drain_issue.eq(acc.drain_issue)]
        return m
