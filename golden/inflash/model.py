"""Bit-exact model of the in-flash PE: GEMV in the four precision modes, and Logit and Attend on
KV entries and on KV pages.
"""

from __future__ import annotations

import numpy as np

from hdl.arith.format import FP16, FP32
from hdl.inflash.spec import MAX_GROUP, MIN_GROUP

from ..arith.float import fadd, fconvert, fmul, int_to_float
from ..arith.idot import dot, pairwise_reduce
from .kv import KVLayout, kv_read
from .params import K, KV_FORMATS, V, _FLOAT, _KV_FLOAT, _array, _choice, _fmacs, _pow2
from .weights import Weights

__all__ = [
    "group_sums", "gemv", "logit", "attend", "logit_pages", "attend_pages",
]

_NEG_ZERO = np.uint32(0x80000000)
_BLOCK = 1 << 20                     # products per vectorized block (bounds memory)


def _tree32(values: np.ndarray) -> np.ndarray:
    """Pairwise fp32 tree over the last axis (the order of :mod:`hdl.arith.tree`)."""
    return pairwise_reduce(values, lambda a, b: fadd(a, b, FP32))


# --- bit-exact GEMV -------------------------------------------------------------------------------


def _x(x, weights: Weights) -> np.ndarray:
    kind = {"fp16": "fp16", "bf16": "bf16", "w8a8": "int8", "w4a16": "fp16"}[weights.mode]
    arr = _array(x, "Input vector", 1, "(cols,)", kind)
    if arr.shape[0] != weights.cols:
        raise ValueError(f"Input vector must have {weights.cols} elements (the column count), "
                         f"not {arr.shape[0]}")
    return arr


def group_sums(x, group_size: int) -> np.ndarray:
    """Return ``X[j] = tree(fconvert(x[k], fp16, fp32) for k in group j)`` (fp32 codes).

    The w4a16 offset term; computed once per GEMV when ``x`` is broadcast. The same bits come out
    of a lane tree with weights ``1.0``, since ``fmul(1.0, x)`` equals ``fconvert(x)`` for every
    fp16 code. ``x``: fp16 codes whose length is a multiple of ``group_size``.
    """
    group = _pow2(group_size, "Group size", MIN_GROUP, MAX_GROUP)
    arr = _array(x, "Input vector", 1, "(cols,)", "fp16")
    if arr.shape[0] % group:
        raise ValueError(f"Input vector length must be a multiple of the group size {group}, "
                         f"not {arr.shape[0]}")
    return _tree32(fconvert(arr, FP16, FP32).reshape(-1, group))


