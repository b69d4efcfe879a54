"""hdl/board: the block harness and the board top in Amaranth's simulator, against golden models.

* The harness around real registry blocks at their ``small`` preset: ``umdam`` (valid/ready
  streams, latency 1) and ``arith-requant`` (always-ready streams, latency 2), commands as frame
  items under random idle cycles and back-pressure; captured items bit-exact against the blocks'
  golden models (stimulus and expected items from :mod:`memwall.board.vectors`), cycle stamps
  and run cycles from the harness's contract and the registry's latency. ``umdam-tilegen``:
  three commands giving dozens of addresses. A two-by-two block of
  different widths (one stream always ready) checks how streams are numbered and sized.
* Errors: an unknown command and malformed requests answered and harmless; a stimulus beyond
  the memory refused with what was stored intact; a capture memory overflowing with its items
  kept and back-pressure held on the block; a run at its cycle limit; ``FrameRx``'s reports
  answered and counted; the answer latencies the docstring states.
* The board top: the host program (:class:`memwall.board.host.HarnessHost`) speaking bytes to
  the ``rx``/``tx`` pins through a bit-banged UART line, including a framing error and a frame
  with a bad CRC.
* The host's incremental frame reader; parameters refused by name.

Seeds are fixed (``SEED`` and each test's own); failure messages name the item that differs.
"""

import random
import re
from collections import deque

import pytest
from amaranth import Module
from amaranth.back import verilog
from amaranth.lib import data, stream, wiring
from amaranth.sim import Simulator

from hdl.board import BoardTop, Command, Harness, Status
from hdl.rdxe import VacConfig, VacRing
from hdl.rdxe.hosted import DxeBoard, HostItem, HostSequencer
from memwall import registry
from memwall.board.host import (BoardError, HarnessHost, parse_capture, parse_record,
                                read_payload, run_payload, write_payload)
from memwall.board.link import Frame, FrameReader, crc16, encode_frame
from memwall.board.vectors import vectors

from .stream_sim import run_streams
from .test_board_link import FIELDS, frames_of, items_of, uart_wave

SEED = 23
#: A cycle limit no test run reaches.
NO_LIMIT = 10_000


def small(name):
    """A registry block at its ``small`` preset: (entry, params, component)."""
    entry = registry.get(name)
    params = entry.parameters("small")
    return entry, params, entry.elaborate(params)


def case(name, seed, n):
    """A registry block at ``small`` with ``n`` items of stimulus and its golden outputs from
    :func:`memwall.board.vectors.vectors`, and its output's latency from the registry."""
    entry, params, block = small(name)
    v = vectors(entry, params, n, seed, block)
    (sink, stimulus), = v.stimulus.items()
    (source, expected), = v.expected.items()
    return block, stimulus, expected, entry.timing(params, block)[source].latency


def umdam_case(seed, n):
    """umdam: random addresses and mapping selects (select 3 naming no mapping)."""
    return case("umdam", seed, n)


def requant_case(seed, n):
    return case("arith-requant", seed, n)


def command(harness, name, *args):
    """A command frame, its payload made by the host's codec."""
    makers = {"WRITE": write_payload, "RUN": run_payload, "READ": read_payload}
    payload = makers[name](harness, *args) if name in makers else b""
    return Frame(Command[name].value, payload)


def run_harness(harness, frames, *, answers=None, seed=SEED, idle=0.3, stall=0.3, watch=None,
                finish=None):
    """Send ``frames`` to the harness (it takes one at a time), return its answers."""
    want = len(frames) if answers is None else answers
    got, _ = run_streams(harness, {"i": items_of(frames)}, {"o": FIELDS},
                         done=lambda r: sum(item["last"] for item in r["o"]) >= want,
                         seed=seed, idle=idle, stall=stall, watch=watch, finish=finish)
    return frames_of(got["o"])


def statuses(answers):
    return [Status(a.command).name for a in answers]


# --------------------------------------------------------------------------------------------------
# Real blocks, bit-exact

