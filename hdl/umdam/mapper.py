"""UMDAM address mapper (physical address to DRAM coordinates) and its inverse, the composer."""

from __future__ import annotations

from typing import Sequence

from amaranth import Cat, Const, Module, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import stream_stage
from ..validate import integer, one_of
from .geometry import COORDINATES, AddressMapping, DramGeometry

__all__ = ["coordinate_layout", "map_fields", "compose_fields", "AddressMapper", "AddressComposer",
           "MAX_MAPPINGS"]

#: Most mappings one mapper or composer can compile in.
MAX_MAPPINGS = 16


def coordinate_layout(geometry: DramGeometry, *, error: bool = False) -> data.StructLayout:
    """Return the layout of a DRAM coordinate tuple (zero-width coordinates left out)."""
    fields = {name: width for name, width in geometry.coordinate_widths.items() if width}
    if error:
        fields["error"] = 1
    return data.StructLayout(fields)


def map_fields(mapping: AddressMapping, address: Value) -> dict[str, Value]:
    """Return the coordinates of ``address`` under ``mapping`` (wiring and XOR gates only)."""
    widths = mapping.geometry.widths
    raw = {f.name: address[f.lsb:f.lsb + f.width] for f in mapping.fields}
    row = raw.get("row", Const(0, 1))
    coords = {}
    for f in mapping.fields:
        coords[f.name] = raw[f.name] ^ row[:f.width] if f.xor_row else raw[f.name]
    if "colM" in coords or "colL" in coords:
        col_l = coords.pop("colL", Const(0, 0))
        col_m = coords.pop("colM", Const(0, 0))
        coords["col"] = Cat(col_l, col_m)
    return {name: coords[name] for name in COORDINATES if widths[name]}


def compose_fields(mapping: AddressMapping, coords: dict[str, Value]) -> Value:
    """Return the physical address of ``coords`` under ``mapping``: the inverse of map_fields."""
    widths = mapping.geometry.widths
    col = coords.get("col", Const(0, 0))
    split = dict(coords, colL=col[:widths["colL"]], colM=col[widths["colL"]:])
    row = coords.get("row", Const(0, 1))
    parts = []
    for f in reversed(mapping.fields):          # Cat takes the LSB first
        value = split[f.name]
        parts.append(value ^ row[:f.width] if f.xor_row else value)
    return Cat(*parts)


def _check_mappings(mappings) -> tuple[AddressMapping, ...]:
    if isinstance(mappings, AddressMapping):
        mappings = (mappings,)
    mappings = tuple(mappings)
    if not all(isinstance(mp, AddressMapping) for mp in mappings):
        raise TypeError(f"Mappings must be AddressMapping objects, not {mappings!r}")
    integer(len(mappings), "Mapping count", 1, MAX_MAPPINGS)
    geometry = mappings[0].geometry
    for index, mp in enumerate(mappings[1:], 1):
        if mp.geometry != geometry:
            differ = ", ".join(f"{k} {getattr(mp.geometry, k)} vs {getattr(geometry, k)}"
                               for k in geometry.__dataclass_fields__
                               if getattr(mp.geometry, k) != getattr(geometry, k))
            raise ValueError(f"All mappings must share one geometry; mapping {index} "
                             f"({mp.name!r}) differs from mapping 0 ({mappings[0].name!r}) in "
                             f"{differ}")
    return mappings


def _select_bits(count: int) -> int:
    return (count - 1).bit_length()


def _check_latency(latency):
    return one_of(latency, "Latency (0: combinational, 1: registered)", (0, 1))


