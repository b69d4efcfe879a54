"""Float64 (or exact integer) references of the in-flash GEMV, Logit and Attend, written
independently, and the stated bounds on how far the bit-exact model
(:mod:`golden.inflash.model`) may be from them (docs/inflash_models.md).
"""

from __future__ import annotations

import numpy as np

from hdl.arith.format import FP16, FP32, FloatFormat

from .model import _operands, _x
from .params import _FLOAT, _KV_FLOAT, _values
from .weights import Weights

__all__ = [
    "gemv_reference", "gemv_bound", "logit_reference", "attend_reference", "logit_bound",
    "attend_bound",
]

_U = 2.0 ** -24                      # unit roundoff of fp32
_TINY = 2.0 ** FP32.emin


def _subnormal(values: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """True where a nonzero value is below the smallest normal of ``fmt`` (the units flush it)."""
    return (values != 0) & (np.abs(values) < 2.0 ** fmt.emin)


def _gamma(n: int) -> float:
    return n * _U / (1 - n * _U)


def _depth(n: int) -> int:
    """Levels of the pairwise tree over ``n`` values: ``ceil(log2 n)``."""
    return (n - 1).bit_length()


def _dequantized(w: Weights) -> np.ndarray:
    """Float64 weights ``s * q + o`` of a w4a16 matrix (true values, no flush)."""
    g = w.group_size
    s = np.repeat(_values(w.scales, FP16), g, axis=1)
    o = np.repeat(_values(w.offsets, FP16), g, axis=1)
    return s * w.codes.astype(np.float64) + o


def gemv_reference(weights: Weights, x) -> np.ndarray:
    """Return ``W x`` computed independently: float64 (float modes) or exact Python integers
    (w8a8, an object array).

    Float64 values of the codes are read with ``numpy.float16`` / ``ml_dtypes.bfloat16``
    (subnormals kept, no flush-to-zero); w4a16 weights are ``s * q + o`` in float64; one matrix
    product with an explicit dtype.
    """
    xv = _x(x, weights)
    w = weights
    if w.mode == "w8a8":
        return w.codes.astype(object) @ xv.astype(object)
    if w.mode == "w4a16":
        return _dequantized(w) @ _values(xv, FP16)
    fmt = _FLOAT[w.mode]
    return _values(w.codes, fmt) @ _values(xv, fmt)


def gemv_bound(weights: Weights, x) -> np.ndarray:
    """Return the bound on ``|gemv - gemv_reference|`` per row (float64, shape ``(rows,)``).

    fp16, bf16 (``t = ceil(log2 cols)``, ``A = sum_k |W_rk x_k|``)::

        gamma(t) * A + (1 + gamma(t)) * (Z + 2 * cols * 2**-126)

    w4a16 (``t = log2 g + 2 + ceil(log2 G)``,
    ``B = sum_j (|s_rj| sum_{k in j} |q_rk x_k| + |o_rj| sum_{k in j} |x_k|)``)::

        gamma(t) * B + (1 + gamma(t)) * (Z + (cols + 3 G) * 2**-126)

    with ``gamma(n) = n u / (1 - n u)``, ``u = 2**-24``, and ``Z`` what flush-to-zero removes:
    the terms whose operand (a weight, ``x_k``, a scale or an offset) is a subnormal of its input
    format. w8a8: 0 (exact). Valid when no product or sum overflows. Derivation in
    docs/inflash_models.md, section 10.
    """
    xv = _x(x, weights)
    w = weights
    if w.mode == "w8a8":
        return np.zeros(w.rows)
    if w.mode in ("fp16", "bf16"):
        fmt = _FLOAT[w.mode]
        wv, xf = _values(w.codes, fmt), _values(xv, fmt)
        terms = np.abs(wv) * np.abs(xf)[None, :]
        flushed = (_subnormal(wv, fmt) | _subnormal(xf, fmt)[None, :]) * terms
        g = _gamma(_depth(w.cols))
        return g * terms.sum(1) + (1 + g) * (flushed.sum(1) + 2 * w.cols * _TINY)
    g = w.group_size
    xf = _values(xv, FP16)
    s, o = _values(w.scales, FP16), _values(w.offsets, FP16)
    qx = (w.codes.astype(np.float64) * np.abs(xf)[None, :]).reshape(w.rows, w.groups, g).sum(2)
    ax = np.abs(xf).reshape(w.groups, g).sum(1)
    mass = (np.abs(s) * qx + np.abs(o) * ax[None, :]).sum(1)
    sub_x = _subnormal(xf, FP16)
    wabs = np.abs(_dequantized(w))
    flushed = (wabs * (np.abs(xf) * sub_x)[None, :]).sum(1)
    flushed += (_subnormal(s, FP16) * np.abs(s) * qx).sum(1)
    flushed += (_subnormal(o, FP16) * np.abs(o) * ax[None, :]).sum(1)
    gam = _gamma(_depth(g) + 2 + _depth(w.groups))
    return gam * mass + (1 + gam) * (flushed + (w.cols + 3 * w.groups) * _TINY)


def logit_reference(q, keys, kv_format: str = "fp16") -> np.ndarray:
    """``q @ keys.T`` in float64 (true values, no flush) or exact Python integers (int8)."""
    kind, q, keys = _operands("logit", q, keys, kv_format)
    if kind == "int8":
        return q.astype(object) @ keys.T.astype(object)
    fmt = _KV_FLOAT[kind]
    return _values(q, fmt) @ _values(keys, fmt).T


def attend_reference(p, values, kv_format: str = "fp16") -> np.ndarray:
    """``p @ values`` in float64 (true values, no flush) or exact Python integers (int8)."""
    kind, p, values = _operands("attend", p, values, kv_format)
    if kind == "int8":
        return p.astype(object) @ values.astype(object)
    fmt = _KV_FLOAT[kind]
    return _values(p, fmt) @ _values(values, fmt)


def _product_bound(a: np.ndarray, b: np.ndarray, fmt: FloatFormat, depth: int, n: int
                   ) -> np.ndarray:
    """Bound of a sum of ``n`` exact products ``a[..., k] * b[..., k]`` over ``depth`` fp32
    roundings per term, with flush-to-zero of subnormal operands, products and sums."""
    terms = np.abs(a) * np.abs(b)
    flushed = ((_subnormal(a, fmt) | _subnormal(b, fmt)) * terms).sum(-1)
    g = _gamma(depth)
    return g * terms.sum(-1) + (1 + g) * (flushed + 2 * n * _TINY)


def logit_bound(q, keys, kv_format: str = "fp16") -> np.ndarray:
    """Bound on ``|logit - logit_reference|`` (``(G, T)``): the GEMV bound with ``cols = d``,
    ``gamma(ceil(log2 d)) * sum_i |q_i k_i| + ...``; 0 for int8."""
    kind, q, keys = _operands("logit", q, keys, kv_format)
    if kind == "int8":
        return np.zeros((q.shape[0], keys.shape[0]))
    fmt = _KV_FLOAT[kind]
    d = q.shape[1]
    return _product_bound(_values(q, fmt)[:, None, :], _values(keys, fmt)[None, :, :], fmt,
                          _depth(d), d)


def attend_bound(p, values, kv_format: str = "fp16") -> np.ndarray:
    """Bound on ``|attend - attend_reference|`` (``(G, d)``): a sequential sum of ``T`` exact
    products, ``gamma(T - 1) * sum_t |p_t v_te| + ...``; 0 for int8."""
    kind, p, values = _operands("attend", p, values, kv_format)
    if kind == "int8":
        return np.zeros((p.shape[0], values.shape[1]))
    fmt = _KV_FLOAT[kind]
    t = p.shape[1]
    return _product_bound(_values(p, fmt)[:, None, :], _values(values, fmt).T[None, :, :], fmt,
                          t - 1, t)
