"""The board link's frames: format, status codes, a receiver and a transmitter.

Every message between the host and the board, either way, is one frame::

    +------+---------+-------------+-------------------+-------------+
    | SYNC | command | length      | payload           | CRC         |
    | 0xA5 | 1 byte  | 2 bytes, BE | ``length`` bytes  | 2 bytes, BE |
    +------+---------+-------------+-------------------+-------------+

``SYNC`` marks a frame's start for a receiver hunting for one. ``length`` (big-endian, 0 to 65535)
counts the payload bytes only. The CRC is CRC-16/CCITT-FALSE (polynomial 0x1021, initial value
0xFFFF, not reflected, no final XOR; check value 0x29B1 for ``b"123456789"``) over command, length
and payload, sent most significant byte first; run over command, length, payload *and* the CRC it
leaves 0, which is how the receiver checks it. In a frame the board sends, the command byte is a
:class:`Status` code answering the host's last frame.

A receiver hunts for ``SYNC`` and drops any other byte it meets between frames, so after a lost or
corrupted byte it finds the next frame by itself once the broken one has ended (bad CRC) or timed
out. The host sends a frame and waits for the board's answer before it sends the next one.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.crc import catalog
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..validate import integer

__all__ = ["SYNC", "LENGTH_BITS", "MAX_LENGTH", "CRC", "Status", "frame_layout", "FrameRx",
           "FrameTx"]

#: First byte of every frame.
SYNC = 0xA5
#: Width of the length field; a payload has at most ``MAX_LENGTH`` bytes.
LENGTH_BITS = 16
MAX_LENGTH = (1 << LENGTH_BITS) - 1
#: The CRC algorithm (Amaranth's catalogue, byte-wide processor in the RTL).
CRC = catalog.CRC16_CCITT_FALSE
BYTE = 8


class Status(enum.Enum, shape=BYTE):
    """Status codes, the command byte of the frames the board sends.

    The receiver (:class:`FrameRx`) reports ``BAD_CRC`` to ``BUSY``; the block harness
    (:mod:`hdl.board.harness`) answers with the rest.
    """
    OK = 0x00                  #: the frame was carried out; the payload holds its answer
    BAD_CRC = 0x01             #: CRC mismatch: the frame was dropped
    TOO_LONG = 0x02            #: length above the receiver's ``max_length``: dropped unread
    TIMEOUT = 0x03             #: the frame stopped before its end (a byte was lost): dropped
    BUSY = 0x04                #: a good frame came while the one before was still being taken
    UNKNOWN_COMMAND = 0x05     #: (harness) a command byte the board does not know
    STIMULUS_TOO_LARGE = 0x06  #: (harness) stimulus beyond the stimulus memory: nothing stored
    OUTPUT_OVERFLOW = 0x07     #: (harness) more outputs than the capture memory holds
    BAD_REQUEST = 0x08         #: (harness) a payload of the wrong length or out of range
    RUN_LIMIT = 0x09           #: (harness) the run reached its cycle limit unfinished


def frame_layout() -> data.StructLayout:
    """One item of a frame stream: a payload byte with its frame's command and length.

    A frame of ``length`` bytes is ``length`` items, ``first`` on the first and ``last`` on the
    last; a frame with no payload is one item with ``first`` and ``last`` set and ``data`` 0.
    ``command`` and ``length`` are the same on every item of a frame.
    """
    return data.StructLayout({"command": BYTE, "length": LENGTH_BITS, "data": BYTE,
                              "first": 1, "last": 1})


class FrameRx(wiring.Component):
    """Take the bytes of a serial link and pass on the frames whose CRC holds.

    A frame's payload is written into a buffer as it arrives and passed on only once its CRC
    has been checked: nothing of a frame with a bad CRC, a length too large or a lost byte
    reaches ``o``. The buffer holds two frames (ping-pong), so that one frame can be received
    while the one before is still being taken from ``o``.

    Parameters
    ----------
    max_length : int
        Largest payload accepted, 1 to 65535 bytes; the buffer is ``2 * max_length`` bytes.
    timeout : int
        Clock cycles, 16 to 2**32, that a frame may wait for its next byte before it is dropped
        as broken. Choose a few character times (``10 * divisor`` each) and less than the time
        the host waits for an answer before it sends again.

    Members
    -------
    i : In(stream.Signature(8))
        The link's bytes (from :class:`~hdl.board.uart.UartRx`). ``i.ready`` is high except in
        the one cycle after a frame's last byte, so a UART's byte is never kept waiting long.
    o : Out(stream.Signature(frame_layout()))
        The good frames, in order, one item per payload byte (:func:`frame_layout`); honours
        back-pressure. The first item comes 3 cycles after the frame's last byte.
    error : Out(1)
        A one-cycle pulse for each frame dropped.
    reason : Out(Status)
        Why, valid with ``error`` (a plain pulse, not a stream: the receiver cannot wait):
        ``BAD_CRC`` (the cycle after the last byte), ``TOO_LONG`` (with the second length byte;
        the rest of the frame, ``length + 2`` bytes, is then read and dropped, or fewer if
        ``timeout`` cycles pass without a byte first, as when the length itself was corrupted),
        ``TIMEOUT`` (``timeout`` cycles after the last byte of an unfinished frame) or ``BUSY``
        (the cycle after the last byte of a good frame that came while the frame before it has
        not been taken from ``o`` entirely).

    A bad parameter raises ``TypeError``/``ValueError`` naming it and the allowed range.
    """

    def __init__(self, *, max_length: int, timeout: int):
        self.max_length = integer(max_length, "Frame payload limit (max_length)", 1, MAX_LENGTH)
        self.timeout = integer(timeout, "Frame byte timeout (timeout, clock cycles)", 16, 1 << 32)
        super().__init__({"i": In(stream.Signature(BYTE)),
                          "o": Out(stream.Signature(frame_layout())),
                          "error": Out(1), "reason": Out(Status)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.buffer = buffer = Memory(shape=BYTE, depth=2 * self.max_length, init=[])
        m.submodules.crc = crc = CRC(data_width=BYTE).create()
        # The frame handed to the reader: its command, length and buffer half; ``full`` while
        # the reader has items of it left to pass on; ``start`` in the cycle it is handed over.
        handed = {"command": Signal(BYTE), "length": Signal(LENGTH_BITS), "half": Signal(),
                 "full": Signal(), "start": Signal()}
        self._parse(m, buffer.write_port(), crc, handed)
        self._read(m, buffer.read_port(), handed)
        return m

    def _report(self, m, status):
        m.d.comb += [self.error.eq(1), self.reason.eq(status)]

    def _parse(self, m, write, crc, handed):
        """Hunt for frames, store their payloads, check their CRCs, hand good ones over."""
        byte, got = self.i.payload, self.i.valid & self.i.ready
        command = Signal(BYTE)
        length = Signal(LENGTH_BITS)
        index = Signal(LENGTH_BITS)
        half = Signal()                                  # the buffer half being written
        skip = Signal(LENGTH_BITS + 1)                   # bytes of a refused frame left - 1
        quiet = Signal(range(self.timeout))              # cycles since the last byte
        expired = quiet == self.timeout - 1
        new_length = Cat(byte, length[BYTE:])
        m.d.sync += quiet.eq(Mux(got | expired, 0, quiet + 1))
        # Every byte is taken at once, but in the cycle after a frame's last one, the check.
        m.d.comb += [self.i.ready.eq(1), crc.data.eq(byte), write.data.eq(byte),
                     write.addr.eq(index + Mux(half, self.max_length, 0))]

        def take(next_state, report=True):
            """Take a byte of the frame into the CRC; drop the frame if none comes in time
            (reporting it unless it was reported already)."""
            m.d.comb += crc.valid.eq(got)
            with m.If(got):
                m.next = next_state
            with m.Elif(expired):
                if report:
                    self._report(m, Status.TIMEOUT)
                m.next = "HUNT"

        with m.FSM(name="parse"):
            with m.State("HUNT"):
                with m.If(got & (byte == SYNC)):
                    m.d.comb += crc.start.eq(1)
                    m.next = "COMMAND"
            with m.State("COMMAND"):
                m.d.sync += command.eq(byte)
                take("LENGTH_HIGH")
            with m.State("LENGTH_HIGH"):
                m.d.sync += length[BYTE:].eq(byte)
                take("LENGTH_LOW")
            with m.State("LENGTH_LOW"):
                m.d.sync += [length.eq(new_length), index.eq(0), skip.eq(new_length + 1)]
                take("PAYLOAD")
                with m.If(got & (new_length > self.max_length)):
                    self._report(m, Status.TOO_LONG)
                    m.next = "SKIP"
                with m.Elif(got & (new_length == 0)):
                    m.next = "CRC_HIGH"
            with m.State("PAYLOAD"):
                m.d.comb += write.en.eq(got)
                m.d.sync += index.eq(index + got)
                take("PAYLOAD")
                with m.If(got & (index == length - 1)):
                    m.next = "CRC_HIGH"
            with m.State("CRC_HIGH"):
                take("CRC_LOW")
            with m.State("CRC_LOW"):
                take("CHECK")
            with m.State("CHECK"):                       # the CRC register has every byte now
                m.d.comb += self.i.ready.eq(0)
                with m.If(~crc.match_detected):
                    self._report(m, Status.BAD_CRC)
                with m.Elif(handed["full"]):
                    self._report(m, Status.BUSY)
                with m.Else():
                    m.d.comb += handed["start"].eq(1)
                    m.d.sync += [handed["command"].eq(command), handed["length"].eq(length),
                                 handed["half"].eq(half), half.eq(~half)]
                m.next = "HUNT"
            with m.State("SKIP"):
                m.d.sync += skip.eq(skip - got)
                take("SKIP", report=False)
                with m.If(got & (skip == 0)):
                    m.next = "HUNT"

    def _read(self, m, read, handed):
        """Pass the handed-over frame on from the buffer, one item per byte, under back-pressure."""
        o = self.o
        items = Mux(handed["length"] == 0, 1, handed["length"])
        index = Signal(LENGTH_BITS)                      # the next item to read
        # The waiting item's fields, registered with it: the next frame may be handed over
        # while it waits, and an item must not change until it is taken.
        item = Signal(data.StructLayout({"command": BYTE, "length": LENGTH_BITS, "first": 1,
                                         "last": 1}))
        advance = ~o.valid | o.ready                     # the output register is free
        m.d.comb += [read.en.eq(advance),
                     read.addr.eq(index + Mux(handed["half"], self.max_length, 0)),
                     o.payload.command.eq(item.command), o.payload.length.eq(item.length),
                     o.payload.data.eq(Mux(item.length == 0, 0, read.data)),
                     o.payload.first.eq(item.first), o.payload.last.eq(item.last)]
        with m.If(advance):
            m.d.sync += o.valid.eq(0)
            with m.If(handed["full"]):
                m.d.sync += [o.valid.eq(1), item.command.eq(handed["command"]),
                             item.length.eq(handed["length"]), item.first.eq(index == 0),
                             item.last.eq(index == items - 1), index.eq(index + 1)]
                with m.If(index == items - 1):
                    m.d.sync += handed["full"].eq(0)
        with m.If(handed["start"]):
            m.d.sync += [handed["full"].eq(1), index.eq(0)]


class FrameTx(wiring.Component):
    """Send frames as bytes, computing their CRC on the way.

    Members
    -------
    i : In(stream.Signature(frame_layout()))
        The frames to send (:func:`frame_layout`; for an answer, ``command`` is a
        :class:`Status`). The header is sent from the first item's ``command`` and ``length``
        before that item is taken; then one byte per item (none for a frame with ``length`` 0,
        whose single item is taken after the header) until the item with ``last``, then the CRC.
        ``i.valid`` may drop between items and before the header is out (the header waits for
        it). The transmitter trusts ``length`` to count the items; a frame whose items disagree goes
        out with a header the host's decoder will read wrong.
    o : Out(stream.Signature(8))
        The frame's bytes (to :class:`~hdl.board.uart.UartTx`): ``length + 6`` of them, from
        registers, under back-pressure. An item of ``i`` waits while ``o`` is stalled or the
        header is going out.

    One byte per cycle when neither side holds it up, so the UART sets the pace.
    """

    def __init__(self):
        super().__init__({"i": In(stream.Signature(frame_layout())),
                          "o": Out(stream.Signature(BYTE))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.crc = crc = CRC(data_width=BYTE).create()
        i, o = self.i, self.o
        load = ~o.valid | o.ready                        # the output register takes a byte now
        byte = Signal(BYTE)
        m.d.comb += crc.data.eq(byte)
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)

        def send(value, next_state, counted=True):
            """Put ``value`` on ``o`` (into the CRC unless told) and move on, once ``o`` is free
            (and, for a byte of the item, while the item is offered)."""
            m.d.comb += byte.eq(value)
            with m.If(load & i.valid if counted else load):
                m.d.comb += crc.valid.eq(counted)
                m.d.sync += [o.valid.eq(1), o.payload.eq(value)]
                m.next = next_state

        with m.FSM(name="send"):
            with m.State("IDLE"):
                with m.If(i.valid & load):
                    m.d.comb += crc.start.eq(1)
                    m.d.sync += [o.valid.eq(1), o.payload.eq(SYNC)]
                    m.next = "COMMAND"
            with m.State("COMMAND"):
                send(i.payload.command, "LENGTH_HIGH")
            with m.State("LENGTH_HIGH"):
                send(i.payload.length[BYTE:], "LENGTH_LOW")
            with m.State("LENGTH_LOW"):
                send(i.payload.length[:BYTE], "PAYLOAD")
                with m.If(load & i.valid & (i.payload.length == 0)):
                    m.d.comb += i.ready.eq(1)            # the empty frame's one item
                    m.next = "CRC_HIGH"
            with m.State("PAYLOAD"):
                send(i.payload.data, "PAYLOAD")
                m.d.comb += i.ready.eq(load)
                with m.If(load & i.valid & i.payload.last):
                    m.next = "CRC_HIGH"
            with m.State("CRC_HIGH"):
                send(crc.crc[BYTE:], "CRC_LOW", counted=False)
            with m.State("CRC_LOW"):
                send(crc.crc[:BYTE], "IDLE", counted=False)
        return m