@pytest.mark.parametrize("case", [umdam_case, requant_case], ids=["umdam", "arith-requant"])
def test_harness_runs_a_block_bit_exact(case):
    n = 24
    block, stimulus, expected, latency = case(SEED, n)
    h = Harness(block, stimulus_depth=32, capture_depth=32)
    sink, source = h.sinks[0].name, h.sources[0].name
    frames = [command(h, "WRITE", sink, 10, stimulus[10:]),    # two frames, second half first
              command(h, "WRITE", sink, 0, stimulus[:10]),
              command(h, "RUN", {sink: n}, {source: n}, NO_LIMIT),
              command(h, "READ", source, 0, 15), command(h, "READ", source, 15, n - 15),
              command(h, "STATUS")]
    answers = run_harness(h, frames)
    assert statuses(answers) == ["OK"] * len(frames)
    items, cycles = parse_capture(h, source, answers[3].payload + answers[4].payload)
    for k, (got, want) in enumerate(zip(items, expected)):
        assert got == want, f"item {k}: expected 0x{want:x}, got 0x{got:x}"
    assert len(items) == n
    # Item k is offered in cycle k + 1 and, the block never stalled, out `latency` cycles later.
    assert cycles == [k + 1 + latency for k in range(n)]
    run, status = parse_record(h, answers[2].payload), parse_record(h, answers[5].payload)
    assert run == status
    assert (run.cycles, run.end, run.played, run.captured) == \
        (n + 1 + latency, Status.OK, {sink: n}, {source: n})
    assert (run.rx_errors, run.framing_errors, run.overruns) == (0, 0, 0)


def test_harness_runs_a_tile_generator_many_outputs_per_command():
    """umdam-tilegen: three commands, dozens of addresses; the expected count ends the run."""
    entry, params, block = small("umdam-tilegen")
    v = vectors(entry, params, 3, SEED, block)
    stimulus, expected = v.stimulus["cmd"], v.expected["o"]
    layout_o = block.o.payload.shape()
    ends = [k for k, beat in enumerate(expected) if layout_o.from_bits(beat)["last"]]
    assert len(ends) == 3 and ends[-1] == len(expected) - 1
    h = Harness(block, stimulus_depth=4, capture_depth=len(expected))
    n = len(expected)
    frames = [command(h, "WRITE", "cmd", 0, stimulus),
              command(h, "RUN", {"cmd": 3}, {"o": n}, NO_LIMIT), command(h, "READ", "o", 0, n)]
    answers = run_harness(h, frames)
    assert statuses(answers) == ["OK"] * 3
    items, cycles = parse_capture(h, "o", answers[2].payload)
    for k, (got, want) in enumerate(zip(items, expected)):
        assert got == want, f"beat {k}: expected {layout_o.from_bits(want)}, got " \
                            f"{layout_o.from_bits(got)}"
    assert len(items) == n > 3
    # The first command is offered in cycle 1; each command's addresses come one a cycle.
    assert cycles[0] == 1 + entry.timing(params, block)["o"].latency
    for start, end in zip([0] + [e + 1 for e in ends[:-1]], ends):
        run = cycles[start:end + 1]
        assert run == list(range(run[0], run[0] + len(run))), f"beats {start}..: {run}"


class _TwoByTwo(wiring.Component):
    """Two independent streams of different widths: ``a`` (valid/ready, 8 bits) gives
    ``a_out = a ^ 0x5A`` and ``b`` (always ready, 20 bits) gives ``b_out = b + 1`` (mod 2**20),
    each through one register."""

    a: wiring.In(stream.Signature(8))
    b: wiring.In(stream.Signature(20, always_ready=True))
    a_out: wiring.Out(stream.Signature(8))
    b_out: wiring.Out(stream.Signature(20, always_ready=True))

    def elaborate(self, platform):
        m = Module()
        free = ~self.a_out.valid | self.a_out.ready
        m.d.comb += self.a.ready.eq(free)
        with m.If(free):
            m.d.sync += [self.a_out.valid.eq(self.a.valid),
                         self.a_out.payload.eq(self.a.payload ^ 0x5A)]
        m.d.sync += [self.b_out.valid.eq(self.b.valid), self.b_out.payload.eq(self.b.payload + 1)]
        return m


