"""Registry entries of the KVNAND in-flash PE with its page pipeline (``inflash``) and of one
plane's logic, the PE and the KV page writer on one flash port (``inflash-unit``) (issue 6)."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.inflash import FlashGeometry, InflashPE
from hdl.inflash.unit import InflashUnit

from ..params import BlockParams
from ..registry import Block, StreamTiming, SynthSettings, register


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
    """The PE's parameters and ``kv_slots``, the pages of the KV page writer's buffer
    (checked by :class:`hdl.inflash.spec.WriterConfig`)."""

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
    synth=SynthSettings(targets=(), skip_reason="the PE's area and Fmax are the inflash "
                        "entry's; the unit adds the KV page writer's buffer"),
))
