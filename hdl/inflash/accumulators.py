"""The in-flash PE's Attend accumulators: ``acc[k] = p v + acc[k]`` per lane, then the drain."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.format import BF16, FP16, FP32
from ..arith.fpmac import FloatMAC
from ..pipeline import delay
from .issuer import issue_layout
from .lanes import NEG_ZERO32, result_layout
from .setup import plan_layout
from .spec import PEConfig, pe_config

__all__ = ["AttendAccumulators"]


class AttendAccumulators(wiring.Component):
    """Accumulate Attend's ``p v`` into ``G d`` accumulators, then send them head by head.

    Accumulator ``k = b G + h`` (beat ``b`` of the entry, head ``h``) is a word of ``F`` fp32
    (int32) in a memory of ``max_cols / F`` words. Float: ``acc[k] = fadd(fmul(p, v), acc[k])``
    in ``F`` :class:`~hdl.arith.fpmac.FloatMAC` lanes per format; the memory is read at issue, a
    result written in the cycle of a read is passed through (transparent port), one written a
    cycle later is bypassed into the MAC, and an accumulator must not be issued again while its
    update is in the MAC earlier than that: at most one update per :attr:`acc_loop` cycles
    (the issue stage keeps to it). int8: the
    exact products and the accumulator into registers, then the sum written back modulo
    ``2**32``; a sum written in the cycle its accumulator is read again is forwarded. The first
    token seeds with ``-0`` (int8: 0). After the last issue, once the lanes are empty and no
    other result is in the arithmetic, the ``G d`` sums leave head by head, one per cycle while
    the output queue has credits.

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    i : In(issue_layout(cfg))
        The issue register: ``mac`` valids, ``k``, ``seed``, ``p``, ``w`` (the V beat).
    k : In(range(cfg.max_beats + 1))
        The accumulator read this cycle: that of the issue reaching ``i`` a cycle later.
    attend_end : In(1)
        The command's last Attend issue is chosen (it reaches ``i`` the issue stage's latency
        later, with ``final``): the drain follows once that issue is on ``i`` and out of the
        lanes.
    plan : In(plan_layout(cfg))
        ``heads``, ``nb`` and ``head_dim`` of the command (read with ``attend_end``).
    start : In(1)
        An Attend starts (``busy`` rises).
    drained, can_issue : In(1)
        No other result is in the arithmetic; the output queue has a credit.
    drain_issue : Out(1)
        A result of the drain takes a credit this cycle.
    results : Out(stream.Signature(result_layout(final=1), always_ready=True))
        The sums, head by head, :attr:`drain_latency` cycles after their ``drain_issue``.
    busy : Out(1)
        The Attend's results are not all out.
    """

    #: Cycles from a ``drain_issue`` to its sum on ``results``: the memory's read, a register.
    drain_latency = 2

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "Accumulator")
        super().__init__({
            "i": In(issue_layout(cfg)),
            "k": In(range(cfg.max_beats + 1)),
            "attend_end": In(1),
            "plan": In(plan_layout(cfg)),
            "start": In(1), "drained": In(1), "can_issue": In(1),
            "drain_issue": Out(1),
            "results": Out(stream.Signature(result_layout(final=1), always_ready=True)),
            "busy": Out(1),
        })

    @staticmethod
    def acc_loop_of(cfg: PEConfig) -> int:
        """Return the cycles between two updates of one accumulator, at least, in accumulators
        of configuration ``cfg``, without building them: a :class:`~hdl.arith.fpmac.FloatMAC`'s
        latency (``golden.inflash.ACC_LOOP``)."""
        pe_config(cfg, "Accumulator")
        return FloatMAC.latency_of(FP16, FP32)

    @property
    def acc_loop(self) -> int:
        """Cycles between two updates of one accumulator, at least: :meth:`acc_loop_of`."""
        return self.acc_loop_of(self.cfg)

    def elaborate(self, platform):
        m = Module()
        cfg, i = self.cfg, self.i
        F = cfg.fmacs
        m.submodules.sums = amem = Memory(shape=32 * F, depth=cfg.max_beats, init=[])
        a_wr = amem.write_port()
        a_rd = amem.read_port(transparent_for=(a_wr,))
        macs = {}
        for name, fmt in (("fp16", FP16), ("bf16", BF16)):
            macs[name] = lanes = [FloatMAC(fmt, FP32) for _ in range(F)]
            for lane, mac in enumerate(lanes):
                m.submodules[f"mac_{name}{lane}"] = mac
        mac_lat = macs["fp16"][0].latency
        mac_out_valid = macs["fp16"][0].o.valid | macs["bf16"][0].o.valid
        mac_out = Mux(macs["fp16"][0].o.valid, Cat(u.o.payload.y for u in macs["fp16"]),
                      Cat(u.o.payload.y for u in macs["bf16"]))
        mac_out_k = delay(m, i.k, mac_lat, name="mac_k")
        bypass = mac_out_valid & (mac_out_k == i.k)
        for lane in range(F):
            held = a_rd.data[32 * lane:32 * (lane + 1)]
            addend = Mux(i.seed, NEG_ZERO32, Mux(bypass, mac_out[32 * lane:32 * (lane + 1)], held))
            for name in ("fp16", "bf16"):
                mac = macs[name][lane]
                m.d.comb += [mac.i.valid.eq(i.mac[name]), mac.i.payload.a.eq(i.p),
                             mac.i.payload.b.eq(i.w[16 * lane:16 * (lane + 1)]),
                             mac.i.payload.c.eq(addend)]
        # int8: exact products, sums modulo 2**32 (golden.inflash.attend's int32), in two
        # stages; the transparent port covers the cycle after a write, the forward the cycle of it.
        sum_valid = Signal()
        sum_k = Signal.like(i.k)
        products = [Signal(signed(32), name=f"int_product{lane}") for lane in range(F)]
        held_acc = Signal(32 * F)
        int_sums = Signal(32 * F)
        m.d.comb += int_sums.eq(Cat((held_acc[32 * lane:32 * (lane + 1)] + products[lane])[:32]
                                    for lane in range(F)))
        forward = sum_valid & (sum_k == i.k)
        m.d.sync += [sum_valid.eq(i.mac.int), sum_k.eq(i.k),
                     held_acc.eq(Mux(i.seed, 0, Mux(forward, int_sums, a_rd.data)))]
        m.d.sync += [product.eq(i.p[:8].as_signed() * i.w[16 * lane:16 * lane + 8].as_signed())
                     for lane, product in enumerate(products)]
        m.d.comb += [a_wr.en.eq(mac_out_valid | sum_valid),
                     a_wr.addr.eq(Mux(sum_valid, sum_k, mac_out_k)),
                     a_wr.data.eq(Mux(sum_valid, int_sums, mac_out))]
        # The lanes hold an update from its issue on ``i`` until its sum is written.
        float_issue = i.mac.fp16 | i.mac.bf16
        mac_busy = (Cat(delay(m, float_issue, n, name=f"mac_busy_{n}", reset=True)
                        for n in range(mac_lat + 1)).any() | i.mac.int | sum_valid)
        self._drain(m, a_rd, mac_busy)
        return m

    def _drain(self, m, a_rd, mac_busy):
        """The results, head by head, after the last token."""
        cfg, p = self.cfg, self.plan
        F = cfg.fmacs
        log_f = F.bit_length() - 1
        drain_wait = Signal()                       # the last token is issued, results pending
        drain_active = Signal()
        dG = Signal.like(p.heads)
        dG_m1, dnb_m1 = Signal.like(p.heads), Signal.like(p.nb)     # G - 1, ceil(d / F) - 1
        d_last_lane = Signal(range(F))
        dh, dbeat = Signal.like(p.heads), Signal.like(p.nb)
        dlane = Signal(range(F))
        daddr = Signal.like(self.k)
        with m.If(self.attend_end):
            m.d.sync += [dG.eq(p.heads), dG_m1.eq(p.heads - 1), dnb_m1.eq(p.nb - 1),
                         d_last_lane.eq((p.head_dim - 1)[:log_f] if log_f else 0)]
        # The wait starts once the last issue is on ``i`` (``attend_end`` comes the issue
        # stage's latency earlier), so that ``mac_busy`` sees it: after a long gap before the
        # last token, nothing older keeps the drain from starting ahead of it.
        i_mac = self.i.mac
        with m.If(self.i.final & (i_mac.fp16 | i_mac.bf16 | i_mac.int)):
            m.d.sync += drain_wait.eq(1)
        with m.If(self.start):
            m.d.sync += self.busy.eq(1)
        # No Attend issue follows the last one: the next Attend waits for ``busy`` to fall.
        with m.If(drain_wait & ~mac_busy & self.drained):
            m.d.sync += [drain_wait.eq(0), drain_active.eq(1), dh.eq(0), dbeat.eq(0),
                         dlane.eq(0), daddr.eq(0)]
        drain_issue = drain_active & self.can_issue
        head_done = (dbeat == dnb_m1) & (dlane == d_last_lane)
        drain_last = head_done & (dh == dG_m1)
        with m.If(drain_issue):
            with m.If(head_done):
                m.d.sync += [dh.eq(dh + 1), dbeat.eq(0), dlane.eq(0), daddr.eq(dh + 1)]
            with m.Elif(dlane == F - 1):
                m.d.sync += [dbeat.eq(dbeat + 1), dlane.eq(0), daddr.eq(daddr + dG)]
            with m.Else():
                m.d.sync += dlane.eq(dlane + 1)
            with m.If(drain_last):
                m.d.sync += [drain_active.eq(0), self.busy.eq(0)]
        m.d.comb += [a_rd.addr.eq(Mux(drain_active, daddr, self.k)),
                     self.drain_issue.eq(drain_issue)]
        # The sum is registered behind the memory's read, which has no output register.
        read_valid, read_final = Signal(), Signal()
        read_lane = Signal(range(F))
        m.d.sync += [read_valid.eq(drain_issue), read_lane.eq(dlane), read_final.eq(drain_last),
                     self.results.valid.eq(read_valid), self.results.payload.final.eq(read_final),
                     self.results.payload.value.eq(a_rd.data.word_select(read_lane, 32))]
