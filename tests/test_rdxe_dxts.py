"""A DXE of several DXTs (hdl/rdxe/dxts.py, hdl/rdxe/dxtside.py; docs/rdxe.md 16.5) in Amaranth's
simulator: each GEMV split by output channel across the DXTs with its chunks read once for all,
the KV groups and query heads on their home DXT (:func:`golden.rdxe.vlink.dxe_layout`), the host
loading each DXT through the ports that name it; the TB and rr-SRAM against
:func:`golden.rdxe.assemble.run_words`, the cycles against the model."""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from amaranth import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from sim.rdxe.host import SMOLLM2_LAYER, dxt_loads, model_cycles, row_values
from sim.rdxe.ring import program_cycles
from sim.rdxe.reduced import HEAD_DIM, INPUTS, layer_tables, tokens
from golden.rdxe import assemble as A
from golden.rdxe import program as P
from golden.rdxe import command_cycles, word_cycles
from golden.rdxe.vlink import dxe_layout, place
from hdl.rdxe.ctrl import CtrlConfig, Store, ext_layout
from hdl.rdxe.dxe import Dxe, stride_value
from hdl.rdxe.dxts import BroadcastIo, output_shares, shared_cycles
from hdl.rdxe.dxtside import DxtSide, ext_stage
from hdl.rdxe.isa import OPCODES, instruction_layout
from hdl.rdxe.spec import chunk_layout, command_layout, response_layout, word_layout
from memwall import registry
from memwall.blocks.rdxe_dxe import TWO_DXTS
from memwall.params import ParameterError
from tests.stream_sim import shared, simulate
from tests.dxe_bench import golden_images
from tests.test_rdxe_side import check_tokens, load_dxe, token_images

#: The small preset on two DXTs of one query head in one KV group each.
TWO = TWO_DXTS
PARAMS = registry.get("rdxe-dxe").parameters("small", TWO)
CFG, DXT = PARAMS.ctrl_config(), PARAMS.dxt_config()
HEADS = KV_HEADS = 2


@pytest.fixture(scope="module")
def layer():
    tables = layer_tables(heads=HEADS, kv_heads=KV_HEADS)
    asm = A.assemble(P.llama_layer(HEADS, KV_HEADS, HEAD_DIM), tables, INPUTS, ["h"], CFG.space,
                     HEAD_DIM)
    return tables, asm, A.flat_tables(tables, asm)


