"""The host's side of the board link: frames to bytes and back, and their CRC.

The one pure-Python copy of the frame format of :mod:`hdl.board.frame` (SYNC, command, length,
payload, CRC-16/CCITT-FALSE), used by the tests as the golden model of the RTL and by the
``memwall board`` commands of later increments to talk to a board. It lives under ``memwall/``
because it is host software the CLI runs, and ``memwall/`` may import ``hdl/`` for the protocol's
constants (SYNC, status codes) while ``hdl/`` never imports ``memwall/``.

The CRC here is written from the algorithm's specification (a bitwise shift register), not taken
from Amaranth's catalogue that the RTL uses, so that the two check each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from hdl.board.frame import LENGTH_BITS, MAX_LENGTH, SYNC

__all__ = ["CRC_POLY", "CRC_INIT", "crc16", "Frame", "FrameError", "encode_frame",
           "decode_frames", "FrameReader"]

#: CRC-16/CCITT-FALSE: x^16 + x^12 + x^5 + 1, register starts at all ones, bits enter most
#: significant first, no reflection and no final XOR.
CRC_POLY = 0x1021
CRC_INIT = 0xFFFF
CRC_BITS = 16
#: Bytes around a payload: SYNC, command, two of length, two of CRC.
OVERHEAD = 6


def crc16(data: bytes, crc: int = CRC_INIT) -> int:
    """Return the CRC-16/CCITT-FALSE of ``data`` (0x29B1 for ``b"123456789"``)."""
    top = 1 << (CRC_BITS - 1)
    for byte in data:
        crc ^= byte << (CRC_BITS - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ CRC_POLY if crc & top else crc << 1) & ((1 << CRC_BITS) - 1)
    return crc


@dataclass(frozen=True)
class Frame:
    """A decoded frame: its command byte (a status code when the board sent it) and payload."""
    command: int
    payload: bytes = b""


class FrameError(ValueError):
    """Bytes that are not a sequence of whole, correct frames; the message says where."""


def encode_frame(command: int, payload: bytes = b"") -> bytes:
    """Return the bytes of one frame: SYNC, command, length (big-endian), payload, CRC."""
    command = int(command)
    if not 0 <= command <= 0xFF:
        raise ValueError(f"Frame command must be between 0 and 255, not {command}")
    if len(payload) > MAX_LENGTH:
        raise ValueError(f"Frame payload must be at most {MAX_LENGTH} bytes, not {len(payload)}")
    body = bytes([command]) + len(payload).to_bytes(LENGTH_BITS // 8, "big") + bytes(payload)
    return bytes([SYNC]) + body + crc16(body).to_bytes(CRC_BITS // 8, "big")


def decode_frames(data: bytes) -> list[Frame]:
    """Return the frames that ``data`` holds back to back.

    Raises :class:`FrameError` naming the offset if a frame does not start with SYNC, is cut
    short or has a wrong CRC.
    """
    frames, at = [], 0
    while at < len(data):
        if data[at] != SYNC:
            raise FrameError(f"byte {at}: expected SYNC 0x{SYNC:02X}, got 0x{data[at]:02X}")
        if at + OVERHEAD > len(data):
            raise FrameError(f"byte {at}: frame cut short at {len(data) - at} bytes")
        length = int.from_bytes(data[at + 2:at + 4], "big")
        end = at + OVERHEAD + length
        if end > len(data):
            raise FrameError(f"byte {at}: frame of {OVERHEAD + length} bytes cut short at "
                             f"{len(data) - at}")
        body, sent = data[at + 1:end - 2], int.from_bytes(data[end - 2:end], "big")
        if crc16(body) != sent:
            raise FrameError(f"byte {at}: CRC 0x{sent:04X}, computed 0x{crc16(body):04X}")
        frames.append(Frame(body[0], bytes(body[3:])))
        at = end
    return frames


class FrameReader:
    """Decode frames from bytes that arrive in pieces (a serial port's reads).

    :meth:`feed` takes the next piece and returns the frames it completed. Bytes before a SYNC
    are dropped and counted in ``dropped``; a frame whose CRC fails is reported in ``errors``
    (a :class:`FrameError` naming the stream offset) and only its SYNC byte is dropped, so that
    the reader finds a real frame that started inside what it took for one.
    """

    def __init__(self):
        self._buffer = bytearray()
        self._offset = 0                                 # stream offset of the buffer's start
        self.dropped = 0
        self.errors: list[FrameError] = []

    def _drop(self, count: int) -> None:
        del self._buffer[:count]
        self._offset += count

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames = []
        while self._buffer:
            if self._buffer[0] != SYNC:
                start = self._buffer.find(SYNC)
                skipped = len(self._buffer) if start < 0 else start
                self.dropped += skipped
                self._drop(skipped)
                continue
            if len(self._buffer) < OVERHEAD:
                break
            end = OVERHEAD + int.from_bytes(self._buffer[2:4], "big")
            if len(self._buffer) < end:
                break
            try:
                frames += decode_frames(bytes(self._buffer[:end]))
                self._drop(end)
            except FrameError as error:
                self.errors.append(FrameError(f"stream byte {self._offset}: {error}"))
                self.dropped += 1
                self._drop(1)
        return frames
