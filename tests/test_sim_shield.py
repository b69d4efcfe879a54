"""sim/shield.py: footprints, lifecycle traces, the refresh-count cross-check against the RTL
controller, the Algorithm 1 attention experiment and the reduced-size reproduction."""

import math

import numpy as np
import pytest

from golden import edram as golden
from hdl.edram import EdramController, Op, Policy, RefreshPlan
from hdl.edram.spec import SEGMENT_BITS
from sim import shield
from sim.models import ModelShape
from sim.reproduce import Context
from tests.test_edram_hdl import SIM_ARGS, run_system


def test_model_widths_and_errors():
    assert (shield.QWEN3_4B.d_q, shield.QWEN3_4B.d_kv) == (4096, 1024)
    assert (shield.QWEN3_1_7B.d_q, shield.QWEN3_1_7B.d_kv) == (2048, 1024)
    with pytest.raises(ValueError, match="Query head count must be a multiple of the KV head "
                                         "count 4, not 6"):
        ModelShape("x", layers=1, heads=6, kv_heads=4, head_dim=8)
    with pytest.raises(ValueError, match="Head dimension must be between 1 and 4096, not 0"):
        ModelShape("x", layers=1, heads=4, kv_heads=4, head_dim=0)


def test_step_fractions_by_hand():
    # Qwen3-8B, prompt 2, one decode step: prefill B_KV = 2*2*1024, B_QO = 2*2*4096 -> f = 0.2;
    # decode ctx 3, n 1: B_KV = 6144, B_QO = 8192 -> f = 3/7.
    f, w = shield.step_fractions(shield.Workload("t", 2, 1), shield.QWEN3_8B)
    assert f == pytest.approx([0.2, 3 / 7])
    assert w == pytest.approx([2 * (4096 + 16384), 6144 + 8192])


def test_paper_qo_workspace_is_one_layer_at_2k():
    # The paper: "in Qwen3-8B the transient QO workspace alone requires about 32 MB".
    m = shield.QWEN3_8B
    assert 2 * 2048 * m.d_q * 2 == 32 * 2 ** 20


def test_trace_lifetimes_by_hand():
    tiny = ModelShape("tiny", layers=1, heads=4, kv_heads=1, head_dim=1)
    life, rows, end = shield.trace_lifetimes(shield.Workload("t", 1, 2), tiny, words_per_row=2,
                                             banks=2, token_cycles=10)
    # 3 tokens x 1 KV row + 4 QO rows of the prefill = 7 rows -> 4 rows per bank (top row 7).
    assert rows == 4 and end == 30
    kv = [e for e in life if e[0] == "KV"]
    qo = [e for e in life if e[0] == "QO"]
    assert kv == [("KV", 0, 0, 30), ("KV", 1, 10, 30), ("KV", 2, 20, 30)]
    assert sorted({e[1] for e in qo}) == [4, 5, 6, 7]
    assert sorted({(e[2], e[3]) for e in qo}) == [(0, 10), (10, 20), (20, 30)]
    with pytest.raises(ValueError, match="Words per row must be a positive integer, not 0"):
        shield.trace_lifetimes(shield.TRACE, tiny, words_per_row=0, banks=2, token_cycles=1)


def test_eq_energy_by_hand():
    plan = RefreshPlan(1, 12, 20, 16, 4, 1)
    life = [("KV", 0, 0, 120), ("QO", 1, 0, 60)]
    # std: (120 + 60) / 12 * 9 bits; kv_mant 120 / 20 * 7 (SHIELD); qo_mant refresh-less.
    assert shield.eq_energy(life, plan, Policy.SHIELD, 2) == pytest.approx(
        2 * (9 * 180 / 12 + 7 * 6))
    assert shield.eq_energy(life, plan, Policy.STANDARD, 2) == pytest.approx(2 * 16 * 180 / 12)
    # The sweep of 4 rows with slack 1: step (12 - 2) // 4 = 2, period 8; (20 - 2) // 4 * 4 = 16.
    assert shield.eq_energy(life, plan, Policy.SHIELD, 2, sweep=True) == pytest.approx(
        2 * (9 * 180 / 8 + 7 * 120 / 16))


def _script(lifetimes, cols, policy):
    """Requests that make the lifetimes happen (planned cycles; the bench adds idle cycles)."""
    events = []
    for cls, g, start, end in lifetimes:
        events.append((start, 1, ("W", cls, g)))
        if cls == "QO":
            events.append((end, 0, ("REL", cls, g)))
    script = [("req", dict(op=Op.SET_POLICY, data=int(policy)))]
    now = 0
    for t, _, (kind, cls, g) in sorted(events):
        if t > now:
            script.append(("idle", t - now))
            now = t
        klass = 0 if cls == "KV" else 1
        if kind == "W":
            script += [("req", dict(op=Op.WRITE, addr=g * cols + k, cls=klass, data=0x3F80 + k))
                       for k in range(cols)]
        else:
            script.append(("req", dict(op=Op.RELEASE_ROWS, cls=klass, addr=g * cols,
                                       last=g * cols + cols - 1)))
    end = max(e[3] for e in lifetimes)
    script += [("idle", max(0, end - now)), ("req", dict(op=Op.RELEASE_CLASS, cls=0)),
               ("idle", 4), ("status", "released")]
    return script