def test_harness_numbers_several_streams_of_several_widths():
    rng = random.Random(SEED + 6)
    a = [rng.randrange(1 << 8) for _ in range(5)]
    b = [rng.randrange(1 << 20) for _ in range(8)] + [(1 << 20) - 1]
    h = Harness(_TwoByTwo(), stimulus_depth=16, capture_depth=16)
    assert [(s.name, s.item_bytes) for s in h.sinks] == [("a", 1), ("b", 3)]
    assert [(s.name, s.capture_bytes) for s in h.sources] == [("a_out", 5), ("b_out", 7)]
    frames = [command(h, "WRITE", "b", 0, b), command(h, "WRITE", "a", 0, a),
              command(h, "RUN", {"a": 5, "b": 9}, {"a_out": 5, "b_out": 9}, NO_LIMIT),
              command(h, "READ", "b_out", 0, 9), command(h, "READ", "a_out", 0, 5)]
    answers = run_harness(h, frames)
    assert statuses(answers) == ["OK"] * 5
    record = parse_record(h, answers[2].payload)
    assert (record.played, record.captured, record.cycles) == \
        ({"a": 5, "b": 9}, {"a_out": 5, "b_out": 9}, 9 + 2)
    got_b, cycles_b = parse_capture(h, "b_out", answers[3].payload)
    got_a, cycles_a = parse_capture(h, "a_out", answers[4].payload)
    assert got_a == [v ^ 0x5A for v in a] and cycles_a == [k + 2 for k in range(5)]
    assert got_b == [(v + 1) % (1 << 20) for v in b] and cycles_b == [k + 2 for k in range(9)]


def test_harness_takes_every_registry_block_with_stream_ports():
    """Every block (in its board form: the VAC behind its ring's source, the rDXE engine
    behind its host sequencer) but the eDRAM controller with its macro ports (``edram-fpga`` is
    its board form) and the rDXE ring with its DXEs' fixed entries (no preset fits a board:
    docs/rdxe.md 16.4) is taken, with exactly the streams its registry entry gives timing
    for."""
    for entry in registry.blocks():
        params = entry.parameters("small", force=True)
        block = entry.board_component(params)
        if entry.name in ("edram", "rdxe-ring"):
            with pytest.raises(ValueError, match="not the plain input"):
                Harness(block, stimulus_depth=4, capture_depth=4)
            continue
        h = Harness(block, stimulus_depth=4, capture_depth=4)
        assert {s.name for s in h.sinks + h.sources} == set(entry.timing(params, block)), \
            entry.name


def test_top_converts_to_verilog_with_its_pins_only():
    """The top around a block of five sinks, two sources and plain outputs (rdxe-vac) becomes
    Verilog whose ports are the clock, the reset and the three pins."""
    _, _, block = small("rdxe-vac")
    text = verilog.convert(BoardTop(block, divisor=4, stimulus_depth=8, capture_depth=8),
                           name="board_top")
    header = re.search(r"^module board_top\((.*)\);", text, re.M)
    assert sorted(header.group(1).split(", ")) == ["clk", "rst", "running", "rx", "tx"]


def test_vac_ring_keeps_credits_and_releases_factors():
    """rdxe-vac's board form, ``o`` held: outputs start while the VAC owes fewer than
    ``queue_depth`` results (an output's later chunk always passes), then the next first chunk
    waits; an RC factor offered all along is taken once, in the cycle after its fused
    operation's first output left the source. Once a result is taken the waiting output
    starts, and its operation's factor is taken the cycle after."""
    cfg = VacConfig(lanes=4, wmem_depth=8, ppu_depth=4, kv_rows=0, queue_depth=3)
    ring = VacRing(cfg)
    fused = {"rcu": 1, "last": 1}
    chunks = [{"first": 1, "last": 1},                         # plain
              {"first": 1, **fused},                           # fused A, output 0
              {"first": 1, "rcu": 1},                          # A, output 1: two chunks
              {**fused, "rc_last": 1},
              {"first": 1, **fused, "rc_last": 1}]             # fused B: no credit left
    seen, started = [], []

    async def body(ctx):
        ctx.set(ring.rc.valid, 1)
        ctx.set(ring.hlink_i.valid, 1)
        for chunk in chunks:
            for name in ("first", "last", "rcu", "rc_last"):
                ctx.set(ring.hlink_i.payload[name], chunk.get(name, 0))
            for cycle in range(60):
                ctx.set(ring.o.ready, int(cycle >= 40))
                seen.append((ctx.get(ring.hlink_i.ready), ctx.get(ring.rc.ready)))
                await ctx.tick()
                if seen[-1][0]:
                    break
            started.append(len(seen) - 1)
        ctx.set(ring.hlink_i.valid, 0)
        for _ in range(3):
            seen.append((ctx.get(ring.hlink_i.ready), ctx.get(ring.rc.ready)))
            await ctx.tick()

    sim = Simulator(ring)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()
    assert started[:4] == [0, 1, 2, 3] and started[4] > 40, started
    # Factor A: taken in cycle 2 only; factor B: the cycle after B started, then no more.
    assert [k for k, (_, rc) in enumerate(seen) if rc] == [2, started[4] + 1], seen
    assert not any(ready for ready, _ in seen[4:started[4]]), seen


