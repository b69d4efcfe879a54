"""Cycle model of the in-flash PE: the flash plane's page pipeline (:class:`PageTiming`), the
beats of a page, and the schedules of a GEMV and of Logit and Attend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.inflash.spec import FlashGeometry, MAX_FMACS, SCALE_BYTES
from hdl.validate import integer

from .kv import KVLayout, _seq, kv_address
from .params import ACC_LOOP, K, V, _choice, _pow2
from .weights import _shape, _unit, stream_bytes

__all__ = [
    "PageTiming", "page_pipeline", "beats_per_page", "gemv_timing", "attention_timing",
]


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
