"""Design-space sweeps: every combination of a grid of parameter values, each point generated,
synthesized and, when asked, simulated on a Dask cluster; written as a table and a Pareto plot.

``memwall sweep`` is the front end. :func:`grid` expands ``--set NAME=V1,V2,...`` options into
points; :func:`run` runs them on a Dask client (:func:`sim.reproduce.dask_client`: a local
cluster, or an existing one) in two steps per point: a worker checks the parameters and writes
the Verilog (:func:`prepare`), then, unless :mod:`synth.cache` already holds the report for that
Verilog, tools and options, a worker synthesizes it (:func:`synthesize_point`) and, with a
simulator and unless the cache holds the figures, measures its throughput with the block's
``full_rate`` benchmark (:func:`simulate_point`). The cache lives beside the client, so a
cluster's workers need no shared folder. A point the block refuses is kept with the reason; a
point whose tools fail is kept with the error, and the others go on.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sim.plots import pyplot, save_figure
from sim.reproduce import ClusterLost

from . import registry
from .params import ParameterError

__all__ = ["SWEEP_MODULES", "Point", "grid", "Feeder", "pareto", "prepare",
           "synthesize_point", "stop", "synth_result", "simulate_point", "run", "rows", "csv_text",
           "plot", "markdown"]

#: The modules a sweep's tasks import on the workers.
SWEEP_MODULES = ("memwall.sweep", "synth.flow", "cocotb_tests.bench")
#: Seconds without a finished task after which :meth:`Feeder.finished` says what is still running.
HEARTBEAT_S = 60.0
#: Separates the values of a tuple parameter in ``--set`` (its items are comma-separated).
TUPLE_SEPARATOR = ";"


def grid(params_cls, sets: list[str] | None) -> list[dict[str, str]]:
    """The points of ``--set NAME=V1,V2,...`` options: every combination, as text overrides, the
    last parameter changing fastest. A tuple parameter's values are separated by ``;``.

    Raises
    ------
    ParameterError
        For no ``--set``, a malformed one, a parameter given twice, an unknown parameter, an empty
        value, a value given twice, or a value that is not of the parameter's type (a value of the
        right type that the block refuses is a point, refused when it is run).
    """
    axes: dict[str, list[str]] = {}
    for text in sets or []:
        name, sep, values = (part.strip() for part in text.partition("="))
        if not sep or not name:
            raise ParameterError(f"--set takes NAME=V1,V2,... (a tuple parameter's values "
                                 f"separated by {TUPLE_SEPARATOR}), not {text!r}")
        if name in axes:
            raise ParameterError(f"parameter {name} is given twice with --set; give it once "
                                 f"with all its values")
        separator = TUPLE_SEPARATOR if params_cls.is_tuple(name) else ","
        items = [v.strip() for v in values.split(separator)]
        if not all(items):
            raise ParameterError(f"--set {name}: an empty value in {values!r}; give values "
                                 f"separated by {separator!r}")
        parsed = [params_cls.parse(name, v) for v in items]
        for k, value in enumerate(parsed):
            if value in parsed[:k]:
                raise ParameterError(f"--set {name}: value {items[k]} is given twice")
        axes[name] = items
    if not axes:
        raise ParameterError("sweep needs at least one --set NAME=V1,V2,... (see `memwall list "
                             "BLOCK` for the parameters)")
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


class _Lost:
    """Stands for a task the lost cluster did not finish: its ``key``, and ``result()`` raising
    :class:`ClusterLost`, as a failed task's future raises its error."""

    def __init__(self, key: str):
        self.key = key

    def result(self):
        raise ClusterLost("the connection to the Dask scheduler was lost before this task "
                          "finished")


