"""The DXE's layer loop (hdl/rdxe/ctrl.py, hdl/rdxe/dxtside.py; docs/rdxe.md 16.1) in Amaranth's
simulator: the reduced Llama layer (sim/rdxe/reduced.py) assembled to loop (the residual in
place, RoPE's table kept), two layers of distinct tables stacked at the program's stride
(:func:`golden.rdxe.assemble.stacked_tables`), one ``run`` a token. After each token the whole
token buffer and rr-SRAM equal :func:`golden.rdxe.assemble.run_words` run layer after layer,
each layer with its own KV cache, and the run's cycles equal the cycle model's."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from sim.rdxe.host import dxt_loads, row_values
from golden import rdxe as golden
from golden.rdxe import assemble as A
from hdl.rdxe.ctrl import CtrlConfig, DxeController, Store, loop_cycles, run_cycles
from hdl.rdxe.dxe import Dxe, stride_value
from hdl.rdxe.isa import OPCODES, ProgramSpace, instruction_layout
from hdl.rdxe.spec import DxtConfig
from memwall import registry
from memwall.params import ParameterError
from sim.rdxe.ring import program_cycles, rtl_costs
from tests.dxe_bench import DxeBench
from sim.rdxe.reduced import HEAD_DIM, HEADS, INPUTS, KV_HEADS, layer_tables, program, tokens
from tests.stream_sim import shared, simulate
from tests.test_rdxe_assemble import variant
from tests.test_rdxe_side import load_dxe, send, token_images
from tests.test_size import check_size_estimate

LAYERS = 2
#: The registry's small space (memwall/blocks/rdxe_dxe.py) with room for two layers' constants
#: (164 words each) and GEMV tables (4 each, and the identity).
SPACE = ProgramSpace(tb_words=128, rr_bytes=192, registers=4, const_words=384,
                     gemvs=4 * LAYERS + 1, align=4)
CFG = CtrlConfig(SPACE, lanes=4, head_dim=HEAD_DIM, program_words=64, layers=LAYERS)
#: The small preset's DXT with a KV group a layer, WMEM and PPU entries for both layers.
DXT = DxtConfig(lanes=4, vacs=4, head_dim=HEAD_DIM, group_size=HEADS // KV_HEADS,
                kv_groups=KV_HEADS * LAYERS, wmem_depth=512, ppu_depth=128, kv_rows=64,
                max_inputs=64)


def looped_layers():
    """The looped words and each layer's view of the stacked tables."""
    base = layer_tables()
    asm = A.assemble(program(), base, INPUTS, ["h"], SPACE, HEAD_DIM, in_place=("h",),
                     keep=("cos", "sin"))
    return asm, A.stacked_tables([variant(base, l) for l in range(LAYERS)], asm)


@pytest.fixture(scope="module")
def stack():
    return looped_layers()


def _golden(asm, stacked, inputs, offsets=None):
    """The TB and rr-SRAM after each token, and each layer's KV cache: the words run layer after
    layer (``offsets``: the layer whose offsets each layer runs with; its own by default)."""
    state, caches, images = A.new_state(asm), [([], []) for _ in stacked], []
    for token in inputs:
        for name, value in token.items():
            state.tb[(asm.inputs[name], len(value))] = value
        for l, view in enumerate(stacked):
            state.keys, state.values = caches[l]
            A.run_words(asm, state, view, layer=l if offsets is None else offsets[l])
        images.append((state.tb.words.astype(np.uint64),
                       state.rr.words.view(np.uint8).astype(np.uint64)))
    return images, caches


def _layer_cycles(asm, stacked, context: int) -> list[int]:
    """Each layer's run cycles at ``context`` tokens (the DXT as a layer sees it: its groups)."""
    shapes = {i: g[0].shape for i, g in stacked[0].gemvs.items()}
    view = replace(DXT, kv_groups=KV_HEADS)
    return [program_cycles(CFG, view, asm.words, shapes, context) for _ in stacked]


