"""The DXE's layer controller (hdl/rdxe/ctrl.py) in Amaranth's simulator: the reduced Llama layer's
assembled program (sim/rdxe/reduced.py) runs token by token, its vector and scalar ops on the
controller's units and its DXT ops by a model of the DXT side on ``dxt``/``ext`` (the golden
step of each, :func:`golden.rdxe.assemble.decode`); after every token the whole token buffer
and rr-SRAM equal :func:`golden.rdxe.assemble.run_words`'s bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from golden.rdxe import assemble as A
from golden.rdxe import program as P
from hdl.rdxe.ctrl import DXT_OPS, CtrlConfig, DxeController, Store, run_cycles
from hdl.rdxe.isa import OPCODES, ProgramSpace, instruction_layout
from tests.dxe_bench import DxeBench, golden_images
from sim.rdxe.reduced import HEAD_DIM, HIDDEN, INPUTS, layer_tables, program, tokens
from tests.stream_sim import shared, simulate

LANES = 4
SPACE = ProgramSpace(tb_words=128, rr_bytes=192, registers=4, const_words=192, gemvs=4,
                     align=LANES)
CFG = CtrlConfig(SPACE, lanes=LANES, head_dim=HEAD_DIM, program_words=64)


@pytest.fixture(scope="module")
def layer():
    tables = layer_tables()
    asm = A.assemble(program(), tables, INPUTS, ["h"], SPACE, HEAD_DIM)
    return tables, asm, A.flat_tables(tables, asm)


#: The controller with vector units of half its lanes: two sub-beats a beat.
HALF = CtrlConfig(SPACE, lanes=LANES, head_dim=HEAD_DIM, program_words=64,
                  vector_lanes=LANES // 2)


@pytest.mark.parametrize("cfg", [CFG, HALF], ids=["full", "half"])
def test_the_reduced_layer_runs_bit_for_bit(layer, cfg):
    """Two tokens of the reduced layer (the second attends over both): after each, the TB and
    rr-SRAM equal the golden's, and each run takes :func:`run_cycles`, with vector units of
    the controller's lanes and of half of them. The first token's largest ``|h|`` is in the
    first sub-beat of its first row, the second's in the second: at half the lanes each
    running maximum must keep its token's first sub-beat (until session 27 the second
    sub-beat restarted it, and a token like the first took a wrong ``M``)."""
    tables, asm, flat = layer
    dut = shared(DxeController, cfg)
    first, _, third = tokens(3)
    inputs = [third, first]
    where = [int(np.argmax(np.abs(np.asarray(t["h"], np.uint32).view(np.float32))))
             for t in inputs]
    assert where == [1, 3], where         # HALF's sub-beats: elements 0-1, then 2-3
    want = golden_images(asm, flat, inputs)
    got, b_runs = [], []

    async def bench(ctx):
        b = DxeBench(ctx, dut, asm, flat, random.Random(5))
        b.runs = b_runs
        await b.load()
        for token in inputs:
            stopped = await b.token(token)
            assert stopped == (len(asm.words), 0)
            got.append((await b.image(Store.TB, SPACE.tb_words, 32),
                        await b.image(Store.RR, SPACE.rr_bytes, 8)))
    simulate(dut, bench)
    for t, ((tb, rr), (want_tb, want_rr)) in enumerate(zip(got, want)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert np.array_equal(have, need), \
                f"token {t}: {what} differs at {np.flatnonzero(have != need)}"
    for cycles, dxt in b_runs:
        assert cycles == run_cycles(cfg, asm.words, dxt)
    out = asm.outputs["h"]
    assert not np.array_equal(want[-1][0][out:out + HIDDEN], want[-2][0][out:out + HIDDEN])
    assert sum(OPCODES[instruction_layout(SPACE).from_bits(w).op] in DXT_OPS
               for w in asm.words) == 6


def test_errors_stop_the_run_and_ext_waits(layer):
    """A run past the program memory ends at once with ``error``; a DXT op answered with an error
    ends the run at that op, nothing after it run; ``ext`` is not taken while the controller runs
    its own ops, and is while a DXT op runs."""
    tables, asm, flat = layer
    dut = shared(DxeController, CFG)
    dxt_pcs = [pc for pc, w in enumerate(asm.words)
               if OPCODES[instruction_layout(SPACE).from_bits(w).op] in DXT_OPS]
    seen = {}

    async def bench(ctx):
        b = DxeBench(ctx, dut, asm, flat, random.Random(9))
        await b.load()
        seen["over"] = await b.token({}, pc=60, count=5)
        b.fail_at = 1
        token = tokens(1)[0]
        seen["failed"] = await b.token(token)
        seen["tb"] = await b.image(Store.TB, SPACE.tb_words, 32)
        seen["early"] = b.ext_ready_early
    simulate(dut, bench)
    assert seen["over"] == (60, 1)
    assert seen["failed"] == (dxt_pcs[1], 1)
    # Every op before the failed KV append ran (the QKV GEMV, RoPE, K and V quantized), none
    # after it.
    state = A.new_state(asm)
    for name, value in tokens(1)[0].items():
        state.tb[(asm.inputs[name], len(value))] = value
    P.run([A.decode(w, asm, {i: g[0].shape for i, g in flat.gemvs.items()})
           for w in asm.words[:dxt_pcs[1]]], state, flat)
    assert np.array_equal(seen["tb"], state.tb.words.astype(np.uint64))
    assert seen["early"] and not any(seen["early"])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"lanes": 3}, ValueError, "Controller lane count must be a power of two between 2 and 64, "
                               "not 3"),
    ({"lanes": 8}, ValueError, r"The program space's rows \(align 4\) must be the controller's "
                               r"lanes \(8\)"),
    ({"head_dim": 12}, ValueError, r"Head dimension must be a multiple of 2 x lanes \(8\), not "
                                   r"12"),
    ({"program_words": 0}, ValueError, "Program words must be between 1 and 65536, not 0"),
    ({"space": 3}, TypeError, "Controller space must be a ProgramSpace, not 3"),
    ({"vector_lanes": 3}, ValueError, "Vector unit lane count must be a power of two between 2 "
                                      "and 4, not 3"),
    ({"vector_lanes": 8}, ValueError, "Vector unit lane count must be a power of two between 2 "
                                      "and 4, not 8"),
], ids=["lanes", "align", "head_dim", "program_words", "space", "vector_lanes", "wide_vector"])
def test_parameters_are_checked(kwargs, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        CtrlConfig(**{"space": SPACE, "lanes": LANES, "head_dim": HEAD_DIM, **kwargs})
    with pytest.raises(TypeError, match="^Controller configuration must be a CtrlConfig, not 3$"):
        DxeController(3)


def test_vector_cycles_sum_the_run(layer):
    """``sim.rdxe.host.vector_cycles`` (the docs' SmolLM2 table) is the run's model without the
    DXT ops and the run's own two cycles, here on the reduced layer; halving the vector lanes
    slows every op whose beats read one slot, RoPE (three slots a beat) by its last sub-beat."""
    from sim.rdxe.host import vector_cycles
    from sim.rdxe.reduced import FFN, HEADS, KV_HEADS

    _, asm, _ = layer
    shape = (HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM)
    dxt = sum(OPCODES[instruction_layout(SPACE).from_bits(w).op] in DXT_OPS for w in asm.words)
    for cfg in (CFG, HALF):
        by = vector_cycles(LANES, cfg.vector_lanes, shape)
        assert sum(by.values()) == run_cycles(cfg, asm.words, [0] * dxt) - 2 - 2 * dxt
    full, half = vector_cycles(LANES, None, shape), vector_cycles(LANES, 2, shape)
    assert all(half[op] > full[op] for op in ("max", "quant", "dequant"))
    ropes = sum(OPCODES[instruction_layout(SPACE).from_bits(w).op] == "rope" for w in asm.words)
    assert half["rope"] == full["rope"] + ropes     # 3 slots a beat hide 2 sub-beats: +1 an op

