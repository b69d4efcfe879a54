"""The rDXE decoder engine (DXE) with one DXT or several: the layer controller
(:mod:`hdl.rdxe.ctrl`) and the DXT side (:mod:`hdl.rdxe.dxtside`) joined, so that a decoder
layer runs from its program with the host only loading the layer's tables and each token's
inputs (docs/rdxe.md 14.3).

The host's memory requests (``ext``) reach the controller when the DXT side makes none: the host
uses ``ext`` while the DXE is idle, the DXT side while a DXT op runs, so the two never wait on
each other in a correct use; ``ext_data`` answers the host's reads only.

A DXE of several ``slots`` (docs/rdxe.md 16.2) serves that many resident requests: its ``run``
also carries the token's request ``slot`` and ``restart``/``position`` (that slot starts over at
``position`` before the run); the controller takes ``pc`` and ``count``, the DXT side the rest.

A DXE of several ``dxts`` (docs/rdxe.md 16.5) runs each GEMV on all of them at once, each on its
share of the outputs, every chunk read once for all; it holds ``dxts`` x the DXT's KV groups,
DXT ``j`` the ``j``-th DXT's worth, and the layer's groups (``stride``, at most that) fill them
from DXT 0 on, every query head attending on its group's DXT (docs/rdxe.md 15: each group's
cache stored once, what VLINK gives). The host's loads name their DXT.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer
from .ctrl import CtrlConfig, DxeController, ext_layout, run_layout, stride_layout
from .dxtside import DxtSide, slot_layout
from .spec import DxtConfig

__all__ = ["Dxe", "stride_value", "slot_run_layout", "share_ext"]

#: The DXT side's host ports, passed through (``score_scale`` for one layer, ``scales`` for
#: several).
_SIDE_PORTS = ("table", "wmem", "ppu", "identity", "score_entry", "pv_entry", "score_scale",
               "scales", "position", "restart")


def slot_run_layout(ctrl: CtrlConfig, dxt: DxtConfig, slots: int) -> data.StructLayout:
    """Payload of a ``run`` with several ``slots``: the controller's (``pc``, ``count``) and the
    DXT side's (``slot``, ``restart``, ``position``: :func:`~hdl.rdxe.dxtside.slot_layout`)."""
    return data.StructLayout({**{name: f.shape for name, f in run_layout(ctrl)},
                              **{name: f.shape for name, f in slot_layout(dxt, slots)}})


