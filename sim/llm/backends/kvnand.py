"""KVNAND numerics: every projection on the in-flash PE's ``w4a16`` GEMV straight from the file's
Q4_1 blocks, attention by the PE's Logit and Attend on fp16 or bf16 KV pages.

What each operation computes (``KVNAND.emulated`` says the same, one line each):

* projections (``attn_q/k/v``, ``attn_output``, ``ffn_gate/up/down``): the Q4_1 blocks of the
  file (:meth:`sim.llm.loader.ModelFile.q41`: codes 0..15, fp16 ``d`` and ``m``) become a
  :class:`golden.inflash.weights.Weights` in mode ``w4a16``, ``group_size`` 32, unchanged (``d``
  is the scale, ``m`` the offset: ``w = d q + m`` is Q4_1's own formula). The float32 activation
  is rounded to fp16 codes (round to nearest even by :func:`golden.arith.float.from_float`, after
  a saturation to +-65504 so that an outlier becomes fp16's largest value, not infinity: the count
  of saturated values is kept in :attr:`KVNAND.saturated`). The GEMV is
  :class:`golden.inflash.batch.W4A16Batch`, bit for bit :func:`golden.inflash.model.gemv` on each
  token (tested on the real tensors), vectorized over the tokens of a prefill. Its fp32 codes are
  read back as float32 (exact). Other GGUF types arrive re-quantized to Q4_1 by the loader, which
  states that in ``Q41.source``.
* ``keep``: ``q``, ``k``, ``v`` rounded to the KV format's codes (fp16 saturating as above, or
  bf16; RNE, subnormals flushed): the KV cache holds those codes, as the KV pages do. ``o`` is
  unchanged (the ``attn_output`` projection rounds it to fp16 anyway).
* attention, per KV head with the 3 query heads of its group stacked as Logit's ``G`` rows (all
  the prefill's query tokens together, in blocks of :data:`QUERY_BLOCK` tokens over the keys they
  can see): :func:`golden.inflash.model.logit` gives the fp32 scores (no ``1/sqrt(d)``);
  the host scales them by ``1/sqrt(head_dim)``, applies the causal mask and the softmax in
  float32, rounds the probabilities to the KV format (masked ones are exactly ``+0``);
  :func:`golden.inflash.model.attend` multiplies them into the values (fp32 accumulators in token
  order). A query row whose output has a zero is recomputed by ``attend`` on its own prefix only,
  so every output is bit for bit the call on exactly the keys the row may see (module notes of
  :meth:`KVNAND.attention`).
* host float32: RMSNorm, RoPE, the softmax (scale, mask, exp, sum, divide), SwiGLU, the residual
  adds, the embedding, the final norm and the LM head.
"""

from __future__ import annotations

import numpy as np

from golden.arith.float import from_float, to_float
from golden.inflash.batch import W4A16Batch
from golden.inflash.model import attend, logit
from golden.inflash.weights import Weights
from hdl.arith.format import BF16, FP16

from ..loader import Q41_GROUP, ModelFile
from ..model import Numerics, budgets, causal_mask

__all__ = ["KVNAND", "softmax", "KV_FORMATS", "QUERY_BLOCK", "FP16_MAX"]

#: KV page formats of the back-end (the PE's float KV formats).
KV_FORMATS = ("fp16", "bf16")
#: Query tokens per Logit/Attend call in a prefill: a block sees the keys up to its last token,
#: which skips most of the causally masked work (about 44 % at 256 tokens) in a few calls.
QUERY_BLOCK = 32
#: Largest finite fp16 value: activations beyond it saturate to it.
FP16_MAX = 65504.0
_FORMATS = {"fp16": FP16, "bf16": BF16}
_ZERO_CODES = (np.uint32(0), np.uint32(0x80000000))


