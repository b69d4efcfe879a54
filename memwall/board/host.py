"""The host's program for the block harness (:mod:`hdl.board.harness`): load stimulus, run, read
the capture back.

:class:`HarnessHost` speaks frames over any byte transport given as two callables, ``send(bytes)``
and ``receive() -> bytes`` (what has arrived, possibly nothing), so that a serial port or a
simulated UART line can sit behind it. It sends one frame and waits for its one answer before it
sends the next, as the protocol requires. The payload codecs are plain functions, the golden
model of the harness's command set: the tests drive the RTL with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from hdl.board.frame import MAX_LENGTH, Status
from hdl.board.harness import COUNT_BITS, STAMP_BITS, Command, Harness

from .link import Frame, FrameReader, encode_frame

__all__ = ["BoardError", "Record", "Capture", "write_payload", "run_payload", "read_payload",
           "parse_record", "parse_capture", "HarnessHost"]

_COUNT = COUNT_BITS // 8
_STAMP = STAMP_BITS // 8
#: Bytes of a WRITE or READ header: stream number, offset, count.
_HEADER = 1 + 2 * _COUNT


class BoardError(RuntimeError):
    """The board answered a command with a status other than the one expected."""

    def __init__(self, command: Command, status: int):
        self.status = status
        name = Status(status).name if status in Status._value2member_map_ else hex(status)
        super().__init__(f"{command.name} answered {name}")


def _number(slots, name: str, what: str) -> int:
    names = [s.name for s in slots]
    if name not in names:
        raise ValueError(f"{what} must be one of {', '.join(names)}, not {name!r}")
    return names.index(name)


def write_payload(harness: Harness, sink: str, offset: int, items: Sequence[int]) -> bytes:
    """The payload of a ``WRITE`` of ``items`` (integers, the payload's bits) at ``offset``."""
    k = _number(harness.sinks, sink, "Sink")
    size, mask = harness.sinks[k].item_bytes, (1 << harness.sinks[k].width) - 1
    body = b"".join((int(item) & mask).to_bytes(size, "big") for item in items)
    return bytes([k]) + offset.to_bytes(_COUNT, "big") + len(items).to_bytes(_COUNT, "big") + body


def run_payload(harness: Harness, counts: Mapping[str, int], expect: Mapping[str, int],
                limit: int) -> bytes:
    """The payload of a ``RUN``: items to play per sink, items expected per source (0 for a
    stream not named), the cycle limit."""
    fields = [counts.get(s.name, 0) for s in harness.sinks] + \
        [expect.get(s.name, 0) for s in harness.sources]
    return b"".join(n.to_bytes(_COUNT, "big") for n in fields) + limit.to_bytes(_STAMP, "big")


def read_payload(harness: Harness, source: str, offset: int, count: int) -> bytes:
    """The payload of a ``READ`` of ``count`` captured items of ``source`` from ``offset``."""
    k = _number(harness.sources, source, "Source")
    return bytes([k]) + offset.to_bytes(_COUNT, "big") + count.to_bytes(_COUNT, "big")


@dataclass(frozen=True)
class Record:
    """The harness's record (the payload of ``STATUS`` and ``RUN`` answers), decoded."""

    cycles: int
    end: Status
    played: dict[str, int]
    captured: dict[str, int]
    rx_errors: int
    framing_errors: int
    overruns: int


def parse_record(harness: Harness, payload: bytes) -> Record:
    """Decode a record; raises ``ValueError`` if its length is not the harness's."""
    sizes = harness.record_fields
    if len(payload) != sum(size for _, size in sizes):
        raise ValueError(f"a record of this harness has {sum(s for _, s in sizes)} bytes, "
                         f"not {len(payload)}")
    values, at = {}, 0
    for name, size in sizes:
        values[name] = int.from_bytes(payload[at:at + size], "big")
        at += size
    return Record(values["cycles"], Status(values["end"]),
                  {s.name: values[f"played.{s.name}"] for s in harness.sinks},
                  {s.name: values[f"captured.{s.name}"] for s in harness.sources},
                  values["rx_errors"], values["framing_errors"], values["overruns"])


def parse_capture(harness: Harness, source: str, payload: bytes) -> tuple[list[int], list[int]]:
    """Decode a ``READ`` answer: the items (payload bits) and the cycles they were taken in."""
    slot = harness.sources[_number(harness.sources, source, "Source")]
    size = slot.capture_bytes
    if len(payload) % size:
        raise ValueError(f"a capture of {source} is a whole number of {size}-byte items, not "
                         f"{len(payload)} bytes")
    rows = [payload[at:at + size] for at in range(0, len(payload), size)]
    return ([int.from_bytes(r[:slot.item_bytes], "big") for r in rows],
            [int.from_bytes(r[slot.item_bytes:], "big") for r in rows])


@dataclass(frozen=True)
class Capture:
    """What a run gave: per source its items and the cycle each was taken in, and the record."""

    items: dict[str, list[int]]
    cycles: dict[str, list[int]]
    record: Record


class HarnessHost:
    """Drive a board's harness over a byte transport.

    Parameters
    ----------
    harness : Harness
        The harness the board was built with (its streams, memory depths and record layout;
        building it elaborates nothing).
    send, receive : callables
        ``send(data)`` writes bytes to the board; ``receive()`` returns the bytes that arrived
        since the last call, possibly none, after waiting as long as the transport waits.
    max_payload : int
        The board's ``FrameRx`` payload limit: a ``WRITE`` is split into frames of at most this.
    patience : int
        Empty ``receive()`` calls in a row after which an answer is given up for lost
        (``TimeoutError``).
    """

    def __init__(self, harness: Harness, send: Callable[[bytes], None],
                 receive: Callable[[], bytes], *, max_payload: int = MAX_LENGTH,
                 patience: int = 100):
        smallest = _HEADER + max(s.item_bytes for s in harness.sinks)
        if not smallest <= max_payload <= MAX_LENGTH:
            raise ValueError(f"Board payload limit (max_payload) must be between {smallest} and "
                             f"{MAX_LENGTH} for this harness, not {max_payload}")
        self.harness, self._send, self._receive = harness, send, receive
        self.max_payload, self.patience = max_payload, patience
        self.reader = FrameReader()
        self._waiting: list[Frame] = []

    def request(self, command: Command, payload: bytes = b"", *,
                expect: tuple[Status, ...] = (Status.OK,)) -> Frame:
        """Send one frame, return its answer; raise :class:`BoardError` unless its status is
        one of ``expect``."""
        self._send(encode_frame(command.value, payload))
        return self.answer(command, expect=expect)

    def answer(self, command: Command, *, expect: tuple[Status, ...] = (Status.OK,)) -> Frame:
        """Wait for the next answer (to ``command``, for the message); raise
        :class:`BoardError` unless its status is one of ``expect``."""
        empty = 0
        while not self._waiting:
            data = self._receive()
            empty = 0 if data else empty + 1
            if empty > self.patience:
                raise TimeoutError(f"no answer to {command.name} after {empty} empty reads")
            self._waiting += self.reader.feed(data)
        answer = self._waiting.pop(0)
        if answer.command not in [s.value for s in expect]:
            raise BoardError(command, answer.command)
        return answer

    def write(self, sink: str, items: Sequence[int], offset: int = 0) -> None:
        """Store ``items`` into ``sink``'s stimulus memory from ``offset``, in frames that fit."""
        k = _number(self.harness.sinks, sink, "Sink")
        per_frame = (self.max_payload - _HEADER) // self.harness.sinks[k].item_bytes
        for at in range(0, len(items), per_frame):
            self.request(Command.WRITE,
                         write_payload(self.harness, sink, offset + at, items[at:at + per_frame]))

    def run(self, counts: Mapping[str, int], expect: Mapping[str, int], limit: int) -> Record:
        """Run; return the record, whose ``end`` says how the run ended (``OK``,
        ``OUTPUT_OVERFLOW`` or ``RUN_LIMIT``)."""
        answer = self.request(Command.RUN, run_payload(self.harness, counts, expect, limit),
                              expect=(Status.OK, Status.OUTPUT_OVERFLOW, Status.RUN_LIMIT))
        return parse_record(self.harness, answer.payload)

    def read(self, source: str, offset: int, count: int) -> tuple[list[int], list[int]]:
        """Read ``count`` captured items of ``source`` from ``offset``, in frames that fit."""
        k = _number(self.harness.sources, source, "Source")
        per_frame = MAX_LENGTH // self.harness.sources[k].capture_bytes
        items, cycles = [], []
        for at in range(offset, offset + count, per_frame):
            n = min(per_frame, offset + count - at)
            answer = self.request(Command.READ, read_payload(self.harness, source, at, n))
            got = parse_capture(self.harness, source, answer.payload)
            items += got[0]
            cycles += got[1]
        return items, cycles

    def status(self) -> Record:
        return parse_record(self.harness, self.request(Command.STATUS).payload)

    def execute(self, stimulus: Mapping[str, Sequence[int]], expect: Mapping[str, int],
                limit: int) -> Capture:
        """Load ``stimulus`` (per sink, from offset 0), run it expecting ``expect`` items per
        source, and read back everything captured."""
        for sink, items in stimulus.items():
            self.write(sink, items)
        record = self.run({s: len(items) for s, items in stimulus.items()}, expect, limit)
        items, cycles = {}, {}
        for source, count in record.captured.items():
            items[source], cycles[source] = self.read(source, 0, count)
        return Capture(items, cycles, record)