def test_dxe_host_sequencer_keeps_the_host_order():
    """rdxe-dxe's board form's sequencer before an engine stand-in (``ext`` and ``run`` taken
    at random, a run's ``done`` 2 to 9 cycles after it was taken, ``done`` back-pressured at
    random): every host item reaches the engine once, in order; none is offered from the
    cycle after a run is taken until the cycle after its ``done`` is taken; ``done`` passes
    unchanged, in its cycle."""
    seq = HostSequencer(data.StructLayout({"row": 4}), data.StructLayout({"pc": 4}),
                        data.StructLayout({"pc": 4}))
    items = [(HostItem.EXT, 0), (HostItem.EXT, 1), (HostItem.RUN, 2), (HostItem.EXT, 3),
             (HostItem.RUN, 4), (HostItem.RUN, 5), (HostItem.EXT, 6), (HostItem.EXT, 7)]
    rng, taken, dones, offered_out = random.Random(SEED), [], [], []

    async def body(ctx):
        k, out, done_at = 0, None, None
        for cycle in range(300):
            if k == len(items) and out is None:
                break
            kind, value = items[min(k, len(items) - 1)]
            ctx.set(seq.i.valid, k < len(items))
            ctx.set(seq.i.payload.kind, kind)
            ctx.set(seq.i.payload.ext.row, value)
            ctx.set(seq.i.payload.run.pc, value)
            ctx.set(seq.ext.ready, rng.random() < 0.6)
            ctx.set(seq.run.ready, rng.random() < 0.6)
            ctx.set(seq.dxe_done.valid, done_at is not None and cycle >= done_at)
            ctx.set(seq.dxe_done.payload.pc, out if out is not None else 0)
            ctx.set(seq.done.ready, rng.random() < 0.5)
            ext = ctx.get(seq.ext.valid) and ctx.get(seq.ext.ready)
            run = ctx.get(seq.run.valid) and ctx.get(seq.run.ready)
            done = ctx.get(seq.done.valid) and ctx.get(seq.done.ready)
            assert (ctx.get(seq.i.valid) and ctx.get(seq.i.ready)) == (ext or run), cycle
            if out is not None and (ctx.get(seq.ext.valid) or ctx.get(seq.run.valid)):
                offered_out.append(cycle)
            if ext or run:
                taken.append((HostItem.EXT if ext else HostItem.RUN,
                              ctx.get(seq.ext.payload.row if ext else seq.run.payload.pc)))
                k += 1
            if done:
                dones.append(ctx.get(seq.done.payload.pc))
                out = done_at = None
            if run:
                out, done_at = taken[-1][1], cycle + rng.randint(2, 9)
            await ctx.tick()

    sim = Simulator(seq)
    sim.add_clock(1e-8)
    sim.add_testbench(body)
    sim.run()
    assert taken == items and dones == [2, 4, 5], (taken, dones)
    assert not offered_out, offered_out