class Feeder:
    """Hands tasks to a Dask cluster no faster than its workers take them, and yields them as
    they finish.

    Dask gives a task to a worker when it is submitted, so a task queued behind a long one waits
    though another worker is idle (docs/sweeps.md: a cold ``memwall build`` left flowkv queued
    behind rdxe-dxt while rdxe-vac ran on the other worker). The feeder keeps at most one task
    per worker thread on the cluster and the rest here, in the order submitted; each goes to
    the first worker that frees. The count of threads is asked at each hand-over, so workers
    that join an existing cluster are used.

    If the client loses its scheduler, every task not finished is yielded at once, its
    ``result()`` raising :class:`ClusterLost`, so that the caller reports it as failed and
    keeps what did finish.
    """

    def __init__(self, client, name: str):
        self.client, self.name, self.gone = client, name, False
        self.queue, self.pending, self.done = [], set(), []

    def submit(self, key: str, fn, *args, **kwargs) -> str:
        """Queue ``fn(*args, **kwargs)`` as the task ``key`` (unique); returns ``key``, which is
        the key of the future :meth:`finished` yields for it."""
        self.queue.append((key, fn, args, kwargs))
        self._feed()
        return key

    def __len__(self) -> int:
        """Tasks submitted and not yet yielded by :meth:`finished`."""
        return len(self.queue) + len(self.pending) + len(self.done)

    @property
    def lost(self) -> bool:
        """Whether the client has lost its scheduler (it reconnects for 30 s, then closes; the
        cluster's tasks are gone either way)."""
        return self.gone or self.client.status not in ("running", "newly-created")

    def _feed(self):
        if self.lost:       # results cannot be fetched either: every task not yielded has failed,
            # but one that raised keeps its error, which the client already holds.
            left = [*self.done, *self.pending] + [_Lost(k) for k, *_ in self.queue]
            self.done = [f if getattr(f, "status", None) == "error" else _Lost(f.key)
                         for f in left]
            self.pending, self.queue = set(), []
            return
        finished = {f for f in self.pending if f.done()}
        self.pending -= finished
        self.done += finished
        if not self.queue:
            return
        try:
            threads = max(1, sum(self.client.nthreads().values()))
        except OSError:     # the scheduler went before the client noticed
            self.gone = True
            return self._feed()
        while self.queue and len(self.pending) < threads:
            key, fn, args, kwargs = self.queue.pop(0)
            self.pending.add(self.client.submit(fn, *args, key=key, pure=False, **kwargs))

    def finished(self, progress: Callable[[str], None], what: Callable[[], str]):
        """Yield the futures as they finish, tasks submitted meanwhile included; after each
        :data:`HEARTBEAT_S` in which none finishes, ``progress`` gets ``what()`` and the time
        waited (a large block synthesizes for ten minutes). A lost scheduler is one
        ``progress`` line."""
        from concurrent.futures import CancelledError

        from distributed import wait

        started, told = time.monotonic(), False
        while len(self):
            self._feed()
            if self.lost and not told:
                told = True
                unfinished = sum(isinstance(f, _Lost) for f in self.done)
                progress(f"{self.name}: lost the connection to the Dask scheduler: the "
                         f"{unfinished} task(s) not finished are reported as failed")
            if self.done:
                yield self.done.pop(0)
                continue
            try:
                wait(list(self.pending), timeout=HEARTBEAT_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                progress(f"{what()} ({(time.monotonic() - started) / 60:.0f} min)")
            except CancelledError:
                pass        # a task cancelled, by its scheduler's loss or on the cluster: done


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the ``(area, figure)`` points on the Pareto front: those that no other point
    matches or beats in both (no more area, no less figure) while beating in one."""
    def beaten(a, b):
        return b[0] <= a[0] and b[1] >= a[1] and b != a
    return [k for k, p in enumerate(points) if not any(beaten(p, q) for q in points)]


# --- the tasks, run on the workers (module-level functions of picklable arguments) ---------------

def prepare(block_name: str, preset: str, overrides: dict[str, str], target: str,
            options: dict, force: bool, simulator: str | None = None) -> dict:
    """Check one point's parameters and write its Verilog for ``target``: ``{"refused": why}``,
    or its parameters, top module, Verilog and the inputs of its cache keys (``options``: the
    synthesis options; with a ``simulator``, the benchmark's too)."""
    from synth.cache import key_inputs

    block = registry.get(block_name)
    try:
        params = block.parameters(preset, overrides, force=force)
    except ParameterError as exc:
        return {"refused": str(exc)}
    text, _ = block.verilog(params, target)
    prepared = {"parameters": params.as_dict(), "top": block.top, "verilog": text,
                "inputs": key_inputs(text, block.top, target, options)}
    if simulator is not None:
        from cocotb_tests.bench import full_rate_inputs
        prepared["sim_inputs"] = full_rate_inputs(block, params, simulator)
    return prepared


def synthesize_point(prepared: dict, target: str, options: dict,
                     workdir: str | None = None) -> dict:
    """Synthesize a prepared design (``verilog``, ``top``) in ``workdir``, by default a scratch
    folder removed afterwards: ``{"report": ..., "inputs": ...}`` (the report as a dict, the key
    inputs with this worker's tool versions), or ``{"error": ...}`` when a tool fails (a
    scratch folder, with the logs, is then kept)."""
    from synth.cache import key_inputs
    from synth.flow import SynthError, ToolNotFound, synthesize

    folder = Path(workdir or tempfile.mkdtemp(prefix="memwall-sweep-"))
    try:
        report = synthesize(prepared["verilog"], prepared["top"], target, folder, **options)
    except (SynthError, ToolNotFound) as exc:      # their messages carry the log's last lines
        if workdir is None and _stopping.is_set():
            shutil.rmtree(folder, ignore_errors=True)   # stopped, not failed: no log to read
        return {"error": str(exc)}
    if workdir is None:
        shutil.rmtree(folder, ignore_errors=True)
    return {"report": report.as_dict(),
            "inputs": key_inputs(prepared["verilog"], prepared["top"], target, options)}


#: Set in a worker by :func:`stop`: its tools' failures from then on are the interrupt's.
_stopping = threading.Event()


def stop() -> None:
    """Stop the tools this worker process runs (:func:`synth.toolchain.stop_children`), for a
    command interrupted on the client; the scratch folders of the stopped syntheses go too."""
    from synth.toolchain import stop_children

    _stopping.set()
    stop_children()


def synth_result(result: dict, cache):
    """The :class:`synth.flow.SynthReport` of a :func:`synthesize_point` result, stored in
    ``cache`` (a :class:`synth.cache.SynthCache`, or ``None``) under the worker's key."""
    from synth.cache import cache_key
    from synth.flow import SynthReport

    report = SynthReport.from_dict(result["report"])
    if cache is not None:
        cache.put(cache_key(result["inputs"]), report, result["inputs"])
    return report


def simulate_point(block_name: str, parameters: dict, simulator: str) -> dict:
    """The ``full_rate`` figures of one point (:func:`cocotb_tests.bench.full_rate`), the
    simulator's output in a scratch log."""
    from cocotb_tests.bench import full_rate

    block = registry.get(block_name)
    with tempfile.TemporaryDirectory(prefix="memwall-sweep-sim-") as tmp:
        return full_rate(block, block.params.from_dict(parameters), simulator,
                         Path(tmp) / "metrics.json", log=Path(tmp) / "sim.log")


# --- the client side ------------------------------------------------------------------------------

@dataclass
class Point:
    """One point of a sweep and what is known of it so far."""

    overrides: dict[str, str]
    parameters: dict | None = None
    report: object = None           # synth.flow.SynthReport once synthesized
    metrics: dict | None = None
    metrics_cached: bool = False
    sim_inputs: dict | None = None
    refused: str = ""
    errors: list[str] = field(default_factory=list)
    pending: int = 0

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())

    @property
    def status(self) -> str:
        return "refused" if self.refused else "failed" if self.errors else "ok"


def _first_line(text: str) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else "no message"


def _summary(point: Point) -> str:
    if point.refused:
        return f"refused: {point.refused}"
    if point.errors:
        return "FAILED: " + "; ".join(_first_line(e) for e in point.errors)
    r, parts = point.report, []
    if r is not None:
        area = ", ".join(f"{v} {n}" for n, v in (("LUTs", r.luts), ("FFs", r.ffs),
                                                  ("DSPs", r.dsps), ("BRAMs", r.brams))
                         if v is not None)
        fmax = "no Fmax" if r.fmax_mhz is None else f"{r.fmax_mhz:.1f} MHz"
        parts.append(f"{area or f'{r.cells} cells'}, {fmax}" + (" (cached)" if r.cached else ""))
    if point.metrics is not None:
        parts.append(f"{point.metrics['per_cycle']:g} items/cycle, latency "
                     f"{point.metrics['latency']} cycles"
                     + (" (cached)" if point.metrics_cached else ""))
    return "; ".join(parts)


def run(client, block, preset: str, points: list[dict[str, str]], *, target: str,
        seeds: int = 1, simulator: str | None = None, cache=None, force: bool = False,
        progress: Callable[[str], None] = print) -> list[Point]:
    """Run every point on ``client``; one ``progress`` line per point as it finishes.

    ``cache`` is a :class:`synth.cache.SynthCache` (``None``: synthesize every point, store
    nothing); ``simulator`` (``"verilator"`` or ``"icarus"``) also measures throughput.
    """
    from synth.cache import cache_key

    state = [Point(dict(p)) for p in points]
    options = dict(block.synth.flow_options(), seeds=seeds)
    tag, tasks, feeder = uuid.uuid4().hex[:8], {}, Feeder(client, "sweep")
    started = time.monotonic()

    def submit(kind: str, k: int, fn, *args):
        tasks[feeder.submit(f"sweep-{tag}-{kind}-{k}", fn, *args)] = (kind, k)
        state[k].pending += 1

    def running() -> str:
        left = [p.label for p in state if p.pending]
        return (f"sweep: {len(left)} point(s) running or queued: {', '.join(left[:4])}"
                + (" ..." if len(left) > 4 else ""))

    for k, point in enumerate(state):
        submit("prepare", k, prepare, block.name, preset, point.overrides, target, options,
               force, simulator)
    count = 0
    for future in feeder.finished(progress, running):
        kind, k = tasks.pop(future.key)
        point = state[k]
        point.pending -= 1
        try:
            result = future.result()
        except Exception as exc:    # noqa: BLE001 - a task that broke: this point fails alone
            result = {"error": f"{kind}: {type(exc).__name__}: {exc}"}
        if "error" in result:
            point.errors.append(result["error"])
        elif kind == "prepare" and "refused" in result:
            point.refused = result["refused"]
        elif kind == "prepare":
            point.parameters = result["parameters"]
            hit = None if cache is None else cache.get(cache_key(result["inputs"]))
            if hit is not None:
                point.report = hit
            else:
                submit("synth", k, synthesize_point, result, target, options)
            if simulator is not None:
                point.sim_inputs = result["sim_inputs"]
                point.metrics = None if cache is None else \
                    cache.get_result(cache_key(point.sim_inputs))
                point.metrics_cached = point.metrics is not None
                if point.metrics is None:
                    submit("sim", k, simulate_point, block.name, point.parameters, simulator)
        elif kind == "synth":
            point.report = synth_result(result, cache)
        else:
            point.metrics = result
            if cache is not None:
                cache.put_result(cache_key(point.sim_inputs), result, point.sim_inputs)
        if point.pending == 0:
            count += 1
            progress(f"[{count}/{len(state)} at {time.monotonic() - started:.0f} s] "
                     f"{point.label}: {_summary(point)}")
    return state


# --- results --------------------------------------------------------------------------------------

def _row(point: Point) -> dict:
    r, m = point.report, point.metrics or {}
    fmax = None if r is None else r.fmax_mhz
    per_cycle = m.get("per_cycle")
    return {
        "status": point.status,
        "luts": getattr(r, "luts", None), "ffs": getattr(r, "ffs", None),
        "dsps": getattr(r, "dsps", None), "brams": getattr(r, "brams", None),
        "cells": getattr(r, "cells", None), "fmax_mhz": fmax,
        "items_per_cycle": per_cycle, "latency_cycles": m.get("latency"),
        "throughput_mitems_s": None if per_cycle is None or fmax is None
        else round(per_cycle * fmax, 3),
        "cached": None if r is None else r.cached,
        "sim_cached": point.metrics_cached if point.metrics is not None else None,
        "synth_seconds": None if r is None else round(r.seconds, 1),
        "device": None if r is None else r.device,
        "reason": point.refused or "; ".join(point.errors),
    }


def rows(points: list[Point]) -> list[dict]:
    """One row per point: the swept parameters' text, then the results (docs/sweeps.md)."""
    return [{**p.overrides, **_row(p)} for p in points]


def csv_text(points: list[Point]) -> str:
    table = rows(points)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(table[0]) if table else [], lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in table)
    return out.getvalue()


