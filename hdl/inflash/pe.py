"""The KVNAND in-flash GEMV PE: page reads, ``x`` broadcast, gearbox, ``F``-lane dot products."""

from __future__ import annotations

import struct

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.fdot import FloatDot
from ..arith.format import BF16, FP16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmul import FloatMultiplier
from ..arith.idot import IntDot
from ..arith.tree import delay, serial_tree, tree_levels, unit_combine
from ..pipeline import ResultQueue
from .gearbox import Gearbox
from .spec import (IMPLEMENTED_MODES, FlashGeometry, Mode, PEConfig, command_layout,
                   page_data_layout, read_layout, x_layout, y_layout)

__all__ = ["InflashPE"]

#: fp32 ``-0``: the identity of the serial beat tree (``x + -0 = x`` for every ``x``).
_NEG_ZERO32 = 0x80000000
#: Cycles from a ``y`` result written into the output queue to ``y.valid`` (SyncFIFOBuffered).
_QUEUE_LATENCY = 2
#: fp16 1.0: the weight of the lanes that sum ``x`` into the w4a16 group sums ``X``.
_ONE16 = 0x3C00
#: fp16 codes of the uint4 weight codes 0 .. 15 (``int_to_float(q, 5, FP16)``, exact).
_INT4_FP16 = [struct.unpack("<H", struct.pack("<e", q))[0] for q in range(16)]
#: The arithmetic paths; a GEMV starts on a path when the rows of the other paths are out.
_FLOAT, _INT, _W4 = range(3)


