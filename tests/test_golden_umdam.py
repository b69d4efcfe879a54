"""Tests of the bit-exact UMDAM model (golden/umdam.py): address mapping, its inverse, Algorithm 1.

The model is checked in three steps, following CONVENTIONS.md ("check each golden model first
against a few hand-computed answers, then use it as the oracle"):

1. hand-computed addresses (worked out in the comments from the paper's LPDDR5 example);
2. a naive reference written here from the specification alone: per address, the address is
   printed as a binary string and cut into the mapping's fields MSB first (no use of the
   ``MappedField`` positions that the code under test computes);
3. properties: the mapping is a bijection, and the Algorithm 1 layout keeps each matrix column in
   one bank, never overlaps elements, has no storage overhead for whole tiles, and gives the NPU a
   sequential, channel-interleaved stream and each PIM bank a contiguous run of its own columns.

Random inputs come from ``numpy.random.default_rng(SEED)``; the seed is in every failure message.
"""

import itertools

import numpy as np
import pytest

import golden.umdam as golden
from hdl.umdam import NAMED_MAPPINGS, AddressMapping, DramGeometry

from .umdam_cases import COORDS, LPDDR5, RANKS_BG, SEED, SMALL

# --------------------------------------------------------------------------------------------------
# Geometries (LPDDR5, SMALL and RANKS_BG come from umdam_cases)

#: One channel (zero-width field), interleave = burst (zero-width colL), 3 bank bits XOR-hashed
#: with a 2-bit row (12 address bits).
WIDE_BANK = DramGeometry(channels=1, ranks=1, bankgroups=4, banks=8, rows=4, columns=16,
                         burst_bytes=2, interleave_bytes=2)
#: Interleave = row size (zero-width colM), 4 channels (12 address bits).
ROW_INTERLEAVE = DramGeometry(channels=4, ranks=1, bankgroups=1, banks=2, rows=16, columns=4,
                              burst_bytes=8, interleave_bytes=32)
#: Ranks, and one bank group of four banks (11 address bits).
RANKS_ONLY = DramGeometry(channels=2, ranks=4, bankgroups=1, banks=4, rows=8, columns=4,
                          burst_bytes=4, interleave_bytes=8)

SMALL_GEOMETRIES = {"small": SMALL, "ranks_bg": RANKS_BG, "wide_bank": WIDE_BANK,
                    "row_interleave": ROW_INTERLEAVE, "ranks_only": RANKS_ONLY}

#: The named mappings spelled out from their names: the paper's UMDAM order
#: Row-ColM-Bank-Rank-Channel-ColL-Offset, RoBaRaCoCh, RoCoBaRaCh(O), and Ianus (channel on top).
#: The paper has no bank groups; they sit directly above the bank field, except in RoBaRaCoCh,
#: which is Ramulator 2's (bank above bank group; test_named_mappings_match_ramulator_and_dramsim3).
SPELLED_OUT = {
    "umdam": "row-colM-bankgroup-bank-rank-channel-colL-offset",
    "robaracoch": "row-bank-bankgroup-rank-col-channel-offset",
    "rocobaracho": "row-col-bankgroup-bank-rank-channel-offset",
    "ianus": "channel-rank-bankgroup-bank-row-col-offset",
}
#: Every hashable field XORed with the row bits.
HASH_ALL = "row-colM-bankgroup^row-bank^row-rank^row-channel^row-colL-offset"
#: The hashed mapping of the brief (only for geometries without bank groups).
HASH_BANK_CHANNEL = "row-colM-bank^row-rank-channel^row-colL-offset"
#: UMDAM on LPDDR5 with every width written out (rank has zero width there).
LPDDR5_EXPLICIT = "row:16-colM:3-bank:4-rank-channel:2-colL:3-offset:5"


def mapping(spec, geometry=LPDDR5):
    return AddressMapping(spec, geometry)


# --------------------------------------------------------------------------------------------------
# Naive reference (from the specification; shares nothing with the code under test)


def log2(value):
    assert value > 0 and value & (value - 1) == 0, value
    return value.bit_length() - 1


