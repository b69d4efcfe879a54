"""The DXE as a stream player drives it (its board form, docs/board.md): the host's requests in
one ordered stream, and the engine's plain inputs held.

A host uses the DXE in order: it writes a token's inputs on ``ext``, starts a ``run``, waits for
``done``, then reads the results on ``ext`` (the engine takes ``ext`` while it is idle and also
while a DXT op runs, when the DXT side owns the memories' ports: a host request then would read
or write the middle of a token). A player that plays each sink on its own, as the board harness
does, cannot keep that order across two sinks, so :class:`HostSequencer` takes the host's
requests as one stream of items, each an ``ext`` request or a ``run``, and holds the next one
while a run is out. :class:`DxeBoard` is the engine behind it, with the plain inputs the host
sets once (the DXT side's fixed entries, RMSNorm's ``eps``; the layer stride) held at the values
given, and ``restart`` low: the harness resets the engine before each run, which puts the KV
cache's token count at 0, a restart at position 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from amaranth import Module, Mux, Shape, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from ..ports import ports_of
from .ctrl import CtrlConfig
from .dxe import Dxe
from .spec import DxtConfig

__all__ = ["HostItem", "host_layout", "HostSequencer", "DxeBoard"]


class HostItem(enum.Enum, shape=1):
    """What a host item is."""
    EXT = 0  #: an ``ext`` request (its ``ext`` field)
    RUN = 1  #: a ``run`` (its ``run`` field)


def host_layout(ext: data.Layout, run: data.Layout) -> data.StructLayout:
    """Payload of a host item: its ``kind``, and the ``ext`` request or the ``run`` it carries
    (the other field is ignored)."""
    return data.StructLayout({"kind": HostItem, "ext": ext, "run": run})


class HostSequencer(wiring.Component):
    """Play one ordered stream of host items into an engine's ``ext`` and ``run``, each item
    after the ``done`` of any run before it.

    Parameters
    ----------
    ext, run, done : data.Layout
        The engine's ``ext``, ``run`` and ``done`` payloads.

    Members
    -------
    i : In(stream.Signature(host_layout(ext, run)))
        Host items in order. An item is held while a run is out: from the cycle its run is
        taken until the cycle after its ``done`` is taken.
    ext, run : Out(stream.Signature(ext)), Out(stream.Signature(run))
        To the engine: the item's request, offered while no run is out.
    dxe_done : In(stream.Signature(done))
        The engine's ``done``.
    done : Out(stream.Signature(done))
        ``dxe_done``, unchanged (same cycle, its back-pressure passed back).

    No cycle of latency on any path; one item a cycle while the engine takes them.
    """

    def __init__(self, ext: data.Layout, run: data.Layout, done: data.Layout):
        super().__init__({"i": In(stream.Signature(host_layout(ext, run))),
                          "ext": Out(stream.Signature(ext)), "run": Out(stream.Signature(run)),
                          "dxe_done": In(stream.Signature(done)),
                          "done": Out(stream.Signature(done))})

    def elaborate(self, platform):
        m = Module()
        item = self.i.payload
        out = Signal()                      # a run taken and its done not yet taken
        is_run = item.kind == HostItem.RUN
        m.d.comb += [self.ext.payload.eq(item.ext), self.run.payload.eq(item.run),
                     self.ext.valid.eq(self.i.valid & ~out & ~is_run),
                     self.run.valid.eq(self.i.valid & ~out & is_run),
                     self.i.ready.eq(~out & Mux(is_run, self.run.ready, self.ext.ready))]
        wiring.connect(m, wiring.flipped(self.dxe_done), wiring.flipped(self.done))
        taken = self.run.valid & self.run.ready
        ended = self.done.valid & self.done.ready
        m.d.sync += out.eq(taken | (out & ~ended))
        return m


#: Plain inputs of the engine its board form drives low: ``restart`` (the harness's reset before
#: each run starts the KV cache over at 0) and ``position``, which only ``restart`` reads.
RESET_INPUTS = ("restart", "position")


class DxeBoard(wiring.Component):
    """The DXE (:class:`~hdl.rdxe.dxe.Dxe`) behind a :class:`HostSequencer`, its plain inputs
    held (module notes): what a stream player drives.

    Parameters
    ----------
    ctrl, dxt, slots, dxts
        The engine's (:class:`~hdl.rdxe.dxe.Dxe`).
    inputs : mapping of str to int
        The value each plain input of the engine is held at (``eps``, ``identity``,
        ``score_entry``, ``pv_entry``, and ``score_scale`` or ``stride`` as the engine has
        them): every one but ``restart`` and ``position``, which are held at 0, and no other
        name; each a non-negative integer that fits its port.

    Members
    -------
    host : In(stream.Signature(host_layout(...)))
        The host's ``ext`` requests and ``run`` items in order (:class:`HostSequencer`'s ``i``).
    done, ext_data, table, wmem, ppu (and ``scales`` with several layers)
        The engine's, unchanged.

    Latency and throughput: the engine's; the sequencer adds no cycle. Bad input: as the
    engine's; ``ext`` requests cannot reach it while a run is out. A missing, unknown or
    out-of-range ``inputs`` entry raises ``ValueError`` naming it, ``TypeError`` for a
    non-integer value.
    """

    def __init__(self, ctrl: CtrlConfig, dxt: DxtConfig, *, inputs: Mapping[str, int],
                 slots: int = 1, dxts: int = 1):
        self.dxe = Dxe(ctrl, dxt, slots=slots, dxts=dxts)
        self.held = self._check_inputs(inputs)
        members = self.dxe.signature.members
        self.sequencer = HostSequencer(*(getattr(self.dxe, name).payload.shape()
                                         for name in ("ext", "run", "done")))
        streams = {p.name for p in ports_of(self.dxe) if p.kind in ("sink", "source")}
        super().__init__({"host": In(stream.Signature(self.sequencer.i.payload.shape())),
                          **{name: members[name] for name in members
                             if name in streams and name not in ("ext", "run")}})

    def _check_inputs(self, inputs) -> dict[str, tuple[Signal, int]]:
        plain = {p.name: p.value for p in ports_of(self.dxe) if p.kind == "input"}
        wanted = set(plain) - set(RESET_INPUTS)
        if set(inputs) != wanted:
            raise ValueError(f"DxeBoard inputs (inputs) must name exactly the engine's plain "
                             f"inputs {', '.join(sorted(wanted))}, not {', '.join(sorted(inputs))}")
        held = {}
        for name, value in inputs.items():
            width = Shape.cast(plain[name].shape()).width
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"DxeBoard input {name} (inputs) must be an integer, not "
                                f"{value!r}")
            if not 0 <= value < 1 << width:
                raise ValueError(f"DxeBoard input {name} (inputs) must be 0 to {(1 << width) - 1}"
                                 f" (its {width} bits), not {value}")
            held[name] = (plain[name], value)
        for name in RESET_INPUTS:
            if name in plain:
                held[name] = (plain[name], 0)
        return held

    def elaborate(self, platform):
        m = Module()
        m.submodules.dxe, m.submodules.sequencer = dxe, seq = self.dxe, self.sequencer
        wiring.connect(m, wiring.flipped(self.host), seq.i)
        wiring.connect(m, seq.ext, dxe.ext)
        wiring.connect(m, seq.run, dxe.run)
        wiring.connect(m, dxe.done, seq.dxe_done)
        wiring.connect(m, seq.done, wiring.flipped(self.done))
        for name in self.signature.members:
            if name not in ("host", "done"):
                wiring.connect(m, getattr(dxe, name), wiring.flipped(getattr(self, name)))
        m.d.comb += [port.eq(value) for port, value in self.held.values()]
        return m
