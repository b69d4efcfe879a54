"""The KVNAND flash plane: geometry and timing, converted to cycles in one place (no hardware).

Shared by the in-flash PE (``hdl/inflash``), its golden model (``golden/inflash.py``) and the
testbench's flash-plane model. Flash busy times are given in microseconds with their datasheet
names (``tR_us``, ``tP_us``) and become cycles only in :func:`busy_cycles`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

from ..validate import integer, power_of_two

__all__ = ["MAX_FMACS", "busy_cycles", "FlashGeometry"]

#: Largest FMAC (multiply lane) count of the PE.
MAX_FMACS = 16


def _int(value, what: str, minimum: int, maximum: int) -> int:
    if hasattr(value, "__index__") and not isinstance(value, bool):
        value = int(value)
    return integer(value, what, minimum, maximum)


def _pow2(value, what: str, minimum: int, maximum: int) -> int:
    if hasattr(value, "__index__") and not isinstance(value, bool):
        value = int(value)
    power_of_two(value, what, minimum, maximum)
    return value


def busy_cycles(t_us, clk_mhz, what: str = "Busy time t_us") -> int:
    """Return the clock cycles a busy time of ``t_us`` microseconds lasts, rounded up.

    Rounding up keeps every busy time at least as long as the flash's: a controller that waited
    one cycle less than ``tR`` would read the data register before the array finished. The
    product is taken exactly on the decimal values given (``Fraction(str(value))``), so 0.07 us at
    100 MHz is 7 cycles, not the 8 that ``ceil(0.07 * 100)`` gives in floating point.

    Raises
    ------
    TypeError
        A time or clock that is not a real number.
    ValueError
        A time or clock that is not positive and finite. The message names the quantity.
    """
    for value, name, unit in ((t_us, what, "microseconds"),
                              (clk_mhz, "Clock frequency clk_mhz", "MHz")):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a positive number of {unit}, not {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number of {unit}, not {value!r}")
    return math.ceil(Fraction(str(t_us)) * Fraction(str(clk_mhz)))


@dataclass(frozen=True)
class FlashGeometry:
    """Describe one flash plane with its page buffer and GEMV PE.

    Parameters
    ----------
    page_bytes : int
        Data bytes per page (the ECC spare area is not modelled), a power of two from 16 to
        65536. Paper: 4096.
    tR_us : float
        Array read time into the data register, microseconds. Paper: 4.
    tP_us : float
        Page program time, microseconds. Paper: 75.
    transfer_bytes : int
        Bytes per cycle from the cache register into the PE (through the on-die ECC), a power of
        two from 1 to ``page_bytes``. Default 4: 1.6 GB/s at 400 MHz, near the paper's
        14.6 Gb/s BCH decoder per plane.
    clk_mhz : float
        PE clock, MHz. Paper: 400.
    fmacs : int
        FMACs (multiply lanes) ``F`` of the PE, a power of two from 1 to 16. Paper: 2 for MHA,
        16 for GQA (Table I: 16).
    pages_per_block : int
        Pages per erase block (1 to 65536); the read-disturb counters count per block.
        Paper: 768.
    blocks : int
        Blocks per plane (1 to 2**20). Paper: 177.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.
    """

    page_bytes: int = 4096
    tR_us: float = 4.0
    tP_us: float = 75.0
    transfer_bytes: int = 4
    clk_mhz: float = 400.0
    fmacs: int = 2
    pages_per_block: int = 768
    blocks: int = 177

    def __post_init__(self):
        _pow2(self.page_bytes, "Page size in bytes", 16, 1 << 16)
        busy_cycles(self.tR_us, self.clk_mhz, "Read time tR_us")
        busy_cycles(self.tP_us, self.clk_mhz, "Program time tP_us")
        _pow2(self.transfer_bytes, "Transfer width in bytes per cycle", 1, self.page_bytes)
        _pow2(self.fmacs, "FMAC count", 1, MAX_FMACS)
        _int(self.pages_per_block, "Pages per block", 1, 1 << 16)
        _int(self.blocks, "Block count", 1, 1 << 20)

    @classmethod
    def paper(cls) -> "FlashGeometry":
        """Table I of the paper: 4 KB pages, tR 4 us, tP 75 us, 16 FMACs at 400 MHz, 768 pages
        per block, 177 blocks per plane (the transfer width is not given: 4 bytes per cycle)."""
        return cls(fmacs=16)

    @property
    def tR_cycles(self) -> int:
        """``tR`` in cycles, rounded up (:func:`busy_cycles`)."""
        return busy_cycles(self.tR_us, self.clk_mhz, "Read time tR_us")

    @property
    def tP_cycles(self) -> int:
        """``tP`` in cycles, rounded up (:func:`busy_cycles`)."""
        return busy_cycles(self.tP_us, self.clk_mhz, "Program time tP_us")

    @property
    def page_transfer_cycles(self) -> int:
        """Cycles to stream a full page into the PE: ``page_bytes / transfer_bytes``."""
        return self.page_bytes // self.transfer_bytes

    @property
    def pages(self) -> int:
        """Pages of the plane: ``pages_per_block * blocks``."""
        return self.pages_per_block * self.blocks


