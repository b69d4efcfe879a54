"""Registry entries of the FlowKV tile pair and the array of pairs (one per KV head)."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.flowkv import FlowKVArray, FlowKVPair

from ..params import BlockParams
from ..registry import Block, StreamTiming, SynthSettings, register


@dataclass(frozen=True)
class FlowKVParams(BlockParams):
    """Head dimension ``d``, lanes ``P`` per head, group ``G``, chunk ``L_c``, cache length, format.

    Checked by :class:`hdl.flowkv.spec.FlowKVConfig` (the registry builds the component).
    """

    head_dim: int = 64
    lanes: int = 4
    group: int = 2
    chunk: int = 16
    max_tokens: int = 4096
    out_fmt: str = "bf16"

    def pair_args(self) -> dict:
        return {name: getattr(self, name) for name in FlowKVParams.names()}


@dataclass(frozen=True)
class FlowKVArrayParams(FlowKVParams):
    """The pair parameters and the number of pairs (KV heads), 1 to 16."""

    pairs: int = 4


_PRESETS = {
    # d / P = 4 beats per row: tile 1's accumulator loop (13 cycles) sets the row time; tiny and
    # fast to simulate, with GQA, several chunks and windows in a few hundred cycles.
    "small": FlowKVParams(head_dim=8, lanes=2, group=2, chunk=4, max_tokens=64),
    # d / P = 16 beats per row, above the accumulator loop: both tiles run at one beat per cycle.
    "default": FlowKVParams(),
    # Gemma3-1B: d = 256, 4 query heads per KV head, 32K context; 16 lanes per head as one AIE
    # tile's bf16 vector unit. The paper gives no decode chunk length: 128 is ours.
    "paper": FlowKVParams(head_dim=256, lanes=16, group=4, chunk=128, max_tokens=32768),
}

def _timing(params, component) -> dict[str, StreamTiming]:
    """Every stream of a pair; an array's ``q0``, ``k1``... as their pair's."""
    step = "sim.flowkv.step_cycles (a decode step's fill, stream and drain); docs/flowkv.md"
    kinds = {"cmd": StreamTiming(model=step, note="one command per decode step"),
             "q": StreamTiming(model=step, note="the step's query, before its keys"),
             "k": StreamTiming(throughput=1.0, model=step, note="at most one beat a cycle"),
             "v": StreamTiming(throughput=1.0, model=step,
                               note="at most one beat a cycle, a chunk behind the keys"),
             "o": StreamTiming(after="cmd", model=step,
                               note="the step's output beats, after its last value beat")}
    return {name: kinds[name.rstrip("0123456789")] for name in component.signature.members}

register(Block(
    name="flowkv",
    family="flowkv",
    summary="FlowKV tile pair: decode attention, online softmax over K/V chunks, GQA, SWA",
    params=FlowKVParams,
    presets=_PRESETS,
    build=lambda p: FlowKVPair(**p.pair_args()),
    golden="golden.flowkv",
    testbench="cocotb_tests.flowkv.tb",
    timing=_timing,
    # The pair's units sit around the multiplier blocks' fixed rows: nextpnr's analytic placer
    # keeps their critical nets shorter when it weighs timing more (docs/flowkv.md, Fmax).
    synth=SynthSettings(timing_weight=60),
))

register(Block(
    name="flowkv-array",
    family="flowkv",
    summary="FlowKV array: one tile pair per KV head, broadcast decode step",
    params=FlowKVArrayParams,
    # The array adds only the broadcast of the step: GQA, lanes and chunking are the pair's and
    # are tested there, so the array's presets keep their pairs light.
    presets={
        "small": FlowKVArrayParams(head_dim=8, lanes=2, group=1, chunk=4, max_tokens=64, pairs=2),
        "default": FlowKVArrayParams(head_dim=32, lanes=2, group=2, chunk=16, max_tokens=1024,
                                     pairs=4),
        # Gemma3-4B: 4 KV heads of 2 query heads, d = 256 (paper Fig. 4 and Sec. 3.2.3), with 8
        # lanes per head (32 beats per row).
        "paper": FlowKVArrayParams(head_dim=256, lanes=8, group=2, chunk=128,
                                   max_tokens=32768, pairs=4),
    },
    build=lambda p: FlowKVArray(pairs=p.pairs, **p.pair_args()),
    golden="golden.flowkv",
    testbench="cocotb_tests.flowkv.tb",
    timing=_timing,
    synth=SynthSettings(targets=(), skip_reason="four pairs exceed the largest ECP5 the flow "
                        "tries (LFE5U-85F); the pair (flowkv) is the synthesized unit"),
))
