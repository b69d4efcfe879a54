"""Geometries and constants shared by the UMDAM test modules (written out, not taken from presets)."""

from hdl.umdam import DramGeometry

SEED = 20250807
#: DRAM coordinates as the specification lists them (independent of hdl.umdam.COORDINATES).
COORDS = ("channel", "rank", "bankgroup", "bank", "row", "col", "offset")

#: LPDDR5 x16 of the paper's Table I: 4 channels, 16 banks, 2 KB rows, 32 B bursts, 256 B interleave.
LPDDR5 = DramGeometry.lpddr5()
#: The registry's `small` preset (12 address bits), written out so that a change to the preset
#: shows up; test_small_preset_is_the_toy_geometry checks they agree.
SMALL = DramGeometry(channels=2, ranks=1, bankgroups=1, banks=4, rows=16, columns=8,
                     burst_bytes=4, interleave_bytes=8)
#: Two of everything: ranks and bank groups are real fields (10 address bits).
RANKS_BG = DramGeometry(channels=2, ranks=2, bankgroups=2, banks=2, rows=8, columns=4,
                        burst_bytes=4, interleave_bytes=8)
