"""FusedDQP's accumulators: ``y[r] += s_g`` per output row of the tile, then the result format."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.convert import FloatConvert
from ..arith.format import BF16, FP32
from ..arith.fpadd import FloatAdder
from ..pipeline import delay
from .dqp_spec import DQPConfig, check_config

__all__ = ["GroupAccumulators", "NEG_ZERO32"]

#: fp32 ``-0``: ``fadd(-0, s) = s`` for every group sum (the tree gives no subnormal and only
#: the canonical NaN), so a tile's first group adds it in place of the accumulator.
NEG_ZERO32 = FP32.pack(1, 0, 0)


def _sum_layout(cfg: DQPConfig) -> data.StructLayout:
    return data.StructLayout({"value": FP32.width, "row": range(cfg.tile), "first": 1,
                              "last": 1, "final": 1, "bf16": 1})


class GroupAccumulators(wiring.Component):
    """Accumulate each row's group sums in order, ``y = ((s_0 + s_1) + s_2) + ...``, in fp32.

    One fp32 accumulator per row of the tile, in a memory of ``m`` words read when a group sum
    arrives (the read data registered once more behind the memory) and written back in time
    for a read :attr:`DQPConfig.acc_loop` cycles after (the read port is not transparent): a
    row's next sum may come that many cycles after the last. A tile's first
    group adds ``-0`` in place of the accumulator; its last group's sums leave on ``o`` instead
    of being written, in fp32 or rounded to bf16 (:class:`~hdl.arith.convert.FloatConvert`,
    round to nearest even) in bits 0 to 15. It never stalls.

    Parameters
    ----------
    cfg : DQPConfig

    Members
    -------
    i : In(stream.Signature(StructLayout({"value": 32, "row": range(m), "first": 1, "last": 1,
                                          "final": 1, "bf16": 1}), always_ready=True))
        A group sum of row ``row``; ``first`` / ``last``: the tile's first / last group;
        ``final``: the command's last row; ``bf16``: the result format.
    o : Out(stream.Signature(StructLayout({"data": 32, "last": 1}), always_ready=True))
        A row's result (``last``: ``final``), :attr:`DQPConfig.accumulate_latency` cycles after
        its last group sum.
    """

    def __init__(self, cfg: DQPConfig):
        self.cfg = check_config(cfg)
        super().__init__({
            "i": In(stream.Signature(_sum_layout(cfg), always_ready=True)),
            "o": Out(stream.Signature(data.StructLayout({"data": FP32.width, "last": 1}),
                                      always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        i = self.i
        m.submodules.sums = sums = Memory(shape=FP32.width, depth=self.cfg.tile, init=[])
        write = sums.write_port()
        # Not transparent: Yosys writes a transparent port as an asynchronous read behind a
        # registered address, and memory_dff then takes the register below for the port's own,
        # which leaves the block RAM's clock-to-data in the adder's first stage (docs/flowkv.md
        # 10.9). acc_loop counts the cycle this costs.
        read = sums.read_port()
        m.d.comb += read.addr.eq(i.payload.row)
        # A register right behind the read port: the block RAM's clock-to-data ends at a
        # flip-flop instead of in the adder's first stage.
        acc = delay(m, read.data, 1, name="acc")
        # The sum waits beside the registered read and that register.
        held = data.View(_sum_layout(self.cfg), delay(m, i.payload.as_value(), 2, name="held"))
        held_valid = delay(m, i.valid, 2, name="held_valid", reset=True)
        m.submodules.add = add = FloatAdder(FP32)
        m.d.comb += [add.i.valid.eq(held_valid),
                     add.i.payload.a.eq(Mux(held.first, NEG_ZERO32, acc)),
                     add.i.payload.b.eq(held.value)]
        done = data.View(_sum_layout(self.cfg),
                         delay(m, held.as_value(), add.latency, name="added"))
        m.d.comb += [write.addr.eq(done.row), write.data.eq(add.o.payload.y),
                     write.en.eq(add.o.valid & ~done.last)]
        m.submodules.convert = convert = FloatConvert(FP32, BF16)
        m.d.comb += [convert.i.valid.eq(add.o.valid & done.last),
                     convert.i.payload.x.eq(add.o.payload.y)]
        fp32 = delay(m, add.o.payload.y, convert.latency, name="fp32")
        flags = data.View(_sum_layout(self.cfg),
                          delay(m, done.as_value(), convert.latency, name="converted"))
        m.d.comb += [self.o.valid.eq(convert.o.valid),
                     self.o.payload.data.eq(Mux(flags.bf16,
                                                Cat(convert.o.payload.y,
                                                    Const(0, FP32.width - BF16.width)), fp32)),
                     self.o.payload.last.eq(flags.final)]
        return m
