"""Stream testbench pieces shared by every memwall block: codec, driver, sink, monitor, scoreboard.

Timing discipline (the same under Icarus and Verilator): drivers and sinks write only in the
write phase right after a rising edge; monitors look at ``valid`` and ``ready`` in the read-only
phase of the same time step, when everything has settled, so a handshake seen there is the transfer
that the next rising edge performs. Cycle numbers count rising edges since the clock started.

One :class:`ClockService` per clock runs all of them: a coroutine that awaits the rising edge,
calls every member's write step, awaits the read-only phase and calls every member's read step.
A coroutine per driver, sink and monitor, each awaiting its own triggers, cost about a dozen
task resumes in Python per clock cycle; the service costs two (and the edge counter one), with
the same cycle behaviour.
"""

from __future__ import annotations

import collections
import random
from typing import Any, Callable, Iterable

import cocotb
import numpy as np
from cocotb.simtime import get_sim_time
from cocotb.triggers import Event, ReadOnly, RisingEdge

from memwall.registry import PayloadCodec  # re-exported: the testbenches import it from here

__all__ = ["stream_port", "PayloadCodec", "StreamDriver", "StreamSink", "StreamMonitor",
           "Scoreboard", "ClockService", "CycleCounter", "to_signed", "to_unsigned"]


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


class ClockService:
    """The per-cycle work of every testbench member on one clock, in one coroutine.

    After each rising edge the service calls the write steps (:meth:`on_edge`) in the order they
    joined, then, in the read-only phase of the same time step, the read steps
    (:meth:`on_read`). A step joins from the next rising edge on, as a coroutine started then
    would have first awaited it. The edges are counted by a coroutine of their own, started
    first: it resumes before any other coroutine awaiting the edge, so every one of them reads
    the new :attr:`cycle`.

    Use :meth:`of` to get a clock's service: it is made on first use in a test, and again in
    the next test (cocotb ends a test's coroutines with it).

    Parameters
    ----------
    clk : cocotb handle of the clock.
    """

    _services: dict = {}

    def __init__(self, clk):
        self.clk = clk
        self.cycle = 0
        self._edge_steps: list[Callable[[], Any]] = []
        self._read_steps: list[Callable[[], Any]] = []
        self._joining: list[tuple[int, list, Callable[[], Any]]] = []
        self._resets: dict[int, bool] = {}
        self._edge_time: int | None = None
        self._counter = cocotb.start_soon(self._count())
        cocotb.start_soon(self._run())

    @classmethod
    def of(cls, clk) -> "ClockService":
        """The service of ``clk`` in the running test, started if there is none yet."""
        service = cls._services.get(id(clk))
        if service is None or service.clk is not clk or service._counter.done():
            service = cls._services[id(clk)] = cls(clk)
        return service

    def on_edge(self, step: Callable[[], Any]):
        """Call ``step()`` in the write phase after every rising edge, from the next one on."""
        self._joining.append((get_sim_time(), self._edge_steps, step))

    def on_read(self, step: Callable[[], Any]):
        """Call ``step()`` in the read-only phase after every rising edge, from the next one
        on."""
        self._joining.append((get_sim_time(), self._read_steps, step))

    @property
    def edge_time(self) -> int:
        """The simulation time (in steps) of the last rising edge."""
        if self._edge_time is None:
            self._edge_time = get_sim_time()
        return self._edge_time

    def in_reset(self, reset) -> bool:
        """Whether ``reset`` is anything but 0 in this read-only phase (read once a cycle for
        all the members that ask)."""
        key = id(reset)
        if key not in self._resets:
            self._resets[key] = str(reset.value) != "0"
        return self._resets[key]

    async def _count(self):
        """Count the edges, first of the coroutines that await them."""
        edge = RisingEdge(self.clk)
        while True:
            await edge
            self.cycle += 1

    async def _run(self):
        """Each cycle: the write steps after the edge, the read steps in read-only."""
        edge, read_only = RisingEdge(self.clk), ReadOnly()
        while True:
            await edge
            self._edge_time = None
            if self._joining:
                self._join()
            for step in self._edge_steps:
                step()
            await read_only
            self._resets.clear()
            for step in self._read_steps:
                step()

    def _join(self):
        """Add the steps that joined before this edge (one that joined at this edge's time, by a
        coroutine resumed before the service, starts at the next edge)."""
        now = self.edge_time
        waiting = []
        for joined, steps, step in self._joining:
            if joined < now:
                steps.append(step)
            else:
                waiting.append((joined, steps, step))
        self._joining = waiting


