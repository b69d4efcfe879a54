"""Every registered block at every preset: it elaborates, and its Verilog lints without errors."""

import pytest

from memwall import registry
from synth.lint import lint

CASES = [(b.name, p) for b in registry.blocks() for p in registry.PRESETS]


@pytest.mark.parametrize("block, preset", CASES, ids=[f"{b}-{p}" for b, p in CASES])
def test_verilator_lint_clean(block, preset, tmp_path):
    entry = registry.get(block)
    text, component = entry.verilog(entry.parameters(preset))
    report = lint(text, entry.top, tmp_path)
    assert report.ok, f"{block} ({preset}): {report.errors} lint errors:\n" + \
        "\n".join(report.messages[:20])


@pytest.mark.parametrize("block", [b.name for b in registry.blocks()])
def test_registry_entry_is_complete(block):
    entry = registry.get(block)
    assert entry.golden_module() is not None
    assert __import__(entry.testbench, fromlist=["*"])
    for preset in registry.PRESETS:
        params = entry.parameters(preset)
        assert type(params).from_dict(params.as_dict()) == params
