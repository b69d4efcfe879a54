"""Bit-exact and float64 models of the DXE's steps between the DXT's GEMVs: the work the host did in
float32 (quantizing each GEMV input per token, dequantizing PPU codes, the residual adds, RoPE, the
score PPU of Q), defined on the shared units' golden twins so that a DXE runs a whole decoder layer
without the host (docs/rdxe.md, "The DXE's layer in hardware numerics").

Formats. The residual stream is fp32 (uint32 codes), added on the GPPU's fp32 adder: what the
float reference keeps, so the DXE differs from it only by the units' flush-to-zero (a bf16 residual
costs little accuracy but adds a rounding before every INT8 one: docs/rdxe.md, section 12, measures
it). Every GEMV input is
INT8 with one scale per token, every PPU output INT8 with a static scale (per channel) or with the
token's input scale carried along (the plain projections); the module notes of
:mod:`sim.llm.backends.rdxe` give the scales. Per step (every arithmetic a :mod:`golden.arith` unit;
``u = 2**-24``, fp32's unit roundoff):

* :func:`quantize` (VE): ``M = max |x|`` per token (exact), ``k = reciprocal(M)``, ``code = RNE(127
  * fmul(x, k))`` in the requantizer: :func:`golden.rdxe.act.act_scale` and
  :func:`~golden.rdxe.act.act_codes`, the VE's own per-token output quantizer; the step is ``M /
  127``. :func:`quantize_static` is the same requantizer with a static factor ``k`` (the KV
  cache's scales, :func:`static_inverse`).
* :func:`dequantize` (GPPU): ``fmul(fp32(code), s)`` with an fp32 static scale ``s`` per channel;
  :func:`dequantize_token`: ``fmul(fmul(fp32(code), c[o]), M)`` for the plain projections, whose
  output step ``s_x[t] * k[o]`` is the token's ``M / 127`` times ``k[o]``: ``c = fp32(k / 127)``.
* :func:`residual_add` (GPPU): ``fadd(h, y)``.
* :func:`rope` (GPPU): NORM RoPE, ``(x0 c - x1 s, x0 s + x1 c)`` with fmul and fadd (the negation
  flips the sign bit, exact); ``c``, ``s`` the fp32 cos and sin of the token's position, a host
  table streamed with the token (:func:`rope_codes`): the rDXE paper's models (OPT) have learned
  positions and its DXE no trigonometric unit.
* :func:`rms_eps` (VE): RMSNorm's epsilon in units of the INT8 input, ``eps / s_x**2 = fmul(fmul(e,
  k), k)`` with ``e = fp32(127**2 eps)`` (the host's :func:`golden.rdxe.eps_code` divides by the
  float64 step instead).
* :func:`score_factor` (VE): the score PPU's multiplier of a query token, ``s_q s_k / sqrt(d) /
  step = fmul(M_q, c)`` with ``c = fp32(s_k / (127 sqrt(d) step))``, converted to ``(m, shift)`` by
  :func:`golden.rdxe.to_rc` (``rc_bits - 6`` significand bits).

The ``*_reference`` functions are the float64 truths, written naively; the ``*_bound`` constants
and functions the stated error of each step, tested on a real layer's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.arith.format import FP32

from ..arith.float import fadd, fmul, from_float, ftz, int_to_float, to_float
from ..arith.func import RECIP_ERROR
from .act import act_codes, act_scale
from .model import RCFactor, to_rc
from .params import P_ONE, DxtConfig

__all__ = ["Quantized", "fp32", "codes_of", "values_of", "quantize", "quantize_static",
           "static_inverse", "dequantize", "dequantize_token", "residual_add", "rope_codes",
           "rope", "rms_eps", "score_factor", "quantize_reference", "rope_reference",
           "QUANT_CODE_ERROR", "DEQUANT_ERROR", "DEQUANT_TOKEN_ERROR", "ADD_ERROR",
           "ROPE_ERROR", "rms_eps_bound", "score_factor_bound"]

_U = 2.0 ** -24
_SIGN = np.uint32(1 << 31)
#: Allowance past half a code of :func:`quantize` against ``127 x / max|x|``: ``fmul(x, k)`` is
#: within ``RECIP_ERROR + u`` of ``x / M`` relative, times 127 codes (1.01 for second order).
QUANT_CODE_ERROR = P_ONE * (RECIP_ERROR + _U) * 1.01
#: Relative error of :func:`dequantize` against ``code * s`` with the float64 scale: the scale's
#: rounding and the product's.
DEQUANT_ERROR = 2 * _U * 1.01
#: Relative error of :func:`dequantize_token` against ``code * k * M / 127``: ``c``'s rounding
#: and two products.
DEQUANT_TOKEN_ERROR = 3 * _U * 1.01
#: Relative error of :func:`residual_add` against the exact sum of its fp32 inputs (normal
#: results; a subnormal sum flushes to zero).
ADD_ERROR = _U
#: :func:`rope`'s error in units of ``u (|x0| + |x1|)`` against the float64 rotation of its fp32
#: inputs: the tables' roundings, the products' and the sum's (1.01 for second order).
ROPE_ERROR = 3 * 1.01


@dataclass(frozen=True)
class Quantized:
    """INT8 codes with one scale per token (:func:`quantize`).

    Attributes
    ----------
    codes : np.ndarray
        INT8 codes (int64), ``(..., channels)``.
    top : np.ndarray
        fp32 code of ``M = max |x|`` per token.
    k : np.ndarray
        fp32 code of ``reciprocal(M)`` per token.
    """

    codes: np.ndarray
    top: np.ndarray
    k: np.ndarray

    @property
    def scale(self) -> np.ndarray:
        """float64 ``M / 127`` per token (1 where ``M = 0``): the codes' real step."""
        m = to_float(self.top, FP32)
        return np.where(m > 0, m / P_ONE, 1.0)


