"""Bit-exact and float64 models of the rDXE decoder execution tile (issue 5): INT8 GEMV on vector
-accumulate cores (VACs), vector recompute (VRC) fusing RMSNorm and softmax into the GEMV, the iWuR
KV cache with GQA, and cycle formulas for the tile.

Source: Tao, Luo et al., "An 11.16 uJ/token Edge SLM Decoder Accelerator with Scalable Ring-based
Configuration for Token-level Pipelining in 16nm FinFET" (rDXE), Sec. III (Figs. 2, 4, 5).
docs/rdxe_models.md is the contract of this layer: formats, the operation orders, the storage
layouts, the cycle model and the error bounds with their measured worst cases.

Datapath (every step is one of the shared units' golden twins, :mod:`golden.arith`):

* **VAC**: ``lanes`` INT8 x INT8 products summed by the integer lane tree (``IntDot``) into an
  INT32 accumulator, one lanes-wide chunk per cycle (integer, exact, order-free). Output ``o`` of a
  GEMV runs on VAC ``o mod N`` in pass ``o // N``.
* **PPU**: ``out = requantize(acc, M[o], shift[o])`` to INT8 (per-output multiplier and shift).
* **RC factor**: a 25-bit pair ``(m, s)``: an unsigned ``rc_bits - 6`` = 19-bit significand ``m``
  (``2**18 <= m < 2**19``, or 0) and the requantizer's 6-bit shift ``s``; its value is
  ``m * 2**-s = rc * 2**F`` with ``F`` fraction bits kept for the next stage. :func:`to_rc`
  converts an fp32 factor (significand rounded half to even by the requantizer).
* **RCU**: ``y = requantize(acc, m, s, out_bits=32, clamp='full')`` = ``RNE(acc * rc * 2**F)``,
  then the PPU. Two roundings, both in a shared ``Requantizer``.
* **RMSNorm (VRC)**: ``S = sum x**2`` (IntDot, exact); ``v = fmac(fp32(S), fp32(1/K), eps_q)``;
  ``rc = rsqrt(v)``; ``F = norm_frac``. Fused: ``out = PPU(RCU(W_g . x))``. Sequential:
  ``x_n = requantize(x, m, s)`` (INT8, the same RC), ``out = PPU(W_g . x_n)``.
* **Softmax (VRC)**: INT8 scores ``s``, running max ``mx``; ``e_t = exp2(fp32(s_t - mx) * c)``
  (``c`` = fp32 log2 scale); ``p_t = RNE(127 * e_t)`` (INT8 activations in [0, 127], ``exp(0)``
  -> 127); ``rc = reciprocal(fp32(sum p))``; ``F = prob_frac``. Fused: ``out = PPU(RCU(p . V))``.
  Sequential: ``prob = requantize(p, m, s)`` (INT8), ``out = PPU(prob . V)``.
* **iWuR KV cache**: token ``t``'s key goes (over GBUS, byte enables) to VAC ``t mod N``, one key
  per ``head_dim / lanes`` rows; value channel ``e`` stays in VAC ``e mod N``, rows of ``lanes``
  tokens (written column by column). Baseline: the same owners, K column-wise, V row-wise.

The golden models follow the specification, not the RTL pipeline. The float64 references
(``*_reference``) are written independently and naively; the ``*_bound`` functions are the stated
bounds. ``python -m golden.rdxe`` measures the worst cases and prints the cycle table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hdl.arith.format import FP32
from hdl.rdxe.spec import KVGeometry
from hdl.validate import integer, one_of, power_of_two

from .arith.float import fmac, fmul, from_float, int_to_float, to_float
from .arith.func import EXP2_ERROR, RECIP_ERROR, RSQRT_ERROR, exp2, reciprocal, rsqrt
from .arith.idot import dot
from .arith.requant import requantize

__all__ = [
    "LAYOUTS", "MODES", "P_ONE", "SHIFT_MAX", "GBUS_BYTES", "MAX_INPUTS", "MAX_TOKENS",
    "EXP2_ERROR", "RECIP_ERROR", "RSQRT_ERROR",
    "RdxeParams", "RCFactor", "RmsNormTrace", "SoftmaxTrace", "KVImage", "Latency", "Cycles",
    "ReadCycles",
    "accumulate", "ppu", "to_rc", "rcu", "wmem_image", "gemv",
    "eps_code", "rms_rc", "rmsnorm_gemv", "rmsnorm_gemv_trace",
    "log2_scale", "softmax_activations", "softmax_rc", "softmax_pv", "softmax_pv_trace",
    "kv_groups", "kv_address", "kv_capacity", "kv_image", "kv_read",
    "qk_scores", "attention", "attention_cached",
    "gemv_reference", "rmsnorm_gemv_reference", "softmax_pv_reference",
    "rmsnorm_error_bound", "softmax_error_bound", "mode_gap_bound",
    "gemv_cycles", "rmsnorm_gemv_cycles", "qk_cycles", "softmax_pv_cycles", "kv_read_cycles",
    "kv_write_cycles", "layout_cycles",
]

#: KV-cache layouts: "iwur" (the design) and "baseline" (K column-wise, V row-wise).
LAYOUTS = ("iwur", "baseline")
#: VRC modes: "fused" (RC applied to the accumulator) and "sequential" (normalize first).
MODES = ("fused", "sequential")
#: INT8 activation code of exp(0) = 1 in the softmax P.V.
P_ONE = 127
#: Largest requantizer shift: the shift field is 6 bits (hdl.arith.requant.SHIFT_BITS).
SHIFT_MAX = 63
#: Bytes per GBUS transfer (32-bit bus).
GBUS_BYTES = 4
#: Longest GEMV input: sum(x**2) < 2**30 and every INT32 accumulator is exact.
MAX_INPUTS = 1 << 16
#: Most tokens of a softmax row: sum(p) <= 127 * 2**16 < 2**24 converts to fp32 exactly.
MAX_TOKENS = 1 << 16

_U = 2.0 ** -24                      # unit roundoff of fp32
_INT8 = (-128, 127)
_REF_SLACK = 2.0 ** -30              # float64 evaluation error allowance of the references
_CLAMPS = ("symmetric", "full")


# --- parameters -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RdxeParams:
    """Parameters of one decoder execution tile (DXT), checked on construction.

    Parameters
    ----------
    lanes : int
        Multipliers per VAC and bytes per WMEM / KV-cache row: a power of two from 1 to 64 (16).
    vacs : int
        VACs per DXT, ``N``: 1 to 64 (16 in the paper).
    wmem_depth : int
        WMEM rows per VAC (``lanes`` bytes each): 1 to 2**20 (1024: 16 KB).
    kv_rows : int
        KV-cache rows per VAC, a power of two from 2 to 2**20 (512); the first half holds K, the
        second half V. It must hold at least one token.
    kv_cols : int
        KV-cache row width in bytes; it must equal ``lanes`` (one row feeds the MAC per cycle).
    head_dim : int
        Head dimension ``d``: a multiple of ``lanes`` from ``lanes`` to 1024 (64).
    group_size : int
        GQA group size ``G`` (query heads per KV head): 1 to 64 (1: MHA).
    kv_groups : int
        KV groups one DXT's caches hold: 1 to 64 (1). Group ``g`` has rows ``g * group_rows ..
        (g + 1) * group_rows - 1`` of the K half and as many of the V half of every VAC's cache
        (``group_rows = kv_rows / 2 // kv_groups``); query head ``h`` reads group ``h // G``.
    mult_bits : int
        Width of the PPU's signed multipliers: 2 to 32 (32).
    clamp : str
        INT8 range of every PPU and activation requantizer: ``"symmetric"`` [-127, 127]
        (default) or ``"full"`` [-128, 127].
    rc_bits : int
        Width of the RC factor: 16 to 30 (25); ``rc_bits - 6`` significand bits and a 6-bit
        shift.
    norm_frac : int
        Fraction bits of the RMSNorm RCU output and of the sequential mode's normalized
        activations: 0 to 7 (4: normalized values in [-7.9, 7.9] in steps of 1/16).
    prob_frac : int
        Fraction bits of the softmax RCU output and of the sequential mode's probabilities:
        0 to 7 (7: probabilities in [0, 127/128] in steps of 1/128).

    Raises
    ------
    TypeError, ValueError
        A message naming the parameter, the allowed values and the value given.
    """

    lanes: int = 16
    vacs: int = 16
    wmem_depth: int = 1024
    kv_rows: int = 512
    kv_cols: int = 16
    head_dim: int = 64
    group_size: int = 1
    kv_groups: int = 1
    mult_bits: int = 32
    clamp: str = "symmetric"
    rc_bits: int = 25
    norm_frac: int = 4
    prob_frac: int = 7

    def __post_init__(self):
        power_of_two(self.lanes, "Lane count", 1, 64)
        integer(self.vacs, "VAC count", 1, 64)
        integer(self.wmem_depth, "WMEM depth", 1, 1 << 20)
        power_of_two(self.kv_rows, "KV-cache row count", 2, 1 << 20)
        one_of(self.kv_cols, "KV-cache row width", (self.lanes,))
        integer(self.head_dim, "Head dimension", self.lanes, 1024)
        if self.head_dim % self.lanes:
            raise ValueError(f"Head dimension must be a multiple of the lane count "
                             f"{self.lanes}, not {self.head_dim}")
        integer(self.group_size, "GQA group size", 1, 64)
        integer(self.kv_groups, "KV group count", 1, 64)
        integer(self.mult_bits, "PPU multiplier width", 2, 32)
        if self.clamp not in _CLAMPS:
            raise ValueError(f"Clamp must be 'symmetric' or 'full', not {self.clamp!r}")
        integer(self.rc_bits, "RC factor width", 16, 30)
        integer(self.norm_frac, "RMSNorm fraction bits", 0, 7)
        integer(self.prob_frac, "Probability fraction bits", 0, 7)
        self.kv.check()

    @property
    def rc_mant_bits(self) -> int:
        """Significand bits of the RC factor: ``rc_bits - 6``."""
        return self.rc_bits - 6

    @property
    def kv(self) -> KVGeometry:
        """The iWuR cache's shape (shared with hdl.rdxe.DxtConfig)."""
        return KVGeometry(self.lanes, self.vacs, self.head_dim, self.kv_rows, self.kv_groups)

    key_rows = property(lambda self: self.kv.key_rows,
                        doc="KV-cache rows per key (iWuR): ``head_dim / lanes``.")
    value_rows = property(lambda self: self.kv.value_rows,
                          doc="V channels per VAC, ``ceil(head_dim / vacs)``: iWuR V rows per "
                              "block of ``lanes`` tokens.")
    half_rows = property(lambda self: self.kv.half_rows,
                         doc="Rows of each KV-cache region (K first, then V): ``kv_rows / 2``.")
    group_rows = property(lambda self: self.kv.group_rows,
                          doc="Rows of each KV group in each half: ``kv_rows / 2 // kv_groups``.")

    @property
    def out_limits(self) -> tuple[int, int]:
        """INT8 range of the requantized outputs and activations."""
        return (-127 if self.clamp == "symmetric" else -128), 127


# --- validation -----------------------------------------------------------------------------------


def _ints(values, what: str, lo: int, hi: int, ndim: int | None = None,
          shape: str = "") -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer array, not {arr.dtype}")
    if ndim is not None and (arr.ndim != ndim or 0 in arr.shape):
        raise ValueError(f"{what} must be a non-empty {shape} array, not shape {arr.shape}")
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        bad = int(arr.min()) if int(arr.min()) < lo else int(arr.max())
        raise ValueError(f"{what} must be between {lo} and {hi}, not {bad}")
    return arr.astype(np.int64)


def _int8(values, what: str, ndim: int, shape: str) -> np.ndarray:
    return _ints(values, what, *_INT8, ndim=ndim, shape=shape)


def _ppu_args(m, shift, outputs: int, params: RdxeParams) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = -(1 << (params.mult_bits - 1)), (1 << (params.mult_bits - 1)) - 1
    m = _ints(m, "PPU multiplier", lo, hi)
    shift = _ints(shift, "PPU shift", 0, SHIFT_MAX)
    for arr, what in ((m, "PPU multiplier"), (shift, "PPU shift")):
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != outputs):
            raise ValueError(f"{what} must be a scalar or one value per output ({outputs}), "
                             f"not shape {arr.shape}")
    return np.broadcast_to(m, (outputs,)), np.broadcast_to(shift, (outputs,))


