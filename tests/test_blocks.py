"""Every registered block at every preset: it elaborates, its Verilog lints without errors and,
with the waiver file `memwall generate` writes beside it, without warnings, and its size estimate
holds against the netlist."""

import dataclasses
import gc
import warnings

import pytest
from amaranth.hdl import Fragment, UnusedElaboratable

from cocotb_tests.launcher import design_group
from hdl.arith.fpadd import FloatAdder
from memwall import registry
from memwall.blocks.rdxe_dxe import TWO_DXTS
from synth.flow import check_options
from synth.lint import lint

from .test_size import check_size_estimate

#: Presets whose Verilog takes over 20 s to generate and lint (2 cores, Verilator 5.048; the
#: flowkv paper pair is 10 MB of Verilog, 46 s to generate and 34 s to lint): they run with
#: ``--slow`` (``make test-all``) and ``memwall lint``. ``make test`` lints each of these blocks
#: at ``small``, which holds the same RTL and which its cocotb case elaborates on the same worker
#: (``design_group``): the lint then costs Verilator's 3 to 4 s, against 10 to 14 s for the
#: ``default`` presets' own elaboration and lint (docs/verification.md).
SLOW = {("flowkv", "paper"), ("flowkv-array", "paper"), ("flowkv-array", "default"),
        ("rdxe-dxt", "paper"), ("inflash", "paper"), ("inflash-unit", "paper"),
        ("edram", "paper"), ("edram-fpga", "paper"),
        ("flowkv", "default"), ("rdxe-dxt", "default"), ("inflash", "default"),
        ("inflash-unit", "default"), ("flowkv-dqp", "default"), ("flowkv-dqp", "paper")}
#: Also with ``--slow``: the rDXE engine's SmolLM2 presets (about 4 min each, loaded machine: the
#: paper's is 23 MB of Verilog; paper3, three of its DXTs, 33 MB and 175 s of CPU, 1.9 GB); its
#: small preset (33 s) is the same generator.
SLOW |= {("rdxe-dxe", "default"), ("rdxe-dxe", "paper"), ("rdxe-dxe", "paper3")}
#: Also with ``--slow``: the ring's larger presets (2 DXEs of 2 layers, 160 s; 4 of 2, 208 s;
#: load 4); its small preset (2 DXEs of 1 layer, 69 s) is the same generator.
SLOW |= {("rdxe-ring", "default"), ("rdxe-ring", "paper")}
#: Also with ``--slow``: the wider presets of blocks whose small preset is linted in make test
#: and whose wider form is the same generator at other widths (4 to 10 s each, 20 s in all).
SLOW |= {("arith-fdot", "default"), ("arith-fdot", "paper"), ("edram", "default"),
         ("edram-fpga", "default"), ("rdxe-vac", "default"), ("rdxe-vac", "paper")}

CASES = [pytest.param(b.name, p, id=f"{b.name}-{p}",
                      marks=[pytest.mark.slow] if (b.name, p) in SLOW
                      else [design_group(b.name, p)])
         for b in registry.blocks() for p in b.presets]

#: Parameter sets off the presets, linted with ``--slow`` (text overrides on a preset): the rDXE
#: engine on two of the small preset's DXTs (docs/rdxe.md 16.5; the set of
#: cocotb_tests/test_rdxe_dxe.py's DXTS case), the several-DXT RTL in 27 s of CPU against 175 s
#: at ``paper3``. ``make test`` lints the one-DXT engine at ``small``.
OFF_PRESET = [("rdxe-dxe", "small", TWO_DXTS)]


@pytest.mark.parametrize("block, preset", CASES)
def test_verilator_lint_clean(block, preset, tmp_path):
    _lint_clean(block, preset, {}, tmp_path)


# Slow (27 s of CPU, 3 min of wall clock beside placements): see OFF_PRESET.
@pytest.mark.slow
@pytest.mark.parametrize("block, preset, overrides", OFF_PRESET,
                         ids=[f"{b}-{p}-" + "-".join(f"{k}={v}" for k, v in o.items())
                              for b, p, o in OFF_PRESET])
def test_verilator_lint_clean_off_the_presets(block, preset, overrides, tmp_path):
    _lint_clean(block, preset, overrides, tmp_path)


def _lint_clean(block, preset, overrides, tmp_path):
    """The Verilog at ``preset`` with ``overrides`` lints clean, its manifest holds and its size
    estimate holds against its netlist."""
    entry = registry.get(block)
    params = entry.parameters(preset, overrides)
    netlist, component = entry.rtlil(params)
    text = registry.verilog_text(netlist, entry.top)
    report = lint(text, entry.top, tmp_path, waivers=True, timeout=600)  # paper: minutes, loaded
    assert report.ok and report.warnings == 0, \
        f"{block} ({preset} {overrides}): {report.errors} errors, {report.warnings} warnings " \
        f"that {entry.top}.vlt does not waive:\n" + "\n".join(report.messages[:20])
    _check_manifest(entry, preset, text, component, overrides)
    check_size_estimate(entry, params, netlist)


