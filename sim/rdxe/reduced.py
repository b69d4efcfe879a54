"""A reduced Llama layer for the DXE's program tests (tests/test_rdxe_assemble.py,
tests/test_rdxe_ctrl.py, the ``rdxe-dxe`` testbench and board vectors): 2 heads, one KV group of
8, hidden 16, FFN 32, on a small DXT, with random tables and tokens (fixed seeds); other shapes
by keyword."""

from __future__ import annotations

import numpy as np

from golden.rdxe import program as P
from hdl.rdxe.spec import DxtConfig

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM = 16, 32, 2, 1, 8
INPUTS = {"h": HIDDEN, "cos": HEAD_DIM // 2, "sin": HEAD_DIM // 2}


def codes(rng, n, low, high) -> np.ndarray:
    """fp32 codes of ``n`` uniform values in ``[low, high)``."""
    return rng.uniform(low, high, n).astype(np.float32).view(np.uint32)


def _gemv(rng, m, k):
    return (rng.integers(-127, 128, (m, k)).astype(np.int8),
            rng.integers(8000, 30000, m), rng.integers(16, 19, m))


def layer_tables(hidden: int = HIDDEN, ffn: int = FFN, heads: int = HEADS,
                 kv_heads: int = KV_HEADS, head_dim: int = HEAD_DIM) -> P.LayerTables:
    """Random tables of the reduced layer (or of a layer of the shape given): INT8 weights, PPU
    factors near unity, positive fp32 constants (SwiGLU's ``a`` negative, as a real layer's)."""
    rng = np.random.default_rng(7)
    q, kv = heads * head_dim, kv_heads * head_dim
    # The golden steps read the numerics' fields (the same at every shape), not the tile's size;
    # the cache rows hold a token of each group at 8 lanes.
    rows = 1 << max(6, (4 * head_dim // 8 * kv_heads - 1).bit_length())
    params = DxtConfig(lanes=8, vacs=4, head_dim=head_dim, group_size=heads // kv_heads,
                       kv_groups=kv_heads, wmem_depth=64, ppu_depth=16, kv_rows=rows,
                       max_inputs=64)
    gemvs = {"attn_norm": _gemv(rng, q + 2 * kv, hidden), "attn_output": _gemv(rng, hidden, q),
             "ffn_norm": _gemv(rng, 2 * ffn, hidden), "ffn_down": _gemv(rng, hidden, ffn)}
    sizes = {"attn_norm": q + 2 * kv, "attn_output": hidden, "ffn_down": hidden, "k_inv": kv,
             "v_inv": kv, "v_scale": q, "glu_a": ffn, "glu_c": ffn}
    vectors = {name: codes(rng, n, 0.002, 0.03) for name, n in sizes.items()}
    vectors.update(k_inv=codes(rng, kv, 0.1, 0.3), v_inv=codes(rng, kv, 0.1, 0.3),
                   glu_a=(-vectors["glu_a"].view(np.float32)).view(np.uint32))
    return P.LayerTables(gemvs, vectors, {"score": codes(rng, 1, 0.05, 0.2)[0]},
                         codes(rng, 1, 0.02, 0.05)[0], 1e-5, params)


#: The seed of :func:`tokens`' inputs by default.
TOKEN_SEED = 11


def tokens(count: int, hidden: int = HIDDEN, head_dim: int = HEAD_DIM,
           seed: int = TOKEN_SEED) -> list[dict]:
    """``count`` tokens' inputs drawn from ``seed``: the residual ``h`` and the RoPE table
    ``cos``, ``sin``."""
    rng = np.random.default_rng(seed)
    return [{"h": codes(rng, hidden, -2.0, 2.0), "cos": codes(rng, head_dim // 2, -1.0, 1.0),
             "sin": codes(rng, head_dim // 2, -1.0, 1.0)} for _ in range(count)]


class Host:
    """The host between a ring's final hidden state and the next token's input (the ring's
    tests): the greedy token of a toy head (the residual's largest element, modulo the
    vocabulary), its embedding, and the RoPE table of the position."""

    def __init__(self, hidden: int = HIDDEN, head_dim: int = HEAD_DIM):
        rng = np.random.default_rng(5)
        self.embed = [codes(rng, hidden, -2.0, 2.0) for _ in range(5)]
        self.rope = [(codes(rng, head_dim // 2, -1.0, 1.0), codes(rng, head_dim // 2, -1.0, 1.0))
                     for _ in range(8)]

    def __call__(self, request: int, position: int, hidden: dict) -> dict:
        token = int(np.argmax(hidden["h"].view(np.float32))) % len(self.embed)
        cos, sin = self.rope[position]
        return {"h": self.embed[token], "cos": cos, "sin": sin}


def short(heads: int = HEADS, kv_heads: int = KV_HEADS, head_dim: int = HEAD_DIM) -> list:
    """A short layer for the ring's tests: the token's K and V (the residual's first two
    ``kv_heads x head_dim`` parts, quantized by the static factors) into its slot's cache, and
    the residual replaced by twice its rotation (reading ``cos`` and ``sin``). The KV append is
    the slots' path; without the attention a token costs 229 cycles a DXE at the reduced
    layer's shape instead of the whole layer's 1,638."""
    kv = kv_heads * head_dim
    return [P.Quant("h", "k8", table="k_inv", part=(0, kv)),
            P.Quant("h", "v8", table="v_inv", part=(kv, 2 * kv)),
            P.KvAppend("k8", "v8", head_dim), P.Rope("h", "q", head_dim), P.Add("q", "q", "h")]


def program() -> list:
    """The reduced layer's program (:func:`golden.rdxe.program.llama_layer`)."""
    return P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)
