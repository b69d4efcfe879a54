"""The FlowKV real-model case (sim.llm.cases.flowkv) and its runs (cocotb_tests.realdata.flowkv):
the ops are the ``flowkv`` back-end's projections and attention of one decode step, bit for bit,
and the runs size the blocks for them."""

from __future__ import annotations

import numpy as np
import pytest

from cocotb_tests.flowkv.bench import pair_timing
from cocotb_tests.realdata import flowkv as realdata
from golden.arith.float import to_float
from golden.flowkv import attend
from golden.flowkv_dqp import dequantize, gemm, q4nx_from_records
from hdl.arith.format import BF16, FP16, FP32
from hdl.flowkv import DQPConfig, FlowKVConfig
from hdl.flowkv.dqp_spec import command_cycles
from sim.llm.backends import numerics
from sim.flowkv import step_cycles
from sim.llm.cases import CaseError, Op, capture, flowkv, prompt_ids
from sim.llm.loader import PROJECTIONS

#: A short decode step of a real layer: position 20 (21 keys, two chunks of 16).
LAYER, POSITION = 1, 20


@pytest.fixture(scope="module")
def cap(smol):
    return capture(smol, numerics("flowkv", smol), prompt_ids(smol, POSITION), LAYER)


@pytest.fixture(scope="module")
def everything(cap):
    return flowkv.ops(cap)


@pytest.fixture(scope="module")
def ops(everything):
    """The attention ops."""
    return [op for op in everything if op.name.startswith("attention")]


