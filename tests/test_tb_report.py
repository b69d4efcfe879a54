"""A testbench's figures reach the benchmark's JSON file whatever number type a model gives
(cocotb_tests/tb.py, ``BlockTB.report``)."""

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
