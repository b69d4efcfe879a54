# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""Pinned parameter-validation messages of the UMDAM geometry, mappings, RTL blocks and registry.

CONVENTIONS.md: bad parameters raise TypeError/ValueError whose message names the parameter, the
allowed range and the value given, and a test pins each message. Every refusal below is paired with
the nearest accepted value, so a validator that refuses everything fails too.
"""

import re

import re

import pytest

import memwall.registry as registry
from hdl.umdam import AddressComposer, AddressMapper, AddressMapping, DramGeometry, \
    TileAddressGenerator
from memwall.params import ParameterError

LPDDR5_FIELDS = dict(channels=4, ranks=1, bankgroups=1, banks=16, rows=65536, columns=64,
                     burst_bytes=32, interleave_bytes=256)
LPDDR5 = DramGeometry(**LPDDR5_FIELDS)
# The registry's toy geometry (12 address bits).
TOY = DramGeometry(channels=2, ranks=1, bankgroups=1, banks=4, rows=16, columns=8, burst_bytes=4,
                   interleave_bytes=8)

FIELD_LIST = ("fields are row, col, colM, colL, bankgroup, bank, rank, channel, offset "
              "(optionally 'name:width', and 'name^row' to XOR-hash channel, rank, bankgroup, bank "
              "with the row bits), or one of the named mappings umdam, robaracoch, rocobaracho, "
              "ianus")


def exact(message):
    """Match the whole message, literally."""
    return "^" + re.escape(message) + "$"


def geometry(**changes):
    return DramGeometry(**dict(LPDDR5_FIELDS, **changes))


# --------------------------------------------------------------------------------------------------
# DramGeometry


@pytest.mark.parametrize("field, value, kind, message", [
    ("channels", 3, ValueError, "Channel count must be a power of two between 1 and 64, not 3"),
    ("channels", 128, ValueError, "Channel count must be a power of two between 1 and 64, not 128"),
    ("channels", 0, ValueError, "Channel count must be a power of two between 1 and 64, not 0"),
    ("ranks", 16, ValueError, "Rank count must be a power of two between 1 and 8, not 16"),
    ("ranks", True, TypeError, "Rank count must be an integer power of two between 1 and 8, not True"),
    ("bankgroups", 6, ValueError,
     "Bank group count must be a power of two between 1 and 16, not 6"),
    ("banks", 4.0, TypeError,
     "Bank count (per bank group) must be an integer power of two between 1 and 64, not 4.0"),
    ("rows", -4, ValueError, "Row count must be a power of two between 1 and 1048576, not -4"),
    ("columns", 8192, ValueError, "Column count must be a power of two between 1 and 4096, not 8192"),
    ("burst_bytes", 0, ValueError,
     "Burst size in bytes must be a power of two between 1 and 1024, not 0"),
    ("interleave_bytes", "256", TypeError,
     "Interleave size in bytes must be an integer power of two between 1 and 4194304, not '256'"),
    ("interleave_bytes", 4096, ValueError,
     "Interleave size must be between the burst size (32 B) and the row size (2048 B), not 4096 B"),
    ("interleave_bytes", 16, ValueError,
     "Interleave size must be between the burst size (32 B) and the row size (2048 B), not 16 B"),
])
def test_geometry_refuses(field, value, kind, message):
    with pytest.raises(kind, match=exact(message)):
        geometry(**{field: value})


def test_geometry_accepts_its_limits():
    # the bounds named in the messages are inclusive
    assert geometry(channels=64, ranks=8, bankgroups=16).channels == 64
    assert geometry(channels=1, interleave_bytes=32).interleave_bytes == 32   # = burst
    assert geometry(interleave_bytes=2048).interleave_bytes == 2048            # = row
    assert LPDDR5 == DramGeometry.lpddr5()


# --------------------------------------------------------------------------------------------------
# AddressMapping


@pytest.mark.parametrize("spec, message", [
    ("row-colM-bank-rank-channel-colL-offset-foo",
     f"Address mapping 'row-colM-bank-rank-channel-colL-offset-foo': unknown field 'foo'; "
     f"{FIELD_LIST}"),
    ("bogus", f"Address mapping 'bogus': unknown field 'bogus'; {FIELD_LIST}"),
    ("row-col-bank-channel-offset-",
     "Address mapping 'row-col-bank-channel-offset-': empty field (two '-' in a row, or a '-' at "
     "either end)"),
    ("row-col-bank^row^row-channel-offset",
     f"Address mapping 'row-col-bank^row^row-channel-offset': unknown field 'bank^row^row'; "
     f"{FIELD_LIST}"),
    ("row-row-colM-bank-channel-colL-offset",
     "Address mapping 'row-row-colM-bank-channel-colL-offset': field 'row' appears more than once"),
    ("row-colM-bank-channel-colL",
     "Address mapping 'row-colM-bank-channel-colL': missing field(s) offset; every field wider "
     "than zero bits must appear once"),
    ("row-colM-channel-colL",
     "Address mapping 'row-colM-channel-colL': missing field(s) bank, offset; every field wider "
     "than zero bits must appear once"),
    ("row-colM-bank-channel-offset",
     "Address mapping 'row-colM-bank-channel-offset': missing field(s) colL; every field wider "
     "than zero bits must appear once"),
    ("row-colM:3-bank-channel-colL:4-offset",
     "Address mapping 'row-colM:3-bank-channel-colL:4-offset': field 'colL' is given 4 bits but "
     "the geometry needs 3"),
    ("row-col-colM-bank-channel-colL-offset",
     "Address mapping 'row-col-colM-bank-channel-colL-offset': give either 'col' or the pair 'colM' "
     "and 'colL', not both"),
    ("row-col-bank-channel-offset^row",
     "Address mapping 'row-col-bank-channel-offset^row': only channel, rank, bankgroup, bank can be "
     "XOR-hashed with the row bits, not 'offset'"),
    ("row^row-col-bank-channel-offset",
     "Address mapping 'row^row-col-bank-channel-offset': only channel, rank, bankgroup, bank can be "
     "XOR-hashed with the row bits, not 'row'"),
])
def test_mapping_refuses(spec, message):
    with pytest.raises(ValueError, match=exact(message)):
        AddressMapping(spec, LPDDR5)


@pytest.mark.parametrize("spec", [None, 7])
def test_mapping_must_be_a_string(spec):
    with pytest.raises(TypeError, match=exact(f"Address mapping must be a string, not {spec!r}")):
        AddressMapping(spec, LPDDR5)


@pytest.mark.parametrize("spec", ["", "   "])
def test_mapping_must_not_be_empty(spec):
    with pytest.raises(ValueError, match=exact(
            "Address mapping must name a mapping (umdam, robaracoch, rocobaracho, ianus) or list "
            f"fields from MSB to LSB, not {spec!r}")):
        AddressMapping(spec, LPDDR5)


def test_mapping_needs_a_geometry():
    with pytest.raises(TypeError, match=exact("Geometry must be a DramGeometry, not 'lpddr5'")):
        AddressMapping("umdam", "lpddr5")


def test_mapping_accepts_what_the_documentation_allows():
    # zero-width fields may be left out or listed; widths may be written; named mappings ignore
    # case; hashes on every hashable field
    assert AddressMapping("row:16-colM:3-bank:4-rank-channel:2-colL:3-offset:5", LPDDR5).fields \
        == AddressMapping("umdam", LPDDR5).fields
    assert AddressMapping("row-col-bank-channel-offset", LPDDR5).fields == \
        AddressMapping("row-col-bankgroup-bank-rank-channel-offset", LPDDR5).fields
    assert AddressMapping("UMDAM", LPDDR5).fields == AddressMapping("umdam", LPDDR5).fields
    hashed = AddressMapping("row-colM-bankgroup^row-bank^row-rank^row-channel^row-colL-offset",
                            LPDDR5)
    assert [(f.name, f.xor_row) for f in hashed.fields] == [
        ("row", False), ("colM", False), ("bank", True), ("channel", True), ("colL", False),
        ("offset", False)]
    # with a zero-width colL (interleave = burst) colM alone is the column
    narrow = geometry(interleave_bytes=32)
    assert AddressMapping("row-colM-bank-channel-offset", narrow).field("colM").width == 6


# --------------------------------------------------------------------------------------------------
# AddressMapper / AddressComposer


@pytest.mark.parametrize("component", [AddressMapper, AddressComposer])
def test_mapper_refuses_mixed_geometries(component):
    other = geometry(channels=2)
    with pytest.raises(ValueError, match=exact(
            "All mappings must share one geometry; mapping 1 ('ianus') differs from mapping 0 "
            "('umdam') in channels 2 vs 4")):
        component([AddressMapping("umdam", LPDDR5), AddressMapping("ianus", other)])


@pytest.mark.parametrize("component", [AddressMapper, AddressComposer])
def test_mapper_refuses_anything_but_mappings(component):
    with pytest.raises(TypeError, match=exact(
            "Mappings must be AddressMapping objects, not ('umdam',)")):
        component(("umdam",))


@pytest.mark.parametrize("component", [AddressMapper, AddressComposer])
@pytest.mark.parametrize("count", [0, 17])
def test_mapper_takes_1_to_16_mappings(component, count):
    with pytest.raises(ValueError, match=exact(
            f"Mapping count must be between 1 and 16, not {count}")):
        component([AddressMapping("umdam", LPDDR5)] * count)


@pytest.mark.parametrize("component", [AddressMapper, AddressComposer])
@pytest.mark.parametrize("latency", [2, -1])
def test_mapper_latency_is_0_or_1(component, latency):
    with pytest.raises(ValueError, match=exact(
            f"Latency (0: combinational, 1: registered) must be 0 or 1, not {latency!r}")):
        component(AddressMapping("umdam", LPDDR5), latency=latency)


def test_mapper_accepts_one_mapping_or_several():
    one = AddressMapper(AddressMapping("umdam", TOY), latency=0)
    assert one.latency == 0 and len(one.mappings) == 1
    three = AddressComposer([AddressMapping(s, TOY) for s in ("umdam", "robaracoch", "ianus")])
    assert three.latency == 1 and three.geometry == TOY


@pytest.mark.parametrize("latency", [True, 1.0, "1"])
def test_mapper_refuses_a_latency_that_is_not_an_integer(latency):
    with pytest.raises(TypeError, match=re.escape(
            f"Latency (0: combinational, 1: registered) must be 0 or 1, not {latency!r}")):
        AddressMapper(AddressMapping("umdam", LPDDR5), latency=latency)


# --------------------------------------------------------------------------------------------------
# TileAddressGenerator


@pytest.mark.parametrize("kwargs, kind, message", [
    (dict(elem_bytes=3), ValueError, "Element size in bytes must be 1, 2 or 4, not 3"),
    (dict(elem_bytes=8), ValueError, "Element size in bytes must be 1, 2 or 4, not 8"),
    (dict(max_rows=0), ValueError,
     "Maximum row count (max_rows) must be between 1 and 16777216, not 0"),
    (dict(max_cols=1 << 25), ValueError,
     "Maximum column count (max_cols) must be between 1 and 16777216, not 33554432"),
    (dict(max_cols=True), TypeError,
     "Maximum column count (max_cols) must be an integer between 1 and 16777216, not True"),
    (dict(max_rows=64.0), TypeError,
     "Maximum row count (max_rows) must be an integer between 1 and 16777216, not 64.0"),
])
def test_tile_generator_refuses(kwargs, kind, message):
    with pytest.raises(kind, match=exact(message)):
        TileAddressGenerator(AddressMapping("umdam", LPDDR5), **kwargs)


def test_tile_generator_refuses_an_element_bigger_than_the_interleave_block():
    tiny = DramGeometry(channels=2, ranks=1, bankgroups=1, banks=2, rows=4, columns=4,
                        burst_bytes=2, interleave_bytes=2)
    assert TileAddressGenerator(AddressMapping("umdam", tiny), elem_bytes=2).tile_height == 1
    with pytest.raises(ValueError, match=exact(
            "Element size (4 B) must not exceed the interleave size (2 B)")):
        TileAddressGenerator(AddressMapping("umdam", tiny), elem_bytes=4)


def test_tile_generator_needs_a_mapping():
    with pytest.raises(TypeError, match=exact("Mapping must be an AddressMapping, not 'umdam'")):
        TileAddressGenerator("umdam")


def test_tile_generator_accepts_its_limits():
    gen = TileAddressGenerator(AddressMapping("umdam", LPDDR5), elem_bytes=4, max_rows=1,
                               max_cols=1 << 24)
    assert (gen.tile_height, gen.tile_width, gen.elem_bytes) == (64, 64, 4)


@pytest.mark.parametrize("elem_bytes", [2.0, True])
def test_tile_generator_refuses_an_element_size_that_is_not_an_integer(elem_bytes):
    with pytest.raises(TypeError, match=re.escape(
            f"Element size in bytes must be 1, 2 or 4, not {elem_bytes!r}")):
        TileAddressGenerator(AddressMapping("umdam", LPDDR5), elem_bytes=elem_bytes)


# --------------------------------------------------------------------------------------------------
# Registry


def test_registry_refuses_an_unknown_parameter():
    with pytest.raises(ParameterError, match=exact(
            "unknown parameter 'foo'; parameters are channels, ranks, bankgroups, banks, rows, "
            "columns, burst_bytes, interleave_bytes, mappings, latency")):
        registry.get("umdam").parameters("default", {"foo": "1"})


def test_registry_refuses_an_unknown_preset():
    with pytest.raises(ParameterError, match=exact(
            "unknown preset 'huge' for block umdam; presets are small, default, paper")):
        registry.get("umdam").parameters("huge")


@pytest.mark.parametrize("block, overrides, message", [
    ("umdam", {"channels": "3"}, "Channel count must be a power of two between 1 and 64, not 3"),
    ("umdam", {"channels": "four"}, "parameter channels takes an integer, not 'four'"),
    ("umdam", {"latency": "2"}, "Latency (0: combinational, 1: registered) must be 0 or 1, not 2"),
    ("umdam", {"interleave_bytes": "4096"},
     "Interleave size must be between the burst size (32 B) and the row size (2048 B), not 4096 B"),
    ("umdam", {"mappings": "umdam,bogus"},
     f"Address mapping 'bogus': unknown field 'bogus'; {FIELD_LIST}"),
    ("umdam", {"mappings": ""}, "Mapping count must be between 1 and 16, not 0"),
    ("umdam", {"mappings": ",".join(["umdam"] * 17)},
     "Mapping count must be between 1 and 16, not 17"),
    ("umdam-composer", {"banks": "0x3"},
     "Bank count (per bank group) must be a power of two between 1 and 64, not 3"),
    ("umdam-tilegen", {"elem_bytes": "3"}, "Element size in bytes must be 1, 2 or 4, not 3"),
    ("umdam-tilegen", {"max_rows": "0"},
     "Maximum row count (max_rows) must be between 1 and 16777216, not 0"),
    ("umdam-tilegen", {"mapping": "row-col"},
     "Address mapping 'row-col': missing field(s) bank, channel, offset; every field wider than "
     "zero bits must appear once"),
])
def test_registry_refuses_a_bad_value(block, overrides, message):
    with pytest.raises(ParameterError, match=exact(message)):
        registry.get(block).parameters("default", overrides)


def test_registry_accepts_good_overrides():
    params = registry.get("umdam").parameters("default", {"mappings": "umdam, ianus",
                                                          "channels": "0x8", "latency": "0"})
    assert params.mappings == ("umdam", "ianus") and params.channels == 8 and params.latency == 0
    assert params.geometry.address_bits == 34
    small = registry.get("umdam").parameters("small")
    assert small.geometry == TOY and small.mappings == ("umdam", "robaracoch", "ianus")


def test_registry_refuses_an_unknown_block():
    # other families register blocks too: pin the form, and that the UMDAM blocks are listed
    with pytest.raises(ParameterError, match=r"^unknown block 'nope'; blocks are (.+)$") as info:
        registry.get("nope")
    listed = str(info.value).split("; blocks are ")[1].split(", ")
    assert {"umdam", "umdam-composer", "umdam-tilegen"} <= set(listed)
    with pytest.raises(registry.UnknownBlock):
        registry.get("nope")
