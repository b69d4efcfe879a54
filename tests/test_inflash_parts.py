"""The in-flash PE's sub-components one by one (docs/inflash.md, section 4), each against its
contract: the command set-up against the page-stream sizes and the page walk of
:mod:`golden.inflash` and the testbench's refusal rules; the page reader against the reads of
the contract (:func:`cocotb_tests.inflash.plane.kv_reads`); the ``x`` buffer, the issue stage,
the dot lanes, the w4a16 epilogue, the Attend accumulators and the result path against the
golden numerics and the orders of docs/inflash.md. The PE as a whole is
tests/test_inflash_hdl.py's.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from cocotb_tests.inflash.plane import kv_reads
from cocotb_tests.inflash.contract import is_refused
from golden import inflash as golden
from golden.arith.float import from_float, int_to_float
from hdl.arith.format import BF16, FP16
from hdl.inflash import FlashGeometry, Mapping, Mode, Op, PEConfig
from hdl.inflash.accumulators import AttendAccumulators
from hdl.inflash.epilogue import GroupEpilogue
from hdl.inflash.issuer import Issuer
from hdl.inflash.lanes import DotLanes
from hdl.inflash.reader import PageReader
from hdl.inflash.results import ResultPath
from hdl.inflash.setup import CommandSetup, Path
from hdl.inflash.xbuffer import XBuffer

from .stream_sim import _get, set_payload

GEOMETRY = dict(page_bytes=64, transfer_bytes=4, fmacs=2, pages_per_block=8, blocks=8)
MAX = dict(max_rows=64, max_cols=64, group_size=16)


def _cfg(**geo) -> PEConfig:
    return PEConfig(geometry=FlashGeometry(**{**GEOMETRY, **geo}), **MAX)


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


_PLAN_FIELDS = ["op", "mode", "rows", "cols", "page", "tokens", "head_dim", "heads", "mapping",
                "entry", "nb", "pb", "last_mask", "size", "total", "x_beats", "page_used",
                "stride", "first_page", "first_col", "col_step", "page_step"]


# --- the command set-up --------------------------------------------------------------------------

def _setup_once(cfg: PEConfig, cmd: dict, *, drained_after: int = 0, busy_until: int = 0):
    """Give ``cmd`` to a CommandSetup whose PE is idle; ``drained`` rises ``drained_after``
    cycles after the take and ``attend_busy`` falls ``busy_until`` cycles after it. Returns
    the event (``gemv``, ``att`` or ``refuse``), its cycle counted from the take, the plan and
    the gearbox job of that cycle."""
    dut = CommandSetup(cfg)
    out = {}

    async def bench(ctx):
        ctx.set(dut.idle, 1)
        ctx.set(dut.can_refuse, 1)
        ctx.set(dut.job.ready, 1)
        set_payload(ctx, dut.cmd.payload, cmd)
        ctx.set(dut.cmd.valid, 1)
        taken = None
        for cycle in range(4000):
            since = None if taken is None else cycle - taken
            ctx.set(dut.drained, since is not None and since >= drained_after)
            ctx.set(dut.attend_busy, since is None or since < busy_until)
            if taken is None and ctx.get(dut.cmd.ready):
                taken = cycle
            events = [name for name in ("gemv_start", "att_start", "refuse")
                      if ctx.get(getattr(dut, name))]
            if events:
                assert len(events) == 1 and bool(ctx.get(dut.job.valid)) == (events != ["refuse"])
                out.update(event=events[0].replace("_start", ""), cycle=since,
                           plan=_get(ctx, dut.plan, _PLAN_FIELDS),
                           job=_get(ctx, dut.job.payload, ["mode", "rows", "cols", "bytes"]))
                return
            await ctx.tick()
            if taken == cycle:
                ctx.set(dut.cmd.valid, 0)
        raise AssertionError(f"no start or refusal for {cmd}")

    _simulate(dut, bench)
    return out


def _gemv_cmd(mode, rows, cols, page=0) -> dict:
    return {"op": Op.GEMV, "mode": mode, "rows": rows, "cols": cols, "page": page}


@pytest.mark.parametrize("mode, rows, cols, page", [
    (Mode.FP16, 4, 16, 3), (Mode.BF16, 5, 13, 0), (Mode.W8A8, 7, 9, 10), (Mode.W4A16, 3, 48, 1),
    (Mode.FP16, 64, 64, 0),                         # the largest matrix: 128 pages
    (Mode.FP16, 0, 4, 0), (Mode.W8A8, 3, 65, 0),    # refused: no rows, too many columns
    (Mode.W4A16, 2, 24, 0),                         # refused: cols not a multiple of g
    (Mode.FP16, 4, 16, 63),                         # refused: past the plane's last page
])
def test_setup_sizes_a_gemv(mode, rows, cols, page):
    cfg = _cfg()
    cmd = _gemv_cmd(mode, rows, cols, page)
    got = _setup_once(cfg, cmd)
    if is_refused(cfg, cmd):
        assert got["event"] == "refuse"
        return
    size = golden.stream_bytes(Mode(mode).name.lower(), rows, cols, group_size=cfg.group_size)
    assert got["event"] == "gemv" and got["cycle"] == CommandSetup.gemv_cycles
    assert got["plan"]["size"] == size
    assert got["job"] == {"mode": mode, "rows": rows, "cols": cols, "bytes": size}


def test_setup_refuses_an_unknown_op():
    assert _setup_once(_cfg(), {**_gemv_cmd(Mode.FP16, 1, 1), "op": 3})["event"] == "refuse"


_KV = {Mode.FP16: "fp16", Mode.BF16: "bf16", Mode.W8A8: "int8"}


def _att_cmd(op, mode, mapping, T, G, layers, kv_heads, d, layer, head, page=0) -> dict:
    return {"op": op, "mode": mode, "page": page, "tokens": T, "head_dim": d,
            "query_heads": G, "mapping": mapping, "layers": layers, "kv_heads": kv_heads,
            "layer": layer, "head": head}


@pytest.mark.parametrize("cmd", [
    _att_cmd(Op.LOGIT, Mode.FP16, Mapping.PAGE, 9, 2, 2, 2, 8, 1, 1, page=2),
    _att_cmd(Op.ATTEND, Mode.BF16, Mapping.NAIVE, 5, 3, 2, 2, 8, 0, 1),       # S >= T_p
    _att_cmd(Op.LOGIT, Mode.W8A8, Mapping.NAIVE, 11, 1, 1, 1, 6, 0, 0),       # gathered
    _att_cmd(Op.ATTEND, Mode.FP16, Mapping.PAGE, 3, 4, 1, 3, 5, 0, 2),
    _att_cmd(Op.LOGIT, Mode.W4A16, Mapping.PAGE, 3, 1, 1, 1, 8, 0, 0),       # refused: format
    _att_cmd(Op.LOGIT, Mode.FP16, Mapping.PAGE, 3, 1, 2, 2, 8, 2, 0),        # refused: layer
    _att_cmd(Op.ATTEND, Mode.FP16, Mapping.PAGE, 3, 9, 1, 1, 8, 0, 0),       # refused: G
    _att_cmd(Op.LOGIT, Mode.FP16, Mapping.PAGE, 40, 1, 2, 2, 16, 0, 0, page=60),  # past the plane
    _att_cmd(Op.LOGIT, Mode.FP16, Mapping.NAIVE, 40, 1, 2, 2, 16, 0, 0, page=50),
])
def test_setup_walks_an_attention_command(cmd):
    """The plan of the page walk against golden.inflash.kv_address (docs/inflash.md 5)."""
    cfg = _cfg()
    got = _setup_once(cfg, cmd)
    if is_refused(cfg, cmd):
        assert got["event"] == "refuse"
        return
    assert got["event"] == "att"
    layout = golden.KVLayout(cmd["layers"], cmd["kv_heads"], cmd["head_dim"], _KV[cmd["mode"]],
                             page_bytes=cfg.page_bytes,
                             mapping=golden.MAPPINGS[cmd["mapping"]])
    kind = golden.K if cmd["op"] == Op.LOGIT else golden.V
    page0, offset0 = golden.kv_address(layout, cmd["layer"], cmd["head"], 0, kind)
    e, tp, S, F = layout.entry_bytes, layout.tokens_per_page, layout.entries_per_token, cfg.fmacs
    G, nb = cmd["query_heads"], -(-cmd["head_dim"] // F)
    want = {"entry": e, "nb": nb, "pb": -(-G // F), "total": cmd["tokens"] * e,
            "x_beats": G * nb if cmd["op"] == Op.LOGIT else cmd["tokens"] * -(-G // F),
            "page_used": tp * e, "stride": S, "first_page": cmd["page"] + int(page0)}
    if cmd["mapping"] == Mapping.NAIVE:
        want.update(first_col=int(offset0), col_step=(S % tp) * e, page_step=S // tp)
    assert {k: got["plan"][k] for k in want} == want
    assert got["job"] == {"mode": cmd["mode"], "rows": cmd["tokens"], "cols": cmd["head_dim"],
                          "bytes": cmd["tokens"] * e}


def test_setup_keeps_command_order():
    """A w4a16 GEMV waits for ``drained``, an Attend for ``attend_busy`` to fall, a refusal for
    both; a GEMV in another mode waits for neither. The pulse comes from a register, a cycle
    after the cycle its condition holds."""
    cfg = _cfg()
    w4 = _setup_once(cfg, _gemv_cmd(Mode.W4A16, 1, 16), drained_after=30)
    assert w4["event"] == "gemv" and w4["cycle"] == 30 + 1
    fp16 = _setup_once(cfg, _gemv_cmd(Mode.FP16, 1, 16), drained_after=30, busy_until=30)
    assert fp16["cycle"] == CommandSetup.gemv_cycles
    cmd = _att_cmd(Op.ATTEND, Mode.FP16, Mapping.PAGE, 3, 1, 1, 1, 8, 0, 0)
    free = _setup_once(cfg, cmd)["cycle"]
    assert _setup_once(cfg, cmd, busy_until=free + 20)["cycle"] == free + 20 + 1
    logit = _setup_once(cfg, {**cmd, "op": Op.LOGIT}, busy_until=free + 20)
    assert logit["cycle"] == free
    refused = _gemv_cmd(Mode.FP16, 0, 16)
    assert _setup_once(cfg, refused, drained_after=40, busy_until=50)["cycle"] == 50 + 1


def test_setup_takes_a_command_only_while_idle():
    dut = CommandSetup(_cfg())

    async def bench(ctx):
        set_payload(ctx, dut.cmd.payload, _gemv_cmd(Mode.FP16, 1, 1))
        ctx.set(dut.cmd.valid, 1)
        for _ in range(5):
            assert not ctx.get(dut.cmd.ready)
            await ctx.tick()
        ctx.set(dut.idle, 1)
        assert ctx.get(dut.cmd.ready)

    _simulate(dut, bench)


# --- the page reader ---------------------------------------------------------------------------

def _reader_run(cfg: PEConfig, plan: dict, start: str, n_reads: int, *, seed: int):
    """Start ``plan`` on a PageReader and record its reads, with the plane taking one at
    random and answering each with one (last) word; return the reads."""
    dut = PageReader(cfg)
    rng = random.Random(seed)
    reads = []

    async def bench(ctx):
        set_payload(ctx, dut.plan, plan)
        ctx.set(getattr(dut, start), 1)
        await ctx.tick()
        ctx.set(getattr(dut, start), 0)
        ctx.set(dut.words.ready, 1)
        answered = 0
        for _ in range(50 * n_reads + 50):
            take = rng.random() < 0.6
            ctx.set(dut.rd_cmd.ready, take)
            if take and ctx.get(dut.rd_cmd.valid):
                reads.append(_get(ctx, dut.rd_cmd.payload, ["page", "column", "bytes", "run",
                                                            "stride"]))
            ctx.set(dut.rd_data.valid, answered < len(reads) - int(take))
            ctx.set(dut.rd_data.payload.last, 1)
            answered += int(bool(ctx.get(dut.rd_data.valid) and ctx.get(dut.rd_data.ready)))
            await ctx.tick()
            if len(reads) == n_reads:
                break
        for _ in range(3):
            await ctx.tick()
        assert not ctx.get(dut.busy) and not ctx.get(dut.rd_cmd.valid)

    _simulate(dut, bench)
    return reads


@pytest.mark.parametrize("mapping, fmt, layout, T, layer, head, op", [
    ("page", "fp16", (2, 2, 8), 9, 1, 1, "logit"),
    ("page", "int8", (2, 3, 5), 11, 0, 2, "attend"),
    ("naive", "fp16", (2, 2, 8), 6, 1, 0, "attend"),        # S = 8 >= T_p = 4: one entry a read
    ("naive", "fp16", (1, 1, 4), 10, 0, 0, "logit"),        # S = 2, T_p = 8: gathers
    ("naive", "int8", (1, 2, 6), 13, 0, 1, "logit"),        # S = 4, T_p = 10: runs over pages
])
def test_reader_walks_the_kv_pages(mapping, fmt, layout, T, layer, head, op):
    cfg = _cfg()
    kv = golden.KVLayout(*layout, fmt, page_bytes=cfg.page_bytes, mapping=mapping)
    kind = golden.K if op == "logit" else golden.V
    base = 5
    page0, offset0 = golden.kv_address(kv, layer, head, 0, kind)
    e, tp, S = kv.entry_bytes, kv.tokens_per_page, kv.entries_per_token
    plan = {"mapping": Mapping[mapping.upper()], "tokens": T, "entry": e, "total": T * e,
            "page_used": tp * e, "stride": S, "first_page": base + int(page0),
            "first_col": int(offset0), "col_step": (S % tp) * e, "page_step": S // tp}
    want = kv_reads(kv, T, layer, head, kind, base)
    assert _reader_run(cfg, plan, "att_start", len(want), seed=T) == want


def test_reader_reads_a_gemv_in_order():
    cfg = _cfg()
    size = golden.stream_bytes("bf16", 5, 13)            # 130 bytes: 3 pages, the last short
    want = [{"page": 7 + k, "column": 0, "bytes": b, "run": b, "stride": b}
            for k, b in enumerate([64, 64, 2])]
    assert _reader_run(cfg, {"size": size, "page": 7}, "gemv_start", 3, seed=1) == want


@pytest.mark.parametrize("W, size", [(4, 130), (1, 67), (8, 150), (16, 64)])
def test_reader_cuts_the_last_word_of_a_read(W, size):
    """``words.bytes`` is ``W`` but in a read's last word: ``((bytes - 1) mod W) + 1`` of its
    read, taken before it; a word waits for its read (here words may come early), and words
    wait for ``words.ready`` (a word waits in the read data's register meanwhile)."""
    cfg = _cfg(transfer_bytes=W)
    P = cfg.page_bytes
    sizes = [min(P, size - k) for k in range(0, size, P)]
    words = [{"data": [(7 * k + j) & 0xFF for j in range(W)], "last": int(j == -(-b // W) - 1),
              "bytes": (b - 1) % W + 1 if j == -(-b // W) - 1 else W}
             for k, b in enumerate(sizes) for j in range(-(-b // W))]
    dut = PageReader(cfg)
    rng = random.Random(W)
    got = []

    async def bench(ctx):
        set_payload(ctx, dut.plan, {"size": size, "page": 0})
        ctx.set(dut.gemv_start, 1)
        await ctx.tick()
        ctx.set(dut.gemv_start, 0)
        reads = sent = 0
        for _ in range(40 * len(words)):
            ctx.set(dut.rd_cmd.ready, rng.random() < 0.2)
            offer = sent < len(words) and rng.random() < 0.7
            ctx.set(dut.rd_data.valid, offer)
            if offer:
                set_payload(ctx, dut.rd_data.payload, {k: words[sent][k] for k in ("data", "last")})
            ctx.set(dut.words.ready, rng.random() < 0.7)
            taken_read = ctx.get(dut.rd_cmd.valid) and ctx.get(dut.rd_cmd.ready)
            if ctx.get(dut.words.valid) and ctx.get(dut.words.ready):
                item = _get(ctx, dut.words.payload, ["data", "bytes"])
                # A word leaves only once its read was taken, a cycle before at the earliest.
                assert reads > sum(w["last"] for w in words[:len(got)])
                got.append(item)
            sent += int(bool(offer and ctx.get(dut.rd_data.ready)))
            await ctx.tick()
            reads += int(bool(taken_read))
        assert sent == len(words)

    _simulate(dut, bench)
    assert got == [{"data": w["data"], "bytes": w["bytes"]} for w in words]


# --- the x buffer ------------------------------------------------------------------------------
def _x_words(n: int, F: int, rng) -> list[int]:
    return [rng.getrandbits(16 * F) for _ in range(n)]


def test_xbuffer_holds_a_gemv_vector():
    """Words in order from address 0, ``count`` beats in, ``done`` after the last, each word
    read back a cycle after its address; beats past ``ceil(cols / F)`` are not taken."""
    cfg = _cfg()
    rng = random.Random(3)
    cols = 13
    n = -(-cols // cfg.fmacs)
    words = _x_words(n + 2, cfg.fmacs, rng)
    dut = XBuffer(cfg)

    async def bench(ctx):
        set_payload(ctx, dut.plan, {"op": Op.GEMV, "mode": Mode.FP16, "cols": cols})
        ctx.set(dut.gemv_start, 1)
        await ctx.tick()
        ctx.set(dut.gemv_start, 0)
        sent = 0
        for _ in range(10 * n):
            assert ctx.get(dut.count) == sent and bool(ctx.get(dut.done)) == (sent == n)
            offer = rng.random() < 0.6
            ctx.set(dut.x.valid, offer)
            ctx.set(dut.x.payload.data.as_value(), words[sent])
            taken = offer and ctx.get(dut.x.ready)
            assert not taken or sent < n
            assert ctx.get(dut.take) == taken and ctx.get(dut.done_next) == (sent + taken == n)
            await ctx.tick()
            sent += int(bool(taken))
        assert sent == n and ctx.get(dut.done)
        for b in range(n):
            ctx.set(dut.rd_addr, b)
            await ctx.tick()
            assert ctx.get(dut.rd_data) == words[b]

    _simulate(dut, bench)


def test_xbuffer_rings_two_tokens_of_p():
    """Attend: a token is ``ceil(G / F)`` beats; ``p_ready`` once one is in, ``x`` stalls with
    two tokens held, and ``p_release`` frees the older one, whose words are read from the
    ring's half ``token mod 2``."""
    cfg = _cfg()
    G, T = 3, 5
    pb = -(-G // cfg.fmacs)
    rng = random.Random(4)
    words = _x_words(T * pb, cfg.fmacs, rng)
    dut = XBuffer(cfg)

    async def bench(ctx):
        set_payload(ctx, dut.plan, {"op": Op.ATTEND, "mode": Mode.FP16, "x_beats": T * pb, "pb": pb})
        ctx.set(dut.att_start, 1)
        await ctx.tick()
        ctx.set(dut.att_start, 0)
        sent = used = 0
        for _ in range(60 * T):
            held = sent // pb - used                # whole tokens in the ring, not released
            assert bool(ctx.get(dut.p_ready)) == (held >= 1)
            release = held >= 1 and rng.random() < 0.3
            if release:
                ctx.set(dut.x.valid, 0)
                for b in range(pb):                 # the oldest token's words, then release it
                    ctx.set(dut.rd_addr, (used % 2) * pb + b)
                    await ctx.tick()
                    assert ctx.get(dut.rd_data) == words[used * pb + b]
                ctx.set(dut.p_release, 1)
            ctx.set(dut.x.valid, sent < len(words))
            if sent < len(words):
                ctx.set(dut.x.payload.data.as_value(), words[sent])
            assert bool(ctx.get(dut.x.ready)) == (sent < len(words) and sent - used * pb < 2 * pb)
            taken = ctx.get(dut.x.valid) and ctx.get(dut.x.ready)
            await ctx.tick()
            ctx.set(dut.p_release, 0)
            sent += int(bool(taken))
            used += int(release)
            if used == T:
                return
        raise AssertionError(f"{used} of {T} tokens used")

    _simulate(dut, bench)


def test_xbuffer_sends_w4a16_beats_to_the_lanes():
    """w4a16: every beat taken leaves on ``sums`` a cycle later, ``end`` on a group's last."""
    cfg = _cfg()
    cols = 48
    gb = cfg.group_size // cfg.fmacs
    words = _x_words(cols // cfg.fmacs, cfg.fmacs, random.Random(5))
    dut = XBuffer(cfg)
    got = []

    async def bench(ctx):
        set_payload(ctx, dut.plan, {"op": Op.GEMV, "mode": Mode.W4A16, "cols": cols})
        ctx.set(dut.gemv_start, 1)
        await ctx.tick()
        ctx.set(dut.gemv_start, 0)
        sent, rng = 0, random.Random(6)
        for _ in range(4 * len(words)):
            offer = sent < len(words) and rng.random() < 0.7
            ctx.set(dut.x.valid, offer)
            if offer:
                ctx.set(dut.x.payload.data.as_value(), words[sent])
            taken = offer and ctx.get(dut.x.ready)
            if ctx.get(dut.sums.valid):
                got.append((ctx.get(dut.sums.payload.data), ctx.get(dut.sums.payload.end)))
            await ctx.tick()
            sent += int(bool(taken))

    _simulate(dut, bench)
    assert got == [(w, int(b % gb == gb - 1)) for b, w in enumerate(words)]


# --- the issue stage ---------------------------------------------------------------------------
def _word(addr: int, F: int) -> int:
    """The x buffer's word at ``addr`` in the issue tests: distinct 16-bit lanes."""
    return sum(((addr * 37 + lane * 11 + 5) & 0xFFFF) << (16 * lane) for lane in range(F))


def _lanes(value: int, F: int) -> list[int]:
    return [(value >> (16 * lane)) & 0xFFFF for lane in range(F)]


def _plan(op, mode, **fields) -> dict:
    """A set-up's plan for the issue stage: the fields given and the decoded flags."""
    att, logit, is_int = op in (Op.LOGIT, Op.ATTEND), op == Op.LOGIT, mode == Mode.W8A8
    w4 = mode == Mode.W4A16 and not att
    path = (Path.ATTEND if op == Op.ATTEND else
            (Path.LOGIT_INT if is_int else Path.LOGIT_FLOAT) if logit else
            Path.INT if is_int else Path.W4 if w4 else Path.FLOAT)
    return {"op": op, "mode": mode, "att": att, "logit": logit, "attend": op == Op.ATTEND,
            "int": is_int, "w4": w4, "path": path, **fields}


def _run_issuer(cfg, plan, beats, *, x_count=None, x_words=0, can_issue=None, offer=0.8,
                seed=0, cycles=3000, acc_loop=11):
    """Run an Issuer on ``beats`` (gearbox payloads, offered at the rate ``offer``) with the x
    buffer modelled: ``x_count(cycle)`` words of ``x_words`` in (all of them when ``None``),
    ``x_data`` :func:`_word` of the address of the cycle before; ``can_issue`` a function of
    the cycle. Returns the issues seen on ``o`` (with their cycle), the cycles of the beats
    taken, the headers and the counts of ``p_release``, ``attend_end`` and ``row_issue``."""
    dut = Issuer(cfg, header_depth=4, acc_loop=acc_loop)
    rng = random.Random(seed)
    rec = {"issues": [], "taken": [], "headers": [], "released": 0, "ends": 0, "rows": 0,
           "read_k": {}}
    F = cfg.fmacs
    count = x_count or (lambda c: x_words)

    async def bench(ctx):
        set_payload(ctx, dut.plan, plan)
        ctx.set(dut.drained, 1)
        ctx.set(dut.p_ready, 1)
        start_port = dut.att_start if plan["att"] else dut.gemv_start
        ctx.set(start_port, 1)
        await ctx.tick()
        ctx.set(start_port, 0)
        sent, addr = 0, 0
        for cycle in range(cycles):
            ctx.set(dut.x_count, count(cycle))
            ctx.set(dut.x_done, x_count is None or count(cycle) >= x_words)
            ctx.set(dut.x_take, count(cycle + 1) > count(cycle))
            ctx.set(dut.x_done_next, x_count is None or count(cycle + 1) >= x_words)
            ctx.set(dut.can_issue, can_issue(cycle) if can_issue else 1)
            ctx.set(dut.x_data, _word(addr, F))
            offered = sent < len(beats) and rng.random() < offer
            ctx.set(dut.beats.valid, offered)
            if offered:
                set_payload(ctx, dut.beats.payload, beats[sent])
            ctx.set(dut.headers.ready, rng.random() < 0.5)
            o = _get(ctx, dut.o, ["w", "x", "p", "first", "last", "final", "group_end", "k",
                                  "seed"])
            valids = {f"{kind}.{name}": ctx.get(getattr(getattr(dut.o, kind), name))
                      for kind in ("dot", "mac") for name in ("fp16", "bf16", "int")}
            if any(valids.values()):
                rec["issues"].append(dict(o, cycle=cycle,
                                          path=[k for k, v in valids.items() if v]))
            if offered and ctx.get(dut.beats.ready):
                rec["taken"].append((cycle, sent))
                sent += 1
            if ctx.get(dut.headers.valid) and ctx.get(dut.headers.ready):
                rec["headers"].append(_get(ctx, dut.headers.payload, ["scale", "offset"]))
            rec["released"] += ctx.get(dut.p_release)
            rec["ends"] += ctx.get(dut.attend_end)
            rec["rows"] += ctx.get(dut.row_issue)
            rec["read_k"][cycle] = ctx.get(dut.read_k)
            addr = ctx.get(dut.x_addr)
            await ctx.tick()
        rec["busy"] = ctx.get(dut.busy)

    _simulate(dut, bench)
    return rec


def _entry_beats(cfg, entries: list[list[int]], d: int) -> list[dict]:
    """An attention stream's beats as the gearbox gives them: ``ceil(d / F)`` per entry."""
    F, nb = cfg.fmacs, -(-d // cfg.fmacs)
    return [{"data": entry[b * F:(b + 1) * F] + [0] * (F - len(entry[b * F:(b + 1) * F])),
             "beat": b, "first": int(b == 0), "last": int(b == nb - 1),
             "final": int(t == len(entries) - 1 and b == nb - 1)}
            for t, entry in enumerate(entries) for b in range(nb)]


def _attention_case(cfg, op, G, d, T, seed):
    rng = random.Random(seed)
    F = cfg.fmacs
    entries = [[rng.getrandbits(16) for _ in range(d)] for _ in range(T)]
    nb, pb = -(-d // F), -(-G // F)
    plan = _plan(Op.LOGIT if op == "logit" else Op.ATTEND, Mode.FP16, tokens=T, heads=G, nb=nb,
                 pb=pb, ops=G * nb, last_mask=(1 << ((d - 1) % F + 1)) - 1)
    return entries, plan


@pytest.mark.parametrize("op, G, d, F, x_rate", [
    ("logit", 3, 5, 2, 0),
    # --slow: attend-5-3-4-0 walks Attend's order with more heads than lanes, a partial beat too
    pytest.param("attend", 3, 5, 2, 0, marks=pytest.mark.slow),
    # --slow: logit-2-6-2-5 has whole beats only, logit-3-5-2-0 several heads of Logit's order
    pytest.param("logit", 1, 8, 4, 0, marks=pytest.mark.slow),
    ("attend", 5, 3, 4, 0),
    ("logit", 2, 6, 2, 5)])                     # the query words arrive one every 5 cycles
def test_issuer_orders_attention_issues(op, G, d, F, x_rate):
    """Logit: token by token, head by head, ``ceil(d / F)`` beats each (``k = h nb + b``, the
    query word, each issued only once that word is in); Attend: token by token, beat by beat,
    head by head (``k = b G + h``), the first token seeding, ``p[h]`` from lane ``h mod F`` of
    the token's word ``h // F``. The ring takes every beat, in order."""
    cfg = _cfg(fmacs=F)
    T = 5
    entries, plan = _attention_case(cfg, op, G, d, T, G * d)
    nb, pb, last_mask = plan["nb"], plan["pb"], plan["last_mask"]
    x_count = (lambda c: min(G * nb, c // x_rate)) if x_rate else None
    rec = _run_issuer(cfg, plan, _entry_beats(cfg, entries, d), x_count=x_count,
                      x_words=G * nb)
    want = []
    for t in range(T):
        order = [(h, b) for h in range(G) for b in range(nb)] if op == "logit" else \
            [(h, b) for b in range(nb) for h in range(G)]
        for h, b in order:
            k = h * nb + b if op == "logit" else b * G + h
            beat = entries[t][b * F:(b + 1) * F] + [0] * (F - len(entries[t][b * F:(b + 1) * F]))
            mask = last_mask if b == nb - 1 else (1 << F) - 1
            addr = k if op == "logit" else (t % 2) * pb + h // F
            x = [v if (mask >> i) & 1 else 0 for i, v in enumerate(_lanes(_word(addr, F), F))]
            item = {"w": beat, "k": k, "first": int(b == 0), "last": int(b == nb - 1),
                    "final": int(t == T - 1 and (h, b) == order[-1])}
            if op == "logit":
                item.update(x=x, path=["dot.fp16"])
            else:
                item.update(p=_lanes(_word(addr, F), F)[h % F], seed=int(t == 0),
                            path=["mac.fp16"])
            want.append(item)
    got = [{**{k: v for k, v in i.items() if k in want[0]},
            "w": _lanes(i["w"], F), **({"x": _lanes(i["x"], F)} if "x" in want[0] else {})}
           for i in rec["issues"]]
    assert got == want
    if x_count:
        # Issued (Issuer.latency cycles before o) once its word is in; the first token's as soon
        # as it is in (the ring is well ahead of x there).
        lat = Issuer.latency
        assert all(x_count(i["cycle"] - lat) > i["k"] for i in rec["issues"])
        arrival = {k: next(c for c in range(10 ** 4) if x_count(c) > k) for k in range(G * nb)}
        assert [i["cycle"] - lat for i in rec["issues"][:G * nb]] == \
            [arrival[i["k"]] for i in rec["issues"][:G * nb]]
    if op == "attend":
        assert rec["released"] == T and rec["ends"] == 1
        # The accumulators read an issue's k a cycle before it reaches o.
        assert all(rec["read_k"][i["cycle"] - 1] == i["k"] for i in rec["issues"])
    assert rec["rows"] == (T * G if op == "logit" else 0) and not rec["busy"]


# --slow: 1-2-0 (fp16) waits for the loop (n < acc_loop) as 3-4-1 (bf16) does; 6-4-0 is fp16.
@pytest.mark.parametrize("G, d, fmt", [pytest.param(1, 2, Mode.FP16, marks=pytest.mark.slow),
                                       (3, 4, Mode.BF16), (2, 4, Mode.W8A8), (6, 4, Mode.FP16)])
def test_issuer_keeps_the_accumulator_loop(G, d, fmt):
    """Float Attend: with everything else ready, a token's ``n = G ceil(d / F)`` issues go
    back to back and each accumulator's next issue comes ``acc_loop`` cycles after its last
    (``n < acc_loop``), so token ``t``'s issue ``j`` is at ``t max(n, acc_loop) + j``; int8
    has no loop: one issue a cycle."""
    cfg = _cfg()
    loop, T = 11, 6
    entries, plan = _attention_case(cfg, "attend", G, d, T, d)
    plan = {**plan, **_plan(Op.ATTEND, fmt)}
    rec = _run_issuer(cfg, plan, _entry_beats(cfg, entries, d), offer=1.0, acc_loop=loop)
    n = plan["ops"]
    period = n if fmt == Mode.W8A8 else max(n, loop)
    times = [i["cycle"] for i in rec["issues"]]
    assert len(times) == T * n
    assert [c - times[0] for c in times] == [t * period + j for t in range(T) for j in range(n)]


def _gemv_beats(rows: int, nb: int, F: int, *, header=False) -> list[dict]:
    return [{"data": [(r * 16 + b * F + i) & 0xFFFF for i in range(F)], "mask": (1 << F) - 1,
             "beat": b, "first": int(b == 0), "last": int(b == nb - 1),
             "final": int(r == rows - 1 and b == nb - 1), "header": int(header and b % 4 == 0),
             "scale": r * 16 + b, "offset": 1000 + r * 16 + b}
            for r in range(rows) for b in range(nb)]


def test_issuer_gates_gemv_beats():
    """A GEMV beat enters once its x word is in (``x_count > beat``), a row's last beat only
    with a credit; each enters the lanes a cycle after it is taken, with its flags."""
    cfg = _cfg()
    rows, nb = 3, 6
    beats = _gemv_beats(rows, nb, cfg.fmacs)
    x_count = lambda c: min(nb, c // 9)                 # one x word every 9 cycles
    can_issue = lambda c: (c // 7) % 2 == 0
    rec = _run_issuer(cfg, _plan(Op.GEMV, Mode.BF16), beats, x_count=x_count, x_words=nb,
                      can_issue=can_issue)
    assert [t for _, t in rec["taken"]] == list(range(len(beats)))
    for cycle, index in rec["taken"]:
        beat = beats[index]
        assert beat["beat"] < x_count(cycle) and (not beat["last"] or can_issue(cycle))
    issued = {i["cycle"]: i for i in rec["issues"]}
    for cycle, index in rec["taken"]:
        i, beat = issued[cycle + Issuer.latency], beats[index]
        assert i["path"] == ["dot.bf16"] and _lanes(i["w"], cfg.fmacs) == beat["data"]
        assert _lanes(i["x"], cfg.fmacs) == _lanes(_word(beat["beat"], cfg.fmacs), cfg.fmacs)
        assert (i["first"], i["last"], i["final"]) == (beat["first"], beat["last"], beat["final"])
    assert len(rec["issues"]) == len(beats) and rec["rows"] == rows


def test_issuer_queues_w4a16_headers_and_converts_codes():
    """w4a16: a group's header goes to ``headers`` in order; a beat's codes enter as fp16."""
    cfg = _cfg()
    rows, nb = 2, 8
    beats = _gemv_beats(rows, nb, cfg.fmacs, header=True)
    rec = _run_issuer(cfg, _plan(Op.GEMV, Mode.W4A16), beats)
    assert rec["headers"] == [{"scale": b["scale"], "offset": b["offset"]} for b in beats
                              if b["header"]]
    codes = [[int(c) for c in int_to_float(np.array([v & 0xF for v in b["data"]]), 5, FP16)]
             for b in beats]
    assert [_lanes(i["w"], cfg.fmacs) for i in rec["issues"]] == codes
    assert all(i["path"] == ["dot.fp16"] for i in rec["issues"])


# --- the dot lanes -----------------------------------------------------------------------------
_NEG0, _POS0 = 0x8000, 0

_FLOAT_FMT = {"fp16": FP16, "bf16": BF16}


def _beats_of(codes, x, F, pad_w) -> list[tuple[list[int], list[int]]]:
    """A row's beats as the issue stage gives them: ``F`` weights (padding ``pad_w``) and ``F``
    elements of x (padding ``+0``)."""
    def lanes(values, pad):
        return [int(v) for v in values] + [pad] * (F - len(values))

    return [(lanes(codes[b * F:(b + 1) * F], pad_w), lanes(x[b * F:(b + 1) * F], _POS0))
            for b in range(-(-len(codes) // F))]


def _pack(lanes: list[int]) -> int:
    return sum((v & 0xFFFF) << (16 * i) for i, v in enumerate(lanes))


def _drive(dut, items: list[dict], outputs: dict, *, seed: int, gap: float = 0.3, tail=200):
    """Drive ``dut.i`` with ``items`` (issue fields, ``None`` for an idle cycle inserted at
    random) and record the always-ready ``outputs`` with their cycles."""
    rng = random.Random(seed)
    got = {name: [] for name in outputs}
    sent_at = []

    async def bench(ctx):
        queue, cycle = list(items), 0
        while queue or cycle < (sent_at[-1] if sent_at else 0) + tail:
            item = queue.pop(0) if queue and rng.random() >= gap else None
            ctx.set(dut.i.as_value(), 0)
            if item is not None:
                set_payload(ctx, dut.i, item)
                sent_at.append(cycle)
            for name, fields in outputs.items():
                port = getattr(dut, name)
                if ctx.get(port.valid):
                    got[name].append((cycle, _get(ctx, port.payload, fields)))
            await ctx.tick()
            cycle += 1

    _simulate(dut, bench)
    return got, sent_at


@pytest.mark.parametrize("fmt, F", [("fp16", 2), ("bf16", 4), ("fp16", 1)])
def test_dot_lanes_sum_float_rows_like_golden(fmt, F):
    """Each row's result is golden.inflash.gemv's, :attr:`float_latency` cycles after its last
    beat, in the order of the rows; rows of one beat give one result per cycle."""
    cfg = _cfg(fmacs=F)
    rng = np.random.default_rng(F)
    shapes = [13, 1, F, 2 * F + 1, 64, 3]
    rows = [(from_float(rng.standard_normal(c), _FLOAT_FMT[fmt]),
             from_float(rng.standard_normal(c), _FLOAT_FMT[fmt])) for c in shapes]
    items = []
    for r, (w, x) in enumerate(rows):
        beats = _beats_of(w, x, F, _NEG0)
        items += [{"w": _pack(bw), "x": _pack(bx), "dot": {fmt: 1}, "first": int(b == 0),
                   "last": int(b == len(beats) - 1),
                   "final": int(r == len(rows) - 1 and b == len(beats) - 1)}
                  for b, (bw, bx) in enumerate(beats)]
    dut = DotLanes(cfg)
    got, sent = _drive(dut, items, {"floats": ["value", "final"]}, seed=F)
    want = [int(golden.gemv(golden.Weights(fmt, w[None, :]), x)[0]) for w, x in rows]
    assert [g["value"] for _, g in got["floats"]] == want
    assert [g["final"] for _, g in got["floats"]] == [0] * (len(rows) - 1) + [1]
    ends = [c for c, item in zip(sent, items) if item["last"]]
    assert [c for c, _ in got["floats"]] == [c + dut.float_latency for c in ends]


def test_dot_lanes_sum_integer_rows_like_golden():
    cfg = _cfg(fmacs=4)
    rng = np.random.default_rng(7)
    rows = [(rng.integers(-128, 128, c), rng.integers(-128, 128, c)) for c in (9, 4, 1, 64)]
    items = []
    for r, (w, x) in enumerate(rows):
        beats = _beats_of(w & 0xFF, x & 0xFF, 4, 0)
        items += [{"w": _pack(bw), "x": _pack(bx), "dot": {"int": 1}, "first": int(b == 0),
                   "last": int(b == len(beats) - 1),
                   "final": int(r == len(rows) - 1 and b == len(beats) - 1)}
                  for b, (bw, bx) in enumerate(beats)]
    dut = DotLanes(cfg)
    got, sent = _drive(dut, items, {"ints": ["value", "final"]}, seed=4)
    want = [int(golden.gemv(golden.Weights("w8a8", w[None, :]), x)[0]) & 0xFFFFFFFF
            for w, x in rows]
    assert [g["value"] for _, g in got["ints"]] == want
    ends = [c for c, item in zip(sent, items) if item["last"]]
    assert [c for c, _ in got["ints"]] == [c + dut.int_latency for c in ends]


def _w4_case(cfg, rows: int, groups: int, seed: int):
    g = cfg.group_size
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (rows, groups * g)).astype(np.uint8)
    s = from_float(rng.uniform(0.01, 0.1, (rows, groups)), FP16)
    o = from_float(rng.uniform(-1, 1, (rows, groups)), FP16)
    x = from_float(rng.standard_normal(groups * g), FP16)
    return golden.Weights("w4a16", q, s, o, g), x


def test_dot_lanes_give_w4a16_group_sums():
    """w4a16: per group ``D``, golden's fp16 row of the group's codes as fp16 (``dsum``,
    ``row_end`` on the row's last group); the x beats' sums on ``xsum``."""
    cfg = _cfg()
    F, g = cfg.fmacs, cfg.group_size
    w, x = _w4_case(cfg, 2, 3, 9)
    qf = int_to_float(w.codes, 5, FP16)
    xs_items = [{"data": _pack([int(v) for v in x[b * F:(b + 1) * F]]),
                 "end": int(b % (g // F) == g // F - 1)} for b in range(len(x) // F)]
    items = []
    for r in range(w.rows):
        beats = _beats_of(qf[r], x, F, _NEG0)
        items += [{"w": _pack(bw), "x": _pack(bx), "dot": {"fp16": 1}, "w4": 1,
                   "group_end": int(b % (g // F) == g // F - 1), "last": int(b == len(beats) - 1),
                   "final": int(r == w.rows - 1 and b == len(beats) - 1)}
                  for b, (bw, bx) in enumerate(beats)]
    dut = DotLanes(cfg)
    got_x = []

    async def bench(ctx):
        for cycle in range(len(xs_items) + dut.dot_latency + 2):
            item = xs_items[cycle] if cycle < len(xs_items) else None
            ctx.set(dut.xs.valid, item is not None)
            if item is not None:
                set_payload(ctx, dut.xs.payload, item)
            if ctx.get(dut.xsum.valid):
                got_x.append((ctx.get(dut.xsum.payload.value), ctx.get(dut.xsum.payload.end)))
            await ctx.tick()

    _simulate(dut, bench)
    ones = golden.Weights("fp16", np.full((1, F), 0x3C00, np.uint16))
    assert got_x == [(int(golden.gemv(ones, x[b * F:(b + 1) * F])[0]), item["end"])
                     for b, item in enumerate(xs_items)]
    got, _ = _drive(DotLanes(cfg), items, {"dsum": ["value", "row_end", "final"]}, seed=2)
    want = [{"value": int(golden.gemv(golden.Weights("fp16", qf[r:r + 1, j * g:(j + 1) * g]),
                                      x[j * g:(j + 1) * g])[0]),
             "row_end": int(j == w.groups - 1), "final": int(r == w.rows - 1 and j == w.groups - 1)}
            for r in range(w.rows) for j in range(w.groups)]
    assert [d for _, d in got["dsum"]] == want


# --- the w4a16 epilogue --------------------------------------------------------------------------

def test_epilogue_finishes_w4a16_rows_like_golden():
    """From the x beats' sums and each group's ``D`` and header, the rows of
    golden.inflash.gemv in w4a16, :attr:`latency` cycles after a row's last ``D``."""
    cfg = _cfg()
    F, g = cfg.fmacs, cfg.group_size
    w, x = _w4_case(cfg, 3, 4, 11)
    qf = int_to_float(w.codes, 5, FP16)
    ones = golden.Weights("fp16", np.full((1, F), 0x3C00, np.uint16))
    xsums = [{"value": int(golden.gemv(ones, x[b * F:(b + 1) * F])[0]),
              "end": int(b % (g // F) == g // F - 1)} for b in range(len(x) // F)]
    dsums = [{"value": int(golden.gemv(golden.Weights("fp16", qf[r:r + 1, j * g:(j + 1) * g]),
                                       x[j * g:(j + 1) * g])[0]),
              "row_end": int(j == w.groups - 1),
              "final": int(r == w.rows - 1 and j == w.groups - 1),
              "header": {"scale": int(w.scales[r, j]), "offset": int(w.offsets[r, j])}}
             for r in range(w.rows) for j in range(w.groups)]
    dut = GroupEpilogue(cfg)
    rng = random.Random(12)
    got, ends = [], []

    async def bench(ctx):
        ctx.set(dut.restart, 1)
        await ctx.tick()
        ctx.set(dut.restart, 0)
        for item in xsums:
            ctx.set(dut.xsum.valid, 1)
            set_payload(ctx, dut.xsum.payload, item)
            await ctx.tick()
        ctx.set(dut.xsum.valid, 0)
        for _ in range(40):                     # the last X is written
            await ctx.tick()
        pending, cycle = list(dsums), 0
        while pending or cycle < ends[-1] + dut.latency + 2:
            item = pending.pop(0) if pending and rng.random() < 0.6 else None
            ctx.set(dut.dsum.valid, item is not None)
            ctx.set(dut.headers.valid, 1)
            if item is not None:
                set_payload(ctx, dut.dsum.payload, {k: item[k] for k in ("value", "row_end", "final")})
                set_payload(ctx, dut.headers.payload, item["header"])
                assert ctx.get(dut.headers.ready)
                if item["row_end"]:
                    ends.append(cycle)
            else:
                assert not ctx.get(dut.headers.ready)
            if ctx.get(dut.groups.valid):
                got.append((cycle, ctx.get(dut.groups.payload.value),
                            ctx.get(dut.groups.payload.final)))
            await ctx.tick()
            cycle += 1

    _simulate(dut, bench)
    want = [int(v) for v in golden.gemv(w, x)]
    assert [(v, f) for _, v, f in got] == [(v, int(r == w.rows - 1)) for r, v in enumerate(want)]
    assert [c for c, _, _ in got] == [c + dut.latency for c in ends]


# --- the Attend accumulators -------------------------------------------------------------------
@pytest.mark.parametrize("fmt, G, d, T, F", [("fp16", 1, 2, 6, 2),   # one issue a token: the loop
                                              ("bf16", 3, 5, 4, 2),
                                              ("int8", 1, 4, 7, 4),   # forwarded sums
                                              ("int8", 2, 3, 5, 2),
                                              ("fp16", 4, 8, 3, 4)])
def test_accumulators_attend_like_golden(fmt, G, d, T, F):
    """Issues in Attend order (token, beat, head; ``k = b G + h``), a float accumulator at
    most once in ``acc_loop`` cycles (the issue stage's rule), some at exactly that distance,
    the last long after the one before; after the last, the ``G d`` sums of golden.inflash.attend, head by head, with the output
    queue's credits coming and going; ``busy`` until the last leaves."""
    cfg = _cfg(fmacs=F)
    rng = np.random.default_rng(G * d + T)
    if fmt == "int8":
        p, v = rng.integers(-128, 128, (G, T)), rng.integers(-128, 128, (T, d))
        pc, vc = p & 0xFF, v & 0xFF
    else:
        p = from_float(rng.uniform(0, 0.5, (G, T)), _FLOAT_FMT[fmt])
        v = from_float(rng.standard_normal((T, d)), _FLOAT_FMT[fmt])
        pc, vc = p, v
    nb = -(-d // F)
    order = [(t, b, h) for t in range(T) for b in range(nb) for h in range(G)]
    mac = {"fp16": "fp16", "bf16": "bf16", "int8": "int"}[fmt]
    dut = AttendAccumulators(cfg)
    loop = dut.acc_loop if fmt != "int8" else 1
    pick = random.Random(d)
    got, gaps = [], []

    async def bench(ctx):
        set_payload(ctx, dut.plan, {"heads": G, "nb": nb, "head_dim": d})
        ctx.set(dut.drained, 1)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        assert ctx.get(dut.busy)
        # As in the PE: an issue is chosen (``attend_end`` with the last), its accumulator is
        # read a cycle later (``k``), and it is on ``i`` a cycle after that.
        nxt, chosen, issued, last = 0, None, None, {}
        for cycle in range(60 * len(order) + 200):
            ctx.set(dut.i.as_value(), 0)
            if issued is not None:                  # the issue register
                t, b, h = order[issued]
                lanes = [int(c) for c in vc[t, b * F:(b + 1) * F]]
                set_payload(ctx, dut.i, {"mac": {mac: 1}, "k": b * G + h, "seed": int(t == 0),
                                  "final": int(issued == len(order) - 1),
                                  "p": int(pc[h, t]), "w": _pack(lanes + [0] * (F - len(lanes)))})
            issued = chosen
            if chosen is not None:                  # its accumulator is read
                t, b, h = order[chosen]
                ctx.set(dut.k, b * G + h)
            chosen = None
            k = None
            if nxt < len(order):
                t, b, h = order[nxt]
                k = b * G + h
            go = k is not None and cycle - last.get(k, -loop) >= loop and pick.random() < 0.7
            # The last issue comes long after the one before (a naive walk's last page), when
            # the lanes are empty: the drain must still wait for it.
            go &= nxt != len(order) - 1 or cycle - max(last.values(), default=0) > 2 * loop + 4
            ctx.set(dut.attend_end, go and nxt == len(order) - 1)
            if go:
                if k in last:
                    gaps.append(cycle - last[k])
                last[k] = cycle
                chosen, nxt = nxt, nxt + 1
            ctx.set(dut.can_issue, pick.random() < 0.6)
            if ctx.get(dut.results.valid):
                got.append((ctx.get(dut.results.payload.value),
                            ctx.get(dut.results.payload.final)))
            await ctx.tick()
            if len(got) == G * d:
                break
        assert not ctx.get(dut.busy)

    _simulate(dut, bench)
    want = golden.attend(p, v, fmt).reshape(-1)
    assert [value for value, _ in got] == [int(x) & 0xFFFFFFFF for x in want]
    assert [f for _, f in got] == [0] * (G * d - 1) + [1]
    assert max(loop, G * nb) in gaps                # the tightest revisit happened


# --- the result path -----------------------------------------------------------------------------

def test_result_path_keeps_order_and_credits():
    """Items take credits (``row_issue``, ``drain_issue``, ``refuse``) only while ``can_issue``;
    their results come out on ``y`` in the order written, with ``last`` and ``error``;
    ``drained`` says nothing is in the arithmetic. Back-pressure on ``y`` fills the queue."""
    cfg = _cfg()
    depth, latency = 6, 4
    dut = ResultPath(cfg, depth=depth)
    rng = random.Random(21)
    sources = ["floats", "groups", "ints", "drains"]
    want, got = [], []

    async def bench(ctx):
        pipe = [None] * latency                     # results in the arithmetic
        source, taken, outstanding = "floats", 0, 0
        for cycle in range(1500):
            for name in sources:
                ctx.set(getattr(dut, name).valid, 0)
            assert bool(ctx.get(dut.drained)) == (outstanding == 0)
            out = pipe.pop(0)
            if out is not None:
                port = getattr(dut, out[0])
                ctx.set(port.valid, 1)
                set_payload(ctx, port.payload, {"value": out[1], "final": out[2]})
                outstanding -= 1
            can = ctx.get(dut.can_issue)
            refuse = can and out is None and outstanding == 0 and rng.random() < 0.05
            issue = can and not refuse and rng.random() < 0.5
            if issue and rng.random() < 0.1:
                source = rng.choice(sources)
            ctx.set(dut.refuse, refuse)
            ctx.set(dut.row_issue, issue and source != "drains")
            ctx.set(dut.drain_issue, issue and source == "drains")
            item = None
            if issue:
                item = (source, rng.getrandbits(32), int(rng.random() < 0.2))
                want.append((item[1], item[2], 0))
                outstanding += 1
            if refuse:
                want.append((0, 1, 1))
            pipe.append(item)
            ctx.set(dut.y.ready, rng.random() < 0.4)
            if ctx.get(dut.y.valid) and ctx.get(dut.y.ready):
                got.append(tuple(_get(ctx, dut.y.payload, ["value", "last", "error"]).values()))
            taken += int(bool(issue or refuse))
            assert taken - len(got) <= depth
            await ctx.tick()

    _simulate(dut, bench)
    assert len(got) > 100 and got == want[:len(got)]


# --- parameters ----------------------------------------------------------------------------------

@pytest.mark.parametrize("component, name", [
    (CommandSetup, "Command set-up"), (PageReader, "Page reader"), (XBuffer, "x buffer"),
    (DotLanes, "Dot lanes"), (GroupEpilogue, "w4a16 epilogue"),
    (AttendAccumulators, "Accumulator")])
def test_parts_take_a_pe_config(component, name):
    with pytest.raises(TypeError, match=f"^{name} configuration must be a PEConfig, not 4$"):
        component(4)


def test_part_parameters_are_checked():
    with pytest.raises(TypeError, match="^Issuer configuration must be a PEConfig"):
        Issuer(None, header_depth=4, acc_loop=11)
    with pytest.raises(ValueError, match="^Header FIFO depth must be between 1 and 4096, not 0$"):
        Issuer(_cfg(), header_depth=0, acc_loop=11)
    with pytest.raises(ValueError, match="^Accumulator loop must be between 1 and 1024, not 0$"):
        Issuer(_cfg(), header_depth=4, acc_loop=0)
    with pytest.raises(TypeError, match="^Result path configuration must be a PEConfig"):
        ResultPath("cfg", depth=8)
    with pytest.raises(ValueError, match="^Result queue depth must be between 3 and 4096, not 2$"):
        ResultPath(_cfg(), depth=2)