class Dxe(wiring.Component):
    """Run a decoder layer's program on one DXT or several (module notes).

    Parameters
    ----------
    ctrl : CtrlConfig
    dxt : DxtConfig
        Its lanes and head dimension must be the controller's.
    slots : int
        Resident requests, 1 to 16 (1): the DXT's KV groups hold ``slots x layers`` layers'
        caches of ``stride.kv_groups`` groups (module notes).
    dxts : int
        DXTs, 1 to 8 (1); above 1 with one layer and one slot (module notes).

    Members
    -------
    run, done, eps : the controller's (:class:`~hdl.rdxe.ctrl.DxeController`); with ``slots``
        above 1 ``run`` is :func:`slot_run_layout`'s.
    ext : In(stream.Signature(ext_layout(ctrl)))
        The host's row reads and writes of the controller's memories (while the DXE is idle).
    ext_data : Out(stream.Signature({"data": ...}, always_ready=True))
        The row a host read asked for, the cycle after.
    table, wmem, ppu, identity, score_entry, pv_entry, score_scale, position, restart :
        the DXT side's (:class:`~hdl.rdxe.dxtside.DxtSide`); ``position`` and ``restart`` with
        one slot only.
    stride : with ``ctrl.layers``, ``slots`` or ``dxts`` above 1: the layer stride, held (to
        the controller with several layers, to the DXT side).
    scales : with ``ctrl.layers`` above 1 (instead of ``score_scale``): each layer's score step,
        to the DXT side.

    Bad parameters raise ``TypeError``/``ValueError`` naming them (the parts' checks).
    """

    def __init__(self, ctrl: CtrlConfig, dxt: DxtConfig, *, slots: int = 1, dxts: int = 1):
        self.side = DxtSide(ctrl, dxt, slots=slots, dxts=dxts)
        self.ctrl = DxeController(ctrl)
        self.cfg, self.dxt_cfg, self.slots = ctrl, dxt, self.side.slots
        self.dxts = self.side.dxts
        members = self.ctrl.signature.members
        side = self.side.signature.members
        super().__init__({
            "run": In(stream.Signature(slot_run_layout(ctrl, dxt, slots))) if slots > 1
            else members["run"],
            "done": members["done"], "eps": members["eps"],
            "ext": In(stream.Signature(ext_layout(ctrl))),
            "ext_data": Out(stream.Signature(data.StructLayout({"data": ctrl.data_bits}),
                                             always_ready=True)),
            **({"stride": In(stride_layout(ctrl))} if "stride" in side else {}),
            **{name: side[name] for name in _SIDE_PORTS if name in side},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ctrl, m.submodules.side = ctrl, side = self.ctrl, self.side
        if self.slots > 1:
            run = self.run
            m.d.comb += [ctrl.run.valid.eq(run.valid), run.ready.eq(ctrl.run.ready),
                         ctrl.run.payload.pc.eq(run.payload.pc),
                         ctrl.run.payload.count.eq(run.payload.count),
                         side.run.valid.eq(run.valid & ctrl.run.ready),
                         side.run.payload.slot.eq(run.payload.slot),
                         side.run.payload.restart.eq(run.payload.restart),
                         side.run.payload.position.eq(run.payload.position)]
        else:
            wiring.connect(m, wiring.flipped(self.run), ctrl.run)
        wiring.connect(m, ctrl.done, wiring.flipped(self.done))
        wiring.connect(m, ctrl.dxt, side.insn)
        wiring.connect(m, side.done, ctrl.dxt_done)
        m.d.comb += ctrl.eps.eq(self.eps)
        if self.cfg.layers > 1:
            m.d.comb += [ctrl.stride.eq(self.stride), side.stride.eq(self.stride)]
        elif "stride" in side.signature.members:
            m.d.comb += side.stride.eq(self.stride)
        for name in _SIDE_PORTS:
            if name not in self.side.signature.members:
                continue
            port = getattr(self, name)
            if isinstance(port, Signal):
                m.d.comb += getattr(side, name).eq(port)
            else:
                wiring.connect(m, wiring.flipped(port), getattr(side, name))
        # The DXT side's requests first; the host's otherwise.
        share_ext(m, ctrl, (side.ext, side.ext_data), (self.ext, self.ext_data), side.ext.valid)
        return m


def share_ext(m, target, first, second, first_wins, name="host_read"):
    """Put two requesters on ``target``'s ``ext``/``ext_data`` (a controller's or an engine's):
    ``first`` (its ``ext``, ``ext_data``) while ``first_wins``, ``second`` otherwise. A read's row
    comes a cycle later, so ``ext_data`` goes to ``second`` when its request was taken the cycle
    before, to ``first`` otherwise."""
    (ext_a, data_a), (ext_b, data_b) = first, second
    second_read = Signal(name=name)
    m.d.sync += second_read.eq(ext_b.valid & ext_b.ready & ~ext_b.payload.write)
    m.d.comb += [data_a.valid.eq(target.ext_data.valid & ~second_read),
                 data_a.payload.eq(target.ext_data.payload),
                 data_b.valid.eq(target.ext_data.valid & second_read),
                 data_b.payload.eq(target.ext_data.payload)]
    with m.If(first_wins):
        m.d.comb += [target.ext.valid.eq(ext_a.valid), target.ext.payload.eq(ext_a.payload),
                     ext_a.ready.eq(target.ext.ready)]
    with m.Else():
        m.d.comb += [target.ext.valid.eq(ext_b.valid), target.ext.payload.eq(ext_b.payload),
                     ext_b.ready.eq(target.ext.ready)]


def stride_value(ctrl: CtrlConfig, dxt: DxtConfig, gemvs: int, const_words: int,
                 kv_groups: int, slots: int = 1, dxts: int = 1) -> dict:
    """The ``stride`` a host holds for a program whose layers take ``gemvs`` GEMV tables,
    ``const_words`` constant words and ``kv_groups`` KV groups each
    (:func:`golden.rdxe.assemble.stride`), on a DXE of ``ctrl.layers`` layers and ``slots``
    resident requests (or ``dxts`` DXTs, whose KV groups the layer's fill from DXT 0 on): a
    payload of :func:`~hdl.rdxe.ctrl.stride_layout` with the layer's query heads added. Raises
    ``TypeError``/``ValueError`` naming a stride that is not a count, whose layers do not fit
    the program space, whose slots' layers do not fit the DXT's (or DXTs') KV groups, or whose
    constants do not start on a row."""
    L = ctrl.layers
    space = ctrl.space
    S = DxtSide.check_slots(slots)
    for name, value, limit, what, copies in (
            ("GEMV tables", gemvs, space.gemvs, "the program space's GEMV tables", 1),
            ("constant words", const_words, space.const_words, "the program space's constant "
                                                               "words", 1),
            ("KV groups", kv_groups, dxts * dxt.kv_groups,
             "the DXTs' KV groups" if dxts > 1 else "the DXT's KV groups", S)):
        integer(value, f"Layer stride's {name}", 0, limit)
        if copies * L * value > limit:
            of = f"{copies} slots x " if copies > 1 else ""
            raise ValueError(f"{of}{L} layers of {value} {name} need {copies * L * value}; "
                             f"{what} are {limit}")
    if const_words % ctrl.lanes:
        raise ValueError(f"Layer stride's constant words must be a multiple of the lanes "
                         f"({ctrl.lanes}), not {const_words}")
    return {"gemvs": gemvs, "const_words": const_words, "kv_groups": kv_groups,
            "heads": kv_groups * dxt.group_size}
