"""`memwall sweep` (memwall/sweep.py): the grid, the Pareto front, the plot, and sweeps of a small
block on a local cluster of two processes and on a scheduler and worker started on loopback.

The bad --scheduler cases are in test_sim_reproduce.py, for reproduce and sweep alike."""

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import synth.flow
from hdl.arith.idot import IntDot
from memwall import registry, sweep
from memwall.cli import main
from memwall.params import ParameterError
from synth.cache import ENV_CACHE
from synth.flow import SynthError, SynthReport

BLOCK = "arith-idot"
PNG = b"\x89PNG\r\n\x1a\n"


def _params():
    return registry.get(BLOCK).params


def test_the_grid_is_every_combination_the_last_name_fastest():
    assert sweep.grid(_params(), ["lanes=2,4", "b_bits = 4, 8"]) == [
        {"lanes": "2", "b_bits": "4"}, {"lanes": "2", "b_bits": "8"},
        {"lanes": "4", "b_bits": "4"}, {"lanes": "4", "b_bits": "8"}]
    assert sweep.grid(_params(), ["lanes=3"]) == [{"lanes": "3"}]     # refused only when run
    mappings = registry.get("umdam").params
    assert sweep.grid(mappings, ["mappings=umdam;row,bank"]) == [
        {"mappings": "umdam"}, {"mappings": "row,bank"}]


def test_the_benchmark_key_follows_the_point_and_the_simulator():
    from cocotb_tests.bench import full_rate_inputs
    from synth.cache import cache_key

    block = registry.get(BLOCK)
    small, wider = block.parameters("small"), block.parameters("small", {"lanes": "8"})
    keys = [cache_key(full_rate_inputs(block, p, s)) for p in (small, wider)
            for s in ("icarus", "verilator")]
    assert len(set(keys)) == 4
    assert cache_key(full_rate_inputs(block, small, "icarus")) == keys[0]


