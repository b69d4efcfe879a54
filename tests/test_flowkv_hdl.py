"""In-process tests of the FlowKV RTL (Amaranth simulator): parameters, tiles, tile protocol, pair.

Each tile is checked on its own against :func:`golden.flowkv.attend_trace`: tile 0 from keys to the
items ``C``, ``F`` and ``l``; tile 1 from the golden items and the values to ``O``. The cocotb
testbench (cocotb_tests/flowkv) checks the generated Verilog of the pair and the array.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from golden import flowkv as golden
from golden.arith.float import from_float
from hdl.arith.format import BF16, FP32
from hdl.arith.fpadd import FloatAdder
from hdl.arith.tree import serial_tree, unit_combine
from hdl.flowkv import FlowKVArray, FlowKVConfig, FlowKVPair, Kind, ScoreTile, ValueTile
from hdl.flowkv.spec import score_scale_code
from hdl.flowkv.tile0 import total_order_max
from memwall import registry
from memwall.params import ParameterError

from .stream_sim import run_streams

SMALL = dict(head_dim=8, lanes=2, group=2, chunk=4, max_tokens=64)


# --- parameters ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    ({"head_dim": 0}, ValueError, "Head dimension must be between 1 and 1024, not 0"),
    ({"lanes": 3}, ValueError, "Lane count must be a power of two between 1 and 64, not 3"),
    ({"head_dim": 6, "lanes": 4}, ValueError,
     "Head dimension must be a multiple of the lane count 4, not 6"),
    ({"group": 17}, ValueError,
     r"Group size \(query heads per KV head\) must be between 1 and 16, not 17"),
    ({"chunk": 12}, ValueError, "Chunk length must be a power of two between 1 and 4096, not 12"),
    ({"max_tokens": 1}, ValueError,
     "Maximum KV-cache length must be a power of two between 2 and 16777216, not 1"),
    ({"out_fmt": "fp16"}, ValueError, "Output format must be bf16 or fp32, not fp16"),
    ({"lanes": 2.0}, TypeError, "Lane count must be an integer power of two"),
])
def test_parameter_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        FlowKVConfig(**{**SMALL, **kwargs})


def test_registry_reports_parameter_errors():
    block = registry.get("flowkv")
    with pytest.raises(ParameterError, match="Chunk length must be a power of two"):
        block.parameters("small", {"chunk": "6"})
    with pytest.raises(ParameterError, match=r"Pair count \(KV heads\) must be between 1 and 16"):
        registry.get("flowkv-array").parameters("small", {"pairs": "0"})


@pytest.mark.parametrize("d", [1, 2, 3, 8, 24, 64, 100, 256, 1000, 1024])
def test_score_scale_matches_golden(d):
    assert score_scale_code(d) == int(golden.score_scale(d))


def test_score_scale_of_gemma():
    # fp32(log2 e) / 16 for d = 256 (docs/flowkv_models.md section 5).
    assert score_scale_code(256) == 0x3DB8AA3B


# --- shared pieces -------------------------------------------------------------------------------

def _run_comb(fn, cases):
    """Evaluate a combinational function of two 32-bit inputs in the simulator."""
    a, b = Signal(32), Signal(32)
    y = Signal(32)
    m = Module()
    m.d.comb += y.eq(fn(a, b))
    out = []

    async def bench(ctx):
        for x, z in cases:
            ctx.set(a, x)
            ctx.set(b, z)
            out.append(ctx.get(y))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return out


def test_total_order_max():
    codes = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000,
             0x00800000, 0x80800000, 0x40000000, 0xC0000000]
    cases = [(a, b) for a in codes for b in codes]
    got = _run_comb(total_order_max, cases)
    key = {c: golden._order(np.array([c], np.uint32))[0] for c in codes}
    for (a, b), y in zip(cases, got):
        assert y == (a if key[a] >= key[b] else b), f"max({a:#x}, {b:#x}) gave {y:#x}"


@pytest.mark.parametrize("groups", [[1], [2], [3], [5, 1, 8, 7], [8, 8, 2]])
def test_serial_tree_matches_pairwise_order(groups):
    """Groups of any size up to the maximum reduce in the golden tree order, gaps or not."""
    rng = np.random.default_rng(len(groups))
    values = [from_float(rng.standard_normal(n) * 2.0 ** rng.integers(-20, 20, n), FP32)
              for n in groups]
    m = Module()
    value, valid, last = Signal(32), Signal(), Signal()
    result = serial_tree(m, value, valid, last, max_count=8,
                         combine=unit_combine(FloatAdder, FP32), identity=1 << 31)
    got = []

    async def bench(ctx):
        stream = [(int(v), j == len(g) - 1) for g in values for j, v in enumerate(g)]
        index, cycle, tick_rng = 0, 0, np.random.default_rng(7)
        while len(got) < len(groups):
            assert cycle < 1000
            send = index < len(stream) and tick_rng.random() > 0.4
            ctx.set(valid, int(send))
            if send:
                ctx.set(value, stream[index][0])
                ctx.set(last, int(stream[index][1]))
                index += 1
            await ctx.tick()
            cycle += 1
            if ctx.get(result.valid):
                got.append(ctx.get(result.value))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [int(golden.tree_sum(g)) for g in values]
    assert got == want


# --- tile 0 and tile 1 against the trace --------------------------------------------------------

def _operands(cfg, rng, length):
    q = from_float(rng.standard_normal((cfg.group, cfg.head_dim)), BF16)
    K = from_float(rng.standard_normal((length, cfg.head_dim)), BF16)
    V = from_float(rng.standard_normal((length, cfg.head_dim)), BF16)
    return q, K, V


def _rows(cfg, length, position, window):
    index, _ = golden.sweep(length, position, chunk=cfg.chunk, window=window)
    return [r for c in index for r in range(c * cfg.chunk, min((c + 1) * cfg.chunk, length))]


def _beats(cfg, rows):
    P = cfg.lanes
    return [{"data": [int(x) for x in row[b * P:(b + 1) * P]]}
            for row in rows for b in range(cfg.beats)]


def _cmd(length, position, window):
    return {"position": position, "length": length, "window": window or 0,
            "sliding": int(window is not None)}


#: (length, position, window): chunks, windows, a partial last chunk, future rows, L = 1.
JOBS = [(11, 10, None), (11, 10, 4), (3, 2, None), (1, 0, None), (20, 13, 6), (9, 8, 1)]


def _trace_items(cfg, steps, length):
    """The item stream the contract defines, from the golden trace."""
    items = []
    for st in steps:
        for h in range(cfg.group):
            items.append({"kind": Kind.C, "head": h, "slot": 0, "value": int(st.c[h]),
                          "first": int(st is steps[0]), "final": int(st is steps[-1])})
            slots = [t for t in range(cfg.chunk) if st.start + t < length]
            for t in slots:
                items.append({"kind": Kind.F, "head": h, "slot": t, "value": int(st.f[h, t]),
                              "valid": int(st.valid[t]), "first": int(st is steps[0]),
                              "final": int(st is steps[-1]),
                              "last": int(h == cfg.group - 1 and t == slots[-1])})
    for h in range(cfg.group):
        items.append({"kind": Kind.L, "head": h, "value": int(steps[-1].l[h]),
                      "last": int(h == cfg.group - 1)})
    return items


@pytest.mark.parametrize("kwargs", [SMALL, dict(head_dim=4, lanes=4, group=1, chunk=1,
                                                max_tokens=32)])
def test_score_tile_items_match_trace(kwargs):
    cfg = FlowKVConfig(**kwargs)
    rng = np.random.default_rng(11)
    cmds, qs, ks, expect = [], [], [], []
    for length, position, window in JOBS:
        q, K, V = _operands(cfg, rng, length)
        _, steps = golden.attend_trace(q, K, V, position, chunk=cfg.chunk, window=window)
        cmds.append(_cmd(length, position, window))
        qs += _beats(cfg, q)
        ks += _beats(cfg, K[_rows(cfg, length, position, window)])
        expect += _trace_items(cfg, steps, length)
    cmds.append(_cmd(3, 3, None))                 # refused: position beyond the length
    qs += _beats(cfg, np.zeros((cfg.group, cfg.head_dim), np.uint16))
    expect.append({"kind": Kind.REFUSED, "last": 1})
    fields = ["kind", "head", "slot", "value", "valid", "first", "final", "last"]
    got, _ = run_streams(ScoreTile(cfg), {"cmd": cmds, "q": qs, "k": ks}, {"items": fields},
                         done=lambda r: len(r["items"]) >= len(expect), seed=5)
    for index, (want, item) in enumerate(zip(expect, got["items"])):
        for name, value in want.items():
            assert item[name] == value, f"item {index}: {name} {item[name]:#x}, want " \
                                        f"{value:#x} ({want})"


def test_value_tile_output_matches_trace():
    """Tile 1 alone, fed the golden items: O bit for bit, and one error beat for REFUSED."""
    cfg = FlowKVConfig(**SMALL, out_fmt="fp32")
    rng = np.random.default_rng(12)
    items, vs, expect = [], [], []
    for length, position, window in JOBS:
        q, K, V = _operands(cfg, rng, length)
        O, steps = golden.attend_trace(q, K, V, position, chunk=cfg.chunk, window=window,
                                       out_fmt=FP32)
        items += _trace_items(cfg, steps, length)
        vs += _beats(cfg, V[_rows(cfg, length, position, window)])
        expect += [(h, b, [int(x) for x in O[h, b * cfg.lanes:(b + 1) * cfg.lanes]], 0)
                   for h in range(cfg.group) for b in range(cfg.beats)]
    items.append({"kind": Kind.REFUSED, "last": 1})
    expect.append((0, 0, [0] * cfg.lanes, 1))
    got, _ = run_streams(ValueTile(cfg), {"items": items, "v": vs},
                         {"o": ["data", "head", "beat", "error", "last"]},
                         done=lambda r: len(r["o"]) >= len(expect), seed=6)
    assert [(o["head"], o["beat"], o["data"], o["error"]) for o in got["o"]] == expect
    lasts = [o["last"] for o in got["o"]]
    assert sum(lasts) == len(JOBS) + 1 and lasts[-1] == 1


# SMALL (the registry's small preset) with --slow: cocotb's random_jobs on flowkv-small runs the
# same steps (full attention and windows, every query position) in make test.
@pytest.mark.parametrize("kwargs", [pytest.param(SMALL, marks=pytest.mark.slow),
                                    dict(SMALL, group=3, lanes=1, chunk=2, out_fmt="fp32")])
def test_pair_matches_golden(kwargs):
    pair = FlowKVPair(**kwargs)
    cfg = pair.cfg
    rng = np.random.default_rng(13)
    inputs = {"cmd": [], "q": [], "k": [], "v": []}
    expect = []
    for length, position, window in JOBS:
        q, K, V = _operands(cfg, rng, length)
        rows = _rows(cfg, length, position, window)
        inputs["cmd"].append(_cmd(length, position, window))
        inputs["q"] += _beats(cfg, q)
        inputs["k"] += _beats(cfg, K[rows])
        inputs["v"] += _beats(cfg, V[rows])
        O = golden.attend(q, K, V, position, chunk=cfg.chunk, window=window, out_fmt=cfg.out_fmt)
        expect += [[int(x) for x in O[h, b * cfg.lanes:(b + 1) * cfg.lanes]]
                   for h in range(cfg.group) for b in range(cfg.beats)]
    got, _ = run_streams(pair, inputs, {"o": ["data"]},
                         done=lambda r: len(r["o"]) >= len(expect), seed=7)
    assert [o["data"] for o in got["o"]] == expect


# --slow: cocotb's random_jobs on flowkv-array-small (two MHA pairs; SMALL's pair, G = 2, is
# flowkv-small's) runs the broadcast and each pair's answers in make test.
@pytest.mark.slow
def test_array_broadcasts_the_step():
    """Two pairs take one command together and each answers for its own KV head."""
    array = FlowKVArray(pairs=2, **SMALL)
    cfg = array.cfg
    rng = np.random.default_rng(14)
    length, position = 6, 5
    rows = _rows(cfg, length, position, None)
    inputs = {"cmd": [_cmd(length, position, None)]}
    expect = {}
    for n in range(2):
        q, K, V = _operands(cfg, rng, length)
        inputs[f"q{n}"], inputs[f"k{n}"] = _beats(cfg, q), _beats(cfg, K[rows])
        inputs[f"v{n}"] = _beats(cfg, V[rows])
        O = golden.attend(q, K, V, position, chunk=cfg.chunk)
        expect[f"o{n}"] = [[int(x) for x in O[h, b * cfg.lanes:(b + 1) * cfg.lanes]]
                           for h in range(cfg.group) for b in range(cfg.beats)]
    got, _ = run_streams(array, inputs, {"o0": ["data"], "o1": ["data"]},
                         done=lambda r: all(len(r[k]) >= len(v) for k, v in expect.items()),
                         seed=8)
    for name, want in expect.items():
        assert [o["data"] for o in got[name]] == want, name


def test_tile_latencies():
    cfg = FlowKVConfig(**SMALL)
    assert ValueTile(cfg).loop_latency == 13
    # 1 (query read) + 5 + 6 (2-lane dot) + 2 * 6 (two beat-tree levels) + 5 (scale).
    assert ScoreTile(cfg).score_latency == 29
