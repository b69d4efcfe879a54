"""cocotb testbench of the FlowKV tile pair (``flowkv``) and the array of pairs (``flowkv-array``).

The model is fed by the input monitors. Per pair it keeps a queue of decode steps: the command,
then the query beats, the key rows and the value rows that the design actually accepted. When a
step is complete it computes ``O`` with the bit-exact golden model (:func:`golden.flowkv.attend`)
from those rows and queues the expected output beats; a command the contract refuses expects one
``error`` beat once its query beats are in. Which rows a step streams (every row of every chunk
the sweep visits that the cache holds) comes from :func:`golden.flowkv.sweep`, the same rule the
stimulus uses.

Tests: ``random_jobs`` (MHA or GQA per build, with and without a window, sequences below one chunk,
exactly one chunk, many chunks with a partial last one, future rows after the position),
``corner_cases`` (one dominant score, equal scores, exp2 underflow, window edges, L = 1, NaN and
infinities in masked rows), ``refused`` (every refusal rule between good steps) and ``full_rate``
(one long step, no idle cycles: cycles per K and V row, fill and drain).
"""

from __future__ import annotations

import collections
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from golden import flowkv as golden
from golden.arith.float import from_float, to_float
from hdl.flowkv import FlowKVConfig, ValueTile
from hdl.arith.format import BF16

from ..functional import sampler
from ..tb import BlockTB, block_params, select_tb

#: Environment variable of the ``full_rate`` sequence length (benchmarks sweep it).
ENV_LENGTH = "MEMWALL_FLOWKV_LENGTH"
#: Masked rows are filled with these: any use of them would show in the output.
_NAN, _INF = 0x7FC0, 0x7F80


class _Step:
    """One decode step of one pair, as the input monitors saw it."""

    def __init__(self, cfg, cmd: dict):
        self.cmd = cmd
        self.cfg = cfg
        L, p = cmd["length"], cmd["position"]
        self.window = cmd["window"] if cmd["sliding"] else None
        self.refused = refused_step(cfg, L, p, self.window)
        self.rows = [] if self.refused else stream_rows(cfg, L, p, self.window)
        self.q, self.k, self.v = [], [], []

    def need(self, kind: str) -> int:
        """Elements of ``kind`` (q, k or v) the step takes."""
        return self.cfg.head_dim * (self.cfg.group if kind == "q" else len(self.rows))

    def complete(self) -> bool:
        return all(len(getattr(self, kind)) == self.need(kind) for kind in "qkv")

    def expected(self) -> list[dict]:
        cfg = self.cfg
        if self.refused:
            return [{"error": 1, "last": 1, "head": 0, "beat": 0,
                     **{f"data.{i}": 0 for i in range(cfg.lanes)}}]
        q = np.array(self.q, np.uint16).reshape(cfg.group, cfg.head_dim)
        K = np.full((self.cmd["length"], cfg.head_dim), _NAN, np.uint16)
        V = np.full_like(K, _INF)
        K[self.rows] = np.array(self.k, np.uint16).reshape(len(self.rows), cfg.head_dim)
        V[self.rows] = np.array(self.v, np.uint16).reshape(len(self.rows), cfg.head_dim)
        O, trace = golden.attend_trace(q, K, V, self.cmd["position"], chunk=cfg.chunk,
                                       lanes=cfg.lanes, window=self.window,
                                       out_fmt=cfg.out_fmt)
        # Whether exp2 of an attended score's distance to the running maximum underflowed to +0.
        self.scores = "underflow" if any((c.f[:, c.valid] == 0).any() for c in trace) \
            else "in_range"
        out = []
        for h in range(cfg.group):
            for b in range(cfg.beats):
                lanes = O[h, b * cfg.lanes:(b + 1) * cfg.lanes]
                out.append({"error": 0, "head": h, "beat": b,
                            "last": int(h == cfg.group - 1 and b == cfg.beats - 1),
                            **{f"data.{i}": int(x) for i, x in enumerate(lanes)}})
        return out


def _length_class(cfg, length: int) -> str:
    """One row, under one chunk, whole chunks, or chunks with a partial last one."""
    if length == 1:
        return "one_row"
    if length < cfg.chunk:
        return "under_chunk"
    return "whole_chunks" if length % cfg.chunk == 0 else "partial_last"


