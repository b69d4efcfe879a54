"""The DXE's DXT side: one :class:`~hdl.rdxe.dxt.Dxt` running the DXT instructions the layer
controller hands out (:class:`~hdl.rdxe.ctrl.DxeController`'s ``dxt``), its operands moved on
the controller's ``ext`` (docs/rdxe.md 14.2, "the DXT side").

The layer's weights stay in the DXT's WMEM (the host loads every GEMV's rows and PPU entries once
per layer, through ``wmem`` and ``ppu``), and the host tells the DXT side where each GEMV is
(``table``: first row, first PPU entry, outputs, chunks, ``fp32(1/K)``). Per instruction::

    gemv, gemv_norm   one gemv / rmsnorm command (eps: the instruction's register value); its
                      chunks the rr rows from a; its results written as rr rows from dst
    kv_append         per KV group g: the identity GEMV (``identity``'s table) with dest key, the
                      token's position, the keys' rows of group g; then dest value; position + 1
    attend            the score PPU entry (``score_entry``) written on every VAC from the
                      instruction's value; per query head h: qk (the query's rows of head h), its
                      scores dropped; pv (``pv_entry``, ``score_scale``), its results to dst + h d

A row of the rr-SRAM is a chunk (the controller's lanes are the DXT's); a GBUS word of 4 results
is written as a part of a row (``ext``'s mask).

With a controller of several layers (docs/rdxe.md 16.1) each instruction comes with its layer's
first KV group and query head (``dxt_layout``): a KV append writes ``stride.kv_groups`` groups
from that group, an attention runs ``stride.heads`` heads from that head (its query rows and
results still from the instruction's ``a`` and ``dst``), with the layer's own score step from a
table the host writes on ``scales``. Every layer appends the token at the same position; the
count moves on at the last layer's append.

With ``slots`` above 1 (docs/rdxe.md 16.2) the side serves that many resident requests: each
run comes with its request's ``slot`` (and whether that slot starts over at a ``position``) on
``run``; the side keeps a token count a slot and adds the slot's KV base, ``slot x layers x
stride.kv_groups`` groups and ``slot x layers x stride.heads`` heads, to the layer's first KV
group and query head. The base is a product in logic, made once a run (no multiplier block,
no cycle).

With ``dxts`` above 1 (docs/rdxe.md 16.5, :mod:`hdl.rdxe.dxts`) a GEMV goes to every DXT at
once, each with its own table entry (its share of the outputs, from ``first``), its chunks read
once for all and its results written through a queue a DXT; a KV append's groups and an
attention's heads run one at a time on the DXT that holds them, the layer's counts of them on
``stride`` (its groups fill the DXTs from DXT 0 on; docs/rdxe.md 15). The host's loads name
their DXT.
"""

from __future__ import annotations

from typing import NamedTuple

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.format import FP32
from ..arith.fpmul import logic_product
from ..pipeline import delay, one_hot_select, stream_stage
from ..validate import index_bits, integer
from .ctrl import CtrlConfig, Store, dxt_layout, ext_layout, op_is, stride_layout
from .dxt import Dxt
from .dxts import BroadcastIo, check_dxts, chunk_queue, count_reads, one_hot
from .sequencer import DECODE
from .spec import (CODE_BITS, DESTS, GBUS_BYTES, MAX_KV_GROUPS, OPS, DxtConfig, check_config,
                   command_layout, rc_layout)

__all__ = ["DxtSide", "gemv_table_layout", "scale_layout", "slot_layout", "instruction_cycles",
           "ext_stage", "READ_DELAY", "CHUNK_DELAY", "COMMAND_DELAY", "MAX_SLOTS"]

#: Chunk reads in flight or waiting for the DXT.
_CHUNKS = 4
#: Most resident requests a DXE serves: the token counts then fit one 16-deep LUT RAM.
MAX_SLOTS = 16
#: The commands the side offers its DXTs, in the order of the bits of its ``offer`` register.
_COMMANDS = ("gemv", "key", "value", "qk", "pv")


class _Command(NamedTuple):
    """An instruction's registers that its DXT commands' fields come from."""
    insn: Value
    value: Value
    gemv: data.View                  # the GEMV's table entry (its first DXT's on several)
    shares: list | None              # each DXT's entry on several DXTs
    tokens: Value
    layer: "_Layer"
    index: Value                     # the group or head of the DXE, counted from the first
    group: Value                     # the instruction's first KV group and query head
    head: Value
    ident: data.View                 # the identity GEMV's entry (KV appends)


