"""Registry entry of FusedDQP (``flowkv-dqp``), the FlowKV paper's Q4NX projection engine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hdl.arith.tree import tree_levels
from hdl.flowkv import DQPConfig, FusedDQP
from hdl.flowkv.dqp_spec import BLOCK_ROWS, PAPER, dequantized_layout, result_layout

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, SynthSettings, register
from . import units


@dataclass(frozen=True)
class FlowKVDQPParams(BlockParams):
    """Lanes, output tile ``m``, largest ``K`` and ``N``.

    Checked by :class:`hdl.flowkv.dqp_spec.DQPConfig` (the registry builds the component).
    """

    lanes: int = 32
    tile: int = BLOCK_ROWS
    max_inputs: int = 16384
    max_outputs: int = 65536

    def config(self) -> DQPConfig:
        return DQPConfig(**self.as_dict())


_PRESETS = {
    # 8 lanes (a record in 4 beats: the serial tree over beats is in use), 8 rows a tile (32
    # cycles a group, above the 18 the accumulators and activation banks need): a few hundred
    # cycles a command.
    "small": FlowKVDQPParams(lanes=8, tile=8, max_inputs=256, max_outputs=64),
    # One group of one row a cycle; a tile's group is one Q4NX block (256 records, 5,120
    # bytes). K up to 16K, N up to 64K (SmolLM2's 49,152-row LM head).
    "default": FlowKVDQPParams(),
    # The paper's decode engine (hdl.flowkv.dqp_spec.PAPER).
    "paper": FlowKVDQPParams(**dataclasses.asdict(PAPER)),
}

#: Netlist cells of a FloatConvert(FP32, BF16) (its own netlist, read off once).
_CONVERT_CELLS = 54


def _size(params: FlowKVDQPParams) -> Size:
    """The accumulators and the two result queues (``SyncFIFOBuffered``: depth - 1 places in
    memory); a multiplier per lane in the dequantizer and in the dot product, and the two
    variable word selects' index x width products; cells per unit, plus the engine's own logic
    (calibrated: counters, banks, tags)."""
    cfg = params.config()
    lanes = cfg.lanes
    storage = (cfg.tile * 32
               + result_layout(cfg).size * (cfg.y_depth - 1)
               + dequantized_layout(cfg).size * (cfg.w_depth - 1))
    adders = lanes + (lanes - 1) + tree_levels(cfg.beats) + 1    # d q + m, tree, beats, acc
    cells = (adders * units.FPADD_CELLS + 2 * lanes * units.FPMUL_CELLS
             + (lanes + 1) * _CONVERT_CELLS + 470 + 3 * lanes)
    return Size(storage_bits=storage, multipliers=2 * lanes + 2, cells=cells)


def _timing(params, component) -> dict[str, StreamTiming]:
    cfg = params.config()
    model = "hdl.flowkv.dqp_spec.command_cycles (docs/flowkv.md, FusedDQP)"
    return {
        "cmd": StreamTiming(model=model, note="one command per projection or dequantization; "
                                              "the next is taken with the last beat's issue"),
        "q": StreamTiming(throughput=1.0, model=model,
                          note=f"one beat ({cfg.lanes} weights) a cycle"),
        "a": StreamTiming(model=model, note="a group of 32 inputs per tile and group, into two "
                                            "banks: at most one beat a cycle"),
        "y": StreamTiming(after="q", latency=cfg.beats + cfg.y_latency, model=model,
                          note="from a row's record in the tile's last group (its last beat) "
                               "to the row's result; m results per tile"),
        "w": StreamTiming(after="q", latency=1 + cfg.w_latency, throughput=1.0, model=model,
                          note="dequantization: from a record's last beat to its first bf16 "
                               "beat, then one a cycle"),
    }


register(Block(
    name="flowkv-dqp",
    family="flowkv",
    summary="FusedDQP: Q4NX dequantization fused with the GEMV (fp32 accumulators), or Q4NX "
            "to bf16",
    params=FlowKVDQPParams,
    presets=_PRESETS,
    build=lambda p: FusedDQP(**p.as_dict()),
    golden="golden.flowkv_dqp",
    testbench="cocotb_tests.flowkv.dqp_tb",
    timing=_timing,
    size=_size,
    synth=SynthSettings(timing_weight=60),
))
