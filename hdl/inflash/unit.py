"""One plane's logic: the PE and the KV page writer on one flash port."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .pe import InflashPE
from .spec import (FlashGeometry, command_layout, flash_command_layout, kv_open_layout,
                   kv_record_layout, kv_status_layout, kv_word_layout, page_data_layout,
                   x_layout, y_layout)
from .writer import KVWriter

__all__ = ["InflashUnit"]


class InflashUnit(wiring.Component):
    """Wire the in-flash PE and the KV page writer to one plane's command port.

    The PE (:class:`~hdl.inflash.pe.InflashPE`) computes GEMVs, Logit and Attend on the
    plane's pages; the writer (:class:`~hdl.inflash.writer.KVWriter`) fills KV pages and
    programs them. A plane takes one command at a time, so their reads and programs share
    ``fl_cmd``: when both offer one, they take turns (round robin, so that neither starves),
    and an offer the plane has not taken yet keeps its place (the payload does not change
    under ``valid``). Read data go to the PE, program data come from the writer.

    The plane serves its commands in the order it takes them, so a Logit or Attend command
    sent after a sequence's ``kv_status`` reads the pages the sequence programmed. Reads of
    tokens still in the writer's buffer are not served from it: attention covers the tokens
    in flash.

    Parameters
    ----------
    geometry : FlashGeometry
    max_rows, max_cols, group_size, max_query_heads : int
        The PE's (:class:`~hdl.inflash.spec.PEConfig`).
    kv_slots : int
        Pages of the writer's KV buffer (:class:`~hdl.inflash.spec.WriterConfig`).

    Members
    -------
    cmd, x, y
        The PE's command, vector and result streams.
    kv_cmd, kv, kv_table, kv_status
        The writer's ``cmd``, ``kv``, ``table`` and ``status``.
    fl_cmd : Out(stream.Signature(flash_command_layout(cfg)))
        Reads (``program`` 0: the PE's ``rd_cmd``) and programs (``program`` 1, ``page``;
        the writer's ``pg_cmd``).
    rd_data : In(stream.Signature(page_data_layout(cfg)))
        Read data, to the PE.
    pg_data : Out(stream.Signature(page_data_layout(cfg)))
        Program data, ``page_bytes / W`` words after each program command.
    """

    def __init__(self, *, geometry: FlashGeometry, max_rows: int, max_cols: int,
                 group_size: int = 128, max_query_heads: int = 8, kv_slots: int = 2):
        self.pe = InflashPE(geometry=geometry, max_rows=max_rows, max_cols=max_cols,
                            group_size=group_size, max_query_heads=max_query_heads)
        self.writer = KVWriter(geometry=geometry, slots=kv_slots)
        cfg, wcfg = self.pe.cfg, self.writer.cfg
        self.cfg = cfg
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "x": In(stream.Signature(x_layout(cfg))),
            "y": Out(stream.Signature(y_layout(cfg))),
            "kv_cmd": In(stream.Signature(kv_open_layout(wcfg))),
            "kv": In(stream.Signature(kv_word_layout(wcfg))),
            "kv_table": Out(stream.Signature(kv_record_layout(wcfg))),
            "kv_status": Out(stream.Signature(kv_status_layout(wcfg))),
            "fl_cmd": Out(stream.Signature(flash_command_layout(cfg))),
            "rd_data": In(stream.Signature(page_data_layout(cfg))),
            "pg_data": Out(stream.Signature(page_data_layout(cfg))),
        })

    def pe_latency(self, *args, **kwargs) -> int:
        """The PE's :meth:`~hdl.inflash.pe.InflashPE.pe_latency` (the port adds no cycle)."""
        return self.pe.pe_latency(*args, **kwargs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.pe = pe = self.pe
        m.submodules.writer = writer = self.writer
        wiring.connect(m, wiring.flipped(self.cmd), pe.cmd)
        wiring.connect(m, wiring.flipped(self.x), pe.x)
        wiring.connect(m, pe.y, wiring.flipped(self.y))
        wiring.connect(m, wiring.flipped(self.rd_data), pe.rd_data)
        wiring.connect(m, wiring.flipped(self.kv_cmd), writer.cmd)
        wiring.connect(m, wiring.flipped(self.kv), writer.kv)
        wiring.connect(m, writer.table, wiring.flipped(self.kv_table))
        wiring.connect(m, writer.status, wiring.flipped(self.kv_status))
        wiring.connect(m, writer.pg_data, wiring.flipped(self.pg_data))

        # ---- the shared command port: round robin, an offer keeps its place until taken -----
        read, program, out = pe.rd_cmd, writer.pg_cmd, self.fl_cmd
        held = Signal()                             # an offer is waiting for the plane
        held_program = Signal()
        last_program = Signal()                     # the last command taken was a program
        both = read.valid & program.valid
        choose_program = Mux(held, held_program, Mux(both, ~last_program, program.valid))
        m.d.comb += [out.valid.eq(read.valid | program.valid),
                     out.payload.program.eq(choose_program),
                     read.ready.eq(out.ready & ~choose_program),
                     program.ready.eq(out.ready & choose_program)]
        with m.If(choose_program):
            m.d.comb += out.payload.page.eq(program.payload.page)
        with m.Else():
            m.d.comb += [out.payload.page.eq(read.payload.page),
                         out.payload.column.eq(read.payload.column),
                         out.payload.bytes.eq(read.payload.bytes),
                         out.payload.run.eq(read.payload.run),
                         out.payload.stride.eq(read.payload.stride)]
        with m.If(out.valid & out.ready):
            m.d.sync += [held.eq(0), last_program.eq(choose_program)]
        with m.Elif(out.valid):
            m.d.sync += [held.eq(1), held_program.eq(choose_program)]
        return m
