"""Benchmarks: measure each block's throughput and latency in simulation, and its area and Fmax.

Throughput and latency come from the block testbench's ``full_rate`` test (no idle cycles, no
back-pressure) under Verilator; area and Fmax from the synthesis flow (ECP5, nextpnr out of
context). Run with ``memwall bench FAMILY``; results go to ``build/bench/FAMILY.{md,json}`` (``-o``
another folder), the simulators' output to ``FAMILY.log`` there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from pathlib import Path
from typing import Callable

from memwall import registry
from synth.flow import synthesize
from synth.toolchain import tool_versions

from .launcher import ROOT, run_block
from .tb import ENV_METRICS

__all__ = ["bench_family", "full_rate", "full_rate_inputs"]


#: Where the figures of ``full_rate`` come from: the RTL, the registry that builds it, the
#: blocks' entries, the golden models and the testbenches (folders and files under ROOT).
FULL_RATE_SOURCES = ("hdl", "golden", "cocotb_tests", "memwall/blocks", "memwall/registry.py")


@functools.lru_cache(maxsize=1)
def _sources_sha256() -> str:
    digest = hashlib.sha256()
    for name in FULL_RATE_SOURCES:
        root = ROOT / name
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def full_rate_inputs(block, params, simulator: str) -> dict:
    """What :func:`full_rate`'s figures depend on, as a cache key's inputs
    (:mod:`synth.cache`): the block, its parameters, the simulator, the versions of Amaranth,
    cocotb and Verilator, and the SHA-256 of :data:`FULL_RATE_SOURCES`."""
    return {"benchmark": "full_rate", "block": block.name, "parameters": params.as_dict(),
            "simulator": simulator,
            "tools": tool_versions(("amaranth", "cocotb", "verilator")),
            "sources_sha256": _sources_sha256()}


def full_rate(block, params, simulator: str, metrics_path: Path, *,
              log: Path | None = None) -> dict:
    """Throughput and latency of ``block`` at ``params``: the figures its testbench's
    ``full_rate`` test reports (items, cycles, ``per_cycle``, ``latency`` and what it counts),
    through ``metrics_path``; the simulation's output goes to ``log`` if given."""
    metrics_path.unlink(missing_ok=True)
    run_block(block.name, params, simulator, testcase="full_rate", log=log,
              extra_env={ENV_METRICS: str(metrics_path)})
    return json.loads(metrics_path.read_text())["full_rate"]


def bench_family(family: str, presets=("default", "paper"), *, simulator: str = "verilator",
                 target: str = "ecp5", out_dir: Path | None = None,
                 progress: Callable[[str], None] = print) -> tuple[list[dict], Path]:
    """Benchmark every block of ``family`` at ``presets``.

    Returns one row per (block, preset) and the path of the Markdown table written.
    """
    blocks = [b for b in registry.blocks() if b.family == family]
    if not blocks:
        families = sorted({b.family for b in registry.blocks()})
        raise registry.ParameterError(f"unknown block family {family!r}; families are "
                                      f"{', '.join(families)}")
    out_dir = out_dir or ROOT / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for block in blocks:
        for preset in presets:
            params = block.parameters(preset)
            tag = f"{block.name} ({preset})"
            progress(f"{tag}: simulate full_rate under {simulator}")
            measured = full_rate(block, params, simulator,
                                 out_dir / f"{block.name}-{preset}-metrics.json")
            row = {"block": block.name, "preset": preset, **measured, "cells": None,
                   "luts": None, "ffs": None, "dsps": None, "cells_by_type": {},
                   "fmax_mhz": None, "device": "", "note": "not synthesized (block settings)",
                   "parameters": params.as_dict()}
            if target in block.synth.targets and preset in block.synth.presets:
                progress(f"{tag}: synthesize for {target}")
                text, _ = block.verilog(params, target)
                synth = synthesize(text, block.top, target,
                                   out_dir / block.name / preset / target,
                                   **block.synth.flow_options(),
                                   progress=lambda step, tag=tag: progress(f"{tag}:   {step}"))
                row.update(cells=synth.cells, luts=synth.luts, ffs=synth.ffs, dsps=synth.dsps,
                           cells_by_type=synth.cells_by_type, fmax_mhz=synth.fmax_mhz,
                           device=synth.device, note=synth.note)
            rows.append(row)
    (out_dir / f"{family}.json").write_text(json.dumps(rows, indent=2) + "\n")
    md_path = out_dir / f"{family}.md"
    text = markdown(family, rows, simulator, target)
    # A family may add its own figures: cocotb_tests/<family>/bench.py with extra(out_dir, ...).
    try:
        family_bench = importlib.import_module(f"cocotb_tests.{family}.bench")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"cocotb_tests.{family}", f"cocotb_tests.{family}.bench"):
            raise
        family_bench = None
    if family_bench is not None:
        text += family_bench.extra(out_dir, simulator, progress)
    md_path.write_text(text)
    return rows, md_path


def markdown(family: str, rows: list[dict], simulator: str, target: str) -> str:
    lines = [f"# {family} benchmark", "",
             f"Measured by `memwall bench {family}`: throughput and latency in simulation "
             f"({simulator}, no idle cycles, no back-pressure), area and Fmax from `memwall synth "
             f"--target {target}`.", "",
             "| block | preset | items | cycles | items/cycle | latency (cycles) | LUTs | FF | "
             "DSP | Fmax (MHz) | other cells |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        other = ", ".join(f"{k} {v}" for k, v in sorted(r["cells_by_type"].items())
                          if k not in ("LUT4", "TRELLIS_FF"))
        fmax = "n/a" if r["fmax_mhz"] is None else f"{r['fmax_mhz']:.0f}"
        area = [("-" if r[k] is None else r[k]) for k in ("luts", "ffs", "dsps")]
        lines.append(f"| {r['block']} | {r['preset']} | {r['items']} | {r['cycles']} | "
                     f"{r['per_cycle']:.3f} | {r['latency']} | {area[0]} | {area[1]} | "
                     f"{area[2]} | {fmax} | {other or '-'} |")
    meanings: dict[str, list[str]] = {}
    for r in rows:
        if r["block"] not in meanings.setdefault(r["latency_meaning"], []):
            meanings[r["latency_meaning"]].append(r["block"])
    lines += ["", "Latency, in cycles: " + "; ".join(
        f"{meaning} ({', '.join(names)})" for meaning, names in meanings.items()) + "."]
    return "\n".join(lines) + "\n"
