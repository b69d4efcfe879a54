"""Registry entries of the FlowKV tile pair and the array of pairs (one per KV head)."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.arith.tree import tree_levels
from hdl.flowkv import FlowKVArray, FlowKVPair
from hdl.flowkv.spec import FlowKVConfig, item_layout, output_layout

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, SynthSettings, register
from . import units


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
    """The pair parameters (:class:`hdl.flowkv.spec.FlowKVConfig`) and the number of pairs.

    Parameters
    ----------
    pairs : int
        Tile pairs, one per KV head, 1 to 16 (:class:`FlowKVArray`).
    """

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

_ADD, _MUL = units.ADD_STAGES, units.MUL_STAGES
_DOT_MUL, _DOT_ADD = units.DOT_MUL_STAGES, units.DOT_ADD_STAGES
#: Products ($mul) per unit: a bf16 x bf16 significand (8 bits) is one; fp32 x fp32 (24 bits) is
#: split in halves, four; the lanes' fp32 x bf16 ("wide" split, 24 > 18 bits) two; Exp2 one;
#: Reciprocal (two Newton-Raphson steps) ten.
_PRODUCTS = {"dot": 1, "fmul": 4, "fv": 2, "exp": 1, "recip": 10}
#: Netlist cells of one unit of each kind (its own netlist; they do not change with the pair).
_CELLS = {"add": units.FPADD_CELLS, "dot": units.FPMUL_CELLS, "fmul": units.FPMUL_WIDE_CELLS,
          "fv": 95, "cy": 104, "out": 105, "exp": units.EXP2_CELLS, "recip": units.RECIP_CELLS,
          "fifo": 23, "queue": 41}


def _size(params: FlowKVParams, pairs: int | None = None) -> Size:
    """One tile pair (``pairs``: an array of that many): its memories (query, scores, row tags,
    item and output queues, F, accumulators), its units' products, and cells per unit plus the
    tiles' own logic."""
    cfg = FlowKVConfig(**params.pair_args())
    G, P, B, Lc = cfg.group, cfg.lanes, cfg.beats, cfg.chunk
    lanes = G * P
    dot_latency = _DOT_MUL + _DOT_ADD * tree_levels(P)
    score_latency = 1 + dot_latency + tree_levels(B) * _ADD + _MUL
    tag_depth = 1 << ((score_latency + B - 1) // B + 2).bit_length()
    storage = (lanes * 16 * B                          # tile 0: query rows, a word per beat
               + (G * 32 + 1) * 2 * Lc                 # tile 0: scores (+ valid), two chunk banks
               + (cfg.slot_bits + 4) * tag_depth       # tile 0: row tags (SyncFIFO)
               # The result queues are SyncFIFOBuffered: a register and depth - 1 places.
               + item_layout(cfg).size * (32 - 1)      # tile 0: item queue, depth 32
               + G * 32 * 2 * Lc                       # tile 1: F of every head, two chunk banks
               + lanes * 32 * B                        # tile 1: accumulators Y
               + output_layout(cfg).size * (16 - 1))   # tile 1: output queue, depth 16
    products = (lanes * (_PRODUCTS["dot"] + _PRODUCTS["fv"] + _PRODUCTS["fmul"])  # k, F.V, C.Y
                + G * _PRODUCTS["fmul"]                # tile 0: score scale per head
                + _PRODUCTS["fmul"] + _PRODUCTS["exp"] + _PRODUCTS["recip"]  # C * l, exp2, 1/l
                + P * _PRODUCTS["fmul"])               # tile 1: output lanes Y * (1/l)
    adders = (G * (P - 1)                              # dot product trees
              + G * tree_levels(B) + tree_levels(Lc)   # serial trees: row sums, chunk sum of F
              + 2 + lanes)                             # S - m and l's adder; accumulators
    cells = (adders * _CELLS["add"]
             + lanes * (_CELLS["dot"] + _CELLS["fv"] + _CELLS["cy"])
             + (G + 1) * _CELLS["fmul"]                # score scales, C * l
             + _CELLS["exp"] + _CELLS["recip"] + P * _CELLS["out"]
             + _CELLS["fifo"] + 2 * _CELLS["queue"]    # row tags, item and output queues
             # Tile 0's own logic (calibrated): per head the running maximum, bank maxima and the
             # dot product's valid delays; per serial-tree level its hold, flags and delays.
             + 263 + G * (59 + 2 * dot_latency - _DOT_MUL)
             + 27 * (G * tree_levels(B) + tree_levels(Lc))
             # Tile 1's own logic (calibrated): per beat its busy flag and compares, per head
             # the C, l and reciprocal registers, per lane operand copies.
             + 228 + 11 * B + 16 * G + 4 * lanes)
    if pairs is None:
        return Size(storage_bits=storage, multipliers=products, cells=cells)
    return Size(storage_bits=pairs * storage, multipliers=pairs * products,
                cells=pairs * cells + 1 + 2 * pairs)   # the array's command broadcast


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
    size=_size,
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
    size=lambda p: _size(p, p.pairs),
    synth=SynthSettings(targets=(), skip_reason="four pairs exceed the largest ECP5 the flow "
                        "tries (LFE5U-85F); the pair (flowkv) is the synthesized unit"),
))
