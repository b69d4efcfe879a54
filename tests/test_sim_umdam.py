"""The UMDAM system model (sim/umdam/): LPDDR5 timing, layouts per mapping, TTFT and TTLT.

Timing cases are worked out by hand from the constraints the module states (Table I values:
nRCD 15, nCL 20, nBL 4, nCCD 4, nRAS 34, nRPpb 15, nRC 30; Ramulator 2's nRTP 4, nCWL 11,
nWTR 10, nRRD 4). Addresses are placed with the UMDAM mapping on LPDDR5: offset [4:0],
colL [7:5], channel [9:8], bank [13:10], colM [16:14], row [32:17].
"""

import math

import numpy as np
import pytest

import golden.umdam as golden
from hdl.umdam import AddressMapping, DramGeometry
from sim import umdam as model
from sim.umdam.report import MAPPINGS
from sim.reproduce import Context

G = DramGeometry.lpddr5()
UMDAM = AddressMapping("umdam", G)
T = model.Lpddr5Timing()
BANK = 1 << 10          # next bank, same channel, same row
CHANNEL = 1 << 8        # next channel
ROW = 1 << 17           # next row, same bank


def run(addresses, writes=None, **kw):
    return model.simulate_stream(UMDAM, np.array(addresses, np.uint64),
                                 writes=None if writes is None else np.array(writes), **kw)


# --------------------------------------------------------------------------------------------------
# Timing, by hand


def test_closed_bank_read_is_rcd_cl_bl():
    s = run([0])
    assert s.cycles == T.nRCD + T.nCL + T.nBL == 39
    assert (s.hits, s.empties, s.conflicts) == (0, 1, 0)
    assert s.seconds == pytest.approx(39 * 1.25e-9)


def test_row_hit_follows_after_ccd():
    s = run([0, 32])
    assert s.cycles == 15 + 4 + 20 + 4
    assert (s.hits, s.empties) == (1, 1)


def test_row_conflict_waits_for_ras_and_rp():
    # RD1 at 15; PRE at max(ACT + nRAS, RD1 + nRTP) = max(34, 19) = 34;
    # ACT at max(PRE + nRPpb, ACT + nRC) = max(49, 30) = 49; RD2 at 64; data ends at 88.
    s = run([0, ROW])
    assert s.cycles == 88
    assert s.conflicts == 1


def test_second_bank_overlaps_after_rrd():
    # ACT0 at 0, ACT1 at nRRD = 4, RD0 at 15, RD1 at max(4 + 15, 15 + 4) = 19, end 43.
    assert run([0, BANK]).cycles == 43
    # Another channel has its own bus and command queue: both reads at 15.
    s = run([0, CHANNEL])
    assert s.cycles == 39 and s.units == 2


def test_read_write_turnarounds():
    # WR at 15, RD >= 15 + nCWL + nBL + nWTR = 40, end 40 + 24 = 64.
    assert run([0, 32], [True, False]).cycles == 64
    # RD at 15, WR >= 15 + nCL + nBL + 2 - nCWL = 30, write data ends 30 + 11 + 4 = 45.
    assert run([0, 32], [False, True]).cycles == 45


def test_faw_limits_the_fifth_activate():
    t = model.Lpddr5Timing(nFAW=40)
    # ACTs at 0, 4, 8, 12 and 40 (four in any 40 cycles); RDs at 15, 19, 23, 27 and 55.
    s = run([k * BANK for k in range(5)], timing=t)
    assert s.cycles == 55 + 24


def test_queue_depth_bounds_the_look_ahead():
    # Queue 1: the second request enters when the first issues RD (15): ACT 15, RD 30, end 54.
    assert run([0, BANK], queue=1).cycles == 54
    assert run([0, BANK], queue=32).cycles == 43


