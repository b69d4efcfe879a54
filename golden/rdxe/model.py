"""Bit-exact model of the rDXE tile: the VAC accumulator, PPU, RC factor and RCU, the plain GEMV,
RMSNorm and softmax fused into it (VRC) or run sequentially, Q.K^T and decode attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hdl.arith.format import FP32
from hdl.validate import integer

from ..arith.float import fmac, fmul, from_float, int_to_float, to_float
from ..arith.func import exp2, reciprocal, rsqrt
from ..arith.idot import dot
from ..arith.requant import requantize
from .kv import KVImage, kv_groups
from .params import (MAX_INPUTS, MAX_TOKENS, P_ONE, SHIFT_MAX, _INT8, DxtConfig, VacConfig,
                     _fp32_code, _int8, _ints, _mode, _params, _ppu_args, _ring, _vac_params)

__all__ = [
    "RCFactor", "RmsNormTrace", "SoftmaxTrace", "accumulate", "ppu", "to_rc", "rcu",
    "wmem_image", "gemv", "ppu_code", "eps_code", "rms_rc", "rmsnorm_gemv", "rmsnorm_gemv_trace",
    "log2_scale", "softmax_activations", "softmax_rc", "softmax_pv", "softmax_pv_trace",
    "qk_scores", "attention", "attention_cached",
]


# --- shared steps: VAC accumulator, PPU, RC factor, RCU -------------------------------------------


def accumulate(W, x) -> np.ndarray:
    """Return the VAC accumulators ``W @ x`` (int64, exact; every value fits INT32).

    ``W``: ``(M, K)`` INT8 codes, ``x``: ``(K,)`` INT8 codes, ``K <= 2**16``, or ``(T, K)``: the
    accumulators of ``T`` tokens, ``(T, M)``. The lane-parallel integer sum is exact, so the
    chunking into ``lanes`` and the tree order do not matter; many tokens are one float64 matrix
    product, exact too: every product (``|w x| <= 2**14``) and partial sum (``<= 2**30``) is an
    integer below ``2**53``.
    """
    W = _int8(W, "Weights", 2, "(outputs, inputs)")
    tokens = np.ndim(x) == 2
    x = _int8(x, "Activations", 2 if tokens else 1, "(tokens, inputs)" if tokens else "(inputs,)")
    if W.shape[1] != x.shape[-1]:
        raise ValueError(f"Activations must have {W.shape[1]} elements (the weights' inputs), "
                         f"not {x.shape[-1]}")
    integer(x.shape[-1], "Input length", 1, MAX_INPUTS)
    if tokens:
        return (x.astype(np.float64) @ W.astype(np.float64).T).astype(np.int64)
    return dot(W, np.broadcast_to(x, W.shape))


def ppu(acc, m, shift, params: VacConfig) -> np.ndarray:
    """Requantize accumulators to INT8: ``clamp(RNE(acc * m / 2**shift))`` (the shared
    requantizer with ``mult_bits`` signed multipliers and the ``clamp`` range)."""
    params = _vac_params(params)
    return requantize(acc, m, shift, out_bits=8, clamp=params.clamp)


@dataclass(frozen=True)
class RCFactor:
    """An RC factor as broadcast to the RCUs: the requantizer operand pair ``(m, shift)``.

    Attributes
    ----------
    m : np.ndarray
        Unsigned significands of ``rc_bits - 6`` bits: ``2**(b-1) <= m < 2**b``, or 0 (flushed),
        or ``2**b - 1`` (saturated). int64, one per row (heads) or a scalar array.
    shift : np.ndarray
        Right shifts, 0 to 63 (int64, same shape).
    """

    m: np.ndarray
    shift: np.ndarray

    @property
    def value(self) -> np.ndarray:
        """``m * 2**-shift`` (float64, exact): the factor times ``2**F``."""
        return np.ldexp(self.m.astype(np.float64), (-self.shift).astype(np.int32))


def _significands(bits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split fp32 codes of non-negative values into ``(value, sig, e)``: ``value = sig * 2**(e -
    23)`` with ``2**23 <= sig < 2**24`` where the value is positive and finite (sig = 0 else)."""
    value = to_float(np.asarray(bits, dtype=np.uint32), FP32)
    positive = np.isfinite(value) & (value > 0)
    mant, ex = np.frexp(np.where(positive, value, 1.0))
    sig = np.where(positive, np.ldexp(mant, FP32.precision), 0).astype(np.int64)
    return value, sig, ex.astype(np.int64) - 1


