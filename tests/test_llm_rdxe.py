"""The rDXE back-end (sim/llm/backends/rdxe.py) on SmolLM2's real tensors: each operation against
the golden function called directly, bit for bit (SwiGLU on the VE, ``glu="ve"``, and the steps
between the GEMVs on the DXE's units, ``host="dxe"``, too); the whole model close to float on a few
tokens; the 256-token perplexity under ``--slow``."""

from __future__ import annotations

import numpy as np
import pytest

from golden.rdxe import assemble as A
from golden.rdxe import dxe as D
from golden.rdxe import model as G
from golden.rdxe import program as P
from golden.rdxe.act import act
from golden.rdxe.kv import kv_image

from hdl.rdxe.isa import SMOLLM2_STORAGE, ProgramSpace
from sim.llm.backends.rdxe import RDXE, quantize_rows
from sim.llm.model import Llama, Numerics, rope_tables, silu
from sim.llm.score import default_text, log_probs, metrics
from sim.llm.tokenizer import tokenizer


@pytest.fixture(scope="module")
def mf(smol):
    return smol


@pytest.fixture(scope="module")
def text_ids(mf):
    return tokenizer(mf).encode(default_text().text)


@pytest.fixture(scope="module")
def ids(text_ids):
    return text_ids[:257]


@pytest.fixture(scope="module")
def backends(mf, text_ids):
    """Both VRC modes, calibrated on 24 tokens (the default 256 take longer than a test)."""
    calib = text_ids[4096:4120]
    return {vrc: RDXE(mf, vrc, calibration=calib) for vrc in ("fused", "sequential")}


@pytest.fixture(scope="module")
def residual(layer_inputs):
    """Real residuals ``h`` entering layer 2 for 4 tokens (float run of layers 0 and 1; a copy
    of the shared fixture's first four)."""
    return layer_inputs[0][:4].copy()


def test_bad_parameters(mf):
    with pytest.raises(ValueError, match="vrc must be one of fused, sequential, not 'x'"):
        RDXE(mf, "x")
    with pytest.raises(ValueError, match="headroom"):
        RDXE(mf, headroom=0.5)
    with pytest.raises(ValueError, match="dtype must be float32"):
        RDXE(mf, dtype=np.float64)


def test_accumulate_of_many_tokens_is_accumulate_per_token(backends, residual):
    wq = backends["fused"].tables(2)["attn_norm"][0]
    xq, _ = quantize_rows(residual)
    got = G.accumulate(wq, xq)
    assert np.array_equal(got, np.stack([G.accumulate(wq, x) for x in xq]))


@pytest.mark.parametrize("vrc", ["fused", "sequential"])
def test_norm_project_is_rmsnorm_gemv(backends, residual, vrc):
    """The batched RMSNorm-GEMV equals golden rmsnorm_gemv per token and per WMEM load."""
    nx = backends[vrc]
    wq, m, shift, s_out, sizes = nx.tables(2)["attn_norm"]
    xq, s_x = quantize_rows(residual)
    got = nx.rmsnorm_codes(wq, xq, s_x, m, shift)
    step = nx.split(wq.shape[1])
    assert step < wq.shape[0]                     # 960 outputs need more than one load
    for t in range(2):
        eps = G.eps_code(nx.config.rms_eps, s_x[t])
        want = np.concatenate([
            G.rmsnorm_gemv(wq[a:a + step], xq[t], m[a:a + step], shift[a:a + step], eps,
                           nx.params, mode=vrc) for a in range(0, wq.shape[0], step)])
        assert np.array_equal(got[t], want)
    y = nx.norm_project(2, residual, "attn_norm", ("attn_q", "attn_k", "attn_v"))
    assert [a.shape[1] for a in y] == sizes
    assert np.array_equal(np.concatenate(y, axis=1), (got * s_out).astype(np.float32))


