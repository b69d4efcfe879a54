"""The process's memo of the designs it made (memwall.registry: Block.rtlil, verilog_text): the same
request again is answered without elaborating or running Yosys; anything that decides the text is
a new request."""

import dataclasses
import subprocess

import pytest

import synth.cache as sc
from memwall import registry
from synth.toolchain import run_yosys_script


@pytest.fixture
def probe(monkeypatch):
    """``(block, builds, yosys_runs)``: arith-fpmul with a builder that counts its calls (clear
    ``builds`` after making the parameters: they are checked by building), the memo empty, and
    Yosys' runs (for the Verilog) counted and passed on."""
    registry.forget_designs()
    real = registry.get("arith-fpmul")
    builds = []

    def build(params):
        builds.append(params)
        return real.build(params)
    runs = []

    def counted(command, script):
        runs.append(script)
        return run_yosys_script(command, script)
    monkeypatch.setattr(sc, "run_yosys_script", counted)
    yield dataclasses.replace(real, build=build), builds, runs
    registry.forget_designs()


def test_the_same_design_again_is_not_made_again(probe):
    block, builds, runs = probe
    params = block.parameters("small")
    builds.clear()
    text, component = block.verilog(params)
    assert len(builds) == 1 and len(runs) == 1
    again, same = block.verilog(params)
    assert again == text and same is component
    assert block.rtlil(params)[1] is component
    assert len(builds) == 1 and len(runs) == 1
    # The Verilog of RTLIL text made elsewhere (the lint test's path) is the same answer.
    assert registry.verilog_text(block.rtlil(params)[0], block.top) == text and len(runs) == 1


def test_everything_that_decides_the_text_is_a_new_design(probe):
    block, builds, _ = probe
    # fp32 with the multipliers' own registers: Verilog for the ECP5 has MULT18X18D blocks.
    params = block.parameters("default", {"block_registers": "true"})
    other = block.parameters("default", {"block_registers": "true", "stages": "6"})
    builds.clear()
    base = block.rtlil(params)[0]
    variants = [((other,), {}),
                ((params, "ecp5"), {}),
                ((params,), {"name": "other"}),
                ((params,), {"src": False}),
                ((params,), {"interface": "axis"})]
    for args, kwargs in variants:
        assert block.rtlil(*args, **kwargs)[0] != base, (args, kwargs)
    assert len(builds) == 1 + len(variants)
    # A target without device blocks gives the generic Verilog: the same design.
    assert block.rtlil(params, "ice40")[0] == base and len(builds) == 1 + len(variants)


def test_yosys_warnings_are_given_again(probe, monkeypatch):
    block, _, runs = probe

    def warns(command, script):
        runs.append(script)
        done = run_yosys_script(command, script)
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout,
                                           done.stderr + "Warning: a probe\n")
    monkeypatch.setattr(sc, "run_yosys_script", warns)
    params = block.parameters("small")
    for _ in range(2):
        with pytest.warns(UserWarning, match="^Yosys: a probe$"):
            block.verilog(params)
    assert len(runs) == 1


def test_a_cache_that_must_not_be_read_runs_yosys_again(probe, tmp_path):
    block, builds, runs = probe
    params = block.parameters("small")
    builds.clear()
    text = block.verilog(params)[0]
    assert block.verilog(params, cache=sc.SynthCache(tmp_path / "c"))[0] == text
    assert len(runs) == 1
    assert block.verilog(params, cache=sc.SynthCache(tmp_path / "c", read=False))[0] == text
    assert len(runs) == 2 and len(builds) == 1


def test_forgotten_and_least_recently_used_designs_are_made_again(probe, monkeypatch):
    block, builds, _ = probe
    small, other = block.parameters("small"), block.parameters("small", {"stages": "1"})
    builds.clear()
    block.rtlil(small)
    registry.forget_designs()
    block.rtlil(small)
    assert len(builds) == 2
    # Room for one design: making another drops the first.
    monkeypatch.setattr(registry, "DESIGN_MEMO_CHARS", len(block.rtlil(small)[0]) + 1)
    block.rtlil(other)
    block.rtlil(other)
    assert len(builds) == 3
    block.rtlil(small)
    assert len(builds) == 4
