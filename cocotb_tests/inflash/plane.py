"""A behavioural NAND flash plane for the in-flash PE's testbenches: pages, tR, the page stream.

The plane answers the PE's ``rd_cmd`` / ``rd_data`` ports (docs/inflash.md, section 3) with the
two-register pipeline of docs/inflash_models.md section 6:

* A read command is taken when the array is idle and the data register is free. The array
  then reads the page for ``tR`` cycles (``FlashGeometry.tR_cycles``, microseconds converted by
  ``busy_cycles``, rounded up): a command taken in cycle ``c`` fills the data register at cycle
  ``c + tR``.
* The data register moves into the cache register (in no time) as soon as it is full and the
  cache register is free, that is the previous page's last word has been transferred. The data
  register is then free again, so the next read is taken in that same cycle: the flash "cache
  read". The cache register streams the command's ``bytes`` (:func:`read_bytes`: runs of ``run``
  bytes, ``stride`` apart from ``column``, the flash's "change read column"; ``ceil(bytes / W)``
  words, ``last`` on the final one) at one word per cycle, holding a word until the PE takes it.
* Every read adds one to its block's read counter (read disturb: ``block_reads``).
* A program command (``program`` set, from the shared ``fl_cmd`` port of
  :class:`~hdl.inflash.unit.InflashUnit`) is taken under the same condition as a read. The
  plane then takes the page's ``page_bytes / W`` words on ``pg_data`` into its data register,
  and the array programs them for ``tP`` cycles (``FlashGeometry.tP_cycles``): a page whose last
  word is taken in cycle ``c`` reads back from cycle ``c + tP``; no command is taken meanwhile.
  A page is programmed once: programming a page that is not erased fails (NAND needs an erase
  first).

Pages not programmed read as erased (``0xFF``). :meth:`PlaneModel.program` fills pages at once
(the testbench's initial contents).

:class:`PlaneModel` is the plane as a plain cycle-stepped model; :class:`FlashPlane` drives it
from a cocotb testbench, and the in-process timing test (tests/test_inflash_hdl.py) from an
Amaranth one. Timing discipline as in cocotb_tests/streams.py: drive after the rising edge,
sample the handshakes in the read-only phase; cycle numbers are those of the shared
:class:`~cocotb_tests.streams.CycleCounter`.
"""

from __future__ import annotations

import random

import numpy as np

from golden.inflash import ERASED, KVLayout, kv_address, kv_page_sequence
from hdl.inflash.spec import FlashGeometry

from ..streams import ClockService, CycleCounter, PayloadCodec, stream_port

__all__ = ["read_bytes", "read_words", "kv_reads", "PlaneModel", "FlashPlane"]


