"""cocotb testbench of the KVNAND in-flash PE (``inflash``) on a behavioural flash plane: GEMV
on weight pages, Logit and Attend on KV pages.

The design's ``rd_cmd`` / ``rd_data`` ports are answered by :class:`~.plane.FlashPlane` (tR,
two-register page pipeline, page stream at ``transfer_bytes`` per cycle, per-block read
counters). ``cmd`` and ``x`` are driven with random idle cycles, ``y`` is back-pressured at
random, and the plane inserts random gaps in the page stream.

The model is fed by the monitors. A command seen on ``cmd`` opens a GEMV or an attention
command and expects its page reads on ``rd_cmd``: GEMV, pages ``page .. page + n - 1``, the
last one short (:func:`golden.inflash.page_count`, :func:`golden.inflash.stream_bytes`);
Logit and Attend, the pages of the head's walk with the head's entries of each
(:func:`golden.inflash.kv_address`, :func:`kv_reads`). The ``x`` beats and the bytes of the page
reads the design actually took (the ``rd_data`` monitor, each read cut to its size) fill that
command's vector (the query vectors, the attention weights) and byte stream. As soon as a row's
bytes and the whole vector are in, the row's output is :func:`golden.inflash.gemv` of that row;
a token's entry gives its ``G`` Logit scores (:func:`golden.inflash.logit`); the last token's
entry and weights give the Attend sums (:func:`golden.inflash.attend`). A command the contract
refuses expects one ``error`` word. The stimulus only programs pages and sends commands and
``x``.

Tests: ``random_gemvs`` (every implemented mode; shapes that fill pages exactly and shapes that
do not, rows straddling pages, odd columns), ``corner_cases`` (special values, one element, the
plane's last page, the longest row, modes back to back), ``refused`` (every refusal rule between
good commands), ``full_rate`` (one GEMV per mode with no idle cycles, no back-pressure and no
gaps: page period and total cycles against :func:`golden.inflash.gemv_timing`);
``random_attention`` (Logit and Attend, MHA and GQA, fp16, bf16 and int8, page-level and naive
mappings, sequences that fill pages exactly and not, between GEMVs), ``attention_refusals``
(every attention refusal rule), ``attention_pipeline`` (Logit and Attend with no idle cycles:
pages, period and total against :func:`golden.inflash.attention_timing`, and the page reads of
both mappings against :func:`golden.inflash.kv_pages_read`). Every test ends by comparing the
plane's per-block read counters with :func:`golden.inflash.block_reads` of the pages the
commands name.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from golden import inflash as golden
from golden.arith.float import from_float
from hdl.arith.format import BF16, FP16
from hdl.inflash.gearbox import Gearbox
from hdl.inflash.reader import PageReader
from hdl.inflash.spec import (ATTENTION_MODES, IMPLEMENTED_MODES, MAX_KV_HEADS, MAX_LAYERS,
                              MAX_TOKENS, Mapping, Mode, Op, WriteError)

from ..functional import sampler
from ..streams import PayloadCodec, Scoreboard, StreamMonitor, StreamSink, to_signed
from ..tb import BlockTB, select_tb
from .kvstream import check_kv_write, entries_of, kv_command, kv_words
from .plane import FlashPlane, kv_reads

#: Environment variables of the ``full_rate`` shape (benchmarks sweep them).
ENV_ROWS, ENV_COLS = "MEMWALL_INFLASH_ROWS", "MEMWALL_INFLASH_COLS"
#: The modes ``full_rate`` runs (comma-separated; default all).
ENV_MODES = "MEMWALL_INFLASH_MODES"
#: The plane's ``tR`` in microseconds, in place of the design's parameter (benchmarks: the RTL
#: never counts ``tR``, so one build serves every ``tR``; the golden timing takes the same).
ENV_TR_US = "MEMWALL_INFLASH_TR_US"
#: The ``attention_reads`` command, JSON: ``op``, ``tokens``, ``group``, ``mapping``,
#: ``layers``, ``kv_heads``, ``head_dim`` (fp16).
ENV_ATTENTION = "MEMWALL_INFLASH_ATTENTION"
_FMT = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}
#: KV formats of Logit and Attend by ``Mode`` code.
_KV_FORMAT = {Mode.FP16: "fp16", Mode.BF16: "bf16", Mode.W8A8: "int8"}


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
        sizes = [min(page_bytes, self.size - k * page_bytes) for k in range(n)]
        return [{"page": self.cmd["page"] + k, "column": 0, "bytes": b, "run": b, "stride": b}
                for k, b in enumerate(sizes)]

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
            x = to_signed(np.array(self.x[:self.cols], np.int64), 8)
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


class _Attention:
    """One Logit or Attend command as the monitors saw it, and what it still needs."""

    def __init__(self, tb: "InflashTB", cmd: dict):
        cfg = tb.component.cfg
        self.cmd, self.F = cmd, cfg.fmacs
        self.op = Op(cmd["op"])
        self.refused = is_refused(cfg, cmd)
        self.x: list[int] = []
        self.data = bytearray()
        self.done = 0                       # outputs queued: tokens (Logit), 0 or 1 (Attend)
        if self.refused:
            self.x_beats = self.size = 0
            return
        self.fmt = _KV_FORMAT[Mode(cmd["mode"])]
        self.T, self.G, self.d = cmd["tokens"], cmd["query_heads"], cmd["head_dim"]
        self.layout = kv_layout(cfg, cmd)
        self.kind = golden.K if self.op == Op.LOGIT else golden.V
        self.nb = -(-self.d // self.F)
        self.pb = -(-self.G // self.F)
        self.x_beats = self.G * self.nb if self.op == Op.LOGIT else self.T * self.pb
        self.entry = self.layout.entry_bytes
        self.size = self.T * self.entry

    def reads(self, page_bytes: int) -> list[dict]:
        if self.refused:
            return []
        return kv_reads(self.layout, self.T, self.cmd["layer"], self.cmd["head"], self.kind,
                        self.cmd["page"])

    def _codes(self, raw: list[int]) -> np.ndarray:
        arr = np.array(raw, np.int64)
        if self.fmt == "int8":
            return to_signed(arr, 8)
        return arr.astype(np.uint16)

    def _entries(self, first: int, last: int) -> np.ndarray:
        stream = np.frombuffer(bytes(self.data[first * self.entry:last * self.entry]), np.uint8)
        if self.fmt == "int8":
            return stream.view(np.int8).reshape(-1, self.d)
        return stream.view("<u2").reshape(-1, self.d)

    def outputs(self) -> list[dict]:
        """The outputs whose inputs are all in and that were not queued yet."""
        if self.refused:
            self.done = 1
            return [{"value": 0, "last": 1, "error": 1}]
        if len(self.x) < self.x_beats * self.F:
            return []
        tokens = min(self.T, len(self.data) // self.entry)
        if self.op == Op.LOGIT:
            if tokens <= self.done:
                return []
            q = np.stack([self._codes(self.x[h * self.nb * self.F:h * self.nb * self.F + self.d])
                          for h in range(self.G)])
            scores = golden.logit(q, self._entries(self.done, tokens), self.fmt).T
            out = [{"value": int(v) & 0xFFFFFFFF, "error": 0,
                    "last": int(self.done + t == self.T - 1 and h == self.G - 1)}
                   for t, row in enumerate(scores) for h, v in enumerate(row)]
            self.done = tokens
            return out
        if tokens < self.T or self.done:
            return []
        p = np.stack([self._codes(self.x[t * self.pb * self.F:t * self.pb * self.F + self.G])
                      for t in range(self.T)], axis=1)
        sums = golden.attend(p, self._entries(0, self.T), self.fmt).reshape(-1)
        self.done = 1
        return [{"value": int(v) & 0xFFFFFFFF, "error": 0, "last": int(i == len(sums) - 1)}
                for i, v in enumerate(sums)]

    @property
    def complete(self) -> bool:
        return self.done == (1 if self.refused or self.op == Op.ATTEND else self.T)


def kv_layout(cfg, cmd: dict) -> golden.KVLayout:
    """The KV layout an attention command names."""
    return golden.KVLayout(cmd["layers"], cmd["kv_heads"], cmd["head_dim"],
                           _KV_FORMAT[Mode(cmd["mode"])], page_bytes=cfg.page_bytes,
                           mapping=golden.MAPPINGS[cmd["mapping"]])


def attention_is_refused(cfg, cmd: dict) -> bool:
    """The refusal rules of Logit and Attend (docs/inflash.md section 3)."""
    T, G, d = cmd["tokens"], cmd["query_heads"], cmd["head_dim"]
    L, H, layer, head = cmd["layers"], cmd["kv_heads"], cmd["layer"], cmd["head"]
    if cmd["mode"] not in ATTENTION_MODES or not 1 <= T <= MAX_TOKENS \
            or not 1 <= G <= cfg.max_query_heads or not 1 <= d <= cfg.max_head_dim \
            or d * (1 if cmd["mode"] == Mode.W8A8 else 2) > cfg.page_bytes \
            or G * -(-d // cfg.fmacs) > cfg.max_beats \
            or not 1 <= L <= MAX_LAYERS or not 1 <= H <= MAX_KV_HEADS \
            or not layer < L or not head < H:
        return True
    layout = kv_layout(cfg, cmd)
    kind = golden.K if cmd["op"] == Op.LOGIT else golden.V
    last, _ = golden.kv_address(layout, layer, head, T - 1, kind)
    return cmd["page"] + int(last) >= cfg.geometry.pages


def is_refused(cfg, cmd: dict) -> bool:
    """The contract's refusal rules (docs/inflash.md section 3)."""
    if cmd["op"] in (Op.LOGIT, Op.ATTEND):
        return attention_is_refused(cfg, cmd)
    if cmd["op"] != Op.GEMV:
        return True
    rows, cols = cmd["rows"], cmd["cols"]
    if cmd["mode"] not in IMPLEMENTED_MODES \
            or not 1 <= rows <= cfg.max_rows or not 1 <= cols <= cfg.max_cols:
        return True
    mode = Mode(cmd["mode"]).name.lower()
    if mode == "w4a16" and cols % cfg.group_size:
        return True
    pages = golden.page_count(mode, rows, cols, group_size=cfg.group_size,
                              page_bytes=cfg.page_bytes)
    return cmd["page"] + pages > cfg.geometry.pages


