"""The DXE's layer program: the operations a DXE's controller runs, one token at a time, for one
decoder layer, and their interpreter on the golden units (docs/rdxe.md, section 14).

A program is a list of operations on the DXE's storage:

* the **token buffer** (TB), fp32 vectors by region name (the residual ``h``, the dequantized
  projections, the token's RoPE table ``cos``, ``sin``, which the host streams with the token);
* the **rr-SRAM**, INT8 code vectors by region name (the GEMVs' inputs and outputs: the paper's
  row-reuse SRAM keeps a DXT's recent outputs for the next operation);
* **scalar registers**, fp32 codes (a token's ``M``, ``k``, RMSNorm's epsilon) and the score
  PPU's RC factor;
* the layer's **KV cache** (INT8, iWuR in the DXTs), which the program appends to;
* the layer's **tables** (:class:`LayerTables`), loaded by the host before the first token:
  INT8 weights with PPU multipliers and shifts, and fp32 per-channel constants.

Each operation names the unit that runs it and is one call of that unit's golden function
(:mod:`golden.rdxe.dxe`, :mod:`golden.rdxe.act`, :mod:`golden.rdxe.model`), so a program run here
is what a DXE computes, bit for bit. :func:`llama_layer` writes the program of a Llama decoder
layer (SmolLM2's); the ``rdxe-dxe`` back-end (``sim.llm.backends.rdxe``) computes the same layer
from its hooks, and the two are tested equal on real layers (tests/test_rdxe_program.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arith.func import reciprocal
from . import dxe as D
from .act import act_codes, act_scale, act_values
from .model import attention, gemv, rmsnorm_gemv
from .params import DxtConfig

__all__ = ["LayerTables", "DxeState", "Max", "Recip", "Eps", "Quant", "Gemv", "Dequant", "Rope",
           "Add", "KvAppend", "Score", "Attend", "ActMax", "Act", "run", "llama_layer",
           "wmem_outputs"]


def wmem_outputs(inputs: int, params: DxtConfig) -> int:
    """Outputs of a GEMV with ``inputs`` inputs that one load of the WMEM and PPU tables holds:
    ``vacs * min(wmem_depth // ceil(inputs / lanes), ppu_depth)`` (a larger GEMV runs as several
    loads)."""
    return params.vacs * min(params.wmem_depth // -(-inputs // params.lanes), params.ppu_depth)


@dataclass
class LayerTables:
    """What the host loads into a DXE for one layer (fp32 values as uint32 codes).

    ``gemvs``: per GEMV name, its INT8 weights ``(M, K)``, PPU multipliers and shifts ``(M,)``;
    ``vectors``: per name, an fp32 constant per channel (output scales, ``k / 127`` of the plain
    projections, the KV cache's static factors, V's scale per head channel, SwiGLU's ``a`` and
    ``c``); ``scalars``: per name, an fp32 constant (the score constant ``score``);
    ``score_scale``: the fp32 log2 scale of one INT8 score step; ``rms_eps``: the model's
    RMSNorm epsilon (the DXE holds ``fp32(127**2 eps)``, :func:`golden.rdxe.dxe.rms_eps`);
    ``params``: the DXT; ``mode``: the VRC mode.
    """

    gemvs: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    vectors: dict[str, np.ndarray]
    scalars: dict[str, np.uint32]
    score_scale: np.uint32
    rms_eps: float
    params: DxtConfig
    mode: str = "fused"


@dataclass
class DxeState:
    """A DXE's storage for one layer while a program runs (module notes): ``tb``, ``rr``,
    ``reg``, and the layer's KV cache, ``(tokens, groups, d)`` INT8 for keys and values."""

    tb: dict[str, np.ndarray] = field(default_factory=dict)
    rr: dict[str, np.ndarray] = field(default_factory=dict)
    reg: dict[str, object] = field(default_factory=dict)
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)


def _region(store: dict, name: str, part: tuple[int, int] | None = None) -> np.ndarray:
    """Region ``name`` of ``store``, or its elements ``part = (start, stop)``."""
    if name not in store:
        raise KeyError(f"region {name!r} is not written yet; regions are {sorted(store)}")
    return store[name] if part is None else store[name][slice(*part)]


# --- operations: each one unit's step -----------------------------------------------------------


@dataclass(frozen=True)
class Max:
    """VE quantizer, first pass: ``reg[dst] = max |tb[src]|`` (fp32 code, exact)."""

    src: str
    dst: str

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.reg[self.dst] = act_scale(_region(s.tb, self.src))[0]


@dataclass(frozen=True)
class Recip:
    """Controller's scalar path: ``reg[dst] = reciprocal(reg[src])`` (``+inf`` for 0)."""

    src: str
    dst: str

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.reg[self.dst] = reciprocal(np.asarray(s.reg[self.src], np.uint32))


