"""Bit-exact and float64 models of FlowKV decode attention (issue 7): one KV head, its group of
query heads, the KV cache swept chunk by chunk with an online softmax split over two tiles.

Source: "Mapping Gemma3 onto an Edge Dataflow Architecture", Sec. 3.1.3 (Eqs. 6 to 12) and
Sec. 3.2.2 to 3.2.3 (FlowKV, FlowKV-SWA). docs/flowkv_models.md is the contract of this layer: the
operation order below, the inter-tile stream, the exactness notes and the error bound with its
measured worst case.

Notation: ``G`` query heads share one KV head (the paper's ``H/G``), head dimension ``d``, chunk
length ``L_c``, ``L`` rows of K and V (positions ``0 .. L-1``), decode position ``p < L``, window
``L_w`` (``None``: full attention). BF16 inputs (``np.uint16`` bit patterns), FP32 intermediates
(``np.uint32``); every operation is one of the shared units' golden twins (:mod:`golden.arith`):
``fmul``, ``fadd``, ``exp2``, ``reciprocal``. Round to nearest even, flush-to-zero, canonical NaN.

Sweep. Attended keys are positions ``lo .. p`` with ``lo = 0`` (full) or ``max(0, p - L_w + 1)``
(FlowKV-SWA). Chunks are aligned to multiples of ``L_c``: chunk ``c`` holds slots ``t = 0 ..
L_c-1`` at positions ``c*L_c + t``. The sweep visits chunks ``lo // L_c .. p // L_c`` in order
(chunks wholly outside the window are never visited, so every visited chunk has at least one
attended slot); a slot is *valid* when its position is in ``lo .. p`` and *masked* otherwise.

Tile 0, per chunk ``c`` and head ``h`` (``m``, ``l`` start as ``-inf``, ``+0``):

1. ``S[j] = tree(fmul(q[h, i], K[j, i]) for i in 0..d-1)``: products bf16 x bf16 -> fp32 (exact
   unless outside the fp32 normal range), summed pairwise by ``fadd``: ``(p0+p1), (p2+p3), ...``,
   then neighbouring pairs of those, an odd last value passed through to the next level
   (:mod:`hdl.arith.tree`'s convention). For any lane count ``P`` dividing ``d`` this equals a
   ``P``-lane ``FloatDot`` per beat (elements ``b*P .. b*P+P-1``) followed by the same pairwise
   tree over the ``d/P`` beat sums in beat order, so the result does not depend on ``P``.
2. ``S'[j] = fmul(S[j], scale)`` with ``scale = score_scale(d)``, the fp32 rounding of the float64
   value ``log2(e) / sqrt(d)``: scores are in log2 units, so exponentials are ``exp2``.
3. ``m_c = max(m_{c-1}, max of S'[j] over the valid slots)``, the maximum in IEEE 754 total order
   (``-0 < +0``; a NaN score, always the canonical positive NaN, wins). Masked slots take no part.
4. ``F[j] = exp2(fadd(S'[j], -m_c))`` for valid slots (``-m_c``: sign bit flipped); masked slots
   carry ``F = +0``. The largest score of a chunk that raises the maximum gets ``F = 1`` exactly.
5. ``C_c = exp2(fadd(m_{c-1}, -m_c))``. For the first chunk ``m_{c-1} = -inf``, so ``C = exp2(-inf)
   = +0`` with no special case and no NaN (``-inf - m`` is ``-inf`` for any finite ``m``).
6. ``sum_c = tree(F[t] for t in 0..L_c-1)`` over all slots of the chunk, same pairwise tree as
   step 1 (masked slots add ``+0``, which changes no sum of non-negative values).
7. ``l_c = fadd(fmul(C_c, l_{c-1}), sum_c)``.

The inter-tile stream carries, per chunk: ``C_c`` and ``l_c`` per head, and ``F`` per head and
valid slot, in position order. Tile 1 (``Y`` starts as ``+0``, per head, ``d`` elements):

8. ``Y = fmul(C_c, Y)`` (fp32 x fp32; bitwise a no-op when ``C_c = 1``).
9. For each valid slot in position order: ``Y[e] = fadd(fmul(F[j], V[j, e]), Y[e])`` (fp32 x bf16
   -> fp32, then fp32 add; two roundings, not fused).
10. After the last chunk: ``O = fmul(Y, reciprocal(l_last))``, fp32 x fp32 rounded once to the
    output format (bf16 or fp32).

Realisability (why this order): step 1 has no loop-carried sum, so one row per ``d/P`` cycles
streams through a ``FloatDot`` and one adder per level of the beat tree; steps 3 to 7 need the
chunk maximum first, so tile 0 buffers ``G * L_c`` scaled scores per chunk (double-buffered) and
runs them through one ``Exp2`` and a serial pairwise tree, with only the per-chunk ``l`` update
carried across chunks; steps 8 and 9 are one multiply-add per element per row with the
accumulator ``Y`` revisited every ``d/P`` cycles (``G * d/P`` with heads interleaved), and the
chunk's rescale is a multiplier in the addend path (``C`` on the chunk's first valid row, ``1.0``
otherwise, which is bit-identical). The model computes the same values vectorized; it does not
follow any pipeline.

:func:`attend_reference` is the float64 truth: plain ``softmax(q K^T / sqrt(d)) V`` over the same
positions, written independently. :func:`error_bound` is the stated bound on ``|attend -
attend_reference|``, derived in docs/flowkv_models.md; ``python -m golden.flowkv`` measures the
worst case on N(0, 1) inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hdl.arith.format import BF16, FP32, FloatFormat, float_format
from hdl.validate import integer, power_of_two

from .arith.float import fadd, fmul, from_float, storage, to_float
from .arith.func import EXP2_ERROR, RECIP_ERROR, exp2, reciprocal
from .arith.idot import pairwise_reduce

__all__ = ["MAX_TOKENS", "MAX_LANES", "OUT_FORMATS", "LOG2E", "EXP2_ERROR", "RECIP_ERROR",
           "ChunkStep", "score_scale", "tree_sum", "dot_scores", "sweep", "streamed_rows", "attend",
           "attend_trace", "attend_reference", "error_bound", "attend_many"]

#: Longest sequence, largest position + 1, window and chunk: 2**24, the last count an fp32
#: denominator ``l`` still holds exactly (``l`` is a sum of at most that many terms <= 1).
MAX_TOKENS = 1 << 24
#: Largest lane count (that of :class:`hdl.arith.fdot.FloatDot`).
MAX_LANES = 64
#: Output formats.
OUT_FORMATS = (BF16, FP32)
#: ``log2(e)`` in float64; the score scale is ``fp32(LOG2E / sqrt(d))``.
LOG2E = math.log2(math.e)

_U = 2.0 ** -24                      # unit roundoff of fp32
_TINY = 2.0 ** FP32.emin             # smallest normal fp32: below it results flush to zero
_SIGN = np.uint32(1 << 31)
_NEG_INF = np.uint32(FP32.infinity(1))
_BLOCK = 1 << 20                     # products per vectorized block (bounds memory)
_BLOCK_ATTEND = 1 << 21              # score products per block of attend_many


@dataclass(frozen=True)
class ChunkStep:
    """One chunk of the sweep: tile 0's results, the inter-tile stream and tile 1's accumulator.

    All float fields are fp32 bit patterns (``np.uint32``). ``G`` heads, ``L_c`` slots.

    Attributes
    ----------
    index : int
        Chunk number ``c``; the chunk covers positions ``c * L_c .. c * L_c + L_c - 1``.
    start : int
        ``c * L_c``, the position of slot 0.
    valid : np.ndarray
        ``(L_c,)`` bool: the slot's position is attended (inside the window, at most ``p``).
    s : np.ndarray
        ``(G, L_c)`` scaled scores ``S'`` (tile 0, step 2); masked slots hold ``-inf``.
    m : np.ndarray
        ``(G,)`` running maximum after this chunk (tile 0, step 3).
    f : np.ndarray
        ``(G, L_c)`` numerators ``F`` (stream); masked slots hold ``+0`` and are not sent.
    c : np.ndarray
        ``(G,)`` correction factor ``C`` (stream); ``+0`` in the first chunk.
    l : np.ndarray
        ``(G,)`` running denominator after this chunk (stream).
    y : np.ndarray
        ``(G, d)`` tile 1's accumulator ``Y`` after this chunk.
    """

    index: int
    start: int
    valid: np.ndarray
    s: np.ndarray
    m: np.ndarray
    f: np.ndarray
    c: np.ndarray
    l: np.ndarray  # noqa: E741 (the paper's name)
    y: np.ndarray


# --- validation -----------------------------------------------------------------------------------


def _bf16_codes(values, what: str, shape: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"{what} must be BF16 bit patterns (an integer array), not {arr.dtype}")
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"{what} must be a non-empty {shape} array, not shape {arr.shape}")
    if int(arr.min()) < 0 or int(arr.max()) > 0xFFFF:
        bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
        raise ValueError(f"{what} must be 16-bit codes between 0 and 65535, not {bad}")
    return arr.astype(np.uint16)


def _operands(q, K, V) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q = _bf16_codes(q, "Query", "(heads, head dimension)")
    K = _bf16_codes(K, "Keys", "(length, head dimension)")
    V = _bf16_codes(V, "Values", "(length, head dimension)")
    d = q.shape[1]
    if K.shape[1] != d:
        raise ValueError(f"Key head dimension must be {d} (the query's), not {K.shape[1]}")
    if V.shape != K.shape:
        raise ValueError(f"Values must have the keys' shape {K.shape}, not {V.shape}")
    integer(K.shape[0], "Sequence length", 1, MAX_TOKENS)
    return q, K, V


def _window(window):
    return None if window is None else integer(window, "Window", 1, MAX_TOKENS)


def _out_format(out_fmt) -> FloatFormat:
    fmt = float_format(out_fmt)
    if fmt not in OUT_FORMATS:
        raise ValueError(f"Output format must be bf16 or fp32, not {fmt.name}")
    return fmt


def _lanes(lanes, d: int):
    if lanes is None:
        return
    power_of_two(lanes, "Lane count", 1, MAX_LANES)
    if d % lanes:
        raise ValueError(f"Head dimension must be a multiple of the lane count {lanes}, not {d}")


# --- building blocks ------------------------------------------------------------------------------


def score_scale(d: int) -> np.uint32:
    """Return the fp32 score scale ``log2(e) / sqrt(d)`` (one rounding of the float64 value).

    Scaled scores ``S * scale`` are in log2 units, so the softmax uses ``exp2``. For ``d`` a power
    of four ``1 / sqrt(d)`` is a power of two and the constant is ``fp32(log2 e)`` shifted
    (``d = 256``: ``0x3DB8AA3B``).
    """
    d = integer(d, "Head dimension", 1, MAX_TOKENS)
    return np.uint32(from_float(LOG2E / math.sqrt(d), FP32))


def tree_sum(values, fmt: FloatFormat = FP32) -> np.ndarray:
    """Sum ``values`` (bit patterns of ``fmt``) along the last axis in the pairwise tree order.

    Level by level, neighbours are added in order, ``(v0 + v1), (v2 + v3), ...``, each sum rounded
    by :func:`golden.arith.float.fadd`; an odd last value is passed through unchanged to the next
    level (the convention of :mod:`hdl.arith.tree`), so five values give
    ``((v0 + v1) + (v2 + v3)) + v4``. For a power-of-two count this is the order of
    :func:`golden.arith.float.fdot`, which covers powers of two only.
    """
    level = np.asarray(values).astype(storage(fmt))
    if level.shape[-1] < 1:
        raise ValueError("Tree sum needs at least one value, not 0")
    return pairwise_reduce(level, lambda a, b: fadd(a, b, fmt))


def dot_scores(q, K) -> np.ndarray:
    """Return the raw scores ``q[h] . K[j]`` (fp32 codes, shape ``(G, L)``), step 1 of the order.

    Products bf16 x bf16 -> fp32 (:func:`golden.arith.float.fmul`), then :func:`tree_sum` over the
    head dimension. ``q``: ``(G, d)`` BF16 codes, ``K``: ``(L, d)`` BF16 codes.
    """
    q = _bf16_codes(q, "Query", "(heads, head dimension)")
    K = _bf16_codes(K, "Keys", "(length, head dimension)")
    if K.shape[1] != q.shape[1]:
        raise ValueError(f"Key head dimension must be {q.shape[1]} (the query's), "
                         f"not {K.shape[1]}")
    heads, d = q.shape
    rows = max(1, _BLOCK // (heads * d))
    out = np.empty((heads, K.shape[0]), np.uint32)
    for start in range(0, K.shape[0], rows):
        block = K[start:start + rows]
        products = fmul(q[:, None, :], block[None, :, :], BF16, BF16, FP32)
        out[:, start:start + len(block)] = tree_sum(products)
    return out


def sweep(length: int, position: int, *, chunk: int, window: int | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """Return the chunks the sweep visits and their valid slots.

    Returns ``(index, valid)``: ``index`` (``n_c``,) int64 chunk numbers in sweep order,
    ``lo // chunk .. position // chunk``; ``valid`` (``n_c``, ``chunk``) bool, true where
    ``lo <= index * chunk + t <= position`` with ``lo = 0`` for full attention and
    ``max(0, position - window + 1)`` for a sliding window. Every visited chunk has a valid slot.

    Raises
    ------
    ValueError
        ``length`` outside 1 .. 2**24, ``position`` outside ``0 .. length - 1``, ``chunk`` or
        ``window`` outside 1 .. 2**24 (``TypeError`` for non-integers).
    """
    length = integer(length, "Sequence length", 1, MAX_TOKENS)
    position = integer(position, "Position", 0, length - 1)
    chunk = integer(chunk, "Chunk length", 1, MAX_TOKENS)
    window = _window(window)
    lo = 0 if window is None else max(0, position - window + 1)
    index = np.arange(lo // chunk, position // chunk + 1, dtype=np.int64)
    pos = index[:, None] * chunk + np.arange(chunk, dtype=np.int64)[None, :]
    return index, (pos >= lo) & (pos <= position)


def streamed_rows(length: int, position: int, *, chunk: int, window: int | None = None
                  ) -> list[int]:
    """The K and V rows a decode step streams, in order: every row the cache holds (below
    ``length``) of every chunk :func:`sweep` visits."""
    index, _ = sweep(length, position, chunk=chunk, window=window)
    return [r for c in index.tolist() for r in range(c * chunk, min((c + 1) * chunk, length))]


def _order(bits: np.ndarray) -> np.ndarray:
    """Map fp32 codes to int64 keys increasing in IEEE 754 total order (-0 < +0)."""
    b = bits.astype(np.int64)
    mag = b & 0x7FFFFFFF
    return np.where(b >> 31, -mag - 1, mag)


def _unorder(keys: np.ndarray) -> np.ndarray:
    return np.where(keys < 0, (-keys - 1) | (1 << 31), keys).astype(np.uint32)


# --- the bit-exact model --------------------------------------------------------------------------


def attend(q, K, V, position: int, *, chunk: int, lanes: int | None = None,
           window: int | None = None, out_fmt: FloatFormat | str = BF16) -> np.ndarray:
    """Compute FlowKV decode attention bit for bit as the tile pair does.

    Parameters
    ----------
    q : array of BF16 codes, shape ``(G, d)``
        The query vectors of the ``G`` heads that share this KV head (``G = 1``: MHA).
    K, V : arrays of BF16 codes, shape ``(L, d)``
        Keys and values at positions ``0 .. L - 1``; each row serves every head.
    position : int
        The decode position ``p``, ``0 <= p < L``; keys after ``p`` are not attended.
    chunk : int
        Chunk length ``L_c`` (1 to 2**24). The result depends on it (see the module notes).
    lanes : int, optional
        Multiply lanes ``P`` per tile: a power of two from 1 to 64 dividing ``d``. Checked only;
        the order makes every bit independent of ``P``.
    window : int, optional
        Sliding window ``L_w`` (1 to 2**24): keys ``p - L_w + 1 .. p`` are attended. ``None``
        attends ``0 .. p``.
    out_fmt : FloatFormat or str
        ``bf16`` (default) or ``fp32``.

    Returns
    -------
    np.ndarray
        ``(G, d)`` output codes: ``np.uint16`` (bf16) or ``np.uint32`` (fp32).

    Raises
    ------
    TypeError
        Float arrays instead of codes; non-integer position, chunk, lanes or window.
    ValueError
        Wrong shapes, codes out of range, position outside ``0 .. L - 1``, chunk or window
        outside 1 .. 2**24, a bad lane count, an output format other than bf16 or fp32.
        Each message names the parameter, the allowed range and the value given.
    """
    return _flowkv(q, K, V, position, chunk, lanes, window, out_fmt, trace=False)[0]


def attend_trace(q, K, V, position: int, *, chunk: int, lanes: int | None = None,
                 window: int | None = None, out_fmt: FloatFormat | str = BF16
                 ) -> tuple[np.ndarray, list[ChunkStep]]:
    """Compute :func:`attend` and return ``(O, steps)``, one :class:`ChunkStep` per chunk visited.

    The steps hold what RTL tests check at the tile boundary: the stream ``F``, ``C``, ``l`` per
    chunk, tile 0's scaled scores and running maximum, and tile 1's ``Y`` after each chunk.
    Parameters and errors as :func:`attend`.
    """
    return _flowkv(q, K, V, position, chunk, lanes, window, out_fmt, trace=True)


def _flowkv(q, K, V, position, chunk, lanes, window, out_fmt, *, trace):
    q, K, V = _operands(q, K, V)
    heads, d = q.shape
    _lanes(lanes, d)
    fmt = _out_format(out_fmt)
    index, valid = sweep(K.shape[0], position, chunk=chunk, window=window)
    n_chunks = len(index)
    pos = index[:, None] * chunk + np.arange(chunk)[None, :]
    rows = pos[valid]                                        # attended positions, in order

    # Tile 0, steps 1 to 2: scores of the attended keys, placed into their chunk slots.
    scaled = fmul(dot_scores(q, K[rows]), score_scale(d), FP32, FP32, FP32)
    s = np.full((heads, n_chunks, chunk), _NEG_INF, np.uint32)
    s[:, valid] = scaled
    # Step 3: running maximum over chunks (masked slots hold -inf, the least non-NaN value).
    m = _unorder(np.maximum.accumulate(_order(s).max(axis=2), axis=1))
    m_prev = np.concatenate([np.full((heads, 1), _NEG_INF, np.uint32), m[:, :-1]], axis=1)
    # Steps 4 to 6.
    f = np.where(valid, exp2(fadd(s, (m ^ _SIGN)[:, :, None], FP32)), np.uint32(0))
    c = exp2(fadd(m_prev, m ^ _SIGN, FP32))
    chunk_sums = tree_sum(f)
    # Step 7 and tile 1, steps 8 and 9, chunk by chunk.
    l = np.zeros(heads, np.uint32)  # noqa: E741
    y = np.zeros((heads, d), np.uint32)
    steps = []
    for k in range(n_chunks):
        l = fadd(fmul(c[:, k], l, FP32, FP32, FP32), chunk_sums[:, k], FP32)  # noqa: E741
        y = fmul(c[:, k, None], y, FP32, FP32, FP32)
        slots = np.flatnonzero(valid[k])
        products = fmul(f[:, k, slots, None], V[pos[k, slots]][None, :, :], FP32, BF16, FP32)
        for j in range(len(slots)):
            y = fadd(products[:, j], y, FP32)
        if trace:
            steps.append(ChunkStep(index=int(index[k]), start=int(index[k]) * chunk,
                                   valid=valid[k].copy(), s=s[:, k].copy(), m=m[:, k].copy(),
                                   f=f[:, k].copy(), c=c[:, k].copy(), l=l.copy(), y=y.copy()))
    # Step 10.
    out = fmul(y, reciprocal(l)[:, None], FP32, FP32, fmt)
    return out, steps


# --- float64 reference and error bound ------------------------------------------------------------


def _bf16_values(codes: np.ndarray) -> np.ndarray:
    return codes.view(ml_dtypes.bfloat16).astype(np.float64)


def attend_reference(q, K, V, position: int, window: int | None = None) -> np.ndarray:
    """Return ``softmax(q K^T / sqrt(d)) V`` over positions ``lo .. position`` in float64.

    Written plainly: float64 values of the BF16 codes (``ml_dtypes``), one matrix product, the
    global maximum subtracted (the usual overflow guard, not an online softmax), ``np.exp``, a sum
    and a division. Shape ``(G, d)``. Same checks as :func:`attend`.
    """
    q, K, V = _operands(q, K, V)
    length = K.shape[0]
    position = integer(position, "Position", 0, length - 1)
    window = _window(window)
    lo = 0 if window is None else max(0, position - window + 1)
    qf = _bf16_values(q)
    keys = _bf16_values(K[lo:position + 1])
    values = _bf16_values(V[lo:position + 1])
    scores = (qf @ keys.T) / np.sqrt(np.float64(q.shape[1]))
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights @ values


def error_bound(q, K, V, position: int, *, chunk: int, window: int | None = None,
                out_fmt: FloatFormat | str = BF16) -> np.ndarray:
    """Return the bound on ``|attend - attend_reference|`` per head (float64, shape ``(G,)``).

    A first-order bound from the error specifications of the shared units (each term is derived
    in docs/flowkv_models.md), multiplied by ``1 + B`` for the higher-order terms::

        B = (2 * dw + (n + 3 * n_c + t_c + 1) * u + RECIP_ERROR + r_out) * vmax + tiny
        dw = EXP2_ERROR + ln2 * ((t_d + 2) * u * A + 127 * u + c * d * 2**-126)
             + (n_c - 1) * (EXP2_ERROR + 127 * ln2 * u)
        tiny = (4 * n * vmax + n + 1) * 2**-126

    with ``u = 2**-24``, ``n`` attended keys, ``n_c`` chunks visited, ``t_d = ceil(log2 d)``,
    ``t_c = ceil(log2 L_c)``, ``A = max_j scale * sum_i |q_i K_ji|`` for the head (bounds every
    ``|S'|``), ``vmax = max |V|`` over the attended rows, ``r_out = 2**-8`` (bf16 output) or
    ``2**-24`` (fp32). Valid for finite inputs whose scores and sums do not overflow.
    """
    q, K, V = _operands(q, K, V)
    heads, d = q.shape
    fmt = _out_format(out_fmt)
    index, valid = sweep(K.shape[0], position, chunk=chunk, window=window)
    n, n_chunks = int(valid.sum()), len(index)
    lo = int(index[0]) * chunk + int(np.argmax(valid[0]))
    scale = float(to_float(score_scale(d), FP32))
    qf = np.abs(to_float(q, BF16))
    keys = np.abs(to_float(K[lo:position + 1], BF16))
    vmax = float(np.abs(to_float(V[lo:position + 1], BF16)).max())
    mass = scale * (qf @ keys.T).max(axis=1)                              # A, per head
    ln2 = math.log(2.0)
    depth_d, depth_c = (d - 1).bit_length(), (chunk - 1).bit_length()
    d_f = EXP2_ERROR + ln2 * ((depth_d + 2) * _U * mass + 127 * _U + scale * d * _TINY)
    d_c = EXP2_ERROR + 127 * ln2 * _U
    dw = d_f + (n_chunks - 1) * d_c
    r_out = 2.0 ** -fmt.precision                  # half an ulp, relative: 2**-8 or 2**-24
    first = (2 * dw + (n + 3 * n_chunks + depth_c + 1) * _U + RECIP_ERROR + r_out) * vmax
    first = first + (4 * n * vmax + n + 1) * _TINY
    return first * (1 + first / max(vmax, _TINY))


# --- measurement ----------------------------------------------------------------------------------


def _normal_codes(rng: np.random.Generator, shape) -> np.ndarray:
    return from_float(rng.standard_normal(shape), BF16)


def _survey(seeds: int = 20) -> None:
    """Print the worst error against the reference, and against the bound, on N(0, 1) inputs."""
    shapes = [  # (d, G, L, chunk, window)
        (4, 1, 1, 1, None), (64, 1, 7, 16, None), (64, 4, 16, 16, None), (128, 2, 100, 32, None),
        (256, 1, 1000, 64, None), (256, 2, 1000, 64, 256), (256, 4, 2048, 1, None),
        (256, 2, 4096, 32, None), (256, 2, 4096, 256, 1024), (256, 4, 4096, 1024, 512),
        (256, 2, 32768, 256, None), (256, 2, 32768, 32, 1024),
    ]
    print("d    G  L      L_c   L_w   out   worst |O-ref|/max|V|  worst |O-ref|/bound  "
          "bound/max|V|")
    for d, heads, length, chunk, window in shapes:
        for fmt in OUT_FORMATS:
            worst_v = worst_b = bound_v = 0.0
            for seed in range(seeds if length <= 4096 else max(1, seeds // 5)):
                rng = np.random.default_rng(seed)
                q = _normal_codes(rng, (heads, d))
                K = _normal_codes(rng, (length, d))
                V = _normal_codes(rng, (length, d))
                p = length - 1
                got = to_float(attend(q, K, V, p, chunk=chunk, window=window, out_fmt=fmt), fmt)
                err = np.abs(got - attend_reference(q, K, V, p, window)).max(axis=1)
                lo = 0 if window is None else max(0, p - window + 1)
                vmax = float(np.abs(to_float(V[lo:], BF16)).max())
                bound = error_bound(q, K, V, p, chunk=chunk, window=window, out_fmt=fmt)
                worst_v = max(worst_v, float(err.max()) / vmax)
                worst_b = max(worst_b, float((err / bound).max()))
                bound_v = max(bound_v, float(bound.max()) / vmax)
            log = math.log2(worst_v) if worst_v else -math.inf
            print(f"{d:<4} {heads:<2} {length:<6} {chunk:<5} {str(window):<5} {fmt.name:<5} "
                  f"{worst_v:.3e} (2**{log:6.2f})  {worst_b:.3e}            {bound_v:.3e}")


if __name__ == "__main__":
    _survey()


# --- batched FlowKV attention ---------------------------------------------------------------------


def _codes16(x, what: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"{what} must be 16-bit float codes (an integer array), not {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFF):
        raise ValueError(f"{what} must be codes between 0 and 65535, not {int(arr.max())}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, not {arr.shape}")
    return arr.astype(np.uint16)


def _attention_operands(q, K, V, first: int):
    q = _codes16(q, "Query")
    K = _codes16(K, "Keys")
    V = _codes16(V, "Values", K.shape)
    if q.ndim != 3 or K.ndim != 3 or 0 in q.shape or 0 in K.shape:
        raise ValueError(f"Query and keys must be non-empty (tokens, heads, head dimension) "
                         f"arrays, not shapes {q.shape} and {K.shape}")
    t, heads, d = q.shape
    if K.shape[2] != d or heads % K.shape[1]:
        raise ValueError(f"Keys must be (length, KV heads dividing {heads}, {d}), not {K.shape}")
    integer(first, "First position", 0, K.shape[0] - t)
    return q, K[:first + t], V[:first + t]


def attend_many(q, K, V, first: int, *, chunk: int) -> np.ndarray:
    """Compute :func:`golden.flowkv.attend` for every query position and head at once.

    Parameters
    ----------
    q : array of BF16 codes, shape ``(T, H, d)``
        Queries at positions ``first .. first + T - 1``; head ``h`` reads KV head ``h // G``,
        ``G = H / KVH``.
    K, V : arrays of BF16 codes, shape ``(S, KVH, d)``
        Keys and values at positions ``0 .. S - 1``, ``S >= first + T``.
    first : int
        Position of ``q[0]``; query ``i`` attends keys ``0 .. first + i`` (full attention).
    chunk : int
        Chunk length ``L_c`` (1 to 2**24).

    Returns
    -------
    np.ndarray
        ``(T, H, d)`` bf16 codes, bit for bit ``attend(q[i, heads of g], K[:, g], V[:, g],
        first + i, chunk=chunk)``.
    """
    q, K, V = _attention_operands(q, K, V, first)
    chunk = integer(chunk, "Chunk length", 1, 1 << 24)
    t, heads, d = q.shape
    kvh = K.shape[1]
    n_chunks = (first + t - 1) // chunk + 1
    length = n_chunks * chunk
    pos = first + np.arange(t)
    qg = q.reshape(t, kvh, heads // kvh, d)
    # Steps 1 and 2 for every (query, key) pair: rows are independent, so extra rows change nothing.
    # Only keys up to the block's last position are scored (the rest would be masked anyway).
    raw = np.full((t, kvh, heads // kvh, K.shape[0]), _NEG_INF, np.uint32)
    kt = K.transpose(1, 0, 2)[None, :, None, :, :]                       # (1, KVH, 1, S, d)
    rows = max(1, _BLOCK_ATTEND // (heads * K.shape[0] * d))
    for i in range(0, t, rows):
        hi = first + min(t, i + rows)
        products = fmul(qg[i:i + rows, :, :, None, :], kt[..., :hi, :], BF16, BF16, FP32)
        raw[i:i + rows, ..., :hi] = tree_sum(products)
    scaled = fmul(raw, score_scale(d), FP32, FP32, FP32)
    valid = np.arange(length)[None, :] <= pos[:, None]                  # (T, slots)
    s = np.full(raw.shape[:3] + (length,), _NEG_INF, np.uint32)
    s[..., :K.shape[0]] = scaled
    s = np.where(valid[:, None, None, :], s, _NEG_INF).reshape(raw.shape[:3] + (n_chunks, chunk))
    # Steps 3 to 6, as golden.flowkv._flowkv, per job.
    m = _unorder(np.maximum.accumulate(_order(s).max(axis=-1), axis=-1))
    m_prev = np.concatenate([np.full(m.shape[:-1] + (1,), _NEG_INF, np.uint32), m[..., :-1]],
                            axis=-1)
    vmask = valid.reshape(t, 1, 1, n_chunks, chunk)
    f = np.where(vmask, exp2(fadd(s, (m ^ _SIGN)[..., None], FP32)), np.uint32(0))
    c = exp2(fadd(m_prev, m ^ _SIGN, FP32))
    chunk_sums = tree_sum(f)
    # Step 7 and tile 1: chunk k is visited by the queries at positions >= k * chunk (a suffix).
    l = np.zeros(raw.shape[:3], np.uint32)  # noqa: E741 (the paper's name)
    y = np.zeros(raw.shape[:3] + (d,), np.uint32)
    vt = V.transpose(1, 0, 2)                                          # (KVH, S, d)
    for k in range(n_chunks):
        j0 = max(0, k * chunk - first)
        l[j0:] = fadd(fmul(c[j0:, ..., k], l[j0:], FP32, FP32, FP32), chunk_sums[j0:, ..., k], FP32)
        y[j0:] = fmul(c[j0:, ..., k, None], y[j0:], FP32, FP32, FP32)
        for slot in range(k * chunk, min((k + 1) * chunk, first + t)):
            jj = max(j0, slot - first)                               # queries that see this slot
            products = fmul(f[jj:, :, :, k, slot - k * chunk, None], vt[None, :, None, slot, :],
                            FP32, BF16, FP32)
            y[jj:] = fadd(products, y[jj:], FP32)
    out = fmul(y, reciprocal(l)[..., None], FP32, FP32, BF16)
    return out.reshape(t, heads, d)
