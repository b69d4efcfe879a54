"""synth/cache.py: keys, entries, the cached synthesize, and `memwall synth` through the cache."""

import dataclasses
import json
from pathlib import Path

import pytest

import synth.cache as sc
import synth.flow
from memwall.cli import main
from synth.flow import SynthError, SynthReport

VERILOG = "module t(input a, output b); assign b = a; endmodule\n"


def _report(**changes) -> SynthReport:
    fields = dict(target="ecp5", top="t", cells=12, cells_by_type={"LUT4": 10, "TRELLIS_FF": 2},
                  luts=10, ffs=2, dsps=0, brams=0, fmax_mhz=123.4, freq_mhz=100.0, seconds=2.5,
                  note="n", device="LFE5U-25F CABGA256",
                  utilization={"TRELLIS_COMB": (10, 24288)}, fmax_mhz_seeds=(120.0, 123.4, 130.1),
                  critical_path=("a", "b"))
    return SynthReport(**{**fields, **changes})


def _key(verilog=VERILOG, top="t", target="ecp5", **options):
    return sc.cache_key(sc.key_inputs(verilog, top, target, options))


def test_a_report_survives_its_dict():
    report = _report()
    again = SynthReport.from_dict(json.loads(json.dumps(report.as_dict())))
    assert again == report and again.slack_ns == report.slack_ns
    bare = _report(fmax_mhz=None, fmax_mhz_seeds=(), critical_path=None, utilization={})
    assert SynthReport.from_dict(bare.as_dict()) == bare


def test_the_key_follows_every_input_and_only_those(monkeypatch):
    base = _key()
    assert _key() == base
    assert _key(freq_mhz=100) == _key(freq_mhz=100.0) == base      # a default given is a default
    assert _key(seeds=1, device=None, timeout=5, route_limit=60, progress=print) == base
    different = [_key(VERILOG + "\n"), _key(top="u"), _key(target="ice40"), _key(freq_mhz=120),
                 _key(seeds=3), _key(timing_weight=60), _key(device="LFE5U-45F"),
                 _key(wrap=False)]
    assert len({base, *different}) == len(different) + 1
    monkeypatch.setattr(sc, "tool_versions",
                        lambda packages: {p: "0.0-other" for p in packages})
    assert _key() != base
    with pytest.raises(TypeError, match="no option colour"):
        _key(colour="red")


def test_the_generic_key_ignores_nextpnr(monkeypatch):
    generic = _key(target="generic")
    monkeypatch.setattr(sc, "tool_versions", lambda packages: {
        p: "9.9" if "nextpnr" in p else "1.0" for p in packages})
    changed = _key(target="generic")
    monkeypatch.setattr(sc, "tool_versions", lambda packages: {
        p: "8.8" if "nextpnr" in p else "1.0" for p in packages})
    assert _key(target="generic") == changed != generic


def test_entries_are_whole_files_and_a_broken_one_is_a_miss(tmp_path):
    cache = sc.SynthCache(tmp_path / "c")
    report, key = _report(), _key()
    assert cache.get(key) is None
    assert cache.put(key, report, {"why": "test"})
    got = cache.get(key)
    assert got.cached and not report.cached and got == _report(cached=True)
    assert [p.name for p in cache.path(key).parent.iterdir()] == [f"{key}.json"]
    assert sc.SynthCache(tmp_path / "c", read=False).get(key) is None
    cache.path(key).write_text('{"report": {"target": ')            # cut short
    assert cache.get(key) is None
    (tmp_path / "file").write_text("")
    assert not sc.SynthCache(tmp_path / "file").put(key, report)      # not a folder: no entry


def test_the_folder_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(sc.ENV_CACHE, raising=False)
    assert sc.SynthCache().folder == sc.DEFAULT_FOLDER
    monkeypatch.setenv(sc.ENV_CACHE, str(tmp_path))
    assert sc.SynthCache().folder == tmp_path
    assert sc.SynthCache(tmp_path / "x").folder == tmp_path / "x"


def test_synthesize_runs_the_tools_once_per_key(tmp_path, monkeypatch):
    calls = []

    def fake(verilog, top, target, workdir, **options):
        calls.append(verilog)
        if "broken" in verilog:
            raise SynthError("yosys synth_ecp5", None, "broken")
        return _report(cells=len(verilog))
    monkeypatch.setattr(synth.flow, "synthesize", fake)
    cache = sc.SynthCache(tmp_path / "c")
    first = sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=cache, freq_mhz=100)
    lines = []
    again = sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=cache, progress=lines.append)
    assert len(calls) == 1 and again == dataclasses.replace(first, cached=True)
    assert lines == [f"cached: {cache.path(_key())}"]
    sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=cache, seeds=2)
    sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=None)
    assert len(calls) == 3
    refreshed = sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w",
                              cache=sc.SynthCache(tmp_path / "c", read=False))
    assert len(calls) == 4 and not refreshed.cached
    with pytest.raises(SynthError):
        sc.synthesize("broken", "t", "ecp5", tmp_path / "w", cache=cache)
    with pytest.raises(SynthError):                                    # a failure is not stored
        sc.synthesize("broken", "t", "ecp5", tmp_path / "w", cache=cache)
    assert len(calls) == 6


