"""Code coverage of the cocotb regression: ``make coverage``.

Runs the cocotb regression with coverage (``MEMWALL_COVERAGE=1``, :mod:`cocotb_tests.launcher`):
Verilator's line and toggle coverage of its runs, and every run's functional coverage
(:mod:`cocotb_tests.functional`); merges them per block and writes into ``build/coverage/``:

* ``summary.json``: ``{"blocks": {BLOCK: {"line": %, "branch": %, "toggle": %, "functional":
  {"bins": N, "hit": M, "missed": [...]}, ...}}}`` for every registered block (``null`` figures
  and a ``reason`` where no run reached it, ``functional`` null where the testbench declares
  no coverpoints yet);
* ``report.md``: the table, and per block the uncovered lines with the Amaranth source each
  comes from (the generated Verilog's ``src`` attributes);
* ``html/``: genhtml's report (Debian's ``lcov``) of ``verilator_coverage --write-info``, and
  ``annotated/``: the Verilog with every point's count (``verilator_coverage --annotate``;
  a line marked ``%000000`` has a point no run reached).

A block's figure counts every point of every Verilog it was simulated as (each parameter set
and target is its own Verilog); runs of the same Verilog are merged point by point. Points in
the device models (``cocotb_tests/models``) are not the design's and are left out.

Usage: ``python -m cocotb_tests.coverage [--jobs N] [--no-run] [--no-html] [-o DIR]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from memwall import registry

from . import functional
from .unreachable import unreachable_arms
from .launcher import COVERAGE_VARIABLE, ROOT

__all__ = ["read_points", "BuildCoverage", "collect", "collect_functional", "summarize", "main"]

#: Coverage kinds Verilator writes, by the prefix of a point's ``page``.
KINDS = {"v_line": "line", "v_branch": "branch", "v_toggle": "toggle"}
#: Uncovered lines listed per block in report.md (the HTML and annotated/ have them all).
HOLES_LISTED = 12
_SRC = re.compile(r'\(\* src = "([^"]+)"')


def read_points(path: Path) -> dict[tuple, int]:
    """The points of one Verilator coverage file: ``{(kind, file, line, column, comment,
    hierarchy): count}``, ``kind`` one of :data:`KINDS`' values."""
    points: dict[tuple, int] = {}
    for text in path.read_text(errors="replace").splitlines():
        if not text.startswith("C '"):
            continue
        body, _, count = text[3:].rpartition("' ")
        fields = dict(item.split("\x02", 1) for item in body.split("\x01") if "\x02" in item)
        kind = KINDS.get(fields.get("page", "").split("/")[0])
        if kind is None:
            continue
        key = (kind, fields.get("f", ""), int(fields.get("l", 0)), fields.get("n", ""),
               fields.get("o", ""), fields.get("h", ""))
        points[key] = points.get(key, 0) + int(count)
    return points


@dataclass
class BuildCoverage:
    """The merged points of every run of one Verilog (one build folder)."""

    block: str
    folder: Path
    source: Path
    runs: int = 0
    points: dict = field(default_factory=dict)
    #: ``{verilog line: reason}``: select arms no input reaches (:mod:`.unreachable`), whose
    #: line points are left out of the line figure and listed apart.
    excluded: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.source.exists():
            self.excluded = unreachable_arms(self.source.read_text())

    def add(self, points: dict[tuple, int]) -> None:
        self.runs += 1
        for key, count in points.items():
            if Path(key[1]).name == self.source.name:     # the design's own file only
                self.points[key] = self.points.get(key, 0) + count

    def excluded_hit(self) -> int:
        """Line points left out as unreachable that a run reached: a fault in the analysis."""
        return sum(1 for k, c in self.points.items()
                   if k[0] == "line" and k[2] in self.excluded and c > 0)

    def excluded_points(self) -> collections.Counter:
        """The line points left out as unreachable, counted by reason."""
        return collections.Counter(
            self.excluded[k[2]] for k in self.points
            if k[0] == "line" and k[2] in self.excluded)

    def counts(self, kind: str) -> tuple[int, int]:
        """``(hit, total)`` points of ``kind``."""
        values = [c for k, c in self.points.items()
                  if k[0] == kind and not (kind == "line" and k[2] in self.excluded)]
        return sum(1 for c in values if c > 0), len(values)


def collect(root: Path) -> dict[str, list[BuildCoverage]]:
    """Every build folder under ``root`` (``build/cocotb``) with coverage files, by block."""
    found: dict[str, list[BuildCoverage]] = collections.defaultdict(list)
    for folder in sorted(p for p in root.glob("*/*-verilator") if any(p.glob("coverage-*.dat"))):
        block = json.loads((folder / "params.json").read_text())["block"]
        build = BuildCoverage(block, folder, folder / f"{registry.get(block).top}.v")
        for dat in sorted(folder.glob("coverage-*.dat")):
            build.add(read_points(dat))
        found[build.block].append(build)
    return found