def _window_class(cfg, position: int, window: int | None) -> str:
    """No window; a window reaching row 0 (it keeps every row); or the window's first row on a
    chunk boundary or inside a chunk (the sweep then starts mid-chunk, masking its head)."""
    if window is None:
        return "none"
    first = position - window + 1
    if first <= 0:
        return "reaches_row_0"
    return "edge_on_chunk" if first % cfg.chunk == 0 else "edge_in_chunk"


def _samplers(block: str, cfg) -> dict:
    """The coverpoints of a decode step (from the command the design took) and of its output
    (refused or not); a refused command is not a step shape."""
    def on_step(f):
        def xf(item):
            window = item["window"] if item["sliding"] else None
            L, p = item["length"], item["position"]
            return None if refused_step(cfg, L, p, window) else f(L, p, window)
        return xf

    lengths = ["one_row", "under_chunk", "whole_chunks", "partial_last"]
    windows = ["none", "reaches_row_0", "edge_on_chunk", "edge_in_chunk"]
    gone = {("one_row", "edge_on_chunk"): "a window over one row reaches row 0",
            ("one_row", "edge_in_chunk"): "a window over one row reaches row 0",
            ("under_chunk", "edge_on_chunk"): "a step under one chunk has no chunk boundary "
                                              "after row 0"}
    unreachable = {f"{block}.length": {}, f"{block}.window": {}}
    if cfg.chunk <= 2:
        unreachable[f"{block}.length"]["under_chunk"] = (
            f"a chunk of {cfg.chunk} rows: no length between one row and one chunk")
    if cfg.chunk == 1:
        unreachable[f"{block}.length"]["partial_last"] = "a chunk of one row is never partial"
        unreachable[f"{block}.window"]["edge_in_chunk"] = "a chunk of one row has no inside"
    unreachable[f"{block}.length_x_window"] = {
        b: why for b, why in gone.items()
        if b[0] not in unreachable[f"{block}.length"]
        and b[1] not in unreachable[f"{block}.window"]}
    points = {
        f"{block}.length": (on_step(lambda L, p, w: _length_class(cfg, L)), lengths),
        f"{block}.window": (on_step(lambda L, p, w: _window_class(cfg, p, w)), windows),
        f"{block}.position": (on_step(lambda L, p, w: "last_row" if p == L - 1 else "earlier"),
                              ("last_row", "earlier")),
        f"{block}.group": (lambda item: "gqa" if cfg.group > 1 else "mha", ("mha", "gqa")),
    }
    crosses = {f"{block}.length_x_window": [f"{block}.length", f"{block}.window"]}
    return {"cmd": sampler(points, crosses, unreachable),
            "scores": sampler({f"{block}.score_range": (lambda item: item["scores"],
                                                        ("in_range", "underflow"))}),
            "o": sampler({f"{block}.refused": (lambda item: item["error"] if item["last"]
                                               else None, (0, 1))})}


def refused_step(cfg, length: int, position: int, window: int | None) -> bool:
    """The contract's refusal rule (``hdl.flowkv.spec.command_layout``)."""
    return (length == 0 or length > cfg.max_tokens or position >= length
            or (window is not None and not 1 <= window <= cfg.max_tokens))


def stream_rows(cfg, length: int, position: int, window: int | None) -> list[int]:
    """The rows a step streams on ``k`` and ``v``: those of every visited chunk the cache holds."""
    return golden.streamed_rows(length, position, chunk=cfg.chunk, window=window)


