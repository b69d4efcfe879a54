"""cocotb testbench of the board top: ``memwall board run``'s host program over a simulated
serial line (:func:`cocotb_tests.launcher.run_board` builds and starts it).

The host program (:func:`memwall.board.run.check` on a :class:`~memwall.board.host.HarnessHost`)
is the one that runs against a real board; only its transport differs. It runs in a thread
(``cocotb.task.bridge``); its ``send`` hands bytes to a cocotbext-uart ``UartSource`` on the
``rx`` pin and its ``receive`` waits in simulated time for what a ``UartSink`` on ``tx``
decoded (``cocotb.task.resume``). So every byte crosses the UART, the frame layer, the harness
and the block and back, bit by bit. The report (:class:`memwall.board.run.Report`) is written
where the launcher asks; the caller judges it.
"""

from __future__ import annotations

import json
import os
import warnings

import cocotb
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles
from cocotbext.uart import UartSink, UartSource

from hdl.board import Harness
from memwall import registry
from memwall.board.host import HarnessHost
from memwall.board.run import HarnessSettings, check, cycle_limit
from memwall.board.vectors import vectors

from .launcher import ENV_BOARD
from .tb import ENV_BLOCK, block_params

#: Characters a ``receive`` waits for the first byte before it returns empty.
WAIT_CHARACTERS = 64
#: Cycles the design is held in reset.
RESET_CYCLES = 4


class SimulatedLine:
    """The host's serial port on the board top's pins, for a host program in a bridge thread."""

    def __init__(self, dut, baud: int, wait_ns: int):
        self.source = UartSource(dut.rx, baud=baud)
        self.sink = UartSink(dut.tx, baud=baud)
        self.wait_ns = wait_ns
        self.send = resume(self._send)
        self.receive = resume(self._receive)

    async def _send(self, data: bytes) -> None:
        await self.source.write(data)

    async def _receive(self) -> bytes:
        await self.sink.wait(timeout=self.wait_ns, timeout_unit="ns")
        return bytes(self.sink.read_nowait())


@cocotb.test()
async def board_run(dut):
    """The host program against the board top: load, run, read back, compare, measure."""
    run = json.loads(os.environ[ENV_BOARD])
    settings = HarnessSettings(**run["settings"])
    entry, params = registry.get(os.environ[ENV_BLOCK]), block_params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        block = entry.board_component(params)
        harness = Harness(block, stimulus_depth=settings.stimulus_depth,
                          capture_depth=settings.capture_depth)
    v = vectors(entry, params, run["count"], run["seed"], block)
    cocotb.start_soon(Clock(dut.clk, run["clock_ns"], unit="ns").start())
    line = SimulatedLine(dut, settings.baud, round(WAIT_CHARACTERS * 10 * 1e9 / settings.baud))
    dut.rst.value = 1
    await ClockCycles(dut.clk, RESET_CYCLES)
    dut.rst.value = 0
    await ClockCycles(dut.clk, RESET_CYCLES)
    limit = cycle_limit(v)
    # Patience: the longest wait is a run at its limit, in receive() calls.
    patience = 10 + limit * run["clock_ns"] // line.wait_ns
    host = HarnessHost(harness, line.send, line.receive, max_payload=settings.max_length,
                       patience=patience)
    report = await bridge(check)(host, v, name=entry.name, limit=limit)
    with open(run["report"], "w") as handle:
        handle.write(report.to_json())
    dut._log.info("\n".join(report.lines()))
