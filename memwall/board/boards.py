"""The boards memwall builds for: one table, from amaranth-boards' platform classes
(docs/boards.md).

Each row names the amaranth-boards platform class; the device, package, oscillator and UART pins
are read from that class, so the table and the platform cannot disagree. What the class does not
say is written here: the PLL family, whether the UART pins reach the host through the board's
USB bridge, the device's resources for the fit estimate of ``memwall board list``, and a LED.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from amaranth.hdl import UnusedElaboratable

from memwall.registry import Size

__all__ = ["default_folder", "Board", "BOARDS", "board", "UnknownBoard", "LUTS_PER_CELL"]

#: LUT4s per Amaranth netlist cell, for the fit estimate: the measured ECP5 LUTs over the
#: registry's cell estimate of edram (7.1K / 1880), rdxe-dxt (20.4K / 5688) and inflash
#: (29.7K / 8849), 3.4 to 3.8 (README), rounded up.
LUTS_PER_CELL = 4


class UnknownBoard(ValueError):
    """A board name memwall does not know."""


@dataclass(frozen=True)
class Board:
    """One board.

    Parameters
    ----------
    name : str
        The CLI name (``--board``).
    title : str
        What the board is called.
    platform : str
        The amaranth-boards platform class, ``module:Class``.
    family : str
        ``ecp5`` or ``ice40``: the PLL, the synthesis target, the bitstream (``.bit``, ``.bin``).
    uart : str
        The amaranth-boards resource of the host link (number 0).
    usb_uart : bool
        Whether those pins reach the host through the board's USB bridge (FTDI), so that a USB
        cable is the whole link.
    bridge : str
        The USB bridge chip.
    luts, dsps, bram_bits : int
        The device's LUT4s, multiplier blocks (MULT18X18D, SB_MAC16) and block RAM bits (the
        UP5K's 1 Mbit SPRAM is not counted: Amaranth memories do not map to it).
    led : str or None
        A LED resource (number 0) that shows a run, if the board has a plain one.
    loader : str
        openFPGALoader's ``--board`` name for it (``memwall board run``).
    """

    name: str
    title: str
    platform: str
    family: str
    uart: str
    usb_uart: bool
    bridge: str
    luts: int
    dsps: int
    bram_bits: int
    led: str | None = "led"
    loader: str = ""

    @cached_property
    def platform_class(self) -> type:
        module, _, cls = self.platform.partition(":")
        return getattr(importlib.import_module(f"amaranth_boards.{module}"), cls)

    @property
    def device(self) -> str:
        return self.platform_class.device

    @property
    def package(self) -> str:
        return self.platform_class.package

    @property
    def clock(self) -> str:
        """The oscillator's resource (the platform's ``default_clk``)."""
        return self.platform_class.default_clk

    @cached_property
    def clock_mhz(self) -> float:
        """The oscillator's frequency, from the platform's clock resource."""
        return self.platform_class().lookup(self.clock, 0).clock.frequency / 1e6

    @property
    def bitstream_suffix(self) -> str:
        return ".bit" if self.family == "ecp5" else ".bin"

    @property
    def limits(self) -> Size:
        """The device as a :class:`~memwall.registry.Size` for the registry's size check:
        block RAM bits, multiplier blocks, and netlist cells at :data:`LUTS_PER_CELL`."""
        return Size(storage_bits=self.bram_bits, multipliers=self.dsps,
                    cells=self.luts // LUTS_PER_CELL)


_FTDI = "FTDI FT231X"
# Device resources: Lattice's ECP5 family data sheet (FPGA-DS-02012, table 1.1) and iCE40
# UltraPlus data sheet (FPGA-DS-02008, table 1.1); block RAM is 18 kbit DP16KD / 4 kbit EBR.
BOARDS = {b.name: b for b in (
    Board("ulx3s-85f", "Radiona ULX3S, LFE5U-85F", "ulx3s:ULX3S_85F_Platform", "ecp5", "uart",
          True, _FTDI, luts=83_640, dsps=156, bram_bits=208 * 18_432, loader="ulx3s"),
    Board("ulx3s-25f", "Radiona ULX3S, LFE5U-25F", "ulx3s:ULX3S_25F_Platform", "ecp5", "uart",
          True, _FTDI, luts=24_288, dsps=28, bram_bits=56 * 18_432, loader="ulx3s"),
    Board("icebreaker", "1BitSquared iCEBreaker, iCE40UP5K", "icebreaker:ICEBreakerPlatform",
          "ice40", "uart", True, "FTDI FT2232H (channel B)", luts=5_280, dsps=8,
          bram_bits=30 * 4_096, loader="icebreaker"),
    Board("ecpix5-85", "LambdaConcept ECPIX-5, LFE5UM5G-85F", "ecpix5:ECPIX585Platform", "ecp5",
          "uart", True, "FTDI FT2232H (channel B)", luts=83_640, dsps=156,
          bram_bits=208 * 18_432, led=None, loader="ecpix5"),
)}


def default_folder(board_name: str, block_name: str) -> Path:
    """Where ``memwall board build`` writes a block's bitstream and ``board.json`` unless told
    otherwise, and where ``memwall board run`` looks for them."""
    return Path("build/board") / board_name / block_name


def board(name: str) -> Board:
    """The board called ``name``; :class:`UnknownBoard` naming the boards otherwise."""
    try:
        return BOARDS[name]
    except KeyError:
        raise UnknownBoard(f"unknown board {name!r}; boards are {', '.join(BOARDS)}") from None


#: Block RAM shapes, (width, depth), per family: ECP5 DP16KD (18 kbit, 36 bits wide at most in
#: pseudo-dual-port mode), iCE40 SB_RAM40_4K (4 kbit).
RAM_SHAPES = {"ecp5": ((36, 512), (18, 1024), (9, 2048), (4, 4096), (2, 8192), (1, 16384)),
              "ice40": ((16, 256), (8, 512), (4, 1024), (2, 2048))}


def ram_blocks(family: str, width: int, depth: int) -> int:
    """Block RAMs of ``family`` one memory of ``width`` x ``depth`` takes (its best shape)."""
    return min(-(-width // w) * -(-depth // d) for w, d in RAM_SHAPES[family])


def harness_memories(block, params, depth: int) -> list[tuple[int, int]] | str:
    """``(width, depth)`` of each stimulus and capture memory :class:`Harness` gives ``block``
    at ``params`` with ``depth`` items per stream, or why the harness cannot take the block.

    The component is built to be measured, not elaborated; call under
    :func:`measuring`, which collects it under the filter of Amaranth's warning for that.
    """
    from hdl.board.harness import STAMP_BITS, Harness

    try:
        harness = Harness(block.board_component(params), stimulus_depth=depth,
                          capture_depth=depth)
    except ValueError as exc:
        return f"the harness cannot take it: {exc}"
    return ([(s.width, depth) for s in harness.sinks]
            + [(STAMP_BITS + s.width, depth) for s in harness.sources])


@contextlib.contextmanager
def measuring():
    """Ignore Amaranth's warning for components built and never elaborated, and collect them
    before leaving (as :meth:`memwall.registry.Block.validate` does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        yield
        gc.collect()


def fit(board: Board, block, params, depth: int, memories=None, *,
        memory_only: bool = False, tolerance: float = 1.0) -> list[str]:
    """Why ``block`` at ``params`` does not fit ``board``, from the registry's size estimate
    (:meth:`memwall.registry.Size.over`, the size guard's check) against :attr:`Board.limits`,
    with the harness's memories at ``depth`` items, in whole block RAMs, added to the block's
    memory bits: one phrase per resource over, empty when it fits. A block the harness cannot
    take gives its reason. ``memories``: :func:`harness_memories`' answer, if known;
    ``memory_only``: check the memory bits alone (the one exact figure of the estimate);
    ``tolerance``: the multiplier and cell limits that many times the device's (the estimate's
    own, :data:`~memwall.registry.SIZE_TOLERANCE`: what a placement may still find fits).
    """
    if memories is None:
        with measuring():
            memories = harness_memories(block, params, depth)
    if isinstance(memories, str):
        return [memories]
    width, rows = RAM_SHAPES[board.family][0]
    harness_bits = sum(ram_blocks(board.family, w, d) for w, d in memories) * width * rows
    size = block.size(params)
    size = Size(storage_bits=size.storage_bits + harness_bits, multipliers=size.multipliers,
                cells=size.cells)
    limits = board.limits
    if memory_only:
        limits = Size(storage_bits=limits.storage_bits, multipliers=sys.maxsize,
                      cells=sys.maxsize)
    elif tolerance != 1.0:
        limits = Size(storage_bits=limits.storage_bits,
                      multipliers=int(limits.multipliers * tolerance),
                      cells=int(limits.cells * tolerance))
    return size.over(limits)