@dataclass(frozen=True)
class Eps:
    """Controller's scalar path: RMSNorm's epsilon in input units, ``rms_eps`` of ``reg[k]``."""

    k: str
    dst: str

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.reg[self.dst] = D.rms_eps(np.asarray(s.reg[self.k], np.uint32)[None], t.rms_eps)[0]


@dataclass(frozen=True)
class Quant:
    """VE quantizer, second pass: ``rr[dst] = RNE(127 fmul(tb[src][part], k))``, ``k`` the
    register ``k`` (per token) or the table ``table`` (static per channel)."""

    src: str
    dst: str
    k: str | None = None
    table: str | None = None
    part: tuple[int, int] | None = None

    def __post_init__(self):
        if (self.k is None) == (self.table is None):
            raise ValueError(f"Quant needs one factor, a register k or a table, not k={self.k!r} "
                             f"and table={self.table!r}")

    def run(self, s: DxeState, t: LayerTables) -> None:
        x = _region(s.tb, self.src, self.part)
        k = (np.broadcast_to(np.asarray(s.reg[self.k], np.uint32), x.shape) if self.table is None
             else t.vectors[self.table])
        s.rr[self.dst] = act_codes(x, k)


@dataclass(frozen=True)
class Gemv:
    """DXTs: ``rr[dst] = PPU(W rr[src])`` of the table's GEMV ``name``, fused with RMSNorm when
    ``eps`` names the register of its epsilon; run in WMEM loads of :func:`wmem_outputs`."""

    name: str
    src: str
    dst: str
    eps: str | None = None

    def run(self, s: DxeState, t: LayerTables) -> None:
        W, m, shift = t.gemvs[self.name]
        x = _region(s.rr, self.src)
        step = wmem_outputs(W.shape[1], t.params)
        parts = []
        for a in range(0, W.shape[0], step):
            b = slice(a, a + step)
            if self.eps is None:
                parts.append(gemv(W[b], x, m[b], shift[b], t.params))
            else:
                parts.append(rmsnorm_gemv(W[b], x, m[b], shift[b], int(s.reg[self.eps]),
                                          t.params, mode=t.mode))
        s.rr[self.dst] = np.concatenate(parts)


@dataclass(frozen=True)
class Dequant:
    """GPPU: ``tb[dst] = fmul(fp32(rr[src]), table)``, or with ``top`` (a register)
    ``fmul(fmul(fp32(code), table), M)`` (the plain projections' per-token step)."""

    src: str
    dst: str
    table: str
    top: str | None = None

    def run(self, s: DxeState, t: LayerTables) -> None:
        codes, scale = _region(s.rr, self.src), t.vectors[self.table]
        s.tb[self.dst] = (D.dequantize(codes, scale) if self.top is None else
                          D.dequantize_token(codes, scale, np.asarray(s.reg[self.top], np.uint32)))


@dataclass(frozen=True)
class Rope:
    """GPPU: NORM RoPE of ``tb[src][part]`` (heads of ``head_dim``) with the token's
    ``tb[cos]``, ``tb[sin]``."""

    src: str
    dst: str
    head_dim: int
    part: tuple[int, int] | None = None
    cos: str = "cos"
    sin: str = "sin"

    def run(self, s: DxeState, t: LayerTables) -> None:
        x = _region(s.tb, self.src, self.part).reshape(-1, self.head_dim)
        s.tb[self.dst] = D.rope(x, _region(s.tb, self.cos), _region(s.tb, self.sin)).reshape(-1)


@dataclass(frozen=True)
class Add:
    """GPPU: the residual add, ``tb[dst] = fadd(tb[a], tb[b])``."""

    a: str
    b: str
    dst: str

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.tb[self.dst] = D.residual_add(_region(s.tb, self.a), _region(s.tb, self.b))


@dataclass(frozen=True)
class KvAppend:
    """DXTs' KV caches: the token's INT8 keys ``rr[keys]`` and values ``rr[values]`` (groups of
    ``d``) written at the next position."""

    keys: str
    values: str
    head_dim: int

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.keys.append(_region(s.rr, self.keys).reshape(-1, self.head_dim))
        s.values.append(_region(s.rr, self.values).reshape(-1, self.head_dim))


@dataclass(frozen=True)
class Score:
    """Controller's scalar path: the score PPU's RC factor of the query's ``M`` (``reg[top]``),
    ``score_factor`` with the layer's constant ``scalars[const]``, into ``reg[dst]`` (written to
    the DXTs' PPU tables before Q.K^T)."""

    top: str
    dst: str
    const: str = "score"

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.reg[self.dst] = D.score_factor(np.asarray(s.reg[self.top], np.uint32),
                                         t.scalars[self.const], t.params)


