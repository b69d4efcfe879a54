"""hdl/probe.py: a unit built only to read its properties gives them and draws no warning."""

import gc
import warnings

from amaranth.hdl import Fragment, UnusedElaboratable

from hdl.arith.format import FP32
from hdl.arith.fpadd import FloatAdder
from hdl.probe import probe


def _warnings_while(action) -> list:
    """The UnusedElaboratable warnings of ``action()`` once elaboration has begun (Amaranth
    keeps the warning silent until the first elaboration)."""
    Fragment.get(FloatAdder(FP32, stages=1), None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnusedElaboratable)
        action()
        gc.collect()
    return [w for w in caught if issubclass(w.category, UnusedElaboratable)]


def test_probe_reads_a_latency_without_a_warning():
    latencies = []
    assert not _warnings_while(lambda: latencies.append(probe(FloatAdder, FP32, stages=4).latency))
    assert latencies == [4]


def test_a_unit_built_elsewhere_and_dropped_still_warns():
    """The linter option covers hdl/probe.py only."""
    assert _warnings_while(lambda: FloatAdder(FP32))
