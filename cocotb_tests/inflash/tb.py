"""cocotb testbench of the KVNAND in-flash GEMV PE (``inflash``) on a behavioural flash plane.

The design's ``rd_cmd`` / ``rd_data`` ports are answered by :class:`~.plane.FlashPlane` (tR,
two-register page pipeline, page stream at ``transfer_bytes`` per cycle, per-block read
counters). ``cmd`` and ``x`` are driven with random idle cycles, ``y`` is back-pressured at
random, and the plane inserts random gaps in the page stream.

The model is fed by the monitors. A command seen on ``cmd`` opens a GEMV and expects its page
reads on ``rd_cmd`` (pages ``page .. page + n - 1``, the last one short:
:func:`golden.inflash.page_count`, :func:`golden.inflash.stream_bytes`). The ``x`` beats and the
page words the design actually took (the ``rd_data`` monitor) fill that GEMV's vector and byte
stream; as soon as a row's bytes and the whole vector are in, the row's output is
:func:`golden.inflash.gemv` of that row, queued on ``y``. A command the contract refuses expects
one ``error`` word. The stimulus only programs pages and sends commands and ``x``.

Tests: ``random_gemvs`` (every implemented mode; shapes that fill pages exactly and shapes that
do not, rows straddling pages, odd columns), ``corner_cases`` (special values, one element, the
plane's last page, the longest row, modes back to back), ``refused`` (every refusal rule between
good commands), ``full_rate`` (one GEMV per mode with no idle cycles, no back-pressure and no
gaps: page period and total cycles against :func:`golden.inflash.gemv_timing`). Every test ends
by comparing the plane's per-block read counters with :func:`golden.inflash.block_reads` of the
pages the commands name.
"""

from __future__ import annotations

import collections
import math
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from golden import inflash as golden
from golden.arith.float import from_float
from hdl.arith.format import BF16, FP16
from hdl.inflash.spec import IMPLEMENTED_MODES, Mode

from ..streams import PayloadCodec, Scoreboard, StreamMonitor
from ..tb import BlockTB, select_tb
from .plane import FlashPlane

#: Environment variables of the ``full_rate`` shape (benchmarks sweep them).
ENV_ROWS, ENV_COLS = "MEMWALL_INFLASH_ROWS", "MEMWALL_INFLASH_COLS"
_FMT = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}