def fp32(x) -> np.ndarray:
    """Round float64 host constants once to fp32 codes (uint32)."""
    return np.asarray(from_float(np.asarray(x, np.float64), FP32), np.uint32)


def codes_of(x) -> np.ndarray:
    """The fp32 codes of float32 values ``x`` (exact; subnormals flushed, as every unit reads
    them): how the back-end's float32 arrays carry the DXE's fp32 values."""
    return ftz(np.ascontiguousarray(x, np.float32).view(np.uint32), FP32).astype(np.uint32)


def values_of(codes) -> np.ndarray:
    """float32 values of fp32 codes (exact): the inverse of :func:`codes_of`."""
    return np.ascontiguousarray(codes, np.uint32).view(np.float32)


def quantize(x) -> Quantized:
    """Quantize fp32 codes ``x`` ``(..., channels)`` to INT8 with one scale per token (row) on
    the VE (module notes)."""
    x = np.asarray(x, np.uint32)
    top, k = act_scale(x)
    return Quantized(act_codes(x, k), top, k)


def quantize_static(x, k) -> np.ndarray:
    """INT8 codes ``RNE(127 * fmul(x, k))`` of fp32 codes ``x`` with static fp32 factors ``k``
    (:func:`static_inverse`) broadcast against ``x``."""
    x = np.asarray(x, np.uint32)
    return act_codes(x, np.broadcast_to(np.asarray(k, np.uint32), x.shape))


def static_inverse(scale) -> np.ndarray:
    """fp32 codes of ``1 / (127 scale)``: the factor of :func:`quantize_static` for INT8 codes of
    step ``scale`` (positive float64)."""
    scale = np.asarray(scale, np.float64)
    if not np.all(np.isfinite(scale) & (scale > 0)):
        raise ValueError(f"Static scales must be positive and finite, not "
                         f"{scale if scale.size <= 4 else f'an array with min {scale.min()}'}")
    return fp32(1.0 / (P_ONE * scale))


def dequantize(codes, scale) -> np.ndarray:
    """fp32 codes ``fmul(fp32(code), scale)`` of INT8 ``codes`` with fp32 static ``scale``
    (broadcast: per channel)."""
    return fmul(int_to_float(codes, 8, FP32), np.asarray(scale, np.uint32), FP32, FP32, FP32)


def dequantize_token(codes, c, top) -> np.ndarray:
    """fp32 codes ``fmul(fmul(fp32(code), c[o]), M[t])`` of INT8 ``codes`` ``(T, outputs)``: the
    per-channel fp32 ``c = fp32(k / 127)`` and the input's fp32 ``M`` per token."""
    y = fmul(int_to_float(codes, 8, FP32), np.asarray(c, np.uint32), FP32, FP32, FP32)
    return fmul(y, np.asarray(top, np.uint32)[..., None], FP32, FP32, FP32)


