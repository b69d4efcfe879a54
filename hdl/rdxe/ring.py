"""The ring of DXEs in RTL, first version (docs/rdxe.md 16.3): ``dxes`` engines
(:class:`~hdl.rdxe.dxe.Dxe`) in a line, a token of one of ``slots`` resident requests passing
DXE 0, 1, ..., S - 1 as its TB input rows (the residual, ``cos``, ``sin``: the looped program's
input regions, its output written in place).

Between two DXEs, before the first and after the last, a :class:`Link` holds one token's rows
and its slot, restart and position (a landing buffer). A :class:`Stage` runs each DXE: when the
DXE is free and its input link full, it copies the rows into the DXE's TB on ``ext`` (a row a
cycle), empties the link and starts the run with the token's slot; when ``done`` comes and the
output link is empty (or emptying in that cycle), it copies the rows out of the TB into that
link. So a token moves between DXEs while the next DXE computes; each DXE pays its copies on its
own ``ext`` (two TB banks in the controller would hide them, a later version).

The host writes a token's rows on ``input`` and reads the last DXE's on ``output``; it chooses
which token enters when (the dispatcher is the host's in this version). Each DXE's loading
ports (the engine's, but ``run`` and ``done``) are the host's on ``dxe[i]``; the host uses
``dxe[i].ext`` before tokens run (the stage takes the port while it copies).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..validate import index_bits, integer
from .ctrl import CtrlConfig, Store, done_layout, ext_layout, run_layout
from .dxe import Dxe, share_ext, slot_run_layout
from .dxtside import slot_layout
from .spec import DxtConfig

__all__ = ["Ring", "Link", "Stage", "MAX_DXES", "MAX_ROWS", "token_layout", "copy_cycles"]

#: Most DXEs a ring holds (the paper's Fig. 3 has 4).
MAX_DXES = 8
#: Most TB rows a token moves (SmolLM2's inputs are 40 rows of 16 lanes).
MAX_ROWS = 256
#: The DXE ports the stage drives (the rest are the host's).
_STAGE_PORTS = ("run", "done", "position", "restart")


def copy_cycles(rows: int) -> tuple[int, int]:
    """The copies' cycles for a token of ``rows`` TB rows: ``(in, out)``. ``in``: from the cycle
    a free DXE's stage sees its input link full to the run taken (the check, then a row a cycle:
    ``rows + 1``); the link is empty from that cycle on. ``out``: from the cycle after ``done``
    is taken to the output link full and the DXE free (a read a cycle, the last row's data a
    cycle later: ``rows + 1``)."""
    rows = integer(rows, "Token rows", 1, MAX_ROWS)
    return rows + 1, rows + 1


def token_layout(dxt: DxtConfig, slots: int) -> data.StructLayout:
    """What a link holds besides the rows: the run's ``slot``, ``restart`` and ``position``
    (:func:`~hdl.rdxe.dxtside.slot_layout`) and ``error`` (a DXE's run ended on an error)."""
    return data.StructLayout({**{name: f.shape for name, f in slot_layout(dxt, slots)},
                              "error": 1})


class Link(wiring.Component):
    """Hold one token's ``rows`` rows of ``width`` bits and its ``meta`` between two DXEs.

    Members
    -------
    write : In(data.StructLayout) ``en``, ``addr``, ``data``
        A row written (the upstream's copy), in the cycle after ``en``.
    fill : In(1)
        The token is in: ``full`` from the next cycle, ``meta`` taken from ``meta_in``.
    addr : In(index_bits(rows)), data : Out(width)
        A row read, in the same cycle (the downstream's copy).
    drain : In(1)
        The token is out: ``full`` low from the next cycle.
    full : Out(1), meta : Out(layout)

    Latency: none beyond the register of ``full`` and ``meta``.
    """

    def __init__(self, rows: int, width: int, layout: data.StructLayout):
        self.rows = integer(rows, "Token rows", 1, MAX_ROWS)
        super().__init__({
            "write": In(data.StructLayout({"en": 1, "addr": index_bits(rows), "data": width})),
            "fill": In(1), "meta_in": In(layout),
            "addr": In(index_bits(rows)), "data": Out(width),
            "drain": In(1), "full": Out(1), "meta": Out(layout),
        })
        self.width = width

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.rows, init=[])
        wr, rd = mem.write_port(), mem.read_port(domain="comb")
        m.d.comb += [wr.en.eq(self.write.en), wr.addr.eq(self.write.addr),
                     wr.data.eq(self.write.data), rd.addr.eq(self.addr), self.data.eq(rd.data)]
        with m.If(self.fill):
            m.d.sync += [self.full.eq(1), self.meta.eq(self.meta_in)]
        with m.Elif(self.drain):
            m.d.sync += self.full.eq(0)
        return m


