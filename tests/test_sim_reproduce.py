"""sim/reproduce.py and `memwall reproduce`: tables, the parallel map (serial, local Dask cluster,
an existing scheduler on loopback), reports and error messages."""

import re
import socket
import threading
import time

import pytest

from memwall.cli import main
from sim import reproduce as rp
from sim.plots import pyplot


def _square(x):
    return x * x


def _fail_on_three(x):
    if x == 3:
        raise ZeroDivisionError("three")
    return x


def test_difference_and_values():
    assert rp.difference(2.0, 3.0) == "+50.0 %"
    assert rp.difference(4, 3) == "-25.0 %"
    assert rp.difference(None, 3.0) == "–"
    assert rp.difference("1.15-1.32", 1.2) == "–"
    assert rp.difference(0, 1.0) == "–"
    table = rp.comparison_table([rp.Row("gain", 1.35, 1.7654, "x", "refresh only"),
                                 rp.Row("share", None, 42.5, "%", fmt=".1f")])
    assert "| gain | 1.35 x | 1.77 x | +30.8 % | refresh only |" in table
    assert "| share | not given | 42.5% | – |  |" in table


def test_markdown_table_checks_its_shape():
    assert rp.markdown_table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---:|\n| 1 | 2 |"
    with pytest.raises(ValueError, match="a row has 1 cells, the header 2"):
        rp.markdown_table(["a", "b"], [[1]])
    with pytest.raises(ValueError, match="align needs one character per column"):
        rp.markdown_table(["a", "b"], [], align="l")


def test_serial_map_keeps_order_and_names_a_failing_point(tmp_path):
    lines = []
    ctx = rp.Context(tmp_path, progress=lines.append, name="t")
    assert ctx.map(_square, range(25), label="squares") == [k * k for k in range(25)]
    assert lines[-1].startswith("[t] squares: 25/25 points")
    assert 5 <= len(lines) <= 13                      # about ten progress lines
    with pytest.raises(RuntimeError, match="boom: point 3 failed: three"):
        ctx.map(_fail_on_three, [1, 2, 3, 4], label="boom")
    with pytest.raises(ValueError, match="plot names end in .png, not 'x.svg'"):
        ctx.plot_path("x.svg")


@pytest.mark.parametrize("argv, message", [
    (("reproduce", "nope"), "unknown paper 'nope'; papers are shield, rdxe, umdam, kvnand, "
                            "flowkv, all"),
    (("reproduce", "flowkv", "--workers", "0"), "--workers must be at least 1, not 0"),
    (("reproduce", "flowkv", "--scheduler", "tcp://127.0.0.1:9", "--workers", "2"),
     "--workers applies to the local cluster"),
])
def test_bad_reproduce_arguments(capsys, argv, message):
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("memwall: error: ") and message in lines[0]


#: A reproduction, a sweep and a build that meet a bad --scheduler before any work.
COMMANDS = {"reproduce": ["reproduce", "umdam", "--quick"],
            "sweep": ["sweep", "arith-idot", "--preset", "small", "--set", "lanes=2,4"],
            "build": ["build", "--block", "arith-idot", "--preset", "small"]}


