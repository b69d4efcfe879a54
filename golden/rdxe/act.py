"""Bit-exact and float64 models of the VE's activations: SiLU with SwiGLU's gate and GELU, from
INT8 codes with per-channel scales to INT8 codes with one scale per token.

Both are ``h = x * sigmoid(beta * x) * y``: SwiGLU's ``silu(gate) * up`` with ``beta = 1``
(:data:`BETA_SILU`), GELU in the sigmoid form ``x * sigmoid(1.702 x)`` (:data:`BETA_GELU`, Hendrycks
and Gimpel's approximation; the rDXE paper says only that the VE "generates GELU activation
outputs") with ``y = 1``. The sigmoid form shares every unit with SiLU; the erf form would need a
polynomial unit and the tanh form a cube and a second scale, for a gap of at most
:data:`GELU_FORM_GAP` (absolute, measured by :func:`gelu_form_gap`), less than the INT8 output
step of any activation vector whose largest value exceeds 2.6.

Inputs: the INT8 codes ``x`` (gate) and ``y`` (up) of ffn_norm's RMSNorm-GEMV, whose PPU output
scales are per output channel (``x_real = x * s_x[o]``, ``y_real = y * s_y[o]``). The host folds the
scales into two fp32 constants per channel once (:func:`act_constants`): ``a[o] = fp32(-beta *
log2(e) * s_x[o])`` and ``c[o] = fp32(s_x[o] * s_y[o])``. Per element (:func:`act_values`, every
step a shared unit's golden twin, :mod:`golden.arith`)::

    e = exp2(fmul(fp32(x), a[o]))          # exp(-beta x_real); the INT8 conversion is exact
    r = reciprocal(fadd(e, 1.0))           # sigmoid(beta x_real); e = +inf gives r = +0
    v = fmul(fmul(fp32(x * y), r), c[o])   # h in real units; the INT16 product converts exactly

Output quantization, per token (dynamic): ``M = max |v|`` over the token's channels (exact),
``k = reciprocal(M)`` (:func:`act_scale`), and ``code = RNE(127 * fmul(v, k))`` saturated to
[-127, 127] in the shared requantizer (``requantize(sig, 127, 23 - e)``, :func:`act_codes`; a
NaN ``fmul(v, k)`` gives 0, which is what every channel of an all-zero token gets); the codes'
scale is ``M / 127`` (1 when ``M = 0``), exactly what ffn_down's per-token input quantizer
(``quantize_rows``) expects, and the largest code is +-127. A static scale would be one pass
instead of two, but SmolLM2's SwiGLU outputs differ between tokens by orders of magnitude
(docs/rdxe.md, "VE activations"). The VE therefore reads the gate and up codes twice: once for
``M`` (only the maximum is kept), once for the codes (``k`` then known); the INT8 codes are
stored anyway, a buffer of fp32 values would be twice their size.

Error bound (tested on every INT8 pair, :func:`act_worst`): against the float64 reference
(:func:`act_reference`, written naively), ``|code - 127 h / max|h|| <= 0.5 +``
:data:`ACT_CODE_ERROR` while ``|beta x_real log2(e)| < 126`` (exp2 neither overflows nor
flushes); the values ``v`` are within ``act_value_bound(t)`` of ``h``, relative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hdl.arith.format import FP32

from ..arith.float import fadd, fmul, from_float, int_to_float, to_float
from ..arith.func import EXP2_ERROR, RECIP_ERROR, exp2, reciprocal
from ..arith.requant import requantize
from .params import P_ONE, SHIFT_MAX, _INT8, _ints

__all__ = ["BETA_SILU", "BETA_GELU", "ACT_CODE_ERROR", "GELU_FORM_GAP", "ActTrace",
           "act_constants", "act_values", "act_scale", "act_codes", "act", "silu_glu", "gelu",
           "act_reference", "act_reference_codes", "act_value_bound", "act_worst", "gelu_form_gap"]

#: ``beta`` of SiLU (``x * sigmoid(x)``).
BETA_SILU = 1.0
#: ``beta`` of GELU's sigmoid form ``x * sigmoid(1.702 x)``.
BETA_GELU = 1.702
#: Allowance past half a code of the quantized outputs: ``127 * (2 delta + RECIP_ERROR + 2**-23)``
#: is 2**-8.04 with ``delta`` the values' worst relative error (``act_value_bound(126)``,
#: 2**-16.03), doubled for the terms of second order. The tests measure the worst case.
ACT_CODE_ERROR = 2.0 ** -7
#: Largest ``|x sigmoid(1.702 x) - x Phi(x)|`` over all real ``x`` (:func:`gelu_form_gap`
#: measures 0.0203 at ``|x| = 2.27``), rounded up.
GELU_FORM_GAP = 0.021

_ONE = np.uint32(from_float(1.0, FP32))
_UNIT = 2.0 ** -24                           # fp32 unit roundoff
_PRODUCT_BITS = 16                           # an INT8 x INT8 product (-128 * -128 = 2**14 fits)


@dataclass(frozen=True)
class ActTrace:
    """Intermediate values of :func:`act` (leading axes: tokens, if any).

    Attributes
    ----------
    exps, sigmoid, values : np.ndarray
        fp32 codes ``e``, ``r`` and ``v`` per element.
    max : np.ndarray
        fp32 code ``M = max |v|`` per token.
    k : np.ndarray
        fp32 code ``reciprocal(M)`` per token.
    codes : np.ndarray
        INT8 outputs (int64).
    scale : np.ndarray
        float64 ``M / 127`` per token (1 where ``M = 0``): the codes' real step.
    """

    exps: np.ndarray
    sigmoid: np.ndarray
    values: np.ndarray
    max: np.ndarray
    k: np.ndarray
    codes: np.ndarray
    scale: np.ndarray


def _scales(s, what: str) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError(f"{what} must be a non-empty 1-D array of positive finite scales, not "
                         f"{s if s.size <= 4 else f'shape {s.shape}'}")
    return s


def act_constants(s_x, s_y=None, beta: float = BETA_SILU) -> tuple[np.ndarray, np.ndarray]:
    """Return the per-channel fp32 constants ``(a, c)`` (uint32 codes) of gate scales ``s_x`` and
    up scales ``s_y`` (``None``: no up input, GELU): ``a = fp32(-beta log2(e) s_x)``, ``c =
    fp32(s_x s_y)``, each rounded once from float64.

    Raises
    ------
    ValueError
        A scale that is not positive and finite, mismatched lengths, or ``beta`` not positive.
    """
    s_x = _scales(s_x, "Gate scales")
    s_y = np.ones_like(s_x) if s_y is None else _scales(s_y, "Up scales")
    if s_y.shape != s_x.shape:
        raise ValueError(f"Up scales must have {s_x.size} entries (the gate's), not {s_y.size}")
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"Activation beta must be a positive finite number, not {beta!r}")
    a = from_float(-beta * math.log2(math.e) * s_x, FP32)
    return np.asarray(a, np.uint32), np.asarray(from_float(s_x * s_y, FP32), np.uint32)


def _codes(values, what: str, channels: int) -> np.ndarray:
    arr = _ints(values, what, *_INT8)
    if arr.ndim not in (1, 2) or arr.shape[-1] != channels:
        raise ValueError(f"{what} must be (channels,) or (tokens, channels) with {channels} "
                         f"channels, not shape {arr.shape}")
    return arr


def act_values(x, y, a, c) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the fp32 codes ``(e, r, v)`` of INT8 gates ``x`` and ups ``y`` (same shape,
    ``(channels,)`` or ``(tokens, channels)``) with the per-channel constants ``a``, ``c`` of
    :func:`act_constants` (module notes)."""
    a, c = np.asarray(a, np.uint32), np.asarray(c, np.uint32)
    x = _codes(x, "Gate codes", a.size)
    y = _codes(y, "Up codes", a.size)
    if y.shape != x.shape:
        raise ValueError(f"Up codes must have the gate codes' shape {x.shape}, not {y.shape}")
    e = exp2(fmul(int_to_float(x, 8, FP32), a, FP32, FP32, FP32))
    r = reciprocal(fadd(e, _ONE, FP32))
    q = fmul(int_to_float(x * y, _PRODUCT_BITS, FP32), r, FP32, FP32, FP32)
    return e, r, fmul(q, c, FP32, FP32, FP32)


