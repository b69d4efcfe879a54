"""The ``kvnand`` numerics back-end (sim/llm/backends/kvnand.py) on SmolLM2's real tensors: the
in-flash GEMV against a float64 reference, the batched GEMV and the back-end's projections bit
for bit against :func:`golden.inflash.model.gemv`, attention against direct Logit/Attend calls,
and the whole model against float."""

from __future__ import annotations

import numpy as np
import pytest

from golden.arith.float import from_float, to_float
from golden.inflash.batch import W4A16Batch
from golden.inflash.model import attend, gemv, logit
from golden.inflash.weights import Weights
from hdl.arith.format import BF16, FP16, FP32
from sim.llm.backends import numerics
from sim.llm.backends.kvnand import FP16_MAX, KVNAND, QUERY_BLOCK, softmax
from sim.llm.model import Llama, rms_norm, rope, silu
from sim.llm.score import default_text, log_probs, metrics
from sim.llm.tokenizer import tokenizer

TOKENS = 40                              # > QUERY_BLOCK: the attention test spans two blocks


@pytest.fixture(scope="module")
def mf(smol):
    return smol


@pytest.fixture(scope="module")
def ids(mf):
    return tokenizer(mf).encode(default_text().text)


@pytest.fixture(scope="module")
def kv(mf):
    return KVNAND(mf)


@pytest.fixture(scope="module")
def layer0(mf, ids, kv):
    """Real layer-0 activations of the first TOKENS tokens: the attn_q input (float32), the
    SwiGLU output (the ffn_down input) and q, k, v codes after RoPE."""
    c = mf.config
    h = mf.float32("token_embd.weight")[np.asarray(ids[:TOKENS])]
    x = rms_norm(h, mf.float32("blk.0.attn_norm.weight"), c.rms_eps)
    q, k, v = kv.norm_project(0, h, "attn_norm", ("attn_q", "attn_k", "attn_v"))
    pos = np.arange(TOKENS)
    q = rope(q.reshape(TOKENS, c.heads, c.head_dim), pos, c.rope_base)
    k = rope(k.reshape(TOKENS, c.kv_heads, c.head_dim), pos, c.rope_base)
    v = v.reshape(TOKENS, c.kv_heads, c.head_dim)
    xf = rms_norm(h, mf.float32("blk.0.ffn_norm.weight"), c.rms_eps)
    glu = silu(xf @ mf.float32("blk.0.ffn_gate.weight").T) * (xf @ mf.float32(
        "blk.0.ffn_up.weight").T)
    return {"x": x, "glu": glu, "q": q, "k": k, "v": v}


def _weights(mf, name):
    b = mf.q41(name)
    assert b.source == "Q4_1"
    return Weights(mode="w4a16", codes=b.q, scales=b.d, offsets=b.m, group_size=32)


def _fp16(x):
    return from_float(np.clip(x, -FP16_MAX, FP16_MAX), FP16)


def test_gemv_attn_q_against_float64(mf, layer0):
    """Golden gemv on layer 0's attn_q (Q4_1 as stored) against a float64 product of the same
    weights and fp16 inputs. Bound: 12 fp32 roundings (5 lane-tree levels, the scale and offset
    products, their sum, 5 group-tree levels) of relative 2**-24 each on the sum of magnitudes of
    the terms: |y - y64| <= 12 * 2**-24 * sum_j (|s_j| sum_k q_k |x_k| + |o_j| sum_k |x_k|)."""
    b = mf.q41("blk.0.attn_q.weight")
    w = _weights(mf, "blk.0.attn_q.weight")
    d = b.d.view(np.float16).astype(np.float64)
    m = b.m.view(np.float16).astype(np.float64)
    assert np.all((np.abs(d) >= 2.0 ** -14) | (d == 0))        # no subnormal scale to flush
    q = b.q.astype(np.float64).reshape(w.rows, w.groups, 32)
    w64 = (d[..., None] * q + m[..., None]).reshape(w.rows, w.cols)
    for x in _fp16(layer0["x"][[0, 7, 19]]):
        x64 = x.view(np.float16).astype(np.float64)
        y = to_float(gemv(w, x), FP32)
        y64 = w64 @ x64
        ax = np.abs(x64).reshape(w.groups, 32)
        mag = (np.abs(d) * (q * ax).sum(-1) + np.abs(m) * ax.sum(-1)).sum(-1)
        bound = 12 * 2.0 ** -24 * mag
        assert np.all(np.abs(y - y64) <= bound)
        assert np.abs(y - y64).max() > 0                       # the fp32 trees do round


@pytest.mark.parametrize("name,source", [("blk.0.attn_q.weight", "x"),
                                         ("blk.0.ffn_down.weight", "glu")])
def test_batch_bit_identical_to_gemv(mf, layer0, name, source):
    """W4A16Batch equals golden gemv per vector on real tensors and activations, with signed
    zeros, a subnormal code (flushed), and an infinity (the golden fallback) among the inputs;
    ffn_down has 48 groups (an odd carry in the group tree)."""
    w = _weights(mf, name)
    xs = _fp16(layer0[source][[0, 5, 11]])
    xs[0, :40] = 0x8000                                  # -0 over a whole group and more
    xs[1, 3] = 0x0001                                    # the smallest subnormal fp16
    xs[1, 40:72] = 0                                     # +0 group
    xs = np.concatenate([xs, xs[2:3]])
    xs[3, 9] = 0x7C00                                    # +inf: gemv itself for this vector
    got = W4A16Batch(w).gemv(xs)
    want = np.stack([gemv(w, x) for x in xs])
    np.testing.assert_array_equal(got, want)


