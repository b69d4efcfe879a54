"""The SHIELD eDRAM family's real-model cases (sim/llm/cases/edram.py) and the pure half of its
RTL runner (cocotb_tests/realdata/edram.py): the ops are the back-end's stored tensors, their
losses are the golden injection's draws for that step, and the runs' layout and cycle model."""

from __future__ import annotations

import numpy as np
import pytest

from cocotb_tests.realdata import edram as runner
from golden import edram
from hdl.edram import EdramController
from memwall import registry
from sim.llm.backends import numerics
from sim.llm.backends.shield import KINDS, Shield, to_bf16_codes
from sim.llm.cases import CaseError, Op, capture, case, prompt_ids
from sim.llm.cases import edram as cases

LAYER, POSITION = 0, 8       # the make-test case's step (cocotb_tests/test_realdata_edram.py)
WORDS = {"q": 576, "k": 192, "v": 192, "o": 576}


@pytest.fixture(scope="module")
def caps(smol):
    """A fresh capture of each policy's back-end at the step, and its ops."""
    ids = prompt_ids(smol, POSITION)
    out = {}
    for policy, name in cases.POLICY_BACKENDS.items():
        cap = capture(smol, numerics(name, smol), ids, LAYER)
        out[policy] = (cap, cases.ops(cap, policies=[policy]))
    return out


def test_ops_named_and_shaped(caps):
    for policy, (_, ops) in caps.items():
        assert [op.name for op in ops] == [f"{policy}.{k}" for k in KINDS]
        for op, kind in zip(ops, KINDS):
            assert op.meta["kind"] == kind and op.meta["policy"] == policy
            for arrays in (op.inputs, op.expected):
                for name, a in arrays.items():
                    assert a.shape == (WORDS[kind],) and a.dtype == np.uint16, (op.name, name)
            assert op.meta["segment"] == ("qo_mant" if kind in "qo" else "kv_mant")
            assert op.meta["residency_us"] == (Shield.__init__.__kwdefaults__["qo_us"]
                                                if kind in "qo" else None)


def test_expected_is_what_the_step_used(caps):
    """The expected words are the tensors the back-end went on with, read from where the model
    used them (the KV cache, attention's query, the output projection's input), not from the
    keep record the builder reads."""
    for policy, (cap, ops) in caps.items():
        got = {op.meta["kind"]: op.expected["data"] for op in ops}
        t, layer = cap.position, cap.layer
        assert np.array_equal(got["k"], to_bf16_codes(cap.cache.k[layer][t]).ravel()), policy
        assert np.array_equal(got["v"], to_bf16_codes(cap.cache.v[layer][t]).ravel()), policy
        assert np.array_equal(got["q"], to_bf16_codes(cap.one("attention").args[0]).ravel())
        o_in = cap.one("project", name="attn_output").args[1]
        assert np.array_equal(got["o"], to_bf16_codes(o_in).ravel()), policy


def test_losses_are_the_golden_draws(caps, smol):
    """A fresh back-end, its generators advanced by the prefill's draws (one keep of the first
    ``POSITION`` tokens), draws for the step's written words exactly the losses of the op; the
    losses split by golden.edram.split's segments, and written XOR losses is the expected."""
    for policy, (cap, ops) in caps.items():
        fresh = Shield(smol, policy=policy)
        for op in ops:
            kind = op.meta["kind"]
            shape = cap.one("keep", kind=kind).args[1].shape[1:]
            fresh.store(LAYER, kind, np.zeros((POSITION, *shape), np.uint16))
            redrawn = fresh.store(LAYER, kind, op.inputs["data"])
            assert np.array_equal(redrawn, op.expected["data"]), op.name
            lost = edram.merge(op.inputs["lost_std"], op.inputs["lost_mant"])
            assert np.array_equal(op.inputs["data"] ^ lost, op.expected["data"]), op.name
            assert op.meta["lost_bits"] == int(np.bitwise_count(lost).sum())


