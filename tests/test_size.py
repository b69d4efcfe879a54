"""The size guard: every block's estimate from its parameters against what elaboration builds, and
the CLI's refusal of a parameter set above the limits.

The presets are checked by tests/test_blocks.py on the netlist it lints (no second elaboration);
here, parameter sets off the presets, small enough to build in seconds.
"""

import subprocess
import sys
import time

import pytest

from memwall import cli, registry


def check_size_estimate(entry, params, netlist: str) -> None:
    """Assert ``entry.size(params)`` against the RTLIL ``netlist`` of ``params``: storage bits
    exact, multipliers and cells within :data:`registry.SIZE_TOLERANCE` (zero only for zero)."""
    estimate, built = entry.size(params), registry.rtlil_size(netlist)
    assert estimate.storage_bits == built.storage_bits, (entry.name, params, estimate, built)
    for name in ("multipliers", "cells"):
        guess, real = getattr(estimate, name), getattr(built, name)
        ratio = guess / real if real else (1.0 if guess == 0 else float("inf"))
        tol = registry.SIZE_TOLERANCE
        assert 1 / tol <= ratio <= tol, f"{entry.name} {name}: estimated {guess:,}, built " \
                                        f"{real:,} at {params}"


#: Parameter sets off the presets (text overrides on a preset), per block: each changes what the
#: block's size scales with.
OFF_PRESET = {
    "arith-fpmul": [("default", {"b_fmt": "bf16"})],
    "arith-fpadd": [("small", {"fmt": "fp16"})],
    "arith-fpmac": [("small", {"in_fmt": "fp16"})],
    "arith-fpconv": [("small", {"out_fmt": "fp16"})],
    "arith-int2fp": [("small", {"int_bits": "16"})],
    "arith-fdot": [("small", {"lanes": "4"})],
    "arith-exp2": [("default", {"table_bits": "5"})],
    "arith-recip": [("default", {"iterations": "1"})],
    "arith-rsqrt": [("default", {"iterations": "1"}), ("default", {"iterations": "3"})],
    "arith-requant": [("default", {"mult_bits": "16"})],
    "arith-idot": [("small", {"lanes": "8"})],
    "umdam": [("small", {"latency": "0"})],
    "umdam-composer": [("small", {"mappings": "umdam"})],
    "umdam-tilegen": [("default", {"max_rows": "40000", "max_cols": "9"})],
    "inflash": [("small", {"fmacs": "4"}), ("small", {"max_cols": "256", "group_size": "32"})],
    "inflash-unit": [("small", {"kv_slots": "32", "page_bytes": "256"}),
                     ("small", {"transfer_bytes": "16"})],
    "rdxe-vac": [("small", {"lanes": "8", "wmem_depth": "128"}),
                 ("small", {"kv_rows": "0", "queue_depth": "9"})],
    "rdxe-dxt": [("small", {"vacs": "8"}), ("small", {"lanes": "8"})],
    "rdxe-dxe": [("small", {"lanes": "8", "head_dim": "16"}),
                 ("small", {"lanes": "8", "head_dim": "16", "vector_lanes": "4"}),
                 ("small", {"vacs": "8", "tb_words": "256", "program_words": "128"}),
                 ("small", {"dxts": "2", "group_size": "1"})],
    "rdxe-ring": [("small", {"dxes": "1", "rows": "3"}),
                  ("small", {"dxes": "3", "slots": "1", "kv_groups": "1"})],
    "edram": [("default", {"banks": "16", "rows": "32"}), ("small", {"banks": "1"})],
    "edram-fpga": [("small", {"rows": "32", "cols": "64", "clk_mhz": "10"}),
                   ("default", {"banks": "1", "response_depth": "20"})],
    "flowkv": [("small", {"lanes": "4", "chunk": "32"}),
               ("small", {"group": "3", "head_dim": "32"})],
    "flowkv-array": [("small", {"pairs": "3", "lanes": "4"})],
    "flowkv-dqp": [("small", {"lanes": "16"}),
                   ("small", {"tile": "40", "max_inputs": "1024", "max_outputs": "80"})],
}


#: Blocks whose off-preset netlists take 5 to 25 s each (2 cores, loaded; rdxe-ring's 25 and
#: 70 s): they run with ``--slow``; ``make test`` checks their estimates at the presets
#: (tests/test_blocks.py's lint cases call check_size_estimate), the same estimator at other
#: parameters.
_LARGE = {"inflash", "inflash-unit", "rdxe-dxt", "rdxe-dxe", "rdxe-ring", "flowkv",
          "flowkv-array", "flowkv-dqp"}


def _off_preset_cases():
    for block, cases in OFF_PRESET.items():
        for n, (preset, overrides) in enumerate(cases):
            slow = block in _LARGE
            yield pytest.param(block, preset, overrides, id=f"{block}-{n}",
                               marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("block, preset, overrides", list(_off_preset_cases()))
def test_size_estimate_off_the_presets(block, preset, overrides):
    entry = registry.get(block)
    params = entry.parameters(preset, overrides)
    netlist, _ = entry.rtlil(params)
    check_size_estimate(entry, params, netlist)


def test_every_block_has_off_preset_size_cases():
    missing = [b.name for b in registry.blocks() if b.name not in OFF_PRESET]
    assert not missing, f"no off-preset size case for {', '.join(missing)}"


@pytest.mark.parametrize("block", [b.name for b in registry.blocks()])
def test_presets_are_within_the_limits(block):
    entry = registry.get(block)
    for preset, params in entry.presets.items():
        assert entry.size(params).over(registry.SIZE_LIMITS) == [], (block, preset)


def _run(*argv, timeout=60):
    return subprocess.run([sys.executable, "-m", "memwall", *argv], capture_output=True,
                          text=True, timeout=timeout)


def test_too_large_is_refused_in_one_line_before_building(tmp_path):
    """The issue's case: each parameter within its own range, 67 M words in all."""
    out = tmp_path / "out"
    start = time.monotonic()
    result = _run("generate", "edram-fpga", "--set", "banks=256", "--set", "rows=64",
                  "--set", "cols=4096", "-o", str(out))
    elapsed = time.monotonic() - start
    assert result.returncode == cli.EXIT_USAGE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "storage bits" in lines[0] and "--force" in lines[0], lines
    limit = f"{registry.SIZE_LIMITS.storage_bits:,}"
    assert limit in lines[0]
    assert not out.exists()
    assert elapsed < 20, f"refused after {elapsed:.1f} s: it was built first"


def test_force_builds_above_the_limits(tmp_path, monkeypatch, capsys):
    tiny = registry.Size(storage_bits=0, multipliers=0, cells=10)
    monkeypatch.setattr(registry, "SIZE_LIMITS", tiny)
    out = tmp_path / "out"
    assert cli.main(["generate", "arith-fpmul", "-o", str(out)]) == cli.EXIT_USAGE
    message = capsys.readouterr().err.strip()
    assert message.count("\n") == 0 and "cells (limit 10)" in message
    assert not out.exists()
    assert cli.main(["generate", "arith-fpmul", "-o", str(out), "--force"]) == 0
    assert (out / "arith_fpmul.v").exists()


def test_list_shows_the_estimate_per_preset(capsys):
    assert cli.main(["list", "edram-fpga"]) == 0
    text = capsys.readouterr().out
    entry = registry.get("edram-fpga")
    row = next(line for line in text.splitlines() if line.startswith("| storage bits"))
    for params in entry.presets.values():
        assert f"{entry.size(params).storage_bits:,}" in row
