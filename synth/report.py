"""Render synthesis reports as Markdown and JSON for the CLI and the docs."""

from __future__ import annotations

import json
from typing import Iterable, Sequence

from .flow import SynthReport

__all__ = ["markdown_table", "reports_json"]

_COLUMNS = ("Design", "Target", "Device", "Cells", "LUTs", "FF", "DSP", "BRAM", "Fmax (MHz)",
            "Constraint (MHz)", "Time (s)")


def _cell(value) -> str:
    return "–" if value is None else str(value)


def markdown_table(reports: Sequence[SynthReport] | Iterable[SynthReport], *,
                   notes: bool = True) -> str:
    """Return a Markdown table with one row per report.

    Parameters
    ----------
    reports : sequence of SynthReport
        Reports to render, in the order given.
    notes : bool
        Append each distinct ``note`` as a numbered footnote and reference it from the Fmax column.

    Fields that do not apply (LUTs of the generic flow, a missing Fmax) are shown as ``–``. A
    report over several placement seeds shows the median Fmax with the lowest and highest.
    """
    reports = list(reports)
    footnotes: list[str] = []
    rows = []
    for r in reports:
        fmax = "–" if r.fmax_mhz is None else f"{r.fmax_mhz:.1f}"
        if len(r.fmax_mhz_seeds) > 1:
            fmax += (f" ({r.fmax_mhz_min:.1f} to {r.fmax_mhz_max:.1f}, "
                     f"{len(r.fmax_mhz_seeds)} seeds)")
        if notes and r.note:
            if r.note not in footnotes:
                footnotes.append(r.note)
            fmax += f" [{footnotes.index(r.note) + 1}]"
        rows.append([r.top, r.target, r.device or "–", str(r.cells), _cell(r.luts), str(r.ffs),
                     _cell(r.dsps), _cell(r.brams), fmax, f"{r.freq_mhz:g}", f"{r.seconds:.1f}"])
    lines = ["| " + " | ".join(_COLUMNS) + " |",
             "|" + "|".join(["---", "---", "---"] + ["---:"] * (len(_COLUMNS) - 3)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if footnotes:
        lines.append("")
        lines += [f"[{i}] {note}" for i, note in enumerate(footnotes, 1)]
    return "\n".join(lines) + "\n"


def reports_json(reports: Iterable[SynthReport], *, indent: int | None = 2) -> str:
    """Return the reports as a JSON list of :meth:`SynthReport.as_dict` objects."""
    return json.dumps([r.as_dict() for r in reports], indent=indent)
