"""Board builds: PLL settings, the board table, what fits where, `memwall board` and its errors,
and real bitstreams (docs/boards.md)."""

import json
import re
from pathlib import Path

import pytest
from amaranth.vendor import LatticeECP5Platform, LatticeICE40Platform

from hdl.board.pll import Ecp5Pll, Ice40Pll, PllUnreachable, pll_settings
from memwall import registry
from memwall.board import build as board_build
from memwall.board.boards import BOARDS, board, fit, ram_blocks
from memwall.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- PLL settings against the datasheets' formulas ---------------------------------------------

@pytest.mark.parametrize("f_in, f_out", [(25, 50), (25, 60), (25, 75), (25, 100), (25, 33.3),
                                         (25, 125), (25, 210), (100, 80), (100, 150)])
def test_ecp5_pll_meets_the_ehxplll_formulas(f_in, f_out):
    s = pll_settings("ecp5", f_in, f_out)
    # FPGA-TN-02200: f_PFD = f_IN / CLKI_DIV, f_OUT = f_PFD * CLKFB_DIV (CLKOP fed back),
    # f_VCO = f_OUT * CLKOP_DIV.
    pfd = f_in / s.clki_div
    out = pfd * s.clkfb_div
    vco = out * s.clkop_div
    assert 3.125 <= pfd <= 400 and 3.125 <= out <= 400 and 400 <= vco <= 800
    assert 1 <= s.clki_div <= 128 and 1 <= s.clkfb_div <= 80 and 1 <= s.clkop_div <= 128
    assert abs(out - f_out) <= 0.01 * f_out
    assert s.f_out_mhz == pytest.approx(out) and s.f_vco_mhz == pytest.approx(vco)


@pytest.mark.parametrize("f_out", [16.5, 24, 30, 36, 48, 60, 100, 200, 270])
def test_ice40_pll_meets_the_sb_pll40_formulas(f_out):
    s = pll_settings("ice40", 12, f_out)
    # TN1251, SIMPLE feedback: f_PFD = f_IN / (DIVR + 1), f_VCO = f_PFD * (DIVF + 1),
    # f_OUT = f_VCO / 2**DIVQ.
    pfd = 12 / (s.divr + 1)
    vco = pfd * (s.divf + 1)
    out = vco / 2 ** s.divq
    assert 10 <= pfd <= 133 and 533 <= vco <= 1066 and 16 <= out <= 275
    assert 0 <= s.divr <= 15 and 0 <= s.divf <= 127 and 1 <= s.divq <= 6
    assert abs(out - f_out) <= 0.01 * f_out
    assert s.f_out_mhz == pytest.approx(out)
    assert s.filter_range == 1      # f_PFD 12 MHz is below 17 MHz: range 1 (TN1251, icepll)


def test_pll_settings_match_the_project_trellis_and_icestorm_tools():
    # What yowasp-ecppll -i 25 -o 60 and yowasp-icepll -i 12 -o 30 print (run by hand).
    assert pll_settings("ecp5", 25, 60) == Ecp5Pll(25, clki_div=5, clkfb_div=12, clkop_div=10)
    assert pll_settings("ice40", 12, 30) == Ice40Pll(12, divr=0, divf=79, divq=5)
    # 100 MHz from 12: 12 * 67 / 8 = 100.5 MHz, the nearest (icepll: 100.500 achieved).
    assert pll_settings("ice40", 12, 100).f_out_mhz == pytest.approx(100.5)


@pytest.mark.parametrize("family, f_in, limit, expect", [
    # 25 * fb / clki <= 77.7 with f_PFD >= 3.125 MHz (clki <= 8): 3 is the largest ratio.
    ("ecp5", 25, 77.7, 75.0),
    ("ecp5", 25, 1000, 400.0),
    # 12 * (divf + 1) / 2**divq <= 25.6 with f_VCO >= 533 MHz: divf = 67, divq = 5: 25.5.
    ("ice40", 12, 25.6, 25.5),
])
def test_pll_at_most_gives_the_highest_clock_not_above_the_limit(family, f_in, limit, expect):
    assert pll_settings(family, f_in, limit, at_most=True).f_out_mhz == pytest.approx(expect)