def test_a_report_with_an_unrouted_seed_is_not_stored(tmp_path, monkeypatch):
    """A seed stopped at the routing time limit may route on a faster machine: its report is
    returned but not stored; a report whose seeds all routed is."""
    calls = []

    def fake(verilog, top, target, workdir, **options):
        calls.append(options)
        return _report(fmax_mhz_seeds=(120.0, 123.4), unrouted_seeds=(2,), fmax_mhz=120.0)
    monkeypatch.setattr(synth.flow, "synthesize", fake)
    cache = sc.SynthCache(tmp_path / "c")
    for _ in range(2):
        got = sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=cache, seeds=3,
                            route_limit=600)
        assert got.unrouted_seeds == (2,) and not got.cached
    assert len(calls) == 2 and calls[0]["route_limit"] == 600
    monkeypatch.setattr(synth.flow, "synthesize", lambda *a, **o: calls.append(o) or _report())
    sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=cache, seeds=3, route_limit=600)
    assert sc.synthesize(VERILOG, "t", "ecp5", tmp_path / "w", cache=cache, seeds=3).cached
    assert len(calls) == 3


def test_synth_answers_a_second_time_from_the_cache(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(sc.ENV_CACHE, str(tmp_path / "cache"))
    argv = ["synth", "arith-idot", "--preset", "small", "--target", "generic", "--json",
            "-o", str(tmp_path / "out")]
    runs = []
    for extra in ([], [], ["--no-cache"]):
        assert main(argv + extra) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert [r["cached"] for r in runs] == [False, True, False]
    assert runs[0]["cells_by_type"] == runs[1]["cells_by_type"] == runs[2]["cells_by_type"]
    assert runs[0]["cells"] > 0 and runs[1]["seconds"] == runs[0]["seconds"]
    entries = list((tmp_path / "cache").rglob("*.json"))
    assert len(entries) == 1
    assert json.loads(entries[0].read_text())["inputs"]["top"] == "arith_idot"


# --- the lint cache ------------------------------------------------------------------------------

NARROW = "module narrow(input wire [7:0] a, output wire [3:0] b);\n  assign b = a;\nendmodule\n"


@pytest.fixture
def verilator_runs(monkeypatch):
    """Verilator's runs (subprocess.run of a verilator, counted and passed on)."""
    import subprocess

    runs = []
    real = subprocess.run

    def counted(argv, **kwargs):
        if Path(str(argv[0])).name == "verilator":
            runs.append(argv)
        return real(argv, **kwargs)
    monkeypatch.setattr(subprocess, "run", counted)
    return runs


def test_a_lint_cache_hit_is_the_same_report_without_verilator(tmp_path, verilator_runs):
    cache = sc.SynthCache(tmp_path / "c")
    fresh = sc.lint(NARROW, "narrow", tmp_path / "a", cache=cache)
    assert len(verilator_runs) == 1 and not fresh.cached and fresh.count("WIDTH") == 1
    hit = sc.lint(NARROW, "narrow", tmp_path / "b", cache=cache)
    assert len(verilator_runs) == 1 and hit.cached
    assert hit.summary() == fresh.summary() and hit.messages == fresh.messages
    assert dataclasses.replace(hit, log_path=fresh.log_path) == fresh
    # The hit leaves the folder as a run does: the source and Verilator's log.
    assert hit.log_path == tmp_path / "b" / "lint.log"
    assert hit.log_path.read_text() == fresh.log_path.read_text()
    assert (tmp_path / "b" / "narrow.v").read_text() == NARROW
    waived = sc.lint(NARROW, "narrow", tmp_path / "c", cache=cache, waivers=True)
    assert len(verilator_runs) == 2 and waived.summary() != fresh.summary()
    assert sc.lint(NARROW, "narrow", tmp_path / "d", cache=cache, waivers=True).cached
    assert (tmp_path / "d" / "narrow.vlt").is_file()


def test_a_changed_verilog_waiver_flag_or_verilator_misses(tmp_path, monkeypatch,
                                                          verilator_runs):
    import synth.lint

    cache = sc.SynthCache(tmp_path / "c")
    sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache)
    sc.lint(NARROW + "// changed\n", "narrow", tmp_path / "w", cache=cache)
    sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache, extra_args=["-Wno-WIDTHTRUNC"])
    assert len(verilator_runs) == 3
    monkeypatch.setitem(synth.lint.WAIVERS, "UNDRIVEN", "a new waiver: another waiver file")
    assert not sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache).cached
    monkeypatch.setattr(sc, "tool_versions", lambda packages: {p: "9.9" for p in packages})
    assert not sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache).cached
    assert len(verilator_runs) == 5
    # A file among the arguments is not in the key: such a lint always runs.
    (tmp_path / "w" / "other.v").write_text("module other; endmodule\n")
    for _ in range(2):
        sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache, extra_args=["other.v"])
    assert len(verilator_runs) == 7


