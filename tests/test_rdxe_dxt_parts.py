"""The DXT's sub-components on their own (Amaranth simulator): the sequencer's requests against
the command semantics of docs/rdxe.md section 4.2, the token buffer against golden requantize,
the chunk feed's order and credits, the gatherer's words and routing, the KV writer against
``golden.rdxe.kv_address``."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden import rdxe as golden
from golden.arith.requant import requantize
from hdl.rdxe import DESTS, OPS, DxtConfig
from hdl.rdxe.chunks import READ_LATENCY, ChunkFeed, TokenBuffer
from hdl.rdxe.gbus import Gatherer, KvWriter
from hdl.rdxe.sequencer import SCORE, Sequencer

from .stream_sim import _get, set_payload

SMALL = dict(lanes=4, vacs=4, wmem_depth=160, ppu_depth=64, kv_rows=64, queue_depth=8,
             head_dim=16, max_inputs=64)


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def _record(ctx, dut, got, fields, *, stalled=(), always=()):
    """Record the items taken this cycle from the ``stalled`` streams (whose ``ready`` the bench
    drives) and from the always-ready ones."""
    for name in stalled:
        port = getattr(dut, name)
        if ctx.get(port.valid) and ctx.get(port.ready):
            got[name].append(_get(ctx, port.payload, fields[name]))
    for name in always:
        port = getattr(dut, name)
        if ctx.get(port.valid):
            got[name].append(_get(ctx, port.payload, fields[name]))


# --- KV writer -----------------------------------------------------------------------------------

@pytest.mark.parametrize("geometry", [dict(SMALL, kv_groups=2, kv_rows=128),
                                      dict(SMALL, vacs=8, kv_rows=128),
                                      dict(SMALL, lanes=8, head_dim=32, kv_rows=128)])
def test_kv_writer_places_every_byte_where_golden_does(geometry):
    """Keys and values of random tokens and groups, one word per cycle with gaps: the bytes the
    VACs' caches end up holding are exactly ``golden.rdxe.kv_address``'s, and nothing else."""
    cfg = DxtConfig(**geometry)
    params = cfg
    dut = KvWriter(cfg)
    rng = np.random.default_rng(len(str(geometry)))
    d = cfg.head_dim
    writes = [(kind, int(rng.integers(cfg.capacity)), int(rng.integers(cfg.kv_groups)),
               rng.integers(-128, 128, d)) for kind in ("k", "v") * 6]
    expected, image = {}, {}
    for kind, t, g, vector in writes:
        vac, row, col = golden.kv_address(kind, t, np.arange(d), params, group=g)
        for e in range(d):
            expected[(int(vac[e]), int(row[e]), int(col[e]))] = int(vector[e])

    async def bench(ctx):
        queue = deque((kind, t, g, vector, w) for kind, t, g, vector in writes
                      for w in range(d // 4))
        while queue or any(ctx.get(p.valid) for p in dut.kv):
            item = queue[0] if queue and rng.random() < 0.7 else None
            ctx.set(dut.i.valid, item is not None)
            if item is not None:
                kind, t, g, vector, w = queue.popleft()
                set_payload(ctx, dut.i.payload, {"value": kind == "v", "word": w, "token": t,
                                          "group": g, "keep": 0b1111,
                                          "data": vector[4 * w:4 * w + 4].tolist()})
            for v, port in enumerate(dut.kv):
                if ctx.get(port.valid):
                    got = _get(ctx, port.payload, ("addr", "en", "data"))
                    for lane in range(cfg.lanes):
                        if got["en"] >> lane & 1:
                            image[(v, got["addr"], lane)] = got["data"][lane]
            await ctx.tick()

    _simulate(dut, bench)
    assert image == expected


# --- gatherer ------------------------------------------------------------------------------------

def _gather_plan(cfg, rng):
    """Operations of every kind with random results per VAC; what each output stream must
    carry."""
    N = cfg.vacs
    ops, results = [], [[] for _ in range(N)]
    want = {"o": [], "scores": [], "kv": [], "resp": []}
    kinds = [DESTS.index("out"), SCORE, DESTS.index("key"), DESTS.index("value")]
    for n in range(12):
        kind, refused = kinds[n % 4], n % 5 == 4
        outputs = int(rng.integers(1, 3 * N + 1))
        total = -(-outputs // N) * N
        ops.append({"kind": kind, "refused": refused, "outputs": outputs, "total": total,
                    "group": 0, "token": n})
        want["resp"].append({"error": int(refused)})
        if refused:
            continue
        ys = [int(y) for y in rng.integers(-128, 128, total)]
        for o, y in enumerate(ys):
            results[o % N].append(y)
        for w in range(total // 4):
            data = ys[4 * w:4 * w + 4]
            keep = sum(1 << k for k in range(4) if 4 * w + k < outputs)
            if kind in (DESTS.index("out"), SCORE) and keep:
                want["o"].append({"data": data, "keep": keep,
                                  "last": int(4 * w + 4 >= outputs)})
            if kind == SCORE:
                want["scores"].append({"word": w, "first": int(w == 0), "data": data,
                                       "keep": keep})
            if kind in (DESTS.index("key"), DESTS.index("value")):
                want["kv"].append({"value": int(kind == DESTS.index("value")), "word": w,
                                   "token": n, "data": data, "keep": keep})
    return ops, results, want


def test_gatherer_words_in_order_under_back_pressure():
    """Random result arrivals and 40 % back-pressure on ``o`` and ``resp``: every word of every
    kind comes out in output order on its stream, padding words are taken but not sent, refused
    operations take nothing, and one response per operation comes in order."""
    cfg = DxtConfig(**dict(SMALL, vacs=8))
    dut = Gatherer(cfg)
    rng = np.random.default_rng(3)
    ops, results, want = _gather_plan(cfg, rng)
    got = {name: [] for name in want}
    fields = {"o": ("data", "keep", "last"), "scores": ("word", "first", "data", "keep"),
              "kv": ("value", "word", "token", "data", "keep"), "resp": ("error",)}

    async def bench(ctx):
        pending = deque(ops)
        queues = [deque(r) for r in results]
        for _ in range(3000):
            if len(got["resp"]) == len(ops):
                break
            ctx.set(dut.ops.valid, bool(pending))
            if pending:
                set_payload(ctx, dut.ops.payload, pending[0])
            offers = []
            for v, port in enumerate(dut.results):
                offer = bool(queues[v]) and rng.random() < 0.6
                ctx.set(port.valid, offer)
                if offer:
                    ctx.set(port.payload.y, queues[v][0])
                offers.append(offer)
            ctx.set(dut.o.ready, rng.random() < 0.6)
            ctx.set(dut.resp.ready, rng.random() < 0.6)
            await ctx.delay(1e-9)
            _record(ctx, dut, got, fields, stalled=("o", "resp"), always=("scores", "kv"))
            taken_op = pending and ctx.get(dut.ops.ready)
            taken = [offers[v] and ctx.get(port.ready) for v, port in enumerate(dut.results)]
            await ctx.tick()
            if taken_op:
                pending.popleft()
            for v, ok in enumerate(taken):
                if ok:
                    queues[v].popleft()
        assert not pending and not any(queues), "results left over"

    _simulate(dut, bench)
    for name in want:
        assert got[name] == want[name], name


# --- token buffer --------------------------------------------------------------------------------

def test_token_buffer_stores_reads_and_normalizes_in_place():
    """Chunks stored into one half and activations into the other read back; an activation
    written in the cycle its row is read with ``fresh`` comes back at once, and the same read
    without ``fresh`` gives the row the memory held; chunks normalized in place
    read back as ``golden`` ``requantize(x, m, shift)`` in the ``clamp`` range, the other half
    untouched."""
    cfg = DxtConfig(**dict(SMALL, clamp="full"))
    dut = TokenBuffer(cfg)
    rng = np.random.default_rng(5)
    C, L = cfg.chunks, cfg.lanes
    rows = rng.integers(-128, 128, (2, C, L))
    m, shift = int(rng.integers(1 << 18, 1 << 19)), 19

    async def idle(ctx):
        for port in (dut.store, dut.act, dut.read, dut.norm):
            ctx.set(port.valid, 0)

    async def read(ctx, half, j):
        ctx.set(dut.read.valid, 1)
        set_payload(ctx, dut.read.payload, {"half": half, "j": j})
        await ctx.tick()
        ctx.set(dut.read.valid, 0)
        for _ in range(READ_LATENCY - 1):
            await ctx.tick()
        await ctx.delay(1e-9)
        return [int(ctx.get(dut.data[k])) for k in range(L)]

    async def bench(ctx):
        await idle(ctx)
        for h in range(2):
            for j in range(C):
                port = dut.act if h else dut.store
                ctx.set(port.valid, 1)
                set_payload(ctx, port.payload, {"half": h, "j": j, "data": rows[h, j].tolist()})
                await ctx.tick()
                ctx.set(port.valid, 0)
        for h, j in ((0, 0), (1, C - 1), (0, C // 2), (1, 1)):
            assert await read(ctx, h, j) == list(rows[h, j]), (h, j)
        # Fresh: the row being written is read in the same cycle; not fresh: the old row.
        for flag, j in ((0, 1), (1, 2)):
            fresh = rng.integers(-128, 128, L)
            ctx.set(dut.act.valid, 1)
            set_payload(ctx, dut.act.payload, {"half": 1, "j": j, "data": fresh.tolist()})
            ctx.set(dut.read.valid, 1)
            set_payload(ctx, dut.read.payload, {"half": 1, "j": j, "fresh": flag})
            await ctx.tick()
            await idle(ctx)
            for _ in range(READ_LATENCY - 1):
                await ctx.tick()
            await ctx.delay(1e-9)
            want = fresh if flag else rows[1, j]
            assert [int(ctx.get(dut.data[k])) for k in range(L)] == list(want), flag
            rows[1, j] = fresh
            ctx.set(dut.read.payload.fresh, 0)
        for j in range(C):
            ctx.set(dut.norm.valid, 1)
            set_payload(ctx, dut.norm.payload, {"half": 0, "j": j, "m": m, "shift": shift})
            await ctx.tick()
        await idle(ctx)
        for _ in range(dut.norm_latency):
            await ctx.tick()
        for h in range(2):
            for j in range(C):
                want = (requantize(rows[h, j], m, shift, clamp="full") if h == 0
                        else rows[h, j])
                assert await read(ctx, h, j) == [int(v) for v in want], (h, j)

    _simulate(dut, bench)


# --- chunk feed ----------------------------------------------------------------------------------

@pytest.mark.parametrize("latency, ready_p, tap_delay", [(5, 1.0, 4), (5, 0.5, 1), (21, 0.8, 0)])
def test_chunk_feed_order_credits_and_tap(latency, ready_p, tap_delay):
    """Requests issued only with ``can_issue`` land ``latency`` cycles later: every chunk
    flagged ``hlink`` comes out in order whatever HLINK's back-pressure, the others are
    dropped from the queue at once, and every chunk flagged ``tap`` reaches the tap
    ``tap_delay`` cycles after it leaves. With HLINK always ready and ``depth = latency + 3``,
    a request issues every cycle."""
    cfg = DxtConfig(**SMALL)
    dut = ChunkFeed(cfg, depth=latency + 3, tap_delay=tap_delay)
    rng = random.Random(latency)
    items = [{"data": [rng.randrange(-128, 128) for _ in range(cfg.lanes)],
              "hlink": int(rng.random() < 0.8), "tap": int(rng.random() < 0.5),
              "tap_first": rng.randrange(2), "tap_last": rng.randrange(2),
              "softmax": rng.randrange(2), "link": {"row": n}} for n in range(150)]
    line = deque([None] * latency)
    hlink, taps, issued, left = [], [], [], {}

    async def bench(ctx):
        n = cycle = 0
        while len(hlink) < sum(i["hlink"] for i in items) or cycle < 400:
            issue = n < len(items) and bool(ctx.get(dut.can_issue))
            ctx.set(dut.issue, issue)
            issued.append(issue or n >= len(items))
            line.append(items[n] if issue else None)
            n += int(issue)
            landing = line.popleft()
            ctx.set(dut.i.valid, landing is not None)
            if landing is not None:
                set_payload(ctx, dut.i.payload, landing)
            ctx.set(dut.hlink.ready, rng.random() < ready_p)
            await ctx.delay(1e-9)
            if ctx.get(dut.hlink.valid) and ctx.get(dut.hlink.ready):
                row = int(ctx.get(dut.hlink.payload.row))
                hlink.append(row)
                left[row] = cycle
            if ctx.get(dut.tap.valid):
                taps.append((cycle, [int(ctx.get(dut.tap.payload.data[k]))
                                     for k in range(cfg.lanes)],
                             int(ctx.get(dut.tap.payload.first)),
                             int(ctx.get(dut.tap.payload.last)),
                             int(ctx.get(dut.tap.payload.softmax)),
                             [int(ctx.get(dut.tap.payload.b[k])) for k in range(cfg.lanes)]))
            await ctx.tick()
            cycle += 1
            assert cycle < 5000

    _simulate(dut, bench)
    assert hlink == [n for n, item in enumerate(items) if item["hlink"]]
    # The RC unit's second operand: ones for softmax's sum, else the chunk (x**2's).
    want_taps = [(item["data"], item["tap_first"], item["tap_last"], item["softmax"],
                  [1] * cfg.lanes if item["softmax"] else item["data"])
                 for item in items if item["tap"]]
    assert [t[1:] for t in taps] == want_taps
    for (cycle, *_), n in zip(taps, [n for n, item in enumerate(items) if item["tap"]]):
        if items[n]["hlink"]:
            assert cycle == left[n] + tap_delay
    if ready_p == 1.0:
        assert all(issued), "the queue held a full-rate sequencer back"


# --- sequencer -----------------------------------------------------------------------------------

def _expected_requests(cfg: DxtConfig, cmd: dict) -> list[dict]:
    """The requests a command makes, from docs/rdxe.md sections 4.2 and 5 (fused or plain)."""
    N, L, d = cfg.vacs, cfg.lanes, cfg.head_dim
    op = OPS[cmd["op"]]
    out = []
    if op in ("gemv", "rmsnorm"):
        C, P = cmd["chunks"], -(-cmd["outputs"] // N)
        rows = [[cmd["row"] + p * C + j for j in range(C)] for p in range(P)]
        outs = [cmd["entry"] + p for p in range(P)]
    elif op == "qk":
        C, P = cfg.key_rows, -(-cmd["tokens"] // N)
        g = cmd["head"] // cfg.group_size
        rows = [[g * cfg.group_rows + p * C + j for j in range(C)] for p in range(P)]
        outs = [cmd["entry"]] * P
    else:
        C, P = -(-cmd["tokens"] // L), -(-d // N)
        g = cmd["head"] // cfg.group_size
        base = cfg.kv_rows // 2 + g * cfg.group_rows
        rows = [[base + p + j * cfg.value_rows for j in range(C)] for p in range(P)]
        outs = [cmd["entry"] + p for p in range(P)]
    vrc = op in ("rmsnorm", "pv")
    for p in range(P):
        for j in range(C):
            out.append({"act": int(op == "pv" and p == 0), "j": j, "hlink": 1,
                        "tap": int(vrc and p == 0), "softmax": int(op == "pv"),
                        "link": {"row": rows[p][j], "first": int(j == 0),
                                 "last": int(j == C - 1), "out": outs[p], "rcu": int(vrc),
                                 "rc_last": int(vrc and p == P - 1),
                                 "kv": int(op in ("qk", "pv"))}})
    return out


def _command(op, **fields) -> dict:
    cmd = {"op": OPS.index(op), "seq": 0, "dest": 0, "outputs": 0, "chunks": 0, "row": 0,
           "entry": 0, "head": 0, "tokens": 0, "inv_k": 0, "eps": 0, "scale": 0}
    cmd.update(fields)
    return cmd


_REQ = ("act", "half", "j", "hlink", "tap", "tap_first", "tap_last", "softmax", "seq",
        "buf_write")
_LINK = ("row", "first", "last", "out", "rcu", "rc_last", "kv")


def _run_sequencer(cfg, cmds, chunks, *, latency=6, seed=0, settle=5, factor_delay=30):
    """Drive ``cmds`` and ``chunks`` with random gaps, ``can_issue`` and back-pressure on the
    queues; land each request ``latency`` cycles after its issue; answer a key or value write
    (``kv_done``) and a Q.K^T (``qk_done``) ``settle`` cycles after its last request lands, and
    a sequential operation's last tapped request with a factor ``factor_delay`` cycles later.
    Returns every output stream's items, the requests with their cycles, and the cycles of
    the completions."""
    dut = Sequencer(cfg, request_latency=latency)
    rng = random.Random(seed)
    got = {"req": [], "store": [], "act": [], "ops": [], "consts": [], "norm": [],
           "kv_done": [], "qk_done": [], "rc": []}
    fields = {"store": ("half", "j", "data"), "act": ("row", "count", "scale"),
              "ops": ("kind", "refused", "outputs", "total", "group", "token"),
              "consts": ("inv_k", "eps"), "norm": ("half", "j", "m", "shift")}
    # The commands that issue requests, in order, with their requests' count and completion.
    accepted = deque()
    for cmd in cmds:
        reqs = _expected_requests(cfg, cmd)
        if reqs:
            op, dest = OPS[cmd["op"]], DESTS[cmd["dest"]] if cmd["dest"] < 3 else "out"
            kind = "qk" if op == "qk" else "kv" if dest in ("key", "value") and op in (
                "gemv", "rmsnorm") else None
            accepted.append([len(reqs) + (cmd["seq"] and op in ("rmsnorm", "pv")) *
                             -(-(cmd["chunks"] * cfg.lanes if op == "rmsnorm"
                                 else cmd["tokens"]) // cfg.lanes), kind])
    events = {}

    async def bench(ctx):
        line = deque([None] * latency)
        n_cmd = n_x = cycle = 0
        while (accepted or events or n_cmd < len(cmds) or n_x < len(chunks)
               or len(got["ops"]) < len(cmds)):
            assert cycle < 4000, f"stopped at cycle {cycle}: {len(got['req'])} requests"
            ctx.set(dut.cmd.valid, n_cmd < len(cmds))
            if n_cmd < len(cmds):
                set_payload(ctx, dut.cmd.payload, cmds[n_cmd])
            offer_x = n_x < len(chunks) and rng.random() < 0.7
            ctx.set(dut.x.valid, offer_x)
            set_payload(ctx, dut.x.payload, {"data": chunks[n_x] if offer_x else [0] * cfg.lanes})
            can_issue = rng.random() < 0.8
            ctx.set(dut.can_issue, can_issue)
            landing = line.popleft()
            ctx.set(dut.landed.valid, landing is not None)
            ctx.set(dut.landed.payload, landing or 0)
            pulse = events.pop(cycle, ())
            for name, signal in (("kv_done", dut.kv_done), ("qk_done", dut.qk_done),
                                 ("rc", dut.rc.valid)):
                ctx.set(signal, name in pulse)
                if name in pulse:
                    got[name].append(cycle)
            set_payload(ctx, dut.rc.payload, {"m": 300000 + cycle, "shift": 20})
            ctx.set(dut.ops.ready, rng.random() < 0.5)
            ctx.set(dut.consts.ready, rng.random() < 0.5)
            await ctx.delay(1e-9)
            _record(ctx, dut, got, fields, stalled=("ops", "consts"),
                    always=("store", "act", "norm"))
            req = None
            if ctx.get(dut.req.valid):
                assert can_issue, f"cycle {cycle}: a request issued without can_issue"
                req = _get(ctx, dut.req.payload, _REQ)
                req["link"] = _get(ctx, dut.req.payload.link, _LINK)
                req["cycle"] = cycle
                req["start"] = int(ctx.get(dut.start))
                got["req"].append(req)
                accepted[0][0] -= 1
                if accepted[0][0] == 0:
                    kind = accepted.popleft()[1]
                    if kind:
                        events.setdefault(cycle + latency + settle, set()).add(
                            f"{kind}_done")
                if req["seq"] and req["tap"] and req["tap_last"]:
                    events.setdefault(cycle + factor_delay, set()).add("rc")
            line.append(req["half"] if req else None)
            took_cmd = n_cmd < len(cmds) and ctx.get(dut.cmd.ready)
            took_x = offer_x and ctx.get(dut.x.ready)
            await ctx.tick()
            cycle += 1
            n_cmd += int(bool(took_cmd))
            n_x += int(bool(took_x))
        ctx.set(dut.can_issue, 0)
        for _ in range(latency + 2):
            landing = line.popleft() if line else None
            ctx.set(dut.landed.valid, landing is not None)
            ctx.set(dut.landed.payload, landing or 0)
            await ctx.tick()
        assert all(ctx.get(count) == 0 for count in dut.inflight), "requests still in flight"

    _simulate(dut, bench)
    return got


def _hlink(req: dict) -> dict:
    return {k: req[k] for k in ("act", "j", "hlink", "tap", "softmax", "link")}


def test_sequencer_requests_follow_the_commands():
    """A GEMV, a refused GEMV (its chunks drained), a key write, a Q.K^T, a fused P.V and a fused
    RMSNorm with random gaps and ``can_issue``: the HLINK requests are the command semantics'
    rows, entries and flags in order; pass 0's ``x`` chunks are stored as they issue; the P.V's
    activation requests name their rows and token counts; consecutive operations alternate
    halves; the Q.K^T starts only after the key's ``kv_done``, the P.V after ``qk_done``; every
    command reaches ``ops`` and the RMSNorm's constants ``consts``."""
    cfg = DxtConfig(**SMALL)
    L, d, R = cfg.lanes, cfg.head_dim, cfg.key_rows
    rng = np.random.default_rng(1)
    cmds = [_command("gemv", outputs=6, chunks=3, row=5, entry=2),
            _command("gemv", outputs=0, chunks=2),
            _command("gemv", dest=DESTS.index("key"), outputs=d, chunks=d // L, row=40,
                     entry=9, head=0, tokens=3),
            _command("qk", head=0, tokens=7, entry=11),
            _command("pv", head=0, tokens=7, entry=12, scale=0x3F800000),
            _command("rmsnorm", outputs=5, chunks=2, row=60, entry=20, inv_k=0x3E000000,
                     eps=7)]
    counts = [3, 2, d // L, R, 0, 2]
    chunks = [list(rng.integers(-128, 128, L)) for _ in range(sum(counts))]
    got = _run_sequencer(cfg, cmds, chunks)
    want = [r for cmd in cmds for r in _expected_requests(cfg, cmd)]
    assert [_hlink(r) for r in got["req"]] == want
    # Pass 0's x chunks stored, in order (the refused GEMV's drained, not stored).
    stored = [c for n, c in enumerate(chunks) if not 3 <= n < 5]
    assert [s["data"] for s in got["store"]] == [[int(v) for v in c] for c in stored]
    assert [s["j"] for s in got["store"]] == [0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert got["act"] == [{"row": j, "count": min(L, 7 - j * L), "scale": 0x3F800000}
                          for j in range(2)]
    halves = [r["half"] for r in got["req"] if r["start"]]
    assert len(halves) == 5 and all(a != b for a, b in zip(halves, halves[1:]))
    starts = [r["cycle"] for r in got["req"] if r["start"]]
    assert starts[2] > got["kv_done"][0] and starts[3] > got["qk_done"][0]
    assert [(o["kind"], o["refused"], o["outputs"], o["total"]) for o in got["ops"]] == [
        (0, 0, 6, 8), (0, 1, 0, 0), (DESTS.index("key"), 0, d, d), (SCORE, 0, 7, 8),
        (0, 0, d, d), (0, 0, 5, 8)]
    assert got["consts"] == [{"inv_k": 0x3E000000, "eps": 7}]


def test_sequencer_sequential_modes():
    """Sequential RMSNorm: its chunks go to the token buffer and the VE's tap but not HLINK;
    with the factor, every chunk is normalized in place by it, then the plain GEMV runs from the
    buffer. Sequential P.V: the activations go to the buffer and the tap, are normalized, then a
    plain P.V runs from the buffer."""
    cfg = DxtConfig(**SMALL)
    L = cfg.lanes
    rng = np.random.default_rng(2)
    cmds = [_command("rmsnorm", seq=1, outputs=5, chunks=3, row=7, entry=1),
            _command("pv", seq=1, head=0, tokens=6, entry=4, scale=5)]
    chunks = [list(rng.integers(-128, 128, L)) for _ in range(3)]
    got = _run_sequencer(cfg, cmds, chunks)
    reqs = got["req"]
    fill = [r for r in reqs if not r["hlink"]]
    assert [(r["act"], r["tap"], r["tap_first"], r["tap_last"], r["seq"], r["buf_write"])
            for r in fill] == [(0, 1, 1, 0, 1, 0), (0, 1, 0, 0, 1, 0), (0, 1, 0, 1, 1, 0),
                               (1, 1, 1, 0, 1, 1), (1, 1, 0, 1, 1, 1)]
    plain = [dict(r, seq=0) for cmd in cmds for r in _expected_requests(
        cfg, dict(cmd, seq=0, op=OPS.index("gemv") if cmd["op"] == OPS.index("rmsnorm")
                  else cmd["op"]))]
    for r in plain:
        r.update(act=0, tap=0)
        r["link"].update(rcu=0, rc_last=0)
    assert [_hlink(r) for r in reqs if r["hlink"]] == [_hlink(r) for r in plain]
    rc = got["rc"]
    factors = [(300000 + c) % (1 << (cfg.rc_bits - 6)) for c in rc]
    assert [(n["j"], n["m"], n["shift"]) for n in got["norm"]] == (
        [(j, factors[0], 20) for j in range(3)] + [(j, factors[1], 20) for j in range(2)])
    first_run = [r["cycle"] for r in reqs if r["hlink"] and r["link"]["first"]
                 and r["link"]["out"] == 1][0]
    assert first_run > rc[0] + 3
    assert [s["data"] for s in got["store"]] == [[int(v) for v in c] for c in chunks]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(request_latency=0), ValueError, "Request latency must be between 1 and 1024, not 0"),
    (dict(request_latency="6"), TypeError,
     "Request latency must be an integer between 1 and 1024, not '6'")])
def test_sequencer_parameter_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        Sequencer(DxtConfig(**SMALL), **kwargs)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(depth=2, tap_delay=4), ValueError, "Chunk queue depth must be between 3 and 4096, not 2"),
    (dict(depth=8, tap_delay=65), ValueError, "Tap delay must be between 0 and 64, not 65")])
def test_chunk_feed_parameter_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        ChunkFeed(DxtConfig(**SMALL), **kwargs)
