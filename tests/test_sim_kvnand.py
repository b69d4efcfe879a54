"""The KVNAND design-space model (sim/kvnand/): Table I figures, hand-computed costs, capacity
limits, parameter messages, properties of the sweep, and the reproduction's structure."""

import math

import numpy as np
import pytest

from golden.inflash import KVLayout, attention_timing, gemv_timing
from sim import kvnand as kv
from sim.kvnand import decode as kvd
from sim.kvnand import report as kvr
from sim.kvnand import (LLAMA2_7B, LLAMA31_8B, LLAMA31_70B, MODELS, NPU, Flash, Model, Point,
                        System, decode_latency, footprint)
from sim.reproduce import Context

TR = 1600                      # tR = 4 us at 400 MHz
CLK = 400e6
SYSTEM = System()


def parts(latency):
    return dict(latency.parts)


# --- Table I and model shapes ---------------------------------------------------------------------


def test_table_i_die_capacity():
    fl = Flash()
    # 32 planes x 768 pages x 177 blocks x 4 KB; Table I: 4.1484 Gb per plane, 132.75 Gb per die.
    assert fl.die_bytes == 32 * 768 * 177 * 4096
    assert 8 * fl.die_bytes / 2**30 == 132.75
    assert fl.plain_die_bytes == 16 * 2**30                      # 128 Gb
    assert SYSTEM.dies == 16 and SYSTEM.flash.geometry.fmacs == 16
    assert SYSTEM.flash.geometry.tR_cycles == TR


def test_model_shapes_match_published_parameter_counts():
    assert [m.params() for m in MODELS] == [6_738_415_616, 8_030_261_248, 70_553_706_496]
    assert LLAMA2_7B.group == 1 and LLAMA31_8B.group == 4 and LLAMA31_70B.group == 8
    # fp16: two bytes per parameter (norms included).
    assert LLAMA2_7B.weight_bytes("fp16") == 2 * LLAMA2_7B.params()
    # KV per token: 2 (K, V) x layers x kv_heads x head_dim x 2 bytes.
    assert LLAMA2_7B.kv_token_bytes("fp16") == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert LLAMA31_70B.kv_token_bytes("int8") == 2 * 80 * 8 * 128


# --- per-plane costs by hand ----------------------------------------------------------------------


def test_gemv_split_by_hand():
    geo = SYSTEM.flash.geometry
    # 64 rows over 32 planes: 2 rows x 4096 fp16 = 16 KB = 4 full pages per plane, read-bound:
    # tR + 3 periods of tR + the last page's transfer (1024 cycles at 4 B/cycle).
    seconds, parts_ = kvd._gemv_plane(geo, "fp16", 64, 4096, 32)
    assert (seconds, parts_) == (pytest.approx((TR + 3 * TR + 1024) / CLK), 1)
    # 8 rows over 32 planes: 4 column parts of 1024; one half page (2048 bytes: 512 cycles).
    seconds, parts_ = kvd._gemv_plane(geo, "fp16", 8, 4096, 32)
    assert (seconds, parts_) == (pytest.approx((TR + 512) / CLK), 4)


def test_gemv_on_a_group_adds_the_transfers():
    group = kvd._Group.of(SYSTEM, 16)
    assert (group.planes, group.channels, group.per_channel) == (512, 8, 2)
    plane, c = kvd._gemv_plane(group.geometry, "fp16", 4096, 4096, 512)
    # x: 8 KB to each of 2 dies per channel at 4.8 GB/s (3.4 us) hides under tR (4 us);
    # outputs: 4096 fp32 words over 8 channels.
    assert kvd._gemv(SYSTEM, group, 4096, 4096) == pytest.approx(
        plane + 4096 * c * 4 / (8 * 4.8e9))
    big = kvd._Group.of(SYSTEM, 16)
    x = 2 * 16384 * 2 / 4.8e9                     # 32 KB input, longer than tR
    assert kvd._gemv(SYSTEM, big, 4096, 16384) == pytest.approx(
        x - TR / CLK + kvd._gemv_plane(big.geometry, "fp16", 4096, 16384, 512)[0]
        + 4096 * 4 / (8 * 4.8e9))


def test_naive_layer_read_by_hand():
    # 2 layers x 2 heads, d = 128 fp16: T_p = 16, S = 8. Layer 0's K entries of token t are
    # entries 8t and 8t + 1, page t // 2: 4 tokens -> 2 pages of 4 entries (1 KB, 256 cycles).
    layout = KVLayout(2, 2, 128, mapping="naive")
    assert kvd._naive_layer_read(SYSTEM.flash.geometry, layout, 4, 1) == pytest.approx(
        (TR + TR + 256) / CLK)