def _command_name(cmd: dict) -> str:
    return f"{Op(cmd['op']).name.lower()}_{Mode(cmd['mode']).name.lower()}"


def _timing(tb: "InflashTB", cmd: dict):
    """The golden page schedule of a command the PE took (None for a refused one)."""
    cfg = tb.cfg
    if cmd["refused"]:
        return None
    if cmd["op"] == Op.GEMV:
        return golden.gemv_timing(tb.geometry, Mode(cmd["mode"]).name.lower(), cmd["rows"],
                                  cmd["cols"], group_size=cfg.group_size)
    return golden.attention_timing(tb.geometry, kv_layout(cfg, cmd), cmd["tokens"],
                                   op=Op(cmd["op"]).name.lower(), group=cmd["query_heads"],
                                   layer=cmd["layer"], head=cmd["head"])


def paced_by(timing) -> str | None:
    """What sets the page period of a command's first full page: the array read (``tR``), the
    page transfer or the PE's compute (the largest; ties go to the earlier of the three); a
    single page has no period."""
    if timing is None:
        return None
    if len(timing.compute) < 2:
        return "single_page"
    stages = {"tR": timing.tR, "transfer": int(timing.transfer[0]),
              "compute": int(timing.compute[0])}
    return max(stages, key=stages.get)


