"""The rDXE ring model (sim/rdxe/): layer costs from the golden cycle model, the line recurrence
on hand-computed cases, the padded baseline's accounting, parameter checks and the reproduction."""

import math

import numpy as np
import pytest

from golden.rdxe import DxtConfig, gemv_cycles, qk_cycles, rmsnorm_gemv_cycles, \
    softmax_pv_cycles
from sim import rdxe
from sim.rdxe import MT5_SMALL, OPT_350M, Decoder, Point, Request, Ring
from sim.reproduce import Context

P = DxtConfig()
NO_LINKS = dict(link_mbps=None)


def layer(model, T, batch=1):
    return rdxe.token_layer_cycles(model, T, P, batch=batch)["total"]


# --- layer costs ----------------------------------------------------------------------------------


def test_gemv_cost_by_hand():
    # MT5 projection: 64 outputs per DXT (512 / 8), 384 inputs: C = 24 chunks, 4 passes of 16 VACs.
    # Last accumulator a = 3*24 + 23 + 15 + dot(16 lanes) 5 + 1 = 116; total = a + PPU 8 + 1.
    assert rdxe.layer_cycles(MT5_SMALL, "proj", 1) == 3 * 24 + 23 + 15 + 5 + 1 + 8 + 1 == 125


@pytest.mark.parametrize("model, op, T, batch, expected", [
    # One head per DXT for MT5 (6 heads on 8 DXTs): Q, K and V of one head, fused RMSNorm.
    (MT5_SMALL, "qkv", 7, 1, lambda: rmsnorm_gemv_cycles(192, 512, P).total),
    # Two heads per DXT for OPT-350M (16 on 8).
    (OPT_350M, "qkv", 7, 1, lambda: rmsnorm_gemv_cycles(384, 1024, P).total),
    (OPT_350M, "qk", 100, 1, lambda: 2 * qk_cycles(100, P).total),
    (MT5_SMALL, "pv", 300, 3, lambda: 3 * softmax_pv_cycles(300, P, mode="fused").total),
    # A batch of 8 is one GEMV of 8 x 64 outputs.
    (MT5_SMALL, "proj", 1, 8, lambda: gemv_cycles(512, 384, P).total),
    # Gated FFN: 2 x 1024 up outputs over 8 DXTs; OPT: 4096 over 8.
    (MT5_SMALL, "ffn_up", 1, 1, lambda: rmsnorm_gemv_cycles(256, 512, P).total),
    (OPT_350M, "ffn_up", 1, 1, lambda: rmsnorm_gemv_cycles(512, 1024, P).total),
    (OPT_350M, "ffn_down", 1, 2, lambda: gemv_cycles(256, 4096, P).total),
])
def test_layer_cycles_map_heads_and_channels_onto_dxts(model, op, T, batch, expected):
    assert rdxe.layer_cycles(model, op, T, P, batch=batch) == expected()


def test_layer_costs_are_those_of_the_paper_dxt_rtl():
    """The ring's default DXT is the registry's paper DXT, and the cycle model's latencies are
    that RTL's: the golden cycle model equals the DXT RTL's cycles exactly
    (tests/test_rdxe_dxt.py::test_cycles_match_the_model), so the layer costs are the RTL's."""
    from hdl.rdxe import Dxt
    from memwall import registry

    from golden.rdxe import Latency

    paper = registry.get("rdxe-dxt").parameters("paper")
    for name in ("lanes", "vacs", "head_dim", "mult_bits", "clamp", "rc_bits", "norm_frac",
                 "prob_frac"):
        assert getattr(P, name) == getattr(paper, name), name
    assert Latency.of(P) == Latency.of(paper)
    assert Latency.of(paper).row == Dxt(paper).row_latency


def test_busiest_dxt_sets_the_time():
    # 12 heads on 8 DXTs: four DXTs hold two heads, and the DXE waits for them.
    wide = Decoder("12 heads", layers=2, d_model=768, heads=12, head_dim=64, ffn=3072)
    assert rdxe.layer_cycles(wide, "qk", 50) == 2 * qk_cycles(50, P).total
    assert rdxe.layer_cycles(wide, "qkv", 1) == rmsnorm_gemv_cycles(2 * 192, 768, P).total
    assert rdxe.layer_cycles(wide, "qk", 50, dxts=12) == qk_cycles(50, P).total