class InflashPE(wiring.Component):
    """Compute ``y = W x`` with the weights read page by page from one flash plane.

    A command names the mode, the shape and the first page of a weight matrix laid out as
    ``golden.inflash.weight_pages`` lays it out. The PE takes the command, reads
    ``x`` into its buffer while it issues the matrix's page reads in order, cuts the page
    stream into beats of ``F`` elements of one row (:class:`~hdl.inflash.gearbox.Gearbox`), and
    sends one output per row: ``golden.inflash.gemv`` bit for bit.

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

    Parameters
    ----------
    geometry : FlashGeometry
        The plane (page size, transfer width, FMAC count ``F``, pages).
    max_rows, max_cols : int
        Largest matrix shape (:class:`~hdl.inflash.spec.PEConfig`).
    group_size : int
        ``g`` of the w4a16 mode (:class:`~hdl.inflash.spec.PEConfig`).

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        One GEMV: ``mode`` (:class:`~hdl.inflash.spec.Mode`), ``rows``, ``cols``, first
        ``page``. Taken when the previous GEMV's last beat has entered the arithmetic.
    x : In(stream.Signature(x_layout(cfg)))
        After each accepted command, ``ceil(cols / F)`` beats of ``x``; lanes past ``cols``
        are ignored. Beat ``b`` of the first row waits for ``x`` beat ``b`` (w4a16: for the
        whole of ``x``; and ``x`` of a w4a16 GEMV is taken when the previous GEMV's rows are
        out, since its group sums replace the previous ones).
    rd_cmd : Out(stream.Signature(read_layout(cfg)))
        Page reads to the plane: pages ``page .. page + n - 1`` in order, ``bytes = page_bytes``
        except for the last page (the rest of the stream). Issued as fast as the plane takes
        them; the plane accepts a read when its data register is free (docs/inflash.md).
    rd_data : In(stream.Signature(page_data_layout(cfg)))
        The pages' bytes, ``W`` per transfer, in read order; back-pressured by the gearbox.
    y : Out(stream.Signature(y_layout(cfg)))
        ``rows`` outputs per GEMV in row order (fp32 codes or int32), ``last`` on the final one.

    Refused commands (no page read, no ``x`` beat; one ``y`` word with ``error`` and ``last``,
    after every earlier output): ``rows`` or ``cols`` of 0 or above the maximum, w4a16 with
    ``cols`` not a multiple of ``group_size``, or pages beyond the plane's last page.

    Throughput: one beat (``F`` elements) per cycle and ``W`` bytes per cycle at once; the page
    period is ``max(tR, transfer, compute)`` as in ``golden.inflash.gemv_timing``. Latency:
    :attr:`latency` cycles from the last page word to the last ``y``.
    """

    def __init__(self, *, geometry: FlashGeometry, max_rows: int, max_cols: int,
                 group_size: int = 128):
        self.cfg = cfg = PEConfig(geometry=geometry, max_rows=max_rows, max_cols=max_cols,
                                  group_size=group_size)
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
        add, mul = FloatAdder(FP32), FloatMultiplier(FP16, FP32, FP32)
        for unit in (*dots, add, mul):
            unit._MustUse__used = True
        return dots[0].latency, dots[1].latency, add.latency, mul.latency

    @property
    def tree_latency(self) -> int:
        """Cycles of the serial beat tree: ``ceil(log2(max_cols / F))`` adder latencies."""
        return tree_levels(self.cfg.max_beats) * self._units()[2]

    @property
    def float_latency(self) -> int:
        """Cycles from a row's last beat leaving the gearbox to its result in the output queue:
        the beat register, the ``FloatDot`` and the serial tree."""
        return 1 + self._units()[0] + self.tree_latency

    @property
    def w4_latency(self) -> int:
        """The same for w4a16: the float path to a group's ``D``, the epilogue
        ``fadd(fmul(s, D), fmul(o, X))`` and the serial tree over the row's groups."""
        _, _, add, mul = self._units()
        return self.float_latency + mul + add + tree_levels(self.cfg.max_groups) * add

    @property
    def int_latency(self) -> int:
        """The same for w8a8: the beat register and the ``IntDot`` (the sum is combinational)."""
        return 1 + self._units()[1]

    @property
    def latency(self) -> int:
        """Cycles from the transfer of a float matrix's last page word to its last ``y``
        transfer, with no back-pressure: one into the gearbox, :attr:`float_latency`, and the
        output queue. The ``pe_latency`` of ``golden.inflash.gemv_timing``."""
        return self.pe_latency(Mode.FP16)

    def pe_latency(self, mode: Mode) -> int:
        """:attr:`latency` for a GEMV in ``mode`` (w8a8 takes the shorter integer path)."""
        path = {Mode.W8A8: self.int_latency, Mode.W4A16: self.w4_latency}.get(
            Mode(mode), self.float_latency)
        return 1 + path + _QUEUE_LATENCY

    @property
    def queue_depth(self) -> int:
        """Output queue places: enough for one result per cycle (rows of at most ``F``
        columns) behind the longest pipeline."""
        return max(self.float_latency, self.w4_latency) + 4

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        F, P, g = cfg.fmacs, cfg.page_bytes, cfg.group_size
        log_f = F.bit_length() - 1
        log_p = P.bit_length() - 1
        log_g = g.bit_length() - 1
        group_beats = g // F
        m.submodules.gearbox = gearbox = Gearbox(cfg)
        wiring.connect(m, wiring.flipped(self.rd_data), gearbox.i)
        queue = ResultQueue(m, self.y, depth=self.queue_depth, name="y_queue")

        # ---- command: latch, size, check ------------------------------------------------------
        c = self.cmd.payload
        mode = Signal(2)
        rows = Signal(cfg.rows_bits)
        cols = Signal(cfg.cols_bits)
        page = Signal(cfg.page_bits)
        size = Signal(cfg.stream_bits)              # bytes of the matrix's page stream
        pages = Signal(cfg.stream_bits)
        m.d.comb += pages.eq((size + P - 1) >> log_p)
        remaining = Signal(cfg.stream_bits)         # bytes still to be read
        next_page = Signal(cfg.page_bits)
        x_left = Signal(range(cfg.max_beats + 1))   # x beats still to be taken
        x_addr = Signal(range(cfg.max_beats))
        inflight = Signal(range(self.queue_depth + 1))   # rows in the arithmetic
        error_write = Signal()
        x_start = Signal()                          # the GEMV's x, pages and beats begin
        bad = Signal()
        implemented = Cat(mode == code for code in IMPLEMENTED_MODES).any()
        m.d.comb += bad.eq((rows == 0) | (rows > cfg.max_rows) | (cols == 0)
                           | (cols > cfg.max_cols) | ~implemented
                           | ((mode == Mode.W4A16) & (cols[:log_g] != 0))
                           | (page + pages > cfg.geometry.pages))
        idle = ~gearbox.o.valid & gearbox.job.ready & (remaining == 0) & (x_left == 0)
        with m.FSM(name="command"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(idle)
                with m.If(self.cmd.valid & idle):
                    m.d.sync += [mode.eq(c.mode), rows.eq(c.rows), cols.eq(c.cols),
                                 page.eq(c.page)]
                    m.next = "SIZE"
            with m.State("SIZE"):
                # One multiplication per GEMV: rows x cols x (bytes per element); w4a16 has
                # half a byte per code and a 4-byte header per g codes.
                product = rows * cols
                with m.Switch(mode):
                    with m.Case(Mode.W8A8):
                        m.d.sync += size.eq(product)
                    with m.Case(Mode.W4A16):
                        m.d.sync += size.eq((product >> 1) + (product >> (log_g - 2)))
                    with m.Default():
                        m.d.sync += size.eq(product << 1)
                m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(bad):
                    m.next = "REFUSE"
                # w4a16: the group sums X of the previous GEMV must be used up first.
                with m.Elif((mode != Mode.W4A16) | (inflight == 0)):
                    m.d.comb += x_start.eq(1)
                    m.d.comb += gearbox.job.valid.eq(1)
                    m.d.sync += [remaining.eq(size), next_page.eq(page),
                                 x_left.eq(((cols - 1) >> log_f) + 1), x_addr.eq(0)]
                    m.next = "IDLE"
            with m.State("REFUSE"):
                # After every earlier result, so that answers keep command order.
                with m.If((inflight == 0) & queue.can_issue):
                    m.d.comb += error_write.eq(1)
                    m.next = "IDLE"
        m.d.comb += [gearbox.job.payload.mode.eq(mode), gearbox.job.payload.rows.eq(rows),
                     gearbox.job.payload.cols.eq(cols), gearbox.job.payload.bytes.eq(size)]

        # ---- page reads: in order, as fast as the plane takes them ------------------------------
        r = self.rd_cmd.payload
        m.d.comb += [self.rd_cmd.valid.eq(remaining != 0), r.page.eq(next_page),
                     r.bytes.eq(Mux(remaining >= P, P, remaining))]
        with m.If(self.rd_cmd.valid & self.rd_cmd.ready):
            m.d.sync += [remaining.eq(remaining - r.bytes), next_page.eq(next_page + 1)]

        # ---- x: broadcast into the buffer, word b holds elements b F .. b F + F - 1 -------------
        m.submodules.xmem = xmem = Memory(shape=16 * F, depth=cfg.max_beats, init=[])
        x_wr = xmem.write_port()
        x_rd = xmem.read_port()
        m.d.comb += [self.x.ready.eq(x_left != 0), x_wr.addr.eq(x_addr),
                     x_wr.data.eq(self.x.payload.data.as_value()),
                     x_wr.en.eq(self.x.valid & self.x.ready)]
        x_take = self.x.valid & self.x.ready
        with m.If(x_take):
            m.d.sync += [x_left.eq(x_left - 1), x_addr.eq(x_addr + 1)]
        # w4a16: the x beats also go through the fp16 lanes with weights 1.0 (X[j]).
        xs_valid = Signal()
        xs_data = Signal(16 * F)
        xs_end = Signal()
        m.d.sync += [xs_valid.eq(x_take & (mode == Mode.W4A16)),
                     xs_data.eq(self.x.payload.data.as_value()),
                     xs_end.eq((x_addr & (group_beats - 1)) == group_beats - 1)]

        # ---- beats into the arithmetic ----------------------------------------------------------
        # The float and integer paths have different latencies: a GEMV on the other path starts
        # only when the rows of the previous one are out, so results stay in command order.
        beat = gearbox.o.payload
        is_int = Signal()
        is_w4 = Signal()
        path = Signal(2)
        m.d.comb += [is_int.eq(mode == Mode.W8A8), is_w4.eq(mode == Mode.W4A16),
                     path.eq(Mux(is_int, _INT, Mux(is_w4, _W4, _FLOAT)))]
        last_path = Signal(2)
        path_free = (path == last_path) | (inflight == 0)
        # Beat b needs x word b only: the first row starts while x is still coming in (w4a16
        # waits for all of x: its lanes are computing the group sums meanwhile).
        x_there = (x_left == 0) | ((beat.beat < x_addr) & ~is_w4)
        m.submodules.headers = headers = SyncFIFO(width=32, depth=self.float_latency // 2 + 2)
        m.d.comb += gearbox.o.ready.eq(x_there & path_free & (~beat.last | queue.can_issue)
                                       & (~beat.header | headers.w_rdy))
        fire = gearbox.o.valid & gearbox.o.ready
        row_issue = fire & beat.last
        m.d.comb += [x_rd.addr.eq(beat.beat), headers.w_en.eq(fire & beat.header),
                     headers.w_data.eq(Cat(beat.scale, beat.offset))]
        with m.If(fire):
            m.d.sync += last_path.eq(path)
        codes = Array(Const(c, 16) for c in _INT4_FP16)
        w4_lanes = Cat(codes[beat.data[i][:4]] for i in range(F))

        w_reg = Signal(16 * F)
        mask_reg = Signal(F)
        first_reg, last_reg, final_reg = Signal(), Signal(), Signal()
        valid = {name: Signal(name=f"{name}_valid") for name in ("fp16", "bf16", "int")}
        gend_reg, w4_reg = Signal(), Signal()
        computes = fire
        m.d.sync += [w_reg.eq(Mux(is_w4, w4_lanes, beat.data.as_value())),
                     mask_reg.eq(beat.mask), first_reg.eq(beat.first), last_reg.eq(beat.last),
                     final_reg.eq(beat.final), gend_reg.eq(beat.group_end), w4_reg.eq(is_w4),
                     valid["fp16"].eq(computes & ((mode == Mode.FP16) | is_w4)),
                     valid["bf16"].eq(computes & (mode == Mode.BF16)),
                     valid["int"].eq(computes & is_int)]
        # Lanes past the row's end: x = +0 (float, against a -0 weight) or 0 (int).
        x_lanes = Cat(Mux(mask_reg[i], x_rd.data[16 * i:16 * (i + 1)], 0) for i in range(F))

        # ---- float modes: F-lane dot per beat, serial pairwise tree per row --------------------
        # (w4a16: a group is a "row" of this tree; x beats go to their own group tree.)
        sums = []
        for name, fmt in (("fp16", FP16), ("bf16", BF16)):
            dot = FloatDot(fmt, F, FP32)
            m.submodules[f"dot_{name}"] = dot
            m.d.comb += [dot.i.valid.eq(valid[name]), dot.i.payload.a.eq(w_reg),
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

        # ---- w8a8: F-lane integer dot per beat, int32 accumulator per row ----------------------
        m.submodules.idot = idot = IntDot(F, a_bits=8, b_bits=8, acc_bits=32)
        m.d.comb += [idot.i.valid.eq(valid["int"])]
        for i in range(F):
            m.d.comb += [idot.i.payload.a[i].eq(w_reg[16 * i:16 * i + 8]),
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

        # ---- results: one per row, in order ---------------------------------------------------
        out = Signal(y_layout(cfg))
        with m.If(float_done):
            m.d.comb += [out.value.eq(row.value), out.last.eq(row_final)]
        with m.Elif(groups.valid):
            m.d.comb += [out.value.eq(groups.value), out.last.eq(groups_final)]
        with m.Elif(int_done):
            m.d.comb += [out.value.eq(acc_sum), out.last.eq(i_final)]
        with m.Elif(error_write):
            m.d.comb += [out.error.eq(1), out.last.eq(1)]
        done = float_done | groups.valid | int_done
        m.d.comb += [queue.issue.eq(row_issue | error_write), queue.w_en.eq(done | error_write),
                     queue.w_data.eq(out)]
        m.d.sync += inflight.eq(inflight + row_issue - done)
        return m