class _Selectable(wiring.Component):
    """Shared plumbing of the mapper and composer: mapping table, select field and pipeline."""

    def __init__(self, mappings, latency, in_fields, out_fields):
        self._mappings = _check_mappings(mappings)
        self._latency = _check_latency(latency)
        count = len(self._mappings)
        self._sel_bits = _select_bits(count)
        self._has_error = count != 1 << self._sel_bits
        if self._sel_bits:
            in_fields = dict(in_fields, mapping=self._sel_bits)
        if self._has_error:
            out_fields = dict(out_fields, error=1)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout(in_fields))),
            "o": Out(stream.Signature(data.StructLayout(out_fields))),
        })

    @property
    def mappings(self) -> tuple[AddressMapping, ...]:
        return self._mappings

    @property
    def geometry(self) -> DramGeometry:
        return self._mappings[0].geometry

    @property
    def latency(self) -> int:
        return self._latency

    def elaborate(self, platform):
        m = Module()
        result = Signal(self.o.payload.shape())
        if self._sel_bits == 0:
            self._compute(m, self._mappings[0], self.i.payload, result)
        else:
            with m.Switch(self.i.payload.mapping):
                for index, mapping in enumerate(self._mappings):
                    with m.Case(index):
                        self._compute(m, mapping, self.i.payload, result)
                if self._has_error:
                    with m.Default():
                        m.d.comb += result.error.eq(1)
        stream_stage(m, self.i, self.o, result, registered=self._latency == 1)
        return m


class AddressMapper(_Selectable):
    """Map a stream of physical addresses to DRAM coordinates.

    Parameters
    ----------
    mappings : AddressMapping or sequence of AddressMapping
        The mappings compiled in, all for one geometry. With more than one, each request selects
        its mapping by index.
    latency : int
        1 (default): registered output. 0: combinational.

    Members
    -------
    i : In(stream.Signature(StructLayout({"addr": address_bits, "mapping": ceil(log2(n))})))
        Physical addresses; ``mapping`` is present only with more than one mapping.
    o : Out(stream.Signature(StructLayout({coordinate: width, ..., "error": 1})))
        Coordinates ``channel rank bankgroup bank row col offset`` (zero-width ones left out).
        ``error`` is present only when the mapping count is not a power of two: a select value
        with no mapping gives ``error = 1`` and all-zero coordinates.

    Latency ``latency`` cycles; one address per cycle; back-pressure honoured. A single mapping
    costs no logic beyond the output register (bit-field extraction is wiring; an XOR hash costs one
    XOR per hashed bit). Run-time selection costs one multiplexer per coordinate bit that differs
    between the mappings.
    """

    def __init__(self, mappings: AddressMapping | Sequence[AddressMapping], *, latency: int = 1):
        mappings = _check_mappings(mappings)
        super().__init__(mappings, latency, {"addr": mappings[0].address_bits},
                         coordinate_layout(mappings[0].geometry).members)

    def _compute(self, m, mapping, payload, result):
        for name, value in map_fields(mapping, payload.addr).items():
            m.d.comb += result[name].eq(value)


class AddressComposer(_Selectable):
    """Compose physical addresses from a stream of DRAM coordinates: the mapper's inverse.

    Parameters
    ----------
    mappings : AddressMapping or sequence of AddressMapping
    latency : int
        1 (default) or 0.

    Members
    -------
    i : In(stream.Signature(StructLayout({coordinate: width, ..., "mapping": ceil(log2(n))})))
    o : Out(stream.Signature(StructLayout({"addr": address_bits, "error": 1})))
        ``error`` only when the mapping count is not a power of two (as for the mapper); a select
        value with no mapping gives ``error = 1`` and ``addr = 0``.
    """

    def __init__(self, mappings: AddressMapping | Sequence[AddressMapping], *, latency: int = 1):
        mappings = _check_mappings(mappings)
        super().__init__(mappings, latency, coordinate_layout(mappings[0].geometry).members,
                         {"addr": mappings[0].address_bits})

    def _compute(self, m, mapping, payload, result):
        coords = {name: payload[name] for name in coordinate_layout(self.geometry).members}
        m.d.comb += result.addr.eq(compose_fields(mapping, coords))