def _pacing_unreachable(geometry) -> dict[str, str]:
    """The page pacings a geometry cannot reach: a transfer no longer than tR never sets the
    period (a tie goes to tR)."""
    transfer, read = geometry.page_transfer_cycles, geometry.tR_cycles
    if transfer <= read:
        return {"transfer": f"a page's transfer ({transfer} cycles) never exceeds tR "
                            f"({read} cycles)"}
    return {}


def _sampler(tb: "InflashTB"):
    """The coverpoints of a command the PE took (refused or not worked out once per command):
    operation x precision mode, refused or not,
    for attention the KV mapping x MHA or GQA, for a GEMV whether its stream fills its last
    page, and which of tR, transfer and compute paces its pages."""
    block, cfg = tb.block.name, tb.cfg
    commands = [f"gemv_{m.name.lower()}" for m in IMPLEMENTED_MODES] + \
        [f"{op}_{m.name.lower()}" for op in ("logit", "attend") for m in ATTENTION_MODES]

    def attention(f):
        return lambda c: f(c) if c["op"] in (Op.LOGIT, Op.ATTEND) and not c["refused"] else None

    def last_page(c):
        if c["op"] != Op.GEMV or c["refused"]:
            return None
        used = golden.stream_bytes(Mode(c["mode"]).name.lower(), c["rows"], c["cols"],
                                   group_size=cfg.group_size)
        return "fills_last_page" if used % cfg.page_bytes == 0 else "partial_last_page"

    sample = sampler({
        f"{block}.command": (lambda c: _command_name(c) if c["op"] in tuple(Op) and
                             c["mode"] in tuple(Mode) else None, commands),
        f"{block}.refused": (lambda c: c["refused"], (False, True)),
        f"{block}.mapping": (attention(lambda c: golden.MAPPINGS[c["mapping"]]),
                             golden.MAPPINGS),
        f"{block}.heads": (attention(lambda c: "mha" if c["query_heads"] == 1 else "gqa"),
                           ("mha", "gqa")),
        f"{block}.last_page": (last_page, ("fills_last_page", "partial_last_page")),
        f"{block}.paced_by": (lambda c: paced_by(_timing(tb, c)),
                              ("tR", "transfer", "compute", "single_page")),
    }, {f"{block}.mapping_x_heads": [f"{block}.mapping", f"{block}.heads"]},
        {f"{block}.paced_by": _pacing_unreachable(tb.geometry)})
    return lambda c: sample({**c, "refused": is_refused(cfg, c)})     # the rules, once


