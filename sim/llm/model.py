"""A llama decoder in NumPy with hooks where each hardware family's numerics replace float32.

Contract
--------
:class:`Llama` runs a GGUF llama model (:mod:`sim.llm.loader`): ``forward(ids, cache)`` takes
new token ids, appends their keys and values to ``cache`` and returns their next-token logits
(``(T, vocab)``, float32; float64 for the float64 reference); a prompt of ``T`` tokens is one
batched prefill with a causal mask, and decoding one token at a time with the cache gives the
same logits as recomputing everything (a test checks it). The operations of a layer go through a :class:`Numerics` object:

* ``norm_project(layer, h, norm, names)``: RMSNorm of the residual ``h`` with the gain ``norm``,
  then the projections ``names`` (rDXE fuses the two: VRC);
* ``rope(layer, x, tables)`` and ``residual(layer, h, y)``: RoPE and the residual add, float
  on every back-end but ``rdxe-dxe`` (the DXE's GPPU, :mod:`golden.rdxe.dxe`);
* ``keep(layer, kind, x)``: what storage does to ``q``, ``k``, ``v`` (the KV cache) and ``o``
  (the attention output) before they are used: a KV page format, INT8, or eDRAM bit errors;
* ``attention(layer, q, k, v, first)``: GQA decode/prefill attention of the new queries over
  every cached key and value (``first``: the position of the first new query);
* ``project(layer, name, x)``, ``glu(layer, gate, up)``: the other projections and SwiGLU.

:class:`Numerics` itself is the float reference (float32, or float64 with ``dtype``); the LM
head, the embedding lookup and the final norm stay float32 on every back-end (float64 in
the float64 reference). GGUF conventions
kept: NumPy shapes are the reverse of ggml's; RoPE is the NORM form (adjacent pairs ``2i``,
``2i + 1``), because llama converters permute the Q and K rows; the head is ``output.weight``
or, when the file has none, the token embedding (tied).
"""

from __future__ import annotations

import numpy as np

from .loader import PROJECTIONS, ModelFile

__all__ = ["Numerics", "Llama", "KVCache", "rms_norm", "rope", "rope_tables", "rotate", "silu",
           "attention", "budgets",
           "UNIT", "SUM_FACTOR"]

#: Unit roundoff of the formats on the back-ends' paths: half an ulp relative (fp16, bf16), and
#: half a step of a symmetric INT8 scale relative to its full scale.
UNIT = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "int8": 1 / 254}
#: Cancellation allowance: an operation that sums rounded inputs may be this many units off,
#: relative to its output's norm, before ``trace`` calls it over budget.
SUM_FACTOR = 8


def budgets(projection: str | None, attention: str | None, keep_q: str | None = None,
            keep_o: str | None = None) -> dict[str, float]:
    """The ``budgets`` of a back-end from the narrowest format each operation's inputs pass
    through: ``SUM_FACTOR`` units for the projections and attention (sums), one unit for a value
    stored and read back (``keep``); ``None``: the operation is float32 there (budget 0)."""
    def unit(fmt, factor):
        return factor * UNIT[fmt] if fmt else 0.0
    out = {name: unit(projection, SUM_FACTOR) for name in PROJECTIONS}
    out.update({"attn": unit(attention, SUM_FACTOR), "keep.q": unit(keep_q, 1),
                "keep.o": unit(keep_o, 1), "glu": 0.0})
    return out


def rms_norm(x: np.ndarray, gain: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * gain`` over the last axis, in ``x``'s dtype."""
    mean = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(mean + x.dtype.type(eps))) * gain.astype(x.dtype)


def rope_tables(positions: np.ndarray, base: float, head_dim: int, dtype) -> tuple:
    """``cos`` and ``sin`` ``(T, 1, head_dim / 2)`` of NORM RoPE at ``positions``: pair
    ``(2i, 2i + 1)`` turns by ``p * base^(-2i / head_dim)`` (float64, then ``dtype``)."""
    inv = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angle = np.asarray(positions, np.float64)[:, None] * inv[None, :]
    return np.cos(angle).astype(dtype)[:, None, :], np.sin(angle).astype(dtype)[:, None, :]


