"""The in-flash PE's testbench environment: :class:`InflashTB` (the PE: ``cmd`` and ``x``
driven, ``y`` checked, the flash plane on ``rd_cmd`` / ``rd_data``) and :class:`InflashUnitTB`
(the PE with the KV page writer on one flash port), with their stimulus helpers.

Their models are fed by the monitors (:mod:`.expect`); the stimulus only programs pages and
sends commands, ``x`` and KV sequences.
"""

from __future__ import annotations

import collections
import dataclasses
import os

import numpy as np
from cocotb.triggers import RisingEdge

from golden import inflash as golden
from golden.arith.float import from_float
from hdl.arith.format import BF16, FP16
from hdl.inflash.spec import Mapping, Mode, Op, WriteError

from ..streams import PayloadCodec, Scoreboard, StreamMonitor, StreamSink
from ..tb import BlockTB
from .contract import KV_FLOAT_FORMATS, command_sampler
from .expect import AttentionCommand, GemvCommand, KVSequence
from .kvstream import check_kv_write, entries_of, kv_command, kv_words
from .plane import FlashPlane

#: The plane's ``tR`` in microseconds, in place of the design's parameter (benchmarks: the RTL
#: never counts ``tR``, so one build serves every ``tR``; the golden timing takes the same).
ENV_TR_US = "MEMWALL_INFLASH_TR_US"
#: Weight and ``x`` formats of the float GEMV modes.
WEIGHT_FORMATS = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}


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
        self.samplers = {"cmd": command_sampler(self)}

    # --- model --------------------------------------------------------------------------------

    def model(self, stream, item):
        if stream == "cmd":
            attention = item["op"] in (Op.LOGIT, Op.ATTEND)
            gemv = AttentionCommand(self, item) if attention else GemvCommand(self, item)
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

    def _open(self, wants, what, cycle=None) -> GemvCommand:
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
        return golden.Weights(mode, from_float(values, WEIGHT_FORMATS[mode]))

    def vector(self, mode: str, cols: int) -> np.ndarray:
        rng = np.random.default_rng(self.rng.getrandbits(32))
        if mode == "w8a8":
            return rng.integers(-128, 128, cols)
        return from_float(rng.standard_normal(cols), WEIGHT_FORMATS[mode])

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
        fmt = KV_FLOAT_FORMATS[layout.kv_format]
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
                           rng.uniform(0, 1, shape), KV_FLOAT_FORMATS[fmt])
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
        self.sequences: collections.deque[KVSequence] = collections.deque()
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
            self.sequences.append(KVSequence(self, item))
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