def test_layer_macs_by_hand():
    # MT5: 3*384*512 + 2*384*T + 512*384 + 2*1024*512 + 512*1024.
    T = 10
    total = sum(rdxe.layer_macs(MT5_SMALL, op, T) for op in rdxe.OPS)
    assert total == 3 * 384 * 512 + 2 * 384 * T + 512 * 384 + 2 * 1024 * 512 + 512 * 1024
    assert rdxe.layer_macs(OPT_350M, "ffn_up", 1) == 4096 * 1024


def test_only_attention_grows_with_context():
    for model in (MT5_SMALL, OPT_350M):
        prev = {op: 0 for op in rdxe.OPS}
        for T in (1, 2, 15, 16, 17, 64, 200, 511, 1024):
            for op in rdxe.OPS:
                c = rdxe.layer_cycles(model, op, T)
                if op in rdxe.CONTEXT_OPS:
                    assert c >= prev[op]
                else:
                    assert c == rdxe.layer_cycles(model, op, 1)
                prev[op] = c
        assert rdxe.layer_cycles(model, "qk", 1024) > rdxe.layer_cycles(model, "qk", 64)


def test_batching_amortizes_but_never_beats_linear_work():
    # A batch of 8 costs at most 8 single tokens and at least 8 x the MAC-bound time.
    for T in (1, 100):
        one, eight = layer(MT5_SMALL, T), layer(MT5_SMALL, T, batch=8)
        macs = sum(rdxe.layer_macs(MT5_SMALL, op, T) for op in rdxe.OPS)
        assert 8 * macs / 2048 <= eight <= 8 * one


def test_split_layers():
    assert rdxe.split_layers(8, 4) == (2, 2, 2, 2)
    assert rdxe.split_layers(8, 3) == (3, 3, 2)
    assert rdxe.split_layers(24, 8) == (3,) * 8


def test_link_cycles_and_capacity():
    # 512 bytes = 4096 bits at 800 Mb/s = 5.12 us = 1024 cycles at 200 MHz.
    assert Ring().link_cycles == 1024
    assert Ring(f_mhz=12.5).link_cycles == 64
    assert Ring(**NO_LINKS).link_cycles == 0
    # Golden KV cache: 1024 tokens per DXT; 1 head x 2 layers per DXT at 4 DXEs.
    assert Ring().kv_tokens == 512
    assert Ring(OPT_350M, stages=8, slots=8).kv_tokens == 1024 // 6


# --- the line: hand-computed schedules ------------------------------------------------------------


def test_one_dxe_runs_tokens_back_to_back():
    res = rdxe.simulate_rdxe([Request(3, 1)], Ring(stages=1, slots=1, **NO_LINKS))
    assert res.makespan == sum(8 * layer(MT5_SMALL, T) for T in (1, 2, 3))
    assert res.busy_utilization == pytest.approx(1.0)


def test_prompt_tokens_pipeline_through_two_dxes():
    # c_T per DXE (4 layers each), c1 <= c2 <= c3. Token 1: [0, c1], [c1, 2c1]; token 2:
    # [c1, c1+c2], [c1+c2, c1+2c2]; token 3: [c1+c2, c1+c2+c3], [c1+c2+c3, c1+c2+2c3].
    c1, c2, c3 = (4 * layer(MT5_SMALL, T) for T in (1, 2, 3))
    res = rdxe.simulate_rdxe([Request(3, 1)], Ring(stages=2, slots=1, **NO_LINKS), record=True)
    assert res.makespan == c1 + c2 + 2 * c3
    second = [(s, f) for srv, s, f, _ in res.intervals if srv == 1]
    assert second == [(c1, 2 * c1), (c1 + c2, c1 + 2 * c2), (c1 + c2 + c3, c1 + c2 + 2 * c3)]