def test_project_is_gemv(backends, residual):
    """attn_output / ffn_down: PPU(accumulate) equals golden gemv per token and per load."""
    nx = backends["fused"]
    x = residual[:, :576]
    wq, m, shift, k = nx.tables(2)["attn_output"]
    xq, s_x = quantize_rows(x)
    step = nx.split(wq.shape[1])
    want = np.stack([np.concatenate([G.gemv(wq[a:a + step], xq[t], m[a:a + step],
                                            shift[a:a + step], nx.params)
                                     for a in range(0, wq.shape[0], step)]) for t in range(2)])
    got = nx.project(2, "attn_output", x[:2])
    assert np.array_equal(got, (want * k[None, :] * s_x[:2, None]).astype(np.float32))


@pytest.mark.parametrize("vrc", ["fused", "sequential"])
def test_attention_is_golden_on_iwur_cache(mf, backends, vrc):
    """The back-end's attention of the last query equals golden attention_cached reading the
    iWuR images of the INT8 K and V (GQA: 9 heads over 3 KV groups)."""
    nx = backends[vrc]
    c = nx.config
    rng = np.random.default_rng(1)
    T = 20
    q = rng.standard_normal((1, c.heads, c.head_dim)).astype(np.float32)
    k = nx.keep(5, "k", rng.standard_normal((T, c.kv_heads, c.head_dim)).astype(np.float32))
    v = nx.keep(5, "v", rng.standard_normal((T, c.kv_heads, c.head_dim)).astype(np.float32))
    assert k.dtype == np.int8 and v.dtype == np.int8
    got = nx.attention(5, q, k, v, T - 1)
    t = nx.tables(5)
    qq, s_q = quantize_rows(q[0].reshape(-1))
    sm, ss = G.ppu_code(float(s_q) * float(t["k"].max()) / 8.0 / t["score_step"],
                        nx.params.mult_bits)
    images = [kv_image(k[:, g], v[:, g], nx.params, group=g) for g in range(c.kv_heads)]
    codes = G.attention_cached(qq.reshape(c.heads, c.head_dim), images, score_m=sm,
                               score_shift=ss, scale=G.log2_scale(t["score_step"]), m=1,
                               shift=nx.params.prob_frac, params=nx.params, mode=vrc)
    s_v = np.repeat(t["v"], c.group, axis=0)
    assert np.array_equal(got[0], (codes * s_v).astype(np.float32))


def test_close_to_float_on_three_tokens(mf, ids, backends):
    """Next-token distributions of 3 tokens through the first 4 layers (the whole depth runs in
    the slow test): mean KL to float below 0.5 nats, every operation on the golden models."""
    ref = log_probs(Llama(mf, Numerics(mf), layers=4), ids[:4])
    lp = log_probs(Llama(mf, backends["fused"], layers=4), ids[:4])
    assert metrics(lp, ids[:4], ref)["kl_to_float"] < 0.5


@pytest.mark.slow      # the operations are checked in make test; this is the whole model
def test_perplexity_256_tokens(mf, ids):
    """256 tokens of default_text(): fused VRC within 25 % of float's perplexity (measured
    +13.0 %, docs/llm.md), and sequential VRC, whose normalized input is INT8 with 4 fraction
    bits, worse than fused (measured +267 %)."""
    from sim.llm.backends import numerics
    ref = log_probs(Llama(mf), ids)
    f = metrics(ref, ids)
    fused = metrics(log_probs(Llama(mf, numerics("rdxe", mf)), ids), ids, ref)
    seq = metrics(log_probs(Llama(mf, numerics("rdxe-seq", mf)), ids), ids, ref)
    assert fused["ppl"] < 1.25 * f["ppl"] and fused["top1_agree_with_float"] > 0.7, fused
    assert seq["kl_to_float"] > 2 * fused["kl_to_float"], (seq, fused)


# --- glu="ve": SwiGLU on the VE's activation (golden.rdxe.act) ----------------------------------


