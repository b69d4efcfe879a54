"""AXI4-Stream transport for the block testbenches: the same stimulus and golden models, through
cocotbext-axi's ``AxiStreamSource``, ``AxiStreamSink`` and ``AxiStreamMonitor``.

A design generated with ``--interface axis`` (:mod:`memwall.axis`) has ``s_axis_<s>_*`` and
``m_axis_<s>_*`` ports in place of ``<s>__valid/__ready/__payload``. :class:`memwall.axis`'s rules
are what this transport assumes and checks:

- ``tdata`` carries the payload in its low bits (byte lanes of 8 bits, lane 0 in ``tdata[7:0]``):
  a beat's bytes, little-endian, are the payload's integer, unpacked by the same codec.
- On a stream with ``tlast`` a frame is the items up to one whose ``last`` field is 1; the source
  drives ``tlast`` on that beat. Without ``tlast`` every item is a one-beat frame (cocotbext-axi
  ends a frame on every beat when the bus has no ``tlast``).
- On an output with ``tlast`` each beat's ``last`` bit in ``tdata`` must equal ``tlast`` (the
  wrapper's copy); the monitor checks it.

The classes have the interface of their :mod:`.streams` counterparts (``send``/``send_all``/
``wait_idle``; a monitor calls ``callback(item, cycle)`` per beat), so :class:`.tb.BlockTB`
picks one set or the other by the design's port names.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable

import cocotb
from cocotbext.axi import (AxiStreamBus, AxiStreamFrame, AxiStreamMonitor, AxiStreamSink,
                           AxiStreamSource)

from .streams import CycleCounter, PayloadCodec

__all__ = ["is_axis", "axis_prefix", "AxisDriver", "AxisSink", "AxisMonitor"]

#: The payload field a stream's ``tlast`` carries (memwall.axis.LAST_FIELD).
LAST = "last"


def axis_prefix(stream: str, sink: bool) -> str:
    """The AXI port prefix of a block's stream: ``s_axis_<s>`` (block input), ``m_axis_<s>``."""
    return f"{'s' if sink else 'm'}_axis_{stream}"


def is_axis(dut, inputs, outputs) -> bool:
    """Whether the design has AXI4-Stream names for every listed stream (``--interface axis``)."""
    names = [f"{axis_prefix(s, True)}_tvalid" for s in inputs]
    names += [f"{axis_prefix(s, False)}_tvalid" for s in outputs]
    return all(hasattr(dut, n) for n in names)


def _pauses(rng: random.Random, probability: float):
    """cocotbext-axi pause generator: each cycle paused with ``probability``."""
    while True:
        yield probability > 0 and rng.random() < probability


def _bus(dut, prefix: str) -> AxiStreamBus:
    """The stream's bus, its cocotbext-axi logger quietened: it logs its set-up and every frame
    at INFO, and the scoreboard says what matters."""
    logging.getLogger(f"cocotb.{dut._name}.{prefix}").setLevel(logging.WARNING)
    return AxiStreamBus.from_prefix(dut, prefix)


class AxisDriver:
    """Send items on a block's input ``s_axis_<stream>`` with ``AxiStreamSource``, with random
    idle cycles (its pause generator)."""

    def __init__(self, dut, stream: str, clk, rst, codec: PayloadCodec, rng: random.Random,
                 idle: float = 0.0):
        if not 0.0 <= idle < 1.0:
            raise ValueError(f"idle probability must be in [0, 1), not {idle}")
        bus = _bus(dut, axis_prefix(stream, True))
        self.source = AxiStreamSource(bus, clk, rst)
        self.source.set_pause_generator(_pauses(rng, idle))
        self.codec, self.name = codec, stream
        self.lanes = self.source.byte_lanes
        self.tlast = hasattr(bus, "tlast")
        self._frame: list[int] = []
        self.sent = 0

    def send(self, item: dict[str, int]):
        """Queue one item; on a ``tlast`` stream the frame goes out at the item with last=1."""
        self._frame.append(self.codec.pack(item))
        if not self.tlast or item.get(LAST, 0):
            data = b"".join(word.to_bytes(self.lanes, "little") for word in self._frame)
            self.source.send_nowait(AxiStreamFrame(data))
            self.sent += len(self._frame)
            self._frame = []

    def send_all(self, items):
        for item in items:
            self.send(item)

    async def wait_idle(self):
        """Wait until every frame has gone out; items after the last last=1 are an error."""
        if self._frame:
            raise AssertionError(f"s_axis_{self.name}: {len(self._frame)} item(s) queued after "
                                 f"the last item with last=1 form no frame")
        await self.source.wait()


class AxisSink:
    """Take a block's output ``m_axis_<stream>`` with ``AxiStreamSink``, with random
    back-pressure (its pause generator) when the stream has ``tready``."""

    def __init__(self, dut, stream: str, clk, rst, rng: random.Random, backpressure: float = 0.0):
        if not 0.0 <= backpressure < 1.0:
            raise ValueError(f"back-pressure probability must be in [0, 1), not {backpressure}")
        bus = _bus(dut, axis_prefix(stream, False))
        self.receiver = AxiStreamSink(bus, clk, rst)
        self.backpressure = backpressure if hasattr(bus, "tready") else 0.0
        if self.backpressure:
            self.receiver.set_pause_generator(_pauses(rng, backpressure))


class AxisMonitor:
    """Split the frames a receiver collects into beats and call ``callback(item, cycle)`` for each.

    ``receiver`` is an ``AxiStreamSink`` (an output) or ``None``, for an input: then an
    ``AxiStreamMonitor`` on ``s_axis_<stream>`` reports what the design received. On a ``tlast``
    stream an input beat's ``last`` field is what ``tlast`` drove (the wrapper ignores the bit in
    ``tdata``); an output beat's ``last`` bit must equal ``tlast``.
    """

    def __init__(self, dut, stream: str, sink: bool, clk, rst, codec: PayloadCodec,
                 counter: CycleCounter, callback: Callable[[dict[str, int], int], Any],
                 receiver=None):
        bus = _bus(dut, axis_prefix(stream, sink))
        self.receiver = receiver or AxiStreamMonitor(bus, clk, rst)
        self.name = axis_prefix(stream, sink)
        self.tlast, self.sink = hasattr(bus, "tlast"), sink
        self.codec, self.counter, self.callback = codec, counter, callback
        self.lanes = self.receiver.byte_lanes
        self.transfers = 0
        self.first_cycle: int | None = None
        self.last_cycle: int | None = None
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            frame = await self.receiver.recv()
            data = bytes(frame.tdata)
            beats = [int.from_bytes(data[i:i + self.lanes], "little")
                     for i in range(0, len(data), self.lanes)]
            cycle = self.counter.cycle
            for index, word in enumerate(beats):
                item = self.codec.unpack(word)
                final = int(index == len(beats) - 1)
                if self.tlast and self.sink:
                    item[LAST] = final
                elif self.tlast and item.get(LAST) != final:
                    raise AssertionError(
                        f"cycle {cycle}: {self.name} beat {index} of a {len(beats)}-beat frame: "
                        f"tlast {final} but the payload's last bit is {item.get(LAST)}")
                self.transfers += 1
                self.first_cycle = cycle if self.first_cycle is None else self.first_cycle
                self.last_cycle = cycle
                self.callback(item, cycle)
