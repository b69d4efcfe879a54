"""memwall's CLI: list, generate, lint, synth, build, bench, sweep, reproduce, board, model.

Every user mistake (unknown block, preset, parameter, target, a value out of range) ends with exit
status 2 and one line naming the problem and the allowed values; so does an output folder that is
a file or cannot be written, and a parameter given twice. A tool that fails ends with exit status 1
and the tool's own words. SIGINT (Ctrl-C) stops the tools started, prints "memwall: interrupted"
and ends with status 130. Files are written into a scratch folder and moved into place only when
the command succeeds (:mod:`memwall.output`), so no half-written output is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

import shtab

from hdl.arith.dsp import FAMILIES

from . import registry
from .output import OutputError, Staged, output_folder
from .params import ParameterError

EXIT_USAGE = 2
EXIT_TOOL = 1
#: The shell's status for a command stopped by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130
#: `synth`/`build --fail-on-timing` when a block misses its clock constraint.
EXIT_TIMING = 3


class UsageError(Exception):
    """A mistake in the command line; printed as one line, exit status 2."""


class _Version(argparse.Action):
    """``--version``: memwall's version and commit, worked out only when asked."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from . import version_line
        print(version_line())
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _overrides(pairs: list[str] | None) -> dict[str, str]:
    result = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise UsageError(f"--set takes NAME=VALUE, not {pair!r}")
        if name in result:
            raise UsageError(f"parameter {name} is given twice with --set ({result[name]!r} and "
                             f"{value!r}); give each parameter once")
        result[name] = value
    return result


def _design(args):
    if getattr(args, "name", None) is not None:
        registry.check_module_name(args.name)
    block = registry.get(args.block)
    params = block.parameters(args.preset, _overrides(args.set),
                              force=getattr(args, "force", False))
    return block, params


def _status(message: str):
    print(message, file=sys.stderr, flush=True)


# --- list -----------------------------------------------------------------------------------

def _list_parameters(b) -> None:
    print(f"\n{b.name}: parameters by preset")
    presets = list(b.presets)
    print("| parameter | " + " | ".join(presets) + " |")
    print("|---|" + "---|" * len(presets))
    for name in b.params.names():
        values = [b.presets[p].as_dict()[name] for p in presets]
        cells = [",".join(map(str, v)) if isinstance(v, list) else str(v) for v in values]
        print(f"| {name} | " + " | ".join(cells) + " |")
    sizes = [b.size(b.presets[p]) for p in presets]
    limits = registry.SIZE_LIMITS
    for field, label in (("storage_bits", "storage bits"), ("multipliers", "multipliers"),
                         ("cells", "netlist cells")):
        figures = [f"{getattr(size, field):,}" for size in sizes]
        print(f"| {label} (estimate; limit {getattr(limits, field):,}) | " + " | ".join(figures)
              + " |")


def _list_meanings(b) -> None:
    """Each parameter's meaning, unit and allowed values, from the docstrings of the classes that
    check them (:meth:`memwall.params.BlockParams.descriptions`)."""
    print(f"\n{b.name}: what each parameter means (unit, allowed values; the default in brackets "
          f"where the checking class gives one)")
    print("| parameter | meaning |")
    print("|---|---|")
    for name, text in b.params.descriptions().items():
        print(f"| {name} | {text.replace('|', '/')} |")


def cmd_list(args) -> int:
    blocks = [registry.get(args.block)] if args.block else registry.blocks()
    print("| block | family | paper | status | summary |")
    print("|---|---|---|---|---|")
    for b in blocks:
        paper = registry.FAMILY_PAPERS.get(b.family) or "-"
        print(f"| {b.name} | {b.family} | {paper} | {b.status} | {b.summary} |")
    for b in blocks:
        _list_parameters(b)
    if args.block:
        _list_meanings(blocks[0])
    if not args.block:
        print("\nPapers (`memwall reproduce PAPER`) and the blocks that implement them")
        print("| paper | family | blocks |")
        print("|---|---|---|")
        for family, paper in registry.FAMILY_PAPERS.items():
            names = ", ".join(b.name for b in blocks if b.family == family)
            print(f"| {paper or '- (shared numeric units)'} | {family} | {names} |")
    return 0


# --- generate -------------------------------------------------------------------------------

#: The line `memwall generate` starts its Verilog with (the cocotb launcher's timescale too).
TIMESCALE_LINE = "`timescale 1ns / 1ps\n"