@pytest.fixture(scope="module")
def ve(mf, text_ids):
    """Fused VRC with SwiGLU on the VE, calibrated on 24 tokens (as ``backends``)."""
    return RDXE(mf, calibration=text_ids[4096:4120], glu="ve")


def test_glu_option_message(mf):
    with pytest.raises(ValueError, match="glu must be one of host, ve, not 'vpu'"):
        RDXE(mf, glu="vpu")


def test_glu_hook_is_golden_act(ve, residual):
    """ffn_norm's INT8 gate and up codes through golden act: the hook's output is the codes
    times ``M / 127``, and ffn_down's per-token quantizer gives the same codes and step."""
    wq, m, shift, s_out, sizes = ve.tables(2)["ffn_norm"]
    xq, s_x = quantize_rows(residual)
    codes = ve.rmsnorm_codes(wq, xq, s_x, m, shift)
    gate, up = ve.norm_project(2, residual, "ffn_norm", ("ffn_gate", "ffn_up"))
    s_gate, s_up, a, c = ve.tables(2)["glu"]
    assert np.array_equal(s_gate, s_out[:sizes[0]]) and np.array_equal(s_up, s_out[sizes[0]:])
    want = act(codes[:, :sizes[0]], codes[:, sizes[0]:], a, c)
    got = ve.glu(2, gate, up)
    assert np.array_equal(got, (want.codes * want.scale[:, None]).astype(np.float32))
    again, step = quantize_rows(got)
    assert np.array_equal(again, want.codes)
    assert np.allclose(step, want.scale, rtol=2 ** -22, atol=0)
    # Close to float SwiGLU on the same inputs: within 2 INT8 steps of the token's maximum.
    ref = silu(gate.astype(np.float64)) * up
    assert np.all(np.abs(got - ref) <= 2 * want.scale[:, None])


def test_glu_backend_names_and_default(backends, ve, residual):
    from sim.llm.backends import NUMERICS
    assert ve.name == "rdxe-ve" and "golden.rdxe.act" in ve.emulated["glu"]
    assert NUMERICS["rdxe-ve"] == ("sim.llm.backends.rdxe", "RDXE", {"vrc": "fused", "glu": "ve"})
    host = backends["fused"]
    gate, up = residual[:, :8], residual[:, 8:16]
    assert host.glu_mode == "host" and np.array_equal(host.glu(2, gate, up), silu(gate) * up)


# --- host="dxe": the steps between the GEMVs on the DXE's units (golden.rdxe.dxe) -------------


@pytest.fixture(scope="module")
def dxe(mf, text_ids):
    """``rdxe-dxe``: fused VRC, SwiGLU on the VE, the host steps on the DXE's units, calibrated on
    24 tokens (as ``backends``)."""
    return RDXE(mf, calibration=text_ids[4096:4120], glu="ve", host="dxe")


def test_host_option_messages(mf):
    with pytest.raises(ValueError, match="host must be one of host, dxe, not 'cpu'"):
        RDXE(mf, host="cpu")
    with pytest.raises(ValueError, match=r"host='dxe' needs glu='ve' \(a DXE runs SwiGLU on its "
                                         r"VE\), not glu='host'"):
        RDXE(mf, host="dxe")


def test_dxe_name_and_registry(dxe, ve):
    from sim.llm.backends import NUMERICS
    assert dxe.name == "rdxe-dxe" and ve.name == "rdxe-ve" and not ve.dxe
    assert NUMERICS["rdxe-dxe"][2] == {"vrc": "fused", "glu": "ve", "host": "dxe"}
    assert "golden.rdxe.dxe.rope" in dxe.emulated["rope"]
    assert "golden.rdxe.dxe.residual_add" in dxe.emulated["dxe.residual"]
    assert "by the GPPU" in dxe.emulated["attention"] and "by the host" in ve.emulated["attention"]


