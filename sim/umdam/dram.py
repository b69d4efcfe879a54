"""Simulate LPDDR5 bank timing for the NPU's request stream and the per-bank PIM units.

Layer 1 of :mod:`sim.umdam`: :class:`Lpddr5Timing`, :func:`simulate_stream`, :func:`simulate_pim`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields

import numpy as np

import golden.umdam as golden
from hdl.umdam.geometry import AddressMapping
from hdl.validate import integer, positive

__all__ = [
    "Lpddr5Timing", "AccessStats", "bursts", "simulate_stream", "simulate_pim",
]


# --------------------------------------------------------------------------------------------------
# 1. LPDDR5 timing


@dataclass(frozen=True)
class Lpddr5Timing:
    """LPDDR5 timing in the paper's names: clock period in ns, every other value in tCK.

    The defaults are Table I (``tCK``, ``nBL``, ``nCL``, ``nCCD``, ``nRC``, ``nWR``, ``nRAS``,
    ``nRPpb``, ``nRCD``). Table I stops there; ``nRTP``, ``nCWL``, ``nWTR``, ``nRRD`` and
    ``nFAW`` are the values of the Ramulator 2 ``LPDDR5_6400`` preset that Table I was copied
    from (the simulator the paper used), with ``nWTR`` its same-bank-group ``nWTRL`` because
    16-bank mode has no bank groups.

    Parameters
    ----------
    tCK_ns : float
        Command clock period.
    nBL, nCL, nRCD, nRPpb, nRAS, nRC, nCCD, nWR, nRTP, nCWL, nWTR, nRRD, nFAW : int
        Burst length on the data bus, read latency, ACT to column command, per-bank precharge,
        ACT to PRE, ACT to ACT (same bank), column to column, write recovery, read to PRE,
        write latency, write to read, ACT to ACT (other bank), four-ACT window.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.

    Notes
    -----
    Table I's ``nRC = 30`` is shorter than ``nRAS + nRPpb = 49``; both constraints are applied,
    so ``nRAS + nRPpb`` sets the same-bank row cycle.
    """

    tCK_ns: float = 1.25
    nBL: int = 4
    nCL: int = 20
    nRCD: int = 15
    nRPpb: int = 15
    nRAS: int = 34
    nRC: int = 30
    nCCD: int = 4
    nWR: int = 28
    nRTP: int = 4
    nCWL: int = 11
    nWTR: int = 10
    nRRD: int = 4
    nFAW: int = 16

    def __post_init__(self):
        positive(self.tCK_ns, "Clock period tCK_ns", "ns")
        for f in fields(self):
            if f.name != "tCK_ns":
                integer(getattr(self, f.name), f"Timing {f.name} (tCK)", 1, 1000)

    def cycles(self) -> dict[str, int]:
        """Return every constraint the scheduler applies, in tCK (the one place they are formed)."""
        return {
            "rcd": self.nRCD, "rp": self.nRPpb, "ras": self.nRAS, "rc": self.nRC,
            "rtp": self.nRTP, "rrd": self.nRRD, "faw": self.nFAW,
            # Same-type column commands: the bank's column cadence and the data bus.
            "ccd": max(self.nCCD, self.nBL),
            "read_data": self.nCL + self.nBL,
            "write_data": self.nCWL + self.nBL,
            # Ramulator 2: RD -> WR assumes a one-tCK write preamble (the "+ 2").
            "rd_to_wr": max(1, self.nCL + self.nBL + 2 - self.nCWL),
            "wr_to_rd": self.nCWL + self.nBL + self.nWTR,
            "wr_to_pre": self.nCWL + self.nBL + self.nWR,
        }

    def seconds(self, cycles: float) -> float:
        """Convert tCK cycles to seconds."""
        return cycles * self.tCK_ns * 1e-9

    def channel_peak_gbps(self, burst_bytes: int) -> float:
        """Peak data-bus bandwidth of one channel: one burst per ``max(nCCD, nBL)`` cycles."""
        return burst_bytes / self.seconds(max(self.nCCD, self.nBL)) / 1e9

    def bank_peak_gbps(self, burst_bytes: int) -> float:
        """Peak internal bandwidth of one bank (a PIM unit's source): one burst per ``nCCD``."""
        return burst_bytes / self.seconds(self.nCCD) / 1e9


@dataclass(frozen=True)
class AccessStats:
    """What one simulated stream did.

    ``cycles`` runs from the first request to the end of the last burst's data; ``hits`` found
    their row open, ``empties`` found the bank closed, ``conflicts`` had another row open.
    ``units`` counts the channels (NPU) or bank units (PIM) that served at least one access.
    """

    accesses: int
    writes: int
    cycles: int
    hits: int
    empties: int
    conflicts: int
    burst_bytes: int
    tCK_ns: float
    units: int

    @property
    def bytes(self) -> int:
        return self.accesses * self.burst_bytes

    @property
    def seconds(self) -> float:
        return self.cycles * self.tCK_ns * 1e-9

    @property
    def gbps(self) -> float:
        """Bytes moved per second, in GB/s (1e9 bytes)."""
        return self.bytes / self.seconds / 1e9 if self.cycles else 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0


_LONG_AGO = -(1 << 40)      # a time every constraint measured from it has long been met


def _schedule(c: dict[str, int], unit: list, bank: list, row: list, write: list,
              n_units: int, banks_per_unit: int, queue: int, coupled: bool):
    """Place the commands of every request; return ``(finish, hits, empties, conflicts)``."""
    nb = n_units * banks_per_unit
    open_row = [-1] * nb
    t_act = [_LONG_AGO] * nb
    t_pre = [_LONG_AGO] * nb
    t_rd = [_LONG_AGO] * nb
    t_wr = [_LONG_AGO] * nb
    last_rd = [_LONG_AGO] * n_units
    last_wr = [_LONG_AGO] * n_units
    last_act = [_LONG_AGO] * n_units
    faw = [deque([_LONG_AGO] * 4, maxlen=4) for _ in range(n_units)]
    issued = [deque(maxlen=queue) for _ in range(n_units)]
    arrival = [0] * n_units
    rcd, rp, ras, rc, rtp = c["rcd"], c["rp"], c["ras"], c["rc"], c["rtp"]
    rrd, n_faw, ccd = c["rrd"], c["faw"], c["ccd"]
    read_data, write_data = c["read_data"], c["write_data"]
    rd_to_wr, wr_to_rd, wr_to_pre = c["rd_to_wr"], c["wr_to_rd"], c["wr_to_pre"]
    hits = empties = conflicts = 0
    finish = 0
    agent = 0                                   # the coupled agent's last issue time
    for u, bk, r, w in zip(unit, bank, row, write):
        b = u * banks_per_unit + bk
        a = agent if coupled else arrival[u]
        q = issued[u]
        if len(q) == queue and q[0] > a:        # wait for a free entry in the unit's queue
            a = q[0]
        if coupled:
            agent = a
        else:
            arrival[u] = a
        if open_row[b] == r:
            hits += 1
            ready = t_act[b] + rcd
        else:
            if open_row[b] < 0:
                empties += 1
                act = max(a, t_pre[b] + rp, t_act[b] + rc)
            else:
                conflicts += 1
                pre = max(a, t_act[b] + ras, t_rd[b] + rtp, t_wr[b] + wr_to_pre)
                t_pre[b] = pre
                act = max(pre + rp, t_act[b] + rc)
            f = faw[u]
            act = max(act, last_act[u] + rrd, f[0] + n_faw)
            f.append(act)
            last_act[u] = act
            t_act[b] = act
            open_row[b] = r
            ready = act + rcd
        if w:
            t = max(a, ready, last_wr[u] + ccd, last_rd[u] + rd_to_wr)
            last_wr[u] = t_wr[b] = t
            end = t + write_data
        else:
            t = max(a, ready, last_rd[u] + ccd, last_wr[u] + wr_to_rd)
            last_rd[u] = t_rd[b] = t
            end = t + read_data
        q.append(t)
        if end > finish:
            finish = end
    return finish, hits, empties, conflicts


def bursts(addresses, burst_bytes: int) -> np.ndarray:
    """Return the burst-aligned addresses of an element stream, one per burst access.

    Consecutive elements in the same burst become one access (what a DMA engine issues).
    """
    integer(burst_bytes, "Burst size in bytes", 1, 1 << 10)
    addr = np.asarray(addresses)
    if addr.ndim != 1 or addr.dtype.kind not in "ui":
        raise TypeError(f"addresses must be a one-dimensional integer array, not "
                        f"{addr.dtype} of shape {addr.shape}")
    start = (addr.astype(np.uint64) // np.uint64(burst_bytes)) * np.uint64(burst_bytes)
    if start.size == 0:
        return start
    keep = np.ones(start.size, bool)
    keep[1:] = start[1:] != start[:-1]
    return start[keep]


def _coordinates(mapping, addresses, writes, queue):
    if not isinstance(mapping, AddressMapping):
        raise TypeError(f"mapping must be an hdl.umdam.AddressMapping, not {mapping!r}")
    integer(queue, "Queue depth (requests per channel)", 1, 1024)
    addr = np.asarray(addresses)
    if addr.ndim != 1 or addr.dtype.kind not in "ui":
        raise TypeError(f"addresses must be a one-dimensional integer array, not "
                        f"{addr.dtype} of shape {addr.shape}")
    if addr.size == 0:
        raise ValueError("addresses must hold at least one access, not an empty array")
    if writes is None:
        wr = np.zeros(addr.size, bool)
    else:
        wr = np.asarray(writes)
        if wr.dtype != bool or wr.shape != addr.shape:
            raise TypeError(f"writes must be a boolean array of the addresses' shape "
                            f"{addr.shape}, not {wr.dtype} of shape {wr.shape}")
    coords = golden.map_addresses(mapping, addr)
    g = mapping.geometry
    bank = (coords["rank"] * np.uint64(g.bankgroups) + coords["bankgroup"]) \
        * np.uint64(g.banks) + coords["bank"]
    return coords, bank.astype(np.int64), wr


def simulate_stream(mapping, addresses, *, writes=None, timing: Lpddr5Timing | None = None,
                    queue: int = 32) -> AccessStats:
    """Time one agent's burst stream (the NPU, or a copy engine) on the DRAM, in issue order.

    Parameters
    ----------
    mapping : hdl.umdam.AddressMapping
        Physical address to DRAM coordinates, through :func:`golden.umdam.map_addresses`.
    addresses : 1-D integer array
        One burst access each, in the order the agent issues them.
    writes : 1-D bool array or None
        Which accesses are writes (default: all reads).
    timing : Lpddr5Timing
        Table I by default.
    queue : int
        Requests each channel's controller holds (1 to 1024).

    Returns
    -------
    AccessStats
        Cycles to the last data beat, row hits, empties and conflicts.
    """
    timing = timing or Lpddr5Timing()
    if not isinstance(timing, Lpddr5Timing):
        raise TypeError(f"timing must be an Lpddr5Timing, not {timing!r}")
    coords, bank, wr = _coordinates(mapping, addresses, writes, queue)
    g = mapping.geometry
    channel = coords["channel"].astype(np.int64)
    finish, hits, empties, conflicts = _schedule(
        timing.cycles(), channel.tolist(), bank.tolist(), coords["row"].astype(np.int64).tolist(),
        wr.tolist(), g.channels, g.ranks * g.bankgroups * g.banks, queue, coupled=True)
    return AccessStats(int(channel.size), int(wr.sum()), finish, hits, empties, conflicts,
                       g.burst_bytes, timing.tCK_ns, int(np.unique(channel).size))


def simulate_pim(mapping, addresses, *, timing: Lpddr5Timing | None = None,
                 queue: int = 32) -> AccessStats:
    """Time bank-level PIM units, each streaming the accesses that fall in its own bank.

    Every address is mapped to its bank; each bank's unit reads its accesses in the order
    given, independently of the others (AiM-style: the data stays in the bank, so no data bus is
    shared), limited by its bank's timing: ``nCCD`` between column commands and
    ``nRTP + nRPpb + nRCD`` to change rows. ``cycles`` is the slowest unit's.

    Parameters and errors as :func:`simulate_stream` (reads only).
    """
    timing = timing or Lpddr5Timing()
    if not isinstance(timing, Lpddr5Timing):
        raise TypeError(f"timing must be an Lpddr5Timing, not {timing!r}")
    coords, bank, wr = _coordinates(mapping, addresses, None, queue)
    g = mapping.geometry
    unit = coords["channel"].astype(np.int64) * (g.ranks * g.bankgroups * g.banks) + bank
    finish, hits, empties, conflicts = _schedule(
        timing.cycles(), unit.tolist(), [0] * unit.size,
        coords["row"].astype(np.int64).tolist(), wr.tolist(), g.bank_count, 1, queue,
        coupled=False)
    return AccessStats(int(unit.size), 0, finish, hits, empties, conflicts, g.burst_bytes,
                       timing.tCK_ns, int(np.unique(unit).size))
