"""Bit-exact, timing and float64 models of the KVNAND in-flash GEMV processing element (issue 6):
the flash plane's page pipeline, the weight-to-page layout, GEMV in four precision modes, the
page-level and naive KV-cache mappings, Logit and Attend on KV pages, and read-disturb counters.

Source: "KVNAND: Efficient On-Device Large Language Model Inference Using DRAM-Free In-Flash
Computing", Sec. IV-A to IV-D and Table I. docs/inflash_models.md is the contract of this layer:
the byte layouts, the operation orders, the cycle formula with its derivation, the exactness notes
and the error bounds with their measured worst cases.

Formats. Floats travel as bit patterns (``np.uint16`` fp16/bf16, ``np.uint32`` fp32); every float
operation is a call to a shared golden twin (:mod:`golden.arith`): ``fmul``, ``fadd``,
``fconvert``, ``int_to_float``, with :func:`golden.arith.idot.pairwise_reduce` as the only tree
order and :func:`golden.arith.idot.dot` for exact integer dot products. Round to nearest even,
flush-to-zero, canonical NaN.

Modes (``W`` is ``rows x cols``, ``y = W x``):

``fp16``, ``bf16``
    ``y[r] = tree(fmul(W[r, k], x[k]) for k in 0..cols-1)``: products 16 x 16 -> fp32 (exact
    unless a bf16 product leaves the fp32 normal range), summed by ``fadd`` (fp32) in the pairwise
    tree order (``(p0+p1), (p2+p3), ...``, an odd last value passed to the next level). Output:
    fp32 codes, not rounded further.
``w8a8``
    ``y[r] = sum(W[r, k] * x[k])`` in int8 x int8, exact (any order); ``cols <= 2**16`` keeps every
    sum inside int32. Output: raw int32 (no requantization; the consumer is the NPU).
``w4a16``
    Unsigned int4 codes ``q`` (0..15), per (row, group of ``g`` columns) an fp16 scale ``s`` and
    offset ``o``, the weight being ``s * q + o``; fp16 activations. Order (``G = cols / g``
    groups)::

        D[r, j] = tree(fmul(int_to_float(q[r, k]), x[k]) for k in group j)   (fp16 x fp16 -> fp32)
        X[j]    = tree(fconvert(x[k], fp16, fp32) for k in group j)        (once per GEMV)
        t[r, j] = fadd(fmul(s[r, j], D[r, j]), fmul(o[r, j], X[j]))       (fp16 x fp32 -> fp32)
        y[r]    = tree(t[r, j] for j in 0..G-1)

    which folds the offset as ``o * sum(x)`` so that the weight lanes are the same fp16 lanes as
    the ``fp16`` mode. Output: fp32 codes.

Every result is independent of the FMAC count ``F`` (a power of two from 1 to 16): an ``F``-lane
tree per beat of ``F`` elements, the last beat of a row padded with ``-0`` products, followed by
a pairwise tree over the beat sums is the same tree (docs, section 5).

Layout. A matrix is serialized row-major into a byte stream (fp16/bf16: two bytes per element,
little-endian; w8a8: one byte; w4a16: one record per (row, group): scale, offset (two bytes each,
little-endian), then ``g / 2`` bytes of codes, element ``2i`` in the low nibble) and cut into
consecutive pages; rows and records may straddle pages; the unused tail of the last page is
``0xFF`` (the erased state).

KV cache. An entry is one token's key or value vector of one (layer, KV head): ``d`` elements,
``entry_bytes = d * bytes per element``; a page holds ``T_p = page_bytes // entry_bytes`` entries.
Generation order of entries is token, layer, K before V, head. The naive mapping writes entries
in that order, ``T_p`` per page; the page-level mapping gives each (layer, K|V, head) its own pages
of ``T_p`` consecutive tokens. Logit is ``q . k_t`` (the same pairwise tree over ``d``), Attend is
``sum_t p_t v_t`` accumulated sequentially in token order from ``-0``.

Timing. Two registers (data, cache) pipeline the array reads (``tR``) with the page stream into
the PE (transfer at ``transfer_bytes`` per cycle, compute at ``F`` elements per cycle):
page ``k`` enters the cache register at ``c_k = tR + sum_{i<k} max(tR, P_i)`` with
``P_i = max(transfer_i, compute_i)``, and the GEMV ends at ``c_{n-1} + P_{n-1} + pe_latency``.

References: :func:`gemv_reference`, :func:`logit_reference`, :func:`attend_reference` are float64
(or exact integer) sums written independently; :func:`gemv_bound`, :func:`logit_bound`,
:func:`attend_bound` state how far the bit-exact results may be from them; ``python -m
golden.inflash`` measures the worst cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from hdl.arith.format import BF16, FP16, FP32, FloatFormat
from hdl.inflash.spec import (MAX_COLS, MAX_FMACS, MAX_GROUP, MAX_ROWS, MIN_GROUP, SCALE_BYTES,
                               FlashGeometry, busy_cycles)
from hdl.validate import integer, power_of_two

from .arith.float import fadd, fconvert, fmul, from_float, int_to_float
from .arith.idot import dot, pairwise_reduce

__all__ = [
    "MODES", "KV_FORMATS", "MAPPINGS", "K", "V", "MAX_ROWS", "MAX_COLS", "MAX_FMACS",
    "MAX_TOKENS", "MIN_GROUP", "MAX_GROUP", "SCALE_BYTES", "ERASED", "ACC_LOOP",
    "busy_cycles", "FlashGeometry", "Weights", "stream_bytes", "page_count", "weight_pages",
    "weights_from_pages", "group_sums", "gemv", "gemv_reference", "gemv_bound",
    "PageTiming", "page_pipeline", "beats_per_page", "gemv_timing", "KVLayout", "kv_address",
    "kv_table", "kv_page_count", "kv_page_sequence", "kv_pages_read", "kv_pages", "kv_read",
    "kv_entries", "KV_RECORD", "KVWrite", "kv_write",
    "logit", "attend", "logit_pages", "attend_pages", "logit_reference", "attend_reference",
    "logit_bound", "attend_bound", "attention_timing", "block_reads",
]

#: Precision modes of the GEMV.
MODES = ("fp16", "bf16", "w8a8", "w4a16")
#: Element formats of the KV cache (``int8`` is the KV cache of the W8A8 setting).
KV_FORMATS = ("fp16", "bf16", "int8")
#: KV mappings: ``page`` (page-level, the paper's) and ``naive`` (generation order).
MAPPINGS = ("page", "naive")
#: Kind codes of a KV entry.
K, V = 0, 1
#: Longest sequence of the KV models.
MAX_TOKENS = 1 << 24
#: Byte value of the unused tail of a page (the erased state of NAND flash).
ERASED = 0xFF
#: Cycles between two updates of one fp32 accumulator in Attend: the loop of a
#: :class:`hdl.arith.fpmac.FloatMAC` at its default stages (multiplier 5 + adder 6).
ACC_LOOP = 11
_U = 2.0 ** -24                      # unit roundoff of fp32

_FLOAT = {"fp16": FP16, "bf16": BF16, "w4a16": FP16}
_KV_FLOAT = {"fp16": FP16, "bf16": BF16}
_NEG_ZERO = np.uint32(0x80000000)
_TINY = 2.0 ** FP32.emin
_BLOCK = 1 << 20                     # products per vectorized block (bounds memory)


# --- validation helpers ---------------------------------------------------------------------------


def _pow2(value, what: str, minimum: int, maximum: int) -> int:
    """``value`` itself (not its log) if it is a power of two in ``[minimum, maximum]``."""
    power_of_two(value, what, minimum, maximum)
    return int(value)


def _choice(value, what: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"
        raise ValueError(f"{what} must be {listed}, not {value!r}")
    return value


def _fmacs(fmacs) -> None:
    if fmacs is not None:
        _pow2(fmacs, "FMAC count", 1, MAX_FMACS)


def _array(values, what: str, ndim: int, shape_text: str, kind: str) -> np.ndarray:
    """Return ``values`` as an integer array of ``ndim`` dimensions with codes of ``kind``.

    ``kind``: ``fp16``/``bf16`` (16-bit codes, ``np.uint16``), ``int8`` (``np.int8``), ``int4``
    (unsigned codes 0..15, ``np.uint8``).
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        name = f"{kind} bit patterns" if kind in ("fp16", "bf16") else f"{kind} codes"
        raise TypeError(f"{what} must be {name} (an integer array), not {arr.dtype}")
    if arr.ndim != ndim or 0 in arr.shape:
        raise ValueError(f"{what} must be a non-empty {shape_text} array, not shape {arr.shape}")
    lo, hi = int(arr.min()), int(arr.max())
    if kind in ("fp16", "bf16"):
        low, high, text, dtype = 0, 0xFFFF, "16-bit codes", np.uint16
    elif kind == "int8":
        low, high, text, dtype = -128, 127, "int8 values", np.int8
    else:
        low, high, text, dtype = 0, 15, "int4 codes", np.uint8
    if lo < low or hi > high:
        raise ValueError(f"{what} must be {text} between {low} and {high}, "
                         f"not {lo if lo < low else hi}")
    return arr.astype(dtype)