def generate(block, params, preset: str, out_dir: Path, target: str | None = None,
             name: str | None = None, *, src: bool = True, timescale: bool = True,
             overrides: dict[str, str] | None = None, interface: str = "native",
             cache=None) -> tuple[Path, Path, dict]:
    """Write ``<top>.v``, ``<top>.json`` (the manifest), ``<top>.vlt`` (Verilator's waivers,
    :func:`synth.lint.waiver_file`) and ``<top>.core`` (FuseSoC) into ``out_dir``; the Verilog for
    ``target`` (see :meth:`memwall.registry.Block.verilog`), generic by default, its top module
    ``name`` (default: the block's name with ``_`` for ``-``), with ``src`` attributes and a
    leading `` `timescale`` line unless told otherwise; the manifest is
    :func:`memwall.manifest.manifest` (``overrides``: the ``--set`` values it records);
    ``interface="axis"`` gives the streams AXI4-Stream names (:mod:`memwall.axis`); ``cache``
    is :meth:`memwall.registry.Block.verilog`'s."""
    from synth.lint import waiver_file

    from .core import capi2_core
    from .manifest import manifest as contract

    top = name or block.top
    text, component = block.verilog(params, target, name=top, src=src, interface=interface,
                                    cache=cache)
    text = (TIMESCALE_LINE if timescale else "") + text
    out_dir.mkdir(parents=True, exist_ok=True)
    verilog_path = out_dir / f"{top}.v"
    verilog_path.write_text(text)
    manifest = contract(block, params, preset=preset, overrides=overrides or {}, target=target,
                        top=top, verilog_name=verilog_path.name, verilog_text=text,
                        component=component, interface=interface)
    manifest_path = out_dir / f"{top}.json"
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    waiver_path = out_dir / f"{top}.vlt"
    waiver_path.write_text(waiver_file(top, verilog_path.name))
    (out_dir / f"{top}.core").write_text(capi2_core(block, top, verilog_path.name, preset,
                                                    waiver_path.name))
    return verilog_path, manifest_path, manifest


def cmd_generate(args) -> int:
    block, params = _design(args)
    staged = Staged(args.output)
    with staged as stage:
        verilog_path, manifest_path, manifest = generate(
            block, params, args.preset, stage, args.target, args.name, src=not args.no_src,
            timescale=not args.no_timescale, overrides=_overrides(args.set),
            interface=args.interface)
    final = staged.final(verilog_path)
    print(f"wrote {final}, {staged.final(manifest_path)}, {final.with_suffix('.vlt')} and "
          f"{final.with_suffix('.core')}")
    for port in manifest["ports"]:
        print(f"  {port['direction']:6} {port['width']:4}  {port['name']}")
    return 0


# --- lint -----------------------------------------------------------------------------------

def cmd_lint(args) -> int:
    from synth.lint import lint

    block, params = _design(args)
    staged = Staged(args.output)
    with staged as stage:
        text, _ = block.verilog(params)
        report = lint(text, block.top, stage / block.name / args.preset / "lint")
    print(f"{block.name} ({args.preset}, Verilator -Wall): {report.summary()}")
    for message in report.messages if args.verbose else []:
        print(f"  {message}")
    return 0 if report.ok and not report.left else EXIT_TOOL


# --- synth ----------------------------------------------------------------------------------

def _synth_designs(args) -> list:
    """``(block, params)`` of ``memwall synth NAME``: the block called NAME, or, when NAME is a
    family (``rdxe``), every block of that family at ``--preset``."""
    family = [b for b in registry.blocks() if b.family == args.block]
    if args.block in {b.name for b in registry.blocks()} or not family:
        return [_design(args)]
    for option, given in (("--set", args.set), ("--name", args.name)):
        if given:
            raise UsageError(f"{option} needs one block, not the family {args.block!r}; its "
                             f"blocks are {', '.join(b.name for b in family)}")
    return [(b, b.parameters(args.preset)) for b in family]


def _cache(args):
    """The synthesis cache of a command (:mod:`synth.cache`); ``--no-cache`` only refreshes it."""
    from synth.cache import SynthCache
    return SynthCache(read=not args.no_cache)


def cmd_synth(args) -> int:
    from synth.cache import synthesize
    from synth.flow import check_options
    from synth.report import markdown_table

    route_limit = None if args.route_limit is None else _route_limit_seconds(args.route_limit)
    designs = _synth_designs(args)
    output_folder(args.output)
    reports, dicts = [], []
    for index, (block, params) in enumerate(designs, 1):
        tag = f"[{index}/{len(designs)}] {block.name}: " if len(designs) > 1 else ""
        top = args.name or block.top
        text, _ = block.verilog(params, args.target, name=top)
        options = block.synth.flow_options()
        if args.freq is not None:
            options["freq_mhz"] = args.freq
        if args.timing_weight is not None:
            options["timing_weight"] = args.timing_weight
        options["seeds"] = args.seeds
        options["device"] = args.device
        try:
            check_options(args.target, **options)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if route_limit is not None:
            options["route_limit"] = route_limit
        with Staged(args.output) as stage:
            workdir = stage / block.name / args.preset / args.target
            # A cached report has no SDF beside it: --sdf runs the tools.
            cache = None if args.sdf else _cache(args)
            report = synthesize(text, top, args.target, workdir, **options, sdf=args.sdf,
                                cache=cache,
                                progress=None if args.json
                                else lambda s, t=tag: _status(f"  {t}{s}"))
        reports.append(report)
        dicts.append(dict(report.as_dict(), block=block.name, preset=args.preset,
                          parameters=params.as_dict()))
    if args.json:
        print(json.dumps(dicts[0] if len(dicts) == 1 else dicts, indent=2))
    else:
        print(markdown_table(reports, names=[b.name for b, _ in designs]), end="")
    return _timing_verdict([(b.name, r) for (b, _), r in zip(designs, reports)],
                           args.fail_on_timing)


