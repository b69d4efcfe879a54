"""FusedDQP's issue stage: which weight beat enters the arithmetic each cycle, and its tags."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.format import BF16
from ..pipeline import next_values
from .dqp_spec import CODE_BITS, DQPConfig, check_config, command_layout, record_layout

__all__ = ["Issuer", "tag_layout", "issue_layout"]


def tag_layout(cfg: DQPConfig) -> data.StructLayout:
    """What travels with a beat through the arithmetic.

    ``row`` (its accumulator), ``beat`` (within the record) and ``sel`` (its activation bank);
    ``first`` / ``last``: the tile's first / last group; ``beat_end``: the record's last beat;
    ``final``: the command's last beat; ``bf16``, ``dequant``: the command's; ``release``: the
    activation bank's last use (GEMV).
    """
    return data.StructLayout({"row": range(cfg.tile), "beat": range(cfg.beats), "sel": 1,
                              "first": 1, "last": 1, "beat_end": 1, "final": 1, "bf16": 1,
                              "dequant": 1, "release": 1})


def issue_layout(cfg: DQPConfig) -> data.StructLayout:
    """The issue register: the beat's ``lanes`` codes, the record's scale and minimum, the tag."""
    return data.StructLayout({"codes": CODE_BITS * cfg.lanes, "scale": BF16.width,
                              "minimum": BF16.width, "tag": tag_layout(cfg)})


class Issuer(wiring.Component):
    """Walk each command's records beat by beat and register one beat a cycle into the
    arithmetic.

    A command is ``N / m`` tiles of ``K / 32`` groups of ``m`` records (rows), each record
    ``beats`` beats. A beat is issued when a command is active, its record is assembled, in
    GEMV its group's activation bank is ready, and a beat that gives a result has a credit of
    its result queue (``w``: every beat in dequantization; ``y``: a record's last beat in the
    tile's last group). The next command is taken in the cycle of the last beat's issue.

    Parameters
    ----------
    cfg : DQPConfig

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
    rec : In(stream.Signature(record_layout()))
        The records; ``rec.ready`` in the cycle a record's last beat is issued.
    act_ready : In(1)
        The activation bank of the tile's group is loaded.
    act_sel : In(1)
        That bank.
    act_next : Out(1)
        The group's last beat is issued (its bank's issue ends).
    y_credit, w_credit : In(1)
        The result queues have a place.
    y_issue, w_issue : Out(1)
        A beat that gives a result is issued (takes a credit).
    o : Out(stream.Signature(issue_layout(cfg), always_ready=True))
        The issue register: one cycle after the decision.
    """

    def __init__(self, cfg: DQPConfig):
        self.cfg = check_config(cfg)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "rec": In(stream.Signature(record_layout())),
            "act_ready": In(1), "act_sel": In(1), "act_next": Out(1),
            "y_credit": In(1), "w_credit": In(1), "y_issue": Out(1), "w_issue": Out(1),
            "o": Out(stream.Signature(issue_layout(cfg), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        active = Signal()
        held = Signal(command_layout(cfg))
        beat = Signal(range(cfg.beats))
        row = Signal(range(cfg.tile))
        group = Signal.like(held.groups)
        tile = Signal.like(held.tiles)
        # The tests of the counters are registers, worked out from the counters' next values:
        # the issue decision starts from flip-flops (docs/flowkv.md, FusedDQP, Fmax).
        beat_end, row_end, first_group, last_group, last_tile = (
            Signal(name=n, init=int(i)) for n, i in (("beat_end", cfg.beats == 1),
                                                     ("row_end", cfg.tile == 1),
                                                     ("first_group", 1), ("last_group", 1),
                                                     ("last_tile", 1)))
        rows_end = beat_end & row_end
        tile_end = rows_end & last_group
        command_end = tile_end & last_tile
        gives_y = last_group & beat_end
        gemv_ok = self.act_ready & (~gives_y | self.y_credit)
        go = active & self.rec.valid & Mux(held.dequant, self.w_credit, gemv_ok)
        load = self.cmd.valid & self.cmd.ready
        m.d.comb += [self.rec.ready.eq(go & beat_end),
                     self.act_next.eq(go & ~held.dequant & rows_end),
                     self.y_issue.eq(go & ~held.dequant & gives_y),
                     self.w_issue.eq(go & held.dequant),
                     self.cmd.ready.eq(~active | (go & command_end))]
        beat_n, row_n, group_n, tile_n = next_values(m, beat, row, group, tile)
        held_n = Signal.like(held, name="held_next")
        m.d.comb += held_n.eq(held)
        m.d.sync += held.eq(held_n)
        with m.If(go):
            # Each counter wraps to 0 at its end: a command starts from zeros.
            m.d.comb += beat_n.eq(Mux(beat_end, 0, beat + 1))
            with m.If(beat_end):
                m.d.comb += row_n.eq(Mux(row_end, 0, row + 1))
            with m.If(rows_end):
                m.d.comb += group_n.eq(Mux(last_group, 0, group + 1))
            with m.If(tile_end):
                m.d.comb += tile_n.eq(Mux(command_end, 0, tile + 1))
            with m.If(command_end):
                m.d.sync += active.eq(0)
        with m.If(load):
            m.d.comb += held_n.eq(self.cmd.payload)
            m.d.sync += active.eq(1)
        m.d.sync += [beat_end.eq(beat_n == cfg.beats - 1), row_end.eq(row_n == cfg.tile - 1),
                     first_group.eq(group_n == 0), last_group.eq(group_n == held_n.groups),
                     last_tile.eq(tile_n == held_n.tiles)]
        o, record = self.o, self.rec.payload
        tag = o.payload.tag
        m.d.sync += o.valid.eq(go)
        m.d.sync += [o.payload.codes.eq(record.codes.word_select(beat, CODE_BITS * cfg.lanes)),
                     o.payload.scale.eq(record.scale), o.payload.minimum.eq(record.minimum),
                     tag.row.eq(row), tag.beat.eq(beat), tag.sel.eq(self.act_sel),
                     tag.first.eq(first_group), tag.last.eq(last_group),
                     tag.beat_end.eq(beat_end), tag.final.eq(command_end),
                     tag.bf16.eq(held.bf16), tag.dequant.eq(held.dequant),
                     tag.release.eq(~held.dequant & rows_end)]
        return m
