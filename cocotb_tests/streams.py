"""Stream testbench pieces shared by every memwall block: codec, driver, sink, monitor, scoreboard.

Timing discipline (the same under Icarus and Verilator): drivers and sinks write only in the
write phase right after a rising edge; monitors look at ``valid`` and ``ready`` in the read-only
phase of the same time step, when everything has settled, so a handshake seen there is the transfer
that the next rising edge performs. Cycle numbers count rising edges since the clock started.
"""

from __future__ import annotations

import collections
import random
from typing import Any, Callable, Iterable

import cocotb
import numpy as np
from cocotb.triggers import Event, ReadOnly, RisingEdge

__all__ = ["stream_port", "PayloadCodec", "StreamDriver", "StreamSink", "StreamMonitor",
           "Scoreboard", "CycleCounter", "to_signed", "to_unsigned"]


def to_signed(value, bits: int):
    """The two's-complement reading of the low ``bits`` bits of a field's value; elementwise, as
    ``int64``, for a NumPy array of them."""
    if isinstance(value, np.ndarray):
        value = value.astype(np.int64) & ((1 << bits) - 1)
        return np.where(value >> (bits - 1), value - (1 << bits), value)
    value = int(value) & ((1 << bits) - 1)
    return value - (1 << bits) if value >> (bits - 1) else value


def to_unsigned(value: int, bits: int) -> int:
    """The ``bits``-bit field that holds ``value`` (two's complement for a negative one)."""
    return int(value) & ((1 << bits) - 1)


class PayloadCodec:
    """Pack and unpack a stream payload between a dict of fields and the port's integer value.

    Parameters
    ----------
    port : dict
        A port description from :func:`memwall.registry.ports` (``name``, ``width`` and, for a
        structured payload, ``fields`` with ``name``, ``offset``, ``width``).
    """

    def __init__(self, port: dict):
        self.name = port["name"]
        self.width = port["width"]
        self.fields = port.get("fields") or [{"name": "value", "offset": 0, "width": self.width}]

    def pack(self, values: dict[str, int]) -> int:
        unknown = set(values) - {f["name"] for f in self.fields}
        if unknown:
            raise KeyError(f"{self.name}: no field(s) {sorted(unknown)}; fields are "
                           f"{[f['name'] for f in self.fields]}")
        word = 0
        for f in self.fields:
            value = int(values.get(f["name"], 0))
            if not 0 <= value < 1 << f["width"]:
                raise ValueError(f"{self.name}.{f['name']}={value} does not fit {f['width']} bits")
            word |= value << f["offset"]
        return word

    def unpack(self, word: int) -> dict[str, int]:
        return {f["name"]: (word >> f["offset"]) & ((1 << f["width"]) - 1) for f in self.fields}


#: A stream member's AXI4-Stream signal, on a design generated with ``--interface axis``
#: (memwall/axis.py): ``s_axis_<s>_tdata`` (a block input) or ``m_axis_<s>_tdata`` for ``payload``.
_AXIS_MEMBERS = {"valid": "tvalid", "ready": "tready", "payload": "tdata", "last": "tlast"}


def stream_port(dut, prefix: str, member: str, *, optional: bool = False):
    """The handle of a stream's ``valid``, ``ready``, ``payload`` (or, AXI only, ``last``):
    ``<s>__<member>`` on a native design, its AXI4-Stream name on a wrapped one (``payload`` is
    ``tdata``, whose low bits are the payload). ``optional``: ``None`` when there is none.
    The AXI names are looked up first: a wrapped design's top level also holds the block's
    native names, as internal wires."""
    names = [f"{side}_axis_{prefix}_{_AXIS_MEMBERS[member]}" for side in ("s", "m")]
    names += [f"{prefix}__{member}"] if member != "last" else []
    for name in names:
        if hasattr(dut, name):
            return getattr(dut, name)
    if optional:
        return None
    raise AttributeError(f"the design has no {' or '.join(names)}")


def _port(dut, prefix: str, member: str):
    return stream_port(dut, prefix, member)


def _ready(dut, prefix: str):
    """The stream's ``ready`` handle, or ``None`` for an always-ready stream (a pipelined unit's
    ``valid``-only interface, ``stream.Signature(..., always_ready=True)``)."""
    return stream_port(dut, prefix, "ready", optional=True)