def _fp32_code(value, what: str, *, zero: bool) -> np.uint32:
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"{what} must be an fp32 bit pattern (an integer), not {value!r}")
    value = int(value)
    if not 0 <= value < 1 << 32:
        raise ValueError(f"{what} must be a 32-bit code between 0 and 4294967295, not {value}")
    field = (value >> FP32.man_bits) & FP32.exp_max_field
    ok = (value >> 31) == 0 and 0 < field < FP32.exp_max_field
    if not (ok or (zero and value == 0)):
        kind = "+0 or a positive normal" if zero else "a positive normal"
        raise ValueError(f"{what} must be {kind} fp32 value, not 0x{value:08X}")
    return np.uint32(value)


def _mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"Mode must be 'fused' or 'sequential', not {mode!r}")
    return mode


def _layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"Layout must be 'iwur' or 'baseline', not {layout!r}")
    return layout


def _params(params) -> RdxeParams:
    if not isinstance(params, RdxeParams):
        raise TypeError(f"Parameters must be an RdxeParams, not {type(params).__name__}")
    return params


# --- shared steps: VAC accumulator, PPU, RC factor, RCU -------------------------------------------


def accumulate(W, x) -> np.ndarray:
    """Return the VAC accumulators ``W @ x`` (int64, exact; every value fits INT32).

    ``W``: ``(M, K)`` INT8 codes, ``x``: ``(K,)`` INT8 codes, ``K <= 2**16``. The lane-parallel
    integer sum is exact, so the chunking into ``lanes`` and the tree order do not matter.
    """
    W = _int8(W, "Weights", 2, "(outputs, inputs)")
    x = _int8(x, "Activations", 1, "(inputs,)")
    if W.shape[1] != x.shape[0]:
        raise ValueError(f"Activations must have {W.shape[1]} elements (the weights' inputs), "
                         f"not {x.shape[0]}")
    integer(x.shape[0], "Input length", 1, MAX_INPUTS)
    return dot(W, np.broadcast_to(x, W.shape))


