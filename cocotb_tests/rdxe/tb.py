"""cocotb testbench of the rDXE vector-accumulate core (``rdxe-vac``).

The testbench is the ring around one VAC. It loads WMEM rows (``wmem``) and PPU table entries
(``ppu``) with random idle cycles, drives HLINK chunks (``hlink_i``) as the ring's source does
(:class:`CreditSource`, the behaviour of ``hdl.rdxe.HlinkSource``: an output starts only with a
credit, and ``credit`` pulses give them back), plays the vector engine (one RC factor per fused
operation on ``rc``, from ``golden.rdxe.to_rc``, a random delay after the operation's first
pass has left the source), and takes ``o`` with random back-pressure. ``hlink_o.ready``, which the
VAC ignores, toggles at random.

The model (:class:`VacModel`) is fed by the input monitors only. It mirrors the WMEM and the PPU
table with the cycle of every write, so that a chunk meets the row as it was when the chunk was
on ``hlink_i`` and an output reads its PPU entry ``acc_latency - 3`` cycles after its last chunk
(the VAC's documented read times; a write in the cycle of a read is not seen). It collects each
output's activations and the weights they met, takes the RC factors in arrival order (an output
flagged ``rc_last`` is the last to use its factor), and computes the expected result with the
golden model: ``golden.rdxe.gemv`` for a plain output, ``ppu(rcu(accumulate(...)))`` for a fused
one. The scoreboard checks ``o`` in order.

Every cycle outside reset a watcher checks that ``hlink_o`` is ``hlink_i`` of the cycle before
(valid, and the payload of every valid chunk), that ``credit`` is ``o.valid & o.ready``, that
every input stream is ready and that ``overrun`` stays 0. At the end every credit must be back.

Tests: ``plain_random`` (random GEMVs, single and multi-chunk outputs, partial last chunks,
WMEM, KV-cache and PPU regions reused while other operations are in flight; every third
operation takes its weights from the KV cache, written as two byte-enabled halves per row), ``fused_random`` (fused and
plain operations interleaved, random RC factors, factors 0, +inf, an exact power of two and a
rounding tie, INT8 corner values and extreme PPU multipliers and shifts), ``backpressure`` (short
outputs, ``o`` stalled for long stretches and RC factors up to 150 cycles late, then fused
one-chunk outputs back to back with prompt factors: the source runs out of credits and waits,
the VAC owes ``queue_depth`` results and holds ``queue_depth`` factors at once, nothing is
lost) and ``full_rate`` (no idle cycles, no back-pressure,
outputs just long enough that ``queue_depth`` credits cover a credit's round trip: one chunk per
cycle, no credit stall, results ``latency`` cycles after their last chunk).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Callable

import cocotb
import numpy as np
from cocotb.triggers import Event, RisingEdge

from golden import rdxe as golden
from golden.arith.float import from_float
from hdl.arith.format import FP32

from ..streams import (ClockService, PayloadCodec, StreamDriver, StreamMonitor, to_signed,
                       to_unsigned)
from ..functional import sampler
from ..tb import BlockTB, select_tb

__all__ = ["VacModel", "CreditSource", "Op", "VacTB"]


def _history(writes: list[tuple[int, object]], cycle: int, default):
    """The last value written before ``cycle`` (a write in the cycle of a read is not seen)."""
    for when, value in reversed(writes):
        if when < cycle:
            return value
    return default


@dataclass
class _Output:
    """One output as the HLINK monitor saw it."""

    index: int
    x: list[int]
    w: list[int]
    entry: int = 0
    read_cycle: int = 0
    fused: bool = False
    factor: int = -1


class VacModel:
    """The VAC's contract, fed by the input monitors; :meth:`ready` returns the results that are
    known so far, in output order.

    Parameters
    ----------
    cfg : hdl.rdxe.VacConfig
    entry_delay : int
        Cycles from an output's last chunk on ``hlink_i`` to its PPU table read
        (``Vac.acc_latency - 3``).
    """

    def __init__(self, cfg, entry_delay: int):
        self.cfg = cfg
        self.entry_delay = entry_delay
        self.wmem: dict[int, list] = collections.defaultdict(list)     # row -> [(cycle, data)]
        self.kv: dict[int, list] = collections.defaultdict(list)       # row -> [(cycle, data)]
        self.table: dict[int, list] = collections.defaultdict(list)    # entry -> [(cycle, m, sh)]
        self.factors: list[golden.RCFactor] = []
        self.open: _Output | None = None
        self.pending: collections.deque[_Output] = collections.deque()
        self.outputs = 0
        self.fused_ops = 0             # RC factors the finished fused operations have used up

    # --- input transfers ----------------------------------------------------------------------

    def wmem_write(self, item: dict, cycle: int):
        data = [to_signed(item[f"data.{k}"], 8) for k in range(self.cfg.lanes)]
        self.wmem[item["addr"]].append((cycle, data))

    def kv_write(self, item: dict, cycle: int):
        """A KV-cache write: the lanes whose ``en`` bit is set take ``data``, the rest keep the
        row as it was before this cycle."""
        row = list(_history(self.kv[item["addr"]], cycle + 1, [0] * self.cfg.lanes))
        for k in range(self.cfg.lanes):
            if item["en"] >> k & 1:
                row[k] = to_signed(item[f"data.{k}"], 8)
        self.kv[item["addr"]].append((cycle, row))

    def ppu_write(self, item: dict, cycle: int):
        m = to_signed(item["m"], self.cfg.mult_bits)
        self.table[item["addr"]].append((cycle, (m, item["shift"])))

    def rc_factor(self, item: dict, cycle: int):
        self.factors.append(golden.RCFactor(np.array(item["m"], np.int64),
                                            np.array(item["shift"], np.int64)))

    def chunk(self, item: dict, cycle: int):
        if item["first"]:
            if self.open is not None:
                raise AssertionError(f"cycle {cycle}: hlink_i: a first chunk while output "
                                     f"{self.open.index} has no last chunk yet")
            self.open = _Output(self.outputs, [], [])
            self.outputs += 1
        elif self.open is None:
            raise AssertionError(f"cycle {cycle}: hlink_i: a chunk with no first chunk before it")
        out = self.open
        # The row as it was in this cycle (the VAC's memories start all zero).
        memory = self.kv if item["kv"] else self.wmem
        out.w += _history(memory[item["row"]], cycle, [0] * self.cfg.lanes)
        out.x += [to_signed(item[f"data.{k}"], 8) for k in range(self.cfg.lanes)]
        if not item["last"]:
            return
        out.entry, out.read_cycle = item["out"], cycle + self.entry_delay
        out.fused = bool(item["rcu"])
        if out.fused:
            out.factor = self.fused_ops
            self.fused_ops += int(item["rc_last"])
        self.pending.append(out)
        self.open = None

    # --- results ------------------------------------------------------------------------------

    def ready(self, cycle: int) -> list[dict]:
        """Results whose inputs are all known by ``cycle``: the PPU entry read has happened (every
        write before it has been seen) and, for a fused output, its RC factor has arrived."""
        results = []
        while self.pending:
            out = self.pending[0]
            if out.read_cycle > cycle or (out.fused and out.factor >= len(self.factors)):
                break
            self.pending.popleft()
            m, shift = _history(self.table[out.entry], out.read_cycle, (0, 0))
            W, x = np.array([out.w]), np.array(out.x)
            m, shift = np.array([m]), np.array([shift])
            acc = golden.accumulate(W, x)
            if out.fused:
                acc = golden.rcu(acc, self.factors[out.factor])
            y = golden.ppu(acc, m, shift, self.cfg)
            results.append({"y": to_unsigned(y[0], 8)})
        return results


class CreditSource(StreamDriver):
    """Drive ``hlink_i`` as the ring's source: chunks in order, with random idle cycles; a chunk
    flagged ``first`` (an output's start) only while a credit is left.

    It starts with ``credits`` (the VAC's ``queue_depth``), takes one per output started and gets
    one back for every cycle ``credit`` is high (counted from the next cycle on, as
    ``hdl.rdxe.HlinkSource``'s counter). ``hlink_i`` is always ready, so a driven chunk is taken in
    its cycle. A chunk may carry an ``after`` callback, called with the cycle the chunk was taken;
    gates (:meth:`StreamDriver.gate`) hold the chunks behind them.
    """

    def __init__(self, dut, codec: PayloadCodec, counter, rng, idle: float, credits: int):
        super().__init__(dut, "hlink_i", dut.clk, codec, rng, idle, taken_when_driven=True)
        self.credit, self.rst = dut.credit, dut.rst
        self.counter = counter
        self.capacity = credits
        self.started = self.returned = 0
        self.stalls = 0                 # cycles an output's first chunk waited for a credit
        self.max_owed = 0               # most results the VAC owed at once
        self._cycle = 0                 # the cycle the chunk being driven is taken in
        self.payload.value = 0
        self._service.on_read(self._count)

    @property
    def credits(self) -> int:
        return self.capacity - self.started + self.returned

    def send(self, item: dict, after: Callable[[int], None] | None = None) -> int:
        """Queue one chunk; return its sequence number (chunks queued before it)."""
        return self._enqueue(self.codec.pack(item), (bool(item.get("first")), after))

    def _count(self):
        """Read step, once a cycle: a credit returned."""
        if not self._service.in_reset(self.rst) and str(self.credit.value) == "1":
            self.returned += 1

    def _turn(self, meta) -> bool:
        first, _ = meta
        if first and self.credits == 0:
            self.stalls += 1
            return False
        if first:
            self.started += 1
            owed = self.started - self.returned
            assert owed <= self.capacity, f"cycle {self.counter.cycle}: {owed} owed"
            self.max_owed = max(self.max_owed, owed)
        self._cycle = self.counter.cycle
        return True

    def _taken(self, meta):
        _, after = meta
        if after is not None:
            after(self._cycle)


@dataclass
class Op:
    """One GEMV for the VAC: ``W`` (M, K) and ``x`` (K,) INT8, PPU ``m`` / ``shift`` per output,
    and for the fused mode the real factor ``rc`` (and its fraction bits ``frac``) that the
    vector-engine stand-in converts with ``golden.rdxe.to_rc``. With ``kv`` the weights are
    KV-cache rows (written as two byte-enabled halves) instead of WMEM rows."""

    W: np.ndarray
    x: np.ndarray
    m: np.ndarray
    shift: np.ndarray
    rc: float | None = None
    frac: int = 4
    kv: bool = False


class VacTB(BlockTB):
    """One VAC with its loads, HLINK source, RC factors and result sink.

    Parameters
    ----------
    rc_delay : (int, int)
        Range of the cycles between the last chunk of a fused operation's first pass and its RC
        factor on ``rc`` (the vector engine's latency, 41 cycles at the defaults, and then some).
    """

    def __init__(self, dut, *, rc_delay=(0, 60), **kwargs):
        super().__init__(dut, inputs=("wmem", "kv", "ppu", "rc"), outputs=("o",), **kwargs)
        self.vac = self.component
        self.cfg = cfg = self.component.cfg
        self.rc_delay = rc_delay
        self.vmodel = VacModel(cfg, self.vac.acc_latency - 3)
        self.codecs["hlink_i"] = PayloadCodec(self.ports["hlink_i__payload"])
        idle = self.drivers["wmem"].idle
        self.source = CreditSource(dut, self.codecs["hlink_i"], self.counter, self.rng, idle,
                                   cfg.queue_depth)
        self.drivers["hlink_i"] = self.source
        self.input_monitors["hlink_i"] = StreamMonitor(
            dut, "hlink_i", dut.clk, self.codecs["hlink_i"], self.counter,
            lambda item, cycle: self._on_input("hlink_i", item, cycle), dut.rst)
        self.output_monitors["o"].callback = self._on_result
        # Stimulus bookkeeping: where the next operation goes, and who last used each place.
        self._row = self._kv_row = self._entry = 0
        self._row_reader = [0] * cfg.wmem_depth     # chunks to be taken before a row is reused
        self._kv_reader = [0] * max(cfg.kv_rows, 1)
        self._entry_user = [0] * cfg.ppu_depth      # results to be out before an entry is reused
        self._loads = {"wmem": 0, "kv": 0, "ppu": 0}
        self._outputs = 0
        self._factors: collections.deque = collections.deque()
        self._factor_wake, self._factors_idle = Event(), Event()
        self._factors_idle.set()
        self.forwarded = 0
        dut.hlink_o__ready.value = 0
        cocotb.start_soon(self._feed_factors())
        self._before = (0, 0)       # hlink_i's valid and payload in the last cycle
        self._clock = ClockService.of(self.clk)
        self._clock.on_edge(self._watch_edge)
        self._clock.on_read(self._watch)

        self._owed = 0                              # outputs started, results not yet out
        block = self.block.name
        self.samplers = {"hlink_i": sampler({
            f"{block}.operation": (lambda item: None if not item["last"] else
                                   "kv" if item["kv"] else "fused" if item["rcu"] else "plain",
                                   ("plain", "fused", "kv")),
            f"{block}.chunks": (lambda item: None if not item["last"] else
                                "one" if item["first"] else "several", ("one", "several")),
            f"{block}.owed": (self._owed_class, ("none", "some", "last_credit"))})}

    def _owed_class(self, item) -> str | None:
        """At an output's first chunk, the results the VAC owed before it: ``none``, ``some``,
        or ``last_credit`` when this output takes the last of its ``queue_depth`` credits, so
        that the next output starves until a result returns one."""
        if not item["first"]:
            return None
        return ("none" if self._owed == 0 else
                "last_credit" if self._owed + 1 == self.cfg.queue_depth else "some")

    def observe(self, stream, item, cycle):
        super().observe(stream, item, cycle)      # sampled with what was owed before the item
        if stream == "hlink_i" and item["first"]:
            self._owed += 1
        elif stream == "o":
            self._owed -= 1

    # --- model --------------------------------------------------------------------------------

    def model(self, stream, item):
        cycle = self.counter.cycle
        handler = {"wmem": self.vmodel.wmem_write, "kv": self.vmodel.kv_write,
                   "ppu": self.vmodel.ppu_write,
                   "rc": self.vmodel.rc_factor, "hlink_i": self.vmodel.chunk}[stream]
        handler(item, cycle)
        return {"o": self.vmodel.ready(cycle)}

    def _expect(self):
        for item in self.vmodel.ready(self.counter.cycle):
            self.scoreboards["o"].expect(item)

    def _on_result(self, item, cycle):
        self.observe("o", item, cycle)
        self._expect()
        self.scoreboards["o"].got(item, cycle)

    def _watch_edge(self):
        """Write step, once a cycle: a random ``hlink_o__ready``."""
        self.dut.hlink_o__ready.value = int(self.rng.random() < 0.5)     # ignored by the VAC

    def _watch(self):
        """Read step, once a cycle: HLINK forwarding, the credit pulse, ready inputs, no
        overrun."""
        dut = self.dut
        cycle = self.counter.cycle
        if self._clock.in_reset(dut.rst):
            self._before = (0, 0)
            return
        before = self._before
        bits = {name: self._bit(name) for name in (
            "hlink_i__valid", "hlink_o__valid", "hlink_i__ready", "wmem__ready",
            "ppu__ready", "kv__ready", "rc__ready", "o__valid", "o__ready", "credit", "overrun")}
        valid_o = bits["hlink_o__valid"]
        if valid_o != before[0]:
            raise AssertionError(f"cycle {cycle}: hlink_o__valid is {valid_o}, hlink_i__valid "
                                 f"was {before[0]} the cycle before")
        if valid_o:
            got = int(dut.hlink_o__payload.value)
            if got != before[1]:
                raise AssertionError(
                    f"cycle {cycle}: hlink_o__payload expected {before[1]:#x} (hlink_i the "
                    f"cycle before), got {got:#x}")
            self.forwarded += 1
        self._before = (bits["hlink_i__valid"], int(dut.hlink_i__payload.value)
                        if bits["hlink_i__valid"] else 0)
        for name in ("hlink_i__ready", "wmem__ready", "kv__ready", "ppu__ready",
                     "rc__ready"):
            if not bits[name]:
                raise AssertionError(f"cycle {cycle}: {name} is 0; the VAC is always ready")
        taken = bits["o__valid"] & bits["o__ready"]
        if bits["credit"] != taken:
            raise AssertionError(f"cycle {cycle}: credit expected {taken} (o__valid & "
                                 f"o__ready), got {bits['credit']}")
        if bits["overrun"]:
            raise AssertionError(f"cycle {cycle}: overrun is 1 with a source that keeps its "
                                 f"credits")
        self._expect()

    def _bit(self, name: str) -> int:
        value = getattr(self.dut, name).value
        if not value.is_resolvable:
            raise AssertionError(f"cycle {self.counter.cycle}: {name} is {value} outside reset")
        return int(value)

    # --- stimulus -----------------------------------------------------------------------------

    def rc_code(self, value: float, frac: int) -> dict:
        """The vector engine's RC factor for the real factor ``value``: ``golden.rdxe.to_rc`` of
        its fp32 code."""
        rc = golden.to_rc(np.uint32(from_float(np.float64(value), FP32)), frac, self.cfg)
        return {"m": int(rc.m), "shift": int(rc.shift)}

    def _place(self, size: int, depth: int, attr: str) -> int:
        start = getattr(self, attr)
        if start + size > depth:
            start = 0
        setattr(self, attr, (start + size) % depth)
        return start

    async def queue_op(self, op: Op):
        """Load ``op``'s WMEM rows and PPU entries (once the operations that used those places
        are done with them) and queue its chunks behind its loads. Returns once queued."""
        cfg, L = self.cfg, self.cfg.lanes
        M, K = op.W.shape
        C = -(-K // L)
        depth = cfg.kv_rows if op.kv else cfg.wmem_depth
        if M * C > depth or M > cfg.ppu_depth:
            raise ValueError(f"a {M} x {K} GEMV does not fit {depth} rows and "
                             f"{cfg.ppu_depth} PPU entries")
        r0 = self._place(M * C, depth, "_kv_row" if op.kv else "_row")
        readers = self._kv_reader if op.kv else self._row_reader
        e0 = self._place(M, cfg.ppu_depth, "_entry")
        await self.source.wait_sent(max(readers[r0:r0 + M * C]))
        matched = self.scoreboards["o"]
        need = max(self._entry_user[e0:e0 + M])
        while matched.matched < need:
            await RisingEdge(self.clk)
        Wp = np.zeros((M, C * L), np.int64)
        Wp[:, :K] = op.W
        xp = np.zeros(C * L, np.int64)
        xp[:K] = op.x
        rows = [{"addr": r0 + p * C + j,
                 **{f"data.{k}": to_unsigned(Wp[p, j * L + k], 8) for k in range(L)}}
                for p in range(M) for j in range(C)]
        self.rng.shuffle(rows)
        memory = "wmem"
        if op.kv:
            # Each row as two writes with complementary random byte enables, in random order;
            # the lanes a write does not enable carry random bytes, which must not land.
            memory, halves = "kv", []
            for row in rows:
                en = self.rng.getrandbits(L)
                for mask in (en, ~en & ((1 << L) - 1)):
                    halves.append({**row, "en": mask, **{
                        f"data.{k}": self.rng.getrandbits(8) for k in range(L)
                        if not mask >> k & 1}})
            self.rng.shuffle(halves)
            rows = halves
        entries = [{"addr": e0 + p, "m": to_unsigned(op.m[p], cfg.mult_bits),
                    "shift": int(op.shift[p])} for p in range(M)]
        self.rng.shuffle(entries)
        self.send(memory, rows)
        self.send("ppu", entries)
        self._loads[memory] += len(rows)
        self._loads["ppu"] += len(entries)
        loads = dict(self._loads)
        self.source.gate(lambda: all(self.drivers[n].sent >= loads[n] for n in loads))
        fused = op.rc is not None
        factor = self.rc_code(op.rc, op.frac) if fused else None
        for p in range(M):
            for j in range(C):
                release = fused and p == 0 and j == C - 1
                seq = self.source.send(
                    {"row": r0 + p * C + j, "first": int(j == 0), "last": int(j == C - 1),
                     "out": e0 + p, "rcu": int(fused), "rc_last": int(fused and p == M - 1),
                     "kv": int(op.kv),
                     **{f"data.{k}": to_unsigned(xp[j * L + k], 8) for k in range(L)}},
                    after=(lambda cycle, f=factor: self._release(f, cycle)) if release else None)
                readers[r0 + p * C + j] = seq + 1
            self._outputs += 1
            self._entry_user[e0 + p] = self._outputs

    def _release(self, factor: dict, cycle: int):
        """The fused operation's first pass has left the source: its factor follows."""
        self._factors.append((cycle + self.rng.randint(*self.rc_delay), factor))
        self._factors_idle.clear()
        self._factor_wake.set()

    async def _feed_factors(self):
        while True:
            if not self._factors:
                self._factors_idle.set()
                self._factor_wake.clear()
                await self._factor_wake.wait()
            when, factor = self._factors.popleft()
            while self.counter.cycle < when:
                await RisingEdge(self.clk)
            self.send("rc", [factor])

    async def finish(self, stall_cycles: int = 5_000):
        """Wait for every chunk, factor and result; then check that nothing is left over: no
        open or pending output, every chunk forwarded, every credit back."""
        await self.source.wait_idle()
        await self._factors_idle.wait()
        await self.drivers["rc"].wait_idle()
        start = self.counter.cycle
        while self.vmodel.pending:
            if self.counter.cycle - start > stall_cycles:
                raise AssertionError(f"cycle {self.counter.cycle}: {len(self.vmodel.pending)} "
                                     f"outputs still wait for an RC factor")
            await RisingEdge(self.clk)
        await self.drain(stall_cycles)
        assert self.vmodel.open is None, f"output {self.vmodel.open.index} has no last chunk"
        assert self.forwarded == self.source.sent, \
            f"{self.source.sent} chunks in, {self.forwarded} forwarded on hlink_o"
        assert self.source.credits == self.cfg.queue_depth, \
            f"{self.source.credits} credits back of {self.cfg.queue_depth}"
        assert self.vmodel.outputs == self.scoreboards["o"].matched == self._outputs
        self.log.info("%d outputs, %d chunks, %d cycles; the source waited %d cycles for "
                      "credits, the VAC owed at most %d of %d results",
                      self._outputs, self.source.sent, self.counter.cycle, self.source.stalls,
                      self.source.max_owed, self.cfg.queue_depth)

    # --- operations ---------------------------------------------------------------------------

    def np_rng(self) -> np.random.Generator:
        return np.random.default_rng(self.rng.getrandbits(32))

    def ppu_scale(self, rng, M: int, k: float) -> tuple[np.ndarray, np.ndarray]:
        """PPU multipliers and shifts near the scale ``k`` (within a factor of 2 either way),
        fitting ``mult_bits``; random signs."""
        m, shift = np.zeros(M, np.int64), np.zeros(M, np.int64)
        for o in range(M):
            mo, shift[o] = golden.ppu_code(k * 2.0 ** rng.uniform(-1, 1), self.cfg.mult_bits)
            m[o] = mo * rng.choice([-1, 1])
        return m, shift

    def random_op(self, rng, M: int, K: int, *, rc: float | None = None, frac: int = 4,
                  kv: bool = False) -> Op:
        """Uniform INT8 weights and activations; a PPU scale that spreads the results over the
        INT8 range (the accumulator's spread is about 5500 sqrt(K)). ``kv``: the weights are
        KV-cache rows, if the operation fits the KV cache."""
        W = rng.integers(-128, 128, (M, K))
        x = rng.integers(-128, 128, K)
        gain = 1.0 if rc is None else max(rc, 2.0 ** -20) * 2.0 ** frac
        m, shift = self.ppu_scale(rng, M, 60.0 / (5500.0 * math.sqrt(K) * gain))
        kv = kv and M * -(-K // self.cfg.lanes) <= self.cfg.kv_rows
        return Op(W, x, m, shift, rc, frac, kv)

    def shapes(self, rng, count: int, *, max_chunks: int = 4) -> list[tuple[int, int]]:
        """Random (M, K) that fit: K from 1 to ``max_chunks`` chunks (often not a whole
        chunk), M up to the PPU table and the WMEM rows."""
        cfg = self.cfg
        out = []
        for _ in range(count):
            K = int(rng.integers(1, max_chunks * cfg.lanes + 1))
            C = -(-K // cfg.lanes)
            M = int(rng.integers(1, min(cfg.ppu_depth, cfg.wmem_depth // C, 8) + 1))
            out.append((M, K))
        return out


def _tb(dut, **kwargs) -> VacTB:
    return select_tb(dut, {"rdxe-vac": VacTB}, **kwargs)


@cocotb.test()
async def plain_random(dut):
    """Random plain GEMVs back to back, places reused as soon as they are free."""
    tb = _tb(dut)
    await tb.reset()
    rng = tb.np_rng()
    for n, (M, K) in enumerate(tb.shapes(rng, 100)):
        await tb.queue_op(tb.random_op(rng, M, K, kv=n % 3 == 1))
    await tb.finish()


@cocotb.test()
async def fused_random(dut):
    """Fused (RCU + PPU) and plain GEMVs interleaved with random RC factors, then the corners:
    factors 0 (flushed), +inf (saturated), 1/8 (exact) and a rounding tie; INT8 -128 and 127
    everywhere; extreme PPU multipliers; shifts 0 and 63."""
    tb = _tb(dut)
    await tb.reset()
    rng = tb.np_rng()
    cfg = tb.cfg
    for n, (M, K) in enumerate(tb.shapes(rng, 80)):
        fused = n % 3 != 2
        await tb.queue_op(tb.random_op(rng, M, K, rc=2.0 ** rng.uniform(-8, 3) if fused else
                                       None, frac=int(rng.choice([4, 7])), kv=n % 4 == 1))
    L = cfg.lanes
    lo, hi = -(1 << (cfg.mult_bits - 1)), (1 << (cfg.mult_bits - 1)) - 1
    K = 2 * L
    low, high = np.full(K, -128), np.full(K, 127)
    full = np.full((4, K), -128)
    m_ext, one = np.array([lo, hi, 1, -1]), np.array([1, -1, 3, -3])
    shifts = np.array([63, 63, 0, 0])
    corners = [
        Op(full, low, m_ext, shifts),                                   # acc = 2**14 K
        Op(full, high, m_ext, np.array([62, 31, 63, 1])),               # acc = -127 * 2**7 K
        Op(full, low, one, np.array([0, 0, 40, 63])),
        Op(full, low, np.array([1, 1, -1, 7]), np.array([0, 20, 25, 30]), rc=0.0),
        Op(full, low, np.array([1, 1, -1, 1]), np.array([31, 40, 32, 63]), rc=math.inf),
        Op(full, high, np.array([1, 1, -1, 1]), np.array([31, 40, 32, 63]), rc=math.inf),
        Op(full, low, np.array([1, 3, -5, 1]), np.array([22, 23, 24, 0]), rc=0.125),
        Op(full, high, np.array([1, 3, -5, 1]), np.array([12, 13, 14, 63]),
           rc=1 + 3 * 2.0 ** -20, frac=7),
        Op(np.array([[127] * K, [-128] * K]), np.tile([127, -128], L), np.array([1, -1]),
           np.array([10, 10]), rc=1.0),
    ]
    assert tb.rc_code(0.0, 4) == {"m": 0, "shift": golden.SHIFT_MAX}
    assert tb.rc_code(math.inf, 4) == {"m": (1 << (cfg.rc_bits - 6)) - 1, "shift": 0}
    for op in corners:
        await tb.queue_op(op)
    await tb.finish()


@cocotb.test()
async def backpressure(dut):
    """One-chunk and two-chunk outputs with ``o`` stalled for long stretches and RC factors up
    to 150 cycles late, then fused one-chunk outputs back to back with prompt factors: the
    source must run out of credits and wait, the VAC owes at most ``queue_depth`` results and
    holds at most ``queue_depth`` factors, and nothing is lost."""
    tb = _tb(dut, idle=0.05, backpressure=0.7, rc_delay=(0, 150))
    await tb.reset()
    sink = tb.sinks["o"]
    gusting = True

    async def gusts():
        while gusting:
            sink.backpressure = 0.98 if sink.backpressure < 0.9 else 0.7
            for _ in range(tb.rng.randint(20, 120)):
                await RisingEdge(tb.clk)

    cocotb.start_soon(gusts())
    rng = tb.np_rng()
    L = tb.cfg.lanes
    for n in range(40):
        K = int(rng.integers(1, 2 * L + 1)) if n % 4 == 3 else int(rng.integers(1, L + 1))
        M = int(rng.integers(1, min(tb.cfg.ppu_depth, 8) + 1))
        await tb.queue_op(tb.random_op(rng, M, K, rc=2.0 ** rng.uniform(-4, 2)
                                       if n % 2 else None))
    await tb.finish(stall_cycles=20_000)
    # Then, with every credit back, one-output, one-chunk fused operations back to back with
    # prompt factors and no idle cycles: each factor arrives before its output reaches the RCU,
    # so the factor queue fills to queue_depth (one place less loses a factor: the mutation
    # checks in docs/rdxe.md).
    gusting = False
    sink.backpressure = 0.0
    tb.rc_delay = (0, 0)
    for stream in ("wmem", "ppu", "rc", "hlink_i"):
        tb.drivers[stream].idle = 0.0
    for n in range(4 * tb.cfg.queue_depth):
        await tb.queue_op(tb.random_op(rng, 1, int(rng.integers(1, L + 1)),
                                       rc=2.0 ** rng.uniform(-4, 2)))
    await tb.finish()
    assert tb.source.stalls > 0, "the source never ran out of credits: no back-pressure seen"
    assert tb.source.max_owed == tb.cfg.queue_depth, \
        f"the VAC owed at most {tb.source.max_owed} results, not queue_depth"


@cocotb.test()
async def full_rate(dut):
    """No idle cycles, no back-pressure: outputs of ``C`` chunks, the fewest for which
    ``queue_depth`` credits cover a credit's trip (from an output's first chunk to its credit
    counted again: ``C - 1 + latency + 1`` cycles, during which ``queue_depth`` outputs start
    every ``C`` cycles), so the source never waits: one chunk per cycle, one result every ``C``
    cycles, each ``latency`` cycles after its last chunk."""
    tb = _tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    cfg, vac = tb.cfg, tb.vac
    C = max(1, -(-vac.latency // (cfg.queue_depth - 1)))
    M = min(cfg.ppu_depth, cfg.wmem_depth // C, 64)
    rng = tb.np_rng()
    await tb.queue_op(tb.random_op(rng, M, C * cfg.lanes))
    await tb.finish()
    chunks, out = tb.input_monitors["hlink_i"], tb.output_monitors["o"]
    span = chunks.last_cycle - chunks.first_cycle + 1
    latency = out.first_cycle - (chunks.first_cycle + C - 1)
    tb.report("full_rate", items=M * C, cycles=span, per_cycle=round(M * C / span, 4),
              latency=latency, latency_meaning="last chunk of an output on hlink_i to its "
              "result on o", chunks_per_output=C, results=M,
              result_span=out.last_cycle - out.first_cycle + 1, credit_stalls=tb.source.stalls)
    assert tb.source.stalls == 0, f"the source waited {tb.source.stalls} cycles for credits"
    assert span == M * C, f"{M * C} chunks took {span} cycles, not one per cycle"
    assert out.last_cycle - out.first_cycle == (M - 1) * C, "results not one every C cycles"
    assert latency == vac.latency, f"first result {latency} cycles after its last chunk, " \
        f"not the VAC's latency {vac.latency}"
