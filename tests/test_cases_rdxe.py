"""The rDXE real-model case (sim.llm.cases.rdxe) and its runs (cocotb_tests.realdata.rdxe): the
ops are the ``rdxe`` back-end's DXT operations of one decode step, bit for bit, and each op's
commands on the run's tile give its expected codes (the testbench's golden model)."""

from __future__ import annotations

import numpy as np
import pytest

from cocotb_tests.rdxe.dxt_tb import fp32
from cocotb_tests.realdata import rdxe as realdata
from golden.rdxe import model as G
from golden.rdxe.kv import kv_image
from sim.llm.backends.rdxe import RDXE, quantize_rows
from sim.llm.cases import CaseError, Op, capture, prompt_ids, rdxe

#: A short decode step of a real layer: position 8 (9 tokens in the KV cache).
LAYER, POSITION = 1, 8
NAMES = ["attn_norm", "qk.g0", "pv.g0", "qk.g1", "pv.g1", "qk.g2", "pv.g2", "attn_output",
         "ffn_norm", "ffn_down"]


@pytest.fixture(scope="module")
def nx(smol):
    """The fused back-end calibrated on 24 tokens (the default 256 take longer than a test)."""
    from sim.llm.score import default_text
    from sim.llm.tokenizer import tokenizer
    return RDXE(smol, calibration=tokenizer(smol).encode(default_text().text)[4096:4120])


@pytest.fixture(scope="module")
def cap(smol, nx):
    return capture(smol, nx, prompt_ids(smol, POSITION), LAYER)


@pytest.fixture(scope="module")
def ops(cap):
    return {op.name: op for op in rdxe.ops(cap)}


@pytest.fixture(scope="module")
def cfg(ops):
    return realdata.tile(list(ops.values()))[0]


def test_ops_names_and_shapes(ops):
    assert list(ops) == NAMES
    shapes = {"attn_norm": (960, 576), "attn_output": (576, 576), "ffn_norm": (3072, 576),
              "ffn_down": (576, 1536)}
    for name, (M, K) in shapes.items():
        op = ops[name]
        assert op.inputs["w"].shape == (M, K) and op.inputs["x"].shape == (K,)
        assert op.expected["y"].shape == (M,) and op.expected["y"].dtype == np.int8
    for g in range(3):
        assert ops[f"qk.g{g}"].expected["s"].shape == (3, POSITION + 1)
        assert ops[f"pv.g{g}"].expected["o"].shape == (3, 64)
        assert ops[f"pv.g{g}"].expected["o"].dtype == np.int8
    assert ops["attn_norm"].shape == "960 x 576 RMSNorm-GEMV (attn_q|attn_k|attn_v), INT8"
    assert ops["qk.g1"].shape == "Q.K^T 3 heads x 9 tokens x 64, KV group 1, INT8"


@pytest.mark.parametrize("norm", ["attn_norm", "ffn_norm"])
def test_norm_ops_are_the_back_ends(cap, nx, ops, cfg, norm):
    """The codes times the back-end's output scales are what norm_project returned; the tile's
    RMSNorm-GEMV commands (golden rmsnorm_gemv per WMEM load, the testbench's model) give the
    codes from the op's inputs."""
    op = ops[norm]
    s_out = nx.tables(LAYER)[norm][3]
    call = cap.one("norm_project", norm=norm)
    assert np.array_equal((op.expected["y"] * s_out).astype(np.float32),
                          np.concatenate(call.result, axis=1)[0])
    xq, s_x = quantize_rows(call.args[0])
    assert np.array_equal(op.inputs["x"], xq[0])
    assert op.inputs["eps"] == G.eps_code(nx.config.rms_eps, s_x[0])
    W, x, m, shift = (op.inputs[k] for k in ("w", "x", "m", "shift"))
    got = np.concatenate([
        G.rmsnorm_gemv(W[a:b], x, m[a:b], shift[a:b], op.inputs["eps"], cfg,
                       inv_k=fp32(1 / W.shape[1])) for a, b in realdata.slices(cfg, *W.shape)])
    assert np.array_equal(got, op.expected["y"])


@pytest.mark.parametrize("name", ["attn_output", "ffn_down"])
def test_project_ops_are_the_back_ends(cap, nx, ops, cfg, name):
    op = ops[name]
    k = nx.tables(LAYER)[name][3]
    call = cap.one("project", name=name)
    _, s_x = quantize_rows(call.args[1])
    assert np.array_equal((op.expected["y"] * k * s_x[0]).astype(np.float32), call.result[0])
    W, x, m, shift = (op.inputs[k] for k in ("w", "x", "m", "shift"))
    got = np.concatenate([G.gemv(W[a:b], x, m[a:b], shift[a:b], cfg)
                          for a, b in realdata.slices(cfg, *W.shape)])
    assert np.array_equal(got, op.expected["y"])


