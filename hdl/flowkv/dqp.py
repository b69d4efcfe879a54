"""FusedDQP: the FlowKV paper's decode projection engine, Q4NX dequantization fused with the
matrix-vector product (issue 42; paper Sec. 3.1.1 and 3.2.1, Eqs. 3, 14 and 15)."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith.fdot import FloatDot
from ..arith.format import BF16, FP32
from ..arith.fpadd import FloatAdder
from ..arith.tree import serial_tree, unit_combine
from ..pipeline import ResultQueue, delay
from .dqp_acc import NEG_ZERO32, GroupAccumulators
from .dqp_dequant import Dequantizer
from .dqp_inputs import ActivationBanks, RecordAssembler
from .dqp_issue import Issuer, tag_layout
from .dqp_spec import (DQPConfig, activation_layout, command_layout, dequantized_layout,
                       result_layout, weight_layout)

__all__ = ["FusedDQP"]


class FusedDQP(wiring.Component):
    """Compute ``y = W a`` from Q4NX weights streamed once, or dequantize them to bf16.

    A command (``cmd``) names ``K`` and ``N``. In GEMV, the weights arrive on ``q`` as Q4NX row
    records (20 bytes: one output row's 32 codes of one group, its bf16 scale and minimum),
    tile by tile (``m`` rows), in each tile group by group, in each group row by row; the
    activation arrives on ``a`` one group of 32 per tile and group, in the same order (the
    activation is sent again for every tile). Each cycle ``lanes`` codes are dequantized
    (``bf16(d q + m)``), multiplied by their inputs (bf16 x bf16 into fp32) and summed in the
    32-lane pairwise tree of the golden model; a row's group sum goes into its fp32
    accumulator, in group order. After a tile's last group its ``m`` results leave on ``y``, in
    row order, fp32 or bf16. In dequantization mode (``cmd.dequant``) the same records
    leave as bf16 weights on ``w``, ``lanes`` a beat, and ``a`` is not read. Bit for bit
    :func:`golden.flowkv_dqp.gemm` of :func:`golden.flowkv_dqp.dequantize`, and that
    dequantization.

    Parameters
    ----------
    lanes, tile, max_inputs, max_outputs
        See :class:`~hdl.flowkv.dqp_spec.DQPConfig`.

    Members
    -------
    cmd : In(stream.Signature(command_layout(cfg)))
        ``groups`` = ``K / 32 - 1``, ``tiles`` = ``N / m - 1``, ``dequant``, ``bf16``.
    q : In(stream.Signature(weight_layout(cfg)))
        The Q4NX record stream, ``5 lanes / 8`` bytes a beat.
    a : In(stream.Signature(activation_layout(cfg)))
        ``lanes`` bf16 inputs a beat, ``32 / lanes`` beats a group.
    y : Out(stream.Signature(result_layout(cfg)))
        One result per output row; ``last`` on the command's last.
    w : Out(stream.Signature(dequantized_layout(cfg)))
        Dequantization mode: ``lanes`` bf16 weights per weight beat; ``last`` on the last.

    Throughput one weight beat (``lanes`` weights) a cycle under continuous input, commands
    back to back; latency :attr:`DQPConfig.y_latency` from a row's last beat to its ``y``
    (:func:`~hdl.flowkv.dqp_spec.command_cycles`). Every stream honours back-pressure: a beat
    that gives a result waits for a place in its output queue.
    """

    def __init__(self, *, lanes: int, tile: int, max_inputs: int, max_outputs: int):
        self.cfg = cfg = DQPConfig(lanes=lanes, tile=tile, max_inputs=max_inputs,
                                   max_outputs=max_outputs)
        super().__init__({
            "cmd": In(stream.Signature(command_layout(cfg))),
            "q": In(stream.Signature(weight_layout(cfg))),
            "a": In(stream.Signature(activation_layout(cfg))),
            "y": Out(stream.Signature(result_layout(cfg))),
            "w": Out(stream.Signature(dequantized_layout(cfg))),
        })

    @property
    def latency(self) -> int:
        """Cycles from a row's last beat issued to its ``y``: :attr:`DQPConfig.y_latency`."""
        return self.cfg.y_latency

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.records = records = RecordAssembler(cfg)
        m.submodules.acts = acts = ActivationBanks(cfg)
        m.submodules.issuer = issuer = Issuer(cfg)
        m.submodules.dequant = dequant = Dequantizer(cfg.lanes)
        # For the ECP5 the multipliers' operand and piece registers are the blocks' own.
        m.submodules.dot = dot = FloatDot(BF16, cfg.lanes, FP32, block_registers=True)
        m.submodules.acc = acc = GroupAccumulators(cfg)
        m.submodules.y_queue = y_queue = ResultQueue(result_layout(cfg), cfg.y_depth)
        m.submodules.w_queue = w_queue = ResultQueue(dequantized_layout(cfg), cfg.w_depth)
        wiring.connect(m, wiring.flipped(self.q), records.i)
        wiring.connect(m, wiring.flipped(self.a), acts.a)
        wiring.connect(m, wiring.flipped(self.cmd), issuer.cmd)
        wiring.connect(m, records.o, issuer.rec)
        wiring.connect(m, y_queue.o, wiring.flipped(self.y))
        wiring.connect(m, w_queue.o, wiring.flipped(self.w))
        m.d.comb += [issuer.act_ready.eq(acts.ready), issuer.act_sel.eq(acts.sel),
                     acts.next.eq(issuer.act_next),
                     issuer.y_credit.eq(y_queue.can_issue), y_queue.issue.eq(issuer.y_issue),
                     issuer.w_credit.eq(w_queue.can_issue), w_queue.issue.eq(issuer.w_issue)]
        beat = issuer.o.payload
        m.d.comb += [dequant.i.valid.eq(issuer.o.valid), dequant.i.payload.codes.eq(beat.codes),
                     dequant.i.payload.scale.eq(beat.scale),
                     dequant.i.payload.minimum.eq(beat.minimum)]
        tags = tag_layout(cfg)
        # The tag travels beside the arithmetic. The activation bank is read a cycle before the
        # dequantized weights come out, into a register per lane (no copy of the inputs is
        # delayed, and the bank's choice reaches the dot product through a register), and
        # released in the cycle of that read.
        early = dequant.latency - 1
        read_valid = delay(m, issuer.o.valid, early, name="read_valid", reset=True)
        read_tag = data.View(tags, delay(m, beat.tag.as_value(), early, name="read_tag"))
        m.d.comb += [acts.read_sel.eq(read_tag.sel), acts.read_beat.eq(read_tag.beat),
                     acts.release.eq(read_valid & read_tag.release)]
        inputs = delay(m, acts.data.as_value(), 1, name="inputs")
        tag = data.View(tags, delay(m, read_tag.as_value(), 1, name="dq_tag"))
        weights = dequant.o
        m.d.comb += [w_queue.w.valid.eq(weights.valid & tag.dequant),
                     w_queue.w.payload.data.eq(weights.payload.data),
                     w_queue.w.payload.last.eq(tag.final),
                     dot.i.valid.eq(weights.valid & ~tag.dequant),
                     dot.i.payload.a.eq(weights.payload.data), dot.i.payload.b.eq(inputs)]
        tag = data.View(tags, delay(m, tag.as_value(), dot.latency, name="dot_tag"))
        # A record's beats: the serial tree continues the lanes' pairwise tree over them.
        group = serial_tree(m, dot.o.payload.y, dot.o.valid, tag.beat_end, max_count=cfg.beats,
                            combine=unit_combine(FloatAdder, FP32), identity=NEG_ZERO32,
                            name="beats")
        tag = data.View(tags, delay(m, tag.as_value(), group.latency, name="sum_tag"))
        m.d.comb += [acc.i.valid.eq(group.valid), acc.i.payload.value.eq(group.value),
                     acc.i.payload.row.eq(tag.row), acc.i.payload.first.eq(tag.first),
                     acc.i.payload.last.eq(tag.last), acc.i.payload.final.eq(tag.final),
                     acc.i.payload.bf16.eq(tag.bf16),
                     y_queue.w.valid.eq(acc.o.valid), y_queue.w.payload.eq(acc.o.payload)]
        return m
