"""A serial divider for the commands' page arithmetic (entries per page, the page walk)."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal

__all__ = ["SerialDivider"]


class SerialDivider:
    """Divide unsigned integers, one quotient bit per cycle (restoring division).

    Pulse ``start`` with ``dividend`` and ``divisor``; ``busy`` rises in the next cycle and
    falls ``width`` cycles later, when ``quotient`` and ``remainder`` hold the result. A zero
    divisor gives an all-ones quotient (the callers refuse such commands; the value is unused).
    """

    def __init__(self, m: Module, width: int, name: str):
        self.start = Signal(name=f"{name}_start")
        self.dividend = Signal(width, name=f"{name}_dividend")
        self.divisor = Signal(width, name=f"{name}_divisor")
        self.quotient = Signal(width, name=f"{name}_quotient")
        self.remainder = Signal(width, name=f"{name}_remainder")
        self.busy = Signal(name=f"{name}_busy")
        divisor = Signal(width, name=f"{name}_divisor_reg")
        count = Signal(range(width + 1), name=f"{name}_count")
        with m.If(self.start):
            m.d.sync += [self.quotient.eq(self.dividend), self.remainder.eq(0),
                         divisor.eq(self.divisor), count.eq(width), self.busy.eq(1)]
        with m.Elif(self.busy):
            shifted = Cat(self.quotient[-1], self.remainder)
            fits = shifted >= divisor
            m.d.sync += [self.remainder.eq(Mux(fits, shifted - divisor, shifted)),
                         self.quotient.eq(Cat(fits, self.quotient[:-1])),
                         count.eq(count - 1)]
            with m.If(count == 1):
                m.d.sync += self.busy.eq(0)