def _values(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Float64 values of fp16/bf16 codes, subnormals kept (the reference's view, no flush)."""
    dtype = np.float16 if fmt == FP16 else ml_dtypes.bfloat16
    return np.asarray(codes, dtype=np.uint16).view(dtype).astype(np.float64)


def _subnormal(values: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """True where a nonzero value is below the smallest normal of ``fmt`` (the units flush it)."""
    return (values != 0) & (np.abs(values) < 2.0 ** fmt.emin)


def _gamma(n: int) -> float:
    return n * _U / (1 - n * _U)


def _depth(n: int) -> int:
    """Levels of the pairwise tree over ``n`` values: ``ceil(log2 n)``."""
    return (n - 1).bit_length()


def _tree32(values: np.ndarray) -> np.ndarray:
    """Pairwise fp32 tree over the last axis (the order of :mod:`hdl.arith.tree`)."""
    return pairwise_reduce(values, lambda a, b: fadd(a, b, FP32))


# --- flash plane geometry and timing --------------------------------------------------------------


# --- weights and their page layout ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Weights:
    """A GEMV weight matrix in one precision mode, validated.

    Parameters
    ----------
    mode : str
        ``fp16``, ``bf16``, ``w8a8`` or ``w4a16``.
    codes : array, shape ``(rows, cols)``
        fp16/bf16 bit patterns (stored ``np.uint16``), int8 values (``np.int8``) or unsigned int4
        codes 0..15 (``np.uint8``). ``1 <= rows <= 2**20``, ``1 <= cols <= 2**16``.
    scales, offsets : array of fp16 codes, shape ``(rows, cols / group_size)``, optional
        w4a16 only: the weight of code ``q`` in group ``j`` of row ``r`` is
        ``scales[r, j] * q + offsets[r, j]``.
    group_size : int
        w4a16 only: columns per group, a power of two from 16 to 1024 dividing ``cols``
        (default 128). Ignored by the other modes.

    Raises
    ------
    TypeError, ValueError
        Float arrays instead of codes, codes out of range, wrong shapes, a bad mode or group size.
    """

    mode: str
    codes: np.ndarray
    scales: np.ndarray | None = None
    offsets: np.ndarray | None = None
    group_size: int = 128

    def __post_init__(self):
        mode = _choice(self.mode, "Precision mode", MODES)
        kind = {"fp16": "fp16", "bf16": "bf16", "w8a8": "int8", "w4a16": "int4"}[mode]
        codes = _array(self.codes, "Weights", 2, "(rows, cols)", kind)
        rows, cols = codes.shape
        integer(rows, "Row count", 1, MAX_ROWS)
        integer(cols, "Column count", 1, MAX_COLS)
        object.__setattr__(self, "codes", codes)
        if mode != "w4a16":
            if self.scales is not None or self.offsets is not None:
                raise ValueError(f"Scales and offsets belong to mode w4a16 only, not {mode}")
            return
        group = _pow2(self.group_size, "Group size", MIN_GROUP, MAX_GROUP)
        if cols % group:
            raise ValueError(f"Column count must be a multiple of the group size {group}, "
                             f"not {cols}")
        for name in ("scales", "offsets"):
            value = getattr(self, name)
            if value is None:
                raise ValueError(f"Mode w4a16 needs {name} (fp16 codes, shape "
                                 f"{(rows, cols // group)}), not None")
            arr = _array(value, name.capitalize(), 2, "(rows, groups)", "fp16")
            if arr.shape != (rows, cols // group):
                raise ValueError(f"{name.capitalize()} must have shape {(rows, cols // group)} "
                                 f"(rows, cols / group size), not {arr.shape}")
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "group_size", group)

    @property
    def rows(self) -> int:
        return self.codes.shape[0]

    @property
    def cols(self) -> int:
        return self.codes.shape[1]

    @property
    def groups(self) -> int:
        """Groups per row (w4a16), ``cols / group_size``; 1 for the other modes."""
        return self.cols // self.group_size if self.mode == "w4a16" else 1


def _unit(mode: str, cols: int, group_size: int) -> tuple[int, int]:
    """Return ``(unit bytes, units per row)``: a row (fp16, bf16, w8a8) or a record (w4a16)."""
    if mode == "w4a16":
        return SCALE_BYTES + group_size // 2, cols // group_size
    return cols * (2 if mode in ("fp16", "bf16") else 1), 1


def _shape(mode, rows, cols, group_size) -> tuple[str, int, int, int]:
    mode = _choice(mode, "Precision mode", MODES)
    rows = integer(rows, "Row count", 1, MAX_ROWS)
    cols = integer(cols, "Column count", 1, MAX_COLS)
    if mode == "w4a16":
        group_size = _pow2(group_size, "Group size", MIN_GROUP, MAX_GROUP)
        if cols % group_size:
            raise ValueError(f"Column count must be a multiple of the group size {group_size}, "
                             f"not {cols}")
    return mode, rows, cols, group_size


def stream_bytes(mode: str, rows: int, cols: int, *, group_size: int = 128) -> int:
    """Return the bytes a ``rows x cols`` matrix occupies in its page stream (before padding).

    ``2 * rows * cols`` (fp16, bf16), ``rows * cols`` (w8a8), ``rows * (cols / g) * (4 + g / 2)``
    (w4a16, ``g = group_size``).
    """
    mode, rows, cols, group_size = _shape(mode, rows, cols, group_size)
    unit, per_row = _unit(mode, cols, group_size)
    return rows * per_row * unit


def page_count(mode: str, rows: int, cols: int, *, group_size: int = 128,
               page_bytes: int = 4096) -> int:
    """Return the pages a ``rows x cols`` matrix occupies: ``ceil(stream_bytes / page_bytes)``."""
    page_bytes = _pow2(page_bytes, "Page size in bytes", 16, 1 << 16)
    return -(-stream_bytes(mode, rows, cols, group_size=group_size) // page_bytes)


def _le16(codes: np.ndarray) -> np.ndarray:
    """Little-endian bytes of 16-bit codes: shape ``(..., 2 * n)``."""
    arr = np.ascontiguousarray(codes.astype("<u2"))
    return arr.view(np.uint8).reshape(*codes.shape[:-1], 2 * codes.shape[-1])


def _from_le16(data: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(data).view("<u2").astype(np.uint16)


def weight_pages(weights: Weights, *, page_bytes: int = 4096) -> np.ndarray:
    """Lay ``weights`` over consecutive pages; return the page images, ``np.uint8`` ``(n, P)``.

    The byte stream is row-major: fp16/bf16 codes as two bytes each, low byte first; int8 values
    as one two's-complement byte; w4a16 one record per (row, group) in row then group order:
    ``scale`` (2 bytes), ``offset`` (2 bytes), then ``group_size / 2`` bytes of codes, byte ``i``
    holding element ``2i`` in its low nibble and ``2i + 1`` in its high nibble. The stream is cut
    into pages of ``page_bytes`` (rows and records may straddle pages); the tail of the last page
    is :data:`ERASED` (``0xFF``).
    """
    if not isinstance(weights, Weights):
        raise TypeError(f"Weights must be a Weights object, not {type(weights).__name__}")
    page_bytes = _pow2(page_bytes, "Page size in bytes", 16, 1 << 16)
    w = weights
    if w.mode in ("fp16", "bf16"):
        stream = _le16(w.codes).reshape(-1)
    elif w.mode == "w8a8":
        stream = w.codes.view(np.uint8).reshape(-1)
    else:
        g = w.group_size
        q = w.codes.reshape(w.rows, w.groups, g)
        packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
        stream = np.concatenate([_le16(w.scales[..., None]), _le16(w.offsets[..., None]),
                                 packed], axis=-1).reshape(-1)
    n = -(-stream.size // page_bytes)
    pages = np.full(n * page_bytes, ERASED, np.uint8)
    pages[:stream.size] = stream
    return pages.reshape(n, page_bytes)


def weights_from_pages(pages, mode: str, rows: int, cols: int, *,
                       group_size: int = 128) -> Weights:
    """Read a ``rows x cols`` matrix of ``mode`` back from its page images (inverse of
    :func:`weight_pages`). ``pages``: ``np.uint8`` ``(n, page_bytes)`` with exactly the
    :func:`page_count` pages. The erased tail is not read."""
    mode, rows, cols, group_size = _shape(mode, rows, cols, group_size)
    arr = np.asarray(pages)
    if arr.dtype != np.uint8 or arr.ndim != 2:
        raise ValueError(f"Pages must be a (pages, page bytes) uint8 array, not {arr.dtype} "
                         f"of shape {arr.shape}")
    page_bytes = _pow2(arr.shape[1], "Page size in bytes", 16, 1 << 16)
    need = page_count(mode, rows, cols, group_size=group_size, page_bytes=page_bytes)
    if arr.shape[0] != need:
        raise ValueError(f"Page count must be {need} for a {rows} x {cols} {mode} matrix, "
                         f"not {arr.shape[0]}")
    unit, per_row = _unit(mode, cols, group_size)
    stream = arr.reshape(-1)[:rows * per_row * unit]
    if mode in ("fp16", "bf16"):
        return Weights(mode, _from_le16(stream).reshape(rows, cols))
    if mode == "w8a8":
        return Weights(mode, stream.view(np.int8).reshape(rows, cols))
    rec = stream.reshape(rows, per_row, unit)
    scales = _from_le16(rec[..., 0:2]).reshape(rows, per_row)
    offsets = _from_le16(rec[..., 2:4]).reshape(rows, per_row)
    packed = rec[..., SCALE_BYTES:]
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(rows, cols)
    return Weights(mode, codes, scales, offsets, group_size)


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


# --- the page pipeline ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PageTiming:
    """Cycle-level schedule of a page stream through the data/cache register pipeline.

    All times are cycles from the first read command (cycle 0); arrays have one entry per page
    in read order.

    Attributes
    ----------
    tR : int
        Array read time.
    transfer, compute : np.ndarray
        Cycles to stream page ``k`` from the cache register into the PE, and PE beats of page
        ``k`` (``int64``).
    read_start : np.ndarray
        Cycle the array read of page ``k`` starts (into the data register).
    stream_start : np.ndarray
        Cycle page ``k`` moves into the cache register and the PE starts on it.
    stream_end : np.ndarray
        Cycle the PE has taken the last element of page ``k``.
    pe_latency : int
        Cycles from the last element to the last output (the PE's arithmetic pipeline).
    """

    tR: int
    transfer: np.ndarray
    compute: np.ndarray
    read_start: np.ndarray
    stream_start: np.ndarray
    stream_end: np.ndarray
    pe_latency: int

    @property
    def pages(self) -> int:
        return len(self.transfer)

    @property
    def stage(self) -> np.ndarray:
        """Stream-stage time of each page, ``P_k = max(transfer_k, compute_k)``."""
        return np.maximum(self.transfer, self.compute)

    @property
    def period(self) -> int:
        """Steady-state page period ``max(tR, max_k P_k)``: ``max(tR, transfer, compute)``."""
        return int(max(self.tR, self.stage.max()))

    @property
    def total(self) -> int:
        """Cycles of the whole stream: ``stream_end[-1] + pe_latency``."""
        return int(self.stream_end[-1]) + self.pe_latency


def page_pipeline(tR: int, transfer, compute, *, pe_latency: int = 0) -> PageTiming:
    """Schedule pages through the two-register pipeline; return the :class:`PageTiming`.

    Page ``k`` is read into the data register from ``read_start[k]`` for ``tR`` cycles, moves to
    the cache register (in no time) when both the read is done and the PE has finished page
    ``k - 1``, and the next read starts at that moment. The PE then spends
    ``P_k = max(transfer_k, compute_k)`` on it. Hence::

        stream_start[0] = tR,   stream_start[k] = stream_start[k-1] + max(tR, P_{k-1})
        read_start[0] = 0,      read_start[k] = stream_start[k-1]
        stream_end[k] = stream_start[k] + P_k

    Parameters
    ----------
    tR : int
        Read time in cycles (1 to 2**40).
    transfer, compute : array of int
        Per-page cycles (non-negative, same length, at least one page).
    pe_latency : int
        Arithmetic latency added after the last page (0 to 2**20).
    """
    tR = integer(tR, "Read time in cycles", 1, 1 << 40)
    pe_latency = integer(pe_latency, "PE latency in cycles", 0, 1 << 20)
    transfer = np.asarray(transfer, dtype=np.int64).reshape(-1)
    compute = np.asarray(compute, dtype=np.int64).reshape(-1)
    if transfer.size == 0 or transfer.shape != compute.shape:
        raise ValueError(f"Transfer and compute cycles must be two non-empty arrays of one "
                         f"length, not {transfer.size} and {compute.size}")
    if min(int(transfer.min()), int(compute.min())) < 0:
        raise ValueError("Transfer and compute cycles must be non-negative")
    stage = np.maximum(transfer, compute)
    start = tR + np.concatenate([[0], np.cumsum(np.maximum(tR, stage[:-1]))])
    read = np.concatenate([[0], start[:-1]])
    return PageTiming(tR=tR, transfer=transfer, compute=compute, read_start=read,
                      stream_start=start, stream_end=start + stage, pe_latency=pe_latency)


def _beat_ends(mode: str, cols: int, group_size: int, fmacs: int) -> np.ndarray:
    """Byte offsets, within a row (or w4a16 record), of the last byte of each beat."""
    if mode == "w4a16":
        last = np.arange(fmacs - 1, group_size, fmacs)
        return SCALE_BYTES + last // 2
    size = 2 if mode in ("fp16", "bf16") else 1
    last = np.minimum(np.arange(fmacs, cols + fmacs, fmacs), cols) - 1
    return last * size + size - 1


def beats_per_page(mode: str, rows: int, cols: int, *, fmacs: int, group_size: int = 128,
                   page_bytes: int = 4096) -> np.ndarray:
    """Return the PE beats of each page of a matrix (``int64``, one entry per page).

    A beat is up to ``F`` consecutive elements of one row (w4a16: of one group); a row takes
    ``ceil(cols / F)`` beats, the last one partial when ``F`` does not divide ``cols``. A beat is
    counted in the page holding its last byte (a beat straddling a page boundary waits for the
    next page). When ``F`` divides ``cols`` and no beat straddles, this is ``elements / F``.
    """
    mode, rows, cols, group_size = _shape(mode, rows, cols, group_size)
    fmacs = _pow2(fmacs, "FMAC count", 1, MAX_FMACS)
    page_bytes = _pow2(page_bytes, "Page size in bytes", 16, 1 << 16)
    unit, per_row = _unit(mode, cols, group_size)
    units = rows * per_row
    ends = _beat_ends(mode, cols, group_size, fmacs)
    n = -(-units * unit // page_bytes)
    edges = np.arange(n + 1, dtype=np.int64) * page_bytes
    whole, part = edges // unit, edges % unit
    before = whole * len(ends) + np.searchsorted(ends, part, side="left")
    before = np.minimum(before, units * len(ends))          # beats ending before each edge
    return np.diff(before)


def gemv_timing(geometry: FlashGeometry, mode: str, rows: int, cols: int, *,
                group_size: int = 128, pe_latency: int = 0) -> PageTiming:
    """Return the expected schedule of one GEMV on one plane (:func:`page_pipeline`).

    Page ``k`` transfers its used bytes, ``ceil(used_k / transfer_bytes)`` cycles (a full page:
    ``page_bytes / transfer_bytes``; the last page stops at the end of the stream), and computes
    :func:`beats_per_page` cycles (one beat per cycle, one FMAC per element). For full pages with
    ``F`` dividing ``cols`` the steady-state period is ``max(tR, page_bytes / W,
    elements per page / F)`` and the total is::

        tR + (n - 1) * max(tR, P) + P_last + pe_latency
    """
    if not isinstance(geometry, FlashGeometry):
        raise TypeError(f"Geometry must be a FlashGeometry, not {type(geometry).__name__}")
    size = stream_bytes(mode, rows, cols, group_size=group_size)
    page = geometry.page_bytes
    n = -(-size // page)
    used = np.minimum(page, size - np.arange(n, dtype=np.int64) * page)
    transfer = -(-used // geometry.transfer_bytes)
    compute = beats_per_page(mode, rows, cols, fmacs=geometry.fmacs, group_size=group_size,
                             page_bytes=page)
    return page_pipeline(geometry.tR_cycles, transfer, compute, pe_latency=pe_latency)


# --- KV cache mapping -----------------------------------------------------------------------------


@dataclass(frozen=True)
class KVLayout:
    """Describe a KV cache and how its entries map to pages.

    Parameters
    ----------
    layers : int
        Decoder layers ``L`` (1 to 1024).
    kv_heads : int
        KV heads ``H`` per layer (1 to 1024); each serves a group of query heads (GQA) or one
        (MHA).
    head_dim : int
        Head dimension ``d`` (1 to 65536).
    kv_format : str
        ``fp16``, ``bf16`` or ``int8`` (the W8A8 setting's 8-bit KV).
    page_bytes : int
        Page size, a power of two from 16 to 65536; one entry (``d`` elements) must fit.
    mapping : str
        ``page`` (page-level: one page holds ``T_p`` consecutive tokens of one (layer, K|V,
        head)) or ``naive`` (entries in generation order, ``T_p`` per page).
    """

    layers: int
    kv_heads: int
    head_dim: int
    kv_format: str = "fp16"
    page_bytes: int = 4096
    mapping: str = "page"

    def __post_init__(self):
        integer(self.layers, "Layer count", 1, 1024)
        integer(self.kv_heads, "KV head count", 1, 1024)
        integer(self.head_dim, "Head dimension", 1, 1 << 16)
        _choice(self.kv_format, "KV format", KV_FORMATS)
        _pow2(self.page_bytes, "Page size in bytes", 16, 1 << 16)
        _choice(self.mapping, "KV mapping", MAPPINGS)
        if self.entry_bytes > self.page_bytes:
            raise ValueError(f"A KV entry (head dimension x element bytes) must fit in a page of "
                             f"{self.page_bytes} bytes, not {self.entry_bytes}")

    @property
    def element_bytes(self) -> int:
        return 1 if self.kv_format == "int8" else 2

    @property
    def entry_bytes(self) -> int:
        """Bytes of one entry: ``d * element_bytes``."""
        return self.head_dim * self.element_bytes

    @property
    def tokens_per_page(self) -> int:
        """Entries per page ``T_p = page_bytes // entry_bytes`` (tokens per page, page-level)."""
        return self.page_bytes // self.entry_bytes

    @property
    def entries_per_token(self) -> int:
        """Entries one token adds: ``S = 2 * L * H``."""
        return 2 * self.layers * self.kv_heads

    @property
    def buffer_bytes(self) -> int:
        """KV buffer the writer needs to fill whole pages: ``S * T_p * entry_bytes``
        (page-level: every (layer, K|V, head) holds up to a page) or ``T_p * entry_bytes``
        (naive: one page)."""
        per_page = self.tokens_per_page * self.entry_bytes
        return per_page * (self.entries_per_token if self.mapping == "page" else 1)

    def with_mapping(self, mapping: str) -> "KVLayout":
        """The same cache under another mapping."""
        return KVLayout(self.layers, self.kv_heads, self.head_dim, self.kv_format,
                        self.page_bytes, mapping)


def _kind(kind) -> np.ndarray:
    arr = np.asarray(kind)
    if arr.dtype.kind in "US":
        if not np.isin(arr, ["K", "V"]).all():
            bad = arr[~np.isin(arr, ["K", "V"])].flat[0]
            raise ValueError(f"Kind must be K or V (0 or 1), not {str(bad)!r}")
        return (arr == "V").astype(np.int64)
    return _range(arr, "Kind", 0, 1)


def _range(values, what: str, lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"{what} must be an integer between {lo} and {hi}, not {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        bad = int(arr.min()) if int(arr.min()) < lo else int(arr.max())
        raise ValueError(f"{what} must be between {lo} and {hi}, not {bad}")
    return arr


def kv_address(layout: KVLayout, layer, head, token, kind) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(page, offset)`` of KV entries (arrays broadcast; ``int64``).

    With ``c = (2 * layer + kind) * H + head`` (``kind`` 0 for K, 1 for V, or ``"K"``/``"V"``)
    and ``T_p`` entries per page:

    - page-level: ``page = (token // T_p) * S + c``, ``offset = (token % T_p) * entry_bytes``;
    - naive: ``e = token * S + c`` (generation order), ``page = e // T_p``,
      ``offset = (e % T_p) * entry_bytes``.

    ``S = 2 * L * H``. Entries never straddle pages; the last ``page_bytes - T_p *
    entry_bytes`` bytes of each page stay erased.
    """
    layer = _range(layer, "Layer", 0, layout.layers - 1)
    head = _range(head, "KV head", 0, layout.kv_heads - 1)
    token = _range(token, "Token", 0, MAX_TOKENS - 1)
    kind = _kind(kind)
    layer, head, token, kind = np.broadcast_arrays(layer, head, token, kind)
    tp, s = layout.tokens_per_page, layout.entries_per_token
    c = (2 * layer + kind) * layout.kv_heads + head
    if layout.mapping == "page":
        page, slot = (token // tp) * s + c, token % tp
    else:
        entry = token * s + c
        page, slot = entry // tp, entry % tp
    return page, slot * layout.entry_bytes


def _seq(seq_len) -> int:
    return integer(seq_len, "Sequence length", 1, MAX_TOKENS)


def kv_table(layout: KVLayout, seq_len: int) -> np.ndarray:
    """Return the mapping table of tokens ``0 .. seq_len - 1``: a structured array with fields
    ``layer, head, token, kind, page, offset`` (``int64``), one row per entry, in generation
    order (token, layer, kind, head)."""
    t = _seq(seq_len)
    token, layer, kind, head = np.meshgrid(np.arange(t), np.arange(layout.layers),
                                           np.arange(2), np.arange(layout.kv_heads),
                                           indexing="ij")
    page, offset = kv_address(layout, layer, head, token, kind)
    table = np.empty(token.size, dtype=[(n, np.int64) for n in
                                        ("layer", "head", "token", "kind", "page", "offset")])
    for name, value in (("layer", layer), ("head", head), ("token", token), ("kind", kind),
                        ("page", page), ("offset", offset)):
        table[name] = value.reshape(-1)
    return table


def kv_page_count(layout: KVLayout, seq_len: int) -> int:
    """Pages holding the cache of ``seq_len`` tokens (the last ones partly filled, by the
    flush at sequence end): ``ceil(T / T_p) * S`` (page-level), ``ceil(T * S / T_p)`` (naive)."""
    t, tp, s = _seq(seq_len), layout.tokens_per_page, layout.entries_per_token
    return -(-t // tp) * s if layout.mapping == "page" else -(-t * s // tp)


def kv_page_sequence(layout: KVLayout, seq_len: int, *, layer: int = 0, head: int = 0,
                     kind=K) -> np.ndarray:
    """Return the pages Logit (``kind`` K) or Attend (V) of one head group reads at sequence
    length ``seq_len``, in read order (token order), each once: ``int64``. All ``seq_len``
    tokens are in flash. Every query head of the group uses each page read."""
    t = _seq(seq_len)
    page, _ = kv_address(layout, layer, head, np.arange(t), kind)
    return np.unique(page)            # pages grow with the token: sorted order is read order


def kv_pages_read(layout: KVLayout, seq_len: int, *, layer: int = 0, head: int = 0,
                  kind=K) -> int:
    """Return the page reads of Logit (or Attend) of one head group at ``seq_len`` tokens.

    Page-level: ``ceil(T / T_p)``. Naive with ``S >= T_p``: ``T`` (every token on its own page);
    with ``S < T_p``: ``((T - 1) * S + c) // T_p - c // T_p + 1``, ``c = (2 * layer + kind) * H
    + head``. Equals ``len(kv_page_sequence(...))``.
    """
    t, tp, s = _seq(seq_len), layout.tokens_per_page, layout.entries_per_token
    layer = int(_range(layer, "Layer", 0, layout.layers - 1))
    head = int(_range(head, "KV head", 0, layout.kv_heads - 1))
    c = (2 * layer + int(_kind(kind))) * layout.kv_heads + head
    if layout.mapping == "page":
        return -(-t // tp)
    if s >= tp:
        return t
    return ((t - 1) * s + c) // tp - c // tp + 1


def _entry_bytes(codes: np.ndarray, kv_format: str) -> np.ndarray:
    if kv_format == "int8":
        return codes.astype(np.int8).view(np.uint8)
    return _le16(codes)


def kv_entries(layout: KVLayout, keys, values) -> tuple[int, np.ndarray]:
    """Check ``keys`` and ``values`` (``(T, L, H, d)`` codes); return ``T`` and the entries'
    bytes in generation order (token, layer, K then V, head), ``(T S, entry_bytes)`` ``uint8``:
    what the KV page writer takes."""
    k = _array(keys, "Keys", 4, "(tokens, layers, KV heads, head dimension)", layout.kv_format)
    v = _array(values, "Values", 4, "(tokens, layers, KV heads, head dimension)",
               layout.kv_format)
    want = (layout.layers, layout.kv_heads, layout.head_dim)
    for name, arr in (("Keys", k), ("Values", v)):
        if arr.shape[1:] != want:
            raise ValueError(f"{name} must have shape (tokens, {', '.join(map(str, want))}), "
                             f"not {arr.shape}")
    if k.shape != v.shape:
        raise ValueError(f"Values must have the keys' shape {k.shape}, not {v.shape}")
    t = _seq(k.shape[0])
    entries = np.stack([k, v], axis=2)                    # (T, L, 2, H, d): generation order
    return t, _entry_bytes(entries.reshape(-1, layout.head_dim), layout.kv_format).reshape(
        -1, layout.entry_bytes)


def _place(layout: KVLayout, table: np.ndarray, data: np.ndarray, n: int) -> np.ndarray:
    """Page images ``(n, page_bytes)`` holding the entries ``data`` at the slots of ``table``
    (rows of :func:`kv_table`); every other byte erased."""
    size = layout.page_bytes
    pages = np.full(n * size, ERASED, np.uint8)
    start = table["page"] * size + table["offset"]
    pages[start[:, None] + np.arange(layout.entry_bytes)[None, :]] = data
    return pages.reshape(n, size)


def kv_pages(layout: KVLayout, keys, values) -> np.ndarray:
    """Write a KV cache into page images (``np.uint8``, ``(kv_page_count, page_bytes)``).

    ``keys``, ``values``: codes of shape ``(T, L, H, d)`` (fp16/bf16 bit patterns or int8
    values). Each entry's elements are stored in order, 16-bit codes low byte first; unused bytes
    are :data:`ERASED`.
    """
    t, data = kv_entries(layout, keys, values)
    return _place(layout, kv_table(layout, t), data, kv_page_count(layout, t))


#: Fields of a record of the KV writer's mapping table (:class:`KVWrite`).
KV_RECORD = ("page", "layer", "kind", "head", "token", "entries")


@dataclass(frozen=True, eq=False)
class KVWrite:
    """What the KV page writer does with one sequence (:func:`kv_write`).

    Attributes
    ----------
    pages : np.ndarray
        Pages programmed (relative to the sequence's first page), in program order (``int64``).
    images : np.ndarray
        Their images, ``uint8 (len(pages), page_bytes)``.
    table : np.ndarray
        The mapping table, one record per page programmed (fields :data:`KV_RECORD`,
        ``int64``): the page, the (token, layer, kind, head) of its first entry in generation
        order and its entry count. Page-level: the (layer, kind, head) stream and its tokens
        ``token .. token + entries - 1``; naive: ``entries`` consecutive entries of the
        generation order.
    entries : int
        Entries stored (in generation order; a whole number of tokens unless the sequence
        ended inside one).
    error : str or None
        ``"buffer"``: the page-level mapping needs a page of buffer per (layer, K|V, head)
        stream, ``S = 2 L H`` of them, more than ``slots``: nothing is stored. ``"pages"``: a
        token's pages would pass the region (or the sequence :data:`MAX_TOKENS`): that token
        and every later one are dropped; everything before it is stored.
    """

    pages: np.ndarray
    images: np.ndarray
    table: np.ndarray
    entries: int
    error: str | None


def kv_write(layout: KVLayout, keys, values, *, pages: int, slots: int,
             entries: int | None = None) -> KVWrite:
    """Return what the KV page writer stores of one sequence (:class:`KVWrite`).

    The writer takes the entries in generation order (token, layer, K then V, head) and places
    each at :func:`kv_address`. It buffers whole pages: under the page-level mapping one page
    per stream ``c = (2 layer + kind) H + head`` (``S`` buffer pages, all filling together),
    under the naive mapping the page being filled. A page is programmed when its ``T_p``
    entries are in; at sequence end the flush programs the partly filled pages (unused bytes
    :data:`ERASED`). Pages are programmed in increasing page order, each once. A token is
    stored only if all its pages lie inside the region of ``pages`` pages (checked when its
    first entry arrives).

    Parameters
    ----------
    layout : KVLayout
    keys, values : array
        ``(T, L, H, d)`` codes, as :func:`kv_pages` takes them.
    pages : int
        Pages of the region the sequence may use (1 to 2**40).
    slots : int
        Pages of the writer's KV buffer (1 to 2**20).
    entries : int, optional
        Entries the host sends, the first ones of the generation order (default all ``T S``):
        a sequence may end inside a token.
    """
    t, data = kv_entries(layout, keys, values)
    pages = integer(pages, "Region pages", 1, 1 << 40)
    slots = integer(slots, "KV buffer pages", 1, 1 << 20)
    s = layout.entries_per_token
    sent = t * s if entries is None else integer(entries, "Entries sent", 0, t * s)
    empty = np.zeros(0, dtype=[(name, np.int64) for name in KV_RECORD])
    if layout.mapping == "page" and s > slots:
        return KVWrite(np.zeros(0, np.int64), np.zeros((0, layout.page_bytes), np.uint8),
                       empty, 0, "buffer")
    tokens = -(-sent // s)                                # tokens begun
    last, _ = kv_address(layout, layout.layers - 1, layout.kv_heads - 1,
                         np.arange(min(tokens, MAX_TOKENS)), V)
    fit = last < pages
    admitted = int(np.argmin(fit)) if not fit.all() else len(fit)
    stored = min(sent, admitted * s)
    error = "pages" if admitted < tokens else None
    if stored == 0:
        return KVWrite(np.zeros(0, np.int64), np.zeros((0, layout.page_bytes), np.uint8),
                       empty, 0, error)
    table = kv_table(layout, admitted)[:stored]           # generation order
    used, first, count = np.unique(table["page"], return_index=True, return_counts=True)
    images = _place(layout, table, data[:stored], int(used[-1]) + 1)[used]
    records = np.zeros(len(used), dtype=empty.dtype)
    records["page"], records["entries"] = used, count
    for name in ("layer", "kind", "head", "token"):
        records[name] = table[name][first]
    return KVWrite(used.astype(np.int64), images, records, stored, error)


def kv_read(layout: KVLayout, pages, layer: int, head: int, kind, seq_len: int) -> np.ndarray:
    """Read the K (``kind`` 0) or V (1) vectors of tokens ``0 .. seq_len - 1`` of one (layer,
    head) from page images; return ``(T, d)`` codes (``np.uint16`` or ``np.int8``)."""
    t = _seq(seq_len)
    arr = np.asarray(pages)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] != layout.page_bytes:
        raise ValueError(f"Pages must be a (pages, {layout.page_bytes}) uint8 array, not "
                         f"{arr.dtype} of shape {arr.shape}")
    page, offset = kv_address(layout, layer, head, np.arange(t), kind)
    if int(page.max()) >= arr.shape[0]:
        raise ValueError(f"Page count must be at least {int(page.max()) + 1} for "
                         f"{t} tokens, not {arr.shape[0]}")
    flat = arr.reshape(-1)
    data = flat[(page * layout.page_bytes + offset)[:, None]
                + np.arange(layout.entry_bytes)[None, :]]
    if layout.kv_format == "int8":
        return data.view(np.int8)
    return _from_le16(data).reshape(t, layout.head_dim)


# --- Logit and Attend -----------------------------------------------------------------------------


def _kv_kind(kv_format: str) -> str:
    return _choice(kv_format, "KV format", KV_FORMATS)


def logit(q, keys, kv_format: str = "fp16", *, fmacs: int | None = None) -> np.ndarray:
    """Return the scores ``q[h] . k_t`` of ``G`` query heads and ``T`` tokens, bit for bit.

    Float formats: ``tree(fmul(q[h, i], k[t, i]) for i in 0..d-1)``, products 16 x 16 -> fp32,
    the pairwise fp32 tree (the GEMV order with ``W = keys``); fp32 codes ``(G, T)``. int8: exact
    ``np.int32``. No ``1 / sqrt(d)`` scale (the NPU applies it with the softmax). ``fmacs`` is
    checked only.
    """
    kind = _kv_kind(kv_format)
    q = _array(q, "Query", 2, "(heads, head dimension)", kind)
    keys = _array(keys, "Keys", 2, "(tokens, head dimension)", kind)
    if keys.shape[1] != q.shape[1]:
        raise ValueError(f"Key head dimension must be {q.shape[1]} (the query's), "
                         f"not {keys.shape[1]}")
    _fmacs(fmacs)
    heads, d = q.shape
    if kind == "int8":
        a, b = np.broadcast_arrays(q[:, None, :], keys[None, :, :])
        return dot(a, b).astype(np.int32)
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
    kind = _kv_kind(kv_format)
    p = _array(p, "Attention weights", 2, "(heads, tokens)", kind)
    values = _array(values, "Values", 2, "(tokens, head dimension)", kind)
    if values.shape[0] != p.shape[1]:
        raise ValueError(f"Values must have {p.shape[1]} tokens (the attention weights'), "
                         f"not {values.shape[0]}")
    _fmacs(fmacs)
    if kind == "int8":
        a, b = np.broadcast_arrays(p[:, None, :], values.T[None, :, :])
        return dot(a, b).astype(np.int32)
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


def logit_reference(q, keys, kv_format: str = "fp16") -> np.ndarray:
    """``q @ keys.T`` in float64 (true values, no flush) or exact Python integers (int8)."""
    kind = _kv_kind(kv_format)
    q = _array(q, "Query", 2, "(heads, head dimension)", kind)
    keys = _array(keys, "Keys", 2, "(tokens, head dimension)", kind)
    if kind == "int8":
        return q.astype(object) @ keys.T.astype(object)
    fmt = _KV_FLOAT[kind]
    return _values(q, fmt) @ _values(keys, fmt).T


def attend_reference(p, values, kv_format: str = "fp16") -> np.ndarray:
    """``p @ values`` in float64 (true values, no flush) or exact Python integers (int8)."""
    kind = _kv_kind(kv_format)
    p = _array(p, "Attention weights", 2, "(heads, tokens)", kind)
    values = _array(values, "Values", 2, "(tokens, head dimension)", kind)
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
    kind = _kv_kind(kv_format)
    q = _array(q, "Query", 2, "(heads, head dimension)", kind)
    keys = _array(keys, "Keys", 2, "(tokens, head dimension)", kind)
    if kind == "int8":
        return np.zeros((q.shape[0], keys.shape[0]))
    fmt = _KV_FLOAT[kind]
    d = q.shape[1]
    return _product_bound(_values(q, fmt)[:, None, :], _values(keys, fmt)[None, :, :], fmt,
                          _depth(d), d)


def attend_bound(p, values, kv_format: str = "fp16") -> np.ndarray:
    """Bound on ``|attend - attend_reference|`` (``(G, d)``): a sequential sum of ``T`` exact
    products, ``gamma(T - 1) * sum_t |p_t v_te| + ...``; 0 for int8."""
    kind = _kv_kind(kv_format)
    p = _array(p, "Attention weights", 2, "(heads, tokens)", kind)
    values = _array(values, "Values", 2, "(tokens, head dimension)", kind)
    if kind == "int8":
        return np.zeros((p.shape[0], values.shape[1]))
    fmt = _KV_FLOAT[kind]
    t = p.shape[1]
    return _product_bound(_values(p, fmt)[:, None, :], _values(values, fmt).T[None, :, :], fmt,
                          t - 1, t)


def attention_timing(geometry: FlashGeometry, layout: KVLayout, seq_len: int, *,
                     op: str = "logit", group: int = 1, layer: int = 0, head: int = 0,
                     acc_loop: int = ACC_LOOP, pe_latency: int = 0) -> PageTiming:
    """Return the expected schedule of Logit (K pages) or Attend (V pages) of one head group.

    Page ``k`` of :func:`kv_page_sequence` holds ``n_k`` of the group's entries; it transfers
    those, ``ceil(n_k * entry_bytes / W)`` cycles, and computes ``n_k * c`` cycles with
    ``c = group * ceil(d / F)``: each entry serves ``group`` query heads, and a beat holds
    ``F`` elements of one head's dot product or update, the entry cut into beats like a GEMV row
    (docs/inflash_models.md sections 5.5 and 8; the last beat padded when ``F`` does not divide
    ``d``). Float Attend needs ``c >= acc_loop``, the loop of one accumulator, so
    ``c = max(c, acc_loop)`` there.
    """
    if not isinstance(geometry, FlashGeometry):
        raise TypeError(f"Geometry must be a FlashGeometry, not {type(geometry).__name__}")
    op = _choice(op, "Attention operation", ("logit", "attend"))
    group = integer(group, "Query heads per KV head", 1, 1024)
    acc_loop = integer(acc_loop, "Accumulator loop in cycles", 1, 1024)
    if layout.page_bytes != geometry.page_bytes:
        raise ValueError(f"KV page size must be the plane's {geometry.page_bytes} bytes, "
                         f"not {layout.page_bytes}")
    t = _seq(seq_len)
    kind = K if op == "logit" else V
    page, _ = kv_address(layout, layer, head, np.arange(t), kind)
    _, counts = np.unique(page, return_counts=True)
    transfer = -(-counts * layout.entry_bytes // geometry.transfer_bytes)
    per_token = group * -(-layout.head_dim // geometry.fmacs)
    if op == "attend" and layout.kv_format != "int8":
        per_token = max(per_token, acc_loop)
    return page_pipeline(geometry.tR_cycles, transfer, counts * per_token,
                         pe_latency=pe_latency)


# --- read disturb ---------------------------------------------------------------------------------


def block_reads(geometry: FlashGeometry, pages_read) -> np.ndarray:
    """Count page reads per block: ``(blocks,)`` ``int64``, block ``b`` holding pages
    ``b * pages_per_block .. (b + 1) * pages_per_block - 1``. Every read of a page adds one to
    its block's counter (read disturb stresses the whole block)."""
    pages = _range(np.asarray(pages_read).reshape(-1), "Page", 0, geometry.pages - 1)
    return np.bincount(pages // geometry.pages_per_block, minlength=geometry.blocks)


# --- measurement ----------------------------------------------------------------------------------


def _quantize(rng: np.random.Generator, rows: int, cols: int, group: int) -> Weights:
    """Random w4a16 weights: N(0, 1) rows quantized per group to ``s * q + o``, ``o`` the group
    minimum, ``s = (max - min) / 15``."""
    w = rng.standard_normal((rows, cols // group, group))
    lo, hi = w.min(2), w.max(2)
    s = from_float((hi - lo) / 15, FP16)
    o = from_float(lo, FP16)
    sv, ov = _values(s, FP16)[..., None], _values(o, FP16)[..., None]
    q = np.clip(np.rint((w - ov) / sv), 0, 15).astype(np.uint8).reshape(rows, cols)
    return Weights("w4a16", q, s, o, group)


def _survey(seeds: int = 4) -> None:
    """Print the worst errors against the references and the bounds on random inputs."""
    print("GEMV: W, x ~ N(0, 1) (w4a16: N(0, 1) quantized per group of 128)")
    print("mode   rows  cols   worst |y-ref|/A          worst |y-ref|/bound  bound/A")
    for mode in ("fp16", "bf16", "w4a16", "w8a8"):
        for rows, cols in ((64, 128), (64, 4096), (8, 16384), (4, 65536)):
            worst_a = worst_b = bound_a = 0.0
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                if mode == "w8a8":
                    w = Weights(mode, rng.integers(-128, 128, (rows, cols)))
                    x = rng.integers(-128, 128, cols)
                    got = gemv(w, x).astype(object)
                    assert (got == gemv_reference(w, x)).all()
                    continue
                fmt = _FLOAT[mode]
                if mode == "w4a16":
                    w = _quantize(rng, rows, cols, 128)
                else:
                    w = Weights(mode, from_float(rng.standard_normal((rows, cols)), fmt))
                x = from_float(rng.standard_normal(cols), fmt)
                got = _values_fp32(gemv(w, x))
                ref = gemv_reference(w, x)
                wabs = np.abs(_dequantized(w) if mode == "w4a16" else _values(w.codes, fmt))
                mass = wabs @ np.abs(_values(x, fmt))
                err = np.abs(got - ref)
                bound = gemv_bound(w, x)
                worst_a = max(worst_a, float((err / mass).max()))
                worst_b = max(worst_b, float((err / bound).max()))
                bound_a = max(bound_a, float((bound / mass).max()))
            if mode == "w8a8":
                print(f"{mode:<6} {rows:<5} {cols:<6} 0 (exact, {seeds} seeds)")
                continue
            print(f"{mode:<6} {rows:<5} {cols:<6} {worst_a:.3e} (2**{_log2(worst_a):6.2f})  "
                  f"{worst_b:.3e}            {bound_a:.3e}")
    print()
    print("Logit: q, K ~ N(0, 1); Attend: p = softmax of N(0, 1) scores (rounded), V ~ N(0, 1)")
    print("op      fmt   G  T      d    worst |err|/sum|ab|      worst |err|/bound  bound/sum|ab|")
    for op in ("logit", "attend"):
        for fmt_name in ("fp16", "bf16"):
            fmt = _KV_FLOAT[fmt_name]
            for heads, t, d in ((1, 16, 128), (4, 1000, 128), (8, 10000, 128), (1, 100000, 64)):
                if op == "logit" and t > 10000:
                    continue
                worst_a = worst_b = bound_a = 0.0
                for seed in range(max(1, seeds // (4 if t >= 10000 else 1))):
                    rng = np.random.default_rng(seed)
                    v = from_float(rng.standard_normal((t, d)), fmt)
                    if op == "logit":
                        q = from_float(rng.standard_normal((heads, d)), fmt)
                        got = _values_fp32(logit(q, v, fmt_name))
                        ref = logit_reference(q, v, fmt_name)
                        bound = logit_bound(q, v, fmt_name)
                        mass = np.abs(_values(q, fmt)) @ np.abs(_values(v, fmt)).T
                    else:
                        s = rng.standard_normal((heads, t))
                        e = np.exp(s - s.max(1, keepdims=True))
                        p = from_float(e / e.sum(1, keepdims=True), fmt)
                        got = _values_fp32(attend(p, v, fmt_name))
                        ref = attend_reference(p, v, fmt_name)
                        bound = attend_bound(p, v, fmt_name)
                        mass = np.abs(_values(p, fmt)) @ np.abs(_values(v, fmt))
                    err = np.abs(got - ref)
                    worst_a = max(worst_a, float((err / mass).max()))
                    worst_b = max(worst_b, float((err / bound).max()))
                    bound_a = max(bound_a, float((bound / mass).max()))
                print(f"{op:<7} {fmt_name:<5} {heads:<2} {t:<6} {d:<4} {worst_a:.3e} "
                      f"(2**{_log2(worst_a):6.2f})  {worst_b:.3e}          {bound_a:.3e}")


def _values_fp32(codes: np.ndarray) -> np.ndarray:
    return np.asarray(codes, dtype=np.uint32).view(np.float32).astype(np.float64)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -math.inf


def _timing_tables() -> None:
    """Print GEMV schedules of a 4096 x 4096 layer and the attention page reads and schedules."""
    print("GEMV 4096 x 4096 on one plane (tR 4 us = 1600 cycles, 4 B/cycle, 400 MHz, w4a16 g=128)")
    print("mode   F   pages  transfer  compute  period  total cycles  total ms  PE util  "
          "read util")
    for mode in MODES:
        for f in (1, 2, 4, 8, 16):
            t = gemv_timing(FlashGeometry(fmacs=f), mode, 4096, 4096)
            print(f"{mode:<6} {f:<3} {t.pages:<6} {int(t.transfer[0]):<9} {int(t.compute[0]):<8} "
                  f"{t.period:<7} {t.total:<13} {t.total / 400e3:<9.3f} "
                  f"{t.compute.sum() / t.total:<8.3f} {t.pages * t.tR / t.total:.3f}")
    print()
    print("Attention page reads of one head group (K; V is the same), fp16, d = 128")
    print("model                 T      page-level  naive   ratio")
    for name, layout in (("LLaMA2-7B (MHA 32x32)", KVLayout(32, 32, 128)),
                         ("LLaMA3-8B (GQA 32x8)", KVLayout(32, 8, 128))):
        for t in (1024, 10240, 10000, 100000):
            a, b = kv_pages_read(layout, t), kv_pages_read(layout.with_mapping("naive"), t)
            print(f"{name:<21} {t:<6} {a:<11} {b:<7} {b / a:.2f}")
    print()
    print("Logit schedule of one head group at T = 10000 (fp16, d = 128, 4 KB pages)")
    print("case                        F   mapping  pages  compute/page  period  total cycles")
    for name, layout, group in (("MHA (LLaMA2-7B)", KVLayout(32, 32, 128), 1),
                                ("GQA group 8 (LLaMA3-70B)", KVLayout(80, 8, 128), 8)):
        for f in (2, 16):
            for mapping in MAPPINGS:
                t = attention_timing(FlashGeometry(fmacs=f), layout.with_mapping(mapping),
                                     10000, group=group)
                print(f"{name:<27} {f:<3} {mapping:<8} {t.pages:<6} {int(t.compute[0]):<13} "
                      f"{t.period:<7} {t.total}")


if __name__ == "__main__":
    _survey()
    print()
    _timing_tables()
