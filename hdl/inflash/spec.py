"""The KVNAND flash plane and the in-flash PE's configuration: a pure description, no hardware.

Shared by the in-flash PE (``hdl/inflash``), its golden model (``golden/inflash/``) and the
testbench's flash-plane model. Flash busy times are given in microseconds with their datasheet
names (``tR_us``, ``tP_us``) and become cycles only in :func:`busy_cycles`. The PE runs three
operations (:class:`Op`): the GEMV on weight pages, and Logit and Attend on the KV pages of one
(layer, KV head), whose page walk follows the mapping of ``golden.inflash.kv_address``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from fractions import Fraction

from amaranth.lib import data

from ..validate import index_bits, integer, positive, power_of_two

__all__ = ["MAX_FMACS", "busy_cycles", "FlashGeometry", "Mode", "IMPLEMENTED_MODES", "Op",
           "Mapping", "ATTENTION_MODES", "MAX_ROWS", "MAX_COLS", "MAX_TRANSFER", "MAX_TOKENS",
           "MAX_LAYERS", "MAX_KV_HEADS", "MAX_QUERY_HEADS", "PEConfig", "command_layout",
           "x_layout", "read_layout", "page_data_layout", "word_layout", "job_layout",
           "beat_layout", "y_layout", "pe_config", "MAX_KV_SLOTS", "WriteError", "WriterConfig",
           "kv_open_layout", "kv_word_layout", "program_layout", "kv_record_layout",
           "kv_status_layout", "flash_command_layout"]

#: Largest FMAC (multiply lane) count of the PE (Table I of the paper: 16).
MAX_FMACS = 16


def busy_cycles(t_us, clk_mhz, what: str = "Busy time t_us") -> int:
    """Return the clock cycles a busy time of ``t_us`` microseconds lasts, rounded up.

    Rounding up keeps every busy time at least as long as the flash's: a controller that waited
    one cycle less than ``tR`` would read the data register before the array finished. The
    product is taken exactly on the decimal values given (``Fraction(str(value))``), so 0.07 us at
    100 MHz is 7 cycles, not the 8 that ``ceil(0.07 * 100)`` gives in floating point.

    Raises
    ------
    TypeError
        A time or clock that is not a real number.
    ValueError
        A time or clock that is not positive and finite. The message names the quantity.
    """
    positive(t_us, what, "microseconds")
    positive(clk_mhz, "Clock frequency clk_mhz", "MHz")
    return math.ceil(Fraction(str(t_us)) * Fraction(str(clk_mhz)))


@dataclass(frozen=True)
class FlashGeometry:
    """Describe one flash plane with its page buffer and GEMV PE.

    Parameters
    ----------
    page_bytes : int
        Data bytes per page (the ECC spare area is not modelled), a power of two from 16 to
        65536. Paper: 4096.
    tR_us : float
        Array read time into the data register, microseconds. Paper: 4.
    tP_us : float
        Page program time, microseconds. Paper: 75.
    transfer_bytes : int
        Bytes per cycle from the cache register into the PE (through the on-die ECC), a power of
        two from 1 to ``page_bytes``. Default 4: 1.6 GB/s at 400 MHz, near the paper's
        14.6 Gb/s BCH decoder per plane.
    clk_mhz : float
        PE clock, MHz. Paper: 400.
    fmacs : int
        FMACs (multiply lanes) ``F`` of the PE, a power of two from 1 to 16. Paper: 2 for MHA,
        16 for GQA (Table I: 16).
    pages_per_block : int
        Pages per erase block (1 to 65536); the read-disturb counters count per block.
        Paper: 768.
    blocks : int
        Blocks per plane (1 to 2**20). Paper: 177.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.
    """

    page_bytes: int = 4096
    tR_us: float = 4.0
    tP_us: float = 75.0
    transfer_bytes: int = 4
    clk_mhz: float = 400.0
    fmacs: int = 2
    pages_per_block: int = 768
    blocks: int = 177

    def __post_init__(self):
        power_of_two(self.page_bytes, "Page size in bytes", 16, 1 << 16)
        busy_cycles(self.tR_us, self.clk_mhz, "Read time tR_us")
        busy_cycles(self.tP_us, self.clk_mhz, "Program time tP_us")
        power_of_two(self.transfer_bytes, "Transfer width in bytes per cycle", 1, self.page_bytes)
        power_of_two(self.fmacs, "FMAC count", 1, MAX_FMACS)
        integer(self.pages_per_block, "Pages per block", 1, 1 << 16)
        integer(self.blocks, "Block count", 1, 1 << 20)

    @classmethod
    def paper(cls) -> "FlashGeometry":
        """Table I of the paper: 4 KB pages, tR 4 us, tP 75 us, 16 FMACs at 400 MHz, 768 pages
        per block, 177 blocks per plane (the transfer width is not given: 4 bytes per cycle)."""
        return cls(fmacs=16)

    @property
    def tR_cycles(self) -> int:
        """``tR`` in cycles, rounded up (:func:`busy_cycles`)."""
        return busy_cycles(self.tR_us, self.clk_mhz, "Read time tR_us")

    @property
    def tP_cycles(self) -> int:
        """``tP`` in cycles, rounded up (:func:`busy_cycles`)."""
        return busy_cycles(self.tP_us, self.clk_mhz, "Program time tP_us")

    @property
    def page_transfer_cycles(self) -> int:
        """Cycles to stream a full page into the PE: ``page_bytes / transfer_bytes``."""
        return self.page_bytes // self.transfer_bytes

    @property
    def pages(self) -> int:
        """Pages of the plane: ``pages_per_block * blocks``."""
        return self.pages_per_block * self.blocks


# --- the GEMV PE's configuration and stream layouts -----------------------------------------------


#: Largest row count of a GEMV (and ``max_rows`` of a PE).
MAX_ROWS = 1 << 20
#: Largest column count: int8 x int8 sums of 2**16 terms stay within 2**30, inside int32.
MAX_COLS = 1 << 16
#: Widest page transfer the PE's gearbox takes, bytes per cycle.
MAX_TRANSFER = 64


class Mode(enum.IntEnum):
    """Precision mode of a GEMV (``cmd.mode``); the names are those of ``golden.inflash.MODES``."""

    FP16 = 0
    BF16 = 1
    W8A8 = 2
    W4A16 = 3


#: Modes the PE computes; a command in any other mode is refused.
IMPLEMENTED_MODES = (Mode.FP16, Mode.BF16, Mode.W8A8, Mode.W4A16)


class Op(enum.IntEnum):
    """Operation of a command (``cmd.op``).

    ``GEMV``: ``y = W x`` on weight pages (``mode`` is the precision mode). ``LOGIT``: the scores
    ``q_h . k_t`` of ``query_heads`` query heads against the K entries of one (layer, KV head)
    (``golden.inflash.logit``). ``ATTEND``: ``sum_t p[h, t] v_t`` over the V entries of one
    (layer, KV head) (``golden.inflash.attend``). For Logit and Attend ``mode`` is the KV
    format: ``FP16``, ``BF16`` or ``W8A8`` (int8 KV, int32 results).
    """

    GEMV = 0
    LOGIT = 1
    ATTEND = 2


class Mapping(enum.IntEnum):
    """KV mapping of an attention command (``cmd.mapping``): ``golden.inflash.MAPPINGS``."""

    PAGE = 0
    NAIVE = 1


#: KV formats of Logit and Attend, as ``Mode`` codes (``W8A8``: int8 KV).
ATTENTION_MODES = (Mode.FP16, Mode.BF16, Mode.W8A8)
#: Longest sequence of an attention command (``golden.inflash.MAX_TOKENS``).
MAX_TOKENS = 1 << 24
#: Largest layer and KV-head counts of a KV layout (``golden.inflash.KVLayout``).
MAX_LAYERS = MAX_KV_HEADS = 1024
#: Largest ``max_query_heads`` (query heads per KV head, the GQA group) of a PE.
MAX_QUERY_HEADS = 64
#: Group sizes of the w4a16 mode: powers of two in this range (at least the largest ``F``, so
#: that a beat never straddles two groups).
MIN_GROUP, MAX_GROUP = 16, 1024
#: Bytes of a w4a16 record header: an fp16 scale and an fp16 offset.
SCALE_BYTES = 4


@dataclass(frozen=True)
class _PlaneConfig:
    """The plane a block of ``hdl/inflash`` serves: the checks and sizes the PE and the KV
    writer share."""

    geometry: FlashGeometry

    def __post_init__(self):
        if not isinstance(self.geometry, FlashGeometry):
            raise TypeError(f"Plane geometry must be a FlashGeometry, not {self.geometry!r}")
        power_of_two(self.geometry.transfer_bytes, "Transfer width in bytes per cycle", 1,
              MAX_TRANSFER)

    @property
    def transfer_bytes(self) -> int:
        return self.geometry.transfer_bytes

    @property
    def page_bytes(self) -> int:
        return self.geometry.page_bytes

    @property
    def page_bits(self) -> int:
        """Width of a page address (``0 .. pages - 1``)."""
        return index_bits(self.geometry.pages)

    @property
    def layout_bits(self) -> int:
        """Width of the layer and KV-head counts and indices of a KV layout (up to 1024; one
        above is seen, so that it can be refused)."""
        return max(MAX_LAYERS, MAX_KV_HEADS).bit_length()


@dataclass(frozen=True)
class PEConfig(_PlaneConfig):
    """Check and hold the parameters of one in-flash GEMV PE.

    Parameters
    ----------
    geometry : FlashGeometry
        The plane: ``page_bytes`` (``P``), ``transfer_bytes`` (``W``, at most 64 for the PE's
        gearbox), ``fmacs`` (``F``) and ``pages`` (the page address range). The RTL never sees
        ``tR_us``, ``tP_us`` or ``clk_mhz``: the plane answers a read when its data is there.
    max_rows : int
        Largest row count of a GEMV, a power of two from 1 to 2**20: sets the row counter.
    max_cols : int
        Largest column count, a power of two from ``F`` to 2**16: sets the ``x`` buffer
        (``max_cols / F`` words of ``F`` 16-bit elements) and the depth of the beat tree.
    group_size : int
        ``g`` of the w4a16 mode, a power of two from 16 to 1024 (default 128): columns per
        (scale, offset) record. A w4a16 command whose ``cols`` it does not divide is refused.
    max_query_heads : int
        ``G_max``, the largest GQA group of Logit and Attend (query heads served by one KV
        head), 1 to 64 (default 8, LLaMA2-70B's group). Sets the group counters and the ``p``
        buffer of Attend (two tokens of ``ceil(G_max / F)`` words).

    Attention sizes follow ``max_cols``: the ``G`` query vectors of a Logit sit in the ``x``
    buffer and the ``G d`` accumulators of an Attend in a memory of ``max_cols`` fp32 words, so
    ``G ceil(d / F) <= max_cols / F``; a two-entry K/V ring of ``max_cols`` elements bounds the
    head dimension to ``max_head_dim = max_cols / 2``.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.
    """

    geometry: FlashGeometry
    max_rows: int
    max_cols: int
    group_size: int = 128
    max_query_heads: int = 8

    def __post_init__(self):
        super().__post_init__()
        power_of_two(self.max_rows, "Maximum row count", 1, MAX_ROWS)
        power_of_two(self.max_cols, "Maximum column count", self.geometry.fmacs, MAX_COLS)
        power_of_two(self.group_size, "Group size", MIN_GROUP, MAX_GROUP)
        integer(self.max_query_heads, "Maximum query heads per KV head", 1, MAX_QUERY_HEADS)

    # --- derived sizes ---------------------------------------------------------------------

    @property
    def fmacs(self) -> int:
        return self.geometry.fmacs

    @property
    def max_beats(self) -> int:
        """Beats of the longest row: ``max_cols / F``."""
        return self.max_cols // self.fmacs

    @property
    def max_groups(self) -> int:
        """w4a16 groups of the longest row: ``max(1, max_cols / group_size)``."""
        return max(1, self.max_cols // self.group_size)

    @property
    def rows_bits(self) -> int:
        """Width of a row count (``0 .. 2 max_rows - 1``: a count above the maximum is seen)."""
        return self.max_rows.bit_length()

    @property
    def cols_bits(self) -> int:
        return self.max_cols.bit_length()

    @property
    def stream_bits(self) -> int:
        """Width of a stream length in bytes: a GEMV's (``2 max_rows max_cols``) or an attention
        command's (``MAX_TOKENS`` entries of at most a page)."""
        return max(2 * self.max_rows * self.max_cols,
                   MAX_TOKENS * self.page_bytes).bit_length()

    # --- attention sizes ---------------------------------------------------------------------

    @property
    def max_head_dim(self) -> int:
        """Largest head dimension ``d`` of Logit and Attend: ``max_cols / 2`` (at least 1), so
        that the K/V ring holds two entries in ``max_cols`` elements."""
        return max(1, self.max_cols // 2)

    @property
    def slot_beats(self) -> int:
        """Words of one K/V ring slot: ``ceil(max_head_dim / F)``."""
        return -(-self.max_head_dim // self.fmacs)

    @property
    def p_beats(self) -> int:
        """``x`` beats of one token's attention weights at ``G_max``: ``ceil(G_max / F)``."""
        return -(-self.max_query_heads // self.fmacs)

    @property
    def x_depth(self) -> int:
        """Words of the ``x`` buffer: a GEMV's ``max_cols / F``, or two tokens of Attend's
        ``p`` if that is more."""
        return max(self.max_beats, 2 * self.p_beats)

    @property
    def tokens_bits(self) -> int:
        """Width of a token count (``0 .. 2 MAX_TOKENS - 1``: a count above the maximum is
        seen)."""
        return MAX_TOKENS.bit_length()

    @property
    def query_bits(self) -> int:
        """Width of a query-head count (``G_max + 1`` is expressible, so it can be refused)."""
        return (self.max_query_heads + 1).bit_length()



def pe_config(cfg, what: str) -> PEConfig:
    """Return ``cfg`` if it is a :class:`PEConfig`; ``what`` names the component it
    configures in the ``TypeError`` otherwise."""
    if not isinstance(cfg, PEConfig):
        raise TypeError(f"{what} configuration must be a PEConfig, not {cfg!r}")
    return cfg


def command_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of ``cmd``: one operation (``op``, :class:`Op`).

    GEMV: ``y = W x`` of ``rows x cols`` weights in ``mode``, whose page stream starts at page
    ``page`` (docs/inflash_models.md section 4). Logit and Attend: ``tokens`` (``T``) entries
    of ``head_dim`` (``d``) elements in KV format ``mode``, for ``query_heads`` (``G``) query
    heads, of KV head ``head`` in layer ``layer`` of a cache of ``layers`` layers and
    ``kv_heads`` KV heads laid out with ``mapping`` (:class:`Mapping`) from page ``page`` on
    (``golden.inflash.kv_address`` plus ``page``). Fields an operation does not use are
    ignored."""
    return data.StructLayout({
        "op": 2, "mode": 2, "rows": cfg.rows_bits, "cols": cfg.cols_bits, "page": cfg.page_bits,
        "tokens": cfg.tokens_bits, "head_dim": cfg.cols_bits, "query_heads": cfg.query_bits,
        "mapping": 1, "layers": cfg.layout_bits, "kv_heads": cfg.layout_bits,
        "layer": cfg.layout_bits, "head": cfg.layout_bits})


def x_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of ``x``: ``F`` elements of the activation vector, element ``b F + i`` in lane
    ``i`` of beat ``b``; fp16/bf16 codes, or an int8 in the low byte (w8a8)."""
    return data.StructLayout({"data": data.ArrayLayout(16, cfg.fmacs)})


def read_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of ``rd_cmd``: read page ``page`` and stream ``bytes`` bytes of it (1 ..
    ``page_bytes``) taken as runs of ``run`` bytes, run ``j`` starting at byte
    ``column + j stride`` of the page (the flash's "change read column"). A contiguous read has
    ``run = stride = bytes``: a GEMV page (``column`` 0; fewer bytes only on the matrix's last
    page) or the K/V entries of one page under the page-level mapping. A naive-mapping page
    holding several entries of the head gathers them: ``run`` the entry, ``stride`` the
    distance between them."""
    width = cfg.page_bytes.bit_length()
    return data.StructLayout({"page": cfg.page_bits, "column": index_bits(cfg.page_bytes),
                              "bytes": width, "run": width, "stride": width})


def page_data_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of ``rd_data``: ``W`` bytes of a page, byte ``j`` of the word being page byte
    ``k W + j`` of word ``k``; ``last`` on the page's last word."""
    return data.StructLayout({"data": data.ArrayLayout(8, cfg.transfer_bytes), "last": 1})


def word_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of the gearbox's ``i``: one page word, ``W`` bytes (byte ``j`` in ``data[j]``) of
    which the first ``bytes`` (1 .. ``W``) belong to the stream; fewer than ``W`` only in the
    last word of a read whose byte count ``W`` does not divide."""
    return data.StructLayout({"data": data.ArrayLayout(8, cfg.transfer_bytes),
                              "bytes": cfg.transfer_bytes.bit_length()})


def job_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of the gearbox's ``job``: the mode and shape of the matrix whose stream follows,
    and the stream's length in bytes (``golden.inflash.stream_bytes``). The K or V entries of an
    attention command are a ``tokens x head_dim`` matrix in ``fp16``, ``bf16`` or ``w8a8``
    (int8)."""
    return data.StructLayout({"mode": 2, "rows": max(cfg.rows_bits, cfg.tokens_bits),
                              "cols": cfg.cols_bits, "bytes": cfg.stream_bits})


def beat_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of the gearbox's ``o``: one beat of ``F`` weights of one row, or a w4a16 header.

    ``data``: lane ``i`` is element ``b F + i`` of the row (fp16/bf16 code, the int8 in the
    low byte, or the uint4 code in the low nibble), lanes past the row's end are ``-0``
    (``0x8000``) in float modes and 0 in w8a8; ``mask`` has bit ``i`` set for the lanes inside
    the row; ``beat`` is ``b``; ``first`` and ``last`` mark the row's first and last beat,
    ``final`` the matrix's last beat. w4a16: the first beat of each group has ``header`` set and
    carries the group's ``scale`` and ``offset`` (fp16 codes) beside its codes; ``group_end``
    marks a group's last beat.
    """
    return data.StructLayout({"data": data.ArrayLayout(16, cfg.fmacs), "mask": cfg.fmacs,
                              "beat": index_bits(cfg.max_beats), "first": 1, "last": 1, "final": 1,
                              "header": 1, "group_end": 1, "scale": 16, "offset": 16})


def y_layout(cfg: PEConfig) -> data.StructLayout:
    """Payload of ``y``: one output, an fp32 code (float modes) or an int32 (w8a8, int8 KV);
    ``last`` on the command's last output; ``error`` (with ``last`` and ``value = 0``) answers
    a refused command."""
    return data.StructLayout({"value": 32, "last": 1, "error": 1})


# --- the KV page writer -------------------------------------------------------------------------


#: Largest KV buffer of a writer, in pages.
MAX_KV_SLOTS = 1 << 12


class WriteError(enum.IntEnum):
    """Outcome of a sequence on the KV page writer (``status.error``).

    ``NONE``: every entry is stored. ``LAYOUT``: the sequence's command is refused (a format
    other than fp16, bf16 or int8, a head dimension of 0 or an entry larger than a page, 0 or
    more than 1024 layers or KV heads, an empty region or one past the plane); nothing is
    stored. ``BUFFER``: the page-level mapping needs a buffer page per (layer, K|V, head)
    stream, ``2 L H`` of them, more than the writer has; nothing is stored. ``PAGES``: a
    token's pages would pass the region (or the sequence would pass ``MAX_TOKENS``): that token
    and every later one are dropped, everything before is stored."""

    NONE = 0
    LAYOUT = 1
    BUFFER = 2
    PAGES = 3


@dataclass(frozen=True)
class WriterConfig(_PlaneConfig):
    """Check and hold the parameters of one KV page writer.

    Parameters
    ----------
    geometry : FlashGeometry
        The plane: ``page_bytes`` (``P``), ``transfer_bytes`` (``W``, at most 64) and
        ``pages``.
    slots : int
        Pages of the KV buffer, 1 to 4096. Paper (Table I): 8 KB per plane, two 4 KB pages.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.
    """

    geometry: FlashGeometry
    slots: int

    def __post_init__(self):
        super().__post_init__()
        integer(self.slots, "KV buffer pages", 1, MAX_KV_SLOTS)

    @property
    def region_bits(self) -> int:
        """Width of a page count (``0 .. pages``) and of a relative page index."""
        return self.geometry.pages.bit_length()

    @property
    def dim_bits(self) -> int:
        """Width of a head dimension (``0 .. 2 page_bytes - 1``: one above a page is seen)."""
        return self.page_bytes.bit_length() + 1

    @property
    def entry_count_bits(self) -> int:
        """Width of an entry or token count of one sequence: at most ``pages`` pages of
        ``page_bytes`` one-byte entries."""
        return (self.geometry.pages * self.page_bytes).bit_length()


def kv_open_layout(cfg: WriterConfig) -> data.StructLayout:
    """Payload of the writer's ``cmd``: one sequence. The KV format ``mode`` (``Mode``: fp16,
    bf16, ``W8A8`` for int8), the ``mapping`` (:class:`Mapping`), the layout ``layers``,
    ``kv_heads``, ``head_dim`` (``golden.inflash.KVLayout``) and the region: pages ``page ..
    page + pages - 1``, relative page 0 at ``page``."""
    return data.StructLayout({
        "mode": 2, "mapping": 1, "layers": cfg.layout_bits, "kv_heads": cfg.layout_bits,
        "head_dim": cfg.dim_bits, "page": cfg.page_bits, "pages": cfg.region_bits})


def kv_word_layout(cfg: WriterConfig) -> data.StructLayout:
    """Payload of the writer's ``kv``: ``W`` bytes of a KV entry (byte ``j`` of word ``k`` is
    entry byte ``k W + j``; 16-bit codes low byte first), ``ceil(e / W)`` words per entry,
    the bytes of the last past the entry ignored; ``last`` on the sequence's final word."""
    return data.StructLayout({"data": data.ArrayLayout(8, cfg.transfer_bytes), "last": 1})


def program_layout(cfg: WriterConfig) -> data.StructLayout:
    """Payload of ``pg_cmd``: program page ``page`` with the ``page_bytes / W`` words that
    follow on ``pg_data``."""
    return data.StructLayout({"page": cfg.page_bits})


def kv_record_layout(cfg: WriterConfig) -> data.StructLayout:
    """Payload of ``table``: one record of the mapping table per page programmed
    (``golden.inflash.KV_RECORD``): the page, the (token, layer, kind, head) of its first
    entry in generation order and its entry count."""
    return data.StructLayout({
        "page": cfg.page_bits, "layer": cfg.layout_bits, "kind": 1, "head": cfg.layout_bits,
        "token": cfg.entry_count_bits, "entries": cfg.page_bytes.bit_length()})


def kv_status_layout(cfg: WriterConfig) -> data.StructLayout:
    """Payload of ``status``: the end of a sequence, after its last page is programmed: the
    entries stored and the :class:`WriteError`."""
    return data.StructLayout({"entries": cfg.entry_count_bits, "error": 2})


def flash_command_layout(cfg) -> data.StructLayout:
    """Payload of a plane's shared command port (``fl_cmd`` of
    :class:`~hdl.inflash.unit.InflashUnit`): a read (:func:`read_layout`) or, with
    ``program``, a program of ``page`` (the other fields 0)."""
    return data.StructLayout({**dict(read_layout(cfg).members), "program": 1})
