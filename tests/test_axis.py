"""`memwall generate --interface axis`: AXI4-Stream names around a block (memwall/axis.py).

Port names and widths, the tlast and tready rules, pass-through ports, the manifest under its
JSON Schema, Verilator lint with the waivers, the wrapper's wiring in Amaranth's simulator, X-free
outputs after reset, bad input, and the default staying the native interface. Simulation of wrapped blocks against their
golden models: cocotb_tests/test_axis.py.
"""

import json
import re

import jsonschema
import pytest
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from cocotb_tests.launcher import design_group
from memwall import registry
from memwall.axis import AxisWrapper, tdata_width
from memwall.cli import main
from memwall.manifest import schema
from synth.lint import lint


def generate(capsys, tmp_path, block, *args):
    code = main(["generate", block, "--preset", "small", "-o", str(tmp_path), *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    top = block.replace("-", "_")
    return (tmp_path / f"{top}.v").read_text(), json.loads((tmp_path / f"{top}.json").read_text())


def header_ports(verilog: str, top: str) -> dict[str, tuple[str, int]]:
    """Port name -> (direction, width) as the Verilog declares them in the top module."""
    body = verilog[re.search(rf"^module {top}\(", verilog, re.M).start():]
    body = body[:body.index("endmodule")]
    ports = {}
    for direction, width, name in re.findall(r"^\s*(input|output) (?:\[(\d+):0\] )?(\w+);",
                                             body, re.M):
        ports[name] = (direction, int(width or 0) + 1)
    return ports


@pytest.mark.parametrize("bits, width", [(1, 8), (8, 8), (13, 16), (32, 32), (33, 40), (105, 112)])
def test_tdata_is_the_payload_in_whole_bytes(bits, width):
    assert tdata_width(bits) == width


def test_umdam_streams_get_axi_names_and_a_schema_valid_manifest(capsys, tmp_path):
    verilog, manifest = generate(capsys, tmp_path, "umdam", "--interface", "axis")
    jsonschema.validate(manifest, schema())
    assert manifest["interface"] == "axis"
    assert header_ports(verilog, "umdam") == {
        "clk": ("input", 1), "rst": ("input", 1),
        "s_axis_i_tdata": ("input", 16), "s_axis_i_tvalid": ("input", 1),
        "s_axis_i_tready": ("output", 1),
        "m_axis_o_tdata": ("output", 16), "m_axis_o_tvalid": ("output", 1),
        "m_axis_o_tready": ("input", 1)}
    i, o = manifest["streams"]
    assert i["ports"] == {"tdata": "s_axis_i_tdata", "tvalid": "s_axis_i_tvalid",
                          "tready": "s_axis_i_tready"}
    assert (i["payload_width"], i["tdata_width"], i["tlast_field"]) == (14, 16, None)
    # The payload's field offsets are the offsets in tdata.
    assert {f["name"]: f["offset"] for f in i["fields"]} == {"addr": 0, "mapping": 12}
    assert o["timing"]["after"] == "i" and o["timing"]["latency"] is not None
    assert manifest["other_ports"] == []


def test_valid_only_streams_have_no_tready(capsys, tmp_path):
    verilog, manifest = generate(capsys, tmp_path, "arith-fpmul", "--interface", "axis")
    jsonschema.validate(manifest, schema())
    ports = header_ports(verilog, "arith_fpmul")
    assert not any(name.endswith("_tready") for name in ports)
    assert [s["protocol"] for s in manifest["streams"]] == ["valid-only", "valid-only"]
    assert ports["m_axis_o_tdata"] == ("output", 16)          # bf16 result at the small preset


#: The in-flash PE wrapped at `small`: these two tests share one elaboration on one worker.
INFLASH_AXIS = design_group("inflash", "small", {"interface": "axis"})


@INFLASH_AXIS
def test_tlast_where_the_payload_has_a_last_field(capsys, tmp_path):
    verilog, manifest = generate(capsys, tmp_path, "inflash", "--interface", "axis")
    jsonschema.validate(manifest, schema())
    last = {s["name"]: s["ports"].get("tlast") for s in manifest["streams"]}
    assert last == {"cmd": None, "x": None, "rd_cmd": None,
                    "rd_data": "s_axis_rd_data_tlast", "y": "m_axis_y_tlast"}
    ports = header_ports(verilog, "inflash")
    assert ports["s_axis_rd_data_tlast"] == ("input", 1)
    assert ports["m_axis_y_tlast"] == ("output", 1)
    assert all(s["tdata_width"] % 8 == 0 for s in manifest["streams"])


def test_ports_in_no_stream_pass_through_under_their_own_names(capsys, tmp_path):
    _, native = generate(capsys, tmp_path / "native", "edram")
    verilog, manifest = generate(capsys, tmp_path / "axis", "edram", "--interface", "axis")
    jsonschema.validate(manifest, schema())
    assert manifest["other_ports"] == native["other_ports"] and "status" in native["other_ports"]
    declared = header_ports(verilog, "edram")
    widths = {p["name"]: p["width"] for p in native["ports"]}
    for name in native["other_ports"]:
        assert declared[name][1] == widths[name], name


@INFLASH_AXIS
def test_wrapped_verilog_lints_clean_with_the_waivers(tmp_path):
    entry = registry.get("inflash")
    text, _ = entry.verilog(entry.parameters("small"), interface="axis")
    report = lint(text, entry.top, tmp_path, waivers=True)
    assert report.ok and report.warnings == 0, "\n".join(report.messages[:20])


def test_default_is_the_native_interface_unchanged(capsys, tmp_path):
    plain, plain_manifest = generate(capsys, tmp_path / "a", "umdam", "--no-src")
    native, native_manifest = generate(capsys, tmp_path / "b", "umdam", "--no-src",
                                       "--interface", "native")
    assert plain == native and "interface" not in plain_manifest
    assert plain_manifest["streams"] == native_manifest["streams"]
    assert "i__payload" in header_ports(plain, "umdam")


def test_an_unknown_interface_is_one_line_with_status_2(capsys):
    code = main(["generate", "umdam", "--interface", "axi4"])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "argument --interface: invalid choice: 'axi4' (choose from 'native', 'axis')" in err


def test_the_library_call_names_the_interfaces_allowed():
    entry = registry.get("umdam")
    with pytest.raises(registry.ParameterError, match="interface must be one of native, axis, "
                                                      "not 'apb'"):
        entry.verilog(entry.parameters("small"), interface="apb")


class _Frames(wiring.Component):
    """A stream with a ``last`` field in, the same out through one register stage: enough to see
    the wrapper's tdata, tlast and tready wiring."""

    layout = data.StructLayout({"value": 5, "last": 1})

    def __init__(self):
        super().__init__({"i": In(stream.Signature(self.layout)),
                          "o": Out(stream.Signature(self.layout)), "count": Out(4)})

    def elaborate(self, platform):
        from amaranth import Module
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.eq(self.i.payload),
                         self.count.eq(self.count + 1)]
        return m


def test_tlast_drives_the_last_bit_and_tdata_carries_the_fields():
    dut = AxisWrapper(_Frames())
    assert dut.s_axis_i_tdata.shape().width == 8 and hasattr(dut, "m_axis_o_tlast")
    seen = []

    async def bench(ctx):
        ctx.set(dut.m_axis_o_tready, 1)
        # value 9 with tdata's last bit (bit 5) set but tlast low, then value 3 with tlast high,
        # and junk in the padding bits 6 and 7: tlast decides, the padding is ignored.
        for word, tlast in ((9 | 1 << 5, 0), (3 | 0b11 << 6, 1)):
            ctx.set(dut.s_axis_i_tdata, word)
            ctx.set(dut.s_axis_i_tlast, tlast)
            ctx.set(dut.s_axis_i_tvalid, 1)
            assert ctx.get(dut.s_axis_i_tready) == 1
            await ctx.tick()
            ctx.set(dut.s_axis_i_tvalid, 0)
            assert ctx.get(dut.m_axis_o_tvalid) == 1
            seen.append((ctx.get(dut.m_axis_o_tdata), ctx.get(dut.m_axis_o_tlast)))
        assert ctx.get(dut.count) == 2                       # pass-through output

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(9, 0), (3 | 1 << 5, 1)]


@pytest.mark.parametrize("name", ["umdam", "arith-fpmul"])
def test_wrapped_outputs_are_x_free_after_reset(name, tmp_path):
    """The X check of tests/test_xfree.py on the wrapped Verilog (blocks without block RAM, whose
    read registers are X until the first read: every output, tdata included, is checked)."""
    from tests.test_xfree import x_report

    block = registry.get(name)
    text, component = block.verilog(block.parameters("small"), interface="axis")
    ports = registry.ports(component, text)
    for mode in ("-g2012", "-g2005"):
        report = x_report(text, block.top, ports, mode, tmp_path)
        assert "PASS: no X" in report, f"iverilog {mode}: {report}"
