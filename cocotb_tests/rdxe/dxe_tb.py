"""cocotb testbench of the rDXE decoder engine with one DXT (``rdxe-dxe``, docs/rdxe.md 14.4).

The host's part, through the engine's ports only: the DXT side's fixed entries (``identity``,
``score_entry``, ``pv_entry``, ``score_scale``, ``position`` on ``restart``) and RMSNorm's
``eps``; the GEMV tables (``table``), WMEM rows (``wmem``) and PPU entries (``ppu``); the program
and the constants written on ``ext``; then per token its inputs written on ``ext``, a ``run``,
and after ``done`` the whole token buffer and rr-SRAM read back on ``ext``. Random idle cycles on
every input, random back-pressure on ``done``; ``ext`` is used only while the engine is idle, as
its contract asks.

The model (:class:`sim.rdxe.host.DxeModel`, with the host's loads and images beside it) is fed by
the input monitors: it mirrors the four memories from the
``ext`` writes it sees, and on each ``run`` runs the layer's words on its mirror with
:func:`golden.rdxe.assemble.run_words` (the golden of docs/rdxe.md 14.1; the DXT ops' numerics
are ``golden.rdxe``'s). It expects ``done`` at the end of the words (or, when the KV cache is
full, at the ``kv_append`` the DXT refuses, with ``error``) and every host read's row on
``ext_data`` from its mirror. The cycles from ``run`` taken to ``done.valid`` are checked against
the cycle model (:func:`~sim.rdxe.host.model_cycles`).

The layer: the reduced Llama layer of sim/rdxe/reduced.py at the block's shape (query heads
``group_size x kv_groups / layers`` of ``head_dim``, hidden ``heads x head_dim``, FFN twice
that: :func:`sim.rdxe.host.reduced_layer`), or the one a launcher hands over in :data:`ENV_LAYER` (SmolLM2's layer 2:
cocotb_tests/test_rdxe_dxe.py). An engine of several ``layers`` (docs/rdxe.md 16.1) holds that
many distinct layers of its tables (tests/test_rdxe_assemble.py's ``variant``) stacked at the
program's stride, the program assembled to loop; the host also holds ``stride`` and writes each
layer's score step on ``scales``, and the model runs the words layer after layer, each with its
own KV cache. An engine of several ``slots`` (docs/rdxe.md 16.2) takes each run's request ``slot``
and its restart in the ``run`` payload (the host holds ``stride`` then even for one layer), and
the model keeps a token count and a KV cache a slot and layer; the layer's groups are the DXT's
over ``slots x layers``. An engine of several ``dxts`` (docs/rdxe.md 16.5) runs a layer of
``dxts`` x the DXT's groups (or of fewer from :data:`ENV_LAYER`: docs/rdxe.md 15), the host
holding ``stride``; its loads name their DXT, each DXT's share of every GEMV.

Tests: ``layer_tokens`` (two tokens, the second attending over both, idle and back-pressure),
``cache_full`` (a token at the KV cache's capacity: the run ends at the KV append with
``error``), ``full_rate`` (one token, no idle, no back-pressure: the token's cycles; ``memwall
bench``), ``slot_tokens`` (two requests in two slots, interleaved).
"""

from __future__ import annotations

import os
import pickle

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from golden.rdxe import assemble as A
from hdl.rdxe.ctrl import Store

from sim.rdxe.host import (DxeModel, Layer, assemble_layer, ext_writes, host_loads,
                           model_cycles, reduced_layer, row_values)

from ..functional import sampler
from ..streams import ClockService
from ..tb import BlockTB, select_tb

__all__ = ["ENV_LAYER", "layer", "DxeTB"]

#: A pickled :class:`Layer` to run instead of the random one (the launcher's real layer).
ENV_LAYER = "MEMWALL_RDXE_LAYER"
#: Cycles between the progress lines of a load of more WMEM rows than that.
_PROGRESS = 20_000


def layer(params, count: int = 2) -> Layer:
    """The layer at the block's shape (:func:`sim.rdxe.host.reduced_layer`), or the one
    :data:`ENV_LAYER` names."""
    path = os.environ.get(ENV_LAYER)
    if path:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    return reduced_layer(params, count)


# --- the testbench ----------------------------------------------------------------------------


def _samplers(block: str, slots: int) -> dict:
    """Coverpoints of what the engine took and gave: each memory read and written on ``ext``,
    and a run that ends at its last word or at a refused op; with several ``slots``, a run in
    each slot that starts its request over and one that goes on (``run``)."""
    accesses = [f"{s.name.lower()}_{w}" for s in Store for w in ("write", "read")]
    ext = sampler({f"{block}.ext": (lambda i: f"{Store(i['store']).name.lower()}_"
                                              f"{'write' if i['write'] else 'read'}", accesses)})
    done = sampler({f"{block}.done": (lambda i: "error" if i["error"] else "end",
                                      ("end", "error"))})
    if slots == 1:
        return {"ext": ext, "done": done}
    slot, restart = f"{block}.run_slot", f"{block}.run_restart"
    run = sampler({slot: (lambda i: i["slot"], list(range(slots))),
                   restart: (lambda i: i["restart"], [0, 1])},
                  {f"{block}.run_slot_restart": [slot, restart]})
    return {"ext": ext, "done": done, "run": run}


