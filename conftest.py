"""pytest set-up shared by tests/ and cocotb_tests/: the ``slow`` marker, an empty synthesis
cache, the YoWASP tools compiled in the background on a new machine.

A test marked ``slow`` runs only with ``--slow`` (``make test-all``); ``make test`` (CI) skips it
and says so in its summary. Mark a test slow only when a cheaper test in the default run covers
the same code at a smaller size, and say which in the marking's comment.
"""

import subprocess
import sys

import pytest


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (make test-all)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long; runs only with --slow (make test-all)")


def pytest_sessionstart(session):
    """On a machine that has not compiled the YoWASP tools yet (about 2 minutes of CPU), start
    compiling them while the first tests run; a test that needs one waits for it
    (``synth.toolchain.prepare_yowasp``). Once, in the controller, not in each xdist worker."""
    from synth.toolchain import yowasp_unprepared

    if hasattr(session.config, "workerinput") or not yowasp_unprepared():
        return
    subprocess.Popen([sys.executable, "-c", "from synth.toolchain import tool_path, "
                      "yowasp_unprepared\nfor name in yowasp_unprepared(): tool_path(name)"],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: runs with --slow (make test-all)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _empty_synthesis_cache(tmp_path_factory, monkeypatch):
    """Give each test an empty synthesis cache (synth/cache.py), so that a test that means to
    run Yosys and nextpnr runs them rather than reading what an earlier run left."""
    monkeypatch.setenv("MEMWALL_SYNTH_CACHE", str(tmp_path_factory.mktemp("synth-cache")))