def act_scale(v) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(M, k)``: the fp32 codes of ``max |v|`` over the last axis (exact: a code's
    magnitude bits order like its value) and of ``reciprocal(M)`` (``+inf`` for ``M = 0``)."""
    v = np.asarray(v, np.uint32)
    top = (v & np.uint32(0x7FFFFFFF)).max(axis=-1).astype(np.uint32)
    return top, reciprocal(top)


def act_codes(v, k) -> np.ndarray:
    """Return the INT8 codes ``RNE(127 * fmul(v, k))`` (int64) in [-127, 127] of fp32 values
    ``v`` and the fp32 factor ``k`` (per token, broadcast over the last axis): the requantizer's
    ``requantize(sig, 127, 23 - e)`` on the signed significand ``sig`` and exponent ``e`` of
    ``w = fmul(v, k)`` (the shift between 0 and 63: saturated or exact), NaN read as 0 and
    +-inf as +-2**23 (which saturates)."""
    v, k = np.asarray(v, np.uint32), np.asarray(k, np.uint32)
    w = fmul(v, k[..., None] if k.ndim == v.ndim - 1 else k, FP32, FP32, FP32)
    field = ((w >> FP32.man_bits) & FP32.exp_max_field).astype(np.int64)
    frac = (w & ((1 << FP32.man_bits) - 1)).astype(np.int64)
    nan = (field == FP32.exp_max_field) & (frac != 0)
    sig = np.where((field == 0) | nan, 0, frac | (1 << FP32.man_bits))   # subnormals: zero
    sig = np.where(w >> 31 == 1, -sig, sig)
    shift = np.clip(FP32.bias + FP32.man_bits - field, 0, SHIFT_MAX)
    return requantize(sig, P_ONE, shift, out_bits=8, clamp="symmetric")


def act(x, y, a, c) -> ActTrace:
    """Run the activation of INT8 gates ``x`` and ups ``y`` with constants ``a``, ``c``, one
    scale per token (per row of a 2-D ``x``): :func:`act_values`, :func:`act_scale`,
    :func:`act_codes` (module notes)."""
    e, r, v = act_values(x, y, a, c)
    top, k = act_scale(v)
    m = to_float(top, FP32)
    scale = np.where(m > 0, m / P_ONE, 1.0)
    return ActTrace(e, r, v, top, k, act_codes(v, k), scale)


def silu_glu(gate, up, s_gate, s_up) -> ActTrace:
    """SwiGLU ``silu(gate) * up`` of INT8 codes with per-channel scales (:func:`act`)."""
    return act(gate, up, *act_constants(s_gate, s_up, BETA_SILU))


def gelu(x, s_x) -> ActTrace:
    """GELU ``x sigmoid(1.702 x)`` of INT8 codes with per-channel scales (:func:`act`, ``y =
    1``)."""
    x = np.asarray(x)
    return act(x, np.ones_like(x), *act_constants(s_x, None, BETA_GELU))


# --- float64 references and bounds ----------------------------------------------------------


def act_reference(x, y, s_x, s_y, beta: float = BETA_SILU) -> np.ndarray:
    """float64 ``x_r / (1 + exp(-beta x_r)) * y_r`` of the real values ``x_r = x * s_x``,
    ``y_r = y * s_y`` (``y``, ``s_y`` 1 for GELU)."""
    xr = np.asarray(x, np.float64) * np.asarray(s_x, np.float64)
    yr = np.asarray(y, np.float64) * np.asarray(s_y, np.float64)
    with np.errstate(over="ignore"):
        return xr / (1.0 + np.exp(-beta * xr)) * yr


def act_reference_codes(h) -> np.ndarray:
    """``127 h / max |h|`` per row (unrounded; 0 for an all-zero row)."""
    h = np.asarray(h, np.float64)
    top = np.abs(h).max(axis=-1, keepdims=True)
    return np.where(top > 0, P_ONE * h / np.where(top > 0, top, 1.0), 0.0)


def act_value_bound(t) -> np.ndarray:
    """Relative bound of ``|v - h| / |h|`` at exp2 argument ``t = beta x_r log2(e)`` (``|t| <
    126``): exp2's error and the argument's two roundings amplified by ``ln 2 |t|``, then the
    add, the reciprocal, the two products and ``c``'s rounding, to first order (times 1.01 for
    the products of the terms)."""
    return EXP2_ERROR + RECIP_ERROR + (4 + 2 * math.log(2) * np.abs(t)) * _UNIT * 1.01


def act_worst(beta: float, s_x: float, s_y: float | None) -> dict:
    """Measure the model against :func:`act_reference` on every INT8 ``(x, y)`` pair (``y = 1``
    when ``s_y`` is None: GELU) as one vector, with the scales ``s_x``, ``s_y`` on every channel.

    Returns ``value_error`` (the worst ``|v - h| / |h|``), ``value_margin`` (the largest ratio of
    that error to :func:`act_value_bound`, over the elements whose ``|t| < 126``) and
    ``code_excess`` (the worst ``|code - 127 h / max|h|| - 0.5``), with ``pair``, the ``(x, y)``
    of the worst value."""
    x, y = (g.ravel() for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128),
                                           indexing="ij"))
    if s_y is None:
        y = np.ones_like(x)
    sx = np.full(x.size, float(s_x))
    sy = np.full(x.size, 1.0 if s_y is None else float(s_y))
    trace = act(x, y, *act_constants(sx, None if s_y is None else sy, beta))
    h = act_reference(x, y, sx, sy, beta)
    rel = np.abs(to_float(trace.values, FP32) - h) / np.where(h != 0, np.abs(h), 1.0)
    t = beta * math.log2(math.e) * x * float(s_x)
    live = np.abs(t) < 126
    worst = int(np.argmax(np.where(live, rel, -1.0)))
    return {"value_error": float(rel[worst]), "pair": (int(x[worst]), int(y[worst])),
            "value_margin": float((rel[live] / act_value_bound(t[live])).max()),
            "code_excess": float((np.abs(trace.codes - act_reference_codes(h)) - 0.5).max())}


def gelu_form_gap(points: int = 200_001, span: float = 10.0) -> tuple[float, float]:
    """Return ``(gap, x)``: the largest ``|x sigmoid(1.702 x) - x Phi(x)|`` on a grid of
    ``points`` over ``[-span, span]`` and where it is (``Phi`` the normal CDF, by ``math.erf``)."""
    xs = np.linspace(-span, span, points)
    phi = 0.5 * (1.0 + np.vectorize(math.erf)(xs / math.sqrt(2.0)))
    gap = np.abs(xs / (1.0 + np.exp(-BETA_GELU * xs)) - xs * phi)
    i = int(np.argmax(gap))
    return float(gap[i]), float(xs[i])