def gemv_table_layout(dxt: DxtConfig, tables: int, dxts: int = 1) -> data.StructLayout:
    """Payload of a ``table`` load: GEMV ``index``'s first WMEM ``row``, first PPU ``entry``,
    ``outputs`` M, ``chunks`` C and ``inv_k`` = fp32(1/K); with several ``dxts``, on DXT
    ``dxt``, whose share of the outputs (``outputs`` of them, none: it sits the GEMV out)
    starts at output ``first``."""
    cmd = {name: field.shape for name, field in command_layout(dxt)}
    several = {"dxt": index_bits(dxts), "first": cmd["outputs"]} if dxts > 1 else {}
    return data.StructLayout({"index": index_bits(tables), "row": cmd["row"],
                              "entry": cmd["entry"], "outputs": cmd["outputs"],
                              "chunks": cmd["chunks"], "inv_k": FP32.width, **several})


def _addressed(port, dxts: int):
    """A DXT's load port (``wmem``, ``ppu``) with the ``dxt`` it goes to, for several."""
    layout = port.signature.members["payload"].shape
    return In(stream.Signature(data.StructLayout({**{name: f.shape for name, f in layout},
                                                  "dxt": index_bits(dxts)})))


def scale_layout(ctrl: CtrlConfig) -> data.StructLayout:
    """Payload of a ``scales`` write: layer ``layer``'s fp32 ``log2(e)`` times its score step."""
    return data.StructLayout({"layer": index_bits(ctrl.layers), "value": FP32.width})


def slot_layout(dxt: DxtConfig, slots: int) -> data.StructLayout:
    """Payload of the DXT side's ``run`` with several ``slots``: the run's request ``slot``, and
    ``restart``: that slot's next KV append is token ``position`` (nothing is cleared)."""
    tokens = command_layout(dxt)["tokens"].shape
    return data.StructLayout({"slot": index_bits(DxtSide.check_slots(slots)), "restart": 1,
                              "position": tokens})


#: Cycles of an instruction besides its commands: the ``dxt`` handshake, the dispatch, ``done``.
_OVERHEAD = 3
#: Cycles from a chunk read offered to its row on ``ext_data``: the register on the side's way to
#: the controller's ``ext`` (so that the side's requests cross the engine from flip-flops), then
#: the memory's read.
READ_DELAY = 2
#: Cycles from a chunk at the head of the side's queue to the DXT's ``x``: the skid buffer that
#: gives the DXT's sequencer ``x.valid`` from a flip-flop beside it
#: (:func:`hdl.rdxe.dxts.chunk_queue`).
CHUNK_DELAY = 1
#: Cycles from a command offered to the DXT taking it: the register on the side's way to the
#: DXT's ``cmd`` (the chunk reads leave when the command is offered, so a chunked command does not
#: wait for it).
COMMAND_DELAY = 1


def instruction_cycles(cfg: DxtConfig, op: str, commands, heads: int) -> int:
    """Cycles of one DXT instruction ``op`` (an opcode name) from ``dxt.valid`` rising to
    ``dxt_done`` taken, the controller's ``dxt_cycles``
    (:func:`hdl.rdxe.ctrl.instruction_cycles`). ``commands``: the DXT commands it runs, in order,
    as ``(cycles, chunked)``: cycles from the command taken to its response (the DXT's model,
    ``golden.rdxe.command_cycles``), and whether it reads chunks (its first chunk comes
    :data:`READ_DELAY` ``+`` :data:`CHUNK_DELAY` ``+ 1 -`` :data:`~hdl.rdxe.sequencer.DECODE`
    cycles later than the DXT's model has it: the read on ``ext`` and the queue's skid buffer,
    every later chunk as many: four reads in flight keep one a cycle, less the command's
    decode beyond the first register, which the read overlaps; one without chunks comes
    :data:`COMMAND_DELAY` later, the command's register).
    Each command adds a cycle for the state that sees its response; an attention adds the score
    entry's writes, one a VAC (on every DXT at once), and a cycle for each of the layer's
    ``heads``. On several DXTs a command's cycles run to the side seeing its results written too
    (:func:`hdl.rdxe.dxts.shared_cycles`)."""
    extra = cfg.vacs + heads if op == "attend" else 0
    late = READ_DELAY + CHUNK_DELAY + 1 - DECODE
    return _OVERHEAD + extra + sum(c + 1 + max(COMMAND_DELAY, late * bool(chunked))
                                   for c, chunked in commands)


