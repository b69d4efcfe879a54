"""The DXE's layer controller: it fetches an assembled layer program (:mod:`hdl.rdxe.isa` words,
:mod:`golden.rdxe.assemble`) and runs it over the token buffer, the rr-SRAM, the scalar
registers and the constant memory on the units of docs/rdxe.md section 13 (docs/rdxe.md, 14.2).

Every memory is a row of ``lanes`` elements wide (TB and constants fp32 words, rr-SRAM INT8
bytes), and the assembler places every region and table on a row (``ProgramSpace.align =
lanes``), so that a beat of a vector op is one row of each operand::

    opcode                unit          reads a beat (slots)                      writes
    max                   quantizer     tb[a]                                     reg (the last M)
    quant, quant_table    quantizer     tb[a] (and const[table])                  rr[dst]
    dequant(_token)       GPPU          rr[a], const[table]                       tb[dst]
    add                   GPPU          tb[a]; tb[b]                              tb[dst]
    rope                  GPPU          tb[a]; cos; sin (halves of rows at b)     tb[dst]
    act_max, act          activation    rr[a], const[table]; rr[a+n], const[t+n]  reg / rr[dst]
    recip, eps, score     scalar path   (const[table] for score)                  reg
    gemv(_norm), kv_append, attend      handed out on ``dxt``, done on ``dxt_done``

The quantizer is the activation unit's second input (``GatedActivation(lanes, quantizer=True)``:
one core and one result queue for both, which never run at once here).

A memory has one read port, so a beat that needs two rows of one memory takes two cycles (add,
the activation) and RoPE's three. A beat's rows go into the issue register (no unit input sits
behind a block RAM's output), which hands them to the units in ``lanes / vector_lanes``
sub-beats of ``vector_lanes`` elements, a cycle each, while the next beat's rows are read; the
results are written back a sub-beat at a time (the memories' lane write enables). Vector ops
run at ``lanes / max(slots, sub-beats)`` elements a cycle, against a GEMV's thousands of cycles
a token, so narrow units cost little time and save most of the controller's logic.
Instructions run one after another: the next is fetched once every result of this one is
written, so an op reads what the one before wrote.

The memories are reached from outside on ``ext`` while the controller waits (idle, or while a
DXT op runs): the host loads the program, the constants and the token's inputs, and reads the
layer's output; the DXT side reads its GEMV input and writes its results there.

A DXE that holds ``layers`` layers (docs/rdxe.md 16.1) runs the words of a ``run`` once per layer,
a layer register counting: layer ``l`` adds ``l x stride.gemvs`` to a GEMV's table index and
``l x stride.const_words`` to every other op's constant address (the host's ``stride``,
:func:`golden.rdxe.assemble.stride`), and hands the DXT side its KV group and query head
offsets, ``l x stride.kv_groups`` and ``l x stride.heads``, with each DXT op.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.format import FP32
from ..pipeline import ResultQueue
from ..validate import index_bits, integer, power_of_two
from .act import GatedActivation
from .gppu import Gppu, GppuOp
from .isa import OPCODES, ProgramSpace, instruction_layout
from .quant import QuantCore
from .scalar import ScalarOp, ScalarUnit
from .spec import CODE_BITS, MAX_GROUP_SIZE, MAX_KV_GROUPS, VeConfig

__all__ = ["Store", "CtrlConfig", "DxeController", "run_layout", "done_layout", "dxt_layout",
           "ext_layout", "stride_layout", "DXT_OPS", "MAX_LAYERS", "LAYER_OVERHEAD", "op_is",
           "instruction_cycles", "run_cycles", "loop_cycles"]

_FP32 = FP32.width
#: The opcodes the DXTs run (handed out on ``dxt``).
DXT_OPS = ("gemv", "gemv_norm", "kv_append", "attend")
#: Opcodes by the unit that runs them.
_UNIT_OPS = {"quant": ("max", "quant", "quant_table"),
             "gppu": ("dequant", "dequant_token", "add", "rope"),
             "act": ("act_max", "act"),
             "scalar": ("recip", "eps", "score")}
#: Rows of one memory an op reads a beat (its slots); one for the others.
_SLOTS = {"add": 2, "rope": 3, "act_max": 2, "act": 2}
#: Most layers a DXE's controller loops over.
MAX_LAYERS = 64
#: Most KV groups and query heads of a DXE's DXT (``DxtConfig``'s ``kv_groups`` and
#: ``group_size x kv_groups`` ranges): the widths of the layer register's KV offsets.
_KV_GROUPS, _HEADS = MAX_KV_GROUPS, MAX_GROUP_SIZE * MAX_KV_GROUPS


def op_is(op, *names):
    """Whether the opcode value ``op`` (a field of an instruction word) is one of ``names``."""
    return Cat(*(op == OPCODES.index(n) for n in names)).any()


def _unit_of(op: str) -> str:
    return next(unit for unit, ops in _UNIT_OPS.items() if op in ops)


def _latency(cfg: "CtrlConfig", name: str) -> int:
    """Cycles from a beat of unit ``name`` (a key of :data:`_UNIT_OPS`) to its result at the
    unit's queue. The quantizer's beats take the activation unit's core directly."""
    if name == "scalar":
        return ScalarUnit.latency_of(cfg.ve)
    return {"quant": QuantCore, "gppu": Gppu,
            "act": GatedActivation}[name].latency_of(cfg.unit_lanes)


class Store(enum.Enum, shape=2):
    """A memory reached on ``ext``."""

    PROG = 0
    TB = 1
    RR = 2
    CONST = 3