def gemv(weights: Weights, x, *, fmacs: int | None = None) -> np.ndarray:
    """Compute ``y = W x`` bit for bit as the PE does, in the order of the module notes.

    Parameters
    ----------
    weights : Weights
        The matrix and its mode.
    x : array, shape ``(cols,)``
        fp16 codes (fp16, w4a16), bf16 codes (bf16) or int8 values (w8a8).
    fmacs : int, optional
        FMAC count ``F``, a power of two from 1 to 16. Checked only: no bit depends on it.

    Returns
    -------
    np.ndarray
        ``(rows,)``: fp32 codes (``np.uint32``) in the float modes, ``np.int32`` in w8a8.

    Raises
    ------
    TypeError, ValueError
        A bad ``x`` (type, range, length) or FMAC count; each message names the parameter, the
        allowed range and the value given.
    """
    if not isinstance(weights, Weights):
        raise TypeError(f"Weights must be a Weights object, not {type(weights).__name__}")
    xv = _x(x, weights)
    _fmacs(fmacs)
    w = weights
    if w.mode == "w8a8":
        a, b = np.broadcast_arrays(w.codes, xv[None, :])
        return dot(a, b).astype(np.int32)
    fmt = _FLOAT[w.mode]
    out = np.empty(w.rows, np.uint32)
    step = max(1, _BLOCK // w.cols)
    if w.mode in ("fp16", "bf16"):
        for r in range(0, w.rows, step):
            products = fmul(w.codes[r:r + step], xv[None, :], fmt, fmt, FP32)
            out[r:r + step] = _tree32(products)
        return out
    g = w.group_size
    big_x = group_sums(xv, g)
    qf = int_to_float(w.codes, 5, FP16)           # unsigned 0..15 as 5-bit two's complement
    for r in range(0, w.rows, step):
        products = fmul(qf[r:r + step], xv[None, :], FP16, FP16, FP32)
        d = _tree32(products.reshape(-1, w.groups, g))
        t = fadd(fmul(w.scales[r:r + step], d, FP16, FP32, FP32),
                 fmul(w.offsets[r:r + step], big_x[None, :], FP16, FP32, FP32), FP32)
        out[r:r + step] = _tree32(t)
    return out


# --- Logit and Attend -----------------------------------------------------------------------------


def _kv_kind(kv_format: str) -> str:
    return _choice(kv_format, "KV format", KV_FORMATS)


#: Logit's and Attend's operands ``a``, ``b``: names and shapes, and the axis of ``b`` that
#: ``a``'s second (``d`` for Logit, ``T`` for Attend) must match.
_OPERANDS = {
    "logit": ("Query", "(heads, head dimension)", "Keys", "(tokens, head dimension)", 1,
              "Key head dimension must be {} (the query's), not {}"),
    "attend": ("Attention weights", "(heads, tokens)", "Values", "(tokens, head dimension)", 0,
               "Values must have {} tokens (the attention weights'), not {}"),
}


def _operands(op: str, a, b, kv_format: str) -> tuple[str, np.ndarray, np.ndarray]:
    """Check the operands of ``op`` (``"logit"``: ``q``, ``keys``; ``"attend"``: ``p``,
    ``values``); return the KV kind and the two arrays."""
    a_name, a_shape, b_name, b_shape, axis, mismatch = _OPERANDS[op]
    kind = _kv_kind(kv_format)
    a = _array(a, a_name, 2, a_shape, kind)
    b = _array(b, b_name, 2, b_shape, kind)
    if b.shape[axis] != a.shape[1]:
        raise ValueError(mismatch.format(a.shape[1], b.shape[axis]))
    return kind, a, b


def _int8_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact int32 dot products of every row of ``a`` with every row of ``b``: ``(A, B)``."""
    x, y = np.broadcast_arrays(a[:, None, :], b[None, :, :])
    return dot(x, y).astype(np.int32)


def logit(q, keys, kv_format: str = "fp16", *, fmacs: int | None = None) -> np.ndarray:
    """Return the scores ``q[h] . k_t`` of ``G`` query heads and ``T`` tokens, bit for bit.

    Float formats: ``tree(fmul(q[h, i], k[t, i]) for i in 0..d-1)``, products 16 x 16 -> fp32,
    the pairwise fp32 tree (the GEMV order with ``W = keys``); fp32 codes ``(G, T)``. int8: exact
    ``np.int32``. No ``1 / sqrt(d)`` scale (the NPU applies it with the softmax). ``fmacs`` is
    checked only.
    """
    kind, q, keys = _operands("logit", q, keys, kv_format)
    _fmacs(fmacs)
    heads, d = q.shape
    if kind == "int8":
        return _int8_rows(q, keys)
    fmt = _KV_FLOAT[kind]
    out = np.empty((heads, keys.shape[0]), np.uint32)
    step = max(1, _BLOCK // (heads * d))
    for t in range(0, keys.shape[0], step):
        products = fmul(q[:, None, :], keys[None, t:t + step, :], fmt, fmt, FP32)
        out[:, t:t + step] = _tree32(products)
    return out


def attend(p, values, kv_format: str = "fp16", *, fmacs: int | None = None) -> np.ndarray:
    """Return ``sum_t p[h, t] * v_t`` for ``G`` heads, bit for bit; ``(G, d)``.

    Float formats: every accumulator starts at ``-0`` and takes, for ``t = 0 .. T-1`` in token
    order, ``y = fadd(fmul(p[h, t], v[t, e]), y)`` (products 16 x 16 -> fp32, exact; fp32 sums);
    fp32 codes. int8: ``p`` int8 values, exact ``np.int32``. ``fmacs`` is checked only.
    """
    kind, p, values = _operands("attend", p, values, kv_format)
    _fmacs(fmacs)
    if kind == "int8":
        return _int8_rows(p, values.T)
    fmt = _KV_FLOAT[kind]
    heads, d = p.shape[0], values.shape[1]
    acc = np.full((heads, d), _NEG_ZERO, np.uint32)
    step = max(1, _BLOCK // (heads * d))
    for t0 in range(0, values.shape[0], step):
        products = fmul(p[:, t0:t0 + step, None], values[None, t0:t0 + step, :], fmt, fmt, FP32)
        for j in range(products.shape[1]):
            acc = fadd(products[:, j], acc, FP32)
    return acc


def logit_pages(layout: KVLayout, pages, q, layer: int, head: int, seq_len: int, *,
                fmacs: int | None = None) -> np.ndarray:
    """:func:`logit` on the K pages of one (layer, KV head) for tokens ``0 .. seq_len - 1``."""
    keys = kv_read(layout, pages, layer, head, K, seq_len)
    return logit(q, keys, layout.kv_format, fmacs=fmacs)


def attend_pages(layout: KVLayout, pages, p, layer: int, head: int, seq_len: int, *,
                 fmacs: int | None = None) -> np.ndarray:
    """:func:`attend` on the V pages of one (layer, KV head) for tokens ``0 .. seq_len - 1``."""
    values = kv_read(layout, pages, layer, head, V, seq_len)
    return attend(p, values, layout.kv_format, fmacs=fmacs)
