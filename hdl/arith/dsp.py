"""Device multiplier blocks with their own registers, for the targets that need them instantiated.

By default the registry writes generic Verilog: a unit's significand pieces are ``a * b`` between
fabric registers, and synthesis maps each product to one hardware multiplier. For the ECP5 that
leaves timing on the table: Yosys's ``synth_ecp5`` maps the product to a ``MULT18X18D`` but never
moves the registers around it into the block (it has no register packing for this family), so
every path through a multiplier block runs fabric register -> route -> 18 x 18 multiply -> route ->
fabric register, about 4.5 ns of the block's own delay plus two routes.

Elaborated with ``platform=Target("ecp5")`` (``memwall synth --target ecp5`` and ``memwall
generate --target ecp5`` do this), a unit asked to (``block_registers=True``) whose datapath
registers the operands of a piece and the piece's product (:class:`~hdl.arith.fpmul.FloatMultiplier`
with both cuts registered) instantiates the block with its input and output registers instead
(:func:`ecp5_product`): the same two cycles, the same bits, and the multiply happens between the
block's own registers. Simulating such
Verilog needs a model of the primitive; ``cocotb_tests/models/MULT18X18D.v`` models the
configurations instantiated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, ClockSignal, Const, Instance, Module, Signal, Value, signed

__all__ = ["FAMILIES", "Target", "family", "ECP5_MULT_WIDTH", "ecp5_product"]

#: Device families with primitives of their own here.
FAMILIES = ("ecp5",)
#: Widest operand of one ECP5 ``MULT18X18D`` (it multiplies 18 x 18 bits).
ECP5_MULT_WIDTH = 18


@dataclass(frozen=True)
class Target:
    """The device family a design is elaborated for, given to Amaranth as ``platform``.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.

    Raises
    ------
    ValueError
        For another family, naming the ones allowed.
    """

    family: str

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"Target family must be one of {', '.join(FAMILIES)}, not "
                             f"{self.family!r}")


def family(platform) -> str | None:
    """The device family of an ``elaborate`` call's ``platform``; ``None`` for generic Verilog."""
    return platform.family if isinstance(platform, Target) else None


def ecp5_product(m: Module, a: Value, b: Value, *, name: str,
                 signs: tuple[bool, bool] = (False, False),
                 input_registers: bool = True) -> Signal:
    """Return ``a * b`` two cycles late, from one ECP5 ``MULT18X18D`` and its own registers.

    ``a`` and ``b`` (at most :data:`ECP5_MULT_WIDTH` bits each, read as two's complement where
    ``signs`` says so, else unsigned) enter the block's input registers (``REG_INPUTA``,
    ``REG_INPUTB``); the product leaves its output register (``REG_OUTPUT``), all on ``CLK0`` of
    the ``sync`` domain, always enabled, never reset (as a pipeline register of
    :class:`~hdl.pipeline.Pipeline`). Latency two cycles, one product per cycle. With
    ``input_registers=False`` the operands go straight to the multiplier and only the output
    register remains: latency one cycle (a unit whose product register follows a multiply of
    unregistered operands). The returned signal is ``len(a) + len(b)`` bits wide, signed when
    either operand is.

    Raises
    ------
    ValueError
        For an operand wider than the block's.
    """
    a, b = Value.cast(a), Value.cast(b)
    for label, value in (("first", a), ("second", b)):
        if not 1 <= len(value) <= ECP5_MULT_WIDTH:
            raise ValueError(f"The {label} operand of an ECP5 multiplier block must be 1 to "
                             f"{ECP5_MULT_WIDTH} bits wide, not {len(value)}")
    width = len(a) + len(b)
    product = Signal(signed(width) if any(signs) else width, name=f"{name}_p")
    ports = {"i_CLK0": ClockSignal("sync"), "i_CE0": Const(1), "i_RST0": Const(0),
             "i_SIGNEDA": Const(int(signs[0])), "i_SIGNEDB": Const(int(signs[1])),
             "i_SOURCEA": Const(0), "i_SOURCEB": Const(0)}

    def extend(value: Value, is_signed: bool) -> Value:
        fill = value[-1] if is_signed else Const(0, 1)
        return Cat(value, fill.replicate(ECP5_MULT_WIDTH - len(value)))

    a18, b18 = extend(a, signs[0]), extend(b, signs[1])
    for n in range(ECP5_MULT_WIDTH):
        ports[f"i_A{n}"] = a18[n]
        ports[f"i_B{n}"] = b18[n]
        ports[f"i_C{n}"] = Const(0)
    # Every output pin connected (the bits past the product unread): no pin left open.
    pins = Signal(2 * ECP5_MULT_WIDTH, name=f"{name}_pins")
    ports.update({f"o_P{n}": pins[n] for n in range(2 * ECP5_MULT_WIDTH)})
    m.d.comb += product.eq(pins[:width])
    inputs = "CLK0" if input_registers else "NONE"
    m.submodules[name] = Instance(
        "MULT18X18D",
        p_REG_INPUTA_CLK=inputs, p_REG_INPUTB_CLK=inputs, p_REG_INPUTC_CLK="NONE",
        p_REG_PIPELINE_CLK="NONE", p_REG_OUTPUT_CLK="CLK0",
        p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED",
        **ports)
    return product