def test_full_row_stream_is_one_burst_per_ccd():
    # 64 bursts of one row of bank 0, channel 0 (colM << 14 | colL << 5): RD at 15 + 4 k.
    s = run([(k // 8) * (1 << 14) + (k % 8) * 32 for k in range(64)])
    assert s.cycles == 15 + 63 * 4 + 24
    assert s.hits == 63
    assert s.gbps == pytest.approx(64 * 32 / (291 * 1.25e-9) / 1e9)


def test_pim_banks_run_side_by_side_and_change_rows():
    one_row = [(k // 8) * (1 << 14) + (k % 8) * 32 for k in range(64)]
    # Two bank units, one access each: no shared bus, both end at 39.
    assert model.simulate_pim(UMDAM, np.array([0, BANK], np.uint64)).cycles == 39
    # One bank, two rows: last RD of row 0 at 267, PRE at 271, ACT at 286, RDs from 301 on.
    s = model.simulate_pim(UMDAM, np.array(one_row + [ROW + a for a in one_row], np.uint64))
    assert s.cycles == 301 + 63 * 4 + 24
    assert (s.hits, s.empties, s.conflicts, s.units) == (126, 1, 1, 1)


def test_peaks_come_from_the_timings():
    assert T.channel_peak_gbps(32) == pytest.approx(6.4)
    assert T.bank_peak_gbps(32) == pytest.approx(6.4)
    c = T.cycles()
    assert c["rd_to_wr"] == 15 and c["wr_to_rd"] == 25 and c["wr_to_pre"] == 43


def test_bursts_collapse_consecutive_elements():
    assert model.bursts(np.array([0, 2, 30, 32, 34, 0]), 32).tolist() == [0, 32, 0]


# --------------------------------------------------------------------------------------------------
# Layouts per mapping


@pytest.fixture(scope="module")
def measured():
    return {m: model.measure_layout(model.LayoutPoint(m, 256, 128, shared_tensor=True))
            for m in MAPPINGS}


def test_only_umdam_is_unified(measured):
    assert measured["umdam"].unified and measured["umdam"].relayout is None
    for m in ("rocobaracho", "robaracoch", "ianus"):
        r = measured[m]
        assert not r.unified
        n = r.bytes // 32
        assert (r.relayout.accesses, r.relayout.writes) == (2 * n, n)
        # Reading and writing every byte over the same buses takes at least two reads' time.
        assert r.relayout.cycles >= 2 * n * 4 / G.channels


def test_pim_sees_the_same_banks_under_every_mapping(measured):
    cycles = {r.pim.cycles for r in measured.values()}
    assert len(cycles) == 1
    assert measured["umdam"].shared_local == 1.0
    assert measured["rocobaracho"].shared_local == 0.0
    assert measured["ianus"].shared_pim.units == 1


def test_bandwidths_stay_below_peak_and_ianus_loses_interleaving(measured):
    for r in measured.values():
        assert 0 < r.npu_efficiency <= 1 and 0 < r.pim_efficiency <= 1
    assert measured["umdam"].npu_efficiency > 0.95
    assert measured["ianus"].npu_efficiency <= 1 / G.channels


def test_baseline_pim_layout_is_column_contiguous_per_bank():
    # Algorithm 1's coordinates are the conventional PIM layout: column j in bank unit j mod 64,
    # at bank-local byte (j // 64) * 2R + 2i. Checked through the baseline mapping.
    R, C = 256, 128
    m = AddressMapping("rocobaracho", G)
    c = golden.map_addresses(m, golden.layout_addresses(m, R, C, 2))
    i, j = np.meshgrid(np.arange(R), np.arange(C), indexing="ij")
    assert np.array_equal(c["bank"] * 4 + c["channel"], j % 64)
    local = c["row"] * 2048 + c["col"] * 32 + c["offset"]
    assert np.array_equal(local, (j // 64) * 2 * R + 2 * i)


def test_nn_order_matches_the_golden_npu_walk():
    i, j = model.nn_order(G, 256, 128, 2)
    wi, wj, addr = golden.walk(UMDAM, 256, 128, 2, order="npu")
    assert np.array_equal(i, wi) and np.array_equal(j, wj)
    assert np.array_equal(addr, np.arange(256 * 128, dtype=np.uint64) * 2)


# --------------------------------------------------------------------------------------------------
# Latency model

TINY = model.OptModel("tiny", d_model=128, head_dim=64, heads=2, layers=2, vocab=1000,
                      max_positions=64)


def test_prefill_ops_by_hand():
    ops = {o.name: o for o in model.prefill_ops(TINY, 4)}
    # qkv: 2 L d 3d FLOPs per layer; weights 3 d^2 x 2 B; activations 4 x (128 + 384) x 2 B fit.
    assert ops["qkv"].flops == 2 * 2 * 4 * 128 * 384
    assert ops["qkv"].bytes == 2 * 2 * 128 * 384
    assert ops["attention"].flops == 2 * 2 * 128 * 4 * 5
    assert ops["attention"].bytes == 2 * 2 * 2 * 4 * 128          # the K and V cache writes
    assert ops["embed"].bytes == 2 * 4 * 128 * 2
    spilled = {o.name: o for o in model.prefill_ops(TINY, 4, buffer_bytes=0)}
    assert spilled["fc1"].bytes == 2 * 2 * (128 * 512 + 4 * (128 + 512))


def test_roofline_takes_the_slower_side():
    op = model.Op("x", flops=4e12, bytes=1e9)
    assert model.op_seconds([op], 1e12, 1e9) == 4.0
    assert model.op_seconds([op], 1e13, 1e8) == 10.0


def rates(relayout=0.0):
    return model.Rates(16.0, 25.6, 512.0, 450.0, relayout)


def test_decode_sum_matches_a_step_by_step_loop():
    L, N = 5, 7
    r = rates()
    lat = model.latency(TINY, L, N, r)
    steps = sum(model.op_seconds(model.decode_ops(TINY, L + t) + [model.lm_head_op(TINY)],
                                 512e9, 450e9) for t in range(1, N))
    assert lat["decode"] == pytest.approx(steps, rel=1e-12)
    assert lat["ttlt"] == pytest.approx(lat["ttft"] + steps)
    assert lat["first"] == pytest.approx(2 * 1000 * 128 / 450e9)


def test_relayout_is_paid_once_on_the_decoder_weights():
    lat = model.latency(TINY, 4, 3, rates(1e-9))
    assert lat["relayout"] == pytest.approx(1e-9 * TINY.layer_weights * 2)
    assert TINY.layer_weights == 2 * (3 + 1 + 4 + 4) * 128 * 128
    base = model.latency(TINY, 4, 3, rates(0.0))
    assert lat["ttlt"] - base["ttlt"] == pytest.approx(lat["relayout"])


def test_speedups_fall_with_generated_tokens_and_latency_rises_with_context():
    m = model.OPT_1_3B
    base, uni = rates(2 / 25.6e9), rates()
    speed = [model.latency(m, 256, n, base)["ttlt"] / model.latency(m, 256, n, uni)["ttlt"]
             for n in (1, 4, 16, 64, 256, 1024)]
    assert all(a > b for a, b in zip(speed, speed[1:]))
    assert speed[0] > 2.5 and speed[-1] < 1.1
    ttft = [model.latency(m, L, 1, uni)["ttft"] for L in (16, 64, 256, 1024)]
    assert all(a < b for a, b in zip(ttft, ttft[1:]))


def test_opt_shapes_are_table_ii():
    assert [(m.d_model, m.heads * m.head_dim, m.layers) for m in model.MODELS] == \
        [(768, 768, 12), (2048, 2048, 24), (4096, 4096, 32), (7168, 7168, 48)]
    assert model.OPT_125M.params == pytest.approx(125e6, rel=0.02)
    assert model.OPT_30B.params == pytest.approx(30e9, rel=0.02)
    assert model.padding_bytes(G, 768, 3072) == 0
    assert model.padding_bytes(G, 768, 50272) == 768 * 32 * 2


# --------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("call, error, message", [
    (lambda: model.Lpddr5Timing(nCL=0), ValueError,
     "Timing nCL (tCK) must be between 1 and 1000, not 0"),
    (lambda: model.Lpddr5Timing(nRCD=1.5), TypeError,
     "Timing nRCD (tCK) must be an integer between 1 and 1000, not 1.5"),
    (lambda: model.Lpddr5Timing(tCK_ns=0), ValueError,
     "Clock period tCK_ns must be a positive number of ns, not 0"),
    (lambda: model.simulate_stream("umdam", np.array([0])), TypeError,
     "mapping must be an hdl.umdam.AddressMapping, not 'umdam'"),
    (lambda: model.simulate_stream(UMDAM, np.array([], np.uint64)), ValueError,
     "addresses must hold at least one access"),
    (lambda: model.simulate_stream(UMDAM, np.array([0, 32]), writes=np.array([1, 0])),
     TypeError, "writes must be a boolean array"),
    (lambda: model.simulate_stream(UMDAM, np.array([0]), queue=0), ValueError,
     "Queue depth (requests per channel) must be between 1 and 1024, not 0"),
    (lambda: model.LayoutPoint("umdam", 100, 64), ValueError,
     "Matrix shape must be whole 128 x 64 tiles (rows a multiple of 128, columns of 64), "
     "not 100 x 64"),
    (lambda: model.LayoutPoint("nope", 128, 64), ValueError, "unknown field 'nope'"),
    (lambda: model.LayoutPoint("umdam", 128, 64, chunk_bytes=48), ValueError,
     "Re-layout chunk must be a multiple of the 32 B burst, not 48 B"),
    (lambda: model.OptModel("bad", d_model=100, head_dim=64, heads=2, layers=1), ValueError,
     "bad: heads x head_dim must equal d_model (100), not 2 x 64"),
    (lambda: model.latency(TINY, 60, 10, rates()), ValueError,
     "Prompt plus generated tokens must be at most 64 for tiny, not 60 + 10"),
    (lambda: model.latency(TINY, 4, 1, rates(), decode_on="gpu"), ValueError,
     "decode_on must be one of pim, npu, not 'gpu'"),
    (lambda: model.prefill_ops(TINY, 0), ValueError,
     "Prompt length (tokens) must be between 1 and 64, not 0"),
    (lambda: model.Rates(16.0, 25.6, 512.0, 450.0, -1.0), ValueError,
     "Re-layout time relayout_s_per_byte must be a finite number of at least 0, not -1.0"),
    (lambda: model.Rates(16.0, 0.0, 512.0, 450.0), ValueError,
     "Rate npu_gbps must be a positive number, not 0.0"),
])
def test_bad_input_names_the_parameter(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------------
# The reproduction, reduced size


def test_reproduce_quick(tmp_path):
    res = model.reproduce(Context(tmp_path, quick=True, progress=lambda _: None))
    figures = [r.figure for r in res.rows]
    for name in ("NPU sequential read, UMDAM mapping", "PIM internal bandwidth",
                 "TTFT speedup, OPT-125M", "TTFT speedup, OPT-30B",
                 "TTLT speedup, best point", "TTLT reduction, worst point"):
        assert any(f.startswith(name) for f in figures), name
    for path in res.plots:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert len(res.plots) >= 2 and len(res.tables) >= 4 and res.notes
    for r in res.rows:
        if isinstance(r.ours, float):
            assert math.isfinite(r.ours)
    ttft = [r.ours for r in res.rows if r.figure.startswith("TTFT speedup, OPT")]
    assert len(ttft) == 4 and all(1.5 < s < 4.0 for s in ttft)
    npu = next(r.ours for r in res.rows if r.figure.startswith("NPU sequential read, UMDAM"))
    assert 0.9 * 25.6 < npu <= 25.6