def test_dxe_norm_project_is_its_definition(dxe, residual):
    """Per-token INT8 on the VE, RMSNorm's epsilon from the token's maximum, golden
    rmsnorm_gemv per token and per WMEM load, fp32 dequantization by the static scales."""
    wq, m, shift, s_out, sizes = dxe.tables(2)["attn_norm"]
    xq = D.quantize(D.codes_of(residual))
    eps = D.rms_eps(xq.k, dxe.config.rms_eps)
    step = dxe.split(wq.shape[1])
    y = np.concatenate(dxe.norm_project(2, residual, "attn_norm", ("attn_q", "attn_k", "attn_v")),
                       axis=1)
    for t in range(2):
        codes = np.concatenate([
            G.rmsnorm_gemv(wq[a:a + step], xq.codes[t], m[a:a + step], shift[a:a + step],
                           eps[t], dxe.params) for a in range(0, wq.shape[0], step)])
        assert np.array_equal(y[t], D.values_of(D.dequantize(codes, D.fp32(s_out))))


def test_dxe_project_is_its_definition(dxe, residual):
    x = residual[:2, :576]
    wq, m, shift, k = dxe.tables(2)["attn_output"]
    xq = D.quantize(D.codes_of(x))
    step = dxe.split(wq.shape[1])
    codes = np.stack([np.concatenate([G.gemv(wq[a:a + step], xq.codes[t], m[a:a + step],
                                             shift[a:a + step], dxe.params)
                                      for a in range(0, wq.shape[0], step)]) for t in range(2)])
    want = D.dequantize_token(codes, D.fp32(k / 127), xq.top)
    assert np.array_equal(dxe.project(2, "attn_output", x), D.values_of(want))


def test_dxe_rope_and_residual_hooks(mf, dxe, residual):
    """RoPE with the float32 table Llama passes (float64 rounded once: rope_codes) and the fp32
    residual add; the float back-ends keep NumPy's."""
    c = mf.config
    rng = np.random.default_rng(2)
    q = rng.standard_normal((4, c.heads, c.head_dim)).astype(np.float32)
    pos = np.arange(300, 304)
    tables = rope_tables(pos, c.rope_base, c.head_dim, np.float32)
    want = D.rope(D.codes_of(q), *D.rope_codes(*rope_tables(pos, c.rope_base, c.head_dim,
                                                            np.float64)))
    assert np.array_equal(dxe.rope(2, q, tables), D.values_of(want))
    y = residual[::-1].copy()
    assert np.array_equal(dxe.residual(2, residual, y),
                          D.values_of(D.residual_add(D.codes_of(residual), D.codes_of(y))))
    assert np.array_equal(Numerics(mf).residual(2, residual, y), residual + y)


def test_dxe_keep_and_attention_are_their_definitions(mf, dxe):
    """K and V INT8 by static factors; Q INT8 per token and the score PPU from its maximum;
    attention's INT8 output dequantized by V's fp32 scales."""
    c, t = mf.config, dxe.tables(5)
    rng = np.random.default_rng(1)
    T = 12
    q = rng.standard_normal((1, c.heads, c.head_dim)).astype(np.float32)
    kf = rng.standard_normal((T, c.kv_heads, c.head_dim)).astype(np.float32)
    vf = rng.standard_normal((T, c.kv_heads, c.head_dim)).astype(np.float32)
    k, v = dxe.keep(5, "k", kf), dxe.keep(5, "v", vf)
    assert np.array_equal(k, D.quantize_static(D.codes_of(kf), D.static_inverse(t["k"])))
    assert np.array_equal(v, D.quantize_static(D.codes_of(vf), D.static_inverse(t["v"])))
    qz = D.quantize(D.codes_of(q[0].reshape(-1)))
    d = float(c.head_dim)
    rc = D.score_factor(qz.top, D.fp32(t["k"].max() / (127 * np.sqrt(d) * t["score_step"])),
                        dxe.params)
    qq, sm, ss, scale = dxe.score_codes(5, q[0])
    assert np.array_equal(qq.ravel(), qz.codes) and (sm, ss) == (int(rc.m), int(rc.shift))
    codes = G.attention(qq, k.transpose(1, 0, 2), v.transpose(1, 0, 2), score_m=sm,
                        score_shift=ss, scale=scale, m=1, shift=dxe.params.prob_frac,
                        params=dxe.params)
    want = D.dequantize(codes, np.repeat(D.fp32(t["v"]), c.group, axis=0))
    assert np.array_equal(dxe.attention(5, q, k, v, T - 1)[0], D.values_of(want))