def _route_limit_seconds(minutes: float) -> float:
    """``--route-limit`` in seconds; a usage error unless a positive number of minutes."""
    if not math.isfinite(minutes) or minutes <= 0:
        raise UsageError(f"--route-limit must be a positive number of minutes, not {minutes:g}")
    return 60.0 * minutes


def _timing_verdict(named_reports, fail: bool) -> int:
    """Name the blocks that miss their clock constraint, last on stderr; the exit status."""
    missed = [(name, r) for name, r in named_reports if r.timing_met is False]
    for name, r in missed:
        _status(f"timing MISSED: {name} on {r.device}: {r.fmax_mhz:.1f} MHz against "
                f"{r.freq_mhz:g} MHz (slack {r.slack_ns:+.2f} ns)")
    return EXIT_TIMING if fail and missed else 0


# --- build (the main job) -------------------------------------------------------------------

def _build_block(block, params, args, stage: Path, final, tag: str,
                 synthesize, cache) -> tuple[dict, list]:
    """Generate and lint one block of ``memwall build`` into ``stage`` (``final``: where a file
    there ends up; the Verilog and the lint through ``cache``, :mod:`synth.cache`), then hand each
    synthesis to ``synthesize(verilog, top, target, workdir, options)``; return the block's
    report entry and ``(target, what synthesize returned)``."""
    from synth.cache import lint
    from synth.flow import devices

    _status(f"{tag}: generate ({args.preset})")
    verilog_path, _, manifest = generate(block, params, args.preset, stage, cache=cache)
    text = verilog_path.read_text()
    _status(f"{tag}: verilator lint -Wall")
    lint_report = lint(text, block.top, stage / "lint", cache=cache)
    entry = {
        "block": block.name, "family": block.family, "preset": args.preset,
        "parameters": params.as_dict(), "verilog": str(final(verilog_path)),
        "port_bits": sum(p["width"] for p in manifest["ports"]),
        "lint": {"errors": lint_report.errors, "warnings": lint_report.warnings,
                 "by_code": lint_report.by_code, "left": lint_report.left,
                 "waived": lint_report.waived},
        "synth": [],
    }
    if not lint_report.ok:
        _status(f"{tag}: lint found {lint_report.errors} error(s); see "
                f"{final(lint_report.log_path)}")
    skipped = "" if args.target else block.synth.skip_at(args.preset)
    if skipped:
        entry["synth_skipped"] = skipped
        _status(f"{tag}: not synthesized: {skipped}")
    jobs = []
    for target in [] if skipped else args.target or block.synth.targets:
        synth_text = (block.verilog(params, target, cache=cache)[0] if target in FAMILIES
                      else text)
        device = args.device if args.device in [d[2] for d in devices(target)] else None
        options = dict(block.synth.flow_options(), seeds=args.seeds, device=device)
        jobs.append((target, synthesize(synth_text, block.top, target, stage / target, options)))
    return entry, jobs


def _synth_line(tag: str, report) -> str:
    """The progress line of one finished synthesis of ``memwall build``."""
    fmax = "n/a" if report.fmax_mhz is None else f"{report.fmax_mhz:.1f} MHz"
    if len(report.fmax_mhz_seeds) > 1:
        fmax += (f" (median of {len(report.fmax_mhz_seeds)} seeds, "
                 f"{report.fmax_mhz_min:.1f} to {report.fmax_mhz_max:.1f})")
    return (f"{tag}: {report.target}: {report.cells} cells, {report.luts} LUTs, {report.ffs} FFs, "
            f"Fmax {fmax} ({report.seconds:.1f} s{', cached' if report.cached else ''})")


#: Memory bits that weigh like one netlist cell in :func:`_largest_first`'s estimate.
_BITS_PER_CELL = 64


#: Syntheses the heartbeat line of ``memwall build`` names (the rest are counted).
_NAMED = 3


