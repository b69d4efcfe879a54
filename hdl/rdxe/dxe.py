"""The rDXE decoder engine (DXE) with one DXT: the layer controller (:mod:`hdl.rdxe.ctrl`) and the
DXT side (:mod:`hdl.rdxe.dxtside`) joined, so that a decoder layer runs from its program with
the host only loading the layer's tables and each token's inputs (docs/rdxe.md 14.3).

The host's memory requests (``ext``) reach the controller when the DXT side makes none: the host
uses ``ext`` while the DXE is idle, the DXT side while a DXT op runs, so the two never wait on
each other in a correct use; ``ext_data`` answers the host's reads only.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer
from .ctrl import CtrlConfig, DxeController, ext_layout
from .dxtside import DxtSide
from .spec import DxtConfig

__all__ = ["Dxe", "stride_value"]

#: The DXT side's host ports, passed through (``score_scale`` for one layer, ``scales`` for
#: several).
_SIDE_PORTS = ("table", "wmem", "ppu", "identity", "score_entry", "pv_entry", "score_scale",
               "scales", "position", "restart")


class Dxe(wiring.Component):
    """Run a decoder layer's program on one DXT (module notes).

    Parameters
    ----------
    ctrl : CtrlConfig
    dxt : DxtConfig
        Its lanes and head dimension must be the controller's.

    Members
    -------
    run, done, eps : the controller's (:class:`~hdl.rdxe.ctrl.DxeController`).
    ext : In(stream.Signature(ext_layout(ctrl)))
        The host's row reads and writes of the controller's memories (while the DXE is idle).
    ext_data : Out(stream.Signature({"data": ...}, always_ready=True))
        The row a host read asked for, the cycle after.
    table, wmem, ppu, identity, score_entry, pv_entry, score_scale, position, restart :
        the DXT side's (:class:`~hdl.rdxe.dxtside.DxtSide`).
    stride, scales : with ``ctrl.layers`` above 1 (instead of ``score_scale``): the layer
        stride, held, to both parts; each layer's score step, to the DXT side.

    Bad parameters raise ``TypeError``/``ValueError`` naming them (the parts' checks).
    """

    def __init__(self, ctrl: CtrlConfig, dxt: DxtConfig):
        self.side = DxtSide(ctrl, dxt)
        self.ctrl = DxeController(ctrl)
        self.cfg, self.dxt_cfg = ctrl, dxt
        members = self.ctrl.signature.members
        side = self.side.signature.members
        super().__init__({
            "run": members["run"], "done": members["done"], "eps": members["eps"],
            "ext": In(stream.Signature(ext_layout(ctrl))),
            "ext_data": Out(stream.Signature(data.StructLayout({"data": ctrl.data_bits}),
                                             always_ready=True)),
            **({"stride": members["stride"]} if ctrl.layers > 1 else {}),
            **{name: side[name] for name in _SIDE_PORTS if name in side},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ctrl, m.submodules.side = ctrl, side = self.ctrl, self.side
        wiring.connect(m, wiring.flipped(self.run), ctrl.run)
        wiring.connect(m, ctrl.done, wiring.flipped(self.done))
        wiring.connect(m, ctrl.dxt, side.insn)
        wiring.connect(m, side.done, ctrl.dxt_done)
        m.d.comb += ctrl.eps.eq(self.eps)
        if self.cfg.layers > 1:
            m.d.comb += [ctrl.stride.eq(self.stride), side.stride.eq(self.stride)]
        for name in _SIDE_PORTS:
            if name not in self.side.signature.members:
                continue
            port = getattr(self, name)
            if isinstance(port, Signal):
                m.d.comb += getattr(side, name).eq(port)
            else:
                wiring.connect(m, wiring.flipped(port), getattr(side, name))
        # The DXT side's requests first; the host's otherwise. ext_data answers the host's reads.
        host_read = Signal()
        m.d.sync += host_read.eq(self.ext.valid & self.ext.ready & ~self.ext.payload.write)
        m.d.comb += [side.ext_data.valid.eq(ctrl.ext_data.valid),
                     side.ext_data.payload.eq(ctrl.ext_data.payload),
                     self.ext_data.valid.eq(ctrl.ext_data.valid & host_read),
                     self.ext_data.payload.eq(ctrl.ext_data.payload)]
        with m.If(side.ext.valid):
            m.d.comb += [ctrl.ext.valid.eq(1), ctrl.ext.payload.eq(side.ext.payload),
                         side.ext.ready.eq(ctrl.ext.ready)]
        with m.Else():
            m.d.comb += [ctrl.ext.valid.eq(self.ext.valid), ctrl.ext.payload.eq(self.ext.payload),
                         self.ext.ready.eq(ctrl.ext.ready)]
        return m


def stride_value(ctrl: CtrlConfig, dxt: DxtConfig, gemvs: int, const_words: int,
                 kv_groups: int) -> dict:
    """The ``stride`` a host holds for a program whose layers take ``gemvs`` GEMV tables,
    ``const_words`` constant words and ``kv_groups`` KV groups each
    (:func:`golden.rdxe.assemble.stride`), on a DXE of ``ctrl.layers`` layers: a payload of
    :func:`~hdl.rdxe.ctrl.stride_layout` with the layer's query heads added. Raises
    ``TypeError``/``ValueError`` naming a stride that is not a count, whose layers do not fit
    the program space or the DXT's KV groups, or whose constants do not start on a row."""
    L = ctrl.layers
    space = ctrl.space
    for name, value, limit, what in (
            ("GEMV tables", gemvs, space.gemvs, "the program space's GEMV tables"),
            ("constant words", const_words, space.const_words, "the program space's constant "
                                                               "words"),
            ("KV groups", kv_groups, dxt.kv_groups, "the DXT's KV groups")):
        integer(value, f"Layer stride's {name}", 0, limit)
        if L * value > limit:
            raise ValueError(f"{L} layers of {value} {name} need {L * value}; {what} are "
                             f"{limit}")
    if const_words % ctrl.lanes:
        raise ValueError(f"Layer stride's constant words must be a multiple of the lanes "
                         f"({ctrl.lanes}), not {const_words}")
    return {"gemvs": gemvs, "const_words": const_words, "kv_groups": kv_groups,
            "heads": kv_groups * dxt.group_size}