def read_bytes(image: np.ndarray, column: int, nbytes: int, run: int, stride: int) -> np.ndarray:
    """Return the ``nbytes`` bytes a read streams from a page image: runs of ``run`` bytes, run
    ``j`` from byte ``column + j stride`` (``rd_cmd``, docs/inflash.md section 3)."""
    k = np.arange(nbytes)
    index = column + (k // run) * stride + k % run
    if nbytes < 1 or run < 1 or int(index.max()) >= len(image):
        raise ValueError(f"read of {nbytes} bytes (column {column}, run {run}, stride {stride}) "
                         f"leaves the {len(image)}-byte page")
    return np.asarray(image, np.uint8)[index]


def read_words(data: np.ndarray, W: int) -> list[dict]:
    """Cut a read's bytes into ``W``-byte words (``data.j``, ``last``); the bytes past the end
    of the last word are erased (the PE drops them)."""
    n = -(-len(data) // W)
    padded = np.full(n * W, ERASED, np.uint8)
    padded[:len(data)] = data
    return [{**{f"data.{j}": int(padded[k * W + j]) for j in range(W)}, "last": int(k == n - 1)}
            for k in range(n)]


def kv_reads(layout: KVLayout, seq_len: int, layer: int, head: int, kind: int,
             base: int) -> list[dict]:
    """The page reads of a Logit (``kind`` K) or Attend (V) under the contract
    (docs/inflash.md, section 3): one per page of :func:`golden.inflash.kv_page_sequence`, in
    token order, streaming the head's entries of the page: contiguous (``run = stride =
    bytes``) or gathered (``run`` an entry, ``stride`` the distance between them)."""
    page, offset = kv_address(layout, layer, head, np.arange(seq_len), kind)
    e, out = layout.entry_bytes, []
    for p in kv_page_sequence(layout, seq_len, layer=layer, head=head, kind=kind):
        o = offset[page == p]
        gather = len(o) > 1 and int(o[1] - o[0]) != e
        run, stride = (e, int(o[1] - o[0])) if gather else (len(o) * e, len(o) * e)
        out.append({"page": base + int(p), "column": int(o[0]), "bytes": len(o) * e,
                    "run": run, "stride": stride})
    return out


class PlaneModel:
    """The plane as a cycle-stepped model, independent of the simulator.

    Each cycle: :meth:`outputs` gives ``rd_cmd.ready`` and the word offered on ``rd_data`` (or
    ``None``); after the clock edge, :meth:`tick` takes the handshakes of that cycle (the read
    command taken, if any, and whether the word was taken) and moves to the next cycle.

    Parameters
    ----------
    geometry : FlashGeometry
        Page size, transfer width, ``tR`` (through ``tR_cycles``), pages per block, blocks.
    rng : random.Random, optional
    gaps : float
        Probability of an idle cycle before each word (a slow ECC decoder); 0 for timing runs.

    Attributes
    ----------
    read_pages, read_start : list of int
        Page address and cycle of every read command taken, in order.
    stream_start, stream_end : list of int
        Cycle each page entered the cache register (its first word is offered then) and cycle
        its last word was transferred.
    program_pages, program_start, program_end : list of int
        Page, cycle of the command and cycle the page was programmed (``tP`` after its last
        data word) of every program command taken, in order.
    block_counts : np.ndarray
        Reads per block (``int64``, ``geometry.blocks`` entries).
    """

    def __init__(self, geometry: FlashGeometry, rng: random.Random | None = None,
                 gaps: float = 0.0):
        if not 0.0 <= gaps < 1.0:
            raise ValueError(f"gap probability must be in [0, 1), not {gaps}")
        self.geometry, self.rng, self.gaps = geometry, rng or random.Random(0), gaps
        self.tR = geometry.tR_cycles
        self.tP = geometry.tP_cycles
        self.W = geometry.transfer_bytes
        self.pages: dict[int, np.ndarray] = {}
        self.read_pages: list[int] = []
        self.read_start: list[int] = []
        self.stream_start: list[int] = []
        self.stream_end: list[int] = []
        self.program_pages: list[int] = []
        self.program_start: list[int] = []
        self.program_end: list[int] = []
        self._written: set[int] = set()   # pages programmed through the port
        self._loading = None        # (page, bytes so far): a program taking its data
        self.block_counts = np.zeros(geometry.blocks, np.int64)
        self.now = 0
        self._array = None          # (read fields, cycle the data register fills)
        self._data = None           # read fields: the data register
        self._cache = None          # list of words (dicts) being streamed
        self._word = 0
        self._gap = False

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

    def image(self, page: int) -> np.ndarray:
        return self.pages.get(page, np.full(self.geometry.page_bytes, ERASED, np.uint8))

    def check(self, read: dict):
        """Fail on a read outside the plane or its page (``read``: the ``rd_cmd`` fields)."""
        P = self.geometry.page_bytes
        if not 0 <= read["page"] < self.geometry.pages or not 1 <= read["bytes"] <= P:
            raise AssertionError(f"cycle {self.now}: rd_cmd asks for page {read['page']}, "
                                 f"{read['bytes']} bytes: outside the plane")
        read_bytes(np.zeros(P, np.uint8), read["column"], read["bytes"], read["run"],
                   read["stride"])

    def outputs(self) -> tuple[bool, dict | None]:
        """``(rd_cmd.ready, the word on rd_data or None)`` of the current cycle."""
        ready = self._array is None and self._data is None and self._loading is None
        offer = self._cache is not None and not self._gap
        return ready, (self._cache[self._word] if offer else None)

    @property
    def idle(self) -> bool:
        """No read or program is in the plane."""
        return (self._array is None and self._data is None and self._loading is None
                and self._cache is None)

    @property
    def program_ready(self) -> bool:
        """``pg_data.ready`` of the current cycle: a program is taking its data."""
        return self._loading is not None

    def tick(self, read: dict | None, word_taken: bool, program_word: list[int] | None = None):
        """Apply the handshakes of the current cycle (``read``: the command fields taken, a
        read or a program, or ``None``; ``program_word``: the ``W`` bytes taken on
        ``pg_data``, or ``None``) and step to the next cycle."""
        cycle = self.now
        self.now += 1
        if read is not None and read.get("program"):
            page = read["page"]
            if not 0 <= page < self.geometry.pages:
                raise AssertionError(f"cycle {cycle}: program of page {page}: outside the plane")
            if page in self._written or page in self.pages:
                raise AssertionError(f"cycle {cycle}: program of page {page}, which is not "
                                     f"erased")
            self._loading = (page, [])
            self.program_pages.append(page)
            self.program_start.append(cycle)
        elif read is not None:
            self.check(read)
            self._array = (read, cycle + self.tR)
            self.read_pages.append(read["page"])
            self.read_start.append(cycle)
            self.block_counts[read["page"] // self.geometry.pages_per_block] += 1
        if program_word is not None:
            if self._loading is None:
                raise AssertionError(f"cycle {cycle}: a pg_data word without a program")
            page, data = self._loading
            data.extend(int(b) for b in program_word)
            if len(data) == self.geometry.page_bytes:
                self._loading = None
                self._written.add(page)
                self._array = ({"program": page, "image": np.array(data, np.uint8)},
                               cycle + self.tP)
        if word_taken:
            self._word += 1
            self._gap = self.gaps > 0 and self.rng.random() < self.gaps
            if self._word == len(self._cache):
                self._cache = None
                self.stream_end.append(cycle)
        # The array finishes: a program stores its page; a read fills the data register, which
        # moves into a free cache register.
        if self._array is not None and self.now >= self._array[1]:
            done = self._array[0]
            self._array = None
            if "image" in done:
                self.pages[done["program"]] = done["image"]
                self.program_end.append(self.now)
            else:
                self._data = done
        if self._data is not None and self._cache is None:
            f = self._data
            data = read_bytes(self.image(f["page"]), f["column"], f["bytes"], f["run"],
                              f["stride"])
            self._cache = read_words(data, self.W)
            self._word = 0
            self._data = None
            self.stream_start.append(self.now)
        elif self._gap and self._cache is not None:
            self._gap = self.rng.random() < self.gaps


class FlashPlane(PlaneModel):
    """Serve a cocotb design's page reads with :class:`PlaneModel`.

    Parameters
    ----------
    dut : cocotb handle with ``rd_cmd__*`` and ``rd_data__*`` ports.
    geometry : FlashGeometry
    counter : CycleCounter
        The testbench's cycle counter (the plane keeps its own in step with it).
    cmd_codec, data_codec : PayloadCodec
        Of the command port's payload and ``rd_data__payload``.
    rng : random.Random
    gaps : float
        As in :class:`PlaneModel`.
    cmd : str
        The command port: ``rd_cmd`` (the PE's reads) or ``fl_cmd`` (reads and programs).
    program_codec : PayloadCodec, optional
        Of ``pg_data__payload``, when the design programs pages.
    """

    def __init__(self, dut, geometry: FlashGeometry, counter: CycleCounter,
                 cmd_codec: PayloadCodec, data_codec: PayloadCodec, rng: random.Random,
                 gaps: float = 0.0, *, cmd: str = "rd_cmd",
                 program_codec: PayloadCodec | None = None):
        super().__init__(geometry, rng, gaps)
        self.dut, self.counter = dut, counter
        self.cmd_codec, self.data_codec, self.program_codec = cmd_codec, data_codec, program_codec
        # Native or AXI4-Stream names (``--interface axis``); ``data_last`` is AXI's tlast.
        self.cmd_valid = stream_port(dut, cmd, "valid")
        self.cmd_ready = stream_port(dut, cmd, "ready")
        self.cmd_payload = stream_port(dut, cmd, "payload")
        self.data_valid = stream_port(dut, "rd_data", "valid")
        self.data_ready = stream_port(dut, "rd_data", "ready")
        self.data_payload = stream_port(dut, "rd_data", "payload")
        self.data_last = stream_port(dut, "rd_data", "last", optional=True)
        self.cmd_ready.value = 0
        self.data_valid.value = 0
        if program_codec is not None:
            dut.pg_data__ready.value = 0
        self._taken = (None, False, None)     # the last cycle's command, word taken, program word
        self._serving: tuple | None = None     # this cycle's ready, data word, program ready
        service = ClockService.of(dut.clk)
        service.on_edge(self._on_edge)
        service.on_read(self._on_read)

    def _on_edge(self):
        """Write step: the handshakes of the last cycle take effect; drive this cycle's
        ``ready``, data word and program ``ready``."""
        taken, self._taken = self._taken, (None, False, None)
        self._serving = None
        if str(self.dut.rst.value) != "0":
            self.now += 1
            self.cmd_ready.value = 0
            self.data_valid.value = 0
            if self.program_codec is not None:
                self.dut.pg_data__ready.value = 0
            return
        self.tick(*taken)
        ready, word = self.outputs()
        self.cmd_ready.value = int(ready)
        self.data_valid.value = int(word is not None)
        if word is not None:
            self.data_payload.value = self.data_codec.pack(word)
            if self.data_last is not None:
                self.data_last.value = word.get("last", 0)
        loading = self.program_codec is not None and self.program_ready
        if self.program_codec is not None:
            self.dut.pg_data__ready.value = int(loading)
        self._serving = (ready, word, loading)

    def _on_read(self):
        """Read step: what the design handed over in this cycle (a command, the taking of the
        data word, a program word), for the next edge."""
        if self._serving is None:           # in reset
            return
        ready, word, loading = self._serving
        assert self.counter.cycle == self.now, \
            f"plane cycle {self.now} is out of step with the counter ({self.counter.cycle})"
        read, word_taken, program_word = None, False, None
        if ready and self.cmd_valid.value.is_resolvable and int(self.cmd_valid.value):
            read = self.cmd_codec.unpack(int(self.cmd_payload.value))
        if word is not None and int(self.data_ready.value):
            word_taken = True
        if loading and int(self.dut.pg_data__valid.value):
            item = self.program_codec.unpack(int(self.dut.pg_data__payload.value))
            program_word = [item[f"data.{j}"] for j in range(self.geometry.transfer_bytes)]
        self._taken = (read, word_taken, program_word)