class InflashTB(BlockTB):
    """``cmd`` and ``x`` driven, ``y`` checked, the plane on ``rd_cmd`` / ``rd_data``."""

    #: Input streams driven and the plane's command port.
    INPUTS, COMMAND = ("cmd", "x"), "rd_cmd"

    def __init__(self, dut, *, gaps: float = 0.2, **kwargs):
        super().__init__(dut, inputs=self.INPUTS, outputs=("y",), **kwargs)
        cfg = self.component.cfg
        self.cfg, self.geometry = cfg, cfg.geometry
        if os.environ.get(ENV_TR_US):
            self.geometry = dataclasses.replace(cfg.geometry,
                                                tR_us=float(os.environ[ENV_TR_US]))
            self.log.info("plane tR %s us (%s)", self.geometry.tR_us, ENV_TR_US)
        self.F = cfg.fmacs
        ports = [self.COMMAND, "rd_data"] + (["pg_data"] if self.COMMAND == "fl_cmd" else [])
        codecs = {p: PayloadCodec(self.ports[f"{p}__payload"]) for p in ports}
        self.plane = FlashPlane(dut, self.geometry, self.counter, codecs[self.COMMAND],
                                codecs["rd_data"], self.rng, gaps, cmd=self.COMMAND,
                                program_codec=codecs.get("pg_data"))
        self.read_board = Scoreboard(f"{self.COMMAND}__payload", self.log)
        self.scoreboards[self.COMMAND] = self.read_board
        self.output_monitors[self.COMMAND] = StreamMonitor(
            dut, self.COMMAND, dut.clk, codecs[self.COMMAND], self.counter, self._on_command,
            dut.rst)
        self.data_monitor = StreamMonitor(dut, "rd_data", dut.clk, codecs["rd_data"],
                                          self.counter, self._on_data, dut.rst)
        self.gemvs: collections.deque = collections.deque()    # open commands, in order
        self.named_pages: list[int] = []          # pages the accepted commands name, in order
        self.read_sizes: collections.deque[int] = collections.deque()   # reads taken
        self.read_left = 0                        # bytes of the streaming read still to come
        self.samplers = {"cmd": _sampler(self)}

    # --- model --------------------------------------------------------------------------------

    def model(self, stream, item):
        if stream == "cmd":
            attention = item["op"] in (Op.LOGIT, Op.ATTEND)
            gemv = _Attention(self, item) if attention else _Gemv(self, item)
            self.gemvs.append(gemv)
            for read in gemv.reads(self.cfg.page_bytes):
                self.read_board.expect(read)
                self.named_pages.append(read["page"])
        else:
            gemv = self._open(lambda g: len(g.x) < g.x_beats * self.F, "an x beat")
            gemv.x.extend(item[f"data.{i}"] for i in range(self.F))
        return {"y": self._ready_outputs()}

    def _on_command(self, item, cycle):
        """A read the plane took."""
        self.read_sizes.append(item["bytes"])
        self.read_board.got(item, cycle)

    def _on_data(self, item, cycle):
        """A page word: its bytes that belong to the read (a read's last word may hold fewer
        than ``W``) go to the command's stream."""
        if self.read_left == 0:
            assert self.read_sizes, f"cycle {cycle}: a page word before any read was issued"
            self.read_left = self.read_sizes.popleft()
        n = min(self.read_left, self.geometry.transfer_bytes)
        self.read_left -= n
        assert bool(item["last"]) == (self.read_left == 0), \
            f"cycle {cycle}: rd_data.last is {item['last']} with {self.read_left} bytes to come"
        gemv = self._open(lambda g: len(g.data) < g.size, "a page word", cycle)
        gemv.data.extend(item[f"data.{j}"] for j in range(n))
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
                                     f"{stall_cycles} cycles; the oldest open command {g.cmd} "
                                     f"has {len(g.data)} of {g.size} bytes and {len(g.x)} x "
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
        self.send("cmd", [{"op": Op.GEMV, "mode": Mode[mode.upper()], "rows": rows,
                           "cols": cols, "page": page}])
        self.send_x(xv)
        return page

    def kv_cache(self, layout: golden.KVLayout, seq_len: int, scale_bits: int = 4):
        """Random keys and values ``(T, L, H, d)`` of ``layout``'s format."""
        rng = np.random.default_rng(self.rng.getrandbits(32))
        shape = (seq_len, layout.layers, layout.kv_heads, layout.head_dim)
        if layout.kv_format == "int8":
            return rng.integers(-128, 128, shape), rng.integers(-128, 128, shape)
        fmt = _KV_FMT_CODES[layout.kv_format]
        return tuple(from_float(rng.standard_normal(shape) * 2.0 ** rng.integers(
            -scale_bits, scale_bits + 1, shape), fmt) for _ in range(2))

    def attention(self, op: str, fmt: str, query_heads: int, seq_len: int, *, layers: int,
                  kv_heads: int, head_dim: int, layer: int, head: int, mapping: str = "page",
                  page: int | None = None, keys=None, values=None, a=None,
                  program: bool = True) -> int:
        """Program a KV cache (random unless ``keys`` and ``values`` are given) at ``page``
        (random if not given; ``program`` False: the cache is in flash already, written by the
        design), send a Logit or Attend command and its ``x`` (the query vectors ``a`` (G, d),
        or the attention weights ``a`` (G, T); random if not given); return the first page."""
        layout = golden.KVLayout(layers, kv_heads, head_dim, fmt,
                                 page_bytes=self.cfg.page_bytes, mapping=mapping)
        if program:
            if keys is None:
                keys, values = self.kv_cache(layout, seq_len)
            images = golden.kv_pages(layout, keys, values)
            if page is None:
                page = self.rng.randrange(self.geometry.pages - len(images) + 1)
            self.plane.program(page, images)
        rng = np.random.default_rng(self.rng.getrandbits(32))
        shape = (query_heads, head_dim if op == "logit" else seq_len)
        if a is None and fmt == "int8":
            a = rng.integers(-128, 128, shape)
        elif a is None:
            a = from_float(rng.standard_normal(shape) if op == "logit" else
                           rng.uniform(0, 1, shape), _KV_FMT_CODES[fmt])
        a = np.asarray(a, np.int64)
        mode = {"fp16": Mode.FP16, "bf16": Mode.BF16, "int8": Mode.W8A8}[fmt]
        self.send("cmd", [{"op": Op.LOGIT if op == "logit" else Op.ATTEND, "mode": mode,
                           "page": page, "tokens": seq_len, "head_dim": head_dim,
                           "query_heads": query_heads, "mapping": Mapping[mapping.upper()],
                           "layers": layers, "kv_heads": kv_heads, "layer": layer,
                           "head": head}])
        for row in (a if op == "logit" else a.T):      # per head, or per token
            self.send_x(row)
        return page

    def send_x(self, x: np.ndarray):
        F = self.F
        lanes = np.full(-(-len(x) // F) * F, 0x7E00, np.int64)    # a NaN past cols: ignored
        lanes[:len(x)] = x & 0xFFFF
        self.send("x", [{f"data.{i}": int(v) for i, v in enumerate(lanes[b:b + F])}
                        for b in range(0, len(lanes), F)])

    def command(self, mode: int, rows: int = 1, cols: int = 1, page: int = 0, **fields):
        """Send a raw command (no pages, no x): for the refusal rules. ``fields``: more
        command fields (``op`` is GEMV unless given)."""
        self.send("cmd", [{"op": Op.GEMV, "mode": mode, "rows": rows, "cols": cols,
                           "page": page, **fields}])

    def check_block_reads(self):
        want = golden.block_reads(self.geometry, np.array(self.named_pages, np.int64))
        got = self.plane.block_counts
        assert np.array_equal(got, want), \
            f"per-block reads {got.tolist()}, the commands name {want.tolist()}"
        assert self.plane.read_pages == self.named_pages, \
            f"pages read {self.plane.read_pages}, named {self.named_pages}"


_KV_FMT_CODES = {"fp16": FP16, "bf16": BF16}


def writer_refuses(cfg, cmd: dict) -> bool:
    """The KV page writer's ``LAYOUT`` rule (``hdl.inflash.spec.WriteError``)."""
    entry = cmd["head_dim"] * (1 if cmd["mode"] == Mode.W8A8 else 2)
    return (cmd["mode"] not in ATTENTION_MODES or cmd["head_dim"] == 0
            or entry > cfg.page_bytes or not 1 <= cmd["layers"] <= MAX_LAYERS
            or not 1 <= cmd["kv_heads"] <= MAX_KV_HEADS or cmd["pages"] == 0
            or cmd["page"] + cmd["pages"] > cfg.geometry.pages)


class _KVSequence:
    """One sequence on the writer as the monitors saw it: its command and words."""

    def __init__(self, tb: "InflashUnitTB", cmd: dict):
        self.cmd = cmd
        self.words: list[dict] = []
        self.closed = False
        self.refused = writer_refuses(tb.cfg, cmd)
        self.layout = None if self.refused else golden.KVLayout(
            cmd["layers"], cmd["kv_heads"], cmd["head_dim"], _KV_FORMAT[Mode(cmd["mode"])],
            page_bytes=tb.cfg.page_bytes, mapping=golden.MAPPINGS[cmd["mapping"]])


class InflashUnitTB(InflashTB):
    """The PE's streams as :class:`InflashTB`, the KV writer's ``kv_cmd`` and ``kv`` driven,
    ``kv_table`` and ``kv_status`` back-pressured and checked per sequence, the plane on the
    shared ``fl_cmd`` with ``pg_data``.

    The writer's model is fed by the monitors: a sequence's command and the words the design
    took; when its ``kv_status`` comes out, :func:`golden.inflash.kv_write` of those entries
    gives the pages programmed (checked in order on ``fl_cmd``), the mapping-table records,
    the status and, at :meth:`check_writes`, the page images the plane stored."""

    INPUTS, COMMAND = ("cmd", "x", "kv_cmd", "kv"), "fl_cmd"

    def __init__(self, dut, **kwargs):
        super().__init__(dut, **kwargs)
        backpressure = kwargs.get("backpressure", 0.3)
        self.slots = self.params.kv_slots
        self.sequences: collections.deque[_KVSequence] = collections.deque()
        self.programs: list[int] = []             # pages programmed, in order
        self.records: list[dict] = []
        self.written: list[tuple[int, golden.KVWrite]] = []    # checked sequences
        self.statuses = 0
        for port, callback in (("kv_table", self._on_record), ("kv_status", self._on_status)):
            codec = PayloadCodec(self.ports[f"{port}__payload"])
            self.sinks[port] = StreamSink(dut, port, dut.clk, self.rng, backpressure)
            self.output_monitors[port] = StreamMonitor(dut, port, dut.clk, codec, self.counter,
                                                       callback, dut.rst)

    def model(self, stream, item):
        if stream == "kv_cmd":
            self.sequences.append(_KVSequence(self, item))
            return {}
        if stream == "kv":
            seq = next((s for s in self.sequences if not s.closed), None)
            assert seq is not None, f"cycle {self.counter.cycle}: a kv word with no sequence"
            seq.words.append({"data": [item[f"data.{j}"] for j in range(self.geometry
                                                                       .transfer_bytes)]})
            seq.closed = bool(item["last"])
            return {}
        return super().model(stream, item)

    def _on_command(self, item, cycle):
        if item["program"]:
            self.programs.append(item["page"])
        else:
            super()._on_command(item, cycle)

    def _on_record(self, item, cycle):
        self.records.append(item)

    def _on_status(self, item, cycle):
        assert self.sequences and self.sequences[0].closed, \
            f"cycle {cycle}: kv_status {item} before its sequence's last word"
        seq = self.sequences.popleft()
        self.statuses += 1
        where = f"cycle {cycle}: sequence {self.statuses - 1} ({seq.cmd}): "
        done = sum(len(w.pages) for _, w in self.written)
        if seq.refused:
            assert (item["entries"], item["error"]) == (0, WriteError.LAYOUT), \
                f"{where}status {item}, expected a LAYOUT refusal"
            assert len(self.programs) == done, f"{where}a refused sequence programmed pages"
            return
        keys, values, n = entries_of(seq.layout, seq.words, self.geometry.transfer_bytes)
        want = golden.kv_write(seq.layout, keys, values, pages=seq.cmd["pages"],
                               slots=self.slots, entries=n)
        check_kv_write(want, seq.cmd["page"], programs=self.programs[done:], images=None,
                       records=self.records[done:], status=item, where=where)
        self.written.append((seq.cmd["page"], want))

    def write_kv(self, layout: golden.KVLayout, page: int, pages: int, *, keys=None,
                 values=None, seq_len: int = 1, entries: int | None = None, cut: int = 0,
                 command: dict | None = None):
        """Send one sequence to the writer (a random cache of ``seq_len`` tokens unless
        ``keys`` and ``values`` are given); return ``(keys, values)``."""
        if keys is None:
            keys, values = self.kv_cache(layout, seq_len)
        self.send("kv_cmd", [command or kv_command(layout, page, pages)])
        words = kv_words(layout, keys, values, self.geometry.transfer_bytes, entries=entries,
                         cut=cut)
        self.send("kv", [{**{f"data.{j}": b for j, b in enumerate(w["data"])},
                          "last": w["last"]} for w in words])
        return keys, values

    async def kv_done(self, stall_cycles: int = 100_000):
        """Wait until every sequence sent has its ``kv_status``."""
        for port in ("kv_cmd", "kv"):
            await self.drivers[port].wait_idle()
        start = self.counter.cycle
        while self.sequences:
            assert self.counter.cycle - start < stall_cycles, \
                f"cycle {self.counter.cycle}: {len(self.sequences)} sequences without a status"
            await RisingEdge(self.clk)

    async def drain(self, stall_cycles: int = 10_000):
        await self.kv_done()
        await super().drain(stall_cycles)

    async def check_writes(self):
        """After the plane has finished its programs: every page a sequence wrote holds the
        golden image."""
        while not self.plane.idle:
            await RisingEdge(self.clk)
        for base, want in self.written:
            for page, image in zip(want.pages, want.images):
                got = self.plane.pages[base + int(page)]
                assert np.array_equal(got, image), f"page {base + int(page)} holds {got}, " \
                                                   f"expected {image}"


def _tb(dut, **kwargs) -> InflashTB:
    return select_tb(dut, {"inflash": InflashTB, "inflash-unit": InflashUnitTB}, **kwargs)


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


def _buffered_beats(cfg, mode: str) -> int:
    """Beats of compute the read register and the gearbox's buffer hold at most."""
    held = Gearbox(cfg).capacity + PageReader.latency * cfg.transfer_bytes
    elements = {"fp16": held // 2, "bf16": held // 2, "w8a8": held, "w4a16": 2 * held}[mode]
    return -(-elements // cfg.fmacs)


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
    modes = os.environ.get(ENV_MODES, "").split(",") if os.environ.get(ENV_MODES) else _modes()
    for mode in modes:
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
            # The read register and the gearbox's buffer let a page's last word go, and the
            # next page start, before its compute ends, once: the RTL may lead the model by
            # the beats they hold; it may never lag by more than 1 % of the period.
            span, model_span = steady[-1] - steady[0], model[-1] - model[0]
            lead = _buffered_beats(cfg, mode)
            assert -lead <= span - model_span <= 0.01 * model_span, \
                f"{mode}: pages 1 to {len(starts) - 1} streamed in {span} cycles, model " \
                f"{model_span} (lead at most {lead}, lag at most 1 %)"
        assert total <= timing.total + compute, \
            f"{mode}: {total} cycles, model {timing.total} + one page compute {compute}"
        assert starts[0] - t0 == timing.tR, \
            f"{mode}: first page streamed {starts[0] - t0} cycles after its read, not tR"
    # The benchmark table's columns (cocotb_tests/bench.py): the fp16 GEMV's beats over its
    # total cycles (PE utilization) and its latency.
    first = next(iter(figures))
    fig = figures[first]
    beats = fig["rows"] * -(-fig["cols"] // cfg.fmacs)
    tb.report("full_rate", items=beats, cycles=fig["total"],
              per_cycle=round(beats / fig["total"], 4), latency=fig["pe_latency"],
              latency_meaning=f"last page word to last y ({first})",
              **{f"{m}_{k}": v for m, f in figures.items() for k, v in f.items()})
    tb.check_block_reads()


# --- attention -------------------------------------------------------------------------------

def _attention_layouts(cfg) -> list[dict]:
    """KV layouts for the plane's page size: a page of whole entries and a partial last page,
    one head token per naive page (``S >= T_p``) and several (``S < T_p``, gathered reads)."""
    d = max(1, min(cfg.max_head_dim, cfg.page_bytes // 8))      # at least 4 fp16 entries a page
    return [dict(layers=2, kv_heads=2, head_dim=d),
            dict(layers=1, kv_heads=1, head_dim=max(1, d // 2)),
            dict(layers=2, kv_heads=3, head_dim=max(1, d - 3))]


def _groups(cfg, head_dim: int) -> list[int]:
    """MHA and GQA groups that the PE takes with this head dimension."""
    nb = -(-head_dim // cfg.fmacs)
    return [G for G in (1, 2, 4, 3) if G <= cfg.max_query_heads and G * nb <= cfg.max_beats]


def _fits(tb, layout_kw: dict, fmt: str, seq_len: int, mapping: str) -> bool:
    layout = golden.KVLayout(**layout_kw, kv_format=fmt, page_bytes=tb.cfg.page_bytes,
                             mapping=mapping)
    return golden.kv_page_count(layout, seq_len) <= tb.geometry.pages


@cocotb.test()
async def random_attention(dut):
    """Logit and Attend, MHA and GQA, fp16, bf16 and int8, both mappings, sequences that fill
    their pages exactly and not, between GEMVs; every result bit for bit."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    rng = tb.rng
    for index, layout in enumerate(_attention_layouts(cfg)):
        tp = cfg.page_bytes // (2 * layout["head_dim"])
        for op in ("logit", "attend"):
            for G in _groups(cfg, layout["head_dim"]):
                fmt = ("fp16", "bf16", "int8")[(G + index) % 3]
                mapping = golden.MAPPINGS[(G + index + (op == "attend")) % 2]
                seq_len = rng.choice([2 * tp, 2 * tp + 1, tp - 1 if tp > 1 else 3])
                if not _fits(tb, layout, fmt, seq_len, mapping):
                    continue
                layer = rng.randrange(layout["layers"])
                head = rng.randrange(layout["kv_heads"])
                tb.attention(op, fmt, G, seq_len, layer=layer, head=head, mapping=mapping,
                             **layout)
        tb.gemv(("fp16", "w8a8", "bf16")[index], 3, 5)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def attention_refusals(dut):
    """Every attention refusal rule answers one error word, in order, between commands that
    still work."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    layout = _attention_layouts(cfg)[0]
    good = dict(op=Op.LOGIT, page=0, tokens=4, head_dim=layout["head_dim"], query_heads=1,
                mapping=Mapping.PAGE, layers=layout["layers"], kv_heads=layout["kv_heads"],
                layer=0, head=0)
    tb.attention("attend", "fp16", 2, 5, layer=1, head=0, **layout)
    # G ceil(d / F) beats of query vectors above the x buffer's max_cols / F words: the
    # largest group with the smallest head dimension that overflows (each d fits a page).
    G = cfg.max_query_heads
    wide = [d for d in range(1, cfg.max_head_dim + 1)
            if G * -(-d // cfg.fmacs) > cfg.max_beats and 2 * d <= cfg.page_bytes]
    rules = [
        (Mode.W4A16, {}),                                        # no w4a16 KV
        (Mode.FP16, {"op": 3}),                                  # no such operation
        (Mode.FP16, {"tokens": 0}), (Mode.BF16, {"tokens": MAX_TOKENS + 1}),
        (Mode.FP16, {"query_heads": 0}),
        (Mode.FP16, {"query_heads": cfg.max_query_heads + 1}),
        (Mode.FP16, {"head_dim": 0}), (Mode.FP16, {"head_dim": cfg.max_head_dim + 1}),
        (Mode.W8A8, {"layers": 0}), (Mode.FP16, {"kv_heads": MAX_KV_HEADS + 1}),
        (Mode.FP16, {"layer": layout["layers"]}), (Mode.FP16, {"head": layout["kv_heads"]}),
        (Mode.FP16, {"tokens": 4 * tb.geometry.pages}),          # walk past the last page
        (Mode.FP16, {"mapping": Mapping.NAIVE, "page": tb.geometry.pages - 1, "tokens": 2})]
    if wide:
        rules.append((Mode.FP16, {"query_heads": G, "head_dim": wide[0]}))
    else:
        tb.log.info("no head dimension overflows the x buffer with %d query heads", G)
    for mode, fields in rules:
        cmd = {**good, "mode": mode, **fields}
        assert is_refused(cfg, cmd), f"the rule {fields} does not refuse {cmd}"
        tb.command(**cmd)
    tb.attention("logit", "bf16", 1, 3, layer=1, head=1, **layout)
    tb.gemv("w8a8", 2, 9)
    await tb.drain()
    tb.check_block_reads()


@cocotb.test()
async def attention_pipeline(dut):
    """Logit and Attend of one head group, MHA and GQA, with no idle cycles, no back-pressure
    and no gaps: the pages read, the page period and the total cycles against
    golden.inflash.attention_timing; the page-level mapping against the naive one."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, gaps=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg, geo = tb.cfg, tb.geometry
    layout = _attention_layouts(cfg)[0]
    d = layout["head_dim"]
    tp = cfg.page_bytes // (2 * d)
    seq_len = min(12 * tp, (geo.pages // (2 * layout["layers"] * layout["kv_heads"])) * tp)
    figures = {}
    for op in ("logit", "attend"):
        for G in [G for G in _groups(cfg, d) if G != 3]:
            for mapping in golden.MAPPINGS:
                if mapping == "naive" and G > 1:
                    continue
                T = seq_len if mapping == "page" else min(seq_len, geo.pages // 2)
                kv = golden.KVLayout(**layout, page_bytes=cfg.page_bytes, mapping=mapping)
                if golden.kv_page_count(kv, T) > geo.pages:
                    continue
                first_read = len(tb.plane.read_start)
                tb.attention(op, "fp16", G, T, layer=1, head=0, mapping=mapping, page=0,
                             **layout)
                await tb.drain()
                cmd_op = Op.LOGIT if op == "logit" else Op.ATTEND
                timing = golden.attention_timing(geo, kv, T, op=op, group=G, layer=1, head=0)
                pe_latency = tb.component.pe_latency(
                    Mode.FP16, cmd_op, query_heads=G, head_dim=d,
                    last_page=(timing.transfer[-1], timing.compute[-1]))
                timing = golden.attention_timing(geo, kv, T, op=op, group=G, layer=1, head=0,
                                                 pe_latency=pe_latency)
                reads = tb.plane.read_pages[first_read:]
                kind = golden.K if op == "logit" else golden.V
                assert len(reads) == timing.pages == golden.kv_pages_read(
                    kv, T, layer=1, kind=kind), f"{op} {mapping}: {len(reads)} page reads"
                starts = np.array(tb.plane.stream_start[first_read:])
                t0 = tb.plane.read_start[first_read]
                total = tb.output_monitors["y"].last_cycle - t0 + 1
                period = float(np.mean(np.diff(starts[1:]))) if len(starts) > 2 else 0.0
                model = timing.stream_start[1:]
                model_period = float(np.mean(np.diff(model))) if len(model) > 1 else 0.0
                name = f"{op}_G{G}_{mapping}"
                figures[name] = {
                    "tokens": T, "pages": timing.pages, "tR": timing.tR,
                    "transfer": int(timing.transfer.max()), "compute": int(timing.compute.max()),
                    "period": round(period, 2), "model_period": round(model_period, 2),
                    "total": int(total), "model_total": timing.total,
                    "excess": int(total - timing.total), "pe_latency": pe_latency}
                tb.log.info("%s: page starts %s", name, (starts - t0).tolist())
                assert starts[0] - t0 == timing.tR, \
                    f"{name}: first page streamed {starts[0] - t0} cycles after its read"
                # Where compute sets the pace, the K/V ring lets a page's words in up to two
                # entries' compute early, so pages start early while the ring fills: over a
                # short run the mean period is below the model's; the steady state and the
                # total are the model's.
                if len(starts) > 2:
                    assert period <= 1.01 * model_period, \
                        f"{name}: page period {period:.2f} cycles, model {model_period:.2f}"
                assert total == timing.total, \
                    f"{name}: {total} cycles, attention_timing {timing.total}"
    logit = figures.get("logit_G1_page")
    tb.report("attention_pipeline", **{f"{n}_{k}": v for n, f in figures.items()
                                        for k, v in f.items()},
              **({"pages_page_level": logit["pages"],
                  "pages_naive": figures["logit_G1_naive"]["pages"]} if logit else {}))
    tb.check_block_reads()


# --- the KV page writer (inflash-unit) -----------------------------------------------------------

def _kv_layout(cfg, mapping: str, fmt: str = "fp16", **kw) -> golden.KVLayout:
    """The tests' KV layout: 2 layers of 2 KV heads (``S = 8`` streams), entries of a quarter
    page at most (``T_p >= 4``)."""
    kw = {**_attention_layouts(cfg)[0], **kw}
    return golden.KVLayout(kw["layers"], kw["kv_heads"], kw["head_dim"], fmt,
                           page_bytes=cfg.page_bytes, mapping=mapping)


@cocotb.test()
async def kv_write_read(dut):
    """Sequences written through the KV page writer under both mappings and read back by Logit
    and Attend, MHA and GQA, a GEMV sharing the flash port with the programs: the pages
    programmed, their images, the mapping table and the statuses against
    golden.inflash.kv_write; every result bit for bit; the naive mapping reads
    golden.inflash.kv_pages_read's extra pages for the same Logit; per-block read counts."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    T = 9
    layouts = {"page": _kv_layout(cfg, "page"), "naive": _kv_layout(cfg, "naive", "bf16"),
               "int8": _kv_layout(cfg, "page", "int8")}
    regions, at = {}, 0
    for name, layout in layouts.items():
        regions[name] = (at, golden.kv_page_count(layout, T))
        at += regions[name][1]
    for name, layout in layouts.items():
        tb.write_kv(layout, *regions[name], seq_len=T)
    # A GEMV on pages after the KV regions, its reads interleaved with the programs.
    tb.gemv("fp16", 3, 5, page=at)
    await tb.kv_done()
    G = max(_groups(cfg, layouts["page"].head_dim)[:3])
    reads = {}
    for name, layout in layouts.items():
        fmt = layout.kv_format
        for op, group in (("logit", 1), ("attend", G)):
            first = len(tb.plane.read_pages)
            tb.attention(op, fmt, group, T, layers=layout.layers, kv_heads=layout.kv_heads,
                         head_dim=layout.head_dim, layer=1, head=1, mapping=layout.mapping,
                         page=regions[name][0], program=False)
            await tb.drain()
            reads[name, op] = len(tb.plane.read_pages) - first
    await tb.check_writes()
    tb.check_block_reads()
    same = layouts["page"].with_mapping("naive")
    extra = golden.kv_pages_read(same, T, layer=1, head=1) \
        - golden.kv_pages_read(layouts["page"], T, layer=1, head=1)
    assert reads["naive", "logit"] - reads["page", "logit"] == extra > 0, \
        f"page reads {reads}, the naive mapping should need {extra} more"
    tb.report("kv_write_read", programs=len(tb.programs), reads_page_level=reads["page", "logit"],
              reads_naive=reads["naive", "logit"])


@cocotb.test()
async def kv_overflow(dut):
    """Out of buffer (more streams than buffer pages: nothing stored), out of pages (the tokens
    that fit are programmed, the rest dropped), a sequence ending inside a token, refused
    layouts; a Logit after them reads what was stored."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    layout = _kv_layout(cfg, "page")
    tp, S = layout.tokens_per_page, layout.entries_per_token
    wide = _kv_layout(cfg, "page", kv_heads=-(-(tb.slots + 1) // 4))      # S > slots
    assert wide.entries_per_token > tb.slots
    tb.write_kv(wide, 0, 8 * wide.entries_per_token, seq_len=2)
    tb.write_kv(layout, 0, S, seq_len=tp + 2)                              # one group fits
    tb.write_kv(layout.with_mapping("naive"), S, 3, seq_len=4)              # a few tokens fit
    tb.write_kv(layout, S + 3, S, seq_len=2, entries=S + 3)                 # ends in token 1
    bad = kv_command(layout, 2 * S + 3, S)
    for fields in ({"head_dim": 0}, {"mode": Mode.W4A16}, {"layers": 0},
                   {"kv_heads": MAX_KV_HEADS + 1}, {"pages": 0},
                   {"page": tb.geometry.pages - 1, "pages": 2}):
        tb.write_kv(layout, 0, 1, seq_len=1, command={**bad, **fields})
    await tb.kv_done()
    tb.attention("logit", "fp16", 1, tp, layers=layout.layers, kv_heads=layout.kv_heads,
                 head_dim=layout.head_dim, layer=1, head=0, page=0, program=False)
    await tb.drain()
    await tb.check_writes()
    tb.check_block_reads()


@cocotb.test()
async def attention_reads(dut):
    """One Logit or Attend of a head group with no idle cycles and no back-pressure, the
    command from ``MEMWALL_INFLASH_ATTENTION`` (benchmarks; default: 3 T_p tokens of the
    tests' layout, naive): results bit for bit, the pages read equal to
    golden.inflash.kv_pages_read, per-block counts, and the total against attention_timing."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, gaps=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg = tb.cfg
    layout = _attention_layouts(cfg)[0]
    spec = {"op": "logit", "group": 1, "mapping": "naive",
            "tokens": 3 * (cfg.page_bytes // (2 * layout["head_dim"])), **layout}
    spec.update(json.loads(os.environ.get(ENV_ATTENTION) or "{}"))
    kv = golden.KVLayout(spec["layers"], spec["kv_heads"], spec["head_dim"],
                         page_bytes=cfg.page_bytes, mapping=spec["mapping"])
    T, G, op = spec["tokens"], spec["group"], spec["op"]
    tb.attention(op, "fp16", G, T, layers=kv.layers, kv_heads=kv.kv_heads,
                 head_dim=kv.head_dim, layer=0, head=0, mapping=kv.mapping, page=0)
    await tb.drain(stall_cycles=1_000_000)
    timing = golden.attention_timing(tb.geometry, kv, T, op=op, group=G)
    latency = tb.component.pe_latency(Mode.FP16, Op.LOGIT if op == "logit" else Op.ATTEND,
                                      query_heads=G, head_dim=kv.head_dim,
                                      last_page=(timing.transfer[-1], timing.compute[-1]))
    total = tb.output_monitors["y"].last_cycle - tb.plane.read_start[0] + 1
    reads = len(tb.plane.read_pages)
    model = golden.kv_pages_read(kv, T, kind=golden.K if op == "logit" else golden.V)
    tb.check_block_reads()
    assert reads == model, f"{reads} page reads, kv_pages_read {model}"
    assert total == timing.total + latency, \
        f"{total} cycles, attention_timing {timing.total} + pe_latency {latency}"
    starts = np.array(tb.plane.stream_start)
    period = float(np.mean(np.diff(starts[1:]))) if len(starts) > 2 else 0.0
    tb.report("attention_reads", reads=reads, model_reads=model,
              blocks=int(np.count_nonzero(tb.plane.block_counts)), total=int(total),
              model_total=int(timing.total + latency), tR=tb.geometry.tR_cycles,
              transfer=int(timing.transfer.max()), compute=int(timing.compute.max()),
              period=round(period, 2), model_period=timing.period)
