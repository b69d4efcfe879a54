"""The accuracy sections of the reproductions (sim/llm/accuracy.py), on the tiny GGUF: the same
code as `memwall reproduce PAPER` on SmolLM2 (docs/llm.md has those figures), in seconds."""

from __future__ import annotations

import math

import pytest

from sim.llm import accuracy
from sim.reproduce import Context, Result
from tests.llm_files import write_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("acc") / "tiny.gguf")


def _ctx(tmp_path):
    return Context(tmp_path, progress=lambda s: None)


def test_shield_section_rows_table_and_plot(tmp_path, tiny):
    res = Result("shield")
    accuracy.shield_section(_ctx(tmp_path), res, path=tiny, tokens=5)
    names = [r.figure for r in res.rows]
    assert names[0].startswith("Table II, SHIELD") and names[1].startswith("Table II, Kelle")
    assert sum("highest BER within 3 %" in n for n in names) == 3
    table = res.tables[0][1]
    points = sum(len(v[3]) for v in accuracy.SHIELD_SWEEPS.values()) + 3
    assert table.count("\n") == points + 1              # header, rule, one line per point
    assert res.plots[0].name == "accuracy_fig2.png" and res.plots[0].stat().st_size > 10_000


def test_tolerated_is_the_highest_ber_within_three_percent():
    base = {"ppl": 10.0}
    pts = [accuracy.Point(f"p{b}", "shield", (("ber", b),)) for b in (1e-4, 1e-3, 1e-2, 0.1)]
    rows = [{"ppl": 10.1}, {"ppl": 10.29}, {"ppl": 10.31}, {"ppl": float("nan")}]
    assert accuracy._tolerated(rows, pts, base) == 1e-3
    assert accuracy._tolerated([{"ppl": math.inf}] * 4, pts, base) is None


@pytest.mark.parametrize("paper", ["rdxe", "kvnand", "flowkv"])
def test_claim_sections(tmp_path, tiny, paper):
    res = Result(paper)
    accuracy.claim_section(paper, _ctx(tmp_path), res, path=tiny, tokens=4)
    points = accuracy.CLAIMS[paper][0]
    assert len(res.rows) == len(points) - 1
    for row in res.rows:
        assert "against float32" in row.figure and abs(row.ours) < 50
    assert res.tables[0][1].count("\n") == len(points) + 1


def test_quick_run_leaves_the_model_out(tmp_path):
    res = Result("flowkv")
    accuracy.section("flowkv", Context(tmp_path, quick=True, progress=lambda s: None), res)
    assert not res.rows and "left out of a quick run" in res.notes[0]


def test_a_collapsed_point_reads_collapsed():
    pts = [accuracy.Point("ok", "float"), accuracy.Point("lost", "shield")]
    rows = [{"ppl": 10.0, "delta_ppl_pct": 0.0, "kl_to_float": 0.0,
             "top1_agree_with_float": 1.0, "seconds": 1.0},
            {"ppl": float("nan"), "delta_ppl_pct": float("nan"), "kl_to_float": float("nan"),
             "top1_agree_with_float": 0.0, "seconds": 1.0}]
    table = accuracy.accuracy_table(pts, rows)
    assert "| lost | collapsed (NaN) | – | – | 0.0 % | 1 |" in table and "nan" not in table
