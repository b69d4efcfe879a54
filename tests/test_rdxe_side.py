"""The DXE's layer program on RTL end to end (hdl/rdxe/dxe.py: the controller and the DXT side
with a DXT): the reduced Llama layer (sim/rdxe/reduced.py), every operation in Amaranth's simulator,
the host only loading the layer's tables and the token's inputs; after each token the whole token
buffer and rr-SRAM equal :func:`golden.rdxe.assemble.run_words`' bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sim.rdxe.host import dxt_loads, model_cycles
from golden import rdxe as golden
from golden.rdxe import assemble as A
from hdl.rdxe.ctrl import Store
from hdl.rdxe.dxe import Dxe, stride_value
from hdl.rdxe.dxtside import DxtSide
from hdl.rdxe.isa import OPCODES, instruction_layout
from hdl.rdxe.spec import DxtConfig
from memwall import registry
from tests.dxe_bench import DxeBench, golden_images
from sim.rdxe.reduced import HEAD_DIM, INPUTS, layer_tables, program, tokens
from tests.stream_sim import set_payload, shared, simulate

#: The registry's small preset (memwall/blocks/rdxe_dxe.py): the layer's DXT with 4 lanes (a
#: chunk is a row of the controller's memories), WMEM for every GEMV and the identity at once, PPU
#: entries for them, the score entry and P.V's; the controller's space in rows of 4.
SMALL = registry.get("rdxe-dxe").presets["small"]
CFG, DXT = SMALL.ctrl_config(), SMALL.dxt_config()
SPACE = CFG.space


async def send(ctx, port, items):
    """Send ``items`` on the stream ``port``, each once it is ready (an always-ready one a
    cycle)."""
    for item in items:
        ctx.set(port.valid, 1)
        set_payload(ctx, port.payload, item)
        while not ctx.get(port.ready):
            await ctx.tick()
        await ctx.tick()
    ctx.set(port.valid, 0)


async def token_images(b: DxeBench, top, inputs: dict, pc: int = 0, count: int | None = None,
                       read: bool = True) -> tuple:
    """Run a token's words (``count`` from ``pc``, all by default) on the DXE, its DXT ops on
    hardware, then read the TB and rr-SRAM back (unless not ``read``: None for each). Return
    ``done``'s ``(pc, error)``, the two images and the run's cycles from ``run`` taken to
    ``done.valid``."""
    ctx, space = b.ctx, top.cfg.space
    taken = await b.start(inputs, pc, count)
    ctx.set(top.done.ready, 1)
    while not ctx.get(top.done.valid):
        await b.tick()
    cycles = b.cycles - taken
    stopped = (ctx.get(top.done.payload.pc), ctx.get(top.done.payload.error))
    await b.tick()
    ctx.set(top.done.ready, 0)
    if not read:
        return stopped, None, None, cycles
    return (stopped, await b.image(Store.TB, space.tb_words, 32),
            await b.image(Store.RR, space.rr_bytes, 8), cycles)


@pytest.fixture(scope="module")
def layer():
    tables = layer_tables()
    asm = A.assemble(program(), tables, INPUTS, ["h"], SPACE, HEAD_DIM)
    return tables, asm, A.flat_tables(tables, asm)


async def load_dxe(ctx, top, asm, flat, loads: tuple, position: int = 0,
                   restart: bool = True) -> DxeBench:
    """Load the DXT side's ``loads`` (:func:`~sim.rdxe.host.dxt_loads`: WMEM, PPU,
    GEMV tables, the fixed inputs), then the program and the constants of ``flat``; the next KV
    append is token ``position`` (a DXE of several slots takes its restarts with its runs, and
    so does a ring's DXE: ``restart`` False). A DXE of several DXTs holds the layer's stride
    (its KV groups and heads)."""
    wmem, ppu, table, fixed = loads
    for name, value in fixed.items():
        ctx.set(getattr(top, name), value)
    if getattr(top, "dxts", 1) > 1:
        step = A.stride(asm)
        for name, value in stride_value(top.cfg, top.dxt_cfg, step.gemvs, step.const_words,
                                        step.kv_groups, dxts=top.dxts).items():
            ctx.set(getattr(top.stride, name), value)
    if top.slots == 1 and restart:
        ctx.set(top.position, position)
        ctx.set(top.restart, 1)
        await ctx.tick()
        ctx.set(top.restart, 0)
    for port, items in (("table", table), ("wmem", wmem), ("ppu", ppu)):
        await send(ctx, getattr(top, port), items)
    bench = DxeBench(ctx, top, asm, flat, random.Random(2))
    await bench.load()
    return bench


async def _loaded(ctx, top, layer, position: int = 0) -> DxeBench:
    """The layer's loads (:func:`load_dxe`)."""
    tables, asm, flat = layer
    return await load_dxe(ctx, top, asm, flat, dxt_loads(tables, asm, DXT), position)


# --slow: make test runs the same two checks (two tokens bit- and cycle-exact; the cache at
# capacity) on the generated Verilog: cocotb_tests/test_rdxe_dxe.py at small (layer_tokens,
# cache_full). These are the Amaranth simulator's, for debugging the RTL without a build.
@pytest.mark.slow
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
            stopped, *images = await token_images(b, top, token)
            assert stopped == (len(asm.words), 0)
            got.append(images)
    simulate(top, bench)
    check_tokens(got, want, lambda t: model_cycles(CFG, DXT, asm.words, flat, t + 1))


def check_tokens(got, want, model):
    """Each token's TB and rr-SRAM images and cycles (``got``: from :func:`token_images`)
    against the golden's images (``want``) and the cycles ``model(t)`` of token ``t``."""
    for t, ((tb, rr, cycles), (want_tb, want_rr)) in enumerate(zip(got, want)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert np.array_equal(have, need), \
                f"token {t}: {what} differs at {np.flatnonzero(have != need)}"
        assert cycles == model(t), f"token {t}: {cycles} cycles, the model {model(t)}"
        print(f"token {t}: {cycles} cycles from run taken to done")


@pytest.mark.slow
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