def test_generated_tokens_wait_for_the_ring():
    # One prompt token, three generated: each pass waits for the previous to leave DXE 1.
    c = [4 * layer(MT5_SMALL, T) for T in (1, 2, 3)]
    res = rdxe.simulate_rdxe([Request(1, 3)], Ring(stages=2, slots=1, **NO_LINKS))
    assert res.makespan == 2 * sum(c)
    assert res.inter_token[0] == pytest.approx(2 * (c[1] + c[2]) / 2)


def test_link_prefetches_exactly_one_token():
    # link_in then DXE 0 (all 8 layers). The link moves token 2 while the DXE computes token 1,
    # then holds it (blocking after service); it starts token 3 only when token 2 enters the DXE.
    ring = Ring(stages=1, slots=1)
    l = ring.link_cycles
    c1, c2, c3 = (8 * layer(MT5_SMALL, T) for T in (1, 2, 3))
    res = rdxe.simulate_rdxe([Request(3, 1)], ring, record=True)
    link = [s for srv, s, _, _ in res.intervals if srv == 0]
    assert link == [0, l, l + c1]
    assert res.makespan == l + c1 + c2 + c3
    # A one-token buffer lets the link run ahead once more.
    res = rdxe.simulate_rdxe([Request(3, 1)], Ring(stages=1, slots=1, buffer=1), record=True)
    assert [s for srv, s, _, _ in res.intervals if srv == 0] == [0, l, 2 * l]


def test_decode_round_trip_includes_the_link():
    ring = Ring(stages=1, slots=1)
    l = ring.link_cycles
    c1, c2 = (8 * layer(MT5_SMALL, T) for T in (1, 2))
    res = rdxe.simulate_rdxe([Request(1, 2)], ring)
    assert res.makespan == 2 * l + c1 + c2


def test_a_freed_slot_admits_the_next_request():
    reqs = [Request(2, 1), Request(1, 1)]
    c1, c2 = (8 * layer(MT5_SMALL, T) for T in (1, 2))
    res = rdxe.simulate_rdxe(reqs, Ring(stages=1, slots=1, **NO_LINKS))
    assert res.admitted.tolist() == [0, c1 + c2]
    assert res.finished.tolist() == [c1 + c2, 2 * c1 + c2]


def test_padded_batch_by_hand():
    # Batch of 2: prompts 2 and 1 (P = 2), generations 1 and 2 (G = 2): 3 steps at contexts
    # 1, 2, 3. Real slots: step 0 request 0 only (request 1 is left-padded), step 1 both, step 2
    # (decode) request 1 only.
    reqs = [Request(2, 1), Request(1, 2)]
    res = rdxe.simulate_batched(reqs, Ring(stages=1, slots=1, **NO_LINKS), batch=2)
    c = [8 * layer(MT5_SMALL, T, batch=2) for T in (1, 2, 3)]
    assert res.makespan == sum(c)
    assert res.useful.sum() == pytest.approx(0.5 * c[0] + c[1] + 0.5 * c[2])
    assert res.busy.sum() == sum(c)
    m = [8 * sum(rdxe.layer_macs(MT5_SMALL, op, T) for op in rdxe.OPS) for T in (1, 2)]
    assert res.useful_macs == 2 * (m[0] + m[1])
    assert res.finished.tolist() == [c[0] + c[1], sum(c)]
    assert res.kv_peak == 2 * 3


def test_a_short_batch_computes_its_empty_slots():
    # Three requests in a 4-way batch: the fourth slot is padding at every step.
    reqs = [Request(2, 2)] * 3
    res = rdxe.simulate_batched(reqs, Ring(stages=1, slots=1, **NO_LINKS), batch=4)
    assert res.useful.sum() == pytest.approx(0.75 * res.busy.sum())


def test_both_systems_do_the_same_useful_work():
    reqs = rdxe.workload(20, 3)
    ring = Ring(stages=2, slots=2)
    a = rdxe.simulate_rdxe(reqs, ring)
    b = rdxe.simulate_batched(reqs, ring, 8)
    assert a.useful_macs == b.useful_macs
    # So the ratio of MAC utilizations is the inverse ratio of makespans.
    assert a.mac_utilization / b.mac_utilization == pytest.approx(b.makespan / a.makespan)
    # rDXE computes no padding; the batch does.
    assert a.useful.sum() == a.busy.sum()
    assert b.useful.sum() < b.busy.sum()
    tokens = sum(r.passes for r in reqs)
    assert a.busy.sum() == sum(
        MT5_SMALL.layers * layer(MT5_SMALL, T) for r in reqs for T in range(1, r.passes + 1))
    assert tokens > 0