class FlowKVTB(BlockTB):
    """Streams of one pair (``pairs`` is None) or of every pair of an array."""

    def __init__(self, dut, **kwargs):
        params = block_params()
        self.cfg = FlowKVConfig(**params.pair_args())
        self.pairs = getattr(params, "pairs", None)
        self.names = ([("q", "k", "v", "o")] if self.pairs is None else
                      [(f"q{n}", f"k{n}", f"v{n}", f"o{n}") for n in range(self.pairs)])
        inputs = ["cmd"] + [n for q, k, v, _ in self.names for n in (q, k, v)]
        outputs = [o for *_, o in self.names]
        super().__init__(dut, inputs=inputs, outputs=outputs, **kwargs)
        self.steps = [collections.deque() for _ in self.names]   # per pair, oldest first
        self.by_stream = {}
        for pair, (q, k, v, o) in enumerate(self.names):
            self.by_stream.update({q: (pair, "q"), k: (pair, "k"), v: (pair, "v")})
        samplers = _samplers(self.block.name, self.cfg)
        self.samplers = {"cmd": samplers["cmd"], "scores": samplers["scores"],
                         **{o: samplers["o"] for *_, o in self.names}}

    # --- model --------------------------------------------------------------------------------

    def model(self, stream, item):
        cfg = self.cfg
        if stream == "cmd":
            for steps in self.steps:
                steps.append(_Step(cfg, item))
            return {}
        pair, kind = self.by_stream[stream]
        values = [item[f"data.{i}"] for i in range(cfg.lanes)]
        step = self._open(pair, kind)
        getattr(step, kind).extend(values)
        out = {}
        steps = self.steps[pair]
        while steps and steps[0].complete():
            step = steps.popleft()
            out.setdefault(self.names[pair][3], []).extend(step.expected())
            if not step.refused:
                self.samplers["scores"]({"scores": step.scores})
        return out

    def _open(self, pair, kind):
        """The oldest step of ``pair`` still waiting for beats of ``kind``."""
        for step in self.steps[pair]:
            if len(getattr(step, kind)) < step.need(kind):
                return step
        raise AssertionError(f"cycle {self.counter.cycle}: pair {pair} took a {kind} beat that "
                             f"no decode step asks for")

    # --- stimulus -----------------------------------------------------------------------------

    def beats(self, rows: np.ndarray) -> list[dict]:
        P = self.cfg.lanes
        return [{f"data.{i}": int(x) for i, x in enumerate(row[b * P:(b + 1) * P])}
                for row in rows for b in range(self.cfg.beats)]

    def step(self, length, position, window=None, *, q=None, K=None, V=None, scale=1.0):
        """Queue one decode step on every pair: random N(0, scale^2) operands unless given
        (``q``, ``K``, ``V``: one array for every pair, or a list of one array per pair)."""
        cfg = self.cfg
        self.send("cmd", [{"position": position, "length": length,
                           "window": window or 0, "sliding": int(window is not None)}])
        bad = refused_step(cfg, length, position, window)
        rows = [] if bad else stream_rows(cfg, length, position, window)
        for n, (qs, ks, vs, _) in enumerate(self.names):
            shape_q, shape_kv = (cfg.group, cfg.head_dim), (max(length, 1), cfg.head_dim)
            q_n, K_n, V_n = (x[n] if isinstance(x, list) else x for x in (q, K, V))
            q_n = q_n if q_n is not None else self.normal(shape_q, scale)
            K_n = K_n if K_n is not None else self.normal(shape_kv, scale)
            V_n = V_n if V_n is not None else self.normal(shape_kv, 1.0)
            self.send(qs, self.beats(q_n))
            self.send(ks, self.beats(K_n[rows]))
            self.send(vs, self.beats(V_n[rows]))
        return rows

    def normal(self, shape, scale=1.0) -> np.ndarray:
        rng = np.random.default_rng(self.rng.getrandbits(32))
        return from_float(rng.standard_normal(shape) * scale, BF16)


def _tb(dut, **kwargs) -> FlowKVTB:
    return select_tb(dut, {"flowkv": FlowKVTB, "flowkv-array": FlowKVTB}, **kwargs)


