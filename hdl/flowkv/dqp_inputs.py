"""FusedDQP's input buffers: Q4NX beats into row records, activation beats into two group banks."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.format import BF16
from ..pipeline import next_values
from .dqp_spec import (GROUP, RECORD_BITS, DQPConfig, activation_layout, check_config,
                       record_layout, weight_layout)

__all__ = ["RecordAssembler", "ActivationBanks"]


class RecordAssembler(wiring.Component):
    """Gather a row record's ``beats`` weight beats into one of two record registers.

    The record's scale and minimum come in its last bytes, after the codes, and every beat of the
    record needs them: the record is complete before its first beat is issued. While the issue
    stage walks one record (``beats`` cycles), the next one's beats come in and complete the
    other register: one beat a cycle in and out. The wide registers' write enables come from
    this component's own registers only: a beat is written wherever it would go whether or not
    ``i.valid`` is high (a free place, overwritten until a beat is taken), so neither the
    source's ``valid`` nor the reader's ``o.ready`` drives a wide enable; they move only the
    counters and pointers.

    Parameters
    ----------
    cfg : DQPConfig

    Members
    -------
    i : In(stream.Signature(weight_layout(cfg)))
        Q4NX bytes, ``5 lanes / 8`` a beat; ``i.ready`` is a register.
    o : Out(stream.Signature(record_layout()))
        The oldest complete record: ``o.valid`` from registers, ``o.payload`` a choice of two
        registers by a register.

    Latency one cycle from a record's last beat to ``o.valid``.
    """

    def __init__(self, cfg: DQPConfig):
        self.cfg = check_config(cfg)
        super().__init__({"i": In(stream.Signature(weight_layout(cfg))),
                          "o": Out(stream.Signature(record_layout()))})

    def elaborate(self, platform):
        m = Module()
        i, o, beats = self.i, self.o, self.cfg.beats
        slots = [Signal(RECORD_BITS, name=f"slot{n}", reset_less=True) for n in range(2)]
        held = [Signal(self.cfg.beat_bits, name=f"part{n}", reset_less=True)
                for n in range(beats - 1)]
        write_slot, read_slot = Signal(), Signal()
        count = Signal(range(3))
        beat = Signal(range(beats))
        beat_next, count_next = next_values(m, beat, count)
        last = beat == beats - 1
        # i.ready from its own register, a cycle ahead: the count that the slots' enables
        # read then drives no port, so it can sit by the slots.
        ready = Signal(init=1, name="ready")
        m.d.sync += ready.eq((beat_next != beats - 1) | (count_next != 2))
        m.d.comb += i.ready.eq(ready)
        taken = i.valid & ready
        write = taken & last
        read = o.valid & o.ready
        for n, part in enumerate(held):
            with m.If(beat == n):
                m.d.sync += part.eq(i.payload.data)
        with m.If(last & (count != 2)):
            # The slot at write_slot is free: it holds no complete record until count says so.
            for n, slot in enumerate(slots):
                with m.If(write_slot == n):
                    m.d.sync += slot.eq(Cat(*held, i.payload.data))
        with m.If(taken):
            m.d.comb += beat_next.eq(Mux(last, 0, beat + 1))
        with m.If(write):
            m.d.sync += write_slot.eq(~write_slot)
        with m.If(read):
            m.d.sync += read_slot.eq(~read_slot)
        m.d.comb += count_next.eq(count + write - read)
        m.d.comb += [o.valid.eq(count != 0), o.payload.eq(Mux(read_slot, slots[1], slots[0]))]
        return m


class ActivationBanks(wiring.Component):
    """Hold activation groups in two banks: one loads while the other is used.

    A bank goes through load (``beats`` beats of ``a``), issue (the issue stage uses its group
    for a tile's ``m`` rows; ``next`` passes to the other bank) and read (the dot product reads
    it ``act_hold`` cycles after the issue, beside the dequantized weights; ``release`` frees
    it). Groups are issued and released in the order they were loaded.

    Parameters
    ----------
    cfg : DQPConfig

    Members
    -------
    a : In(stream.Signature(activation_layout(cfg)))
        The activation, group by group; ``a.ready`` is a register.
    ready : Out(1)
        The issue bank holds a group not yet issued (from registers only).
    sel : Out(1)
        The issue bank (carried with each issue to :attr:`read_sel`).
    next : In(1)
        The issue bank's group is issued for the last time: the other bank is next.
    read_sel : In(1)
    read_beat : In(range(beats))
    data : Out(ArrayLayout(16, lanes))
        Inputs ``read_beat * lanes ..`` of bank ``read_sel``'s group (combinational).
    release : In(1)
        The oldest bank not yet released is read for the last time: it loads again.
    """

    def __init__(self, cfg: DQPConfig):
        self.cfg = check_config(cfg)
        beats = cfg.beats
        super().__init__({"a": In(stream.Signature(activation_layout(cfg))),
                          "ready": Out(1), "sel": Out(1), "next": In(1),
                          "read_sel": In(1), "read_beat": In(range(beats)),
                          "data": Out(data.ArrayLayout(BF16.width, cfg.lanes)),
                          "release": In(1)})

    def elaborate(self, platform):
        m = Module()
        cfg, a = self.cfg, self.a
        banks = [Signal(BF16.width * GROUP, name=f"bank{b}", reset_less=True) for b in range(2)]
        full, issued = Signal(2), Signal(2)
        load_sel, free_sel = Signal(), Signal()
        beat = Signal(range(cfg.beats))
        full_next, load_next = next_values(m, full, load_sel)
        # a.ready from its own register, a cycle ahead (as the record assembler's i.ready).
        ready = Signal(init=1, name="ready")
        m.d.sync += ready.eq(~full_next.bit_select(load_next, 1))
        m.d.comb += a.ready.eq(ready)
        loading = ~full.bit_select(load_sel, 1)
        # The loading bank is not full, so nothing reads it: its next beat is written whether
        # or not a.valid is high (the source's valid drives no wide enable).
        for b, bank in enumerate(banks):
            with m.If(loading & (load_sel == b)):
                m.d.sync += bank.word_select(beat, BF16.width * cfg.lanes).eq(a.payload)
        with m.If(a.valid & ready):
            m.d.sync += beat.eq(Mux(beat == cfg.beats - 1, 0, beat + 1))
            with m.If(beat == cfg.beats - 1):
                m.d.comb += [full_next.bit_select(load_sel, 1).eq(1), load_next.eq(~load_sel)]
        with m.If(self.next):
            m.d.sync += [issued.bit_select(self.sel, 1).eq(1), self.sel.eq(~self.sel)]
        with m.If(self.release):
            # The bank released is full and the one loading is not: never the same bank.
            m.d.comb += full_next.bit_select(free_sel, 1).eq(0)
            m.d.sync += [issued.bit_select(free_sel, 1).eq(0), free_sel.eq(~free_sel)]
        m.d.comb += [self.ready.eq(full.bit_select(self.sel, 1) & ~issued.bit_select(self.sel, 1)),
                     self.data.eq(Mux(self.read_sel, banks[1], banks[0])
                                  .word_select(self.read_beat, BF16.width * cfg.lanes))]
        return m
