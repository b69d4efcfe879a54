"""Run the ring of DXEs' testbench (cocotb_tests/rdxe/ring_tb.py) under Icarus and Verilator at
``small``; the registry entry's parameter messages."""

import pytest

from memwall import registry
from memwall.params import ParameterError

from .launcher import case_id, case_runs, run_case

#: make test: ``full_rate`` under Icarus (rows, slots, KV memories and every cycle against the
#: model; tests/test_rdxe_ring_rtl.py's Amaranth test of the same ring is --slow). With --slow:
#: ``stalled`` (idle input, output held in windows) and both under Verilator.
FULL = ("rdxe-ring", "small", {}, ["full_rate"])
STALLED = ("rdxe-ring", "small", {}, ["stalled"])
RUNS = case_runs([FULL], verilator_slow={case_id(*FULL)}) + \
    case_runs([STALLED], slow={case_id(*STALLED)}, tag="-stalled")


@pytest.mark.parametrize("case, simulator", RUNS)
def test_rdxe_ring(case, simulator):
    run_case(case, simulator)


@pytest.mark.parametrize("overrides, message", [
    ({"dxes": "9"}, "DXE count must be between 1 and 8, not 9"),
    ({"dxes": "0"}, "DXE count must be between 1 and 8, not 0"),
    ({"rows": "0"}, "Token rows must be between 1 and 32, not 0"),
    ({"rows": "33"}, "Token rows must be between 1 and 32, not 33"),
    ({"slots": "17"}, "Slots must be between 1 and 16, not 17"),
    ({"lanes": "8"}, "Head dimension must be between 16 and 1024, not 8"),
    ({"dxts": "2"}, "A ring's DXEs hold one DXT each: dxts must be 1, not 2"),
])
def test_parameters_are_checked(overrides, message):
    """The ring's checks, and the engine's, name the parameter, its range and the value."""
    with pytest.raises(ParameterError) as info:
        registry.get("rdxe-ring").parameters("small", overrides)
    assert str(info.value) == message


def test_a_ring_of_smollm2_layers_is_refused():
    """Two DXEs of rdxe-dxe's paper preset (SmolLM2's layer in WMEM, 31.2 Mbit each) are over
    the size guard's storage, and their multipliers too at five (826 each): the registry refuses
    them before building (docs/rdxe.md 16.4)."""
    from dataclasses import fields

    from memwall.blocks.rdxe_dxe import DxeParams
    from memwall.registry import TooLarge

    paper = registry.get("rdxe-dxe").presets["paper"]
    smollm2 = {f.name: str(getattr(paper, f.name)) for f in fields(DxeParams)}
    with pytest.raises(TooLarge, match=r"^rdxe-ring at these parameters is estimated at "
                                       r"6[\d,]+ storage bits \(limit 33,554,432\); check"):
        registry.get("rdxe-ring").parameters("small", {**smollm2, "rows": "40", "dxes": "2"})
    with pytest.raises(TooLarge, match=r"storage bits \(limit 33,554,432\) and 4,130 "
                                       r"multipliers \(limit 4,096\)"):
        registry.get("rdxe-ring").parameters("small", {**smollm2, "rows": "40", "dxes": "5"})
