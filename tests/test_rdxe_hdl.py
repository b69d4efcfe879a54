"""In-process tests of the rDXE VAC RTL (Amaranth simulator): parameters, results, HLINK, timing.

A test ring (:class:`Ring`) holds an :class:`~hdl.rdxe.vac.HlinkSource` and ``N`` chained VACs.
Its loads (WMEM rows of ``golden.rdxe.wmem_image``, PPU table entries) go first; then the chunk
stream, with random idle cycles, and the result streams, with random back-pressure
(:func:`tests.stream_sim.run_streams`). RC factors come from ``golden.rdxe.to_rc`` and enter
after their operation's first pass has left the source, as the vector engine's would. Expected
results come from ``golden.rdxe.ppu(accumulate(...))`` (plain) and ``ppu(rcu(accumulate(...)))``
(fused), given the ring's ``VacConfig``; the cycle of every result from ``golden.rdxe.Latency``
and ``gemv_cycles`` / ``rmsnorm_gemv_cycles`` on a ring of ``N`` VACs, with cycle 0 where the
first chunk meets its WMEM row (``Vac.row_latency`` after the source).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pytest
from amaranth import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from golden import rdxe as golden
from golden.arith.float import from_float
from golden.arith.requant import requantize
from hdl.arith.format import FP32
from hdl.rdxe import (DxtConfig, HlinkSource, Vac, VacConfig, VeConfig, hlink_layout, rc_layout,
                      result_layout)
from hdl.rdxe.ve import TAP_LEAD, Activations, Normalizer, RcUnit
from hdl.validate import index_bits

from .pipeline_sim import run_pipeline
from .stream_sim import set_payload, run_streams

SMALL = dict(lanes=4, wmem_depth=64, ppu_depth=16, queue_depth=4)


# --- parameters ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    ({"lanes": 12}, ValueError, "Lane count must be a power of two between 1 and 64, not 12"),
    ({"lanes": 4.0}, TypeError, "Lane count must be an integer power of two between 1 and 64, "
                                "not 4.0"),
    ({"wmem_depth": 0}, ValueError, "WMEM depth must be between 1 and 1048576, not 0"),
    ({"ppu_depth": 1 << 21}, ValueError,
     "PPU table depth must be between 1 and 1048576, not 2097152"),
    ({"mult_bits": 40}, ValueError, "PPU multiplier width must be between 2 and 32, not 40"),
    ({"clamp": "wide"}, ValueError, "Clamp must be 'symmetric' or 'full', not 'wide'"),
    ({"rc_bits": 12}, ValueError, "RC factor width must be between 16 and 30, not 12"),
    ({"queue_depth": 2}, ValueError, "Result queue depth must be between 3 and 1024, not 2"),
    ({"queue_depth": True}, TypeError,
     "Result queue depth must be an integer between 3 and 1024, not True"),
    ({"operand_stages": 0}, ValueError,
     "Operand register stages must be between 1 and 8, not 0"),
])
def test_parameter_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        VacConfig(**kwargs)


def test_component_argument_errors():
    with pytest.raises(TypeError, match="VAC configuration must be a VacConfig, not 16"):
        Vac(16)
    with pytest.raises(ValueError, match="VAC count must be between 1 and 64, not 65"):
        HlinkSource(VacConfig(), vacs=65)


def test_latencies_match_golden():
    for lanes in (1, 4, 16, 64):
        vac = Vac(VacConfig(lanes=lanes))
        lat = golden.Latency.of(vac.cfg)
        assert vac.dot_latency == lat.dot(lanes)
        assert vac.requant_latency == lat.ppu
        assert vac.rcu_latency == lat.rcu
        assert vac.acc_latency == vac.row_latency + lat.dot(lanes) + lat.accumulate
    # row 5 + lane tree 5 + accumulator 1 + PPU 8 + result queue 2; 3 fewer with 1 stage.
    assert (Vac(VacConfig()).row_latency, Vac(VacConfig()).latency) == (5, 21)
    assert Vac(VacConfig(operand_stages=1)).latency == 18
    for stages in (1, 4, 8):
        cfg = VacConfig(operand_stages=stages)
        assert golden.Latency.of(cfg).row == Vac(cfg).row_latency
    assert golden.Latency.of(DxtConfig()) == golden.Latency.of(VacConfig()) == golden.Latency()


# --- the test ring -------------------------------------------------------------------------------

class Ring(wiring.Component):
    """An HlinkSource and ``vacs`` chained VACs, with routed loads and a gated RC broadcast.

    ``wmem`` and ``ppu`` loads name their VAC; ``i`` is held back until ``loads`` of them have
    been taken. ``i`` carries the HLINK payload and a ``release`` flag, which the plan sets on
    the last chunk of a fused operation's first pass (the whole input: the vector engine can
    compute the factor from it); ``rc`` is taken only after a release not yet answered by a
    factor.
    """

    def __init__(self, cfg: VacConfig, vacs: int, loads: int):
        self.cfg, self.vacs, self.loads = cfg, vacs, loads
        sel = index_bits(vacs)
        members = {
            "wmem": In(stream.Signature(data.StructLayout({
                "vac": sel, "addr": cfg.row_bits,
                "data": data.ArrayLayout(signed(8), cfg.lanes)}))),
            "ppu": In(stream.Signature(data.StructLayout({
                "vac": sel, "addr": cfg.out_bits, "m": signed(cfg.mult_bits), "shift": 6}))),
            "rc": In(stream.Signature(rc_layout(cfg))),
            "i": In(stream.Signature(data.StructLayout({"link": hlink_layout(cfg),
                                                        "release": 1}))),
            "overrun": Out(vacs),
        }
        for v in range(vacs):
            members[f"o{v}"] = Out(stream.Signature(result_layout(cfg)))
        super().__init__(members)
        self.units = [Vac(cfg) for _ in range(vacs)]
        self.source = HlinkSource(cfg, vacs=vacs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.source = src = self.source
        loaded = Signal(range(self.loads + 1))
        ready = loaded == self.loads
        taken = (self.wmem.valid & self.wmem.ready) + (self.ppu.valid & self.ppu.ready)
        m.d.sync += loaded.eq(loaded + taken)
        m.d.comb += [self.wmem.ready.eq(1), self.ppu.ready.eq(1),
                     src.i.valid.eq(self.i.valid & ready), src.i.payload.eq(self.i.payload.link),
                     self.i.ready.eq(src.i.ready & ready)]
        ends = Signal(range(64))
        rc_take = self.rc.valid & self.rc.ready
        m.d.comb += self.rc.ready.eq(ends != 0)
        release = self.i.valid & self.i.ready & self.i.payload.release
        m.d.sync += ends.eq(ends + release - rc_take)
        upstream = src.o
        for v, vac in enumerate(self.units):
            m.submodules[f"vac{v}"] = vac
            wiring.connect(m, upstream, vac.hlink_i)
            upstream = vac.hlink_o
            mine_w = self.wmem.payload.vac == v
            mine_p = self.ppu.payload.vac == v
            m.d.comb += [
                vac.wmem.valid.eq(self.wmem.valid & mine_w),
                vac.wmem.payload.addr.eq(self.wmem.payload.addr),
                vac.wmem.payload.data.eq(self.wmem.payload.data),
                vac.ppu.valid.eq(self.ppu.valid & mine_p),
                vac.ppu.payload.addr.eq(self.ppu.payload.addr),
                vac.ppu.payload.m.eq(self.ppu.payload.m),
                vac.ppu.payload.shift.eq(self.ppu.payload.shift),
                vac.rc.valid.eq(rc_take), vac.rc.payload.eq(self.rc.payload),
                src.credit[v].eq(vac.credit), self.overrun[v].eq(vac.overrun),
            ]
            wiring.connect(m, vac.o, wiring.flipped(getattr(self, f"o{v}")))
        m.d.comb += upstream.ready.eq(1)
        return m


# --- operations: stimulus and expected results ----------------------------------------------------

@dataclass
class Op:
    """One GEMV: ``W`` (M, K), ``x`` (K,), PPU ``m``/``shift`` per output; ``rc`` (an
    RCFactor) for the fused mode or None."""

    W: np.ndarray
    x: np.ndarray
    m: np.ndarray
    shift: np.ndarray
    rc: golden.RCFactor | None = None

    def expected(self, cfg: VacConfig) -> np.ndarray:
        acc = golden.accumulate(self.W, self.x)
        if self.rc is not None:
            acc = golden.rcu(acc, self.rc)
        return golden.ppu(acc, self.m, self.shift, cfg)


class Plan:
    """Lay operations out in the WMEM and PPU tables and build loads, chunks and expectations."""

    def __init__(self, cfg: VacConfig, vacs: int, ops: list[Op]):
        self.cfg, self.vacs, self.ops = cfg, vacs, ops
        L, N = cfg.lanes, vacs
        self.wmem, self.ppu, self.chunks, self.rc = [], [], [], []
        self.expect = [[] for _ in range(N)]
        row, out = 0, 0
        for op in ops:
            M, K = op.W.shape
            C, P = -(-K // L), -(-M // N)
            image = golden.wmem_image(op.W, cfg, vacs=N)
            for v in range(N):
                for r in range(P * C):
                    self.wmem.append({"vac": v, "addr": row + r,
                                      "data": [int(b) for b in image[v, r]]})
            ref = op.expected(cfg)
            m = np.broadcast_to(op.m, (M,))
            shift = np.broadcast_to(op.shift, (M,))
            for o in range(P * N):
                p, v = divmod(o, N)
                # Padding outputs (zero weights) get PPU (0, 0): their result is 0.
                mo, so = (int(m[o]), int(shift[o])) if o < M else (0, 0)
                self.ppu.append({"vac": v, "addr": out + p, "m": mo, "shift": so})
                self.expect[v].append(int(ref[o]) if o < M else 0)
            xp = np.zeros(C * L, np.int64)
            xp[:K] = op.x
            fused = op.rc is not None
            for p in range(P):
                for j in range(C):
                    self.chunks.append({"release": int(fused and p == 0 and j == C - 1),
                                        "link": {
                        "data": [int(b) for b in xp[j * L:(j + 1) * L]], "row": row + p * C + j,
                        "first": int(j == 0), "last": int(j == C - 1), "out": out + p,
                        "rcu": int(fused), "rc_last": int(fused and p == P - 1)}})
            if fused:
                self.rc.append({"m": int(op.rc.m), "shift": int(op.rc.shift)})
            row += P * C
            out += P
        assert row <= cfg.wmem_depth and out <= cfg.ppu_depth, (row, out)

    def ring(self) -> Ring:
        return Ring(self.cfg, self.vacs, len(self.wmem) + len(self.ppu))

    def run(self, *, seed: int, idle: float = 0.3, stall: float = 0.3):
        ring = self.ring()
        inputs = {"wmem": self.wmem, "ppu": self.ppu, "i": self.chunks, "rc": self.rc}
        outputs = {f"o{v}": ["y"] for v in range(self.vacs)}
        counts = [len(e) for e in self.expect]
        received, cycles = run_streams(
            ring, inputs, outputs, seed=seed, idle=idle, stall=stall, max_cycles=20_000,
            done=lambda rec: all(len(rec[f"o{v}"]) >= counts[v] for v in range(self.vacs)))
        for v in range(self.vacs):
            got = [r["y"] for r in received[f"o{v}"]]
            assert got == self.expect[v], f"VAC {v}: expected {self.expect[v]}, got {got}"
        return cycles


def _rc(value: float, frac: int, cfg: VacConfig) -> golden.RCFactor:
    bits = np.uint32(from_float(np.float64(value), FP32))
    return golden.to_rc(bits, frac, cfg)


def _random_op(rng, cfg, vacs, M, K, *, fused=False, frac=4) -> Op:
    W = rng.integers(-128, 128, (M, K))
    x = rng.integers(-128, 128, K)
    lo, hi = -(1 << (cfg.mult_bits - 1)), 1 << (cfg.mult_bits - 1)
    m = rng.integers(1, min(hi, 1 << 16), M) * rng.choice([-1, 1], M)
    m = np.clip(m, lo, hi - 1)
    shift = rng.integers(10, 26, M)
    rc = None
    if fused:
        rc = _rc(2.0 ** rng.uniform(-8, 3), frac, cfg)
    return Op(W, x, m, shift, rc)


# --- results against the golden model ------------------------------------------------------------

@pytest.mark.parametrize("vacs, shape, seed", [(1, (3, 9), 0), (3, (7, 10), 1), (2, (4, 3), 2)])
def test_plain_gemv_matches_golden(vacs, shape, seed):
    cfg = VacConfig(**SMALL)
    rng = np.random.default_rng(seed)
    Plan(cfg, vacs, [_random_op(rng, cfg, vacs, *shape)]).run(seed=seed)


def test_fused_and_plain_operations_interleaved():
    """Fused (RCU + PPU), plain, fused and plain again: one-chunk outputs right behind fused ones
    must wait for the RCU to empty; two factors in flight; random RC factors from to_rc."""
    cfg = VacConfig(**SMALL)
    rng = np.random.default_rng(5)
    ops = [_random_op(rng, cfg, 3, 7, 10, fused=True), _random_op(rng, cfg, 3, 6, 3),
           _random_op(rng, cfg, 3, 5, 4, fused=True, frac=7), _random_op(rng, cfg, 3, 4, 1)]
    Plan(cfg, 3, ops).run(seed=5)


def test_corner_cases():
    """INT8 -128 everywhere (clamp 'full'), shifts 0 and 63, extreme multipliers, RC factors 0
    (flushed), +inf (saturated), a power of two and a tie-rounding significand."""
    cfg = VacConfig(**{**SMALL, "clamp": "full"})
    full = np.full((4, 8), -128)
    xs = np.full(8, -128)
    m_ext = np.array([-(1 << 31), (1 << 31) - 1, 1, -1])
    ops = [
        Op(full, xs, m_ext, np.array([63, 63, 0, 0])),             # acc = 2**17
        Op(full, xs, np.array([1, -1, 3, -3]), np.array([17, 17, 18, 18])),
        Op(full, -xs - 1, m_ext, np.array([62, 31, 63, 1])),       # acc = -128 * 127 * 8
        Op(full, xs, np.array([1, 1, -1, 7]), np.array([0, 20, 25, 30]),
           _rc(0.0, 4, cfg)),                                   # flushed: (0, 63)
        Op(full, xs, np.array([1, 1, -1, 1]), np.array([31, 40, 32, 63]),
           _rc(math.inf, 4, cfg)),                              # saturated: (2**19 - 1, 0)
        Op(full, xs, np.array([1, 3, -5, 1]), np.array([22, 23, 24, 0]),
           _rc(0.125, 4, cfg)),                                 # exact: m = 2**18
        Op(full, -xs - 1, np.array([1, 3, -5, 1]), np.array([12, 13, 14, 63]),
           _rc(1 + 3 * 2.0 ** -20, 7, cfg)),                    # significand tie
    ]
    assert int(ops[3].rc.m) == 0 and int(ops[3].rc.shift) == 63
    assert int(ops[4].rc.m) == (1 << 19) - 1 and int(ops[4].rc.shift) == 0
    plan = Plan(cfg, 2, ops)
    assert {v for e in plan.expect for v in e} >= {-128, 127, 0}
    plan.run(seed=9)


def test_back_pressure_with_three_credits():
    """The smallest queue: the source waits for credits, the ring never drops a result."""
    cfg = VacConfig(**{**SMALL, "queue_depth": 3})
    rng = np.random.default_rng(3)
    ops = [_random_op(rng, cfg, 3, 9, 4), _random_op(rng, cfg, 3, 6, 2, fused=True)]
    Plan(cfg, 3, ops).run(seed=3, idle=0.1, stall=0.7)


def test_accumulator_near_int32_limits(slow_run):
    """K = MAX_INPUTS = 2**16 inputs of -128 x -128 (acc = 2**30) and -128 x 127 (acc = -127 *
    2**23), at 64 lanes (1024 chunks per output) and with --slow at 16 (4096 chunks), every
    chunk meeting the one WMEM row. The second goes through a saturated RC factor, so the RCU
    clamps at -2**31."""
    # The same sums in a quarter of the cycles at 64 lanes: 13 s against 26 s.
    cfg = VacConfig(lanes=16 if slow_run else 64, wmem_depth=4, ppu_depth=4, clamp="full",
                    queue_depth=3)
    K = golden.MAX_INPUTS
    W = np.full((1, K), -128)
    ops = [Op(W, np.full(K, -128), np.array([1]), np.array([24])),
           Op(W, np.full(K, 127), np.array([1]), np.array([31]), _rc(math.inf, 4, cfg))]
    accs = [int(golden.accumulate(op.W, op.x)[0]) for op in ops]
    assert accs == [1 << 30, -127 << 23]
    expect = [int(op.expected(cfg)[0]) for op in ops]
    assert expect == [64, -1]
    C = K // cfg.lanes
    chunks = []
    for index, op in enumerate(ops):
        fused = op.rc is not None
        for j in range(C):
            chunks.append({"release": int(fused and j == C - 1), "link": {
                "data": [int(op.x[0])] * cfg.lanes, "row": 0, "first": int(j == 0),
                "last": int(j == C - 1), "out": index, "rcu": int(fused),
                "rc_last": int(fused)}})
    inputs = {
        "wmem": [{"vac": 0, "addr": 0, "data": [-128] * cfg.lanes}],
        "ppu": [{"vac": 0, "addr": i, "m": int(op.m[0]), "shift": int(op.shift[0])}
                for i, op in enumerate(ops)],
        "i": chunks,
        "rc": [{"m": int(ops[1].rc.m), "shift": int(ops[1].rc.shift)}],
    }
    received, _ = run_streams(Ring(cfg, 1, 3), inputs, {"o0": ["y"]}, seed=4, idle=0.02,
                              stall=0.5, done=lambda rec: len(rec["o0"]) >= 2)
    assert [r["y"] for r in received["o0"]] == expect


# --- HLINK forwarding and timing ----------------------------------------------------------------

def _drive(plan: Plan, *, idle: float = 0.0, rc_at: int | None = None, seed: int = 0):
    """Run ``plan`` with every output always ready: the loads first, then the chunks (with
    ``idle`` chance of a gap), the first on VAC 0's ``hlink_i`` at model cycle ``-row_latency``
    (cycle 0: it meets its WMEM row at VAC 0's lane tree). ``rc_at``: the model cycle at which
    the (single) RC factor is on ``rc``.

    Returns ``(results, links)``: per VAC the list of ``(model cycle, y)`` of its ``o``
    transfers; per cycle and VAC the ``(valid, payload)`` of ``hlink_i`` and ``hlink_o``.
    """
    ring = plan.ring()
    rng = random.Random(seed)
    N = plan.vacs
    results = [[] for _ in range(N)]
    links = []
    counts = [len(e) for e in plan.expect]

    async def bench(ctx):
        loads = max(len(plan.wmem), len(plan.ppu))
        for k in range(loads):
            for name in ("wmem", "ppu"):
                items = getattr(plan, name)
                port = getattr(ring, name)
                ctx.set(port.valid, int(k < len(items)))
                if k < len(items):
                    set_payload(ctx, port.payload, items[k])
            await ctx.tick()
        for name in ("wmem", "ppu"):
            ctx.set(getattr(ring, name).valid, 0)
        await ctx.tick()
        for v in range(N):
            ctx.set(getattr(ring, f"o{v}").ready, 1)
        sent, cycle = 0, -ring.units[0].row_latency
        while any(len(results[v]) < counts[v] for v in range(N)):
            assert cycle < 5000, "timing run did not finish"
            offer = sent < len(plan.chunks) and (sent == 0 or rng.random() >= idle)
            ctx.set(ring.i.valid, int(offer))
            if offer:
                set_payload(ctx, ring.i.payload, plan.chunks[sent])
                assert ctx.get(ring.i.ready), f"cycle {cycle}: the source stalled"
            ctx.set(ring.rc.valid, int(rc_at is not None and cycle == rc_at))
            if rc_at is not None and cycle == rc_at:
                set_payload(ctx, ring.rc.payload, plan.rc[0])
                assert ctx.get(ring.rc.ready), f"cycle {cycle}: RC factor refused"
            for v in range(N):
                port = getattr(ring, f"o{v}")
                if ctx.get(port.valid):
                    results[v].append((cycle, ctx.get(port.payload.y)))
            links.append([(ctx.get(u.hlink_i.valid), ctx.get(u.hlink_i.payload.as_value()),
                           ctx.get(u.hlink_o.valid), ctx.get(u.hlink_o.payload.as_value()))
                          for u in ring.units])
            sent += int(offer)
            cycle += 1
            await ctx.tick()

    sim = Simulator(ring)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for v in range(N):
        assert [y for _, y in results[v]] == plan.expect[v], f"VAC {v}"
    return results, links


def test_hlink_forwards_every_chunk_one_cycle_later():
    cfg = VacConfig(**SMALL)
    rng = np.random.default_rng(8)
    plan = Plan(cfg, 4, [_random_op(rng, cfg, 4, 8, 11), _random_op(rng, cfg, 4, 3, 5)])
    _, links = _drive(plan, idle=0.4, seed=8)
    chunks = 0
    for t in range(1, len(links)):
        for v in range(plan.vacs):
            valid_i, payload_i = links[t - 1][v][:2]
            valid_o, payload_o = links[t][v][2:]
            assert valid_o == valid_i, f"cycle {t}, VAC {v}: hlink_o.valid {valid_o}"
            if valid_i:
                assert payload_o == payload_i, f"cycle {t}, VAC {v}: hlink_o.payload"
            if v + 1 < plan.vacs:
                assert links[t][v + 1][:2] == links[t][v][2:], f"cycle {t}: ring {v} -> {v + 1}"
        chunks += links[t][plan.vacs - 1][2]
    assert chunks == len(plan.chunks)


def _acc_ready(o: int, N: int, C: int, lanes: int, lat=golden.Latency()) -> int:
    """The cycle model's a_o: chunk j of pass p at VAC v at p*C + j + v, then dot + accumulate."""
    p, v = divmod(o, N)
    return p * C + C - 1 + v + lat.dot(lanes) + lat.accumulate


@pytest.mark.parametrize("lanes, vacs, M, K, stages", [(4, 4, 16, 12, 4), (4, 3, 7, 4, 1),
                                                       (16, 2, 5, 40, 2)])
def test_plain_timing_matches_cycle_model(lanes, vacs, M, K, stages):
    cfg = VacConfig(lanes=lanes, wmem_depth=64, ppu_depth=16, queue_depth=32,
                    operand_stages=stages)
    lat = golden.Latency.of(cfg)
    queue = Vac(cfg).queue_latency
    rng = np.random.default_rng(M)
    plan = Plan(cfg, vacs, [_random_op(rng, cfg, vacs, M, K)])
    results, _ = _drive(plan)
    C = -(-K // lanes)
    leave = {}
    for v in range(vacs):
        for p, (cycle, _) in enumerate(results[v]):
            o = p * vacs + v
            want = _acc_ready(o, vacs, C, lanes) + lat.ppu + queue
            assert cycle == want, f"output {o}: result on o at {cycle}, model {want}"
            leave[o] = cycle - queue               # padding outputs too: the model counts them
    assert max(leave.values()) + 1 == golden.gemv_cycles(M, K, cfg, vacs=vacs).total


def _fused_issue(a: list[int], rc_ready: int) -> list[int]:
    """RCU entry cycles of one VAC's outputs: in order, one per cycle, none before the factor."""
    s = []
    for a_k in a:
        s.append(max(a_k, rc_ready, s[-1] + 1 if s else 0))
    return s


@pytest.mark.parametrize("M, K", [(8, 160), (16, 4)])
def test_fused_timing_against_cycle_model(M, K):
    """The RC factor on ``rc`` one cycle before golden's rc_ready. Each VAC's RCU takes one
    accumulator per cycle, so outputs parked for the factor leave one per cycle: K = 160 parks
    at most one per VAC, K = 4 (one chunk per output) parks all four; both end on golden's
    rmsnorm_gemv_cycles (74 cycles for the second)."""
    lanes, vacs = 4, 4
    cfg = VacConfig(lanes=lanes, wmem_depth=128, ppu_depth=16, queue_depth=32)
    lat = golden.Latency.of(cfg)
    queue = Vac(cfg).queue_latency
    rng = np.random.default_rng(K)
    plan = Plan(cfg, vacs, [_random_op(rng, cfg, vacs, M, K, fused=True)])
    model = golden.rmsnorm_gemv_cycles(M, K, cfg, vacs=vacs)
    results, _ = _drive(plan, rc_at=model.rc_ready - 1)
    C = -(-K // lanes)
    last = 0
    for v in range(vacs):
        outs = [p * vacs + v for p in range(len(results[v]))]
        entry = _fused_issue([_acc_ready(o, vacs, C, lanes) for o in outs], model.rc_ready)
        for o, s, (cycle, _) in zip(outs, entry, results[v]):
            want = s + lat.rcu + lat.ppu + queue
            assert cycle == want, f"output {o}: result on o at {cycle}, expected {want}"
            if o < M:
                last = max(last, cycle - queue)
    assert last + 1 == model.total
    if K == 4:
        assert (model.total, model.hold) == (74, 4)


# --- flow control ---------------------------------------------------------------------------------

def _bench(dut, body):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()


def test_hlink_source_keeps_credits_per_vac():
    """Three credits per VAC: the fourth output waits until every VAC has returned one; chunks
    of a started output and non-first chunks always pass."""
    cfg = VacConfig(**{**SMALL, "queue_depth": 3})
    src = HlinkSource(cfg, vacs=2)
    seen = []

    async def body(ctx):
        ctx.set(src.i.valid, 1)
        for step in range(3):
            ctx.set(src.i.payload.first, 1)
            assert ctx.get(src.i.ready) and ctx.get(src.o.valid), f"start {step}"
            await ctx.tick()
        assert not ctx.get(src.i.ready) and not ctx.get(src.o.valid), "no credit left"
        ctx.set(src.i.payload.first, 0)
        assert ctx.get(src.i.ready) and ctx.get(src.o.valid), "a non-first chunk passes"
        ctx.set(src.i.payload.first, 1)
        ctx.set(src.credit, 0b01)                  # VAC 0 returns one: not enough
        await ctx.tick()
        ctx.set(src.credit, 0)
        assert not ctx.get(src.i.ready)
        ctx.set(src.credit, 0b10)                  # now VAC 1 too
        await ctx.tick()
        ctx.set(src.credit, 0)
        seen.append(ctx.get(src.i.ready))
        await ctx.tick()
        seen.append(ctx.get(src.i.ready))

    _bench(src, body)
    assert seen == [1, 0]


@pytest.mark.parametrize("what, count", [("outputs", 6), ("outputs", 7), ("factors", 3),
                                         ("factors", 4)])
def test_overrun_flags_a_source_without_credits(what, count):
    """A VAC driven past its credits loses a result and says so. With three credits and ``o``
    never ready, six one-chunk outputs still fit (three in the result queue, three in the hold
    queue), the seventh does not; three RC factors with none used fit, the fourth does not."""
    cfg = VacConfig(**{**SMALL, "queue_depth": 3})
    vac = Vac(cfg)
    flags = []

    async def body(ctx):
        ctx.set(vac.o.ready, 0)
        port = vac.hlink_i if what == "outputs" else vac.rc
        for name in ("first", "last"):
            ctx.set(vac.hlink_i.payload[name], 1)
        for k in range(count + 12):
            ctx.set(port.valid, int(k < count))
            flags.append(ctx.get(vac.overrun))
            await ctx.tick()
        flags.append(ctx.get(vac.overrun))

    _bench(vac, body)
    assert flags[0] == 0 and flags[-1] == int(count > (6 if what == "outputs" else 3))


# --slow: the paper's 16 VACs of 16 lanes; test_golden_rdxe pins golden's 29 and 71 cycles, and
# test_plain_timing_matches_cycle_model and test_fused_timing_against_cycle_model hold the RTL to
# that model, cycle for cycle, on rings of 2 to 4 VACs in make test.
@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True])
def test_paper_tile_by_hand(fused):
    """golden's hand numbers: 16 x 16 on 16 VACs of 16 lanes. VAC 15 gets the chunk at cycle 15,
    lane tree 5, accumulator 1, PPU 7: the last result leaves the PPU at 28 (29 cycles). Fused:
    the factor reaches the RCUs at 57, RCU 6 and PPU 7: the last result at 70 (71 cycles)."""
    cfg = VacConfig(lanes=16, wmem_depth=4, ppu_depth=4, queue_depth=8)
    rng = np.random.default_rng(16)
    plan = Plan(cfg, 16, [_random_op(rng, cfg, 16, 16, 16, fused=fused)])
    model = (golden.rmsnorm_gemv_cycles if fused else golden.gemv_cycles)(16, 16, cfg, vacs=16)
    results, _ = _drive(plan, rc_at=model.rc_ready - 1 if fused else None)
    last = max(cycle for r in results for cycle, _ in r) - Vac(cfg).queue_latency
    assert (last + 1, model.total) == ((71, 71) if fused else (29, 29))


def test_full_rate_needs_one_ring_trip_of_credits():
    """One-chunk outputs back to back on 4 VACs: VAC 3's credit comes back ``3 + latency + 1``
    cycles after its output started (HlinkSource), so that many credits run the ring at full
    rate with ``o`` always ready, and one fewer makes the source wait."""
    lanes, vacs = 4, 4
    trip = vacs - 1 + Vac(VacConfig(lanes=lanes)).latency + 1
    rng = np.random.default_rng(12)
    op = _random_op(rng, VacConfig(lanes=lanes), vacs, 4 * trip, 3)
    for depth, stalls in ((trip, False), (trip - 1, True)):
        cfg = VacConfig(lanes=lanes, wmem_depth=64, ppu_depth=64, queue_depth=depth)
        plan = Plan(cfg, vacs, [op])
        if stalls:
            with pytest.raises(AssertionError, match="the source stalled"):
                _drive(plan)
        else:
            _drive(plan)


# --- the vector engine (VE) ----------------------------------------------------------------------



def _fp32(value: float) -> int:
    return int(from_float(np.float64(value), FP32))


def _run_rc_unit(cfg: VeConfig, ops, *, idle: float, seed: int):
    """Feed ``ops`` (``(kind, chunks, seq, inv_k, eps)``) through an RcUnit with random gaps
    between chunks; return the factors with the cycle each came, and the cycle of each last
    chunk."""
    unit = RcUnit(cfg)
    rng = random.Random(seed)
    got, lasts = [], []
    consts = [(op[3], op[4]) for op in ops if op[0] == "rms"]

    async def bench(ctx):
        cycle, taken = 0, 0
        for kind, chunks, seq, _, _ in ops:
            for j, chunk in enumerate(chunks):
                while rng.random() < idle:
                    ctx.set(unit.tap.valid, 0)
                    taken = await _step(ctx, cycle, taken)
                    cycle += 1
                ctx.set(unit.tap.valid, 1)
                data = [int(v) for v in chunk]
                softmax = kind == "softmax"
                set_payload(ctx, unit.tap.payload, {"data": data,
                                             "b": [1] * len(data) if softmax else data,
                                             "first": int(j == 0),
                                             "last": int(j == len(chunks) - 1),
                                             "softmax": int(softmax), "seq": seq})
                if j == len(chunks) - 1:
                    lasts.append(cycle)
                taken = await _step(ctx, cycle, taken)
                cycle += 1
        ctx.set(unit.tap.valid, 0)
        for _ in range(unit.latency + 4):
            taken = await _step(ctx, cycle, taken)
            cycle += 1

    async def _step(ctx, cycle, taken):
        # The constants queue: the next RMSNorm operation's, always there.
        if taken < len(consts):
            ctx.set(unit.consts.valid, 1)
            set_payload(ctx, unit.consts.payload, {"inv_k": consts[taken][0], "eps": consts[taken][1]})
        else:
            ctx.set(unit.consts.valid, 0)
        popped = ctx.get(unit.consts.ready) and taken < len(consts)
        if ctx.get(unit.rc.valid):
            got.append((cycle, ctx.get(unit.rc.payload.m), ctx.get(unit.rc.payload.shift),
                        ctx.get(unit.rc.payload.seq)))
        await ctx.tick()
        return taken + int(bool(popped))

    _bench(unit, bench)
    return unit, got, lasts


def _chunks(values, lanes):
    padded = np.zeros(-(-len(values) // lanes) * lanes, np.int64)
    padded[:len(values)] = values
    return padded.reshape(-1, lanes)


def test_rc_unit_matches_golden_and_its_latency():
    """RMSNorm factors (random inputs, an all-zero input with eps 0 and with eps, a power-of-two
    factor, a lone -128, partial last chunks) and softmax factors (random activations, 127
    alone, equal ones) interleaved: golden.rdxe.rms_rc and softmax_rc bit for bit, in order, each
    ``latency`` cycles after its last chunk."""
    params = DxtConfig(lanes=4)
    cfg = params.ve_config()
    rng = np.random.default_rng(21)
    ops, want = [], []

    def rms(x, eps, seq=0):
        K = len(x)
        inv_k = _fp32(1.0 / K)
        ops.append(("rms", _chunks(x, cfg.lanes), seq, inv_k, int(eps)))
        rc = golden.rms_rc(np.asarray(x), eps, params)[3]
        want.append((int(rc.m), int(rc.shift), seq))

    def softmax(p, seq=0):
        ops.append(("softmax", _chunks(p, cfg.lanes), seq, 0, 0))
        rc = golden.softmax_rc(np.asarray(p), params)[2]
        want.append((int(rc.m), int(rc.shift), seq))

    eps = golden.eps_code(1e-5, 0.05)
    for n in range(6):
        rms(rng.integers(-128, 128, int(rng.integers(1, 23))), eps, seq=n % 2)
        softmax(rng.integers(0, 128, int(rng.integers(1, 23))), seq=(n + 1) % 2)
    rms(np.zeros(7, np.int64), np.uint32(0))          # rsqrt(+0) = +inf: saturated
    rms(np.zeros(5, np.int64), eps)
    rms(np.array([8, -8, 8, -8, 8, -8, 8, -8]), np.uint32(0))   # rc = 1/8: m = 2**18
    rms(np.array([-128]), eps)
    softmax(np.array([127]))
    softmax(np.full(9, 127))
    for n in range(3):                                   # one-chunk operations back to back
        rms(rng.integers(-128, 128, 3), eps)
        softmax(rng.integers(0, 128, 2))
    assert (want[12][0], want[12][1]) == ((1 << 19) - 1, 0)
    assert want[14][0] == 1 << 18
    unit, got, lasts = _run_rc_unit(cfg, ops, idle=0.3, seed=21)
    assert [(m_, s, q) for _, m_, s, q in got] == want
    assert [c for c, *_ in got] == [t + unit.latency for t in lasts]
    lat = golden.Latency()
    assert unit.latency == (TAP_LEAD + lat.dot(4) + lat.accumulate + lat.sum_to_float + lat.fmac
                            + lat.rsqrt + lat.requant + lat.rc_out)


def test_rc_unit_back_to_back_at_16_lanes():
    params = DxtConfig(norm_frac=3, prob_frac=6, rc_bits=20)
    cfg = params.ve_config()
    rng = np.random.default_rng(22)
    ops, want = [], []
    for n in range(8):
        if n % 2:
            p = rng.integers(0, 128, int(rng.integers(1, 40)))
            ops.append(("softmax", _chunks(p, 16), 1, 0, 0))
            rc = golden.softmax_rc(p, params)[2]
        else:
            x = rng.integers(-128, 128, int(rng.integers(1, 40)))
            ops.append(("rms", _chunks(x, 16), 0, _fp32(1.0 / len(x)), 0x3F000000))
            rc = golden.rms_rc(x, np.uint32(0x3F000000), params)[3]
        want.append((int(rc.m), int(rc.shift), ops[-1][2]))
    _, got, _ = _run_rc_unit(cfg, ops, idle=0.0, seed=22)
    assert [(m_, s, q) for _, m_, s, q in got] == want


def _write_scores(ctx, unit, scores, *, first_word=0):
    """Write ``scores`` (INT8) as GBUS words starting at word ``first_word``, one per cycle."""
    words = -(-len(scores) // 4)
    for w in range(words):
        part = list(scores[4 * w:4 * w + 4])
        keep = (1 << len(part)) - 1
        part += [0] * (4 - len(part))
        ctx.set(unit.scores.valid, 1)
        set_payload(ctx, unit.scores.payload, {"word": first_word + w, "data": [int(v) for v in part],
                                        "keep": keep, "first": int(w == 0)})
        yield
    ctx.set(unit.scores.valid, 0)


def test_activations_running_maximum_of_kept_scores():
    """Words of four scores with random keep masks, ties and gaps: two cycles after each word
    ``max`` is the maximum of the kept scores since the last ``first`` word (unkept bytes,
    however large, never count; a word of no kept score leaves it, or restarts it at -128)."""
    unit = Activations(VeConfig(lanes=4, score_rows=16))
    rng = random.Random(7)
    checked = []

    async def bench(ctx):
        want, pending = -128, []
        for n in range(400):
            if rng.random() < 0.25:
                ctx.set(unit.scores.valid, 0)
            else:
                first = n == 0 or rng.random() < 0.1
                vals = [rng.choice([-128, -1, 0, 5, 5, 126, 127, rng.randrange(-128, 128)])
                        for _ in range(4)]
                keep = rng.randrange(16)
                kept = [v for k, v in enumerate(vals) if keep >> k & 1]
                want = max(kept + [-128 if first else want])
                ctx.set(unit.scores.valid, 1)
                set_payload(ctx, unit.scores.payload, {"word": rng.randrange(16), "data": vals,
                                                "keep": keep, "first": int(first)})
            pending.append(want)
            await ctx.tick()
            if len(pending) > 1:
                got, expect = ctx.get(unit.max), pending.pop(0)
                assert got == expect, f"cycle {n}: max expected {expect}, got {got}"
                checked.append(got)
        ctx.set(unit.scores.valid, 0)

    _bench(unit, bench)
    assert len(set(checked)) > 5


# --slow: 16-16-2, a width (16 lanes, whole rows); 4-13-0 and 8-33-1 run the same unit with a
# partial last row (test_rc_unit_back_to_back_at_16_lanes runs 16-lane words).
@pytest.mark.parametrize("lanes, T, seed", [(4, 13, 0), (8, 33, 1),
                                            pytest.param(16, 16, 2, marks=pytest.mark.slow)])
def test_activations_match_golden(lanes, T, seed):
    """Scores written back as GBUS words (the stale bytes of an earlier, longer head must not
    count), then every row read with random gaps: golden.rdxe.softmax_activations bit for bit,
    ``latency`` cycles after each request, lanes past the tokens 0; the maximum's own score
    gives 127."""
    cfg = VeConfig(lanes=lanes, score_rows=16)
    unit = Activations(cfg)
    rng = np.random.default_rng(seed)
    heads = [np.clip(rng.normal(0, 40, T + 9).round(), -128, 127).astype(np.int64) + 0,
             np.clip(rng.normal(-60, 20, T).round(), -128, 127).astype(np.int64)]
    heads[0][3] = 127                      # the stale head holds a larger maximum
    scale = golden.log2_scale(0.07)
    rows = -(-T // lanes)
    got, req_cycles, p_cycles = [], [], []
    pyrng = random.Random(seed)

    async def bench(ctx):
        cycle = 0

        async def step():
            nonlocal cycle
            await ctx.tick()
            cycle += 1
            if ctx.get(unit.p.valid):
                got.append([ctx.get(unit.p.payload.data[k]) for k in range(lanes)])
                p_cycles.append(cycle)

        for s in heads:
            for _ in _write_scores(ctx, unit, s):
                await step()
        for r in range(rows):
            while pyrng.random() < 0.3:
                ctx.set(unit.req.valid, 0)
                await step()
            ctx.set(unit.req.valid, 1)
            set_payload(ctx, unit.req.payload, {"row": r, "count": min(lanes, T - r * lanes),
                                         "scale": int(scale)})
            req_cycles.append(cycle)
            await step()
        ctx.set(unit.req.valid, 0)
        for _ in range(unit.latency + 2):
            await step()
        assert ctx.get(unit.max) == heads[1].max()

    _bench(unit, bench)
    mx, _, p = golden.softmax_activations(heads[1], scale)
    want = np.zeros(rows * lanes, np.int64)
    want[:T] = p
    assert np.array_equal(np.array(got).ravel(), want)
    assert 127 in want
    assert [c - r for c, r in zip(p_cycles, req_cycles)] == [unit.latency] * rows
    lat = golden.Latency()
    assert unit.exp_latency == lat.int_to_float + lat.fmul + lat.exp2 + lat.split + lat.requant
    assert unit.latency == lat.score_read + lat.activation


def test_normalizer_matches_requantize():
    params = DxtConfig(lanes=4, clamp="full")
    cfg = params.ve_config()
    rng = np.random.default_rng(5)
    items, want = [], []
    for n in range(40):
        x = rng.integers(-128, 128, 4) if n % 2 else rng.integers(0, 128, 4)
        rc = golden.to_rc(np.uint32(_fp32(2.0 ** rng.uniform(-9, 4))), int(rng.integers(0, 8)),
                          params)
        items.append({"data": [int(v) for v in x], "m": int(rc.m), "shift": int(rc.shift)})
        want.append(requantize(x, rc.m, rc.shift, out_bits=8, clamp="full").tolist())
    unit = Normalizer(cfg)
    run = run_pipeline(unit, items, seed=5, output="data")
    assert [[int(v) for v in y] for y in run.outputs] == want
    assert set(run.delays) == {unit.latency}
