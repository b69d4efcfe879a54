"""Real SmolLM2 data through the FlowKV blocks (issues 41 and 42): one decode step of the
``flowkv`` back-end, its projections on FusedDQP (``flowkv-dqp``) and its attention on the tile
pair (one step per KV head) and on the array (one pair per KV head), under Icarus and
Verilator; every output equals the back-end's (fp32 projections, bf16 attention) and the RTL
cycles equal the cycle models (:func:`hdl.flowkv.dqp_spec.command_cycles`,
:func:`sim.flowkv.step_cycles`; cocotb_tests/realdata/flowkv.py has the runs)."""

from __future__ import annotations

import pytest

from cocotb_tests.realdata import check_case
from sim.llm.loader import PROJECTIONS

from .launcher import SIMULATORS, simulator_runs

#: make test: layer 3's KV head 0 at position 16 on the pair (17 rows: a whole chunk and one row;
#: 98 % of the weight on position 0, the attention sink SmolLM2 has from layer 3 on). Layer 3
#: keeps the case's capture to four layers of the back-end.
#: At full rate only (no stalled pass, cocotb_tests/realdata): the --slow cases repeat their ops
#: under idle cycles and back-pressure, which the block's random cases check in make test.
SMALL = {"layer": 3, "position": 16, "ops": ["attention.kv"], "kv_heads": [0]}
#: --slow: layer 18, the widest score span at position 64 (KV head 2: 63 log2 units, all but
#: 3e-8 of head 8's weight on position 0), the whole step (65 rows, five chunks): every KV head on
#: the pair, then all nine heads on the array of three pairs.
FULL = {"layer": 18, "position": 64, "ops": ["attention.kv", "attention"]}
#: --slow: layer 0's attn_q at position 16, its first 64 rows (two tiles of FusedDQP, 1,214
#: cycles), at full rate and under random idle cycles and back-pressure. Not in make test: at
#: 32 lanes Icarus runs FusedDQP at about 13 cycles a second here (210 to 254 s for this case);
#: in make test, tests/test_flowkv_dqp.py::test_real_weights_bit_exact runs attn_q's first 8 rows
#: through the engine (8 lanes, Amaranth's simulator) and tests/test_cases_flowkv.py checks that
#: these ops are the back-end's GEMV.
PROJECTION = {"layer": 0, "position": 16, "ops": ["attn_q"], "rows": 64}
#: --slow, Verilator only: every projection of layer 0 at position 64, whole (110,592 weight
#: beats; Icarus would take hours at 13 cycles a second).
PROJECTIONS_FULL = {"layer": 0, "position": 64, "ops": list(PROJECTIONS)}


#: Verilator with --slow: the pair at d = 64, G = 3 is a C++ build of its own (no other make-test
#: case has that size); test_realdata_flowkv_small under Icarus runs the same Verilog in make test.
@pytest.mark.parametrize("simulator", simulator_runs())
def test_realdata_flowkv_small(simulator):
    """Layer 3, position 16, KV head 0 on the pair: bit-exact, RTL cycles == model cycles."""
    check_case("flowkv", SMALL, simulator, stalled=False)


#: The full step (three pair steps and the array's: 18k cycles, the array's builds);
#: test_realdata_flowkv_small runs the same runner on the same pair in make test.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_flowkv_full(simulator):
    """Layer 18, position 64: nine heads over three KV heads on the pair and on the array."""
    check_case("flowkv", FULL, simulator)


@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_flowkv_projection(simulator):
    """Layer 0's attn_q, rows 0-63, on FusedDQP: bit-exact, RTL cycles == model cycles."""
    check_case("flowkv", PROJECTION, simulator)


@pytest.mark.slow
def test_realdata_flowkv_projections_full():
    """Layer 0's seven projections, whole, on FusedDQP under Verilator."""
    check_case("flowkv", PROJECTIONS_FULL, "verilator")
