"""Paper reproductions: run a system model, compare it with the paper, write Markdown and plots.

Every paper has a module in ``sim/`` with a function ``reproduce(ctx) -> Result``. The function
computes its figures from the model (never from the paper's numbers), puts the paper's value beside
each one in a :class:`Row`, and writes its plots through ``ctx.save_plot``. :func:`run` renders
the result to ``<out>/<paper>/report.md`` and returns it; ``memwall reproduce`` is the front end.

Sweeps go through :meth:`Context.map`, which runs the points in parallel on a Dask cluster: a
local cluster of one single-threaded worker process per core by default
(:func:`dask_client`), or an existing cluster when given its scheduler address. The points come back
in the order given, and progress is printed as they finish. A context without a client runs the
points in this process, one after the other (the unit tests use that).

A point function must be a module-level function of picklable arguments, because it runs in another
process, possibly on another machine: every worker needs memwall importable (``pip install`` it in
the workers' environment).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .plots import save_figure

__all__ = ["PAPERS", "Row", "Result", "Context", "ReproduceError", "ClusterLost", "dask_client",
           "run", "markdown_table", "difference"]

#: Paper name -> the sim module whose ``reproduce(ctx)`` reproduces it.
PAPERS = {
    "shield": "sim.shield",
    "rdxe": "sim.rdxe",
    "umdam": "sim.umdam",
    "kvnand": "sim.kvnand",
    "flowkv": "sim.flowkv",
}


#: Seconds to wait for an existing Dask scheduler before giving up.
CONNECT_TIMEOUT_S = 10


class ReproduceError(Exception):
    """A user mistake or an unreachable cluster: printed as one line by the CLI."""


class ClusterLost(RuntimeError):
    """The client lost its Dask scheduler before a task finished: printed as one line by the
    CLI, or, where each task stands alone (``sweep``, ``build``), reported per task."""


@dataclass(frozen=True)
class Row:
    """One figure of the paper beside ours.

    ``paper`` is the paper's value (``None`` when the paper gives none, a string for a range such as
    ``"2.8-3.0"``); ``ours`` the model's. ``fmt`` formats both numbers; ``note`` says what was
    assumed or why they differ.
    """

    figure: str
    paper: float | str | None
    ours: float | str
    unit: str = ""
    note: str = ""
    fmt: str = ".3g"


@dataclass
class Result:
    """What a reproduction found: the comparison, extra tables, plots and an honest account."""

    title: str
    rows: list[Row] = field(default_factory=list)
    #: (heading, Markdown body) sections after the comparison, e.g. a full sweep table.
    tables: list[tuple[str, str]] = field(default_factory=list)
    #: Plot files written under the output folder (``ctx.save_plot``), in the report's order.
    plots: list[Path] = field(default_factory=list)
    #: Paragraphs: assumptions, cross-checks, and why figures differ.
    notes: list[str] = field(default_factory=list)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def difference(paper, ours) -> str:
    """``ours`` relative to ``paper`` as a signed percentage, or ``–`` when not both numbers."""
    p, o = _number(paper), _number(ours)
    if p is None or o is None or p == 0 or not math.isfinite(o):
        return "–"
    return f"{100.0 * (o / p - 1.0):+.1f} %"


def _value(value, fmt: str, unit: str) -> str:
    if value is None:
        return "not given"
    text = format(value, fmt) if _number(value) is not None else str(value)
    return f"{text} {unit}".rstrip() if unit and unit != "%" else f"{text}{unit}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence], *,
                   align: str | None = None) -> str:
    """A Markdown table; ``align`` has one ``l`` or ``r`` per column (default: ``l`` then ``r``)."""
    align = align or "l" + "r" * (len(header) - 1)
    if len(align) != len(header):
        raise ValueError(f"align needs one character per column ({len(header)}), not {align!r}")
    lines = ["| " + " | ".join(map(str, header)) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    for row in rows:
        row = list(row)
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells, the header {len(header)}: {row!r}")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def comparison_table(rows: Sequence[Row]) -> str:
    """The paper-beside-ours table of a result."""
    return markdown_table(
        ["figure", "paper", "ours", "difference", "note"],
        [[r.figure, _value(r.paper, r.fmt, r.unit), _value(r.ours, r.fmt, r.unit),
          difference(r.paper, r.ours), r.note or ""] for r in rows],
        align="lrrrl")


#: How a quick run's tables and plots are labelled.
QUICK_LABEL = "quick: reduced size (--quick)"


def _status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Context:
    """What a reproduction gets: where to write, how big to run, and a parallel ``map``.

    Parameters
    ----------
    out_dir : Path or None
        The paper's output folder (created); ``None`` for a context that only maps (no plots).
    quick : bool
        Run at the reduced size the test suite uses (fewer points, shorter traces).
    client : distributed.Client or None
        Where :meth:`map` runs its points; ``None`` runs them here, one after the other.
    progress : callable or None
        Receives one line per finished point; ``None`` prints to stderr.
    """

    def __init__(self, out_dir: Path | None, *, quick: bool = False, client=None,
                 progress: Callable[[str], None] | None = None, name: str = "reproduce"):
        self.out_dir = None if out_dir is None else Path(out_dir)
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self.quick = quick
        self.client = client
        self.name = name
        self._progress = progress or _status

    def plot_path(self, name: str) -> Path:
        """Path of a plot file ``name`` (``.png``) in the output folder."""
        if not name.endswith(".png"):
            raise ValueError(f"plot names end in .png, not {name!r}")
        if self.out_dir is None:
            raise ValueError(f"this context has no output folder for the plot {name!r}")
        return self.out_dir / name

    def save_plot(self, fig, name: str, *, dpi: int = 110) -> Path:
        """Write ``fig`` as the plot ``name`` and close it; a quick run's plot says so in its
        corner. The file appears whole: written under a temporary name, then renamed."""
        path = self.plot_path(name)
        if self.quick:
            fig.text(0.995, 0.005, QUICK_LABEL, ha="right", va="bottom", fontsize=7,
                     color="0.4")
        return save_figure(fig, path, dpi=dpi, fmt="png")

    def progress(self, message: str) -> None:
        self._progress(f"[{self.name}] {message}")

    def map(self, fn: Callable, items: Sequence, *, label: str) -> list:
        """``[fn(item) for item in items]``, in parallel on the cluster, with progress lines.

        ``fn`` must be a module-level function (it is pickled to the workers). A point that raises
        stops the sweep with the point named.
        """
        items = list(items)
        n = len(items)
        started = time.monotonic()
        step = max(1, n // 10)              # about ten progress lines per sweep

        def report(done):
            if done == n or done % step == 0:
                self.progress(f"{label}: {done}/{n} points ({time.monotonic() - started:.1f} s)")

        if self.client is None:
            results = []
            for k, item in enumerate(items):
                try:
                    results.append(fn(item))
                except Exception as exc:
                    raise RuntimeError(f"{label}: point {item!r} failed: {exc}") from exc
                report(k + 1)
            return results

        from distributed import as_completed

        futures = self.client.map(fn, items, pure=False)
        index = {f.key: k for k, f in enumerate(futures)}
        results = [None] * n
        for done, future in enumerate(as_completed(futures), 1):
            k = index[future.key]
            if future.status == "cancelled":
                raise ClusterLost(f"{label}: the connection to the Dask scheduler was lost "
                                  f"after {done - 1} of {n} points; nothing was written")
            if future.status == "error":
                exc = future.exception()
                for other in futures:
                    other.cancel()
                raise RuntimeError(f"{label}: point {items[k]!r} failed: {exc}") from exc
            results[k] = future.result()
            report(done)
        return results


def _one_line(exc: BaseException, limit: int = 160) -> str:
    """An exception as a short line: its type when it has no words, newlines folded."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _accepts_tcp(scheduler: str) -> bool:
    """Whether something accepts a TCP connection at a ``tcp://`` or ``tls://`` address."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(scheduler)
        if scheme not in ("tcp", "tls"):
            return False
        with socket.create_connection(parse_host_port(location, 8786), timeout=2):
            return True
    except (OSError, ValueError, TypeError):
        return False


def _identity(scheduler: str) -> dict:
    """What the Dask server at ``scheduler`` says it is, asked within :data:`CONNECT_TIMEOUT_S`:
    distributed's ``Client`` waits for ever on a server that takes the connection and is silent."""
    import asyncio

    from distributed.core import rpc

    async def ask():
        server = rpc(scheduler, timeout=CONNECT_TIMEOUT_S)
        try:
            return await asyncio.wait_for(server.identity(), CONNECT_TIMEOUT_S)
        finally:
            await server.close_rpc()
    return asyncio.run(ask())