def test_utilization_bounds_and_orderings():
    reqs = rdxe.workload(32, 5)
    ring = Ring()
    a = rdxe.simulate_rdxe(reqs, ring)
    for res in (a, rdxe.simulate_batched(reqs, ring, 8), rdxe.simulate_batched(reqs, ring, 16)):
        assert 0 < res.mac_utilization <= res.useful_utilization <= res.busy_utilization <= 1
        assert np.all(res.finished > res.admitted)
        assert res.finished.max() <= res.makespan
    # More resident requests fill the ring's bubbles: one request at a time is far worse.
    one = rdxe.simulate_rdxe(reqs, Ring(slots=1))
    assert one.useful_utilization < 0.5 * a.useful_utilization


def test_padding_costs_more_for_wider_batches():
    # With spread lengths, a 16-way batch pads more than an 8-way one; with equal lengths the
    # baseline computes no padding at all.
    reqs = rdxe.workload(64, 1)
    b8 = rdxe.simulate_batched(reqs, Ring(), 8)
    b16 = rdxe.simulate_batched(reqs, Ring(), 16)
    assert b16.useful.sum() / b16.busy.sum() < b8.useful.sum() / b8.busy.sum() < 0.9
    same = rdxe.workload(16, 1, "equal")
    eq = rdxe.simulate_batched(same, Ring(), 8)
    assert eq.useful.sum() == pytest.approx(eq.busy.sum())


def test_workload_is_seeded_and_in_range():
    a, b = rdxe.workload(50, 9), rdxe.workload(50, 9)
    assert a == b and a != rdxe.workload(50, 10)
    assert all(16 <= r.prompt <= 256 and 16 <= r.generate <= 256 for r in a)
    log = rdxe.workload(200, 0, "loguniform")
    assert all(8 <= r.prompt <= 512 for r in log)
    assert {(r.prompt, r.generate) for r in rdxe.workload(5, 0, "equal")} == {(136, 136)}