class _LoopBench(DxeBench):
    """The controller's host and DXT side (tests/dxe_bench.py), each DXT op run on its layer's
    tables and KV cache; it records each op's layer fields."""

    def __init__(self, ctx, dut, asm, stacked, rng):
        super().__init__(ctx, dut, asm, stacked[0], rng)
        self.stacked, self.caches, self.fields = stacked, [([], []) for _ in stacked], []

    async def dxt_op(self, word, value):
        p = self.dut.dxt.payload
        layer = self.ctx.get(p.layer)
        self.fields.append((layer, self.ctx.get(p.last), self.ctx.get(p.group),
                            self.ctx.get(p.head)))
        self.flat = self.stacked[layer]
        self.dxt_state.keys, self.dxt_state.values = self.caches[layer]
        return await super().dxt_op(word, value)


# --slow (19 s beside a placement): tests/test_rdxe_slots.py::test_two_requests_keep_their_own_
# caches runs the loop on the DXE in make test; this one runs every opcode's offset for two tokens.
@pytest.mark.slow
def test_the_controller_loops_over_the_layers(stack):
    """The controller alone (its DXT ops by the bench's golden step): one run a token runs both
    layers, TB and rr-SRAM equal the golden's after each token, every DXT op carries its layer's
    KV group and head, and the run's cycles are the layers' runs plus ``LAYER_OVERHEAD`` between
    them. The offsets matter: layer 1 run with layer 0's gives another image."""
    asm, stacked = stack
    dut = shared(DxeController, CFG)
    inputs = tokens(2)
    want, _ = _golden(asm, stacked, inputs)
    got, runs = [], []
    step = A.stride(asm)

    async def bench(ctx):
        b = _LoopBench(ctx, dut, asm, stacked, random.Random(3))
        b.runs = runs
        for name, value in stride_value(CFG, DXT, step.gemvs, step.const_words,
                                        step.kv_groups).items():
            ctx.set(getattr(dut.stride, name), value)
        await b.load()
        for token in inputs:
            assert await b.token(token) == (len(asm.words), 0)
            got.append((await b.image(Store.TB, SPACE.tb_words, 32),
                        await b.image(Store.RR, SPACE.rr_bytes, 8)))
        seen.extend(b.fields)
    seen = []
    simulate(dut, bench)
    for t, ((tb, rr), (want_tb, want_rr)) in enumerate(zip(got, want)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert np.array_equal(have, need), \
                f"token {t}: {what} differs at {np.flatnonzero(have != need)}"
    ops = len(seen) // (2 * LAYERS)
    assert seen == [(l, l == LAYERS - 1, l * KV_HEADS, l * HEADS) for _ in inputs
                    for l in range(LAYERS) for _ in range(ops)]
    for cycles, dxt in runs:
        per = len(dxt) // LAYERS
        assert cycles == loop_cycles(run_cycles(CFG, asm.words, dxt[l * per:(l + 1) * per])
                                     for l in range(LAYERS))
    wrong, _ = _golden(asm, stacked, inputs[:1], offsets=[0, 0])
    assert not np.array_equal(got[0][0], wrong[0][0])


def _kv_image(caches, dxt=DXT) -> np.ndarray:
    """The DXT's KV memories as golden's iWuR image of each cache in its groups: ``caches`` maps
    a cache's first KV group to its ``(keys, values)``, each a list of a token's groups."""
    image = np.zeros((dxt.vacs, dxt.kv_rows, dxt.lanes), np.int8)
    for first, (keys, values) in caches.items():
        K, V = np.stack(keys), np.stack(values)
        for g in range(K.shape[1]):
            image += golden.kv_image(K[:, g], V[:, g], dxt, group=first + g).data
    return image


async def _load(ctx, top, asm, stacked, gemvs=None, dxt=DXT) -> DxeBench:
    """The host's loads: fixed entries, the stride (for ``top.slots``), each layer's score step,
    the GEMV tables, WMEM and PPU (of the table indices ``gemvs`` and the identity, all by
    default), the program and the stacked constants."""
    wmem, ppu, table, fixed = dxt_loads(stacked[0], asm, dxt, flat=stacked[0])
    if gemvs is not None:
        # A table's rows and entries run to the next one's (the identity's to the end).
        ends = [(t["row"], t["entry"]) for t in table[1:]] + [(dxt.wmem_depth, dxt.ppu_depth)]
        keep = [(t["row"], t["entry"], *end) for t, end in zip(table, ends)
                if t["index"] in set(gemvs) | {table[-1]["index"]}]
        wmem = [w for w in wmem if any(r <= w["addr"] < r_end for r, _, r_end, _ in keep)]
        ppu = [e for e in ppu if e["addr"] >= table[-1]["entry"]
               or any(n <= e["addr"] < n_end for _, n, _, n_end in keep)]
    del fixed["score_scale"]
    step = A.stride(asm)
    for name, value in stride_value(CFG, dxt, step.gemvs, step.const_words, step.kv_groups,
                                    top.slots).items():
        ctx.set(getattr(top.stride, name), value)
    await send(ctx, top.scales, [{"layer": l, "value": int(v.score_scale)}
                                 for l, v in enumerate(stacked)])
    return await load_dxe(ctx, top, asm, stacked[0], (wmem, ppu, table, fixed))


def _attention(asm) -> tuple[int, int, tuple[int, int], list[int]]:
    """The words from the KV append to the O projection's dequantization: ``(pc, count)``, the
    TB region of the rotated Q they read, and the GEMV table indices they use in each layer."""
    layout = instruction_layout(SPACE)
    ops = [OPCODES[layout.from_bits(w).op] for w in asm.words]
    first = ops.index("kv_append")
    last = ops.index("gemv", first) + 1
    q = layout.from_bits(asm.words[ops.index("max", first)])
    step = A.stride(asm)
    return (first, last + 1 - first, (q.a, q.n),
            [l * step.gemvs + layout.from_bits(asm.words[last - 1]).table for l in range(LAYERS)])


# --slow (23 s): tests/test_rdxe_slots.py::test_two_requests_keep_their_own_caches runs these
# words on the same two layers (and two slots) with the same checks; each breakage below fails it.
@pytest.mark.slow
def test_each_layer_attends_over_its_own_groups(stack):
    """The attention's words alone looped over two layers on the DXE, from random K and V codes
    and a random rotated Q: a first token's KV append, then a second's through the attention
    and the O projection (the append, Q quantized, the score factor, the attention over both
    tokens, its dequantization, the GEMV and its dequantization). After each the TB and rr-SRAM
    equal the golden's, the DXT's caches then hold each layer's keys and values in its own
    group, and the runs' cycles are the model's. It checks what a layer moves (the constants,
    the GEMV table, the KV group and query heads, the token's position over the layers, the
    layer's score step) in about 20 s beside a placement; test_two_layers_run_on_the_dxt
    (--slow) runs every word for two tokens."""
    asm, stacked = stack
    top = shared(Dxe, CFG, DXT)
    pc, count, q, gemvs = _attention(asm)
    parts = [replace(asm, words=asm.words[pc:pc + n]) for n in (1, count)]
    rng = np.random.default_rng(5)
    # Small keys: the two tokens' scores stay near each other, so the softmax (and with it each
    # layer's score step) decides the output.
    kv_codes = [rng.integers(-4, 5, 2 * HEAD_DIM * KV_HEADS).astype(np.int8) for _ in parts]
    rotated = rng.uniform(-2, 2, q[1]).astype(np.float32).view(np.uint32)
    state, caches, want = A.new_state(asm), [([], []) for _ in stacked], []
    state.tb[q] = rotated
    for part, codes in zip(parts, kv_codes):
        state.rr[(0, len(codes))] = codes
        for l, view in enumerate(stacked):
            state.keys, state.values = caches[l]
            A.run_words(part, state, view, layer=l)
        want.append((state.tb.words.astype(np.uint64),
                     state.rr.words.view(np.uint8).astype(np.uint64)))
    got, kv = [], np.zeros((DXT.vacs, DXT.kv_rows, DXT.lanes), np.int64)

    async def bench(ctx):
        b = await _load(ctx, top, asm, stacked, gemvs)
        await b.write_rows(Store.TB, q[0] // DXT.lanes, row_values(rotated, DXT.lanes, 32))
        for part, codes in zip(parts, kv_codes):
            await b.write_rows(Store.RR, 0, row_values(codes.view(np.uint8), DXT.lanes, 8))
            stopped, *images = await token_images(b, top, {}, pc, len(part.words))
            assert stopped == (pc + len(part.words), 0)
            got.append(images)
        kv[:] = await _caches(ctx, top)
    simulate(top, bench)
    shapes = {i: g[0].shape for i, g in stacked[0].gemvs.items()}
    view = replace(DXT, kv_groups=KV_HEADS)
    for t, (part, (tb, rr, cycles), (want_tb, want_rr)) in enumerate(zip(parts, got, want)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert np.array_equal(have, need), \
                f"token {t}: {what} differs at {np.flatnonzero(have != need)}"
        assert cycles == loop_cycles(program_cycles(CFG, view, part.words, shapes, t + 1)
                                     for _ in stacked), f"token {t}"
    assert np.array_equal(kv.astype(np.int8),
                          _kv_image({l * KV_HEADS: c for l, c in enumerate(caches)}))


async def _caches(ctx, top) -> np.ndarray:
    """The DXT's KV memories, ``(vacs, kv_rows, lanes)``."""
    dxt = top.dxt_cfg
    kv = np.zeros((dxt.vacs, dxt.kv_rows, dxt.lanes), np.int64)
    for v, vac in enumerate(top.side.dxt.vacs):
        for r in range(dxt.kv_rows):
            kv[v, r] = [ctx.get(vac.kv_memory.data[r][k]) for k in range(dxt.lanes)]
    return kv


@pytest.mark.slow
def test_two_layers_run_on_the_dxt(stack):
    """Two tokens through two layers on the DXE (controller, DXT side, DXT), one run a token:
    after each, the TB and rr-SRAM equal the golden's; at the end every layer's KV cache sits in
    its own group of the DXT's caches as golden's; each run's cycles are the model's
    (``loop_cycles`` of the layers' ``program_cycles``, one less than ``rtl_costs``' token
    cost); the TB differs from layer 1 run with layer 0's offsets. (--slow, 58 s:
    tests/test_rdxe_slots.py::test_two_requests_keep_their_own_caches runs the loop on the DXE
    in make test.)"""
    asm, stacked = stack
    top = shared(Dxe, CFG, DXT)
    inputs = tokens(2)
    want, caches = _golden(asm, stacked, inputs)
    got, kv = [], np.zeros((DXT.vacs, DXT.kv_rows, DXT.lanes), np.int64)

    async def bench(ctx):
        b = await _load(ctx, top, asm, stacked)
        for token in inputs:
            stopped, *images = await token_images(b, top, token)
            assert stopped == (len(asm.words), 0)
            got.append(images)
        kv[:] = await _caches(ctx, top)
    simulate(top, bench)
    shapes = {i: g[0].shape for i, g in stacked[0].gemvs.items()}
    cost = rtl_costs(CFG, replace(DXT, kv_groups=KV_HEADS), asm.words, shapes, [LAYERS])[0]
    for t, ((tb, rr, cycles), (want_tb, want_rr)) in enumerate(zip(got, want)):
        for what, have, need in (("TB", tb, want_tb), ("rr", rr, want_rr)):
            assert np.array_equal(have, need), \
                f"token {t}: {what} differs at {np.flatnonzero(have != need)}"
        assert cycles == loop_cycles(_layer_cycles(asm, stacked, t + 1)) == cost(t + 1) - 1, \
            f"token {t}"
        print(f"token {t}: {cycles} cycles from run taken to done")
    assert np.array_equal(kv.astype(np.int8),
                          _kv_image({l * KV_HEADS: c for l, c in enumerate(caches)}))
    wrong, _ = _golden(asm, stacked, inputs[:1], offsets=[0, 0])
    assert not np.array_equal(got[0][0], wrong[0][0])


@pytest.mark.parametrize("stride, error, message", [
    ((5, 164, 1), ValueError, r"2 layers of 5 GEMV tables need 10; the program space's GEMV "
                              r"tables are 9"),
    ((4, 200, 1), ValueError, r"2 layers of 200 constant words need 400; the program space's "
                              r"constant words are 384"),
    ((4, 162, 1), ValueError, r"Layer stride's constant words must be a multiple of the lanes "
                              r"\(4\), not 162"),
    ((4, 164, 2), ValueError, r"2 layers of 2 KV groups need 4; the DXT's KV groups are 2"),
    ((4, 164, 3), ValueError, r"Layer stride's KV groups must be between 0 and 2, not 3"),
    ((4.0, 164, 1), TypeError, r"Layer stride's GEMV tables must be an integer between 0 and "
                               r"9, not 4.0"),
], ids=["gemvs", "const_words", "rows", "kv_groups", "kv_range", "type"])
def test_the_stride_is_checked(stride, error, message):
    with pytest.raises(error, match=f"^{message}$"):
        stride_value(CFG, DXT, *stride)
    assert stride_value(CFG, DXT, 4, 164, 1) == {"gemvs": 4, "const_words": 164,
                                                 "kv_groups": 1, "heads": 2}


@pytest.mark.parametrize("layers", [0, 65])
def test_the_layer_count_is_checked(layers):
    with pytest.raises(ValueError, match=f"^Layers must be between 1 and 64, not {layers}$"):
        CtrlConfig(SPACE, lanes=4, head_dim=HEAD_DIM, layers=layers)


@pytest.mark.parametrize("layers", ["0", "65"])
def test_the_registry_checks_the_layer_count(layers):
    with pytest.raises(ParameterError, match=f"^Layers must be between 1 and 64, not {layers}$"):
        registry.get("rdxe-dxe").parameters("small", {"layers": layers})


#: The small preset with two layers (the DXT's groups, WMEM and PPU, the space's constants and
#: GEMV tables for both), as the registry builds it.
_TWO = {"layers": "2", "kv_groups": "2", "wmem_depth": "512", "ppu_depth": "128",
        "const_words": "384", "gemvs": "9"}


# --slow (26 s): the netlist of an off-preset parameter set, as tests/test_size.py's cases.
@pytest.mark.slow
def test_the_size_estimate_holds_for_two_layers():
    """The estimate's storage (with the table of score steps) equals the netlist's, its cells
    are within the registry's tolerance."""
    entry = registry.get("rdxe-dxe")
    params = entry.parameters("small", _TWO)
    # The loop's DXE but for the small preset's vector lanes (2; CFG's are the lanes).
    assert replace(params.ctrl_config(), vector_lanes=None) == CFG
    assert params.dxt_config() == DXT
    netlist, _ = entry.rtlil(params)
    check_size_estimate(entry, params, netlist)


def test_one_layer_has_no_loop_ports():
    """A DXE of one layer keeps today's ports (``score_scale`` held, no ``stride``)."""
    one = Dxe(replace(CFG, layers=1), DXT).signature.members
    two = Dxe(CFG, DXT).signature.members
    assert "score_scale" in one and "stride" not in one and "scales" not in one
    assert "score_scale" not in two and {"stride", "scales"} <= set(two)
