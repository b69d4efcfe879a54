"""The in-flash ``w4a16`` GEMV of many input vectors at once, bit-identical to
:func:`golden.inflash.model.gemv` called on each vector: the fast path that lets a real model's
prefill run through the PE's arithmetic (issue 40).

Why it exists: :func:`~golden.inflash.model.gemv` spends about 110 ns per weight element (each
``fmul``/``fadd`` goes through float64 and back with flush and NaN checks), so 256 tokens of
SmolLM2-135M (27 G weight-element products) would take about 50 minutes. This module computes the
same operations in the same order (the module notes of :mod:`golden.inflash`)::

    D[r, j] = tree(int_to_float(q[r, k]) * x[k] for k in group j)
    X[j]    = tree(fconvert(x[k]) for k in group j)
    t[r, j] = s[r, j] * D[r, j] + o[r, j] * X[j]
    y[r]    = tree(t[r, j] for j in 0..G-1)

with NumPy float32 arithmetic instead of the golden ``fmul``/``fadd``, which gives the same bits
for these operands:

* inputs are read by the golden :func:`~golden.arith.float.to_float` (subnormal codes flushed to
  zero of the same sign) and are exact in float32;
* a product ``q * x`` (4-bit by 11-bit significands) is exact in float32, as in the golden;
  ``s * D`` and ``o * X`` are the exact product rounded once to nearest even, which is what IEEE
  float32 multiplication does; every sum is one IEEE float32 addition (round to nearest even,
  ``x + (-x) = +0``, ``-0 + -0 = -0``), the golden ``fadd``'s definition;
* no value can be subnormal: every ``D`` and ``X`` is a multiple of ``2**-24`` (fp16 codes times
  integers), every ``t`` a multiple of ``2**-48``, far above float32's ``2**-126``, so the
  golden's flush of subnormal results never fires; with finite fp16 inputs nothing overflows
  (``|y| < 2**42``), so no infinity or NaN appears for the golden to canonicalize;
* the trees are :func:`golden.arith.idot.pairwise_reduce`'s order: the group tree runs on lanes
  stored in bit-reversed order, where pair ``(2k, 2k + 1)`` of a level sits at positions ``p`` and
  ``p + n/2`` (addition commutes bit for bit), and the tree over groups calls
  ``pairwise_reduce`` itself.

Vectors holding an infinity or NaN code, and matrices whose scales or offsets do, go to
:func:`~golden.inflash.model.gemv` one vector at a time. ``tests/test_llm_kvnand.py`` checks the
bits against :func:`~golden.inflash.model.gemv` on SmolLM2's real tensors and activations.
"""

from __future__ import annotations

import numpy as np

from hdl.arith.format import FP16

from ..arith.float import int_to_float, to_float
from ..arith.idot import pairwise_reduce
from .model import gemv
from .params import _array
from .weights import Weights

__all__ = ["W4A16Batch"]

_BLOCK = 1 << 21                     # products per chunk: 8 MB of float32, cache-sized


def _bit_reversal(n: int) -> np.ndarray:
    """Positions ``p`` -> lane ``rev(p)`` for ``n`` a power of two (the tree's halving layout)."""
    bits = n.bit_length() - 1
    lanes = np.arange(n)
    rev = np.zeros(n, np.int64)
    for b in range(bits):
        rev |= ((lanes >> b) & 1) << (bits - 1 - b)
    return rev


