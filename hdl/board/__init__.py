"""Board builds: the serial link to a host (UART, frames), the block harness that drives a block
from block RAM under the host's commands, and the board top that puts them together. See
docs/board.md."""

from .frame import CRC, LENGTH_BITS, MAX_LENGTH, SYNC, FrameRx, FrameTx, Status, frame_layout
from .harness import Command, Harness, Slot
from .top import BoardTop
from .uart import UartRx, UartTx, uart_divisor

__all__ = ["CRC", "LENGTH_BITS", "MAX_LENGTH", "SYNC", "FrameRx", "FrameTx", "Status",
           "frame_layout", "Command", "Harness", "Slot", "BoardTop", "UartRx", "UartTx",
           "uart_divisor"]
