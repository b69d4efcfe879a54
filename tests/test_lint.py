"""Tests of the Verilator lint wrapper in synth/lint.py."""

import pytest
from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from synth.lint import WAIVERS, lint, parse_verilator_output, waiver_file

CLEAN = """\
module clean(input wire clk, input wire [7:0] a, output reg [7:0] q);
  always @(posedge clk) q <= a;
endmodule
"""

SYNTAX_ERROR = """\
module broken(input wire a, output wire b);
  assign b = a
endmodule
"""

WIDTH_MISMATCH = """\
module narrow(input wire [7:0] a, output wire [3:0] b);
  assign b = a;
endmodule
"""


class Passthrough(wiring.Component):
    a: In(8)
    q: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.q.eq(self.a)
        return m


def test_clean_verilog_has_no_diagnostics(tmp_path):
    report = lint(CLEAN, "clean", tmp_path)
    assert report.ok
    assert (report.errors, report.warnings) == (0, 0)
    assert report.by_code == {} and report.messages == []
    assert report.returncode == 0


def test_amaranth_verilog_lints_without_errors(tmp_path):
    report = lint(verilog.convert(Passthrough(), name="passthrough"), "passthrough", tmp_path)
    assert report.ok and report.errors == 0
    # Amaranth's registers with an initial value are reported, counted, and not fatal.
    assert report.warnings == sum(report.by_code.values()) >= 1
    assert report.by_code.get("PROCASSINIT", 0) >= 1


def test_syntax_error_is_an_error(tmp_path):
    report = lint(SYNTAX_ERROR, "broken", tmp_path)
    assert not report.ok
    assert report.errors == 1
    assert report.by_code == {"ERROR": 1}
    assert "syntax error" in report.messages[0]
    assert report.returncode != 0
    assert "syntax error" in report.log_path.read_text()


def test_width_mismatch_counts_a_width_warning(tmp_path):
    report = lint(WIDTH_MISMATCH, "narrow", tmp_path)
    assert report.ok  # a warning, not an error
    assert report.by_code["WIDTHTRUNC"] == 1
    assert report.count("WIDTH") == 1
    assert report.by_code.get("UNUSEDSIGNAL") == 1  # a[7:4] is dropped, which -Wall also notes
    assert report.warnings == 2
    assert report.messages[0].startswith("%Warning-WIDTHTRUNC: narrow.v:2:")


def test_unknown_top_module_is_an_error(tmp_path):
    report = lint(CLEAN, "not_there", tmp_path)
    assert not report.ok and report.errors >= 1


def test_parser_skips_the_closing_summary():
    text = ("%Warning-UNUSEDSIGNAL: x.v:3:7: Signal is not used: 'y'\n"
            "                 : ... note: In instance 'x'\n"
            "%Error: x.v:4:1: syntax error, unexpected endmodule\n"
            "%Error-NEEDTIMINGOPT: x.v:5:3: Use --timing\n"
            "%Error: Cannot continue\n"
            "%Error: Exiting due to 2 error(s)\n")
    errors, warnings, by_code, messages = parse_verilator_output(text)
    assert (errors, warnings) == (2, 1)
    assert dict(by_code) == {"UNUSEDSIGNAL": 1, "ERROR": 1, "NEEDTIMINGOPT": 1}
    assert len(messages) == 3


def test_empty_top_is_refused(tmp_path):
    with pytest.raises(ValueError, match="Top module name must be a non-empty string, not ''"):
        lint(CLEAN, "", tmp_path)


def test_waivers_cover_their_own_file_and_their_classes_only(tmp_path):
    # narrow.v and other.v draw the same two warnings; only narrow.v's are waived.
    (tmp_path / "other.v").write_text(WIDTH_MISMATCH.replace("narrow", "other"))
    top = WIDTH_MISMATCH.replace("endmodule",
                                 "  wire [3:0] c;\n  other o(.a(a), .b(c));\nendmodule")
    report = lint(top, "narrow", tmp_path, waivers=True, extra_args=["other.v"])
    assert report.ok and report.warnings == 2
    assert all("other.v" in m for m in report.messages)
    unwaived = lint(top, "narrow", tmp_path, extra_args=["other.v"])
    # narrow.v's: its truncation and the unread `c` (`o` reads all of `a`).
    assert unwaived.warnings == 4 and unwaived.left == {} and sum(unwaived.waived.values()) == 4
    # A class outside WAIVERS stays, with or without the file.
    dead = top.replace("endmodule", "  wire never = a > 8'hff;\nendmodule")
    assert "CMPCONST" not in WAIVERS
    assert lint(dead, "narrow", tmp_path, waivers=True, extra_args=["other.v"]).left == \
        {"CMPCONST": 1}


def test_the_waiver_file_gives_a_reason_for_each_class():
    text = waiver_file("blk")
    assert text.startswith("`verilator_config\n") and "lint_off -rule" in text
    for code, reason in WAIVERS.items():
        assert f"// {code}: {reason}." in text
        assert f'lint_off -rule {code} -file "blk.v"' in text
    assert "lint_off -file" not in text and "lint_off\n" not in text   # no blanket waiver


def test_docs_integration_gives_every_waiver_its_reason():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "integration.md").read_text()
    for code in WAIVERS:
        assert f"| `{code}` |" in text, code
