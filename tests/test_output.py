"""memwall.output: output folders checked up front, files staged and moved into place whole."""

import signal
import subprocess
import sys

import pytest

from memwall.output import STAGE_PREFIX, OutputError, Staged, output_folder
from synth.toolchain import run_logged


def test_output_folder_is_created_and_checked(tmp_path):
    assert output_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match=r"output folder .*/f is a file, not a folder"):
        output_folder(tmp_path / "f")
    with pytest.raises(OutputError, match="cannot create output folder .*/f/g: Not a directory"):
        output_folder(tmp_path / "f" / "g")


def test_staged_files_appear_only_on_success(tmp_path):
    (tmp_path / "old.v").write_text("old\n")
    staged = Staged(tmp_path)
    with staged as stage:
        assert stage.parent == tmp_path and stage.name.startswith(STAGE_PREFIX)
        (stage / "sub").mkdir()
        (stage / "sub" / "x.json").write_text("{}")
        (stage / "old.v").write_text("new\n")
        assert not (tmp_path / "sub").exists()          # nothing in place before the end
        assert (tmp_path / "old.v").read_text() == "old\n"
    assert staged.final(stage / "sub" / "x.json") == tmp_path / "sub" / "x.json"
    assert (tmp_path / "sub" / "x.json").read_text() == "{}"
    assert (tmp_path / "old.v").read_text() == "new\n"
    assert not stage.exists()


def test_an_interrupt_discards_the_stage_and_an_error_keeps_its_logs(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with Staged(tmp_path) as stage:
            (stage / "half.v").write_text("module")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError):
        with Staged(tmp_path) as stage:
            (stage / "tool.log").write_text("error: ...")
            raise RuntimeError("tool failed")
    assert [p.name for p in tmp_path.iterdir()] == [stage.name]     # the log stays to be read
    assert not (tmp_path / "tool.log").exists()
    with Staged(tmp_path) as again:     # the next run clears it
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_dead_process_stage_is_removed_and_a_live_one_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / f"{STAGE_PREFIX}{dead}").mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / f"{STAGE_PREFIX}{live.pid}").mkdir()
        with Staged(tmp_path):
            pass
        assert [p.name for p in tmp_path.iterdir()] == [f"{STAGE_PREFIX}{live.pid}"]
    finally:
        live.kill()
        live.wait()


_DIE_ONCE = """
import os, signal, sys
mark = sys.argv[1]
if not os.path.exists(mark):
    open(mark, "w").close()
    os.kill(os.getpid(), getattr(signal, sys.argv[2]))
print("second run")
"""


@pytest.mark.parametrize("sig, retried", [("SIGBUS", True), ("SIGSEGV", False)])
def test_a_tool_killed_by_sigbus_is_run_once_more(tmp_path, sig, retried):
    log = tmp_path / "tool.log"
    argv = [sys.executable, "-c", _DIE_ONCE, str(tmp_path / "mark"), sig]
    status = run_logged(argv, log, tmp_path)
    text = log.read_text()
    assert status == (0 if retried else -getattr(signal, sig))
    assert ("second run" in text.splitlines()) == retried
    assert (f"(killed by {sig}; run once more)" in text) == retried
    assert text.count("$ ") == (2 if retried else 1)


def test_a_tool_that_always_dies_is_run_twice_and_reports_its_status(tmp_path):
    argv = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGBUS)"]
    assert run_logged(argv, tmp_path / "t.log", tmp_path) == -signal.SIGBUS
    assert (tmp_path / "t.log").read_text().count("$ ") == 2


def test_a_running_tool_beats_and_a_late_one_times_out(tmp_path):
    beats = []
    code = "import time\nfor i in range(4):\n    print(f'Info: step {i}', flush=True); time.sleep(0.3)"
    assert run_logged([sys.executable, "-c", code], tmp_path / "a.log", tmp_path,
                      heartbeat=beats.append, heartbeat_s=0.2) == 0
    assert len(beats) >= 3 and beats == sorted(beats) and beats[0] >= 0.2
    from synth.flow import _phase
    assert _phase(tmp_path / "a.log") == "step 3"       # the tool's own last step line
    with pytest.raises(subprocess.TimeoutExpired):
        run_logged([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "b.log",
                   tmp_path, timeout=0.5, heartbeat=beats.append, heartbeat_s=0.2)