def _check_manifest(entry, preset, text, component, overrides=None):
    """The block's manifest is valid under the shipped JSON Schema and describes the Verilog:
    every port in exactly one stream or in other_ports, streams' ports declared as listed."""
    import jsonschema

    from memwall.manifest import manifest, schema

    overrides = overrides or {}
    found = manifest(entry, entry.parameters(preset, overrides), preset=preset,
                     overrides=overrides, target=None, top=entry.top,
                     verilog_name=f"{entry.top}.v", verilog_text=text, component=component)
    jsonschema.validate(found, schema())
    names = [p["name"] for p in found["ports"]]
    in_streams = [n for st in found["streams"] for n in st["ports"].values()]
    assert sorted(in_streams + found["other_ports"] + (["clk", "rst"] if found["clock"] else [])) \
        == sorted(names)
    directions = {p["name"]: p["direction"] for p in found["ports"]}
    for st in found["streams"]:
        ready = st["ports"].get("ready")
        inward = "input" if st["direction"] == "sink" else "output"
        assert directions[st["ports"]["valid"]] == inward
        assert ready is None or directions[ready] != inward
        assert (st["protocol"] == "valid-ready") == (ready is not None)
        _check_timing(st, {s["name"]: s["direction"] for s in found["streams"]})


def _check_timing(stream, directions):
    """A source's latency counts from one of the block's sinks; what is not a fixed figure names
    the model it comes from."""
    timing = stream["timing"]
    if stream["direction"] == "sink":
        assert timing["after"] is None and timing["latency"] is None, stream["name"]
    else:
        assert directions.get(timing["after"]) == "sink", stream["name"]
    if timing["latency"] is None and stream["direction"] == "source" or \
            timing["throughput"] is None:
        assert timing["model"], f"{stream['name']}: data-dependent timing without a model"
    if timing["model"]:
        _check_reference(timing["model"].split()[0].rstrip(","))


def _check_reference(ref):
    """A model reference names a file of docs/ or a function of the project."""
    import importlib
    from pathlib import Path

    if ref.startswith("docs/"):
        assert (Path(__file__).resolve().parents[1] / ref).is_file(), ref
    else:
        module, _, name = ref.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), ref


@pytest.mark.parametrize("block", [b.name for b in registry.blocks()])
def test_registry_entry_is_complete(block):
    entry = registry.get(block)
    assert entry.golden_module() is not None
    assert __import__(entry.testbench, fromlist=["*"])
    for preset in entry.presets:
        params = entry.parameters(preset)
        assert type(params).from_dict(params.as_dict()) == params
    for target in entry.synth.targets:
        check_options(target, **entry.synth.flow_options())     # raises on a bad setting


def test_slow_lint_cases_are_registered():
    """Every (block, preset) kept out of ``make test`` exists, and every block keeps a preset in
    it: every block is linted in the default run."""
    names = {b.name for b in registry.blocks()}
    for block, preset in SLOW:
        assert block in names and preset in registry.get(block).presets, (block, preset)
    for block in names:
        assert any((block, p) not in SLOW for p in registry.PRESETS), block



def test_preset_names_are_checked():
    """A block holds the three presets every block has; more are named as the manifest's
    ``preset`` pattern allows (a build folder takes them)."""
    entry = registry.get("umdam")
    with pytest.raises(ValueError, match=r"^block umdam lacks preset\(s\) paper$"):
        dataclasses.replace(entry, presets={k: v for k, v in entry.presets.items()
                                            if k != "paper"})
    with pytest.raises(ValueError, match=r"^block umdam: preset names are lower-case letters "
                                         r"and digits, not 'Big-1'$"):
        dataclasses.replace(entry, presets={**entry.presets, "Big-1": entry.presets["small"]})
    assert "paper3" in registry.get("rdxe-dxe").presets


def test_a_block_left_unsynthesized_says_why():
    from memwall.registry import SynthSettings

    with pytest.raises(ValueError, match="SynthSettings without targets needs a skip_reason"):
        SynthSettings(targets=())
    for block in registry.blocks():
        assert block.synth.targets or block.synth.skip_reason, block.name


def test_build_skips_a_preset_left_out_with_a_reason():
    """``memwall build`` synthesizes rdxe-dxe at small only (its other presets hold an ASIC's
    memory), rdxe-dxt at every preset (no reason given), a block without targets at none."""
    dxe, dxt = registry.get("rdxe-dxe").synth, registry.get("rdxe-dxt").synth
    assert dxe.skip_at("small") == ""
    assert dxe.skip_at("default") == dxe.skip_at("paper") == dxe.skip_reason != ""
    assert all(dxt.skip_at(p) == "" for p in registry.PRESETS)
    flowkv_array = registry.get("flowkv-array").synth
    assert flowkv_array.skip_at("small") == flowkv_array.skip_reason != ""


def _unused_warnings(action) -> list:
    """The UnusedElaboratable warnings of ``action()``, collected garbage included, once
    elaboration has begun (Amaranth keeps the warning silent until then)."""
    Fragment.get(FloatAdder(stages=1), None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnusedElaboratable)
        action()
        gc.collect()
    return [w for w in caught if issubclass(w.category, UnusedElaboratable)]


def test_validation_leaves_no_unused_elaboratable_behind():
    """Block.validate builds each component only to run its checks; Amaranth says nothing about
    it, then or when it is collected (edram-fpga and inflash-unit build subcomponents too)."""
    assert not _unused_warnings(lambda: [b.parameters(p) for b in registry.blocks()
                                         for p in registry.PRESETS])


def test_a_component_built_and_dropped_elsewhere_still_warns():
    """The filter covers Block.validate only: the check above can see the warning."""
    assert _unused_warnings(lambda: registry.get("arith-fpadd").elaborate(
        registry.get("arith-fpadd").parameters("small")))
