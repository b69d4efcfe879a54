"""PLL divider settings for the Lattice families the boards carry, and the clock domain of a
board build (docs/boards.md).

The settings are worked out here from the requested frequency with the datasheets' formulas,
so that a build states the clock it will run at before any tool runs:

ECP5 ``EHXPLLL`` (Lattice FPGA-TN-02200, ECP5 sysCLOCK PLL/DLL Design and Usage Guide), output
``CLKOP`` fed back to ``CLKFB``::

    f_PFD = f_IN / CLKI_DIV            3.125 to 400 MHz
    f_OUT = f_PFD * CLKFB_DIV          3.125 to 400 MHz
    f_VCO = f_OUT * CLKOP_DIV          400 to 800 MHz
    CLKI_DIV, CLKOP_DIV 1 to 128; CLKFB_DIV 1 to 80

iCE40 ``SB_PLL40`` (Lattice TN1251, iCE40 sysCLOCK PLL Design and Usage Guide), ``SIMPLE``
feedback::

    f_PFD = f_IN / (DIVR + 1)          10 to 133 MHz
    f_VCO = f_PFD * (DIVF + 1)         533 to 1066 MHz
    f_OUT = f_VCO / 2**DIVQ            16 to 275 MHz
    DIVR 0 to 15, DIVF 0 to 127, DIVQ 1 to 6; FILTER_RANGE from f_PFD

Among the settings that give the same output, the one whose VCO is nearest the middle of its
range is taken (what Project Trellis' ``ecppll`` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import ClockDomain, ClockSignal, Const, Elaboratable, Instance, Module, Signal
from amaranth.lib import io
from amaranth.lib.cdc import FFSynchronizer

__all__ = ["PllUnreachable", "Ecp5Pll", "Ice40Pll", "pll_settings", "FAMILIES",
           "RATE_TOLERANCE", "BoardClock"]

#: How far a requested clock may be from the one a PLL makes (relative): beyond it the request
#: is refused rather than silently moved.
RATE_TOLERANCE = 0.01


class PllUnreachable(ValueError):
    """No divider settings give the requested clock from the board's oscillator."""