@pytest.mark.parametrize("entry", [
    '{"result": {"report": {"errors": 0, "warn',                               # cut short
    '{"result": {"report": {"errors": "0", "warnings": 1, "by_code": {}, "messages": [], '
    '"returncode": 0}, "log": ""}}',                                            # a wrong type
    '{"result": {"report": {"errors": 0, "warnings": 1, "by_code": {}, "messages": [], '
    '"returncode": 0}}}',                                                       # no log
    '{"result": {"log": "x"}}', '[]'])
def test_a_corrupt_lint_entry_is_a_miss_and_is_rewritten(tmp_path, verilator_runs, entry):
    cache = sc.SynthCache(tmp_path / "c")
    fresh = sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache)
    path = cache.path(sc.cache_key(sc.lint_inputs(NARROW, "narrow")))
    path.write_text(entry)
    again = sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache)
    assert len(verilator_runs) == 2 and not again.cached and again == fresh
    assert sc.lint(NARROW, "narrow", tmp_path / "w", cache=cache).cached


def test_no_cache_lints_again_and_refreshes_the_entry(tmp_path, verilator_runs):
    sc.lint(NARROW, "narrow", tmp_path / "w", cache=sc.SynthCache(tmp_path / "c"))
    refreshed = sc.lint(NARROW, "narrow", tmp_path / "w",
                        cache=sc.SynthCache(tmp_path / "c", read=False))
    sc.lint(NARROW, "narrow", tmp_path / "w", cache=None)
    assert len(verilator_runs) == 3 and not refreshed.cached
    assert sc.lint(NARROW, "narrow", tmp_path / "w", cache=sc.SynthCache(tmp_path / "c")).cached


def test_a_warm_build_lints_from_the_cache_with_the_same_report(capsys, tmp_path,
                                                                verilator_runs):
    argv = ["build", "--block", "umdam", "--preset", "small", "--target", "generic",
            "-o", str(tmp_path / "o")]
    reports = []
    for extra in ([], [], ["--no-cache"]):
        assert main(argv + extra) == 0
        lint = (tmp_path / "o" / "report.md").read_text().split("## Lint")[1].split("\n## ")[0]
        reports.append([line for line in lint.splitlines() if line.startswith("| ")])
        capsys.readouterr()
    assert len(verilator_runs) == 2                          # the first and the --no-cache run
    assert reports[0] == reports[1] == reports[2]
    assert any(line.startswith("| umdam | 0 | ") for line in reports[0])
    assert (tmp_path / "o" / "umdam" / "lint" / "lint.log").is_file()


# --- the cache of Yosys' Verilog for Amaranth's RTLIL ---------------------------------------------

@pytest.fixture
def yosys_runs(monkeypatch):
    """Yosys' runs for synth.cache.yosys_script (counted and passed on)."""
    runs = []
    real = sc.run_yosys_script

    def counted(command, script):
        runs.append(script)
        return real(command, script)
    monkeypatch.setattr(sc, "run_yosys_script", counted)
    return runs


def _rtlil(width: int = 8) -> str:
    from amaranth import Module, Signal
    from amaranth.back import rtlil

    m = Module()
    a, q = Signal(width), Signal(width)
    m.d.sync += q.eq(a + 1)
    return rtlil.convert(m, name="inc", ports=[a, q])


def test_the_verilog_of_rtlil_comes_from_the_cache_the_second_time(tmp_path, yosys_runs,
                                                                  monkeypatch):
    from memwall.registry import to_verilog

    cache = sc.SynthCache(tmp_path / "c")
    fresh = to_verilog(_rtlil(), cache)
    assert "module inc" in fresh and len(yosys_runs) == 1
    assert to_verilog(_rtlil(), cache) == fresh and len(yosys_runs) == 1
    assert to_verilog(_rtlil(), None) == fresh and len(yosys_runs) == 2
    to_verilog(_rtlil(9), cache)                                   # another design
    to_verilog(_rtlil(), sc.SynthCache(tmp_path / "c", read=False))   # --no-cache
    assert len(yosys_runs) == 4
    monkeypatch.setattr(sc, "yosys_version", lambda command: "yosys 9.9")   # another Yosys
    assert to_verilog(_rtlil(), cache) == fresh and len(yosys_runs) == 5


def test_a_corrupt_or_failed_yosys_entry_is_a_miss(tmp_path, yosys_runs):
    from memwall.registry import to_verilog

    cache = sc.SynthCache(tmp_path / "c")
    fresh = to_verilog(_rtlil(), cache)
    (path,) = (tmp_path / "c").rglob("*.json")
    for entry in ('{"result": {"stdout": "mod', '{"result": {"stdout": 1, "stderr": ""}}'):
        path.write_text(entry)
        assert to_verilog(_rtlil(), cache) == fresh
    assert len(yosys_runs) == 3
    with pytest.raises(RuntimeError, match="Yosys failed to write Verilog"):
        to_verilog("this is no RTLIL\n", cache)
    with pytest.raises(RuntimeError, match="Yosys failed to write Verilog"):
        to_verilog("this is no RTLIL\n", cache)                    # a failure is not stored
    assert len(yosys_runs) == 5 and len(list((tmp_path / "c").rglob("*.json"))) == 1