class DxtSide(wiring.Component):
    """Run the controller's DXT instructions on one DXT, or on ``dxts`` (module notes).

    Parameters
    ----------
    ctrl : CtrlConfig
        The controller's; its lanes must be the DXT's and its head dimension the DXT's.
    dxt : DxtConfig
        Each DXT's.
    slots : int
        Resident requests, 1 to :data:`MAX_SLOTS`.
    dxts : int
        DXTs, 1 to :data:`~hdl.rdxe.dxts.MAX_DXTS` (docs/rdxe.md 16.5); above 1 with one layer
        and one slot only. The DXE's KV groups and query heads are then ``dxts x`` the DXT's,
        DXT ``j`` holding groups ``j kv_groups ..`` and their heads.

    Members
    -------
    insn : In(stream.Signature(dxt_layout(ctrl)))
        From the controller's ``dxt``.
    done : Out(stream.Signature({"error": 1}))
        To the controller's ``dxt_done``; ``error`` when a DXT command was refused.
    ext : Out(stream.Signature(ext_layout(ctrl)))
        To the controller's ``ext``: chunk reads and result writes of rr rows, from a register
        (:func:`ext_stage`; a read's row comes :data:`READ_DELAY` cycles after it is offered).
    ext_data : In(stream.Signature({"data": ...}, always_ready=True))
        From the controller's ``ext_data``.
    table : In(stream.Signature(gemv_table_layout(dxt, gemvs, dxts), always_ready=True))
        Where GEMV ``index`` is in the WMEM and PPU tables (of DXT ``dxt``, and its share).
    wmem, ppu : the DXT's, for the host's loads (``ppu`` waits while an attention writes its
        score entry); with several DXTs with the ``dxt`` they go to (one port for all: the
        loads come once per layer, one row a cycle, off the token's path).
    identity, score_entry, pv_entry, score_scale, position : In
        The identity GEMV's table index, the PPU entries of Q.K^T and P.V, fp32 ``log2(e)``
        times one score step; ``position`` is loaded into the token count on ``restart``.
    restart : In(1)
        A new sequence: the next KV append is token ``position``.
    stride : In(stride_layout(ctrl))
        With ``ctrl.layers``, ``slots`` or ``dxts`` above 1: the layer stride (its ``kv_groups``
        and ``heads`` are the groups an append writes and the heads an attention runs; on
        several DXTs the layer's, at most the DXE's, from DXT 0's first group on).
    scales : In(stream.Signature(scale_layout(ctrl), always_ready=True))
        With ``ctrl.layers`` above 1, instead of ``score_scale``: each layer's, one a cycle.
    run : In(stream.Signature(slot_layout(dxt, slots), always_ready=True))
        With ``slots`` above 1, instead of ``position`` and ``restart``: the slot of the run the
        controller takes in the same cycle, and whether it starts over.

    Bad ``slots`` (1 to :data:`MAX_SLOTS`) or ``dxts`` (1 to 8; 1 with several layers or
    slots; a DXE's KV groups at most the stride's 64) raises ``TypeError``/``ValueError``
    naming it.
    """

    @staticmethod
    def check_slots(slots) -> int:
        """``slots`` if it is a count of resident requests the side can serve."""
        return integer(slots, "Slots", 1, MAX_SLOTS)

    def __init__(self, ctrl: CtrlConfig, dxt: DxtConfig, *, slots: int = 1, dxts: int = 1):
        self.slots = self.check_slots(slots)
        self.dxts = D = check_dxts(dxts)
        if not isinstance(ctrl, CtrlConfig):
            raise TypeError(f"DXT side controller configuration must be a CtrlConfig, not "
                            f"{ctrl!r}")
        if D > 1 and (ctrl.layers > 1 or self.slots > 1):
            raise ValueError(f"Several DXTs run one layer of one request: with {D} DXTs the "
                             f"layers and slots must be 1, not {ctrl.layers} and {self.slots}")
        self.dxt_cfg = check_config(dxt, DxtConfig, "DXT")
        if D * dxt.kv_groups > MAX_KV_GROUPS:
            raise ValueError(f"A DXE of {D} DXTs of {dxt.kv_groups} KV groups holds "
                             f"{D * dxt.kv_groups}; the layer stride counts at most "
                             f"{MAX_KV_GROUPS}")
        if ctrl.lanes != dxt.lanes or ctrl.head_dim != dxt.head_dim:
            raise ValueError(f"The controller's lanes and head dimension ({ctrl.lanes}, "
                             f"{ctrl.head_dim}) must be the DXT's ({dxt.lanes}, {dxt.head_dim})")
        self.ctrl = ctrl
        self.tiles = [Dxt(dxt) for _ in range(D)]
        self.dxt = self.tiles[0]
        cmd = {name: field.shape for name, field in command_layout(dxt)}
        sig = self.dxt.signature.members
        if D > 1:
            sig = {name: _addressed(sig[name], D) for name in ("wmem", "ppu")}
        super().__init__({
            "insn": In(stream.Signature(dxt_layout(ctrl))),
            "done": Out(stream.Signature(data.StructLayout({"error": 1}))),
            "ext": Out(stream.Signature(ext_layout(ctrl))),
            "ext_data": In(stream.Signature(data.StructLayout({"data": ctrl.data_bits}),
                                            always_ready=True)),
            "table": In(stream.Signature(gemv_table_layout(dxt, ctrl.space.gemvs, D),
                                         always_ready=True)),
            "wmem": sig["wmem"],
            "ppu": sig["ppu"],
            "identity": In(index_bits(ctrl.space.gemvs)),
            "score_entry": In(cmd["entry"]),
            "pv_entry": In(cmd["entry"]),
            **({"stride": In(stride_layout(ctrl))} if ctrl.layers > 1 or slots > 1 or D > 1
               else {}),
            **({"scales": In(stream.Signature(scale_layout(ctrl), always_ready=True))}
               if ctrl.layers > 1 else {"score_scale": In(FP32.width)}),
            **({"run": In(stream.Signature(slot_layout(dxt, slots), always_ready=True))}
               if slots > 1 else {"position": In(cmd["tokens"]), "restart": In(1)}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, ctrl = self.dxt_cfg, self.ctrl
        self.requests, self.asked = ext_stage(m, self)
        if self.dxts == 1:
            m.submodules.dxt = dxt = self.dxt
            tables = Array(Signal(gemv_table_layout(cfg, ctrl.space.gemvs), name=f"gemv{i}")
                           for i in range(ctrl.space.gemvs))
            with m.If(self.table.valid):
                m.d.sync += tables[self.table.payload.index].eq(self.table.payload)
            wiring.connect(m, wiring.flipped(self.wmem), dxt.wmem)
            io = _Io(m, self, dxt)
        else:
            layout = gemv_table_layout(cfg, ctrl.space.gemvs, self.dxts)
            for j, tile in enumerate(self.tiles):
                m.submodules[f"dxt{j}"] = tile
            # DXT j's tables (all DXTs' for one GEMV: ``tables[j][i]``).
            tables = Array(Array(Signal(layout, name=f"dxt{j}_gemv{i}")
                                 for i in range(ctrl.space.gemvs)) for j in range(self.dxts))
            load = self.table.payload
            with m.If(self.table.valid):
                m.d.sync += tables[load.dxt][load.index].eq(load)
            _route(m, self.wmem, [tile.wmem for tile in self.tiles])
            io = BroadcastIo(m, self, self.tiles, _CHUNKS)
        self._sequence(m, self.dxt, tables, io)
        return m

    def _entries(self, m, tables, pick):
        """The instruction's table entries, ``(gemv, shares)`` (``shares``: each DXT's, or
        ``None`` for one DXT): chosen by the table index one-hot (``pick``, registered with the
        instruction in Idle) in Dispatch and registered; no index decode in front of the
        choice, no lookup in front of the DXTs' command decode (``insn`` moves only in Idle).
        An index past the tables picks none: a zero entry."""
        entry = gemv_table_layout(self.dxt_cfg, self.ctrl.space.gemvs, self.dxts)

        def held(row, name):
            chosen = Value.cast(0)
            for i, table in enumerate(row):
                chosen = chosen | Mux(pick[i], Value.cast(table), 0)
            return data.View(entry, delay(m, chosen, 1, name=f"{name}_entry"))
        if self.dxts == 1:
            return held(tables, "gemv"), None
        return held(tables[0], "gemv"), [held(tables[j], f"share{j}") for j in range(self.dxts)]

    def _sequence(self, m, dxt, tables, io):
        """The instruction's DXT commands, one at a time (module notes)."""
        cfg = self.dxt_cfg
        insn, value = Signal.like(self.insn.payload.insn), Signal(FP32.width)
        tokens = Signal(command_layout(cfg)["tokens"].shape, name="tokens")
        layer = _Layer(m, self, tokens)
        slot = _Slot(m, self, tokens)
        index = Signal(range(max(cfg.heads, cfg.kv_groups) * self.dxts + 1))
        vac = Signal(range(cfg.vacs + 1))
        error = Signal()
        tiles = _Tiles(m, self)
        gemvs = self.ctrl.space.gemvs
        pick = Signal(gemvs, name="pick")
        gemv, shares = self._entries(m, tables, pick)
        # The command on offer, one-hot by kind (``_COMMANDS``): a register set as the FSM enters
        # a command's state and cleared as the command is taken, so that the command's fields and
        # its operands' start are chosen by flip-flops of their own, not by the side's state.
        offer = Signal(len(_COMMANDS), name="offer")
        ops = {kind: offer[k] for k, kind in enumerate(_COMMANDS)}
        # Whether any command is on offer, a register of its own: the offer's bits fan out to
        # every command field, and their OR reached the operands' enables late (session 33).
        offering = Signal(name="offering")
        taken = self._commands(m, tiles, io, ops, offering, _Command(
            insn=insn, value=value, gemv=gemv, shares=shares, tokens=tokens, layer=layer,
            index=index, group=slot.group(layer.group), head=slot.head(layer.head),
            ident=tables[self.identity] if self.dxts == 1 else tables[0][self.identity]))

        def go(state, kind=None):
            m.next = state
            m.d.sync += [offer.eq(0 if kind is None else 1 << _COMMANDS.index(kind)),
                         offering.eq(kind is not None)]

        def is_op(*names):
            return op_is(insn.op, *names)
        # The append's last value awaits its response: a register set on the way into that
        # wait, so that the token count's enable is not decoded from the side's state (whose
        # route to the count was 6 ns: docs/rdxe.md 14.4, session 37).
        appending = Signal(name="appending")
        with m.If(slot.start):
            m.d.sync += [tokens.eq(slot.first), layer.restart(slot.first)]
        with m.If(appending & io.resp):
            m.d.sync += [appending.eq(0), layer.appended()]
        rc_bits = rc_layout(cfg.vac_config())
        rc = data.View(rc_bits, value[:rc_bits.size])
        m.d.comb += self.done.payload.error.eq(error)
        ppus = _registered(m, self.tiles, "ppu")
        with m.FSM(name="side"):
            with m.State("Idle"):
                m.d.comb += self.insn.ready.eq(1)
                if self.dxts == 1:
                    wiring.connect(m, wiring.flipped(self.ppu), ppus[0])
                else:
                    _route(m, self.ppu, ppus)
                with m.If(self.insn.valid):
                    m.d.sync += [insn.eq(self.insn.payload.insn), value.eq(self.insn.payload.value),
                                 pick.eq(Cat(self.insn.payload.insn.table == i
                                             for i in range(gemvs))),
                                 index.eq(0), vac.eq(0), error.eq(0),
                                 layer.take(self.insn.payload), slot.take(self.insn.payload),
                                 *tiles.first()]
                    m.next = "Dispatch"
            with m.State("Dispatch"):
                with m.If(is_op("gemv", "gemv_norm")):
                    go("Gemv", "gemv")
                with m.Elif(is_op("kv_append")):
                    go("Key", "key")
                with m.Else():
                    m.next = "Score"
            with m.State("Gemv"):
                with m.If(taken):
                    go("Last")
            for name in ("Key", "Value"):
                with m.State(name):
                    with m.If(taken):
                        go(f"{name}Wait")
                        if name == "Value":
                            m.d.sync += appending.eq(index == layer.groups - 1)
                with m.State(f"{name}Wait"):
                    with m.If(io.resp):
                        m.d.sync += error.eq(error | io.error)
                        if name == "Key":
                            go("Value", "value")
                        else:
                            m.d.sync += [index.eq(index + 1), *tiles.next(cfg.kv_groups)]
                            with m.If(appending):
                                m.next = "Done"
                            with m.Else():
                                go("Key", "key")
            with m.State("Score"):
                # The score entry on every VAC of every DXT at once.
                for port in ppus:
                    m.d.comb += [port.valid.eq(1), port.payload.vac.eq(vac),
                                 port.payload.addr.eq(self.score_entry),
                                 port.payload.m.eq(rc.m), port.payload.shift.eq(rc.shift)]
                ready = Cat(port.ready for port in ppus).all()
                with m.If(ready):
                    m.d.sync += vac.eq(vac + 1)
                    with m.If(vac == cfg.vacs - 1):
                        go("Qk", "qk")
            with m.State("Qk"):
                with m.If(taken):
                    go("QkWait")
            with m.State("QkWait"):
                with m.If(io.resp):
                    m.d.sync += error.eq(error | io.error)
                    go("Pv", "pv")
            with m.State("Pv"):
                with m.If(taken):
                    go("PvWait")
            with m.State("PvWait"):
                with m.If(io.resp):
                    m.d.sync += [error.eq(error | io.error), index.eq(index + 1),
                                 *tiles.next(cfg.heads)]
                    m.next = "PvNext"
            with m.State("PvNext"):
                with m.If(index == layer.heads):
                    m.next = "Done"
                with m.Else():
                    go("Qk", "qk")
            with m.State("Last"):
                with m.If(io.resp):
                    m.d.sync += error.eq(io.error)
                    m.next = "Done"
            with m.State("Done"):
                # Not before the last result write has left the register towards ``ext``.
                m.d.comb += self.done.valid.eq(~self.ext.valid)
                with m.If(self.done.valid & self.done.ready):
                    m.next = "Idle"

    def _commands(self, m, tiles, io, ops, offering, c):
        """Offer the command of the kind on in ``ops`` (one-hot by :data:`_COMMANDS`; none: no
        command; ``offering``: a register equal to their OR) with its fields from the instruction's registers ``c``; start its operands as
        it is taken. Return what is true in the cycle the last DXT takes it."""
        cfg, cmd, shares, lanes = self.dxt_cfg, tiles.cmd, c.shares, self.ctrl.lanes
        rows = cfg.head_dim // lanes                     # rr rows of one head
        shift = index_bits(lanes) if lanes > 1 else 0    # a byte address to an rr row
        a, b = c.insn.a >> shift, c.insn.b >> shift
        on = Cat(t.outputs != 0 for t in shares) if shares else None
        taken = tiles.issue(m, offering, ops["gemv"], on)
        fields, starts = self._command_fields(tiles, c, a, b, rows)
        # Each field an AND-OR over the one-hot offer, not an If/Elif chain: its priority terms
        # fanned out to the command register across the engine (docs/rdxe.md 14.4).
        for name, _ in command_layout(cfg):
            choices = [(ops[kind], f[name]) for kind, f in fields.items() if name in f]
            if choices:
                m.d.comb += cmd[name].eq(one_hot_select(choices))
        with m.If(ops["gemv"]):
            # Each DXT its share (its own table); one that has none sits the GEMV out.
            for port, share in zip(tiles.ports, shares or ()):
                m.d.comb += [port.payload.outputs.eq(share.outputs),
                             port.payload.row.eq(share.row), port.payload.entry.eq(share.entry)]
        row, count, dst, keep = (one_hot_select([(ops[kind], s[k]) for kind, s in starts.items()])
                                 for k in range(4))
        firsts = shares and [Mux(ops["gemv"], t.first, 0) for t in shares]
        with m.If(taken & offering):
            m.d.sync += tiles.start(io, row, count, dst, keep, firsts)
        return taken

    def _command_fields(self, tiles, c, a, b, rows):
        """Each command kind's fields (``command_layout``'s names, others 0) and its operands'
        start ``(row, count, dst, keep)``: the chunks' first rr row and count, the results' first
        byte and whether they are kept."""
        cfg = self.dxt_cfg
        gemv = {"op": Mux(op_is(c.insn.op, "gemv_norm"), OPS.index("rmsnorm"), OPS.index("gemv")),
                "dest": DESTS.index("out"), "outputs": c.gemv.outputs, "chunks": c.gemv.chunks,
                "row": c.gemv.row, "entry": c.gemv.entry, "inv_k": c.gemv.inv_k, "eps": c.value}
        fields, starts = {"gemv": gemv}, {"gemv": (a, c.gemv.chunks, c.insn.dst, 1)}
        for kind, base in (("key", a), ("value", b)):
            fields[kind] = {"op": OPS.index("gemv"), "dest": DESTS.index(kind),
                            "outputs": cfg.head_dim, "chunks": c.ident.chunks,
                            "row": c.ident.row, "entry": c.ident.entry,
                            "head": tiles.at(c.group + c.index), "tokens": c.tokens}
            starts[kind] = (base + c.index * rows, rows, 0, 0)
        attend = {"head": tiles.at(c.head + c.index), "tokens": c.layer.context}
        fields["qk"] = {"op": OPS.index("qk"), "entry": self.score_entry, **attend}
        fields["pv"] = {"op": OPS.index("pv"), "entry": self.pv_entry, "scale": c.layer.scale,
                        **attend}
        starts["qk"] = (a + c.index * rows, rows, 0, 0)
        starts["pv"] = (0, 0, c.insn.dst + c.index * cfg.head_dim, 1)
        return fields, starts

def ext_stage(m, side):
    """The side's requests to the controller, through a register to ``side.ext`` (one place,
    taken when empty or as it leaves). Return the stream the operands drive, and ``asked``:
    high the cycle a read's row is on ``ext_data`` (the read left the register the cycle
    before), whoever else reads."""
    requests = stream.Signature(ext_layout(side.ctrl)).flip().create(path=("requests",))
    ext = side.ext
    stream_stage(m, requests, ext, requests.payload)
    asked = Signal(name="chunk_asked")
    m.d.sync += asked.eq(ext.valid & ext.ready & ~ext.payload.write)
    return requests, asked


def _registered(m, tiles, member: str) -> list:
    """A port a DXT for its stream ``member`` (``cmd`` or ``ppu``), each behind a register
    stage, so that the side's choices end at a flip-flop and not across the engine in every
    DXT: a command's fields chosen by the side's state (not in the DXT's command decode; a
    command reaches its DXT a cycle after the side offers it), the choice between the host's
    PPU loads and the score entry (not at every VAC's PPU memory; a write lands a cycle later,
    long before a command reads its entry). The stage's decision to take the next is made
    from a copy of its valid beside the side (``stream_stage(valid_copy=True)``)."""
    ports = []
    for j, tile in enumerate(tiles):
        sink = getattr(tile, member)
        port = stream.Signature(sink.payload.shape()).flip().create(path=(f"{member}{j}",))
        stream_stage(m, port, sink, port.payload, valid_copy=True)
        ports.append(port)
    return ports


def _route(m, port, targets):
    """Drive the DXTs' load ports ``targets`` from ``port``, each load to its ``dxt``; ready
    when every DXT is (not from the payload's ``dxt``: ``ready`` must not follow an idle
    payload, which may be X)."""
    names = [name for name, _ in targets[0].payload.shape()]
    for j, target in enumerate(targets):
        m.d.comb += [target.valid.eq(port.valid & (port.payload.dxt == j)),
                     *(getattr(target.payload, n).eq(getattr(port.payload, n)) for n in names)]
    m.d.comb += port.ready.eq(Cat(target.ready for target in targets).all())


class _Tiles:
    """The DXTs a command goes to (module notes). One DXT: its own ``cmd``. Several: a command
    every DXT sees, taken once by each DXT in ``on`` (``sent``: those that took it); a KV append
    or attention runs its groups or heads on the DXT that holds them (``target``), as that
    DXT's own group or head (``local``)."""

    def __init__(self, m, side: DxtSide):
        self.tiles, self.many = side.tiles, side.dxts > 1
        self.ports = _registered(m, self.tiles, "cmd")
        if not self.many:
            self.cmd = self.ports[0].payload
            return
        cfg, D = side.dxt_cfg, side.dxts
        self.cmd = Signal(command_layout(cfg), name="command")
        self.on = Signal(D, name="command_on")
        self.sent = Signal(D, name="command_sent")
        self.target = Signal(range(D + 1), name="target")
        self.local = Signal(range(max(cfg.heads, cfg.kv_groups) + 1), name="local")
        for port in self.ports:
            m.d.comb += port.payload.eq(self.cmd)

    def issue(self, m, valid, shared, on=None):
        """Offer a command while ``valid``: a GEMV's (``shared``) to the DXTs in ``on``, any
        other to the target; return what is true in the cycle the last of them takes it."""
        if not self.many:
            m.d.comb += self.ports[0].valid.eq(valid)
            return self.ports[0].ready
        D = len(self.ports)
        target = one_hot(self.target, D)
        m.d.comb += self.on.eq(Mux(valid, target if on is None else Mux(shared, on, target), 0))
        for j, port in enumerate(self.ports):
            m.d.comb += port.valid.eq(self.on[j] & ~self.sent[j])
        taken = Cat(~self.on[j] | self.sent[j] | p.ready
                    for j, p in enumerate(self.ports)).all()
        m.d.sync += self.sent.eq(Mux(taken, 0, self.sent | Cat(p.valid & p.ready
                                                                for p in self.ports)))
        return taken

    def start(self, io, row, count, dst, keep, firsts=None) -> list:
        """The operands' start (``io.start``), on the DXTs the command went to; DXT ``j``'s
        results from ``dst + firsts[j]``."""
        if not self.many:
            return io.start(row, count, dst, keep)
        return io.start(row, count, dst, keep, self.on, firsts)

    def at(self, number):
        """The group or head ``number`` of the DXE as the command gives it: on several DXTs the
        target DXT's own."""
        return self.local if self.many else number

    def first(self) -> list:
        return [self.target.eq(0), self.local.eq(0)] if self.many else []

    def next(self, per: int) -> list:
        """Statements that move on to the next group or head, ``per`` of them a DXT."""
        if not self.many:
            return []
        wrap = self.local == per - 1
        return [self.local.eq(Mux(wrap, 0, self.local + 1)),
                self.target.eq(Mux(wrap, self.target + 1, self.target))]


class _Layer:
    """The instruction's layer (module notes): its first KV group and query head, its counts of
    them, its score step, and the count of tokens its attention reads (``context``); for a DXE of
    one layer the DXT's whole counts, ``score_scale`` and the token count itself."""

    def __init__(self, m, side: DxtSide, tokens):
        cfg, ctrl = side.dxt_cfg, side.ctrl
        self.tokens, self.looped = tokens, ctrl.layers > 1
        if not self.looped:
            self.group, self.head = 0, 0
            self.groups, self.heads = cfg.kv_groups, cfg.heads
            # A slot's groups, not the DXT's; on several DXTs the layer's, DXT j holding groups
            # j kv_groups .. and their heads (as many DXTs as they fill).
            if side.slots > 1 or side.dxts > 1:
                self.groups, self.heads = side.stride.kv_groups, side.stride.heads
            self.scale, self.context = side.score_scale, tokens
            return
        self.taken = Signal(dxt_layout(ctrl), name="layer_of")
        self.group, self.head = self.taken.group, self.taken.head
        self.groups, self.heads = side.stride.kv_groups, side.stride.heads
        self.context = Signal.like(tokens, name="context")
        m.submodules.scales = table = Memory(shape=unsigned(FP32.width), depth=ctrl.layers,
                                             init=[])
        wr, rd = table.write_port(), table.read_port()
        m.d.comb += [wr.addr.eq(side.scales.payload.layer), wr.data.eq(side.scales.payload.value),
                     wr.en.eq(side.scales.valid), rd.addr.eq(self.taken.layer)]
        self.scale = rd.data                     # read a cycle after the instruction is taken

    def take(self, payload) -> list:
        return [self.taken.eq(payload)] if self.looped else []

    def restart(self, position) -> list:
        return [self.context.eq(position)] if self.looped else []

    def appended(self) -> list:
        """Statements at a KV append's end: its attention reads the token just written; the
        count moves on once every layer has appended it."""
        if not self.looped:
            return [self.tokens.eq(self.tokens + 1)]
        return [self.context.eq(self.tokens + 1),
                self.tokens.eq(Mux(self.taken.last, self.tokens + 1, self.tokens))]


class _Slot:
    """The run's request slot (module notes): where a run starts (``start``: the cycle the run is
    taken; ``first``: its token count), a token count a slot, and the slot's KV base added to
    the layer's first group and head; for a DXE of one slot ``restart``, ``position`` and no
    base."""

    def __init__(self, m, side: DxtSide, tokens):
        self.slotted = side.slots > 1
        if not self.slotted:
            self.start, self.first = side.restart, side.position
            return
        run, stride, layers = side.run, side.stride, side.ctrl.layers
        taken = dxt_layout(side.ctrl)
        self.base_group = Signal(taken["group"].shape, name="slot_group")
        self.base_head = Signal(taken["head"].shape, name="slot_head")
        self.first_group = Signal(taken["group"].shape, name="first_group")
        self.first_head = Signal(taken["head"].shape, name="first_head")
        m.submodules.counts = counts = Memory(shape=tokens.shape(), depth=side.slots, init=[])
        # The count of the run's slot is written back every cycle: it moves only while the run's
        # slot is held, and a run's slot is read the cycle it is taken, from the comb port.
        wr, rd = counts.write_port(), counts.read_port(domain="comb")
        current = Signal.like(run.payload.slot, name="slot")
        m.d.comb += [wr.addr.eq(current), wr.data.eq(tokens), wr.en.eq(1),
                     rd.addr.eq(run.payload.slot)]
        self.start = run.valid
        self.first = Mux(run.payload.restart, run.payload.position, rd.data)
        # slot x layers, then x the stride: products in logic (a multiplier block each on an
        # ECP5 otherwise), a row per bit of the narrower operand.
        slot_layers = logic_product(run.payload.slot, Const(layers, layers.bit_length()))
        with m.If(run.valid):
            m.d.sync += [current.eq(run.payload.slot),
                         self.base_group.eq(logic_product(slot_layers, stride.kv_groups)),
                         self.base_head.eq(logic_product(slot_layers, stride.heads))]

    def take(self, payload) -> list:
        """Statements at an instruction taken: its layer's first group and head moved by the
        slot's base (a register, so that the commands' group and head add no adder)."""
        if not self.slotted:
            return []
        return [self.first_group.eq(self.base_group + payload.group),
                self.first_head.eq(self.base_head + payload.head)]

    def group(self, layer_group):
        return self.first_group if self.slotted else layer_group

    def head(self, layer_head):
        return self.first_head if self.slotted else layer_head


class _Io:
    """A command's operands on ``ext``: chunk reads from an rr row on (through a small queue to
    the DXT's ``x``, credits for the reads in flight) and its GBUS words written as parts of rr
    rows from a byte address, or dropped; ``resp`` taken when it comes (``resp``, ``error``)."""

    def __init__(self, m, side: DxtSide, dxt: Dxt):
        lanes, ctrl = side.ctrl.lanes, side.ctrl
        rows = max(ctrl.rows(s) for s in Store)
        self.row = Signal(index_bits(rows), name="chunk_row")
        self.left = Signal(index_bits(dxt.cfg.chunks + 1), name="chunks_left")
        self.dst = Signal(index_bits(ctrl.space.rr_bytes + 1), name="result_byte")
        self.keep = Signal(name="write_results")
        fifo, skid, popped = chunk_queue(m, lanes, _CHUNKS)
        pending = Signal(range(_CHUNKS + 1))
        ext, word = side.requests, dxt.o
        # Results first (the DXT's GBUS never waits on a chunk), then a chunk read with a place.
        write = word.valid & self.keep
        read = ~write & (self.left != 0) & (pending < _CHUNKS)
        lg = index_bits(lanes)
        offset = self.dst[:lg]                        # the word's first byte in its row
        shift = offset * CODE_BITS
        m.d.comb += [
            ext.valid.eq(write | read),
            ext.payload.store.eq(Store.RR),
            ext.payload.write.eq(write),
            ext.payload.row.eq(Mux(write, self.dst >> lg, self.row)),
            ext.payload.data.eq(word.payload.data.as_value() << shift),
            ext.payload.mask.eq(word.payload.keep << offset),
            word.ready.eq(Mux(self.keep, ext.ready, 1)),
            fifo.w_data.eq(side.ext_data.payload.data),
            dxt.x.valid.eq(skid.o.valid), dxt.x.payload.data.as_value().eq(skid.o.payload),
            skid.o.ready.eq(dxt.x.ready),
        ]
        count_reads(m, side, fifo, self, read, popped, pending)
        with m.If(write & ext.ready):
            m.d.sync += self.dst.eq(self.dst + GBUS_BYTES)
        self.resp, self.error = dxt.resp.valid, dxt.resp.payload.error
        m.d.comb += dxt.resp.ready.eq(1)

    def start(self, row, count, dst, keep) -> list:
        """Statements that start a command's operands: ``count`` chunks from rr row ``row``,
        results from byte ``dst`` (``keep``) or dropped."""
        return [self.row.eq(row), self.left.eq(count), self.dst.eq(dst), self.keep.eq(keep)]