class Stage(wiring.Component):
    """Run one DXE of the ring: copy a token in from its input link, run it, copy it out.

    Parameters
    ----------
    ctrl : CtrlConfig
    dxt : DxtConfig
    slots : int
    rows : tuple of int
        The TB rows a token moves, in the links' order.

    Members
    -------
    ext, run : Out (to the DXE's ``ext`` and ``run``); ``ext_data``, ``done`` : In (from it).
    position, restart : Out, with one slot: the DXE's, driven in the run's cycle.
    words : In(run_layout(ctrl))
        The words a run executes (``pc``, ``count``), held.
    src_full, src_meta, src_data : In; src_addr, src_drain : Out
        The input link's read side.
    dst_free : In(1)
        The output link is empty, or empties in this cycle.
    dst : Out(data.StructLayout) ``en``, ``addr``, ``data``; dst_fill : Out(1), dst_meta : Out
        The output link's write side.
    copying : Out(1)
        The stage drives the DXE's ``ext`` (the host's requests wait).

    Latency: :func:`copy_cycles`; the run's own (``done`` after ``run`` by the controller's
    model).
    """

    def __init__(self, ctrl: CtrlConfig, dxt: DxtConfig, slots: int, rows: tuple):
        self.ctrl, self.slots, self.rows = ctrl, slots, tuple(rows)
        meta = token_layout(dxt, slots)
        rbits = index_bits(len(self.rows))
        run = slot_run_layout(ctrl, dxt, slots) if slots > 1 else run_layout(ctrl)
        tokens = meta["position"].shape
        super().__init__({
            "ext": Out(stream.Signature(ext_layout(ctrl))),
            "ext_data": In(stream.Signature(data.StructLayout({"data": ctrl.data_bits}),
                                            always_ready=True)),
            "run": Out(stream.Signature(run)),
            "done": In(stream.Signature(done_layout(ctrl))),
            **({} if slots > 1 else {"position": Out(tokens), "restart": Out(1)}),
            "words": In(run_layout(ctrl)),
            "src_full": In(1), "src_meta": In(meta), "src_data": In(ctrl.data_bits),
            "src_addr": Out(rbits), "src_drain": Out(1),
            "dst_free": In(1),
            "dst": Out(data.StructLayout({"en": 1, "addr": rbits, "data": ctrl.data_bits})),
            "dst_fill": Out(1), "dst_meta": Out(meta),
            "copying": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R = len(self.rows)
        row_of = Memory(shape=self.ext.payload.row.shape(), depth=R, init=self.rows)
        m.submodules.row_of = row_of
        rows = row_of.read_port(domain="comb")
        index = Signal(range(R))
        meta = Signal.like(self.dst_meta)
        # The read whose row comes back on ext_data this cycle (a read's data is a cycle late).
        back, back_at = Signal(), Signal(range(R))
        ext, run = self.ext.payload, self.run.payload
        m.d.comb += [rows.addr.eq(index), ext.row.eq(rows.data), ext.store.eq(Store.TB),
                     ext.mask.eq((1 << self.ctrl.lanes) - 1), ext.data.eq(self.src_data),
                     self.src_addr.eq(index), self.dst_meta.eq(meta),
                     run.pc.eq(self.words.pc), run.count.eq(self.words.count),
                     self.dst.en.eq(back & self.ext_data.valid), self.dst.addr.eq(back_at),
                     self.dst.data.eq(self.ext_data.payload.data)]
        if self.slots > 1:
            m.d.comb += [run.slot.eq(meta.slot), run.restart.eq(meta.restart),
                         run.position.eq(meta.position)]
        else:
            m.d.comb += [self.restart.eq(self.run.valid & meta.restart),
                         self.position.eq(meta.position)]
        m.d.sync += back.eq(0)
        last = index == R - 1
        with m.FSM():
            with m.State("Idle"):
                with m.If(self.src_full):
                    m.d.sync += index.eq(0)
                    m.next = "Load"
            with m.State("Load"):
                m.d.comb += [self.copying.eq(1), self.ext.valid.eq(1), ext.write.eq(1)]
                with m.If(self.ext.ready):
                    m.d.sync += index.eq(index + 1)
                    with m.If(last):
                        m.d.comb += self.src_drain.eq(1)
                        m.d.sync += [meta.eq(self.src_meta), index.eq(0)]
                        m.next = "Run"
            with m.State("Run"):
                m.d.comb += self.run.valid.eq(1)
                with m.If(self.run.ready):
                    m.next = "Busy"
            with m.State("Busy"):
                m.d.comb += self.done.ready.eq(self.dst_free)
                with m.If(self.done.valid & self.dst_free):
                    m.d.sync += meta.error.eq(meta.error | self.done.payload.error)
                    m.next = "Store"
            with m.State("Store"):
                m.d.comb += [self.copying.eq(1), self.ext.valid.eq(1)]
                with m.If(self.ext.ready):
                    m.d.sync += [index.eq(index + 1), back.eq(1), back_at.eq(index)]
                    with m.If(last):
                        m.next = "Tail"
            with m.State("Tail"):
                m.d.comb += self.dst_fill.eq(1)
                m.next = "Idle"
        return m


class Ring(wiring.Component):
    """Run the tokens of several requests through ``dxes`` DXEs in a line (module notes).

    Parameters
    ----------
    ctrl : CtrlConfig or sequence of CtrlConfig
        The controller of every DXE, or one a DXE (they may differ in ``layers`` only: the links
        copy the same rows of the same memories).
    dxt : DxtConfig
        Every DXE's DXT; its lanes and head dimension must be the controller's.
    dxes : int
        DXEs, 1 to :data:`MAX_DXES`.
    slots : int
        Resident requests a DXE serves, 1 to 16 (its KV groups hold ``slots x layers`` layers'
        caches).
    rows : sequence of int
        The TB rows a token moves (the assembled program's input regions in rows), 1 to
        :data:`MAX_ROWS` distinct rows of the TB.

    Members
    -------
    input : In(stream.Signature({"data", slot, restart, position}))
        A token's rows in ``rows``' order, one a beat, each beat with the token's slot and
        whether the request starts over at ``position`` (the last beat's kept); taken while the
        first link is empty.
    output : Out(stream.Signature({"data", "slot", "error"}))
        The last DXE's rows of a token in ``rows``' order, its slot, and whether a run ended on
        an error; back-pressure holds the last DXE.
    words : In(run_layout(ctrl))
        The words every run executes (``pc``, ``count``), held (not ``program``: a
        SystemVerilog keyword).
    dxe : Out(...).array(dxes)
        Each DXE's ports but ``run`` and ``done`` (and ``position``, ``restart``): its loads and
        ``ext``, the host's while no token runs.

    Latency: a DXE's token costs :func:`copy_cycles` and its run; docs/rdxe.md 16.3 and
    :func:`sim.rdxe.ring.schedule` (``copy=``) give every start and finish.

    Raises ``TypeError``/``ValueError`` naming a bad parameter.
    """

    def __init__(self, ctrl, dxt: DxtConfig, *, dxes: int, slots: int, rows):
        self.dxes = integer(dxes, "DXE count", 1, MAX_DXES)
        ctrls = (ctrl,) * self.dxes if isinstance(ctrl, CtrlConfig) else tuple(ctrl)
        if len(ctrls) != self.dxes or not all(isinstance(c, CtrlConfig) for c in ctrls):
            raise TypeError(f"Controllers must be a CtrlConfig or {self.dxes} of them (one a "
                            f"DXE), not {ctrl!r}")
        for d, c in enumerate(ctrls):
            if c.space != ctrls[0].space or c.lanes != ctrls[0].lanes or \
                    c.head_dim != ctrls[0].head_dim or c.program_words != ctrls[0].program_words:
                raise ValueError(f"DXE {d}'s controller must be DXE 0's but for its layers, not "
                                 f"{c!r}")
        self.engines = [Dxe(c, dxt, slots=slots) for c in ctrls]
        self.ctrls, self.slots, self.cfg = ctrls, self.engines[0].slots, ctrls[0]
        tb_rows = self.cfg.rows(Store.TB)
        if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
            raise TypeError(f"Token rows must be a sequence of TB rows, not {rows!r}")
        self.rows = tuple(integer(r, "A token row", 0, tb_rows - 1) for r in rows)
        integer(len(self.rows), "Token row count", 1, MAX_ROWS)
        if len(set(self.rows)) != len(self.rows):
            raise ValueError(f"Token rows must be distinct, not {self.rows}")
        meta = token_layout(dxt, self.slots)
        width = self.cfg.data_bits
        host = self.engines[0].signature.members
        #: The names of each DXE's ports on ``dxe[i]`` (the host's).
        self.host_ports = tuple(name for name in host if name not in _STAGE_PORTS)
        super().__init__({
            "input": In(stream.Signature(data.StructLayout({
                "data": width, **{n: f.shape for n, f in slot_layout(dxt, self.slots)}}))),
            "output": Out(stream.Signature(data.StructLayout({
                "data": width, "slot": meta["slot"].shape, "error": 1}))),
            "words": In(run_layout(self.cfg)),
            "dxe": Out(wiring.Signature({name: host[name] for name in self.host_ports}))
            .array(self.dxes),
        })

    def elaborate(self, platform):
        m = Module()
        R, width = len(self.rows), self.cfg.data_bits
        meta = token_layout(self.engines[0].dxt_cfg, self.slots)
        links = [Link(R, width, meta) for _ in range(self.dxes + 1)]
        for i, link in enumerate(links):
            m.submodules[f"link{i}"] = link
        for d, engine in enumerate(self.engines):
            stage = Stage(self.ctrls[d], engine.dxt_cfg, self.slots, self.rows)
            m.submodules[f"dxe{d}"], m.submodules[f"stage{d}"] = engine, stage
            self._connect(m, d, engine, stage, links[d], links[d + 1])
        self._head(m, links[0])
        self._tail(m, links[-1], self.engines[-1])
        return m

    def _connect(self, m, d, engine, stage, src, dst):
        """Stage ``d`` between its links and its DXE; the host's ports to the DXE."""
        host = self.dxe[d]
        wiring.connect(m, stage.run, engine.run)
        wiring.connect(m, engine.done, stage.done)
        if self.slots == 1:
            m.d.comb += [engine.position.eq(stage.position), engine.restart.eq(stage.restart)]
        m.d.comb += [stage.words.eq(self.words),
                     stage.src_full.eq(src.full), stage.src_meta.eq(src.meta),
                     stage.src_data.eq(src.data), src.addr.eq(stage.src_addr),
                     src.drain.eq(stage.src_drain),
                     stage.dst_free.eq(~dst.full | dst.drain),
                     dst.write.eq(stage.dst), dst.fill.eq(stage.dst_fill),
                     dst.meta_in.eq(stage.dst_meta)]
        for name in self.host_ports:
            if name in ("ext", "ext_data"):
                continue
            port = getattr(host, name)
            if hasattr(port, "signature"):
                wiring.connect(m, wiring.flipped(port), getattr(engine, name))
            else:
                m.d.comb += getattr(engine, name).eq(port)
        # The stage's copies take the DXE's ext; the host's otherwise.
        share_ext(m, engine, (stage.ext, stage.ext_data), (host.ext, host.ext_data),
                  stage.copying, name=f"host_read{d}")

    def _head(self, m, link):
        """``input`` into the first link: a row a beat while it is empty."""
        R, beat = len(self.rows), Signal(range(len(self.rows)), name="head_beat")
        p = self.input.payload
        taken = self.input.valid & self.input.ready
        m.d.comb += [self.input.ready.eq(~link.full),
                     link.write.en.eq(taken), link.write.addr.eq(beat),
                     link.write.data.eq(p.data),
                     link.meta_in.slot.eq(p.slot), link.meta_in.restart.eq(p.restart),
                     link.meta_in.position.eq(p.position)]
        with m.If(taken):
            m.d.sync += beat.eq(_next(beat, R))
            with m.If(beat == R - 1):
                m.d.comb += link.fill.eq(1)

    def _tail(self, m, link, engine):
        """The last link onto ``output``: a row a beat, back-pressure honoured."""
        R, beat = len(self.rows), Signal(range(len(self.rows)), name="tail_beat")
        p = self.output.payload
        taken = self.output.valid & self.output.ready
        m.d.comb += [self.output.valid.eq(link.full), link.addr.eq(beat), p.data.eq(link.data),
                     p.slot.eq(link.meta.slot), p.error.eq(link.meta.error)]
        with m.If(taken):
            m.d.sync += beat.eq(_next(beat, R))
            with m.If(beat == R - 1):
                m.d.comb += link.drain.eq(1)


def _next(beat, rows: int):
    """``beat + 1``, or 0 after the last of ``rows``."""
    return Mux(beat == rows - 1, 0, beat + 1)