def softmax(scores: np.ndarray, mask: np.ndarray, head_dim: int) -> np.ndarray:
    """Host float32 softmax of Logit's scores ``(rows, S)`` scaled by ``1/sqrt(head_dim)``, with
    ``mask`` (True: the key is seen); masked probabilities are exactly ``+0``.

    The sum runs left to right (``cumsum``), so a row padded with masked keys gives the same bits
    as the row cut to its seen keys: the padding only adds ``+0``.
    """
    scaled = np.where(mask, scores.astype(np.float32) * np.float32(1.0 / np.sqrt(head_dim)),
                      np.float32(-np.inf))
    p = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    return p / np.cumsum(p, axis=-1)[..., -1:]


class KVNAND(Numerics):
    """In-flash ``w4a16`` projections and Logit/Attend attention on KV pages (module notes).

    Parameters
    ----------
    mf : ModelFile
        The model; its projections are read as Q4_1 blocks (``mf.q41``).
    kv_format : str
        ``fp16`` (default) or ``bf16``: the element format of the KV pages, of the query and of
        the probabilities given to Attend.
    dtype : numpy dtype
        Host float type: float32 only (the PE's results are fp32, the host steps float32).

    Attributes
    ----------
    saturated : dict
        ``{"<tensor kind>": [values past +-65504, values converted, largest |x|]}``, per
        projection kind (``ffn_down`` takes the SwiGLU output, the widest range) and for the
        fp16 query and KV codes (``q``, ``k``, ``v``).

    Raises
    ------
    ValueError
        A KV format other than fp16/bf16 or a dtype other than float32.
    """

    name = "kvnand"
    emulated = {
        "rms_norm": "host float32 (sim.llm.model.rms_norm)",
        "projections": "golden.inflash.batch.W4A16Batch = golden.inflash.model.gemv, w4a16 "
                       "group 32 from the Q4_1 blocks; fp16 activations (RNE, saturated)",
        "rope": "host float32",
        "keep q/k/v": "golden.arith.float.from_float to the KV format's codes (KV pages)",
        "scores": "golden.inflash.model.logit on the KV-format codes, fp32",
        "softmax": "host float32 (1/sqrt(d) scale, causal mask), probabilities to KV codes",
        "p.v": "golden.inflash.model.attend on the KV-format codes, fp32",
        "glu": "host float32 SwiGLU",
    }

    def __init__(self, mf: ModelFile, kv_format: str = "fp16", dtype=np.float32):
        if not isinstance(kv_format, str) or kv_format not in KV_FORMATS:
            raise ValueError(f"kv_format must be fp16 or bf16, not {kv_format!r}")
        if np.dtype(dtype) != np.float32:
            raise ValueError(f"dtype must be float32 (the PE returns fp32), not "
                             f"{np.dtype(dtype).name}")
        super().__init__(mf, dtype)
        self.kv_format = kv_format
        self.name = "kvnand" if kv_format == "fp16" else f"kvnand-{kv_format}"
        self._fmt = _FORMATS[kv_format]
        self.budgets = budgets("fp16", kv_format, keep_q=kv_format)
        self._weights: dict[str, W4A16Batch] = {}
        self.sources: dict[str, str] = {}
        self.saturated: dict[str, list] = {}

    # --- conversions ----------------------------------------------------------------------------

    def codes(self, x: np.ndarray, fmt, kind: str) -> np.ndarray:
        """float32 ``x`` -> 16-bit codes of ``fmt`` (RNE, subnormals flushed); fp16 saturates at
        +-65504 first, counting the values past it under ``kind``."""
        x = np.asarray(x, np.float32)
        if fmt == FP16:
            big = np.abs(x)
            stat = self.saturated.setdefault(kind, [0, 0, 0.0])
            stat[0] += int(np.count_nonzero(big > FP16_MAX))
            stat[1] += int(x.size)
            stat[2] = max(stat[2], float(big.max(initial=0.0)))
            x = np.clip(x, -FP16_MAX, FP16_MAX)
        return from_float(x, fmt)

    def weights(self, layer: int, name: str) -> W4A16Batch:
        """The ``w4a16`` matrix of ``blk.layer.name`` (built once from the Q4_1 blocks)."""
        key = f"blk.{layer}.{name}.weight"
        if key not in self._weights:
            b = self.mf.q41(key)
            w = Weights(mode="w4a16", codes=b.q, scales=b.d, offsets=b.m, group_size=Q41_GROUP)
            self._weights[key] = W4A16Batch(w)
            self.sources[key] = b.source
        return self._weights[key]

    # --- the Numerics hooks ---------------------------------------------------------------------

    def norm_project(self, layer: int, h: np.ndarray, norm: str, names) -> list[np.ndarray]:
        # One fp16 conversion of the normalized input serves every projection reading it.
        x = self.codes(self.norm(h, layer, norm), FP16, norm)
        return [self._gemv(layer, name, x) for name in names]

    def project(self, layer: int, name: str, x: np.ndarray) -> np.ndarray:
        return self._gemv(layer, name, self.codes(x, FP16, name))

    def _gemv(self, layer: int, name: str, codes: np.ndarray) -> np.ndarray:
        """fp16 activation codes ``(T, in)`` -> float32 ``(T, out)`` through the PE's GEMV."""
        return self.weights(layer, name).gemv(codes).view(np.float32)

    def keep(self, layer: int, kind: str, x: np.ndarray) -> np.ndarray:
        if kind == "o":
            return x
        return self.codes(x, self._fmt, kind)

    def restore(self, layer: int, kind: str, stored) -> np.ndarray:
        return stored if kind == "o" else to_float(stored, self._fmt).astype(np.float32)

    def attention(self, layer: int, q, k, v, first: int) -> np.ndarray:
        """GQA attention of the query codes ``q`` ``(T, H, d)`` over the cached codes ``k``,
        ``v`` ``(S, KVH, d)`` through Logit and Attend; float32 ``(T, H, d)``.

        Query rows are stacked ``(token, head of the group)`` and cut into blocks of
        :data:`QUERY_BLOCK` tokens; a block's calls take the keys ``0 .. first + last token``.
        Logit's scores are independent per (row, key), so the masked ones are just not used.
        Attend accumulates in token order from ``-0``: a masked probability is ``+0``, its
        product ``+-0``, and adding ``+-0`` to a nonzero fp32 sum leaves it unchanged, so a row
        whose outputs are all nonzero equals the call on its own prefix; a zero output (whose sign
        could differ) sends the row to ``attend`` on exactly its prefix.
        """
        t_new, heads, d = q.shape
        kvh = k.shape[1]
        group = heads // kvh
        out = np.empty((t_new, kvh, group, d), np.float32)
        qg = q.reshape(t_new, kvh, group, d)
        for t0 in range(0, t_new, QUERY_BLOCK):
            t1 = min(t_new, t0 + QUERY_BLOCK)
            seen = first + t1                                      # keys the block can see
            mask = np.repeat(causal_mask(t1 - t0, seen, first + t0), group, axis=0)
            for g in range(kvh):
                rows = qg[t0:t1, g].reshape(-1, d)                 # (tokens * group, d)
                o = self._attend_rows(rows, k[:seen, g], v[:seen, g], mask)
                out[t0:t1, g] = o.reshape(t1 - t0, group, d)
        return out.reshape(t_new, heads, d)

    def _attend_rows(self, rows, keys, values, mask) -> np.ndarray:
        """One Logit + host softmax + Attend for stacked query rows; float32 ``(rows, d)``."""
        fmt, kv = self._fmt, self.kv_format
        scores = logit(rows, keys, kv).view(np.float32)
        p_codes = from_float(softmax(scores, mask, rows.shape[1]), fmt)
        acc = attend(p_codes, values, kv)
        redo = np.flatnonzero(np.isin(acc, _ZERO_CODES).any(axis=1))
        for r in redo:                   # rare: a zero whose sign the masked +0 terms may flip
            n = int(np.count_nonzero(mask[r]))
            acc[r] = attend(p_codes[r:r + 1, :n], values[:n], kv)[0]
        return acc.view(np.float32)
