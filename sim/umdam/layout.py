"""Place a weight matrix per address mapping and measure its NPU and PIM bandwidth.

Layer 2 of :mod:`sim.umdam`: the NPU tensor in NN tile order, the PIM layout of Algorithm 1 and
the re-layout between them (:class:`LayoutPoint`, :func:`measure_layout`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import golden.umdam as golden
from hdl.umdam.geometry import NAMED_MAPPINGS, AddressMapping, DramGeometry
from hdl.validate import integer

from .dram import AccessStats, Lpddr5Timing, bursts, simulate_pim, simulate_stream

__all__ = [
    "LayoutPoint", "LayoutResult", "measure_layout", "nn_order",
]


# --------------------------------------------------------------------------------------------------
# 2. Layouts per mapping


def nn_order(geometry, rows: int, cols: int, elem_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(i, j)`` of the matrix elements in the NPU's NN tile order.

    Tiles of ``interleave / elem_bytes`` rows by ``bank_count`` columns, tile columns outer, tile
    rows inner, each tile column-major: the order the paper's NN format stores a weight matrix in
    and the NPU consumes it. Written here from that description, independently of
    :func:`golden.umdam.walk` (whose ``npu`` order :func:`measure_layout` checks against it).
    """
    th, tw = golden.tile_shape(geometry, elem_bytes)
    golden.tile_grid(geometry, rows, cols, elem_bytes)
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    i, j = i.ravel(), j.ravel()
    index = np.lexsort((i % th, j % tw, i // th, j // tw))
    return i[index], j[index]


@dataclass(frozen=True)
class LayoutPoint:
    """One layout measurement: a weight matrix, an address mapping, the DRAM.

    Parameters
    ----------
    mapping : str
        A name of :data:`hdl.umdam.NAMED_MAPPINGS` (or a field order).
    rows, cols : int
        Matrix shape (``R x C``, column ``j`` is output ``j`` of the GEMV); whole tiles
        (multiples of ``interleave / elem_bytes`` and of the bank count).
    timing : Lpddr5Timing
    geometry : hdl.umdam.DramGeometry
        Table I's LPDDR5 by default.
    elem_bytes : int
        2 (FP16, the paper's precision).
    chunk_bytes : int
        Bytes the re-layout copy reads before writing them back (default one 16 KiB tile).
    shared_tensor : bool
        Also measure the PIM units on the NPU tensor itself (one copy, no re-layout).
    queue : int
        Controller queue depth per channel.
    """

    mapping: str
    rows: int
    cols: int
    timing: Lpddr5Timing = field(default_factory=Lpddr5Timing)
    geometry: DramGeometry = field(default_factory=DramGeometry.lpddr5)
    elem_bytes: int = 2
    chunk_bytes: int = 16384
    shared_tensor: bool = False
    queue: int = 32
    label: str = ""

    def __post_init__(self):
        if not isinstance(self.geometry, DramGeometry):
            raise TypeError(f"geometry must be an hdl.umdam.DramGeometry, not {self.geometry!r}")
        if not isinstance(self.timing, Lpddr5Timing):
            raise TypeError(f"timing must be an Lpddr5Timing, not {self.timing!r}")
        AddressMapping(self.mapping, self.geometry)          # validates the mapping
        th, tw = golden.tile_shape(self.geometry, self.elem_bytes)
        integer(self.rows, "Matrix rows", 1, 1 << 20)
        integer(self.cols, "Matrix columns", 1, 1 << 20)
        if self.rows % th or self.cols % tw:
            raise ValueError(f"Matrix shape must be whole {th} x {tw} tiles (rows a multiple of "
                             f"{th}, columns of {tw}), not {self.rows} x {self.cols}")
        integer(self.chunk_bytes, "Re-layout chunk in bytes", self.geometry.burst_bytes,
                   1 << 30)
        if self.chunk_bytes % self.geometry.burst_bytes:
            raise ValueError(f"Re-layout chunk must be a multiple of the "
                             f"{self.geometry.burst_bytes} B burst, not {self.chunk_bytes} B")
        integer(self.queue, "Queue depth (requests per channel)", 1, 1024)


@dataclass(frozen=True)
class LayoutResult:
    """What :func:`measure_layout` found for one mapping and matrix.

    ``npu`` is the NPU's sequential read of its tensor; ``pim`` the PIM units streaming the PIM
    layout; ``relayout`` the copy between them (``None`` when unified). ``shared_local`` is the
    fraction of matrix columns that lie in one bank when the PIM works on the NPU tensor itself,
    and ``shared_pim`` that PIM stream (both ``None`` unless asked for).
    """

    point: LayoutPoint
    order: str
    unified: bool
    npu: AccessStats
    pim: AccessStats
    relayout: AccessStats | None
    shared_local: float | None = None
    shared_pim: AccessStats | None = None

    @property
    def bytes(self) -> int:
        return self.point.rows * self.point.cols * self.point.elem_bytes

    @property
    def npu_efficiency(self) -> float:
        """NPU bandwidth over the bus peak of every channel."""
        t, g = self.point.timing, self.point.geometry
        return self.npu.gbps / (g.channels * t.channel_peak_gbps(g.burst_bytes))

    @property
    def pim_efficiency(self) -> float:
        """PIM streaming bandwidth over every bank's peak (one burst per nCCD)."""
        t, g = self.point.timing, self.point.geometry
        return self.pim.gbps / (g.bank_count * t.bank_peak_gbps(g.burst_bytes))

    @property
    def relayout_seconds_per_byte(self) -> float:
        return self.relayout.seconds / self.bytes if self.relayout else 0.0


def _tensor_base(mapping) -> int:
    """A physical base for the NPU tensor of a re-laid-out matrix: row ``rows / 2`` of bank 0.

    Far above the PIM layout (which starts at tile slot 0), under every mapping.
    """
    g = mapping.geometry
    return int(golden.compose_addresses(mapping, {"row": np.array([g.rows // 2])})[0])


def measure_layout(point: LayoutPoint) -> LayoutResult:
    """Measure the NPU, the PIM units and the re-layout for one mapping (a sweep point).

    Raises
    ------
    RuntimeError
        If a cross-check of the layouts fails (the golden NPU walk under ``umdam`` is not the NN
        tensor, or a PIM-layout column leaves its bank).
    """
    if not isinstance(point, LayoutPoint):
        raise TypeError(f"point must be a LayoutPoint, not {point!r}")
    g, eb = point.geometry, point.elem_bytes
    mapping = AddressMapping(point.mapping, g)
    R, C = point.rows, point.cols
    i_nn, j_nn = nn_order(g, R, C, eb)
    # The PIM layout: Algorithm 1 composed by this mapping (the RTL tile generator's addresses).
    layout = golden.layout_addresses(mapping, R, C, eb)
    coords = golden.map_addresses(mapping, layout)
    unit = (coords["channel"] * np.uint64(g.ranks * g.bankgroups * g.banks)
            + (coords["rank"] * np.uint64(g.bankgroups) + coords["bankgroup"])
            * np.uint64(g.banks) + coords["bank"])
    if not np.all(unit == unit[:1, :]):
        raise RuntimeError(f"{mapping.name}: a column of the Algorithm 1 layout spans banks")
    src_nn = layout[i_nn, j_nn]                          # the PIM layout read in NN order
    unified = bool(np.array_equal(src_nn, np.arange(R * C, dtype=np.uint64) * np.uint64(eb)))
    if mapping.order == NAMED_MAPPINGS["umdam"]:
        # Cross-check: the golden NPU walk under umdam is a sequential stream, the NN tensor.
        wi, wj, waddr = golden.walk(mapping, R, C, eb, order="npu")
        if not (unified and np.array_equal(wi, i_nn) and np.array_equal(wj, j_nn)
                and np.array_equal(waddr, src_nn)):
            raise RuntimeError("umdam: the golden NPU walk is not the contiguous NN tensor")
    base = 0 if unified else _tensor_base(mapping)
    n_bursts = R * C * eb // g.burst_bytes
    tensor = np.uint64(base) + np.arange(n_bursts, dtype=np.uint64) * np.uint64(g.burst_bytes)
    npu = simulate_stream(mapping, tensor, timing=point.timing, queue=point.queue)
    _, _, pim_addr = golden.walk(mapping, R, C, eb, order="pim")
    pim = simulate_pim(mapping, bursts(pim_addr, g.burst_bytes), timing=point.timing,
                       queue=point.queue)
    relayout = None
    if not unified:
        src = bursts(src_nn, g.burst_bytes)
        if src.size != n_bursts:
            raise RuntimeError(f"{mapping.name}: the PIM layout's bursts do not match the NN "
                               f"tensor's ({src.size} against {n_bursts})")
        # Copy engine: read one chunk of the PIM layout, write it to the NPU tensor, repeat.
        per = point.chunk_bytes // g.burst_bytes
        chunk = np.arange(n_bursts) // per
        order = np.lexsort((np.arange(2 * n_bursts) % n_bursts,
                            np.repeat([0, 1], n_bursts), np.concatenate([chunk, chunk])))
        addr = np.concatenate([src, tensor])[order]
        writes = np.repeat([False, True], n_bursts)[order]
        relayout = simulate_stream(mapping, addr, writes=writes, timing=point.timing,
                                   queue=point.queue)
    shared_local = shared_pim = None
    if point.shared_tensor:
        elem = np.uint64(base) + np.arange(R * C, dtype=np.uint64) * np.uint64(eb)
        c2 = golden.map_addresses(mapping, elem)
        u2 = np.empty((R, C), np.uint64)
        u2[i_nn, j_nn] = (c2["channel"] * np.uint64(g.ranks * g.bankgroups * g.banks)
                          + (c2["rank"] * np.uint64(g.bankgroups) + c2["bankgroup"])
                          * np.uint64(g.banks) + c2["bank"])
        shared_local = float(np.mean(u2.min(axis=0) == u2.max(axis=0)))
        shared_pim = simulate_pim(mapping, tensor, timing=point.timing, queue=point.queue)
    return LayoutResult(point, mapping.order, unified, npu, pim, relayout, shared_local,
                        shared_pim)