@pytest.mark.parametrize("change, error, message", [
    (lambda i: {k: v for k, v in i.items() if k != "eps"}, ValueError,
     "DxeBoard inputs (inputs) must name exactly the engine's plain inputs eps, identity, "
     "pv_entry, score_entry, score_scale, not identity, pv_entry, score_entry, score_scale"),
    (lambda i: {**i, "position": 0}, ValueError,
     "DxeBoard inputs (inputs) must name exactly the engine's plain inputs eps, identity, "
     "pv_entry, score_entry, score_scale, not eps, identity, position, pv_entry, score_entry, "
     "score_scale"),
    (lambda i: {**i, "identity": 8}, ValueError,
     "DxeBoard input identity (inputs) must be 0 to 7 (its 3 bits), not 8"),
    (lambda i: {**i, "eps": 1.0}, TypeError, "DxeBoard input eps (inputs) must be an integer, "
                                             "not 1.0"),
])
def test_dxe_board_refuses_inputs_by_name(change, error, message):
    entry = registry.get("rdxe-dxe")
    params = entry.parameters("small")
    inputs = {"eps": 0, "identity": 4, "score_entry": 34, "pv_entry": 35, "score_scale": 0}
    with pytest.raises(error) as info:
        DxeBoard(params.ctrl_config(), params.dxt_config(), inputs=change(inputs))
    assert str(info.value) == message


# --------------------------------------------------------------------------------------------------
# Errors

def test_harness_unknown_command_and_bad_requests_change_nothing():
    block, stimulus, expected, _ = umdam_case(SEED + 1, 6)
    h = Harness(block, stimulus_depth=8, capture_depth=8)
    good = command(h, "WRITE", "i", 0, stimulus)
    frames = [good, command(h, "RUN", {"i": 6}, {"o": 6}, NO_LIMIT),
              Frame(0x7E, b"\xA5" * 9),                               # unknown, with a payload
              Frame(0x7F),                                            # unknown, empty
              Frame(Command.WRITE.value, good.payload[:-1]),          # an item cut short
              Frame(Command.WRITE.value, bytes([1]) + good.payload[1:]),  # sink 1: none
              Frame(Command.READ.value, read_payload(h, "o", 0, 6) + b"\0"),
              command(h, "READ", "o", 3, 4),                          # beyond the 6 captured
              Frame(Command.READ.value, bytes([1, 0, 0, 0, 1])),      # source 1: none
              Frame(Command.RUN.value, b"\0" * (h.run_bytes - 1)),
              Frame(Command.STATUS.value, b"\0"),
              command(h, "READ", "o", 0, 6), command(h, "STATUS")]
    answers = run_harness(h, frames)
    assert statuses(answers) == ["OK", "OK", "UNKNOWN_COMMAND", "UNKNOWN_COMMAND"] + \
        ["BAD_REQUEST"] * 7 + ["OK", "OK"]
    assert all(a.payload == b"" for a in answers[2:11])
    items, _ = parse_capture(h, "o", answers[11].payload)
    assert items == expected
    assert parse_record(h, answers[12].payload) == parse_record(h, answers[1].payload)


def test_harness_refuses_stimulus_too_large_and_keeps_what_was_stored():
    block, stimulus, expected, _ = umdam_case(SEED + 2, 8)
    _, other, _, _ = umdam_case(SEED + 3, 2)
    h = Harness(block, stimulus_depth=8, capture_depth=8)
    frames = [command(h, "WRITE", "i", 0, stimulus),
              command(h, "WRITE", "i", 7, other),          # would end at 9: nothing stored
              command(h, "RUN", {"i": 9}, {"o": 9}, NO_LIMIT),
              command(h, "RUN", {"i": 8}, {"o": 8}, NO_LIMIT), command(h, "READ", "o", 0, 8)]
    answers = run_harness(h, frames)
    assert statuses(answers) == ["OK", "STIMULUS_TOO_LARGE", "STIMULUS_TOO_LARGE", "OK", "OK"]
    assert parse_capture(h, "o", answers[4].payload)[0] == expected