def _connect(client_type, scheduler: str):
    """A client of the scheduler at ``scheduler``, or :class:`ReproduceError` in one line."""
    try:
        kind = _identity(scheduler).get("type")
        if kind != "Scheduler":
            raise ReproduceError(f"{scheduler!r} answers as a Dask {kind or 'server'}, not a "
                                 f"scheduler; give the scheduler's address (tcp://HOST:8786 by "
                                 f"default)")
        return client_type(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except ReproduceError:
        raise
    except (OSError, TimeoutError, ValueError) as exc:
        # A server that takes the connection but never speaks Dask ends in a timeout too.
        if _accepts_tcp(scheduler):
            detail = _one_line(exc) if str(exc).strip() else \
                f"no Dask reply within {CONNECT_TIMEOUT_S} s"
            raise ReproduceError(f"{scheduler!r} answers, but not as a Dask scheduler "
                                 f"({detail})") from exc
        raise ReproduceError(f"cannot reach the Dask scheduler at {scheduler!r}: "
                             f"{_one_line(exc)}") from exc
    except Exception as exc:    # noqa: BLE001 - whatever the wrong server's bytes made of Dask
        # Another server's reply read as Dask's protocol: a frame length of exabytes
        # (MemoryError), a bad header (struct or msgpack errors), ...
        raise ReproduceError(f"{scheduler!r} answers, but not as a Dask scheduler "
                             f"({type(exc).__name__}: {_one_line(exc, 120)})") from exc


#: The modules a reproduction's points import on the workers.
REPRODUCE_MODULES = ("sim.reproduce",)
#: Evaluated on every worker of an existing cluster, formatted with the modules it must import:
#: the package first, so that a worker without it answers False rather than raising.
_WORKER_CHECK = ("all(u.find_spec(m.partition('.')[0]) is not None and u.find_spec(m) is not None"
                 " for u in [__import__('importlib.util').util] for m in {modules!r})")


def _check_workers(client, scheduler: str, modules=REPRODUCE_MODULES) -> None:
    """Refuse, in one line, a cluster with no workers or with workers that lack memwall."""
    try:
        found = client.run(eval, _WORKER_CHECK.format(modules=tuple(modules)))
    except Exception as exc:    # noqa: BLE001 - a worker that cannot even answer
        raise ReproduceError(f"the Dask workers at {scheduler!r} cannot run memwall "
                             f"({type(exc).__name__}: {_one_line(exc, 120)})") from exc
    if not found:
        raise ReproduceError(f"the Dask cluster at {scheduler!r} has no workers")
    lacking = sorted(w for w, ok in found.items() if not ok)
    if lacking:
        raise ReproduceError(f"{len(lacking)} of {len(found)} Dask workers at {scheduler!r} "
                             f"lack memwall (install it in their environment): "
                             f"{', '.join(lacking[:3])}{' ...' if len(lacking) > 3 else ''}")


def _close(client) -> None:
    """Close ``client``. One that lost its scheduler is still reconnecting, and distributed logs
    the cancelled reconnection as an error with a traceback: the commands have already said the
    scheduler was lost, in one line."""
    log = logging.getLogger("distributed.client")
    level = log.level
    if client.status != "running":
        log.setLevel(logging.CRITICAL)
    try:
        client.close()
    finally:
        log.setLevel(level)


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None,
                modules: Sequence[str] = REPRODUCE_MODULES):
    """A Dask client: on ``scheduler`` if given, else on a local cluster of ``workers`` processes.

    An existing cluster's workers must import ``modules`` (the code its tasks run); an address
    that cannot be reached, that answers but not as a Dask scheduler, or whose cluster has no
    such workers raises :class:`ReproduceError` with one line saying which.

    The local cluster has one single-threaded worker process per core by default (the models are
    NumPy and Python: processes, not threads, run them side by side), no dashboard, and is torn down
    on exit.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise ReproduceError(f"Dask's distributed package is missing ({exc}); reinstall memwall "
                             "(`make venv`)") from exc
    # An interrupt can land inside distributed's `sync`, whose cancel callback then fails on
    # the event loop (a NameError, distributed 2026.8) and tornado logs it with a traceback;
    # the client's own errors reach us as exceptions, so that log stays quiet.
    logging.getLogger("tornado.application").setLevel(logging.CRITICAL)
    if scheduler is not None:
        if workers is not None:
            raise ReproduceError("--workers applies to the local cluster; an existing cluster "
                                 "(--scheduler) has its own workers")
        client = _connect(Client, scheduler)
        try:
            _check_workers(client, scheduler, modules)
            yield client
        finally:
            _close(client)
        return
    n = workers if workers is not None else (os.cpu_count() or 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
        raise ReproduceError(f"--workers must be an integer from 1 to 1024, not {workers!r}")
    # The cluster logs nothing below CRITICAL: an interrupt cancels its tasks, which the workers
    # report as warnings and the scheduler as errors ("Couldn't gather keys"); a task's own error
    # reaches us through its future.
    with warnings.catch_warnings():
        # No dashboard is asked for, yet the scheduler's HTTP server warns when its port is taken.
        warnings.filterwarnings("ignore", message="Port .* is already in use")
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None, host="127.0.0.1",
                               silence_logs=logging.CRITICAL)
    with cluster, Client(cluster) as client:
        yield client


def _module(paper: str):
    if paper not in PAPERS:
        raise ReproduceError(f"unknown paper {paper!r}; papers are {', '.join(PAPERS)}")
    return importlib.import_module(PAPERS[paper])


def render(paper: str, result: Result, out_dir: Path, *, quick: bool, seconds: float) -> str:
    """The Markdown report of one reproduction (plots linked relative to ``out_dir``)."""
    size = QUICK_LABEL if quick else "full size"
    lines = [f"# {result.title}" + (f" ({QUICK_LABEL})" if quick else ""), "",
             f"`memwall reproduce {paper}{' --quick' if quick else ''}`: {size}, "
             f"{seconds:.1f} s. The difference is ours relative to the paper's.", "",
             comparison_table(result.rows), ""]
    for heading, body in result.tables:
        lines += [f"## {heading}", "", body.rstrip(), ""]
    for plot in result.plots:
        rel = os.path.relpath(plot, out_dir)
        lines += [f"![{Path(plot).stem}]({rel})", ""]
    if result.notes:
        lines += ["## Notes", ""]
        lines += [f"- {note}" for note in result.notes] + [""]
    return "\n".join(lines)


def run(paper: str, out_root: Path, *, quick: bool = False, client=None,
        progress: Callable[[str], None] | None = None) -> tuple[Result, Path]:
    """Reproduce ``paper``: write ``<out_root>/<paper>/report.md`` and its plots.

    Returns the result and the report's path. Plots named in the result must exist.
    """
    module = _module(paper)
    out_dir = Path(out_root) / paper
    ctx = Context(out_dir, quick=quick, client=client, progress=progress, name=paper)
    started = time.monotonic()
    result = module.reproduce(ctx)
    seconds = time.monotonic() - started
    for plot in result.plots:
        if not Path(plot).is_file():
            raise RuntimeError(f"{paper}: the result names plot {plot}, which was not written")
    report = out_dir / "report.md"
    report.write_text(render(paper, result, out_dir, quick=quick, seconds=seconds))
    return result, report
