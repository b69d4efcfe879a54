"""The DXE's layer program on RTL end to end (hdl/rdxe/dxe.py: the controller and the DXT side
with a DXT): the reduced Llama layer (tests/rdxe_layer.py), every operation in Amaranth's simulator,
the host only loading the layer's tables and the token's inputs; after each token the whole token
buffer and rr-SRAM equal :func:`golden.rdxe.assemble.run_words`' bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from golden import rdxe as golden
from golden.arith.float import from_float
from golden.rdxe import assemble as A
from hdl.arith.format import FP32
from hdl.rdxe.ctrl import CtrlConfig, Store, run_cycles
from hdl.rdxe.dxe import Dxe
from hdl.rdxe.dxtside import DxtSide, instruction_cycles
from hdl.rdxe.isa import OPCODES, ProgramSpace, instruction_layout
from hdl.rdxe.spec import DxtConfig
from tests.dxe_bench import DxeBench, golden_images
from tests.rdxe_layer import HEAD_DIM, INPUTS, layer_tables, program, tokens
from tests.stream_sim import set_payload, shared, simulate

LANES = 4
SPACE = ProgramSpace(tb_words=128, rr_bytes=192, registers=4, const_words=192, gemvs=5,
                     align=LANES)
CFG = CtrlConfig(SPACE, lanes=LANES, head_dim=HEAD_DIM, program_words=64)
#: The layer's DXT with 4 lanes (a chunk is a row of the controller's memories): WMEM for every
#: GEMV and the identity at once, PPU entries for them, the score entry and P.V's.
DXT = DxtConfig(lanes=LANES, vacs=4, head_dim=HEAD_DIM, group_size=2, kv_groups=1,
                wmem_depth=256, ppu_depth=64, kv_rows=64, max_inputs=64)


def _tables(tables, asm):
    """The DXT's loads: WMEM rows and PPU entries of every GEMV by table index, the identity
    after them, then the score entry and P.V's; the table entries and the fixed entries."""
    flat = A.flat_tables(tables, asm)
    gemvs = dict(flat.gemvs)
    identity = len(gemvs)
    d = HEAD_DIM
    gemvs[identity] = (np.eye(d, dtype=np.int8), np.ones(d, np.int64), np.zeros(d, np.int64))
    N, L = DXT.vacs, DXT.lanes
    wmem, ppu, table, row, entry = [], [], [], 0, 0
    for index, (W, m, shift) in sorted(gemvs.items()):
        M, K = W.shape
        C, P = -(-K // L), -(-M // N)
        image = golden.wmem_image(W, DXT)
        wmem += [{"vac": v, "addr": row + r, "data": [int(x) for x in image[v, r]]}
                 for v in range(N) for r in range(P * C)]
        ppu += [{"vac": o % N, "addr": entry + o // N, "m": int(m[o]), "shift": int(shift[o])}
                for o in range(M)]
        table.append({"index": index, "row": row, "entry": entry, "outputs": M, "chunks": C,
                      "inv_k": int(from_float(np.float32(1 / K), FP32))})
        row, entry = row + P * C, entry + P
    score_entry, pv_entry = entry, entry + 1
    ppu += [{"vac": e % N, "addr": pv_entry + e // N, "m": 1, "shift": DXT.prob_frac}
            for e in range(d)]
    return wmem, ppu, table, {"identity": identity, "score_entry": score_entry,
                              "pv_entry": pv_entry, "score_scale": int(tables.score_scale)}


async def _send(ctx, port, items):
    for item in items:
        ctx.set(port.valid, 1)
        set_payload(ctx, port.payload, item)
        while not ctx.get(port.ready):
            await ctx.tick()
        await ctx.tick()
    ctx.set(port.valid, 0)


@pytest.fixture(scope="module")
def layer():
    tables = layer_tables()
    asm = A.assemble(program(), tables, INPUTS, ["h"], SPACE, HEAD_DIM)
    return tables, asm, A.flat_tables(tables, asm)


async def _loaded(ctx, top, layer, position: int = 0) -> DxeBench:
    """Load the layer's DXT tables, WMEM and PPU, the program and the constants; the next KV
    append is token ``position``. Return the host's bench."""
    tables, asm, flat = layer
    wmem, ppu, table, fixed = _tables(tables, asm)
    side = top
    for name, value in {**fixed, "position": position}.items():
        ctx.set(getattr(side, name), value)
    ctx.set(side.restart, 1)
    await ctx.tick()
    ctx.set(side.restart, 0)
    for item in table:
        ctx.set(side.table.valid, 1)
        set_payload(ctx, side.table.payload, item)
        await ctx.tick()
    ctx.set(side.table.valid, 0)
    await _send(ctx, side.wmem, wmem)
    await _send(ctx, side.ppu, ppu)
    bench = DxeBench(ctx, top, asm, flat, random.Random(2))
    await bench.load()
    return bench


def _model_cycles(asm, flat, tokens: int) -> int:
    """The run's cycles by the controller's model, each DXT instruction's by the DXT side's with
    its commands timed by the DXT's model (``tokens`` in the cache after the append)."""
    dxt = []
    for word in asm.words:
        f = instruction_layout(SPACE).from_bits(word)
        op = OPCODES[f.op]
        if op in ("gemv", "gemv_norm"):
            M, K = flat.gemvs[f.table][0].shape
            kind = "gemv" if op == "gemv" else "rmsnorm"
            commands = [(golden.command_cycles(kind, M, K, DXT), True)]
        elif op == "kv_append":
            one = golden.command_cycles("gemv", HEAD_DIM, HEAD_DIM, DXT)
            commands = [(one, True)] * (2 * DXT.kv_groups)
        elif op == "attend":
            commands = [(golden.command_cycles("qk", tokens, 0, DXT), True),
                        (golden.command_cycles("pv", tokens, 0, DXT), False)] * DXT.heads
        else:
            continue
        dxt.append(instruction_cycles(DXT, op, commands))
    return run_cycles(CFG, asm.words, dxt)


def test_the_reduced_layer_runs_on_the_dxt(layer):
    """Two tokens of the reduced layer, the DXT ops on the DXT: the TB and rr-SRAM equal the
    golden's after each token, the run ends without an error, and its cycles equal the
    controller's model with the DXT side's and the DXT's."""
    _, asm, flat = layer
    top = shared(Dxe, CFG, DXT)
    inputs = tokens(2)
    want = golden_images(asm, flat, inputs)
    got = []

    async def bench(ctx):
        b = await _loaded(ctx, top, layer)
        for token in inputs:
            taken = await b.start(token)
            ctx.set(top.done.ready, 1)
            while not ctx.get(top.done.valid):
                await b.tick()
            cycles = b.cycles - taken
            assert (ctx.get(top.done.payload.pc), ctx.get(top.done.payload.error)) \
                == (len(asm.words), 0)
            await b.tick()
            ctx.set(top.done.ready, 0)
            got.append((await b.image(Store.TB, SPACE.tb_words, 32),
                        await b.image(Store.RR, SPACE.rr_bytes, 8), cycles))
    simulate(top, bench)
    for t, ((tb, rr, cycles), (want_tb, want_rr)) in enumerate(zip(got, want)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert np.array_equal(have, need), \
                f"token {t}: {what} differs at {np.flatnonzero(have != need)}"
        assert cycles == _model_cycles(asm, flat, t + 1), f"token {t}"
        print(f"token {t}: {cycles} cycles from run taken to done")


def test_a_refused_kv_append_ends_the_run(layer):
    """A token at the KV cache's capacity: the DXT refuses its key, the DXT side answers with an
    error and the run ends at the KV append."""
    _, asm, _ = layer
    top = shared(Dxe, CFG, DXT)
    append = next(pc for pc, w in enumerate(asm.words)
                  if OPCODES[instruction_layout(SPACE).from_bits(w).op] == "kv_append")
    seen = {}

    async def bench(ctx):
        b = await _loaded(ctx, top, layer, position=DXT.capacity)
        seen["done"] = await b.run(tokens(1)[0])
    simulate(top, bench)
    assert seen["done"] == (append, 1)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match=r"^The controller's lanes and head dimension \(4, 8\) "
                                         r"must be the DXT's \(8, 8\)$"):
        DxtSide(CFG, DxtConfig(lanes=8, vacs=4, head_dim=HEAD_DIM, group_size=2, kv_groups=1,
                               wmem_depth=256, ppu_depth=64, kv_rows=64, max_inputs=64))
    with pytest.raises(TypeError, match="^DXT side controller configuration must be a "
                                        "CtrlConfig, not 3$"):
        DxtSide(3, DXT)
    with pytest.raises(TypeError, match="DXT"):
        DxtSide(CFG, 3)
    with pytest.raises(ValueError, match="^command kind must be one of gemv, rmsnorm, qk, pv, "
                                         "not 'dot'$"):
        golden.command_cycles("dot", 1, 1, DXT)
