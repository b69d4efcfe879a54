"""The FlowKV tile pair's configuration and stream layouts: a pure description, no hardware.

One :class:`FlowKVConfig` is shared by tile 0 (:class:`~hdl.flowkv.tile0.ScoreTile`), tile 1
(:class:`~hdl.flowkv.tile1.ValueTile`), the pair and the array, and by the testbenches. It checks
every parameter once and derives the widths of the stream payloads:

* ``cmd`` (:func:`command_layout`): one decode step for one KV head: the decode position ``p``,
  the number of rows ``L`` the KV cache holds (positions ``0 .. L - 1``), and for FlowKV-SWA the
  window ``L_w``.
* ``q``, ``k``, ``v`` (:func:`beat_layout`): ``P`` BF16 elements per beat; a row of ``d`` elements
  is ``d / P`` beats, element ``i`` of beat ``b`` being element ``b * P + i`` of the row.
* ``items`` (:func:`item_layout`): the inter-tile stream carrying ``C``, ``F`` and ``l``.
* ``o`` (:func:`output_layout`): ``P`` output elements per beat, heads in order.

See docs/flowkv.md for the protocol and timing, docs/flowkv_models.md for the numerics.
"""

from __future__ import annotations

import enum
import math
import struct
from dataclasses import dataclass

from amaranth.lib import data

from ..arith.format import BF16, FP32, FloatFormat, float_format
from ..validate import index_bits, integer, power_of_two

__all__ = ["Kind", "FlowKVConfig", "check_tile_config", "command_layout", "beat_layout",
           "item_layout", "output_layout", "score_scale_code", "MAX_HEAD_DIM", "MAX_LANES",
           "MAX_GROUP", "MAX_CHUNK", "MAX_TOKENS", "LOG2E"]

#: Largest head dimension ``d`` (Gemma3 uses 256).
MAX_HEAD_DIM = 1024
#: Largest lane count ``P`` (that of :class:`hdl.arith.fdot.FloatDot`).
MAX_LANES = 64
#: Largest GQA group (query heads per KV head).
MAX_GROUP = 16
#: Largest chunk length ``L_c``.
MAX_CHUNK = 4096
#: Largest KV-cache length: 2**24, the last count an fp32 denominator ``l`` holds exactly.
MAX_TOKENS = 1 << 24
#: ``log2(e)`` in float64 (the score scale is ``fp32(LOG2E / sqrt(d))``).
LOG2E = math.log2(math.e)


class Kind(enum.IntEnum):
    """What an inter-tile item carries (``item.kind``)."""

    #: Correction factor ``C_c`` of one head; first item of the head within the chunk.
    C = 0
    #: Numerator ``F`` of one head and one row (slot) of the chunk; ``+0`` for a masked row.
    F = 1
    #: Final denominator ``l`` of one head, after the job's last chunk.
    L = 2
    #: The job's command was refused; the only item of that job.
    REFUSED = 3


def score_scale_code(d: int) -> int:
    """Return the fp32 code of ``log2(e) / sqrt(d)``, the float64 quotient rounded once.

    The bit-exact golden model computes the same constant (``golden.flowkv.score_scale``); a unit
    test checks that the two agree for every ``d``.
    """
    integer(d, "Head dimension", 1, MAX_HEAD_DIM)
    return struct.unpack("<I", struct.pack("<f", LOG2E / math.sqrt(d)))[0]