def rotate(x: np.ndarray, tables: tuple) -> np.ndarray:
    """Apply :func:`rope_tables`' rotation to ``x`` ``(T, heads, head_dim)``."""
    cos, sin = tables
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def rope(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """NORM RoPE of ``x`` ``(T, heads, head_dim)`` at ``positions`` ``(T,)``: pair ``(2i, 2i+1)``
    turns by ``p * base^(-2i / head_dim)``."""
    return rotate(x, rope_tables(positions, base, x.shape[-1], x.dtype))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (x.dtype.type(1) + np.exp(-x))


def causal_mask(t_new: int, t_all: int, first: int) -> np.ndarray:
    """``(t_new, t_all)`` boolean: query ``i`` (position ``first + i``) sees keys ``0..first+i``."""
    return np.arange(t_all)[None, :] <= (first + np.arange(t_new))[:, None]


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, first: int) -> np.ndarray:
    """Float GQA attention: ``q`` ``(T, H, d)``, ``k``, ``v`` ``(S, KVH, d)``; returns
    ``(T, H, d)``. Query head ``h`` reads KV head ``h // (H / KVH)``."""
    t, heads, d = q.shape
    s, kvh = k.shape[:2]
    rep = heads // kvh
    # (KVH, rep * T, d): one batched matrix product per KV head and operand.
    qg = q.reshape(t, kvh, rep, d).transpose(1, 2, 0, 3).reshape(kvh, rep * t, d)
    scores = np.matmul(qg, k.transpose(1, 2, 0)) / q.dtype.type(np.sqrt(d))
    mask = np.tile(causal_mask(t, s, first), (rep, 1))
    scores = np.where(mask[None], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.matmul(p, v.transpose(1, 0, 2))                  # (KVH, rep * T, d)
    return out.reshape(kvh, rep, t, d).transpose(2, 0, 1, 3).reshape(t, heads, d)


class Numerics:
    """The float reference and the interface every back-end implements (module notes)."""

    name = "float"
    #: One line per operation: what computes it on this back-end (shown by ``trace``, docs).
    emulated: dict[str, str] = {"every operation": "NumPy float32 (float64 on request)"}
    #: Relative error budget of each operation against float on the same input, keyed as
    #: :mod:`sim.llm.trace` names them (``attn_q`` ... ``ffn_down``, ``attn``, ``glu``,
    #: ``keep.q``, ``keep.o``); ``trace`` names the first operation past its budget.
    budgets: dict[str, float] = {}

    def __init__(self, mf: ModelFile, dtype=np.float32):
        self.mf = mf
        self.config = mf.config
        self.dtype = np.dtype(dtype)
        self._weights: dict[str, np.ndarray] = {}

    def weight(self, layer: int, name: str) -> np.ndarray:
        """Float weights ``(out, in)`` of ``blk.layer.name`` in this back-end's dtype."""
        key = f"blk.{layer}.{name}.weight"
        if self.dtype == np.float32:
            return self.mf.float32(key)
        if key not in self._weights:
            self._weights[key] = self.mf.float32(key).astype(self.dtype)
        return self._weights[key]

    def norm(self, h: np.ndarray, layer: int | None, norm: str) -> np.ndarray:
        key = f"blk.{layer}.{norm}.weight" if layer is not None else f"{norm}.weight"
        return rms_norm(h, self.mf.float32(key), self.config.rms_eps)

    def norm_project(self, layer: int, h: np.ndarray, norm: str, names) -> list[np.ndarray]:
        x = self.norm(h, layer, norm)
        if type(self).project is not Numerics.project:     # a back-end's own projections
            return [self.project(layer, name, x) for name in names]
        # The float projections that read one input are one matrix: one pass over the weights.
        key = f"blk.{layer}." + "+".join(names)
        if key not in self._weights:
            self._weights[key] = np.concatenate([self.weight(layer, n) for n in names])
        y = self._matmul(self._weights[key], x)
        return np.split(y, np.cumsum([self.mf.shape(f"blk.{layer}.{n}.weight")[0]
                                      for n in names])[:-1], axis=1)

    def project(self, layer: int, name: str, x: np.ndarray) -> np.ndarray:
        return self._matmul(self.weight(layer, name), x)

    @staticmethod
    def _matmul(w: np.ndarray, x: np.ndarray) -> np.ndarray:
        # One token: a matrix-vector product reads the weights once, twice as fast here.
        return (w @ x[0])[None, :] if x.shape[0] == 1 else x @ w.T

    def keep(self, layer: int, kind: str, x: np.ndarray) -> np.ndarray:
        return x

    def restore(self, layer: int, kind: str, stored) -> np.ndarray:
        """The float values of what :meth:`keep` returned (codes back to numbers)."""
        return stored

    def attention(self, layer: int, q, k, v, first: int) -> np.ndarray:
        return attention(q, k, v, first)

    def glu(self, layer: int, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return silu(gate) * up

    def rope(self, layer: int, x: np.ndarray, tables: tuple) -> np.ndarray:
        return rotate(x, tables)

    def residual(self, layer: int, h: np.ndarray, y: np.ndarray) -> np.ndarray:
        return h + y


class KVCache:
    """Keys and values of every layer, ``(tokens, kv_heads, head_dim)`` each, in whatever dtype
    the numerics' ``keep`` returns; grows by doubling."""

    def __init__(self, layers: int):
        self.k: list = [None] * layers
        self.v: list = [None] * layers
        self.length = 0

    def append(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store ``k``, ``v`` at positions ``length ..``; return every cached key and value."""
        start, end = self.length, self.length + k.shape[0]
        for store, x in ((self.k, k), (self.v, v)):
            buf = store[layer]
            if buf is None or buf.shape[0] < end:
                grown = np.empty((max(end, 2 * (0 if buf is None else buf.shape[0]), 16),)
                                 + x.shape[1:], x.dtype)
                if buf is not None:
                    grown[:start] = buf[:start]
                store[layer] = buf = grown
            buf[start:end] = x
        return self.k[layer][:end], self.v[layer][:end]

    def advance(self, n: int) -> None:
        self.length += n


class Llama:
    """A GGUF llama model run with one :class:`Numerics` (module notes).

    ``layers`` runs only the first that many decoder layers before the final norm and the head:
    a shallower model on the real weights, for tests and traces that must be quick.
    """

    def __init__(self, mf: ModelFile, numerics: Numerics | None = None, *,
                 layers: int | None = None):
        self.mf = mf
        self.config = mf.config
        self.numerics = numerics if numerics is not None else Numerics(mf)
        if layers is not None and not 1 <= layers <= mf.config.layers:
            raise ValueError(f"layers must be from 1 to {mf.config.layers}, not {layers}")
        self.depth = mf.config.layers if layers is None else layers
        head = "output.weight" if "output.weight" in mf.tensors else "token_embd.weight"
        self.head_name = head

    def new_cache(self) -> KVCache:
        return KVCache(self.config.layers)

    def layer(self, i: int, h: np.ndarray, cache: KVCache, positions: np.ndarray,
              tables: tuple | None = None) -> np.ndarray:
        """One decoder layer on the residual ``h`` ``(T, d_model)`` (``tables``: the positions'
        :func:`rope_tables`, computed here when not given)."""
        c, nx = self.config, self.numerics
        t = h.shape[0]
        if tables is None:
            tables = rope_tables(positions, c.rope_base, c.head_dim, h.dtype)
        q, k, v = nx.norm_project(i, h, "attn_norm", ("attn_q", "attn_k", "attn_v"))
        q = nx.rope(i, q.reshape(t, c.heads, c.head_dim), tables)
        k = nx.rope(i, k.reshape(t, c.kv_heads, c.head_dim), tables)
        v = v.reshape(t, c.kv_heads, c.head_dim)
        q = nx.keep(i, "q", q)
        ks, vs = cache.append(i, nx.keep(i, "k", k), nx.keep(i, "v", v))
        o = nx.attention(i, q, ks, vs, int(positions[0]))
        o = nx.keep(i, "o", o.reshape(t, c.heads * c.head_dim))
        h = nx.residual(i, h, nx.project(i, "attn_output", o))
        gate, up = nx.norm_project(i, h, "ffn_norm", ("ffn_gate", "ffn_up"))
        return nx.residual(i, h, nx.project(i, "ffn_down", nx.glu(i, gate, up)))

    def hidden(self, ids, cache: KVCache) -> np.ndarray:
        """The final hidden states (after ``output_norm``) of the new tokens ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        dtype = self.numerics.dtype
        h = self.mf.float32("token_embd.weight")[ids].astype(dtype)
        positions = np.arange(cache.length, cache.length + len(ids))
        tables = rope_tables(positions, self.config.rope_base, self.config.head_dim, dtype)
        for i in range(self.depth):
            h = self.layer(i, h, cache, positions, tables)
        cache.advance(len(ids))
        return self.numerics.norm(h, None, "output_norm")

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        """Next-token logits of final hidden states ``(T, vocab)``, in the numerics' dtype."""
        head = self.mf.float32(self.head_name)
        if hidden.dtype != head.dtype:
            head = head.astype(hidden.dtype)
        return (head @ hidden[0])[None, :] if hidden.shape[0] == 1 else hidden @ head.T

    def forward(self, ids, cache: KVCache | None = None) -> np.ndarray:
        """Logits of every new token in ``ids`` (see the module notes)."""
        cache = self.new_cache() if cache is None else cache
        if cache.length + len(ids) > self.config.context:
            raise ValueError(f"{cache.length + len(ids)} tokens exceed the model's context of "
                             f"{self.config.context}")
        return self.logits(self.hidden(ids, cache))
