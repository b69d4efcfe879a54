"""Synthesizable stand-in for the eDRAM macros, and a controller with its three segments attached."""

from __future__ import annotations

from amaranth import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from .controller import EdramController
from .ports import BankPortSignature
from .spec import SEGMENT_BITS, SEGMENTS

__all__ = ["EdramMacro", "EdramSystem"]


class EdramMacro(wiring.Component):
    """One segment's banks as Amaranth memories (block RAM on an FPGA): the bank port, no decay.

    A stand-in for the hard eDRAM macros, for FPGA builds and for data-path tests: it keeps every
    bit forever, so ``refresh`` has nothing to do and is accepted and ignored.

    Parameters
    ----------
    banks, rows, cols : int
        Geometry, as the controller's.
    width : int
        Bits per word.

    Members
    -------
    port : In(BankPortSignature(banks, rows, cols, width))
        The controller's segment port (see :class:`~hdl.edram.ports.BankPortSignature`); a read
        issued in cycle ``t`` returns its word on ``rdata`` in cycle ``t + 1``.
    """

    def __init__(self, banks: int, rows: int, cols: int, width: int):
        self._geometry = (banks, rows, cols, width)
        super().__init__({"port": In(BankPortSignature(banks, rows, cols, width))})

    def elaborate(self, platform):
        m = Module()
        banks, rows, cols, width = self._geometry
        port = self.port
        for b in range(banks):
            memory = Memory(shape=width, depth=rows * cols, init=[])
            m.submodules[f"bank{b}"] = memory
            write, read = memory.write_port(), memory.read_port()
            address = Cat(port.col[b], port.row[b])
            m.d.comb += [write.addr.eq(address), write.data.eq(port.wdata[b]),
                         write.en.eq(port.we[b]),
                         read.addr.eq(address), read.en.eq(port.re[b]),
                         port.rdata[b].eq(read.data)]
        return m


class EdramSystem(wiring.Component):
    """The SHIELD controller with a stand-in macro on each of its three segment ports.

    Takes the controller's keyword arguments. Members are the controller's ``req``, ``resp`` and
    ``status``; the bank ports are internal. Everything else (latency, throughput, refusals) is
    the controller's.
    """

    def __init__(self, **controller_args):
        self.controller = EdramController(**controller_args)
        c = self.controller
        super().__init__({
            "req": c.signature.members["req"],
            "resp": c.signature.members["resp"],
            "status": c.signature.members["status"],
        })

    def elaborate(self, platform):
        m = Module()
        c = self.controller
        m.submodules.controller = c
        for segment in SEGMENTS:
            macro = EdramMacro(c.banks, c.rows, c.cols, SEGMENT_BITS[segment])
            m.submodules[f"{segment}_macro"] = macro
            wiring.connect(m, getattr(c, segment), macro.port)
        wiring.connect(m, wiring.flipped(self.req), c.req)
        wiring.connect(m, c.resp, wiring.flipped(self.resp))
        m.d.comb += self.status.eq(c.status)
        return m
