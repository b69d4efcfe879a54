"""The register stage in front of one segment's eDRAM macros."""

from __future__ import annotations

from amaranth import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer, power_of_two
from .ports import BankPortSignature

__all__ = ["BankPortDriver"]


class BankPortDriver(wiring.Component):
    """Drive one segment's macro port from registers: the committed access and the refreshes.

    Parameters
    ----------
    banks, rows, cols, width : int
        The segment's geometry and bits per word.

    Members
    -------
    access : In(banks)
        Banks the committing request accesses (one at most).
    write : In(1)
        The access is a write (else a read).
    row, col : In(row_bits), In(col_bits)
        Where the access goes.
    wdata : In(width)
        What a write stores.
    issue : In(banks)
        Banks to refresh this cycle; never a bank in ``access``.
    refresh_row : In(row_bits)
        The row they refresh.
    port : Out(BankPortSignature(banks, rows, cols, width))
        The macro port (every output a register): what this cycle's inputs ask for appears there
        in the next cycle, when the macros act on it.

    Latency one cycle.
    """

    def __init__(self, *, banks: int, rows: int, cols: int, width: int):
        power_of_two(banks, "Bank count (banks)", 1, 256)
        row_bits = power_of_two(rows, "Rows per bank (rows)", 2, 65536)
        col_bits = power_of_two(cols, "Words per row (cols)", 2, 4096)
        integer(width, "Bits per word (width)", 1, 16)
        self.banks = banks
        super().__init__({
            "access": In(banks),
            "write": In(1),
            "row": In(row_bits),
            "col": In(col_bits),
            "wdata": In(width),
            "issue": In(banks),
            "refresh_row": In(row_bits),
            "port": Out(BankPortSignature(banks, rows, cols, width)),
        })

    def elaborate(self, platform):
        m = Module()
        port = self.port
        m.d.sync += [port.we.eq(Mux(self.write, self.access, 0)),
                     port.re.eq(Mux(self.write, 0, self.access)),
                     port.refresh.eq(self.issue)]
        for b in range(self.banks):
            with m.If(self.access[b]):
                m.d.sync += [port.row[b].eq(self.row), port.col[b].eq(self.col),
                             port.wdata[b].eq(self.wdata)]
            with m.Elif(self.issue[b]):
                m.d.sync += port.row[b].eq(self.refresh_row)
        return m