def test_harness_output_overflow_keeps_captures_and_holds_back_pressure():
    """Five places for twelve outputs: the sixth waits in the block, not taken, until the end."""
    block, stimulus, expected, latency = umdam_case(SEED + 5, 12)
    assert len(set(expected[4:8])) == 4, "the held output must differ from its neighbours"
    h = Harness(block, stimulus_depth=16, capture_depth=5)
    frames = [command(h, "WRITE", "i", 0, stimulus),
              command(h, "RUN", {"i": 12}, {"o": 12}, NO_LIMIT),
              command(h, "READ", "o", 0, 5), command(h, "READ", "o", 5, 1), command(h, "STATUS")]
    seen = {"after": [], "ran": False}

    def watch(ctx, cycle):
        if ctx.get(h.running):
            seen["ran"] = True
        elif seen["ran"]:                                # every cycle after the run
            seen["after"].append((ctx.get(block.o.valid), ctx.get(block.o.ready),
                                  ctx.get(block.o.payload.as_value())))

    answers = run_harness(h, frames, watch=watch)
    assert statuses(answers) == ["OK", "OUTPUT_OVERFLOW", "OK", "BAD_REQUEST", "OK"]
    items, cycles = parse_capture(h, "o", answers[2].payload)
    assert items == expected[:5] and cycles == [k + 1 + latency for k in range(5)]
    run = parse_record(h, answers[1].payload)
    # The sixth output is offered in cycle 6 + latency with the memory full: the run's last.
    assert (run.end, run.captured, run.cycles) == (Status.OUTPUT_OVERFLOW, {"o": 5}, 7 + latency)
    assert run.played["i"] > 5                           # the block took the sixth input
    assert parse_record(h, answers[4].payload) == run
    assert len(seen["after"]) > 100
    assert set(seen["after"]) == {(1, 0, expected[5])}, "the sixth output must wait in the block"


def test_harness_run_limit():
    block, stimulus, expected, latency = umdam_case(SEED + 4, 10)
    h = Harness(block, stimulus_depth=16, capture_depth=16)
    frames = [command(h, "WRITE", "i", 0, stimulus),
              command(h, "RUN", {"i": 10}, {"o": 10}, 6),
              command(h, "READ", "o", 0, 6 - 1 - latency),
              command(h, "RUN", {"i": 10}, {"o": 10}, 0), command(h, "RUN", {}, {}, 0)]
    answers = run_harness(h, frames)
    assert statuses(answers) == ["OK", "RUN_LIMIT", "OK", "RUN_LIMIT", "OK"]
    run = parse_record(h, answers[1].payload)
    # Cycles 0 to 5: outputs in cycles 1 + latency to 5.
    assert (run.cycles, run.captured["o"]) == (6, 6 - 1 - latency)
    assert parse_capture(h, "o", answers[2].payload)[0] == expected[:6 - 1 - latency]
    assert [parse_record(h, a.payload).cycles for a in answers[3:]] == [0, 0]


def test_harness_answers_link_reports_and_counts_them():
    """``FrameRx``'s reports are answered in order, one of them arriving as the one before is
    answered; the STATUS held back until after them counts them and shows the UART's counts."""
    block, _, _, _ = umdam_case(SEED, 1)
    h = Harness(block, stimulus_depth=4, capture_depth=4)
    pulses = {40: Status.BAD_CRC, 41: Status.BUSY, 120: Status.TIMEOUT}

    def watch(ctx, cycle):
        ctx.set(h.framing_errors, 3)
        ctx.set(h.overruns, 258)
        ctx.set(h.rx_error, cycle in pulses)
        ctx.set(h.rx_reason, pulses.get(cycle, Status.OK))
        if cycle < 200:
            ctx.set(h.i.valid, 0)

    answers = run_harness(h, [command(h, "STATUS")], answers=4, watch=watch)
    assert statuses(answers) == ["BAD_CRC", "BUSY", "TIMEOUT", "OK"]
    assert [a.payload for a in answers[:3]] == [b""] * 3
    record = parse_record(h, answers[3].payload)
    assert (record.rx_errors, record.framing_errors, record.overruns) == (3, 3, 258)


