"""cocotb testbench of the rDXE decoder engine with one DXT (``rdxe-dxe``, docs/rdxe.md 14.4).

The host's part, through the engine's ports only: the DXT side's fixed entries (``identity``,
``score_entry``, ``pv_entry``, ``score_scale``, ``position`` on ``restart``) and RMSNorm's
``eps``; the GEMV tables (``table``), WMEM rows (``wmem``) and PPU entries (``ppu``); the program
and the constants written on ``ext``; then per token its inputs written on ``ext``, a ``run``,
and after ``done`` the whole token buffer and rr-SRAM read back on ``ext``. Random idle cycles on
every input, random back-pressure on ``done``; ``ext`` is used only while the engine is idle, as
its contract asks.

The model (:class:`DxeModel`) is fed by the input monitors: it mirrors the four memories from the
``ext`` writes it sees, and on each ``run`` runs the layer's words on its mirror with
:func:`golden.rdxe.assemble.run_words` (the golden of docs/rdxe.md 14.1; the DXT ops' numerics
are ``golden.rdxe``'s). It expects ``done`` at the end of the words (or, when the KV cache is
full, at the ``kv_append`` the DXT refuses, with ``error``) and every host read's row on
``ext_data`` from its mirror. The cycles from ``run`` taken to ``done.valid`` are checked against
the cycle model (:func:`model_cycles`).

The layer: the reduced Llama layer of cocotb_tests/rdxe/layer.py at the block's shape (query heads
``group_size x kv_groups / layers`` of ``head_dim``, hidden ``heads x head_dim``, FFN twice
that), or the one a launcher hands over in :data:`ENV_LAYER` (SmolLM2's layer 2:
cocotb_tests/test_rdxe_dxe.py). An engine of several ``layers`` (docs/rdxe.md 16.1) holds that
many distinct layers of its tables (tests/test_rdxe_assemble.py's ``variant``) stacked at the
program's stride, the program assembled to loop; the host also holds ``stride`` and writes each
layer's score step on ``scales``, and the model runs the words layer after layer, each with its
own KV cache. An engine of several ``slots`` (docs/rdxe.md 16.2) takes each run's request ``slot``
and its restart in the ``run`` payload (the host holds ``stride`` then even for one layer), and
the model keeps a token count and a KV cache a slot and layer; the layer's groups are the DXT's
over ``slots x layers``. An engine of several ``dxts`` (docs/rdxe.md 16.5) runs a layer of
``dxts`` x the DXT's groups; its loads name their DXT, each DXT's share of every GEMV.

Tests: ``layer_tokens`` (two tokens, the second attending over both, idle and back-pressure),
``cache_full`` (a token at the KV cache's capacity: the run ends at the KV append with
``error``), ``full_rate`` (one token, no idle, no back-pressure: the token's cycles; ``memwall
bench``), ``slot_tokens`` (two requests in two slots, interleaved).
"""

from __future__ import annotations

import dataclasses
import os
import pickle

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from golden import rdxe as golden
from golden.arith.float import from_float
from golden.rdxe import assemble as A
from golden.rdxe import program as P
from golden.rdxe.dxe import rms_eps
from golden.rdxe.vlink import dxe_layout
from hdl.arith.format import FP32
from hdl.rdxe.ctrl import Store, loop_cycles, stride_layout
from hdl.rdxe.dxe import stride_value
from hdl.rdxe.dxts import output_shares
from hdl.rdxe.isa import OPCODES, instruction_layout

from sim.rdxe.ring import program_cycles

from ..functional import sampler
from ..streams import ClockService
from ..tb import BlockTB, select_tb
from . import layer as reduced

__all__ = ["ENV_LAYER", "row_values", "row_elements", "dxt_loads", "ext_writes", "host_loads",
           "model_cycles", "Layer", "layer", "DxeModel", "DxeTB"]

#: A pickled :class:`Layer` to run instead of the random one (the launcher's real layer).
ENV_LAYER = "MEMWALL_RDXE_LAYER"
#: Cycles between the progress lines of a load of more WMEM rows than that.
_PROGRESS = 20_000


# --- the host's images and loads (no simulator: tests/test_rdxe_side.py uses them too) ---------


def row_values(words: np.ndarray, lanes: int, bits: int) -> list[int]:
    """A memory image as row integers (element ``n`` of a row in bits ``n bits ..``)."""
    width = np.dtype(words.dtype).itemsize * 8
    values = words.astype(np.uint64 if width > 8 else np.uint8).astype(object) & ((1 << bits) - 1)
    rows = np.asarray(values).reshape(-1, lanes)
    return [sum(int(v) << (bits * n) for n, v in enumerate(row)) for row in rows]


