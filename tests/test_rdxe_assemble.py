"""The DXE's instruction words (hdl/rdxe/isa.py) and the assembler (golden/rdxe/assemble.py): a
reduced Llama layer's program, assembled and run on flat memories, equals the named program bit
for bit; storage is reused without overlap; what does not fit is one clear message. (On a real
SmolLM2 layer: tests/test_llm_rdxe.py::test_dxe_program_is_the_back_ends_layer.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from golden.rdxe import assemble as A
from golden.rdxe import program as P
from hdl.rdxe.isa import OPCODES, ProgramSpace, instruction_layout
from sim.rdxe.reduced import HEAD_DIM, HEADS, HIDDEN, INPUTS, KV_HEADS, layer_tables, tokens

SPACE = ProgramSpace(tb_words=256, rr_bytes=256, registers=4, const_words=256, gemvs=4)


@pytest.fixture(scope="module")
def tables():
    return layer_tables()


def _tokens(count):
    return tokens(count)


def _both(tables, asm, tokens):
    """The named program's and the words' outputs and KV caches, token by token."""
    program = P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)
    named, words, flat = P.DxeState(), A.new_state(asm), A.flat_tables(tables, asm)
    got = []
    for inputs in tokens:
        named.tb.update(inputs)
        P.run(program, named, tables)
        for name, value in inputs.items():
            words.tb[(asm.inputs[name], len(value))] = value
        A.run_words(asm, words, flat)
        got.append((named.tb["h"], words.tb[(asm.outputs["h"], HIDDEN)]))
    return got, named, words


def _assembled(tables, space=SPACE, inputs=INPUTS):
    return A.assemble(P.llama_layer(HEADS, KV_HEADS, HEAD_DIM), tables, inputs, ["h"], space,
                      HEAD_DIM)


def test_the_words_run_the_program_bit_for_bit(tables):
    asm = _assembled(tables)
    got, named, words = _both(tables, asm, _tokens(3))
    for t, (want, have) in enumerate(got):
        assert np.array_equal(want, have), f"token {t}"
    assert np.array_equal(np.stack(named.keys), np.stack(words.keys))
    assert np.array_equal(np.stack(named.values), np.stack(words.values))
    # The run is not trivial: the residual moves and the cache holds distinct codes.
    assert not np.array_equal(got[0][0], _tokens(1)[0]["h"])
    assert len(np.unique(np.stack(named.keys))) > 8


def test_a_wrong_placement_is_seen(tables, monkeypatch):
    """Every value but the inputs at one address (operands overlapping results) changes the
    result: the comparison above can fail."""
    first_fit = A._first_fit

    def overlapping(values, align=1, pinned=None):
        if values[0][0][0] == "reg":
            return first_fit(values)
        return {**{v[0]: HIDDEN + HEAD_DIM for v in values},
                **first_fit([v for v in values if v[1] < 0])}
    monkeypatch.setattr(A, "_first_fit", overlapping)
    asm = _assembled(tables)
    got, _, _ = _both(tables, asm, _tokens(1))
    assert not np.array_equal(*got[0])


def test_storage_is_reused_without_overlap(tables):
    """Values live at once never share a place; the layer fits far less than one place each."""
    program = P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)
    lives, _ = A._liveness(program, INPUTS, {n: g[0].shape for n, g in tables.gemvs.items()})
    asm = _assembled(tables)
    values = [(k, *v) for k, v in lives.lives.items() if k[0] in ("tb", "rr")]
    where = {}
    for store in ("tb", "rr"):
        where.update(A._first_fit([v for v in values if v[0][0] == store]))
    for i, (k1, f1, l1, n1) in enumerate(values):
        for k2, f2, l2, n2 in values[i + 1:]:
            if k1[0] == k2[0] and f1 <= l2 and f2 <= l1:
                a, b = where[k1], where[k2]
                assert a + n1 <= b or b + n2 <= a, (k1, k2)
    alone = sum(n for k, f, l, n in values if k[0] == "tb")
    assert asm.used["tb_words"] < alone and asm.used["registers"] == 2
    # First-fit decreasing reaches the lower bound here: the most elements live at once.
    for store in ("tb", "rr"):
        peak = max(sum(n for k, f, l, n in values if k[0] == store and f <= i <= l)
                   for i in range(-1, len(program) + 1))
        assert asm.used[f"{store}_words" if store == "tb" else "rr_bytes"] == peak, store
    assert [asm.inputs[n] for n in INPUTS] == [0, HIDDEN, HIDDEN + HEAD_DIM // 2]


def test_rows_of_lanes(tables):
    """With rows of 4 elements every region and constant table starts on a row, the words still
    run the program bit for bit, and a part or a region off the rows is named."""
    space = ProgramSpace(**{**SPACE.__dict__, "align": 4})
    asm = _assembled(tables, space)
    fields = [instruction_layout(space).from_bits(w) for w in asm.words]
    for f in fields:
        assert f.a % 4 == f.b % 4 == f.dst % 4 == 0 and f.n % 4 == 0
        if OPCODES[f.op] not in ("gemv", "gemv_norm"):
            assert f.table % 4 == 0
    got, _, _ = _both(tables, asm, _tokens(2))
    for want, have in got:
        assert np.array_equal(want, have)
    assert asm.used["const_words"] == sum(len(v) for v in tables.vectors.values()) + 4
    with pytest.raises(ValueError, match="^tb region 'h' holds 18 elements, not a whole number "
                                         "of rows of 4$"):
        A.assemble([P.Max("h", "M")], tables, {"h": 18}, [], space, HEAD_DIM)
    odd = [P.Quant("h", "x", table="k_inv", part=(2, 10))]
    with pytest.raises(ValueError, match="^Quant of 'h' reads elements 2 to 10, not whole rows "
                                         "of 4$"):
        A.assemble(odd, tables, INPUTS, [], space, HEAD_DIM)
    with pytest.raises(ValueError, match=r"^Row of the program's memories \(align, elements\) "
                                         r"must be a power of two between 1 and 64, not 3$"):
        ProgramSpace(**{**SPACE.__dict__, "align": 3})


def test_the_word_layout():
    layout = instruction_layout(SPACE)
    assert dict(layout)["op"].width == 4 and len(OPCODES) == 16
    assert layout.size == 4 + 3 * 8 + 9 + 8 + 2 * 2


@pytest.mark.parametrize("change, message", [
    ({"tb_words": 64}, "the program needs {tb_words} tb words; the space has 64"),
    ({"rr_bytes": 64}, "the program needs {rr_bytes} rr bytes; the space has 64"),
    ({"registers": 1}, "the program needs 2 registers; the space has 1"),
    ({"const_words": 100}, "the program needs {const_words} const words; the space has 100"),
    ({"gemvs": 3}, "the program uses 4 GEMV tables; the space has 3"),
], ids=["tb", "rr", "registers", "const", "gemvs"])
def test_what_does_not_fit_is_named(tables, change, message):
    used = _assembled(tables).used
    # Every constant the layer has, once: the vectors and the score.
    assert used["const_words"] == sum(len(v) for v in tables.vectors.values()) + 1
    space = ProgramSpace(**{**SPACE.__dict__, **change})
    with pytest.raises(ValueError, match=f"^{message.format(**used)}$"):
        _assembled(tables, space)


def test_program_mistakes_are_named(tables):
    with pytest.raises(ValueError, match="^RoPE needs 'sin' right after 'cos' in the token "
                                         "buffer; give them as adjacent inputs$"):
        _assembled(tables, inputs={"cos": 4, "h": HIDDEN, "sin": 4})
    with pytest.raises(ValueError, match=r"^operation 0 reads tb region 'h' before anything "
                                         r"writes it; tb holds \['cos', 'sin'\]$"):
        _assembled(tables, inputs={"cos": 4, "sin": 4})
    with pytest.raises(ValueError, match="^operation 4: GEMV 'attn_norm' takes 16 inputs, "
                                         "region 'x' holds 12$"):
        _assembled(tables, inputs={"h": 12, "cos": 4, "sin": 4})


@pytest.mark.parametrize("field, value, message", [
    ("tb_words", 0, "Token buffer words must be between 1 and 1048576, not 0"),
    ("registers", 65, "Scalar registers must be between 1 and 64, not 65"),
    ("gemvs", "4", "GEMV tables must be an integer between 1 and 64, not '4'"),
], ids=["tb_words", "registers", "gemvs"])
def test_space_parameters_are_checked(field, value, message):
    with pytest.raises((ValueError, TypeError), match=f"^{message}$"):
        ProgramSpace(**{**SPACE.__dict__, field: value})
    with pytest.raises(TypeError, match="^Program space must be a ProgramSpace, not 3$"):
        instruction_layout(3)


# --- a program that loops over layers (docs/rdxe.md, section 16) ---------------------------------


def variant(tables: P.LayerTables, l: int) -> P.LayerTables:
    """Layer ``l`` of a stack built from ``tables``: its weights' columns and its constants
    rotated by ``l``, its score step scaled (so every layer's tables differ)."""
    scale = np.float32(np.uint32(tables.score_scale).view(np.float32) * np.float32(1 + 0.25 * l))
    return replace(tables, gemvs={n: (np.roll(W, l, axis=1), m, s)
                                  for n, (W, m, s) in tables.gemvs.items()},
                   vectors={n: np.roll(v, l) for n, v in tables.vectors.items()},
                   score_scale=scale.view(np.uint32))


def _looped(tables, space=SPACE):
    return A.assemble(P.llama_layer(HEADS, KV_HEADS, HEAD_DIM), tables, INPUTS, ["h"], space,
                      HEAD_DIM, in_place=("h",), keep=("cos", "sin"))


@pytest.mark.parametrize("align", [1, 4])
def test_in_place_and_kept_inputs_still_run_bit_for_bit(tables, align):
    """The residual's output at its input's address and RoPE's table live to the end: the words
    still equal the named program, and after a run the kept inputs are unchanged."""
    space = ProgramSpace(**{**SPACE.__dict__, "align": align})
    asm = _looped(tables, space)
    assert asm.outputs["h"] == asm.inputs["h"] and (asm.in_place, asm.keep) == (("h",),
                                                                                ("cos", "sin"))
    got, named, words = _both(tables, asm, _tokens(3))
    for t, (want, have) in enumerate(got):
        assert np.array_equal(want, have), f"token {t}"
    assert np.array_equal(np.stack(named.keys), np.stack(words.keys))
    last = _tokens(3)[-1]
    for name in ("cos", "sin"):
        assert np.array_equal(words.tb[(asm.inputs[name], HEAD_DIM // 2)], last[name])
    # The plain assembly writes its output elsewhere (over RoPE's table): looping places it
    # differently, at no cost in storage for this layer.
    plain = _assembled(tables, space)
    assert plain.outputs["h"] != plain.inputs["h"] and asm.used == plain.used


def test_the_same_words_run_every_layer(tables):
    """Three layers' tables stacked at the stride: one DXE's memories and the same words with
    layer offsets equal running each layer's own program in turn, the residual passed on in
    place, each layer with its own KV cache."""
    asm = _looped(tables)
    layers = [variant(tables, l) for l in range(3)]
    step = A.stride(asm)
    assert step == A.Stride(gemvs=4, const_words=asm.used["const_words"], kv_groups=KV_HEADS)
    stacked = A.stacked_tables(layers, asm)
    assert len(stacked[2].vectors.words) == 3 * step.const_words
    assert {i: id(g[0]) for i, g in stacked[0].gemvs.items()} == \
        {l * 4 + i: id(layers[l].gemvs[n][0]) for l in range(3) for n, i in asm.gemvs.items()}
    program = P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)
    named = [P.DxeState() for _ in layers]
    words, caches = A.new_state(asm), [([], []) for _ in layers]
    for t, inputs in enumerate(_tokens(2)):
        h = inputs["h"]
        for state, t_l in zip(named, layers):
            state.tb.update({**inputs, "h": h})
            h = P.run(program, state, t_l).tb["h"]
        for name, value in inputs.items():
            words.tb[(asm.inputs[name], len(value))] = value
        for l in range(3):
            words.keys, words.values = caches[l]
            A.run_words(asm, words, stacked[l], layer=l)
        assert np.array_equal(words.tb[(asm.outputs["h"], HIDDEN)], h), f"token {t}"
    for l, state in enumerate(named):
        assert np.array_equal(np.stack(state.keys), np.stack(caches[l][0])), l
        assert np.array_equal(np.stack(state.values), np.stack(caches[l][1])), l
    # The layers differ: running layer 1's words with layer 0's offsets gives another residual.
    again = A.new_state(asm)
    for name, value in _tokens(1)[0].items():
        again.tb[(asm.inputs[name], len(value))] = value
    one = A.run_words(asm, again, stacked[1], layer=1).tb[(asm.outputs["h"], HIDDEN)]
    for name, value in _tokens(1)[0].items():
        again.tb[(asm.inputs[name], len(value))] = value
    again.keys, again.values = [], []
    zero = A.run_words(asm, again, stacked[1], layer=0).tb[(asm.outputs["h"], HIDDEN)]
    assert not np.array_equal(one, zero)


def test_what_cannot_loop_is_named(tables):
    program = P.llama_layer(HEADS, KV_HEADS, HEAD_DIM)

    def looped(**options):
        return A.assemble(program, tables, INPUTS, ["h"], SPACE, HEAD_DIM, **options)
    with pytest.raises(ValueError, match=r"^keep names 'x', which is not an input; the inputs "
                                         r"are \['h', 'cos', 'sin'\]$"):
        looped(keep=("x",))
    with pytest.raises(ValueError, match=r"^in_place names 'cos', which is not both an input and "
                                         r"an output; the inputs are \['h', 'cos', 'sin'\], the "
                                         r"outputs \['h'\]$"):
        looped(in_place=("cos",))
    with pytest.raises(ValueError, match="^output 'h' cannot take the place of input 'h': the "
                                         "input is live until operation 34, the output written "
                                         "by operation 33$"):
        looped(in_place=("h",), keep=("h",))
    half = [P.Add("h", "h", "g")]
    with pytest.raises(ValueError, match="^output 'g' holds 16 elements and input 'g' 8: they "
                                         "cannot share a place$"):
        A.assemble(half, tables, {"h": 16, "g": 8}, ["g"], SPACE, HEAD_DIM, in_place=("g",))
    with pytest.raises(ValueError, match="^in_place names 'g', which no operation writes$"):
        A.assemble([P.Max("h", "M")], tables, {"h": 16, "g": 8}, ["g"], SPACE, HEAD_DIM,
                   in_place=("g",))
    with pytest.raises(TypeError, match="^Layers must be a non-empty list of LayerTables$"):
        A.stacked_tables([], _looped(tables))
    with pytest.raises(ValueError, match="^layer 1's rms_eps must be layer 0's \\(a DXE holds "
                                         "one\\), not 0.001$"):
        A.stacked_tables([tables, replace(tables, rms_eps=1e-3)], _looped(tables))
