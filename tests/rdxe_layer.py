"""A reduced Llama layer for the DXE's program tests (tests/test_rdxe_assemble.py,
tests/test_rdxe_ctrl.py): 2 heads, one KV group of 8, hidden 16, FFN 32, on a small DXT, with
random tables and tokens (fixed seeds)."""

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


def layer_tables() -> P.LayerTables:
    """Random tables of the reduced layer: INT8 weights, PPU factors near unity, positive fp32
    constants (SwiGLU's ``a`` negative, as a real layer's)."""
    rng = np.random.default_rng(7)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    params = DxtConfig(lanes=8, vacs=4, head_dim=HEAD_DIM, group_size=2, kv_groups=1,
                       wmem_depth=64, ppu_depth=16, kv_rows=64, max_inputs=64)
    gemvs = {"attn_norm": _gemv(rng, q + 2 * kv, HIDDEN), "attn_output": _gemv(rng, HIDDEN, q),
             "ffn_norm": _gemv(rng, 2 * FFN, HIDDEN), "ffn_down": _gemv(rng, HIDDEN, FFN)}
    sizes = {"attn_norm": q + 2 * kv, "attn_output": HIDDEN, "ffn_down": HIDDEN, "k_inv": kv,
             "v_inv": kv, "v_scale": q, "glu_a": FFN, "glu_c": FFN}
    vectors = {name: codes(rng, n, 0.002, 0.03) for name, n in sizes.items()}
    vectors.update(k_inv=codes(rng, kv, 0.1, 0.3), v_inv=codes(rng, kv, 0.1, 0.3),
                   glu_a=(-vectors["glu_a"].view(np.float32)).view(np.uint32))
    return P.LayerTables(gemvs, vectors, {"score": codes(rng, 1, 0.05, 0.2)[0]},
                         codes(rng, 1, 0.02, 0.05)[0], 1e-5, params)


def tokens(count: int) -> list[dict]:
    """``count`` tokens' inputs: the residual ``h`` and the RoPE table ``cos``, ``sin``."""
    rng = np.random.default_rng(11)
    return [{"h": codes(rng, HIDDEN, -2.0, 2.0), "cos": codes(rng, HEAD_DIM // 2, -1.0, 1.0),
             "sin": codes(rng, HEAD_DIM // 2, -1.0, 1.0)} for _ in range(count)]


def program() -> list:
    """The reduced layer's program (:func:`golden.rdxe.program.llama_layer`)."""
    return P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)
