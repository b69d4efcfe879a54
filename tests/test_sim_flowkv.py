"""The FlowKV cycle model (sim/flowkv.py): its latencies are the RTL's, and it predicts the RTL."""

import re

import numpy as np
import pytest

from cocotb_tests.flowkv.bench import pair_timing
from hdl.arith.recip import Reciprocal
from hdl.flowkv import FlowKVConfig, FlowKVPair
from hdl.flowkv.dqp_spec import GROUP, RECORD_BYTES, DQPConfig, command_cycles
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
    # --slow: the same pair with other jobs (the first case's runs it at full rate).
    pytest.param(dict(head_dim=32, lanes=2, group=2, chunk=8), (40, 39, 9), 0,
                 marks=pytest.mark.slow),
    pytest.param(dict(head_dim=32, lanes=2, group=2, chunk=8), (5, 4, None), 0,
                 marks=pytest.mark.slow),
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
    assert all(r.note.endswith("; projections memory-bound") for r in result.rows)
    assert "the projections are memory-bound at 40 GB/s." in result.notes[1]
    assert result.plots[0].read_bytes()[:4] == b"\x89PNG"


# --- the projections on FusedDQP (hdl.flowkv.dqp_spec's cycle model) ------------------------------

def _head_and_layer(gemma):
    """``(K, N)`` of a token's commands: the layer's, ``layers`` times, then the LM head."""
    layer = [(gemma.d_model, gemma.d_q), (gemma.d_model, gemma.d_kv), (gemma.d_model, gemma.d_kv),
             (gemma.d_q, gemma.d_model), (gemma.d_model, gemma.ffn), (gemma.d_model, gemma.ffn),
             (gemma.ffn, gemma.d_model)]
    return layer * gemma.layers + [(gemma.d_model, gemma.vocab)]


@pytest.mark.parametrize("gemma", [model.GEMMA3_1B, model.GEMMA3_4B], ids=lambda g: g.name)
def test_layer_projections_are_the_model_weights(gemma):
    shapes = [(k, n) for _, k, n in model.layer_projections(gemma)]
    assert shapes * gemma.layers + [(gemma.d_model, gemma.vocab)] == _head_and_layer(gemma)
    assert sum(k * n for k, n in _head_and_layer(gemma)) == gemma.weights
    assert model.Q4NX_BYTES_PER_WEIGHT == 5120 / (32 * 256)      # the paper's block (Sec. 3.1.1)


def test_engines_share_a_projection_by_whole_tiles():
    cfg = model.DECODE_DQP                                     # m = 32, N up to 2**18
    assert model.engine_commands(cfg, 2, 262208) == [131104]  # Gemma3-4B's LM head
    assert model.engine_commands(cfg, 1, 262208) == [262144, 64]  # above max_outputs: 2 commands
    assert model.engine_commands(cfg, 3, 256) == [96]         # 8 tiles: the busiest takes 3
    assert model.engine_commands(cfg, 1, 40) == [64]          # a partial tile is padded


def test_compute_bound_projections_take_the_cycle_model():
    # One 8-lane engine reads 5 bytes a cycle, 9 GB/s at 1.8 GHz: below 40 GB/s, so every
    # projection takes command_cycles' total, one command after the other.
    cfg = DQPConfig(lanes=8, tile=32, max_inputs=16384, max_outputs=262144)
    gemma = model.GEMMA3_1B
    got = model.projection_time(gemma, dqp=cfg, engines=1, clock_ghz=1.8, bandwidth_gbs=40.0)
    want = sum(command_cycles(cfg, inputs=k, outputs=n)["total"] for k, n in _head_and_layer(gemma))
    assert got["bound"] == "compute"
    assert got["cycles"] == got["compute"] == want
    assert got["demand_gbs"] == pytest.approx(8 * (RECORD_BYTES / GROUP) * 1.8)


