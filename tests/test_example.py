"""docs/examples: the plain testbench around a generated arith-fpmul passes under Icarus and
Verilator, and fails when one expected product is wrong."""

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "fpmul" / "run.py"


def _example():
    spec = importlib.util.spec_from_file_location("fpmul_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plain_testbench_passes_and_catches_a_wrong_product(tmp_path, capsys):
    example = _example()
    assert example.main(["--simulator", "both", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "icarus -g2012: PASS: 3296 products bit for bit" in out
    assert "icarus -g2005: PASS: 3296 products bit for bit" in out
    assert "verilator: PASS: 3296 products bit for bit" in out
    expected = (tmp_path / "expected.hex").read_text().splitlines()
    expected[1000] = f"{int(expected[1000], 16) ^ 1:08x}"
    (tmp_path / "expected.hex").write_text("\n".join(expected) + "\n")
    passed, text = example.simulate("icarus -g2012", tmp_path, "arith_fpmul")
    assert not passed and "FAIL: result 1000 is" in text
