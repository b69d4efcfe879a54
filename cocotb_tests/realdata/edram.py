"""Real-model runs of the SHIELD eDRAM family (:mod:`sim.llm.cases.edram`): the BF16 Q, K, V and
O of one decode step written to the controller, held through refresh under their policy and read
back, with the decay harness losing exactly the cells the back-end's injection drew.

Which block runs what (:func:`runs`):

* ``edram`` takes the ops of the ``shield`` and ``kelle`` policies. Its three segment ports drive
  :class:`~cocotb_tests.edram.macro.DecayMacro` in scripted decay: before a word is written, the
  std macro is told the 9-bit loss mask of that word's cell and the mantissa macro of its class
  (``qo_mant`` for Q and O, ``kv_mant`` for K and V) the 7-bit one (the op's ``lost_std`` and
  ``lost_mant``), keyed by the bank, row and column the documented address map gives. Those cells
  lose their charge from the write on, refreshes latch them, and no other cell decays: the read
  returns the back-end's word if and only if the controller split the word, routed the mantissa
  by class, kept and refreshed the rows and merged the halves as specified.
* ``edram-fpga`` takes the ``standard`` ops: every segment is refreshed at T_std, where the golden
  BER is 1.4e-21, so the back-end draws no error and block RAM that never decays must return the
  words as written (the controller inside the FPGA system, its stand-ins in place of macros).

The sequence per policy: ``SET_POLICY``; per round (:func:`layout`), the round's words written
(one request a cycle), held, read back, both classes released; at the end the testbench's own
checks: the response scoreboard (each read against what the macros returned), the macros' age
bound at every restore, and the RTL's refresh counters against the golden sweep count.

Layout: each tile of an op starts on a fresh global row (a row holds one class), its element
``i`` at word ``i`` of those rows; the requests go column by column across the tile's rows, so
consecutive requests alternate banks and a due refresh always finds its bank free within its
slack (no forced refresh, no lost cycle). The hold: a Q or O tile is held its residency (the
back-end's ``qo_us``, 1500 us), a K or V tile (resident until the cache is freed) one full
interval of its longest-refreshed segment under the policy, so it is refreshed; a round holds
its longest.

Cycles (:func:`model_cycles`): per tile, from the acceptance of its first WRITE to that of its
last, plus from the acceptance of its first READ to the cycle its last response is taken. The
runs have no idle cycles and no back-pressure (as this testbench's decay tests: the hold times
are the point, and ``random_traffic`` covers idle and back-pressure), so the cycle model is one
request a cycle and a read's response ``read_latency`` after it: ``2 n + read_latency``. The hold
is the harness's choice, not the block's work, and is not counted.
"""

from __future__ import annotations

from typing import NamedTuple

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from hdl.edram import EdramController, Policy, TensorClass, us_to_cycles
from memwall import registry

from ..edram.tb import EdramTB
from . import Run, case_ops, write_result

__all__ = ["OVERRIDES", "FPGA_POLICIES", "Tile", "layout", "runs", "model_cycles", "real_step"]

#: Both blocks at ``small`` with these overrides: test_edram_decay's geometry (4 banks x 32 rows x
#: 64 words = 8192 words, 128 rows; 4 MHz keeps T_std = 180 cycles above the 32-row sweep), so
#: the Verilator model is the one make test already builds. One decode step is 24 rows (Q and O
#: 9 each, K and V 3 each), so a round holds the whole step: no tiling.
OVERRIDES = {"banks": "4", "rows": "32", "cols": "64", "clk_mhz": "4"}
#: The policies whose ops run on ``edram-fpga`` (block RAM: only where the golden draws no error).
FPGA_POLICIES = ("standard",)


class Tile(NamedTuple):
    """Words ``start .. stop - 1`` of op ``op``, at the global rows from ``row`` on."""

    op: str
    start: int
    stop: int
    row: int


