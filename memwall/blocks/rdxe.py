"""Registry entries of the rDXE vector-accumulate core (VAC) and decoder execution tile (DXT)."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.arith.format import FP32
from hdl.arith.requant import SHIFT_BITS
from hdl.rdxe import Dxt, DxtConfig, Vac, VacConfig, VacRing
from hdl.rdxe.chunks import READ_LATENCY
from hdl.rdxe.dxt import _QUEUE_SLACK
from hdl.rdxe.gbus import _RESP_QUEUE
from hdl.rdxe.sequencer import _CONST_QUEUE, _OP_QUEUE, op_layout, queued_layout
from hdl.rdxe.spec import ACC_BITS, CODE_BITS, VeConfig
from hdl.rdxe.ve import NORMALIZER_NARROW_BITS, P_ONE_SHIFT, Activations

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, SynthSettings, register
from . import units
from .units import requant_products as _requant


@dataclass(frozen=True)
class VacParams(BlockParams, VacConfig):
    """The fields of :class:`hdl.rdxe.VacConfig`, checked by it. ``ppu_depth`` None means
    ``wmem_depth`` (resolved when the parameters are made)."""


_PRESETS = {
    # 4 lanes, 64 WMEM rows (256 B), 16 PPU entries, 4 credits: GEMVs of a few chunks per output
    # fit several at a time, and 4 credits cover a credit's round trip (16 cycles for a one-chunk
    # output) only for outputs of 5 chunks or more, so the source runs out of credits whenever
    # outputs are short: the flow control is exercised.
    "small": VacParams(lanes=4, wmem_depth=64, ppu_depth=16, kv_rows=32, queue_depth=4),
    # VacConfig's defaults (16 lanes, 16 KB WMEM, 8 KB KV cache, 32 credits: more than one ring
    # trip, so one-chunk outputs run at full rate) but 3 operand stages, the fastest count on the
    # LFE5U-25F (docs/rdxe.md section 9).
    "default": VacParams(operand_stages=3),
    # The paper's VAC has 16 multipliers (Sec. III); it gives no WMEM size, only 4096 kB of
    # on-chip memory per DXE in all (Table I: 32 KB per VAC if WMEM, KV cache, token buffer and
    # rr-SRAM were spread evenly over its 128 VACs). The golden default, 16 KB, is kept.
    "paper": VacParams(lanes=16, wmem_depth=1024, operand_stages=3),
}

def _vac_timing(params, component) -> dict[str, StreamTiming]:
    always = StreamTiming(throughput=1.0, note="one transfer a cycle; always ready")
    return {"hlink_i": StreamTiming(throughput=1.0, note="one chunk a cycle; always ready"),
            "hlink_o": StreamTiming(after="hlink_i", latency=1, throughput=1.0,
                                    note="hlink_i registered; ready is ignored"),
            "wmem": always, "kv": always, "ppu": always, "rc": always,
            "o": StreamTiming(after="hlink_i", latency=component.latency, throughput=1.0,
                              model="docs/rdxe.md, section 6.1",
                              note="latency: a plain output's last chunk to its result; a fused "
                              "one waits for its RC factor")}


def _dxt_timing(params, component) -> dict[str, StreamTiming]:
    cycles = "golden.rdxe.gemv_cycles and the other *_cycles models; docs/rdxe.md, section 6.2"
    always = StreamTiming(throughput=1.0, note="one transfer a cycle; always ready")
    return {"cmd": StreamTiming(model=cycles, note="one operation per command"),
            "x": StreamTiming(model=cycles, note="the token chunks of gemv, rmsnorm and qk"),
            "wmem": always, "ppu": always,
            "o": StreamTiming(after="cmd", model=cycles, note="GBUS words of results in output "
                              "order"),
            "resp": StreamTiming(after="cmd", model=cycles, note="one per command, when it is "
                                 "done")}

#: Cells of one VAC besides its lanes (HLINK register, operand stages, accumulator, hold and
#: factor queues, result queue, the PPU's and the RCU's requantizers) and per lane (the
#: IntDot's product, adder and registers): calibrated on the small and default presets (4 and
#: 16 lanes); of its KV-cache ports, row register and mux: read off, checked at kv_rows = 0.
_VAC_CELLS, _KV_CELLS, _VAC_LANE_CELLS = 380, 20, 5


def _vac_size(cfg: VacConfig) -> Size:
    """What one :class:`~hdl.rdxe.vac.Vac` builds: WMEM, KV cache, PPU table, hold, factor and
    result queues (a head register and ``queue_depth - 1`` words each); a product per lane and
    the PPU's and RCU's requantizers' partial products; cells per lane and for the rest."""
    q = cfg.queue_depth - 1
    storage = (8 * cfg.lanes * (cfg.wmem_depth + cfg.kv_rows)          # WMEM and KV cache rows
               + (cfg.mult_bits + SHIFT_BITS) * cfg.ppu_depth          # PPU table
               + (ACC_BITS + cfg.mult_bits + SHIFT_BITS + 2) * q       # hold queue
               + cfg.rc_bits * q                                       # RC factor queue
               + CODE_BITS * q)                                        # result queue
    multipliers = (cfg.lanes + _requant(ACC_BITS, cfg.mult_bits)       # lanes, PPU
                   + _requant(ACC_BITS, cfg.rc_mant_bits, True))       # RCU
    cells = _VAC_CELLS + _KV_CELLS * (cfg.kv_rows > 0) + _VAC_LANE_CELLS * cfg.lanes
    return Size(storage_bits=storage, multipliers=multipliers, cells=cells)


