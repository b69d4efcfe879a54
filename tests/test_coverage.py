"""Code coverage (``make coverage``, cocotb_tests/coverage.py): reading Verilator's points,
merging runs of one Verilog, the summary of every registered block, and one real run."""

from __future__ import annotations

import json

import pytest

from cocotb_tests import coverage
from cocotb_tests.launcher import coverage_requested, run_block
from memwall import registry


def _point(kind: str, file: str, line: int, column: int, count: int, signal: str = "") -> str:
    fields = {"f": file, "l": str(line), "n": str(column), "t": kind.removeprefix("v_"),
              "page": f"{kind}/top", "o": signal or "block", "h": "top"}
    body = "\x01".join(f"{k}\x02{v}" for k, v in fields.items())
    return f"C '\x01{body}' {count}"


def _dat(path, points) -> None:
    path.write_text("# SystemC::Coverage-3\n" + "\n".join(points) + "\n")


def _build(tmp_path, block="umdam", folder="0000000000-verilator", runs=()):
    where = tmp_path / "cocotb" / block / folder
    where.mkdir(parents=True)
    (where / "params.json").write_text(json.dumps({"block": block, "params": {}}))
    (where / f"{registry.get(block).top}.v").write_text("".join(f"line {i}\n"
                                                             for i in range(1, 41)))
    for i, points in enumerate(runs):
        _dat(where / f"coverage-{i}.dat", points)
    return where


def test_points_are_read_by_kind_and_runs_of_one_verilog_merge(tmp_path):
    v = "/any/where/umdam.v"
    _build(tmp_path, runs=[
        [_point("v_line", v, 3, 1, 0), _point("v_line", v, 5, 1, 7),
         _point("v_toggle", v, 9, 1, 0, "a[0]:0->1"), _point("v_branch", v, 12, 1, 0),
         _point("v_line", "/models/MULT18X18D.v", 2, 1, 0)],
        [_point("v_line", v, 3, 1, 2), _point("v_toggle", v, 9, 1, 0, "a[0]:0->1"),
         _point("v_branch", v, 12, 1, 0)],
    ])
    (build,) = coverage.collect(tmp_path / "cocotb")["umdam"]
    assert build.runs == 2
    # Line 3 is reached by the second run only; the device model's point is not the design's.
    assert build.counts("line") == (2, 2)
    assert build.counts("toggle") == (0, 1)
    assert build.counts("branch") == (0, 1)


def test_the_summary_names_every_registered_block(tmp_path):
    v = "umdam.v"
    _build(tmp_path, runs=[[_point("v_line", v, 1, 1, 1), _point("v_line", v, 2, 1, 0),
                            _point("v_toggle", v, 4, 1, 3, "b:1->0")]])
    _build(tmp_path, folder="1111111111-verilator",
           runs=[[_point("v_line", v, 1, 1, 0), _point("v_line", v, 2, 1, 0)]])
    found = coverage.collect(tmp_path / "cocotb")
    summary = coverage.summarize(found)
    assert set(summary["blocks"]) == {b.name for b in registry.blocks()}
    umdam = summary["blocks"]["umdam"]
    # Two Verilogs of one block: their points add up, 1 of 4 lines and 1 of 1 toggle.
    assert (umdam["builds"], umdam["runs"], umdam["line"], umdam["toggle"]) == (2, 2, 25.0, 100.0)
    assert umdam["line_points"] == {"hit": 1, "total": 4}
    missing = summary["blocks"]["edram"]
    assert missing["line"] is None and "no Verilator run" in missing["reason"]
    text = coverage.report(summary, found, 1.0)
    assert "| umdam | 2 | 2 | 25.0 % (1/4) |" in text
    assert "## umdam: 3 uncovered lines" in text


def test_a_hole_names_the_amaranth_source_of_its_line(tmp_path):
    where = _build(tmp_path, runs=[[_point("v_line", "umdam.v", 4, 1, 0)]])
    (where / "umdam.v").write_text('  (* src = "hdl/x.py:12" *)\n  always @*\n  begin\n'
                                 '    a = b;\n  end\n')
    (build,) = coverage.collect(tmp_path / "cocotb")["umdam"]
    assert coverage.holes(build) == [("hdl/x.py:12", 4, "a = b;")]


def test_coverage_is_verilator_only_and_on_request(monkeypatch):
    monkeypatch.delenv("MEMWALL_COVERAGE", raising=False)
    assert not coverage_requested("verilator")
    monkeypatch.setenv("MEMWALL_COVERAGE", "1")
    assert coverage_requested("verilator") and not coverage_requested("icarus")


# With --slow (27 s, a Verilator build with coverage): `make coverage` runs it on every case; the
# reading of coverage files is checked in make test on recorded ones (the tests above).
@pytest.mark.slow
def test_a_verilator_run_writes_its_points(monkeypatch):
    """One real run: the smallest block under Verilator with coverage leaves a coverage file in
    its own build folder, and every kind has points."""
    monkeypatch.setenv("MEMWALL_COVERAGE", "1")
    block = registry.get("arith-requant")
    results = run_block(block.name, block.parameters("small"), "verilator")
    dats = list(results.parent.glob("coverage-*.dat"))
    assert dats, f"no coverage file in {results.parent}"
    points = coverage.read_points(dats[-1])
    for kind in ("line", "branch", "toggle"):
        counts = [count for key, count in points.items() if key[0] == kind]
        assert counts and max(counts) > 0, f"no {kind} point reached in {dats[-1]}"


