"""The top of a bitstream: a :class:`~hdl.board.top.BoardTop` on a board's clock and UART pins
(docs/boards.md)."""

from __future__ import annotations

from amaranth import ClockDomain, ClockSignal, Elaboratable, Module, ResetSignal
from amaranth.lib import io

from .pll import BoardClock
from .top import BoardTop
from .uart import uart_divisor

__all__ = ["PlatformTop"]


class PlatformTop(Elaboratable):
    """Put ``block`` behind :class:`BoardTop` on an Amaranth platform's pins.

    Parameters
    ----------
    block : wiring.Component
        The block, as :class:`~hdl.board.harness.Harness` takes it.
    pll : Ecp5Pll or Ice40Pll or None
        PLL settings for the block's clock (:func:`~hdl.board.pll.pll_settings`), or ``None``
        to run at the oscillator's clock.
    clock_hz : float
        The clock the design runs at: the PLL's output, or the oscillator's.
    baud : int
        The host link's bit rate; the UART divisor is ``uart_divisor(clock_hz, baud)``.
    uart : str
        The platform's UART resource (``rx`` and ``tx`` pins).
    led : str or None
        A LED resource lit during a run, or ``None``.
    stimulus_depth, capture_depth : int
        The harness's memories, items per stream.

    Requests the platform's ``default_clk`` (as a bare pad: an iCE40 PLL takes its own pin),
    its ``default_rst`` if it has one, the UART and the LED. A baud rate the clock cannot make
    within 2 % raises ``ValueError`` (from :func:`~hdl.board.uart.uart_divisor`), here, before
    anything is elaborated.
    """

    def __init__(self, block, *, pll, clock_hz: float, baud: int, uart: str = "uart",
                 led: str | None = "led", stimulus_depth: int, capture_depth: int):
        self.pll, self.clock_hz, self.uart, self.led = pll, clock_hz, uart, led
        self.top = BoardTop(block, divisor=uart_divisor(clock_hz, baud),
                            stimulus_depth=stimulus_depth, capture_depth=capture_depth)

    def elaborate(self, platform):
        m = Module()
        pad = platform.request(platform.default_clk, 0, dir="-")
        reset = None
        if platform.default_rst is not None:
            m.submodules.rst_buf = rst = io.Buffer("i", platform.request(platform.default_rst, 0,
                                                                         dir="-"))
            reset = rst.i
        m.submodules.clock = clock = BoardClock(pad, self.pll, self.clock_hz, reset)
        m.domains.sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("sync").eq(clock.clk), ResetSignal("sync").eq(clock.rst)]
        m.submodules.top = top = self.top
        # Every line of the resource bare (ULX3S's also has rts and dtr); rx and tx are used.
        lines = platform.lookup(self.uart, 0).ios
        uart = platform.request(self.uart, 0, dir={line.name: "-" for line in lines})
        m.submodules.rx_buf = rx = io.Buffer("i", uart.rx)
        m.submodules.tx_buf = tx = io.Buffer("o", uart.tx)
        m.d.comb += [top.rx.eq(rx.i), tx.o.eq(top.tx)]
        if self.led is not None:
            m.submodules.led_buf = led = io.Buffer("o", platform.request(self.led, 0, dir="-"))
            m.d.comb += led.o.eq(top.running)
        return m