def row_elements(value: int, lanes: int, bits: int) -> list[int]:
    """The ``lanes`` elements of ``bits`` of a row integer (:func:`row_values`' inverse)."""
    return [(value >> (bits * n)) & ((1 << bits) - 1) for n in range(lanes)]


def dxt_loads(tables: P.LayerTables, asm: A.Assembled, dxt, flat: P.LayerTables | None = None,
              dxts: int = 1) -> tuple[list, list, list, dict]:
    """The DXT side's loads for a layer (docs/rdxe.md 14.3): WMEM rows and PPU entries of every
    GEMV by table index, the identity after them, then the score entry and P.V's; the ``table``
    entries; and the fixed inputs (``identity``, ``score_entry``, ``pv_entry``,
    ``score_scale``). ``flat``: the tables as the words see them (by default
    ``flat_tables(tables, asm)``; a view of ``stacked_tables`` for several layers). On several
    ``dxts`` (docs/rdxe.md 16.5) each DXT gets its share of every GEMV's rows
    (:func:`hdl.rdxe.dxts.output_shares`) and the whole identity, at the same rows and entries
    on every DXT (room for the largest share), and every load names its ``dxt``."""
    if dxts > 1:
        dxe_layout(tables.params.heads, tables.params.kv_groups, dxts, dxt.kv_groups,
                   dxt.group_size)
    flat = A.flat_tables(tables, asm) if flat is None else flat
    gemvs = dict(flat.gemvs)
    identity = len(gemvs)
    d = dxt.head_dim
    gemvs[identity] = (np.eye(d, dtype=np.int8), np.ones(d, np.int64), np.zeros(d, np.int64))
    N, L = dxt.vacs, dxt.lanes
    named = (lambda j: {"dxt": j}) if dxts > 1 else (lambda j: {})
    wmem, ppu, table, row, entry = [], [], [], 0, 0
    for index, (W, m, shift) in sorted(gemvs.items()):
        M, K = W.shape
        shares = output_shares(M, dxts, N) if dxts > 1 and index != identity else [(0, M)] * dxts
        C, passes = -(-K // L), max(-(-n // N) for _, n in shares)
        for j, (first, n) in enumerate(shares):
            image = golden.wmem_image(W[first:first + n], dxt) if n else None
            wmem += [{"vac": v, "addr": row + r, "data": [int(x) for x in image[v, r]],
                      **named(j)} for v in range(N) for r in range(-(-n // N) * C)]
            ppu += [{"vac": o % N, "addr": entry + o // N, "m": int(m[first + o]),
                     "shift": int(shift[first + o]), **named(j)} for o in range(n)]
            table.append({"index": index, "row": row, "entry": entry, "outputs": n, "chunks": C,
                          "inv_k": int(from_float(np.float32(1 / K), FP32)),
                          **({"dxt": j, "first": first} if dxts > 1 else {})})
        row, entry = row + passes * C, entry + passes
    score_entry, pv_entry = entry, entry + 1
    ppu += [{"vac": e % N, "addr": pv_entry + e // N, "m": 1, "shift": dxt.prob_frac,
             **named(j)} for j in range(dxts) for e in range(d)]
    return wmem, ppu, table, {"identity": identity, "score_entry": score_entry,
                              "pv_entry": pv_entry, "score_scale": int(tables.score_scale)}


def ext_writes(store: Store, first: int, values: list[int], lanes: int) -> list[dict]:
    """``ext`` items that write ``values`` into rows ``first ..`` of ``store``, every lane."""
    return [{"store": store.value, "row": first + i, "write": 1, "data": v,
             "mask": (1 << lanes) - 1} for i, v in enumerate(values)]


def host_loads(params, asm: A.Assembled, views: list) -> tuple[dict, dict]:
    """What a host loads into an engine of ``params`` through its ports, for the layers whose
    tables the words see as ``views`` (docs/rdxe.md 14.4): the plain inputs (``stride`` with
    several layers or slots, the DXT side's fixed entries, RMSNorm's ``eps``: name -> value)
    and the stream items (``scales`` with several layers; ``table``, ``wmem``, ``ppu``; on
    ``ext`` the TB and rr-SRAM cleared, then the program and the constants: name -> items)."""
    flat, L, ctrl = views[0], params.lanes, params.ctrl_config()
    wmem, ppu, table, ports = dxt_loads(flat, asm, params, flat=flat, dxts=params.dxts)
    streams = {}
    if params.layers > 1 or params.slots > 1:
        step = A.stride(asm)
        value = stride_value(ctrl, params.dxt_config(), step.gemvs, step.const_words,
                             step.kv_groups, params.slots)
        ports["stride"] = stride_layout(ctrl).const(value).as_value().value
    if params.layers > 1:
        del ports["score_scale"]
        streams["scales"] = [{"layer": l, "value": int(v.score_scale)}
                             for l, v in enumerate(views)]
    # fp32(127**2 eps): rms_eps of k = 1.0 is e itself (two products by 1.0).
    one = np.float32(1.0).view(np.uint32)
    ports["eps"] = int(rms_eps(np.array([one]), flat.rms_eps)[0])
    streams["table"] = table
    streams["wmem"] = [{"vac": w["vac"], "addr": w["addr"],
                        **{f"data.{k}": x & 0xFF for k, x in enumerate(w["data"])},
                        **({"dxt": w["dxt"]} if params.dxts > 1 else {})} for w in wmem]
    streams["ppu"] = [{**e, "m": e["m"] & ((1 << params.mult_bits) - 1)} for e in ppu]
    # Memories keep their contents over a reset: the host clears the TB and rr-SRAM.
    streams["ext"] = [item for store in (Store.TB, Store.RR)
                      for item in ext_writes(store, 0, [0] * ctrl.rows(store), L)] \
        + ext_writes(Store.PROG, 0, list(asm.words), L) \
        + ext_writes(Store.CONST, 0, row_values(flat.vectors.words, L, 32), L)
    return ports, streams


def model_cycles(ctrl, dxt, words, flat, tokens: int, groups: int | None = None,
                 dxts: int = 1) -> int:
    """Cycles from ``run`` taken to ``done.valid`` for ``words``: the controller's model
    (:func:`hdl.rdxe.ctrl.run_cycles`), each DXT instruction's by the DXT side's
    (:func:`hdl.rdxe.dxtside.instruction_cycles`) with its commands timed by the DXT's
    (``golden.rdxe.command_cycles``); ``tokens`` in the cache after the run's append. For
    ``ctrl.layers`` layers, :func:`hdl.rdxe.ctrl.loop_cycles` of the words' cycles a layer,
    ``groups`` the KV groups a layer's words use (the DXT's by default)."""
    view = dxt if groups is None else dataclasses.replace(dxt, kv_groups=groups)
    one = program_cycles(ctrl, view, words, {i: g[0].shape for i, g in flat.gemvs.items()},
                         tokens, dxts)
    return loop_cycles([one] * ctrl.layers)


@dataclasses.dataclass
class Layer:
    """A layer to run: its ``program`` (:mod:`golden.rdxe.program`), ``tables``, the TB sizes of
    its ``inputs`` (``h``, ``cos``, ``sin``) and each token's inputs (``tokens``)."""

    program: list
    tables: P.LayerTables
    inputs: dict
    tokens: list


def layer(params, count: int = 2) -> Layer:
    """The layer at the block's shape (module notes), or the one :data:`ENV_LAYER` names."""
    path = os.environ.get(ENV_LAYER)
    if path:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    d, kv = params.head_dim, params.kv_groups * params.dxts // (params.layers * params.slots)
    heads = params.group_size * kv
    hidden = heads * d
    return Layer(P.llama_layer(heads, kv, d),
                 reduced.layer_tables(hidden, 2 * hidden, heads, kv, d),
                 {"h": hidden, "cos": d // 2, "sin": d // 2},
                 reduced.tokens(count, hidden, d))


# --- the model --------------------------------------------------------------------------------


class DxeModel:
    """The engine's contract, fed by the input monitors (module notes). ``views``: each layer's
    tables as the words see them."""

    def __init__(self, params, asm: A.Assembled, views: list):
        self.ctrl, self.dxt = params.ctrl_config(), params.dxt_config()
        self.asm, self.views, self.lanes = asm, views, params.lanes
        self.flat = views[0]
        self.state = A.new_state(asm)
        #: Each slot's each layer's KV cache, ``(keys, values)``.
        self.caches = [[([], []) for _ in views] for _ in range(params.slots)]
        rows = {s: self.ctrl.rows(s) for s in Store}
        L = self.lanes
        self.prog = [0] * rows[Store.PROG]
        self.tb = np.zeros(rows[Store.TB] * L, np.uint32)
        self.rr = np.zeros(rows[Store.RR] * L, np.uint8)
        self.const = np.zeros(rows[Store.CONST] * L, np.uint32)
        #: Each slot's tokens in its KV cache (``position`` on a restart, one more a KV append).
        self.tokens = [0] * params.slots
        #: Per run: its words, the tokens after its append (the cycle model's inputs).
        self.runs: list[tuple[tuple, int]] = []

    def restart(self, position: int, slot: int = 0) -> None:
        """``slot`` starts over: its next KV append is token ``position`` (the rows below stay)."""
        self.tokens[slot] = position
        for keys, values in self.caches[slot]:
            del keys[position:], values[position:]

    def _memory(self, store: Store):
        memories = {Store.TB: (self.tb, 32), Store.RR: (self.rr, 8),
                    Store.CONST: (self.const, 32)}
        return memories[store]

    def ext(self, item) -> list[dict]:
        """A host request: a write into the mirror, or the row a read must answer."""
        store, row, L = Store(item["store"]), item["row"], self.lanes
        if store == Store.PROG:
            if item["write"]:
                self.prog[row] = item["data"] & ((1 << instruction_layout(
                    self.ctrl.space).size) - 1)
                return []
            return [{"data": self.prog[row]}]
        words, bits = self._memory(store)
        if item["write"]:
            values = row_elements(item["data"], L, bits)
            for n in range(L):
                if item["mask"] >> n & 1:
                    words[row * L + n] = values[n]
            return []
        return [{"data": row_values(words[row * L:(row + 1) * L], L, bits)[0]}]

    def run(self, item) -> list[dict]:
        """A run of ``count`` words from ``pc`` (in ``slot``, which may start over first): the
        golden on the mirror, then ``done``."""
        pc, count, slot = item["pc"], item["count"], item.get("slot", 0)
        if item.get("restart"):
            self.restart(item["position"], slot)
        words = tuple(self.prog[pc:pc + count])
        # The golden runs the layer's tables: the design must hold the same constants.
        const = self.flat.vectors.words
        assert np.array_equal(self.const[:len(const)], const), "CONST differs from the layer's"
        stop, error = len(words), 0
        appends = [i for i, w in enumerate(words) if OPCODES[
            instruction_layout(self.ctrl.space).from_bits(w).op] == "kv_append"]
        if appends and self.tokens[slot] >= self.dxt.capacity:
            stop, error = appends[0], 1          # the DXT refuses the key: the run ends there
        state = self.state
        state.tb.words[:] = self.tb[:len(state.tb.words)]
        state.rr.words[:] = self.rr[:len(state.rr.words)].view(np.int8)
        # A refused append ends the run in layer 0.
        for l, view in enumerate(self.views[:1] if error else self.views):
            state.keys, state.values = self.caches[slot][l]
            A.run_words(dataclasses.replace(self.asm, words=words[:stop]), state, view, layer=l)
        self.tb[:len(state.tb.words)] = state.tb.words
        self.rr[:len(state.rr.words)] = state.rr.words.view(np.uint8)
        self.tokens[slot] += bool(appends) and not error
        self.runs.append((words[:stop + error], self.tokens[slot]))
        return [{"pc": pc + stop, "error": error}]


# --- the testbench ----------------------------------------------------------------------------


def _samplers(block: str) -> dict:
    """Coverpoints of what the engine took and gave: each memory read and written on ``ext``,
    and a run that ends at its last word or at a refused op."""
    accesses = [f"{s.name.lower()}_{w}" for s in Store for w in ("write", "read")]
    ext = sampler({f"{block}.ext": (lambda i: f"{Store(i['store']).name.lower()}_"
                                              f"{'write' if i['write'] else 'read'}", accesses)})
    done = sampler({f"{block}.done": (lambda i: "error" if i["error"] else "end",
                                      ("end", "error"))})
    return {"ext": ext, "done": done}


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
            self.asm = A.assemble(self.layer.program, self.layer.tables, self.layer.inputs,
                                  ["h"], p.space(), p.head_dim)
            self.views = [A.flat_tables(self.layer.tables, self.asm)]
        else:
            from tests.test_rdxe_assemble import variant

            self.asm = A.assemble(self.layer.program, self.layer.tables, self.layer.inputs,
                                  ["h"], p.space(), p.head_dim, in_place=("h",),
                                  keep=("cos", "sin"))
            self.views = A.stacked_tables([variant(self.layer.tables, l)
                                           for l in range(p.layers)], self.asm)
        self.flat = self.views[0]
        self.groups = A.stride(self.asm).kv_groups if p.layers > 1 or p.slots > 1 else None
        self.dmodel = DxeModel(p, self.asm, self.views)
        self.samplers = _samplers(self.block.name)
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