@pytest.mark.parametrize("sets, message", [
    ([], "sweep needs at least one --set NAME=V1,V2,..."),
    (["lanes"], "--set takes NAME=V1,V2,... (a tuple parameter's values separated by ;), "
                "not 'lanes'"),
    (["lanes=2", "lanes=4"], "parameter lanes is given twice with --set"),
    (["nope=1"], "unknown parameter 'nope'; parameters are lanes, a_bits"),
    (["lanes=2,,4"], "--set lanes: an empty value in '2,,4'"),
    (["lanes=2,0x2"], "--set lanes: value 0x2 is given twice"),
    (["lanes=2,two"], "parameter lanes takes an integer, not 'two'"),
])
def test_a_bad_grid_names_what_is_wrong(sets, message):
    with pytest.raises(ParameterError) as caught:
        sweep.grid(_params(), sets)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize("argv, message", [
    (["--set", "lanes=2,two"], "parameter lanes takes an integer, not 'two'"),
    (["--preset", "huge", "--set", "lanes=2"], "unknown preset 'huge' for block arith-idot"),
    (["--set", "lanes=2", "--seeds", "0"], "Placement seed count (seeds) must be an integer"),
    (["--set", "lanes=2", "--workers", "0"], "--workers must be at least 1, not 0"),
    (["--set", "lanes=2", "--workers", "2", "--scheduler", "tcp://127.0.0.1:9"],
     "--workers applies to the local cluster"),
    (["--set", "lanes=2", "--target", "xilinx"], "invalid choice: 'xilinx'"),
])
def test_bad_sweep_input_is_one_line_with_status_2(capsys, tmp_path, argv, message):
    code = main(["sweep", BLOCK, *argv, "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("memwall: error: "), err
    assert message in err[0]
    assert not any((tmp_path / "out").glob("sweep.*"))


def test_the_pareto_front_on_hand_made_points():
    points = [(1, 1), (2, 3), (2, 2), (3, 3), (4, 5), (4, 5), (5, 4)]
    assert sweep.pareto(points) == [0, 1, 4, 5]
    assert sweep.pareto([]) == []


def _report(luts, fmax, **changes):
    return SynthReport(**{**dict(target="ecp5", top="t", cells=2 * luts, cells_by_type={},
                                 luts=luts, ffs=luts // 2, dsps=1, brams=0, fmax_mhz=fmax,
                                 freq_mhz=100.0, seconds=1.0), **changes})


def test_the_plot_labels_its_axes_and_marks_the_front(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    # Fmax: 200 LUTs at 110 MHz is beaten; throughput: 300 LUTs at 80 M items/s is.
    points = [sweep.Point({"lanes": "2"}, report=_report(100, 120.0),
                          metrics={"per_cycle": 1.0, "latency": 3}),
              sweep.Point({"lanes": "4"}, report=_report(200, 110.0),
                          metrics={"per_cycle": 2.0, "latency": 4}),
              sweep.Point({"lanes": "8"}, report=_report(300, 160.0),
                          metrics={"per_cycle": 0.5, "latency": 5}),
              sweep.Point({"lanes": "3"}, refused="Lane count must be a power of two")]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    sweep.plot(points, tmp_path / "p.png", "title")
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG
    fmax, throughput = figures[0].axes
    assert (fmax.get_xlabel(), fmax.get_ylabel()) == ("area (LUT4s)", "Fmax (MHz)")
    assert throughput.get_ylabel() == "throughput at Fmax (million items/s)"
    front = [line for line in fmax.get_lines() if line.get_label().startswith("Pareto")][0]
    assert list(front.get_xdata()) == [100, 300]
    front = [line for line in throughput.get_lines()][0]
    assert list(front.get_xdata()) == [100, 200]
    plt.close(figures[0])


def _rows(out: Path) -> list[dict]:
    data = json.loads((out / "sweep.json").read_text())
    with open(out / "sweep.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["lanes"] for r in table] == [p["lanes"] for p in data["points"]]
    for row, point in zip(table, data["points"]):
        assert row["luts"] == ("" if point["luts"] is None else str(point["luts"]))
    assert (out / "sweep.png").read_bytes()[:8] == PNG
    assert not list(out.glob(".partial-*"))
    return data["points"]


def test_a_sweep_on_a_local_cluster_then_only_new_points(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["sweep", BLOCK, "--preset", "small", "--workers", "2", "-o", str(out)]
    assert main(argv + ["--set", "lanes=2"]) == 0
    stdout, err = capsys.readouterr()
    assert "a local Dask cluster of 2 worker processes" in err
    assert "[1/1 at " in err and "sweep: 1 point(s) done, 0 refused, 0 failed" in err
    first = _rows(out)
    assert [p["status"] for p in first] == ["ok"] and not first[0]["cached"]
    assert first[0]["fmax_mhz"] > 0 and first[0]["luts"] > 0 and first[0]["ffs"] > 0
    assert first[0]["parameters"]["lanes"] == 2 and first[0]["parameters"]["b_bits"] == 4
    assert stdout.count("| ok |") == 1

    # Two synthesized points in all (a third took 9 s of the suite's budget).
    assert main(argv + ["--set", "lanes=2,4"]) == 0
    err = capsys.readouterr().err
    again = _rows(out)
    assert [p["cached"] for p in again] == [True, False]
    assert err.count("(cached)") == 1
    assert {k: v for k, v in first[0].items() if k != "cached"} == \
        {k: v for k, v in again[0].items() if k != "cached"}
    assert again[1]["cells"] > again[0]["cells"]          # twice the products, a deeper tree


def test_refused_and_failing_points_are_listed_and_the_others_go_on(capsys, tmp_path,
                                                                     monkeypatch):
    from distributed import LocalCluster

    block = registry.get(BLOCK)
    failing = block.verilog(block.parameters("small", {"lanes": "4"}), "ecp5")[0]

    def fake(verilog, top, target, workdir, **options):
        time.sleep(0.3)                     # long enough for a heartbeat line
        if verilog == failing:
            raise SynthError("yosys synth_ecp5", Path(workdir) / "synth_ecp5.log", "it broke")
        return SynthReport(target=target, top=top, cells=len(verilog), cells_by_type={},
                           luts=len(verilog) // 10, ffs=1, dsps=0, brams=0, fmax_mhz=99.0,
                           freq_mhz=options["freq_mhz"], seconds=0.1)
    monkeypatch.setattr(synth.flow, "synthesize", fake)     # the workers are threads here
    monkeypatch.setattr(sweep, "HEARTBEAT_S", 0.1)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # the failure's folder
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    with pytest.raises(ParameterError) as refusal:
        block.parameters("small", {"lanes": "3"})
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster:
        code = main(["sweep", BLOCK, "--preset", "small", "--set", "lanes=2,3,4",
                     "--scheduler", cluster.scheduler_address, "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    points = _rows(tmp_path / "out")
    assert [p["status"] for p in points] == ["ok", "refused", "failed"]
    ok = block.verilog(block.parameters("small", {"lanes": "2"}), "ecp5")[0]
    assert points[0]["cells"] == len(ok)
    assert points[1]["reason"] == str(refusal.value) and points[1]["parameters"] is None
    assert points[2]["reason"].startswith("yosys synth_ecp5 failed; log: ")
    assert "it broke" in points[2]["reason"]
    assert f"lanes=3: refused: {refusal.value}" in err
    assert "lanes=4: FAILED: yosys synth_ecp5 failed; log: " in err
    assert "1 point(s) done, 1 refused, 1 failed" in err
    assert re.search(r"^sweep: 1 point\(s\) running or queued: lanes=[24] \(0 min\)$", err, re.M)
    assert len(list((tmp_path / "cache").rglob("*.json"))) == 1      # a failure is not kept


@contextlib.contextmanager
def loopback(folder: Path):
    """`dask scheduler` and one `dask worker` (one thread), separate processes on loopback:
    yields the scheduler's address and the two processes."""
    bin_dir = Path(sys.executable).parent
    file = folder / "scheduler.json"
    env = dict(os.environ, DASK_DISTRIBUTED__LOGGING__DISTRIBUTED="error")
    procs = [subprocess.Popen([bin_dir / "dask", "scheduler", "--host", "127.0.0.1", "--port",
                               "0", "--no-dashboard", "--scheduler-file", file],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen([bin_dir / "dask", "worker", "--scheduler-file", file,
                                       "--nthreads", "1", "--nworkers", "1", "--no-dashboard"],
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        from distributed import Client
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        with Client(scheduler_file=str(file), timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
        yield json.loads(file.read_text())["address"], procs
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture
def loopback_cluster(tmp_path):
    with loopback(tmp_path) as (address, _):
        yield address


def test_a_lost_scheduler_fails_the_tasks_not_finished(tmp_path):
    """The scheduler goes while one task runs and one waits in the feeder: both are yielded at
    once, failing with ClusterLost; the finished one keeps its result."""
    from sim.reproduce import ClusterLost, dask_client

    with loopback(tmp_path) as (address, procs), dask_client(address) as client:
        feeder = sweep.Feeder(client, "test")
        for k, seconds in enumerate((0.0, 60.0, 0.0)):
            feeder.submit(f"lost-{k}", time.sleep, seconds)
        lines, results, started = [], {}, time.monotonic()
        for future in feeder.finished(lines.append, lambda: "running"):
            try:
                results[future.key] = future.result()
            except ClusterLost as exc:
                results[future.key] = str(exc)
            if future.key == "lost-0":
                procs[0].kill()
        assert time.monotonic() - started < 30      # not the 60 s task, not a reconnect timeout
        procs[1].kill()             # its 60 s task would hold a graceful stop
    lost = "the connection to the Dask scheduler was lost before this task finished"
    assert results == {"lost-0": None, "lost-1": lost, "lost-2": lost}
    assert lines == ["test: lost the connection to the Dask scheduler: the 2 task(s) not "
                     "finished are reported as failed"]


def test_a_lost_scheduler_keeps_the_error_of_a_task_that_raised():
    """A task that raised before the scheduler went is yielded with its own error (the client
    holds it); one that finished is lost with the scheduler (its result is on a worker)."""
    class Future:
        def __init__(self, key, status):
            self.key, self.status = key, status

        def done(self):
            return True

    class Client:
        status = "closed"

    feeder = sweep.Feeder(Client(), "test")
    feeder.pending = {Future("raised", "error")}
    feeder.done = [Future("finished", "finished")]
    got = {f.key: type(f).__name__ for f in feeder.finished(print, str)}
    assert got == {"raised": "Future", "finished": "_Lost"}


def test_a_lost_scheduler_stops_a_reproduction_in_one_line(capsys, tmp_path):
    """`memwall reproduce` keeps nothing of a paper that did not finish: the run stops with one
    line and exit status 1 (Context.map raises ClusterLost)."""
    from sim import reproduce as rp

    def slow(k):
        import time
        time.sleep(0.0 if k < 2 else 60.0)
        return k

    lines = []
    with loopback(tmp_path) as (address, procs), rp.dask_client(address) as client:
        ctx = rp.Context(tmp_path, client=client, progress=lines.append, name="t")
        killer = threading.Timer(3.0, procs[0].kill)
        killer.start()
        try:
            with pytest.raises(rp.ClusterLost) as lost:
                ctx.map(slow, range(4), label="slow")
        finally:
            killer.cancel()
            procs[1].kill()         # its 60 s task would hold a graceful stop
    assert str(lost.value) == ("slow: the connection to the Dask scheduler was lost after 2 of 4 "
                               "points; nothing was written")


def test_a_simulated_sweep_on_a_scheduler_and_worker_on_loopback(capsys, tmp_path, monkeypatch,
                                                                 loopback_cluster):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["sweep", BLOCK, "--preset", "small", "--set", "lanes=2,4", "--target", "generic",
            "--sim", "--simulator", "icarus", "--scheduler", loopback_cluster, "-o", str(out)]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"running on {loopback_cluster} (1 Dask worker)" in err
    points = _rows(out)
    small = registry.get(BLOCK).presets["small"]
    for point, lanes in zip(points, (2, 4)):
        assert point["status"] == "ok" and point["cells"] > 0 and point["fmax_mhz"] is None
        assert point["latency_cycles"] == IntDot.latency_of(**dict(small.as_dict(), lanes=lanes))
        assert point["items_per_cycle"] == 1.0                # a pipelined unit's contract
    assert points[1]["cells"] > points[0]["cells"]
    assert [p["sim_cached"] for p in points] == [False, False]
    assert main(argv) == 0                      # again: nothing is synthesized or simulated
    err = capsys.readouterr().err
    again = _rows(out)
    assert [(p["cached"], p["sim_cached"]) for p in again] == [(True, True)] * 2
    assert err.count(" (cached); ") == 2 and err.count(" cycles (cached)") == 2
    for old, new in zip(points, again):
        assert {k: v for k, v in old.items() if "cached" not in k} == \
            {k: v for k, v in new.items() if "cached" not in k}


def test_build_runs_its_syntheses_on_the_cluster_and_through_the_cache(capsys, tmp_path):
    out = tmp_path / "out"
    argv = ["build", "--block", "arith-idot", "--preset", "small", "--target", "generic",
            "--workers", "2", "-o", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "build: running on a local Dask cluster of 2 worker processes" in err
    assert "[1/1] arith-idot: synthesize for generic" in err
    cold = json.loads((out / "report.json").read_text())["blocks"][0]["synth"]
    # The local cluster's workers leave their logs in the block's folder, as a serial build did.
    assert (out / "arith-idot" / "generic" / "synth_generic.log").is_file()
    assert (out / "arith-idot" / "arith_idot.v").is_file() and not list(out.rglob(".partial-*"))
    assert main(argv) == 0
    err = capsys.readouterr().err
    warm = json.loads((out / "report.json").read_text())["blocks"][0]["synth"]
    assert err.count(", cached)") == 1 and "running on" not in err     # no cluster needed
    assert [s["cached"] for s in cold] == [False] and [s["cached"] for s in warm] == [True]
    assert [dict(s, cached=None) for s in cold] == [dict(s, cached=None) for s in warm]


def test_a_build_whose_tools_fail_reports_it_and_finishes_the_others(capsys, tmp_path,
                                                                    monkeypatch):
    from distributed import LocalCluster

    real = synth.flow.synthesize

    def flaky(verilog, top, target, workdir, **options):
        if top == "arith_fpadd":
            time.sleep(0.5)                 # long enough for a heartbeat line
            raise SynthError("yosys synth_ecp5", Path(workdir) / "synth_ecp5.log", "it broke")
        return real(verilog, top, target, workdir, **options)
    monkeypatch.setattr(synth.flow, "synthesize", flaky)     # the workers are threads here
    monkeypatch.setattr(sweep, "HEARTBEAT_S", 0.1)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # the failure's folder
    out = tmp_path / "out"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster:
        code = main(["build", "--block", "arith-idot", "--block", "arith-fpadd", "--preset",
                     "small", "--target", "generic", "--scheduler", cluster.scheduler_address,
                     "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    # The larger netlist (the registry's estimate) goes first; the report keeps the given order.
    assert "[1/2] arith-fpadd: generic: FAILED: yosys synth_ecp5 failed; log: " in err
    assert re.search(r"^build: (2 syntheses|1 synthesis) to finish: arith-", err, re.M)  # heartbeat
    assert err.strip().splitlines()[-1].startswith(
        "synthesis failed: arith-fpadd (generic): yosys synth_ecp5 failed; log: ")
    blocks = json.loads((out / "report.json").read_text())["blocks"]
    assert blocks[0]["synth"][0]["cells"] > 0 and blocks[1]["synth"] == []
    assert "it broke" in blocks[1]["synth_failed"]["generic"]
    assert "- **arith-fpadd** (generic): yosys synth_ecp5 failed; log: " in \
        (out / "report.md").read_text()
    assert (out / "arith-fpadd" / "arith_fpadd.v").is_file()        # its files are kept


def test_the_feeder_gives_a_queued_task_to_the_worker_that_frees_first():
    """Dask gives a task to a worker on submission, even a busy one; the feeder keeps one task
    per worker thread on the cluster, so the third task runs on the short task's worker, beside
    the long one, not after it."""
    from sim.reproduce import dask_client

    def where(seconds):         # defined here: pickled by value, the workers need no tests/
        import time

        from distributed import get_worker
        time.sleep(seconds)
        return get_worker().address

    with dask_client(workers=2) as client:
        feeder = sweep.Feeder(client, "test")
        keys = [feeder.submit(f"feeder-{k}", where, s) for k, s in enumerate((4.0, 0.2, 0.0))]
        assert (len(feeder.pending), len(feeder.queue), len(feeder)) == (2, 1, 3)
        order, got = [], {}
        for future in feeder.finished(print, lambda: "still running"):
            order.append(future.key)
            got[future.key] = future.result()
        assert len(feeder) == 0
    assert order == [keys[1], keys[2], keys[0]]
    assert got[keys[2]] == got[keys[1]] != got[keys[0]]


def test_build_starts_the_largest_netlists_first():
    """memwall build hands the syntheses to the cluster largest first (Size: cells and memory
    bits), so that the longest start at once and the small ones fill in beside them; blocks it
    does not synthesize come last."""
    from memwall.cli import _largest_first

    chosen = registry.blocks()
    order = _largest_first(chosen, "default")
    assert sorted(order) == list(range(len(chosen)))
    sizes = [chosen[i].size(chosen[i].parameters("default")) for i in order]
    weights = [0 if chosen[i].synth.skip_at("default") else s.cells + s.storage_bits // 64
               for i, s in zip(order, sizes)]
    assert weights == sorted(weights, reverse=True) and weights[0] > weights[-1]
    assert chosen[order[-1]].synth.skip_at("default")
    # The syntheses of tens of minutes come first: FusedDQP's 32 lanes of dequantizer and dot
    # product, then the DXT's VACs and SRAMs, the in-flash PE and the FlowKV pair.
    assert [chosen[i].name for i in order[:4]] == ["flowkv-dqp", "rdxe-dxt", "inflash", "flowkv"]


def test_sigint_stops_the_tools_of_the_local_cluster(tmp_path):
    from tests.test_cli import _processes_under

    scratch, out = tmp_path / "tmp", tmp_path / "out"
    scratch.mkdir()
    # The workers' scratch folders go to TMPDIR: a tool's working folder tells it is ours.
    env = dict(os.environ, TMPDIR=str(scratch))
    proc = subprocess.Popen([sys.executable, "-m", "memwall.cli", "sweep", BLOCK, "--set",
                             "lanes=16", "--workers", "1", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parents[1],
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def synthesis():        # Yosys's synth_ecp5 of 16 lanes: seconds, long enough to be caught
        return [pid for pid in _processes_under(scratch)
                if b"synth_ecp5.ys" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    deadline = time.monotonic() + 60
    while not synthesis() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert synthesis(), "Yosys did not start within 60 s"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    lines = proc.stderr.read().strip().splitlines()
    assert lines[-1] == "memwall: interrupted", lines
    assert not any("Traceback" in line for line in lines), lines
    assert _processes_under(scratch) == []
    assert [p for p in out.rglob("*") if not p.is_dir()] == []
    assert list(scratch.glob("memwall-sweep-*")) == []      # stopped, so no logs are kept