def test_dxe_glu_output_is_act_codes_exactly(dxe, residual):
    """The VE's SwiGLU codes and maximum reach ffn_down unchanged: its per-token quantizer finds
    them again from the hook's values, bit for bit."""
    wq, m, shift, _, sizes = dxe.tables(2)["ffn_norm"]
    xq = D.quantize(D.codes_of(residual))
    codes = dxe.rmsnorm_codes(wq, xq.codes, None, m, shift,
                              eps_q=D.rms_eps(xq.k, dxe.config.rms_eps))
    _, _, a, c = dxe.tables(2)["glu"]
    want = act(codes[:, :sizes[0]], codes[:, sizes[0]:], a, c)
    gate, up = dxe.norm_project(2, residual, "ffn_norm", ("ffn_gate", "ffn_up"))
    again = D.quantize(D.codes_of(dxe.glu(2, gate, up)))
    assert np.array_equal(again.codes, want.codes) and np.array_equal(again.top, want.max)


def test_dxe_close_to_float_on_three_tokens(mf, ids, dxe):
    """As test_close_to_float_on_three_tokens, every step of the 4 layers on the DXE's units."""
    ref = log_probs(Llama(mf, Numerics(mf), layers=4), ids[:4])
    lp = log_probs(Llama(mf, dxe, layers=4), ids[:4])
    assert metrics(lp, ids[:4], ref)["kl_to_float"] < 0.5


#: The storage SmolLM2's layer program is assembled into (docs/rdxe.md 14.1: it uses 2,368 TB
#: words, 4,608 rr-SRAM bytes, 2 registers and 6,145 constant words).
SMOL_SPACE = ProgramSpace(**SMOLLM2_STORAGE, gemvs=4)


def _layer_case(mf, ids, dxe, layer: int, T: int):
    """The back-end's residuals out of ``layer`` for the first ``T`` tokens (batched, the
    layers before it on the back-end), each token's program inputs (its residual into the layer
    and its RoPE table, fp32 codes) and the back-end's KV cache."""
    c = mf.config
    model = Llama(mf, dxe)
    cache = model.new_cache()
    h = mf.float32("token_embd.weight")[np.asarray(ids[:T])]
    for i in range(layer):
        h = model.layer(i, h, cache, np.arange(T))
    want = model.layer(layer, h, cache, np.arange(T))
    cos, sin = rope_tables(np.arange(T), c.rope_base, c.head_dim, np.float32)
    inputs = [{"h": D.codes_of(h[t]), "cos": D.codes_of(cos[t, 0]), "sin": D.codes_of(sin[t, 0])}
              for t in range(T)]
    return want, inputs, cache


