"""Run the rDXE decoder engine's testbench (cocotb_tests/rdxe/dxe_tb.py) under Icarus and
Verilator: the reduced layer at ``small``, and SmolLM2's layer 2 at ``paper`` (``--slow``); the
registry entry's parameter messages."""

import pickle

import pytest

from memwall import registry
from memwall.blocks.rdxe_dxe import TWO_DXTS
from memwall.params import ParameterError
from sim.rdxe.host import Layer, reduced_layer

from .launcher import SIMULATORS, case_id, case_runs, run_block, run_case
from .rdxe.dxe_tb import ENV_LAYER

#: The small preset runs the reduced layer: two tokens with idle and back-pressure, a token at
#: the cache's capacity. Under Verilator with --slow: the same testbench on the same Verilog.
#: With --slow under both, two layers looped (docs/rdxe.md 16.1: a KV group, WMEM, PPU entries,
#: constants and GEMV tables for each); tests/test_rdxe_loop.py runs the loop in make test.
LOOP = ("rdxe-dxe", "small", {"layers": "2", "kv_groups": "2", "wmem_depth": "512",
                              "ppu_depth": "128", "const_words": "384", "gemvs": "9"},
        ["layer_tokens", "cache_full"])
#: With --slow under both, two slots of one layer (docs/rdxe.md 16.2: a KV group each): two
#: requests interleaved, and a slot's restart at the cache's capacity; tests/test_rdxe_slots.py
#: runs two slots of two layers in make test.
SLOTS = ("rdxe-dxe", "small", {"slots": "2", "kv_groups": "2"}, ["slot_tokens", "cache_full"])
#: With --slow under both, two DXTs of one head in one KV group each (docs/rdxe.md 16.5: the
#: reduced layer's two heads in two groups, every GEMV split across the DXTs);
#: tests/test_rdxe_dxts.py runs the plumbing in make test.
DXTS = ("rdxe-dxe", "small", TWO_DXTS,
        ["layer_tokens", "cache_full"])
CASES = [("rdxe-dxe", "small", {}, ["layer_tokens", "cache_full"]), LOOP, SLOTS, DXTS]

RUNS = case_runs(CASES, verilator_slow={case_id(*CASES[0])},
                 slow={case_id(*LOOP), case_id(*SLOTS), case_id(*DXTS)})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_rdxe_dxe(case, simulator):
    run_case(case, simulator)


@pytest.mark.parametrize("overrides, message", [
    ({"lanes": "8"}, "Head dimension must be between 16 and 1024, not 8"),
    ({"tb_words": "0"}, "Token buffer words must be between 1 and 1048576, not 0"),
    ({"registers": "65"}, "Scalar registers must be between 1 and 64, not 65"),
    ({"gemvs": "65"}, "GEMV tables must be between 1 and 64, not 65"),
    ({"program_words": "70000"}, "Program words must be between 1 and 65536, not 70000"),
    ({"vacs": "3"}, "VAC count must be a power of two between 4 and 64, not 3"),
])
def test_parameters_are_checked_by_the_engine(overrides, message):
    """The controller's and the DXT's own checks name the parameter, its range and the value."""
    with pytest.raises(ParameterError) as info:
        registry.get("rdxe-dxe").parameters("small", overrides)
    assert str(info.value) == message


#: With --slow under both (121 s under Icarus, 181 s under Verilator cold: a two-DXT build
#: each, over make test's budget): the one-DXT reduced layer (one KV group of 2 heads) on two
#: DXTs of the small preset's DXT, the group's cache and both heads on DXT 0, every GEMV split
#: across both (docs/rdxe.md 16.6). make test keeps the side's RTL on one DXT (the small case
#: above) and the layout and cycle model of several (tests/test_rdxe_dxts.py).
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_one_group_on_two_dxts(simulator, tmp_path):
    block = registry.get("rdxe-dxe")
    path = tmp_path / "layer.pickle"
    path.write_bytes(pickle.dumps(reduced_layer(block.parameters("small"))))
    run_block("rdxe-dxe", block.parameters("small", {"dxts": "2"}), simulator,
              testcase=["layer_tokens", "cache_full"], extra_env={ENV_LAYER: str(path)})


#: SmolLM2-135M's layer 2 for two tokens at the paper preset (16 VACs of 16 lanes, the layer's
#: weights stationary in WMEM) under Verilator: the TB and rr-SRAM bit-exact to the rdxe
#: back-end's layer program (golden.rdxe.assemble.run_words on its tables), the cycles to the
#: model (18,224 cycles a token). The same testbench and generator run the reduced layer at
#: small (test_rdxe_dxe). 26 min here with the build cached, about 45 min cold (docs/rdxe.md
#: 14.4: 3 min to generate, 17 min to build, 20 min to load the WMEM through its port).
@pytest.mark.slow
def test_smollm2_layer_on_the_dxe(tmp_path):
    from golden.rdxe import program as P
    from sim.llm.backends.rdxe import RDXE
    from sim.llm.loader import load
    from sim.llm.score import default_text
    from sim.llm.tokenizer import tokenizer
    from tests.test_llm_rdxe import _layer_case

    mf = load()
    text_ids = tokenizer(mf).encode(default_text().text)
    # The back-end as tests/test_llm_rdxe.py's ``dxe`` fixture makes it.
    dxe = RDXE(mf, calibration=text_ids[4096:4120], glu="ve", host="dxe")
    c, index, count = mf.config, 2, 2
    _, inputs, _ = _layer_case(mf, text_ids[:257], dxe, index, count)
    layer = Layer(P.llama_layer(c.heads, c.kv_heads, c.head_dim), dxe.dxe_tables(index),
                  {"h": c.d_model, "cos": c.head_dim // 2, "sin": c.head_dim // 2}, inputs)
    path = tmp_path / "layer.pickle"
    path.write_bytes(pickle.dumps(layer))
    params = registry.get("rdxe-dxe").parameters("paper")
    run_block("rdxe-dxe", params, "verilator", testcase="layer_tokens",
              extra_env={ENV_LAYER: str(path)})