def collect_functional(root: Path) -> dict[str, dict[str, dict]]:
    """Every run's functional coverage under ``root``, merged per block: ``{block: {"bins":
    {point: {bin: hits}}, "excluded": {"POINT BIN": reason}}}`` (``BLOCK.name`` belongs to
    ``BLOCK``)."""
    merged, excluded = functional.merge(sorted(root.glob("*/*/functional-*.json")))
    out: dict[str, dict] = collections.defaultdict(lambda: {"bins": {}, "excluded": {}})
    for name, hits in merged.items():
        out[name.split(".")[0]]["bins"][name] = hits
    for key, reason in excluded.items():
        out[key.split(".")[0]]["excluded"][key] = reason
    return out


def _functional_entry(block: dict) -> dict:
    points, excluded = block["bins"], block["excluded"]
    missed = [f"{name} {b}" for name, hits in sorted(points.items())
              for b, h in hits.items() if h == 0]
    total = sum(len(hits) for hits in points.values())
    return {"points": len(points), "bins": total, "hit": total - len(missed), "missed": missed,
            "excluded": excluded}


def _percent(hit: int, total: int) -> float | None:
    return round(100.0 * hit / total, 2) if total else None


def summarize(found: dict[str, list[BuildCoverage]],
              functional_points: dict[str, dict] | None = None) -> dict:
    """The summary of every registered block: per kind the percentage of points hit, and the
    points, builds and runs behind it; ``functional``: its coverpoints' bins, hit and missed
    (``null`` for a block whose testbench declares none yet)."""
    functional_points = functional_points or {}
    blocks = {}
    for block in registry.blocks():
        builds = found.get(block.name, [])
        entry: dict = {"builds": len(builds), "runs": sum(b.runs for b in builds)}
        for kind in KINDS.values():
            hit = sum(b.counts(kind)[0] for b in builds)
            total = sum(b.counts(kind)[1] for b in builds)
            entry[kind] = _percent(hit, total)
            entry[f"{kind}_points"] = {"hit": hit, "total": total}
        excluded = sum((b.excluded_points() for b in builds), collections.Counter())
        entry["line_excluded"] = {"points": sum(excluded.values()), "by_reason": dict(excluded),
                                  "hit": sum(b.excluded_hit() for b in builds)}
        if not builds:
            entry["reason"] = "no Verilator run of the regression simulates this block"
        points = functional_points.get(block.name)
        entry["functional"] = _functional_entry(points) if points else None
        blocks[block.name] = entry
    return {"blocks": blocks}


def _src_of(lines: list[str], number: int) -> str:
    """The Amaranth source of Verilog line ``number``: the nearest ``src`` attribute above."""
    for i in range(number - 1, max(number - 40, 0) - 1, -1):
        match = _SRC.search(lines[i]) if i < len(lines) else None
        if match:
            return match.group(1).split("|")[0]
    return "?"


def holes(build: BuildCoverage) -> list[tuple[str, int, str]]:
    """The uncovered line points of one build: ``(amaranth source, verilog line, text)``."""
    lines = build.source.read_text().splitlines() if build.source.exists() else []
    out = []
    for key, count in sorted(build.points.items(), key=lambda kv: kv[0][2]):
        if key[0] == "line" and count == 0 and key[2] not in build.excluded:
            text = lines[key[2] - 1].strip() if 0 < key[2] <= len(lines) else ""
            out.append((_src_of(lines, key[2]), key[2], text))
    return out


def _cell(entry: dict, kind: str) -> str:
    value, pts = entry[kind], entry[f"{kind}_points"]
    return "n/a" if value is None else f"{value:.1f} % ({pts['hit']}/{pts['total']})"


