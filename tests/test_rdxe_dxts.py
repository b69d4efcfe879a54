"""A DXE of several DXTs (hdl/rdxe/dxts.py, hdl/rdxe/dxtside.py; docs/rdxe.md 16.5) in Amaranth's
simulator: each GEMV split by output channel across the DXTs with its chunks read once for all,
the KV groups and query heads on their home DXT (:func:`golden.rdxe.vlink.dxe_layout`), the host
loading each DXT through the ports that name it; the TB and rr-SRAM against
:func:`golden.rdxe.assemble.run_words`, the cycles against the model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cocotb_tests.rdxe.dxe_tb import dxt_loads, model_cycles, row_values
from cocotb_tests.rdxe.layer import HEAD_DIM, INPUTS, layer_tables, tokens
from golden.rdxe import assemble as A
from golden.rdxe import program as P
from golden.rdxe import command_cycles, word_cycles
from golden.rdxe.vlink import dxe_layout, place
from hdl.rdxe.ctrl import CtrlConfig, Store
from hdl.rdxe.dxe import Dxe
from hdl.rdxe.dxts import output_shares, shared_cycles
from hdl.rdxe.dxtside import DxtSide
from hdl.rdxe.isa import OPCODES, instruction_layout
from memwall import registry
from memwall.params import ParameterError
from tests.stream_sim import shared, simulate
from tests.dxe_bench import golden_images
from tests.test_rdxe_side import check_tokens, load_dxe, token_images

#: The small preset on two DXTs of one query head in one KV group each: the DXE's 2 heads in 2
#: groups (the reduced layer's 2 heads, each with its own KV group: one group of both would
#: span the DXTs, which needs VLINK); the second group's constants need 196 words.
TWO = {"dxts": "2", "group_size": "1", "const_words": "256"}
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
# make test's 15 s): make test runs the parts without the simulator (the split, the write model,
# the layout's and parameters' refusals, the ports) and the one-DXT RTL, which is the same Verilog
# (tests/test_rdxe_side.py, cocotb_tests/test_rdxe_dxe.py).
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
    tables, asm, flat = layer
    top = shared(Dxe, CFG, DXT, dxts=2)
    inputs = tokens(2)
    want, got = golden_images(asm, flat, inputs), []

    async def bench(ctx):
        b = await load_dxe(ctx, top, asm, flat, dxt_loads(tables, asm, DXT, dxts=2))
        for token in inputs:
            stopped, *images = await token_images(b, top, token)
            assert stopped == (len(asm.words), 0)
            got.append(images)
    simulate(top, bench)
    check_tokens(got, want, lambda t: model_cycles(CFG, DXT, asm.words, flat, t + 1, dxts=2))


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


def test_a_group_across_dxts_is_refused():
    """The reduced layer's one KV group of 2 heads on 2 DXTs puts head 1 away from its cache;
    a layer whose groups are not the DXE's is refused too."""
    with pytest.raises(ValueError, match=r"^1 KV groups of 2 query heads on 2 DXTs need VLINK: "
                                         r"query head 1 is on DXT 1, its group's cache on DXT "
                                         r"0$"):
        dxe_layout(2, 1, 2, 1, 1)
    with pytest.raises(ValueError, match=r"^A layer on 2 DXTs of 1 KV groups of 1 query heads "
                                         r"has 2 groups of 1, not 4 of 1$"):
        dxe_layout(4, 4, 2, 1, 1)
    assert dxe_layout(4, 2, 2, 1, 2).home == (0, 1)
    with pytest.raises(ValueError, match="need VLINK"):
        dxt_loads(layer_tables(), None, DXT, dxts=2)


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