class CycleCounter:
    """Count rising edges of ``clk`` so every message can name its cycle."""

    def __init__(self, clk):
        self.clk = clk
        self.cycle = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1


class StreamDriver:
    """Drive items into a valid/ready input stream, with random idle cycles between them.

    Items go in the order queued. A gate (:meth:`gate`) holds the items queued after it until its
    predicate is true. A subclass that needs more (credits, a callback when an item is taken)
    queues a ``meta`` value with each item (:meth:`_enqueue`) and overrides :meth:`_turn` and
    :meth:`_taken`; the loop is this one.

    Parameters
    ----------
    dut, prefix : the design and the stream's port prefix (``i`` drives ``i__valid`` ...).
    clk : clock handle.
    codec : PayloadCodec
    rng : random.Random
    idle : float
        Probability of inserting an idle cycle before each item (repeated: the number of idle
        cycles is geometric).
    taken_when_driven : bool
        The design takes every item in the cycle it is driven (its contract ties ``ready`` high):
        the driver moves on at the next edge without looking at ``ready``.
    """

    def __init__(self, dut, prefix: str, clk, codec: PayloadCodec, rng: random.Random,
                 idle: float = 0.0, *, taken_when_driven: bool = False):
        if not 0.0 <= idle < 1.0:
            raise ValueError(f"idle probability must be in [0, 1), not {idle}")
        self.valid = _port(dut, prefix, "valid")
        self.ready = _ready(dut, prefix)
        self.taken_when_driven = taken_when_driven
        self.payload = _port(dut, prefix, "payload")
        self.clk, self.codec, self.rng, self.idle = clk, codec, rng, idle
        self._queue: collections.deque = collections.deque()
        self._wake = Event()
        self._idle_event = Event()
        self._idle_event.set()
        self.valid.value = 0
        self.sent = self.queued = 0
        cocotb.start_soon(self._run())

    def send(self, item: dict[str, int]) -> int:
        """Queue one item (a dict of payload fields); return its sequence number (the items
        queued before it)."""
        return self._enqueue(self.codec.pack(item), None)

    def send_all(self, items: Iterable[dict[str, int]]):
        for item in items:
            self.send(item)

    def gate(self, predicate: Callable[[], bool]):
        """Hold the items queued after this until ``predicate()`` is true (checked once a
        cycle, ``valid`` low meanwhile)."""
        self._queue.append((None, predicate))
        self._kick()

    async def wait_idle(self):
        """Wait until every queued item has been accepted by the design."""
        await self._idle_event.wait()

    async def wait_sent(self, count: int):
        """Wait until ``count`` items have been accepted."""
        while self.sent < count:
            await RisingEdge(self.clk)

    def _enqueue(self, word: int, meta) -> int:
        self._queue.append((word, meta))
        self.queued += 1
        self._kick()
        return self.queued - 1

    def _kick(self):
        self._idle_event.clear()
        self._wake.set()

    async def _turn(self, meta):
        """Wait, after the idle cycles, until the item may be driven (in the write phase)."""

    def _taken(self, meta):
        """The item was accepted: called on the rising edge that took it."""

    async def _run(self):
        while True:
            if not self._queue:
                self._idle_event.set()
                self._wake.clear()
                await self._wake.wait()
                await RisingEdge(self.clk)      # start driving on a clean cycle boundary
            word, meta = self._queue.popleft()
            if word is None:                    # a gate: `meta` is its predicate
                while not meta():
                    self.valid.value = 0
                    await RisingEdge(self.clk)
                continue
            while self.idle and self.rng.random() < self.idle:
                self.valid.value = 0
                await RisingEdge(self.clk)
            await self._turn(meta)
            self.payload.value = word
            self.valid.value = 1
            if self.taken_when_driven:
                await RisingEdge(self.clk)      # the design takes it on this edge
            else:
                while True:
                    await ReadOnly()
                    accepted = self.ready is None or bool(self.ready.value)
                    await RisingEdge(self.clk)
                    if accepted:
                        break
            self.sent += 1
            self.valid.value = 0
            self._taken(meta)