def report(summary: dict, found: dict[str, list[BuildCoverage]], seconds: float) -> str:
    """The Markdown report: the table, then each block's uncovered lines."""
    out = ["# Code coverage of the cocotb regression", "",
           f"`make coverage`, {seconds:.0f} s. Verilator line, branch and toggle coverage of "
           "every Verilator case of the regression, merged per block over its parameter sets "
           "and targets (docs/verification.md). HTML: `build/coverage/html/index.html`; "
           "annotated Verilog: `build/coverage/annotated/`.", "",
           "Functional: the bins of the block's coverpoints and crosses "
           "(cocotb_tests/functional.py) that the monitors of any run, under either simulator, "
           "saw; `none yet` where the testbench declares no coverpoints.", "",
           "| block | builds | runs | line | branch | toggle | functional bins |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name, entry in summary["blocks"].items():
        fn = entry["functional"]
        bins_cell = "none yet" if fn is None else f"{fn['hit']}/{fn['bins']}"
        out.append(f"| {name} | {entry['builds']} | {entry['runs']} | {_cell(entry, 'line')} | "
                   f"{_cell(entry, 'branch')} | {_cell(entry, 'toggle')} | {bins_cell} |")
    for name, entry in summary["blocks"].items():
        fn = entry["functional"]
        if fn and fn["missed"]:
            out += ["", f"## {name}: functional bins missed", "",
                    *(f"- `{m}`" for m in fn["missed"])]
        if fn and fn["excluded"]:
            out += ["", f"## {name}: bins excluded as unreachable", "",
                    *(f"- `{k}`: {why}" for k, why in sorted(fn["excluded"].items()))]
    for name, entry in summary["blocks"].items():
        if entry["line_excluded"]["points"]:
            out += ["", f"## {name}: {entry['line_excluded']['points']} line points excluded "
                    "as unreachable (cocotb_tests/unreachable.py)", "",
                    *(f"- {n}: {why}" for why, n in
                      sorted(entry["line_excluded"]["by_reason"].items()))]
            if entry["line_excluded"]["hit"]:
                out += [f"- **{entry['line_excluded']['hit']} of them were reached by a run: "
                        "the analysis is wrong there (a fault to report)**"]
    for name, builds in sorted(found.items()):
        missed = [(b, h) for b in builds for h in holes(b)]
        if not missed:
            continue
        out += ["", f"## {name}: {len(missed)} uncovered lines", "",
                "| build | Amaranth source | Verilog line | statement |", "|---|---|---:|---|"]
        for build, (src, line, text) in missed[:HOLES_LISTED]:
            out.append(f"| {build.folder.name} | `{src}` | {line} | `{text[:60]}` |")
        if len(missed) > HOLES_LISTED:
            out.append(f"| ... | {len(missed) - HOLES_LISTED} more in the HTML | | |")
    return "\n".join(out) + "\n"


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"coverage: {name} is missing: install Debian's {package} "
                         f"('apt-get install {package}', as `make coverage` does), or pass "
                         "--no-html")
    return path


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"coverage: {Path(cmd[0]).name} failed (exit {done.returncode}): "
                         f"{last[0]}")


def html(found: dict[str, list[BuildCoverage]], out: Path) -> None:
    """genhtml's report and the annotated Verilog of every block's merged points."""
    merge = _tool("verilator_coverage", "verilator")
    genhtml = _tool("genhtml", "lcov")
    infos = []
    for name, builds in sorted(found.items()):
        dats = [str(d) for b in builds for d in sorted(b.folder.glob("coverage-*.dat"))]
        info = out / "info" / f"{name}.info"
        info.parent.mkdir(parents=True, exist_ok=True)
        _run([merge, "--write-info", str(info), *dats])
        annotated = out / "annotated" / name
        annotated.mkdir(parents=True, exist_ok=True)
        _run([merge, "--annotate", str(annotated), "--annotate-min", "1", *dats])
        infos.append(str(info))
    _run([genhtml, "--quiet", "--output-directory", str(out / "html"),
          "--title", "memwall cocotb regression", *infos])


def _run_regression(jobs: str, root: Path) -> int:
    """Run the cocotb regression with coverage, after removing old coverage files: every case,
    those make test leaves to ``--slow`` too (the variants under Verilator, where the line and
    toggle points come from)."""
    for old in [*root.glob("*/*/coverage-*.dat"), *root.glob("*/*/functional-*.json")]:
        old.unlink()
    env = {**os.environ, COVERAGE_VARIABLE: "1"}
    cmd = [sys.executable, "-m", "pytest", "-n", jobs, "-q", "-p", "no:cacheprovider", "--slow",
           str(ROOT / "cocotb_tests")]
    print("coverage: " + " ".join(cmd[2:]), flush=True)
    return subprocess.run(cmd, env=env, cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cocotb_tests.coverage",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="auto", help="pytest-xdist workers (auto)")
    parser.add_argument("--no-run", action="store_true",
                        help="report the coverage files already under build/cocotb")
    parser.add_argument("--no-html", action="store_true", help="skip genhtml and annotate")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "build" / "coverage")
    args = parser.parse_args(argv)
    start, root = time.monotonic(), ROOT / "build" / "cocotb"
    status = 0 if args.no_run else _run_regression(args.jobs, root)
    found = collect(root)
    if args.output.exists():
        shutil.rmtree(args.output)
    args.output.mkdir(parents=True)
    if not args.no_html and found:
        html(found, args.output)
    summary = summarize(found, collect_functional(root))
    seconds = time.monotonic() - start
    summary["seconds"] = round(seconds, 1)
    (args.output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.output / "report.md").write_text(report(summary, found, seconds))
    print(f"coverage: {len(found)} blocks, {seconds:.0f} s: {args.output / 'report.md'}")
    if status:
        print(f"coverage: the regression failed (pytest exit {status}); the figures cover the "
              "runs that finished", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