def _largest_first(chosen: list, preset: str) -> list[int]:
    """The order ``memwall build`` takes ``chosen`` in: the largest designs first, so that the
    longest syntheses start first and the small ones fill the workers in beside them; the report
    keeps the registry's order. The size is the registry's estimate (``Size``): netlist cells,
    plus one per :data:`_BITS_PER_CELL` memory bits, since block RAMs are placed and routed too
    (this ranks the measured synthesis times of docs/sweeps.md; cells alone put rdxe-dxt, the
    longest, third)."""
    def weight(i: int) -> int:
        block = chosen[i]
        if block.synth.skip_at(preset):
            return 0
        size = block.size(block.parameters(preset))
        return size.cells + size.storage_bits // _BITS_PER_CELL
    return sorted(range(len(chosen)), key=lambda i: -weight(i))


def _build_blocks(client: Callable, chosen: list, args, out: Path) -> tuple[list, list, list]:
    """Generate and lint the blocks here, one after another, while the cluster synthesizes those
    already generated (through the cache); each block's files are moved into place once its
    syntheses are done; ``client()`` gives the Dask client. Returns the report entries,
    ``(block, report)`` per synthesis, and ``(block, target, message)`` per synthesis whose
    tools failed."""
    from synth.cache import cache_key, key_inputs
    from synth.flow import SynthReport

    from . import sweep

    cache, waiting, stages = _cache(args), {}, {}
    feeder, tag, count = None, uuid.uuid4().hex[:8], itertools.count()
    entries, reports, failures = [None] * len(chosen), [None] * len(chosen), []
    # Workers of the local cluster write their logs into the block's folder; others keep theirs.
    local = args.scheduler is None

    def synthesize(text, top, target, workdir, options):
        nonlocal feeder
        hit = cache.get(cache_key(key_inputs(text, top, target, options)))
        if hit is not None:
            return hit
        feeder = feeder or sweep.Feeder(client(), "build")
        return feeder.submit(f"build-{tag}-{next(count)}", sweep.synthesize_point,
                             {"verilog": text, "top": top}, target, options,
                             str(workdir) if local else None)

    def running() -> str:
        names = [f"{entries[i]['block']} ({target})" for i, _, target, _ in waiting.values()]
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        what = "synthesis" if len(names) == 1 else "syntheses"
        return f"build: {len(names)} {what} to finish: " + ", ".join(names[:_NAMED]) + more

    def finish(i):
        if i in stages and None not in reports[i]:
            stages.pop(i).__exit__(None, None, None)

    try:
        for n, i in enumerate(_largest_first(chosen, args.preset)):
            block = chosen[i]
            tag = f"[{n + 1}/{len(chosen)}] {block.name}"
            staged = Staged(out / block.name)     # a finished block's files stay if one fails
            stages[i] = staged
            entry, jobs = _build_block(block, block.parameters(args.preset), args,
                                       staged.__enter__(), staged.final, tag, synthesize,
                                       cache)
            entries[i] = entry
            reports[i] = [None] * len(jobs)
            for t, (target, job) in enumerate(jobs):
                if isinstance(job, SynthReport):
                    reports[i][t] = job
                    _status(_synth_line(tag, job))
                else:
                    waiting[job] = (i, t, target, tag)
                    _status(f"{tag}: synthesize for {target}")
            finish(i)
        for future in feeder.finished(_status, running) if feeder else ():
            i, t, target, tag = waiting.pop(future.key)
            try:
                result = future.result()
            except Exception as exc:    # noqa: BLE001 - a task that broke: this synthesis fails
                result = {"error": f"{type(exc).__name__}: {exc}"}
            if "error" in result:
                failures.append((entries[i]["block"], target, result["error"]))
                entries[i].setdefault("synth_failed", {})[target] = result["error"]
                _status(f"{tag}: {target}: FAILED: {result['error'].splitlines()[0]}")
                reports[i][t] = False
            else:
                reports[i][t] = sweep.synth_result(result, cache)
                _status(_synth_line(tag, reports[i][t]))
            finish(i)
    except BaseException as exc:
        for staged in stages.values():
            staged.__exit__(type(exc), exc, exc.__traceback__)
        raise
    named = []
    for entry, block_reports in zip(entries, reports):
        done_reports = [r for r in block_reports if r is not False]
        entry["synth"] = [r.as_dict() for r in done_reports]
        named += [(entry["block"], r) for r in done_reports]
    return entries, named, failures


