"""The KVNAND real-model case (sim.llm.cases.inflash) and its runs (cocotb_tests.realdata.inflash):
the ops are the ``kvnand`` back-end's PE operations of one decode step, bit for bit (the golden
PE on each op's inputs gives its expected codes, which are what the back-end returned), and the
run's PE takes every op of a layer."""

from __future__ import annotations

import re

import numpy as np
import pytest

from cocotb_tests.inflash.contract import is_refused
from cocotb_tests.realdata import inflash as realdata
from golden.arith.float import from_float
from golden.inflash.model import attend, gemv, logit
from golden.inflash.weights import Weights
from hdl.arith.format import FP16
from hdl.inflash.spec import Mapping, Mode, Op as Command, PEConfig
from sim.llm.backends.kvnand import FP16_MAX
from sim.llm.cases import CaseError, Capture, capture, inflash, prompt_ids

#: A short decode step of a real layer: position 8 (9 tokens in the KV cache).
LAYER, POSITION = 0, 8
NAMES = ["attn_q", "attn_k", "attn_v", "logit.g0", "attend.g0", "logit.g1", "attend.g1",
         "logit.g2", "attend.g2", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
SHAPES = {"attn_q": (576, 576), "attn_k": (192, 576), "attn_v": (192, 576),
          "attn_output": (576, 576), "ffn_gate": (1536, 576), "ffn_up": (1536, 576),
          "ffn_down": (576, 1536)}


@pytest.fixture(scope="module")
def cap(smol):
    from sim.llm.backends import numerics
    return capture(smol, numerics("kvnand", smol), prompt_ids(smol, POSITION), LAYER)


@pytest.fixture(scope="module")
def ops(cap):
    return {op.name: op for op in inflash.ops(cap)}


def test_ops_names_and_shapes(ops):
    assert list(ops) == NAMES
    for name, (rows, cols) in SHAPES.items():
        op = ops[name]
        assert op.inputs["codes"].shape == (rows, cols) and op.inputs["codes"].dtype == np.uint8
        assert op.inputs["scales"].shape == op.inputs["offsets"].shape == (rows, cols // 32)
        assert op.inputs["x"].shape == (cols,) and op.inputs["x"].dtype == np.uint16
        assert op.expected["y"].shape == (rows,) and op.expected["y"].dtype == np.uint32
        assert op.meta["rows"] == op.meta["of_rows"] == rows and op.meta["group_size"] == 32
    for g in range(3):
        lo, at = ops[f"logit.g{g}"], ops[f"attend.g{g}"]
        assert lo.inputs["q"].shape == (3, 64) and lo.expected["scores"].shape == (3, 9)
        assert at.inputs["p"].shape == (3, 9) and at.expected["o"].shape == (3, 64)
        assert lo.inputs["keys"].shape == at.inputs["values"].shape == (9, 3, 64)
        assert lo.meta == {"group": g, "query_heads": 3, "head_dim": 64, "tokens": 9,
                           "kv_heads": 3, "layer": LAYER}
    assert ops["attn_q"].shape == "576 x 576, w4a16 (Q4_1 blocks, group 32) x fp16"
    assert ops["logit.g1"].shape == "3 query heads x 9 tokens x 64, fp16 KV pages"


@pytest.mark.parametrize("name", list(SHAPES))
def test_gemv_ops_are_the_back_ends(cap, ops, name):
    """The expected codes are what the back-end's projection returned, and the PE's golden GEMV
    on the op's inputs (the file's Q4_1 blocks, the fp16 activation) gives them bit for bit."""
    op = ops[name]
    if name in ("attn_output", "ffn_down"):
        x, result = cap.one("project", name=name).args[1], cap.one("project", name=name).result
    else:
        norm = "attn_norm" if name.startswith("attn") else "ffn_norm"
        call = cap.one("norm_project", norm=norm)
        x, result = cap.one("norm", norm=norm).result, call.result[call.args[2].index(name)]
    assert np.array_equal(op.expected["y"], result[0].view(np.uint32))
    # The activation as the back-end converts it: saturated at +-65504, then RNE to fp16.
    assert np.array_equal(op.inputs["x"], from_float(np.clip(x[0], -FP16_MAX, FP16_MAX), FP16))
    blocks = cap.numerics.mf.q41(f"blk.{LAYER}.{name}.weight")
    assert np.array_equal(op.inputs["codes"], blocks.q)
    w = Weights("w4a16", op.inputs["codes"], op.inputs["scales"], op.inputs["offsets"], 32)
    assert np.array_equal(gemv(w, op.inputs["x"]), op.expected["y"])


def test_attention_ops_are_the_back_ends(cap, ops):
    """Attend of the recomputed probabilities over the group's values is what the back-end's
    attention returned for the group's heads, bit for bit: the scores and probabilities are the
    ones it used. The query and the cache are the codes it kept."""
    call = cap.one("attention")
    q, k, v, first = call.args
    assert first == POSITION
    out = call.result[0].view(np.uint32)
    for g in range(3):
        lo, at = ops[f"logit.g{g}"], ops[f"attend.g{g}"]
        assert np.array_equal(lo.inputs["q"], q[0, 3 * g:3 * g + 3])
        assert np.array_equal(lo.inputs["keys"], k) and np.array_equal(at.inputs["values"], v)
        assert np.array_equal(logit(lo.inputs["q"], k[:, g]), lo.expected["scores"])
        assert np.array_equal(attend(at.inputs["p"], v[:, g]), at.expected["o"])
        assert np.array_equal(at.expected["o"], out[3 * g:3 * g + 3])
        assert at.meta["zero_probabilities"] == np.count_nonzero((at.inputs["p"] & 0x7FFF) == 0)


def test_reduced_case(cap, ops):
    small = inflash.ops(cap, ops=["attend", "attn_q", "ffn_down"], rows=3, kv_groups=[2])
    assert [op.name for op in small] == ["attn_q", "attend.g2", "ffn_down"]
    q, down = small[0], small[2]
    assert q.meta["rows"] == 3 and q.meta["of_rows"] == 576
    assert q.shape == "rows 0-2 of 576 x 576, w4a16 (Q4_1 blocks, group 32) x fp16"
    assert np.array_equal(q.expected["y"], ops["attn_q"].expected["y"][:3])
    assert down.inputs["codes"].shape == (3, 1536)
    assert inflash.ops(cap, ops=["attn_k"], rows=5000)[0].meta["rows"] == 192


@pytest.mark.parametrize("options, message", [
    ({"ops": ["attn_q", "lm_head"]}, re.escape(
        "ops must be a non-empty list of attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, "
        "ffn_down, logit, attend, not ['attn_q', 'lm_head']")),
    ({"ops": "attn_q"}, "ops must be a non-empty list of .*, not 'attn_q'"),
    ({"ops": []}, "ops must be a non-empty list"),
    ({"rows": 0}, r"rows must be a whole number of rows >= 1 \(or None: all\), not 0"),
    ({"rows": 2.5}, "rows must be a whole number of rows >= 1 .*, not 2.5"),
    ({"kv_groups": [3]}, r"kv_groups must be a non-empty list of KV groups from 0 to 2, "
     r"not \[3\]"),
    ({"kv_groups": 1}, "kv_groups must be a non-empty list of KV groups from 0 to 2, not 1"),
])
def test_option_errors(cap, options, message):
    with pytest.raises(CaseError, match=message):
        inflash.ops(cap, **options)


def _command(op) -> dict:
    """The command the runner's testbench sends for ``op`` (pages from 0)."""
    m = op.meta
    if "." not in op.name:
        return {"op": Command.GEMV, "mode": Mode.W4A16, "rows": m["rows"], "cols": m["cols"],
                "page": 0}
    return {"op": Command[op.name.split(".")[0].upper()], "mode": Mode.FP16, "page": 0,
            "tokens": 512, "head_dim": m["head_dim"], "query_heads": m["query_heads"],
            "mapping": Mapping.PAGE, "layers": 1, "kv_heads": m["kv_heads"], "layer": 0,
            "head": m["group"]}


def test_the_runs_pe_takes_every_op_of_a_layer(ops):
    """One run for the whole layer; its PE refuses none of the layer's commands (the contract's
    rules, up to 512 tokens) and keeps up with the page stream: every GEMV page and every
    full KV page is set by its transfer (1024 cycles), not by its compute; tR covers the
    longest x."""
    runs = realdata.runs(list(ops.values()))
    assert len(runs) == 1 and list(runs[0].ops) == NAMES
    p = runs[0].params
    cfg = PEConfig(geometry=p.geometry(), max_rows=p.max_rows, max_cols=p.max_cols,
                   group_size=p.group_size)
    assert (cfg.fmacs, cfg.group_size, cfg.page_bytes) == (8, 32, 4096)
    for op in ops.values():
        assert not is_refused(cfg, _command(op)), op.name
    import golden.inflash as golden
    for name, (rows, cols) in SHAPES.items():
        t = golden.gemv_timing(cfg.geometry, "w4a16", rows, cols, group_size=32)
        assert t.compute.max() <= t.transfer.max() == 1024, name
    layout = realdata.kv_layout(ops["logit.g0"], cfg.page_bytes)
    for kind in ("logit", "attend"):
        t = golden.attention_timing(cfg.geometry, layout, 512, op=kind, group=3)
        assert t.compute.max() <= t.transfer.max() == 1024, kind
    # A w4a16 GEMV takes all of x before its first beat: the read of its first page covers it.
    assert cfg.geometry.tR_cycles >= max(cols for _, cols in SHAPES.values()) // cfg.fmacs
    assert realdata.runs([]) == []


def test_model_cycles_follow_the_page_schedule(ops):
    """The model's cycles are the page stream's plus the PE's latency: attn_q's 207,360 bytes
    in 50 full pages of 1024 transfers and one of 640 after tR (200 cycles), a Logit of 9 tokens
    one page of 9 entries of 32 words."""
    run = realdata.runs(list(ops.values()))[0]
    q = realdata.model_cycles(run, ops["attn_q"])
    assert 0 < q - (200 + 50 * 1024 + 640) < 200
    lo = realdata.model_cycles(run, ops["logit.g0"])
    assert 0 < lo - (200 + 9 * 32) < 200


@pytest.mark.parametrize("hook", inflash.SWAP_HOOKS)
def test_swap_assembles_the_hooks_results(cap, hook):
    """generate --rtl: each call of a swapped hook, alone in a capture as the swap gives it
    (with its norm for norm_project), becomes ops whose expected outputs put back together are
    the back-end's result, bit for bit."""
    for call in cap.find(hook):
        calls = [call]
        if hook == "norm_project":
            calls.insert(0, cap.one("norm", norm=call.args[1]))
        one = Capture(LAYER, POSITION, [], cap.numerics, None, calls)
        ops = inflash.ops(one, **inflash.swap_options(hook, call.args))
        got = inflash.assemble(hook, call.args, {op.name: op.expected for op in ops})
        want = call.result if hook == "norm_project" else [call.result]
        got = got if hook == "norm_project" else [got]
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a.dtype == np.float32 and np.array_equal(a.view(np.uint32),
                                                            b.view(np.uint32))
    assert not {"glu", "keep", "norm"} & set(inflash.SWAP_HOOKS)