def test_harness_answer_latency():
    """The cycles from a command's last item taken to its answer's first item, as documented."""
    block, stimulus, _, latency = umdam_case(SEED, 4)
    h = Harness(block, stimulus_depth=4, capture_depth=4)
    frames = [command(h, "WRITE", "i", 0, stimulus), command(h, "STATUS"),
              command(h, "RUN", {"i": 4}, {"o": 4}, NO_LIMIT), command(h, "READ", "o", 0, 4),
              Frame(0x7F), command(h, "WRITE", "i", 3, stimulus[:2])]
    marks, state = {"last_in": [], "first_out": []}, {"shown": False}

    def watch(ctx, cycle):
        if ctx.get(h.i.valid) and ctx.get(h.i.ready) and ctx.get(h.i.payload.last):
            marks["last_in"].append(cycle)
        shown = ctx.get(h.o.valid) and ctx.get(h.o.payload.first)
        if shown and not state["shown"]:
            marks["first_out"].append(cycle)
        state["shown"] = shown and not ctx.get(h.o.ready)

    answers = run_harness(h, frames, idle=0, stall=0, watch=watch)
    assert statuses(answers) == ["OK"] * 4 + ["UNKNOWN_COMMAND", "STIMULUS_TOO_LARGE"]
    gaps = [b - a for a, b in zip(marks["last_in"], marks["first_out"])]
    run_cycles = 4 + 1 + latency
    assert gaps == [1, 2, run_cycles + 4, 4, 1, 1]


# --------------------------------------------------------------------------------------------------
# The board top and the host program over a simulated serial line

