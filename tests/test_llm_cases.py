"""Real-model cases for the RTL (sim/llm/cases) and the comparison of what the RTL produced
(cocotb_tests/realdata): capture of a layer's calls, the content-hash cache, the first mismatch,
and `memwall model layer`'s refusals. The families' own cases are tested in
tests/test_cases_<family>.py and run on the RTL by cocotb_tests/test_realdata_<family>.py."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from cocotb_tests.realdata import first_mismatch
from memwall.cli import main
from sim.llm import cases
from sim.llm.cases import CaseError, Op, capture, case, load_ops, save_ops
from sim.llm.loader import load
from sim.llm.model import Llama, Numerics
from tests.llm_files import write_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load(write_tiny(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


IDS = [5, 17, 42, 99, 3, 250, 7]


def test_capture_records_the_layers_step_and_changes_nothing(tiny):
    nx = Numerics(tiny)
    cap = capture(tiny, nx, IDS, 1)
    hooks = [c.hook for c in cap.calls]
    assert hooks == ["norm", "norm_project", "keep", "keep", "keep", "attention", "keep",
                     "project", "norm", "norm_project", "glu", "project"]
    assert cap.position == len(IDS) - 1 and cap.cache.length == len(IDS)
    att = cap.one("attention")
    q, k, v, first = att.args
    assert q.shape[0] == 1 and k.shape[0] == len(IDS) and first == len(IDS) - 1
    assert [c.args[0] for c in cap.find("keep")] == ["q", "k", "v", "o"]
    # The recorded results are the back-end's: recomputing a call gives the same array.
    h, norm, names = cap.one("norm_project", norm="ffn_norm").args
    for got, want in zip(cap.one("norm_project", norm="ffn_norm").result,
                         nx.norm_project(1, h, norm, names)):
        np.testing.assert_array_equal(got, want)
    assert not {"norm", "project", "attention"} & set(vars(nx))     # hooks restored
    # The step's KV cache is a plain run's over the same ids (float32 BLAS rounds a batch of 7
    # and one of 6 plus 1 differently: equal to float32's precision).
    ref = Llama(tiny, Numerics(tiny), layers=2)
    cache = ref.new_cache()
    ref.hidden(IDS, cache)
    np.testing.assert_allclose(cap.cache.k[1][:len(IDS)], cache.k[1][:len(IDS)], rtol=1e-4,
                               atol=1e-5)


def test_capture_and_case_refuse_bad_layers_and_positions(tiny):
    with pytest.raises(CaseError, match="layer must be from 0 to 1, not 2"):
        capture(tiny, Numerics(tiny), IDS, 2)
    with pytest.raises(CaseError, match="position 600 is past the model's context"):
        cases.prompt_ids(tiny, 600, IDS)
    with pytest.raises(CaseError, match="position 9 needs 10 tokens; the prompt has 7"):
        cases.prompt_ids(tiny, 9, IDS)
    with pytest.raises(CaseError, match="unknown family 'nand'"):
        case(tiny, "nand", 0, 3, ids=IDS)


@pytest.fixture
def fake_family(monkeypatch):
    """A family module whose ops are the step's attention output, counting its builds."""
    module = types.ModuleType("tests.fake_family")
    module.NUMERICS, module.OPTIONS, module.built = "float", {"heads": 2}, []

    def ops(cap, heads):
        module.built.append((cap.layer, cap.position))
        out = cap.one("attention").result[0, :heads]
        return [Op("attn", f"{heads} x {out.shape[1]}", {"q": cap.one("attention").args[0]},
                   {"o": out.view(np.uint32)}, {"heads": heads})]
    module.ops = ops
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cases.FAMILIES, "fake", module.__name__)
    return module


def test_a_case_is_built_once_and_kept_by_content(tiny, tmp_path, fake_family):
    ops, path = case(tiny, "fake", 1, 4, ids=IDS, folder=tmp_path)
    assert fake_family.built == [(1, 4)] and path.exists()
    again, same = case(tiny, "fake", 1, 4, ids=IDS, folder=tmp_path)
    assert same == path and fake_family.built == [(1, 4)]          # read, not rebuilt
    np.testing.assert_array_equal(again[0].expected["o"], ops[0].expected["o"])
    assert again[0].meta == {"heads": 2} and again[0].shape == ops[0].shape
    other = case(tiny, "fake", 1, 4, ids=IDS, folder=tmp_path, heads=1)[1]
    assert other != path and len(fake_family.built) == 2
    assert case(tiny, "fake", 0, 4, ids=IDS, folder=tmp_path)[1] != path
    assert not list(tmp_path.glob(".*partial"))
    path.write_bytes(b"damaged")                                     # a bad file is rebuilt
    case(tiny, "fake", 1, 4, ids=IDS, folder=tmp_path)
    assert len(fake_family.built) == 4
    with pytest.raises(CaseError, match="fake cases take the options heads, not rows"):
        case(tiny, "fake", 1, 4, ids=IDS, folder=tmp_path, rows=3)


def test_ops_round_trip(tmp_path):
    ops = [Op("a", "2 x 2", {"x": np.arange(4, dtype=np.uint16).reshape(2, 2)},
              {"y": np.array([1, 2], np.uint32)}, {"k": 3}),
           Op("b", "1", {}, {"y": np.array([7], np.int8)})]
    save_ops(tmp_path / "c.npz", ops, {"note": "x"})
    back, info = load_ops(tmp_path / "c.npz")
    assert info == {"note": "x"} and [o.name for o in back] == ["a", "b"]
    assert back[0].inputs["x"].dtype == np.uint16 and back[1].expected["y"][0] == 7
    assert back[0].meta == {"k": 3}