def test_the_tools_missing_is_one_line(monkeypatch):
    monkeypatch.setattr(coverage.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="genhtml is missing: install Debian's lcov"):
        coverage._tool("genhtml", "lcov")


def test_functional_bins_are_sampled_saved_and_merged_over_runs(tmp_path):
    """Two runs' coverpoints: a bin is hit when either run hit it, and the summary lists the
    bins no run reached."""
    from cocotb_tests import functional

    sample = functional.sampler(
        {"testblock.kind": (lambda item: item["kind"], ("a", "b", "c")),
         "testblock.size": (lambda item: functional.value_class(item["size"], 4),
                            functional.value_classes(4))},
        {"testblock.kind_x_size": ["testblock.kind", "testblock.size"]})
    sample({"kind": "a", "size": 0})
    functional.save(tmp_path / "run1.json")
    sample({"kind": "b", "size": 15})           # the second run's file holds both samples
    functional.save(tmp_path / "run2.json")
    merged, excluded = functional.merge([tmp_path / "run1.json", tmp_path / "run2.json"])
    assert merged["testblock.kind"] == {"'a'": 2, "'b'": 1, "'c'": 0}
    assert merged["testblock.size"] == {"'zero'": 2, "'between'": 0, "'max'": 1}
    assert merged["testblock.kind_x_size"]["('b', 'max')"] == 1
    assert len(merged["testblock.kind_x_size"]) == 9
    summary = coverage.summarize({}, {"umdam": {
        "bins": {k: v for k, v in merged.items() if k.startswith("testblock.")},
        "excluded": {k: v for k, v in excluded.items() if k.startswith("testblock.")}}})
    fn = summary["blocks"]["umdam"]["functional"]
    assert (fn["points"], fn["bins"], fn["hit"], fn["excluded"]) == (3, 15, 6, {})
    assert "testblock.kind 'c'" in fn["missed"] and len(fn["missed"]) == 9
    assert summary["blocks"]["edram"]["functional"] is None


def test_an_unreachable_bin_is_excluded_with_its_reason(tmp_path):
    """A testbench that shows a bin unreachable leaves it out and says why; the report lists it
    beside the block's table row."""
    from cocotb_tests import functional

    sample = functional.sampler({"umdam.test_point": (lambda item: item, ("once", "never"))},
                                unreachable={"umdam.test_point":
                                             {"never": "the parameters forbid it"}})
    sample("once")
    where = tmp_path / "cocotb" / "umdam" / "0-icarus"
    where.mkdir(parents=True)
    functional.save(where / "functional-0.json")
    points = coverage.collect_functional(tmp_path / "cocotb")["umdam"]
    summary = coverage.summarize({}, {"umdam": points})
    fn = summary["blocks"]["umdam"]["functional"]
    assert fn["excluded"] == {"umdam.test_point 'never'": "the parameters forbid it"}
    assert fn["missed"] == [] and fn["hit"] == fn["bins"] == 1
    assert "- `umdam.test_point 'never'`: the parameters forbid it" in \
        coverage.report(summary, {}, 1.0)


def test_a_relation_hits_several_bins_and_a_cross_ignores_bins(tmp_path):
    from cocotb_tests import functional

    sample = functional.sampler(
        {"testrel.seen": (lambda item: item["seen"], ("x", "y", "z"), lambda v, b: b in v),
         "testrel.kind": (lambda item: item["kind"], ("a", "b"))},
        {"testrel.seen_x_kind": ["testrel.kind", "testrel.kind"]},
        {"testrel.seen_x_kind": {("b", "b"): "a kind never meets itself as b"}})
    sample({"seen": ["x", "z"], "kind": "a"})
    hits = functional.bins()
    assert hits["testrel.seen"] == {"'x'": 1, "'y'": 0, "'z'": 1}
    assert "('b', 'b')" not in hits["testrel.seen_x_kind"]


def test_unreachable_arms_leave_the_line_figure_and_are_listed(tmp_path):
    """A constant select's other arms are not counted (1 of 1 line hit, not 1 of 4); were a run
    to reach one, the report says the analysis is wrong."""
    verilog = ["  function [7:0] _9_;", "    input [7:0] a;", "    input [15:0] b;",
               "    input [1:0] s;", "    casez (s)", "      2'b?1:", "        _9_ = b[7:0];",
               "      2'b1?:", "        _9_ = b[15:8];", "      default:", "        _9_ = a;",
               "    endcase", "  endfunction", "  assign y = _9_(8'h00, { p, q }, 2'h1);"]
    v = "umdam.v"
    where = _build(tmp_path, runs=[[_point("v_line", v, 6, 1, 5), _point("v_line", v, 8, 1, 0),
                                    _point("v_line", v, 10, 1, 0)]])      # the arms' lines
    (where / v).write_text("\n".join(verilog) + "\n")
    found = coverage.collect(tmp_path / "cocotb")
    entry = coverage.summarize(found)["blocks"]["umdam"]
    assert entry["line_points"] == {"hit": 1, "total": 1}
    assert entry["line_excluded"]["points"] == 2 and entry["line_excluded"]["hit"] == 0
    assert "2 line points excluded as unreachable" in coverage.report(
        coverage.summarize(found), found, 1.0)
    _dat(where / "coverage-9.dat", [_point("v_line", v, 8, 1, 1)])
    found = coverage.collect(tmp_path / "cocotb")
    summary = coverage.summarize(found)
    assert summary["blocks"]["umdam"]["line_excluded"]["hit"] == 1
    assert "the analysis is wrong there" in coverage.report(summary, found, 1.0)
