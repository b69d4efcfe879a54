"""UMDAM tile address generator: walks a weight matrix laid out by the paper's Algorithm 1."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer, one_of
from .geometry import AddressMapping
from .mapper import compose_fields

__all__ = ["WalkOrder", "TileAddressGenerator"]


class WalkOrder(enum.Enum, shape=1):
    """Order in which the generator emits a matrix's addresses."""

    NPU = 0     #: tiles in storage order, each column-major: sequential under the UMDAM mapping
    PIM = 1     #: bank by bank, each bank's full columns top to bottom (bank-local)


class TileAddressGenerator(wiring.Component):
    """Emit the physical address of every element of a matrix in the UMDAM tile layout.

    A command names a ``rows x cols`` matrix, the tile slot it starts at and the walk order; the
    generator then emits one address per cycle (with back-pressure) together with the element's
    matrix indices. Tiles are ``interleave_bytes / elem_bytes`` rows by ``bank_count`` columns; tile
    slot ``s`` is the DRAM ``(row, colM)`` pair ``bits(s)``; element ``(i, j)`` lies in tile slot
    ``base_tile + (j // tile_width) * num_tile_rows + i // tile_height``, at ``(colL, offset) =
    bits((i % tile_height) * elem_bytes)`` of bank ``(bankgroup, bank, rank, channel) =
    bits(j % tile_width)``; the address is those coordinates composed by ``mapping``.

    A matrix that is not a whole number of tiles is padded to whole tiles: padding slots are
    reserved and never emitted, and the counters skip them, so the rate stays one address per cycle.

    Parameters
    ----------
    mapping : AddressMapping
        Mapping used to turn coordinates into physical addresses (``umdam`` makes every tile one
        contiguous block).
    elem_bytes : int
        Element size: 1, 2 or 4 bytes.
    max_rows, max_cols : int
        Largest matrix a command may name (sets the command field widths), 1 to 2**24.

    Members
    -------
    cmd : In(stream.Signature(StructLayout({"rows", "cols", "base_tile", "order": WalkOrder})))
        One walk per command.
    o : Out(stream.Signature(StructLayout({"addr", "i", "j", "last": 1, "error": 1})))
        One beat per element; ``last`` marks the final one. A command with zero rows or columns,
        more than ``max_rows``/``max_cols``, or whose tiles run past the memory's last tile slot
        gives a single beat with ``error = 1`` and ``last = 1`` and no address.

    Latency: the first address leaves 4 cycles after the command is accepted (the command check
    takes three pipelined steps: tile counts, extent, compare); then one address per cycle while
    ``o.ready`` is high. Consecutive walks are separated by those 4 cycles.
    """

    def __init__(self, mapping: AddressMapping, *, elem_bytes: int = 2,
                 max_rows: int = 4096, max_cols: int = 4096):
        if not isinstance(mapping, AddressMapping):
            raise TypeError(f"Mapping must be an AddressMapping, not {mapping!r}")
        one_of(elem_bytes, "Element size in bytes", (1, 2, 4))
        geometry = mapping.geometry
        if elem_bytes > geometry.interleave_bytes:
            raise ValueError(f"Element size ({elem_bytes} B) must not exceed the interleave size "
                             f"({geometry.interleave_bytes} B)")
        self._mapping = mapping
        self._elem_bytes = elem_bytes
        self._max_rows = integer(max_rows, "Maximum row count (max_rows)", 1, 1 << 24)
        self._max_cols = integer(max_cols, "Maximum column count (max_cols)", 1, 1 << 24)
        widths = geometry.widths
        self._slot_bits = widths["row"] + widths["colM"]
        self.tile_height = geometry.interleave_bytes // elem_bytes
        self.tile_width = geometry.bank_count
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({
                "rows": max_rows.bit_length(),
                "cols": max_cols.bit_length(),
                "base_tile": self._slot_bits,
                "order": WalkOrder,
            }))),
            "o": Out(stream.Signature(data.StructLayout({
                "addr": geometry.address_bits,
                "i": max(1, (max_rows - 1).bit_length()),
                "j": max(1, (max_cols - 1).bit_length()),
                "last": 1,
                "error": 1,
            }))),
        })

    #: Cycles from an accepted command to its first address (Size, Extent, Check, Walk).
    command_latency = 4

    @property
    def mapping(self) -> AddressMapping:
        return self._mapping

    @property
    def elem_bytes(self) -> int:
        return self._elem_bytes

    def elaborate(self, platform):
        m = Module()
        geometry = self._mapping.geometry
        widths = geometry.widths
        th_bits = self.tile_height.bit_length() - 1
        tw_bits = self.tile_width.bit_length() - 1
        eb_bits = self._elem_bytes.bit_length() - 1
        ntr_max = -(-self._max_rows // self.tile_height)
        ntc_max = -(-self._max_cols // self.tile_width)

        cmd = Signal.like(self.cmd.payload)
        # Derived once per command (registered in Size) so that the per-address loop compares
        # counters with registers and never subtracts: "_end" values are inclusive loop limits.
        ntr = Signal(range(ntr_max + 1))            # tile rows
        ntc = Signal(range(ntc_max + 1))            # tile columns
        tr_last = Signal(range(ntr_max))            # index of the last tile row
        tc_last = Signal(range(ntc_max))            # index of the last tile column
        tc_before_last = Signal(range(ntc_max))     # tc_last - 1 (unused when one tile column)
        r_end = Signal(range(self.tile_height))     # last local row of the last tile row
        c_end = Signal(range(self.tile_width))      # last local column of the last tile column
        # Walk counters: the current element.
        lr = Signal(range(self.tile_height))
        lc = Signal(range(self.tile_width))
        tr = Signal(range(ntr_max))
        tc = Signal(range(ntc_max))
        slot = Signal(self._slot_bits)

        # Command check, one step per state so no cycle holds more than one adder or the
        # multiplier: Size derives the tile counts, Extent the last tile slot, Check compares.
        rows_m1 = cmd.rows - 1
        cols_m1 = cmd.cols - 1
        misfit = Signal()                            # empty or larger than max_rows x max_cols
        extent = Signal(self._slot_bits + 1 + (ntr_max * ntc_max).bit_length())

        # Element coordinates by Algorithm 1, composed into an address by the mapping.
        byte = Cat(Const(0, eb_bits), lr)
        coords = {
            "offset": byte[:widths["offset"]],
            "col": Cat(byte[widths["offset"]:widths["offset"] + widths["colL"]],
                       slot[:widths["colM"]]),
            "row": slot[widths["colM"]:],
        }
        bank_bits = Cat(lc, Const(0, tw_bits))       # local column: (bankgroup, bank, rank, channel)
        lsb = 0
        for name in ("channel", "rank", "bank", "bankgroup"):
            coords[name] = bank_bits[lsb:lsb + widths[name]]
            lsb += widths[name]
        m.d.comb += [
            self.o.payload.addr.eq(compose_fields(self._mapping, coords)),
            self.o.payload.i.eq(Cat(lr, tr) if th_bits else tr),
            self.o.payload.j.eq(Cat(lc, tc) if tw_bits else tc),
        ]

        # Loop limits (inclusive) of the current position.
        lr_end = Mux(tr == tr_last, r_end, self.tile_height - 1)
        tr_end = tr_last
        npu_lc_end = Mux(tc == tc_last, c_end, self.tile_width - 1)
        pim_lc_end = Mux(tc_last == 0, c_end, self.tile_width - 1)
        pim_tc_end = Mux(lc > c_end, tc_before_last, tc_last)
        row_done = lr == lr_end
        tile_done_npu = row_done & (lc == npu_lc_end)
        last_npu = tile_done_npu & (tr == tr_end) & (tc == tc_last)
        column_done_pim = row_done & (tr == tr_end)
        last_pim = column_done_pim & (tc == pim_tc_end) & (lc == pim_lc_end)
        is_npu = cmd.order == WalkOrder.NPU
        last = Mux(is_npu, last_npu, last_pim)

        with m.FSM(name="walk"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += cmd.eq(self.cmd.payload)
                    m.next = "SIZE"
            with m.State("SIZE"):
                m.d.sync += [
                    ntr.eq((rows_m1 >> th_bits) + 1), ntc.eq((cols_m1 >> tw_bits) + 1),
                    tr_last.eq(rows_m1 >> th_bits), tc_last.eq(cols_m1 >> tw_bits),
                    tc_before_last.eq((cols_m1 >> tw_bits) - 1),
                    r_end.eq(rows_m1 & (self.tile_height - 1)),
                    c_end.eq(cols_m1 & (self.tile_width - 1)),
                    misfit.eq((cmd.rows == 0) | (cmd.cols == 0) |
                              (cmd.rows > self._max_rows) | (cmd.cols > self._max_cols)),
                ]
                m.next = "EXTENT"
            with m.State("EXTENT"):
                m.d.sync += extent.eq(cmd.base_tile + ntr * ntc)
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [lr.eq(0), lc.eq(0), tr.eq(0), tc.eq(0), slot.eq(cmd.base_tile)]
                with m.If(misfit | (extent > (1 << self._slot_bits))):
                    m.next = "ERROR"
                with m.Else():
                    m.next = "WALK"
            with m.State("WALK"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.last.eq(last)]
                with m.If(self.o.ready):
                    with m.If(last):
                        m.next = "IDLE"
                    with m.If(~row_done):
                        m.d.sync += lr.eq(lr + 1)
                    with m.Elif(is_npu):
                        m.d.sync += lr.eq(0)
                        with m.If(lc != npu_lc_end):
                            m.d.sync += lc.eq(lc + 1)
                        with m.Else():
                            m.d.sync += [lc.eq(0), slot.eq(slot + 1)]
                            with m.If(tr != tr_end):
                                m.d.sync += tr.eq(tr + 1)
                            with m.Else():
                                m.d.sync += [tr.eq(0), tc.eq(tc + 1)]
                    with m.Else():
                        m.d.sync += [lr.eq(0), slot.eq(slot + 1)]
                        with m.If(tr != tr_end):
                            m.d.sync += tr.eq(tr + 1)
                        with m.Else():
                            m.d.sync += tr.eq(0)
                            with m.If(tc != pim_tc_end):
                                m.d.sync += tc.eq(tc + 1)
                            with m.Else():
                                m.d.sync += [tc.eq(0), slot.eq(cmd.base_tile), lc.eq(lc + 1)]
            with m.State("ERROR"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.error.eq(1),
                             self.o.payload.last.eq(1)]
                with m.If(self.o.ready):
                    m.next = "IDLE"
        return m