def test_first_mismatch_names_the_element_and_the_codes():
    want = {"y": np.array([[1, 2], [3, 0x8000]], np.uint16)}
    assert first_mismatch(want, {"y": want["y"].copy()}) is None
    got = want["y"].copy()
    got[1, 1], got[0, 1] = 0, 5
    assert first_mismatch(want, {"y": got}) == \
        "y[0, 1]: expected 0x0002, got 0x0005 (2 of 4 elements differ)"
    assert first_mismatch(want, {"y": got[0]}) == "y: shape (2,) from the RTL, (2, 2) expected"
    assert first_mismatch(want, {}) == "y: the RTL produced none"


@pytest.mark.parametrize("argv, words", [
    (["--rtl", "nand"], "unknown family 'nand'"),
    (["--rtl", "inflash", "--layer", "2"], "layer must be from 0 to 1, not 2"),
    (["--rtl", "inflash", "--position", "-1"], "position must be an integer >= 0"),
])
def test_cli_layer_bad_input_is_one_line(capsys, tmp_path, argv, words):
    path = str(write_tiny(tmp_path / "bad.gguf"))
    assert main(["model", "layer", *argv, "--gguf", path]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def _generate_on_stand_in(capsys, tmp_path, monkeypatch, numerics: str, layers: str,
                          cycles: int) -> tuple[list, dict]:
    """`generate --rtl` on the tiny file, 2 tokens, with the simulator replaced by a stand-in
    that returns each op's expected arrays and ``cycles`` per op: the op names of each run and
    the command's JSON."""
    from cocotb_tests.realdata import OpResult
    from cocotb_tests.realdata import family_module, swap
    seen = []

    def fake_run_ops(family, ops, path, simulator, **kwargs):
        seen.append([op.name for op in ops])
        blocks = {name: run.block for run in family_module(family).runs(ops) for name in run.ops}
        return [OpResult(op.name, op.shape, blocks[op.name], True, None, cycles, cycles, 0.0,
                         {}, dict(op.expected)) for op in ops]

    monkeypatch.setattr(swap, "run_ops", fake_run_ops)
    monkeypatch.chdir(tmp_path)
    path = str(write_tiny(tmp_path / "gen.gguf"))
    assert main(["model", "generate", "the the in", "--tokens", "2", "--numerics", numerics,
                 "--rtl", "--layers", layers, "--gguf", path, "--json"]) == 0
    out = __import__("json").loads(capsys.readouterr().out)
    assert out["same_tokens_as_golden"] and out["ids"] == out["golden_ids"]
    assert out["rtl"]["steps"] == 2
    return seen, out


def test_generate_rtl_swaps_the_layers_hooks_and_keeps_the_tokens(capsys, tmp_path, monkeypatch):
    """`generate --rtl` on the tiny file with the simulator replaced by a stand-in that returns
    each op's expected arrays: the prompt's last token and every later one are decode steps whose
    layer-0 projections and attention come from the runs, assembled into the hooks' results; the
    tokens equal the back-end's alone. (The runs themselves are the RTL's in
    cocotb_tests/test_realdata_inflash.py.)"""
    seen, out = _generate_on_stand_in(capsys, tmp_path, monkeypatch, "kvnand", "0", 7)
    assert out["rtl"]["layers"] == [0]
    # Per step: Q, K, V; Logit and Attend of both KV groups; the output projection; gate and up;
    # down. Two steps.
    assert seen[:5] == [["attn_q", "attn_k", "attn_v"],
                        ["logit.g0", "attend.g0", "logit.g1", "attend.g1"],
                        ["attn_output"], ["ffn_gate", "ffn_up"], ["ffn_down"]]
    assert len(seen) == 10 and out["rtl"]["cycles_per_token"] == 7 * 11


def test_generate_rtl_on_flowkv_runs_projections_on_fuseddqp_and_attention_on_the_array(
        capsys, tmp_path, monkeypatch):
    """`generate --numerics flowkv --rtl` with the stand-in simulator: per decode step and
    swapped layer, Q, K and V on FusedDQP, the whole step's attention on the array, the output
    projection, gate and up, down; the hooks' results assembled from the runs' outputs give the
    back-end's tokens. (The runs on the RTL: cocotb_tests/test_realdata_flowkv.py.)"""
    seen, out = _generate_on_stand_in(capsys, tmp_path, monkeypatch, "flowkv", "0-1", 5)
    assert out["rtl"]["family"] == "flowkv" and out["rtl"]["layers"] == [0, 1]
    step = [["attn_q", "attn_k", "attn_v"], ["attention"], ["attn_output"],
            ["ffn_gate", "ffn_up"], ["ffn_down"]]
    assert seen == step * 4                                  # two layers, two steps
    assert [r["layer"] for r in out["rtl"]["runs"][:10]] == [0] * 5 + [1] * 5
    assert out["rtl"]["cycles_per_token"] == 5 * 8 * 2


@pytest.mark.parametrize("argv, words", [
    (["--numerics", "rdxe"], "--rtl runs the decode step of flowkv, kvnand"),
    (["--numerics", "kvnand", "--layers", "0-5"], "--layers must name layers from 0 to 1"),
    (["--numerics", "kvnand", "--layers", "x"], "--layers must be like 0-1, 3 or 0,2,5"),
])
def test_generate_rtl_bad_input_is_one_line(capsys, tmp_path, argv, words):
    path = str(write_tiny(tmp_path / "bad.gguf"))
    assert main(["model", "generate", "the", "--rtl", *argv, "--gguf", path]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
