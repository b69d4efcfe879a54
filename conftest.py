"""pytest set-up shared by tests/ and cocotb_tests/: the ``slow`` marker, an empty synthesis
cache, the YoWASP tools compiled in the background on a new machine.

A test marked ``slow`` runs only with ``--slow`` (``make test-all``); ``make test`` (CI) skips it
and says so in its summary. Mark a test slow only when a cheaper test in the default run covers
the same code at a smaller size, and say which in the marking's comment.
"""

import subprocess
import sys

import pytest

#: pytester: tests/test_suite_groups.py runs pytest on a file of its own.
pytest_plugins = ["pytester"]


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


@pytest.hookimpl(trylast=True)     # after pytest-xdist has marked the grouped tests
def pytest_collection_modifyitems(config, items):
    _check_xdist_groups(config, items)
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: runs with --slow (make test-all)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _check_xdist_groups(config, items):
    """In a worker of ``--dist loadgroup``, after pytest-xdist has marked the grouped tests' node
    ids: if it could not (pytest-xdist issue 1386), the first grouped test fails saying so. Lost
    grouping fails nothing else: it only makes every worker elaborate every design again
    (cocotb_tests/launcher.py, design_group)."""
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    grouped = [item for item in items if item.get_closest_marker("xdist_group")]
    if grouped and "@" not in grouped[0].nodeid:
        grouped[0].lost_xdist_group = (
            f"pytest-xdist's --dist loadgroup did not group this test under pytest "
            f"{pytest.__version__}, so each worker elaborates every design again: install the "
            f"pytest that pyproject.toml pins")


def pytest_runtest_setup(item):
    if hasattr(item, "lost_xdist_group"):
        pytest.fail(item.lost_xdist_group, pytrace=False)


@pytest.fixture(autouse=True)
def _empty_synthesis_cache(tmp_path_factory, monkeypatch):
    """Give each test an empty synthesis cache (synth/cache.py), so that a test that means to
    run Yosys and nextpnr runs them rather than reading what an earlier run left."""
    monkeypatch.setenv("MEMWALL_SYNTH_CACHE", str(tmp_path_factory.mktemp("synth-cache")))