class _Gemv:
    """One command as the monitors saw it, and what it still needs."""

    def __init__(self, tb: "InflashTB", cmd: dict):
        cfg = tb.component.cfg
        self.cmd = cmd
        self.mode = Mode(cmd["mode"]).name.lower()
        self.rows, self.cols = cmd["rows"], cmd["cols"]
        self.group = cfg.group_size
        self.page_bytes = cfg.page_bytes
        self.refused = is_refused(cfg, cmd)
        self.x: list[int] = []
        self.data = bytearray()
        self.done_rows = 0
        if self.refused:
            self.x_beats = self.size = 0
            return
        self.x_beats = -(-self.cols // cfg.fmacs)
        self.size = golden.stream_bytes(self.mode, self.rows, self.cols, group_size=self.group)
        self.row_bytes = self.size // self.rows

    def reads(self, page_bytes: int) -> list[dict]:
        """The page reads the contract asks for."""
        n = -(-self.size // page_bytes)
        return [{"page": self.cmd["page"] + k, "bytes": min(page_bytes, self.size - k * page_bytes)}
                for k in range(n)]

    def outputs(self) -> list[dict]:
        """The outputs whose inputs are all in and that were not queued yet."""
        if self.refused:
            self.done_rows = 1
            return [{"value": 0, "last": 1, "error": 1}]
        if len(self.x) < self.cols:
            return []
        ready = min(self.rows, len(self.data) // self.row_bytes)
        if ready <= self.done_rows:
            return []
        stream = np.frombuffer(bytes(self.data[self.done_rows * self.row_bytes:
                                               ready * self.row_bytes]), np.uint8)
        n = ready - self.done_rows
        if self.mode == "w8a8":
            w = golden.Weights(self.mode, stream.view(np.int8).reshape(n, self.cols))
            x = np.array(self.x[:self.cols], np.int64) & 0xFF
            x = np.where(x >= 128, x - 256, x)
        elif self.mode == "w4a16":
            # The records of these rows, read back through the golden layout (its page form).
            P = self.page_bytes
            padded = np.full(-(-len(stream) // P) * P, golden.ERASED, np.uint8)
            padded[:len(stream)] = stream
            w = golden.weights_from_pages(padded.reshape(-1, P), self.mode, n, self.cols,
                                          group_size=self.group)
            x = np.array(self.x[:self.cols], np.uint16)
        else:
            w = golden.Weights(self.mode, stream.view("<u2").reshape(n, self.cols))
            x = np.array(self.x[:self.cols], np.uint16)
        y = golden.gemv(w, x)
        out = [{"value": int(v) & 0xFFFFFFFF, "error": 0,
                "last": int(self.done_rows + i == self.rows - 1)} for i, v in enumerate(y)]
        self.done_rows = ready
        return out

    @property
    def complete(self) -> bool:
        return self.done_rows == (1 if self.refused else self.rows)


def is_refused(cfg, cmd: dict) -> bool:
    """The contract's refusal rules (docs/inflash.md section 3)."""
    rows, cols = cmd["rows"], cmd["cols"]
    if cmd["mode"] not in IMPLEMENTED_MODES or not 1 <= rows <= cfg.max_rows \
            or not 1 <= cols <= cfg.max_cols:
        return True
    mode = Mode(cmd["mode"]).name.lower()
    if mode == "w4a16" and cols % cfg.group_size:
        return True
    pages = golden.page_count(mode, rows, cols, group_size=cfg.group_size,
                              page_bytes=cfg.page_bytes)
    return cmd["page"] + pages > cfg.geometry.pages


class InflashTB(BlockTB):
    """``cmd`` and ``x`` driven, ``y`` checked, the plane on ``rd_cmd`` / ``rd_data``."""

    def __init__(self, dut, *, gaps: float = 0.2, **kwargs):
        super().__init__(dut, inputs=("cmd", "x"), outputs=("y",), **kwargs)
        cfg = self.component.cfg
        self.cfg, self.geometry = cfg, cfg.geometry
        self.F = cfg.fmacs
        codecs = {p: PayloadCodec(self.ports[f"{p}__payload"]) for p in ("rd_cmd", "rd_data")}
        self.plane = FlashPlane(dut, self.geometry, self.counter, codecs["rd_cmd"],
                                codecs["rd_data"], self.rng, gaps)
        self.read_board = Scoreboard("rd_cmd__payload", self.log)
        self.scoreboards["rd_cmd"] = self.read_board
        self.output_monitors["rd_cmd"] = StreamMonitor(dut, "rd_cmd", dut.clk, codecs["rd_cmd"],
                                                       self.counter, self.read_board.got,
                                                       dut.rst)
        self.data_monitor = StreamMonitor(dut, "rd_data", dut.clk, codecs["rd_data"],
                                          self.counter, self._on_data, dut.rst)
        self.gemvs: collections.deque[_Gemv] = collections.deque()
        self.named_pages: list[int] = []          # pages the accepted commands name, in order

    # --- model --------------------------------------------------------------------------------

    def model(self, stream, item):
        if stream == "cmd":
            gemv = _Gemv(self, item)
            self.gemvs.append(gemv)
            for read in gemv.reads(self.cfg.page_bytes):
                self.read_board.expect(read)
                self.named_pages.append(read["page"])
        else:
            gemv = self._open(lambda g: len(g.x) < g.x_beats * self.F, "an x beat")
            gemv.x.extend(item[f"data.{i}"] for i in range(self.F))
        return {"y": self._ready_outputs()}

    def _on_data(self, item, cycle):
        gemv = self._open(lambda g: len(g.data) < g.size, "a page word", cycle)
        gemv.data.extend(item[f"data.{j}"] for j in range(self.geometry.transfer_bytes))
        for expected in self._ready_outputs():
            self.scoreboards["y"].expect(expected)

    def _open(self, wants, what, cycle=None) -> _Gemv:
        for gemv in self.gemvs:
            if wants(gemv):
                return gemv
        raise AssertionError(f"cycle {cycle or self.counter.cycle}: the design took {what} "
                             f"that no command asks for")

    def _ready_outputs(self) -> list[dict]:
        out = []
        while self.gemvs:
            out += self.gemvs[0].outputs()
            if not self.gemvs[0].complete:
                break
            self.gemvs.popleft()
        return out

    async def drain(self, stall_cycles: int = 10_000):
        """Wait until every command's outputs are known (its page data are in), then until
        they have all come out (:meth:`BlockTB.drain`)."""
        for driver in self.drivers.values():
            await driver.wait_idle()
        last_progress, seen = self.counter.cycle, self.data_monitor.transfers
        while self.gemvs:
            if self.data_monitor.transfers != seen:
                last_progress, seen = self.counter.cycle, self.data_monitor.transfers
            elif self.counter.cycle - last_progress > stall_cycles:
                g = self.gemvs[0]
                raise AssertionError(f"cycle {self.counter.cycle}: no page word for "
                                     f"{stall_cycles} cycles; the oldest open GEMV {g.cmd} has "
                                     f"{len(g.data)} of {g.size} bytes and {len(g.x)} x "
                                     f"elements")
            await RisingEdge(self.clk)
        await super().drain(stall_cycles)

    # --- stimulus -----------------------------------------------------------------------------

    def weights(self, mode: str, rows: int, cols: int, scale_bits: int = 8) -> golden.Weights:
        rng = np.random.default_rng(self.rng.getrandbits(32))
        if mode == "w4a16":
            g = self.cfg.group_size
            shape = (rows, cols // g)
            return golden.Weights(mode, rng.integers(0, 16, (rows, cols)),
                                  from_float(rng.uniform(2 ** -8, 0.2, shape), FP16),
                                  from_float(rng.uniform(-1.5, 0.5, shape), FP16), g)
        if mode == "w8a8":
            return golden.Weights(mode, rng.integers(-128, 128, (rows, cols)))
        values = rng.standard_normal((rows, cols)) * 2.0 ** rng.integers(
            -scale_bits, scale_bits + 1, (rows, cols))
        return golden.Weights(mode, from_float(values, _FMT[mode]))

    def vector(self, mode: str, cols: int) -> np.ndarray:
        rng = np.random.default_rng(self.rng.getrandbits(32))
        if mode == "w8a8":
            return rng.integers(-128, 128, cols)
        return from_float(rng.standard_normal(cols), _FMT[mode])

    def gemv(self, mode: str, rows: int, cols: int, page: int | None = None, *, weights=None,
             x=None) -> int:
        """Program a matrix at ``page`` (random if not given), send its command and ``x``;
        return the first page."""
        size = golden.stream_bytes(mode, rows, cols, group_size=self.cfg.group_size)
        n = -(-size // self.cfg.page_bytes)
        if page is None:
            page = self.rng.randrange(self.geometry.pages - n + 1)
        w = weights if weights is not None else self.weights(mode, rows, cols)
        xv = np.asarray(x if x is not None else self.vector(mode, cols), np.int64)
        self.plane.program(page, golden.weight_pages(w, page_bytes=self.cfg.page_bytes))
        self.send("cmd", [{"mode": Mode[mode.upper()], "rows": rows, "cols": cols,
                           "page": page}])
        self.send_x(xv)
        return page

    def send_x(self, x: np.ndarray):
        F = self.F
        lanes = np.full(-(-len(x) // F) * F, 0x7E00, np.int64)    # a NaN past cols: ignored
        lanes[:len(x)] = x & 0xFFFF
        self.send("x", [{f"data.{i}": int(v) for i, v in enumerate(lanes[b:b + F])}
                        for b in range(0, len(lanes), F)])

    def command(self, mode: int, rows: int, cols: int, page: int):
        """Send a raw command (no pages, no x): for the refusal rules."""
        self.send("cmd", [{"mode": mode, "rows": rows, "cols": cols, "page": page}])

    def check_block_reads(self):
        want = golden.block_reads(self.geometry, np.array(self.named_pages, np.int64))
        got = self.plane.block_counts
        assert np.array_equal(got, want), \
            f"per-block reads {got.tolist()}, the commands name {want.tolist()}"
        assert self.plane.read_pages == self.named_pages, \
            f"pages read {self.plane.read_pages}, named {self.named_pages}"


def _tb(dut, **kwargs) -> InflashTB:
    return select_tb(dut, {"inflash": InflashTB}, **kwargs)


def _modes():
    return [Mode(m).name.lower() for m in IMPLEMENTED_MODES]


def _shapes(cfg, mode):
    """(rows, cols): exact page fills and not, straddling rows, one beat, odd columns; w4a16:
    one to four groups per row, records straddling pages, an exact fill."""
    P, F, M, g = cfg.page_bytes, cfg.fmacs, cfg.max_cols, cfg.group_size
    if mode == "w4a16":
        if g > M:
            return []
        record = golden.SCALE_BYTES + g // 2
        exact = P // math.gcd(P, record)          # records that fill whole pages
        cols = [c for c in (g, 2 * g, 3 * g, 4 * g) if c <= M]
        return [(1, g), (3, cols[-1]), (5, cols[min(2, len(cols) - 1)]),
                (max(1, exact // (cols[-1] // g)), cols[-1])]
    cols = min(M, P // 2)                 # fp16: one row is exactly one page
    return [(2, cols), (4, max(1, cols // 4)), (3, 5), (5, 13), (1, 1), (7, F + 1),
            (2, M), (3, max(1, M - 1))]


@cocotb.test()
async def random_gemvs(dut):
    """Every implemented mode on shapes that fill pages exactly and shapes that do not."""
    tb = _tb(dut)
    await tb.reset()
    for mode in _modes():
        for rows, cols in _shapes(tb.cfg, mode):
            rows = min(rows, tb.cfg.max_rows)
            if golden.page_count(mode, rows, cols, group_size=tb.cfg.group_size,
                                 page_bytes=tb.cfg.page_bytes) <= tb.geometry.pages:
                tb.gemv(mode, rows, cols)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def corner_cases(dut):
    """Special values, one element, the plane's last page, modes back to back."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    one, tiny, nzero = 0x3C00, 0x0C00, 0x8000            # fp16 1.0, 2**-12, -0
    special = np.array([[one, 0, tiny, tiny],             # 1 + 2**-23 (tree order)
                        [nzero, nzero, nzero, nzero],     # -0
                        [0x7C00, one, 0, 0],              # inf * 0: NaN
                        [0x7C00, 0x7C00, 0, 0],           # inf
                        [0xFC00, 0x7C00, 0, 0],           # inf - inf: NaN
                        [0x7BFF, 0x7BFF, 0x7BFF, 0x7BFF],  # large but finite in fp32
                        [0x0001, one, 0, 0]], np.uint16)  # a subnormal weight flushes
    tb.gemv("fp16", 7, 4, weights=golden.Weights("fp16", special),
            x=np.array([one, one, tiny, tiny]))
    # Rows of -0 products only, padded past the row's end (cols not a multiple of F).
    cols = cfg.fmacs + 1 if cfg.fmacs > 1 else 3
    tb.gemv("bf16", 2, cols, weights=golden.Weights("bf16", np.full((2, cols), 0x8000)),
            x=np.full(cols, 0x3F80))
    # int8 extremes: -128 * -128 summed over the longest row.
    M = cfg.max_cols
    tb.gemv("w8a8", 1, M, weights=golden.Weights("w8a8", np.full((1, M), -128)),
            x=np.full(M, -128))
    # w4a16: the largest codes, scales and offsets (sums overflow to infinities), a -0 offset.
    g = cfg.group_size
    if g <= M:
        G = M // g
        tb.gemv("w4a16", 2, M, weights=golden.Weights(
            "w4a16", np.full((2, M), 15), np.array([[0x7BFF] * G, [0x3C00] * G]),
            np.array([[0xFBFF] * G, [0x8000] * G]), g), x=np.full(M, 0x7BFF))
    # One element on the plane's last page, then modes alternating back to back.
    tb.gemv("fp16", 1, 1, page=tb.geometry.pages - 1)
    for mode in ("w8a8", "fp16", "w8a8", "bf16", "bf16", "w8a8"):
        tb.gemv(mode, 3, 7)
    if g <= M:
        for mode in ("w4a16", "fp16", "w4a16", "w4a16", "w8a8", "w4a16"):
            tb.gemv(mode, 2, g)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def refused(dut):
    """Every refusal rule answers one error word, in order, between GEMVs that still work."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    tb.gemv("fp16", 3, 5)
    tb.command(Mode.FP16, 0, 4, 0)                              # no rows
    tb.command(Mode.W8A8, 2, 0, 0)                              # no columns
    tb.command(Mode.FP16, cfg.max_rows + 1, 4, 0)               # too many rows
    tb.command(Mode.BF16, 1, cfg.max_cols + 1, 0)               # too many columns
    tb.command(Mode.W4A16, 1, cfg.group_size + 1, 0)            # cols not a multiple of g
    tb.command(Mode.FP16, 2, cfg.max_cols, tb.geometry.pages - 1)   # past the last page
    tb.gemv("w8a8", 2, 9)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def full_rate(dut):
    """One GEMV per mode, no idle cycles, no back-pressure, no gaps: page period and total
    cycles against golden.inflash.gemv_timing."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, gaps=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg, geo = tb.cfg, tb.geometry
    P = cfg.page_bytes
    rows = int(os.environ.get(ENV_ROWS, 0))
    cols = int(os.environ.get(ENV_COLS, 0)) or min(cfg.max_cols, P // 2)
    figures = {}
    for mode in _modes():
        if mode == "w4a16" and cols % cfg.group_size:
            continue
        # At least 12 full pages (the steady state), capped by the plane and max_rows.
        row_bytes = golden.stream_bytes(mode, 1, cols, group_size=cfg.group_size)
        n_rows = rows or min(cfg.max_rows, max(1, -(-12 * P // row_bytes)))
        first_read = len(tb.plane.read_start)
        tb.gemv(mode, n_rows, cols, page=0)
        await tb.drain()
        pe_latency = tb.component.pe_latency(Mode[mode.upper()])
        timing = golden.gemv_timing(geo, mode, n_rows, cols, group_size=cfg.group_size,
                                    pe_latency=pe_latency)
        starts = np.array(tb.plane.stream_start[first_read:])
        assert len(starts) == timing.pages, f"{mode}: {len(starts)} pages streamed, " \
                                            f"{timing.pages} expected"
        t0 = tb.plane.read_start[first_read]
        total = tb.output_monitors["y"].last_cycle - t0 + 1
        # Steady state: from the second page on (the first one may wait for x). Pages whose
        # rows or records fall differently take different times, so the mean period is
        # compared with the model's mean over the same pages (its bound is timing.period).
        first = 1 if len(starts) > 2 else 0
        steady = starts[first:]
        model = timing.stream_start[first:]
        period = (steady[-1] - steady[0]) / (len(steady) - 1) if len(steady) > 1 else 0.0
        model_period = (model[-1] - model[0]) / (len(model) - 1) if len(model) > 1 else 0.0
        compute = int(timing.compute.max())
        figures[mode] = {
            "rows": n_rows, "cols": cols, "pages": timing.pages, "tR": timing.tR,
            "transfer": int(timing.transfer.max()), "compute": compute,
            "period": round(float(period), 2), "model_period": round(float(model_period), 2),
            "period_bound": timing.period,
            "period_min": int(np.diff(steady).min()) if len(steady) > 1 else 0,
            "period_max": int(np.diff(steady).max()) if len(steady) > 1 else 0,
            "total": int(total), "model_total": timing.total, "excess": int(total - timing.total),
            "first_stream": int(starts[0] - t0), "pe_latency": pe_latency}
        tb.log.info("%s: page starts %s", mode, (starts - t0).tolist())
        if len(starts) > 1:
            assert abs(period - model_period) <= 0.01 * model_period, \
                f"{mode}: page period {period:.2f} cycles, model {model_period:.2f} (over 1%)"
        assert total <= timing.total + compute, \
            f"{mode}: {total} cycles, model {timing.total} + one page compute {compute}"
        assert starts[0] - t0 == timing.tR, \
            f"{mode}: first page streamed {starts[0] - t0} cycles after its read, not tR"
    # The benchmark table's columns (cocotb_tests/bench.py): the fp16 GEMV's beats over its
    # total cycles (PE utilization) and its latency.
    fp16 = figures["fp16"]
    beats = fp16["rows"] * -(-fp16["cols"] // cfg.fmacs)
    tb.report("full_rate", items=beats, cycles=fp16["total"],
              per_cycle=round(beats / fp16["total"], 4), latency=fp16["pe_latency"],
              latency_meaning="last page word to last y (inflash, fp16)",
              **{f"{m}_{k}": v for m, f in figures.items() for k, v in f.items()})
    tb.check_block_reads()
