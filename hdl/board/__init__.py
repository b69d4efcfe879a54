"""Board builds: the serial link to a host (UART, frames), the block harness that drives a block
from block RAM under the host's commands, the board top that puts them together, and its
clock and pins on a board (PLL, PlatformTop). See docs/board.md and docs/boards.md."""

from .frame import CRC, LENGTH_BITS, MAX_LENGTH, SYNC, FrameRx, FrameTx, Status, frame_layout
from .harness import Command, Harness, Slot
from .platform import PlatformTop
from .pll import BoardClock, Ecp5Pll, Ice40Pll, PllUnreachable, pll_settings
from .top import BoardTop
from .uart import UartRx, UartTx, uart_divisor

__all__ = ["CRC", "LENGTH_BITS", "MAX_LENGTH", "SYNC", "FrameRx", "FrameTx", "Status",
           "frame_layout", "Command", "Harness", "Slot", "BoardTop", "UartRx", "UartTx",
           "uart_divisor", "PlatformTop", "BoardClock", "Ecp5Pll", "Ice40Pll", "PllUnreachable",
           "pll_settings"]
