"""pytest set-up shared by tests/ and cocotb_tests/: the ``slow`` marker, an empty synthesis cache.

A test marked ``slow`` runs only with ``--slow`` (``make test-all``); ``make test`` (CI) skips it
and says so in its summary. Mark a test slow only when a cheaper test in the default run covers
the same code at a smaller size, and say which in the marking's comment.
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (make test-all)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long; runs only with --slow (make test-all)")


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
