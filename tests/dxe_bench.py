"""Drive the DXE's layer controller (hdl/rdxe/ctrl.py) in Amaranth's simulator as its host and
its DXT side would (tests/test_rdxe_ctrl.py, and on a real SmolLM2 layer tests/test_llm_rdxe.py):
load the program and the constants on ``ext``, write a token's inputs, run, and answer each DXT
op with its golden step (:func:`golden.rdxe.assemble.decode`) on the rr-SRAM rows it reads and
writes on ``ext``; :func:`golden_images` gives what the TB and rr-SRAM must then hold."""

from __future__ import annotations

import numpy as np

from sim.rdxe.host import row_elements, row_values
from golden.rdxe import assemble as A
from golden.rdxe import program as P
from golden.rdxe.model import RCFactor
from hdl.rdxe.ctrl import Store
from hdl.rdxe.isa import OPCODES, instruction_layout

__all__ = ["DxeBench", "golden_images"]


class DxeBench:
    """Drive the controller: the host's loads and reads on ``ext``, runs, and the DXT side."""

    def __init__(self, ctx, dut, asm, flat, rng):
        self.ctx, self.dut, self.asm, self.flat, self.rng = ctx, dut, asm, flat, rng
        self.cfg, self.lanes = dut.cfg, dut.cfg.lanes
        self.shapes = {i: w.shape for i, (w, _, _) in flat.gemvs.items()}
        self.dxt_state = A.new_state(asm)
        self.cycles = 0
        #: Per run: cycles from ``run`` taken to ``done.valid``, and each DXT op's own cycles.
        self.runs = []
        #: The DXT op (counted from 0 over the bench's life) that answers with an error.
        self.fail_at, self.dxt_count = None, 0
        #: ``ext.ready`` in the cycles of a run before its first DXT op.
        self.ext_ready_early = []

    async def tick(self):
        await self.ctx.tick()
        self.cycles += 1

    async def ext(self, store: Store, row: int, data: int | None = None, mask: int = -1):
        """One ``ext`` request; a read returns the row."""
        ctx, ext = self.ctx, self.dut.ext
        ctx.set(ext.valid, 1)
        ctx.set(ext.payload.store, store)
        ctx.set(ext.payload.row, row)
        ctx.set(ext.payload.write, data is not None)
        ctx.set(ext.payload.data, data or 0)
        ctx.set(ext.payload.mask, mask & ((1 << self.lanes) - 1))
        while not ctx.get(ext.ready):
            await self.tick()
        await self.tick()
        ctx.set(ext.valid, 0)
        if data is None:
            assert ctx.get(self.dut.ext_data.valid)
            return ctx.get(self.dut.ext_data.payload.data)
        return None

    async def write_rows(self, store: Store, first: int, values: list[int]):
        for i, value in enumerate(values):
            await self.ext(store, first + i, value)

    async def read_rows(self, store: Store, first: int, count: int) -> list[int]:
        return [await self.ext(store, first + i) for i in range(count)]

    async def load(self):
        await self.write_rows(Store.PROG, 0, list(self.asm.words))
        const = self.flat.vectors.words
        await self.write_rows(Store.CONST, 0, row_values(const, self.lanes, 32))

    async def start(self, inputs: dict, pc: int = 0, count: int | None = None) -> int:
        """Write the token's inputs and start ``count`` instructions from ``pc`` (all by
        default); return the cycle the run was taken in."""
        for name, value in inputs.items():
            await self.write_rows(Store.TB, self.asm.inputs[name] // self.lanes,
                                  row_values(np.asarray(value, np.uint32), self.lanes, 32))
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.run.valid, 1)
        ctx.set(dut.run.payload.pc, pc)
        ctx.set(dut.run.payload.count, len(self.asm.words) if count is None else count)
        while not ctx.get(dut.run.ready):
            await self.tick()
        start = self.cycles
        await self.tick()
        ctx.set(dut.run.valid, 0)
        return start

    async def run(self, inputs: dict) -> tuple[int, int]:
        """Run the token's whole program with the DXT ops on hardware (nothing answers ``dxt``
        here); return ``done``'s ``(pc, error)``."""
        await self.start(inputs)
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.done.ready, 1)
        while not ctx.get(dut.done.valid):
            await self.tick()
        stopped = (ctx.get(dut.done.payload.pc), ctx.get(dut.done.payload.error))
        await self.tick()
        ctx.set(dut.done.ready, 0)
        return stopped

    async def token(self, inputs: dict, pc: int = 0, count: int | None = None):
        """Write the token's inputs, run ``count`` instructions from ``pc`` (all by default),
        acting as the DXT side; return ``done``'s ``(pc, error)``."""
        ctx, dut = self.ctx, self.dut
        start = await self.start(inputs, pc, count)
        dxt, seen, ended = [], None, None
        while True:
            ctx.set(dut.done.ready, self.rng.random() < 0.7)
            ctx.set(dut.dxt.ready, self.rng.random() < 0.7)
            if not dxt and seen is None and not ctx.get(dut.done.valid):
                self.ext_ready_early.append(ctx.get(dut.ext.ready))
            if ctx.get(dut.done.valid):
                ended = self.cycles if ended is None else ended
                if ctx.get(dut.done.ready):
                    stopped = (ctx.get(dut.done.payload.pc), ctx.get(dut.done.payload.error))
                    await self.tick()
                    ctx.set(dut.done.ready, 0)
                    self.runs.append((ended - start, dxt))
                    return stopped
            if ctx.get(dut.dxt.valid):
                seen = self.cycles if seen is None else seen
                if ctx.get(dut.dxt.ready):
                    word = ctx.get(dut.dxt.payload.insn.as_value())
                    value = ctx.get(dut.dxt.payload.value)
                    await self.tick()
                    ctx.set(dut.dxt.ready, 0)
                    dxt.append(await self.dxt_op(word, value) - seen + 1)
                    seen = None
                    continue
            await self.tick()

    async def dxt_op(self, word: int, value: int):
        """Run a DXT op as the DXT side would: read its rr operands on ``ext``, compute the golden
        step, write its result, then ``dxt_done``."""
        ctx, dut, state = self.ctx, self.dut, self.dxt_state
        op = A.decode(word, self.asm, self.shapes)
        reads = {P.Gemv: ("src",), P.KvAppend: ("keys", "values"), P.Attend: ("q",)}[type(op)]
        for field in reads:
            a, n = getattr(op, field)
            rows = await self.read_rows(Store.RR, a // self.lanes, n // self.lanes)
            state.rr[(a, n)] = np.array([e for r in rows for e in row_elements(r, self.lanes, 8)],
                                        np.uint8).view(np.int8)
        fields = instruction_layout(self.cfg.space).from_bits(word)
        if OPCODES[fields.op] == "gemv_norm":
            state.reg[fields.r_in] = np.uint32(value)
        elif OPCODES[fields.op] == "attend":
            mant = self.cfg.ve.rc_mant_bits
            state.reg[fields.r_in] = RCFactor(np.asarray(value & ((1 << mant) - 1), np.int64),
                                              np.asarray(value >> mant, np.int64))
        op.run(state, self.flat)
        target = getattr(op, "dst", None)
        if target is not None:
            a, n = target
            await self.write_rows(Store.RR, a // self.lanes,
                                  row_values(state.rr[(a, n)].view(np.uint8), self.lanes, 8))
        for _ in range(self.rng.randrange(3)):
            await self.tick()
        ctx.set(dut.dxt_done.valid, 1)
        ctx.set(dut.dxt_done.payload.error, self.dxt_count == self.fail_at)
        self.dxt_count += 1
        taken = self.cycles
        await self.tick()
        ctx.set(dut.dxt_done.valid, 0)
        return taken

    async def image(self, store: Store, words: int, bits: int) -> np.ndarray:
        rows = await self.read_rows(store, 0, words // self.lanes)
        return np.array([e for r in rows for e in row_elements(r, self.lanes, bits)], np.uint64)


def golden_images(asm, flat, inputs_per_token):
    """The golden TB and rr-SRAM images after each token."""
    state, images = A.new_state(asm), []
    for inputs in inputs_per_token:
        for name, value in inputs.items():
            state.tb[(asm.inputs[name], len(value))] = value
        A.run_words(asm, state, flat)
        images.append((state.tb.words.astype(np.uint64), state.rr.words.view(np.uint8)
                       .astype(np.uint64)))
    return images