def test_ops_are_the_layers_in_its_order(everything):
    assert [op.name for op in everything] == [
        "attn_q", "attn_k", "attn_v", "attention.kv0", "attention.kv1", "attention.kv2",
        "attention", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def _projection_result(cap, name):
    """The captured float input and result of projection ``name`` (read off the calls)."""
    sources = {"attn_q": "attn_norm", "attn_k": "attn_norm", "attn_v": "attn_norm",
               "ffn_gate": "ffn_norm", "ffn_up": "ffn_norm"}
    if name in sources:
        call = cap.one("norm_project", norm=sources[name])
        return (cap.one("norm", norm=sources[name]).result,
                call.result[list(call.args[2]).index(name)])
    call = cap.one("project", name=name)
    return call.args[1], call.result


def test_projection_ops_are_the_backends_gemv(smol, cap, everything):
    """Each projection's records are the file's Q4_1 blocks with ``d`` and ``m`` in bf16, its
    ``a`` the captured input in bf16, its ``y`` the captured result; and FusedDQP's golden GEMV
    of those records and ``a`` is that ``y``."""
    for op in (o for o in everything if o.name in PROJECTIONS):
        x, result = _projection_result(cap, op.name)
        q41 = smol.q41(f"blk.{LAYER}.{op.name}.weight")
        rows, cols = q41.q.shape
        assert op.meta == {"rows": rows, "of_rows": rows, "cols": cols, "tile": 32,
                           "max_abs_a": pytest.approx(float(np.abs(x).max()))}
        w = q4nx_from_records(op.inputs["records"], rows, cols, 32)
        assert np.array_equal(w.q, q41.q)
        for bf, fp in ((w.d, q41.d), (w.m, q41.m)):       # one RNE rounding to bf16: 2**-8 relative
            assert np.all(np.abs(to_float(bf, BF16) - to_float(fp, FP16))
                          <= 2.0 ** -8 * np.abs(to_float(fp, FP16)))
        a = to_float(op.inputs["a"], BF16)
        assert np.all(np.abs(a - x[0]) <= 2.0 ** -8 * np.abs(x[0]))
        assert op.expected["y"].dtype == np.uint32 and op.expected["y"].shape == (rows,)
        assert np.array_equal(to_float(op.expected["y"], FP32), result[0])
        assert np.array_equal(gemm(dequantize(w), op.inputs["a"][None])[0], op.expected["y"])
    assert everything[0].shape == "576 x 576, Q4NX (Q4_1 blocks, bf16 d and m) x bf16"
    assert everything[-1].meta["cols"] == 1536


def test_rows_slice_the_projections(cap, everything):
    picked = flowkv.ops(cap, ops=["attn_k", "ffn_down"], rows=64)
    assert [op.name for op in picked] == ["attn_k", "ffn_down"]
    full = {op.name: op for op in everything}
    for op in picked:
        cols = full[op.name].meta["cols"]
        assert op.meta["rows"] == 64 and op.inputs["records"].shape == (64 * cols // 32, 20)
        assert np.array_equal(op.expected["y"], full[op.name].expected["y"][:64])
        w = q4nx_from_records(op.inputs["records"], 64, cols, 32)
        assert np.array_equal(gemm(dequantize(w), op.inputs["a"][None])[0], op.expected["y"])
    assert picked[0].shape == "rows 0-63 of 192 x 576, Q4NX (Q4_1 blocks, bf16 d and m) x bf16"
    # More rows than the projection has: all of them.
    assert flowkv.ops(cap, ops=["attn_k"], rows=4096)[0].meta["rows"] == 192


def test_ops_are_the_attention_hook(cap, ops):
    call = cap.one("attention")
    q, k, v, first = call.args
    assert [op.name for op in ops] == ["attention.kv0", "attention.kv1", "attention.kv2",
                                       "attention"]
    step = ops[-1]
    assert np.array_equal(step.inputs["q"], q[0]) and np.array_equal(step.inputs["k"], k)
    assert np.array_equal(step.inputs["v"], v)
    # The expected output is the back-end's own result (bf16 values in float32), as codes.
    assert step.expected["o"].dtype == np.uint16 and step.expected["o"].shape == (9, 64)
    assert np.array_equal(to_float(step.expected["o"], BF16), call.result[0])
    for g, op in enumerate(ops[:3]):
        assert op.inputs["q"].shape == (3, 64) and op.inputs["k"].shape == (POSITION + 1, 64)
        assert np.array_equal(op.inputs["q"], q[0, 3 * g:3 * g + 3])
        assert np.array_equal(op.inputs["k"], k[:, g]) and np.array_equal(op.inputs["v"], v[:, g])
        assert np.array_equal(op.expected["o"], step.expected["o"][3 * g:3 * g + 3])
        assert op.meta == {"position": POSITION, "length": POSITION + 1, "chunk": 16,
                           "head_dim": 64, "group": 3, "kv_head": g}
    assert step.meta["kv_heads"] == 3
    assert ops[0].shape == "3 query heads x 64 over 21 keys (L_c 16) of KV head 0, bf16"


def test_pair_ops_are_the_pairs_golden(ops):
    # What one pair computes (golden.flowkv.attend, the testbench's oracle) is what the
    # back-end's attend_many returned for that KV head's query heads.
    for op in ops[:3]:
        got = attend(op.inputs["q"], op.inputs["k"], op.inputs["v"], op.meta["position"],
                     chunk=op.meta["chunk"], lanes=4)
        assert np.array_equal(got, op.expected["o"]), op.name


def test_options_pick_ops(cap):
    picked = flowkv.ops(cap, ops=["attention.kv"], kv_heads=[2])
    assert [op.name for op in picked] == ["attention.kv2"]
    assert [op.name for op in flowkv.ops(cap, ops=["attention.kv", "attention"],
                                         kv_heads=[1, 0])] == [
        "attention.kv1", "attention.kv0", "attention"]
    assert [op.name for op in flowkv.ops(cap, ops=["ffn_up", "attention", "attn_v"])] == [
        "attn_v", "attention", "ffn_up"]


@pytest.mark.parametrize("options, message", [
    ({"kv_heads": [3]}, "kv_heads must hold KV heads from 0 to 2, not 3"),
    ({"kv_heads": [True]}, "kv_heads must hold KV heads from 0 to 2, not True"),
    ({"kv_heads": []}, r"kv_heads must be None or a non-empty list of KV heads from 0 to 2, "
                       r"not \[\]"),
    ({"kv_heads": 1}, "kv_heads must be None or a non-empty list of KV heads from 0 to 2, not 1"),
    ({"kv_heads": [1, 1]}, r"kv_heads must not repeat a KV head, not \[1, 1\]"),
    ({"ops": "attn_q"}, "ops must be a non-empty list of attn_q, .*, attention.kv, attention, "
                        "not 'attn_q'"),
    ({"ops": []}, r"ops must be a non-empty list of .*, not \[\]"),
    ({"ops": ["logit"]}, r"ops must be a non-empty list of .*, not \['logit'\]"),
    ({"rows": 48}, r"rows must be a positive multiple of the tile 32 \(or None: all\), not 48"),
    ({"rows": 0}, "rows must be a positive multiple of the tile 32 .*, not 0"),
    ({"rows": True}, "rows must be a positive multiple of the tile 32 .*, not True"),
])
def test_bad_options(cap, options, message):
    with pytest.raises(CaseError, match=message):
        flowkv.ops(cap, **options)


def test_another_backend_is_refused(smol):
    other = capture(smol, numerics("float", smol), prompt_ids(smol, 2), 0)
    with pytest.raises(CaseError, match="a FlowKV case needs a capture of the flowkv back-end, "
                                        "not 'float'"):
        flowkv.ops(other)


def _op(name: str, length: int, **meta) -> Op:
    return Op(name, "", {}, {}, {"position": length - 1, "length": length, "chunk": 16,
                                 "head_dim": 64, "group": 3, **meta})


def test_runs_size_the_blocks(everything, ops):
    dqp, pair, array = realdata.runs(everything)
    assert (dqp.block, dqp.testcase, dqp.ops) == ("flowkv-dqp", "projections", PROJECTIONS)
    assert dqp.params.as_dict() == {"lanes": 32, "tile": 32, "max_inputs": 2048,
                                    "max_outputs": 1536}
    assert "preset paper (32 lanes, tile 32) with max_inputs=2048, max_outputs=1536" in dqp.why
    assert realdata.runs(ops)[0].block == "flowkv"           # no projection: no FusedDQP run
    # A projection past SmolLM2's sizes: the next power of two for K, a whole tile for N.
    big = Op("attn_q", "", {}, {}, {"rows": 1600, "cols": 3000, "tile": 32})
    assert realdata.runs([big])[0].params.as_dict() == {"lanes": 32, "tile": 32,
                                                         "max_inputs": 4096, "max_outputs": 1600}
    pair, array = realdata.runs(ops)
    assert (pair.block, pair.testcase, pair.ops) == ("flowkv", "pair_steps", (
        "attention.kv0", "attention.kv1", "attention.kv2"))
    assert pair.params.pair_args() == {"head_dim": 64, "lanes": 4, "group": 3, "chunk": 16,
                                       "max_tokens": 4096, "out_fmt": "bf16"}
    assert "preset default with group=3 " in pair.why
    assert (array.block, array.testcase, array.ops) == ("flowkv-array", "array_steps",
                                                        ("attention",))
    assert (array.params.head_dim, array.params.group, array.params.pairs, array.params.lanes,
            array.params.max_tokens) == (64, 3, 3, 2, 1024)
    assert "head_dim=64, group=3, pairs=3" in array.why
    # A step past the presets' max_tokens: the next power of two.
    long = realdata.runs([_op("attention.kv0", 5000, kv_head=0), _op("attention", 1025,
                                                                      kv_heads=3)])
    assert [r.params.max_tokens for r in long] == [8192, 2048]
    assert realdata.runs([]) == []


def test_model_cycles_of_a_projection_are_fuseddqps_command(everything):
    """The engine's cycle model of the op's ``K x N`` GEMV: ``K N / 32`` weight beats, one a
    cycle, after the first record, plus the latency of the last row's result."""
    dqp = realdata.runs(everything)[0]
    cfg = DQPConfig(lanes=32, tile=32, max_inputs=2048, max_outputs=1536)
    for op in everything[:3] + everything[-4:]:
        want = command_cycles(cfg, inputs=op.meta["cols"], outputs=op.meta["rows"])
        assert want["issue"] == op.meta["cols"] * op.meta["rows"] // 32
        assert realdata.model_cycles(dqp, op) == want["total"] == 1 + want["issue"] \
            + cfg.y_latency
    assert realdata.model_cycles(dqp, everything[0]) == 10_430             # attn_q, 576 x 576


def test_model_cycles_are_the_step_model(ops):
    # The pair's and the array's steps on their own pairs' timing (the array's pairs run side by
    # side, P = 2 there); at d / P >= the accumulator loop the stream is d / P cycles per row.
    pair, array = realdata.runs(ops)
    for run, op, lanes in ((pair, ops[1], 4), (array, ops[-1], 2)):
        cfg = FlowKVConfig(head_dim=64, lanes=lanes, group=3, chunk=16,
                           max_tokens=run.params.max_tokens)
        want = step_cycles(pair_timing(cfg), POSITION + 1, POSITION)
        assert want["stream"] == (POSITION + 1) * 64 // lanes
        assert realdata.model_cycles(run, op) == want["total"]


def test_swap_puts_the_hooks_results_back_together(cap, everything):
    """What ``generate --rtl`` returns for a hook from its ops' outputs (here the expected
    arrays) is the back-end's own result for that call, bit for bit."""
    by_name = {op.name: {k: v for k, v in op.expected.items()} for op in everything}
    for hook, match in (("norm_project", {"norm": "attn_norm"}),
                        ("norm_project", {"norm": "ffn_norm"}),
                        ("project", {"name": "attn_output"}), ("project", {"name": "ffn_down"}),
                        ("attention", {})):
        call = cap.one(hook, **match)
        names = {"norm_project": lambda: list(call.args[2]), "project": lambda: [call.args[0]],
                 "attention": lambda: ["attention"]}[hook]()
        assert flowkv.swap_options(hook, call.args) == {"ops": names}
        got = flowkv.assemble(hook, call.args, by_name)
        want = call.result
        for g, w in zip(got if isinstance(got, list) else [got],
                        want if isinstance(want, list) else [want]):
            assert g.dtype == np.float32 and g.shape == w.shape
            assert np.array_equal(g.view(np.uint32), np.asarray(w, np.float32).view(np.uint32))