class StreamSink:
    """Accept items from a valid/ready output stream, with random back-pressure.

    Parameters
    ----------
    backpressure : float
        Probability that ``ready`` is low in a given cycle.
    """

    def __init__(self, dut, prefix: str, clk, rng: random.Random, backpressure: float = 0.0):
        if not 0.0 <= backpressure < 1.0:
            raise ValueError(f"back-pressure probability must be in [0, 1), not {backpressure}")
        self.ready = _ready(dut, prefix)
        self.clk, self.rng, self.backpressure = clk, rng, backpressure
        if self.ready is None:
            return                      # an always-ready stream cannot be back-pressured
        self.ready.value = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            self.ready.value = int(self.rng.random() >= self.backpressure)
            await RisingEdge(self.clk)


class StreamMonitor:
    """Watch a stream and call ``callback(item, cycle)`` for every transfer.

    Cycles in which ``reset`` is high are ignored; outside reset an unknown (X/Z) ``valid`` or
    ``ready`` fails the test, naming the signal and cycle. Also counts what the stream did each cycle, for utilization figures: ``transfers``,
    ``stalls`` (valid without ready) and ``bubbles`` (ready without valid).
    """

    def __init__(self, dut, prefix: str, clk, codec: PayloadCodec, counter: CycleCounter,
                 callback: Callable[[dict[str, int], int], Any], reset=None):
        self.reset = reset
        self.valid = _port(dut, prefix, "valid")
        self.ready = _ready(dut, prefix)
        self.payload = _port(dut, prefix, "payload")
        self.clk, self.codec, self.counter, self.callback = clk, codec, counter, callback
        self.transfers = self.stalls = self.bubbles = 0
        self.first_cycle: int | None = None
        self.last_cycle: int | None = None
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            await ReadOnly()
            if self.reset is not None and str(self.reset.value) != "0":
                continue
            valid = self._bit(self.valid)
            ready = True if self.ready is None else self._bit(self.ready)
            if valid and ready:
                self.transfers += 1
                cycle = self.counter.cycle
                self.first_cycle = cycle if self.first_cycle is None else self.first_cycle
                self.last_cycle = cycle
                self.callback(self.codec.unpack(int(self.payload.value)), cycle)
            elif valid:
                self.stalls += 1
            elif ready:
                self.bubbles += 1

    def _bit(self, handle) -> bool:
        value = handle.value
        if not value.is_resolvable:
            raise AssertionError(f"cycle {self.counter.cycle}: {handle._name} is {value} "
                                 f"outside reset")
        return bool(value)


class Scoreboard:
    """Compare a design's outputs with expected items, in order.

    Expected items come from the model fed by the input monitor; got items from the output
    monitor. A mismatch raises immediately with the cycle, the signal, what was expected and what
    came out. With ``early=True`` an output that comes before its expectation (a frame-level
    input monitor reports an input only at its frame's last beat) is held and compared, in order,
    when the expectation arrives; :meth:`check_drained` fails on any still held.
    """

    def __init__(self, name: str, log=None, *, early: bool = False):
        self.name = name
        self.log = log
        self.early = early
        self.expected: collections.deque = collections.deque()
        self.held: collections.deque = collections.deque()
        self.matched = 0

    def expect(self, item: dict[str, int]):
        self.expected.append(item)
        while self.held and self.expected:
            self.got(*self.held.popleft())

    def got(self, item: dict[str, int], cycle: int):
        if not self.expected and self.early:
            self.held.append((item, cycle))
            return
        if not self.expected:
            raise AssertionError(f"cycle {cycle}: {self.name} produced {item} but nothing was "
                                 f"expected (after {self.matched} matching items)")
        want = self.expected.popleft()
        wrong = [k for k in want if item.get(k) != want[k]]
        if wrong:
            detail = ", ".join(f"{k} expected {want[k]:#x} got {item.get(k, 0):#x}"
                               for k in wrong)
            raise AssertionError(f"cycle {cycle}: {self.name} item {self.matched}: {detail} "
                                 f"(expected {want}, got {item})")
        self.matched += 1

    def check_drained(self):
        """Assert nothing expected is still outstanding, and no output came unexpected."""
        if self.held:
            item, cycle = self.held[0]
            raise AssertionError(f"cycle {cycle}: {self.name} produced {item} but nothing was "
                                 f"expected (after {self.matched} matching items)")
        if self.expected:
            raise AssertionError(f"{self.name}: {len(self.expected)} expected item(s) never came "
                                 f"out, the first {self.expected[0]} "
                                 f"(after {self.matched} matching items)")