def naive_widths(geometry):
    col = log2(geometry.columns)
    col_l = log2(geometry.interleave_bytes // geometry.burst_bytes)
    return {"channel": log2(geometry.channels), "rank": log2(geometry.ranks),
            "bankgroup": log2(geometry.bankgroups), "bank": log2(geometry.banks),
            "row": log2(geometry.rows), "col": col, "colM": col - col_l, "colL": col_l,
            "offset": log2(geometry.burst_bytes)}


def naive_address_bits(geometry):
    w = naive_widths(geometry)
    return sum(w[name] for name in COORDS)


def naive_tokens(spec):
    """Yield ``(name, hashed)`` per field of a mapping, MSB first."""
    order = SPELLED_OUT.get(spec.lower(), spec)
    for token in order.split("-"):
        name, _, hashed = token.partition("^")
        yield name.split(":")[0], bool(hashed)


def naive_map(spec, geometry, address):
    """Coordinates of one address: cut its binary string into fields, MSB first."""
    w = naive_widths(geometry)
    total = naive_address_bits(geometry)
    assert 0 <= address < 1 << total
    bits = format(address, "b").zfill(total)
    fields, hashed, pos = {}, [], 0
    for name, xor in naive_tokens(spec):
        fields[name] = int(bits[pos:pos + w[name]], 2) if w[name] else 0
        pos += w[name]
        if xor:
            hashed.append(name)
    assert pos == total, f"{spec} does not cover {total} bits"
    row = fields.get("row", 0)
    for name in hashed:
        fields[name] ^= row % (1 << w[name])        # XOR with the low bits of the row
    if "col" not in fields:
        fields["col"] = fields.get("colM", 0) * (1 << w["colL"]) + fields.get("colL", 0)
    return tuple(fields.get(name, 0) for name in COORDS)


def naive_compose(spec, geometry, coords):
    """Address of one coordinate tuple (``dict``): write each field's bits, MSB first."""
    w = naive_widths(geometry)
    values = dict(coords)
    values["colM"] = values["col"] >> w["colL"]
    values["colL"] = values["col"] % (1 << w["colL"])
    bits = ""
    for name, xor in naive_tokens(spec):
        value = values[name] ^ (values["row"] % (1 << w[name])) if xor else values[name]
        assert 0 <= value < 1 << w[name]
        bits += format(value, "b").zfill(w[name]) if w[name] else ""
    assert len(bits) == naive_address_bits(geometry)
    return int(bits, 2)


def golden_tuples(coords):
    """Golden ``map_addresses`` output as an ``(n, 7)`` int64 array in COORDS order."""
    return np.stack([coords[name].astype(np.int64) for name in COORDS], axis=-1)


def mappings_for(geometry):
    specs = list(SPELLED_OUT) + [HASH_ALL]
    if geometry.bankgroups == 1:
        specs.append(HASH_BANK_CHANNEL)
    return specs


# --------------------------------------------------------------------------------------------------
# 1. Hand-computed answers


def test_lpddr5_field_widths_follow_the_paper():
    # Paper Section III-A: 2 KB row / 32 B burst = 64 columns -> 6 column bits, 5 offset bits;
    # 256 B interleave / 32 B burst -> colL 3 bits, colM 3 bits. 4 channels (2 bits), 16 banks
    # (4 bits), 65536 rows (16 bits): 2 + 4 + 16 + 6 + 5 = 33 address bits (8 GiB).
    assert LPDDR5.widths == {"channel": 2, "rank": 0, "bankgroup": 0, "bank": 4, "row": 16,
                             "col": 6, "colM": 3, "colL": 3, "offset": 5}
    assert LPDDR5.address_bits == 33


# UMDAM on LPDDR5, LSB first: offset [4:0], colL [7:5], channel [9:8], bank [13:10], colM [16:14],
# row [32:17].
UMDAM_LPDDR5_CASES = [
    (0x0, {}),
    (0x1F, {"offset": 31}),                 # last byte of the first burst
    (0x20, {"col": 1}),                     # next 32 B burst: colL = 1 -> col = 1
    (0xE0, {"col": 7}),                     # last burst of the 256 B interleave block
    (0x100, {"channel": 1}),                # the next 256 B block moves to the next channel
    (0x300, {"channel": 3}),
    (0x400, {"bank": 1}),                   # after all 4 channels comes the next bank
    (0x3C00, {"bank": 15}),
    (0x4000, {"col": 8}),                   # colM = 1 sits above colL's 3 bits: col = 1 << 3
    (0x1C000, {"col": 56}),                 # colM = 7
    (0x20000, {"row": 1}),
    (0x1_FFFE_0000, {"row": 0xFFFF}),
    (0x20000 | 0x4000 | 0x400 | 0x100 | 0x20 | 0x3,
     {"row": 1, "col": 9, "bank": 1, "channel": 1, "offset": 3}),
    ((1 << 33) - 1, {"row": 0xFFFF, "col": 63, "bank": 15, "channel": 3, "offset": 31}),
]
# Ianus on LPDDR5: channel [32:31] on top, bank [30:27], row [26:11], col [10:5], offset [4:0].
IANUS_LPDDR5_CASES = [
    (0x1_0000_0000, {"channel": 2}),
    (0x8000_0000, {"channel": 1}),
    (0x0800_0000, {"bank": 1}),
    (0x800, {"row": 1}),
    (0x20, {"col": 1}),
    (0x100, {"col": 8}),                    # no channel interleaving at 256 B under Ianus
    (0x7FFF_FFFF, {"bank": 15, "row": 0xFFFF, "col": 63, "offset": 31}),
]
# RoBaRaCoCh: offset [4:0], channel [6:5], col [12:7], bank [16:13], row [32:17].
ROBARACOCH_LPDDR5_CASES = [(0x20, {"channel": 1}), (0x80, {"col": 1}), (0x2000, {"bank": 1}),
                           (0x20000, {"row": 1})]
# RoCoBaRaCh(O): offset [4:0], channel [6:5], bank [10:7], col [16:11], row [32:17].
ROCOBARACHO_LPDDR5_CASES = [(0x20, {"channel": 1}), (0x80, {"bank": 1}), (0x800, {"col": 1}),
                            (0x20000, {"row": 1})]
# The hashed mapping has UMDAM's positions; bank ^= row[3:0], channel ^= row[1:0].
HASHED_LPDDR5_CASES = [
    (0x20000, {"row": 1, "bank": 1, "channel": 1}),          # raw bank 0, raw channel 0, row 1
    (0x20000 | 0x400 | 0x100, {"row": 1}),                   # raw bank 1 ^ 1, raw channel 1 ^ 1
    (0x40000 | 0x100, {"row": 2, "bank": 2, "channel": 3}),  # channel: 1 ^ 2; bank: 0 ^ 2
    (0x20_0000, {"row": 16}),                                # row 16: low 4 bits are zero
    (0x400, {"bank": 1}),                                    # row 0 leaves the fields unchanged
]


@pytest.mark.parametrize("spec, cases", [
    ("umdam", UMDAM_LPDDR5_CASES),
    (LPDDR5_EXPLICIT, UMDAM_LPDDR5_CASES),
    ("ianus", IANUS_LPDDR5_CASES),
    ("robaracoch", ROBARACOCH_LPDDR5_CASES),
    ("rocobaracho", ROCOBARACHO_LPDDR5_CASES),
    (HASH_BANK_CHANNEL, HASHED_LPDDR5_CASES),
], ids=["umdam", "explicit", "ianus", "robaracoch", "rocobaracho", "hashed"])
def test_hand_computed_lpddr5_addresses(spec, cases):
    mp = mapping(spec)
    addresses = [address for address, _ in cases]
    got = golden.map_addresses(mp, addresses)
    for n, (address, expected) in enumerate(cases):
        want = {name: expected.get(name, 0) for name in COORDS}
        have = {name: int(got[name][n]) for name in COORDS}
        assert have == want, f"{spec}: address {address:#x}: expected {want}, got {have}"
        # the naive reference agrees with the hand computation too
        assert naive_map(spec, LPDDR5, address) == tuple(want[name] for name in COORDS)
    composed = golden.compose_addresses(mp, {name: got[name] for name in COORDS})
    assert composed.tolist() == addresses


def test_ianus_channel_is_the_top_two_bits():
    rng = np.random.default_rng(SEED)
    addresses = rng.integers(0, 1 << 33, size=1000, dtype=np.uint64)
    got = golden.map_addresses(mapping("ianus"), addresses)
    assert np.array_equal(got["channel"], addresses >> np.uint64(31)), f"seed {SEED}"
    # and a whole channel is one contiguous 2 GiB range
    assert np.array_equal(got["channel"], addresses // np.uint64(2 << 30))


def test_umdam_interleaves_256_byte_blocks_over_channels_then_banks():
    # 256 B block k of the address space: channel k mod 4, bank (k div 4) mod 16.
    blocks = np.arange(4 * 16 * 3, dtype=np.uint64)
    got = golden.map_addresses(mapping("umdam"), blocks * np.uint64(256))
    assert got["channel"].tolist() == [k % 4 for k in range(len(blocks))]
    assert got["bank"].tolist() == [(k // 4) % 16 for k in range(len(blocks))]
    assert got["col"].tolist() == [8 * (k // 64) for k in range(len(blocks))]


def test_named_mappings_are_the_spelled_out_orders():
    assert NAMED_MAPPINGS == SPELLED_OUT
    for name, order in SPELLED_OUT.items():
        assert mapping(name).fields == mapping(order).fields
    # without bank groups and ranks, UMDAM is the paper's Row-ColM-Bank-Rank-Channel-ColL-Offset
    assert mapping("umdam").fields == mapping("row-colM-bank-rank-channel-colL-offset").fields
    assert mapping(LPDDR5_EXPLICIT).fields == mapping("umdam").fields


def test_small_preset_is_the_toy_geometry():
    import memwall.registry as registry
    assert registry.get("umdam").parameters("small").geometry == SMALL
    assert naive_address_bits(SMALL) == 12


# --------------------------------------------------------------------------------------------------
# 2. Naive reference against the model


def special_addresses(bits):
    ones = (1 << bits) - 1
    return sorted({0, ones, *(1 << k for k in range(bits)), *(ones ^ (1 << k) for k in range(bits)),
                   int("10" * bits, 2) & ones, int("01" * bits, 2) & ones})


@pytest.mark.parametrize("spec", [*SPELLED_OUT, HASH_BANK_CHANNEL, LPDDR5_EXPLICIT,
                                  "channel^row-bank-row-col-offset",
                                  "offset-channel-row-bank-col", "UMDAM"])
def test_map_matches_naive_reference_lpddr5(spec):
    rng = np.random.default_rng(SEED)
    addresses = special_addresses(33) + rng.integers(0, 1 << 33, size=3000).tolist()
    got = golden_tuples(golden.map_addresses(mapping(spec), addresses))
    for n, address in enumerate(addresses):
        want = naive_map(spec, LPDDR5, address)
        assert tuple(got[n]) == want, \
            f"{spec}: address {address:#x} (seed {SEED}): expected {want}, got {tuple(got[n])}"


@pytest.mark.parametrize("geometry_name", SMALL_GEOMETRIES)
def test_map_and_compose_match_naive_reference_on_every_small_address(geometry_name):
    geometry = SMALL_GEOMETRIES[geometry_name]
    bits = naive_address_bits(geometry)
    addresses = list(range(1 << bits))
    for spec in mappings_for(geometry):
        mp = mapping(spec, geometry)
        got = golden_tuples(golden.map_addresses(mp, addresses))
        want = np.array([naive_map(spec, geometry, a) for a in addresses], dtype=np.int64)
        bad = np.flatnonzero((got != want).any(axis=1))
        assert bad.size == 0, (f"{geometry_name} {spec}: address {bad[0]:#x}: expected "
                               f"{tuple(want[bad[0]])}, got {tuple(got[bad[0]])}")
        # compose: the naive composer applied to the naive coordinates gives the address back,
        # and the model's composer agrees with it
        coords = {name: want[:, k] for k, name in enumerate(COORDS)}
        assert [naive_compose(spec, geometry, dict(zip(COORDS, row))) for row in want.tolist()] \
            == addresses
        assert golden.compose_addresses(mp, coords).tolist() == addresses


def test_mapper_outputs_select_per_request_and_flag_bad_selects():
    specs = ["umdam", "robaracoch", "ianus"]
    mps = [mapping(s, SMALL) for s in specs]
    rng = np.random.default_rng(SEED)
    addresses = rng.integers(0, 1 << 12, size=400)
    selects = rng.integers(0, 4, size=400)          # 3 is not a mapping
    got = golden.mapper_outputs(mps, addresses, selects)
    for n, (address, select) in enumerate(zip(addresses.tolist(), selects.tolist())):
        have = tuple(int(got[name][n]) for name in COORDS)
        if select < 3:
            assert have == naive_map(specs[select], SMALL, address), f"request {n}, seed {SEED}"
            assert got["error"][n] == 0
        else:
            assert have == (0,) * 7 and got["error"][n] == 1, f"request {n}, seed {SEED}"
    # without selects every request uses the first mapping
    first = golden.mapper_outputs(mps, addresses)
    assert first["error"].tolist() == [0] * 400
    assert golden_tuples(first).tolist() == [list(naive_map("umdam", SMALL, a))
                                             for a in addresses.tolist()]


# --------------------------------------------------------------------------------------------------
# 3. Bijection


@pytest.mark.parametrize("geometry_name", SMALL_GEOMETRIES)
def test_every_mapping_is_a_bijection_on_small_geometries(geometry_name):
    geometry = SMALL_GEOMETRIES[geometry_name]
    w = naive_widths(geometry)
    count = 1 << naive_address_bits(geometry)
    addresses = np.arange(count, dtype=np.uint64)
    for spec in mappings_for(geometry):
        mp = mapping(spec, geometry)
        coords = golden.map_addresses(mp, addresses)
        for name in COORDS:          # in range: the coordinate space has exactly `count` tuples
            assert int(coords[name].max()) < 1 << w[name], f"{geometry_name} {spec} {name}"
        unique = np.unique(golden_tuples(coords), axis=0)
        assert len(unique) == count, f"{geometry_name} {spec}: {count - len(unique)} collisions"
        assert np.array_equal(golden.compose_addresses(mp, coords), addresses), \
            f"{geometry_name} {spec}: compose(map(a)) != a"


@pytest.mark.parametrize("spec", [*SPELLED_OUT, HASH_BANK_CHANNEL])
def test_round_trips_on_lpddr5(spec):
    mp = mapping(spec)
    rng = np.random.default_rng(SEED)
    addresses = rng.integers(0, 1 << 33, size=100_000, dtype=np.uint64)
    coords = golden.map_addresses(mp, addresses)
    assert np.array_equal(golden.compose_addresses(mp, coords), addresses), f"seed {SEED}"
    assert len(np.unique(golden_tuples(coords), axis=0)) == len(np.unique(addresses))
    # the other way round: random in-range coordinates
    w = naive_widths(LPDDR5)
    want = {name: rng.integers(0, 1 << w[name], size=100_000, dtype=np.uint64) for name in COORDS}
    back = golden.map_addresses(mp, golden.compose_addresses(mp, want))
    for name in COORDS:
        assert np.array_equal(back[name], want[name]), f"{spec}: {name}, seed {SEED}"


def test_compose_matches_naive_composer_on_random_lpddr5_coordinates():
    rng = np.random.default_rng(SEED)
    w = naive_widths(LPDDR5)
    coords = {name: rng.integers(0, 1 << w[name], size=500) for name in COORDS}
    for spec in [*SPELLED_OUT, HASH_BANK_CHANNEL]:
        got = golden.compose_addresses(mapping(spec), coords).tolist()
        for n in range(500):
            one = {name: int(coords[name][n]) for name in COORDS}
            assert got[n] == naive_compose(spec, LPDDR5, one), f"{spec}: {one}, seed {SEED}"


def test_compose_broadcasts_scalar_coordinates():
    # Missing coordinates are zero; scalars broadcast against arrays.
    got = golden.compose_addresses(mapping("umdam"), {"bank": np.arange(16), "row": 1})
    assert got.tolist() == [0x20000 + 0x400 * b for b in range(16)]


# --------------------------------------------------------------------------------------------------
# 4. Layout (Algorithm 1)


def naive_layout(geometry, rows, cols, elem_bytes, base_tile=0):
    """Algorithm 1 per element, from the paper and the golden docstring: coordinate dicts."""
    w = naive_widths(geometry)
    th = geometry.interleave_bytes // elem_bytes
    tw = geometry.channels * geometry.ranks * geometry.bankgroups * geometry.banks
    ntr = -(-rows // th)
    out = {}
    for i, j in itertools.product(range(rows), range(cols)):
        tile_row, local_row = divmod(i, th)
        tile_col, local_col = divmod(j, tw)
        byte = local_row * elem_bytes                              # (colL, offset) = bits(...)
        col_l, offset = divmod(byte, geometry.burst_bytes)
        slot = base_tile + tile_col * ntr + tile_row               # (row, colM) = bits(slot)
        row, col_m = divmod(slot, 1 << w["colM"])
        rest, channel = divmod(local_col, geometry.channels)       # (bankgroup, bank, rank,
        rest, rank = divmod(rest, geometry.ranks)                  #  channel) = bits(local_col),
        bankgroup, bank = divmod(rest, geometry.banks)             #  the umdam mapping's order
        out[i, j] = {"channel": channel, "rank": rank, "bankgroup": bankgroup, "bank": bank,
                     "row": row, "col": (col_m << w["colL"]) | col_l, "offset": offset}
    return out


@pytest.mark.parametrize("geometry_name, rows, cols, elem_bytes, base_tile", [
    ("small", 9, 13, 2, 0), ("small", 8, 8, 1, 5), ("small", 3, 20, 4, 17),
    ("ranks_bg", 7, 33, 2, 3), ("wide_bank", 5, 40, 1, 2), ("row_interleave", 33, 9, 4, 1),
    ("ranks_only", 10, 35, 1, 0),
])
def test_layout_matches_naive_algorithm_1(geometry_name, rows, cols, elem_bytes, base_tile):
    geometry = SMALL_GEOMETRIES[geometry_name]
    want = naive_layout(geometry, rows, cols, elem_bytes, base_tile)
    got = golden.layout_coordinates(geometry, rows, cols, elem_bytes, base_tile)
    for (i, j), coords in want.items():
        have = {name: int(got[name][i, j]) for name in COORDS}
        assert have == coords, f"element ({i}, {j}): expected {coords}, got {have}"
    for spec in mappings_for(geometry):
        addresses = golden.layout_addresses(mapping(spec, geometry), rows, cols, elem_bytes,
                                            base_tile)
        assert addresses.shape == (rows, cols)
        for (i, j), coords in want.items():
            assert int(addresses[i, j]) == naive_compose(spec, geometry, coords), \
                f"{spec}: element ({i}, {j})"


def test_hand_checked_fp16_lpddr5_element():
    # LPDDR5, FP16, a 256 x 128 matrix. Tile height = 256 B interleave / 2 B = 128 rows; tile
    # width = 4 channels x 16 banks = 64 columns; so 2 x 2 tiles, num_tile_rows = 2.
    # Element (130, 65): tile (130 // 128, 65 // 64) = (1, 1), local (2, 1).
    # Slot = tile_col * num_tile_rows + tile_row = 1 * 2 + 1 = 3 -> (row, colM) = (0, 3).
    # Local row 2 -> byte 4 -> (colL, offset) = (0, 4). Local column 1 -> channel 1, bank 0.
    # UMDAM address: colM at bit 14 (3 * 16384), channel at bit 8 (1 * 256), offset 4 (2 * 2):
    # 0xC000 + 0x100 + 0x4 = 0xC104. Each tile slot is one 64 x 256 B = 16 KiB block.
    addresses = golden.layout_addresses(mapping("umdam"), 256, 128, 2)
    assert int(addresses[130, 65]) == 3 * 16384 + 1 * 256 + 2 * 2 == 0xC104
    coords = golden.layout_coordinates(LPDDR5, 256, 128, 2)
    assert {name: int(coords[name][130, 65]) for name in COORDS} == \
        {"channel": 1, "rank": 0, "bankgroup": 0, "bank": 0, "row": 0, "col": 24, "offset": 4}
    # the same row one tile to the left, (130, 1), is in the same bank, in slot 1 * 2 + 0 = 1
    assert int(addresses[130, 1]) == 1 * 16384 + 1 * 256 + 2 * 2


#: (geometry, rows, cols, elem_bytes); th = interleave / elem_bytes, tw = bank count.
LAYOUT_SHAPES = [
    ("lpddr5", 256, 128, 2),       # 2 x 2 tiles
    ("lpddr5", 512, 192, 1),       # 2 x 3 tiles of 256 x 64
    ("lpddr5", 128, 64, 4),        # 2 x 1 tiles of 64 x 64
    ("lpddr5", 130, 70, 2),        # unaligned both ways
    ("lpddr5", 3, 5, 4),           # less than one tile
    ("lpddr5", 257, 1, 1),         # one column, just over one tile high
    ("small", 8, 16, 2),           # aligned: 4 x 8 tiles
    ("small", 9, 13, 1),           # unaligned
    ("small", 6, 24, 4),           # aligned: 2 x 8 tiles
    ("ranks_bg", 8, 40, 2),        # unaligned in columns (tile 4 x 16)
    ("ranks_only", 16, 64, 1),     # aligned: 8 x 32 tiles
    ("row_interleave", 17, 9, 2),  # unaligned, tile 16 x 8
    ("wide_bank", 6, 64, 1),       # tile 2 x 32, aligned
]
GEOMETRIES = {"lpddr5": LPDDR5, **SMALL_GEOMETRIES}


def shape_id(shape):
    return f"{shape[0]}-{shape[1]}x{shape[2]}-e{shape[3]}"


def bank_ids(geometry, coords):
    """One integer per (channel, rank, bankgroup, bank) tuple."""
    return (((coords["bankgroup"].astype(np.int64) * geometry.banks + coords["bank"])
             * geometry.ranks + coords["rank"]) * geometry.channels + coords["channel"])


@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=shape_id)
def test_every_column_lies_in_one_bank(shape):
    geometry_name, rows, cols, elem_bytes = shape
    geometry = GEOMETRIES[geometry_name]
    tw = geometry.channels * geometry.ranks * geometry.bankgroups * geometry.banks
    for spec in mappings_for(geometry):
        mp = mapping(spec, geometry)
        # map the physical addresses back: the bank is what the memory controller will see
        coords = golden.map_addresses(mp, golden.layout_addresses(mp, rows, cols, elem_bytes, 1))
        bank = bank_ids(geometry, coords).reshape(rows, cols)
        assert (bank == bank[0]).all(), f"{spec}: a column spans two banks"
        # the columns of one tile go to different banks, in every tile column
        for start in range(0, cols, tw):
            block = bank[0, start:start + tw]
            assert len(set(block.tolist())) == len(block), f"{spec}: columns share a bank"
        # column j is in bank j mod tile_width, whatever the mapping
        assert bank[0].tolist() == [j % tw for j in range(cols)], spec


@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=shape_id)
def test_no_two_elements_overlap(shape):
    geometry_name, rows, cols, elem_bytes = shape
    geometry = GEOMETRIES[geometry_name]
    for spec in mappings_for(geometry):
        addresses = np.sort(golden.layout_addresses(mapping(spec, geometry), rows, cols,
                                                    elem_bytes, 2).ravel())
        # distinct, and each element's byte range [a, a + elem_bytes) ends before the next one
        assert (np.diff(addresses) >= elem_bytes).all(), f"{spec}: elements overlap"
        assert (addresses % np.uint64(elem_bytes) == 0).all(), f"{spec}: misaligned element"


@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=shape_id)
def test_footprint_is_whole_tiles(shape):
    geometry_name, rows, cols, elem_bytes = shape
    geometry = GEOMETRIES[geometry_name]
    th = geometry.interleave_bytes // elem_bytes
    tw = geometry.channels * geometry.ranks * geometry.bankgroups * geometry.banks
    ntr, ntc = -(-rows // th), -(-cols // tw)
    assert golden.tile_shape(geometry, elem_bytes) == (th, tw)
    assert golden.tile_grid(geometry, rows, cols, elem_bytes) == (ntr, ntc)
    tile_bytes = tw * geometry.interleave_bytes
    mp = mapping("umdam", geometry)
    addresses = golden.layout_addresses(mp, rows, cols, elem_bytes).ravel()
    aligned = rows % th == 0 and cols % tw == 0
    if aligned:
        # no storage overhead: exactly the bytes 0 .. rows * cols * elem_bytes - 1
        assert np.array_equal(np.sort(addresses),
                              np.arange(rows * cols, dtype=np.uint64) * np.uint64(elem_bytes))
    # Padding to whole tiles is the only overhead: the matrix uses every tile slot from 0 to
    # ntr * ntc - 1 and nothing above it, so the padding is ntr * ntc * tile_bytes minus the data.
    slots = np.unique(addresses // np.uint64(tile_bytes))
    assert slots.tolist() == list(range(ntr * ntc))
    padding = ntr * ntc * tile_bytes - rows * cols * elem_bytes
    assert padding == (ntr * th * ntc * tw - rows * cols) * elem_bytes
    assert (padding == 0) == aligned
    # the padding is reserved: a matrix placed right after it never touches this one's slots
    after = golden.layout_addresses(mp, rows, cols, elem_bytes, base_tile=ntr * ntc).ravel()
    assert int(after.min()) >= ntr * ntc * tile_bytes
    assert not np.intersect1d(addresses, after).size


def channel_of(geometry, addresses):
    return golden.map_addresses(mapping("umdam", geometry), addresses)["channel"]


@pytest.mark.parametrize("shape", [s for s in LAYOUT_SHAPES if s[0] not in ("ranks_bg",
                                                                            "wide_bank")],
                         ids=shape_id)
def test_npu_walk_is_a_sequential_channel_interleaved_stream(shape):
    geometry_name, rows, cols, elem_bytes = shape
    geometry = GEOMETRIES[geometry_name]
    th, tw = golden.tile_shape(geometry, elem_bytes)
    base_tile = 3
    tile_bytes = tw * geometry.interleave_bytes
    i, j, addresses = golden.walk(mapping("umdam", geometry), rows, cols, elem_bytes, base_tile,
                                  "npu")
    assert (np.diff(addresses.astype(np.int64)) > 0).all(), "NPU walk goes backwards"
    if rows % th == 0 and cols % tw == 0:
        start = base_tile * tile_bytes
        assert np.array_equal(addresses, np.uint64(start) + np.arange(rows * cols, dtype=np.uint64)
                              * np.uint64(elem_bytes))
        # 256 B block k of the stream goes to channel k mod channels, whole blocks at a time
        per_block = geometry.interleave_bytes // elem_bytes
        channels = channel_of(geometry, addresses).reshape(-1, per_block)
        assert (channels == channels[:, :1]).all()
        assert channels[:, 0].tolist() == [(base_tile * tw + k) % geometry.channels
                                           for k in range(len(channels))]
    else:
        # padding is skipped, but every interleave block holds whole runs of one column
        blocks = addresses // np.uint64(geometry.interleave_bytes)
        assert (np.diff(blocks.astype(np.int64)) >= 0).all()


def test_npu_walk_is_sequential_with_bank_groups():
    # RANKS_BG: 2 channels, 2 ranks, 2 bank groups, 2 banks; tile 4 x 16 at FP16.
    _, _, addresses = golden.walk(mapping("umdam", RANKS_BG), 8, 32, 2, 0, "npu")
    assert np.array_equal(addresses, np.arange(8 * 32, dtype=np.uint64) * np.uint64(2))


@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=shape_id)
def test_pim_walk_visits_each_bank_once_in_column_order(shape):
    geometry_name, rows, cols, elem_bytes = shape
    geometry = GEOMETRIES[geometry_name]
    th, tw = golden.tile_shape(geometry, elem_bytes)
    for spec in ("umdam", "ianus"):
        mp = mapping(spec, geometry)
        i, j, addresses = golden.walk(mp, rows, cols, elem_bytes, 1, "pim")
        bank = bank_ids(geometry, golden.map_addresses(mp, addresses))
        changes = np.flatnonzero(np.diff(bank)) + 1
        assert len(changes) == min(cols, tw) - 1, f"{spec}: bank changes {len(changes)} times"
        runs = np.split(np.arange(len(bank)), changes)
        assert [int(bank[run[0]]) for run in runs] == list(range(min(cols, tw)))
        for run in runs:
            # within a bank: its columns in increasing order, each column top to bottom
            jj, ii = j[run], i[run]
            assert (np.diff(jj) >= 0).all(), f"{spec}: columns out of order"
            assert sorted(set(jj.tolist())) == list(range(jj[0], cols, tw))
            for col in set(jj.tolist()):
                assert ii[jj == col].tolist() == list(range(rows))


@pytest.mark.parametrize("order", golden.WALK_ORDERS)
@pytest.mark.parametrize("shape", LAYOUT_SHAPES, ids=shape_id)
def test_walks_visit_every_element_once_at_its_layout_address(shape, order):
    geometry_name, rows, cols, elem_bytes = shape
    geometry = GEOMETRIES[geometry_name]
    mp = mapping("umdam", geometry)
    i, j, addresses = golden.walk(mp, rows, cols, elem_bytes, 0, order)
    assert np.array_equal(np.sort(i * cols + j), np.arange(rows * cols))
    layout = golden.layout_addresses(mp, rows, cols, elem_bytes)
    assert np.array_equal(addresses, layout[i, j])


def test_generator_beats_follow_the_walk():
    mp = mapping("umdam", SMALL)
    i, j, addresses = golden.walk(mp, 5, 9, 2, 4, "pim")
    beats = golden.generator_beats(mp, 2, 40, 40, 5, 9, 4, "pim")
    assert [(b["i"], b["j"], b["addr"]) for b in beats] == list(zip(i.tolist(), j.tolist(),
                                                                   addresses.tolist()))
    assert [b["last"] for b in beats] == [0] * 44 + [1]
    assert all(b["error"] == 0 for b in beats)
    refused = {"error": 1, "last": 1}
    assert golden.generator_beats(mp, 2, 40, 40, 41, 1, 0, "npu") == [refused]   # too many rows
    assert golden.generator_beats(mp, 2, 40, 40, 0, 1, 0, "npu") == [refused]    # empty
    # SMALL has 2 ** (4 row + 2 colM) = 64 tile slots of 4 x 8 FP16 elements
    assert len(golden.generator_beats(mp, 2, 40, 40, 4, 8, 63, "npu")) == 32
    assert golden.generator_beats(mp, 2, 40, 40, 4, 9, 63, "npu") == [refused]


# --------------------------------------------------------------------------------------------------
# 5. Errors


def test_tile_grid_refuses_a_matrix_that_does_not_fit():
    # SMALL at FP16: 64 slots of 4 x 8; a 4 x 8 matrix fits in the last slot, not past it
    assert golden.tile_grid(SMALL, 4, 8, 2, base_tile=63) == (1, 1)
    with pytest.raises(ValueError, match=r"^A 4 x 8 matrix needs 1 tiles from tile 64, but the "
                                         r"memory has 64 tile slots$"):
        golden.tile_grid(SMALL, 4, 8, 2, base_tile=64)
    with pytest.raises(ValueError, match=r"A 33 x 64 matrix needs 72 tiles from tile 0, but the "
                                         r"memory has 64 tile slots"):
        golden.tile_grid(SMALL, 33, 64, 2)
    with pytest.raises(ValueError, match="but the memory has 524288 tile slots"):
        golden.layout_addresses(mapping("umdam"), 1 << 20, 1 << 14, 2)


def test_empty_matrix_is_refused():
    with pytest.raises(ValueError, match=r"^Matrix must have at least one row and one column, "
                                         r"not 0 x 5$"):
        golden.tile_grid(LPDDR5, 0, 5, 2)
    with pytest.raises(ValueError, match="not 3 x 0"):
        golden.walk(mapping("umdam"), 3, 0, 2)


def test_element_size_must_be_1_2_or_4():
    for call in (lambda: golden.tile_shape(LPDDR5, 3),
                 lambda: golden.layout_coordinates(LPDDR5, 4, 4, 3),
                 lambda: golden.walk(mapping("umdam"), 4, 4, 3)):
        with pytest.raises(ValueError, match=r"^Element size must be 1, 2 or 4 bytes, not 3$"):
            call()


def test_address_outside_the_address_space_is_refused():
    mp = mapping("umdam", SMALL)
    assert golden.map_addresses(mp, [0xFFF])["row"].tolist() == [15]
    with pytest.raises(ValueError, match=r"^address 0x1000 is outside the 12-bit address space "
                                         r"\(below 0x1000\)$"):
        golden.map_addresses(mp, [0, 0x1000])
    with pytest.raises(ValueError, match="^addresses must be non-negative, not -1$"):
        golden.map_addresses(mp, [-1])
    with pytest.raises(TypeError, match="^addresses must be integers, not float64$"):
        golden.map_addresses(mp, [1.0])


def test_out_of_range_coordinate_is_refused():
    mp = mapping("umdam", SMALL)        # bank 2 bits, col 3 bits
    assert golden.compose_addresses(mp, {"bank": 3, "col": 7}).tolist() == 0b000011110100
    with pytest.raises(ValueError, match=r"^coordinate bank=4 does not fit its 2 bits$"):
        golden.compose_addresses(mp, {"bank": [0, 4]})
    with pytest.raises(ValueError, match=r"^coordinate col=8 does not fit its 3 bits$"):
        golden.compose_addresses(mp, {"col": 8})
    with pytest.raises(ValueError, match=r"^coordinate rank=1 does not fit its 0 bits$"):
        golden.compose_addresses(mp, {"rank": 1})


def test_unknown_walk_order_is_refused():
    with pytest.raises(ValueError, match=r"^Walk order must be one of npu, pim, not 'xyz'$"):
        golden.walk(mapping("umdam"), 4, 4, 2, 0, "xyz")


# --------------------------------------------------------------------------------------------------
# The named mappings against Ramulator 2 and DRAMsim3, on a DDR4 part
#
# Both simulators' decoders are written here from their published definitions, not from
# hdl.umdam: Ramulator 2's linear mappers (src/addr_mapper/impl/linear_mappers.cpp) slice the
# address, above the transaction offset, LSB first in a fixed order of its levels (channel, rank,
# bankgroup, bank, row, column; the column less the prefetch bits); DRAMsim3's
# Config::SetAddressMapping reads a string of two-letter fields MSB first, above
# log2(bus_width / 8 * BL) offset bits, the column field being log2(columns) - log2(BL) wide.

#: DDR4 8 Gb x8 in a 64-bit rank (Ramulator 2's DDR4_8Gb_x8, DRAMsim3's DDR4_8Gb_x8 configs):
#: 2 ranks, 4 bank groups of 4 banks, 65536 rows of 1024 columns, BL8.
DDR4 = DramGeometry.from_datasheet(channels=2, ranks=2, bankgroups=4, banks=4, rows=65536,
                                   columns=1024, bus_bits=64, burst_length=8)
_LEVELS = ("channel", "rank", "bankgroup", "bank", "row", "col")
_BITS = {"channel": 1, "rank": 1, "bankgroup": 2, "bank": 2, "row": 16, "col": 10 - 3}


def _slice(addr: int, order) -> dict:
    """Cut ``addr`` into the levels of ``order``, LSB first."""
    out = {}
    for level in order:
        out[level] = addr & ((1 << _BITS[level]) - 1)
        addr >>= _BITS[level]
    return out


def ramulator2(name: str, addr: int) -> dict:
    tx = addr >> 6                                   # prefetch 8 x 64-bit channel = 64 B
    if name == "RoBaRaCoCh":    # channel, then column, then rank .. row (levels 1 to row)
        return _slice(tx, ("channel", "col", "rank", "bankgroup", "bank", "row"))
    if name == "ChRaBaRoCo":    # the last level (column) first, then row .. channel
        return _slice(tx, tuple(reversed(_LEVELS)))
    raise KeyError(name)


def dramsim3(mapping: str, addr: int) -> dict:
    codes = {"ch": "channel", "ra": "rank", "bg": "bankgroup", "ba": "bank", "ro": "row",
             "co": "col"}
    fields = [codes[mapping[i:i + 2]] for i in range(0, len(mapping), 2)]
    return _slice(addr >> 6, tuple(reversed(fields)))        # the string is MSB first


@pytest.mark.parametrize("ours, ramulator, dramsim", [
    ("robaracoch", "RoBaRaCoCh", "robabgracoch"),
    ("ianus", "ChRaBaRoCo", "chrabgbaroco"),
    ("rocobaracho", None, "rocobgbarach"),
])
def test_named_mappings_match_ramulator_and_dramsim3(ours, ramulator, dramsim):
    assert (DDR4.columns, DDR4.burst_bytes) == (128, 64)     # 1024 columns / BL8; 64 bit x BL8
    mapping = AddressMapping(ours, DDR4)
    rng = np.random.default_rng(SEED)
    addresses = rng.integers(0, 1 << mapping.address_bits, 2000, dtype=np.uint64)
    got = golden.map_addresses(mapping, addresses)
    for k, addr in enumerate(int(a) for a in addresses):
        expected = [dramsim3(dramsim, addr)] + ([ramulator2(ramulator, addr)] if ramulator else [])
        mine = {level: int(got[level][k]) for level in _LEVELS}
        for reference in expected:
            assert mine == reference, f"seed {SEED}, {ours}, address {addr:#x}"
        assert int(got["offset"][k]) == addr & 63


def test_datasheet_columns_are_converted_and_checked():
    lp = DramGeometry.from_datasheet(channels=4, ranks=1, bankgroups=1, banks=16, rows=65536,
                                     columns=1024, bus_bits=16, burst_length=16,
                                     interleave_bytes=256)
    assert lp == DramGeometry.lpddr5()          # LPDDR5 x16: 1024 columns / BL16, 16 bit x BL16
    with pytest.raises(ValueError, match="Datasheet column count must be at least the burst "
                                         "length \\(8\\), not 4"):
        DramGeometry.from_datasheet(channels=1, ranks=1, bankgroups=1, banks=1, rows=2,
                                    columns=4, bus_bits=64, burst_length=8)
    with pytest.raises(ValueError, match="Burst length \\(BL\\) must be a power of two"):
        DramGeometry.from_datasheet(channels=1, ranks=1, bankgroups=1, banks=1, rows=2,
                                    columns=1024, bus_bits=64, burst_length=6)
