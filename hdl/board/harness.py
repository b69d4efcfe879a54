"""The block harness: a block's stimulus from block RAM at full rate, its outputs captured with
the cycle each came out in, driven by frames from the host (docs/board.md).

The harness takes any :class:`amaranth.lib.wiring.Component` whose ports are
:mod:`amaranth.lib.stream` interfaces (plain outputs, such as status flags, are left alone; plain
inputs are refused, the harness could only tie them off). Its sinks and sources are found by
:func:`hdl.ports.ports_of`, in signature order, and numbered from 0 in that order: the command
payloads name a stream by that number.

Commands (the command byte of a frame from the host), their payloads (numbers big-endian, sizes
in bytes) and their answers (the status, then the answer's payload):

``WRITE``: sink (1), offset (2), count (2), then ``count`` items of the sink's ``item_bytes``
    (:class:`Slot`). ``OK``, empty; ``STIMULUS_TOO_LARGE``, empty and nothing stored, when
    ``offset + count`` exceeds the stimulus memory.
``RUN``: per sink the items to play (2), per source the items expected (2), the cycle limit (4).
    Answered when the run ends, with the status record (:attr:`Harness.record_fields`) and how
    it ended: ``OK``, ``OUTPUT_OVERFLOW`` or ``RUN_LIMIT``. ``STIMULUS_TOO_LARGE``, empty and
    nothing run, when a count exceeds the stimulus memory.
``READ``: source (1), offset (2), count (2). ``OK`` and ``count`` captured items of the source's
    ``capture_bytes``: the payload's ``item_bytes``, then the 4-byte cycle it was taken in.
``STATUS``: empty. ``OK`` and the status record.

Any other command byte is answered ``UNKNOWN_COMMAND``; a payload of the wrong length for its
command, a stream number the block lacks, or a ``READ`` beyond what the last run captured or
longer than a frame holds (65535 bytes) is answered ``BAD_REQUEST``. A refused command changes
nothing. A frame that :class:`~hdl.board.frame.FrameRx` dropped (``rx_error``) is answered with
its reason and an empty payload.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, Const, Module, Mux, Shape, Signal, Value
from amaranth.hdl import ResetInserter
from amaranth.lib import enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..ports import ports_of
from ..validate import integer
from .frame import MAX_LENGTH, Status, frame_layout

__all__ = ["Command", "Slot", "Harness", "MAX_DEPTH", "STAMP_BITS", "COUNT_BITS"]

BYTE = 8
#: Width of a captured item's cycle stamp and of the run's cycle counter and limit.
STAMP_BITS = 32
#: Width of offsets, counts and the error counters in commands and answers.
COUNT_BITS = 16
#: Deepest stimulus or capture memory: a count of items, up to the depth, fits ``COUNT_BITS``.
MAX_DEPTH = 1 << (COUNT_BITS - 1)
#: Bytes of a ``WRITE`` or ``READ`` header: stream, offset, count.
ADDRESS_BYTES = 1 + 2 * (COUNT_BITS // BYTE)


class Command(enum.Enum, shape=BYTE):
    """Command bytes of the frames the host sends (the module's docstring has their payloads)."""
    WRITE = 0x01   #: store stimulus items of a sink
    RUN = 0x02     #: play the stimulus into the block and capture its outputs
    READ = 0x03    #: read captured items of a source back
    STATUS = 0x04  #: read the status record (:attr:`Harness.record_fields`)


def _bytes(bits: int) -> int:
    return max(1, -(-bits // BYTE))


@dataclass(frozen=True)
class Slot:
    """One stream of the block as the harness numbers it.

    ``width`` is its payload's width in bits; a stimulus item travels as ``item_bytes`` bytes
    (the payload, big-endian, zero-padded at the top; the padding is ignored), a captured item
    as ``capture_bytes``: the payload's ``item_bytes``, then the 4-byte cycle stamp.
    """

    name: str
    width: int
    always_ready: bool

    @property
    def item_bytes(self) -> int:
        return _bytes(self.width)

    @property
    def capture_bytes(self) -> int:
        return self.item_bytes + STAMP_BITS // BYTE


def _big_endian(fields) -> Value:
    """The bytes of ``fields`` ((value, bytes) pairs, in sending order) as one value whose most
    significant byte goes out first."""
    parts = []
    for value, size in reversed(fields):
        value = Value.cast(value)
        parts.append(Cat(value, Const(0, 8 * size - len(value))))
    return Cat(*parts)


def _field(header: Value, total: int, start: int, size: int) -> Value:
    """Bytes ``start`` to ``start + size`` of the ``total`` bytes last shifted into ``header``
    (the newest byte lowest)."""
    low = 8 * (total - start - size)
    return header[low:low + 8 * size]


class Harness(wiring.Component):
    """Drive a block from block RAM and capture its outputs, under commands in frames.

    Parameters
    ----------
    block : wiring.Component
        The block, at least one sink and one source stream, no plain input ports. The harness
        owns it (a submodule) and resets it for the one cycle before each run.
    stimulus_depth : int
        Items each sink's stimulus memory holds, 1 to 32768.
    capture_depth : int
        Items each source's capture memory holds, 1 to 32768.

    Members
    -------
    i : In(stream.Signature(frame_layout()))
        Verified command frames (from :class:`~hdl.board.frame.FrameRx`). Taken one at a time:
        the next frame waits until the last one's answer has been sent.
    o : Out(stream.Signature(frame_layout()))
        Exactly one answer frame per command frame and per ``rx_error``; its command byte is a
        :class:`~hdl.board.frame.Status` (to :class:`~hdl.board.frame.FrameTx`). Honours
        back-pressure.
    rx_error, rx_reason : In(1), In(Status)
        ``FrameRx``'s report of a dropped frame: answered (one report is held while the harness
        is busy) and counted.
    framing_errors, overruns : In(16)
        The UART receiver's counters, passed into the status record.
    running : Out(1)
        High during a run.

    Run: the block is reset in the cycle before cycle 0. Each sink plays items 0 to ``count - 1``
    of its memory, item ``k`` offered from cycle ``k + 1`` on if the block never stalls it (one
    item a cycle, block RAM read ahead). Each source's items are written to its capture memory
    with the cycle they were taken in; a full memory takes no more (``ready`` low, and an
    always-ready source's item is lost) and ends the run ``OUTPUT_OVERFLOW`` after that cycle,
    with what was captured kept. The run ends ``OK`` in the first cycle in which every sink has
    played its count and every source has given its expected count (the cycles reported is that
    cycle's number: the last capture's cycle + 1 when outputs came last), or ``RUN_LIMIT`` in
    cycle ``limit``. Outside a run sinks are idle and sources not taken.

    Answer latency, from the cycle the command's last item is taken to its answer's first item
    on ``o``: 1 cycle for ``WRITE``, for a command refused on its command byte or length and for
    a ``WRITE`` refused with items still to come (drained first); 2 for ``STATUS`` and for a
    ``READ``, ``RUN`` or item-less ``WRITE`` refused on its header; 4 for ``READ``; the run's
    cycles + 4 for ``RUN`` (+ 3 when it ends ``OUTPUT_OVERFLOW``). A dropped-frame report is
    answered from 2 cycles after its ``rx_error`` pulse, when the harness is idle.

    The status record (:attr:`record_fields`), the payload of ``STATUS`` and ``RUN`` answers:
    the last run's cycles (4 bytes), its end status (1), then 2-byte counts: per sink the items
    played, per source the items captured, frames dropped by ``FrameRx`` (``rx_error``), UART
    framing errors, UART overruns (the counters saturate).

    A bad parameter raises ``TypeError``/``ValueError`` naming it and the allowed values.
    """

    def __init__(self, block, *, stimulus_depth: int, capture_depth: int):
        if not isinstance(block, wiring.Component):
            raise TypeError(f"Harness block (block) must be a wiring.Component, not {block!r}")
        ports = ports_of(block)
        inputs = [p.name for p in ports if p.kind == "input"]
        if inputs:
            raise ValueError(f"Harness block (block) must have streams and plain outputs only, "
                             f"not the plain input(s) {', '.join(inputs)}")
        slots = {kind: [Slot(p.name, Shape.cast(p.value.payload.shape()).width,
                             p.value.signature.always_ready)
                        for p in ports if p.kind == kind] for kind in ("sink", "source")}
        if not slots["sink"] or not slots["source"]:
            raise ValueError(f"Harness block (block) must have at least one sink and one source "
                             f"stream, not {len(slots['sink'])} and {len(slots['source'])}")
        self.stimulus_depth = integer(stimulus_depth, "Harness stimulus memory depth "
                                      "(stimulus_depth, items)", 1, MAX_DEPTH)
        self.capture_depth = integer(capture_depth, "Harness capture memory depth "
                                     "(capture_depth, items)", 1, MAX_DEPTH)
        self.block = block
        self._streams = {p.name: p.value for p in ports}
        #: The block's sinks and sources, numbered as the commands number them.
        self.sinks: tuple[Slot, ...] = tuple(slots["sink"])
        self.sources: tuple[Slot, ...] = tuple(slots["source"])
        super().__init__({"i": In(stream.Signature(frame_layout())),
                          "o": Out(stream.Signature(frame_layout())),
                          "rx_error": In(1), "rx_reason": In(Status),
                          "framing_errors": In(COUNT_BITS), "overruns": In(COUNT_BITS),
                          "running": Out(1)})

    @property
    def record_fields(self) -> tuple[tuple[str, int], ...]:
        """The fields of the status record, (name, bytes) in sending order."""
        count = COUNT_BITS // BYTE
        return (("cycles", STAMP_BITS // BYTE), ("end", 1),
                *((f"played.{s.name}", count) for s in self.sinks),
                *((f"captured.{s.name}", count) for s in self.sources),
                ("rx_errors", count), ("framing_errors", count), ("overruns", count))

    @property
    def run_bytes(self) -> int:
        """Bytes of a ``RUN`` payload."""
        return (COUNT_BITS // BYTE) * (len(self.sinks) + len(self.sources)) + STAMP_BITS // BYTE

    def elaborate(self, platform):
        m = Module()
        st = _Registers(self)
        m.submodules.block = ResetInserter(st.block_reset)(self.block)
        st.stimulus = []
        for k, slot in enumerate(self.sinks):
            mem = Memory(shape=slot.width, depth=self.stimulus_depth, init=[])
            m.submodules[f"stimulus_{k}"] = mem
            st.stimulus.append((mem.write_port(), mem.read_port()))
        st.capture = []
        for k, slot in enumerate(self.sources):
            mem = Memory(shape=STAMP_BITS + slot.width, depth=self.capture_depth, init=[])
            m.submodules[f"capture_{k}"] = mem
            st.capture.append((mem.write_port(), mem.read_port()))
        self._play(m, st)
        self._capture(m, st)
        self._control(m, st)
        self._answer(m, st)
        # After the FSM: a report arriving as the one before is answered is kept.
        with m.If(self.rx_error):
            m.d.sync += [st.pending.eq(1), st.pending_reason.eq(self.rx_reason)]
            with m.If(st.rx_errors != (1 << COUNT_BITS) - 1):
                m.d.sync += st.rx_errors.eq(st.rx_errors + 1)
        return m

    # -- the run -----------------------------------------------------------------------------

    def _play(self, m, st):
        """Each sink plays its memory's first ``count`` items, reading one ahead."""
        for k, slot in enumerate(self.sinks):
            port, (_, read) = self._streams[slot.name], st.stimulus[k]
            p = st.players[k]
            offered = p["valid"] & st.active
            taken = offered & port.ready
            advance = st.active & (~p["valid"] | taken)
            more = p["index"] < p["count"]
            m.d.comb += [port.valid.eq(offered), port.payload.eq(read.data),
                         read.en.eq(advance), read.addr.eq(p["index"])]
            with m.If(advance):
                m.d.sync += [p["valid"].eq(more), p["index"].eq(p["index"] + more)]
            m.d.sync += p["played"].eq(p["played"] + taken)
            with m.If(st.start):
                m.d.sync += [p["valid"].eq(0), p["index"].eq(0), p["played"].eq(0)]

    def _capture(self, m, st):
        """Each source's items into its memory with their cycle, until the memory is full."""
        overflow = []
        for k, slot in enumerate(self.sources):
            port, (write, _) = self._streams[slot.name], st.capture[k]
            c = st.captures[k]
            full = c["captured"] == self.capture_depth
            if not slot.always_ready:
                m.d.comb += port.ready.eq(st.active & ~full)
            taken = st.active & port.valid & ~full
            overflow.append(st.active & port.valid & full)
            m.d.comb += [write.en.eq(taken), write.addr.eq(c["captured"]),
                         write.data.eq(Cat(st.cycles, Value.cast(port.payload)))]
            m.d.sync += c["captured"].eq(c["captured"] + taken)
            with m.If(st.start):
                m.d.sync += c["captured"].eq(0)
        m.d.comb += st.overflow.eq(Cat(*overflow).any())
        played = [p["played"] == p["count"] for p in st.players]
        enough = [c["captured"] >= c["expected"] for c in st.captures]
        m.d.comb += [st.finished.eq(Cat(*played, *enough).all()),
                     st.stop.eq(st.finished | (st.cycles == st.limit)),
                     st.active.eq(st.in_run & ~st.stop), self.running.eq(st.in_run)]

    # -- commands ------------------------------------------------------------------------------

    def _control(self, m, st):
        """Take a command frame, check it, carry it out, and hand the answer to the sender."""
        i, item = self.i, self.i.payload
        taken = i.valid & i.ready
        need = Mux(st.command == Command.RUN, self.run_bytes, ADDRESS_BYTES)
        with m.FSM(name="control") as fsm:
            with m.State("IDLE"):
                m.d.comb += i.ready.eq(~st.pending)
                with m.If(st.pending):
                    m.d.sync += st.pending.eq(0)
                    st.reply(m, st.pending_reason)
                with m.Elif(taken):
                    m.d.sync += [st.command.eq(item.command), st.length.eq(item.length),
                                 st.header.eq(item.data), st.got.eq(1)]
                    self._first(m, st, item)
            with m.State("HEADER"):
                m.d.comb += i.ready.eq(1)
                with m.If(taken):
                    m.d.sync += [st.header.eq(Cat(item.data, st.header)), st.got.eq(st.got + 1)]
                    with m.If(st.got == need - 1):
                        m.next = "CHECK"
            with m.State("CHECK"):
                with m.Switch(st.command):
                    with m.Case(Command.WRITE):
                        self._check_write(m, st)
                    with m.Case(Command.READ):
                        self._check_read(m, st)
                    with m.Case(Command.RUN):
                        self._check_run(m, st)
            with m.State("WRITE"):
                m.d.comb += i.ready.eq(1)
                self._store(m, st, taken)
                with m.If(taken & item.last):
                    st.reply(m, Status.OK)
            with m.State("DRAIN"):                      # the rest of a refused frame
                m.d.comb += i.ready.eq(1)
                with m.If(taken & item.last):
                    m.next = "SEND"
            with m.State("RUN"):
                m.d.comb += st.in_run.eq(1)
                with m.If(~st.stop):
                    m.d.sync += st.cycles.eq(st.cycles + 1)
                with m.If(st.stop | st.overflow):
                    end = Mux(st.overflow, Status.OUTPUT_OVERFLOW,
                              Mux(st.finished, Status.OK, Status.RUN_LIMIT))
                    m.d.sync += st.end.eq(end)
                    st.reply(m, end, record=True)
            with m.State("RECORD"):                     # the run's counts have settled
                m.d.sync += st.word.eq(st.record_word)
                m.next = "SEND"
            with m.State("FETCH"):
                m.next = "LOAD"
            with m.State("LOAD"):
                self._load(m, st)
            with m.State("SEND"):
                self._send(m, st)
        st.fsm = fsm

    def _first(self, m, st, item):
        """The first item of a frame: its command and length decide what follows."""
        lengths = {Command.WRITE: item.length >= ADDRESS_BYTES,
                   Command.READ: item.length == ADDRESS_BYTES,
                   Command.RUN: item.length == self.run_bytes,
                   Command.STATUS: item.length == 0}
        with m.Switch(item.command):
            for command, right in lengths.items():
                with m.Case(command):
                    with m.If(~right):
                        st.refuse(m, Status.BAD_REQUEST, item.last)
                    with m.Else():
                        if command == Command.STATUS:
                            st.reply(m, Status.OK, record=True)
                        else:
                            m.next = "HEADER"
            with m.Default():
                st.refuse(m, Status.UNKNOWN_COMMAND, item.last)

    def _check_write(self, m, st):
        index, offset, count = (_field(st.header, ADDRESS_BYTES, *f) for f in ((0, 1), (1, 2),
                                                                               (3, 2)))
        more = st.length != ADDRESS_BYTES
        with m.Switch(index):
            for k, slot in enumerate(self.sinks):
                with m.Case(k):
                    with m.If(st.length != ADDRESS_BYTES + count * slot.item_bytes):
                        st.refuse(m, Status.BAD_REQUEST, ~more)
                    with m.Elif(offset + count > self.stimulus_depth):
                        st.refuse(m, Status.STIMULUS_TOO_LARGE, ~more)
                    with m.Elif(more):
                        m.d.sync += [st.sink.eq(k), st.addr.eq(offset), st.got.eq(0)]
                        m.next = "WRITE"
                    with m.Else():
                        st.reply(m, Status.OK)
            with m.Default():
                st.refuse(m, Status.BAD_REQUEST, ~more)

    def _store(self, m, st, taken):
        """Assemble a ``WRITE``'s items from its bytes and store each one whole."""
        data = Cat(self.i.payload.data, st.item)
        with m.If(taken):
            m.d.sync += st.item.eq(data)
        for k, slot in enumerate(self.sinks):
            write, _ = st.stimulus[k]
            last_byte = st.got == slot.item_bytes - 1
            m.d.comb += [write.addr.eq(st.addr), write.data.eq(data[:slot.width]),
                         write.en.eq(taken & (st.sink == k) & last_byte)]
            with m.If(taken & (st.sink == k)):
                m.d.sync += st.got.eq(Mux(last_byte, 0, st.got + 1))
                with m.If(last_byte):
                    m.d.sync += st.addr.eq(st.addr + 1)

    def _check_read(self, m, st):
        index, offset, count = (_field(st.header, ADDRESS_BYTES, *f) for f in ((0, 1), (1, 2),
                                                                               (3, 2)))
        with m.Switch(index):
            for k, slot in enumerate(self.sources):
                with m.Case(k):
                    size = count * slot.capture_bytes
                    with m.If((offset + count > st.captures[k]["captured"])
                              | (size > MAX_LENGTH)):
                        st.reply(m, Status.BAD_REQUEST)
                    with m.Else():
                        st.reply(m, Status.OK)
                        m.d.sync += [st.answer_length.eq(size), st.source.eq(k),
                                     st.addr.eq(offset), st.items_left.eq(count)]
                        with m.If(count != 0):
                            m.next = "FETCH"
            with m.Default():
                st.reply(m, Status.BAD_REQUEST)

    def _check_run(self, m, st):
        counts = [_field(st.header, self.run_bytes, 2 * k, 2)
                  for k in range(len(self.sinks) + len(self.sources))]
        limit = _field(st.header, self.run_bytes, 2 * len(counts), STAMP_BITS // BYTE)
        with m.If(Cat(*(c > self.stimulus_depth for c in counts[:len(self.sinks)])).any()):
            st.reply(m, Status.STIMULUS_TOO_LARGE)
        with m.Else():
            m.d.comb += [st.start.eq(1), st.block_reset.eq(1)]
            m.d.sync += [st.cycles.eq(0), st.limit.eq(limit)]
            for p, count in zip(st.players, counts):
                m.d.sync += p["count"].eq(count)
            for c, count in zip(st.captures, counts[len(self.sinks):]):
                m.d.sync += c["expected"].eq(count)
            m.next = "RUN"

    # -- the answer ----------------------------------------------------------------------------

    def _answer(self, m, st):
        """The answer's items: one per byte of ``word``, refilled from a capture memory."""
        o = self.o
        top = st.word[-BYTE:]
        empty = st.answer_length == 0
        m.d.comb += [o.payload.command.eq(st.code), o.payload.length.eq(st.answer_length),
                     o.payload.data.eq(Mux(empty, 0, top)),
                     o.payload.first.eq(st.sent == 0),
                     o.payload.last.eq(empty | (st.sent == st.answer_length - 1))]
        values = {"cycles": st.cycles, "end": st.end, "rx_errors": st.rx_errors,
                  "framing_errors": self.framing_errors, "overruns": self.overruns,
                  **{f"played.{s.name}": p["played"] for s, p in zip(self.sinks, st.players)},
                  **{f"captured.{s.name}": c["captured"]
                     for s, c in zip(self.sources, st.captures)}}
        record = _big_endian([(values[name], size) for name, size in self.record_fields])
        m.d.comb += st.record_word.eq(Cat(Const(0, len(st.word) - len(record)), record))
        for _, read in st.capture:
            m.d.comb += [read.addr.eq(st.addr), read.en.eq(st.fsm.ongoing("FETCH"))]

    def _load(self, m, st):
        with m.Switch(st.source):
            for k, slot in enumerate(self.sources):
                with m.Case(k):
                    _, read = st.capture[k]
                    pad = len(st.word) - 8 * slot.capture_bytes
                    m.d.sync += [st.word.eq(Cat(Const(0, pad), read.data)),
                                 st.left.eq(slot.capture_bytes)]
        m.d.sync += [st.addr.eq(st.addr + 1), st.items_left.eq(st.items_left - 1)]
        m.next = "SEND"

    def _send(self, m, st):
        o = self.o
        m.d.comb += o.valid.eq(1)
        with m.If(o.ready):
            m.d.sync += [st.sent.eq(st.sent + 1), st.word.eq(st.word << BYTE),
                         st.left.eq(st.left - 1)]
            with m.If(o.payload.last):
                m.next = "IDLE"
            with m.Elif((st.left == 1) & (st.items_left != 0)):
                m.next = "FETCH"


class _Registers:
    """The harness's state, shared by the parts of :meth:`Harness.elaborate`."""

    def __init__(self, harness: Harness):
        record_bytes = sum(size for _, size in harness.record_fields)
        widest = max([record_bytes] + [s.capture_bytes for s in harness.sources])
        header_bytes = max(ADDRESS_BYTES, harness.run_bytes)
        item_bytes = max(s.item_bytes for s in harness.sinks)
        self.harness = harness
        self.command, self.length = Signal(BYTE), Signal(COUNT_BITS)
        self.header, self.got = Signal(8 * header_bytes), Signal(range(header_bytes + 1))
        self.item = Signal(8 * item_bytes)
        self.sink = Signal(range(len(harness.sinks)))
        self.source = Signal(range(len(harness.sources)))
        self.addr = Signal(COUNT_BITS)
        # The answer being sent: status, length, bytes sent, the bytes still to go at the top
        # of ``word`` (``left`` of them), and capture items still to be fetched into it.
        self.code, self.answer_length, self.sent = Signal(Status), Signal(COUNT_BITS), \
            Signal(COUNT_BITS)
        self.word, self.record_word = Signal(8 * widest), Signal(8 * widest)
        self.left, self.items_left = Signal(range(widest + 1)), Signal(COUNT_BITS)
        self.pending, self.pending_reason = Signal(), Signal(Status)
        self.rx_errors = Signal(COUNT_BITS)
        # The run.
        self.start, self.block_reset, self.in_run = Signal(), Signal(), Signal()
        self.active, self.stop, self.finished, self.overflow = Signal(), Signal(), Signal(), \
            Signal()
        self.cycles, self.limit, self.end = Signal(STAMP_BITS), Signal(STAMP_BITS), Signal(Status)
        depth = range(harness.stimulus_depth + 1)
        self.players = [{"valid": Signal(name=f"play{k}_valid"),
                         "index": Signal(depth, name=f"play{k}_index"),
                         "count": Signal(COUNT_BITS, name=f"play{k}_count"),
                         "played": Signal(depth, name=f"play{k}_played")}
                        for k in range(len(harness.sinks))]
        self.captures = [{"captured": Signal(range(harness.capture_depth + 1),
                                             name=f"capture{k}_count"),
                          "expected": Signal(COUNT_BITS, name=f"capture{k}_expected")}
                         for k in range(len(harness.sources))]

    def reply(self, m, code, *, record=False):
        """Answer with ``code``: an empty payload, or the status record."""
        record_bytes = sum(size for _, size in self.harness.record_fields)
        m.d.sync += [self.code.eq(code), self.sent.eq(0), self.items_left.eq(0),
                     self.word.eq(0), self.answer_length.eq(record_bytes if record else 0)]
        m.next = "RECORD" if record else "SEND"

    def refuse(self, m, code, last):
        """Answer ``code``, once the rest of the frame (if ``last`` is low) has been read."""
        self.reply(m, code)
        with m.If(~last):
            m.next = "DRAIN"
