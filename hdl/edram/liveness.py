"""The SHIELD controller's liveness table: which rows hold live data, and of which class."""

from __future__ import annotations

import math

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer, power_of_two

__all__ = ["PROBE_LATENCY", "LivenessTable", "update_layout"]

#: Cycles from a probe's row to its answer.
PROBE_LATENCY = 2

#: Rows per group of the registered "any row live" summary (two LUT4 levels on an FPGA).
_GROUP = 16


def update_layout(rows_total: int) -> data.StructLayout:
    """One committed request's effect on the table, as row masks (decoded a stage before)."""
    return data.StructLayout({
        "write": 1,          # the write takes effect: the row in ``hot`` becomes live, class qo
        "hot": rows_total,   # the write's row (one-hot)
        "ends": rows_total,  # the rows a release ends, those of them live with class ``qo``
        "qo": 1,
    })


class LivenessTable(wiring.Component):
    """Keep one liveness bit and one class bit (1 = QO) per global row of a segment.

    Parameters
    ----------
    g_bits : int
        Width of a global row number; the table has ``2 ** g_bits`` rows.
    banks : int
        Banks per segment: a *view* shows row ``r`` of every bank, global rows
        ``r * banks .. r * banks + banks - 1``.
    views : int
        How many views (one per refresh sweep).

    Members
    -------
    update : In(update_layout(rows))
        The effect of the request committing this cycle; it takes effect at the end of the cycle.
        A write (``write``, ``hot``) or a release (``ends``), never both.
    live, qo : Out(rows)
        The table (registers): row ``g`` is bit ``g``.
    released : Out(rows)
        Rows whose life ends at the end of this cycle (combinational from ``update``).
    any_live : Out(1)
        Some row is live this cycle (an OR of registered group summaries, exact every cycle).
    probe_row : In(g_bits)
        A row to look up.
    probe_live, probe_qo : Out(1)
        Registers: ``live`` and ``qo`` of the row given two cycles before, as they were then
        (``PROBE_LATENCY``). The lookup is a two-level selection with a register between the
        levels: the low half of the row picks one row of each group, the high half the group.
    view_row : In(data.ArrayLayout(row_bits, views))
        Per view, a row within the banks.
    view_live, view_qo : Out(data.ArrayLayout(banks, views))
        Registers: per view and bank, the liveness and class that the row given in the cycle
        before had then (a selection from the table's registers, nothing else on the path).

    A write sets its row's class whether or not the row was live (the request pipeline refuses
    a write into a row live with the other class before it reaches the table).
    """

    def __init__(self, *, g_bits: int, banks: int, views: int):
        integer(g_bits, "Global row bits (g_bits)", 1, 14)
        power_of_two(banks, "Bank count (banks)", 1, 1 << (g_bits - 1))
        integer(views, "View count (views)", 1, 8)
        self.g_bits, self.banks, self.views = g_bits, banks, views
        self.rows = 1 << g_bits
        row_bits = max(1, g_bits - (banks - 1).bit_length())
        super().__init__({
            "update": In(update_layout(self.rows)),
            "live": Out(self.rows),
            "qo": Out(self.rows),
            "released": Out(self.rows),
            "any_live": Out(1),
            "probe_row": In(g_bits),
            "probe_live": Out(1),
            "probe_qo": Out(1),
            "view_row": In(data.ArrayLayout(row_bits, views)),
            "view_live": Out(data.ArrayLayout(banks, views)),
            "view_qo": Out(data.ArrayLayout(banks, views)),
        })

    def elaborate(self, platform):
        m = Module()
        u, rows = self.update, self.rows
        live, qo = self.live, self.qo
        class_match = Signal(rows)
        hot = Signal(rows)
        live_next = Signal(rows)
        m.d.comb += [
            class_match.eq(Mux(u.qo, qo, ~qo)),
            self.released.eq(live & class_match & u.ends),
            hot.eq(Mux(u.write, u.hot, 0)),
            live_next.eq((live & ~self.released) | hot),
        ]
        m.d.sync += [live.eq(live_next), qo.eq((qo & ~hot) | Mux(u.qo, hot, 0))]
        self._probe(m)
        groups = Signal(math.ceil(rows / _GROUP))
        m.d.sync += groups.eq(Cat(live_next[k:k + _GROUP].any() for k in range(0, rows, _GROUP)))
        m.d.comb += self.any_live.eq(groups.any())
        self._views(m)
        return m

    def _probe(self, m: Module):
        """The two-level lookup: ``PROBE_LATENCY`` cycles, the state of the cycle it starts."""
        low = self.g_bits // 2
        lo, hi = self.probe_row[:low], self.probe_row[low:]
        groups = self.rows >> low
        hi_q = Signal(self.g_bits - low, name="probe_group")
        picks = {name: Signal(groups, name=f"probe_{name}_picks") for name in ("live", "qo")}
        m.d.sync += hi_q.eq(hi)
        for name, state, out in (("live", self.live, self.probe_live),
                                 ("qo", self.qo, self.probe_qo)):
            m.d.sync += [picks[name].eq(Cat(state.word_select(h, 1 << low).bit_select(lo, 1)
                                            for h in range(groups))),
                         out.eq(picks[name].bit_select(hi_q, 1))]

    def _views(self, m: Module):
        """Each view: the row's banks selected from the registers, registered."""
        for k in range(self.views):
            row = self.view_row[k]
            m.d.sync += [self.view_live[k].eq(self.live.word_select(row, self.banks)),
                         self.view_qo[k].eq(self.qo.word_select(row, self.banks))]
