"""The in-flash PE's w4a16 epilogue: ``t = s D + o X`` per group, then the row's groups summed."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.format import FP16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.fpmul import FloatMultiplier
from ..arith.tree import serial_tree, tree_levels, unit_combine
from ..pipeline import delay
from .lanes import NEG_ZERO32, result_layout
from .spec import PEConfig, pe_config

__all__ = ["GroupEpilogue"]


def _in(layout) -> In:
    return In(stream.Signature(layout, always_ready=True))


class GroupEpilogue(wiring.Component):
    """Finish a w4a16 row (docs/inflash_models.md 5.3) from its groups' code sums ``D``.

    While ``x`` loads, the sums of its beats (``xsum``, from the fp16 lanes) are summed per
    group by a serial tree into ``X[j]``, kept in a memory of ``max_cols / g`` words. Then per
    group ``t = fadd(fmul(s, D), fmul(o, X))`` (two ``FloatMultiplier(fp16, fp32, fp32)`` and a
    ``FloatAdder``), the header ``(s, o)`` taken from ``headers`` as ``D`` arrives, and a serial
    tree over the row's groups gives the row's result on ``groups``. It never stalls.

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    xsum : In(stream.Signature(result_layout(end=1), always_ready=True))
        The sums of ``x``'s beats; ``end`` on a group's last.
    restart : In(1)
        A w4a16 GEMV starts: its ``X`` are written from group 0 (the previous GEMV's are all
        used: it starts when the rows before it are out).
    dsum : In(stream.Signature(result_layout(row_end=1, final=1), always_ready=True))
        A group's ``D``, in row order; ``row_end`` on a row's last group.
    headers : In(stream.Signature(StructLayout({"scale": 16, "offset": 16})))
        The groups' headers in the same order; one is taken with each ``D`` and must be there
        by then (the gearbox sends a group's header with its first beat).
    groups : Out(stream.Signature(result_layout(final=1), always_ready=True))
        A row's result, :attr:`latency` cycles after its last ``D``.
    """

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "w4a16 epilogue")
        super().__init__({
            "xsum": _in(result_layout(end=1)),
            "restart": In(1),
            "dsum": _in(result_layout(row_end=1, final=1)),
            "headers": In(stream.Signature(data.StructLayout({"scale": 16, "offset": 16}))),
            "groups": Out(stream.Signature(result_layout(final=1), always_ready=True)),
        })

    @staticmethod
    def latency_of(cfg: PEConfig) -> int:
        """Return the cycles from a row's last ``D`` to its result in an epilogue of
        configuration ``cfg``, without building it: a multiplier, an adder and the tree over
        ``max_cols / g`` groups."""
        cfg = pe_config(cfg, "w4a16 epilogue")
        mul, add = FloatMultiplier.latency_of(FP16, FP32, FP32), FloatAdder.latency_of(FP32)
        return mul + add + tree_levels(cfg.max_groups) * add

    @property
    def latency(self) -> int:
        """Cycles from a row's last ``D`` to its result: :meth:`latency_of`."""
        return self.latency_of(self.cfg)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        adder = unit_combine(FloatAdder, FP32)
        xsum = serial_tree(m, self.xsum.payload.value, self.xsum.valid, self.xsum.payload.end,
                           max_count=cfg.group_size // cfg.fmacs, combine=adder,
                           identity=NEG_ZERO32, name="xsum")
        m.submodules.group_sums = gmem = Memory(shape=32, depth=cfg.max_groups, init=[])
        g_wr = gmem.write_port()
        g_rd = gmem.read_port(transparent_for=(g_wr,))
        g_wr_addr = Signal(range(cfg.max_groups))
        m.d.comb += [g_wr.addr.eq(g_wr_addr), g_wr.data.eq(xsum.value), g_wr.en.eq(xsum.valid)]
        with m.If(xsum.valid):
            m.d.sync += g_wr_addr.eq(g_wr_addr + 1)
        with m.If(self.restart):
            # After the previous GEMV's rows, so all its X are written; a float or integer GEMV
            # leaves the address alone (the last X may still be coming).
            m.d.sync += g_wr_addr.eq(0)
        d_valid = self.dsum.valid
        d = self.dsum.payload
        group = Signal(range(cfg.max_groups))       # group of the next D; X[group] is read
        next_group = Mux(d.row_end, 0, group + 1)
        m.d.comb += [g_rd.addr.eq(Mux(d_valid, next_group, group)),
                     self.headers.ready.eq(d_valid)]
        with m.If(d_valid):
            m.d.sync += group.eq(next_group)
        scale_mul, offset_mul = FloatMultiplier(FP16, FP32, FP32), FloatMultiplier(FP16, FP32, FP32)
        m.submodules.scale_mul, m.submodules.offset_mul = scale_mul, offset_mul
        m.d.comb += [scale_mul.i.valid.eq(d_valid),
                     scale_mul.i.payload.a.eq(self.headers.payload.scale),
                     scale_mul.i.payload.b.eq(d.value),
                     offset_mul.i.valid.eq(d_valid),
                     offset_mul.i.payload.a.eq(self.headers.payload.offset),
                     offset_mul.i.payload.b.eq(g_rd.data)]
        m.submodules.epilogue = epilogue = FloatAdder(FP32)
        m.d.comb += [epilogue.i.valid.eq(scale_mul.o.valid),
                     epilogue.i.payload.a.eq(scale_mul.o.payload.y),
                     epilogue.i.payload.b.eq(offset_mul.o.payload.y)]
        t_lat = scale_mul.latency + epilogue.latency
        t_row_end = delay(m, d.row_end, t_lat, name="t_row_end")
        t_final = delay(m, d.final, t_lat, name="t_final")
        groups = serial_tree(m, epilogue.o.payload.y, epilogue.o.valid, t_row_end,
                             max_count=cfg.max_groups, combine=adder, identity=NEG_ZERO32,
                             name="groups")
        m.d.comb += [self.groups.valid.eq(groups.valid),
                     self.groups.payload.value.eq(groups.value),
                     self.groups.payload.final.eq(delay(m, t_final, groups.latency,
                                                        name="groups_final"))]
        return m