def json_text(points: list[Point], meta: dict) -> str:
    """``meta`` (block, preset, target, grid, tools, command) and one entry per point: its row
    and its full parameters (``null`` for a refused point)."""
    entries = [dict(row, parameters=p.parameters) for p, row in zip(points, rows(points))]
    return json.dumps(dict(meta, points=entries), indent=2) + "\n"


def _area(row: dict) -> tuple[float | None, str]:
    """The area axis: LUT4s on an FPGA target, two-input gates and flip-flops for ``generic``."""
    if row["luts"] is not None:
        return row["luts"], "area (LUT4s)"
    return row["cells"], "area (generic cells: two-input gates and flip-flops)"


def _plot_label(point: Point, row: dict) -> str:
    """A point's values, with the flip-flops, DSPs and block RAMs that the LUT axis leaves out."""
    extra = [f"{row[k]} {name}" for k, name in (("ffs", "FF"), ("dsps", "DSP"), ("brams", "BRAM"))
             if row[k] and (k == "ffs" or row["luts"] is not None)]
    return point.label + (f" ({', '.join(extra)})" if extra else "")


def plot(points: list[Point], path: Path, title: str) -> None:
    """Area against Fmax and, where measured, against throughput (million items a second at
    Fmax); the Pareto front of each marked and every point labelled."""
    plt = pyplot()

    table = [(p, row) for p, row in zip(points, rows(points)) if row["status"] == "ok"]
    panels = [("fmax_mhz", "Fmax (MHz)")]
    if any(row["throughput_mitems_s"] is not None for _, row in table):
        panels.append(("throughput_mitems_s", "throughput at Fmax (million items/s)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.8), squeeze=False)
    for ax, (column, label) in zip(axes[0], panels):
        xy = [(_area(row)[0], row[column], _plot_label(p, row)) for p, row in table
              if _area(row)[0] is not None and row[column] is not None]
        ax.set_ylabel(label)
        ax.set_xlabel(_area(table[0][1])[1] if table else "area")
        ax.grid(True, alpha=0.3)
        if not xy:
            ax.text(0.5, 0.5, f"no point has {label}", ha="center", va="center",
                    transform=ax.transAxes)
            continue
        front = set(pareto([(x, y) for x, y, _ in xy]))
        ax.scatter([x for x, _, _ in xy], [y for _, y, _ in xy], color="0.6", label="point")
        line = sorted(xy[k][:2] for k in front)
        ax.plot([x for x, _ in line], [y for _, y in line], "o-", color="tab:red",
                label="Pareto front (less area, more " + label.split(" (")[0] + ")")
        labels: dict[tuple, list[str]] = {}
        for x, y, text in xy:                   # points that coincide share one label
            labels.setdefault((x, y), []).append(text)
        for (x, y), texts in labels.items():
            ax.annotate("\n".join(texts), (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
        ax.margins(0.2)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110, fmt="png")


def markdown(points: list[Point]) -> str:
    """The sweep as a Markdown table (stdout of ``memwall sweep``)."""
    from sim.reproduce import markdown_table

    table = rows(points)
    if not table:
        return ""
    return markdown_table(list(table[0]), [[_cell(v) for v in row.values()]
                                           for row in table]) + "\n"


def _cell(value, limit: int = 100) -> str:
    """A table cell: one line, no column bar, a long reason cut (the JSON has it whole)."""
    if isinstance(value, float):
        value = format(value, ".4g")
    text = "–" if value is None or value == "" else " ".join(str(value).split()).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."