class CycleCounter:
    """Count rising edges of ``clk`` so every message can name its cycle: the edges since this
    counter was made (its clock's :class:`ClockService` counts them)."""

    def __init__(self, clk):
        self.clk = clk
        self._service = ClockService.of(clk)
        self._start = self._service.cycle

    @property
    def cycle(self) -> int:
        """The rising edges since this counter was made."""
        return self._service.cycle - self._start


#: What a driver's loop waits for: the next write phase, with an item queued (idle), the next
#: write phase, or the read-only phase of this step.
_IDLE, _EDGE, _READ = "idle", "edge", "read"


class StreamDriver:
    """Drive items into a valid/ready input stream, with random idle cycles between them.

    Items go in the order queued. A gate (:meth:`gate`) holds the items queued after it until its
    predicate is true. A subclass that needs more (credits, a callback when an item is taken)
    queues a ``meta`` value with each item (:meth:`_enqueue`) and overrides :meth:`_turn` and
    :meth:`_taken`; the loop is this one (:meth:`_loop`, stepped by the clock's
    :class:`ClockService`).

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
        self._idle_event = Event()
        self._idle_event.set()
        self._kicked_at = -1            # when an item was queued to the idle driver
        self.valid.value = self._valid = 0
        self.sent = self.queued = 0
        self._service = ClockService.of(clk)
        self._steps = self._loop()
        self._waiting = next(self._steps)
        self._service.on_edge(self._on_edge)
        self._service.on_read(self._on_read)

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
        if self._idle_event.is_set():   # the idle driver starts at the first edge after this
            self._kicked_at = get_sim_time()
            self._idle_event.clear()

    def _turn(self, meta) -> bool:
        """Whether the item may be driven in this cycle, after its idle cycles: asked in the
        write phase, once a cycle (``valid`` low meanwhile) until it says yes."""
        return True

    def _taken(self, meta):
        """The item was accepted: called on the rising edge that took it."""

    def _drive_valid(self, value: int):
        """Set ``valid``, writing only a change."""
        if value != self._valid:        # an unchanged value needs no write
            self.valid.value = self._valid = value

    def _on_edge(self):
        """Write step: run the loop on if it waits for this phase (an idle driver, for an item
        queued before this edge)."""
        if self._waiting is _IDLE and not (self._queue
                                           and self._kicked_at < self._service.edge_time):
            return
        if self._waiting is not _READ:
            self._waiting = next(self._steps)

    def _on_read(self):
        """Read step: run the loop on if it waits to see ``ready``."""
        if self._waiting is _READ:
            self._waiting = next(self._steps)

    def _loop(self):
        """The driver, one item after another: a generator that yields what it waits for
        (``_IDLE``, ``_EDGE``, ``_READ``); each resumption runs in that phase."""
        while True:
            if not self._queue:
                self._idle_event.set()
                yield _IDLE                     # start driving on a clean cycle boundary
            word, meta = self._queue.popleft()
            if word is None:                    # a gate: `meta` is its predicate
                while not meta():
                    self._drive_valid(0)
                    yield _EDGE
                continue
            while self.idle and self.rng.random() < self.idle:
                self._drive_valid(0)
                yield _EDGE
            while not self._turn(meta):
                self._drive_valid(0)
                yield _EDGE
            self.payload.value = word
            self._drive_valid(1)
            if self.taken_when_driven:
                yield _EDGE                     # the design takes it on this edge
            else:
                while True:
                    yield _READ
                    accepted = self.ready is None or bool(self.ready.value)
                    yield _EDGE
                    if accepted:
                        break
            self.sent += 1
            self._drive_valid(0)
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
        self._ready = None
        self._on_edge()                 # from the start, as after every edge
        ClockService.of(clk).on_edge(self._on_edge)

    def _on_edge(self):
        """Write step: ``ready`` for this cycle."""
        ready = int(self.rng.random() >= self.backpressure)
        if ready != self._ready:        # an unchanged value needs no write
            self.ready.value = self._ready = ready


class StreamMonitor:
    """Watch a stream and call ``callback(item, cycle)`` for every transfer.

    Cycles in which ``reset`` is high are ignored; outside reset an unknown (X/Z) ``valid`` or
    ``ready`` fails the test, naming the signal and cycle. Also counts what the stream did each
    cycle, for utilization figures: ``transfers``, ``stalls`` (valid without ready) and
    ``bubbles`` (ready without valid).
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
        self._service = ClockService.of(clk)
        self._service.on_read(self._on_read)

    def _on_read(self):
        """Read step: the transfer, stall or bubble of this cycle."""
        if self.reset is not None and self._service.in_reset(self.reset):
            return
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
