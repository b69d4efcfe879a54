"""hdl/board: the serial link's UART and frames in Amaranth's simulator, against the host codec.

* The host codec (:mod:`memwall.board.link`): its CRC against the standard check value and
  Amaranth's catalogue, frames encoded and decoded back, broken byte strings refused.
* UART: transmitter to receiver at two divisors with random idle input and random back-pressure;
  back-to-back characters exactly ``10 * divisor`` cycles apart; the receiver against a
  bit-banged line (glitches that are no start bit, a framing error, a break, an overrun) and
  against senders 3 % fast and slow.
* Frames: good frames out intact under back-pressure with junk between them; a corrupted byte,
  an over-long length, a lost byte and a frame while the one before still waits are each
  reported once and cost only their own frame; the transmitter's bytes decode with the host
  decoder; frames through transmitter, UART, receiver and back.
* Parameters: a bad divisor, counter width, payload limit or timeout is refused by name.

Seeds are fixed (``SEED`` and each test's own); failure messages name the item that differs.
"""

import random

import pytest
from amaranth import Module
from amaranth.lib import stream, wiring

from hdl.board import (CRC, SYNC, FrameRx, FrameTx, Status, UartRx, UartTx, frame_layout,
                       uart_divisor)
from memwall.board.link import Frame, FrameError, crc16, decode_frames, encode_frame

from .stream_sim import run_streams

SEED = 23
#: FrameRx parameters of the frame tests: small, so a too-long frame is cheap.
MAX_LENGTH, TIMEOUT = 16, 64


def items_of(frames):
    """The frame-layout stream items of ``frames`` (one item for an empty payload)."""
    out = []
    for frame in frames:
        data = frame.payload or b"\0"
        for k, byte in enumerate(data):
            out.append({"command": frame.command, "length": len(frame.payload), "data": byte,
                        "first": int(k == 0), "last": int(k == len(data) - 1)})
    return out


def frames_of(items):
    """The frames a stream of frame-layout items carries; checks first/last/length agree."""
    frames, payload = [], bytearray()
    for k, item in enumerate(items):
        assert item["first"] == (not payload), f"item {k}: first={item['first']}: {item}"
        if item["length"]:
            payload.append(item["data"])
        if item["last"]:
            assert len(payload) == item["length"], f"item {k}: length {item['length']}, " \
                                                   f"{len(payload)} bytes"
            frames.append(Frame(item["command"], bytes(payload)))
            payload = bytearray()
    assert not payload, f"stream ends inside a frame: {bytes(payload)!r}"
    return frames


def random_frames(rng, count, max_length=MAX_LENGTH):
    lengths = [0, max_length] + [rng.randrange(max_length + 1) for _ in range(count - 2)]
    return [Frame(rng.randrange(256), bytes(rng.randrange(256) for _ in range(n)))
            for n in lengths]


FIELDS = ["command", "length", "data", "first", "last"]


# --------------------------------------------------------------------------------------------------
# The host codec

def test_crc_check_value_and_catalogue():
    assert crc16(b"123456789") == 0x29B1                 # the algorithm's published check value
    assert crc16(b"") == 0xFFFF
    rng = random.Random(SEED)
    for n in (1, 2, 7, 64):
        data = bytes(rng.randrange(256) for _ in range(n))
        assert crc16(data) == CRC(data_width=8).compute(data), data.hex()
        # A message followed by its CRC (big-endian) leaves 0: the receiver's check.
        assert crc16(data + crc16(data).to_bytes(2, "big")) == 0


def test_encode_decode_round_trip():
    assert encode_frame(0x03, b"abc") == bytes([SYNC, 3, 0, 3]) + b"abc" + bytes([0xC6, 0xFA])
    frames = random_frames(random.Random(SEED), 10, max_length=300)
    stream = b"".join(encode_frame(f.command, f.payload) for f in frames)
    assert decode_frames(stream) == frames


