"""The in-flash PE's ``x`` buffer: the activation vector, the query vectors, or Attend's ``p``."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .setup import plan_layout
from .spec import Mode, Op, PEConfig, pe_config, x_layout

__all__ = ["XBuffer"]


class XBuffer(wiring.Component):
    """Take a command's ``x`` beats into a memory of ``F``-element words.

    GEMV and Logit: word ``b`` holds elements ``b F .. b F + F - 1`` (Logit: the ``G`` query
    vectors, ``ceil(d / F)`` words each); the words are written in order from address 0 and
    ``count`` tells how many are in, so a reader may use word ``b`` as soon as ``count > b``.
    Attend: a ring of two tokens of ``p``, ``2 ceil(G / F)`` words; a token's words are written
    while the older token's are in use, and ``p_ready`` says a whole token is in. w4a16: each
    beat also goes out on ``sums`` (the fp16 lanes sum ``x`` per group while it loads).

    Parameters
    ----------
    cfg : PEConfig

    Members
    -------
    x : In(stream.Signature(x_layout(cfg)))
        The PE's ``x`` port: ``ceil(cols / F)`` beats per GEMV, ``x_beats`` per attention
        command (:func:`~hdl.inflash.setup.plan_layout`); taken while words remain and, in
        Attend, while the ring has room.
    plan : In(plan_layout(cfg))
        The command: ``op``, ``mode``, ``cols``, ``x_beats``, ``pb``.
    gemv_start, att_start : In(1)
        A command's ``x`` begins (only while :attr:`done`).
    rd_addr : In(range(cfg.x_depth))
        Read address; ``rd_data`` holds the word one cycle later.
    rd_data : Out(16 * F)
        The word read.
    count : Out(range(cfg.x_depth))
        GEMV and Logit: words written so far. Attend: the ring's write position.
    done : Out(1)
        Every beat of the current command is in.
    take : Out(1)
        A beat is taken this cycle (``count`` and ``done`` change at the clock edge).
    done_next : Out(1)
        ``done`` of the next cycle (for a reader that keeps its test of ``count`` in a
        register).
    p_ready : Out(1)
        Attend: the oldest token's ``p`` is complete in the ring.
    p_release : In(1)
        Attend: the oldest token's ``p`` is used up (only with ``p_ready``).
    sums : Out(stream.Signature(StructLayout({"data": 16 * F, "end": 1}), always_ready=True))
        w4a16: the beat taken a cycle earlier, ``end`` on a group's last beat.
    """

    def __init__(self, cfg: PEConfig):
        self.cfg = cfg = pe_config(cfg, "x buffer")
        F = cfg.fmacs
        super().__init__({
            "x": In(stream.Signature(x_layout(cfg))),
            "plan": In(plan_layout(cfg)),
            "gemv_start": In(1), "att_start": In(1),
            "rd_addr": In(range(cfg.x_depth)),
            "rd_data": Out(16 * F),
            "count": Out(range(cfg.x_depth)),
            "done": Out(1), "take": Out(1), "done_next": Out(1),
            "p_ready": Out(1),
            "p_release": In(1),
            "sums": Out(stream.Signature(data.StructLayout({"data": 16 * F, "end": 1}),
                                         always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, p = self.cfg, self.plan
        F = cfg.fmacs
        log_f = F.bit_length() - 1
        group_beats = cfg.group_size // F
        attend = p.op == Op.ATTEND
        is_w4 = (p.mode == Mode.W4A16) & (p.op != Op.LOGIT) & ~attend
        m.submodules.xmem = xmem = Memory(shape=16 * F, depth=cfg.x_depth, init=[])
        x_wr = xmem.write_port()
        x_rd = xmem.read_port()
        x_left = Signal(cfg.tokens_bits + cfg.query_bits)   # x beats still to be taken
        x_addr = self.count
        p_occ = Signal(range(3))                    # tokens of p in the ring, not used up
        p_wbeat = Signal(cfg.query_bits)            # beats of the newest token written
        p_room = (p_wbeat != 0) | (p_occ < 2)
        done = Signal(init=1)                       # x_left == 0, a register: it gates commands
        m.d.comb += [self.x.ready.eq(~done & (~attend | p_room)),
                     x_wr.addr.eq(x_addr), x_wr.data.eq(self.x.payload.data.as_value()),
                     x_wr.en.eq(self.x.valid & self.x.ready),
                     x_rd.addr.eq(self.rd_addr), self.rd_data.eq(x_rd.data),
                     self.done.eq(done),
                     self.p_ready.eq((p_occ == 2) | ((p_occ == 1) & (p_wbeat == 0)))]
        x_take = self.x.valid & self.x.ready
        m.d.comb += [self.take.eq(x_take),
                     self.done_next.eq(Mux(x_take, x_left == 1, done)
                                       & ~self.gemv_start & ~self.att_start)]
        m.d.sync += done.eq(self.done_next)
        with m.If(self.gemv_start):
            m.d.sync += [x_left.eq(((p.cols - 1) >> log_f) + 1), x_addr.eq(0)]
        with m.If(self.att_start):
            m.d.sync += [x_left.eq(p.x_beats), x_addr.eq(0)]
        with m.If(x_take):
            m.d.sync += x_left.eq(x_left - 1)
            with m.If(attend):
                m.d.sync += [x_addr.eq(Mux(x_addr == 2 * p.pb - 1, 0, x_addr + 1)),
                             p_wbeat.eq(Mux(p_wbeat == p.pb - 1, 0, p_wbeat + 1))]
            with m.Else():
                m.d.sync += x_addr.eq(x_addr + 1)
        m.d.sync += p_occ.eq(p_occ + (x_take & attend & (p_wbeat == 0)) - self.p_release)
        with m.If(self.att_start):
            m.d.sync += [p_occ.eq(0), p_wbeat.eq(0)]
        m.d.sync += [self.sums.valid.eq(x_take & is_w4),
                     self.sums.payload.data.eq(self.x.payload.data.as_value()),
                     self.sums.payload.end.eq((x_addr & (group_beats - 1)) == group_beats - 1)]
        return m