@dataclass(frozen=True)
class Ecp5Pll:
    """``EHXPLLL`` settings: ``f_out = f_in * clkfb_div / clki_div``; ``CLKOP`` is fed back."""

    f_in_mhz: float
    clki_div: int
    clkfb_div: int
    clkop_div: int

    @property
    def f_pfd_mhz(self) -> float:
        return self.f_in_mhz / self.clki_div

    @property
    def f_out_mhz(self) -> float:
        return self.f_pfd_mhz * self.clkfb_div

    @property
    def f_vco_mhz(self) -> float:
        return self.f_out_mhz * self.clkop_div

    def instance(self, clk_in, clk_out, lock) -> Instance:
        """The ``EHXPLLL`` primitive, as Trellis' ``ecppll`` writes it (the output's coarse
        phase half a period, ``CLKOP_DIV / 2 - 1``, as Lattice's tools set it)."""
        return Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{self.f_in_mhz:g}", a_FREQUENCY_PIN_CLKOP=f"{self.f_out_mhz:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=self.clki_div, p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=self.clkop_div,
            p_CLKOP_CPHASE=max(0, self.clkop_div // 2 - 1), p_CLKOP_FPHASE=0,
            p_FEEDBK_PATH="CLKOP", p_CLKFB_DIV=self.clkfb_div,
            i_RST=0, i_STDBY=0, i_CLKI=clk_in, o_CLKOP=clk_out, i_CLKFB=clk_out,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=lock)


#: iCE40 loop filter setting by the PFD frequency's upper bound in MHz (TN1251; ``icepll``).
_ICE40_FILTER = ((17, 1), (26, 2), (44, 3), (66, 4), (101, 5))


@dataclass(frozen=True)
class Ice40Pll:
    """``SB_PLL40_PAD`` settings, ``SIMPLE`` feedback: ``f_out = f_in * (divf + 1) / (divr + 1)
    / 2**divq``."""

    f_in_mhz: float
    divr: int
    divf: int
    divq: int

    @property
    def f_pfd_mhz(self) -> float:
        return self.f_in_mhz / (self.divr + 1)

    @property
    def f_vco_mhz(self) -> float:
        return self.f_pfd_mhz * (self.divf + 1)

    @property
    def f_out_mhz(self) -> float:
        return self.f_vco_mhz / 2 ** self.divq

    @property
    def filter_range(self) -> int:
        return next((code for limit, code in _ICE40_FILTER if self.f_pfd_mhz < limit), 6)

    def instance(self, pad, clk_out, lock) -> Instance:
        """The ``SB_PLL40_PAD`` primitive on the oscillator's pad (the PLL's own input pin)."""
        return Instance(
            "SB_PLL40_PAD", p_FEEDBACK_PATH="SIMPLE", p_DIVR=Const(self.divr, 4),
            p_DIVF=Const(self.divf, 7), p_DIVQ=Const(self.divq, 3),
            p_FILTER_RANGE=Const(self.filter_range, 3),
            i_PACKAGEPIN=pad, i_RESETB=1, i_BYPASS=0, o_PLLOUTGLOBAL=clk_out, o_LOCK=lock)


def _ecp5_candidates(f_in: float):
    for clki in range(1, 129):
        pfd = f_in / clki
        if not 3.125 <= pfd <= 400:
            continue
        for clkfb in range(1, 81):
            out = pfd * clkfb
            if not 3.125 <= out <= 400:
                continue
            for clkop in range(1, 129):
                if 400 <= out * clkop <= 800:
                    yield Ecp5Pll(f_in, clki, clkfb, clkop)


def _ice40_candidates(f_in: float):
    if not 10 <= f_in <= 133:
        return
    for divr in range(16):
        pfd = f_in / (divr + 1)
        if not 10 <= pfd <= 133:
            continue
        for divf in range(128):
            if not 533 <= pfd * (divf + 1) <= 1066:
                continue
            for divq in range(1, 7):
                setting = Ice40Pll(f_in, divr, divf, divq)
                if 16 <= setting.f_out_mhz <= 275:
                    yield setting


#: Per family: the settings search, the output range in MHz and the VCO range's middle.
FAMILIES = {"ecp5": (_ecp5_candidates, (3.125, 400.0), 600.0),
            "ice40": (_ice40_candidates, (16.0, 275.0), 799.5)}


def pll_settings(family: str, f_in_mhz: float, f_out_mhz: float, *, at_most: bool = False):
    """Return the PLL settings of ``family`` (``"ecp5"``, ``"ice40"``) nearest ``f_out_mhz``
    from an ``f_in_mhz`` oscillator.

    ``at_most=True`` gives the highest output at or below ``f_out_mhz`` (a clock the design is
    known to meet); otherwise the nearest, which must be within :data:`RATE_TOLERANCE`.

    Raises
    ------
    PllUnreachable
        If no settings give such a clock; the message names the family's output range.
    """
    if family not in FAMILIES:
        raise ValueError(f"PLL family must be one of {', '.join(FAMILIES)}, not {family!r}")
    search, (low, high), middle = FAMILIES[family]
    settings = [s for s in search(f_in_mhz) if not at_most or s.f_out_mhz <= f_out_mhz * 1.000001]
    if settings:
        def score(s):
            miss = -s.f_out_mhz if at_most else abs(s.f_out_mhz - f_out_mhz)
            return (round(miss, 9), abs(s.f_vco_mhz - middle))
        best = min(settings, key=score)
        if at_most or abs(best.f_out_mhz - f_out_mhz) <= RATE_TOLERANCE * f_out_mhz:
            return best
        below = [s.f_out_mhz for s in settings if s.f_out_mhz < f_out_mhz]
        above = [s.f_out_mhz for s in settings if s.f_out_mhz > f_out_mhz]
        nearest = " and ".join(f"{f:.6g}" for f in (max(below, default=None),
                                                    min(above, default=None)) if f is not None)
        raise PllUnreachable(f"clock {f_out_mhz:g} MHz is unreachable with the {family} PLL "
                             f"from a {f_in_mhz:g} MHz oscillator within {RATE_TOLERANCE:.0%}; "
                             f"the nearest it makes are {nearest} MHz")
    raise PllUnreachable(f"clock {f_out_mhz:g} MHz is unreachable with the {family} PLL from a "
                         f"{f_in_mhz:g} MHz oscillator: its output is {low:g} to {high:g} MHz")


class BoardClock(Elaboratable):
    """Make a board build's clock and reset from the board's oscillator pad.

    Parameters
    ----------
    pad : io.PortLike
        The oscillator's pin, requested with ``dir="-"``.
    pll : Ecp5Pll or Ice40Pll or None
        The PLL settings, or ``None`` to run from the oscillator itself.
    f_out_hz : float
        The clock's frequency (for the power-on delay).
    reset : Value or None
        A board reset (button), synchronized here; ``None`` when the board has none.

    Members
    -------
    clk : Signal
        The clock, for the parent's ``sync`` domain. Its timing constraint needs no line of its
        own: nextpnr derives it from the oscillator's and the PLL's settings.
    rst : Signal
        High until the PLL has locked and for 15 microseconds more, and while ``reset`` is;
        synchronous to ``clk``. iCE40 block RAM reads zeros for about 3 us after configuration
        (Amaranth's own iCE40 clock domain waits the same time).
    """

    #: Seconds ``rst`` stays high after the clock is there.
    POWER_ON_DELAY_S = 15e-6

    def __init__(self, pad, pll, f_out_hz: float, reset=None):
        self.pad, self.pll, self.f_out_hz, self.reset = pad, pll, f_out_hz, reset
        self.clk, self.rst = Signal(), Signal(init=1)

    def elaborate(self, platform):
        m = Module()
        clk, lock = self.clk, Signal(init=1)
        if isinstance(self.pll, Ice40Pll):
            m.submodules.pll = self.pll.instance(self.pad.io, clk, lock)
        else:
            m.submodules.clk_buf = buffer = io.Buffer("i", self.pad)
            if self.pll is None:
                m.d.comb += clk.eq(buffer.i)
            else:
                m.submodules.pll = self.pll.instance(buffer.i, clk, lock)
        m.domains.por = ClockDomain("por", reset_less=True, local=True)
        m.d.comb += ClockSignal("por").eq(clk)
        locked, held = Signal(), Signal()
        m.submodules.lock_sync = FFSynchronizer(lock, locked, o_domain="por")
        m.submodules.reset_sync = FFSynchronizer(Const(0) if self.reset is None else self.reset,
                                                 held, o_domain="por", init=1)
        delay = max(1, int(self.POWER_ON_DELAY_S * self.f_out_hz))
        timer = Signal(range(delay + 1))
        with m.If(~locked | held):
            m.d.por += [timer.eq(0), self.rst.eq(1)]
        with m.Elif(timer == delay):
            m.d.por += self.rst.eq(0)
        with m.Else():
            m.d.por += timer.eq(timer + 1)
        return m