@dataclass(frozen=True)
class FlowKVConfig:
    """Check and hold the parameters of one FlowKV tile pair.

    Parameters
    ----------
    head_dim : int
        ``d``, 1 to 1024, a multiple of ``lanes``.
    lanes : int
        ``P`` multiply lanes per head in each tile, a power of two from 1 to 64. A K or V row takes
        ``d / P`` beats.
    group : int
        ``G`` query heads sharing the KV head, 1 (MHA) to 16. Each K and V row serves all of them:
        the tiles have ``G * P`` multiply lanes.
    chunk : int
        ``L_c``, the chunk length, a power of two from 1 to 4096.
    max_tokens : int
        Longest KV cache ``L``, a power of two from 2 to 2**24: sets the position widths.
    out_fmt : FloatFormat or str
        Format of ``O``: ``bf16`` or ``fp32``.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed values and the value given.
    """

    head_dim: int
    lanes: int
    group: int
    chunk: int
    max_tokens: int
    out_fmt: FloatFormat

    def __init__(self, *, head_dim: int, lanes: int, group: int, chunk: int, max_tokens: int,
                 out_fmt: FloatFormat | str = BF16):
        integer(head_dim, "Head dimension", 1, MAX_HEAD_DIM)
        power_of_two(lanes, "Lane count", 1, MAX_LANES)
        if head_dim % lanes:
            raise ValueError(f"Head dimension must be a multiple of the lane count {lanes}, "
                             f"not {head_dim}")
        integer(group, "Group size (query heads per KV head)", 1, MAX_GROUP)
        power_of_two(chunk, "Chunk length", 1, MAX_CHUNK)
        power_of_two(max_tokens, "Maximum KV-cache length", 2, MAX_TOKENS)
        fmt = float_format(out_fmt)
        if fmt not in (BF16, FP32):
            raise ValueError(f"Output format must be bf16 or fp32, not {fmt.name}")
        for name, value in (("head_dim", head_dim), ("lanes", lanes), ("group", group),
                            ("chunk", chunk), ("max_tokens", max_tokens), ("out_fmt", fmt)):
            object.__setattr__(self, name, value)

    # --- derived sizes ------------------------------------------------------------------------

    @property
    def beats(self) -> int:
        """Beats per K, V, q or O row: ``d / P``."""
        return self.head_dim // self.lanes

    @property
    def pos_bits(self) -> int:
        """Width of a position (``0 .. max_tokens - 1``)."""
        return index_bits(self.max_tokens)

    @property
    def len_bits(self) -> int:
        """Width of a length or window (``0 .. max_tokens``)."""
        return self.max_tokens.bit_length()

    @property
    def slot_bits(self) -> int:
        return index_bits(self.chunk)

    @property
    def head_bits(self) -> int:
        return index_bits(self.group)

    @property
    def beat_bits(self) -> int:
        return index_bits(self.beats)

    @property
    def scale(self) -> int:
        """fp32 code of the score scale ``log2(e) / sqrt(d)``."""
        return score_scale_code(self.head_dim)

    def kwargs(self) -> dict:
        return {"head_dim": self.head_dim, "lanes": self.lanes, "group": self.group,
                "chunk": self.chunk, "max_tokens": self.max_tokens, "out_fmt": self.out_fmt}


def check_tile_config(cfg) -> FlowKVConfig:
    """Return ``cfg`` if it is a :class:`FlowKVConfig` (what a tile and its latencies take)."""
    if not isinstance(cfg, FlowKVConfig):
        raise TypeError(f"Tile configuration must be a FlowKVConfig, not {cfg!r}")
    return cfg


def command_layout(cfg: FlowKVConfig) -> data.StructLayout:
    """Payload of ``cmd``: one decode step.

    ``position`` is ``p``; ``length`` is ``L``; ``window`` is ``L_w``, used when ``sliding``.
    Refused (answered by one ``o`` beat with ``error`` set, after consuming the step's query
    beats and no K or V row): ``length`` of 0 or above ``max_tokens``, ``position >= length``,
    and with ``sliding`` a window of 0 or above ``max_tokens``.
    """
    return data.StructLayout({"position": cfg.pos_bits, "length": cfg.len_bits,
                              "window": cfg.len_bits, "sliding": 1})


def beat_layout(cfg: FlowKVConfig) -> data.StructLayout:
    """Payload of ``q``, ``k`` and ``v``: ``P`` BF16 codes."""
    return data.StructLayout({"data": data.ArrayLayout(BF16.width, cfg.lanes)})


def item_layout(cfg: FlowKVConfig) -> data.StructLayout:
    """Payload of the inter-tile stream (tile 0 to tile 1).

    ``kind`` (:class:`Kind`), ``head``, ``slot`` (row within the chunk, for ``F``), ``valid``
    (``F``: the row is attended; masked rows carry ``+0``), ``first`` / ``final`` (``C``, ``F``:
    the chunk is the job's first / last), ``last`` (``F``: the chunk's last item; ``L``: the job's
    last item) and ``value`` (fp32 code of ``C``, ``F`` or ``l``).
    """
    return data.StructLayout({"kind": 2, "head": cfg.head_bits, "slot": cfg.slot_bits,
                              "valid": 1, "first": 1, "final": 1, "last": 1, "value": FP32.width})


def output_layout(cfg: FlowKVConfig) -> data.StructLayout:
    """Payload of ``o``: ``P`` elements of ``O`` in ``out_fmt``, with head, beat and flags.

    ``last`` marks the job's final beat (head ``G - 1``, beat ``d / P - 1``), or its only beat
    when ``error`` is set (a refused command; ``data`` is 0).
    """
    return data.StructLayout({"data": data.ArrayLayout(cfg.out_fmt.width, cfg.lanes),
                              "head": cfg.head_bits, "beat": cfg.beat_bits,
                              "last": 1, "error": 1})