@pytest.mark.parametrize("args, kwargs, message", [
    (("ecp5", 25, 48), {}, "clock 48 MHz is unreachable with the ecp5 PLL from a 25 MHz "
                           "oscillator within 1%; the nearest it makes are 46.875 and 50 MHz"),
    (("ice40", 12, 300), {}, "the nearest it makes are 270 MHz"),
    (("ice40", 12, 10), {"at_most": True}, "clock 10 MHz is unreachable with the ice40 PLL from "
                                          "a 12 MHz oscillator: its output is 16 to 275 MHz"),
    (("xilinx", 12, 10), {}, "PLL family must be one of ecp5, ice40, not 'xilinx'"),
])
def test_unreachable_clock_is_refused_in_one_line(args, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        pll_settings(*args, **kwargs)


def test_unreachable_is_a_value_error_of_its_own():
    with pytest.raises(PllUnreachable):
        pll_settings("ecp5", 100, 500)


def _board_clock_reset(press):
    """``BoardClock``'s ``rst`` after each of 60 oscillator edges at 1 MHz (no PLL), the board's
    reset button held during the edges in ``press``."""
    from amaranth import Signal
    from amaranth.lib import io
    from amaranth.sim import Simulator

    from hdl.board.pll import BoardClock

    pad, button = io.SimulationPort("i", 1), Signal()
    dut = BoardClock(pad, None, f_out_hz=1e6, reset=button)
    trace = []

    async def bench(ctx):
        for edge in range(60):
            ctx.set(button, edge in press)
            ctx.set(pad.i, 1)
            await ctx.delay(1e-9)
            trace.append(ctx.get(dut.rst))
            ctx.set(pad.i, 0)
            await ctx.delay(1e-9)
    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return trace


@pytest.mark.parametrize("press, low", [
    # 15 us at 1 MHz is 15 edges, after 2 edges of synchronizer and 1 to register: rst falls
    # with edge 17 after power-on, and with edge 27 when the button is held through edge 9.
    ((), [(17, 60)]),
    (range(10), [(27, 60)]),
    # A press at edge 30 is seen at edge 32 and ends 18 edges after its release.
    ((30,), [(17, 32), (48, 60)]),
])
def test_board_clock_holds_reset_for_the_power_on_delay(press, low):
    trace = _board_clock_reset(set(press))
    assert [i for i, rst in enumerate(trace) if not rst] == \
        [i for start, end in low for i in range(start, end)]


# --- the board table ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, device, package, clock_mhz, base", [
    ("ulx3s-85f", "LFE5U-85F", "BG381", 25, LatticeECP5Platform),
    ("ulx3s-25f", "LFE5U-25F", "BG381", 25, LatticeECP5Platform),
    ("icebreaker", "iCE40UP5K", "SG48", 12, LatticeICE40Platform),
    ("ecpix5-85", "LFE5UM5G-85F", "BG554", 100, LatticeECP5Platform),
])
def test_board_table_reads_the_amaranth_boards_platform(name, device, package, clock_mhz, base):
    b = board(name)
    assert (b.device, b.package, b.clock_mhz) == (device, package, clock_mhz)
    assert issubclass(b.platform_class, base)
    assert b.family == ("ecp5" if base is LatticeECP5Platform else "ice40")
    assert b.bitstream_suffix == (".bit" if b.family == "ecp5" else ".bin")
    platform = b.platform_class()
    uart = platform.lookup(b.uart, 0)
    assert {s.name for s in uart.ios} >= {"rx", "tx"}
    assert b.usb_uart
    if b.led is not None:
        platform.lookup(b.led, 0)