#: Cycles from a request to its chunk (``Dxt.request_latency``): the activation path (the
#: same at every configuration), then the register behind the token buffer.
_REQUEST_LATENCY = Activations.latency_of(VeConfig()) - 1 + READ_LATENCY
#: Products of the VE's fixed units: the factor path (FloatMAC(FP32) 4, RSqrt 21, Reciprocal
#: 10), the sequencer's address products (4), and per activation lane (FloatMultiplier(BF16,
#: FP32, split="wide") 2, Exp2 1); from their structure at their default parameters.
_FACTOR_PRODUCTS, _SEQ_PRODUCTS, _ACT_LANE_PRODUCTS = 4 + 21 + 10, 4, 2 + 1
#: Cells per VE lane: an activation lane's IntToFloat, FloatMultiplier, Exp2 and Requantizer
#: (67 + 103 + 138 + 60, each unit's netlist), the normalizer's Requantizer (54), the lane's
#: muxes and the factor path's IntDot lane (38). Per VAC of the tile: its HLINK source credit
#: counter, KV writer port (addresses, byte enables), gatherer input and wiring, read off the
#: loops over the VACs. Both checked at 8 lanes, 8 VACs, and 16 of each. The fixed rest
#: (sequencer, factor path, queues, score maximum): calibrated on the small and default presets.
_VE_LANE_CELLS = (units.INT2FP_CELLS + units.FPMUL_WIDE_CELLS + units.EXP2_CELLS
                  + units.REQUANT_CELLS + 54 + 38)
_TILE_VAC_CELLS, _TILE_CELLS = 62, 1920


def _dxt_size(cfg: DxtConfig) -> Size:
    """What :class:`~hdl.rdxe.dxt.Dxt` builds: ``vacs`` VACs (:func:`_vac_size`), the token
    buffer (two halves of ``chunks`` rows), the score buffer, the operation, constant, chunk
    and response queues; the VE's products (normalizer, factor path, activation lanes) and the
    KV writer's four address products per VAC; cells per VAC, per lane and the rest."""
    vac, L, N = _vac_size(cfg.vac_config()), cfg.lanes, cfg.vacs
    storage = (N * vac.storage_bits
               + 2 * 8 * L * cfg.chunks                                 # token buffer halves
               + 8 * L * cfg.ve_config().score_rows                     # score buffer
               + op_layout(cfg).size * (_OP_QUEUE - 1)                  # operation queue
               + 64 * (_CONST_QUEUE - 1)                                # inv_k, eps queue
               + queued_layout(cfg).size * (_REQUEST_LATENCY + _QUEUE_SLACK - 1)  # chunk queue
               + 1 * (_RESP_QUEUE - 1))                                 # response queue
    multipliers = (N * vac.multipliers + 4 * N                          # VACs, KV writer
                   + L * _requant(CODE_BITS, cfg.rc_mant_bits, True,    # normalizer lanes
                                  NORMALIZER_NARROW_BITS)
                   + L + _FACTOR_PRODUCTS                               # factor path:
                   + _requant(max(FP32.precision + 1, cfg.rc_mant_bits + 2), 2)  # IntDot, to RC
                   + L * (_ACT_LANE_PRODUCTS + _requant(FP32.precision + 1 + P_ONE_SHIFT, 2))
                   + 1 + _SEQ_PRODUCTS)                                 # score select; sequencer
    cells = N * (vac.cells + _TILE_VAC_CELLS) + L * _VE_LANE_CELLS + _TILE_CELLS
    return Size(storage_bits=storage, multipliers=multipliers, cells=cells)


