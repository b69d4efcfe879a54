"""Every block's outputs are free of X after reset under Icarus in SystemVerilog mode (-g2012)
and in Verilog-2005 mode, with a testbench that sets its inputs through declaration
initialisers, as users write them (issue 21, item 4; registry.to_verilog says why)."""

import subprocess

import pytest
from amaranth.back import verilog

from cocotb_tests.launcher import design_group
from memwall import manifest as manifest_mod
from memwall import registry

#: Cycles checked after the reset is released.
CHECKED_CYCLES = 16
#: Variants built from the same tiles as a block checked in ``make test`` (flowkv, inflash), 20 to
#: 27 s each on 2 cores, and the ring of rdxe-dxe engines (its links and stages reset with the
#: engines, 45 s in make test with the design's elaboration): they run with ``--slow``.
SLOW = {"flowkv-array", "inflash-unit", "rdxe-ring"}


def xcheck_bench(top: str, ports: list[dict], reset_cycles: int) -> str:
    """A plain Verilog testbench: inputs 0 (reset 1) from declaration initialisers, reset held
    ``reset_cycles`` rising edges, then every output checked for X or Z on each falling edge; a
    stream's payload only while its valid is high, as ARM's AXI4-Stream protocol checker does
    (AXI4STREAM_ERRM_TDATA_X)."""
    decls, conns, checks = [], [], []
    outputs = {p["name"] for p in ports if p["direction"] == "output"}
    for port in ports:
        name, width = port["name"], port["width"]
        vector = f"[{width - 1}:0] " if width > 1 else ""
        if port["direction"] == "input":
            decls.append(f"reg {vector}{name} = {1 if name == 'rst' else 0};")
        else:
            decls.append(f"wire {vector}{name};")
            valid = name.removesuffix("payload") + "valid"
            gated = name.endswith("__payload") and valid in outputs
            gate = f"{valid} === 1'b1 && " if gated else ""
            checks.append(f'if ({gate}^{name} === 1\'bx) begin $display("X: {name} at cycle %0d", '
                          f'cycle); bad = bad + 1; end')
        conns.append(f".{name}({name})")
    decl_lines = "\n".join(f"  {d}" for d in decls)
    check_lines = "\n".join(f"    {c}" for c in checks)
    return f"""`timescale 1ns/1ps
module xcheck;
{decl_lines}
  integer cycle = 0;
  integer bad = 0;
  {top} dut({", ".join(conns)});
  always #5 clk = ~clk;
  always @(posedge clk) begin
    cycle <= cycle + 1;
    if (cycle == {reset_cycles - 1}) rst <= 1'b0;
  end
  always @(negedge clk) if (cycle >= {reset_cycles}) begin
{check_lines}
    if (cycle == {reset_cycles + CHECKED_CYCLES}) begin
      if (bad == 0) $display("PASS: no X"); else $display("FAIL: %0d X", bad);
      $finish;
    end
  end
endmodule
"""


def x_report(text: str, top: str, ports: list[dict], mode: str, tmp_path) -> str:
    """Simulate ``text`` in the X-check bench under ``iverilog mode``; return the bench's words."""
    (tmp_path / f"{top}.v").write_text(text)
    bench = xcheck_bench(top, ports, manifest_mod.RESET["cycles"])
    (tmp_path / "xcheck.v").write_text(bench)
    vvp = tmp_path / f"xcheck{mode}.vvp"
    subprocess.run(["iverilog", mode, "-o", str(vvp), str(tmp_path / "xcheck.v"),
                    str(tmp_path / f"{top}.v")], check=True, capture_output=True, text=True)
    return subprocess.run(["vvp", "-n", str(vvp)], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("name", [pytest.param(b.name, marks=[pytest.mark.slow] if b.name in SLOW
                                                 else [design_group(b.name, "small")])
                                  for b in registry.blocks()])
def test_no_output_is_x_after_reset(name, tmp_path):
    block = registry.get(name)
    text, component = block.verilog(block.parameters("small"))
    ports = registry.ports(component, text)
    if not any(p["name"] == "clk" for p in ports):
        pytest.skip(f"{name} is combinational: no reset to check after")
    for mode in ("-g2012", "-g2005"):
        report = x_report(text, block.top, ports, mode, tmp_path)
        assert "PASS: no X" in report, f"iverilog {mode}: {report}"


def test_the_check_sees_amaranths_own_verilog_go_x_under_systemverilog(tmp_path):
    # Amaranth's own RTLIL-to-Verilog keeps `always @*` processes: under -g2012 o__valid samples X
    # after reset (docs/integration.md); the check must see it.
    block = registry.get("arith-fpmul")
    component = block.elaborate(block.parameters("small"))
    text = verilog.convert(component, name=block.top, ports=registry.port_values(component))
    assert "always @*" in text
    report = x_report(text, block.top, registry.ports(component, text), "-g2012", tmp_path)
    assert "X: o__valid" in report and "FAIL" in report, report
