"""DRAM geometry and address-mapping descriptions shared by the UMDAM RTL and its golden model.

These are validated, immutable descriptions (pure Python, no hardware). The RTL generators in
:mod:`hdl.umdam` and the NumPy model in :mod:`golden.umdam` both take them as parameters; each
computes the mapping on its own.

Coordinates
-----------
A DRAM location is the tuple ``(channel, rank, bankgroup, bank, row, col, offset)``:

* ``col`` counts bursts within a row (``columns`` of them, so a row holds ``columns * burst_bytes``
  bytes), following the UMDAM paper's LPDDR5 example: 2 KB row / 32 B burst = 64 columns, 6 bits.
* ``offset`` is the byte within a burst.
* ``col`` is split for the UMDAM mapping into ``colM`` (high bits) and ``colL`` (low bits); ``colL``
  has ``log2(interleave_bytes / burst_bytes)`` bits so that ``colL`` and ``offset`` together span one
  interleave block (paper Section III-A: 256 B interleave, 32 B burst gives a 3-bit ``colL``).

Mapping specification
---------------------
A mapping is written as its fields from MSB to LSB joined by ``-``, for example
``row-colM-bank-rank-channel-colL-offset``. Field names: ``row``, ``col`` (or the pair ``colM`` and
``colL``), ``bankgroup``, ``bank``, ``rank``, ``channel``, ``offset``. A field may carry its width as
``name:W``, which is then checked against the geometry. A field of zero width (one rank, say) may be
left out. ``bank^row`` (likewise ``channel``, ``rank``, ``bankgroup``) XOR-hashes that field with the
low bits of the row field (permutation-based interleaving); the mapping stays a bijection because
the row bits are unchanged. Named mappings: ``umdam`` (the paper's, bank groups directly above
the bank), ``robaracoch`` (Ramulator 2's RoBaRaCoCh: ``row-bank-bankgroup-rank-col-channel``, the
bank above the bank group as Ramulator's linear mapper takes its levels), ``rocobaracho`` (the
paper's NPU baseline ``row-col-bank-rank-channel``, bank groups above the bank) and ``ianus``
(Ramulator 2's ChRaBaRoCo: channel bits highest). docs/umdam.md gives each in Ramulator 2's and
DRAMsim3's notation.

Datasheet columns: DRAM datasheets, Ramulator and DRAMsim3 count a row's columns in device-width
units; ``columns`` here counts bursts. :meth:`DramGeometry.from_datasheet` converts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..validate import power_of_two

__all__ = [
    "COORDINATES", "DramGeometry", "MappedField", "AddressMapping", "NAMED_MAPPINGS",
]

#: DRAM coordinate names, in the order they appear in coordinate layouts.
COORDINATES = ("channel", "rank", "bankgroup", "bank", "row", "col", "offset")

#: Names allowed in a mapping specification.
_FIELD_NAMES = ("row", "col", "colM", "colL", "bankgroup", "bank", "rank", "channel", "offset")

#: Fields that may be XOR-hashed with the row bits.
_HASHABLE = ("channel", "rank", "bankgroup", "bank")

NAMED_MAPPINGS = {
    "umdam": "row-colM-bankgroup-bank-rank-channel-colL-offset",
    "robaracoch": "row-bank-bankgroup-rank-col-channel-offset",
    "rocobaracho": "row-col-bankgroup-bank-rank-channel-offset",
    "ianus": "channel-rank-bankgroup-bank-row-col-offset",
}


@dataclass(frozen=True)
class DramGeometry:
    """Describe a DRAM system's organization; every count is a power of two.

    Parameters
    ----------
    channels, ranks, bankgroups, banks : int
        Channels (1 to 64), ranks per channel (1 to 8), bank groups per rank (1 to 16), banks per
        bank group (1 to 64); each a power of two, as every count below.
    rows : int
        Rows per bank, 1 to 2**20.
    columns : int
        Burst-sized columns per row (row size = ``columns * burst_bytes``), 1 to 4096.
    burst_bytes : int
        Bytes moved by one burst (one column access), 1 to 1024.
    interleave_bytes : int
        Interleaving granularity: consecutive blocks of this size go to different channels
        (and banks) under the UMDAM mapping. Between ``burst_bytes`` and the row size (at most
        2**22).

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.
    """

    channels: int
    ranks: int
    bankgroups: int
    banks: int
    rows: int
    columns: int
    burst_bytes: int
    interleave_bytes: int

    def __post_init__(self):
        power_of_two(self.channels, "Channel count", maximum=64)
        power_of_two(self.ranks, "Rank count", maximum=8)
        power_of_two(self.bankgroups, "Bank group count", maximum=16)
        power_of_two(self.banks, "Bank count (per bank group)", maximum=64)
        power_of_two(self.rows, "Row count", maximum=1 << 20)
        power_of_two(self.columns, "Column count", maximum=1 << 12)
        power_of_two(self.burst_bytes, "Burst size in bytes", maximum=1 << 10)
        power_of_two(self.interleave_bytes, "Interleave size in bytes", maximum=1 << 22)
        if not self.burst_bytes <= self.interleave_bytes <= self.row_bytes:
            raise ValueError(
                f"Interleave size must be between the burst size ({self.burst_bytes} B) and the "
                f"row size ({self.row_bytes} B), not {self.interleave_bytes} B")

    @classmethod
    def from_datasheet(cls, *, channels: int, ranks: int, bankgroups: int, banks: int, rows: int,
                       columns: int, bus_bits: int, burst_length: int,
                       interleave_bytes: int | None = None) -> "DramGeometry":
        """The geometry of a part described as its datasheet (and Ramulator, DRAMsim3) do.

        ``columns`` counts device-width columns per row (1024 for a DDR4 x8 8 Gb die);
        ``bus_bits`` is the channel's data width (64 for a DIMM rank), ``burst_length`` its
        BL (8 for DDR4). A burst then moves ``bus_bits * burst_length / 8`` bytes, and a row
        holds ``columns / burst_length`` bursts (DRAMsim3's ``actual_col_bits``, Ramulator's
        column bits less the prefetch). ``interleave_bytes`` defaults to one burst.
        """
        power_of_two(burst_length, "Burst length (BL)", maximum=64)
        power_of_two(bus_bits, "Channel data width in bits", minimum=8, maximum=1024)
        power_of_two(columns, "Datasheet column count", maximum=1 << 16)
        if columns < burst_length:
            raise ValueError(f"Datasheet column count must be at least the burst length "
                             f"({burst_length}), not {columns}")
        burst_bytes = bus_bits * burst_length // 8
        return cls(channels=channels, ranks=ranks, bankgroups=bankgroups, banks=banks,
                   rows=rows, columns=columns // burst_length, burst_bytes=burst_bytes,
                   interleave_bytes=burst_bytes if interleave_bytes is None
                   else interleave_bytes)

    @classmethod
    def lpddr5(cls) -> "DramGeometry":
        """LPDDR5 x16 of the UMDAM paper's Table I.

        4 channels, 1 rank, 16 banks per channel (16-bank mode, no bank groups), 2 KB rows,
        32 B bursts, 256 B interleave. The paper gives no row count; 65536 rows per bank is a
        16 Gb x16 LPDDR5 die, 2 GiB per channel, 8 GiB and 33 address bits in all.
        """
        return cls(channels=4, ranks=1, bankgroups=1, banks=16, rows=65536, columns=64,
                   burst_bytes=32, interleave_bytes=256)

    @property
    def row_bytes(self) -> int:
        """Bytes in one row (page)."""
        return self.columns * self.burst_bytes

    @property
    def widths(self) -> dict[str, int]:
        """Bit width of every mapping field name (``col`` and its ``colM``/``colL`` split)."""
        col = self.columns.bit_length() - 1
        col_l = (self.interleave_bytes // self.burst_bytes).bit_length() - 1
        return {
            "channel": self.channels.bit_length() - 1,
            "rank": self.ranks.bit_length() - 1,
            "bankgroup": self.bankgroups.bit_length() - 1,
            "bank": self.banks.bit_length() - 1,
            "row": self.rows.bit_length() - 1,
            "col": col,
            "colM": col - col_l,
            "colL": col_l,
            "offset": self.burst_bytes.bit_length() - 1,
        }

    @property
    def coordinate_widths(self) -> dict[str, int]:
        """Bit width of every coordinate, in :data:`COORDINATES` order."""
        w = self.widths
        return {name: w[name] for name in COORDINATES}

    @property
    def address_bits(self) -> int:
        """Width of a physical address covering the whole memory."""
        return sum(self.coordinate_widths.values())

    @property
    def capacity_bytes(self) -> int:
        return 1 << self.address_bits

    @property
    def bank_count(self) -> int:
        """Banks in the whole system (channels x ranks x bank groups x banks)."""
        return self.channels * self.ranks * self.bankgroups * self.banks


@dataclass(frozen=True)
class MappedField:
    """One field of an address mapping: ``width`` address bits starting at bit ``lsb``."""

    name: str
    width: int
    lsb: int
    xor_row: bool = False


_TOKEN = re.compile(r"^(?P<name>[A-Za-z]+)(?::(?P<width>\d+))?(?P<xor>\^row)?$")


@dataclass(frozen=True)
class AddressMapping:
    """Parse and validate an address mapping (field order from MSB to LSB) for a geometry.

    Parameters
    ----------
    spec : str
        A named mapping (``umdam``, ``robaracoch``, ``rocobaracho``, ``ianus``) or a field order such
        as ``row-colM-bank-rank-channel-colL-offset``; see the module documentation.
    geometry : DramGeometry

    Members
    -------
    name : str
        The name given, or the field order.
    fields : tuple of MappedField
        From MSB to LSB; zero-width fields are dropped.

    Raises
    ------
    ValueError
        For an unknown, missing, repeated or mis-sized field, or a hash the mapping cannot invert.
    """

    spec: str
    geometry: DramGeometry
    name: str = field(init=False)
    order: str = field(init=False)
    fields: tuple[MappedField, ...] = field(init=False)

    def __post_init__(self):
        if not isinstance(self.spec, str):
            raise TypeError(f"Address mapping must be a string, not {self.spec!r}")
        if not self.spec.strip():
            raise ValueError(f"Address mapping must name a mapping ({', '.join(NAMED_MAPPINGS)}) "
                             f"or list fields from MSB to LSB, not {self.spec!r}")
        if not isinstance(self.geometry, DramGeometry):
            raise TypeError(f"Geometry must be a DramGeometry, not {self.geometry!r}")
        spec = self.spec.strip()
        order = NAMED_MAPPINGS.get(spec.lower(), spec)
        widths = self.geometry.widths
        tokens = order.split("-")
        seen: list[str] = []
        parsed = []
        for token in tokens:
            if not token.strip():
                raise ValueError(f"Address mapping {spec!r}: empty field (two '-' in a row, or a "
                                 f"'-' at either end)")
            match = _TOKEN.match(token.strip())
            if match is None or match["name"] not in _FIELD_NAMES:
                raise ValueError(
                    f"Address mapping {spec!r}: unknown field {token.strip()!r}; fields are "
                    f"{', '.join(_FIELD_NAMES)} (optionally 'name:width', and 'name^row' to "
                    f"XOR-hash {', '.join(_HASHABLE)} with the row bits), or one of the named "
                    f"mappings {', '.join(NAMED_MAPPINGS)}")
            name = match["name"]
            if name in seen:
                raise ValueError(f"Address mapping {spec!r}: field {name!r} appears more than once")
            seen.append(name)
            if match["width"] is not None and int(match["width"]) != widths[name]:
                raise ValueError(
                    f"Address mapping {spec!r}: field {name!r} is given {match['width']} bits but "
                    f"the geometry needs {widths[name]}")
            xor = match["xor"] is not None
            if xor and name not in _HASHABLE:
                raise ValueError(
                    f"Address mapping {spec!r}: only {', '.join(_HASHABLE)} can be XOR-hashed "
                    f"with the row bits, not {name!r}")
            parsed.append((name, widths[name], xor))
        if "col" in seen and ("colM" in seen or "colL" in seen):
            raise ValueError(f"Address mapping {spec!r}: give either 'col' or the pair 'colM' and "
                             f"'colL', not both")
        column_fields = ("col",) if ("col" in seen or
                                      not ("colM" in seen or "colL" in seen)) else ("colM", "colL")
        required = [n for n in ("row", *column_fields, "bankgroup", "bank", "rank", "channel",
                                "offset") if widths[n] > 0]
        missing = [n for n in required if n not in seen]
        if missing:
            raise ValueError(f"Address mapping {spec!r}: missing field(s) {', '.join(missing)}; "
                             f"every field wider than zero bits must appear once")
        fields = []
        lsb = 0
        for name, width, xor in reversed(parsed):
            if width:
                fields.append(MappedField(name, width, lsb, xor))
            lsb += width
        object.__setattr__(self, "name", spec)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "fields", tuple(reversed(fields)))

    @property
    def address_bits(self) -> int:
        return self.geometry.address_bits

    def field(self, name: str) -> MappedField | None:
        """Return the field called ``name``, or ``None`` if it has zero width."""
        for f in self.fields:
            if f.name == name:
                return f
        return None

    def __str__(self):
        return self.name