def test_dxe_program_is_the_back_ends_layer(mf, ids, dxe):
    """golden.rdxe.program.llama_layer, run token by token on a DXE's storage from the back-end's
    tables, gives each token's residual out of layer 2 and the layer's INT8 KV cache as the
    back-end's batched layer does, bit for bit (five decode positions, the cache growing); and so
    does the program assembled into instruction words, run on flat memories."""
    c, layer, T = mf.config, 2, 5
    want, inputs, cache = _layer_case(mf, ids, dxe, layer, T)
    tables = dxe.dxe_tables(layer)
    program = P.llama_layer(c.heads, c.kv_heads, c.head_dim)
    state = P.DxeState()
    # The same program as instruction words on flat memories (golden.rdxe.assemble).
    asm = A.assemble(program, tables, {"h": c.d_model, "cos": c.head_dim // 2,
                                       "sin": c.head_dim // 2}, ["h"], SMOL_SPACE, c.head_dim)
    words, flat = A.new_state(asm), A.flat_tables(tables, asm)
    for t in range(T):
        state.tb.update(inputs[t])
        P.run(program, state, tables)
        for name, value in inputs[t].items():
            words.tb[(asm.inputs[name], len(value))] = value
        A.run_words(asm, words, flat)
        assert np.array_equal(state.tb["h"], D.codes_of(want[t])), f"token {t}"
        assert np.array_equal(words.tb[(asm.outputs["h"], c.d_model)], state.tb["h"]), f"token {t}"
    for run in (state, words):
        assert np.array_equal(np.stack(run.keys), cache.k[layer][:T])
        assert np.array_equal(np.stack(run.values), cache.v[layer][:T])


#: The controller's space for the real layer: SMOL_SPACE in rows of 4 (docs/rdxe.md 14.2).
CTRL_SPACE = ProgramSpace(**SMOLLM2_STORAGE, gemvs=4, align=4)


#: Minutes in Amaranth's simulator (docs/rdxe.md 14.2); the reduced layer runs the same
#: controller in make test (tests/test_rdxe_ctrl.py).
@pytest.mark.slow
def test_dxe_controller_runs_the_real_layer(mf, ids, dxe):
    """The controller's RTL (hdl/rdxe/ctrl.py) runs SmolLM2's layer 2 program for two tokens, the
    DXT ops by their golden step on its rr-SRAM (tests/dxe_bench.py): each token's residual out
    equals the back-end's batched layer, the whole TB and rr-SRAM equal run_words', and the run's
    cycles equal the controller's cycle model."""
    import random

    from hdl.rdxe.ctrl import CtrlConfig, DxeController, Store, run_cycles
    from tests.dxe_bench import DxeBench, golden_images
    from tests.stream_sim import simulate

    c, layer, T = mf.config, 2, 2
    want, inputs, _ = _layer_case(mf, ids, dxe, layer, T)
    tables = dxe.dxe_tables(layer)
    asm = A.assemble(P.llama_layer(c.heads, c.kv_heads, c.head_dim), tables,
                     {"h": c.d_model, "cos": c.head_dim // 2, "sin": c.head_dim // 2}, ["h"],
                     CTRL_SPACE, c.head_dim)
    flat = A.flat_tables(tables, asm)
    images = golden_images(asm, flat, inputs)
    cfg = CtrlConfig(CTRL_SPACE, lanes=4, head_dim=c.head_dim, program_words=64)
    dut = DxeController(cfg)
    got = []

    async def bench(ctx):
        b = DxeBench(ctx, dut, asm, flat, random.Random(3))
        await b.load()
        for token in inputs:
            assert await b.token(token) == (len(asm.words), 0)
            got.append((await b.image(Store.TB, CTRL_SPACE.tb_words, 32),
                        await b.image(Store.RR, CTRL_SPACE.rr_bytes, 8), b.runs[-1]))
    simulate(dut, bench)
    out = asm.outputs["h"]
    for t, ((tb, rr, (cycles, dxt)), (want_tb, want_rr)) in enumerate(zip(got, images)):
        assert np.array_equal(tb[out:out + c.d_model], D.codes_of(want[t])), f"token {t}"
        assert np.array_equal(tb, want_tb) and np.array_equal(rr, want_rr), f"token {t}"
        assert cycles == run_cycles(cfg, asm.words, dxt)
        print(f"token {t}: {cycles} cycles, {sum(dxt)} of them the DXT side's")
