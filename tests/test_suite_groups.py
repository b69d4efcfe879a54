"""make test's ``--dist loadgroup`` keeps the tests of one design on one worker
(cocotb_tests/launcher.py, design_group), with the pytest and pytest-xdist installed here; and
conftest.py's check fails the run by name where it does not (pytest-xdist issue 1386)."""

import types

import pytest

import conftest

GROUPED = '''
import os
from pathlib import Path

import pytest

@pytest.mark.parametrize("i", [pytest.param(i, marks=[pytest.mark.xdist_group("design:x")])
                               for i in range(4)])
def test_grouped(i):
    (Path.cwd() / f"pid{i}").write_text(str(os.getpid()))
'''


def test_one_group_runs_on_one_worker(pytester):
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=4)
    assert len({(pytester.path / f"pid{i}").read_text() for i in range(4)}) == 1


def _item(nodeid, grouped):
    marks = {"xdist_group": pytest.mark.xdist_group("design:x").mark} if grouped else {}
    return types.SimpleNamespace(nodeid=nodeid, get_closest_marker=marks.get)


def _worker(loadgroup=True):
    return types.SimpleNamespace(workerinput={}, getvalue={"loadgroup": loadgroup}.get)


def test_lost_grouping_fails_the_first_grouped_test():
    items = [_item("t.py::a", False), _item("t.py::b[0]", True), _item("t.py::b[1]", True)]
    conftest._check_xdist_groups(_worker(), items)
    assert [hasattr(i, "lost_xdist_group") for i in items] == [False, True, False]
    assert "did not group this test" in items[1].lost_xdist_group
    with pytest.raises(pytest.fail.Exception, match="install the pytest that pyproject.toml"):
        conftest.pytest_runtest_setup(items[1])


@pytest.mark.parametrize("config, nodeid", [
    (_worker(), "t.py::b[0]@design:x"),                     # grouped: nothing to say
    (_worker(loadgroup=False), "t.py::b[0]"),               # another --dist
    (types.SimpleNamespace(getvalue={"loadgroup": True}.get), "t.py::b[0]"),  # the controller
])
def test_kept_grouping_or_no_loadgroup_changes_nothing(config, nodeid):
    items = [_item(nodeid, True)]
    conftest._check_xdist_groups(config, items)
    assert not hasattr(items[0], "lost_xdist_group")
