"""The FlowKV cycle model (sim/flowkv.py): its latencies are the RTL's, and it predicts the RTL."""

import numpy as np
import pytest

from cocotb_tests.flowkv.bench import pair_timing
from hdl.arith.recip import Reciprocal
from hdl.flowkv import FlowKVConfig, FlowKVPair
from sim import flowkv as model

from .stream_sim import run_streams
from .test_flowkv_hdl import _beats, _cmd, _operands, _rows


def test_default_timing_is_the_paper_pair():
    cfg = FlowKVConfig(head_dim=256, lanes=16, group=4, chunk=128, max_tokens=32768)
    assert pair_timing(cfg) == model.PairTiming()
    assert model.PairTiming().recip == Reciprocal().latency


@pytest.mark.parametrize("kwargs, job, tolerance", [
    # d / P = 16 >= the accumulator loop: the model is exact.
    (dict(head_dim=32, lanes=2, group=2, chunk=8), (40, 39, None), 0),
    (dict(head_dim=32, lanes=2, group=2, chunk=8), (40, 39, 9), 0),
    (dict(head_dim=32, lanes=2, group=2, chunk=8), (5, 4, None), 0),
    (dict(head_dim=16, lanes=1, group=1, chunk=4), (20, 19, None), 0),
    # d / P = 4: rows wait for the loop; the model is within a few cycles.
    (dict(head_dim=8, lanes=2, group=2, chunk=4), (20, 19, None), 0),
    (dict(head_dim=8, lanes=2, group=2, chunk=4), (20, 19, 6), 4),
])
def test_step_cycles_predict_the_rtl(kwargs, job, tolerance):
    pair = FlowKVPair(**kwargs, max_tokens=128)
    cfg = pair.cfg
    length, position, window = job
    q, K, V = _operands(cfg, np.random.default_rng(0), length)
    rows = _rows(cfg, length, position, window)
    beats = cfg.group * cfg.beats
    _, cycles = run_streams(pair, {"cmd": [_cmd(length, position, window)], "q": _beats(cfg, q),
                                   "k": _beats(cfg, K[rows]), "v": _beats(cfg, V[rows])},
                            {"o": ["data"]}, done=lambda r: len(r["o"]) >= beats, idle=0,
                            stall=0)
    predicted = model.step_cycles(pair_timing(cfg), length, position, window)
    assert predicted["rows"] == len(rows)
    # run_streams counts the cycles from the command's to the last beat's, both included.
    assert abs(predicted["total"] - cycles) <= tolerance, (predicted, cycles)


def test_chunk_rows_follow_the_sweep():
    # Window 4 at p = 10 with chunks of 4: chunks 1 and 2, rows 4..7 and 8..10 (L = 11).
    assert model.chunk_rows(11, 10, 4, 4) == [4, 3]
    assert model.chunk_rows(11, 10, 4) == [4, 4, 3]
    assert model.chunk_rows(1, 0, 8) == [1]


def test_memory_bound_rows_take_the_memory_time():
    t = model.PairTiming()
    free = model.step_cycles(t, 4096)
    slow = model.step_cycles(t, 4096, row_cycles=64.0)
    assert free["stream"] == 4096 * 16
    assert slow["stream"] == 4096 * 64


def test_gemma_shapes_and_weights():
    assert model.GEMMA3_4B.global_layers == 5 and model.GEMMA3_1B.global_layers == 4
    # About 3.9e9 and 1.0e9 weights read per token (projections and the tied LM head).
    assert 3.5e9 < model.GEMMA3_4B.weights < 4.0e9
    assert 0.9e9 < model.GEMMA3_1B.weights < 1.1e9


def test_decode_throughput_falls_with_context_and_bandwidth():
    short = model.decode_tps(model.GEMMA3_4B, 1024)
    long = model.decode_tps(model.GEMMA3_4B, 131072)
    assert long["tps"] < short["tps"] and long["attention_share"] > short["attention_share"]
    assert long["memory_bound"]
    faster = model.decode_tps(model.GEMMA3_4B, 131072, bandwidth_gbs=80.0)
    assert faster["tps"] > long["tps"]
    # The attention phase keeps the memory busy: at 128K it uses over 95% of the bandwidth.
    assert long["kv_bandwidth_use"] > 0.95


def test_reproduce_quick(tmp_path):
    from sim.reproduce import Context

    result = model.reproduce(Context(tmp_path, quick=True, progress=lambda s: None))
    assert [r.figure for r in result.rows] == [
        "Gemma3-1B decode TPS at 1K", "Gemma3-1B decode TPS at 32K",
        "Gemma3-4B decode TPS at 1K", "Gemma3-4B decode TPS at 128K"]
    for r in result.rows:
        assert r.paper == model.PAPER_TPS[r.figure.split()[0]][
            {"1K": 1024, "32K": 32768, "128K": 131072}[r.figure.split()[-1]]]
        assert 0 < r.ours < 1000
    assert result.rows[0].ours > result.rows[1].ours        # longer context, fewer tokens/s
    assert result.rows[2].ours > result.rows[3].ours
    assert result.plots[0].read_bytes()[:4] == b"\x89PNG"
