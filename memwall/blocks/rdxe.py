"""Registry entry of the rDXE vector-accumulate core (issue 5, first increment: the VAC)."""

from __future__ import annotations

from dataclasses import dataclass

from hdl.rdxe import Vac, VacConfig

from ..params import BlockParams
from ..registry import Block, SynthSettings, register


@dataclass(frozen=True)
class VacParams(BlockParams):
    """Lanes, WMEM and PPU table depths, PPU multiplier width, clamp, RC factor width, KV-cache
    rows, result queue depth and operand register stages of one VAC: the fields of
    :class:`hdl.rdxe.VacConfig`.

    Checked by :class:`hdl.rdxe.VacConfig` (the registry builds the component); ``ppu_depth`` None
    means ``wmem_depth``.
    """

    lanes: int = 16
    wmem_depth: int = 1024
    ppu_depth: int | None = None
    mult_bits: int = 32
    clamp: str = "symmetric"
    rc_bits: int = 25
    kv_rows: int = 512
    queue_depth: int = 32
    operand_stages: int = 4

    def config(self) -> VacConfig:
        return VacConfig(**{name: getattr(self, name) for name in VacParams.names()})


_PRESETS = {
    # 4 lanes, 64 WMEM rows (256 B), 16 PPU entries, 4 credits: GEMVs of a few chunks per output
    # fit several at a time, and 4 credits cover a credit's round trip (16 cycles for a one-chunk
    # output) only for outputs of 5 chunks or more, so the source runs out of credits whenever
    # outputs are short: the flow control is exercised.
    "small": VacParams(lanes=4, wmem_depth=64, ppu_depth=16, kv_rows=32, queue_depth=4),
    # VacConfig's defaults: 16 lanes, 16 KB WMEM, 32 credits (more than one ring trip, so
    # one-chunk outputs run at full rate), 4 operand stages.
    "default": VacParams(),
    # The paper's VAC has 16 multipliers (Sec. III); it gives no WMEM size, only 4096 kB of
    # on-chip memory per DXE in all (Table I: 32 KB per VAC if WMEM, KV cache, token buffer and
    # rr-SRAM were spread evenly over its 128 VACs). The golden default, 16 KB, is kept.
    "paper": VacParams(lanes=16, wmem_depth=1024),
}

register(Block(
    name="rdxe-vac",
    family="rdxe",
    summary="rDXE vector-accumulate core: INT8 lane tree into INT32, WMEM, HLINK forwarding, "
            "PPU and fused RCU, credit flow control",
    params=VacParams,
    presets=_PRESETS,
    build=lambda p: Vac(p.config()),
    golden="golden.rdxe",
    testbench="cocotb_tests.rdxe.tb",
    synth=SynthSettings(),
))
