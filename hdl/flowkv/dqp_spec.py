"""FusedDQP's configuration, stream layouts, latencies and cycle model: a pure description.

One :class:`DQPConfig` is shared by the FusedDQP engine (:class:`hdl.flowkv.dqp.FusedDQP`), its
sub-components, the registry and the testbench. It checks every parameter once and derives:

* the stream payloads: ``cmd`` (:func:`command_layout`), the Q4NX weight bytes ``q``
  (:func:`weight_layout`), the activation ``a`` (:func:`activation_layout`), the projection
  results ``y`` (:func:`result_layout`) and the dequantized weights ``w``
  (:func:`dequantized_layout`);
* the latencies, from the shared units' ``latency_of`` (no component is built);
* the cycle model of a command (:func:`command_cycles`).

A Q4NX *row record* is one output row's group of 32 inputs: 16 bytes of 4-bit codes (element
``i`` in bits ``4 i .. 4 i + 3`` of the little-endian 128-bit word), the bf16 scale ``d`` and the
bf16 minimum ``m`` (little-endian): 20 bytes, 160 bits. 256 consecutive records are one Q4NX
block (5,120 bytes). docs/flowkv.md, "FusedDQP", has the protocol and the byte layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.lib import data

from ..arith.convert import FloatConvert
from ..arith.fdot import FloatDot
from ..arith.format import BF16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmac import FloatMAC
from ..arith.tree import tree_levels
from ..pipeline import ResultQueue
from ..validate import index_bits, integer, one_of, power_of_two

__all__ = ["GROUP", "CODE_BITS", "RECORD_BITS", "RECORD_BYTES", "BLOCK_ROWS", "LANES", "MAX_TILE",
           "MAX_INPUTS", "MAX_OUTPUTS", "DQPConfig", "PAPER", "check_lanes", "check_config",
           "record_layout", "command_layout", "weight_layout", "activation_layout",
           "result_layout", "dequantized_layout", "command_cycles"]

#: Inputs per Q4NX group (one scale, one minimum): ggml's ``QK4_1``, the paper's ``g``.
GROUP = 32
#: Bits of one weight code.
CODE_BITS = 4
#: One row record: the group's codes, the bf16 scale and the bf16 minimum.
RECORD_BITS = GROUP * CODE_BITS + 2 * BF16.width
RECORD_BYTES = RECORD_BITS // 8
#: Row records per Q4NX block: 256 x 20 = 5,120 bytes, the paper's block (Sec. 3.1.1).
BLOCK_ROWS = 256
#: Allowed lane counts: a weight beat (``5 lanes`` bits) holds whole bytes from 8 lanes on, and
#: one group per cycle at 32 keeps the accumulators at one update a cycle.
LANES = (8, 16, 32)
#: Largest output tile (accumulators), largest ``K`` and largest ``N``.
MAX_TILE = 4096
MAX_INPUTS = 1 << 16
MAX_OUTPUTS = 1 << 24
#: Cycles from a group sum to its accumulator at the adder: the memory's registered read and the
#: register behind it.
_ACC_READ = 2
#: Cycles from a queue's write to its ``valid`` (:class:`~hdl.pipeline.ResultQueue`).
_QUEUE_LATENCY = ResultQueue.LATENCY


def check_lanes(lanes) -> int:
    """Return ``lanes`` if it is one of :data:`LANES`, else raise naming it."""
    return one_of(lanes, "Lane count (whole bytes per weight beat, one group per cycle at most)",
                  LANES)


@dataclass(frozen=True)
class DQPConfig:
    """Check and hold the parameters of one FusedDQP engine.

    Parameters
    ----------
    lanes : int
        ``int4`` weights dequantized and multiplied per cycle: 8, 16 or 32. A row's group of
        32 weights takes ``32 / lanes`` cycles (``beats``); its 32 products are summed in the
        32-lane pairwise tree of the golden model either way (``lanes``-lane trees per cycle,
        then a serial tree over the beats).
    tile : int
        ``m``, output rows held in accumulators (1 to 4096): every group's ``m`` rows pass
        before the next group's, so an accumulator is read again ``m * beats`` cycles after
        its last update, which must be at least :attr:`acc_loop`; and the activation bank of
        a group is free again :attr:`act_hold` cycles after its last use, so at least that
        many cycles, plus a group's load, must pass per group for one beat a cycle.
    max_inputs : int
        Largest ``K``, a power of two from 32 to 65536: the width of ``cmd.groups``.
    max_outputs : int
        Largest ``N``, a multiple of ``tile`` up to 2**24: the width of ``cmd.tiles``.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed values and the value given.
    """

    lanes: int
    tile: int
    max_inputs: int
    max_outputs: int

    def __init__(self, *, lanes: int, tile: int, max_inputs: int, max_outputs: int):
        check_lanes(lanes)
        integer(tile, "Output tile (rows held in accumulators)", 1, MAX_TILE)
        beats = GROUP // lanes
        least = -(-self.min_cycles(lanes) // beats)
        if tile < least:
            raise ValueError(f"Output tile must be at least {least} rows at {lanes} lanes (each "
                             f"group's rows must take {self.min_cycles(lanes)} cycles: "
                             f"accumulator loop and activation reload), not {tile}")
        power_of_two(max_inputs, "Largest input count max_inputs", GROUP, MAX_INPUTS)
        integer(max_outputs, "Largest output count max_outputs", 1, MAX_OUTPUTS)
        if max_outputs % tile:
            raise ValueError(f"Largest output count max_outputs must be a multiple of the output "
                             f"tile {tile}, not {max_outputs}")
        for name, value in (("lanes", lanes), ("tile", tile), ("max_inputs", max_inputs),
                            ("max_outputs", max_outputs)):
            object.__setattr__(self, name, value)

    # --- derived sizes ------------------------------------------------------------------------

    @property
    def beats(self) -> int:
        """Cycles (weight beats) per row record: ``32 / lanes``."""
        return GROUP // self.lanes

    @property
    def beat_bits(self) -> int:
        """Bits of a weight beat: ``5 lanes`` (the record's 160 bits over ``beats``)."""
        return RECORD_BITS // self.beats

    @property
    def max_groups(self) -> int:
        return self.max_inputs // GROUP

    @property
    def max_tiles(self) -> int:
        return self.max_outputs // self.tile

    # --- latencies (of the shared units at their defaults; nothing is built) -------------------

    @staticmethod
    def dequant_latency_of() -> int:
        """Cycles of the dequantizer: a :class:`FloatMAC` (bf16 ``d q`` into fp32, ``+ m``) and a
        :class:`FloatConvert` to bf16."""
        return (FloatMAC.latency_of(BF16, FP32, block_registers=True)
                + FloatConvert.latency_of(FP32, BF16))

    @classmethod
    def acc_loop_of(cls) -> int:
        """Cycles from reading an accumulator to its update being readable: the memory's
        registered read, the register behind it (so that the block RAM's clock-to-data does not
        reach into the adder), the :class:`FloatAdder`, and the write (the read port is not
        transparent: a row written in a cycle is read anew from the next)."""
        return _ACC_READ + FloatAdder.latency_of(FP32) + 1

    @classmethod
    def act_hold_of(cls) -> int:
        """Cycles from a group's last issue to the cycle its activation bank is read for the
        last time and released: the issue register and the dequantizer, less the register
        that holds the inputs beside the dequantized weights."""
        return cls.dequant_latency_of()

    @classmethod
    def min_cycles(cls, lanes: int) -> int:
        """Least cycles per group's rows (``m * beats``): the accumulator loop; and for one beat
        a cycle, the activation bank's hold and its reload (``beats`` beats, the first in the
        cycle after the release), ready for the group after next."""
        return max(cls.acc_loop_of(), cls.act_hold_of() + GROUP // lanes)

    @property
    def dequant_latency(self) -> int:
        return self.dequant_latency_of()

    @property
    def acc_loop(self) -> int:
        return self.acc_loop_of()

    @property
    def act_hold(self) -> int:
        return self.act_hold_of()

    @property
    def dot_latency(self) -> int:
        """Cycles of the ``lanes``-lane bf16 dot product into fp32 (:class:`FloatDot`)."""
        return FloatDot.latency_of(BF16, self.lanes, FP32, block_registers=True)

    @property
    def beat_tree_latency(self) -> int:
        """Cycles of the serial tree over a row's ``beats`` dot products (0 at 32 lanes)."""
        return tree_levels(self.beats) * FloatAdder.latency_of(FP32)

    @property
    def group_latency(self) -> int:
        """Cycles from a row's last beat entering the dequantizer to its group sum."""
        return self.dequant_latency + self.dot_latency + self.beat_tree_latency

    @property
    def accumulate_latency(self) -> int:
        """Cycles from a group sum to its row's result in the result format: the accumulator
        read and its register, the :class:`FloatAdder`, the :class:`FloatConvert` to bf16 (fp32
        is delayed alike)."""
        return _ACC_READ + FloatAdder.latency_of(FP32) + FloatConvert.latency_of(FP32, BF16)

    @property
    def y_latency(self) -> int:
        """Cycles from the issue of a row's last beat of its last group to its ``y.valid``,
        nothing ahead of it: the issue register, :attr:`group_latency`,
        :attr:`accumulate_latency` and the output queue."""
        return 1 + self.group_latency + self.accumulate_latency + _QUEUE_LATENCY

    @property
    def w_latency(self) -> int:
        """Cycles from the issue of a beat (dequantization mode) to its ``w.valid``."""
        return 1 + self.dequant_latency + _QUEUE_LATENCY

    @property
    def y_depth(self) -> int:
        """Places of the ``y`` queue: the credits a result is away for at full rate."""
        return ResultQueue.full_rate_depth(self.y_latency - _QUEUE_LATENCY)

    @property
    def w_depth(self) -> int:
        """Places of the ``w`` queue: the credits a beat is away for at full rate."""
        return ResultQueue.full_rate_depth(self.w_latency - _QUEUE_LATENCY)


#: The paper's decode engine (Sec. 3.2.1): 32 lanes (one Q4NX group a cycle) and m = 32 rows a
#: tile, so a tile's 8 groups (k = 256) are one Q4NX block; K up to 16,384 (Gemma3's largest is
#: 10,240) and N up to 2**18 (the 262,144-row LM head). The ``paper`` preset and the decode model
#: (``sim.flowkv``) both use it.
PAPER = DQPConfig(lanes=32, tile=32, max_inputs=16384, max_outputs=262144)

def check_config(cfg) -> DQPConfig:
    """Return ``cfg`` if it is a :class:`DQPConfig` (what FusedDQP's parts take)."""
    if not isinstance(cfg, DQPConfig):
        raise TypeError(f"FusedDQP configuration must be a DQPConfig, not {cfg!r}")
    return cfg


def record_layout() -> data.StructLayout:
    """One row record, bit ``8 j`` being bit 0 of byte ``j``: ``codes`` (element ``i`` in bits
    ``4 i .. 4 i + 3``), then the bf16 ``scale`` ``d`` and ``minimum`` ``m``."""
    return data.StructLayout({"codes": GROUP * CODE_BITS, "scale": BF16.width,
                              "minimum": BF16.width})


def command_layout(cfg: DQPConfig) -> data.StructLayout:
    """Payload of ``cmd``: one projection ``y = W a`` (or one dequantization) of ``K x N``.

    ``groups`` is ``K / 32 - 1`` and ``tiles`` is ``N / m - 1`` (counts less one, as AXI's
    ``AxLEN``: every value is a command); ``dequant`` asks for the dequantized weights on
    ``w`` instead of ``y``; ``bf16`` for ``y`` in bf16 instead of fp32.
    """
    return data.StructLayout({"groups": index_bits(cfg.max_groups),
                              "tiles": index_bits(cfg.max_tiles), "dequant": 1, "bf16": 1})


def weight_layout(cfg: DQPConfig) -> data.StructLayout:
    """Payload of ``q``: ``5 lanes / 8`` bytes of the Q4NX record stream, byte ``j`` in bits
    ``8 j .. 8 j + 7``; a record is ``beats`` beats."""
    return data.StructLayout({"data": cfg.beat_bits})


def activation_layout(cfg: DQPConfig) -> data.StructLayout:
    """Payload of ``a``: ``lanes`` bf16 inputs; a group of 32 is ``beats`` beats, element ``i`` of
    beat ``b`` being input ``b lanes + i`` of the group."""
    return data.StructLayout({"data": data.ArrayLayout(BF16.width, cfg.lanes)})


def result_layout(cfg: DQPConfig) -> data.StructLayout:
    """Payload of ``y``: one output row, an fp32 code, or with ``cmd.bf16`` a bf16 code in bits
    0 to 15 (bits 16 to 31 zero); ``last`` on the command's last row."""
    return data.StructLayout({"data": FP32.width, "last": 1})


def dequantized_layout(cfg: DQPConfig) -> data.StructLayout:
    """Payload of ``w``: the bf16 weights of one weight beat's ``lanes`` codes (element ``i`` of
    beat ``b`` is weight ``b lanes + i`` of the record's group); ``last`` on the command's last
    beat."""
    return data.StructLayout({"data": data.ArrayLayout(BF16.width, cfg.lanes), "last": 1})


def command_cycles(cfg: DQPConfig, *, inputs: int, outputs: int, dequant: bool = False) -> dict:
    """The cycle model of one command with nothing ahead of it and every stream at full rate.

    Cycles are counted from the first ``q`` beat's transfer (cycle 0; the command and the first
    activation group are there by then). The engine issues one beat a cycle from cycle
    ``beats`` (a record is complete), ``N / m`` tiles of ``K / 32`` groups of ``m`` records.

    Returns
    -------
    dict
        ``issue``: cycles of issue (``K N / lanes``); ``first``: the cycle of the first result
        (``y``: a row's last group; ``w``: the first beat); ``last``: the cycle of the last;
        ``total``: ``last + 1``; ``items``: weights; ``per_cycle``: ``items / total``.
    """
    check_config(cfg)
    integer(inputs, "Input count K", GROUP, cfg.max_inputs)
    integer(outputs, "Output count N", cfg.tile, cfg.max_outputs)
    if inputs % GROUP or outputs % cfg.tile:
        raise ValueError(f"K must be a multiple of {GROUP} and N of the tile {cfg.tile}, not "
                         f"K = {inputs}, N = {outputs}")
    beats, groups = cfg.beats, inputs // GROUP
    issue = inputs * outputs // cfg.lanes
    start = beats                                  # the first record's last beat, registered
    if dequant:
        first, last = start + cfg.w_latency, start + issue - 1 + cfg.w_latency
    else:
        first = start + ((groups - 1) * cfg.tile + 1) * beats - 1 + cfg.y_latency
        last = start + issue - 1 + cfg.y_latency
    return {"issue": issue, "first": first, "last": last, "total": last + 1,
            "items": inputs * outputs, "per_cycle": inputs * outputs / (last + 1)}
