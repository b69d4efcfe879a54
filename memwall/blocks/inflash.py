"""Registry entries of the KVNAND in-flash PE with its page pipeline (``inflash``) and of one
plane's logic, the PE and the KV page writer on one flash port (``inflash-unit``) (issue 6)."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.arith.tree import tree_levels
from hdl.inflash import FlashGeometry, InflashPE
from hdl.inflash.issuer import Issuer
from hdl.inflash.reader import _READS_IN_FLIGHT
from hdl.inflash.spec import PEConfig, WriterConfig, y_layout
from hdl.inflash.unit import InflashUnit

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, SynthSettings, register
from . import units


@dataclass(frozen=True)
class InflashParams(BlockParams):
    """The plane (``hdl.inflash.spec.FlashGeometry``), the largest GEMV shape, the w4a16 group.

    Checked by :class:`hdl.inflash.spec.FlashGeometry` and :class:`hdl.inflash.spec.PEConfig`
    (the registry builds the component). ``tR_us``, ``tP_us`` and ``clk_mhz`` are the plane's:
    the RTL does not use them, the testbench's flash plane does (through ``busy_cycles``).
    """

    page_bytes: int = 4096
    transfer_bytes: int = 4
    fmacs: int = 2
    tR_us: float = 4.0
    tP_us: float = 75.0
    clk_mhz: float = 400.0
    pages_per_block: int = 768
    blocks: int = 177
    max_rows: int = 4096
    max_cols: int = 4096
    group_size: int = 128

    def geometry(self) -> FlashGeometry:
        return FlashGeometry(page_bytes=self.page_bytes, tR_us=self.tR_us, tP_us=self.tP_us,
                             transfer_bytes=self.transfer_bytes, clk_mhz=self.clk_mhz,
                             fmacs=self.fmacs, pages_per_block=self.pages_per_block,
                             blocks=self.blocks)


@dataclass(frozen=True)
class InflashUnitParams(InflashParams):
    """The PE's parameters and the KV page writer's (checked by
    :class:`hdl.inflash.spec.WriterConfig`).

    Parameters
    ----------
    kv_slots : int
        Pages of the KV page writer's buffer (``WriterConfig``'s ``slots``), 1 to 4096. Paper
        (Table I): 8 KB per plane, two 4 KB pages.
    """

    kv_slots: int = 2


_PRESETS = {
    # 64-byte pages (32 fp16 elements, 16 beats at F = 2, 16 transfers), tR = 40 cycles:
    # read-bound like the paper's plane, a few hundred cycles per GEMV; 8 blocks of 8 pages.
    # tP = 0.5 us (200 cycles, 5 tR) keeps page programs short in the tests.
    "small": InflashParams(page_bytes=64, tR_us=0.1, tP_us=0.5, pages_per_block=8, blocks=8,
                           max_rows=64, max_cols=64, group_size=16),
    # Table I of the paper with 2 FMACs (MHA sizing), rows and columns up to LLaMA-7B's 4096.
    "default": InflashParams(),
    # Table I: 16 FMACs (the GQA sizing).
    "paper": InflashParams(fmacs=16),
}

#: The PE's cycle model: a GEMV's page schedule (tR, transfer, compute per page).
_SCHEDULE = "golden.inflash.gemv_timing (a GEMV's page schedule); docs/inflash.md, sections 3 and 4"


def _pe_timing(params, component) -> dict[str, StreamTiming]:
    return {"cmd": StreamTiming(model=_SCHEDULE, note="one command per GEMV or attention pass"),
            "x": StreamTiming(model=_SCHEDULE, note="the command's activation beats"),
            "rd_cmd": StreamTiming(after="cmd", model=_SCHEDULE,
                                   note="one read per page, as the data register frees"),
            "rd_data": StreamTiming(throughput=1.0, model=_SCHEDULE,
                                    note="one word of transfer_bytes a cycle at most"),
            "y": StreamTiming(after="rd_data", latency=component.latency, model=_SCHEDULE,
                              note="latency: a float GEMV's last page word to its last result "
                              "(pe_latency), no back-pressure")}


def _unit_timing(params, component) -> dict[str, StreamTiming]:
    pe = _pe_timing(params, component.pe)
    write = "golden.inflash.kv_write (records, programs); docs/inflash.md, section 6"
    return {"cmd": pe["cmd"], "x": pe["x"], "y": pe["y"], "rd_data": pe["rd_data"],
            "kv_cmd": StreamTiming(model=write, note="one command per KV sequence"),
            "kv": StreamTiming(model=write, note="the entries' words"),
            "kv_table": StreamTiming(after="kv", model=write, note="one record per page "
                                     "programmed"),
            "kv_status": StreamTiming(after="kv", model=write, note="one, after the last "
                                      "record"),
            "fl_cmd": StreamTiming(after="cmd", model=_SCHEDULE,
                                   note="the PE's reads and the writer's programs on one port"),
            "pg_data": StreamTiming(after="kv", throughput=1.0, model=write,
                                    note="page_bytes / transfer_bytes words after each program")}

#: Register stages of the units at the defaults the PE builds them with (their latencies).
_ADD, _MUL = units.ADD_STAGES, units.MUL_STAGES
_DOT_MUL, _DOT_ADD = units.DOT_MUL_STAGES, units.DOT_ADD_STAGES
#: Cells of a FloatMAC's own wiring, besides its multiplier and adder.
_FMAC_CELLS = 5
#: Cells per serial-tree level besides its adder (hold, odd flag, valid and last delays) and
#: the PE's fixed control (setup, reader, issuer, queues): calibrated on the small and default
#: presets (5 and 11 beat-tree levels); per lane of the logic around the units (gearbox lanes,
#: x masks, IntDot lane, MAC operand muxes, int8 products, dot-latency delays): read off the
#: lane loops, checked at 4, 8 and 16 FMACs.
_LEVEL_CELLS, _LANE_CELLS, _PE_CONTROL = 30, 45, 1480


def _pe_size(p) -> Size:
    """What :class:`~hdl.inflash.pe.InflashPE` builds: its memories (read FIFO, x buffer, K/V
    ring, w4a16 header FIFO and group sums, Attend accumulators, output queue), its products
    (the FloatDot and FloatMAC lanes, the int8 lanes, the epilogue's two wide multipliers) and
    its cells (a sum over those units, the serial trees' levels and the control)."""
    cfg = PEConfig(geometry=p.geometry(), max_rows=p.max_rows, max_cols=p.max_cols,
                   group_size=p.group_size)
    F, W = cfg.fmacs, cfg.transfer_bytes
    # Serial trees: a row's beats (lanes), x beats per group and a row's groups (epilogue).
    row, xsum, groups = (tree_levels(cfg.max_beats), tree_levels(cfg.group_size // F),
                         tree_levels(cfg.max_groups))
    float_latency = Issuer.latency + _DOT_MUL + tree_levels(F) * _DOT_ADD + row * _ADD
    w4_latency = float_latency + _MUL + _ADD + groups * _ADD
    header_depth = float_latency // 2 + 2
    queue_depth = max(float_latency, w4_latency) + 4        # SyncFIFOBuffered: depth - 1 words
    storage = (W.bit_length() * _READS_IN_FLIGHT            # reader: the reads' tails
               + 16 * F * cfg.x_depth                       # x buffer
               + 16 * F * 2 * cfg.slot_beats                # K/V ring, two entries
               + 32 * header_depth                          # w4a16 header FIFO
               + 32 * cfg.max_groups                        # w4a16 group sums X
               + 32 * F * cfg.max_beats                     # Attend accumulators
               + y_layout(cfg).size * (queue_depth - 1))    # output queue
    multipliers = (2 * F                # fp16 and bf16 FloatDot lanes
                   + 2 * F              # fp16 and bf16 Attend FloatMACs
                   + F + F              # int8 IntDot lanes, int8 Attend products
                   + 2 * 4              # the epilogue's FloatMultiplier(FP16, FP32, FP32), 2x2
                   + 4 + 3)             # the setup's page-walk products; lane selects
    adders = (2 * (F - 1)               # the two FloatDot lane trees
              + row + xsum + groups     # one adder per serial-tree level
              + 1                       # the epilogue's s D + o X
              + 2 * F)                  # the Attend FloatMACs
    # Four fp16/bf16 multipliers a lane (dot products, MACs); the epilogue's two are FP32's.
    cells = (adders * units.FPADD_CELLS + 4 * F * units.FPMUL_CELLS + 2 * units.FPMUL_WIDE_CELLS
             + 2 * F * _FMAC_CELLS + (row + xsum + groups) * _LEVEL_CELLS
             + F * _LANE_CELLS + _PE_CONTROL)
    return Size(storage_bits=storage, multipliers=multipliers, cells=cells)


#: Cells of the KV writer's fixed control and of the unit's port arbiter (calibrated on the
#: small and default presets, both W = 4) and per byte of a word (the writer's byte loops:
#: rotation, byte enables; checked at W = 16).
_WRITER_CELLS, _WRITER_BYTE_CELLS, _UNIT_CELLS = 305, 25, 32


def _unit_size(p) -> Size:
    """The PE's :func:`_pe_size` plus the KV page writer: its two banks of page-buffer words,
    its per-slot metadata (the mapping table's fields), its two products (the region's entry
    limit), and the shared port's arbiter."""
    cfg = WriterConfig(geometry=p.geometry(), slots=p.kv_slots)
    W = cfg.transfer_bytes
    words = cfg.slots * (cfg.page_bytes // W)
    meta_bits = cfg.entry_count_bits + 2 * cfg.layout_bits + 1     # token, layer, kind, head
    pe = _pe_size(p)
    return Size(storage_bits=pe.storage_bits + 2 * 8 * W * max(1, (words + 1) // 2)
                + meta_bits * cfg.slots,
                multipliers=pe.multipliers + 2,
                cells=pe.cells + _WRITER_CELLS + W * _WRITER_BYTE_CELLS + _UNIT_CELLS)


register(Block(
    name="inflash",
    family="inflash",
    summary="KVNAND in-flash PE: page pipeline, gearbox, fp16/bf16/w8a8/w4a16 GEMV, Logit and "
            "Attend on KV pages",
    params=InflashParams,
    presets=_PRESETS,
    build=lambda p: InflashPE(geometry=p.geometry(), max_rows=p.max_rows, max_cols=p.max_cols,
                              group_size=p.group_size),
    golden="golden.inflash",
    testbench="cocotb_tests.inflash.tb",
    timing=_pe_timing,
    size=_pe_size,
    # Its handshakes fan out across the die: nextpnr's analytic placer keeps those nets shorter
    # when it weighs timing more (docs/inflash.md, timing closure, run w60).
    synth=SynthSettings(timing_weight=60),
))


def _unit(preset: InflashParams, kv_slots: int) -> InflashUnitParams:
    return InflashUnitParams(**{**preset.as_dict(), "kv_slots": kv_slots})


register(Block(
    name="inflash-unit",
    family="inflash",
    summary="KVNAND plane logic: the in-flash PE and the KV page writer (page-level mapping, "
            "flush, mapping table) on one flash port",
    params=InflashUnitParams,
    # small: 8 buffer pages, the S = 2 L H = 8 streams of the tests' layouts; default and
    # paper: Table I's 8 KB per plane, two 4 KB pages (one (layer, head)'s K and V streams).
    presets={"small": _unit(_PRESETS["small"], 8), "default": _unit(_PRESETS["default"], 2),
             "paper": _unit(_PRESETS["paper"], 2)},
    build=lambda p: InflashUnit(geometry=p.geometry(), max_rows=p.max_rows,
                                max_cols=p.max_cols, group_size=p.group_size,
                                kv_slots=p.kv_slots),
    golden="golden.inflash",
    testbench="cocotb_tests.inflash.tb",
    timing=_unit_timing,
    size=_unit_size,
    synth=SynthSettings(targets=(), skip_reason="the PE's area and Fmax are the inflash "
                        "entry's; the unit adds the KV page writer's buffer"),
))
