"""The board top: a block behind its harness, on a serial line (docs/board.md)."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .frame import FrameRx, FrameTx
from .harness import Harness
from .uart import UartRx, UartTx

__all__ = ["BoardTop", "CHARACTER_BITS", "TIMEOUT_CHARACTERS"]

#: Bits on the line per byte (8N1: start, eight data bits, stop).
CHARACTER_BITS = 10
#: ``FrameRx``'s wait for a frame's next byte, in character times: a host writing a frame in
#: one go never pauses that long, and the host waits far longer for an answer.
TIMEOUT_CHARACTERS = 4


class BoardTop(wiring.Component):
    """``rx`` -> UartRx -> FrameRx -> Harness(block) -> FrameTx -> UartTx -> ``tx``.

    Parameters
    ----------
    block : wiring.Component
        The block, as :class:`~hdl.board.harness.Harness` takes it.
    divisor : int
        UART clock cycles per bit, 4 to 2**24 (:func:`~hdl.board.uart.uart_divisor` converts a
        clock and a baud rate).
    stimulus_depth, capture_depth : int
        The harness's memories, 1 to 32768 items per stream.
    max_length : int
        Largest command payload ``FrameRx`` takes, 1 to 65535 bytes (its buffer is twice as
        many); the host splits longer stimulus into several ``WRITE`` frames. Default 255.

    Members
    -------
    rx : In(1)
        Serial line from the host (asynchronous: synchronized inside), idle high.
    tx : Out(1)
        Serial line to the host, from a register, idle high.
    running : Out(1)
        High during a run (for a LED).

    The UART receiver's framing errors and overruns (16-bit, saturating) and the frames that
    ``FrameRx`` dropped are in the harness's status record; a dropped frame is answered with
    its reason. ``FrameRx`` drops a frame that waits ``4 * 10 * divisor`` cycles for a byte.
    Bad parameters raise ``TypeError``/``ValueError`` from the part that takes them.
    """

    def __init__(self, block, *, divisor: int, stimulus_depth: int, capture_depth: int,
                 max_length: int = 255):
        self.harness = Harness(block, stimulus_depth=stimulus_depth, capture_depth=capture_depth)
        self.uart_rx, self.uart_tx = UartRx(divisor=divisor), UartTx(divisor=divisor)
        self.frame_rx = FrameRx(max_length=max_length,
                                timeout=TIMEOUT_CHARACTERS * CHARACTER_BITS * self.uart_rx.divisor)
        self.frame_tx = FrameTx()
        self.divisor, self.max_length = self.uart_rx.divisor, self.frame_rx.max_length
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "running": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.uart_rx, m.submodules.frame_rx = self.uart_rx, self.frame_rx
        m.submodules.harness = harness = self.harness
        m.submodules.frame_tx, m.submodules.uart_tx = self.frame_tx, self.uart_tx
        m.d.comb += [self.uart_rx.rx.eq(self.rx), self.tx.eq(self.uart_tx.tx),
                     self.running.eq(harness.running),
                     harness.rx_error.eq(self.frame_rx.error),
                     harness.rx_reason.eq(self.frame_rx.reason),
                     harness.framing_errors.eq(self.uart_rx.framing_errors),
                     harness.overruns.eq(self.uart_rx.overruns)]
        wiring.connect(m, self.uart_rx.o, self.frame_rx.i)
        wiring.connect(m, self.frame_rx.o, harness.i)
        wiring.connect(m, harness.o, self.frame_tx.i)
        wiring.connect(m, self.frame_tx.o, self.uart_tx.i)
        return m