def to_rc(bits, frac: int, params: VacConfig) -> RCFactor:
    """Convert fp32 factors to RC factors ``(m, shift)`` with ``m * 2**-shift ~ rc * 2**frac``.

    The 24-bit fp32 significand is rounded half to even to ``b = rc_bits - 6`` bits by the shared
    requantizer (``requantize(sig, 1, 24 - b)``); a carry to ``2**b`` renormalizes to
    ``2**(b-1)`` with the exponent one up. With ``rc = sig * 2**(e - 23)`` the shift is
    ``(b - 1) - e - frac``. Out of range: a shift below 0 (or ``rc = +inf``) saturates to
    ``(2**b - 1, 0)``; a shift above 63 (or ``rc = +0``) flushes to ``(0, 63)``, which gives the
    same RCU result as the unbounded shift for every ``|acc| < 2**(63 - b)``.

    Raises
    ------
    ValueError
        A negative or NaN factor (the VE never produces one).
    """
    params = _vac_params(params)
    frac = integer(frac, "RC fraction bits", 0, 30)
    value, sig, e = _significands(bits)
    if np.any(np.isnan(value) | (value < 0)):
        raise ValueError("RC factor must be a non-negative fp32 value, not "
                         f"{value[np.isnan(value) | (value < 0)].flat[0]}")
    b = params.rc_mant_bits
    m = requantize(sig, 1, FP32.precision - b, out_bits=b + 2, clamp="full")
    carry = m == 1 << b
    m = np.where(carry, 1 << (b - 1), m)
    shift = (b - 1) - (e + carry) - frac
    big = np.isinf(value) | ((sig > 0) & (shift < 0))
    tiny = (sig == 0) & ~np.isinf(value) | ((sig > 0) & (shift > SHIFT_MAX))
    m = np.where(big, (1 << b) - 1, np.where(tiny, 0, m)).astype(np.int64)
    shift = np.where(big, 0, np.where(tiny, SHIFT_MAX, shift)).astype(np.int64)
    return RCFactor(m, shift)


def rcu(acc, rc: RCFactor) -> np.ndarray:
    """Recompute: ``clamp32(RNE(acc * m / 2**shift))`` (a shared requantizer with a 32-bit
    input, unsigned multiplier and 32-bit 'full' output). ``rc`` broadcasts against ``acc``."""
    return requantize(acc, rc.m, rc.shift, out_bits=32, clamp="full")


def _activation_quantize(bits) -> np.ndarray:
    """Return ``RNE(127 * e)`` for fp32 codes ``e`` in [0, 1]: ``requantize(sig, 127, 23 - e)``
    (the shift capped at 63 gives the same 0 as the exact rounding for every e < 2**-40)."""
    _, sig, e = _significands(bits)
    shift = np.minimum(FP32.man_bits - e, SHIFT_MAX)
    return requantize(sig, P_ONE, shift, out_bits=8, clamp="symmetric")


# --- plain GEMV ----------------------------------------------------------------------------------