class SimulatedPort:
    """A host's serial port on a top's ``rx``/``tx`` pins in Amaranth's simulator.

    ``send`` queues bytes as 8N1 characters on ``rx``; ``receive`` runs the simulation for
    ``chunk`` cycles and returns the bytes decoded from ``tx`` meanwhile (a software UART
    sampling each bit at its centre, written from the 8N1 definition).
    """

    def __init__(self, top, *, chunk=2000):
        self.top, self.chunk, self.divisor = top, chunk, top.divisor
        self.line, self.received, self.cycle = deque(), bytearray(), 0
        self.sim = Simulator(top)
        self.sim.add_clock(1e-8)
        self.sim.add_testbench(self._bench, background=True)

    def send(self, data, *, stop=1):
        self.line.extend(uart_wave(list(data), self.divisor, stop=stop) + [1] * self.divisor)

    def receive(self):
        self.sim.run_until((self.cycle + self.chunk) * 1e-8)
        data, self.received = bytes(self.received), bytearray()
        return data

    async def _bench(self, ctx):
        d, sampling = self.divisor, None                 # sampling: (cycle of start, bits)
        while True:
            ctx.set(self.top.rx, self.line.popleft() if self.line else 1)
            level = ctx.get(self.top.tx)
            if sampling is None:
                if not level:
                    sampling = (self.cycle, [])
            else:
                start, bits = sampling
                if (self.cycle - start - d // 2) % d == 0 and self.cycle - start > d // 2:
                    bits.append(level)
                    if len(bits) == 9:
                        assert bits[8] == 1, f"cycle {self.cycle}: stop bit low on tx"
                        self.received.append(sum(b << k for k, b in enumerate(bits[:8])))
                        sampling = None
            await ctx.tick()
            self.cycle += 1


def test_top_host_program_over_the_serial_line():
    n = 20
    block, stimulus, expected, latency = umdam_case(SEED + 5, n)
    top = BoardTop(block, divisor=4, stimulus_depth=32, capture_depth=32, max_length=24)
    port = SimulatedPort(top)
    host = HarnessHost(top.harness, port.send, port.receive, max_payload=top.max_length,
                       patience=3)
    capture = host.execute({"i": stimulus}, {"o": n}, NO_LIMIT)      # WRITE in 3 frames
    assert capture.items["o"] == expected
    assert capture.cycles["o"] == [k + 1 + latency for k in range(n)]
    assert capture.record.end == Status.OK and capture.record.cycles == n + 1 + latency
    # A character with a low stop bit, then a frame with a bad CRC: answered, counted.
    port.send(b"\x55", stop=0)
    bad = bytearray(encode_frame(Command.STATUS.value))
    bad[-1] ^= 1
    port.send(bytes(bad))
    with pytest.raises(BoardError, match="STATUS answered BAD_CRC"):
        host.answer(Command.STATUS)
    record = host.status()
    assert (record.rx_errors, record.framing_errors, record.overruns) == (1, 1, 0)
    assert record.played == {"i": n} and record.captured == {"o": n}


# --------------------------------------------------------------------------------------------------
# The host's reader and parameters

def test_frame_reader_takes_bytes_in_pieces():
    rng = random.Random(SEED)
    frames = [Frame(rng.randrange(256), bytes(rng.randrange(256) for _ in range(n)))
              for n in [0, 1, 39] + [rng.randrange(40) for _ in range(9)]]
    broken = bytearray(encode_frame(9, b"broken"))
    broken[6] ^= 0x40
    data = b"\x00\x13" + b"".join(encode_frame(f.command, f.payload) for f in frames[:6]) + \
        bytes(broken) + b"".join(encode_frame(f.command, f.payload) for f in frames[6:])
    reader, got, at = FrameReader(), [], 0
    while at < len(data):
        step = rng.randrange(1, 9)
        got += reader.feed(data[at:at + step])
        at += step
    assert got == frames
    where = 2 + sum(len(encode_frame(f.command, f.payload)) for f in frames[:6])
    assert [str(e) for e in reader.errors] == [
        f"stream byte {where}: byte 0: CRC 0x{int.from_bytes(broken[-2:], 'big'):04X}, "
        f"computed 0x{crc16(bytes(broken[1:-2])):04X}"]
    assert reader.dropped == 2 + len(broken)


class _SourceOnly(wiring.Component):
    o: wiring.Out(stream.Signature(8))

    def elaborate(self, platform):
        return Module()


@pytest.mark.parametrize("build, error, message", [
    (lambda b: Harness(3, stimulus_depth=4, capture_depth=4), TypeError,
     "Harness block (block) must be a wiring.Component, not 3"),
    (lambda b: Harness(small("edram")[2], stimulus_depth=4, capture_depth=4), ValueError,
     "Harness block (block) must have streams and plain outputs only, not the plain input(s) "
     "std.rdata, kv_mant.rdata, qo_mant.rdata"),
    (lambda b: Harness(_SourceOnly(), stimulus_depth=4, capture_depth=4), ValueError,
     "Harness block (block) must have at least one sink and one source stream, not 0 and 1"),
    (lambda b: Harness(b, stimulus_depth=0, capture_depth=4), ValueError,
     "Harness stimulus memory depth (stimulus_depth, items) must be between 1 and 32768, not 0"),
    (lambda b: Harness(b, stimulus_depth=4, capture_depth=32769), ValueError,
     "Harness capture memory depth (capture_depth, items) must be between 1 and 32768, "
     "not 32769"),
    (lambda b: Harness(b, stimulus_depth=4.0, capture_depth=4), TypeError,
     "Harness stimulus memory depth (stimulus_depth, items) must be an integer between 1 and "
     "32768, not 4.0"),
    (lambda b: BoardTop(b, divisor=2, stimulus_depth=4, capture_depth=4), ValueError,
     "UART divisor (divisor, clock cycles per bit) must be between 4 and 16777216, not 2"),
    (lambda b: HarnessHost(Harness(b, stimulus_depth=4, capture_depth=4), None, None,
                           max_payload=6), ValueError,
     "Board payload limit (max_payload) must be between 7 and 65535 for this harness, not 6"),
    (lambda b: write_payload(Harness(b, stimulus_depth=4, capture_depth=4), "x", 0, []),
     ValueError, "Sink must be one of i, not 'x'"),
    (lambda b: parse_record(Harness(b, stimulus_depth=4, capture_depth=4), b"\0"), ValueError,
     "a record of this harness has 15 bytes, not 1"),
    (lambda b: read_payload(Harness(b, stimulus_depth=4, capture_depth=4), "i", 0, 1),
     ValueError, "Source must be one of o, not 'i'"),
    (lambda b: parse_capture(Harness(b, stimulus_depth=4, capture_depth=4), "o", b"\0" * 7),
     ValueError, "a capture of o is a whole number of 6-byte items, not 7 bytes"),
    (lambda b: HarnessHost(Harness(b, stimulus_depth=4, capture_depth=4), lambda data: None,
                           lambda: b"", patience=2).status(), TimeoutError,
     "no answer to STATUS after 3 empty reads"),
])
def test_parameters_refused_by_name(build, error, message):
    with pytest.raises(error) as info:
        build(small("umdam")[2])
    assert str(info.value) == message