def test_projection_bit_identical_to_gemv(mf, kv, layer0):
    """The back-end's project/norm_project: fp16 codes of the float32 input (RNE, saturated),
    golden gemv, fp32 codes read as float32."""
    x = layer0["x"][:3]
    w = _weights(mf, "blk.0.attn_k.weight")
    want = np.stack([gemv(w, c) for c in _fp16(x)]).view(np.float32)
    np.testing.assert_array_equal(kv.project(0, "attn_k", x).view(np.uint32),
                                  want.view(np.uint32))
    big = layer0["glu"][:2].copy()
    big[0, 0], big[1, 5] = 1e6, -7e4                     # past fp16: saturate to +-65504
    w = _weights(mf, "blk.0.ffn_down.weight")
    want = np.stack([gemv(w, c) for c in _fp16(big)])
    np.testing.assert_array_equal(kv.project(0, "ffn_down", big).view(np.uint32), want)
    assert _fp16(big)[0, 0] == 0x7BFF


def _attention_by_rows(q, k, v, first, kv_format):
    """Reference: for every query token and KV head, Logit and Attend on exactly the keys it
    sees, with the 3 query heads of the group as G."""
    fmt = {"fp16": FP16, "bf16": BF16}[kv_format]
    t_new, heads, d = q.shape
    group = heads // k.shape[1]
    out = np.empty((t_new, heads, d), np.float32)
    for i in range(t_new):
        n = first + i + 1
        for g in range(k.shape[1]):
            hs = slice(g * group, (g + 1) * group)
            s = logit(q[i, hs], k[:n, g], kv_format).view(np.float32)
            p = from_float(softmax(s, np.ones_like(s, bool), d), fmt)
            out[i, hs] = attend(p, v[:n, g], kv_format).view(np.float32)
    return out


@pytest.mark.parametrize("kv_format", ["fp16", "bf16"])
def test_attention_against_logit_attend(mf, layer0, kv_format):
    """Prefill (two query blocks, causal) and a decode step, bit for bit the per-token calls."""
    nx = KVNAND(mf, kv_format=kv_format)
    q, k, v = (nx.keep(0, kind, layer0[kind]) for kind in "qkv")
    assert q.dtype == k.dtype == np.uint16
    assert TOKENS > QUERY_BLOCK
    got = nx.attention(0, q, k, v, 0)
    np.testing.assert_array_equal(got.view(np.uint32),
                                  _attention_by_rows(q, k, v, 0, kv_format).view(np.uint32))
    step = nx.attention(0, q[-1:], k, v, TOKENS - 1)
    np.testing.assert_array_equal(step.view(np.uint32), got[-1:].view(np.uint32))


def test_masked_signed_zero_is_repaired(kv):
    """Attend from -0 in token order: a masked +0 probability times a positive value adds +0,
    which turns a prefix sum of -0 into +0; the back-end recomputes such rows on their prefix."""
    one, neg, pos = 0x3C00, 0xBC00, 0x3C00
    values = np.array([[0x8000, neg], [0x8000, pos], [pos, pos]], np.uint16)   # (T=3, d=2)
    p = np.array([[one, 0, 0]], np.uint16)                # row sees token 0 only
    full = attend(p, values, "fp16")
    prefix = attend(p[:, :1], values[:1], "fp16")
    assert prefix[0, 0] == 0x80000000 and full[0, 0] == 0     # -0 alone, +0 with the padding
    keys = np.array([[one, 0]] * 3, np.uint16)
    q = np.array([[one, 0]], np.uint16)
    mask = np.array([[True, False, False]])
    got = kv._attend_rows(q, keys, values, mask)
    want = attend(from_float(softmax(logit(q, keys[:1]).view(np.float32), mask[:, :1], 2),
                             FP16), values[:1], "fp16")
    np.testing.assert_array_equal(got.view(np.uint32), want)


def test_bad_parameters(mf):
    with pytest.raises(ValueError, match="kv_format must be fp16 or bf16, not 'int8'"):
        KVNAND(mf, kv_format="int8")
    with pytest.raises(ValueError, match="dtype must be float32"):
        KVNAND(mf, dtype=np.float64)


def test_few_tokens_close_to_float(mf, ids):
    """8 predictions through all 30 layers: mean KL to float below 1e-4 nats, top-1 agreement at
    least 7/8, the down-projection inputs inside fp16's range."""
    few = ids[:9]
    nx = numerics("kvnand", mf)
    ref = log_probs(Llama(mf), few)
    got = metrics(log_probs(Llama(mf, nx), few), few, ref)
    assert got["kl_to_float"] < 1e-4
    assert got["top1_agree_with_float"] >= 7 / 8
    assert nx.saturated["ffn_down"][0] == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kvnand", "kvnand-bf16"])
def test_perplexity_256(mf, ids, name):
    """256 predictions of the default text: perplexity within 1 % of float, KL below 1e-3 nats,
    top-1 agreement at least 95 %."""
    ids = ids[:257]
    ref = log_probs(Llama(mf), ids)
    got = metrics(log_probs(Llama(mf, numerics(name, mf)), ids), ids, ref)
    base = metrics(ref, ids)["ppl"]
    assert abs(got["ppl"] / base - 1) < 0.01
    assert got["kl_to_float"] < 1e-3
    assert got["top1_agree_with_float"] >= 0.95
