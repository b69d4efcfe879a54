"""Behavioural eDRAM macro with retention decay, attached to one segment port of the controller.

The model of a 3T gain-cell array (docs/edram.md, "Decay macro"):

* Each row remembers the edge at which it was last *restored*: written (a write is a row-granular
  read-modify-write, :class:`hdl.edram.ports.BankPortSignature`) or refreshed. At every restore,
  every cell of the row draws a fresh retention time from the calibrated lognormal model
  (:data:`golden.edram.RETENTION`); a cell whose age since the restore has reached its retention
  time has lost its charge and reads inverted. Reads do not restore charge.
* A restore first latches what the cells hold now, errors included (a refresh cannot tell a lost
  bit from a good one), then restores the charge. An error caught by a refresh is permanent until
  the word is written again.
* So a bit read at age ``t`` after its last restore is wrong with probability
  ``(1 - q (1 - 2 BER(t))) / 2``, where ``q`` is the product of ``1 - 2 BER(t_i)`` over the
  earlier restore intervals ``t_i`` since the word was written (an odd number of flips). The macro
  logs that prediction with every read, computed from the retention model and the restore times
  alone, never from its random draws, and the word's write count (its *version*).
* Reads of one word see the same lost cells until the next restore, and an error latched by a
  refresh until the next write, so bit errors over all reads come in clusters, more spread than a
  Poisson count of the same mean. The last read of each version of a word is free of that: its
  bits depend on their own retention draws only, so those errors are a sum of independent
  Bernoulli trials (the testbench's band check counts them, ``_Tally``).

Scripted decay (real-model runs, :mod:`cocotb_tests.realdata.edram`): with ``script`` set (a
dict ``(bank, row, col) -> bit mask``), no retention time is drawn. The next write of a listed
word makes the cells of its mask lose their charge from that write on (retention time 0); every
other cell keeps it (infinite retention). A restore latches what a lost cell holds, as with
drawn retention times, and the script's losses happen once per write. So a read returns the word
written XOR its mask, whatever refreshes came between: the error pattern a golden injection drew
for that word, placed in the cells the controller wrote.

The macro also checks the controller's contract, every cycle: at most one of ``we``, ``re``,
``refresh`` per bank; no live row older than the segment's interval when it is restored or
released (ages only grow between those events, so this checks the age bound at every cycle); no
refresh of a row holding no live data, apart from one already pending at its release.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from golden import edram as golden

from ..streams import ClockService

__all__ = ["DecayMacro"]


class _Field:
    """Slice one bank's element out of a packed ``ArrayLayout`` port value."""

    def __init__(self, width: int):
        self.width, self.mask = width, (1 << width) - 1

    def get(self, packed: int, bank: int) -> int:
        return (packed >> (bank * self.width)) & self.mask


