"""The FlowKV real-model case (sim.llm.cases.flowkv) and its runs (cocotb_tests.realdata.flowkv):
the ops are the ``flowkv`` back-end's attention of one decode step, bit for bit, and the runs
size the blocks for them."""

from __future__ import annotations

import numpy as np
import pytest

from cocotb_tests.flowkv.bench import pair_timing
from cocotb_tests.realdata import flowkv as realdata
from golden.arith.float import to_float
from golden.flowkv import attend
from hdl.arith.format import BF16
from hdl.flowkv import FlowKVConfig
from sim.llm.backends import numerics
from sim.flowkv import step_cycles
from sim.llm.cases import CaseError, Op, capture, flowkv, prompt_ids

#: A short decode step of a real layer: position 20 (21 keys, two chunks of 16).
LAYER, POSITION = 1, 20


@pytest.fixture(scope="module")
def cap(smol):
    return capture(smol, numerics("flowkv", smol), prompt_ids(smol, POSITION), LAYER)


@pytest.fixture(scope="module")
def ops(cap):
    return flowkv.ops(cap)


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
    picked = flowkv.ops(cap, kv_heads=[2], step=False)
    assert [op.name for op in picked] == ["attention.kv2"]
    assert [op.name for op in flowkv.ops(cap, kv_heads=[1, 0])] == [
        "attention.kv1", "attention.kv0", "attention"]


@pytest.mark.parametrize("options, message", [
    ({"kv_heads": [3]}, "kv_heads must hold KV heads from 0 to 2, not 3"),
    ({"kv_heads": [True]}, "kv_heads must hold KV heads from 0 to 2, not True"),
    ({"kv_heads": []}, r"kv_heads must be None or a non-empty list of KV heads from 0 to 2, "
                       r"not \[\]"),
    ({"kv_heads": 1}, "kv_heads must be None or a non-empty list of KV heads from 0 to 2, not 1"),
    ({"kv_heads": [1, 1]}, r"kv_heads must not repeat a KV head, not \[1, 1\]"),
    ({"step": "yes"}, "step must be True or False, not 'yes'"),
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


def test_runs_size_the_blocks(ops):
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
