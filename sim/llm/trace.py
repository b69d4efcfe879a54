"""Per-operation error of a back-end against float, and the activation statistics behind each
quantization choice.

Contract: :func:`trace` runs the model with :class:`Tracer`, which calls the back-end for every
operation and, on the same input, the float reference; each row is one operation of one layer,
keyed by its GGUF tensor name (``blk.3.attn_q``) or, for what has no tensor, ``blk.3.attn``
(attention), ``blk.3.glu`` (SwiGLU) and ``blk.3.keep.k`` (what storage did to K). The error is
``||y - y_float|| / ||y_float||`` over the traced tokens; ``budget`` is the back-end's stated
bound for that operation (``Numerics.budgets``), and the first row past it is named. Errors
compound along the layers, so a row measures one operation on the back-end's own inputs. Each
projection's row has the statistics of its input: for the projections after an RMSNorm, the
residual entering the norm (what a fused RMSNorm-GEMV quantizes, where the outliers live).
"""

from __future__ import annotations

import numpy as np

from .model import Llama, Numerics

__all__ = ["Tracer", "trace", "activation_stats"]


def _rel(y: np.ndarray, ref: np.ndarray) -> float:
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(y - ref) / den) if den else float(np.linalg.norm(y))


def activation_stats(x: np.ndarray, outlier: float = 6.0) -> dict:
    """Per-channel maxima of ``|x|`` ``(T, channels)``: the largest, the median, and the
    channels whose maximum is over ``outlier`` times the median (outlier channels)."""
    m = np.abs(np.asarray(x, np.float64)).reshape(-1, x.shape[-1]).max(axis=0)
    med = float(np.median(m))
    out = np.flatnonzero(m > outlier * med)
    return {"max": float(m.max()), "median_channel_max": med,
            "outlier_channels": [int(c) for c in out[np.argsort(-m[out])]][:8],
            "outlier_count": int(out.size)}


class Tracer(Numerics):
    """Runs ``backend`` and records each operation's error against ``reference`` on the same
    input (module notes)."""

    def __init__(self, backend: Numerics, reference: Numerics, layers=None):
        super().__init__(backend.mf, backend.dtype)
        self.backend, self.reference = backend, reference
        self.name = backend.name
        self.layers = None if layers is None else set(layers)
        self.rows: dict[str, dict] = {}

    def _record(self, key: str, y, ref, x=None) -> None:
        layer = int(key.split(".")[1]) if key.startswith("blk.") else None
        if self.layers is not None and layer not in self.layers:
            return
        row = self.rows.setdefault(key, {"op": key, "layer": layer, "sq_err": 0.0,
                                         "sq_ref": 0.0})
        y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
        row["sq_err"] += float(np.sum((y - ref) ** 2))
        row["sq_ref"] += float(np.sum(ref ** 2))
        if x is not None:
            row["input"] = activation_stats(x)

    def norm_project(self, layer, h, norm, names):
        ys = self.backend.norm_project(layer, h, norm, names)
        refs = self.reference.norm_project(layer, h, norm, names)
        for name, y, ref in zip(names, ys, refs):
            self._record(f"blk.{layer}.{name}", y, ref, h)
        return ys

    def project(self, layer, name, x):
        y = self.backend.project(layer, name, x)
        self._record(f"blk.{layer}.{name}", y, self.reference.project(layer, name, x), x)
        return y

    def keep(self, layer, kind, x):
        y = self.backend.keep(layer, kind, x)
        if kind in ("q", "o"):                       # k, v: compared inside attention
            self._record(f"blk.{layer}.keep.{kind}", self.backend.restore(layer, kind, y), x)
        return y

    def attention(self, layer, q, k, v, first):
        y = self.backend.attention(layer, q, k, v, first)
        kf, vf = (self.backend.restore(layer, kind, a) for kind, a in (("k", k), ("v", v)))
        qf = self.backend.restore(layer, "q", q)
        self._record(f"blk.{layer}.attn", y, self.reference.attention(layer, qf, kf, vf, first))
        return y

    def glu(self, layer, gate, up):
        y = self.backend.glu(layer, gate, up)
        self._record(f"blk.{layer}.glu", y, self.reference.glu(layer, gate, up))
        return y


def trace(mf, backend: Numerics, ids, layers=None) -> list[dict]:
    """Rows of :class:`Tracer` over the prompt ``ids``, in layer order; each with ``error``,
    ``budget`` and ``over_budget`` (an error that is NaN, from an Inf or NaN the back-end made, is
    over any budget)."""
    tracer = Tracer(backend, Numerics(mf), layers)
    with np.errstate(all="ignore"):             # a corrupted value may be Inf or NaN: reported
        Llama(mf, tracer).forward(ids)
    budgets = getattr(backend, "budgets", {})
    rows = []
    for key, row in tracer.rows.items():
        err = float(np.sqrt(row.pop("sq_err") / row.pop("sq_ref"))) if row["sq_ref"] else 0.0
        op = key.split(".", 2)[2]
        budget = budgets.get(op)
        rows.append({**row, "error": err, "budget": budget,          # NaN is over any budget
                     "over_budget": budget is not None and not err <= budget})
    return rows
