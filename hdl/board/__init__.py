"""Board builds: the serial link to a host (UART, frames) that the hardware-in-the-loop harness
stands on. See docs/board.md."""

from .frame import CRC, LENGTH_BITS, MAX_LENGTH, SYNC, FrameRx, FrameTx, Status, frame_layout
from .uart import UartRx, UartTx, uart_divisor

__all__ = ["CRC", "LENGTH_BITS", "MAX_LENGTH", "SYNC", "FrameRx", "FrameTx", "Status",
           "frame_layout", "UartRx", "UartTx", "uart_divisor"]
