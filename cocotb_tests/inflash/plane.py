"""A behavioural NAND flash plane for the in-flash PE's testbench: pages, tR, the page stream.

The plane answers the PE's ``rd_cmd`` / ``rd_data`` ports (docs/inflash.md, section 3) with the
two-register pipeline of docs/inflash_models.md section 6:

* A read command is taken when the array is idle and the data register is free. The array
  then reads the page for ``tR`` cycles (``FlashGeometry.tR_cycles``, microseconds converted by
  ``busy_cycles``, rounded up): a command taken in cycle ``c`` fills the data register at cycle
  ``c + tR``.
* The data register moves into the cache register (in no time) as soon as it is full and the
  cache register is free, that is the previous page's last word has been transferred. The data
  register is then free again, so the next read is taken in that same cycle: the flash "cache
  read". The cache register streams the command's ``bytes`` (``ceil(bytes / W)`` words,
  ``last`` on the final one) at one word per cycle, holding a word until the PE takes it.
* Every read adds one to its block's read counter (read disturb: ``block_reads``).

Pages not programmed read as erased (``0xFF``). Programming is immediate here (``tP`` belongs to
the KV page writer, a later increment). Timing discipline as in cocotb_tests/streams.py: drive
after the rising edge, sample the handshakes in the read-only phase; cycle numbers are those of
the shared :class:`~cocotb_tests.streams.CycleCounter`.
"""

from __future__ import annotations

import random

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from golden.inflash import ERASED
from hdl.inflash.spec import FlashGeometry

from ..streams import CycleCounter, PayloadCodec

__all__ = ["FlashPlane"]


class FlashPlane:
    """Serve page reads from a dict of page images with the plane's busy times.

    Parameters
    ----------
    dut : cocotb handle with ``rd_cmd__*`` and ``rd_data__*`` ports.
    geometry : FlashGeometry
        Page size, transfer width, ``tR`` (through ``tR_cycles``), pages per block, blocks.
    counter : CycleCounter
        The testbench's cycle counter (the plane keeps its own in step with it).
    cmd_codec, data_codec : PayloadCodec
        Of ``rd_cmd__payload`` and ``rd_data__payload``.
    rng : random.Random
    gaps : float
        Probability of an idle cycle before each word (a slow ECC decoder); 0 for timing runs.

    Attributes
    ----------
    read_pages, read_start : list of int
        Page address and cycle of every read command taken, in order.
    stream_start, stream_end : list of int
        Cycle each page entered the cache register (its first word is offered then) and cycle
        its last word was transferred.
    block_counts : np.ndarray
        Reads per block (``int64``, ``geometry.blocks`` entries).
    """

    def __init__(self, dut, geometry: FlashGeometry, counter: CycleCounter,
                 cmd_codec: PayloadCodec, data_codec: PayloadCodec, rng: random.Random,
                 gaps: float = 0.0):
        if not 0.0 <= gaps < 1.0:
            raise ValueError(f"gap probability must be in [0, 1), not {gaps}")
        self.dut, self.geometry, self.counter = dut, geometry, counter
        self.cmd_codec, self.data_codec, self.rng, self.gaps = cmd_codec, data_codec, rng, gaps
        self.tR = geometry.tR_cycles
        self.W = geometry.transfer_bytes
        self.pages: dict[int, np.ndarray] = {}
        self.read_pages: list[int] = []
        self.read_start: list[int] = []
        self.stream_start: list[int] = []
        self.stream_end: list[int] = []
        self.block_counts = np.zeros(geometry.blocks, np.int64)
        self._array = None          # (page, bytes, cycle the data register fills)
        self._data = None           # (image, bytes): the data register
        self._cache = None          # list of words (dicts) being streamed
        self._word = 0
        self._gap = False
        dut.rd_cmd__ready.value = 0
        dut.rd_data__valid.value = 0
        cocotb.start_soon(self._run())

    def program(self, first: int, images: np.ndarray):
        """Write page images (``uint8 (n, page_bytes)``) at pages ``first, first + 1, ...``."""
        images = np.asarray(images, np.uint8)
        if images.ndim != 2 or images.shape[1] != self.geometry.page_bytes:
            raise ValueError(f"page images must be (n, {self.geometry.page_bytes}) bytes, not "
                             f"{images.shape}")
        if not 0 <= first and first + len(images) <= self.geometry.pages:
            raise ValueError(f"pages {first}..{first + len(images) - 1} are outside the plane's "
                             f"{self.geometry.pages}")
        for k, image in enumerate(images):
            self.pages[first + k] = image.copy()

    def _words(self, image: np.ndarray, nbytes: int) -> list[int]:
        n = -(-nbytes // self.W)
        return [self.data_codec.pack({**{f"data.{j}": int(image[k * self.W + j])
                                         for j in range(self.W)}, "last": int(k == n - 1)})
                for k in range(n)]

    async def _run(self):
        now = 0
        cmd_taken = word_taken = None
        while True:
            await RisingEdge(self.dut.clk)
            now += 1
            if str(self.dut.rst.value) != "0":
                cmd_taken = word_taken = None
                self.dut.rd_cmd__ready.value = 0
                self.dut.rd_data__valid.value = 0
                await ReadOnly()
                continue
            # The handshakes of the last cycle take effect.
            if cmd_taken is not None:
                page, nbytes, cycle = cmd_taken
                self._array = (page, nbytes, cycle + self.tR)
                self.read_pages.append(page)
                self.read_start.append(cycle)
                self.block_counts[page // self.geometry.pages_per_block] += 1
            if word_taken is not None:
                self._word += 1
                self._gap = self.gaps > 0 and self.rng.random() < self.gaps
                if self._word == len(self._cache):
                    self._cache = None
                    self.stream_end.append(word_taken)
            # The array finishes; the data register moves into a free cache register.
            if self._array is not None and now >= self._array[2]:
                page, nbytes, _ = self._array
                image = self.pages.get(page, np.full(self.geometry.page_bytes, ERASED, np.uint8))
                self._data = (image, nbytes)
                self._array = None
            if self._data is not None and self._cache is None:
                self._cache = self._words(*self._data)
                self._word = 0
                self._data = None
                self.stream_start.append(now)
            elif self._gap and self._cache is not None:
                self._gap = self.rng.random() < self.gaps
            ready = self._array is None and self._data is None
            offer = self._cache is not None and not self._gap
            self.dut.rd_cmd__ready.value = int(ready)
            self.dut.rd_data__valid.value = int(offer)
            if offer:
                self.dut.rd_data__payload.value = self._cache[self._word]
            await ReadOnly()
            assert self.counter.cycle == now, \
                f"plane cycle {now} is out of step with the counter ({self.counter.cycle})"
            cmd_taken = word_taken = None
            if ready and self.dut.rd_cmd__valid.value.is_resolvable and \
                    int(self.dut.rd_cmd__valid.value):
                fields = self.cmd_codec.unpack(int(self.dut.rd_cmd__payload.value))
                if not 0 <= fields["page"] < self.geometry.pages or \
                        not 1 <= fields["bytes"] <= self.geometry.page_bytes:
                    raise AssertionError(f"cycle {now}: rd_cmd asks for page {fields['page']}, "
                                         f"{fields['bytes']} bytes: outside the plane")
                cmd_taken = (fields["page"], fields["bytes"], now)
            if offer and int(self.dut.rd_data__ready.value):
                word_taken = now
