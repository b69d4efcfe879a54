"""The stream payload codec the testbenches and the board vectors share
(:class:`memwall.registry.PayloadCodec`)."""

import pytest
from amaranth.lib import data

from memwall.registry import PayloadCodec

_LAYOUT = data.StructLayout({"kind": 2, "ext": data.StructLayout({"row": 5, "data": 8})})


def test_fields_and_round_trip():
    codec = PayloadCodec.of_layout(_LAYOUT)
    assert [(f["name"], f["offset"], f["width"]) for f in codec.fields] == [
        ("kind", 0, 2), ("ext.row", 2, 5), ("ext.data", 7, 8)]
    word = codec.pack({"kind": 3, "ext.row": 17, "ext.data": 0xA5})
    assert word == 3 | 17 << 2 | 0xA5 << 7
    assert codec.unpack(word) == {"kind": 3, "ext.row": 17, "ext.data": 0xA5}
    assert codec.pack({}) == 0


def test_out_of_range_refused_unless_wrapped():
    codec = PayloadCodec.of_layout(_LAYOUT)
    with pytest.raises(ValueError, match=r"payload\.ext\.data=256 does not fit 8 bits"):
        codec.pack({"ext.data": 256})
    with pytest.raises(ValueError, match="does not fit"):
        codec.pack({"kind": -1})
    assert codec.pack({"ext.data": 256 + 7, "kind": -1}, wrap=True) == 3 | 7 << 7


def test_unknown_field_named():
    with pytest.raises(KeyError, match="no field"):
        PayloadCodec.of_layout(_LAYOUT).pack({"ext.mask": 1})
    plain = PayloadCodec({"name": "o", "width": 4})
    assert plain.pack({"value": 9}) == 9 and plain.unpack(0x1F) == {"value": 15}
