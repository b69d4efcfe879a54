"""Render synthesis reports as Markdown and JSON for the CLI and the docs."""

from __future__ import annotations

import json
from typing import Iterable, Sequence

from .flow import SynthReport

__all__ = ["markdown_table", "reports_json", "timing_verdict"]

_COLUMNS = ("Design", "Target", "Device", "Cells", "LUTs", "FF", "DSP", "BRAM", "Fmax (MHz)",
            "Constraint (MHz)", "Slack (ns)", "Timing", "Device use", "Critical path", "Time (s)")
#: Columns left-aligned (text); the others are numbers.
_TEXT_COLUMNS = 3


def timing_verdict(report: SynthReport) -> str:
    """``met``, ``MISSED`` or ``–`` (no Fmax: no timing model, or no timed path)."""
    return {True: "met", False: "MISSED", None: "–"}[report.timing_met]


def _use(report: SynthReport) -> str:
    return ", ".join(f"{name} {share:.0f} %" for name, share in report.use_percent().items()) \
        or "–"


def _cell(value) -> str:
    return "–" if value is None else str(value)


def _seed_spread(r: SynthReport) -> str:
    """`` (lowest to highest, N seeds[, K not routed])`` of a report over several seeds, else
    ``""``."""
    seeds = len(r.fmax_mhz_seeds) + len(r.unrouted_seeds)
    if seeds < 2:
        return ""
    spread = f"{r.fmax_mhz_min:.1f} to {r.fmax_mhz_max:.1f}, " if r.fmax_mhz_seeds else ""
    unrouted = f", {len(r.unrouted_seeds)} not routed" if r.unrouted_seeds else ""
    return f" ({spread}{seeds} seeds{unrouted})"


def markdown_table(reports: Sequence[SynthReport] | Iterable[SynthReport], *,
                   notes: bool = True, names: Sequence[str] | None = None) -> str:
    """Return a Markdown table with one row per report.

    Parameters
    ----------
    reports : sequence of SynthReport
        Reports to render, in the order given.
    notes : bool
        Append each distinct ``note`` as a numbered footnote and reference it from the Fmax column.
    names : sequence of str, optional
        The Design column's name of each report (the CLI's block names); default: the top
        module's name.

    Fields that do not apply (LUTs of the generic flow, a missing Fmax) are shown as ``–``. A
    report over several placement seeds shows the median Fmax with the lowest and highest. The
    slack is the constraint's period minus the achieved one (negative: the constraint is missed,
    ``Timing`` says ``MISSED``); the device use is nextpnr's, wrapper included; the critical path
    is the median placement's, from its first cell to its last.
    """
    reports = list(reports)
    footnotes: list[str] = []
    rows = []
    names = list(names) if names is not None else [r.top for r in reports]
    for r, name in zip(reports, names, strict=True):
        fmax = "–" if r.fmax_mhz is None else f"{r.fmax_mhz:.1f}"
        fmax += _seed_spread(r)
        if notes and r.note:
            if r.note not in footnotes:
                footnotes.append(r.note)
            fmax += f" [{footnotes.index(r.note) + 1}]"
        slack = "–" if r.slack_ns is None else f"{r.slack_ns:+.2f}"
        path = "–" if r.critical_path is None else " → ".join(f"`{c}`" for c in r.critical_path)
        rows.append([name, r.target, r.device or "–", str(r.cells), _cell(r.luts), str(r.ffs),
                     _cell(r.dsps), _cell(r.brams), fmax, f"{r.freq_mhz:g}", slack,
                     timing_verdict(r), _use(r), path, f"{r.seconds:.1f}"])
    align = ["---"] * _TEXT_COLUMNS + ["---:"] * (len(_COLUMNS) - _TEXT_COLUMNS)
    for name in ("Timing", "Device use", "Critical path"):
        align[_COLUMNS.index(name)] = "---"
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if footnotes:
        lines.append("")
        lines += [f"[{i}] {note}" for i, note in enumerate(footnotes, 1)]
    return "\n".join(lines) + "\n"


def reports_json(reports: Iterable[SynthReport], *, indent: int | None = 2) -> str:
    """Return the reports as a JSON list of :meth:`SynthReport.as_dict` objects."""
    return json.dumps([r.as_dict() for r in reports], indent=indent)
