"""A DXE's host, without a simulator: the layer's images and loads through the engine's ports
(docs/rdxe.md 14.3, 14.4), the reduced layer at an engine's shape, the engine's contract at its
ports (:class:`DxeModel`) and its cycle model. One place for the ``rdxe-dxe`` and ring
testbenches (cocotb_tests/rdxe/), the board vectors (memwall/board/vectors.py), the registry's
board form (memwall/blocks/rdxe_dxe.py) and the Amaranth-simulator tests.

The reduced layer (:mod:`sim.rdxe.reduced`) at an engine's shape: query heads ``group_size x
kv_groups x dxts / (layers x slots)`` of ``head_dim``, hidden ``heads x head_dim``, FFN twice
that.
"""

from __future__ import annotations

import dataclasses

import numpy as np

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

from . import reduced
from .ring import program_cycles

__all__ = ["row_values", "row_elements", "dxt_loads", "ext_writes", "host_loads",
           "model_cycles", "Layer", "reduced_layer", "assemble_layer", "BoardLayer",
           "board_layer", "DxeModel", "SMOLLM2_LAYER", "vector_cycles", "vector_cycle_table"]


# --- the host's images and loads ----------------------------------------------------------------


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
    N, d = dxt.vacs, dxt.head_dim
    named = (lambda j: {"dxt": j}) if dxts > 1 else (lambda j: {})
    wmem, ppu, table = [], [], []
    layout, fixed = _gemv_layout(flat, dxt, dxts)
    for index, (W, m, shift), shares, C, passes, row, entry in layout:
        K = W.shape[1]
        for j, (first, n) in enumerate(shares):
            image = golden.wmem_image(W[first:first + n], dxt) if n else None
            wmem += [{"vac": v, "addr": row + r, "data": [int(x) for x in image[v, r]],
                      **named(j)} for v in range(N) for r in range(-(-n // N) * C)]
            ppu += [{"vac": o % N, "addr": entry + o // N, "m": int(m[first + o]),
                     "shift": int(shift[first + o]), **named(j)} for o in range(n)]
            table.append({"index": index, "row": row, "entry": entry, "outputs": n, "chunks": C,
                          "inv_k": int(from_float(np.float32(1 / K), FP32)),
                          **({"dxt": j, "first": first} if dxts > 1 else {})})
    ppu += [{"vac": e % N, "addr": fixed["pv_entry"] + e // N, "m": 1, "shift": dxt.prob_frac,
             **named(j)} for j in range(dxts) for e in range(d)]
    return wmem, ppu, table, {**fixed, "score_scale": int(tables.score_scale)}


def _gemv_layout(flat: P.LayerTables, dxt, dxts: int) -> tuple[list, dict]:
    """Where :func:`dxt_loads` puts each GEMV of ``flat`` and the identity after them, from
    their shapes alone: ``(index, (W, m, shift), shares, chunks, passes, row, entry)`` in index
    order, and the fixed entries (``identity``, ``score_entry``, ``pv_entry``)."""
    gemvs = dict(flat.gemvs)
    identity, d = len(gemvs), dxt.head_dim
    gemvs[identity] = (np.eye(d, dtype=np.int8), np.ones(d, np.int64), np.zeros(d, np.int64))
    N, L = dxt.vacs, dxt.lanes
    layout, row, entry = [], 0, 0
    for index, tables in sorted(gemvs.items()):
        M, K = tables[0].shape
        shares = output_shares(M, dxts, N) if dxts > 1 and index != identity else [(0, M)] * dxts
        C, passes = -(-K // L), max(-(-n // N) for _, n in shares)
        layout.append((index, tables, shares, C, passes, row, entry))
        row, entry = row + passes * C, entry + passes
    return layout, {"identity": identity, "score_entry": entry, "pv_entry": entry + 1}


def ext_writes(store: Store, first: int, values: list[int], lanes: int) -> list[dict]:
    """``ext`` items that write ``values`` into rows ``first ..`` of ``store``, every lane."""
    return [{"store": store.value, "row": first + i, "write": 1, "data": v,
             "mask": (1 << lanes) - 1} for i, v in enumerate(values)]


def host_ports(params, asm: A.Assembled, views: list) -> dict:
    """The plain inputs of :func:`host_loads` (name -> value) without its stream items: from
    the tables' shapes, so without building a WMEM row."""
    flat, ctrl = views[0], params.ctrl_config()
    ports = {**_gemv_layout(flat, params, params.dxts)[1],
             "score_scale": int(flat.score_scale)}
    if params.layers > 1 or params.slots > 1 or params.dxts > 1:
        step = A.stride(asm)
        value = stride_value(ctrl, params.dxt_config(), step.gemvs, step.const_words,
                             step.kv_groups, params.slots, params.dxts)
        ports["stride"] = stride_layout(ctrl).const(value).as_value().value
    if params.layers > 1:
        del ports["score_scale"]
    # fp32(127**2 eps): rms_eps of k = 1.0 is e itself (two products by 1.0).
    one = np.float32(1.0).view(np.uint32)
    ports["eps"] = int(rms_eps(np.array([one]), flat.rms_eps)[0])
    return ports


def host_loads(params, asm: A.Assembled, views: list) -> tuple[dict, dict]:
    """What a host loads into an engine of ``params`` through its ports, for the layers whose
    tables the words see as ``views`` (docs/rdxe.md 14.4): the plain inputs (``stride`` with
    several layers or slots, the DXT side's fixed entries, RMSNorm's ``eps``: name -> value)
    and the stream items (``scales`` with several layers; ``table``, ``wmem``, ``ppu``; on
    ``ext`` the TB and rr-SRAM cleared, then the program and the constants: name -> items)."""
    flat, L, ctrl = views[0], params.lanes, params.ctrl_config()
    wmem, ppu, table, _ = dxt_loads(flat, asm, params, flat=flat, dxts=params.dxts)
    ports, streams = host_ports(params, asm, views), {}
    if params.layers > 1:
        streams["scales"] = [{"layer": l, "value": int(v.score_scale)}
                             for l, v in enumerate(views)]
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
    ``groups`` the KV groups a layer's words use (the DXTs' by default)."""
    one = program_cycles(ctrl, dxt, words, {i: g[0].shape for i, g in flat.gemvs.items()},
                         tokens, dxts, groups)
    return loop_cycles([one] * ctrl.layers)


#: SmolLM2-135M's layer shape: hidden, FFN, query heads, KV heads, head dimension.
SMOLLM2_LAYER = (576, 1536, 9, 3, 64)


def vector_cycles(lanes: int, vector_lanes: int | None = None,
                  shape: tuple = SMOLLM2_LAYER) -> dict[str, int]:
    """Cycles of a token's vector and scalar ops by opcode (the DXT ops not counted) on a
    controller of ``lanes`` and ``vector_lanes`` (:func:`hdl.rdxe.ctrl.instruction_cycles`) for
    a Llama layer of ``shape`` (its tables' sizes only matter: ``reduced.layer_tables`` at that
    shape), in SmolLM2's space (docs/rdxe.md 14.2)."""
    from hdl.rdxe.ctrl import DXT_OPS, CtrlConfig, instruction_cycles
    from hdl.rdxe.isa import SMOLLM2_STORAGE, ProgramSpace

    hidden, ffn, heads, kv, d = shape
    space = ProgramSpace(**SMOLLM2_STORAGE, gemvs=4, align=lanes)
    asm = A.assemble(P.llama_layer(heads, kv, d), reduced.layer_tables(hidden, ffn, heads, kv, d),
                     {"h": hidden, "cos": d // 2, "sin": d // 2}, ["h"], space, d)
    cfg = CtrlConfig(space, lanes=lanes, head_dim=d, program_words=64, vector_lanes=vector_lanes)
    by: dict[str, int] = {}
    for word in asm.words:
        op = OPCODES[instruction_layout(space).from_bits(word).op]
        if op not in DXT_OPS:
            by[op] = by.get(op, 0) + instruction_cycles(cfg, word)
    return by


def vector_cycle_table() -> str:
    """SmolLM2's vector and scalar ops a token by lanes and vector lanes (``python -m
    sim.rdxe``)."""
    lines = ["lanes  vector lanes  cycles a token (no DXT ops)"]
    for lanes in (4, 8, 16):
        for vector in (lanes, lanes // 2):
            cycles = sum(vector_cycles(lanes, vector).values())
            lines.append(f"{lanes:5d}  {vector:12d}  {cycles:,}")
    return "\n".join(lines)


@dataclasses.dataclass
class Layer:
    """A layer to run: its ``program`` (:mod:`golden.rdxe.program`), ``tables``, the TB sizes of
    its ``inputs`` (``h``, ``cos``, ``sin``) and each token's inputs (``tokens``)."""

    program: list
    tables: P.LayerTables
    inputs: dict
    tokens: list


def reduced_layer(params, count: int = 2, seed: int = reduced.TOKEN_SEED) -> Layer:
    """The reduced layer at the engine's shape (module notes), ``count`` tokens drawn from
    ``seed``."""
    d, kv = params.head_dim, params.kv_groups * params.dxts // (params.layers * params.slots)
    heads = params.group_size * kv
    hidden = heads * d
    return Layer(P.llama_layer(heads, kv, d),
                 reduced.layer_tables(hidden, 2 * hidden, heads, kv, d),
                 {"h": hidden, "cos": d // 2, "sin": d // 2},
                 reduced.tokens(count, hidden, d, seed))


def assemble_layer(params, layer: Layer) -> tuple[A.Assembled, list]:
    """``layer`` assembled into an engine of one layer: the words and its tables as they see
    them (one view)."""
    asm = A.assemble(layer.program, layer.tables, layer.inputs, ["h"], params.space(),
                     params.head_dim)
    return asm, [A.flat_tables(layer.tables, asm)]


@dataclasses.dataclass
class BoardLayer:
    """The reduced layer as the board holds it (:func:`board_layer`): the layer, its words and
    view, and :func:`host_loads`' plain inputs (``ports``) and stream items (``streams``)."""

    layer: Layer
    asm: A.Assembled
    views: list
    ports: dict
    streams: dict


def board_layer(params, count: int = 1, seed: int = reduced.TOKEN_SEED) -> BoardLayer:
    """The reduced layer at an engine of ``params`` with ``count`` tokens from ``seed``, and its
    loads: the one source of the plain inputs the engine's board form holds
    (:class:`hdl.rdxe.hosted.DxeBoard`) and of the loads its board vectors play. The board holds
    one layer and one slot; another raises ``ValueError``."""
    layer, asm, views = _board_layer(params, count, seed)
    ports, streams = host_loads(params, asm, views)
    return BoardLayer(layer, asm, views, ports, streams)


def board_ports(params, seed: int = reduced.TOKEN_SEED) -> dict:
    """:func:`board_layer`'s ``ports`` (the plain inputs the engine's board form holds) without
    its loads: for a SmolLM2-sized preset the loads are a million rows (``memwall board
    list`` measures the board form of every preset)."""
    _, asm, views = _board_layer(params, 1, seed)
    return host_ports(params, asm, views)


def _board_layer(params, count: int, seed: int):
    if params.layers != 1 or params.slots != 1:
        raise ValueError(f"The rdxe-dxe board form holds the reduced layer in an engine of one "
                         f"layer and one slot (layers=1, slots=1), not layers={params.layers}, "
                         f"slots={params.slots}")
    layer = reduced_layer(params, count, seed)
    return (layer, *assemble_layer(params, layer))


# --- the model ----------------------------------------------------------------------------------


class DxeModel:
    """The engine's contract at its ports, fed with what the engine took (the testbench's input
    monitors, or the board vectors' items in playing order): it mirrors the four memories from
    the ``ext`` writes, answers each ``ext`` read with its mirror's row, and on each ``run``
    runs the words on its mirror with :func:`golden.rdxe.assemble.run_words` (layer after
    layer, each slot and layer its own KV cache) and answers ``done`` at the end of the words,
    or with ``error`` at a ``kv_append`` the full KV cache refuses. ``views``: each layer's
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
