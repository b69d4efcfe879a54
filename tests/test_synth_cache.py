"""synth/cache.py: keys, entries, the cached synthesize, and `memwall synth` through the cache."""

import dataclasses
import json

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
    assert _key(seeds=1, device=None, timeout=5, progress=print) == base
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