def test_attention_ops_are_the_back_ends(cap, nx, ops, cfg):
    """P.V's codes times V's scales are what attention returned for the group's heads; the
    group's Q.K^T and P.V on the iWuR cache image the identity GEMVs leave in the run's tile
    (golden attention_cached) give the same codes."""
    call = cap.one("attention")
    q, k, v, first = call.args
    assert first == POSITION
    s_v = nx.tables(LAYER)["v"]
    for g in range(3):
        qk, pv = ops[f"qk.g{g}"], ops[f"pv.g{g}"]
        assert np.array_equal(qk.inputs["k"], k[:, g]) and np.array_equal(pv.inputs["v"], v[:, g])
        heads = slice(3 * g, 3 * g + 3)
        assert np.array_equal((pv.expected["o"] * s_v[g]).astype(np.float32),
                              call.result[0, heads])
        image = kv_image(qk.inputs["k"], pv.inputs["v"], cfg, group=g)
        got = G.attention_cached(qk.inputs["q"], [image], score_m=qk.inputs["m"],
                                 score_shift=qk.inputs["shift"], scale=pv.inputs["scale"],
                                 m=pv.inputs["m"], shift=pv.inputs["shift"], params=cfg)
        assert np.array_equal(got, pv.expected["o"])
        _, s = G.qk_scores(qk.inputs["q"], np.broadcast_to(qk.inputs["k"], (3, *k[:, g].shape)),
                           qk.inputs["m"], qk.inputs["shift"], cfg)
        assert np.array_equal(s, qk.expected["s"])


def test_reduced_case(cap, ops):
    small = rdxe.ops(cap, kinds=["attention", "attn_norm"], rows=8, groups=[1])
    assert [op.name for op in small] == ["attn_norm", "qk.g1", "pv.g1"]
    assert np.array_equal(small[0].expected["y"], ops["attn_norm"].expected["y"][:8])
    assert small[0].inputs["w"].shape == (8, 576)
    assert small[0].shape == "8 of 960 x 576 RMSNorm-GEMV (attn_q|attn_k|attn_v), INT8"


@pytest.mark.parametrize("options, message", [
    ({"kinds": ["attn_q"]}, "kinds must be a non-empty list of attn_norm, attention, "
                            "attn_output, ffn_norm, ffn_down, not ['attn_q']"),
    ({"kinds": []}, "kinds must be a non-empty list"),
    ({"rows": 0}, "rows must be None or an integer >= 1, not 0"),
    ({"groups": [3]}, "groups must be distinct KV groups from 0 to 2, not [3]"),
    ({"groups": [0, 0]}, "groups must be distinct KV groups from 0 to 2, not [0, 0]"),
])
def test_bad_options(cap, options, message):
    with pytest.raises(CaseError, match=message.replace("[", r"\[").replace("]", r"\]")):
        rdxe.ops(cap, **options)


def test_tile_and_slices(ops, cfg):
    """The preset with SmolLM2's GQA; the 960 x 576 RMSNorm-GEMV in 35 WMEM loads of 28
    outputs (7 passes of 144 chunks fill 1008 of the 1024 rows), the last one 8."""
    assert (cfg.vacs, cfg.lanes, cfg.group_size, cfg.kv_groups, cfg.kv_rows) == (4, 4, 3, 3, 2048)
    cuts = realdata.slices(cfg, 960, 576)
    assert len(cuts) == 35 and cuts[0] == (0, 28) and cuts[-1] == (952, 960)
    assert all(a == b for (_, b), (a, _) in zip(cuts, cuts[1:]))
    assert realdata.slices(cfg, 576, 1536)[0] == (0, 8)
    with pytest.raises(ValueError, match=r"GEMV input length must be at most 4096 \(1024 chunks "
                                         r"of 4: the WMEM depth and the token buffer\) on this "
                                         r"tile, not 5000"):
        realdata.slices(cfg, 4, 5000)


def test_tile_grows_the_cache_past_the_preset(ops):
    """84 tokens fit a KV group of the preset's 2048 rows; 85 need 4096."""
    qk = ops["qk.g0"]
    for tokens, rows in ((84, 2048), (85, 4096)):
        op = Op(qk.name, qk.shape, qk.inputs, qk.expected, {**qk.meta, "tokens": tokens})
        cfg, overrides = realdata.tile([op])
        assert cfg.kv_rows == rows and cfg.capacity >= tokens
        assert ("kv_rows" in overrides) == (rows != 2048)


def test_runs(ops, cfg):
    (run,) = realdata.runs(list(ops.values()))
    assert run.block == "rdxe-dxt" and run.ops == tuple(NAMES) and run.params == cfg
    assert "group_size=3, kv_groups=3" in run.why and "238 WMEM loads" in run.why      # 35 + 21 + 110 + 72
    # The cycle model per command, summed over the op's loads or the group's heads.
    assert realdata.model_cycles(run, ops["qk.g0"]) == 3 * realdata.command_cycles(
        cfg, "qk", "-", POSITION + 1, 0)
    assert realdata.model_cycles(run, ops["attn_norm"]) > 960 * 144 // 4
    with pytest.raises(CaseError, match="pv.g1 need the Q.K.T of their group in the same run"):
        realdata.runs([ops["qk.g0"], ops["pv.g1"]])
