"""Base testbench: parameters from the launcher, clock, reset, stream plumbing and scoreboard.

A block's ``TB`` class derives from :class:`BlockTB`, names its input and output streams and
connects the model: each input transfer seen by the input monitor goes to ``model``, whose expected
outputs go to the scoreboard; the output monitor feeds the scoreboard's checker. Stimulus code only
calls :meth:`BlockTB.send`; it never computes expected values.
"""

from __future__ import annotations

import abc
import json
import os
import random
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from memwall import registry

from . import functional  # noqa: F401 - saves the run's functional coverage as it exits
from .axis import AxisDriver, AxisMonitor, AxisSink, axis_prefix, is_axis
from .streams import (CycleCounter, PayloadCodec, Scoreboard, StreamDriver, StreamMonitor,
                      StreamSink)

__all__ = ["block_params", "load_design", "BlockTB"]

#: Environment variables the launcher sets for the simulator process.
ENV_BLOCK = "MEMWALL_BLOCK"
ENV_PARAMS = "MEMWALL_PARAMS"
#: Where :meth:`BlockTB.report` writes measured figures (set by benchmarks).
ENV_METRICS = "MEMWALL_METRICS"


def block_params():
    """Return the parameters of the design under test (set by the launcher), without building it."""
    block = registry.get(os.environ[ENV_BLOCK])
    return block.params.from_dict(json.loads(os.environ[ENV_PARAMS]))


def load_design():
    """Return the parameters of the design under test (set by the launcher); nothing is built."""
    block = registry.get(os.environ[ENV_BLOCK])
    params = block_params()
    component = block.elaborate(params)
    return block, params, component, {p["name"]: p for p in registry.ports(component)}


def select_tb(dut, classes: dict[str, type], **kwargs) -> "BlockTB":
    """Build the TB class that ``classes`` names for the block under test (set by the launcher)."""
    block = load_design()[0]
    if block.name not in classes:
        raise AssertionError(f"no testbench class for block {block.name}; this module covers "
                             f"{', '.join(classes)}")
    return classes[block.name](dut, **kwargs)