register(Block(
    name="rdxe-vac",
    family="rdxe",
    summary="rDXE vector-accumulate core: INT8 lane tree into INT32, WMEM, HLINK forwarding, "
            "PPU and fused RCU, credit flow control",
    params=VacParams,
    presets=_PRESETS,
    build=lambda p: Vac(p),
    golden="golden.rdxe",
    testbench="cocotb_tests.rdxe.tb",
    timing=_vac_timing,
    size=_vac_size,
    synth=SynthSettings(),
    # On a board the VAC has its ring's source in front (credits) and takes an RC factor only
    # after its operation began, as the vector engine gives it (docs/board.md).
    board=lambda p: VacRing(p),
))


@dataclass(frozen=True)
class DxtParams(BlockParams, DxtConfig):
    """The fields of :class:`hdl.rdxe.DxtConfig` (the VAC's and the tile's), checked by it.
    ``ppu_depth`` None means ``wmem_depth`` (resolved when the parameters are made)."""


_DXT_PRESETS = {
    # The fewest VACs (4, a GBUS word's worth) of 4 lanes, d = 16 (4 key rows, 4 value rows), 16
    # tokens: Q.K^T, P.V and filling the cache take a few hundred cycles; 8 credits, short
    # enough to run out on fused operations that park several accumulators per VAC.
    "small": DxtParams(lanes=4, vacs=4, wmem_depth=160, ppu_depth=64, kv_rows=32,
                       queue_depth=8, head_dim=16, max_inputs=64),
    # The largest tile that fits the largest ECP5 (LFE5U-85F, 156 MULT18X18D): 4 VACs of 4 lanes
    # use 40 of them (16 lanes, 4 for each PPU's 32 x 32, 2 for each RCU's 32 x 19 with its
    # narrow pieces in logic), the VE the rest (per lane: the bf16 x fp32 multiply 2, exp2 1;
    # the activation requantizer's 127 x a subtraction, the normalizer's INT8 products in
    # logic; the RMSNorm/softmax factor path ~36). 4 VACs of 8 lanes needed 175 before these
    # moves (measured). d = 64 and 2048 cache rows: 256 tokens per KV group.
    "default": DxtParams(lanes=4, vacs=4, kv_rows=2048, head_dim=64, max_inputs=4096),
    # The paper's DXT: 16 VACs of 16 multipliers (Sec. III), d = 64; 1024 cache rows hold the MT5
    # evaluation's 960 + 64 tokens (2048 per group). Generated and linted, not synthesized: it
    # needs about 500 DSP multipliers.
    "paper": DxtParams(lanes=16, vacs=16, kv_rows=1024, head_dim=64, max_inputs=4096),
}

register(Block(
    name="rdxe-dxt",
    family="rdxe",
    summary="rDXE decoder execution tile: N VACs on HLINK, VRC vector engine (fused and "
            "sequential RMSNorm-GEMV and softmax-P.V), iWuR KV cache with GQA, GBUS",
    params=DxtParams,
    presets=_DXT_PRESETS,
    build=lambda p: Dxt(p),
    golden="golden.rdxe",
    testbench="cocotb_tests.rdxe.dxt_tb",
    timing=_dxt_timing,
    size=_dxt_size,
    synth=SynthSettings(presets=("default",)),
))
