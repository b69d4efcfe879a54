"""Float64 references of the rDXE operations, written independently and naively, and the
stated bounds on how far the bit-exact model (:mod:`golden.rdxe.model`) may be from them
(docs/rdxe_models.md).
"""

from __future__ import annotations

import math

import numpy as np

from hdl.arith.format import FP32

from ..arith.float import to_float
from ..arith.func import EXP2_ERROR, RECIP_ERROR, RSQRT_ERROR
from ..arith.requant import requantize
from .model import RCFactor
from .params import DxtConfig, _mode, _params

__all__ = [
    "gemv_reference", "rmsnorm_gemv_reference", "softmax_pv_reference", "rmsnorm_error_bound",
    "softmax_error_bound", "mode_gap_bound",
]

_U = 2.0 ** -24                      # unit roundoff of fp32
_REF_SLACK = 2.0 ** -30              # float64 evaluation error allowance of the references


# --- float64 references and error bounds ----------------------------------------------------------


def gemv_reference(W, x, m, shift) -> np.ndarray:
    """Return the real GEMV result ``(W @ x) * m / 2**shift`` in float64 (before rounding)."""
    W = np.asarray(W, np.float64)
    x = np.asarray(x, np.float64)
    return (W @ x) * np.asarray(m, np.float64) / np.exp2(np.asarray(shift, np.float64))


def rmsnorm_gemv_reference(W_g, x, m, shift, eps_q, frac: int) -> np.ndarray:
    """Return ``W_g @ (x / sqrt(mean(x**2) + eps)) * 2**frac * m / 2**shift`` in float64, written
    plainly (``eps`` the value of the fp32 code ``eps_q``; an all-zero ``x`` with ``eps = 0``
    gives 0, the limit)."""
    x = np.asarray(x, np.float64)
    eps = float(to_float(np.uint32(eps_q), FP32))
    rms = np.sqrt(np.mean(x * x) + eps)
    normed = x / rms if rms > 0 else np.zeros_like(x)
    y = np.asarray(W_g, np.float64) @ normed
    return y * 2.0 ** frac * np.asarray(m, np.float64) / np.exp2(np.asarray(shift, np.float64))


def softmax_pv_reference(s, V, scale, m, shift, frac: int) -> np.ndarray:
    """Return ``softmax(s * c * ln 2) @ V * 2**frac * m / 2**shift`` in float64 (``c`` the value of
    the fp32 scale code), written plainly: the maximum subtracted, ``np.exp``, a sum and a
    division. ``s``: ``(T,)``, ``V``: ``(T, d)``."""
    c = float(to_float(np.uint32(scale), FP32)) * math.log(2.0)
    s = np.asarray(s, np.float64)
    w = np.exp((s - s.max()) * c)
    w = w / w.sum()
    y = w @ np.asarray(V, np.float64)
    return y * 2.0 ** frac * np.asarray(m, np.float64) / np.exp2(np.asarray(shift, np.float64))


def _k(m, shift) -> np.ndarray:
    return np.asarray(m, np.float64) / np.exp2(np.asarray(shift, np.float64))


def rmsnorm_error_bound(W_g, x, m, shift, eps_q, params: DxtConfig, *, mode: str = "fused"
                        ) -> np.ndarray:
    """Return the bound on ``|rmsnorm_gemv - clip(reference)|`` per output (float64, in output
    steps), derived in docs/rdxe_models.md::

        fused:      0.5 + k * (0.5 + |acc| * r * 2**F * rho)
        sequential: 0.5 + k * (sum_i |W_g[o, i]| * eps_i + |acc| * r * 2**F * rho)
        rho   = (1 - u)**-2 * (1 + RSQRT_ERROR) * (1 + 2**-b) - 1
        eps_i = max(0.5, |x_i| * r * 2**F * (1 + rho) - 127)

    with ``k = m / 2**shift``, ``acc = W_g @ x``, ``r = 1 / sqrt(mean(x**2) + eps)``, ``F =
    norm_frac``, ``b = rc_bits - 6``, ``u = 2**-24``, plus ``2**-30 * (1 + |y|)`` for the float64
    reference. Valid while the RC factor is neither saturated nor flushed (``rc * 2**F < 2**(b-1)``;
    always for a non-zero ``x`` with the defaults).
    """
    params = _params(params)
    mode = _mode(mode)
    W = np.asarray(W_g, np.float64)
    xf = np.asarray(x, np.float64)
    eps = float(to_float(np.uint32(eps_q), FP32))
    acc = np.abs(W @ xf)
    ms = np.mean(xf * xf) + eps
    r = 1.0 / math.sqrt(ms) if ms > 0 else 0.0          # acc = 0 whenever ms = 0
    F = 2.0 ** params.norm_frac
    rho = (1 - _U) ** -2 * (1 + RSQRT_ERROR) * (1 + 2.0 ** -params.rc_mant_bits) - 1
    k = _k(m, shift)
    rc_term = acc * r * F * rho
    if mode == "fused":
        inner = 0.5 + rc_term
    else:
        eps_i = np.maximum(0.5, np.abs(xf) * r * F * (1 + rho) - 127)
        inner = np.abs(W) @ eps_i + rc_term
    return 0.5 + k * inner + _REF_SLACK * (1 + k * acc * r * F)