# --- checks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, message", [
    (lambda: rdxe.layer_cycles(MT5_SMALL, "attn", 1), ValueError,
     "Operation must be one of 'qkv', 'qk', 'pv', 'proj', 'ffn_up', 'ffn_down', not 'attn'"),
    (lambda: rdxe.layer_cycles(MT5_SMALL, "qk", 0), ValueError,
     "Context length must be between 1 and 65536, not 0"),
    (lambda: rdxe.layer_cycles(MT5_SMALL, "qk", 2.0), TypeError,
     "Context length must be an integer between 1 and 65536, not 2.0"),
    (lambda: rdxe.layer_cycles("mt5", "qk", 1), TypeError, "Model must be a Decoder, not str"),
    (lambda: rdxe.layer_cycles(MT5_SMALL, "qk", 1, DxtConfig(head_dim=32)), ValueError,
     "The DXT's head dimension must equal the model's (64), not 32"),
    (lambda: rdxe.layer_cycles(MT5_SMALL, "qk", 1, batch=0), ValueError,
     "Batch size must be between 1 and 1024, not 0"),
    (lambda: Decoder("x", layers=0, d_model=512, heads=6, head_dim=64, ffn=1024), ValueError,
     "Layer count must be between 1 and 1024, not 0"),
    (lambda: Decoder("x", layers=8, d_model=512, heads=6, head_dim=64, ffn=1024, gated=1),
     TypeError, "Gated must be True or False, not 1"),
    (lambda: Decoder("x", layers=8, d_model=512, heads=6, head_dim=64), TypeError,
     "Decoder x needs ffn, not None"),
    (lambda: Decoder("x", layers=8, d_model=512, heads=6, kv_heads=2, head_dim=64, ffn=1024),
     ValueError, "A Decoder's KV head count must equal its head count 6, not 2"),
    (lambda: Ring(stages=9), ValueError, "Ring size must be between 1 and 8, not 9"),
    (lambda: Ring(slots=0), ValueError,
     "Resident request count must be between 1 and 4096, not 0"),
    (lambda: Ring(f_mhz=0), ValueError,
     "Clock frequency (MHz) must be above 0 and at most 10000, not 0"),
    (lambda: Ring(link_mbps="fast"), TypeError,
     "Link bandwidth (Mb/s) must be a number above 0 and at most 1e+06, not 'fast'"),
    (lambda: Ring(buffer=-1), ValueError, "Buffer depth must be between 0 and 64, not -1"),
    (lambda: Request(0, 5), ValueError, "Prompt length must be between 1 and 32768, not 0"),
    (lambda: rdxe.workload(4, 0, "zipf"), ValueError,
     "Distribution must be one of 'uniform', 'loguniform', 'equal', not 'zipf'"),
    (lambda: rdxe.simulate_rdxe([], Ring()), ValueError,
     "Requests must be a non-empty sequence of Request, not an empty one"),
    (lambda: rdxe.simulate_rdxe([(3, 4)], Ring()), TypeError,
     "Requests must be a non-empty sequence of Request, not a sequence holding tuple"),
    (lambda: rdxe.simulate_batched([Request(3, 4)], Ring(), 0), ValueError,
     "Batch size must be between 1 and 1024, not 0"),
    (lambda: rdxe.simulate_rdxe([Request(3, 4)], "ring"), TypeError,
     "Ring must be a Ring, not str"),
    (lambda: Point(Ring(), "orca", 1, 0, 4), ValueError,
     "System must be 'rdxe' or 'batch', not 'orca'"),
    (lambda: Point(Ring(), "rdxe", 8, 0, 4), ValueError,
     "Batch size of the rdxe system must be 1, not 8"),
])
def test_messages(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message


# --- the reproduction -----------------------------------------------------------------------------


def test_run_point_is_picklable_and_sane():
    import pickle
    point = Point(Ring(), "batch", 8, 0, 16)
    out = rdxe.run_point(pickle.loads(pickle.dumps(point)))
    assert 0 < out["mac"] <= out["useful"] <= out["busy"] <= 1
    assert len(out["latency"]) == 16 and out["throughput"] > 0


def test_reproduce_quick(tmp_path):
    result = rdxe.reproduce(Context(tmp_path, quick=True, progress=lambda m: None))
    figures = {r.figure: r for r in result.rows}
    util = figures["rDXE utilization, MAC (Sec. II)"]
    assert util.paper == rdxe.PAPER_UTILIZATION
    assert 30 < util.ours < 100
    g8 = figures["gain over the 8-way batch (Sec. III-A)"]
    g16 = figures["gain over the 16-way batch (Sec. III-A)"]
    assert (g8.paper, g16.paper) == (rdxe.PAPER_GAIN_8WAY, rdxe.PAPER_GAIN_16WAY)
    for row in result.rows:
        assert math.isfinite(row.ours)
    # Token-level pipelining beats padded batches on spread lengths, the wider batch more.
    assert 0 < g8.ours < g16.ours
    assert len(result.plots) >= 3
    for plot in result.plots:
        data = plot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert result.tables and result.notes
    assert any("golden/rdxe.py" in n for n in result.notes)


def test_vector_cycle_table_has_a_row_for_each_width():
    """``python -m sim.rdxe``'s table: a row for every lane count at vector units of all its
    lanes and of half, each the sum of :func:`sim.rdxe.host.vector_cycles` (a session-26 edit
    had dropped the all-lanes rows)."""
    from sim.rdxe.host import vector_cycle_table, vector_cycles
    rows = [line.split() for line in vector_cycle_table().splitlines()[1:]]
    pairs = [(lanes, vector) for lanes in (4, 8, 16) for vector in (lanes, lanes // 2)]
    assert [(int(a), int(b)) for a, b, _ in rows] == pairs
    assert all(int(c.replace(",", "")) == sum(vector_cycles(a, b).values())
               for (a, b), (_, _, c) in zip(pairs, rows))
