"""The select arms ``make coverage`` leaves out as unreachable (cocotb_tests/unreachable.py): found
in Yosys's Verilog of Amaranth switches, and never where an input can reach them."""

from amaranth import Module
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from cocotb_tests.unreachable import COMPLETE, CONSTANT, unreachable_arms
from memwall.registry import to_verilog

_FUNCTION = """  function [7:0] _9_;
    input [7:0] a;
    input [23:0] b;
    input [2:0] s;
    (* parallel_case *)
    casez (s)
      3'b??1:
        _9_ = b[7:0];
      3'b?1?:
        _9_ = b[15:8];
      3'b1??:
        _9_ = b[23:16];
      default:
        _9_ = a;
    endcase
  endfunction
"""
#: The lines of the function's arms: bit 0, bit 1, bit 2, the default.
ARMS = {"bit0": 7, "bit1": 9, "bit2": 11, "default": 13}


def _verilog(select: str, *assigns: str) -> str:
    return _FUNCTION + f"  assign y = _9_(8'h00, {{ p, q, r }}, {select});\n" + "".join(
        f"  assign {a};\n" for a in assigns)


def test_a_constant_select_takes_only_its_arm():
    found = unreachable_arms(_verilog("3'h2"))
    assert found == {ARMS["bit0"]: CONSTANT, ARMS["bit2"]: CONSTANT, ARMS["default"]: CONSTANT}


def test_comparisons_with_some_values_leave_the_default_in():
    """Three select bits for the values 0 to 2 of a 2-bit ``e`` leave ``e == 3`` to the
    default: nothing is excluded."""
    incomplete = _verilog("{ _3_, _2_, _1_ }", "_1_ = e == 2'h2", "_2_ = e == 2'h1",
                          "_3_ = ! e")
    assert unreachable_arms(incomplete) == {}


def test_a_two_way_select_on_one_bit_and_its_complement():
    text = _FUNCTION.replace("[2:0] s", "[1:0] s").replace("3'b?1?", "2'b1?").replace(
        "3'b??1", "2'b?1").replace("      3'b1??:\n        _9_ = b[23:16];\n", "")
    complete = text + "  assign y = _9_(8'hxx, { p, q }, { _2_, _1_ });\n" \
        "  assign _1_ = e;\n  assign _2_ = ~ (* full_case = 32'd1 *) e;\n"
    default = next(i for i, line in enumerate(complete.splitlines(), 1) if "default" in line)
    assert unreachable_arms(complete) == {default: COMPLETE}
    # `! e` tests every bit of e, `e` its bit 0: together they need not cover every value.
    mixed = complete.replace("~ (* full_case = 32'd1 *) e", "! e")
    assert unreachable_arms(mixed) == {}


def test_a_select_whose_bits_are_not_shown_is_left_alone():
    assert unreachable_arms(_verilog("sel")) == {}
    assert unreachable_arms(_verilog("{ _3_, _2_, _1_ }", "_1_ = e == 2'h2", "_2_ = e < 2'h1",
                                     "_3_ = ! e")) == {}
    # Two calls: the union of what each can take.
    two = _verilog("3'h2") + "  assign z = _9_(8'h00, { p, q, r }, 3'h1);\n"
    assert unreachable_arms(two) == {ARMS["bit2"]: CONSTANT, ARMS["default"]: CONSTANT}


class _Switches(wiring.Component):
    """A switch over every value of ``sel`` and one over three of its four values."""

    sel: In(2)
    a: In(8)
    b: In(8)
    c: In(8)
    every: Out(8)
    three: Out(8)

    def elaborate(self, platform):
        m = Module()
        for out, sources in ((self.every, [self.a, self.b, self.c, self.a + 1]),
                             (self.three, [self.a, self.b, self.c])):
            with m.Switch(self.sel):
                for value, source in enumerate(sources):
                    with m.Case(value):
                        m.d.comb += out.eq(source)
        return m


def test_amaranth_switches_through_yosys():
    """The pattern as Yosys writes it: the complete switch's default is found, the incomplete
    one's (sel == 3 keeps the output at 0) is not."""
    text = to_verilog(rtlil.convert(_Switches(), name="switches"))
    lines = text.splitlines()
    found = unreachable_arms(text)
    assert len(found) == 1 and set(found.values()) == {COMPLETE}
    (line,) = found
    assert lines[line - 1].strip() == "default:"
    function = max(i for i in range(line) if lines[i].strip().startswith("function"))
    assert "4'b" in "\n".join(lines[function:line])     # the four-way switch's function


def test_each_module_is_read_apart():
    """Yosys names wires and functions per module: a constant select in one module says nothing
    of a function of the same name in the next."""
    first = "module a(y);\n" + _verilog("3'h2") + "endmodule\n"
    second = "module b(y);\n" + _verilog("sel") + "endmodule\n"
    found = unreachable_arms(first + second)
    assert found == {1 + ARMS["bit0"]: CONSTANT, 1 + ARMS["bit2"]: CONSTANT,
                     1 + ARMS["default"]: CONSTANT}


def test_comparisons_cover_every_value_only_at_the_constants_width():
    """``e == 0`` to ``e == 3`` leave no value to the default when ``e`` has 2 bits; with 3 bits
    (or no declaration to show its width) ``e`` = 4 to 7 still reach it."""
    arms = "".join(f"      4'b{'?' * (3 - k)}1{'?' * k}:\n        _9_ = b[{8 * k + 7}:{8 * k}];\n"
                   for k in range(4))
    function = ("  function [7:0] _9_;\n    input [7:0] a;\n    input [31:0] b;\n"
                "    input [3:0] s;\n    casez (s)\n" + arms +
                "      default:\n        _9_ = a;\n    endcase\n  endfunction\n"
                "  assign y = _9_(8'hxx, { p, q, r, t }, { _4_, _3_, _2_, _1_ });\n"
                "  assign _1_ = e == 2'h3;\n  assign _2_ = e == 2'h2;\n"
                "  assign _3_ = e == 2'h1;\n  assign _4_ = ! e;\n")
    default = 1 + next(i for i, line in enumerate(function.splitlines(), 1) if "default" in line)
    assert unreachable_arms("  reg [1:0] e = 2'h0;\n" + function) == {default: COMPLETE}
    assert unreachable_arms("  wire [2:0] e;\n" + function) == {}
    assert unreachable_arms(function) == {}
