"""UMDAM: unified data layout and DRAM address mapping for NPU-PIM (address remapper, layout walker)."""

from .geometry import COORDINATES, NAMED_MAPPINGS, AddressMapping, DramGeometry, MappedField
from .mapper import AddressComposer, AddressMapper, coordinate_layout, compose_fields, map_fields
from .tilegen import TileAddressGenerator, WalkOrder

__all__ = [
    "COORDINATES", "NAMED_MAPPINGS", "AddressMapping", "DramGeometry", "MappedField",
    "AddressComposer", "AddressMapper", "coordinate_layout", "compose_fields", "map_fields",
    "TileAddressGenerator", "WalkOrder",
]