def _lengths(cfg):
    """Sequence shapes the issue lists: below a chunk, one chunk, many with a partial last."""
    Lc = cfg.chunk
    many = min(cfg.max_tokens, 3 * Lc + max(1, Lc // 2))
    return [max(1, Lc // 2), Lc, many, 1]


@cocotb.test()
async def random_jobs(dut):
    """Random steps: full attention and windows, the last row and earlier positions."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    for L in _lengths(cfg):
        tb.step(L, L - 1)
        if L > 2:
            tb.step(L, tb.rng.randrange(L - 1))                    # rows after p are masked
            tb.step(L, L - 1, window=tb.rng.randint(1, L))          # FlowKV-SWA
            tb.step(L, tb.rng.randrange(L), window=tb.rng.randint(1, cfg.max_tokens))
    await tb.drain()


@cocotb.test()
async def corner_cases(dut):
    """One dominant score, equal scores, exp2 underflow, window edges, L = 1."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    G, d = cfg.group, cfg.head_dim
    L = min(cfg.max_tokens, 2 * cfg.chunk + 1)
    # One dominant key: K[j] = 8 q (scores far above the rest: F underflows to +0 for others).
    q = tb.normal((G, d))
    K = tb.normal((L, d), 0.1)
    K[L // 2] = from_float(8.0 * to_float(q[0], BF16), BF16)
    tb.step(L, L - 1, q=q, K=K)
    # Equal scores: every key the same row, so F = 1 everywhere and O is the mean of V.
    K = np.tile(tb.normal((1, d)), (L, 1))
    tb.step(L, L - 1, K=K)
    # Large score range: huge scale makes most exponentials underflow to +0.
    tb.step(L, L - 1, scale=16.0)
    # Window edges: a window of one row, a window ending a chunk early, one longer than p.
    tb.step(L, L - 1, window=1)
    tb.step(L, cfg.chunk - 1 if cfg.chunk <= L else L - 1, window=cfg.chunk)
    tb.step(L, L - 1, window=cfg.max_tokens)
    if 2 * cfg.chunk <= cfg.max_tokens:     # whole chunks, the window starting on a boundary
        tb.step(2 * cfg.chunk, 2 * cfg.chunk - 1, window=cfg.chunk)
    if cfg.chunk > 2:                   # under one chunk, the window reaching row 0
        tb.step(cfg.chunk - 1, cfg.chunk - 2, window=cfg.chunk)
    # L = 1, and a window on it.
    tb.step(1, 0)
    tb.step(1, 0, window=1)
    await tb.drain()


@cocotb.test()
async def refused(dut):
    """Every refusal rule answers with one error beat, between steps that still work."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    M = cfg.max_tokens
    tb.step(3, 2)
    tb.step(0, 0)                       # empty cache
    tb.step(3, 3)                       # position beyond the streamed length
    tb.step(3, 2, window=0)             # a window of zero
    tb.step(M, M - 1, window=M + 1)     # a window beyond the maximum
    tb.step(2, 1, window=1)
    await tb.drain()
    if cfg.max_tokens < (1 << tb.ports["cmd__payload"]["fields"][1]["width"]) - 1:
        tb.step(M + 1, 0)               # a length beyond the maximum
        await tb.drain()


@cocotb.test()
async def full_rate(dut):
    """One long step with no idle cycles and no back-pressure: cycles per K and V row."""
    tb = _tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg = tb.cfg
    L = int(os.environ.get(ENV_LENGTH, min(cfg.max_tokens, 16 * cfg.chunk)))
    rows = len(tb.step(L, L - 1))
    await tb.drain()
    first = tb.names[0]
    k_mon, v_mon = tb.input_monitors[first[1]], tb.input_monitors[first[2]]
    o_mon, c_mon = tb.output_monitors[first[3]], tb.input_monitors["cmd"]
    B = cfg.beats
    k_span = k_mon.last_cycle - k_mon.first_cycle + 1
    v_span = v_mon.last_cycle - v_mon.first_cycle + 1
    # Steady state: the V stream after its first chunk (tile 1 waits for chunk 0's F first).
    tb.report("full_rate", items=rows * B, cycles=v_span, per_cycle=round(rows * B / v_span, 4),
              latency=o_mon.first_cycle - c_mon.first_cycle,
              latency_meaning="decode command to the first output beat",
              rows=rows, ideal_cycles_per_row=B,
              k_cycles_per_row=round(k_span / rows, 3), v_cycles_per_row=round(v_span / rows, 3),
              k_stalls=k_mon.stalls, v_stalls=v_mon.stalls,
              fill=v_mon.first_cycle - c_mon.first_cycle,
              drain=o_mon.last_cycle - v_mon.last_cycle,
              total=o_mon.last_cycle - c_mon.first_cycle + 1,
              # K and V beats over the step's cycles, as a fraction of the 2 beats per cycle the
              # two streams can carry.
              bandwidth=round(rows * B / (o_mon.last_cycle - c_mon.first_cycle + 1), 4))
    # The design's bound: with d / P at least tile 1's accumulator loop, neither stream stalls
    # once it has started (K from its first beat, V from its first beat after chunk 0's F).
    if B >= ValueTile.loop_latency_of(cfg):
        assert k_span == rows * B, \
            f"K: {rows * B} beats took {k_span} cycles: tile 0 stalled with d/P = {B}"
        assert v_span == rows * B, \
            f"V: {rows * B} beats took {v_span} cycles after the first: tile 1 stalled"
