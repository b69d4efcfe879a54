"""The FlowKV back-end (sim.llm.backends.flowkv) and its golden FusedDQP (golden.flowkv_dqp),
checked on SmolLM2's real tensors against golden.flowkv.attend and golden.arith directly."""

from __future__ import annotations

import numpy as np
import pytest

from golden.arith.float import fconvert, fdot, from_float, to_float
from golden.flowkv import attend, attend_many
from golden.flowkv_dqp import (GROUP, dequantize, dequantize_reference, gemm,
                               gemm_error_bound, gemm_golden, gemm_reference, gemv,
                               q4nx_from_q41)
from hdl.arith.format import BF16, FP16, FP32
from sim.llm.backends import numerics
from sim.llm.backends.flowkv import DEFAULT_CHUNK, FlowKV
from sim.llm.model import Llama, Numerics, rope

TOKENS = [504, 2365, 6354, 16438, 27003, 690, 260, 23790, 3537, 28, 30, 1045, 2441, 314, 5646,
          260, 1789, 281, 5248, 30, 378, 4062, 355, 1790]


@pytest.fixture(scope="module")
def mf(smol):
    return smol


@pytest.fixture(scope="module")
def nx(mf):
    return numerics("flowkv", mf)


@pytest.fixture(scope="module")
def layer0(mf):
    """Real layer-0 activations: the attention RMSNorm of the embeddings of TOKENS."""
    h = mf.float32("token_embd.weight")[TOKENS]
    return Numerics(mf).norm(h, 0, "attn_norm")


def test_default_chunk_is_the_registry_default():
    from memwall.blocks.flowkv import FlowKVParams
    assert DEFAULT_CHUNK == FlowKVParams().chunk


def test_bad_chunk_and_dtype(mf):
    with pytest.raises(ValueError, match="chunk must be a power of two between 1 and 4096, not 24"):
        FlowKV(mf, chunk=24)
    with pytest.raises(ValueError, match="dtype must be float32 or float64, not float16"):
        FlowKV(mf, dtype=np.float16)


def test_q4nx_rounding_by_hand():
    # fp16 1 + 2**-10 and 1 + 3 * 2**-8 round to bf16 1.0 and 1 + 2**-7 (ties to even: 1 + 2**-6).
    q = q4nx_from_q41(np.array([[0x3C01]], np.uint16), np.array([[0x3C0C]], np.uint16),
                      np.zeros((1, GROUP), np.uint8))
    assert int(q.d[0, 0]) == 0x3F80 and int(q.m[0, 0]) == 0x3F82
    q = q4nx_from_q41(np.array([[0x3C00]], np.uint16), np.array([[0xC000]], np.uint16),
                      np.arange(GROUP, dtype=np.uint8)[None] % 16)
    w = to_float(dequantize(q), BF16)[0]
    assert np.array_equal(w, (np.arange(GROUP) % 16) - 2.0)


def test_q4nx_on_a_real_tensor(mf):
    q41 = mf.q41("blk.0.attn_q.weight")
    q = q4nx_from_q41(q41.d, q41.m, q41.q)
    assert np.array_equal(q.q, q41.q)
    for fp16, bf16 in ((q41.d, q.d), (q41.m, q.m)):
        assert np.array_equal(bf16, fconvert(fp16, FP16, BF16))
        v16 = fp16.view(np.float16).astype(np.float64)
        assert np.all(np.abs(to_float(bf16, BF16) - v16) <= 2.0 ** -8 * np.abs(v16))
    w = to_float(dequantize(q), BF16)
    ref = dequantize_reference(q)
    assert np.all(np.abs(w - ref) <= (2.0 ** -8 + 2.0 ** -24) * np.abs(ref))
    # Against the file's own Q4_1 weights: the bf16 roundings of d, m (each <= 2**-8 relative)
    # and of w (<= 2**-8) add up; measured 0.47 % here.
    rel = np.linalg.norm(w - q41.dequantize()) / np.linalg.norm(q41.dequantize())
    assert rel < 2.0 ** -7


