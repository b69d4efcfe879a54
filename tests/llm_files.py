"""Tiny llama GGUF files written with ``gguf``'s own writer, for the loader's tests: random
weights in the tensor types a user's file may have, so that every path of the loader runs in
a fraction of a second without the real model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: A 2-layer model: d_model 256, 4 query heads over 2 KV heads (head_dim 64, as SmolLM2), FFN
#: 128, 300 tokens.
TINY = dict(layers=2, d_model=256, heads=4, kv_heads=2, ffn=128, vocab=300)


def _tokens(vocab: int) -> list[str]:
    """Byte-level tokens: the 256 byte symbols of GPT-2's alphabet, then a few merges' results."""
    from tokenizers.pre_tokenizers import ByteLevel
    alphabet = sorted(ByteLevel.alphabet())
    extra = ["Ġt", "he", "Ġthe", "in"]
    return ["<|endoftext|>"] + alphabet + extra + [f"<x{i}>" for i in range(vocab - 261)]


def write_tiny(path: Path, *, proj_type: str = "Q4_1", arch: str = "llama",
               tokenizer_model: str = "gpt2", seed: int = 0) -> Path:
    """Write the :data:`TINY` model with projections of ``proj_type`` (``F32``, ``F16``,
    ``Q4_0``, ``Q4_1``, ``Q8_0``) and the tokenizer model ``tokenizer_model`` to ``path``."""
    import gguf
    t = TINY
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    hd = t["d_model"] // t["heads"]
    w.add_block_count(t["layers"])
    w.add_context_length(512)
    w.add_embedding_length(t["d_model"])
    w.add_feed_forward_length(t["ffn"])
    w.add_head_count(t["heads"])
    w.add_head_count_kv(t["kv_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hd)
    w.add_vocab_size(t["vocab"])
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre("smollm")
    tokens = _tokens(t["vocab"])
    w.add_token_list(tokens)
    w.add_token_types([3] + [1] * (len(tokens) - 1))
    w.add_token_merges(["Ġ t", "h e", "Ġt he", "i n"])
    w.add_add_bos_token(False)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    qtype = gguf.GGMLQuantizationType[proj_type]

    def tensor(name, shape, kind=qtype, scale=0.1):
        data = (rng.standard_normal(shape) * scale).astype(np.float32)
        if kind == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, data)
        elif kind == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)

    d, f, kv = t["d_model"], t["ffn"], t["kv_heads"] * hd
    tensor("token_embd.weight", (t["vocab"], d), gguf.GGMLQuantizationType.Q8_0, 0.05)
    for i in range(t["layers"]):
        for name, shape in (("attn_q", (d, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)),
                            ("attn_output", (d, d)), ("ffn_gate", (f, d)), ("ffn_up", (f, d)),
                            ("ffn_down", (d, f))):
            tensor(f"blk.{i}.{name}.weight", shape)
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight",
                         (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