def _wmem_rows(shape: tuple[int, int], params: VacConfig, vacs: int) -> tuple[int, int]:
    """Return ``(chunks, passes)`` of a GEMV of ``shape`` on ``vacs`` VACs, checking that it fits
    the WMEM."""
    M, K = shape
    chunks, passes = -(-K // params.lanes), -(-M // vacs)
    if passes * chunks > params.wmem_depth:
        raise ValueError(f"GEMV needs {passes * chunks} WMEM rows per VAC ({passes} outputs x "
                         f"{chunks} chunks), more than the WMEM depth {params.wmem_depth}")
    return chunks, passes


def _tile_gemv(shape: tuple[int, int], params: DxtConfig) -> None:
    """Check that a GEMV of ``shape`` runs on the tile: its weights fit every VAC's WMEM and its
    input the token buffer (``params.chunks`` chunks of ``lanes``, which the sequencer checks)."""
    chunks, _ = _wmem_rows(shape, params, params.vacs)
    if chunks > params.chunks:
        raise ValueError(f"GEMV input of {shape[1]} needs {chunks} token-buffer chunks, more than "
                         f"the tile's {params.chunks} ({params.lanes} lanes each; max_inputs "
                         f"{params.max_inputs})")


def wmem_image(W, params: DxtConfig | VacConfig, vacs: int | None = None) -> np.ndarray:
    """Return every VAC's WMEM image for weights ``W`` (``(M, K)`` INT8), shape ``(N,
    wmem_depth, lanes)`` int8.

    Output ``o`` runs on VAC ``o mod N`` in pass ``p = o // N``; its chunk ``j`` (inputs ``j*lanes
    .. j*lanes + lanes - 1``, zero-padded past ``K``) is row ``p * C + j`` with ``C = ceil(K /
    lanes)``. Rows past ``ceil(M / N) * C`` are zero. ``N`` is a ``DxtConfig``'s ``vacs``, or
    ``vacs`` (1 to 64) with a ``VacConfig``: a ring of that many VACs.

    Raises
    ------
    TypeError, ValueError
        Bad parameters or weights; the GEMV needs more rows per VAC than ``wmem_depth``.
    """
    params, N = _ring(params, vacs)
    W = _int8(W, "Weights", 2, "(outputs, inputs)")
    chunks, passes = _wmem_rows(W.shape, params, N)
    M, K = W.shape
    L = params.lanes
    padded = np.zeros((passes * N, chunks * L), np.int8)
    padded[:M, :K] = W
    image = np.zeros((N, params.wmem_depth, L), np.int8)
    image[:, :passes * chunks] = padded.reshape(passes, N, chunks, L).transpose(1, 0, 2, 3) \
        .reshape(N, passes * chunks, L)
    return image


def gemv(W, x, m, shift, params: DxtConfig) -> np.ndarray:
    """Compute a plain INT8 GEMV bit for bit: ``out[o] = PPU(sum_i W[o, i] * x[i])``.

    Parameters
    ----------
    W : array of int, shape ``(M, K)``
        INT8 weight codes; they must fit the WMEM (:func:`wmem_image`).
    x : array of int, shape ``(K,)``
        INT8 activation codes; ``ceil(K / lanes)`` at most the token buffer's ``chunks``.
    m, shift : int or array of int, shape ``(M,)``
        PPU multiplier (signed ``mult_bits``) and right shift (0 to 63), per output or shared.
    params : DxtConfig

    Returns
    -------
    np.ndarray
        ``(M,)`` int64 INT8 codes in the ``clamp`` range.

    Raises
    ------
    TypeError, ValueError
        Non-integer arrays, codes out of range, mismatched shapes, a GEMV larger than the WMEM or
        the token buffer.
    """
    params = _params(params)
    W = _int8(W, "Weights", 2, "(outputs, inputs)")
    _tile_gemv(W.shape, params)
    acc = accumulate(W, x)
    m, shift = _ppu_args(m, shift, acc.shape[0], params)
    return ppu(acc, m, shift, params)


# --- RMSNorm fused into the GEMV ------------------------------------------------------------------


def ppu_code(scale: float, mult_bits: int) -> tuple[int, int]:
    """Return the PPU multiplier and shift ``(m, shift)`` whose ratio ``m / 2**shift`` is nearest
    the positive real ``scale``: the largest shift (at most :data:`SHIFT_MAX`) that keeps ``m`` a
    signed ``mult_bits``-bit multiplier, and ``m`` at least 1."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"PPU scale must be positive and finite, not {scale}")
    hi = (1 << (mult_bits - 1)) - 1
    shift = int(min(SHIFT_MAX, max(0, mult_bits - 2 - math.floor(math.log2(scale)))))
    m = int(round(scale * 2.0 ** shift))
    while m > hi and shift > 0:
        shift, m = shift - 1, (m + 1) >> 1
    return max(1, min(m, hi)), shift


def eps_code(eps: float, x_step: float) -> np.uint32:
    """Return the fp32 code of ``eps / x_step**2`` (one rounding of the float64 quotient): the
    RMSNorm epsilon in the units of the INT8 input ``x`` whose step is ``x_step``."""
    value = float(eps) / float(x_step) ** 2
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"RMSNorm eps / x_step**2 must be finite and non-negative, not {value}")
    return np.uint32(from_float(value, FP32))


@dataclass(frozen=True)
class RmsNormTrace:
    """Intermediate values of :func:`rmsnorm_gemv_trace` (what an RTL test can compare).

    Attributes
    ----------
    sum_sq : int
        ``S = sum x**2`` (exact).
    variance : np.uint32
        fp32 ``fmac(fp32(S), fp32(1/K), eps_q)``.
    rsqrt : np.uint32
        fp32 ``rsqrt(variance)``.
    rc : RCFactor
        The broadcast RC factor (``F = norm_frac``).
    x_norm : np.ndarray or None
        Sequential mode: the normalized INT8 activations; fused: None.
    acc : np.ndarray
        ``(M,)`` accumulators: ``W_g . x`` (fused) or ``W_g . x_norm`` (sequential).
    rcu : np.ndarray or None
        Fused mode: the RCU outputs; sequential: None.
    out : np.ndarray
        ``(M,)`` INT8 outputs.
    """

    sum_sq: int
    variance: np.uint32
    rsqrt: np.uint32
    rc: RCFactor
    x_norm: np.ndarray | None
    acc: np.ndarray
    rcu: np.ndarray | None
    out: np.ndarray


def rms_rc(x, eps_q, params: DxtConfig, *, inv_k=None
           ) -> tuple[int, np.uint32, np.uint32, RCFactor]:
    """Compute the RMSNorm RC factor of INT8 ``x`` as the VE does.

    ``S = sum x**2`` (exact integer), ``v = fmac(int_to_float(S), fp32(1/K), eps_q)`` (fp32
    multiply then fp32 add, two roundings), ``r = rsqrt(v)``, ``rc = to_rc(r, norm_frac)``.
    ``fp32(1/K)`` is the float64 quotient rounded once (exact for ``K`` a power of two); the
    host gives it with the operation, and ``inv_k`` (an fp32 code) stands for it where ``x``
    is zero-padded past ``K`` (the token chunks a DXT receives).

    Returns ``(S, v, r, rc)``.
    """
    params = _params(params)
    x = _int8(x, "Activations", 1, "(inputs,)")
    K = integer(x.shape[0], "Input length", 1, MAX_INPUTS)
    eps_q = _fp32_code(eps_q, "RMSNorm eps", zero=True)
    inv_k = from_float(1.0 / K, FP32) if inv_k is None else _fp32_code(inv_k, "1/K", zero=False)
    S = int(dot(x, x))
    variance = np.uint32(fmac(int_to_float(S, 32, FP32), inv_k, eps_q, FP32, FP32))
    r = np.uint32(rsqrt(variance))
    return S, variance, r, to_rc(r, params.norm_frac, params)


def rmsnorm_gemv_trace(W_g, x, m, shift, eps_q, params: DxtConfig, *,
                       mode: str = "fused", inv_k=None) -> RmsNormTrace:
    """Compute :func:`rmsnorm_gemv` and return every intermediate value (:class:`RmsNormTrace`)."""
    params = _params(params)
    mode = _mode(mode)
    W_g = _int8(W_g, "Weights", 2, "(outputs, inputs)")
    _tile_gemv(W_g.shape, params)
    S, variance, r, rc = rms_rc(x, eps_q, params, inv_k=inv_k)
    x = _int8(x, "Activations", 1, "(inputs,)")
    if mode == "fused":
        acc = accumulate(W_g, x)
        y = rcu(acc, rc)
        x_norm = None
    else:
        x_norm = requantize(x, rc.m, rc.shift, out_bits=8, clamp=params.clamp)
        acc = accumulate(W_g, x_norm)
        y = None
    m, shift = _ppu_args(m, shift, acc.shape[0], params)
    out = ppu(acc if y is None else y, m, shift, params)
    return RmsNormTrace(S, variance, r, rc, x_norm, acc, y, out)


def rmsnorm_gemv(W_g, x, m, shift, eps_q, params: DxtConfig, *, mode: str = "fused",
                 inv_k=None) -> np.ndarray:
    """Compute ``W_g @ RMSNorm(x)`` requantized to INT8, bit for bit, fused or sequential.

    Parameters
    ----------
    W_g : array of int, shape ``(M, K)``
        INT8 weights with the RMSNorm gain merged offline; they must fit the WMEM.
    x : array of int, shape ``(K,)``
        The raw INT8 input (``ceil(K / lanes)`` at most the token buffer's ``chunks``).
    m, shift : int or array of int
        PPU multiplier and shift, per output or shared; the same in both modes. The output is
        ``RNE(y * m / 2**shift)`` with ``y ~ (W_g @ x) * rc * 2**norm_frac``.
    eps_q : int
        fp32 code of the epsilon in units of ``x**2`` (:func:`eps_code`): +0 or a positive normal.
    params : DxtConfig
    mode : str
        ``"fused"``: ``PPU(RCU(W_g . x))``. ``"sequential"``: ``x_n = requantize(x, rc)`` to
        INT8 first, then ``PPU(W_g . x_n)``. Both use the RC factor of :func:`rms_rc`.
    inv_k : int, optional
        fp32 code of ``1/K`` for an ``x`` zero-padded past its ``K`` inputs (:func:`rms_rc`).

    Returns
    -------
    np.ndarray
        ``(M,)`` int64 INT8 codes.

    Raises
    ------
    TypeError, ValueError
        Bad arrays or codes, a GEMV larger than the WMEM or the token buffer, an unknown
        mode, a negative, subnormal, infinite or NaN ``eps_q``.
    """
    return rmsnorm_gemv_trace(W_g, x, m, shift, eps_q, params, mode=mode, inv_k=inv_k).out


# --- softmax fused into P.V -----------------------------------------------------------------------


def log2_scale(score_step: float) -> np.uint32:
    """Return the fp32 code of ``log2(e) * score_step``, rounded once from float64: the factor
    turning INT8 score differences into log2 units (``score_step`` is the real value of one
    score step, ``1/sqrt(d)`` and the Q, K scales included)."""
    value = math.log2(math.e) * float(score_step)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"Score step must be positive and finite, not {score_step}")
    return np.uint32(from_float(value, FP32))


@dataclass(frozen=True)
class SoftmaxTrace:
    """Intermediate values of :func:`softmax_pv_trace` (leading axes: heads, if any).

    Attributes
    ----------
    max : np.ndarray
        Running maximum of the INT8 scores per row.
    exps : np.ndarray
        fp32 codes ``exp2(fp32(s - max) * c)``, ``(..., T)``.
    p : np.ndarray
        INT8 activations ``RNE(127 * exps)``, ``(..., T)``, fed to the VACs.
    p_sum : np.ndarray
        ``sum p`` per row (exact).
    recip : np.ndarray
        fp32 codes ``reciprocal(fp32(p_sum))``.
    rc : RCFactor
        The broadcast RC factors (``F = prob_frac``).
    probs : np.ndarray or None
        Sequential mode: normalized INT8 probabilities ``(..., T)``; fused: None.
    acc : np.ndarray
        ``(..., d)`` accumulators ``p . V`` (fused) or ``probs . V`` (sequential).
    rcu : np.ndarray or None
        Fused mode: RCU outputs; sequential: None.
    out : np.ndarray
        ``(..., d)`` INT8 outputs.
    """

    max: np.ndarray
    exps: np.ndarray
    p: np.ndarray
    p_sum: np.ndarray
    recip: np.ndarray
    rc: RCFactor
    probs: np.ndarray | None
    acc: np.ndarray
    rcu: np.ndarray | None
    out: np.ndarray


def _scores(s) -> np.ndarray:
    s = _ints(s, "Scores", *_INT8)
    if s.ndim not in (1, 2) or 0 in s.shape:
        raise ValueError(f"Scores must be a non-empty (tokens,) or (heads, tokens) array, "
                         f"not shape {s.shape}")
    integer(s.shape[-1], "Token count", 1, MAX_TOKENS)
    return s


def softmax_activations(s, scale) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(max, exps, p)`` for INT8 scores ``s`` (``(T,)`` or ``(H, T)``) and the fp32 log2
    scale code ``scale`` (:func:`log2_scale`).

    ``max`` is exact; ``exps = exp2(fmul(int_to_float(s - max), scale))`` (the integer difference
    converts exactly, one fp32 rounding in the multiply, one in exp2; the maximum's own score
    gives ``exp2(+0) = 1`` exactly); ``p = RNE(127 * exps)`` in [0, 127] (the maximum gets 127).
    """
    s = _scores(s)
    scale = _fp32_code(scale, "Softmax scale", zero=False)
    mx = s.max(axis=-1)
    diff = int_to_float(s - mx[..., None], 32, FP32)
    exps = exp2(fmul(diff, scale, FP32, FP32, FP32))
    return mx, exps, _activation_quantize(exps)


def softmax_rc(p, params: DxtConfig) -> tuple[np.ndarray, np.ndarray, RCFactor]:
    """Return ``(p_sum, recip, rc)``: ``p_sum = sum p`` (exact), ``recip =
    reciprocal(int_to_float(p_sum))`` (exact conversion below 2**24), ``rc = to_rc(recip,
    prob_frac)``."""
    params = _params(params)
    p = _ints(p, "Softmax activations", 0, P_ONE)
    total = p.sum(axis=-1)
    recip = reciprocal(int_to_float(total, 32, FP32))
    return total, recip, to_rc(recip, params.prob_frac, params)


def softmax_pv_trace(s, V, scale, m, shift, params: DxtConfig, *, mode: str = "fused"
                     ) -> SoftmaxTrace:
    """Compute :func:`softmax_pv` and return every intermediate value (:class:`SoftmaxTrace`)."""
    params = _params(params)
    mode = _mode(mode)
    s = _scores(s)
    V = _ints(V, "Values", *_INT8)
    if V.ndim != s.ndim + 1 or V.shape[:-1] != s.shape or V.shape[-1] == 0:
        raise ValueError(f"Values must have shape {s.shape + ('d',)} for scores of shape "
                         f"{s.shape}, not {V.shape}")
    mx, exps, p = softmax_activations(s, scale)
    total, recip, rc = softmax_rc(p, params)
    m, shift = _ppu_args(m, shift, V.shape[-1], params)
    if mode == "fused":
        probs = None
        acc = np.einsum("...t,...td->...d", p, V, dtype=np.int64)
        y = rcu(acc, RCFactor(rc.m[..., None], rc.shift[..., None]))
        out = ppu(y, m, shift, params)
    else:
        probs = requantize(p, rc.m[..., None], rc.shift[..., None], out_bits=8,
                           clamp=params.clamp)
        acc = np.einsum("...t,...td->...d", probs, V, dtype=np.int64)
        y = None
        out = ppu(acc, m, shift, params)
    return SoftmaxTrace(mx, exps, p, total, recip, rc, probs, acc, y, out)


def softmax_pv(s, V, scale, m, shift, params: DxtConfig, *, mode: str = "fused"
               ) -> np.ndarray:
    """Compute ``softmax(s) @ V`` requantized to INT8, bit for bit, fused or sequential.

    Parameters
    ----------
    s : array of int, shape ``(T,)`` or ``(H, T)``
        INT8 scores (the requantized Q.K^T results, :func:`qk_scores`), ``T <= 2**16``.
    V : array of int, shape ``(T, d)`` or ``(H, T, d)``
        INT8 values.
    scale : int
        fp32 code of ``log2(e) * score_step`` (:func:`log2_scale`), positive normal.
    m, shift : int or array of int, shape ``(d,)``
        PPU multiplier and shift, the same in both modes: the output is ``RNE(y * m / 2**shift)``
        with ``y ~ (softmax(s) @ V) * 2**prob_frac``.
    params : DxtConfig
    mode : str
        ``"fused"``: ``PPU(RCU(p . V))`` with the RC factor ``1 / sum p``. ``"sequential"``:
        ``probs = requantize(p, rc)`` to INT8 first, then ``PPU(probs . V)``.

    Returns
    -------
    np.ndarray
        ``(d,)`` or ``(H, d)`` int64 INT8 codes.
    """
    return softmax_pv_trace(s, V, scale, m, shift, params, mode=mode).out


# --- Q.K^T and attention --------------------------------------------------------------------------


def qk_scores(q, K, m, shift, params: DxtConfig) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(acc, s)``: INT32 scores ``acc = K @ q`` (exact) and their INT8 form ``s =
    PPU(acc)`` (what the PPUs write back over the GBUS). ``q``: ``(d,)`` or ``(H, d)``, ``K``:
    ``(T, d)`` or ``(H, T, d)`` INT8; ``m``, ``shift``: scalars (one scale per layer)."""
    params = _params(params)
    q = _ints(q, "Query", *_INT8)
    K = _ints(K, "Keys", *_INT8)
    if q.ndim not in (1, 2) or K.ndim != q.ndim + 1 or K.shape[-1] != q.shape[-1] or \
            K.shape[:-2] != q.shape[:-1] or 0 in K.shape:
        raise ValueError(f"Keys must have shape {q.shape[:-1] + ('T', q.shape[-1])} for a query "
                         f"of shape {q.shape}, not {K.shape}")
    acc = np.einsum("...td,...d->...t", K, q, dtype=np.int64)
    m, shift = _ppu_args(m, shift, 1, params)
    return acc, ppu(acc, m[0], shift[0], params)


def _heads(q, params: DxtConfig, groups: int) -> tuple[np.ndarray, np.ndarray]:
    q = _int8(q, "Query", 2, "(heads, head dimension)")
    if q.shape[1] != params.head_dim:
        raise ValueError(f"Query must have {params.head_dim} channels (the head dimension), "
                         f"not {q.shape[1]}")
    group = kv_groups(q.shape[0], params.group_size)
    if q.shape[0] != groups * params.group_size:
        raise ValueError(f"Query head count must be {groups * params.group_size} ({groups} KV "
                         f"groups of {params.group_size}), not {q.shape[0]}")
    return q, group


def attention(q, K, V, *, score_m, score_shift, scale, m, shift, params: DxtConfig,
              mode: str = "fused", trace: bool = False):
    """Compute decode attention for every query head from flat K and V, bit for bit.

    Head ``h`` uses KV group ``h // group_size`` (:func:`kv_groups`): scores
    ``qk_scores(q[h], K[g], score_m, score_shift)``, then ``softmax_pv(s, V[g], scale, m, shift,
    mode=mode)``.

    Parameters
    ----------
    q : array of int, shape ``(H, d)``
        INT8 queries, ``H = groups * group_size``.
    K, V : array of int, shape ``(groups, T, d)``
        INT8 keys and values of each KV group.
    score_m, score_shift : int
        PPU multiplier and shift of the scores (INT32 -> INT8).
    scale : int
        fp32 log2 scale of one INT8 score step (:func:`log2_scale`).
    m, shift : int or array of int, shape ``(d,)``
        PPU multiplier and shift of the outputs.
    params : DxtConfig
    mode : str
        ``"fused"`` or ``"sequential"`` softmax.
    trace : bool
        Return ``(out, SoftmaxTrace)`` instead of ``out``.

    Returns
    -------
    np.ndarray
        ``(H, d)`` int64 INT8 codes.
    """
    params = _params(params)
    K = _int8(K, "Keys", 3, "(groups, tokens, head dimension)")
    V = _int8(V, "Values", 3, "(groups, tokens, head dimension)")
    if V.shape != K.shape:
        raise ValueError(f"Values must have the keys' shape {K.shape}, not {V.shape}")
    q, group = _heads(q, params, K.shape[0])
    if K.shape[2] != params.head_dim:
        raise ValueError(f"Keys must have {params.head_dim} channels (the head dimension), "
                         f"not {K.shape[2]}")
    _, s = qk_scores(q, K[group], score_m, score_shift, params)
    result = softmax_pv_trace(s, V[group], scale, m, shift, params, mode=mode)
    return (result.out, result) if trace else result.out


def attention_cached(q, images, *, score_m, score_shift, scale, m, shift, params: DxtConfig,
                     mode: str = "fused") -> np.ndarray:
    """Compute decode attention from iWuR cache images, each VAC reading only its own rows.

    ``images``: one :class:`KVImage` (layout "iwur") per KV group, all with the same token count.
    VAC ``v`` computes the scores of its tokens ``t = j*N + v`` from its K rows ``j*(d/lanes) ..
    j*(d/lanes) + d/lanes - 1`` (one chunk of the key per row), and the P.V accumulators of its
    channels ``e = u*N + v`` from its V rows ``B*ceil(d/N) + u`` (one chunk of ``lanes`` tokens
    per row); the VE gathers the scores. The result equals :func:`attention` on the written K, V.
    """
    params = _params(params)
    mode = _mode(mode)
    images = list(images)
    if not images or any(not isinstance(i, KVImage) or i.layout != "iwur" for i in images):
        raise ValueError("Images must be a non-empty sequence of iWuR KVImage")
    T = images[0].tokens
    if T == 0 or any(i.tokens != T for i in images):
        raise ValueError(f"Images must all hold the same non-zero token count, not "
                         f"{[i.tokens for i in images]}")
    q, group = _heads(q, params, len(images))
    N, L, d, c, half = params.vacs, params.lanes, params.head_dim, params.value_rows, \
        params.half_rows
    R = params.key_rows
    slots = -(-T // N)
    blocks = -(-T // L)
    # Each image's group rows, moved to the start of each half: (H, N, rows, L).
    gr = params.group_rows
    data = np.stack([np.concatenate([i.data[:, i.group * gr:(i.group + 1) * gr],
                                     i.data[:, half + i.group * gr:half + (i.group + 1) * gr]],
                                    axis=1) for i in images]).astype(np.int64)[group]
    half = gr
    # Q.K^T: per VAC, slot j's R rows are one key; token t = j * N + v.
    keys = data[:, :, :slots * R].reshape(len(group), N, slots, d)
    acc_vac = np.einsum("hvjd,hd->hvj", keys, q)                            # (H, N, slots)
    acc = acc_vac.transpose(0, 2, 1).reshape(len(group), slots * N)[:, :T]
    m_s, shift_s = _ppu_args(score_m, score_shift, 1, params)
    s = ppu(acc, m_s[0], shift_s[0], params)
    # P.V: per VAC, row B*c + u holds tokens B*L .. B*L + L - 1 of channel u*N + v.
    mx, exps, p = softmax_activations(s, scale)
    total, recip, rc = softmax_rc(p, params)
    rows = data[:, :, half:half + blocks * c].reshape(len(group), N, blocks, c, L)
    padded = np.zeros((len(group), blocks * L), np.int64)
    m_o, shift_o = _ppu_args(m, shift, d, params)
    if mode == "sequential":
        p = requantize(p, rc.m[:, None], rc.shift[:, None], out_bits=8, clamp=params.clamp)
    padded[:, :T] = p
    acc_pv = np.einsum("hvbul,hbl->hvu", rows, padded.reshape(len(group), blocks, L))
    channel = np.arange(c)[None, :] * N + np.arange(N)[:, None]              # (N, c)
    acc_e = np.zeros((len(group), N * c), np.int64)
    acc_e[:, channel.ravel()] = acc_pv.reshape(len(group), N * c)
    acc_e = acc_e[:, :d]
    if mode == "fused":
        acc_e = rcu(acc_e, RCFactor(rc.m[:, None], rc.shift[:, None]))
    return ppu(acc_e, m_o, shift_o, params)
