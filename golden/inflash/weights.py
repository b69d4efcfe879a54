"""Weight matrices of the in-flash GEMV and their layout: the byte stream of each precision mode
and its cut into flash pages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.inflash.spec import MAX_COLS, MAX_GROUP, MAX_ROWS, MIN_GROUP, SCALE_BYTES
from hdl.validate import integer

from .params import ERASED, MODES, _array, _choice, _pow2

__all__ = [
    "Weights", "stream_bytes", "page_count", "weight_pages", "weights_from_pages",
]


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