def residual_add(h, y) -> np.ndarray:
    """fp32 codes of the residual ``fadd(h, y)`` (the GPPU's adder)."""
    return fadd(np.asarray(h, np.uint32), np.asarray(y, np.uint32), FP32)


def rope_codes(cos, sin) -> tuple[np.ndarray, np.ndarray]:
    """fp32 codes of the host's cos and sin table (float64 values, rounded once)."""
    return fp32(cos), fp32(sin)


def rope(x, cos, sin) -> np.ndarray:
    """NORM RoPE of fp32 codes ``x`` ``(T, heads, d)`` with fp32 ``cos``, ``sin`` ``(T, 1,
    d / 2)``: pair ``(2i, 2i + 1)`` becomes ``(fadd(x0 c, -(x1 s)), fadd(x0 s, x1 c))``, every
    product an fmul."""
    x = np.asarray(x, np.uint32)
    c, s = np.asarray(cos, np.uint32), np.asarray(sin, np.uint32)
    x0, x1 = x[..., 0::2], x[..., 1::2]

    def mul(a, b):
        return fmul(a, b, FP32, FP32, FP32)

    out = np.empty_like(x)
    out[..., 0::2] = fadd(mul(x0, c), mul(x1, s) ^ _SIGN, FP32)
    out[..., 1::2] = fadd(mul(x0, s), mul(x1, c), FP32)
    return out


def rms_eps(k, eps: float) -> np.ndarray:
    """fp32 codes of RMSNorm's epsilon in units of the INT8 input per token, ``fmul(fmul(e, k),
    k)`` with ``e = fp32(127**2 eps)`` and ``k`` the tokens' :attr:`Quantized.k`; +0 for an
    all-zero token (``k = +inf``: every code is 0, its outputs too) and the largest normal where
    the product overflows (a token so small that epsilon decides its norm: its outputs flush to
    0 either way)."""
    k = np.asarray(k, np.uint32)
    e = fmul(fmul(fp32(P_ONE ** 2 * float(eps)), k, FP32, FP32, FP32), k, FP32, FP32, FP32)
    inf = np.uint32(FP32.infinity(0))
    e = np.where(e == inf, np.uint32(FP32.max_normal), e)
    return np.where(k == inf, np.uint32(0), e).astype(np.uint32)


def score_factor(top, c, params: DxtConfig) -> RCFactor:
    """The score PPU's ``(m, shift)`` of query tokens with fp32 ``M_q`` (``top``) and the
    layer's fp32 constant ``c = fp32(s_k / (127 sqrt(d) step))``: ``to_rc(fmul(M_q, c), 0)``."""
    f = fmul(np.asarray(top, np.uint32), np.asarray(c, np.uint32), FP32, FP32, FP32)
    return to_rc(f, 0, params)


# --- float64 references and bounds ----------------------------------------------------------


def quantize_reference(x) -> np.ndarray:
    """float64 ``127 x / max |x|`` per row (unrounded; 0 for an all-zero row)."""
    x = np.asarray(x, np.float64)
    top = np.abs(x).max(axis=-1, keepdims=True)
    return np.where(top > 0, P_ONE * x / np.where(top > 0, top, 1.0), 0.0)


def rope_reference(x, cos, sin) -> np.ndarray:
    """float64 NORM RoPE of ``x`` ``(T, heads, d)`` with float64 ``cos``, ``sin``."""
    x = np.asarray(x, np.float64)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def rms_eps_bound() -> float:
    """Relative error of :func:`rms_eps` against ``127**2 eps / M**2``: ``e``'s rounding, two
    products and ``k``'s error twice."""
    return (3 * _U + 2 * RECIP_ERROR) * 1.01


def score_factor_bound(params: DxtConfig) -> float:
    """Relative error of :func:`score_factor`'s ``m * 2**-shift`` against ``M_q s_k / (127
    sqrt(d) step)``: ``c``'s rounding, the product's, and the significand's rounding to
    ``rc_bits - 6`` bits (half a unit of ``2**-(rc_bits - 7)``)."""
    return 2 * _U * 1.01 + 2.0 ** -(params.rc_mant_bits)
