"""Functional coverage: each block's coverpoints and crosses (cocotb-coverage), sampled from what
its monitors saw, saved per simulator run for ``make coverage`` (:mod:`cocotb_tests.coverage`).

A block's testbench declares its points with :func:`sampler` (cocotb-coverage's points and
crosses), named ``BLOCK.point`` (``umdam.mapping``), and samples them from
:meth:`cocotb_tests.tb.BlockTB.observe`, which every monitored transfer reaches: the stimulus
never samples. When the launcher asks for coverage it sets :data:`ENV_FILE`; the run then writes
every point's bins and hits to that file as it exits (:func:`save`).
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

import cocotb
from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db

__all__ = ["ENV_FILE", "sampling", "sampler", "exclude", "value_class", "value_classes", "bins",
           "save", "merge"]

#: The file a run writes its functional coverage to (set by the launcher with coverage on).
ENV_FILE = "MEMWALL_FUNCTIONAL"
#: The key of the saved file that holds the excluded bins: ``{"POINT BIN": reason}``.
EXCLUDED = "excluded"
#: Bins a testbench showed unreachable at its parameters (:func:`exclude`), with the reason.
_excluded: dict[str, str] = {}


def exclude(point: str, bin_, reason: str) -> None:
    """Record that ``bin_`` of ``point`` cannot be reached at these parameters, and why; the
    testbench leaves it out of the point's bins and the report lists it."""
    _excluded[f"{point} {bin_!r}"] = reason


def sampling() -> bool:
    """Whether samplers record: outside a simulation always (the unit tests of this module),
    in one only when the launcher asked for its coverage (:data:`ENV_FILE` set)."""
    return not cocotb.is_simulation or bool(os.environ.get(ENV_FILE))


def sampler(points: dict[str, tuple], crosses: dict[str, list[str]] | None = None,
            unreachable: dict[str, dict] | None = None):
    """Return a function ``sample(item)`` that samples the cocotb-coverage points ``{name: (xf,
    bins[, rel])}`` (``xf(item)`` gives the value, None where the item does not concern that
    point; ``rel(value, bin)``, default equality, lets one value hit several bins) and the
    crosses ``{name: [point names]}``. ``unreachable`` names, per point or cross, the bins these
    parameters cannot reach with the reason, ``{name: {bin: reason}}``: they are left out (a
    cross ignores them) and recorded with :func:`exclude`. A name already declared in this
    process is reused: a second testbench of the same block adds to the same bins.

    A simulation that saves no coverage (:func:`sampling`: no :data:`ENV_FILE`) gets a sampler
    that does nothing: its points' functions cost up to a seventh of a run's time in ``make
    test``, for bins no one reads."""
    def sample(item):
        del item
    if not sampling():
        return sample
    unreachable = unreachable or {}
    for name, gone in unreachable.items():
        for b, reason in gone.items():
            exclude(name, b, reason)
    # A cross reads its points when it is made, and samples after them (the innermost wrapper).
    made = []
    for name, spec in points.items():
        kept = [b for b in spec[1] if b not in unreachable.get(name, {})]
        made.append(CoverPoint(name, xf=spec[0], bins=kept, rel=spec[2], inj=False)
                    if len(spec) > 2 else CoverPoint(name, xf=spec[0], bins=kept))
    for name, items in (crosses or {}).items():
        sample = CoverCross(name, items=items, ign_bins=list(unreachable.get(name, {})))(sample)
    for point in made:
        sample = point(sample)
    return sample


def value_class(value: int, width: int) -> str:
    """The class of a ``width``-bit field's value that a test should reach: ``zero``, ``max``
    (all ones) or ``between``."""
    return "zero" if value == 0 else "max" if value == (1 << width) - 1 else "between"


def value_classes(width: int) -> tuple[str, ...]:
    """The classes :func:`value_class` gives a ``width``-bit field (no ``between`` at 1 bit)."""
    return ("zero", "max") if width == 1 else ("zero", "between", "max")


def bins() -> dict[str, dict[str, int]]:
    """Every point and cross sampled in this process: ``{name: {bin: hits}}`` (bins as text)."""
    out = {}
    for name, item in coverage_db.items():
        if isinstance(item, (CoverPoint, CoverCross)):
            out[name] = {repr(b): int(h) for b, h in item.detailed_coverage.items()}
    return out


def save(path: Path) -> None:
    """Write :func:`bins` and the excluded bins to ``path`` (JSON)."""
    Path(path).write_text(json.dumps({"bins": bins(), EXCLUDED: _excluded}, indent=1,
                                     sort_keys=True) + "\n")


def merge(files) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """The bins of several runs' files, hits added (a bin is hit if any run hit it), and their
    excluded bins: ``({name: {bin: hits}}, {"POINT BIN": reason})``."""
    merged: dict[str, dict[str, int]] = {}
    excluded: dict[str, str] = {}
    for path in files:
        saved = json.loads(Path(path).read_text())
        excluded.update(saved[EXCLUDED])
        for name, hits in saved["bins"].items():
            point = merged.setdefault(name, {})
            for b, h in hits.items():
                point[b] = point.get(b, 0) + h
    return merged, excluded


def _save_on_exit() -> None:
    path = os.environ.get(ENV_FILE)
    if path:
        save(Path(path))


atexit.register(_save_on_exit)