@pytest.mark.parametrize("mangle, where", [
    (lambda b: b[:-1], "byte 0: frame of 9 bytes cut short at 8"),
    (lambda b: b[:4], "byte 0: frame cut short at 4 bytes"),
    (lambda b: b"\0" + b, "byte 0: expected SYNC 0xA5, got 0x00"),
    (lambda b: b[:5] + bytes([b[5] ^ 1]) + b[6:], "byte 0: CRC 0xC6FA, computed"),
])
def test_decode_refuses_broken_bytes(mangle, where):
    with pytest.raises(FrameError, match=where):
        decode_frames(mangle(encode_frame(3, b"abc")))


def test_encode_refuses_bad_frames():
    with pytest.raises(ValueError, match="Frame command must be between 0 and 255, not 256"):
        encode_frame(256)
    with pytest.raises(ValueError, match="Frame payload must be at most 65535 bytes, not 65536"):
        encode_frame(1, bytes(65536))


# --------------------------------------------------------------------------------------------------
# UART

class _Loop(wiring.Component):
    """UartTx's line into UartRx: ``i`` is the transmitter's input, ``o`` the receiver's output."""

    def __init__(self, divisor):
        self.tx, self.rx = UartTx(divisor=divisor), UartRx(divisor=divisor)
        super().__init__({"i": wiring.In(stream.Signature(8)),
                          "o": wiring.Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx, m.submodules.rx = self.tx, self.rx
        wiring.connect(m, wiring.flipped(self.i), self.tx.i)
        wiring.connect(m, self.rx.o, wiring.flipped(self.o))
        m.d.comb += self.rx.rx.eq(self.tx.tx)
        return m


@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_loopback_random_bytes(divisor):
    rng = random.Random(SEED + divisor)
    sent = [rng.randrange(256) for _ in range(40)] + [0x00, 0xFF]
    dut = _Loop(divisor)
    errors = {}

    async def finish(ctx):
        errors.update(framing=ctx.get(dut.rx.framing_errors), overrun=ctx.get(dut.rx.overruns))

    got, _ = run_streams(dut, {"i": sent}, {"o": None}, done=lambda r: len(r["o"]) == len(sent),
                         idle=0.5, stall=0.5, seed=SEED + divisor, finish=finish)
    assert got["o"] == sent
    assert errors == {"framing": 0, "overrun": 0}


def test_uart_tx_back_to_back_rate():
    """Bytes offered without pause go out exactly one character (10 bits) apart."""
    divisor, sent = 5, list(range(12))
    dut, taken = _Loop(divisor), {}
    got, _ = run_streams(dut, {"i": sent}, {"o": None}, done=lambda r: len(r["o"]) == len(sent),
                         idle=0, stall=0, accepted_at=taken)
    assert got["o"] == sent
    gaps = {b - a for a, b in zip(taken["i"], taken["i"][1:])}
    assert gaps == {10 * divisor}, gaps


def uart_wave(values, bit_cycles, *, stop=1):
    """Levels, one a cycle, of 8N1 characters of ``values`` at ``bit_cycles`` (may be
    fractional) cycles per bit, back to back; ``stop=0`` sends a low stop bit."""
    bits = []
    for value in values:
        bits += [0] + [(value >> k) & 1 for k in range(8)] + [stop]
    edges = [round(k * bit_cycles) for k in range(len(bits) + 1)]
    return [bit for k, bit in enumerate(bits) for _ in range(edges[k + 1] - edges[k])]


def run_rx(divisor, segments, *, stall_window=(0, 0), count_bits=16):
    """Drive UartRx's line with ``segments`` (lists of levels); ``o.ready`` low inside
    ``stall_window`` (cycles), high elsewhere. Return (bytes, framing pulses, overrun pulses,
    counters), the pulses as cycles."""
    wave = [level for segment in segments for level in segment] + [1] * (3 * divisor)
    dut = UartRx(divisor=divisor, count_bits=count_bits)
    pulses = {"framing": [], "overrun": []}
    counters, now = {}, {"cycle": 0}

    def watch(ctx, cycle):
        ctx.set(dut.rx, wave[cycle] if cycle < len(wave) else 1)
        ctx.set(dut.o.ready, not stall_window[0] <= cycle < stall_window[1])
        for name in pulses:
            if ctx.get(getattr(dut, name)):
                pulses[name].append(cycle)
        now["cycle"] = cycle

    async def finish(ctx):
        counters.update(framing=ctx.get(dut.framing_errors), overrun=ctx.get(dut.overruns))

    got, _ = run_streams(dut, {}, {"o": None}, watch=watch, finish=finish,
                         done=lambda r: now["cycle"] >= len(wave))
    return got["o"], pulses["framing"], pulses["overrun"], counters


def test_uart_rx_line_events():
    d = 8
    idle = [1] * (2 * d)
    glitches = [[0] * (d // 2 - 1) + idle, [0] + idle]   # shorter than half a bit: no start
    bad_stop = uart_wave([0x33], d, stop=0) + [1] * (2 * d)
    brk = [0] * (30 * d) + idle                          # a break: one framing error
    before_overrun = idle + glitches[0] + glitches[1] + uart_wave([0x5A], d) + idle + bad_stop \
        + uart_wave([0xC3], d) + idle + brk + idle
    overrun = uart_wave([0x11, 0x22], d) + idle         # not taken until both are in
    window = (len(before_overrun), len(before_overrun) + len(overrun))
    got, framing, overruns, counters = run_rx(
        d, [before_overrun, overrun, uart_wave([0x44], d)], stall_window=window)
    assert got == [0x5A, 0xC3, 0x11, 0x44], [hex(b) for b in got]
    assert len(framing) == 2 and len(overruns) == 1, (framing, overruns)
    assert window[0] < overruns[0] < window[1]
    assert counters == {"framing": 2, "overrun": 1}


def test_uart_rx_counters_saturate():
    got, framing, _, counters = run_rx(4, [uart_wave([1], 4, stop=0) + [1] * 8] * 3,
                                       count_bits=1)
    assert got == [] and len(framing) == 3 and counters["framing"] == 1


@pytest.mark.parametrize("rate", [0.97, 1.03])
def test_uart_rx_tolerates_rate_error(rate):
    """A sender 3 % slow or fast, characters back to back: every byte arrives."""
    rng = random.Random(SEED)
    values = [rng.randrange(256) for _ in range(12)] + [0x00, 0xFF, 0x55]
    got, framing, overruns, _ = run_rx(16, [uart_wave(values, 16 * rate)])
    assert got == values and framing == [] and overruns == []


# --------------------------------------------------------------------------------------------------
# Frames

def run_frame_rx(stream, *, gap_after=(), stall_window=(0, 0), seed=SEED, stall=0.3, idle=0.3):
    """Feed ``stream`` (bytes) to a FrameRx; ``gap_after`` maps a byte index to idle cycles held
    after that byte is taken; ``o.ready`` is low inside ``stall_window``. Return (frames, errors
    as (cycle, Status), cycles at which bytes were taken, cycles at which frames' first items
    appeared on ``o``)."""
    dut = FrameRx(max_length=MAX_LENGTH, timeout=TIMEOUT)
    taken, errors, state, starts = {}, [], {"cycle": 0, "shown": False}, []
    gaps = dict(gap_after)
    flush = 2 * TIMEOUT + 4 * MAX_LENGTH                 # cycles after the last byte

    def watch(ctx, cycle):
        state["cycle"] = cycle
        done = len(taken.get("i", []))
        if done and done - 1 in gaps and cycle - taken["i"][-1] <= gaps[done - 1]:
            ctx.set(dut.i.valid, 0)
        if stall_window[0] <= cycle < stall_window[1]:
            ctx.set(dut.o.ready, 0)
        if ctx.get(dut.error):
            errors.append((cycle, Status(ctx.get(dut.reason))))
        shown = ctx.get(dut.o.valid) and ctx.get(dut.o.payload.first)
        if shown and not state["shown"]:
            starts.append(cycle)
        state["shown"] = shown and not ctx.get(dut.o.ready)

    def done(_):
        return len(taken.get("i", [])) == len(stream) and \
            state["cycle"] > max(taken["i"][-1] + flush, stall_window[1] + flush)

    got, _ = run_streams(dut, {"i": list(stream)}, {"o": FIELDS}, done=done, watch=watch,
                         accepted_at=taken, seed=seed, stall=stall, idle=idle)
    return frames_of(got["o"]), errors, taken["i"], starts


def encode(frames):
    return b"".join(encode_frame(f.command, f.payload) for f in frames)


def spaced(frames, cycles=2 * MAX_LENGTH + 8):
    """Bytes of ``frames`` and a gap after each frame, long enough for the frame before to be
    taken under random back-pressure (so that no frame meets a busy receiver)."""
    stream, gaps = b"", {}
    for frame in frames:
        stream += encode([frame])
        gaps[len(stream) - 1] = cycles
    return stream, gaps


def test_frame_rx_good_frames_with_junk_between():
    rng = random.Random(SEED)
    frames = random_frames(rng, 14)
    stream, gaps = b"", {}
    for frame in frames:
        junk = bytes(rng.choice([b for b in range(256) if b != SYNC])
                     for _ in range(rng.randrange(3)))
        stream += junk + encode([frame])
        gaps[len(stream) - 1] = 2 * MAX_LENGTH + 8
    got, errors, taken, starts = run_frame_rx(stream, gap_after=gaps)
    assert errors == []
    assert got == frames
    # Each frame's first item appears 3 cycles after its last byte was taken.
    assert starts == [taken[end] + 3 for end in sorted(gaps)]


@pytest.mark.parametrize("flip", [1, 3, 6, 8, 9])     # command, length low, payload, CRC
def test_frame_rx_bad_crc_drops_only_that_frame(flip):
    """A corrupted byte costs its frame only. A corrupted length above the limit is refused
    at once, and the rest is skipped until the gap before the next frame times out."""
    frames = [Frame(1, b"abcd"), Frame(2, b"efgh"), Frame(3, b"ijkl")]
    stream, gaps = spaced(frames, TIMEOUT + 10)
    broken = len(encode(frames[:1])) + flip              # a byte of the second frame
    stream = stream[:broken] + bytes([stream[broken] ^ 0x10]) + stream[broken + 1:]
    got, errors, taken, _ = run_frame_rx(stream, gap_after=gaps)
    assert got == [frames[0], frames[2]]
    if flip == 3:        # length 4 -> 20: above the limit, refused before the CRC
        assert [e for _, e in errors] == [Status.TOO_LONG]
    else:
        assert [e for _, e in errors] == [Status.BAD_CRC]
        end = len(encode(frames[:2])) - 1                # the broken frame's last byte
        assert errors[0][0] == taken[end] + 1


def test_frame_rx_refuses_too_long_and_skips_it():
    """The refused frame's payload holds a whole frame; skipped unread, it never comes out."""
    inner = encode_frame(9, b"no")
    long = Frame(4, inner + bytes(MAX_LENGTH + 1 - len(inner)))
    frames = [Frame(5, b"x"), long, Frame(6, b"y" * MAX_LENGTH)]
    stream, gaps = spaced(frames)
    got, errors, taken, _ = run_frame_rx(stream, gap_after=gaps)
    assert got == [frames[0], frames[2]]
    assert [e for _, e in errors] == [Status.TOO_LONG]
    length_low = len(encode(frames[:1])) + 3
    assert errors[0][0] == taken[length_low]


def test_frame_rx_lost_byte_times_out():
    frames = [Frame(7, b"hello"), Frame(8, b"world")]
    first = encode(frames[:1])
    lost = first[:6] + first[7:]                         # one payload byte lost on the line
    stream = lost + encode(frames[1:])
    got, errors, taken, _ = run_frame_rx(stream, gap_after={len(lost) - 1: TIMEOUT + 10})
    assert got == [frames[1]]
    assert errors == [(taken[len(lost) - 1] + TIMEOUT, Status.TIMEOUT)]


def test_frame_rx_busy_while_the_frame_before_waits():
    """``o`` stalls while two frames arrive: the first waits intact, the second is refused."""
    frames = [Frame(1, b"first"), Frame(2, b"second"), Frame(3, b"third")]
    stream = encode(frames)
    third = len(encode(frames[:2]))
    got, errors, _, _ = run_frame_rx(stream, gap_after={third - 1: 300}, stall_window=(0, 250),
                                     idle=0)
    assert got == [frames[0], frames[2]]
    assert [e for _, e in errors] == [Status.BUSY]


def test_frame_tx_bytes_decode_on_the_host():
    frames = random_frames(random.Random(SEED + 1), 12, max_length=40)
    total = len(encode(frames))
    got, _ = run_streams(FrameTx(), {"i": items_of(frames)}, {"o": None},
                         done=lambda r: len(r["o"]) == total, idle=0.3, stall=0.4, seed=SEED)
    assert decode_frames(bytes(got["o"])) == frames


class _Link(wiring.Component):
    """FrameTx -> UartTx -> line -> UartRx -> FrameRx: the whole link, one direction."""

    def __init__(self, divisor):
        self.parts = {"ftx": FrameTx(), "utx": UartTx(divisor=divisor),
                      "urx": UartRx(divisor=divisor),
                      "frx": FrameRx(max_length=MAX_LENGTH, timeout=40 * divisor)}
        super().__init__({"i": wiring.In(stream.Signature(frame_layout())),
                          "o": wiring.Out(stream.Signature(frame_layout()))})

    def elaborate(self, platform):
        m = Module()
        p = self.parts
        for name, part in p.items():
            m.submodules[name] = part
        wiring.connect(m, wiring.flipped(self.i), p["ftx"].i)
        wiring.connect(m, p["ftx"].o, p["utx"].i)
        m.d.comb += p["urx"].rx.eq(p["utx"].tx)
        wiring.connect(m, p["urx"].o, p["frx"].i)
        wiring.connect(m, p["frx"].o, wiring.flipped(self.o))
        return m


def test_link_frames_through_the_uart():
    frames = random_frames(random.Random(SEED + 2), 5, max_length=MAX_LENGTH)
    want = items_of(frames)
    got, _ = run_streams(_Link(4), {"i": want}, {"o": FIELDS},
                         done=lambda r: len(r["o"]) == len(want), idle=0.3, stall=0.3, seed=SEED)
    assert frames_of(got["o"]) == frames


# --------------------------------------------------------------------------------------------------
# Parameters

@pytest.mark.parametrize("build, error, message", [
    (lambda: UartTx(divisor=3), ValueError,
     "UART divisor (divisor, clock cycles per bit) must be between 4 and 16777216, not 3"),
    (lambda: UartRx(divisor=1 << 25), ValueError,
     "UART divisor (divisor, clock cycles per bit) must be between 4 and 16777216, not 33554432"),
    (lambda: UartRx(divisor=8.0), TypeError,
     "UART divisor (divisor, clock cycles per bit) must be an integer between 4 and 16777216, "
     "not 8.0"),
    (lambda: UartRx(divisor=8, count_bits=0), ValueError,
     "UART error counter width (count_bits) must be between 1 and 32, not 0"),
    (lambda: FrameRx(max_length=0, timeout=100), ValueError,
     "Frame payload limit (max_length) must be between 1 and 65535, not 0"),
    (lambda: FrameRx(max_length=65536, timeout=100), ValueError,
     "Frame payload limit (max_length) must be between 1 and 65535, not 65536"),
    (lambda: FrameRx(max_length=16, timeout=8), ValueError,
     "Frame byte timeout (timeout, clock cycles) must be between 16 and 4294967296, not 8"),
    (lambda: FrameRx(max_length="16", timeout=100), TypeError,
     "Frame payload limit (max_length) must be an integer between 1 and 65535, not '16'"),
    (lambda: uart_divisor(1e6, 230400), ValueError,
     r"Baud rate 230400 from a 1000000.0 Hz clock is off by 8.5% at divisor 4; at most 2% is "
     r"allowed"),
    (lambda: uart_divisor(1e6, 0), ValueError,
     "Clock frequency and baud rate must be positive, not 1000000.0 and 0"),
])
def test_parameters_refused_by_name(build, error, message):
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message


def test_uart_divisor_rounds_to_nearest():
    assert uart_divisor(100e6, 115200) == 868
    assert uart_divisor(12e6, 3e6) == 4
    assert uart_divisor(48e6, 1e6) == 48
