"""Registry entries of the UMDAM address remapper, its inverse and the tile address generator."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hdl.umdam import (AddressComposer, AddressMapper, AddressMapping, DramGeometry,
                       TileAddressGenerator)

from ..params import BlockParams
from ..registry import Block, Size, StreamTiming, SynthSettings, pipelined, register

_LPDDR5 = DramGeometry.lpddr5()
_LPDDR5_FIELDS = dataclasses.asdict(_LPDDR5)
#: A 12-bit toy geometry: small enough to check every address exhaustively in simulation.
_TOY = dict(channels=2, ranks=1, bankgroups=1, banks=4, rows=16, columns=8, burst_bytes=4,
            interleave_bytes=8)


@dataclass(frozen=True)
class DramParams(BlockParams):
    """DRAM geometry (see :class:`hdl.umdam.DramGeometry`); LPDDR5 of the paper's Table I."""

    channels: int = _LPDDR5.channels
    ranks: int = _LPDDR5.ranks
    bankgroups: int = _LPDDR5.bankgroups
    banks: int = _LPDDR5.banks
    rows: int = _LPDDR5.rows
    columns: int = _LPDDR5.columns
    burst_bytes: int = _LPDDR5.burst_bytes
    interleave_bytes: int = _LPDDR5.interleave_bytes

    def __post_init__(self):
        self.geometry  # validates

    @property
    def geometry(self) -> DramGeometry:
        return DramGeometry(self.channels, self.ranks, self.bankgroups, self.banks, self.rows,
                            self.columns, self.burst_bytes, self.interleave_bytes)


@dataclass(frozen=True)
class MapperParams(DramParams):
    """Geometry plus the mappings compiled in (selected per request) and the output latency of
    :class:`AddressMapper` and :class:`AddressComposer`.

    Parameters
    ----------
    mappings : tuple of str
        The mappings compiled in, comma-separated: each a named one (``umdam``, ``robaracoch``,
        ``rocobaracho``, ``ianus``; docs/umdam.md) or a field order. With more than one, each
        request selects its mapping by index.
    """

    mappings: tuple[str, ...] = ("umdam",)
    latency: int = 1

    @property
    def address_mappings(self) -> tuple[AddressMapping, ...]:
        geometry = self.geometry
        return tuple(AddressMapping(spec, geometry) for spec in self.mappings)


@dataclass(frozen=True)
class TileParams(DramParams):
    """Geometry, the mapping that composes addresses, element size and the largest matrix, of
    :class:`TileAddressGenerator`."""

    mapping: str = "umdam"
    elem_bytes: int = 2
    max_rows: int = 4096
    max_cols: int = 4096

    @property
    def address_mapping(self) -> AddressMapping:
        return AddressMapping(self.mapping, self.geometry)


_MAPPER_PRESETS = {
    "small": MapperParams(**_TOY, mappings=("umdam", "robaracoch", "ianus")),
    "default": MapperParams(**_LPDDR5_FIELDS, mappings=("umdam",)),
    "paper": MapperParams(**_LPDDR5_FIELDS,
                          mappings=("umdam", "rocobaracho", "robaracoch", "ianus")),
}

def _tilegen_timing(params, component) -> dict[str, StreamTiming]:
    walk = "golden.umdam.walk (the addresses of one command, in order)"
    return {"cmd": StreamTiming(model=walk, note="one command per matrix walk"),
            "o": StreamTiming(after="cmd", latency=component.command_latency, throughput=1.0,
                              model=walk, note="latency: a command to its first address; then "
                              "one address a cycle")}

register(Block(
    name="umdam",
    family="umdam",
    summary="UMDAM address mapper: physical address -> DRAM coordinates, run-time mapping select",
    params=MapperParams,
    presets=_MAPPER_PRESETS,
    build=lambda p: AddressMapper(p.address_mappings, latency=p.latency),
    golden="golden.umdam",
    testbench="cocotb_tests.umdam_tb",
    timing=lambda p, c: pipelined(p.latency),
    # A mapping is wiring: the output register and its handshake are the cells (none unlatched).
    size=lambda p: Size(storage_bits=0, multipliers=0, cells=6 * p.latency),
))

register(Block(
    name="umdam-composer",
    family="umdam",
    summary="UMDAM address composer: DRAM coordinates -> physical address (mapper inverse)",
    params=MapperParams,
    presets=_MAPPER_PRESETS,
    build=lambda p: AddressComposer(p.address_mappings, latency=p.latency),
    golden="golden.umdam",
    testbench="cocotb_tests.umdam_tb",
    timing=lambda p, c: pipelined(p.latency),
    size=lambda p: Size(storage_bits=0, multipliers=0, cells=6 * p.latency),
))

register(Block(
    name="umdam-tilegen",
    family="umdam",
    summary="UMDAM tile address generator: Algorithm 1 layout walked in NPU or PIM order",
    params=TileParams,
    presets={
        "small": TileParams(**_TOY, mapping="umdam", elem_bytes=2, max_rows=40, max_cols=40),
        "default": TileParams(**_LPDDR5_FIELDS, mapping="umdam", elem_bytes=2,
                              max_rows=4096, max_cols=4096),
        # OPT-30B (paper Table II): FFN weights are 7168 x 28672 FP16 values.
        "paper": TileParams(**_LPDDR5_FIELDS, mapping="umdam", elem_bytes=2,
                            max_rows=28672, max_cols=28672),
    },
    build=lambda p: TileAddressGenerator(p.address_mapping, elem_bytes=p.elem_bytes,
                                         max_rows=p.max_rows, max_cols=p.max_cols),
    golden="golden.umdam",
    testbench="cocotb_tests.umdam_tb",
    timing=_tilegen_timing,
    # The walk's counters, its address arithmetic and one multiply (row x column stride): their
    # widths follow the geometry, their number does not.
    size=lambda p: Size(storage_bits=0, multipliers=1, cells=120),
))