def test_icebreaker_oscillator_is_on_the_pll_pad():
    # SB_PLL40_PAD takes its input from pin 35 (IOT_46b_G0) of the UP5K SG48: the PLL's pad.
    assert board("icebreaker").platform_class().lookup("clk12", 0).ios[0].names == ["35"]


def test_unknown_board_names_the_boards():
    with pytest.raises(ValueError, match="unknown board 'nope'; boards are ulx3s-85f, "
                                         "ulx3s-25f, icebreaker, ecpix5-85"):
        board("nope")


def _pins(resource, lines=None):
    """The pin names of an amaranth-boards resource (of its subsignals named ``lines`` only)."""
    from amaranth.build import Pins, Subsignal
    for io in resource.ios:
        if isinstance(io, Pins):
            yield from io.names
        elif isinstance(io, Subsignal) and (lines is None or io.name in lines):
            yield from _pins(io)


@pytest.mark.parametrize("name", list(BOARDS))
def test_platform_top_uses_the_clock_reset_uart_and_led_pins(name):
    """Amaranth's plan for each board (no tool run): the constraints place exactly the
    oscillator, the reset button, the UART's rx and tx and the LED, and the PLL is there."""
    from hdl.board.platform import PlatformTop

    b, umdam = board(name), registry.get("umdam")
    platform = b.platform_class()
    pll = pll_settings(b.family, b.clock_mhz, 2 * b.clock_mhz)
    top = PlatformTop(umdam.elaborate(umdam.presets["small"]), pll=pll,
                      clock_hz=pll.f_out_mhz * 1e6, baud=115_200, uart=b.uart, led=b.led,
                      stimulus_depth=16, capture_depth=16)
    plan = platform.build(top, name="t", do_build=False)
    constraints = next(text for file, text in plan.files.items()
                       if file.endswith((".lpf", ".pcf")))
    placed = set(re.findall(r'SITE "(\w+)"|set_io \S+ (\w+)', constraints))
    resources = [platform.default_clk, platform.default_rst, b.led]
    pins = {pin for r in resources if r is not None for pin in _pins(platform.lookup(r, 0))}
    pins |= set(_pins(platform.lookup(b.uart, 0), ("rx", "tx")))
    assert {site or io for site, io in placed} == pins
    primitive = "EHXPLLL" if b.family == "ecp5" else "SB_PLL40_PAD"
    assert f"cell \\{primitive} " in plan.files["t.il"]


@pytest.mark.parametrize("family, width, depth, blocks", [
    ("ice40", 32, 256, 2), ("ice40", 64, 256, 4), ("ice40", 8, 512, 1), ("ice40", 1, 4096, 2),
    ("ecp5", 64, 256, 2), ("ecp5", 36, 512, 1), ("ecp5", 18, 1024, 1), ("ecp5", 40, 1024, 3),
])
def test_ram_blocks_takes_the_best_shape(family, width, depth, blocks):
    assert ram_blocks(family, width, depth) == blocks


def test_fit_from_the_size_estimate():
    umdam, edram, dxt = (registry.get(n) for n in ("umdam", "edram", "rdxe-dxt"))
    assert fit(board("icebreaker"), umdam, umdam.presets["small"], 256) == []
    assert fit(board("icebreaker"), edram, edram.presets["small"], 256)[0].startswith(
        "the harness cannot take it: Harness block (block) must have streams and plain outputs "
        "only")
    over = fit(board("ecpix5-85"), dxt, dxt.presets["paper"], 256)
    assert over[0].endswith("storage bits (limit 3,833,856)")
    assert "570 multipliers (limit 156)" in over        # the normalizer a block a lane
    assert fit(board("ecpix5-85"), dxt, dxt.presets["paper"], 256, memory_only=True) == over[:1]