# --slow (75 s at a load of 5, about 50 s of CPU, most of it the two DXTs' simulation build: over
# make test's 15 s): make test runs the new plumbing in RTL (test_the_plumbing_broadcasts_and_
# gathers), the split, the write model, the refusals and the ports, and the one-DXT RTL, whose
# Verilog is unchanged (tests/test_rdxe_side.py, cocotb_tests/test_rdxe_dxe.py).
@pytest.mark.slow
def test_the_attention_and_a_gemv_run_on_two_dxts(layer):
    """The layer's words from the KV append through the O projection's dequantization, once,
    from random K and V codes and a random rotated Q: each DXT appends and attends over its own
    group, the O projection split across both. The TB and rr-SRAM equal the golden's after the
    run, its cycles the model's."""
    tables, asm, flat = layer
    top = shared(Dxe, CFG, DXT, dxts=2)
    layout = instruction_layout(CFG.space)
    ops = [OPCODES[layout.from_bits(w).op] for w in asm.words]
    pc = ops.index("kv_append")
    part = replace(asm, words=asm.words[pc:ops.index("gemv", pc) + 2])
    q = layout.from_bits(asm.words[ops.index("max", pc)])
    append = layout.from_bits(asm.words[pc])
    rng = np.random.default_rng(3)
    keys, values = rng.integers(-4, 5, (2, HEAD_DIM * KV_HEADS)).astype(np.int8)
    rotated = rng.uniform(-2, 2, q.n).astype(np.float32).view(np.uint32)
    state = A.new_state(asm)
    state.rr[(append.a, len(keys))], state.rr[(append.b, len(values))] = keys, values
    state.tb[(q.a, q.n)] = rotated
    A.run_words(part, state, flat)
    want = [(state.tb.words.astype(np.uint64), state.rr.words.view(np.uint8).astype(np.uint64))]
    got = []

    async def bench(ctx):
        b = await load_dxe(ctx, top, asm, flat, dxt_loads(tables, asm, DXT, dxts=2))
        await b.write_rows(Store.TB, q.a // DXT.lanes, row_values(rotated, DXT.lanes, 32))
        for where, codes in ((append.a, keys), (append.b, values)):
            await b.write_rows(Store.RR, where // DXT.lanes,
                               row_values(codes.view(np.uint8), DXT.lanes, 8))
        stopped, *images = await token_images(b, top, {}, pc, len(part.words))
        assert stopped == (pc + len(part.words), 0)
        got.append(images)
    simulate(top, bench)
    check_tokens(got, want, lambda t: model_cycles(CFG, DXT, part.words, flat, 1, dxts=2))


# --slow (103 s beside the test above, 354 s alone at a load of 5 to 6): the test above runs the
# parts that differ on two DXTs (a split GEMV, the KV appends and heads on their DXTs).
@pytest.mark.slow
def test_the_reduced_layer_runs_on_two_dxts(layer):
    """Two tokens of the reduced layer (2 heads in 2 KV groups) on two DXTs: every GEMV's
    outputs split across both, its chunks broadcast; each DXT appends and attends over its own
    group. After each token the TB and rr-SRAM equal the golden's bit for bit, the run ends
    without an error, and its cycles equal the model's (``dxts=2``). Each of these breaks it
    (checked by hand): DXT 1's share written at DXT 0's address (``first`` dropped: the TB
    differs); both groups appended and attended on DXT 0 (the target not moved: the TB
    differs); the model without the result queues' writes (1,734 cycles against 1,756)."""
    _two_tokens_on_two_dxts(CFG, DXT, *layer)


def _two_tokens_on_two_dxts(cfg, dxt, tables, asm, flat, groups=None):
    """Run two tokens of the layer on a DXE of two DXTs of ``dxt``: the TB and rr-SRAM the
    golden's after each, the run's end without error, the cycles the model's (with the layer's
    ``groups``)."""
    top = shared(Dxe, cfg, dxt, dxts=2)
    inputs = tokens(2)
    want, got = golden_images(asm, flat, inputs), []

    async def bench(ctx):
        b = await load_dxe(ctx, top, asm, flat, dxt_loads(tables, asm, dxt, dxts=2))
        for token in inputs:
            stopped, *images = await token_images(b, top, token)
            assert stopped == (len(asm.words), 0)
            got.append(images)
    simulate(top, bench)
    check_tokens(got, want, lambda t: model_cycles(cfg, dxt, asm.words, flat, t + 1,
                                                   groups=groups, dxts=2))


def test_the_shares_follow_the_head_placement():
    """Outputs in units of whole passes and GBUS words, split as ``vlink.place`` splits heads:
    units ``floor(j U / D)`` on; the last share ends at the outputs; a DXT may take none."""
    assert output_shares(64, 2, 4) == [(0, 32), (32, 32)]
    assert output_shares(13, 2, 4) == [(0, 8), (8, 5)]
    assert output_shares(40, 4, 16) == [(0, 0), (0, 16), (16, 16), (32, 8)]
    for outputs, dxts, vacs in ((64, 3, 4), (1536, 8, 16), (20, 8, 4)):
        unit = np.lcm(vacs, 4)
        units = place(-(-outputs // unit), 1, dxts).head_dxt
        for j, (first, count) in enumerate(output_shares(outputs, dxts, vacs)):
            mine = [u for u, d in enumerate(units) if d == j]
            assert (first, first + count) == (mine[0] * unit, min(outputs, (mine[-1] + 1) * unit)
                                              ) if mine else count == 0, (outputs, dxts, j)


def test_the_result_writes_model():
    """Hand-worked cases of the writes on ``ext``: a word written the cycle after it leaves its
    DXT at the earliest, one a cycle; the side sees the end the cycle after the last write, or
    at the last response; a queue that would fill is refused."""
    assert shared_cycles([(10, [8, 9])], 4) == 11                  # writes at 9, 10
    assert shared_cycles([(10, [9]), (10, [9])], 4) == 12          # 10, 11: one waits
    assert shared_cycles([(20, [9]), (10, [9])], 4) == 20          # the response is later
    assert shared_cycles([(10, []), (12, [])], 4) == 12
    assert shared_cycles([(9, [5, 6, 7]), (9, [5, 6, 7])], 3) == 12   # 6 .. 11
    with pytest.raises(ValueError, match=r"^DXT 1's result queue of 2 words is full at cycle 7: "
                                         r"its results would wait, outside the cycle model$"):
        shared_cycles([(9, [5, 6, 7]), (9, [5, 6, 7])], 2)
    # The last word leaves o a cycle before the response comes (the gatherer's queue).
    for kind, a, b in (("gemv", 32, 16), ("rmsnorm", 64, 16), ("pv", 3, 0)):
        assert word_cycles(kind, a, b, DXT)[-1] == command_cycles(kind, a, b, DXT) - 1


def test_groups_attend_at_their_home_dxt():
    """The layer's groups fill the DXTs from DXT 0, each head attending where its group's cache
    is: the reduced layer's one group of 2 heads on DXT 0 of 2 (the paper's split would put head
    1 on DXT 1 and read over VLINK: 2 caches without it), SmolLM2's 3 groups of 3 on 8 DXTs of
    one group (3 caches; the paper's split without VLINK stores 8). A layer whose group size or
    group count the DXTs cannot hold is refused."""
    p = dxe_layout(2, 1, 2, 1, 2)
    assert p.home == (0,) and p.head_dxt == (0, 0) and p.reads == () and p.copies() == 1
    assert place(2, 1, 2).reads == ((1, 0, 1),) and place(2, 1, 2).copies(vlink=False) == 2
    p = dxe_layout(9, 3, 8, 1, 3)
    assert p.home == (0, 1, 2) and p.head_dxt == (0,) * 3 + (1,) * 3 + (2,) * 3
    assert (p.bytes_per_token(64), place(9, 3, 8).bytes_per_token(64, vlink=False)) == (384,
                                                                                         1024)
    assert dxe_layout(4, 2, 2, 1, 2).home == (0, 1)
    with pytest.raises(ValueError, match=r"^A layer of 2 query heads in 1 KV groups has groups "
                                         r"of 2; the DXE's DXTs hold groups of 1$"):
        dxe_layout(2, 1, 2, 1, 1)
    with pytest.raises(ValueError, match=r"^A layer of 4 KV groups does not fit 2 DXTs of 1 "
                                         r"groups \(2 in all\)$"):
        dxe_layout(4, 4, 2, 1, 1)
    with pytest.raises(ValueError, match="has groups of 2"):
        dxt_loads(layer_tables(heads=2, kv_heads=1), None, DXT, dxts=2)
    with pytest.raises(ValueError, match=r"^Layer stride's KV groups must be between 0 and 2, "
                                         r"not 3$"):
        stride_value(CFG, DXT, 4, 164, 3, dxts=2)
    with pytest.raises(ValueError, match=r"^A DXE of 8 DXTs of 9 KV groups holds 72; the layer "
                                         r"stride counts at most 64$"):
        DxtSide(CFG, replace(DXT, kv_groups=9, kv_rows=1024), dxts=8)


def test_the_model_counts_the_layers_groups():
    """On several DXTs the model appends and attends over the layer's groups (``groups``), by
    default the DXE's: fewer groups, fewer commands, and the attention a cycle a head fewer."""
    tables, asm = _one_group_layer()
    words, shapes = asm.words, {i: g[0].shape for i, g in A.flat_tables(tables, asm).gemvs.items()}
    full = program_cycles(ONE_CFG, ONE_DXT, words, shapes, 3, 2)
    one = program_cycles(ONE_CFG, ONE_DXT, words, shapes, 3, 2, groups=1)
    assert full == program_cycles(ONE_CFG, ONE_DXT, words, shapes, 3, 2, groups=2)
    assert 0 < one < full
    with pytest.raises(ValueError, match=r"^KV groups must be between 1 and 2, not 3$"):
        program_cycles(ONE_CFG, ONE_DXT, words, shapes, 3, 2, groups=3)


def test_the_paper3_preset_holds_smollm2s_layer():
    """``paper3``, SmolLM2's layer on three of the paper's DXTs of one KV group each, is sized
    by the split: the host's loads of a layer of SmolLM2's shape (random tables; the real
    layer's have the same shapes) fill every DXT's WMEM to its last row and its PPU to its last
    entry, the layer's 3 groups sit at homes 0, 1, 2, each DXT's cache holds at least
    ``paper``'s tokens a group, and the model times a token at the capacity with no result
    queue running full (``shared_cycles`` raises if one does)."""
    entry = registry.get("rdxe-dxe")
    params, paper = entry.parameters("paper3"), entry.parameters("paper")
    hidden, ffn, heads, kv_heads, d = SMOLLM2_LAYER
    tables = layer_tables(hidden, ffn, heads, kv_heads, d)
    asm = A.assemble(P.llama_layer(heads, kv_heads, d), tables,
                     {"h": hidden, "cos": d // 2, "sin": d // 2}, ["h"], params.space(), d)
    flat, dxt, D = A.flat_tables(tables, asm), params.dxt_config(), params.dxts
    wmem, ppu, table, _ = dxt_loads(tables, asm, dxt, flat, dxts=D)
    for j in range(D):
        assert max(w["addr"] for w in wmem if w["dxt"] == j) == params.wmem_depth - 1, j
        assert max(e["addr"] for e in ppu if e["dxt"] == j) == params.ppu_depth - 1, j
    assert sum(t["outputs"] for t in table if t["index"] == 0) == (heads + 2 * kv_heads) * d
    assert dxe_layout(heads, kv_heads, D, dxt.kv_groups, dxt.group_size).home == (0, 1, 2)
    assert params.capacity >= paper.capacity
    assert model_cycles(params.ctrl_config(), dxt, asm.words, flat, params.capacity,
                        groups=kv_heads, dxts=D) > 0
    assert entry.size(params).over(registry.SIZE_LIMITS) == []


#: The small preset on two DXTs of its own DXT (one KV group of 2 heads each), running the
#: one-DXT reduced layer (2 heads in 1 group): the group and both heads on DXT 0, every GEMV
#: split across both (docs/rdxe.md 15).
ONE_GROUP = registry.get("rdxe-dxe").parameters("small", {"dxts": "2"})
ONE_CFG, ONE_DXT = ONE_GROUP.ctrl_config(), ONE_GROUP.dxt_config()


def _one_group_layer():
    tables = layer_tables(heads=2, kv_heads=1)
    return tables, A.assemble(P.llama_layer(2, 1, HEAD_DIM), tables, INPUTS, ["h"],
                              ONE_CFG.space, HEAD_DIM)


# --slow (79 to 85 s, most of it the two DXTs' simulation, as the two-group test above): make
# test runs the layout and the model's group count above; cocotb_tests/test_rdxe_dxe.py's
# test_one_group_on_two_dxts runs the same layer on the generated Verilog (--slow too).
@pytest.mark.slow
def test_one_group_of_two_heads_runs_on_two_dxts():
    """Two tokens of the reduced layer's one KV group of 2 heads on two DXTs: its cache and
    both heads on DXT 0, the GEMVs split across both. The TB and rr-SRAM equal the golden's
    after each token, and the cycles the model's with the layer's one group."""
    tables, asm = _one_group_layer()
    _two_tokens_on_two_dxts(ONE_CFG, ONE_DXT, tables, asm, A.flat_tables(tables, asm), groups=1)


@pytest.mark.parametrize("dxts", [0, 9])
def test_the_dxt_count_is_checked(dxts):
    message = f"^DXTs must be between 1 and 8, not {dxts}$"
    for build in (DxtSide, Dxe):
        with pytest.raises(ValueError, match=message):
            build(CFG, DXT, dxts=dxts)
    with pytest.raises(ParameterError, match=message):
        registry.get("rdxe-dxe").parameters("small", {"dxts": str(dxts)})
    with pytest.raises(TypeError, match=r"^DXTs must be an integer between 1 and 8, not 2.0$"):
        Dxe(CFG, DXT, dxts=2.0)


def test_several_dxts_run_one_layer_of_one_request():
    looped = CtrlConfig(CFG.space, lanes=CFG.lanes, head_dim=CFG.head_dim,
                        program_words=CFG.program_words, rc_bits=CFG.rc_bits, layers=2)
    with pytest.raises(ValueError, match=r"^Several DXTs run one layer of one request: with 2 "
                                         r"DXTs the layers and slots must be 1, not 2 and 1$"):
        DxtSide(looped, DXT, dxts=2)
    with pytest.raises(ValueError, match=r"not 1 and 2$"):
        Dxe(CFG, replace(DXT, kv_groups=2), slots=2, dxts=2)


def test_the_loads_name_their_dxt():
    """At one DXT the ports are section 14.4's; at two the loads carry the DXT, the GEMV table
    its share's first output."""
    one = Dxe(CFG, DXT).signature.members
    two = Dxe(CFG, DXT, dxts=2).signature.members
    for name in ("wmem", "ppu", "table"):
        fields = {n for n, _ in two[name].signature.members["payload"].shape}
        assert "dxt" in fields and "dxt" not in {
            n for n, _ in one[name].signature.members["payload"].shape}
    assert "first" in {n for n, _ in two["table"].signature.members["payload"].shape}



class _Plumbing(wiring.Component):
    """:class:`~hdl.rdxe.dxts.BroadcastIo` alone: each DXT's ``x``, ``o`` and ``resp`` as
    ports (the bench plays the DXTs), ``ext`` and ``ext_data`` (the bench plays the rr-SRAM),
    and a command's operands started on ``start``."""

    def __init__(self, dxts: int):
        self.cfg, self.dxts = CFG, dxts
        lanes = DXT.lanes
        first = command_layout(DXT)["outputs"].shape
        members = {"ext": Out(stream.Signature(ext_layout(CFG))),
                   "ext_data": In(stream.Signature(data.StructLayout({"data": CFG.data_bits}),
                                                   always_ready=True)),
                   "start": In(1), "row": In(8), "count": In(4), "dst": In(8), "keep": In(1),
                   "on": In(dxts), "firsts": In(first).array(dxts),
                   "done": Out(1), "error": Out(1)}
        for j in range(dxts):
            members[f"x{j}"] = Out(stream.Signature(chunk_layout(lanes)))
            members[f"o{j}"] = In(stream.Signature(word_layout()))
            members[f"resp{j}"] = In(stream.Signature(response_layout()))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        tiles = [SimpleNamespace(cfg=DXT, x=getattr(self, f"x{j}"), o=getattr(self, f"o{j}"),
                                 resp=getattr(self, f"resp{j}")) for j in range(self.dxts)]
        side = SimpleNamespace(ctrl=CFG, ext=self.ext, ext_data=self.ext_data)
        side.requests, side.asked = ext_stage(m, side)
        io = BroadcastIo(m, side, tiles, 4)
        with m.If(self.start):
            m.d.sync += io.start(self.row, self.count, self.dst, self.keep, self.on,
                                 list(self.firsts))
        # As the DXT side's done: not before the last write has left the request register.
        m.d.comb += [self.done.eq(io.resp & ~self.ext.valid), self.error.eq(io.error)]
        return m


@pytest.mark.parametrize("on", [0b111, 0b101, 0b010])
def test_the_plumbing_broadcasts_and_gathers(on):
    """Three DXTs played by the bench, each taking chunks at random, then giving its result
    words at random and its response (the DXTs out of step, which the DXE's lockstep never
    shows): every DXT in ``on`` gets each chunk once, in order, the others none; each DXT's
    words land at ``dst + first + 4 w`` with their ``keep`` (the rr-SRAM ready at random);
    ``done`` comes only when every DXT in ``on`` has answered and every word is written,
    ``error`` if one refused. Each of these breaks it (checked by hand): a chunk leaving when
    DXT 0 alone took it, or whenever any DXT takes it (``chunk_taken`` never set); ``on``
    ignored for the chunks; ``done`` before the queues drained; ``first`` dropped; DXT 0's
    address moved on for every DXT's write."""
    D, lanes, count = 3, DXT.lanes, 5
    top = _Plumbing(D)
    rng = random.Random(on)
    memory = {r: rng.getrandbits(8 * lanes) for r in range(64)}
    firsts, dst, row = [0, 8, 20], 64, 3          # the results clear of the chunks
    words = {j: [(rng.getrandbits(32), rng.choice([0xF, 0xF, 0x3])) for _ in range(2 + j)]
             for j in range(D)}
    refuses = 1 if on & 0b10 else None
    seen, state = {j: [] for j in range(D)}, {"done_at": None}

    async def bench(ctx):
        for name, value in (("row", row), ("count", count), ("dst", dst), ("keep", 1),
                            ("on", on)):
            ctx.set(getattr(top, name), value)
        for j, f in enumerate(firsts):
            ctx.set(top.firsts[j], f)
        ctx.set(top.start, 1)
        await ctx.tick()
        ctx.set(top.start, 0)
        sent, answered, read = {j: 0 for j in range(D)}, set(), None
        for cycle in range(400):
            ctx.set(top.ext.ready, rng.random() < 0.5)
            ctx.set(top.ext_data.valid, read is not None)
            ctx.set(top.ext_data.payload.data, memory.get(read, 0) if read is not None else 0)
            for j in range(D):
                x, o, resp = (getattr(top, f"{n}{j}") for n in ("x", "o", "resp"))
                ctx.set(x.ready, rng.random() < 0.5)
                # A DXT's words after its chunks, as a GEMV's come.
                ctx.set(o.valid, bool(on >> j & 1) and len(seen[j]) == count
                        and sent[j] < len(words[j]) and rng.random() < 0.5)
                if sent[j] < len(words[j]):
                    value, keep = words[j][sent[j]]
                    ctx.set(o.payload.data.as_value(), value)
                    ctx.set(o.payload.keep, keep)
                # The response as soon as the DXT is done: its last words may still wait.
                ctx.set(resp.valid, bool(on >> j & 1) and j not in answered
                        and sent[j] == len(words[j]) and len(seen[j]) == count)
                ctx.set(resp.payload.error, j == refuses)
            ext = top.ext.payload
            take = ctx.get(top.ext.valid) and ctx.get(top.ext.ready)
            request = (ctx.get(ext.write), ctx.get(ext.row), ctx.get(ext.data),
                       ctx.get(ext.mask)) if take else None
            for j in range(D):
                x, o, resp = (getattr(top, f"{n}{j}") for n in ("x", "o", "resp"))
                if ctx.get(x.valid) and ctx.get(x.ready):
                    seen[j].append(ctx.get(x.payload.data.as_value()))
                if ctx.get(o.valid) and ctx.get(o.ready):
                    sent[j] += 1
                if ctx.get(resp.valid):
                    answered.add(j)
            # done sees this cycle's responses; every word must be in and written.
            if ctx.get(top.done) and state["done_at"] is None:
                state["done_at"] = cycle
                state["error"] = ctx.get(top.error)
                assert answered >= {j for j in range(D) if on >> j & 1}, (cycle, answered)
                assert all(sent[j] == len(words[j]) for j in range(D) if on >> j & 1)
                assert request is None or not request[0], f"cycle {cycle}: done at a write"
            assert state["done_at"] is None or request is None or not request[0], \
                f"cycle {cycle}: a write after done (cycle {state['done_at']})"
            await ctx.tick()
            read = None
            if request is not None:
                write, r, value, mask = request
                if write:
                    for k in range(lanes):
                        if mask >> k & 1:
                            byte = 0xFF << 8 * k
                            memory[r] = memory[r] & ~byte | value & byte
                else:
                    read = r
            if state["done_at"] is not None and cycle > state["done_at"] + 4:
                break

    original = dict(memory)
    simulate(top, bench)
    assert state["done_at"] is not None, "done never came"
    assert state["error"] == (refuses is not None)
    chunks = [original[row + i] for i in range(count)]
    for j in range(D):
        assert seen[j] == (chunks if on >> j & 1 else []), f"DXT {j}'s chunks"
    want = dict(original)
    for j in (j for j in range(D) if on >> j & 1):
        for w, (value, keep) in enumerate(words[j]):
            for k in range(4):
                if keep >> k & 1:
                    byte = dst + firsts[j] + 4 * w + k
                    r, lane = divmod(byte, lanes)
                    want[r] = want[r] & ~(0xFF << 8 * lane) | (value >> 8 * k & 0xFF) << 8 * lane
    assert memory == want, [r for r in memory if memory[r] != want[r]]