def layout(ops, params) -> dict[str, list[list[Tile]]]:
    """policy -> its rounds, each the tiles written together, held and read back (module notes).

    An op larger than the whole memory is cut into tiles of at most its capacity; a tile that
    does not fit beside the round's others starts the next round."""
    rows_total, cols = params.banks * params.rows, params.cols
    plan: dict[str, list[list[Tile]]] = {}
    used: dict[str, int] = {}
    for op in ops:
        policy, n = op.meta["policy"], op.inputs["data"].size
        rounds = plan.setdefault(policy, [[]])
        for start in range(0, n, rows_total * cols):
            stop = min(n, start + rows_total * cols)
            need = -(-(stop - start) // cols)
            if used.get(policy, 0) + need > rows_total:
                rounds.append([])
                used[policy] = 0
            rounds[-1].append(Tile(op.name, start, stop, used.get(policy, 0)))
            used[policy] = used.get(policy, 0) + need
    return plan


def _why(block: str) -> str:
    if block == "edram-fpga":
        return ("the standard policy's ops: every segment refreshed at T_std, golden BER 1.4e-21, "
                "so block RAM without decay reads back the back-end's words; small preset with "
                f"{OVERRIDES} (test_edram_decay's geometry): one round holds the step's 24 rows")
    return ("the shield and kelle ops, the decay harness losing the cells the back-end's "
            f"injection drew; small preset with {OVERRIDES} (test_edram_decay's geometry, its "
            "Verilator build shared): one round holds the step's 24 rows, 4 MHz keeps the "
            "1500 us residency at 6000 cycles")


def runs(ops) -> list[Run]:
    """One ``edram`` run for the ops of the policies with errors, one ``edram-fpga`` run for the
    ``standard`` ops (module notes); each covers every op of its policies in one simulation."""
    names = {"edram": [], "edram-fpga": []}
    for op in ops:
        names["edram-fpga" if op.meta["policy"] in FPGA_POLICIES else "edram"].append(op.name)
    return [Run(block, registry.get(block).parameters("small", OVERRIDES), "real_step",
                tuple(picked), _why(block))
            for block, picked in names.items() if picked]


def model_cycles(run: Run, op) -> int:
    """Per tile of ``op``: its writes one a cycle, its reads one a cycle, the last response
    ``read_latency`` after its read (docs/edram.md, Timing): ``2 n + read_latency``."""
    tiles = [t for rounds in layout([op], run.params).values() for r in rounds for t in r]
    return sum(2 * (t.stop - t.start) + EdramController.read_latency for t in tiles)


# --- in the simulator -------------------------------------------------------------------------

class _RealTB(EdramTB):
    """The block's testbench, no idle cycles and no back-pressure, keeping each accepted
    request's cycle; its segment macros (``edram``) in scripted decay."""

    def __init__(self, dut):
        super().__init__(dut, idle=0.0, backpressure=0.0)
        self.accepted: list[int] = []
        for macro in self.macros.values():
            macro.script = {}

    def _on_input(self, stream, item, cycle):
        self.accepted.append(cycle)
        super()._on_input(stream, item, cycle)


def _addresses(tile: Tile, cols: int) -> np.ndarray:
    """Word address of each element of the tile (element ``i`` at word ``i`` of its rows)."""
    return tile.row * cols + np.arange(tile.stop - tile.start)


def _order(tile: Tile, cols: int) -> list[int]:
    """The tile's elements column by column across its rows (consecutive rows: other banks)."""
    n = tile.stop - tile.start
    return [r * cols + c for c in range(cols) for r in range(-(-n // cols)) if r * cols + c < n]


def _script(tb: _RealTB, op, tile: Tile) -> None:
    """Tell the macros which cells of the tile's words lose their charge (module notes)."""
    lost = {"std": op.inputs["lost_std"][tile.start:tile.stop],
            op.meta["segment"]: op.inputs["lost_mant"][tile.start:tile.stop]}
    if not tb.macros:
        bad = sum(int(np.count_nonzero(v)) for v in lost.values())
        assert bad == 0, (f"{op.name}: the back-end drew errors in {bad} words, which the FPGA "
                          f"stand-in (block RAM) cannot lose: run this policy on edram")
        return
    for i, addr in enumerate(_addresses(tile, tb.cols)):
        _, bank, row, col = tb.where(int(addr))
        for segment, masks in lost.items():
            if masks[i]:
                tb.macros[segment].script[(bank, row, col)] = int(masks[i])


def _hold_cycles(tb: _RealTB, policy: Policy, ops_in_round) -> int:
    """The round's hold: each op's residency, or one interval of its longest-refreshed segment
    (module notes)."""
    hold = 0
    for op in ops_in_round:
        if op.meta["residency_us"] is not None:
            cycles = us_to_cycles(op.meta["residency_us"], tb.params.clk_mhz, "Residency")
        else:
            cycles = max(c for s in ("std", op.meta["segment"])
                         if (c := tb.ctrl.plan.interval(policy, s)) is not None)
        hold = max(hold, cycles)
    return hold


async def _round(tb: _RealTB, policy: Policy, tiles: list[Tile], by_name: dict, got: dict,
                 cycles: dict, responses: list) -> None:
    """Write the round's tiles, hold them, read them back; record data and cycles per op."""
    orders = [_order(t, tb.cols) for t in tiles]
    addrs = [_addresses(t, tb.cols) for t in tiles]
    # The index of each tile's first request among the accepted ones (and responses), in order.
    offsets = np.cumsum([0] + [len(order) for order in orders[:-1]])
    base = len(tb.accepted)
    for t, order, addr in zip(tiles, orders, addrs):
        op = by_name[t.op]
        _script(tb, op, t)
        cls, data = TensorClass[op.meta["cls"]].value, op.inputs["data"][t.start:t.stop]
        tb.send("req", [tb.write(int(addr[i]), cls, int(data[i])) for i in order])
    await tb.drain()
    for t, order, first in zip(tiles, orders, base + offsets):
        cycles[t.op] += tb.accepted[first + len(order) - 1] - tb.accepted[first] + 1
    await ClockCycles(tb.clk, _hold_cycles(tb, policy, [by_name[t.op] for t in tiles]))
    base, resp_base = len(tb.accepted), len(responses)
    for order, addr in zip(orders, addrs):
        tb.send("req", [tb.read(int(addr[i])) for i in order])
    await tb.drain()
    for t, order, offset in zip(tiles, orders, offsets):
        mine = responses[resp_base + offset:resp_base + offset + len(order)]
        assert all(item["error"] == 0 and item["live"] == 1 for _, item in mine), \
            f"{t.op}: a read was refused or found its row dead"
        for i, (_, item) in zip(order, mine):
            got[t.op][t.start + i] = item["data"]
        cycles[t.op] += mine[-1][0] - tb.accepted[base + offset] + 1
    tb.send("req", [tb.release_class(c.value) for c in TensorClass])
    await tb.drain()


@cocotb.test()
async def real_step(dut):
    """The case's ops (:func:`~cocotb_tests.realdata.case_ops`) through the block, per policy
    and round (module notes); the testbench's scoreboard, age and refresh-count checks hold, no
    request is refused; each op's read-back codes and cycles go to the result file."""
    ops = case_ops()
    by_name = {op.name: op for op in ops}
    tb = _RealTB(dut)
    await tb.reset()
    responses = tb.record("resp")
    got = {op.name: np.zeros(op.inputs["data"].size, np.uint16) for op in ops}
    cycles = {op.name: 0 for op in ops}
    for policy, rounds in layout(ops, tb.params).items():
        code = Policy[policy.upper()]
        tb.send("req", [tb.set_policy(code.value)])
        await tb.drain()
        for tiles in rounds:
            await _round(tb, code, tiles, by_name, got, cycles, responses)
    await tb.settle()
    counts = tb.check_refresh_counts()
    status = tb.status()
    assert status["refused"] == 0, f"the controller refused {status['refused']} requests"
    tb.report("real_step", ops=len(ops), refreshes=counts,
              max_age={s: m.max_age for s, m in tb.macros.items()},
              lost_bits={op.name: op.meta["lost_bits"] for op in ops})
    for op in ops:
        write_result(op.name, {"data": got[op.name]}, cycles[op.name])