def _accepted_lifetimes(accepted, cols):
    """(class, global row, start, end) from the cycles the requests commit in."""
    origin, start, life = 0, {}, []
    for cycle, r in accepted:
        if r["op"] == Op.SET_POLICY:
            origin = cycle + EdramController.policy_latency
        elif r["op"] == Op.WRITE:
            start.setdefault(r["addr"] // cols, ("KV" if r["cls"] == 0 else "QO", cycle))
        elif r["op"] == Op.RELEASE_ROWS:
            g = r["addr"] // cols
            cls, s = start.pop(g)
            life.append((cls, g, s - origin, cycle - origin))
        elif r["op"] == Op.RELEASE_CLASS:
            for g in [g for g, (cls, _) in start.items() if cls == "KV"]:
                cls, s = start.pop(g)
                life.append((cls, g, s - origin, cycle - origin))
    assert not start
    return life


@pytest.mark.parametrize("policy", list(Policy))
def test_rtl_refresh_counters_on_a_lifecycle_trace(policy):
    """The Amaranth controller's refresh counters on a prefill/decode trace equal the sweep counts
    the reproduction uses, and their energy is within one refresh per lifetime of Eqs. 4 to 8."""
    banks, rows, cols = SIM_ARGS["banks"], SIM_ARGS["rows"], SIM_ARGS["cols"]
    tiny = ModelShape("tiny", layers=1, heads=4, kv_heads=1, head_dim=1)
    planned, need, _ = shield.trace_lifetimes(shield.Workload("t", 1, 3), tiny,
                                              words_per_row=cols, banks=banks, token_cycles=30)
    assert need == rows
    accepted, _, snapshots = run_system(_script(planned, cols, policy), seed=int(policy) + 3)
    life = _accepted_lifetimes(accepted, cols)
    assert len(life) == len(planned)
    plan = RefreshPlan(SIM_ARGS["clk_mhz"], SIM_ARGS["t_std_us"], SIM_ARGS["t_rel_us"],
                       SIM_ARGS["t_kelle_us"], rows, SIM_ARGS["slack"])
    counted = shield.count_energy(life, plan, policy, banks, cols)
    status = snapshots["released"][1]
    rtl = {s: status[f"{s}.refreshes"] for s in golden.SEGMENTS}
    assert rtl == counted["counts"]
    if policy == Policy.SHIELD:
        assert rtl["qo_mant"] == 0
    rtl_bits = cols * sum(SEGMENT_BITS[s] * n for s, n in rtl.items())
    assert rtl_bits == counted["bit_refreshes"] > 0
    slack = cols * sum(9 + (7 if plan.interval(policy, golden.MANTISSA_SEGMENT[c]) else 0)
                       for c, *_ in life)
    assert abs(rtl_bits - shield.eq_energy(life, plan, policy, cols, sweep=True)) <= slack
    # The equations at T: the sweep's period is T less the slack, rounded down to whole slots.
    shortest = min(plan.sweep(policy, s).period / plan.interval(policy, s)
                   for s in golden.SEGMENTS if plan.sweep(policy, s))
    eq = shield.eq_energy(life, plan, policy, cols)
    # (Equality when every segment's period is the same fraction of its interval: allow for the
    # float division.)
    swept = shield.eq_energy(life, plan, policy, cols, sweep=True)
    assert eq <= swept <= eq / shortest * (1 + 1e-12)


def test_attention_error_modes():
    clean = shield.attention_error(("mantissa KV", 0.0, 1, 8, 16, 8))
    assert clean["rms"] == 0 and clean["bad"] == 0
    mant = [shield.attention_error(("mantissa QO", rho, 2, 16, 32, 16))["rms"]
            for rho in (1e-3, 1e-2, 0.3)]
    assert 0 <= mant[0] < mant[1] < mant[2] < 1
    uniform = shield.attention_error(("uniform QO", 0.3, 2, 16, 32, 16))
    assert uniform["bad"] > 0.1 and uniform["bad"] > 10 * shield.attention_error(
        ("mantissa QO", 0.3, 2, 16, 32, 16))["bad"]
    with pytest.raises(ValueError, match="Injection mode must be one of uniform QO, mantissa QO, "
                                         "mantissa KV, not 'all'"):
        shield.attention_error(("all", 0.1, 0, 4, 4, 4))


def test_reproduce_quick(tmp_path):
    result = shield.reproduce(Context(tmp_path, quick=True, progress=lambda s: None))
    figures = {r.figure: r for r in result.rows}
    gains = [r for name, r in figures.items() if name.startswith("SHIELD gain")]
    assert len(gains) == 3
    for r in gains:        # refresh only: 9/16 at T_std, the rest at T_rel or never -> 1.73..1.78
        assert 1 / (9 / 16 + 7 / 16 * 45 / 1216) < r.ours + 1e-9 <= 16 / 9
    reduction = figures["refresh-energy reduction over Prefill=128/Decode=256, Qwen3-8B"]
    assert reduction.paper == 35 and 42 < reduction.ours < 44
    assert len(result.plots) == 3
    for plot in result.plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert all(math.isfinite(r.ours) for r in result.rows if isinstance(r.ours, float))
    assert any("Cross-check" in heading for heading, _ in result.tables)
    assert np.isfinite([r.ours for r in gains]).all()