def _plain(value):
    """A NumPy scalar or array as the Python number or list it holds, for ``json``."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class BlockTB(abc.ABC):
    """Clock, reset, streams and scoreboard for one block.

    Parameters
    ----------
    dut : cocotb handle of the top level.
    inputs, outputs : sequence of str
        Stream port prefixes (``i``, ``cmd``; ``o``).
    idle, backpressure : float
        Random idle-cycle probability on inputs and not-ready probability on outputs.
    """

    def __init__(self, dut, inputs=("i",), outputs=("o",), *, idle=0.3, backpressure=0.3):
        self.dut = dut
        self.block, self.params, self.component, self.ports = load_design()
        self.seed = cocotb.RANDOM_SEED
        self.rng = random.Random(self.seed)
        self.log = dut._log
        self.log.info("block %s, parameters %s, seed %d (rerun with MEMWALL_SEED=%d)",
                      self.block.name, self.params.as_dict(), self.seed, self.seed)
        self.clk = dut.clk
        dut.rst.value = 1
        # The simulator toggles the clock (cocotb's C++ clock): no Python per half period.
        Clock(dut.clk, 10, unit="ns", impl="gpi").start(start_high=False)
        self.counter = CycleCounter(dut.clk)
        self.records: dict[str, list] = {}
        self.codecs = {p: PayloadCodec(self.ports[f"{p}__payload"]) for p in (*inputs, *outputs)}
        self.axis = is_axis(dut, inputs, outputs)
        if self.axis:
            self._axis_streams(inputs, outputs, idle, backpressure)
            return
        self.drivers = {p: StreamDriver(dut, p, dut.clk, self.codecs[p], self.rng, idle)
                        for p in inputs}
        self.sinks = {p: StreamSink(dut, p, dut.clk, self.rng, backpressure) for p in outputs}
        self.scoreboards = {p: Scoreboard(f"{p}__payload", self.log) for p in outputs}
        self.input_monitors = {
            p: StreamMonitor(dut, p, dut.clk, self.codecs[p], self.counter,
                             lambda item, cycle, p=p: self._on_input(p, item, cycle), dut.rst)
            for p in inputs}
        self.output_monitors = {
            p: StreamMonitor(dut, p, dut.clk, self.codecs[p], self.counter,
                             lambda item, cycle, p=p: self._on_output(p, item, cycle), dut.rst)
            for p in outputs}

    def _axis_streams(self, inputs, outputs, idle, backpressure):
        """The same streams on a design generated with ``--interface axis``, through
        cocotbext-axi (:mod:`.axis`). A frame-level monitor reports an input frame at its last
        beat, so a result may come out before the input that caused it is reported: the
        scoreboards hold such results until the model's expectation arrives, in order."""
        dut, rst = self.dut, self.dut.rst
        self.log.info("AXI4-Stream design: cocotbext-axi source, sink and monitor")
        self.drivers = {p: AxisDriver(dut, p, dut.clk, rst, self.codecs[p], self.rng, idle)
                        for p in inputs}
        self.sinks = {p: AxisSink(dut, p, dut.clk, rst, self.rng, backpressure) for p in outputs}
        self.scoreboards = {p: Scoreboard(axis_prefix(p, False), self.log, early=True)
                            for p in outputs}
        self.input_monitors = {
            p: AxisMonitor(dut, p, True, dut.clk, rst, self.codecs[p], self.counter,
                           lambda item, cycle, p=p: self._on_input(p, item, cycle))
            for p in inputs}
        self.output_monitors = {
            p: AxisMonitor(dut, p, False, dut.clk, rst, self.codecs[p], self.counter,
                           lambda item, cycle, p=p: self._on_output(p, item, cycle),
                           receiver=self.sinks[p].receiver)
            for p in outputs}

    @abc.abstractmethod
    def model(self, stream: str, item: dict[str, int]) -> dict[str, list[dict[str, int]]]:
        """Return the expected output items, per output stream, caused by one input transfer."""

    #: Functional coverage samplers by stream (:func:`cocotb_tests.functional.sampler`).
    samplers: dict = {}

    def observe(self, stream: str, item: dict[str, int], cycle: int) -> None:
        """Sample the block's functional coverage (:mod:`cocotb_tests.functional`) with one
        transfer a monitor saw on ``stream``, input or output: the default samples the stream's
        sampler in :attr:`samplers`, if it has one."""
        if stream in self.samplers:
            self.samplers[stream](item)

    def _on_input(self, stream, item, cycle):
        self.observe(stream, item, cycle)
        for out, items in self.model(stream, item).items():
            for expected in items:
                self.scoreboards[out].expect(expected)

    def _on_output(self, stream, item, cycle):
        self.observe(stream, item, cycle)
        if stream in self.records:
            self.records[stream].append((cycle, item))
        self.scoreboards[stream].got(item, cycle)

    def record(self, stream: str = "o") -> list:
        """Keep every transfer the output monitor of ``stream`` sees from now on, as ``(cycle,
        item)``; return the list (real-model runs read the RTL's outputs from it)."""
        return self.records.setdefault(stream, [])

    def report(self, test: str, **figures):
        """Log measured figures and, when a benchmark asked for them, add them to its JSON file."""
        self.log.info("%s: %s", test, ", ".join(f"{k}={v}" for k, v in figures.items()))
        path = os.environ.get(ENV_METRICS)
        if path:
            existing = json.loads(Path(path).read_text()) if Path(path).exists() else {}
            existing[test] = figures
            # NumPy scalars (a model's counts) as the Python numbers they hold.
            Path(path).write_text(json.dumps(existing, indent=2, default=_plain))

    def check_full_rate(self, items: int, latency: int, *, source: str = "i", sink: str = "o",
                        latency_meaning: str = "input valid to output valid"):
        """After :meth:`drain` of a run with no idle cycles and no back-pressure: report the
        measured figures and assert one output per cycle and the expected latency (in cycles
        from the first ``source`` transfer to the first ``sink`` transfer)."""
        out, inp = self.output_monitors[sink], self.input_monitors[source]
        measured = out.first_cycle - inp.first_cycle
        span = out.last_cycle - out.first_cycle + 1
        self.report("full_rate", items=items, cycles=span, per_cycle=round(items / span, 4),
                    latency=measured, latency_meaning=latency_meaning)
        assert span == items, f"{items} results took {span} cycles, not one per cycle"
        assert measured == latency, \
            f"first result came {measured} cycles after its input ({latency_meaning}), " \
            f"not the expected {latency}"

    async def run_full_rate(self, items, *, stream: str = "i"):
        """The ``full_rate`` test of a pipelined unit: reset, ``items`` with no idle cycles, drain,
        then :meth:`check_full_rate` against ``component.latency``."""
        await self.reset()
        await ClockCycles(self.clk, 2)
        self.send(stream, items)
        await self.drain()
        self.check_full_rate(len(items), self.component.latency, source=stream)

    async def check_items(self, items, *, stream: str = "i", sink: str = "o") -> int:
        """Send ``items`` on ``stream``, :meth:`drain`, and log how many outputs on ``sink``
        matched the golden model; return that count."""
        self.send(stream, items)
        await self.drain()
        matched = self.scoreboards[sink].matched
        self.log.info("%d outputs matched the golden model", matched)
        return matched

    async def reset(self, cycles: int = 3):
        self.dut.rst.value = 1
        await ClockCycles(self.clk, cycles)
        self.dut.rst.value = 0
        await RisingEdge(self.clk)

    def send(self, stream: str, items):
        """Queue items (dicts of payload fields) on an input stream."""
        self.drivers[stream].send_all(items)

    async def drain(self, stall_cycles: int = 10_000):
        """Wait for every input to be accepted and every expected output to come out.

        Fails if ``stall_cycles`` pass with outputs still expected and no output transfer (a hang),
        naming the cycle and what is still pending.
        """
        for driver in self.drivers.values():
            await driver.wait_idle()
        if self.axis:       # cocotbext-axi's monitor reports a frame a little after it moved
            for stream, driver in self.drivers.items():
                while self.input_monitors[stream].transfers < driver.sent:
                    await RisingEdge(self.clk)
        last_progress, matched = self.counter.cycle, self._matched()
        while any(sb.expected for sb in self.scoreboards.values()):
            if self._matched() != matched:
                last_progress, matched = self.counter.cycle, self._matched()
            elif self.counter.cycle - last_progress > stall_cycles:
                pending = {k: len(sb.expected) for k, sb in self.scoreboards.items()}
                raise AssertionError(f"cycle {self.counter.cycle}: no output for {stall_cycles} "
                                     f"cycles with outputs still expected: {pending}")
            await RisingEdge(self.clk)
        await ClockCycles(self.clk, 2)
        for sb in self.scoreboards.values():
            sb.check_drained()

    def _matched(self) -> int:
        return sum(sb.matched for sb in self.scoreboards.values())