@dataclass(frozen=True)
class CtrlConfig:
    """Check and hold the controller's parameters.

    Parameters
    ----------
    space : ProgramSpace
        The storage the program is assembled into; its ``align`` must equal ``lanes``.
    lanes : int
        Elements a beat (a memory row): a power of two from 2 to 64 (a RoPE pair shares a beat).
    head_dim : int
        The layer's head dimension (RoPE's table is ``head_dim / 2`` of cos, then of sin): a
        multiple of ``2 lanes`` up to 1024.
    program_words : int
        Instruction memory depth, 1 to 65,536.
    rc_bits : int
        Width of the score PPU's RC factor (the DXTs' ``rc_bits``), 16 to 30.
    layers : int
        Layers a ``run`` loops over, 1 to 64 (module notes). A DXE holds its layers stationary
        and every token passes all of them, so the count is the DXE's, not a run's.
    vector_lanes : int or None
        Lanes of the vector units (the GPPU, the activation unit and its quantizer): a power of
        two from 2 (a RoPE pair) to ``lanes``; ``None`` (default) for ``lanes``. A beat's row
        then goes to them in ``lanes / vector_lanes`` sub-beats, a cycle each (module notes):
        the units' logic shrinks by that factor and a vector op's beats take that many cycles.
    """

    space: ProgramSpace
    lanes: int = 4
    head_dim: int = 64
    program_words: int = 64
    rc_bits: int = 25
    layers: int = 1
    vector_lanes: int | None = None

    def __post_init__(self):
        if not isinstance(self.space, ProgramSpace):
            raise TypeError(f"Controller space must be a ProgramSpace, not {self.space!r}")
        power_of_two(self.lanes, "Controller lane count", 2, 64)
        if self.space.align != self.lanes:
            raise ValueError(f"The program space's rows (align {self.space.align}) must be the "
                             f"controller's lanes ({self.lanes})")
        integer(self.head_dim, "Head dimension", 2 * self.lanes, 1024)
        if self.head_dim % (2 * self.lanes):
            raise ValueError(f"Head dimension must be a multiple of 2 x lanes "
                             f"({2 * self.lanes}), not {self.head_dim}")
        integer(self.program_words, "Program words", 1, 1 << 16)
        VeConfig(rc_bits=self.rc_bits)
        integer(self.layers, "Layers", 1, MAX_LAYERS)
        if self.vector_lanes is not None:
            power_of_two(self.vector_lanes, "Vector unit lane count", 2, self.lanes)

    @property
    def unit_lanes(self) -> int:
        """Lanes of the vector units (``vector_lanes``, or ``lanes``)."""
        return self.lanes if self.vector_lanes is None else self.vector_lanes

    @property
    def sub_beats(self) -> int:
        """Sub-beats of a vector op's beat: ``lanes / unit_lanes``."""
        return self.lanes // self.unit_lanes

    @property
    def ve(self) -> VeConfig:
        return VeConfig(rc_bits=self.rc_bits)

    def rows(self, store: Store) -> int:
        """Rows of ``store``'s memory (instruction words for the program)."""
        if store == Store.PROG:
            return self.program_words
        words = {Store.TB: self.space.tb_words, Store.RR: self.space.rr_bytes,
                 Store.CONST: self.space.const_words}[store]
        return -(-words // self.lanes)

    @property
    def data_bits(self) -> int:
        """Width of ``ext``'s data: a TB or constant row, or an instruction word."""
        return max(_FP32 * self.lanes, instruction_layout(self.space).size)


#: Cycles of an instruction besides its beats and its unit: fetch (the program memory's read,
#: then the word registered), the operand rows' read, the result queue to ``valid``, and the
#: cycle in which the last result's count ends the instruction. (The issue register behind the
#: read is counted with the sub-beats: :func:`instruction_cycles`.)
_FETCH, _READ, _RETIRE = 2, 1, 1
#: Most rows of a memory kept in LUT RAM rather than a block RAM: every preset's program (64
#: words: 56 LUT RAM cells of 16 x 4 at ``small``) and ``small``'s other memories (its
#: constants' 48 rows were a block RAM until round 14, docs/rdxe.md 14.4).
_ROWS_IN_LUTS = 64
#: Cycles of a run besides its instructions: the ``run`` handshake, the check that ends it.
_RUN = 2
#: Cycles a layer of a looped run adds besides its own run's (:func:`run_cycles`): the state
#: that steps the layer register and its offsets and the one that jumps back take the place of
#: ``done`` and the next ``run``, so that ``L`` layers take ``L (P + 1)`` cycles from ``run`` to
#: ``run`` whether one run loops over them or the host runs each (``P`` a layer's run cycles).
LAYER_OVERHEAD = 1


def instruction_cycles(cfg: CtrlConfig, word: int, dxt_cycles: int = 0) -> int:
    """Cycles of one instruction, from its fetch to the next's, with every result taken as it
    comes: ``2 + slots + (beats - 1) max(slots, S) + S + 1 + unit latency + 2 + 1`` for a
    vector or scalar op, ``S`` its sub-beats (:attr:`CtrlConfig.sub_beats`; a scalar op is one
    beat of one); ``2 + dxt_cycles`` for a DXT op, ``dxt_cycles`` counted from the cycle
    ``dxt.valid`` rises to the cycle ``dxt_done`` is taken, both included. A beat's rows are
    read a slot a cycle while the issue register hands the beat before to the unit a sub-beat
    a cycle, so beats follow each other every ``max(slots, S)`` cycles."""
    f = instruction_layout(_check(cfg).space).from_bits(word)
    op = OPCODES[f.op]
    if op in DXT_OPS:
        return _FETCH + dxt_cycles
    unit = _unit_of(op)
    beats, subs = (1, 1) if unit == "scalar" else (f.n // cfg.lanes, cfg.sub_beats)
    slots = _SLOTS.get(op, 1)
    return (_FETCH + slots + (beats - 1) * max(slots, subs) + subs + _READ + _latency(cfg, unit)
            + ResultQueue.LATENCY + _RETIRE)


def run_cycles(cfg: CtrlConfig, words, dxt_cycles=()) -> int:
    """Cycles from a ``run`` taken to ``done.valid`` for the instructions ``words``, the DXT ops'
    own cycles ``dxt_cycles`` in order (:func:`instruction_cycles`)."""
    dxt = iter(dxt_cycles)
    return _RUN + sum(instruction_cycles(cfg, w, next(dxt) if OPCODES[
        instruction_layout(cfg.space).from_bits(w).op] in DXT_OPS else 0) for w in words)


def loop_cycles(layer_cycles) -> int:
    """Cycles from a ``run`` taken to ``done.valid`` for a run that loops over layers, each
    layer's :func:`run_cycles` in ``layer_cycles``: ``sum (P_l + LAYER_OVERHEAD) -
    LAYER_OVERHEAD`` (the last layer's ``+ 1`` is ``done``'s handshake)."""
    cycles = list(layer_cycles)
    return sum(cycles) + LAYER_OVERHEAD * (len(cycles) - 1)


def _check(cfg) -> CtrlConfig:
    if not isinstance(cfg, CtrlConfig):
        raise TypeError(f"Controller configuration must be a CtrlConfig, not {cfg!r}")
    return cfg


def run_layout(cfg: CtrlConfig) -> data.StructLayout:
    """Payload of ``run``: ``count`` instructions from ``pc``."""
    return data.StructLayout({"pc": index_bits(cfg.program_words),
                              "count": index_bits(cfg.program_words + 1)})


def done_layout(cfg: CtrlConfig) -> data.StructLayout:
    """Payload of ``done``: where the run stopped and whether it stopped on an error (a DXT op
    refused, or a run past the program memory)."""
    return data.StructLayout({"pc": index_bits(cfg.program_words + 1), "error": 1})


def dxt_layout(cfg: CtrlConfig) -> data.StructLayout:
    """Payload of ``dxt``: the instruction (its table index moved by the layer's offset) and the
    value of its ``r_in`` register (a GEMV's RMSNorm epsilon, or the score PPU's RC factor in its
    low bits); the ``layer``, whether it is the ``last``, and the layer's first KV ``group`` and
    query ``head`` (module notes; 0, 1, 0, 0 for a DXE of one layer)."""
    return data.StructLayout({"insn": instruction_layout(cfg.space), "value": _FP32,
                              "layer": index_bits(cfg.layers), "last": 1,
                              "group": index_bits(_KV_GROUPS), "head": index_bits(_HEADS)})


def stride_layout(cfg: CtrlConfig) -> data.StructLayout:
    """The layer stride the host holds on ``stride`` (:class:`golden.rdxe.assemble.Stride`): GEMV
    tables and constant words a layer takes, and its KV groups and query heads."""
    table = instruction_layout(cfg.space)["table"].shape
    return data.StructLayout({"gemvs": table, "const_words": table,
                              "kv_groups": index_bits(_KV_GROUPS + 1),
                              "heads": index_bits(_HEADS + 1)})


def ext_layout(cfg: CtrlConfig) -> data.StructLayout:
    """Payload of an ``ext`` request: ``store``, ``row``, ``write``; a write's ``data`` (a row,
    or an instruction word in the low bits) and ``mask`` (its lanes written; any nonzero for the
    program)."""
    rows = max(cfg.rows(s) for s in Store)
    return data.StructLayout({"store": Store, "row": index_bits(rows), "write": 1,
                              "mask": cfg.lanes, "data": cfg.data_bits})


class DxeController(wiring.Component):
    """Run a DXE layer program (module notes) from the instruction memory.

    Parameters
    ----------
    cfg : CtrlConfig

    Members
    -------
    run : In(stream.Signature(run_layout(cfg)))
        Start ``count`` instructions from ``pc``; taken while idle.
    done : Out(stream.Signature(done_layout(cfg)))
        One per run, when its last result is written (or at the DXT op that failed).
    dxt : Out(stream.Signature(dxt_layout(cfg)))
        A DXT op to run (``gemv``, ``gemv_norm``, ``kv_append``, ``attend``).
    dxt_done : In(stream.Signature(data.StructLayout({"error": 1})))
        The DXT op's end; ``error`` stops the run.
    eps : In(32)
        ``fp32(127**2 eps)``, RMSNorm's epsilon constant, held while a program runs.
    ext : In(stream.Signature(ext_layout(cfg)))
        A read or write of a memory row; taken while idle or while a DXT op runs.
    ext_data : Out(stream.Signature(data.StructLayout({"data": cfg.data_bits}),
                                    always_ready=True))
        A read's row, the cycle after the request was taken.
    stride : In(stride_layout(cfg))
        Only with ``layers`` above 1: the layer stride, held while a program runs.

    A vector op's beat takes a cycle for each row it reads of one memory (module notes); results
    are written as they come, and the next instruction is fetched the cycle after the last one
    is: :func:`instruction_cycles` and :func:`run_cycles` give every run's cycles exactly, and
    :func:`loop_cycles` a run of several layers. Bad ``cfg`` raises ``TypeError`` naming it.
    """

    def __init__(self, cfg: CtrlConfig):
        self.cfg = _check(cfg)
        super().__init__({
            "run": In(stream.Signature(run_layout(cfg))),
            "done": Out(stream.Signature(done_layout(cfg))),
            "dxt": Out(stream.Signature(dxt_layout(cfg))),
            "dxt_done": In(stream.Signature(data.StructLayout({"error": 1}))),
            "eps": In(_FP32),
            "ext": In(stream.Signature(ext_layout(cfg))),
            "ext_data": Out(stream.Signature(data.StructLayout({"data": cfg.data_bits}),
                                             always_ready=True)),
            **({"stride": In(stride_layout(cfg))} if cfg.layers > 1 else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        mems = self._memories(m)
        insn = Signal(instruction_layout(cfg.space))
        regs = Array(Signal(_FP32, name=f"reg{i}") for i in range(cfg.space.registers))
        units, results = self._units(m)
        ctl = _Control(m, cfg, insn)
        ctl.issue(m, mems, self._ready(units, ctl), regs[insn.r_in])
        self._beats(m, units, ctl)
        self._results(m, results, ctl, mems, regs)
        self._ext(m, mems, *self._sequence(m, ctl, insn, mems, regs))
        return m

    # --- parts ----------------------------------------------------------------------------------

    def _memories(self, m) -> dict:
        """The four memories, a read and a write port each (rows of ``lanes`` elements)."""
        cfg, mems = self.cfg, {}
        widths = {Store.PROG: (instruction_layout(cfg.space).size, None),
                  Store.TB: (_FP32 * cfg.lanes, _FP32), Store.RR: (CODE_BITS * cfg.lanes, 8),
                  Store.CONST: (_FP32 * cfg.lanes, _FP32)}
        for store, (width, grain) in widths.items():
            # A short memory in LUT RAM: its row then leaves a flip-flop, not a block RAM's
            # output without its register (5.8 ns on the ECP5), into the decode, the units and
            # ``ext_data`` (the DXT side's chunk store).
            lut = cfg.rows(store) <= _ROWS_IN_LUTS
            mem = Memory(shape=unsigned(width), depth=cfg.rows(store), init=[],
                         attrs={"ram_style": "distributed"} if lut else None)
            m.submodules[f"{store.name.lower()}_mem"] = mem
            mems[store] = (mem.read_port(), mem.write_port(granularity=grain))
        return mems

    def _units(self, m) -> tuple[dict, dict]:
        """The units; return their inputs by the names of :data:`_UNIT_OPS` and their results
        (``ve``: the quantizer's and the activation's, one core and one queue, docs/rdxe.md
        14.2: the two never run at once here, since instructions run one after another)."""
        cfg = self.cfg
        m.submodules.ve = ve = GatedActivation(cfg.unit_lanes, quantizer=True)
        m.submodules.gppu = gppu = Gppu(cfg.unit_lanes)
        m.submodules.scalar = scalar = ScalarUnit(cfg.ve)
        results = {"ve": ve.o, "gppu": gppu.o, "scalar": scalar.o}
        for o in results.values():
            m.d.comb += o.ready.eq(1)            # results are written as they come
        return {"quant": ve.q, "gppu": gppu.i, "act": ve.i, "scalar": scalar.i}, results

    @staticmethod
    def _ready(units, ctl):
        """The ``ready`` of the unit input the instruction's opcode runs on."""
        return Cat(*(ctl.is_(name) & i.ready for name, i in units.items())).any()

    def _beats(self, m, units, ctl):
        """Each unit's sub-beat from the issue register (``ctl.buf``: the rows of the beat's
        slots, ``live`` the last slot's and ``held`` the earlier ones', and its factor)."""
        cfg, buf = self.cfg, ctl.buf
        first, factor = ctl.buf_first, ctl.buf_factor
        q, g, a, s = (units[n] for n in ("quant", "gppu", "act", "scalar"))
        m.d.comb += [q.valid.eq(ctl.to_unit["quant"]), g.valid.eq(ctl.to_unit["gppu"]),
                     a.valid.eq(ctl.to_unit["act"]), s.valid.eq(ctl.to_unit["scalar"])]
        for n in range(cfg.unit_lanes):
            const = ctl.lane(buf["live", Store.CONST], n, _FP32)
            m.d.comb += [q.payload.x[n].eq(ctl.lane(buf["live", Store.TB], n, _FP32)),
                         q.payload.k[n].eq(Mux(ctl.op_is("quant"), factor,
                                               Mux(ctl.op_is("quant_table"), const, 0))),
                         a.payload.x[n].eq(ctl.lane(buf["held", Store.RR], n, CODE_BITS)),
                         a.payload.y[n].eq(ctl.lane(buf["live", Store.RR], n, CODE_BITS)),
                         a.payload.a[n].eq(ctl.lane(buf["held", Store.CONST], n, _FP32)),
                         a.payload.c[n].eq(const)]
        m.d.comb += [q.payload.first.eq(first), a.payload.first.eq(first),
                     a.payload.k.eq(Mux(ctl.op_is("act"), factor, 0))]
        self._gppu_beat(m, g, ctl)
        lane = ctl.insn.table[:index_bits(cfg.lanes)] if cfg.lanes > 1 else 0
        m.d.comb += [s.payload.x.eq(ctl.scalar_factor),
                     s.payload.c.eq(Mux(ctl.op_is("eps"), self.eps,
                                        buf["live", Store.CONST].word_select(lane, _FP32))),
                     s.payload.op.eq(Mux(ctl.op_is("recip"), ScalarOp.RECIP,
                                         Mux(ctl.op_is("eps"), ScalarOp.RMS_EPS,
                                             ScalarOp.SCORE_FACTOR)))]

    def _gppu_beat(self, m, g, ctl):
        """The GPPU's sub-beat: one member of its ``args`` union by opcode (RoPE's ``cos`` and
        ``sin``: the beat's half of their rows, which hold two beats' pairs)."""
        buf, args = ctl.buf, g.payload.args
        lanes, pairs = self.cfg.unit_lanes, self.cfg.unit_lanes // 2
        with m.If(ctl.op_is("add")):
            m.d.comb += g.payload.op.eq(GppuOp.RESIDUAL_ADD)
            for n in range(lanes):
                m.d.comb += [args.add.h[n].eq(ctl.lane(buf["held", Store.TB], n, _FP32)),
                             args.add.y[n].eq(ctl.lane(buf["live", Store.TB], n, _FP32))]
        with m.Elif(ctl.op_is("rope")):
            m.d.comb += g.payload.op.eq(GppuOp.ROPE)
            for n in range(lanes):
                m.d.comb += args.rope.x[n].eq(ctl.lane(buf["held", Store.TB], n, _FP32))
            for p in range(pairs):
                m.d.comb += [args.rope.cos[p].eq(ctl.lane(buf["held", "cos"], p, _FP32)),
                             args.rope.sin[p].eq(ctl.lane(buf["live", "sin"], p, _FP32))]
        with m.Else():
            m.d.comb += [g.payload.op.eq(Mux(ctl.op_is("dequant"), GppuOp.DEQUANTIZE,
                                             GppuOp.DEQUANTIZE_TOKEN)),
                         args.dequantize.top.eq(ctl.buf_factor)]
            for n in range(lanes):
                m.d.comb += [
                    args.dequantize.scale[n].eq(ctl.lane(buf["live", Store.CONST], n, _FP32)),
                    args.dequantize.codes[n].eq(ctl.lane(buf["live", Store.RR], n, CODE_BITS))]

    def _results(self, m, results, ctl, mems, regs):
        """Write each unit's results as they come: a sub-beat's lanes of the rows at ``dst`` on
        (the row's other lanes kept by the write enables), or the register."""
        cfg, insn, w = self.cfg, ctl.insn, ctl.written
        subs = cfg.sub_beats
        step = subs.bit_length() - 1
        last = ctl.left == 1
        row = (insn.dst >> ctl.shift) + (w >> step)
        enable = Signal(cfg.lanes)
        lanes = Const((1 << cfg.unit_lanes) - 1, cfg.lanes)
        m.d.comb += enable.eq(Array(lanes << g * cfg.unit_lanes for g in range(subs))[w[:step]]
                              if step else lanes)
        tb_w, rr_w = mems[Store.TB][1], mems[Store.RR][1]
        v, g, s = (results[n] for n in ("ve", "gppu", "scalar"))
        with m.If(v.valid):
            m.d.sync += [w.eq(w + 1), ctl.left.eq(ctl.left - 1)]
            with m.If(ctl.op_is("max", "act_max")):
                with m.If(last):
                    m.d.sync += regs[insn.r_out].eq(v.payload.max)
            with m.Else():
                m.d.comb += [rr_w.addr.eq(row), rr_w.en.eq(enable),
                             rr_w.data.eq(Cat(*[v.payload.codes.as_value()] * subs))]
        with m.If(g.valid):
            m.d.sync += [w.eq(w + 1), ctl.left.eq(ctl.left - 1)]
            m.d.comb += [tb_w.addr.eq(row), tb_w.en.eq(enable),
                         tb_w.data.eq(Cat(*[g.payload.y.as_value()] * subs))]
        with m.If(s.valid):
            m.d.sync += [w.eq(w + 1), ctl.left.eq(ctl.left - 1),
                         regs[insn.r_out].eq(s.payload.as_value()[:_FP32])]

    def _sequence(self, m, ctl, insn, mems, regs) -> tuple:
        """Fetch, run and hand out instructions; return the signal of the states in which
        ``ext`` reaches the memories, and its inverse (two registers)."""
        cfg = self.cfg
        pc = Signal(index_bits(cfg.program_words + 1))
        end = Signal.like(pc)
        error = Signal()
        # A register, set as the FSM enters Idle or Dxt and cleared as it leaves: ``ext``'s
        # choice of the memories' ports then starts at a flip-flop, not at the state's decode.
        waiting = Signal(init=1)
        # Its copy for ``ext.ready`` (inverted, so that synthesis keeps it apart): that one fans
        # out to the DXT side's request register across the engine, this one to the ports.
        shut = Signal(name="ext_shut")

        def wait(value: int) -> list:
            return [waiting.eq(value), shut.eq(1 - value)]
        prog_r = mems[Store.PROG][0]
        # The program's read row is ``pc`` whenever ``ext`` does not hold the port (Check's
        # enable decides the read): the row does not wait for the decision, which the program
        # in LUT RAM would read through.
        m.d.comb += prog_r.addr.eq(pc)
        loop = _Loop(m, cfg, getattr(self, "stride", None))
        m.d.comb += [self.done.payload.pc.eq(pc), self.done.payload.error.eq(error),
                     self.dxt.payload.insn.eq(insn), self.dxt.payload.value.eq(regs[insn.r_in]),
                     loop.payload(self.dxt.payload)]
        with m.FSM(name="sequence"):
            with m.State("Idle"):
                m.d.comb += self.run.ready.eq(1)
                with m.If(self.run.valid):
                    start, count = self.run.payload.pc, self.run.payload.count
                    over = start + count > cfg.program_words
                    m.d.sync += [pc.eq(start), end.eq(start + count), error.eq(over),
                                 loop.first(start), *wait(0)]
                    m.next = "Check"
            with m.State("Check"):
                with m.If(error | (pc == end)):
                    if cfg.layers == 1:
                        m.next = "Done"
                    else:                        # an error ends the whole run
                        with m.If(error | loop.last):
                            m.next = "Done"
                        with m.Else():
                            m.next = "Layer"
                with m.Else():
                    m.d.comb += prog_r.en.eq(1)
                    m.next = "Decode"
            if cfg.layers > 1:
                with m.State("Layer"):
                    m.d.sync += loop.step()
                    m.next = "Jump"
                with m.State("Jump"):
                    m.d.sync += pc.eq(loop.start)
                    m.next = "Check"
            with m.State("Decode"):
                m.d.sync += [insn.eq(prog_r.data), loop.moved(insn, prog_r.data),
                             ctl.decode(prog_r.data, loop.table(prog_r.data))]
                m.d.sync += ctl.restart()
                m.next = "Execute"
            with m.State("Execute"):
                with m.If(ctl.op_is(*DXT_OPS)):
                    m.d.comb += self.dxt.valid.eq(1)
                    with m.If(self.dxt.ready):
                        m.d.sync += wait(1)
                        m.next = "Dxt"
                with m.Else():                       # ``ctl.running`` since Decode
                    with m.If(ctl.refused):          # a unit refused a beat: stop here
                        m.d.sync += error.eq(1)
                    with m.If(error):
                        m.d.sync += ctl.set_running(0)
                        m.next = "Check"
                    with m.Elif(ctl.finished):
                        m.d.sync += [pc.eq(pc + 1), *ctl.set_running(0)]
                        m.next = "Check"
            with m.State("Dxt"):
                m.d.comb += self.dxt_done.ready.eq(1)
                with m.If(self.dxt_done.valid):
                    m.d.sync += [error.eq(self.dxt_done.payload.error), *wait(0)]
                    with m.If(~self.dxt_done.payload.error):
                        m.d.sync += pc.eq(pc + 1)
                    m.next = "Check"
            with m.State("Done"):
                m.d.comb += self.done.valid.eq(1)
                with m.If(self.done.ready):
                    m.d.sync += wait(1)
                    m.next = "Idle"
        return waiting, shut

    def _ext(self, m, mems, waiting, shut):
        """``ext`` drives the memories' ports while the controller waits."""
        req, taken = self.ext.payload, self.ext.valid & waiting
        store = Signal(Store)
        m.d.comb += self.ext.ready.eq(~shut)
        m.d.sync += [self.ext_data.valid.eq(taken & ~req.write), store.eq(req.store)]
        datas = {}
        for s, (rd, wr) in mems.items():
            datas[s] = rd.data
            here = taken & (req.store == s)
            with m.If(waiting):
                m.d.comb += [rd.addr.eq(req.row), rd.en.eq(here & ~req.write),
                             wr.addr.eq(req.row), wr.data.eq(req.data),
                             wr.en.eq(Mux(here & req.write,
                                          -1 if s == Store.PROG else req.mask, 0))]
        with m.Switch(store):
            for s, value in datas.items():
                with m.Case(s):
                    m.d.comb += self.ext_data.payload.data.eq(value)


class _Loop:
    """The layer register and its offsets (module notes): the constants of layer 0 in a DXE of
    one layer, so that it is today's controller."""

    def __init__(self, m, cfg: CtrlConfig, stride):
        self.cfg, self.stride = cfg, stride
        self.looped = cfg.layers > 1
        if not self.looped:
            self.last = 1
            return
        table = instruction_layout(cfg.space)["table"].shape
        self.start = Signal(index_bits(cfg.program_words), name="layer_start")
        self.layer = Signal(index_bits(cfg.layers), name="layer")
        self.gemvs = Signal(table, name="layer_gemvs")
        self.consts = Signal(table, name="layer_consts")
        self.group = Signal(index_bits(_KV_GROUPS), name="layer_group")
        self.head = Signal(index_bits(_HEADS), name="layer_head")
        self.last = Signal(name="last_layer")
        m.d.comb += self.last.eq(self.layer == cfg.layers - 1)

    def _offsets(self):
        return (self.gemvs, self.consts, self.group, self.head)

    def first(self, start) -> list:
        """Statements that start a run at layer 0 from the word ``start``."""
        if not self.looped:
            return []
        return [self.start.eq(start), self.layer.eq(0), *(o.eq(0) for o in self._offsets())]

    def step(self) -> list:
        """Statements that move to the next layer: the register and every offset by its stride."""
        s = self.stride
        return [self.layer.eq(self.layer + 1), self.gemvs.eq(self.gemvs + s.gemvs),
                self.consts.eq(self.consts + s.const_words),
                self.group.eq(self.group + s.kv_groups), self.head.eq(self.head + s.heads)]

    def table(self, word):
        """The fetched ``word``'s table as the layer uses it: a GEMV's table index moved by
        ``gemvs``, any other op's constant address by ``consts``."""
        f = data.View(instruction_layout(self.cfg.space), word)
        if not self.looped:
            return f.table
        moved = f.table + Mux(op_is(f.op, "gemv", "gemv_norm"), self.gemvs, self.consts)
        return moved[:len(f.table)]

    def moved(self, insn, word) -> list:
        """Statements that hold the fetched ``word``'s table in ``insn`` as the layer's
        (:meth:`table`)."""
        if not self.looped:
            return []
        return [insn.table.eq(self.table(word))]

    def payload(self, p) -> list:
        """``dxt``'s layer fields (:func:`dxt_layout`)."""
        if not self.looped:
            return [p.layer.eq(0), p.last.eq(1), p.group.eq(0), p.head.eq(0)]
        return [p.layer.eq(self.layer), p.last.eq(self.last), p.group.eq(self.group),
                p.head.eq(self.head)]


class _Control:
    """The issue side of a vector or scalar op: beat and slot counters, the read addresses of
    each slot, the rows read (``live`` at the ports, ``held`` from earlier slots), the issue
    register that hands a beat's rows to the unit a sub-beat a cycle, and the results
    written."""

    def __init__(self, m, cfg: CtrlConfig, insn):
        self.cfg, self.insn = cfg, insn
        self.shift = power_of_two(cfg.lanes, "Controller lane count", 2, 64)
        self.half = (cfg.head_dim // 2) >> self.shift           # RoPE's second half, in rows
        bits = index_bits(max(cfg.space.tb_words, cfg.space.rr_bytes) + 1)
        self.k, self.written = Signal(bits, name="beat"), Signal(bits, name="written")
        # ``a + k`` and ``b + k`` in rows, counted beside ``k``: no adder between the beat and
        # the memories' LUT-RAM read (docs/rdxe.md 14.4, session 32).
        self.a_row, self.b_row = Signal(bits, name="a_row"), Signal(bits, name="b_row")
        # So are the other rows a slot reads (``a + n + k``, ``t + k``, ``t + n + k``, RoPE's
        # ``b + j // 2`` and ``b + d / 2 + j // 2``): no adder between the instruction register
        # and the read (docs/rdxe.md 14.4, round 14).
        self.an_row, self.t_row, self.tn_row = (Signal(bits, name=n)
                                                for n in ("an_row", "t_row", "tn_row"))
        self.rope_row = (Signal(bits, name="rope_row"), Signal(bits, name="rope_row_hi"))
        self.s = Signal(2, name="slot")
        # Which row each memory reads at the slot, registered with the slot (round 16): the
        # opcode and the slot's compare no longer sit in front of the read rows' choice.
        self.picks = {name: Signal(name=f"pick_{name}")
                      for name in ("rope_lo", "rope_hi", "b", "second")}
        self.j = Signal(range(cfg.head_dim // cfg.lanes), name="head_pos")
        # The rows at the read ports: valid, slot, beat and head position of the read.
        self.rvalid, self.rs = Signal(name="read_valid"), Signal(2, name="read_slot")
        self.rk, self.rj = Signal.like(self.k, name="read_beat"), Signal.like(self.j)
        # In Execute with a unit's op: a register set at Decode, not the state's decode, which
        # reached the memories' read rows through the ports' choice (docs/rdxe.md 14.4, s. 34).
        self.running = Signal(name="units_running")
        # Its inverse in a flip-flop of its own for the memories' read ports (Yosys keeps the
        # two apart): the placer puts it beside the ports' row choice (round 13).
        self.ports_idle = Signal(init=1, name="ports_idle")
        # The opcode one-hot, registered with the word (no comparator on a decision path).
        self.onehot = Signal(len(OPCODES), name="op_onehot")
        self.slots = Signal(2)
        m.d.comb += self.slots.eq(1)
        for name, slots in _SLOTS.items():
            with m.If(self.op_is(name)):
                m.d.comb += self.slots.eq(slots)
        # The op's beats (a scalar op's one) and its results still to come (a beat's sub-beats
        # each), both set at decode: the last result and the op's end are compares of a
        # register with a constant.
        self.beats = Signal.like(self.k, name="beats")
        # ``k < beats`` in a register, set at decode and moved with ``k``: no comparator before
        # the decision to read (round 14).
        self.beats_to_read = Signal(name="beats_to_read")
        self.left = Signal(bits + cfg.sub_beats.bit_length(), name="results_left")
        # A beat's rows at the ports (the read of its last slot), and the issue register free
        # (empty, or handing out its last sub-beat): registers kept with the state they follow,
        # so that the issue register's load is an AND of flip-flops.
        self.beat = Signal(name="beat_valid")
        self.free = Signal(name="issue_free", init=1)
        self.finished = Signal()
        # The issue register: its sub-beat, whether it holds a beat, and that beat's first flag,
        # RoPE half and factor.
        self.sub = Signal(range(cfg.sub_beats), name="sub_beat")
        self.issuing, self.buf_first = Signal(name="issue_valid"), Signal(name="issue_first")
        # ``issuing`` and the op's unit, a register for each unit's ``valid``: the opcode's
        # one-hot reached a unit's credits through 6 ns of route (docs/rdxe.md 14.4, session 32).
        self.to_unit = {unit: Signal(name=f"issue_{unit}") for unit in _UNIT_OPS}
        self.buf_factor = Signal(_FP32, name="factor")
        # The scalar unit's copy, kept apart by its power-on value (as distinct_copies'): the
        # shared one reached the scalar multiplier through 2.4 ns of route (docs/rdxe.md 14.4,
        # session 38).
        self.scalar_factor = Signal(_FP32, name="scalar_factor", init=(1 << _FP32) - 1)
        self.refused = Signal(name="refused")

    def op_is(self, *names):
        return Cat(*(self.onehot[OPCODES.index(n)] for n in names)).any()

    def decode(self, word, table) -> list:
        """Statements that register the one-hot of the fetched ``word``'s opcode, its beats,
        the count of its results and the rows its slots read at beat 0 (with :meth:`restart`);
        ``table`` is its table as the layer uses it."""
        f = data.View(instruction_layout(self.cfg.space), word)
        scalar = op_is(f.op, *_UNIT_OPS["scalar"])
        step = self.cfg.sub_beats.bit_length() - 1
        a, b, n, t = (v >> self.shift for v in (f.a, f.b, f.n, table))
        beats = Mux(scalar, 1, n)
        return [self.onehot.eq(Const(1, len(OPCODES)) << f.op),
                *self.set_running(~op_is(f.op, *DXT_OPS)),
                self.a_row.eq(a), self.b_row.eq(b), self.an_row.eq(a + n),
                self.t_row.eq(t), self.tn_row.eq(t + n),
                self.rope_row[0].eq(b), self.rope_row[1].eq(b + self.half),
                self.beats.eq(beats), self.beats_to_read.eq(beats[:len(self.beats)] != 0),
                self.left.eq(Mux(scalar, 1, n << step))]

    def set_running(self, value) -> list:
        """Statements that set ``running`` and its copy for the read ports."""
        return [self.running.eq(value), self.ports_idle.eq(~Value.cast(value))]

    def is_(self, unit: str):
        return self.op_is(*_UNIT_OPS[unit])

    @staticmethod
    def lane(row, n: int, width: int):
        """Element ``n`` (of ``width`` bits) of the sub-beat the issue register hands out: its
        lowest lanes (it shifts down after each sub-beat)."""
        return row.word_select(n, width)

    def _slot(self, value) -> list:
        """Statements that make ``value`` the next slot and register its read rows' choice
        (slot 0 reads ``a`` and ``t`` whatever the op)."""
        at = {"rope_lo": (("rope",), 1), "rope_hi": (("rope",), 2), "b": (("add",), 1),
              "second": (("act_max", "act"), 1)}
        return [self.s.eq(value),
                *(self.picks[name].eq(0 if isinstance(value, int)
                                      else self.op_is(*ops) & (value == slot))
                  for name, (ops, slot) in at.items())]

    def restart(self) -> list:
        return [self.k.eq(0), *self._slot(0), self.j.eq(0), self.written.eq(0),
                self.rvalid.eq(0), self.beat.eq(0), self.issuing.eq(0), self.sub.eq(0),
                self.free.eq(1), *(v.eq(0) for v in self.to_unit.values())]

    def _issue_register(self, m, unit_ready, factor):
        """The issue register: loaded with a beat's rows when it is free (empty, or handing out
        its last sub-beat) and shifted down a sub-beat after each it hands out, so that a unit
        reads its lowest lanes, never a multiplexer; RoPE's ``cos`` and ``sin`` are the beat's
        half of their rows. Return whether it is free.

        The units take every sub-beat (their result queues are at full-rate depth and results
        are written as they come, docs/rdxe.md 14.2), so no unit's ``ready`` is on the issue
        path; one refused would set ``refused``, which ends the run with an error. ``refused``
        is a register (round 16): the units' queues sit across the die from the sequencer, and
        a refusal, which a correct program never causes, may stop the run a cycle later."""
        cfg, u = self.cfg, self.cfg.unit_lanes
        free, last_sub = self.free, Signal()
        target = Mux(self.is_("scalar"), 0, cfg.sub_beats - 1)
        m.d.comb += last_sub.eq(self.sub == target)
        m.d.sync += self.refused.eq(self.issuing & ~unit_ready)
        # ``free`` is ``~issuing | last_sub`` a cycle ahead: after a load the sub-beat is 0.
        with m.If(self.running & self.beat & free):
            m.d.sync += free.eq(target == 0)
        with m.Elif(self.issuing):
            m.d.sync += free.eq(last_sub | (self.sub + 1 == target))
        with m.Else():
            m.d.sync += free.eq(1)
        half = cfg.lanes // 2 * _FP32
        # (kind, store) -> the rows loaded; a sub-beat's bits of each.
        sources = {(kind, s): rows[s] for kind, rows in (("live", self.live), ("held", self.held))
                   for s in (Store.TB, Store.RR, Store.CONST)}
        sources["held", "cos"] = Mux(self.rj[0], self.held["cos"][half:], self.held["cos"][:half])
        sources["live", "sin"] = Mux(self.rj[0], self.live[Store.TB][half:],
                                     self.live[Store.TB][:half])
        step = {Store.TB: u * _FP32, Store.RR: u * CODE_BITS, Store.CONST: u * _FP32,
                "cos": u // 2 * _FP32, "sin": u // 2 * _FP32}
        self.buf = {(kind, s): Signal(len(value),
                                      name=f"issue_{kind}_{getattr(s, 'name', s).lower()}")
                    for (kind, s), value in sources.items()}
        with m.If(self.issuing):
            # Only a token's first sub-beat restarts a running maximum: its later sub-beats
            # carry the first beat's other lanes.
            m.d.sync += [self.sub.eq(Mux(last_sub, 0, self.sub + 1)), self.buf_first.eq(0)]
            if cfg.sub_beats > 1:
                m.d.sync += [reg.eq(reg >> step[s]) for (_, s), reg in self.buf.items()]
            with m.If(last_sub):
                m.d.sync += [self.issuing.eq(0), *(v.eq(0) for v in self.to_unit.values())]
        with m.If(self.running & self.beat & free):
            m.d.sync += [self.issuing.eq(1), self.buf_first.eq(self.rk == 0),
                         *(v.eq(self.is_(unit)) for unit, v in self.to_unit.items()),
                         self.buf_factor.eq(factor), self.scalar_factor.eq(factor)]
            m.d.sync += [self.buf[key].eq(value) for key, value in sources.items()]
        return free

    def issue(self, m, mems, unit_ready, factor) -> None:
        """Read a slot a cycle while the op has beats left and the issue register can take the
        beat at the ports."""
        cfg = self.cfg
        self.live = {s: mems[s][0].data for s in (Store.TB, Store.RR, Store.CONST)}
        self.held = {s: Signal.like(mems[s][0].data, name=f"held_{s.name.lower()}")
                     for s in (Store.TB, Store.RR, Store.CONST)}
        self.held["cos"] = Signal.like(mems[Store.TB][0].data, name="held_cos")
        stall = Signal()
        free = self._issue_register(m, unit_ready, factor)
        m.d.comb += stall.eq(self.beat & ~free)
        more = self.running & self.beats_to_read
        go = more & ~stall
        m.d.comb += self.finished.eq(~more & ~self.rvalid & (self.left == 0))
        # Earlier slots' rows, kept without the stall: a stalled beat's last slot is never
        # slot 0 of a beat that reads more, and a stalled port keeps its row.
        with m.If(self.rvalid & (self.rs == 0)):
            m.d.sync += [self.held[s].eq(self.live[s]) for s in self.live]
        with m.If(self.rvalid & (self.rs == 1)):
            m.d.sync += self.held["cos"].eq(self.live[Store.TB])
        with m.If(~stall):
            m.d.sync += [self.rvalid.eq(go), self.rs.eq(self.s), self.rk.eq(self.k),
                         self.rj.eq(self.j), self.beat.eq(go & (self.s == self.slots - 1))]
        with m.If(go):
            with m.If(self.s == self.slots - 1):
                wrap = self.j == cfg.head_dim // cfg.lanes - 1
                odd = self.j[0] if len(self.j) else 0     # (j + 1) // 2 - j // 2
                b = self.insn.b >> self.shift
                m.d.sync += [*self._slot(0), self.k.eq(self.k + 1),
                             self.beats_to_read.eq(self.k + 1 < self.beats),
                             self.j.eq(Mux(wrap, 0, self.j + 1)),
                             *(r.eq(r + 1) for r in (self.a_row, self.b_row, self.an_row,
                                                      self.t_row, self.tn_row)),
                             self.rope_row[0].eq(Mux(wrap, b, self.rope_row[0] + odd)),
                             self.rope_row[1].eq(Mux(wrap, b + self.half, self.rope_row[1] + odd))]
            with m.Else():
                m.d.sync += self._slot(self.s + 1)
        self._addresses(m, mems, ~stall)

    def _addresses(self, m, mems, enable):
        """Each memory's read row for the slot being read."""
        pick = self.picks
        tb = Mux(pick["rope_lo"], self.rope_row[0],
                 Mux(pick["rope_hi"], self.rope_row[1], Mux(pick["b"], self.b_row, self.a_row)))
        second = pick["second"]
        rr = Mux(second, self.an_row, self.a_row)
        const = Mux(self.op_is("score"), self.insn.table >> self.shift,
                    Mux(second, self.tn_row, self.t_row))
        for store, row in ((Store.TB, tb), (Store.RR, rr), (Store.CONST, const)):
            rd = mems[store][0]
            with m.If(~self.ports_idle):
                m.d.comb += [rd.addr.eq(row), rd.en.eq(enable)]