class DxeTB(BlockTB):
    """The engine with its host: loads, runs and reads (module notes)."""

    def __init__(self, dut, *, count: int = 2, **kwargs):
        looped = hasattr(dut, "scales__payload")         # several layers: a score step each
        super().__init__(dut, inputs=("table", "wmem", "ppu", "ext", "run")
                         + (("scales",) if looped else ()),
                         outputs=("done", "ext_data"), **kwargs)
        p = self.params
        self.layer = layer(p, count)
        if p.layers == 1:
            self.asm, self.views = assemble_layer(p, self.layer)
        else:
            from tests.test_rdxe_assemble import variant

            self.asm = A.assemble(self.layer.program, self.layer.tables, self.layer.inputs,
                                  ["h"], p.space(), p.head_dim, in_place=("h",),
                                  keep=("cos", "sin"))
            self.views = A.stacked_tables([variant(self.layer.tables, l)
                                           for l in range(p.layers)], self.asm)
        self.flat = self.views[0]
        self.groups = (A.stride(self.asm).kv_groups if p.layers > 1 or p.slots > 1 or p.dxts > 1
                       else None)
        self.dmodel = DxeModel(p, self.asm, self.views)
        self.samplers = _samplers(self.block.name, p.slots)
        self.lanes = p.lanes
        #: Per run: the cycle it was taken in and the first cycle of ``done.valid``.
        self.taken: list[int] = []
        self.ended: list[int] = []
        self._done_seen = False
        #: With several slots: the position the next run's slot starts over at (None: it
        #: goes on).
        self.restart_at: int | None = None
        ClockService.of(self.clk).on_read(self._watch_done)

    def _watch_done(self):
        valid = self.dut.done__valid.value
        if valid.is_resolvable and int(valid) and not self._done_seen and \
                len(self.ended) < len(self.taken):
            self.ended.append(self.counter.cycle)
        self._done_seen = valid.is_resolvable and bool(int(valid))

    def observe(self, stream, item, cycle):
        super().observe(stream, item, cycle)
        if stream == "run":
            self.taken.append(cycle)

    def model(self, stream, item):
        if stream == "ext":
            return {"ext_data": self.dmodel.ext(item)}
        if stream == "run":
            return {"done": self.dmodel.run(item)}
        return {}

    # --- the host ---------------------------------------------------------------------------

    def ext_writes(self, store: Store, first: int, values: list[int]):
        self.send("ext", ext_writes(store, first, values, self.lanes))

    def ext_reads(self, store: Store, rows: int):
        self.send("ext", [{"store": store.value, "row": r, "write": 0, "data": 0, "mask": 0}
                          for r in range(rows)])

    async def restart(self, position: int = 0):
        """A new sequence: the next KV append is token ``position`` (with several slots, of the
        next run's slot: the run carries it)."""
        if self.params.slots > 1:
            self.restart_at = position
            return
        self.dut.position.value = position
        self.dut.restart.value = 1
        await RisingEdge(self.clk)
        self.dut.restart.value = 0
        self.dmodel.restart(position)

    async def load(self, position: int = 0):
        """The layer's loads (module notes), the TB and rr-SRAM cleared; then the program and
        constants read back."""
        ports, streams = host_loads(self.params, self.asm, self.views)
        for name, value in ports.items():
            getattr(self.dut, name).value = value
        await self.restart(position)
        L = self.lanes
        for name, items in streams.items():
            self.send(name, items)
        self.ext_reads(Store.PROG, len(self.asm.words))
        self.ext_reads(Store.CONST, -(-len(self.flat.vectors.words) // L))
        wmem = self.drivers["wmem"]
        while wmem.queued > _PROGRESS and wmem.sent < wmem.queued:  # a real layer's: how far
            await ClockCycles(self.clk, _PROGRESS)
            self.log.info("cycle %d: %d of %d WMEM rows loaded", self.counter.cycle, wmem.sent,
                          wmem.queued)
        await self.drain()

    async def token(self, inputs: dict, stall_cycles: int, slot: int = 0) -> int:
        """Write the token's inputs, run the whole program (in ``slot``, with a restart if one
        waits), then read the TB and rr-SRAM back; return the run's cycles from ``run`` taken
        to ``done.valid``."""
        L = self.lanes
        for name, value in inputs.items():
            self.ext_writes(Store.TB, self.asm.inputs[name] // L,
                            row_values(np.asarray(value, np.uint32), L, 32))
        await self.drivers["ext"].wait_idle()
        run = {"pc": 0, "count": len(self.asm.words)}
        if self.params.slots > 1:
            run.update(slot=slot, restart=int(self.restart_at is not None),
                       position=self.restart_at or 0)
            self.restart_at = None
        self.send("run", [run])
        await self.drain(stall_cycles=stall_cycles)
        ctrl = self.params.ctrl_config()
        self.ext_reads(Store.TB, ctrl.rows(Store.TB))
        self.ext_reads(Store.RR, ctrl.rows(Store.RR))
        await self.drain()
        return self.ended[-1] - self.taken[-1]

    def check_cycles(self, run: int, cycles: int) -> int:
        """Assert the run's cycles equal :func:`model_cycles`; return the model's."""
        words, tokens = self.dmodel.runs[run]
        want = model_cycles(self.params.ctrl_config(), self.params.dxt_config(), words,
                            self.flat, tokens, self.groups, self.params.dxts)
        assert cycles == want, \
            f"run {run} (from cycle {self.taken[run]}): {cycles} cycles from run to done, " \
            f"the model {want}"
        return want

    def stall_cycles(self) -> int:
        """Cycles without an output a run may take: the model's cycles of a whole token."""
        return model_cycles(self.params.ctrl_config(), self.params.dxt_config(), self.asm.words,
                            self.flat, self.params.dxt_config().capacity, self.groups,
                            self.params.dxts) + 1000


def _tb(dut, **kwargs) -> DxeTB:
    return select_tb(dut, {"rdxe-dxe": DxeTB}, **kwargs)


@cocotb.test()
async def layer_tokens(dut):
    """Two tokens of the layer (the second attends over both), random idle cycles on every
    input and back-pressure on ``done``: after each token the whole TB and rr-SRAM equal the
    golden's bit for bit (``ext_data``'s scoreboard), ``done`` ends the program without an
    error, and the run's cycles equal the cycle model."""
    tb = _tb(dut)
    await tb.reset()
    await tb.load()
    for t, inputs in enumerate(tb.layer.tokens):
        cycles = await tb.token(inputs, tb.stall_cycles())
        tb.check_cycles(t, cycles)
        tb.log.info("token %d: %d cycles from run taken to done", t, cycles)
    assert tb.scoreboards["ext_data"].matched > 0


@cocotb.test()
async def cache_full(dut):
    """A token at the KV cache's capacity: the DXT refuses its key, the run ends at the KV
    append with ``error`` (``done``'s scoreboard); the TB and rr-SRAM hold every op's result
    before it and none after (read back)."""
    tb = _tb(dut, count=1)
    await tb.reset()
    await tb.load(position=tb.params.dxt_config().capacity)
    await tb.token(tb.layer.tokens[0], tb.stall_cycles())
    assert len(tb.dmodel.runs[0][0]) < len(tb.asm.words), "the run was not cut at the append"


@cocotb.test()
async def slot_tokens(dut):
    """Two requests in two slots, interleaved: A's first token, B's first (B starts over) and
    second, A's second, attending over A's two tokens only (one count for both slots would put
    it at B's third); with idle inputs and back-pressure. After each the TB and rr-SRAM equal
    the model's (a KV cache and a count a slot), and the run's cycles the cycle model's at the
    slot's own context."""
    tb = _tb(dut, count=4)
    await tb.reset()
    await tb.load()
    for t, slot in enumerate((0, 1, 1, 0)):
        if t == 1:
            await tb.restart(0)
        cycles = await tb.token(tb.layer.tokens[t], tb.stall_cycles(), slot)
        tb.check_cycles(t, cycles)
        tb.log.info("token %d in slot %d: %d cycles from run taken to done", t, slot, cycles)
    assert tb.dmodel.tokens == [2, 2]


@cocotb.test()
async def full_rate(dut):
    """One token, no idle cycles, no back-pressure: reports the token's cycles from ``run``
    taken to ``done.valid`` (equal to the cycle model) and the DXT's MAC utilization over
    them."""
    tb = _tb(dut, idle=0.0, backpressure=0.0, count=1)
    await tb.reset()
    await tb.load()
    await ClockCycles(tb.clk, 2)
    cycles = await tb.token(tb.layer.tokens[0], tb.stall_cycles())
    model = tb.check_cycles(0, cycles)
    macs = sum(int(np.prod(w.shape)) for w, _, _ in tb.flat.gemvs.values())
    p = tb.params
    tb.report("full_rate", items=1, cycles=cycles, per_cycle=round(1 / cycles, 6),
              latency=cycles, latency_meaning="run taken to done.valid, one token", model=model,
              macs=macs, utilization=round(macs / (p.vacs * p.lanes * cycles), 4))
