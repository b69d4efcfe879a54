"""hdl/pipeline.py: the result queue keeps every result its credits allowed; the skid buffer
passes every item in order with all of its outputs from registers; the delay line gives every
item back exactly its length later."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.lib import stream
from amaranth.sim import Simulator

from hdl.pipeline import DelayLine, ResultQueue, SkidBuffer, next_values


class _Delay(Elaboratable):
    """Items enter a ``latency``-cycle always-ready pipeline through a ResultQueue's credits.

    An odd item is silent when ``cancel_at`` is given: it takes a credit like any other and gives
    it back ``cancel_at`` cycles later (``queue.cancel``), writing no result."""

    def __init__(self, depth: int, latency: int, cancel_at: int | None = None):
        self.depth, self.latency, self.cancel_at = depth, latency, cancel_at
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
        silent = [v & d[0] for v, d in zip(valid, data)] if self.cancel_at is not None else []
        if silent:
            m.d.comb += queue.cancel.eq(silent[self.cancel_at - 1])
        m.d.comb += [queue.w_en.eq(valid[-1] & ~(silent[-1] if silent else 0)),
                     queue.w_data.eq(data[-1])]
        return m


@pytest.mark.parametrize("depth, latency, cancel_at", [
    (3, 1, None), (3, 4, None), (4, 1, None), (8, 6, None), (3, 4, 1), (4, 3, 3), (8, 6, 2)])
def test_result_queue_loses_nothing(depth, latency, cancel_at):
    dut = _Delay(depth, latency, cancel_at)
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
    assert got == [k for k in items if cancel_at is None or k % 2 == 0]


def test_result_queue_full_rate_with_cancels():
    """Every other item gives its credit back: with depth = latency + 2, one item per cycle."""
    dut = _Delay(8, 6, cancel_at=2)
    taken = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle in range(40):
            ctx.set(dut.i_valid, 1)
            ctx.set(dut.i_data, cycle)
            taken.append(ctx.get(dut.i_taken))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(taken)


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


@pytest.mark.parametrize("offer_p, take_p, seed", [(1.0, 1.0, 1), (0.7, 0.6, 7), (1.0, 0.4, 3),
                                                    (0.4, 1.0, 4), (0.5, 0.5, 5)])
def test_skid_buffer_order_and_registered_ready(offer_p, take_p, seed):
    """Items come out in order, none lost or repeated; ``i.ready`` and ``o.valid`` do not move
    with ``o.ready`` or ``i.valid`` inside a cycle (both are registers); one item per cycle when
    the source always offers and the sink always takes."""
    dut = SkidBuffer(8)
    rng = random.Random(seed)
    items = list(range(1, 200))
    got = []
    cycles = 0

    async def bench(ctx):
        nonlocal cycles
        k = 0
        for _ in range(2000):
            if len(got) == len(items):
                break
            before = (ctx.get(dut.i.ready), ctx.get(dut.o.valid))
            offer = k < len(items) and rng.random() < offer_p
            take = rng.random() < take_p
            ctx.set(dut.i.valid, offer)
            ctx.set(dut.i.payload, items[k] if offer else 0)
            ctx.set(dut.o.ready, take)
            await ctx.delay(1e-9)
            assert (ctx.get(dut.i.ready), ctx.get(dut.o.valid)) == before
            if take and ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload))
            if offer and ctx.get(dut.i.ready):
                k += 1
            await ctx.tick()
            cycles += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == items
    if offer_p == take_p == 1.0:
        assert cycles == len(items) + 1, f"{cycles} cycles for {len(items)} items at full rate"


@pytest.mark.parametrize("cycles, seed", [(1, 1), (3, 2), (20, 3)])
def test_delay_line_gives_every_item_back_its_length_later(cycles, seed):
    """Random valid items come out in order, each exactly ``cycles`` cycles after it went in;
    nothing comes out of reset, and an invalid cycle stays invalid."""
    dut = DelayLine(8, cycles)
    rng = random.Random(seed)
    sent, got = [], []

    async def bench(ctx):
        for cycle in range(120):
            offer = cycle < 90 and rng.random() < 0.6
            value = rng.randrange(256)
            ctx.set(dut.i.valid, offer)
            ctx.set(dut.i.payload, value)
            if offer:
                sent.append((cycle, value))
            if ctx.get(dut.o.valid):
                got.append((cycle, ctx.get(dut.o.payload)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == [(cycle + cycles, value) for cycle, value in sent]


@pytest.mark.parametrize("cycles, error, message", [
    (0, ValueError, "Delay line length must be between 1 and 4096, not 0"),
    (1.5, TypeError, "Delay line length must be an integer between 1 and 4096, not 1.5")])
def test_delay_line_length_errors(cycles, error, message):
    with pytest.raises(error, match=message.replace(".", r"\.")):
        DelayLine(8, cycles)