def test_memory_bound_projections_take_the_memory_time_and_the_drain():
    cfg, gemma = model.DECODE_DQP, model.GEMMA3_4B
    got = model.projection_time(gemma, dqp=cfg, engines=2, clock_ghz=1.8, bandwidth_gbs=40.0)
    runs = [command_cycles(cfg, inputs=k, outputs=n // 2) for k, n in _head_and_layer(gemma)]
    memory = gemma.weights * RECORD_BYTES / GROUP / (40.0 / 1.8)
    drain = sum(r["total"] - r["issue"] for r in runs)
    assert got["bound"] == "memory"
    assert got["issue"] == sum(r["issue"] for r in runs) < memory
    assert got["cycles"] == pytest.approx(memory + drain, rel=1e-12)


def test_decode_engines_are_the_fewest_above_the_papers_demand():
    per_engine = 32 * (RECORD_BYTES / GROUP) * 1.8          # GB/s of 32 lanes at 1.8 GHz
    assert model.DECODE_DQP.lanes == 32
    assert model.dqp_demand_gbs(model.DECODE_DQP, 1, 1.8) == pytest.approx(per_engine)
    assert (model.DECODE_ENGINES - 1) * per_engine < model.PAPER_U_MEM_RD_GBS
    assert model.DECODE_ENGINES * per_engine > model.PAPER_U_MEM_RD_GBS


def test_projection_bound_switches_with_engines_lanes_and_bandwidth():
    gemma = model.GEMMA3_4B
    base = model.decode_tps(gemma, 1024)                      # 2 engines, 72 GB/s of demand
    one = model.decode_tps(gemma, 1024, engines=1)            # 36 GB/s < 40 GB/s
    narrow = model.decode_tps(gemma, 1024, dqp=DQPConfig(lanes=16, tile=32, max_inputs=16384,
                                                         max_outputs=262144))
    wide = model.decode_tps(gemma, 1024, bandwidth_gbs=120.0)
    assert base["projection_bound"] == "memory" and base["weight_bandwidth_use"] > 0.999
    for slower in (one, narrow):
        assert slower["projection_bound"] == "compute" and slower["tps"] < base["tps"]
        assert slower["weight_bandwidth_use"] == pytest.approx(36 / 40, rel=1e-3)
    assert wide["projection_bound"] == "compute"
    # The old assumption (weights at the full bandwidth) is the bound the engines approach.
    assert base["tps"] == pytest.approx(base["tps_full_bandwidth"], rel=1e-3)
    assert wide["tps"] < 0.7 * wide["tps_full_bandwidth"]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(engines=0), ValueError, "FusedDQP engine count engines must be between 1 and 256, not 0"),
    (dict(engines=1.5), TypeError,
     "FusedDQP engine count engines must be an integer between 1 and 256, not 1.5"),
    (dict(dqp="paper"), TypeError, "FusedDQP configuration must be a DQPConfig, not 'paper'"),
    (dict(clock_ghz=0), ValueError, "Clock clock_ghz must be a positive number of GHz, not 0"),
    (dict(bandwidth_gbs="40"), TypeError,
     "Memory bandwidth bandwidth_gbs must be a positive number of GB/s, not '40'"),
    # Gemma3-4B's down projection has K = 10,240 inputs.
    (dict(dqp=DQPConfig(lanes=32, tile=32, max_inputs=8192, max_outputs=262144)), ValueError,
     "Input count K must be between 32 and 8192, not 10240"),
])
def test_decode_parameters_are_checked(kwargs, error, message):
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        model.decode_tps(model.GEMMA3_4B, 1024, **kwargs)


def test_table_names_the_engines_and_the_bound():
    text = model.table(bandwidth_gbs=120.0)
    assert "on 2 FusedDQP engine(s) of 32 lanes, m = 32 (read demand 72 GB/s)" in text
    rows = [line for line in text.splitlines() if line.startswith("| Gemma3")]
    assert len(rows) == sum(map(len, model.PAPER_TPS.values()))
    assert all("| compute-bound |" in row for row in rows)