class DecayMacro:
    """All banks of one segment, driven by the controller's ``{segment}__*`` ports.

    Parameters
    ----------
    dut : cocotb handle of the controller.
    segment : str
        ``std``, ``kv_mant`` or ``qo_mant``.
    banks, rows, cols, width : int
        Geometry and bits per word.
    counter : CycleCounter
        The testbench's edge counter; the macro acts at edge ``n + 1`` on what the ports show in
        cycle ``n``.
    clk_mhz : float
        Converts ages in cycles to microseconds for the retention model.
    rng : numpy.random.Generator
        Source of retention-time draws.
    decay : bool
        ``False``: cells never lose charge (a perfect memory with the same checks).
    slack : int
        The controller's refresh slack: a refresh pending at a release may still arrive within
        ``slack + 3`` cycles of it.
    """

    def __init__(self, dut, segment: str, *, banks: int, rows: int, cols: int, width: int,
                 counter, clk_mhz: float, rng: np.random.Generator, decay: bool, slack: int):
        self.segment, self.width = segment, width
        self.banks, self.rows, self.cols = banks, rows, cols
        self.counter, self.clk_mhz, self.rng, self.decay = counter, clk_mhz, rng, decay
        self.slack = slack
        self.clk = dut.clk
        self.ports = {name: getattr(dut, f"{segment}__{name}")
                      for name in ("we", "re", "refresh", "row", "col", "wdata")}
        self.rdata = getattr(dut, f"{segment}__rdata")
        self.row_field = _Field(max(1, (rows - 1).bit_length()))
        self.col_field = _Field(max(1, (cols - 1).bit_length()))
        self.data_field = _Field(width)
        shape = (banks, rows, cols)
        self.cells = np.zeros(shape, np.int64)            # what the cells hold (errors latched)
        self.truth = np.zeros(shape, np.int64)            # what was last written
        self.retention = np.full((*shape, width), np.inf)  # cycles each cell keeps its charge
        self.restored = np.zeros((banks, rows), np.int64)  # edge of the last restore
        self.parity = np.ones(shape)                       # prod(1 - 2 BER) of past intervals
        self.version = np.zeros(shape, np.int64)           # writes of each word so far
        self.held = np.zeros((banks, rows), bool)          # holds live data (written, not released)
        self.released = np.full((banks, rows), -10**9, np.int64)
        #: Longest allowed age (cycles) of a held row, or None (no bound: refresh-less).
        self.limit: int | None = None
        #: Scripted decay (module notes): ``(bank, row, col) -> mask`` of the cells the next
        #: write of that word loses; None draws retention times (``decay``) instead.
        self.script: dict | None = None
        self.refreshes = 0
        self.max_age = 0
        #: One entry per read, in order: ``(bank, row, col, version, value, truth, p_bit)``.
        self.reads: collections.deque = collections.deque()
        self._events: list[tuple] = []      # (edge, action, arguments), in request order
        self._rdata = 0
        self._bits = 1 << np.arange(width)
        self._pending: list[tuple[int, int]] = []       # reads to show after the next edge
        service = ClockService.of(self.clk)
        service.on_edge(self._on_edge)
        service.on_read(self._on_read)

    # ---- the retention model -------------------------------------------------------------------
    def _ber(self, age_cycles) -> np.ndarray:
        return golden.ber(np.asarray(age_cycles, dtype=np.float64) / self.clk_mhz)

    def _flips(self, bank: int, row: int, now: int) -> np.ndarray:
        """Bit masks of the cells of a row that have lost their charge by edge ``now``."""
        if not self.decay and self.script is None:
            return np.zeros(self.cols, np.int64)
        lost = self.retention[bank, row] <= now - self.restored[bank, row]
        return (lost * self._bits).sum(axis=1).astype(np.int64)

    def _restore(self, bank: int, row: int, now: int, what: str):
        age = now - self.restored[bank, row]
        if self.held[bank, row]:
            self.max_age = max(self.max_age, int(age))
            if self.limit is not None and age > self.limit:
                raise AssertionError(
                    f"edge {now}: {self.segment} bank {bank} row {row} holds live data aged "
                    f"{age} cycles at a {what}, beyond the segment's interval of {self.limit} "
                    f"cycles")
        self.cells[bank, row] ^= self._flips(bank, row, now)
        self.parity[bank, row] *= 1.0 - 2.0 * float(self._ber(age))
        self.restored[bank, row] = now
        if self.script is not None:       # a scripted loss happens once; the restore latched it
            self.retention[bank, row] = np.inf
        elif self.decay:
            draws = self.rng.lognormal(golden.RETENTION.mu, golden.RETENTION.sigma,
                                       (self.cols, self.width))
            self.retention[bank, row] = draws * self.clk_mhz

    # ---- called by the testbench's model -------------------------------------------------------
    def release(self, bank: int, row: int, edge: int):
        """The controller releases the row at ``edge``: at that edge, after the port's restores
        of the same edge, check its age and stop holding it. (The model learns of a release when
        the request is accepted, before it commits.)"""
        self._events.append((edge, self._release_now, (bank, row, edge)))

    def set_limit(self, limit: int | None, edge: int):
        """From ``edge`` on (a policy change), a live row may be at most ``limit`` cycles old."""
        self._events.append((edge, self._set_limit_now, (limit,)))

    def _set_limit_now(self, limit: int | None):
        self.limit = limit

    def _release_now(self, bank: int, row: int, edge: int):
        if self.held[bank, row]:
            age = edge - self.restored[bank, row]
            self.max_age = max(self.max_age, int(age))
            if self.limit is not None and age > self.limit:
                raise AssertionError(
                    f"edge {edge}: {self.segment} bank {bank} row {row} was released aged {age} "
                    f"cycles, beyond the segment's interval of {self.limit} cycles")
        self.held[bank, row] = False
        self.released[bank, row] = edge

    def check_ages(self, edge: int):
        """Check every held row's age at ``edge`` (call at the end of a test)."""
        if self.limit is None:
            return
        ages = np.where(self.held, edge - self.restored, 0)
        worst = np.unravel_index(int(np.argmax(ages)), ages.shape)
        self.max_age = max(self.max_age, int(ages[worst]))
        if ages[worst] > self.limit:
            raise AssertionError(f"edge {edge}: {self.segment} bank {worst[0]} row {worst[1]} "
                                 f"holds live data aged {ages[worst]} cycles, beyond "
                                 f"{self.limit}")

    # ---- the port ------------------------------------------------------------------------------
    def _on_edge(self):
        """Write step: the reads of the last cycle show on ``rdata``."""
        if self._pending:
            rdata = self._rdata
            for bank, value in self._pending:
                shift = bank * self.width
                rdata = (rdata & ~(self.data_field.mask << shift)) | (value << shift)
            self._rdata = rdata
            self.rdata.value = rdata
            self._pending = []

    def _on_read(self):
        """Read step: act on what the port shows in this cycle."""
        now = self.counter.cycle + 1
        self._act(now, self._pending)
        while self._events and self._events[0][0] <= now:
            _, action, args = self._events.pop(0)
            action(*args)

    def _act(self, now: int, pending: list):
        """What the port shows in this cycle, done by the macro at edge ``now``."""
        we, re, ref = (int(self.ports[n].value) for n in ("we", "re", "refresh"))
        if we | re | ref:
            if (we & re) | (we & ref) | (re & ref):
                raise AssertionError(f"cycle {self.counter.cycle}: {self.segment} bank mask "
                                     f"{(we & re) | (we & ref) | (re & ref):#x} has more than "
                                     f"one of we/re/refresh")
            rows, cols = int(self.ports["row"].value), int(self.ports["col"].value)
            wdata = int(self.ports["wdata"].value) if we else 0
            for bank in range(self.banks):
                bit = 1 << bank
                if not (we | re | ref) & bit:
                    continue
                row = self.row_field.get(rows, bank) if self.rows > 1 else 0
                if ref & bit:
                    if not self.held[bank, row] and now - self.released[bank, row] > self.slack + 3:
                        raise AssertionError(
                            f"edge {now}: {self.segment} bank {bank} row {row} refreshed while "
                            f"it holds no live data (released at edge {self.released[bank, row]})")
                    self.refreshes += 1
                    self._restore(bank, row, now, "refresh")
                    continue
                col = self.col_field.get(cols, bank)
                if we & bit:
                    self._restore(bank, row, now, "write")
                    value = self.data_field.get(wdata, bank)
                    self.cells[bank, row, col] = self.truth[bank, row, col] = value
                    self.parity[bank, row, col] = 1.0
                    self.version[bank, row, col] += 1
                    if self.script is not None:
                        lost = self.script.pop((bank, row, col), 0) & self._bits
                        self.retention[bank, row, col] = np.where(lost, 0.0, np.inf)
                    # Releases of this edge come after its writes (see release).
                    self.held[bank, row] = True
                else:
                    age = now - self.restored[bank, row]
                    value = int(self.cells[bank, row, col] ^ self._flips(bank, row, now)[col])
                    p_now = float(self._ber(age))
                    p_bit = (1.0 - self.parity[bank, row, col] * (1.0 - 2.0 * p_now)) / 2.0
                    self.reads.append((bank, row, col, int(self.version[bank, row, col]),
                                       value, int(self.truth[bank, row, col]), p_bit))
                    pending.append((bank, value))


def poisson_bounds(mean: float, sigmas: float = 5.0) -> tuple[float, float]:
    """A ``sigmas``-sigma band around a count's expected value (at least +-3 counts wide)."""
    spread = sigmas * math.sqrt(max(mean, 0.0)) + 3.0
    return max(0.0, mean - spread), mean + spread