def softmax_error_bound(s, V, scale, m, shift, params: DxtConfig, *, mode: str = "fused"
                        ) -> np.ndarray:
    """Return the bound on ``|softmax_pv - clip(reference)|`` per output channel (float64, in
    output steps) for one head (``s``: ``(T,)``, ``V``: ``(T, d)``), derived in
    docs/rdxe_models.md::

        e_t   = 2**(-c * (max - s_t))                           (exact weights, unnormalized)
        eta_t = 127 * e_t * (EXP2_ERROR + 1.01 * ln2 * u * c * (max - s_t)) + 127 * 2**-126
        D_t   = min(0.5, 127 * e_t + eta_t) + eta_t             (bound on |p_t - 127 e_t|;
                                                                0 where s_t = max: p_t = 127)
        P     = max(127, 127 * sum e_t - sum D_t)               (lower bound on sum p)
        W1    = 2 * sum D_t / P                                 (bound on sum |w_t - w*_t|)
        rho   = (1 + RECIP_ERROR) * (1 + 2**-b) - 1
        fused:      0.5 + k * (0.5 + 2**F * (Vabs * rho + W1 * (Vmax - Vmin) / 2))
        sequential: 0.5 + k * (sum_t q_t |V_t| + 2**F * (Vabs * rho + W1 * (Vmax - Vmin) / 2))
        q_t   = max(0.5, min(127, 127 e_t + D_t) * 2**F / P * (1 + rho) - 127)

    per channel: ``Vabs = max |V_t|``, ``Vmax``, ``Vmin`` over tokens; ``k = m / 2**shift``, ``F =
    prob_frac``; plus ``2**-30 * (1 + |y|)`` for the float64 reference.
    """
    params = _params(params)
    mode = _mode(mode)
    s = np.asarray(s, np.float64)
    Vf = np.asarray(V, np.float64)
    c = float(to_float(np.uint32(scale), FP32))
    x = c * (s.max() - s)
    e = np.exp2(-x)
    eta = 127 * e * (EXP2_ERROR + 1.01 * math.log(2) * _U * x) + 127 * 2.0 ** -126
    D = np.where(x == 0, 0.0, np.minimum(0.5, 127 * e + eta) + eta)   # exp2(+0) = 1: p = 127
    P = max(127.0, 127 * e.sum() - D.sum())
    W1 = 2 * D.sum() / P
    rho = (1 + RECIP_ERROR) * (1 + 2.0 ** -params.rc_mant_bits) - 1
    F = 2.0 ** params.prob_frac
    vabs = np.abs(Vf).max(axis=0)
    spread = (Vf.max(axis=0) - Vf.min(axis=0)) / 2
    k = _k(m, shift)
    common = F * (vabs * rho + W1 * spread)
    if mode == "fused":
        inner = 0.5 + common
    else:
        q = np.maximum(0.5, np.minimum(127, 127 * e + D) * F / P * (1 + rho) - 127)
        inner = q @ np.abs(Vf) + common
    return 0.5 + k * inner + _REF_SLACK * (1 + k * F * vabs)


def mode_gap_bound(W, a, rc: RCFactor, m, shift, params: DxtConfig) -> np.ndarray:
    """Return the bound on ``|fused - sequential|`` per output for weights ``W`` (``(M, K)``:
    ``W_g`` for RMSNorm, ``V.T`` for softmax), activations ``a`` (``x``, or ``p``) and the RC
    factor both modes share::

        1 + k * (0.5 + sum_i |W[o, i]| * |a_n,i - a_i * R|),   R = m_rc * 2**-shift_rc

    with ``a_n = clamp(RNE(a * R))`` the sequential mode's INT8 activations and ``k = m /
    2**shift``. The modes agree bit for bit when ``R`` is an integer and no ``a_i * R`` leaves
    the INT8 range (then every ``a_n,i = a_i * R`` and the RCU's ``acc * R`` is exact).
    """
    params = _params(params)
    R = float(rc.value)
    a = np.asarray(a, np.int64)
    a_n = requantize(a, rc.m, rc.shift, out_bits=8, clamp=params.clamp)
    err = np.abs(a_n - a.astype(np.float64) * R)            # a * R is exact in float64
    return 1 + _k(m, shift) * (0.5 + np.abs(np.asarray(W, np.float64)) @ err)