def test_attention_plane_matches_the_golden_schedule():
    geo = SYSTEM.flash.geometry
    layout = LLAMA2_7B.kv_layout()
    # One head group on one plane: exactly attention_timing.
    t = attention_timing(geo, layout, 1000, op="logit", group=1)
    assert kvd._attention_plane(geo, layout, 1000, "logit", 1, 1, 1, 16) == pytest.approx(
        t.total / CLK)
    # 32 head groups on 512 planes: 16 planes per group, 63 pages -> 4 per plane, read-bound.
    assert kvd._attention_plane(geo, layout, 1000, "logit", 1, 32, 512, 16) == pytest.approx(
        (TR + 3 * TR + 16 * 256 // 4) / CLK)
    # Pages holding 8 tokens instead of 16: twice the pages (page-level mapping, no partial
    # programs), each streaming 8 entries (512 cycles).
    assert kvd._attention_plane(geo, layout, 1024, "logit", 1, 1, 1, 8) == pytest.approx(
        (TR + 127 * TR + 512) / CLK)


def test_kv_buffer_fill():
    layout = LLAMA2_7B.kv_layout()
    # KVNAND-C-16: 512 planes x 8 KB = 4 MiB over 512 KiB per token: 8 tokens per flush.
    assert kvd._fill(SYSTEM, LLAMA2_7B, layout, kvd._kv_buffer(SYSTEM, "compact")) == (8, 8)
    # KVNAND-D: 5 MiB SoC buffer: 10 tokens; LLaMA3.1-8B (128 KiB per token) fills whole pages.
    assert kvd._fill(SYSTEM, LLAMA2_7B, layout, kvd._kv_buffer(SYSTEM, "discrete")) == (10, 10)
    assert kvd._fill(SYSTEM, LLAMA31_8B, LLAMA31_8B.kv_layout(), 5 << 20) == (16, 16)
    # Two partial programs per page: pages fill to T_p.
    two = System(partial_programs=2)
    assert kvd._fill(two, LLAMA2_7B, layout, kvd._kv_buffer(two, "compact")) == (8, 16)
    assert kvd._fill(SYSTEM, LLAMA2_7B, layout.with_mapping("naive"), 4096) == (16, 16)


# --- designs --------------------------------------------------------------------------------------


def test_base1_attention_by_hand():
    t = 4096
    lat = decode_latency(SYSTEM, LLAMA31_8B, t, "base1")
    b = t * 8 * 128 * 2                                  # one layer's K bytes
    read = max(b / (8 * 8e9), 2 * 32 * 128 * t / 32e12)
    softmax = 5 * 32 * t / 32e12
    assert parts(lat)["attention"] == pytest.approx(32 * (2 * read + softmax))
    assert parts(lat)["kv_write"] == pytest.approx(32 * 2 * 8 * 128 * 2 / (8 * 8e9))


def test_hg_pipeline_formula():
    g1, t = 12, 10240
    kvg, w = kvd._Group.of(SYSTEM, 16 - g1), kvd._Group.of(SYSTEM, g1)
    layout = LLAMA31_8B.kv_layout()
    m = 4                                       # 8 KV heads in 4 batches of 2 head groups
    a = kvd._gemv(SYSTEM, w, 2 * 6 * 128, 4096, x_in=False)
    b = kvd._attention_ifc(SYSTEM, LLAMA31_8B, kvg, layout, t, 2, 16)
    x_in = max(0.0, w.broadcast(4096 * 2) - TR / CLK)
    lat = decode_latency(SYSTEM, LLAMA31_8B, t, "discrete", g1=g1, hg_stages=m)
    layer = x_in + a + (m - 1) * max(a, b) + b
    assert lat.hg_stages == m
    assert parts(lat)["weights"] + parts(lat)["attention"] == pytest.approx(
        32 * (layer + kvd._common(SYSTEM, LLAMA31_8B, w)[0]))
    # No HG parallelism: all QKV, then all attention; the chosen depth is never slower.
    off = decode_latency(SYSTEM, LLAMA31_8B, t, "discrete", g1=g1, hg_stages=1)
    best = decode_latency(SYSTEM, LLAMA31_8B, t, "discrete", g1=g1)
    assert best.seconds <= min(off.seconds, lat.seconds)
    assert best.seconds < off.seconds                    # overlap pays at 10K


def test_oom_boundaries():
    # Base-1: 8 x 16 Gb = 2**34 bytes of DRAM over 512 KiB per token: 32768 tokens.
    assert footprint(SYSTEM, LLAMA2_7B, 32768, "base1")[0]
    fits, memory, need, have = footprint(SYSTEM, LLAMA2_7B, 32769, "base1")
    assert (fits, memory, have) == (False, "DRAM", 2**34)
    assert math.isnan(decode_latency(SYSTEM, LLAMA2_7B, 32769, "base1").seconds)
    assert decode_latency(SYSTEM, LLAMA2_7B, 32769, "base1").oom
    # KVNAND-D-(15+1), LLaMA2-7B: pages of 10 tokens x 2048 streams; one die holds 2124 rounds.
    assert footprint(SYSTEM, LLAMA2_7B, 21240, "discrete", g1=15)[0]
    assert footprint(SYSTEM, LLAMA2_7B, 21241, "discrete", g1=15)[:2] == (False, "G2 dies")
    # LLaMA3.1-70B fp16 (141 GB) needs 8 of the 17.8 GB dies.
    assert footprint(SYSTEM, LLAMA31_70B, 128, "discrete", g1=7)[:2] == (False, "G1 dies")
    assert footprint(SYSTEM, LLAMA31_70B, 128, "discrete", g1=8)[0]
    assert footprint(SYSTEM, LLAMA31_70B, 128, "base1")[0]
    assert kv.best_split(SYSTEM, LLAMA31_70B, 128).design.startswith("KVNAND-D-(1")


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_latency_grows_with_context(model):
    contexts = (128, 1024, 4096, 10240, 51200)
    for design in kv.DESIGNS:
        g1 = 12 if design == "discrete" else None
        found = [decode_latency(SYSTEM, model, t, design, g1=g1).seconds for t in contexts]
        found = [s for s in found if math.isfinite(s)]
        assert len(found) >= 3 and all(np.diff(found) > 0), (design, found)


def test_dies_trade_weights_against_attention():
    # More G2 dies: less attention; more G1 dies: faster weight GEMVs.
    att = [parts(decode_latency(SYSTEM, LLAMA2_7B, 10240, "discrete", g1=g,
                                hg_stages=1))["attention"] for g in (12, 8, 4)]
    wts = [parts(decode_latency(SYSTEM, LLAMA2_7B, 10240, "discrete", g1=g))["weights"]
           for g in (4, 8, 12)]
    assert att[0] > att[1] > att[2] and wts[0] > wts[1] > wts[2]


def test_short_context_speedup_is_the_die_ratio():
    # At 128 tokens the token is weight GEMVs: 16 IFC dies against Base-1's 8.
    for m in MODELS:
        ratio = (decode_latency(SYSTEM, m, 128, "base1").seconds
                 / decode_latency(SYSTEM, m, 128, "compact").seconds)
        assert 1.8 < ratio < 2.05, (m.name, ratio)


def test_page_level_mapping_and_buffers_cut_attention():
    page = decode_latency(SYSTEM, LLAMA2_7B, 10240, "compact")
    naive = decode_latency(SYSTEM, LLAMA2_7B, 10240, "compact", mapping="naive")
    assert parts(naive)["attention"] > 4 * parts(page)["attention"]
    two = decode_latency(System(partial_programs=2), LLAMA2_7B, 10240, "compact")
    assert parts(two)["attention"] < parts(page)["attention"]


def test_base2_is_slower_than_base1_and_kvnand_beats_both_at_long_context():
    for m in MODELS:
        b1, b2 = (decode_latency(SYSTEM, m, 10240, d).seconds for d in ("base1", "base2"))
        assert b2 > b1
        assert kv.best_split(SYSTEM, m, 10240).seconds < b1


def test_evaluate_runs_the_ablations():
    o = kv.evaluate(Point(SYSTEM, LLAMA31_8B, 1024, "discrete", 14))
    assert o.no_hg.seconds >= o.latency.seconds and o.naive is None
    o = kv.evaluate(Point(SYSTEM, LLAMA31_8B, 1024, "compact"))
    assert o.naive.seconds > o.latency.seconds and o.no_hg is None
    o = kv.evaluate(Point(SYSTEM, LLAMA31_70B, 128, "discrete", 2))
    assert o.latency.oom and o.no_hg is None


def test_page_period_is_the_pe_period():
    t = gemv_timing(SYSTEM.flash.geometry, "fp16", 1024, 4096)
    table, us = kvr._page_period_table(SYSTEM)
    assert us == t.period / CLK * 1e6 == 4.0
    assert "w4a16 | 2 |" in table


# --- parameter messages ---------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, message", [
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 128, "hybrid"), ValueError,
     "Design must be base1, base2, compact or discrete, not 'hybrid'"),
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 0, "compact"), ValueError,
     "Context length must be between 1 and 16777216, not 0"),
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 1.5, "compact"), TypeError,
     "Context length must be an integer between 1 and 16777216, not 1.5"),
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 128, "discrete", g1=16), ValueError,
     "G1 die count g1 must be between 1 and 15, not 16"),
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 128, "discrete"), TypeError,
     "G1 die count g1 must be an integer between 1 and 15, not None"),
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 128, "compact", g1=4), ValueError,
     "G1 die count g1 applies to the discrete design only, not compact"),
    (lambda: decode_latency(SYSTEM, LLAMA31_8B, 128, "discrete", g1=4, hg_stages=3),
     ValueError, "HG pipeline stages must divide the KV head count 8, not 3"),
    (lambda: decode_latency(SYSTEM, LLAMA31_8B, 128, "compact", hg_stages=2), ValueError,
     "HG pipeline stages apply to the discrete design only, not compact"),
    (lambda: decode_latency(SYSTEM, LLAMA2_7B, 128, "compact", mapping="random"), ValueError,
     "KV mapping must be page or naive, not 'random'"),
    (lambda: decode_latency("16 dies", LLAMA2_7B, 128, "compact"), TypeError,
     "System must be a System, not str"),
    (lambda: decode_latency(System(dies_per_channel=1), LLAMA2_7B, 128, "base1"), ValueError,
     "The baselines need at least 2 dies per channel (one IFC die and one DRAM or plain NAND "
     "die), not 1"),
    (lambda: System(mode="int4"), ValueError,
     "Precision mode must be fp16, bf16, w8a8 or w4a16, not 'int4'"),
    (lambda: System(channels=0), ValueError, "Channel count must be between 1 and 64, not 0"),
    (lambda: System(baseline_fmacs=3), ValueError,
     "FMAC count must be a power of two between 1 and 16, not 3"),
    (lambda: System(partial_programs=0), ValueError,
     "Partial programs per page must be between 1 and 16, not 0"),
    (lambda: Flash(planes=0), ValueError, "Planes per die must be between 1 and 1024, not 0"),
    (lambda: Flash(channel_gbs="fast"), TypeError,
     "Channel bandwidth channel_gbs must be a positive number of GB/s, not 'fast'"),
    (lambda: NPU(tops=-1), ValueError,
     "NPU throughput tops must be a positive number of TOPS, not -1"),
    (lambda: Model("x", layers=32, d_model=4096, heads=32, kv_heads=6, head_dim=128, ffn=11008,
                   vocab=32000), ValueError,
     "Query head count must be a multiple of the KV head count 6, not 32"),
    (lambda: Model("x", layers=32, d_model=4096, heads=32, head_dim=128, ffn=11008), TypeError,
     "Model x needs vocab, not None"),
    (lambda: kv.evaluate((SYSTEM, LLAMA2_7B, 128, "compact")), TypeError,
     "Point must be a Point, not tuple"),
])
def test_parameter_messages(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


# --- the reproduction -----------------------------------------------------------------------------


def test_reproduce_quick(tmp_path):
    res = kv.reproduce(Context(tmp_path, quick=True, progress=lambda _: None))
    figures = {r.figure: r for r in res.rows}
    for t in ("128", "1K", "10K"):
        row = figures[f"geomean speedup, fastest KVNAND / Base-1, {t} tokens"]
        assert row.paper == kv.PAPER_GEOMEAN[{"128": 128, "1K": 1024, "10K": 10240}[t]]
        assert 1.2 < row.ours < 5.0
    numeric = [r.ours for r in res.rows if isinstance(r.ours, float)]
    assert len(numeric) >= 12 and all(math.isfinite(v) for v in numeric)
    assert figures["best split, LLaMA3.1-8B, 1K tokens"].ours == "15+1"
    assert "LLaMA2-7B" in figures["Base-1 out of memory at 100K tokens"].ours
    for name in ("LLaMA2-7B", "LLaMA3.1-8B", "LLaMA3.1-70B"):
        assert 1.0 < figures[f"KVNAND-D / Base-2 at 100K tokens, {name}"].ours < 20
    headings = [h for h, _ in res.tables]
    assert any(h.startswith("Decode latency per token") for h in headings)
    assert any(h.startswith("Best G1/G2 split") for h in headings)
    latency = dict(res.tables)["Decode latency per token (ms), 8 channels x 2 dies"]
    assert "| LLaMA2-7B | 100K | OOM |" in latency
    assert {p.name for p in res.plots} >= {"latency_vs_context.png", "best_split.png"}
    for plot in res.plots:
        data = plot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert res.notes
