"""An 8N1 UART: a transmitter and a receiver with stream ports, for the board link.

No UART is among the project's dependencies, and the link needs little: one start bit, eight data
bits least significant first, one stop bit, no parity, no flow control, one fixed bit rate per
build. The bit rate is given as ``divisor``, clock cycles per bit; :func:`uart_divisor` converts a
clock frequency and a baud rate to it, in one place, and refuses a pair whose rounding error the
receiver would not tolerate.
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from ..validate import integer

__all__ = ["DATA_BITS", "MIN_DIVISOR", "MAX_DIVISOR", "uart_divisor", "UartTx", "UartRx"]

#: Data bits of a character (8N1).
DATA_BITS = 8
#: Fewest clock cycles per bit: the receiver samples half a bit after the start edge it sees,
#: and needs that half to be at least two cycles so that a one-cycle glitch is not a start.
MIN_DIVISOR = 4
#: Most clock cycles per bit: 300 baud from a 5 GHz clock; the counters are sized from the
#: divisor, so the bound only keeps a typo from building a 64-bit counter.
MAX_DIVISOR = 1 << 24
#: Largest relative bit-rate error :func:`uart_divisor` accepts. Sampling at bit centres leaves
#: half a bit of drift over the 9.5 bits to the stop bit's centre, about 5 %, to be shared by the
#: two ends; each end may take 2 %.
MAX_RATE_ERROR = 0.02


def _divisor(divisor) -> int:
    return integer(divisor, "UART divisor (divisor, clock cycles per bit)", MIN_DIVISOR,
                   MAX_DIVISOR)


def uart_divisor(clk_hz: float, baud: float) -> int:
    """Return the clock cycles per bit closest to ``clk_hz / baud``.

    Raises ``ValueError`` if that divisor is outside ``MIN_DIVISOR..MAX_DIVISOR`` or misses the
    baud rate by more than ``MAX_RATE_ERROR`` (2 %).
    """
    if not (clk_hz > 0 and baud > 0):
        raise ValueError(f"Clock frequency and baud rate must be positive, not {clk_hz!r} "
                         f"and {baud!r}")
    divisor = _divisor(max(1, round(clk_hz / baud)))
    error = abs(clk_hz / divisor - baud) / baud
    if error > MAX_RATE_ERROR:
        raise ValueError(f"Baud rate {baud} from a {clk_hz} Hz clock is off by {error:.1%} at "
                         f"divisor {divisor}; at most {MAX_RATE_ERROR:.0%} is allowed")
    return divisor


class UartTx(wiring.Component):
    """Send bytes on a serial line, 8N1.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, ``MIN_DIVISOR`` (4) to ``MAX_DIVISOR`` (2**24).

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send. ``i.ready`` is high only while the transmitter can take a byte: when it is
        idle, and in the last cycle of a stop bit (so bytes follow each other with no gap).
        ``i.ready`` depends on registers only, never on ``i.valid``.
    tx : Out(1)
        The serial line, from a register; high (idle) out of reset and between characters.

    Timing: the start bit begins the cycle after ``i`` is taken; each bit lasts exactly
    ``divisor`` cycles; a character takes ``10 * divisor`` cycles, and a stream of bytes offered
    without pause is sent at that rate. A bad ``divisor`` raises ``TypeError``/``ValueError``
    naming it and the allowed range.
    """

    def __init__(self, *, divisor: int):
        self.divisor = _divisor(divisor)
        super().__init__({"i": In(stream.Signature(DATA_BITS)), "tx": Out(1, init=1)})

    def elaborate(self, platform):
        m = Module()
        bits = DATA_BITS + 2                             # start, data, stop
        # The character least significant bit first; ones shift in behind it, so the stop bit
        # and the idle line after it are the same ones.
        shift = Signal(DATA_BITS + 1, init=(1 << (DATA_BITS + 1)) - 1)
        timer = Signal(range(self.divisor))
        left = Signal(range(bits + 1))                   # bits still to finish; 0 when idle
        bit_done = timer == 0
        m.d.comb += [self.tx.eq(shift[0]),
                     self.i.ready.eq((left == 0) | ((left == 1) & bit_done))]
        with m.If(left != 0):
            m.d.sync += timer.eq(timer - 1)
            with m.If(bit_done):
                m.d.sync += [timer.eq(self.divisor - 1), left.eq(left - 1),
                             shift.eq(Cat(shift[1:], 1))]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [shift.eq(Cat(0, self.i.payload)), left.eq(bits),
                         timer.eq(self.divisor - 1)]
        return m


class UartRx(wiring.Component):
    """Receive bytes from a serial line, 8N1, flagging framing errors and overruns.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, ``MIN_DIVISOR`` (4) to ``MAX_DIVISOR`` (2**24).
    count_bits : int
        Width of the two error counters, 1 to 32.

    Members
    -------
    rx : In(1)
        The serial line, asynchronous to the clock: it passes a two-flop synchronizer first
        (two cycles of latency). Idle high.
    o : Out(stream.Signature(8))
        Received bytes. ``o.valid`` and ``o.payload`` are registers; an item waits until taken.
        The consumer has about one character time (``10 * divisor`` cycles, a little less from
        a fast sender) to take a byte before the next one completes.
    framing : Out(1)
        One-cycle pulse: a character's stop bit was low. The byte is dropped, and the receiver
        waits for the line to go high before it looks for the next start bit (a held-low line,
        a break, gives one framing error, not one per character time).
    overrun : Out(1)
        One-cycle pulse: a character completed while ``o`` still held a byte not taken. The held
        byte stays (a stream item does not change while it waits); the new one is dropped.
    framing_errors, overruns : Out(count_bits)
        How many pulses of each kind since reset; they stop at ``2 ** count_bits - 1``.

    Timing: a start bit is a low line still low ``divisor // 2`` cycles after the falling edge
    was seen, so a low glitch shorter than half a bit is ignored. Data bits and the stop bit are
    sampled ``divisor`` cycles apart from there, at their centres; the receiver looks for the
    next start bit from the stop bit's centre on, so the sender's and receiver's bit rates may
    differ by a few per cent (see ``MAX_RATE_ERROR``). A byte is on ``o`` three cycles after
    the centre of its stop bit reached ``rx`` (synchronizer and output register). A bad
    parameter raises ``TypeError``/``ValueError`` naming it and the allowed range.
    """

    def __init__(self, *, divisor: int, count_bits: int = 16):
        self.divisor = _divisor(divisor)
        self.count_bits = integer(count_bits, "UART error counter width (count_bits)", 1, 32)
        super().__init__({"rx": In(1, init=1), "o": Out(stream.Signature(DATA_BITS)),
                          "framing": Out(1), "overrun": Out(1),
                          "framing_errors": Out(count_bits), "overruns": Out(count_bits)})

    def elaborate(self, platform):
        m = Module()
        line = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1, stages=2)
        timer = Signal(range(self.divisor))
        bit = Signal(range(DATA_BITS))
        shift = Signal(DATA_BITS)
        sample = timer == 0
        m.d.sync += timer.eq(timer - 1)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.FSM(name="receive"):
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(sample):
                    m.d.sync += [timer.eq(self.divisor - 1), bit.eq(0)]
                    with m.If(line):                     # a glitch, not a start bit
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "DATA"
            with m.State("DATA"):
                with m.If(sample):
                    m.d.sync += [timer.eq(self.divisor - 1), shift.eq(Cat(shift[1:], line)),
                                 bit.eq(bit + 1)]
                    with m.If(bit == DATA_BITS - 1):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(sample):
                    with m.If(~line):
                        m.d.comb += self.framing.eq(1)
                        m.next = "BREAK"
                    with m.Elif(self.o.valid & ~self.o.ready):
                        m.d.comb += self.overrun.eq(1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [self.o.valid.eq(1), self.o.payload.eq(shift)]
                        m.next = "IDLE"
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        for pulse, count in ((self.framing, self.framing_errors), (self.overrun, self.overruns)):
            with m.If(pulse & (count != (1 << self.count_bits) - 1)):
                m.d.sync += count.eq(count + 1)
        return m