@pytest.mark.parametrize("name", ["attn_k", "ffn_down"])
def test_gemm_fast_path_is_the_golden_units(nx, mf, layer0, name):
    w = nx.bf16_weight(0, name)
    x = np.tile(layer0, 3)[:, :w.shape[1]]
    a = from_float(x[:3], BF16)
    y = gemm(w, a)
    # The definition, unit by unit: a 32-lane fdot per group, then the fp32 accumulator.
    sums = fdot(w.reshape(1, w.shape[0], -1, GROUP), a.reshape(3, 1, -1, GROUP), BF16, FP32)
    want = to_float(sums[..., 0], FP32).astype(np.float32)
    for g in range(1, sums.shape[-1]):
        want = want + to_float(sums[..., g], FP32).astype(np.float32)
    assert np.array_equal(y, gemm_golden(w, a))
    assert np.array_equal(y, want.view(np.uint32))
    assert np.array_equal(gemv(w, a[1]), y[1])
    err = np.abs(to_float(y, FP32) - gemm_reference(w, a))
    assert np.all(err <= gemm_error_bound(w, a))


def test_gemm_falls_back_on_subnormal_intermediates(nx):
    w = nx.bf16_weight(0, "attn_k")[:8]
    a = from_float(np.full((1, w.shape[1]), 2.0 ** -100), BF16)      # products near 2**-107
    assert np.array_equal(gemm(w, a), gemm_golden(w, a))


def test_project_is_fused_dqp(nx, mf, layer0):
    q41 = mf.q41("blk.0.attn_v.weight")
    w = dequantize(q4nx_from_q41(q41.d, q41.m, q41.q))
    want = to_float(gemm_golden(w, from_float(layer0[:2], BF16)), FP32)
    assert np.array_equal(nx.project(0, "attn_v", layer0[:2]), want.astype(np.float32))


def test_attention_is_golden_flowkv_attend(nx, mf, layer0):
    c = mf.config
    t = len(TOKENS)
    pos = np.arange(t)
    q = rope(nx.project(0, "attn_q", layer0).reshape(t, c.heads, c.head_dim), pos, c.rope_base)
    k = rope(nx.project(0, "attn_k", layer0).reshape(t, c.kv_heads, c.head_dim), pos, c.rope_base)
    v = nx.project(0, "attn_v", layer0).reshape(t, c.kv_heads, c.head_dim)
    qc, kc, vc = nx.keep(0, "q", q), nx.keep(0, "k", k), nx.keep(0, "v", v)
    assert qc.dtype == np.uint16 and np.array_equal(kc, from_float(k, BF16))
    got = nx.attention(0, qc, kc, vc, 0)
    g = c.group
    for p in range(t):
        for h in range(c.kv_heads):
            want = attend(qc[p, h * g:(h + 1) * g], kc[:p + 1, h], vc[:p + 1, h], p,
                          chunk=DEFAULT_CHUNK)
            assert np.array_equal(got[p, h * g:(h + 1) * g], to_float(want, BF16)), (p, h)
    # A decode step after a prefill: the same bits as in the prefill.
    tail = attend_many(qc[t - 3:], kc, vc, t - 3, chunk=DEFAULT_CHUNK)
    assert np.array_equal(to_float(tail, BF16), got[t - 3:])


def test_few_tokens_close_to_float(mf, nx):
    """8 tokens through the first 4 layers (the whole depth runs in the slow test)."""
    ids = TOKENS[:8]
    ref = Llama(mf, layers=4).forward(ids)
    got = Llama(mf, nx, layers=4).forward(ids)
    # bf16 activations, weights and attention: logits within 5 % of their spread, same top-1
    # on at least 7 of 8 tokens (measured in docs/llm.md).
    spread = ref.max(axis=1) - ref.min(axis=1)
    assert np.all(np.abs(got - ref).max(axis=1) <= 0.05 * spread)
    assert (got.argmax(1) == ref.argmax(1)).sum() >= 7


@pytest.mark.slow  # covered at 8 tokens by test_few_tokens_close_to_float
def test_perplexity_256_tokens(mf, nx):
    from sim.llm.score import default_text, log_probs, metrics
    from sim.llm.tokenizer import tokenizer
    ids = tokenizer(mf).encode(default_text().text)[:257]
    ref = log_probs(Llama(mf), ids)
    m = metrics(log_probs(Llama(mf, nx), ids), ids, ref)
    delta_pct = 100 * (m["ppl"] / metrics(ref, ids)["ppl"] - 1)
    # Measured: ppl 17.119, KL 0.0007, top-1 agreement 98.8 % (docs/llm.md).
    assert abs(delta_pct) < 2.0 and m["top1_agree_with_float"] > 0.97