def _build_report(preset: str, elapsed: float, results: list, rows: list, names: list) -> str:
    """The Markdown report of ``memwall build``."""
    from synth.report import markdown_table
    from synth.toolchain import tool_versions

    from . import version_line

    tools = ", ".join(f"{k} {v}" for k, v in tool_versions().items())
    lines = [f"# memwall build report ({preset} preset)", "",
             f"{len(results)} blocks; generate, Verilator lint and synthesis took {elapsed:.0f} s.",
             "Produced by `memwall build`; Fmax is nextpnr's estimate, out of context.", "",
             f"{version_line()}; {tools}.", "",
             "## Lint (Verilator -Wall)", "",
             "Waived: the classes of Amaranth's and Yosys' style that `<top>.vlt` waives "
             "(docs/integration.md says why each); left: warnings to fix.", "",
             "| block | errors | left | waived |", "|---|---:|---|---|"]
    for e in results:
        left, waived = (", ".join(f"{k} {v}" for k, v in sorted(e["lint"][kind].items())) or "-"
                        for kind in ("left", "waived"))
        lines.append(f"| {e['block']} | {e['lint']['errors']} | {left} | {waived} |")
    lines += ["", "## Area and timing", "", markdown_table(rows, names=names)]
    skipped = [e for e in results if "synth_skipped" in e]
    if skipped:
        lines += ["Not synthesized:", ""]
        lines += [f"- **{e['block']}**: {e['synth_skipped']}" for e in skipped]
        lines.append("")
    failed = [(e["block"], t, m) for e in results for t, m in e.get("synth_failed", {}).items()]
    if failed:
        lines += ["Synthesis failed (report.json has the tools' messages):", ""]
        lines += [f"- **{b}** ({t}): {m.splitlines()[0]}" for b, t, m in failed]
        lines.append("")
    missed = [r for r in rows if r.timing_met is False]
    lines += [f"Timing: {sum(r.timing_met is True for r in rows)} met, {len(missed)} missed"
              + (": " + ", ".join(f"{n} ({r.target}, {r.fmax_mhz:.1f} MHz against "
                                  f"{r.freq_mhz:g}, slack {r.slack_ns:+.2f} ns)"
                                  for n, r in zip(names, rows) if r.timing_met is False)
                 if missed else "") + ".", ""]
    lines += ["## Parameters", ""]
    for e in results:
        params = ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                           for k, v in e["parameters"].items())
        lines.append(f"- **{e['block']}**: {params}")
    return "\n".join(lines) + "\n"


def cmd_build(args) -> int:
    from synth.flow import check_options, devices

    from . import sweep

    try:
        check_options("ecp5", 100.0, seeds=args.seeds)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    parts = [d[2] for t in ("ecp5", "ice40") for d in devices(t)]
    if args.device is not None and args.device not in parts:
        raise UsageError(f"--device must be one of {', '.join(parts)}, not {args.device!r}")
    out = output_folder(args.output)
    names = args.block or [b.name for b in registry.blocks()]
    chosen = [registry.get(n) for n in names]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        clients = []

        def client():
            if not clients:
                clients.append(stack.enter_context(_cluster(args, "build", sweep.SWEEP_MODULES)))
            return clients[0]
        if args.scheduler is not None:
            client()                # an existing cluster is checked before any work
        # A local cluster is started only for a synthesis the cache does not hold.
        results, named, failures = _build_blocks(client, chosen, args, out)
    rows = [r for _, r in named]
    elapsed = time.monotonic() - started
    with Staged(out) as stage:
        (stage / "report.json").write_text(json.dumps(
            {"preset": args.preset, "seconds": round(elapsed, 1), "blocks": results},
            indent=2) + "\n")
        (stage / "report.md").write_text(_build_report(args.preset, elapsed, results, rows,
                                                       [n for n, _ in named]))
    _status(f"wrote {out / 'report.md'} and {out / 'report.json'} ({elapsed:.0f} s)")
    failed = [e["block"] for e in results if e["lint"]["errors"] or e["lint"]["left"]]
    if failed:
        _status(f"lint errors or warnings left in {', '.join(failed)} (report.md)")
    for block, target, message in failures:
        _status(f"synthesis failed: {block} ({target}): {message.splitlines()[0]}")
    timing = _timing_verdict(named, args.fail_on_timing)
    return EXIT_TOOL if failed or failures else timing


# --- bench --------------------------------------------------------------------------------