def test_board_list_names_each_board_and_what_fits(capsys):
    code, out, _ = run(capsys, "board", "list", "-v")
    assert code == 0
    for b in BOARDS.values():
        assert f"| {b.name} | {b.device} | {b.package} |" in out
    assert "| umdam | small, default, paper | small, default, paper | small, default, paper |" \
           in out
    assert "| edram | – | – | – | – |" in out
    assert "from the registry's size estimate" in out
    assert "- rdxe-dxt on icebreaker: small: " in out
    # Over on the estimated multipliers (172 of 156) by less than the estimate's tolerance.
    assert "| rdxe-dxe | small? | – | – | small? |" in out
    assert "`?`: over the device on the estimate's multipliers or netlist cells" in out


# --- `memwall board build`: errors --------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (("--board", "nope"), "unknown board 'nope'; boards are ulx3s-85f, ulx3s-25f, icebreaker, "
                          "ecpix5-85"),
    (("--board", "icebreaker", "--clock", "300"),
     "clock 300 MHz is unreachable with the ice40 PLL from a 12 MHz oscillator within 1%; the "
     "nearest it makes are 270 MHz"),
    (("--board", "icebreaker", "--clock", "fast"), "--clock takes a positive number of MHz, "
                                                   "not 'fast'"),
    (("--board", "icebreaker", "--depth", "0"), "--depth takes items per stream from 1 to "
                                                "32768, not '0'"),
    (("--board", "icebreaker", "--baud", "-9"), "--baud takes a positive whole number of bits "
                                                "per second, not '-9'"),
    (("--board", "icebreaker", "--baud", "2500000", "--clock", "12"),
     "--baud 2500000 on icebreaker: Baud rate 2500000 from a 12000000.0 Hz clock is off by 4.0% "
     "at divisor 5; at most 2% is allowed"),
    (("--board", "icebreaker", "--preset", "huge"), "unknown preset 'huge' for block umdam"),
])
def test_board_build_bad_input_is_one_line(capsys, tmp_path, argv, message):
    code, out, err = run(capsys, "board", "build", "umdam", "--preset", "small", *argv,
                         "-o", str(tmp_path / "out"))
    assert code == 2
    assert err.startswith("memwall: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("block, board_name, message", [
    ("rdxe-dxt", "icebreaker", "rdxe-dxt (small) does not fit icebreaker (iCE40UP5K): 142,958 "
                               "storage bits (limit 122,880) of block RAM, with the harness's "
                               "memories at --depth 256"),
    ("edram", "ulx3s-85f", "edram cannot go on a board: the harness cannot take it: Harness "
                           "block (block) must have streams and plain outputs only, not the "
                           "plain input(s) std.rdata, kv_mant.rdata, qo_mant.rdata"),
])
def test_board_build_refuses_a_block_before_building(capsys, tmp_path, block, board_name,
                                                     message):
    code, _, err = run(capsys, "board", "build", block, "--preset", "small",
                       "--board", board_name, "-o", str(tmp_path))
    assert code == 2
    assert err == f"memwall: error: {message}\n"
    assert list(tmp_path.iterdir()) == []


def test_board_build_missing_tool_is_one_line(capsys, tmp_path, monkeypatch):
    tools = dict(board_build.TOOLS, ice40=dict(board_build.TOOLS["ice40"],
                                               ICEPACK="yowasp-icepack-gone"))
    monkeypatch.setattr(board_build, "TOOLS", tools)
    code, _, err = run(capsys, "board", "build", "umdam", "--preset", "small", "--board",
                       "icebreaker", "-o", str(tmp_path))
    assert code == 2
    assert err.startswith("memwall: error: yowasp-icepack-gone is not installed; ")
    assert err.count("\n") == 1 and not (tmp_path / "board.json").exists()


