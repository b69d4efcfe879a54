"""The netlist depth report (synth/depth.py) on a hand-made synth_ecp5 netlist."""

import json

import pytest

from synth import depth as D


def _cell(kind, ins: dict, outs: dict) -> dict:
    return {"type": kind, "port_directions": {**{p: "input" for p in ins},
                                              **{p: "output" for p in outs}},
            "connections": {**{p: [b] for p, b in ins.items()}, **{p: [b] for p, b in outs.items()}}}


def _netlist() -> dict:
    """a.q (2) -> LUT -> LUT -> b.d; ram (5) -> LUT -> c.d; a.q -> a carry chain of two cells
    (its CIN link free) -> d.d."""
    cells = {
        "a": _cell("TRELLIS_FF", {"CLK": 1, "DI": 3}, {"Q": 2}),
        "l1": _cell("LUT4", {"A": 2, "B": 9, "C": 9, "D": 9}, {"Z": 3}),
        "l2": _cell("LUT4", {"A": 3, "B": 9, "C": 9, "D": 9}, {"Z": 4}),
        "b": _cell("TRELLIS_FF", {"CLK": 1, "DI": 4}, {"Q": 10}),
        "ram": _cell("DP16KD", {"CLKA": 1, "ADA0": 10}, {"DOA0": 5}),
        "l3": _cell("LUT4", {"A": 5, "B": 9, "C": 9, "D": 9}, {"Z": 6}),
        "c": _cell("TRELLIS_FF", {"CLK": 1, "DI": 6}, {"Q": 11}),
        "k1": _cell("CCU2C", {"A0": 2, "CIN": 9}, {"COUT": 7, "S0": 12}),
        "k2": _cell("CCU2C", {"A0": 9, "CIN": 7}, {"S0": 8}),
        "d": _cell("TRELLIS_FF", {"CLK": 1, "DI": 8}, {"Q": 13}),
    }
    names = {"u.a": [2], "u.x": [3], "u.y": [4], "v.ram": [5], "v.z": [6], "w.c": [7], "w.s": [8],
             "clk": [1], "$const": [9]}
    return {"modules": {"top": {"cells": cells, "ports": {"clk": {"direction": "input",
                                                                  "bits": [1]}},
                                "netnames": {n: {"bits": b} for n, b in names.items()}}}}


def test_arrivals_follow_the_model():
    d = D.depth(_netlist())
    lut = D.ROUTE + D.DELAYS["LUT4"]
    assert d.arrival[4] == pytest.approx(D.FF_CLOCK + 2 * lut)
    assert d.arrival[6] == pytest.approx(D.BRAM_CLOCK + lut)
    # The carry link adds no route: into the first cell's carry out, then the second's sum.
    assert d.arrival[8] == pytest.approx(D.FF_CLOCK + D.ROUTE + D.CARRY_OUT + D.CARRY_IN_SUM)
    ends = {(cell, pin): t for t, _, cell, pin in d.ends}
    assert ends[("c", "DI")] == pytest.approx(D.BRAM_CLOCK + lut + D.ROUTE + D.SETUP)
    assert d.ends[0][2] == "c" and d.path(6) == [5, 6]
    assert d.group(6) == "v.z" and d.group(3, 1) == "u"


def test_report_ranks_groups_and_prints_paths():
    text = D.report(D.depth(_netlist()), over=2.0, paths=5)
    assert text.splitlines()[0].startswith("5 endpoints")    # four registers and the RAM
    assert "v.ram  ->  v.z" in text and "u.a  ->  u.y" in text
    assert text.index("to c DI") < text.index("to b DI")


def test_command_line(tmp_path, capsys):
    path = tmp_path / "net.json"
    path.write_text(json.dumps(_netlist()))
    assert D.main([str(path), "--paths", "1"]) == 0
    assert "to c DI" in capsys.readouterr().out
    assert D.main([str(path), "--module", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no module 'nope'" in err
