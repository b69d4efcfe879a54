"""hdl/pipeline.py: the result queue keeps every result its credits allowed."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.lib import stream
from amaranth.sim import Simulator

from hdl.pipeline import ResultQueue, next_values


class _Delay(Elaboratable):
    """Items enter a ``latency``-cycle always-ready pipeline through a ResultQueue's credits."""

    def __init__(self, depth: int, latency: int):
        self.depth, self.latency = depth, latency
        self.i_valid = Signal()
        self.i_data = Signal(8)
        self.i_taken = Signal()
        self.o = stream.Signature(8).flip().create()

    def elaborate(self, platform):
        m = Module()
        queue = ResultQueue(m, self.o, depth=self.depth, name="q")
        valid = [Signal(name=f"v{k}") for k in range(self.latency)]
        data = [Signal(8, name=f"d{k}") for k in range(self.latency)]
        m.d.comb += [self.i_taken.eq(self.i_valid & queue.can_issue),
                     queue.issue.eq(self.i_taken)]
        m.d.sync += [valid[0].eq(self.i_taken), data[0].eq(self.i_data)]
        for k in range(1, self.latency):
            m.d.sync += [valid[k].eq(valid[k - 1]), data[k].eq(data[k - 1])]
        m.d.comb += [queue.w_en.eq(valid[-1]), queue.w_data.eq(data[-1])]
        return m


@pytest.mark.parametrize("depth, latency", [(3, 1), (3, 4), (4, 1), (8, 6)])
def test_result_queue_loses_nothing(depth, latency):
    dut = _Delay(depth, latency)
    rng = random.Random(depth * 10 + latency)
    items = list(range(1, 61))
    got = []

    async def bench(ctx):
        k = 0
        for _ in range(600):
            offer = k < len(items) and rng.random() < 0.8
            ctx.set(dut.i_valid, offer)
            ctx.set(dut.i_data, items[k] if offer else 0)
            ctx.set(dut.o.ready, rng.random() < 0.4)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                got.append(ctx.get(dut.o.payload))
            if offer and ctx.get(dut.i_taken):
                k += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == items


def test_result_queue_depth_below_three_is_refused():
    with pytest.raises(ValueError, match="Result queue depth must be between 3 and 4096, not 2"):
        _Delay(2, 1).elaborate(None)


def test_next_values_lead_their_registers_by_a_cycle():
    """A register assigned through ``next_values`` holds, a cycle later, what its next value
    showed: its own value when nothing assigns it, else the assignment."""
    m = Module()
    count = Signal(4, init=3)
    step = Signal()
    nxt, = next_values(m, count)
    with m.If(step):
        m.d.comb += nxt.eq(count + 1)
    seen = []

    async def bench(ctx):
        for cycle in range(8):
            ctx.set(step, cycle % 3 != 0)
            await ctx.delay(1e-9)
            shown = ctx.get(nxt)
            await ctx.tick()
            seen.append((shown, ctx.get(count)))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert nxt.name == "count_next"
    assert all(shown == after for shown, after in seen)
    assert [after for _, after in seen] == [3, 4, 5, 5, 6, 7, 7, 8]