def _fake_place(fmaxes, calls):
    """A stand-in for one run of the Amaranth plan that reports the given Fmax values in turn
    (the PLL settings of each run are recorded in ``calls``)."""
    def place(board, top, *, name, folder, env, progress):
        calls.append(top.pll)
        folder.mkdir(parents=True)
        (folder / f"{name}{board.bitstream_suffix}").write_bytes(b"bits")
        return board_build.Placement(folder, name, fmaxes[len(calls) - 1],
                                     dict(luts=1, ffs=2, dsps=0, brams=3))
    return place


def test_missed_clock_is_refused_and_nothing_written(capsys, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(board_build, "_place", _fake_place([20.0], calls))
    code, _, err = run(capsys, "board", "build", "umdam", "--preset", "small", "--board",
                       "icebreaker", "--clock", "30", "-o", str(tmp_path))
    assert code == 2 and len(calls) == 1 and calls[0].f_out_mhz == 30
    assert err.splitlines()[-1] == (
        "memwall: error: umdam on icebreaker misses the 30 MHz clock: nextpnr's Fmax is 20.0 MHz "
        "(slack -16.67 ns); give --clock 18 or less, or no --clock for the highest met")
    assert not (tmp_path / "board.json").exists() and not (tmp_path / "umdam.bin").exists()


def test_default_clock_places_again_lower_when_the_margin_is_not_enough(capsys, tmp_path,
                                                                        monkeypatch):
    calls = []
    # Probe at 12 MHz: 40 MHz; 90 % is 36 MHz, missed at 34; 90 % of 34 is 30.6 -> 30.375.
    monkeypatch.setattr(board_build, "_place", _fake_place([40.0, 34.0, 31.0], calls))
    code, out, _ = run(capsys, "board", "build", "umdam", "--preset", "small", "--board",
                       "icebreaker", "-o", str(tmp_path))
    assert code == 0
    assert [c and c.f_out_mhz for c in calls] == [None, 36.0, 30.375]
    record = json.loads((tmp_path / "board.json").read_text())
    assert (record["clock_mhz"], record["fmax_mhz"], record["probe_fmax_mhz"]) == \
        (30.375, 31.0, 40.0)
    assert record["placements"] == 3 and record["timing_met"] is True
    assert record["bitstream"] == str(tmp_path / "umdam.bin")
    assert "| icebreaker | iCE40UP5K | 30.375 | 31.0 | met | 1 | 2 | 0 | 3 |" in out


def test_default_clock_keeps_the_oscillator_when_the_pll_cannot_go_lower(capsys, tmp_path,
                                                                         monkeypatch):
    calls = []
    # 90 % of 15 MHz is 13.5: below the iCE40 PLL's 16 MHz, above the 12 MHz oscillator.
    monkeypatch.setattr(board_build, "_place", _fake_place([15.0], calls))
    code, _, _ = run(capsys, "board", "build", "umdam", "--preset", "small", "--board",
                     "icebreaker", "-o", str(tmp_path))
    assert code == 0 and calls == [None]
    record = json.loads((tmp_path / "board.json").read_text())
    assert record["clock_mhz"] == 12 and record["pll"] is None


def test_overfull_device_is_one_line_with_the_utilisation(capsys, tmp_path, monkeypatch):
    def overfull(argv, log_path, cwd, **kwargs):
        (Path(cwd) / "umdam.tim").write_text("Info: Device utilisation:\n"
                                             "Info: \t  ICESTORM_LC:  6000/  5280   113%\n"
                                             "Info: \t ICESTORM_RAM:     5/    30    16%\n")
        return 1
    monkeypatch.setattr(board_build, "run_logged", overfull)
    code, _, err = run(capsys, "board", "build", "umdam", "--preset", "small", "--board",
                       "icebreaker", "--clock", "12", "-o", str(tmp_path))
    assert code == 2
    assert err.splitlines()[-1] == ("memwall: error: the design does not fit icebreaker "
                                    "(iCE40UP5K): ICESTORM_LC 6000/5280 (114 %)")
    assert not (tmp_path / "board.json").exists()


# --- real bitstreams ----------------------------------------------------------------------------

def _built(capsys, tmp_path, block, board_name, *extra):
    code, out, err = run(capsys, "board", "build", block, "--preset", "small", "--board",
                         board_name, *extra, "-o", str(tmp_path))
    assert code == 0, err
    record = json.loads((tmp_path / "board.json").read_text())
    b = board(board_name)
    bitstream = Path(record["bitstream"])
    assert bitstream == tmp_path / f"{registry.get(block).top}{b.bitstream_suffix}"
    assert bitstream.stat().st_size > 10_000
    assert record["timing_met"] is True and record["fmax_mhz"] >= record["clock_mhz"]
    assert (record["board"], record["device"]) == (board_name, b.device)
    assert not list(tmp_path.glob(".partial-*"))
    return record, bitstream


def _is_ice40_bitstream(record, bitstream):
    """An iCE40UP5K image (the preamble 0x7EAA997E after the comment, 104,090 bytes) of a design
    behind the PLL, its UART divided from the PLL's clock."""
    data = bitstream.read_bytes()
    assert b"\x7e\xaa\x99\x7e" in data[:64] and len(data) == 104_090
    assert record["pll"]["primitive"] == "SB_PLL40_PAD"
    assert record["uart_divisor"] == round(record["clock_mhz"] * 1e6 / 115_200)
    assert record["luts"] > 0 and record["ffs"] > 0 and record["brams"] >= 4


def test_umdam_bitstream_for_icebreaker_at_a_given_clock(capsys, tmp_path):
    """The whole flow at a given clock: one placement, behind the PLL."""
    record, bitstream = _built(capsys, tmp_path, "umdam", "icebreaker", "--clock", "24")
    _is_ice40_bitstream(record, bitstream)
    assert record["clock_mhz"] == 24 and record["probe_fmax_mhz"] is None
    assert record["placements"] == 1


# With --slow (a second placement, 30 s): the first placement's Fmax choosing the clock is
# checked in make test with the placements stubbed (test_default_clock_* above), and the flow
# itself by the given clock's build.
@pytest.mark.slow
def test_umdam_bitstream_for_icebreaker(capsys, tmp_path):
    """The whole flow, default clock: a placement at 12 MHz, then the PLL at 90 % of its Fmax."""
    record, bitstream = _built(capsys, tmp_path, "umdam", "icebreaker")
    _is_ice40_bitstream(record, bitstream)
    assert record["clock_mhz"] <= 0.9 * record["probe_fmax_mhz"] + 1e-9


@pytest.mark.slow       # ~50 s; the icebreaker bitstreams cover the flow on iCE40
@pytest.mark.parametrize("board_name", ["ulx3s-25f", "ulx3s-85f"])
def test_umdam_bitstream_for_ulx3s(capsys, tmp_path, board_name):
    record, bitstream = _built(capsys, tmp_path, "umdam", board_name)
    assert record["pll"]["primitive"] == "EHXPLLL"
    _is_ecp5_bitstream(bitstream, board(board_name).device)


def _is_ecp5_bitstream(bitstream, device):
    """ecppack's header comment names the part; the preamble 0xBDB3 follows its 0xFF padding."""
    head = bitstream.read_bytes()[:64]
    assert head.startswith(b"\xff\x00Part: " + device.encode() + b"-")
    assert b"\xff\xff\xbd\xb3" in head


@pytest.mark.slow       # ~60 s; the icebreaker bitstreams cover the flow on iCE40
def test_requant_bitstream_for_ecpix5_at_a_given_clock(capsys, tmp_path):
    record, bitstream = _built(capsys, tmp_path, "arith-requant", "ecpix5-85", "--clock", "50")
    _is_ecp5_bitstream(bitstream, "LFE5UM5G-85F")
    assert record["clock_mhz"] == 50 and record["pll"]["primitive"] == "EHXPLLL"
    assert record["probe_fmax_mhz"] is None and record["placements"] == 1
