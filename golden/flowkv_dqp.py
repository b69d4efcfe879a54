"""Bit-exact and float64 models of FlowKV's FusedDQP projection (Q4NX weights) and a batched
FlowKV attention for prefills, used by the real-model back-end (``sim.llm.backends.flowkv``).

Source: "Mapping Gemma3 onto an Edge Dataflow Architecture", Sec. 3.1.1 (Q4NX, Eq. 3) and
Sec. 3.2.1 (FusedDQP, Eqs. 14 and 15). There is no FusedDQP RTL yet: these functions are the
specification it will be checked against. BF16 and FP16 values travel as ``np.uint16`` codes,
FP32 as ``np.uint32``; every operation is one of :mod:`golden.arith.float`'s (round to nearest
even, flush-to-zero, canonical NaN).

Q4NX (:func:`q4nx_from_q41`). A Q4_1 matrix (groups of 32 consecutive input elements of a row,
``w = d * q + m``, fp16 ``d`` and ``m``, 4-bit ``q``) becomes Q4NX by converting ``d`` and ``m``
to bf16 offline (the paper: the NPU multiplies only bf16), one RNE rounding each
(:func:`golden.arith.float.fconvert` FP16 -> BF16; an fp16 subnormal would read as zero, and
SmolLM2 has none). The 4-bit codes are unchanged. The paper's 32 x 256 tiling only arranges the
same groups in memory and does not change any value.

Dequantization (:func:`dequantize`), per element: ``q`` to bf16 (exact), ``fmul(d, q)`` bf16 x
bf16 -> fp32 (exact: 8 x 4 significand bits), ``fadd(that, m)`` in fp32 (one rounding, exact
unless the exponents of ``d q`` and ``m`` differ by more than 15), then ``fconvert`` fp32 -> bf16
(the rounding that matters: relative error at most ``2**-8``). This is "dequantize to bf16".

Projection (:func:`gemm`, :func:`gemv`): ``y[t, o] = sum_i w[o, i] a[t, i]`` with bf16 weights
(dequantized) and bf16 activations, "multiply into fp32": products bf16 x bf16 -> fp32 (exact),
then, per group ``g`` of 32 inputs (one Q4NX scale), a 32-lane pairwise tree of fp32 adds
(:func:`golden.arith.float.fdot`: lanes (0, 1), (2, 3), ..., then neighbouring sums), giving
``s_g``; the group sums are accumulated in order into one fp32 accumulator,
``y = (((s_0 + s_1) + s_2) + ...)`` (Eq. 15's ``y_acc +=``, one group per step). A lane tree of
32 multipliers and 31 adders and one accumulator per output row realise it.

Fast path. Calling ``fdot`` on 27 G products (256 tokens of SmolLM2) takes hours; :func:`gemm`
computes the same order with NumPy float32 arithmetic, which is IEEE round to nearest even like
the golden units, and differs from them only on subnormal operands or results (flushed by the
golden units) and on NaN payloads. It is used only when it provably matches: inputs are flushed
(:func:`golden.arith.float.ftz`) and finite, and ``min|a| * min|w| >= 2**-103`` over the nonzero
values. Then every nonzero product is a normal fp32 (exact), and every partial sum is a multiple
of ``Q = 2**(E - 23) >= 2**-126`` (``2**E`` the least nonzero product; rounding a multiple of
``Q`` to fp32 gives a multiple of ``Q``), so no intermediate is subnormal. A finite result means
that no intermediate overflowed (``inf`` never returns to finite). Otherwise, or with
``path="golden"``, the golden units compute it (:func:`gemm_golden`). A test checks the two
bit for bit on real weights.

Error bound (:func:`gemm_error_bound`): against :func:`gemm_reference` (float64 of the same bf16
codes), ``|y - ref| <= (gamma(5 + G - 1) + 2 K 2**-53) sum_i |w a|``, ``gamma(n) = n u / (1 -
n u)``, ``u = 2**-24``, ``G = K / 32`` groups: each product passes through at most 5 tree
levels and ``G - 1`` accumulator adds (standard recursive-summation analysis), plus the float64
reference's own rounding. Valid without overflow and with no subnormal intermediate.

Stream layout (:func:`q4nx_records`, :func:`q4nx_from_records`): the FusedDQP engine reads a
Q4NX matrix as *row records* of 20 bytes, one output row's group of 32: bytes 0 .. 15 the codes
(element ``2 j`` in the low nibble of byte ``j``, ``2 j + 1`` in the high one: element order, not
ggml's ``(j, j + 16)`` pairs), bytes 16 .. 17 ``d`` and 18 .. 19 ``m`` (bf16, little-endian), in
the order the engine uses them: tiles of ``m`` rows, in each tile group by group, in each group
row by row. 256 consecutive records are 5,120 bytes, the paper's Q4NX block (Sec. 3.1.1).

Batched attention lives with the FlowKV golden: :func:`golden.flowkv.attend_many`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.arith.format import BF16, FP16, FP32

from .arith.float import fadd, fconvert, fdot, fmul, ftz, int_to_float, to_float
from .flowkv import _codes16

__all__ = ["GROUP", "TREE_LEVELS", "RECORD_BYTES", "Q4NX", "q4nx_from_q41", "q4nx_records",
           "q4nx_from_records", "dequantize", "dequantize_reference",
           "gemm", "gemv", "gemm_golden", "gemm_reference", "gemm_error_bound"]

#: Inputs per Q4NX group (one bf16 scale and one bf16 minimum): ggml's ``QK4_1``.
GROUP = 32
#: Levels of the 32-lane pairwise tree.
TREE_LEVELS = 5
#: Bytes of a row record: 16 of codes, bf16 ``d`` and ``m`` (module notes).
RECORD_BYTES = GROUP // 2 + 4
_U = 2.0 ** -24
_FAST_MIN = 2.0 ** -103              # least min|a| * min|w| of the fast path (module notes)
_BLOCK = 1 << 25                     # products per block of the fast path (bounds memory)
_SIGN = np.uint32(1 << 31)
#: The bf16 codes of the 4-bit values 0 .. 15 (exact), looked up instead of converted per weight.
_Q_BF16 = int_to_float(np.arange(16), 5, BF16)
_NEG_INF = np.uint32(FP32.infinity(1))


@dataclass(frozen=True, eq=False)
class Q4NX:
    """A Q4NX matrix: ``w[r, c] = d[r, c // 32] * q[r, c] + m[r, c // 32]`` (bf16 ``d``, ``m``).

    ``d``, ``m``: bf16 codes (``np.uint16``), shape ``(rows, cols / 32)``; ``q``: 4-bit codes
    (``np.uint8``, 0 .. 15) in element order, shape ``(rows, cols)``.
    """

    d: np.ndarray
    m: np.ndarray
    q: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape


def q4nx_from_q41(d, m, q) -> Q4NX:
    """Convert Q4_1 blocks to Q4NX: fp16 ``d``, ``m`` codes rounded to bf16 (RNE), ``q`` kept.

    Parameters
    ----------
    d, m : arrays of FP16 codes, shape ``(rows, cols / 32)``
    q : array of 4-bit codes 0 .. 15, shape ``(rows, cols)``

    Raises
    ------
    ValueError
        ``q`` not 2-D with columns a multiple of 32, codes out of range, ``d``/``m`` of the wrong
        shape (``TypeError`` for float arrays).
    """
    q = np.asarray(q)
    if q.ndim != 2 or q.shape[1] % GROUP or 0 in q.shape:
        raise ValueError(f"q must be a non-empty (rows, cols) array with cols a multiple of "
                         f"{GROUP}, not shape {q.shape}")
    if q.dtype.kind not in "ui" or int(q.min()) < 0 or int(q.max()) > 15:
        raise ValueError(f"q must hold integer codes between 0 and 15, not {q.dtype} "
                         f"{q.min()} .. {q.max()}")
    groups = (q.shape[0], q.shape[1] // GROUP)
    d = fconvert(_codes16(d, "d", groups), FP16, BF16)
    m = fconvert(_codes16(m, "m", groups), FP16, BF16)
    return Q4NX(d=d, m=m, q=q.astype(np.uint8))


def _tiles(rows: int, cols: int, tile: int) -> tuple[int, int]:
    if not isinstance(tile, (int, np.integer)) or isinstance(tile, bool) or tile < 1 \
            or rows % tile:
        raise ValueError(f"tile must be a positive integer dividing the {rows} rows, not {tile!r}")
    return rows // tile, cols // GROUP


def q4nx_records(w: Q4NX, tile: int) -> np.ndarray:
    """Return ``w``'s row records in stream order (module notes): ``np.uint8`` of shape
    ``(rows * cols / 32, 20)``, tiles of ``tile`` rows, then groups, then rows.

    Raises
    ------
    ValueError
        ``tile`` not a positive divisor of the row count.
    """
    rows, cols = w.shape
    tiles, groups = _tiles(rows, cols, tile)
    q = w.q.reshape(tiles, tile, groups, GROUP // 2, 2).astype(np.uint8)
    codes = q[..., 0] | (q[..., 1] << 4)                              # (T, m, G, 16)
    scale = w.d.astype("<u2").reshape(tiles, tile, groups, 1).view(np.uint8)   # little-endian
    minimum = w.m.astype("<u2").reshape(tiles, tile, groups, 1).view(np.uint8)
    rec = np.concatenate([codes, scale.reshape(tiles, tile, groups, 2),
                          minimum.reshape(tiles, tile, groups, 2)], axis=-1)
    return np.ascontiguousarray(rec.transpose(0, 2, 1, 3)).reshape(-1, RECORD_BYTES)


def q4nx_from_records(records, rows: int, cols: int, tile: int) -> Q4NX:
    """Return the ``rows x cols`` :class:`Q4NX` matrix whose stream is ``records``
    (:func:`q4nx_records`'s inverse; ``records`` bytes, any shape of ``rows cols / 32 * 20``).

    Raises
    ------
    ValueError
        A byte count other than ``rows * cols / 32 * 20``, ``cols`` not a multiple of 32, or a
        ``tile`` that does not divide ``rows``.
    """
    if not rows or not cols or cols % GROUP:
        raise ValueError(f"cols must be a positive multiple of {GROUP} and rows positive, not "
                         f"{rows} x {cols}")
    tiles, groups = _tiles(rows, cols, tile)
    rec = np.asarray(records, np.uint8).reshape(-1)
    if rec.size != rows * groups * RECORD_BYTES:
        raise ValueError(f"records must hold {rows * groups * RECORD_BYTES} bytes for {rows} x "
                         f"{cols}, not {rec.size}")
    rec = rec.reshape(tiles, groups, tile, RECORD_BYTES).transpose(0, 2, 1, 3)  # (T, m, G, 20)
    codes = rec[..., :GROUP // 2]
    q = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(rows, cols)
    halves = np.ascontiguousarray(rec[..., GROUP // 2:]).view("<u2").astype(np.uint16)
    return Q4NX(d=halves[..., 0].reshape(rows, groups), m=halves[..., 1].reshape(rows, groups),
                q=q.astype(np.uint8))


def dequantize(w: Q4NX) -> np.ndarray:
    """Return the bf16 weight codes ``(rows, cols)``: ``bf16(fp32(fp32(d q) + m))`` (module notes).
    """
    rows, cols = w.shape
    q = _Q_BF16[w.q.reshape(rows, -1, GROUP)]                         # 0..15, exact
    dq = fmul(w.d[..., None], q, BF16, BF16, FP32)                   # exact
    s = fadd(dq, fconvert(w.m, BF16, FP32)[..., None], FP32)
    return fconvert(s, FP32, BF16).reshape(rows, cols)


def dequantize_reference(w: Q4NX) -> np.ndarray:
    """Return ``d * q + m`` in float64 from the bf16 ``d``, ``m`` (no rounding to bf16).

    :func:`dequantize` is within ``(2**-8 + 2**-24) |d q + m|`` of it, element by element.
    """
    rows, cols = w.shape
    q = w.q.reshape(rows, -1, GROUP).astype(np.float64)
    return (to_float(w.d, BF16)[..., None] * q + to_float(w.m, BF16)[..., None]).reshape(rows, cols)


def _operands(w, a) -> tuple[np.ndarray, np.ndarray]:
    w = _codes16(w, "Weights")
    a = _codes16(a, "Activations")
    if w.ndim != 2 or w.shape[1] % GROUP or 0 in w.shape:
        raise ValueError(f"Weights must be a non-empty (out, in) array with in a multiple of "
                         f"{GROUP}, not shape {w.shape}")
    if a.ndim != 2 or a.shape[1] != w.shape[1] or a.shape[0] == 0:
        raise ValueError(f"Activations must be a non-empty (tokens, {w.shape[1]}) array, "
                         f"not shape {a.shape}")
    return ftz(w, BF16), ftz(a, BF16)


def gemm_golden(w, a) -> np.ndarray:
    """:func:`gemm` computed by the golden units directly (``fdot`` per group, ``fadd`` across
    groups); slow, the definition the fast path is checked against."""
    w, a = _operands(w, a)
    out, k = w.shape
    groups = k // GROUP
    wg = w.reshape(1, out, groups, GROUP)
    sums = np.stack([fdot(wg, a[t].reshape(1, 1, groups, GROUP), BF16, FP32)[0]
                     for t in range(a.shape[0])])                     # (T, out, groups)
    y = sums[..., 0]
    for g in range(1, groups):
        y = fadd(y, sums[..., g], FP32)
    return y


def _fast_ok(wf: np.ndarray, af: np.ndarray) -> bool:
    if not (np.isfinite(wf).all() and np.isfinite(af).all()):
        return False
    wn, an = np.abs(wf[wf != 0]), np.abs(af[af != 0])
    return not wn.size or not an.size or float(wn.min()) * float(an.min()) >= _FAST_MIN


def gemm(w, a, *, path: str = "auto") -> np.ndarray:
    """Return ``a @ w.T`` as FusedDQP computes it: fp32 codes ``(T, out)`` (module notes).

    Parameters
    ----------
    w : array of BF16 codes, shape ``(out, in)``
        Dequantized weights (:func:`dequantize`); ``in`` a multiple of 32.
    a : array of BF16 codes, shape ``(T, in)``
        One activation vector per token.
    path : str
        ``"auto"`` (the float32 fast path when it provably matches, else the golden units) or
        ``"golden"`` (:func:`gemm_golden`).

    Raises
    ------
    ValueError
        Shapes or codes out of range (``TypeError`` for float arrays), an unknown ``path``.
    """
    if path not in ("auto", "golden"):
        raise ValueError(f"path must be 'auto' or 'golden', not {path!r}")
    wc, ac = _operands(w, a)
    if path == "golden":
        return gemm_golden(wc, ac)
    wf = (wc.astype(np.uint32) << 16).view(np.float32)
    af = (ac.astype(np.uint32) << 16).view(np.float32)
    if not _fast_ok(wf, af):
        return gemm_golden(wc, ac)
    out, k = wf.shape
    groups = k // GROUP
    # Lane axis first: each tree level adds two contiguous halves (lanes 2j and 2j + 1).
    wl = np.ascontiguousarray(wf.reshape(out, groups, GROUP).transpose(2, 0, 1))   # (32, out, G)
    al = np.ascontiguousarray(af.reshape(-1, groups, GROUP).transpose(2, 0, 1))    # (32, T, G)
    y = np.empty((af.shape[0], out), np.float32)
    rows = max(1, _BLOCK // (out * k))
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(0, af.shape[0], rows):
            level = al[:, s:s + rows, None, :] * wl[:, None, :, :]        # (32, t, out, G)
            while level.shape[0] > 1:
                level = level[0::2] + level[1::2]
            sums = level[0]
            acc = sums[..., 0].copy()
            for g in range(1, groups):                                # the accumulator, in order
                acc += sums[..., g]
            y[s:s + rows] = acc
    if not np.isfinite(y).all():
        return gemm_golden(wc, ac)
    return y.view(np.uint32)


def gemv(w, a, *, path: str = "auto") -> np.ndarray:
    """:func:`gemm` of one activation vector ``a`` ``(in,)``: fp32 codes ``(out,)``."""
    return gemm(w, np.asarray(a)[None, :], path=path)[0]


def gemm_reference(w, a) -> np.ndarray:
    """Return ``a @ w.T`` in float64 from the bf16 codes (flushed as the units read them)."""
    wc, ac = _operands(w, a)
    return to_float(ac, BF16) @ to_float(wc, BF16).T


def gemm_error_bound(w, a) -> np.ndarray:
    """Return the bound on ``|gemm - gemm_reference|`` (float64 ``(T, out)``, module notes)."""
    wc, ac = _operands(w, a)
    k = wc.shape[1]
    n = TREE_LEVELS + k // GROUP - 1
    gamma = n * _U / (1 - n * _U) + 2 * k * 2.0 ** -53
    return gamma * (np.abs(to_float(ac, BF16)) @ np.abs(to_float(wc, BF16)).T)