def _lanes_first(values: np.ndarray, group: int, order: np.ndarray) -> np.ndarray:
    """``(n, cols)`` -> ``(group, cols / group, n)``: lane axis first, in tree (bit-reversed)
    order, so that each tree level adds two contiguous halves."""
    n, cols = values.shape
    v = values.reshape(n, cols // group, group)[:, :, order]
    return np.ascontiguousarray(v.transpose(2, 1, 0))


def _halving_tree(level: np.ndarray) -> np.ndarray:
    """Reduce axis 0 (a power of two, bit-reversed lanes) to one: float32 sums of halves."""
    n = level.shape[0]
    while n > 1:
        n //= 2
        level = np.add(level[:n], level[n:2 * n])
    return level[0]


class W4A16Batch:
    """A ``w4a16`` :class:`~golden.inflash.weights.Weights` prepared for :meth:`gemv` on many
    vectors (module notes).

    Parameters
    ----------
    weights : Weights
        A ``w4a16`` matrix.

    Raises
    ------
    TypeError, ValueError
        Not a :class:`Weights`, or a mode other than ``w4a16``.
    """

    def __init__(self, weights: Weights):
        if not isinstance(weights, Weights):
            raise TypeError(f"Weights must be a Weights object, not {type(weights).__name__}")
        if weights.mode != "w4a16":
            raise ValueError(f"Precision mode must be w4a16 for the batched GEMV, not "
                             f"{weights.mode!r}")
        self.weights = w = weights
        g = w.group_size
        self._order = _bit_reversal(g)
        # The golden's view of every operand, once, all exact in float32: scales and offsets
        # through to_float (subnormals flushed); the int4 codes through int_to_float are the
        # integers 0..15 themselves (checked), so the lanes keep the uint8 codes and float32
        # multiplication promotes them exactly.
        table = to_float(int_to_float(np.arange(16), 5, FP16), FP16)
        if not np.array_equal(table, np.arange(16)):
            raise RuntimeError("int_to_float no longer maps int4 codes 0..15 to themselves")
        self._q = _lanes_first(w.codes, g, self._order)               # (g, G, rows) uint8
        self._s = to_float(w.scales, FP16).astype(np.float32).T.copy()   # (G, rows)
        self._o = to_float(w.offsets, FP16).astype(np.float32).T.copy()
        self._finite = bool(np.isfinite(self._s).all() and np.isfinite(self._o).all())

    def gemv(self, xs) -> np.ndarray:
        """Return ``gemv(weights, xs[t])`` for every ``t``: fp32 codes ``(T, rows)`` (uint32).

        ``xs``: fp16 codes ``(T, cols)``. A ``ValueError`` names a bad shape or code range.
        """
        w = self.weights
        xs = _array(xs, "Input vectors", 2, "(vectors, cols)", "fp16")
        if xs.shape[1] != w.cols:
            raise ValueError(f"Input vectors must have {w.cols} elements (the column count), "
                             f"not {xs.shape[1]}")
        xf = to_float(xs, FP16)
        finite = np.isfinite(xf).all(axis=1) & self._finite
        out = np.empty((xs.shape[0], w.rows), np.uint32)
        for t in np.flatnonzero(~finite):              # rare: the golden itself, vector by vector
            out[t] = gemv(w, xs[t])
        idx = np.flatnonzero(finite)
        if idx.size:
            out[idx] = self._fast(xf[idx].astype(np.float32)).view(np.uint32)
        return out

    def _fast(self, xf: np.ndarray) -> np.ndarray:
        """float32 ``(T, rows)`` results for finite float32 inputs ``(T, cols)``."""
        w, g = self.weights, self.weights.group_size
        x = _lanes_first(xf, g, self._order)                         # (g, G, T)
        big_x = _halving_tree(x)                                     # (G, T)
        n_t = x.shape[2]
        out = np.empty((n_t, w.rows), np.float32)
        # Chunks of at most _BLOCK products: up to 64 vectors, then as many rows as fit.
        step_t = min(n_t, 64)
        step_r = max(1, min(w.rows, _BLOCK // (w.cols * step_t)))
        for r in range(0, w.rows, step_r):
            q = self._q[:, :, None, r:r + step_r]                     # (g, G, 1, R)
            s, o = self._s[:, None, r:r + step_r], self._o[:, None, r:r + step_r]
            for t in range(0, n_t, step_t):
                d = _halving_tree(x[:, :, t:t + step_t, None] * q)  # (G, Tc, R)
                terms = np.add(s * d, o * big_x[:, t:t + step_t, None])
                out[t:t + step_t, r:r + step_r] = pairwise_reduce(terms, np.add, axis=0)
        return out
