"""Lane-parallel integer dot product: signed products summed exactly by a pipelined adder tree."""

from __future__ import annotations

from amaranth import Module, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import delay
from ..validate import integer, power_of_two
from .dsp import ecp5_product, family
from .tree import reduce_tree, tree_latency

__all__ = ["IntDot", "accumulator_bits"]


def accumulator_bits(lanes: int, a_bits: int, b_bits: int) -> int:
    """Return the fewest bits of a signed accumulator that holds every sum of ``lanes`` products
    of a signed ``a_bits`` and a signed ``b_bits`` integer, without overflow.

    The greatest product is ``(-2**(a-1)) * (-2**(b-1)) = 2**(a+b-2)``, the least
    ``-2**(a-1) * (2**(b-1) - 1)`` (or with ``a`` and ``b`` swapped, whichever is less), so the
    sums lie in ``[lanes * least, lanes * 2**(a+b-2)]``.
    """
    a_lo, a_hi = -(1 << (a_bits - 1)), (1 << (a_bits - 1)) - 1
    b_lo, b_hi = -(1 << (b_bits - 1)), (1 << (b_bits - 1)) - 1
    corners = (a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi)
    lo, hi = lanes * min(corners), lanes * max(corners)
    bits = 1
    while not (-(1 << (bits - 1)) <= lo and hi < (1 << (bits - 1))):
        bits += 1
    return bits


class IntDot(wiring.Component):
    """Compute ``y = sum(a[k] * b[k] for k in range(lanes))`` exactly, one dot product per cycle.

    Parameters
    ----------
    lanes : int
        Lane count, a power of two from 1 to 64.
    a_bits, b_bits : int
        Widths of the signed operands, 2 to 16 each (int8 x int8: 8, 8; int8 activations x
        int4 weights: 8, 4, the weights in ``[-8, 7]``).
    acc_bits : int
        Width of the signed result, from :func:`accumulator_bits` ``(lanes, a_bits, b_bits)``
        to 64 (int8 x int8 over 64 lanes needs 22 bits; the default 32 always suffices). The
        check makes overflow impossible: the result is the exact dot product.
    register_every : int
        Registers in the adder tree every this many levels (1: every level, the default), 1 to 6.
    block_registers : bool
        ``True``: elaborated for the ECP5 (``platform=hdl.arith.dsp.Target("ecp5")``), each
        lane's product is one ``MULT18X18D`` whose output register is the product register
        (:func:`hdl.arith.dsp.ecp5_product` without input registers). The same latency and
        bits. Default ``False``: generic registers for every target.

    Members
    -------
    i : In(stream.Signature(StructLayout({"a": ArrayLayout(signed(a_bits), lanes),
        "b": ArrayLayout(signed(b_bits), lanes)}), always_ready=True))
        Operand vectors. Packing: lane ``k`` of ``a`` occupies payload bits
        ``[k*a_bits, (k+1)*a_bits)``, then ``b`` follows ``a`` with lane ``k`` at
        ``lanes*a_bits + [k*b_bits, (k+1)*b_bits)``; int4 weights are packed two per byte, lane
        ``2j`` in the low nibble.
    o : Out(stream.Signature(StructLayout({"y": signed(acc_bits)}), always_ready=True))
        Dot products, ``latency`` cycles after their operands, in order.

    Latency ``1 + ceil(log2(lanes) / register_every)`` cycles: one for the products, then the
    tree (:func:`hdl.arith.tree.reduce_tree`), whose adders grow one bit per level; a new item
    every cycle (always ready).
    """

    def __init__(self, lanes: int = 16, *, a_bits: int = 8, b_bits: int = 8, acc_bits: int = 32,
                 register_every: int = 1, block_registers: bool = False):
        self.latency_of(lanes, a_bits=a_bits, b_bits=b_bits, acc_bits=acc_bits,
                        register_every=register_every,
                        block_registers=block_registers)          # one copy of the checks
        self._lanes, self._a_bits, self._b_bits, self._acc_bits = lanes, a_bits, b_bits, acc_bits
        self._register_every, self._blocks = register_every, block_registers
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "a": data.ArrayLayout(signed(a_bits), lanes),
                "b": data.ArrayLayout(signed(b_bits), lanes)}), always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"y": signed(acc_bits)}),
                                      always_ready=True)),
        })

    @staticmethod
    def latency_of(lanes: int = 16, *, a_bits: int = 8, b_bits: int = 8, acc_bits: int = 32,
                   register_every: int = 1, block_registers: bool = False) -> int:
        """Return the latency of a dot product with these arguments, without building it.

        The arguments are the constructor's, checked as it checks them (the same exceptions);
        the latency is ``1 + ceil(log2(lanes) / register_every)`` cycles.
        """
        power_of_two(lanes, "Lane count", 1, 64)
        integer(a_bits, "Operand a width", 2, 16)
        integer(b_bits, "Operand b width", 2, 16)
        need = accumulator_bits(lanes, a_bits, b_bits)
        if not isinstance(acc_bits, int) or isinstance(acc_bits, bool):
            raise TypeError(f"Accumulator width must be an integer between {need} and 64, "
                            f"not {acc_bits!r}")
        if not need <= acc_bits <= 64:
            raise ValueError(f"Accumulator width must be between {need} and 64 for {lanes} "
                             f"lanes of {a_bits} x {b_bits}-bit products, not {acc_bits}")
        integer(register_every, "Tree register spacing", 1, 6)
        if not isinstance(block_registers, bool):
            raise TypeError(f"IntDot block_registers must be True or False, not "
                            f"{block_registers!r}")
        return 1 + tree_latency(lanes, register_every=register_every)

    @property
    def lanes(self) -> int:
        return self._lanes

    @property
    def latency(self) -> int:
        """Cycles from ``i.valid`` to ``o.valid``: ``1 + ceil(log2(lanes) / register_every)``."""
        return self.latency_of(self._lanes, a_bits=self._a_bits, b_bits=self._b_bits,
                               acc_bits=self._acc_bits, register_every=self._register_every)

    def elaborate(self, platform):
        m = Module()
        products = []
        blocks = self._blocks and family(platform) == "ecp5"
        for k in range(self._lanes):
            a, b = self.i.payload.a[k], self.i.payload.b[k]
            if blocks:
                products.append(ecp5_product(m, Value.cast(a).as_unsigned(),
                                             Value.cast(b).as_unsigned(), name=f"dsp_{k}",
                                             signs=(True, True), input_registers=False))
                continue
            product = Signal(signed(self._a_bits + self._b_bits), name=f"product_{k}")
            m.d.comb += product.eq(a * b)
            products.append(delay(m, product, 1, name=f"product_{k}"))
        valid = delay(m, self.i.valid, 1, name="product_valid", reset=True)
        total, total_valid, _ = reduce_tree(m, products, lambda m, a, b: a + b, valid=valid,
                                            register_every=self._register_every, name="sum")
        m.d.comb += [self.o.payload.y.eq(total), self.o.valid.eq(total_valid)]
        return m
