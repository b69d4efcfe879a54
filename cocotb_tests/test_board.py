"""``memwall board run --sim``: the host program against the board top under Verilator (two
blocks also under Icarus), the serial pins driven by cocotbext-uart (:func:`.launcher.run_board`,
:mod:`.board_tb`), one block of each family reached at ``small``, bit-exact against its golden
model.

Each case is one Verilator build of the board top (13 to 22 s cold, docs/board.md) and a run of
a few thousand cycles. A block with a fixed latency at one item a cycle, one output per input, must
also show it: every output one cycle after the one before, and the run's cycles
``n + 1 + latency`` (the harness's contract, docs/board.md).
"""

import pytest

from memwall import registry
from memwall.board.run import sim_settings
from memwall.board.vectors import vectors

from .launcher import run_board

SEED = 23
#: Items per input stream.
COUNT = 24

#: (block, items per input stream, marks): the harness path is the same for every block, so the
#: second block of a family whose first already runs in make test goes to --slow. The tile
#: generator gets 6 commands: each gives about 25 addresses, read back at 8 bytes each. FlowKV
#: gets 3 decode steps (about 50 beats of q, k and v each); the eDRAM 96 requests, 48 writes
#: and 48 reads, so that the run crosses a forced refresh (every 45 cycles at small); the
#: in-flash PE 4 GEMVs (up to four pages each).
CASES = [
    ("umdam", COUNT, ()),
    # Covered by umdam (the harness path, and the one-item-a-cycle contract checked on its fixed
    # latency) and by the requantizer's own cocotb cases; 30 s of a cold make test.
    ("arith-requant", COUNT, (pytest.mark.slow,)),
    # Covered by umdam and arith-requant (the harness path) and by the blocks' own cocotb
    # cases; 32 and 17 s of a cold make test, which had reached its 15-minute budget.
    ("flowkv", 3, (pytest.mark.slow,)),
    ("edram-fpga", 96, (pytest.mark.slow,)),
    # Covered by umdam (the harness path, a stream of commands out of one item in) and by the
    # tile generator's own cocotb cases.
    ("umdam-tilegen", 6, (pytest.mark.slow,)),
    # Covered by the other blocks' runs (the harness path; the flash loop's rd_cmd is captured
    # like any output and rd_data played like any input) and by the PE's own cocotb cases
    # (test_inflash.py, both simulators): 34 to 38 s, the most of the set.
    ("inflash", 4, (pytest.mark.slow,)),
    # Covered by umdam and arith-requant (an integer unit) above: the same harness path, each a
    # Verilator build of 15 to 22 s.
    *((name, COUNT, (pytest.mark.slow,)) for name in (
        "arith-fpmul", "arith-idot", "arith-fpadd", "arith-fpmac", "arith-fdot", "arith-fpconv",
        "arith-int2fp", "arith-exp2", "arith-recip", "arith-rsqrt")),
    # Covered by umdam (the same streams, the mapper's inverse) and flowkv (one pair of the
    # array; the array's build is about 40 s).
    ("umdam-composer", COUNT, (pytest.mark.slow,)),
    ("flowkv-array", 2, (pytest.mark.slow,)),
    # Covered by flowkv (the harness path with several input streams) and by FusedDQP's own
    # cocotb cases; 4 commands (GEMVs in fp32 and bf16, dequantizations) with two outputs.
    ("flowkv-dqp", 4, (pytest.mark.slow,)),
    # Weights loaded by a setup run, then 5 GEMVs (32 chunks, one GEMV with an RC factor: the
    # fewest GEMVs at this seed that reach the rc stream) with credits.
    ("rdxe-vac", 5, ()),
    # Covered by rdxe-vac (the setup run, the VACs and their ring) and by the tile's own cocotb
    # cases; 12 commands (GEMVs and an attention episode of 4 tokens): 89 s cold, 37 s built.
    ("rdxe-dxt", 12, (pytest.mark.slow,)),
    # Covered by rdxe-vac (the setup run), the engine's own cocotb cases (the same loads and
    # model, cocotb_tests/rdxe/dxe_tb.py), tests/test_board_run.py (its vectors) and
    # tests/test_board_harness.py (its board form's sequencer): 2 tokens of the reduced layer;
    # the second attends over both. 646,834 cycles (15.5 kB over the UART): 8 min built on a
    # free core, 28 min at nice 10 beside two placements.
    ("rdxe-dxe", 2, (pytest.mark.slow,)),
]


#: Each case under Verilator (``memwall board run --sim``'s simulator); the two in make test run
#: there under Icarus, and under Verilator with --slow: the same testbench on the same board
#: top, where Verilator's cold C++ build costs more than Icarus's run (umdam: 59 against 11 s of
#: CPU cold, rdxe-vac: 30 against 29 s with Verilator's runtime already in ccache; 21 and 43 s
#: of the suite under Verilator before).
RUNS = [pytest.param(n, c, sim, marks=m or ((pytest.mark.slow,) if sim == "verilator" else ()),
                     id=f"{n}-small" + ("-icarus" if sim == "icarus" else ""))
        for n, c, m in CASES for sim in (("verilator",) if m else ("icarus", "verilator"))]


@pytest.mark.parametrize("name, count, simulator", RUNS)
def test_board_run_sim(name, count, simulator):
    entry = registry.get(name)
    params = entry.parameters("small")
    block = entry.board_component(params)
    v = vectors(entry, params, count, SEED, block)
    report, folder = run_board(name, params, count=count, seed=SEED, settings=sim_settings(v),
                               simulator=simulator)
    text = "\n".join(report.lines())
    assert report.mismatches == 0 and not report.first, f"{folder}:\n{text}"
    assert report.end == "OK" and report.captured == {s: len(x) for s, x in v.expected.items()}, \
        text
    assert report.passed
    if len(v.expected) > 1:
        return                  # the run's cycles are its last output's: one source only
    timing = entry.timing(params, block)
    for source, items in v.expected.items():
        t = timing[source]
        one_for_one = t.after is not None and len(items) == len(v.stimulus[t.after])
        if one_for_one and t.latency is not None and t.throughput == 1.0 and \
                timing[t.after].throughput == 1.0:
            assert report.cycles_per_item[source] == 1.0, text
            assert report.run_cycles == len(v.stimulus[t.after]) + 1 + t.latency, text