@pytest.mark.parametrize("command", COMMANDS)
def test_unreachable_scheduler_is_one_line(capsys, tmp_path, monkeypatch, command):
    monkeypatch.setattr(rp, "CONNECT_TIMEOUT_S", 1)
    code = main([*COMMANDS[command], "--scheduler", "tcp://127.0.0.1:9", "-o", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(
        "memwall: error: cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"), err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(params=["http", "silent", "close"])
def not_a_scheduler(request, monkeypatch):
    """A TCP server on loopback that is not a Dask scheduler: it answers every connection as an
    HTTP server would, or says nothing, or closes it at once."""
    monkeypatch.setattr(rp, "CONNECT_TIMEOUT_S", 2)     # the silent one costs a whole timeout
    server = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if request.param == "http":
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            elif request.param == "silent":
                held.append(conn)
            else:
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_server_that_is_not_a_scheduler_is_one_line(capsys, tmp_path, not_a_scheduler,
                                                       command):
    started = time.monotonic()
    code = main([*COMMANDS[command], "--scheduler", not_a_scheduler, "-o", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and time.monotonic() - started < 2 * rp.CONNECT_TIMEOUT_S + 1
    assert len(err) == 1 and err[0].startswith(
        f"memwall: error: '{not_a_scheduler}' answers, but not as a Dask scheduler ("), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_worker_address_is_not_a_scheduler(capsys, tmp_path, command):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster:
        worker = next(iter(cluster.scheduler_info["workers"]))
        code = main([*COMMANDS[command], "--scheduler", worker, "-o", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [f"memwall: error: '{worker}' answers as a Dask Worker, not a scheduler; give "
                   "the scheduler's address (tcp://HOST:8786 by default)"]


@pytest.mark.parametrize("command", COMMANDS)
def test_workers_without_memwall_are_one_line(capsys, tmp_path, monkeypatch, command):
    from distributed import LocalCluster

    import memwall.sweep

    # What a worker without memwall answers to the check: a module it needs is not there.
    monkeypatch.setattr(rp, "REPRODUCE_MODULES", ("sim.reproduce", "no_such_module"))
    monkeypatch.setattr(memwall.sweep, "SWEEP_MODULES", ("memwall.sweep", "no_such.module"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      host="127.0.0.1", dashboard_address=None) as cluster:
        code = main([*COMMANDS[command], "--scheduler", cluster.scheduler_address,
                     "-o", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith(
        f"memwall: error: 2 of 2 Dask workers at '{cluster.scheduler_address}' lack memwall "
        "(install it in their environment): tcp://127.0.0.1:"), err


def test_local_cluster_runs_a_reproduction(capsys, tmp_path):
    code = main(["reproduce", "shield", "--quick", "--workers", "2", "-o", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "a local Dask cluster of 2 worker processes" in err
    assert "[shield] Algorithm 1 fault injection: 24/24 points" in err
    # A quick run has its own folder and says it is one: report title, terminal table, plots.
    report = (tmp_path / "quick" / "shield" / "report.md").read_text()
    assert not (tmp_path / "shield").exists()
    assert report.startswith("# SHIELD") and "![fault_injection](fault_injection.png)" in report
    assert report.splitlines()[0].endswith(f"({rp.QUICK_LABEL})")
    assert re.search(rf"^## .*\({re.escape(rp.QUICK_LABEL)}\)$", out, re.M)
    assert "| SHIELD gain, Summary, Qwen3-8B | 1.35 x |" in out


@pytest.mark.parametrize("quick", [False, True])
def test_a_plot_is_written_whole_and_labelled_when_quick(tmp_path, quick):
    plt = pyplot()
    ctx = rp.Context(tmp_path, quick=quick, progress=lambda s: None)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = ctx.save_plot(fig, "line.png")
    assert path == tmp_path / "line.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["line.png"]      # no partial file left
    assert [t.get_text() for t in fig.texts] == ([rp.QUICK_LABEL] if quick else [])
    assert not plt.fignum_exists(fig.number)                         # closed


def test_existing_scheduler_runs_a_reproduction_and_reports_failures(capsys, tmp_path):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp",
                      host="127.0.0.1",
                      dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        code = main(["reproduce", "flowkv", "--quick", "--scheduler", address,
                     "-o", str(tmp_path)])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert f"running on {address} (1 Dask worker)" in err
        assert (tmp_path / "quick" / "flowkv" / "decode_tps.png").stat().st_size > 10_000
        assert "| Gemma3-4B decode TPS at 1K | 14.4 tok/s |" in out
        with Client(address) as client:
            ctx = rp.Context(tmp_path, client=client, progress=lambda s: None)
            assert ctx.map(_square, [3, 1, 2], label="sq") == [9, 1, 4]
            with pytest.raises(RuntimeError, match="boom: point 3 failed: three"):
                ctx.map(_fail_on_three, [1, 2, 3, 4], label="boom")


def test_run_refuses_a_missing_plot(tmp_path, monkeypatch):
    import sim.flowkv

    def fake(ctx):
        return rp.Result("x", plots=[ctx.plot_path("never.png")])
    monkeypatch.setattr(sim.flowkv, "reproduce", fake)
    with pytest.raises(RuntimeError, match="names plot .*never.png, which was not written"):
        rp.run("flowkv", tmp_path)
