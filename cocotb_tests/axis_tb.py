"""cocotb tests that the AXI4-Stream transport (:mod:`.axis`) catches wrong results.

Run on ``umdam`` generated with ``--interface axis``: its testbench (:mod:`.umdam_tb`) with the
golden model's expectation altered, once with two output fields swapped and once with one bit of
one field flipped. Every altered item must be reported as a mismatch naming the field; a
transport that dropped, duplicated or misaligned beats would fail these tests as well.
"""

from __future__ import annotations

import cocotb

from .umdam_tb import make_tb

ITEMS = 60


async def _mismatches(dut, alter) -> tuple[int, list[str]]:
    """Run ``ITEMS`` random addresses with the model's outputs passed through ``alter``; return
    how many expectations were altered and the scoreboard's mismatch messages."""
    tb = make_tb(dut, idle=0.3, backpressure=0.3)
    scoreboard, altered, caught = tb.scoreboards["o"], [0], []
    model, check = tb.model, scoreboard.got

    def altered_model(stream, item):
        out = model(stream, item)
        changed = [alter(dict(x)) for x in out["o"]]
        altered[0] += sum(a != x for a, x in zip(changed, out["o"]))
        return {"o": changed}

    def recording(item, cycle):
        try:
            check(item, cycle)
        except AssertionError as exc:
            caught.append(str(exc))

    tb.model = altered_model
    scoreboard.got = tb.output_monitors["o"].callback = recording
    await tb.reset()
    tb.send("i", tb.stimulus(ITEMS)[:ITEMS])
    await tb.drain()
    return altered[0], caught


@cocotb.test()
async def swapped_fields_are_caught(dut):
    """Row and column swapped in the expectation: every item where they differ is a mismatch."""
    altered, caught = await _mismatches(dut, lambda x: {**x, "row": x["col"], "col": x["row"]})
    assert altered >= ITEMS // 6, f"only {altered} of {ITEMS} items had row != col"
    assert len(caught) == altered, f"{altered} altered expectations, {len(caught)} caught"
    assert all("row expected" in m and "col expected" in m for m in caught), caught[:2]


@cocotb.test()
async def a_wrong_value_is_caught(dut):
    """One bit of ``bank`` flipped in the expectation: every item is a mismatch naming bank."""
    altered, caught = await _mismatches(dut, lambda x: {**x, "bank": x["bank"] ^ 1})
    assert altered == len(caught) >= ITEMS, f"{altered} altered, {len(caught)} caught"
    assert all("bank expected" in m for m in caught), caught[:2]
