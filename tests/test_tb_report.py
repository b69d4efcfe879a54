"""A testbench's figures reach the benchmark's JSON file whatever number type a model gives
(cocotb_tests/tb.py, ``BlockTB.report``), at the path the caller named
(cocotb_tests/launcher.py)."""

import json
import logging
from types import SimpleNamespace

import numpy as np

from cocotb_tests.tb import ENV_METRICS, BlockTB


def test_numpy_figures_are_written(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    monkeypatch.setenv(ENV_METRICS, str(path))
    tb = SimpleNamespace(log=logging.getLogger("t"))
    BlockTB.report(tb, "full_rate", busy=np.array([1440, 1440]), cycles=np.int64(1802),
                   utilization=round(float(np.float64(0.79911)), 4))
    BlockTB.report(tb, "stalled", held=[np.int32(3)])
    assert json.loads(path.read_text()) == {
        "full_rate": {"busy": [1440, 1440], "cycles": 1802, "utilization": 0.7991},
        "stalled": {"held": [3]}}


def test_a_relative_metrics_path_is_the_callers(tmp_path, monkeypatch):
    """The launcher hands the simulator (which runs in its build directory) an absolute path,
    in the environment it passes and in its own, which cocotb's runner lays over it."""
    from cocotb_tests.launcher import absolute_metrics

    monkeypatch.chdir(tmp_path)
    env, mine, none = {ENV_METRICS: "m.json"}, {ENV_METRICS: "out/m.json"}, {}
    absolute_metrics(env, mine, none)
    assert env[ENV_METRICS] == str(tmp_path / "m.json")
    assert mine[ENV_METRICS] == str(tmp_path / "out" / "m.json")
    assert none == {}