@contextlib.contextmanager
def _stdout_to(path: Path):
    """Send this process's and its children's standard output (file descriptor 1) to ``path``:
    the simulators' logs go there, and the command's own stdout keeps only its results."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "w") as log:
            os.dup2(log.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_bench(args) -> int:
    from cocotb_tests.bench import bench_family

    from cocotb_tests.launcher import SimulationError

    staged = Staged(args.output)
    log = staged.stage / f"{args.family}.log"
    try:
        with staged, _stdout_to(log):
            _, md_path = bench_family(args.family, tuple(args.preset or ("default", "paper")),
                                      simulator=args.simulator, out_dir=staged.stage,
                                      progress=_status)
    except (SimulationError, AssertionError) as exc:
        print(f"memwall: bench {args.family}: {exc} (simulator log: {log})", file=sys.stderr)
        return EXIT_TOOL
    md_path = staged.final(md_path)
    print(md_path.read_text(), end="")
    _status(f"wrote {md_path} and {md_path.with_suffix('.json')}; the simulators' output is in "
            f"{staged.final(log)}")
    return 0


# --- sweep --------------------------------------------------------------------------------

def _sweep_meta(args, block, points: list) -> dict:
    from synth.toolchain import tool_versions

    from . import version_line
    return {"block": block.name, "preset": args.preset, "target": args.target,
            "simulator": args.simulator if args.sim else None, "seeds": args.seeds,
            "grid": {name: list(dict.fromkeys(p[name] for p in points)) for name in points[0]},
            "command": shlex.join(["memwall", "sweep", block.name, "--preset", args.preset,
                                   *(w for v in args.set for w in ("--set", v)),
                                   "--target", args.target, "--seeds", str(args.seeds)]
                                  + (["--sim", "--simulator", args.simulator] if args.sim
                                     else [])),
            "memwall": version_line(), "tools": tool_versions()}


def cmd_sweep(args) -> int:
    from synth.flow import check_options

    from . import sweep

    block = registry.get(args.block)
    if args.preset not in block.presets:
        raise UsageError(f"unknown preset {args.preset!r} for block {block.name}; presets are "
                         f"{', '.join(block.presets)}")
    points = sweep.grid(block.params, args.set)
    try:
        check_options(args.target, **dict(block.synth.flow_options(), seeds=args.seeds))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out = output_folder(args.output)
    started = time.monotonic()
    with _cluster(args, "sweep", sweep.SWEEP_MODULES) as client:
        _status(f"sweep {block.name}: {len(points)} point(s) of the {args.preset} preset for "
                f"{args.target}" + (f", simulated under {args.simulator}" if args.sim else ""))
        results = sweep.run(client, block, args.preset, points, target=args.target,
                            seeds=args.seeds, simulator=args.simulator if args.sim else None,
                            cache=_cache(args), force=args.force, progress=_status)
    staged = Staged(out)
    with staged as stage:
        (stage / "sweep.csv").write_text(sweep.csv_text(results))
        (stage / "sweep.json").write_text(sweep.json_text(results, _sweep_meta(args, block,
                                                                               points)))
        sweep.plot(results, stage / "sweep.png",
                   f"memwall sweep {block.name} ({args.preset} preset, {args.target})")
    print(sweep.markdown(results), end="")
    counts = {s: sum(p.status == s for p in results) for s in ("ok", "refused", "failed")}
    _status(f"sweep: {counts['ok']} point(s) done, {counts['refused']} refused, "
            f"{counts['failed']} failed in {time.monotonic() - started:.0f} s; wrote "
            f"{out / 'sweep.csv'}, {out / 'sweep.json'} and {out / 'sweep.png'}")
    return EXIT_TOOL if counts["failed"] else 0


# --- reproduce ----------------------------------------------------------------------------

def cmd_reproduce(args) -> int:
    from sim.reproduce import PAPERS, QUICK_LABEL, comparison_table, run

    papers = list(PAPERS) if args.paper == "all" else [args.paper]
    if args.paper != "all" and args.paper not in PAPERS:
        raise UsageError(f"unknown paper {args.paper!r}; papers are {', '.join(PAPERS)}, all")
    # A quick run has its own folder, so that it never replaces the full-size reports.
    out = output_folder(args.output)
    out = out / "quick" if args.quick else out      # made by the first paper's Staged
    with _cluster(args, "reproduce") as client:
        for paper in papers:
            staged = Staged(out)
            with staged as stage:
                result, report = run(paper, stage, quick=args.quick, client=client,
                                     progress=_status)
            title = result.title + (f" ({QUICK_LABEL})" if args.quick else "")
            print(f"## {title}\n\n{comparison_table(result.rows)}\n")
            _status(f"wrote {staged.final(report)}" + (f" and {len(result.plots)} plot(s)"
                                         if result.plots else ""))
    return 0


@contextlib.contextmanager
def _cluster(args, command: str, modules=None):
    """The Dask client of ``--scheduler``/``--workers`` (:func:`sim.reproduce.dask_client`),
    its trouble as one line; says where the command runs."""
    from sim.reproduce import REPRODUCE_MODULES, ReproduceError, dask_client

    from . import sweep

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, not {args.workers}")
    try:
        with dask_client(args.scheduler, args.workers, modules or REPRODUCE_MODULES) as client:
            workers = len(client.scheduler_info()["workers"])
            where = (f"{args.scheduler} ({workers} Dask worker{'s' * (workers != 1)})"
                     if args.scheduler else f"a local Dask cluster of {workers} worker "
                     f"process{'es' * (workers != 1)}")
            _status(f"{command}: running on {where}")
            try:
                yield client
            except KeyboardInterrupt:
                # Closing the cluster ends its worker processes but not the tools they started.
                if args.scheduler is None:
                    with contextlib.suppress(Exception):
                        client.run(sweep.stop)
                raise
    except ReproduceError as exc:
        raise UsageError(str(exc)) from exc


def cluster_args(p) -> None:
    """``--workers`` and ``--scheduler``, as ``reproduce``, ``sweep`` and ``build`` take them."""
    p.add_argument("--workers", type=int,
                   help="worker processes of the local Dask cluster (default: one per core)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on an existing Dask cluster, e.g. tcp://10.0.0.5:8786; its "
                        "workers need memwall installed")


# --- entry point ----------------------------------------------------------------------------

#: Shell functions that complete block names (shtab's per-argument completion).
BLOCKS = {"bash": "_memwall_blocks", "zsh": "_memwall_blocks"}


def _completion_preamble() -> dict[str, str]:
    names = " ".join(b.name for b in registry.blocks())
    return {"bash": f"_memwall_blocks() {{ compgen -W '{names}' -- \"$1\"; }}",
            "zsh": f"_memwall_blocks() {{ compadd {names}; }}"}


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memwall", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, help="print memwall's version and commit")
    shtab.add_argument_to(parser, "--print-completion", help="print a shell completion script "
                          "(bash, zsh or tcsh): source <(memwall --print-completion bash)",
                          preamble=_completion_preamble())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                metavar="COMMAND")

    def design_args(p, output_default):
        p.add_argument("block", help="registered block (see `memwall list`)").complete = BLOCKS
        p.add_argument("--preset", default="default",
                       help=f"parameter preset: {', '.join(registry.PRESETS)} or another of the "
                            f"block's (`memwall list BLOCK`; default: default)")
        p.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help="override one parameter (repeatable; tuples comma-separated)")
        p.add_argument("-o", "--output", default=output_default, help="output folder")
        p.add_argument("--force", action="store_true",
                       help="build even when the block's size estimate (storage bits, "
                            "multipliers, netlist cells: `memwall list BLOCK`) is above the "
                            "size guard's limits")

    def name_arg(p):
        p.add_argument("--name", metavar="MODULE",
                       help="the top module's name, which every submodule's name starts with "
                            "(default: the block's name with _ for -), so that two "
                            "configurations can share one design")

    def device_arg(p, text):
        from synth.flow import devices
        parts = ", ".join(d[2] for t in ("ecp5", "ice40") for d in devices(t))
        p.add_argument("--device", metavar="PART", help=f"{text}: {parts}")

    def no_cache(p):
        p.add_argument("--no-cache", action="store_true",
                       help="synthesize (and lint) even what the cache of earlier results "
                            "holds, and refresh it; the cache is build/synth-cache, or "
                            "$MEMWALL_SYNTH_CACHE")

    def fail_on_timing(p):
        p.add_argument("--fail-on-timing", action="store_true",
                       help=f"exit with status {EXIT_TIMING} when a block misses its clock "
                            f"constraint (the misses are listed last either way)")

    p = sub.add_parser("list", help="show the blocks, their presets and parameters, and the "
                                    "papers they implement")
    p.add_argument("block", nargs="?", help="show this block only")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("generate", help="write a block's Verilog and JSON manifest")
    design_args(p, "build/generated")
    name_arg(p)
    p.add_argument("--no-src", action="store_true",
                   help="leave out the (* src *) attributes (by default they name source lines "
                        "relative to the project, never absolute paths)")
    p.add_argument("--no-timescale", action="store_true",
                   help="leave out the leading `timescale 1ns / 1ps line")
    p.add_argument("--target", default="generic", choices=("generic", *FAMILIES),
                   help="generic Verilog, or Verilog for an ECP5: its multipliers instantiate "
                        "MULT18X18D blocks with their own registers (default: generic)")
    p.add_argument("--interface", default="native", choices=("native", "axis"),
                   help="stream port names: the block's own (<s>__valid/__ready/__payload) or "
                        "AMBA AXI4-Stream (s_axis_<s>_tdata/_tvalid/_tready/_tlast for inputs, "
                        "m_axis_<s>_... for outputs; docs/integration.md) (default: native)")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("lint", help="run Verilator -Wall lint on a block's Verilog")
    design_args(p, "build/lint")
    p.add_argument("-v", "--verbose", action="store_true", help="print every warning")
    p.set_defaults(func=cmd_lint)
    p = sub.add_parser("synth", help="synthesize a block (or every block of a family) and "
                                     "estimate area and Fmax")
    design_args(p, "build/synth")
    name_arg(p)
    p.add_argument("--target", default="ecp5", choices=("generic", "ecp5", "ice40"),
                   help="generic gates, Lattice ECP5 or iCE40 (default: ecp5)")
    p.add_argument("--freq", type=float, help="clock constraint in MHz (default: the block's)")
    p.add_argument("--timing-weight", type=int, metavar="N",
                   help="nextpnr placer timing weight, 1 to 1000 (default: the block's, else "
                        "nextpnr's 10)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="place and route with nextpnr seeds 1 to N (in parallel, one per core) and "
                        "report the median Fmax with min and max (default: 1)")
    p.add_argument("--route-limit", type=float, metavar="MIN",
                   help="stop a seed's place and route after MIN minutes and report it as not "
                        "routed, below every routed seed in the median; the other seeds are "
                        "kept (default: no limit)")
    p.add_argument("--json", action="store_true",
                   help="print JSON (Fmax under fmax_mhz: the median over the seeds; "
                        "fmax_mhz_min, fmax_mhz_max, fmax_mhz_seeds, unrouted_seeds)")
    p.add_argument("--sdf", action="store_true",
                   help="also write each placement's routed delays (routed.sdf, "
                        "routed_seed<k>.sdf) for python -m synth.routed; runs the tools even "
                        "when the cache holds the report")
    device_arg(p, "the part to place on (default: the target's smallest that fits)")
    fail_on_timing(p)
    no_cache(p)
    p.set_defaults(func=cmd_synth)
    p = sub.add_parser("build", help="main job: every block through generate, lint and synthesis")
    p.add_argument("-o", "--output", default="build", help="output folder (default: build)")
    p.add_argument("--preset", default="default", help="preset for every block (default: default)")
    p.add_argument("--block", action="append", help="only this block (repeatable)")
    p.add_argument("--target", action="append", choices=("generic", "ecp5", "ice40"),
                   help="synthesis target (repeatable; default: each block's own)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="nextpnr seeds per placement; Fmax is their median (default: 1)")
    device_arg(p, "the part to place on, for the targets it belongs to (default: each target's "
                  "smallest that fits)")
    fail_on_timing(p)
    no_cache(p)
    cluster_args(p)
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("bench", help="measure a block family's throughput, latency, area, Fmax")
    p.add_argument("family", help="block family, e.g. umdam")
    p.add_argument("--preset", action="append", help="preset (repeatable; default: default, paper)")
    p.add_argument("--simulator", default="verilator", choices=("icarus", "verilator"))
    p.add_argument("-o", "--output", default="build/bench",
                   help="output folder: FAMILY.md, FAMILY.json, the simulators' log FAMILY.log "
                        "(default: build/bench)")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("sweep", help="synthesize (and simulate) every combination of parameter "
                                     "values on a Dask cluster: table and Pareto plot")
    p.add_argument("block", help="registered block (see `memwall list`)").complete = BLOCKS
    p.add_argument("--preset", default="default",
                   help=f"the preset the values are set on: {', '.join(registry.PRESETS)} or "
                        f"another of the block's (default: default)")
    p.add_argument("--set", action="append", metavar="NAME=V1,V2,...",
                   help="the values of one parameter (repeatable; every combination is a point; "
                        "a tuple parameter's values separated by ;)")
    p.add_argument("--target", default="ecp5", choices=("generic", "ecp5", "ice40"),
                   help="synthesis target (default: ecp5)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="nextpnr seeds per point; Fmax is their median (default: 1)")
    p.add_argument("--sim", action="store_true",
                   help="also measure each point's throughput and latency in simulation (the "
                        "block's full_rate benchmark, as `memwall bench`)")
    p.add_argument("--simulator", default="verilator", choices=("icarus", "verilator"),
                   help="simulator of --sim (default: verilator)")
    p.add_argument("-o", "--output", default="build/sweep",
                   help="output folder: sweep.csv, sweep.json, sweep.png (default: build/sweep)")
    p.add_argument("--force", action="store_true",
                   help="build points above the size guard's limits too")
    cluster_args(p)
    no_cache(p)
    p.set_defaults(func=cmd_sweep)
    p = sub.add_parser("reproduce", help="run a paper's system model beside the paper's figures")
    p.add_argument("paper", help="shield, rdxe, umdam, kvnand, flowkv or all")
    p.add_argument("-o", "--output", default="build/reproduce",
                   help="output folder (default: build/reproduce)")
    p.add_argument("--quick", action="store_true",
                   help="reduced size (the test suite's), written under OUTPUT/quick and "
                        "labelled so in every table and plot")
    cluster_args(p)
    p.set_defaults(func=cmd_reproduce)
    from .board.cli import add_parser as add_board_parser
    add_board_parser(sub, design_args, _Parser)
    from .model import add_parser as add_model_parser
    add_model_parser(sub, _Parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return args.func(args)
    except BrokenPipeError:         # `memwall list | head`
        sys.stderr.close()
        return 0
    except (UsageError, ParameterError, OutputError) as exc:
        print(f"memwall: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:       # SIGINT: child tools are stopped where they were started
        print("memwall: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        from sim.reproduce import ClusterLost
        from synth.flow import SynthError
        from synth.toolchain import ToolNotFound
        if isinstance(exc, (SynthError, ToolNotFound, ClusterLost)):
            print(f"memwall: {exc}", file=sys.stderr)
            return EXIT_TOOL
        raise


if __name__ == "__main__":
    sys.exit(main())