def test_what_the_policies_draw(caps):
    """Sign and exponent never lose a bit (BER 1.4e-21 at 45 us); standard draws nothing, so
    block RAM without decay (edram-fpga) must read its words back unchanged; this step's seeded
    draws give the make-test case losses in Q and O under SHIELD (the harness is exercised)."""
    for policy, (_, ops) in caps.items():
        for op in ops:
            assert not op.inputs["lost_std"].any(), op.name
    assert all(op.meta["lost_bits"] == 0 for op in caps["standard"][1])
    shield = {op.meta["kind"]: op.meta["lost_bits"] for op in caps["shield"][1]}
    assert shield["q"] > 0 and shield["o"] > 0
    kelle = {op.meta["kind"]: op.meta["lost_bits"] for op in caps["kelle"][1]}
    assert kelle["q"] == kelle["o"] == 0 and kelle["k"] + kelle["v"] > 0


@pytest.mark.parametrize("option, value", [
    ("policies", []), ("policies", "shield"), ("policies", ["shield", "shield"]),
    ("policies", ["refresh"]), ("kinds", ["q", "x"])])
def test_bad_options_name_the_option(caps, option, value):
    cap = caps["shield"][0]
    allowed = {"policies": "shield, standard, kelle", "kinds": "q, k, v, o"}[option]
    with pytest.raises(CaseError, match=rf"^{option} must be a non-empty list of distinct names "
                                        rf"from {allowed}, not {value!r}".replace("[", r"\[")
                       .replace("]", r"\]")):
        cases.ops(cap, **{option: value})


def test_unknown_option_is_refused(smol, tmp_path):
    with pytest.raises(CaseError, match="edram cases take the options policies, kinds, not "
                                        "tiles"):
        case(smol, "edram", LAYER, POSITION, folder=tmp_path, tiles=2)


def test_options_choose_the_ops(caps):
    ops = cases.ops(caps["shield"][0], policies=["shield"], kinds=["o", "q"])
    assert [op.name for op in ops] == ["shield.q", "shield.o"]        # the step's order


# --- the runner's plan, outside the simulator ------------------------------------------------

def _op(name: str, policy: str, words: int) -> Op:
    return Op(name, "", {"data": np.zeros(words, np.uint16)}, {}, {"policy": policy})


def _params(**overrides):
    return registry.get("edram").parameters("small", {**runner.OVERRIDES, **overrides})


def test_one_step_is_one_round():
    ops = [_op(f"shield.{k}", "shield", WORDS[k]) for k in KINDS]
    plan = runner.layout(ops, _params())
    assert list(plan) == ["shield"] and len(plan["shield"]) == 1
    tiles = plan["shield"][0]
    assert [(t.op, t.start, t.stop, t.row) for t in tiles] == [
        ("shield.q", 0, 576, 0), ("shield.k", 0, 192, 9), ("shield.v", 0, 192, 12),
        ("shield.o", 0, 576, 15)]


def test_small_memory_tiles_and_rounds():
    """2 banks x 2 rows x 64 words (256 words): a 576-word Q is three tiles, each round full."""
    ops = [_op("shield.q", "shield", 576), _op("shield.k", "shield", 192)]
    plan = runner.layout(ops, _params(banks="2", rows="2", clk_mhz="1"))["shield"]
    assert [[(t.op, t.start, t.stop, t.row) for t in r] for r in plan] == [
        [("shield.q", 0, 256, 0)], [("shield.q", 256, 512, 0)],
        [("shield.q", 512, 576, 0), ("shield.k", 0, 192, 1)]]


def test_model_cycles_and_runs():
    ops = [_op(f"{p}.q", p, 576) for p in ("shield", "standard", "kelle")]
    got = runner.runs(ops)
    assert [(r.block, r.ops, r.testcase) for r in got] == [
        ("edram", ("shield.q", "kelle.q"), "real_step"), ("edram-fpga", ("standard.q",),
                                                         "real_step")]
    assert runner.model_cycles(got[0], ops[0]) == 2 * 576 + EdramController.read_latency
    small = got[0].__class__("edram", _params(banks="2", rows="2", clk_mhz="1"), "real_step",
                             ("shield.q",))
    assert runner.model_cycles(small, ops[0]) == 2 * 576 + 3 * EdramController.read_latency


def test_request_order_alternates_rows():
    tile = runner.Tile("shield.q", 0, 576, 0)
    order = runner._order(tile, 64)
    assert sorted(order) == list(range(576))
    rows = [i // 64 for i in order]
    assert all(a != b for a, b in zip(rows, rows[1:]))     # consecutive requests: other rows