def ppu(acc, m, shift, params: RdxeParams) -> np.ndarray:
    """Requantize accumulators to INT8: ``clamp(RNE(acc * m / 2**shift))`` (the shared
    requantizer with ``mult_bits`` signed multipliers and the ``clamp`` range)."""
    params = _params(params)
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


def to_rc(bits, frac: int, params: RdxeParams) -> RCFactor:
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
    params = _params(params)
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


def _wmem_rows(shape: tuple[int, int], params: RdxeParams) -> tuple[int, int]:
    """Return ``(chunks, passes)`` of a GEMV of ``shape``, checking that it fits the WMEM."""
    M, K = shape
    chunks, passes = -(-K // params.lanes), -(-M // params.vacs)
    if passes * chunks > params.wmem_depth:
        raise ValueError(f"GEMV needs {passes * chunks} WMEM rows per VAC ({passes} outputs x "
                         f"{chunks} chunks), more than the WMEM depth {params.wmem_depth}")
    return chunks, passes


def wmem_image(W, params: RdxeParams) -> np.ndarray:
    """Return every VAC's WMEM image for weights ``W`` (``(M, K)`` INT8), shape ``(N,
    wmem_depth, lanes)`` int8.

    Output ``o`` runs on VAC ``o mod N`` in pass ``p = o // N``; its chunk ``j`` (inputs ``j*lanes
    .. j*lanes + lanes - 1``, zero-padded past ``K``) is row ``p * C + j`` with ``C = ceil(K /
    lanes)``. Rows past ``ceil(M / N) * C`` are zero.

    Raises
    ------
    ValueError
        The GEMV needs more rows per VAC than ``wmem_depth``.
    """
    params = _params(params)
    W = _int8(W, "Weights", 2, "(outputs, inputs)")
    chunks, passes = _wmem_rows(W.shape, params)
    M, K = W.shape
    N, L = params.vacs, params.lanes
    padded = np.zeros((passes * N, chunks * L), np.int8)
    padded[:M, :K] = W
    image = np.zeros((N, params.wmem_depth, L), np.int8)
    image[:, :passes * chunks] = padded.reshape(passes, N, chunks, L).transpose(1, 0, 2, 3) \
        .reshape(N, passes * chunks, L)
    return image


def gemv(W, x, m, shift, params: RdxeParams) -> np.ndarray:
    """Compute a plain INT8 GEMV bit for bit: ``out[o] = PPU(sum_i W[o, i] * x[i])``.

    Parameters
    ----------
    W : array of int, shape ``(M, K)``
        INT8 weight codes; they must fit the WMEM (:func:`wmem_image`).
    x : array of int, shape ``(K,)``
        INT8 activation codes, ``K <= 2**16``.
    m, shift : int or array of int, shape ``(M,)``
        PPU multiplier (signed ``mult_bits``) and right shift (0 to 63), per output or shared.
    params : RdxeParams

    Returns
    -------
    np.ndarray
        ``(M,)`` int64 INT8 codes in the ``clamp`` range.

    Raises
    ------
    TypeError, ValueError
        Non-integer arrays, codes out of range, mismatched shapes, a GEMV larger than the WMEM.
    """
    params = _params(params)
    W = _int8(W, "Weights", 2, "(outputs, inputs)")
    _wmem_rows(W.shape, params)
    acc = accumulate(W, x)
    m, shift = _ppu_args(m, shift, acc.shape[0], params)
    return ppu(acc, m, shift, params)


# --- RMSNorm fused into the GEMV ------------------------------------------------------------------


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


def rms_rc(x, eps_q, params: RdxeParams, *, inv_k=None
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


def rmsnorm_gemv_trace(W_g, x, m, shift, eps_q, params: RdxeParams, *,
                       mode: str = "fused", inv_k=None) -> RmsNormTrace:
    """Compute :func:`rmsnorm_gemv` and return every intermediate value (:class:`RmsNormTrace`)."""
    params = _params(params)
    mode = _mode(mode)
    W_g = _int8(W_g, "Weights", 2, "(outputs, inputs)")
    _wmem_rows(W_g.shape, params)
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


def rmsnorm_gemv(W_g, x, m, shift, eps_q, params: RdxeParams, *, mode: str = "fused",
                 inv_k=None) -> np.ndarray:
    """Compute ``W_g @ RMSNorm(x)`` requantized to INT8, bit for bit, fused or sequential.

    Parameters
    ----------
    W_g : array of int, shape ``(M, K)``
        INT8 weights with the RMSNorm gain merged offline; they must fit the WMEM.
    x : array of int, shape ``(K,)``
        The raw INT8 input (``K <= 2**16``).
    m, shift : int or array of int
        PPU multiplier and shift, per output or shared; the same in both modes. The output is
        ``RNE(y * m / 2**shift)`` with ``y ~ (W_g @ x) * rc * 2**norm_frac``.
    eps_q : int
        fp32 code of the epsilon in units of ``x**2`` (:func:`eps_code`): +0 or a positive normal.
    params : RdxeParams
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
        Bad arrays or codes, a GEMV larger than the WMEM, an unknown mode, a negative,
        subnormal, infinite or NaN ``eps_q``.
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


def softmax_rc(p, params: RdxeParams) -> tuple[np.ndarray, np.ndarray, RCFactor]:
    """Return ``(p_sum, recip, rc)``: ``p_sum = sum p`` (exact), ``recip =
    reciprocal(int_to_float(p_sum))`` (exact conversion below 2**24), ``rc = to_rc(recip,
    prob_frac)``."""
    params = _params(params)
    p = _ints(p, "Softmax activations", 0, P_ONE)
    total = p.sum(axis=-1)
    recip = reciprocal(int_to_float(total, 32, FP32))
    return total, recip, to_rc(recip, params.prob_frac, params)


def softmax_pv_trace(s, V, scale, m, shift, params: RdxeParams, *, mode: str = "fused"
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


def softmax_pv(s, V, scale, m, shift, params: RdxeParams, *, mode: str = "fused"
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
    params : RdxeParams
    mode : str
        ``"fused"``: ``PPU(RCU(p . V))`` with the RC factor ``1 / sum p``. ``"sequential"``:
        ``probs = requantize(p, rc)`` to INT8 first, then ``PPU(probs . V)``.

    Returns
    -------
    np.ndarray
        ``(d,)`` or ``(H, d)`` int64 INT8 codes.
    """
    return softmax_pv_trace(s, V, scale, m, shift, params, mode=mode).out


# --- KV cache: GQA, iWuR and baseline layouts -----------------------------------------------------


def kv_groups(heads: int, group_size: int) -> np.ndarray:
    """Return the KV group of each query head: ``h // group_size`` (int64, shape ``(heads,)``).

    Raises
    ------
    ValueError
        ``heads`` not a multiple of ``group_size`` (or either out of range).
    """
    group_size = integer(group_size, "GQA group size", 1, 64)
    heads = integer(heads, "Query head count", 1, 4096)
    if heads % group_size:
        raise ValueError(f"Query head count must be a multiple of the GQA group size "
                         f"{group_size}, not {heads}")
    return np.arange(heads, dtype=np.int64) // group_size


def kv_address(kind: str, token, channel, params: RdxeParams, layout: str = "iwur",
               group: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(vac, row, col)`` of byte ``channel`` of token ``token``'s key (``kind="k"``) or
    value (``"v"``) in KV group ``group``; arrays broadcast. Rows count from ``group *
    group_rows`` for K and from ``kv_rows / 2 + group * group_rows`` for V (below: ``group``
    0).

    iWuR: key of token ``t`` in VAC ``t mod N``, slot ``j = t // N``, row ``j * (d / lanes) +
    i // lanes``, column ``i mod lanes`` (one key per ``d / lanes`` rows); value channel ``e`` in
    VAC ``e mod N``, ``u = e // N``, row ``(t // lanes) * ceil(d / N) + u``, column ``t mod lanes``
    (a row holds ``lanes`` tokens of one channel). Baseline: the same VACs; key row
    ``(j // lanes) * d + i``, column ``j mod lanes`` (a row holds one channel of ``lanes`` slots);
    value row ``t * ceil(ceil(d / N) / lanes) + u // lanes``, column ``u mod lanes`` (a row holds
    one token's channels of that VAC).
    """
    params = _params(params)
    layout = _layout(layout)
    if kind not in ("k", "v"):
        raise ValueError(f"KV kind must be 'k' or 'v', not {kind!r}")
    group = integer(group, "KV group", 0, params.kv_groups - 1)
    t, ch = np.broadcast_arrays(np.asarray(token, np.int64), np.asarray(channel, np.int64))
    N, L, d, c = params.vacs, params.lanes, params.head_dim, params.value_rows
    offset = group * params.group_rows
    if kind == "k":
        vac, slot = t % N, t // N
        if layout == "iwur":
            return vac, offset + slot * params.key_rows + ch // L, ch % L
        return vac, offset + (slot // L) * d + ch, slot % L
    vac, u, base = ch % N, ch // N, params.half_rows + offset
    if layout == "iwur":
        return vac, base + (t // L) * c + u, t % L
    per_token = -(-c // L)
    return vac, base + t * per_token + u // L, u % L


def kv_capacity(params: RdxeParams, layout: str = "iwur") -> int:
    """Return the tokens one KV group's caches hold: the first token whose key or value would
    fall past its half of a cache.

    iWuR: ``min(N * (group_rows // (d/lanes)), lanes * (group_rows // ceil(d/N)))``. Baseline:
    ``min(N * lanes * (group_rows // d), group_rows // ceil(ceil(d/N) / lanes))``
    (``group_rows = kv_rows / 2`` with one KV group).
    """
    params = _params(params)
    layout = _layout(layout)
    N, L, d, c, half = params.vacs, params.lanes, params.head_dim, params.value_rows, \
        params.group_rows
    if layout == "iwur":
        return params.kv.capacity
    return min(N * L * (half // d), half // -(-c // L))


@dataclass(frozen=True)
class KVImage:
    """Storage image of one KV group's caches after a sequence of writes.

    Attributes
    ----------
    data : np.ndarray
        ``(N, kv_rows, lanes)`` int8: every VAC's cache; bytes never written are 0.
    written : np.ndarray
        ``(N, kv_rows, lanes)`` bool: the bytes some write stored.
    responses : np.ndarray
        ``(writes,)`` bool: True (OKAY) for a stored token, False (ERROR) for a write past
        capacity, which stores nothing.
    tokens : int
        Tokens stored (the write pointer).
    layout : str
    """

    data: np.ndarray
    written: np.ndarray
    responses: np.ndarray
    tokens: int
    layout: str
    group: int = 0


def kv_image(K, V, params: RdxeParams, layout: str = "iwur", group: int = 0) -> KVImage:
    """Write tokens ``0, 1, ...`` (rows of ``K`` and ``V``, ``(T, d)`` INT8) in order into KV
    group ``group`` of the caches and return the storage image (the other groups' rows 0).

    iWuR write protocol (the image does not depend on its timing): the key bytes of token ``t``
    are broadcast over the GBUS, ``GBUS_BYTES`` channels per transfer (channel ``i`` driven by its
    producer, VAC ``i mod N``), and VAC ``t mod N`` stores each transfer with byte enables into
    one row; value channel ``e`` is written by its producer VAC ``e mod N`` into its own cache, one
    byte (one column) per row. A write at or past :func:`kv_capacity` is answered ERROR and
    changes nothing; later writes are answered ERROR too (the write pointer does not move).
    """
    params = _params(params)
    layout = _layout(layout)
    K = _int8(K, "Keys", 2, "(tokens, head dimension)")
    V = _int8(V, "Values", 2, "(tokens, head dimension)")
    d = params.head_dim
    if K.shape[1] != d:
        raise ValueError(f"Keys must have {d} channels (the head dimension), not {K.shape[1]}")
    if V.shape != K.shape:
        raise ValueError(f"Values must have the keys' shape {K.shape}, not {V.shape}")
    writes = K.shape[0]
    stored = min(writes, kv_capacity(params, layout))
    data = np.zeros((params.vacs, params.kv_rows, params.lanes), np.int8)
    written = np.zeros(data.shape, bool)
    t, ch = np.meshgrid(np.arange(stored), np.arange(d), indexing="ij")
    for kind, src in (("k", K), ("v", V)):
        vac, row, col = kv_address(kind, t, ch, params, layout, group)
        data[vac, row, col] = src[:stored]
        written[vac, row, col] = True
    return KVImage(data, written, np.arange(writes) < stored, stored, layout, group)


def kv_read(image: KVImage, params: RdxeParams) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(K, V)`` (``(tokens, d)`` int64) read back from ``image`` through the address map
    of its layout."""
    params = _params(params)
    t, ch = np.meshgrid(np.arange(image.tokens), np.arange(params.head_dim), indexing="ij")
    out = []
    for kind in ("k", "v"):
        vac, row, col = kv_address(kind, t, ch, params, image.layout, image.group)
        out.append(image.data[vac, row, col].astype(np.int64))
    return out[0], out[1]


# --- Q.K^T and attention --------------------------------------------------------------------------


def qk_scores(q, K, m, shift, params: RdxeParams) -> tuple[np.ndarray, np.ndarray]:
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


def _heads(q, params: RdxeParams, groups: int) -> tuple[np.ndarray, np.ndarray]:
    q = _int8(q, "Query", 2, "(heads, head dimension)")
    if q.shape[1] != params.head_dim:
        raise ValueError(f"Query must have {params.head_dim} channels (the head dimension), "
                         f"not {q.shape[1]}")
    group = kv_groups(q.shape[0], params.group_size)
    if q.shape[0] != groups * params.group_size:
        raise ValueError(f"Query head count must be {groups * params.group_size} ({groups} KV "
                         f"groups of {params.group_size}), not {q.shape[0]}")
    return q, group


def attention(q, K, V, *, score_m, score_shift, scale, m, shift, params: RdxeParams,
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
    params : RdxeParams
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


def attention_cached(q, images, *, score_m, score_shift, scale, m, shift, params: RdxeParams,
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


def rmsnorm_error_bound(W_g, x, m, shift, eps_q, params: RdxeParams, *, mode: str = "fused"
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


def softmax_error_bound(s, V, scale, m, shift, params: RdxeParams, *, mode: str = "fused"
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


def mode_gap_bound(W, a, rc: RCFactor, m, shift, params: RdxeParams) -> np.ndarray:
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


# --- cycle model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """Latencies in cycles of the shared units the DXT is built from (their default pipeline
    depths in hdl/arith) and of the DXT's own registers and queues.

    ``dot(lanes) = 1 + log2(lanes)`` is the ``IntDot`` latency (products, then one register per
    tree level); ``accumulate`` the INT32 accumulator register; ``broadcast`` the RC factor's
    register on its way to every RCU (the head of each VAC's factor queue). The DXT's own:
    ``score_read`` (the VE's score buffer), ``queue`` (a buffered FIFO: the chunk queue in front
    of HLINK, and each VAC's result queue in front of the GBUS), ``row`` (a VAC's operand path,
    ``hdl.rdxe.Vac.row_latency = 1 + operand_stages``), ``wait`` (the sequencer seeing the
    sequential mode's factor), ``response`` (the response queue), ``word`` (the result stream's
    register) and ``accept`` (the sequencer's decode: an operation that waits for nothing issues
    its first request ``accept + 1`` cycles after the previous operation's last). ``decode`` is
    the register a command waits in, decoded, before the sequencer takes it: a command taken
    alone issues its first request ``decode + accept`` cycles later (back to back it is decoded
    while the previous operation issues, so the spacing above stays). ``split`` is the
    VE's register between exp2's result, split into the requantizer's significand and shift, and
    the activation requantizer (docs/rdxe.md section 9.1: the DXT's critical path ran through
    that split into the requantizer's multiplier). ``rc_out`` is the VE's register on the RC
    factor after the conversion's renormalization and saturation, before the factor fans out to
    the VACs.
    """

    requant: int = 4
    int_to_float: int = 3
    fmul: int = 5
    fadd: int = 6
    exp2: int = 7
    rsqrt: int = 16
    reciprocal: int = 12
    accumulate: int = 1
    broadcast: int = 1
    score_read: int = 2
    queue: int = 2
    row: int = 5
    wait: int = 1
    response: int = 2
    word: int = 1
    accept: int = 1
    split: int = 1
    rc_out: int = 1
    decode: int = 1

    def dot(self, lanes: int) -> int:
        return 1 + (lanes.bit_length() - 1)

    @property
    def activation(self) -> int:
        """``E``: the VE's exp path from a score to its activation, ``int_to_float + fmul +
        exp2 + split + requant``."""
        return self.int_to_float + self.fmul + self.exp2 + self.split + self.requant

    @property
    def request(self) -> int:
        """A request's issue to its chunk in the chunk queue: ``score_read + E`` (every request
        takes the activation path's time, so chunks stay in order)."""
        return self.score_read + self.activation

    @property
    def lead(self) -> int:
        """An operation's first request issued to its cycle 0 (its first chunk meeting its row at
        VAC 0's lane tree): ``request + queue + row``."""
        return self.request + self.queue + self.row

    @property
    def factor(self) -> int:
        """A sum's final accumulator to its RC factor leaving the VE: ``int_to_float +
        max(fmul + fadd + rsqrt, reciprocal) + requant + rc_out`` (the reciprocal waits for the
        RMSNorm path, so factors leave in order)."""
        return (self.int_to_float + max(self.fmul + self.fadd + self.rsqrt, self.reciprocal)
                + self.requant + self.rc_out)


@dataclass(frozen=True)
class Cycles:
    """Cycle count of one operation on a DXT.

    Attributes
    ----------
    total : int
        Cycles from cycle 0 (the first chunk meeting its row at VAC 0's lane tree) to the last
        result leaving a PPU (inclusive); for Q.K^T, to its last GBUS word (the write-back is
        part of it).
    macs : int
        Useful multiply-accumulates.
    utilization : float
        ``macs / (N * lanes * total)``.
    rc_ready : int or None
        Cycle at which the RC factor reaches the RCUs (VRC operations).
    hold : int
        Finished accumulators VAC 0 holds while waiting for the RC factor (fused mode).
    done : int
        Cycles from cycle 0 to the operation's last GBUS word (inclusive): the results leave
        the VACs four per cycle in output order. The DXT's response follows ``response`` cycles
        later, and the operation's first request went out ``Latency.lead`` cycles before cycle
        0.
    """

    total: int
    macs: int
    utilization: float
    rc_ready: int | None = None
    hold: int = 0
    done: int = 0


def _pos(value, what: str) -> int:
    return integer(value, what, 1, 1 << 30)


def _acc_ready(outputs: int, inputs: int, params: RdxeParams, lat: Latency) -> np.ndarray:
    """Cycle at which each output's accumulator holds its final value (first chunk at cycle 0),
    for every output of every pass: the last pass's padding outputs (past ``outputs``) are
    computed too, by the VACs that have no real output left."""
    N, C = params.vacs, -(-inputs // params.lanes)
    o = np.arange(-(-outputs // N) * N, dtype=np.int64)
    return (o // N) * C + (C - 1) + (o % N) + lat.dot(params.lanes) + lat.accumulate


def _gbus(results: np.ndarray, lat: Latency) -> int:
    """``done`` of results leaving the PPUs at ``results`` (every output of every pass, in output
    order): a result is on its VAC's ``o`` ``queue`` cycles later; GBUS word ``w`` (outputs ``4w
    .. 4w + 3``) moves at ``g_w = max(its results there, g_(w-1) + 1)``; ``done = g_last + 1``."""
    words = -(-len(results) // GBUS_BYTES)
    padded = np.full(words * GBUS_BYTES, -1, np.int64)
    padded[:len(results)] = results + lat.queue
    ready = padded.reshape(words, GBUS_BYTES).max(axis=1)
    return int((ready + np.arange(words)[::-1]).max()) + 1   # g_last = max_w (R_w + W - 1 - w)


def _cycles(total: int, outputs: int, inputs: int, params: RdxeParams, **extra) -> Cycles:
    macs = outputs * inputs
    return Cycles(int(total), macs, macs / (params.vacs * params.lanes * int(total)), **extra)


def gemv_cycles(outputs: int, inputs: int, params: RdxeParams, lat: Latency = Latency()
                ) -> Cycles:
    """Cycles of a plain GEMV of ``outputs`` x ``inputs`` on one DXT.

    Model: ``C = ceil(inputs / lanes)`` chunks per output; the token buffer streams the
    ``ceil(outputs / N)`` passes back to back, one lanes-wide chunk per cycle over HLINK; VAC
    ``v`` sees chunk ``j`` of pass ``p`` at cycle ``p*C + j + v`` (one cycle per HLINK hop) with
    its WMEM row; output ``o`` (VAC ``o mod N``, pass ``o // N``; the last pass's padding
    outputs included) has its accumulator at ``a_o = (o//N)*C + C - 1 + o mod N + dot +
    accumulate`` and its INT8 result ``requant`` cycles later. ``total = max_o a_o + requant +
    1``; ``done`` adds the GBUS (:func:`_gbus`).
    """
    params = _params(params)
    outputs, inputs = _pos(outputs, "Output count"), _pos(inputs, "Input length")
    results = _acc_ready(outputs, inputs, params, lat) + lat.requant
    return _cycles(results.max() + 1, outputs, inputs, params, done=_gbus(results, lat))


def _rc_ready(inputs: int, params: RdxeParams, lat: Latency) -> int:
    """The RC factor at the RCUs: the VE's sum taps chunk ``j`` at cycle ``j`` (where VAC 0's
    lane tree meets it), then ``dot + accumulate``, :attr:`Latency.factor` and the broadcast
    register."""
    C = -(-inputs // params.lanes)
    return C - 1 + lat.dot(params.lanes) + lat.accumulate + lat.factor + lat.broadcast


def _fused(outputs: int, inputs: int, params: RdxeParams, lat: Latency, rc_ready: int
           ) -> Cycles:
    ready = _acc_ready(outputs, inputs, params, lat)
    N = params.vacs
    hold = int(np.count_nonzero(ready[::N] < rc_ready))
    # Each VAC's RCU takes one accumulator per cycle, in output order and not before the factor:
    # s_k = max(a_k, rc_ready, s_(k-1) + 1) over the VAC's outputs o = v, v + N, ...
    entry = np.zeros_like(ready)
    for v in range(N):
        s = -1
        for index in range(v, len(ready), N):
            s = max(int(ready[index]), rc_ready, s + 1)
            entry[index] = s
    results = entry + 2 * lat.requant
    return _cycles(results.max() + 1, outputs, inputs, params, rc_ready=rc_ready, hold=hold,
                   done=_gbus(results, lat))


def _sequential(plain: Cycles, inputs: int, params: RdxeParams, lat: Latency, rc_ready: int
                ) -> Cycles:
    """The sequential mode: the sum's pass (not on HLINK) gives the factor at ``rc_ready``; the
    sequencer sees it ``wait`` cycles later and normalizes the ``C`` chunks in the token buffer
    (one read per cycle), then issues the plain GEMV, whose cycle 0 comes ``lead`` cycles after
    its first request."""
    C = -(-inputs // params.lanes)
    start = rc_ready + lat.wait + C + lat.lead
    return _cycles(start + plain.total, plain.macs // inputs, inputs, params, rc_ready=rc_ready,
                   done=start + plain.done)


def rmsnorm_gemv_cycles(outputs: int, inputs: int, params: RdxeParams, *, mode: str = "fused",
                        lat: Latency = Latency()) -> Cycles:
    """Cycles of an RMSNorm-GEMV, fused or sequential.

    The VE's sum ``IntDot(x, x)`` takes chunk ``j`` at cycle ``j``, where VAC 0's lane tree meets
    it; then its accumulator, ``int_to_float``, ``fmac`` (``fmul + fadd``), ``rsqrt``, the RC
    conversion (a requantizer) and the broadcast register::

        rc_ready = C - 1 + dot + accumulate + int_to_float + fmul + fadd + rsqrt + requant
                   + broadcast

    Fused: the GEMV runs as :func:`gemv_cycles`; a finished accumulator waits for ``rc_ready``,
    then RCU and PPU. Each VAC's RCU takes one accumulator per cycle in output order, so VAC
    ``v``'s outputs enter it at ``s_k = max(a_k, rc_ready, s_(k-1) + 1)`` and ``total = max_v
    s_last + 2 * requant + 1`` (``max(max_o a_o, rc_ready) + 2 * requant + 1`` when no VAC holds
    more than one finished accumulator at ``rc_ready``). Sequential: ``x`` fills the token
    buffer while the VE sums it (cycle 0 is its first chunk at the sum), and ``total = rc_ready
    + wait + C + lead + gemv_cycles(...).total`` (:func:`_sequential`).
    """
    params = _params(params)
    mode = _mode(mode)
    outputs, inputs = _pos(outputs, "Output count"), _pos(inputs, "Input length")
    rc_ready = _rc_ready(inputs, params, lat)
    if mode == "fused":
        return _fused(outputs, inputs, params, lat, rc_ready)
    return _sequential(gemv_cycles(outputs, inputs, params, lat), inputs, params, lat, rc_ready)


def softmax_pv_cycles(tokens: int, params: RdxeParams, *, mode: str = "fused",
                      lat: Latency = Latency()) -> Cycles:
    """Cycles of one head's softmax-P.V (``head_dim`` outputs, ``tokens`` inputs).

    The INT8 scores and their maximum are in the VE (:func:`qk_cycles`). The VE reads ``lanes``
    scores per cycle and makes ``lanes`` activations per cycle through ``lanes`` copies of
    ``int_to_float``, ``fmul``, ``exp2`` and a requantizer (``E = Latency.activation``); like
    every request, an activation reaches VAC 0's lane tree ``lead`` cycles after its request, at
    cycle ``j`` for chunk ``j``, where the VE's ``sum p`` (the RMSNorm sum's IntDot, with ones)
    takes it. The factor ``reciprocal(P)`` leaves the converter with the RMSNorm path's latency,
    so ``rc_ready`` is RMSNorm's formula with ``C = ceil(tokens / lanes)``.

    Fused: the activations are the P.V GEMV's first pass (and fill the token buffer for the
    later ones): :func:`gemv_cycles` with the RCU schedule of :func:`rmsnorm_gemv_cycles`.
    Sequential: the activations fill the token buffer while the VE sums them; ``total =
    rc_ready + wait + C + lead + gemv_cycles(head_dim, tokens).total``.
    """
    params = _params(params)
    mode = _mode(mode)
    tokens = integer(tokens, "Token count", 1, MAX_TOKENS)
    rc_ready = _rc_ready(tokens, params, lat)
    d = params.head_dim
    if mode == "fused":
        return _fused(d, tokens, params, lat, rc_ready)
    return _sequential(gemv_cycles(d, tokens, params, lat), tokens, params, lat, rc_ready)


def qk_cycles(tokens: int, params: RdxeParams, lat: Latency = Latency()) -> Cycles:
    """Cycles of one head's Q.K^T with INT8 write-back to the VE (iWuR layout).

    A GEMV with ``tokens`` outputs and ``head_dim`` inputs: token ``t`` on VAC ``t mod N`` (its
    owner), one key row per cycle, the query re-streamed every pass; the score leaves the PPU at
    ``r_t = a_t + requant`` and is on the VAC's ``o`` ``queue`` cycles later. The GBUS moves
    ``GBUS_BYTES`` scores per transfer in token order, one transfer per cycle: transfer ``w``
    happens at ``g_w = max(max r_t + queue over its scores, g_(w-1) + 1)`` (the last pass's
    padding tokens included), and the VE stores the scores and updates the running maximum as
    they come. ``total = done = g_last + 1``.
    """
    params = _params(params)
    tokens = integer(tokens, "Token count", 1, MAX_TOKENS)
    results = _acc_ready(tokens, params.head_dim, params, lat) + lat.requant
    done = _gbus(results, lat)
    return _cycles(done, tokens, params.head_dim, params, done=done)


@dataclass(frozen=True)
class ReadCycles:
    """KV-cache reads of one head's Q.K^T or P.V.

    Attributes
    ----------
    reads : np.ndarray
        ``(N,)`` row reads of each VAC's cache.
    cycles : int
        ``max(reads)``: read-port cycles of the DXT (one read per VAC per cycle).
    utilization : float
        Operand bytes the MACs use over the bytes the ports could deliver in ``cycles``:
        ``useful / (N * lanes * cycles)``.
    """

    reads: np.ndarray
    cycles: int
    utilization: float


def kv_read_cycles(tokens: int, op: str, params: RdxeParams, layout: str = "iwur"
                   ) -> ReadCycles:
    """KV-cache row reads of one head's ``op`` (``"qk"`` or ``"pv"``) over ``tokens`` tokens.

    Model: each VAC reads every cache row holding operands of its outputs once, and uses all of
    them. For iWuR a row is one operand chunk as the MAC takes it (a chunk of a key for Q.K^T;
    ``lanes`` tokens of one value channel for P.V). The baseline (K column-wise, V row-wise) is
    given an operand staging buffer in every VAC so that it too uses each row it reads in full:
    a ``d x lanes`` transpose buffer turns ``d`` K rows (one channel of ``lanes`` slots each)
    into ``lanes`` keys, and a V row (one token's channels of that VAC) feeds one byte to each of
    its ``c_v`` channels' chunks. ``T_v = ceil((tokens - v) / N)`` tokens and ``c_v`` value
    channels belong to VAC ``v``. Reads per VAC:

    ========  =========================  ==================================
    op        iWuR                       baseline
    ========  =========================  ==================================
    qk        ``T_v * d / lanes``        ``ceil(T_v / lanes) * d``
    pv        ``c_v * ceil(T / lanes)``  ``T * ceil(c_v / lanes)``
    ========  =========================  ==================================

    Useful bytes: ``T_v * d`` (qk) and ``c_v * T`` (pv) in both layouts. So Q.K^T reads the same
    (the baseline pays a transpose buffer), and P.V reads ``lanes / c`` times more rows in the
    baseline (a V row holds ``c`` of its ``lanes`` bytes; 4 at the defaults).
    """
    params = _params(params)
    layout = _layout(layout)
    tokens = integer(tokens, "Token count", 1, MAX_TOKENS)
    if op not in ("qk", "pv"):
        raise ValueError(f"Operation must be 'qk' or 'pv', not {op!r}")
    N, L, d = params.vacs, params.lanes, params.head_dim
    v = np.arange(N, dtype=np.int64)
    if op == "qk":
        per_vac = np.maximum(0, -(-(tokens - v) // N))
        useful = per_vac * d
        reads = per_vac * params.key_rows if layout == "iwur" else -(-per_vac // L) * d
    else:
        per_vac = np.array([len(range(i, d, N)) for i in range(N)], np.int64)
        useful = per_vac * tokens
        reads = per_vac * -(-tokens // L) if layout == "iwur" else tokens * -(-per_vac // L)
    cycles = int(reads.max())
    return ReadCycles(reads, cycles, float(useful.sum()) / (N * L * cycles))


def layout_cycles(tokens: int, op: str, params: RdxeParams, layout: str = "iwur", *,
                  mode: str = "fused", lat: Latency = Latency()) -> int:
    """Cycles of one head's Q.K^T (``op="qk"``) or softmax-P.V (``"pv"``, ``mode``) with the KV
    cache in ``layout``.

    iWuR: :func:`qk_cycles` / :func:`softmax_pv_cycles` (the DXT built). Baseline (modelled, not
    built): the same plus the extra read-port cycles of :func:`kv_read_cycles` (a VAC's chunk
    stream waits for its reads), and for Q.K^T the ``d`` reads that fill the transpose buffer
    before the first key can go (iWuR reads ``d / lanes`` rows before it).
    """
    params = _params(params)
    layout = _layout(layout)
    if op == "qk":
        iwur = qk_cycles(tokens, params, lat).total
    elif op == "pv":
        iwur = softmax_pv_cycles(tokens, params, mode=mode, lat=lat).total
    else:
        raise ValueError(f"Operation must be 'qk' or 'pv', not {op!r}")
    if layout == "iwur":
        return iwur
    extra = (kv_read_cycles(tokens, op, params, "baseline").cycles -
             kv_read_cycles(tokens, op, params).cycles)
    if op == "qk":
        extra += params.head_dim - params.key_rows
    return iwur + max(0, extra)


def kv_write_cycles(params: RdxeParams, layout: str = "iwur") -> dict[str, int]:
    """Cycles to write one token into one KV group's caches.

    ``gbus``: key transfers over the GBUS, ``d / GBUS_BYTES`` (both layouts: the key goes to its
    owner). ``k``: writes into the owner's cache: iWuR one byte-enabled row write per transfer
    (``d / 4``), baseline one byte per row (``d``). ``v``: writes per VAC, in parallel, no GBUS:
    iWuR one byte per row (``ceil(d / N)``), baseline one row (``ceil(ceil(d / N) / lanes)``).
    """
    params = _params(params)
    layout = _layout(layout)
    d, c, L = params.head_dim, params.value_rows, params.lanes
    gbus = -(-d // GBUS_BYTES)
    if layout == "iwur":
        return {"gbus": gbus, "k": gbus, "v": c}
    return {"gbus": gbus, "k": d, "v": -(-c // L)}


# --- measurement ----------------------------------------------------------------------------------


def _survey(seeds: int = 40) -> None:
    """Print the worst errors against the float64 references and the bounds, and the cycle
    table at the issue's sizes."""
    params = RdxeParams()
    lo, hi = params.out_limits
    print("RMSNorm-GEMV: worst |out - clip(ref)| (output steps) and worst error / bound")
    for K, M, spread in ((64, 32, 127), (1024, 64, 127), (1024, 64, 8), (4096, 16, 127),
                         (1024, 64, 1)):
        for mode in MODES:
            worst = ratio = 0.0
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                x = rng.integers(-spread, spread + 1, K)
                W = rng.integers(-127, 128, (M, K))
                m = rng.integers(1 << 30, 1 << 31, M)
                # Outputs spread over the INT8 range: y ~ sqrt(K) * 127 * 2**F * m / 2**shift.
                shift = np.full(M, 31 + int(round(math.log2(math.sqrt(K) * 2 ** params.norm_frac
                                                            * 127 / 40))))
                eps = eps_code(1e-5, 0.05)
                p = RdxeParams(wmem_depth=1 << 20)
                out = rmsnorm_gemv(W, x, m, shift, eps, p, mode=mode)
                ref = np.clip(rmsnorm_gemv_reference(W, x, m, shift, eps, p.norm_frac), lo, hi)
                err = np.abs(out - ref)
                bound = rmsnorm_error_bound(W, x, m, shift, eps, p, mode=mode)
                worst, ratio = max(worst, err.max()), max(ratio, (err / bound).max())
            print(f"  K={K:<5} M={M:<3} |x|<={spread:<3} {mode:<10} worst {worst:.4f}  "
                  f"error/bound {ratio:.4f}")
    print("softmax-P.V: worst |out - clip(ref)| (output steps) and worst error / bound")
    for T, step, kind in ((16, 0.1, "normal"), (256, 0.1, "normal"), (1024, 0.05, "normal"),
                          (1024, 0.02, "wide"), (1000, 0.1, "dominant"), (512, 0.1, "equal")):
        for mode in MODES:
            worst = ratio = 0.0
            for seed in range(seeds // 4):
                rng = np.random.default_rng(seed)
                s = {"normal": np.clip(np.rint(rng.normal(0, 30, T)), -128, 127),
                     "wide": rng.integers(-128, 128, T),
                     "dominant": np.r_[127, rng.integers(-128, 20, T - 1)],
                     "equal": np.full(T, 5)}[kind].astype(np.int64)
                V = rng.integers(-127, 128, (T, params.head_dim))
                scale = log2_scale(step)
                m = np.full(params.head_dim, 1 << 30)
                shift = 30 + params.prob_frac
                out = softmax_pv(s, V, scale, m, shift, params, mode=mode)
                ref = np.clip(softmax_pv_reference(s, V, scale, m, shift, params.prob_frac),
                              lo, hi)
                err = np.abs(out - ref)
                bound = softmax_error_bound(s, V, scale, m, shift, params, mode=mode)
                worst, ratio = max(worst, err.max()), max(ratio, (err / bound).max())
            print(f"  T={T:<5} step={step:<5} {kind:<9} {mode:<10} worst {worst:.4f}  "
                  f"error/bound {ratio:.4f}")
    print("cycles (default DXT: 16 VACs x 16 lanes)")
    for name, M, K in (("OPT-350M QKV 3072x1024", 3072, 1024), ("OPT-350M FFN1 4096x1024", 4096,
                       1024), ("MT5 QKV 1152x512", 1152, 512), ("MT5 FFN1 1024x512", 1024, 512)):
        plain = gemv_cycles(M, K, params)
        fused = rmsnorm_gemv_cycles(M, K, params, mode="fused")
        seq = rmsnorm_gemv_cycles(M, K, params, mode="sequential")
        print(f"  {name:<24} plain {plain.total:>6} ({plain.utilization:.4f})  fused "
              f"{fused.total:>6} (+{fused.total / plain.total - 1:.4%})  sequential "
              f"{seq.total:>6} (x{seq.total / fused.total:.3f})")
    for T in (64, 256, 1024):
        fused = softmax_pv_cycles(T, params, mode="fused")
        seq = softmax_pv_cycles(T, params, mode="sequential")
        qk = qk_cycles(T, params)
        reads = {lay: (kv_read_cycles(T, "qk", params, lay).cycles +
                       kv_read_cycles(T, "pv", params, lay).cycles) for lay in LAYOUTS}
        print(f"  T={T:<5} Q.K^T {qk.total:>5}  P.V fused {fused.total:>5} sequential "
              f"{seq.total:>5} (x{seq.total / fused.total:.3f})  KV reads iWuR "
              f"{reads['iwur']:>5} baseline {reads['baseline']:>6}")


if __name__ == "__main__":
    _survey()