@dataclass(frozen=True)
class Attend:
    """DXTs and VE: Q.K^T and softmax-P.V of every query head ``rr[q]`` over the cache, the score
    PPU from ``reg[score]``, the outputs' PPU 1 >> prob_frac (V's scale is dequantized later):
    ``rr[dst]``."""

    q: str
    score: str
    dst: str
    head_dim: int

    def run(self, s: DxeState, t: LayerTables) -> None:
        K = np.stack(s.keys, axis=1)                  # (groups, tokens, d)
        V = np.stack(s.values, axis=1)
        rc = s.reg[self.score]
        q = _region(s.rr, self.q).reshape(-1, self.head_dim)
        out = attention(q, K, V, score_m=int(rc.m), score_shift=int(rc.shift),
                        scale=t.score_scale, m=1, shift=t.params.prob_frac, params=t.params,
                        mode=t.mode)
        s.rr[self.dst] = out.reshape(-1)


@dataclass(frozen=True)
class ActMax:
    """VE activation, first pass: ``reg[dst]`` = ``M`` of ``silu(gate) up`` over the token, the
    gate and up codes ``rr[src]``'s two halves, SwiGLU's constants the tables ``a``, ``c``."""

    src: str
    dst: str
    a: str = "glu_a"
    c: str = "glu_c"

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.reg[self.dst] = act_scale(_act_values(s, t, self.src, self.a, self.c))[0]


@dataclass(frozen=True)
class Act:
    """VE activation, second pass: ``rr[dst] = RNE(127 fmul(v, reg[k]))`` of ``v = silu(gate)
    up`` (the tables ``a``, ``c`` as :class:`ActMax`'s)."""

    src: str
    k: str
    dst: str
    a: str = "glu_a"
    c: str = "glu_c"

    def run(self, s: DxeState, t: LayerTables) -> None:
        s.rr[self.dst] = act_codes(_act_values(s, t, self.src, self.a, self.c),
                                   np.asarray(s.reg[self.k], np.uint32))


def _act_values(s: DxeState, t: LayerTables, src: str, a: str, c: str) -> np.ndarray:
    gate, up = np.split(_region(s.rr, src), 2)
    return act_values(gate, up, t.vectors[a], t.vectors[c])[2]


def run(program, state: DxeState, tables: LayerTables) -> DxeState:
    """Run ``program`` (a sequence of operations) on ``state``; return it."""
    for op in program:
        op.run(state, tables)
    return state


def llama_layer(heads: int, kv_heads: int, head_dim: int) -> list:
    """The program of one Llama decoder layer for one token (SmolLM2's: 9 heads, 3 KV heads of
    64), as the ``rdxe-dxe`` back-end computes it (docs/rdxe.md, section 12).

    Input: the residual ``tb["h"]`` and the token's RoPE table ``tb["cos"]``, ``tb["sin"]``
    (``head_dim / 2`` each); output: ``tb["h"]``, the layer's residual. The tables' names:
    GEMVs ``attn_norm`` (Q, K, V stacked), ``attn_output``, ``ffn_norm`` (gate, up stacked),
    ``ffn_down``; vectors ``attn_norm`` (Q, K, V's output scales), ``attn_output`` and
    ``ffn_down`` (``k / 127``), ``k_inv``, ``v_inv`` (the cache's static factors), ``v_scale``
    (per query head channel), ``glu_a``, ``glu_c``; scalar ``score``."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return [
        # Attention: RMSNorm-GEMV of Q, K, V on the token's INT8 (per-token scale).
        Max("h", "M"), Recip("M", "k"), Eps("k", "eps"), Quant("h", "x", k="k"),
        Gemv("attn_norm", "x", "qkv", eps="eps"),
        Dequant("qkv", "qkv", "attn_norm"),
        Rope("qkv", "q", head_dim, part=(0, q)),
        Rope("qkv", "kr", head_dim, part=(q, q + kv)),
        # K and V into the INT8 cache by static factors; Q by its own scale, and its score PPU.
        Quant("kr", "k8", table="k_inv"),
        Quant("qkv", "v8", table="v_inv", part=(q + kv, q + 2 * kv)),
        KvAppend("k8", "v8", head_dim),
        Max("q", "Mq"), Recip("Mq", "kq"), Quant("q", "q8", k="kq"), Score("Mq", "score"),
        Attend("q8", "score", "o8", head_dim),
        Dequant("o8", "o", "v_scale"),
        # The output projection on the attention output's INT8, and the residual add.
        Max("o", "Mo"), Recip("Mo", "ko"), Quant("o", "ox", k="ko"),
        Gemv("attn_output", "ox", "y8"),
        Dequant("y8", "y", "attn_output", top="Mo"),
        Add("h", "y", "h"),
        # FFN: RMSNorm-GEMV of gate and up, SwiGLU on the VE (two passes), down, residual.
        Max("h", "M2"), Recip("M2", "k2"), Eps("k2", "eps2"), Quant("h", "x2", k="k2"),
        Gemv("ffn_norm", "x2", "gu", eps="eps2"),
        ActMax("gu", "Ma"), Recip("Ma", "ka"), Act("gu", "ka", "a8"),
        Gemv("ffn_down", "a8", "d8"),
        Dequant("d8", "d", "ffn_down", top="Ma"),
        Add("h", "d", "h"),
    ]
