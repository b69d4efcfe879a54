"""The rDXE vector-accumulate core (VAC) with its PPU and RCU, and the credit-keeping source."""

from __future__ import annotations

from functools import partial

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..arith.idot import IntDot
from ..arith.requant import SHIFT_BITS, Requantizer
from ..latency import unit_latency
from ..pipeline import HeadQueue, ResultQueue, delay
from ..validate import integer
from .spec import (ACC_BITS, CODE_BITS, VacConfig, check_config, hlink_layout, kv_layout, ppu_layout,
                   rc_layout, result_layout, wmem_layout)

__all__ = ["Vac", "HlinkSource", "VacRing", "MAX_VACS"]

#: Largest VAC count an :class:`HlinkSource` keeps credits for (``DxtConfig.vacs`` for a tile).
MAX_VACS = 64
#: The register in front of the PPU: the choice between the RCU's result and the hold queue's
#: head does not share a cycle with the route to the PPU's multiplier blocks, whose input
#: registers need 3.5 ns of setup (docs/rdxe.md section 9.1, step 17).
_PPU_IN = 1
#: The PPU's and the RCU's requantizer depth: 7 registers the operands in the multiplier blocks'
#: own input registers, so a route from the queue heads to a block distant from them has a cycle
#: of its own (docs/rdxe.md 14.4, session 39).
_REQUANT_STAGES = 7


def _check(cfg) -> VacConfig:
    return check_config(cfg, VacConfig, "VAC")


def dot_accumulator(m: Module, dot: IntDot, flags: dict) -> tuple[Signal, dict]:
    """Add an INT32 accumulator behind a lane tree: the tree's sum of each chunk adds to the
    accumulator, which restarts with a chunk flagged ``first``.

    ``flags`` (``first`` among them) belong to the tree's input; they come back delayed to its
    output. Returns ``(total, delayed)``: ``total``, combinational, is the accumulator including
    the chunk leaving the tree this cycle (registered into the accumulator when
    ``dot.o.valid``).
    """
    delayed = {name: delay(m, value, dot.latency, name=name) for name, value in flags.items()}
    acc = Signal(signed(ACC_BITS), name="acc")
    total = Signal(signed(ACC_BITS), name="acc_sum")
    m.d.comb += total.eq(Mux(delayed["first"], 0, acc) + dot.o.payload.y)
    with m.If(dot.o.valid):
        m.d.sync += acc.eq(total)
    return total, delayed


class Vac(wiring.Component):
    """Multiply-accumulate INT8 chunks against the WMEM, requantize (PPU), optionally recompute
    (RCU) first, and forward the chunks to the next VAC.

    Every cycle one ``lanes``-wide activation chunk may arrive on ``hlink_i``. The VAC registers
    it (that register is ``hlink_o``, the next VAC's input) while it reads the chunk's WMEM
    row; chunk and row meet ``row_latency`` (5) cycles after arrival at the lane tree
    (:class:`~hdl.arith.idot.IntDot`), whose sum goes into an INT32 accumulator. The chunk
    flagged ``last`` finishes an output: its accumulator, with the output's PPU multiplier and
    shift from the PPU table, enters the hold queue. From there, in order, one per cycle:

    * PPU only (``rcu`` clear): ``y = requantize(acc, M, sh)`` to INT8 (a shared
      :class:`~hdl.arith.requant.Requantizer`, ``golden.rdxe.ppu``);
    * RCU + PPU (``rcu`` set): the output waits for an RC factor, then ``requantize(acc, m_rc,
      sh_rc, out_bits=32, clamp='full')`` (a second Requantizer, ``golden.rdxe.rcu``), then the
      PPU. RC factors are used in arrival order; an output with ``rc_last`` is the last to use
      its factor. This is the fused mode of RMSNorm-GEMV and softmax-P.V.

    The results leave in output order on ``o``: ``golden.rdxe.gemv`` and ``ppu(rcu(...))`` bit
    for bit, with output ``o`` of a GEMV on VAC ``o mod N`` in pass ``o // N``.

    **Flow control.** HLINK never stalls: ``hlink_i.ready`` and ``rc.ready`` are always 1 and
    ``hlink_o.ready`` is ignored (plain streams rather than ``always_ready`` ones, so that the
    VAC converts to Verilog as a top level). A source starts an output only with a credit of
    every VAC on the ring (:class:`HlinkSource`): each VAC grants ``queue_depth`` credits and
    returns one on ``credit`` when a result leaves ``o``. A VAC then owes at most
    ``queue_depth`` results, and its hold queue, its result queue and its RC factor queue each
    hold that many, so nothing is lost however long ``o`` is back-pressured or an RC factor is
    late: the source waits instead, between outputs. ``o``'s back-pressure reaches the source,
    never the ring.

    Parameters
    ----------
    cfg : VacConfig

    Members
    -------
    hlink_i : In(stream.Signature(hlink_layout(cfg)))
        Activation chunks with their control (:func:`~hdl.rdxe.spec.hlink_layout`), from the
        source or the previous VAC.
    hlink_o : Out(stream.Signature(hlink_layout(cfg)))
        ``hlink_i`` registered: every chunk one cycle later, unchanged, to the next VAC.
    wmem : In(stream.Signature(wmem_layout(cfg)))
        WMEM loads, one row per transfer; always ready. A load of the row being read in the
        same cycle does not change what that read returns.
    kv : In(stream.Signature(kv_layout(cfg)))
        KV-cache writes, one row per transfer with byte enables (``en`` bit ``k`` writes lane
        ``k``); always ready; same read rule as ``wmem``. A chunk flagged ``kv`` meets the
        KV-cache row ``row`` instead of the WMEM row. Ignored without a KV cache (``kv_rows``
        0).
    ppu : In(stream.Signature(ppu_layout(cfg)))
        PPU table loads, one entry per transfer; always ready. An output's entry is read
        ``acc_latency - 3`` cycles after its last chunk was on ``hlink_i``.
    rc : In(stream.Signature(rc_layout(cfg)))
        RC factor broadcast: one transfer per fused operation, into the RC factor queue; usable
        by the RCU the cycle after. It must come after the operation's ``first`` chunk left the
        source (the vector engine computes it from that input).
    o : Out(stream.Signature(result_layout(cfg)))
        INT8 results, one per output, in output order.
    credit : Out(1)
        One pulse per result leaving ``o`` (``o.valid & o.ready``): a credit back to the source.
    overrun : Out(1)
        Sticky: an output finished with the hold queue full, or an RC factor arrived with the
        RC factor queue full; a result or factor was lost. Only a source that starts more
        outputs than its credits allow (or sends factors early) can cause it.

    Latency and throughput (defaults: ``row_latency`` 5, ``dot_latency`` 5, ``requant_latency``
    8 (the PPU's input register and its requantizer's 7), ``rcu_latency`` 7, ``queue_latency``
    2): one chunk per cycle on HLINK, whatever happens on ``o``; one result per cycle.

    * ``hlink_i`` to ``hlink_o``: 1 cycle.
    * An output whose last chunk is on ``hlink_i`` at ``t`` has its final accumulator at the head
      of the hold queue at ``t + acc_latency`` (``row_latency + dot_latency + 1``: the WMEM read
      with the HLINK register, the operand registers, the lane tree, the accumulator).
    * PPU only: it enters the PPU then, and its result is written into the result queue
      ``requant_latency`` cycles later and is on ``o`` after another ``queue_latency``
      (:attr:`latency`, 21 cycles from ``hlink_i`` to ``o``).
    * RCU + PPU: it enters the RCU at ``max(head, factor usable, previous RCU entry + 1)`` (one
      RCU: outputs parked for the factor enter one per cycle), its result follows
      ``rcu_latency + requant_latency`` cycles later.
    * An output waits behind earlier ones; one that skips the RCU also waits for the RCU to be
      empty, so results never overtake.

    In the terms of ``golden.rdxe.gemv_cycles``: cycle 0 is the first chunk meeting its WMEM
    row at VAC 0's lane tree (the source drives VAC 0's ``hlink_i`` at cycle ``-row_latency``);
    then VAC ``v``'s lane tree takes chunk ``j`` of pass ``p`` at cycle ``p C + j + v``, output
    ``o``'s accumulator is final at ``a_o`` and its result leaves the PPU at ``a_o + requant``:
    the model's figures exactly. The model has no term for the WMEM read, so counted from the
    source every figure is ``row_latency`` cycles later; a vector engine computing an RC factor
    from the chunk stream taps it at the same point. An RC factor on ``rc`` at cycle ``t`` is
    usable at ``t + 1`` (the factor queue's head register is the model's broadcast register).
    Parked accumulators enter the RCU one per cycle in output order, from the factor on, as
    ``golden.rdxe.rmsnorm_gemv_cycles`` counts them.

    Bad input: HLINK chunks without a ``first`` before their ``last``, ``rcu`` outputs without
    ``rc_last`` at the end of an operation, or activations beyond ``golden.rdxe.MAX_INPUTS``
    give wrong results (the accumulator wraps at 32 bits); credit violations set ``overrun``.
    """

    def __init__(self, cfg: VacConfig):
        self.cfg = _check(cfg)
        #: The PPU's output valid (a result enters the result queue): for cycle measurements.
        self.result_valid = Signal()
        super().__init__({
            "hlink_i": In(stream.Signature(hlink_layout(cfg))),
            "hlink_o": Out(stream.Signature(hlink_layout(cfg))),
            "wmem": In(stream.Signature(wmem_layout(cfg))),
            "kv": In(stream.Signature(kv_layout(cfg))),
            "ppu": In(stream.Signature(ppu_layout(cfg))),
            "rc": In(stream.Signature(rc_layout(cfg))),
            "o": Out(stream.Signature(result_layout(cfg))),
            "credit": Out(1),
            "overrun": Out(1),
        })

    # --- latencies, read off the shared units ---------------------------------------------------

    # The products' registers are the ECP5 multiplier blocks' own (hdl.arith.dsp) when built for
    # that target: in a DXT the blocks sit far from the VAC's logic.
    @staticmethod
    def dot_unit(cfg: VacConfig) -> partial:
        """The lane tree of a VAC of configuration ``cfg``."""
        return partial(IntDot, cfg.lanes, a_bits=CODE_BITS, b_bits=CODE_BITS,
                       acc_bits=ACC_BITS, block_registers=True)

    @staticmethod
    def ppu_unit(cfg: VacConfig) -> partial:
        """The PPU's requantizer of a VAC of configuration ``cfg``: seven stages, its operands
        in its blocks' own input registers, its partial products registered again after their
        output registers and its shift in two steps (docs/rdxe.md 9.1, 14.4)."""
        return partial(Requantizer, ACC_BITS, CODE_BITS, clamp=cfg.clamp,
                       mult_bits=cfg.mult_bits, stages=_REQUANT_STAGES, block_registers=True)

    @staticmethod
    def rcu_unit(cfg: VacConfig) -> partial:
        """The RCU's requantizer of a VAC of configuration ``cfg``: as the PPU's
        (:meth:`ppu_unit`), with its narrow pieces in logic fed from operands of their own."""
        return partial(Requantizer, ACC_BITS, ACC_BITS, clamp="full",
                       mult_bits=cfg.rc_mant_bits, mult_signed=False, stages=_REQUANT_STAGES,
                       block_registers=True, narrow_in_logic=True, logic_operands=True)

    @staticmethod
    def row_latency_of(cfg: VacConfig) -> int:
        """Cycles from a chunk on ``hlink_i`` to the lane tree's input, where it meets its WMEM
        row: the HLINK register (the synchronous WMEM read) and ``operand_stages``."""
        return 1 + cfg.operand_stages

    @property
    def dot_latency(self) -> int:
        """Cycles of the lane tree: ``1 + log2(lanes)`` (``golden.rdxe.Latency.dot``)."""
        return unit_latency(self.dot_unit(self.cfg))

    @classmethod
    def ppu_latency_of(cls, cfg: VacConfig) -> int:
        """Cycles from an accumulator's issue to the PPU to its result (``golden.rdxe.Latency.ppu``):
        the register in front of the PPU, then its requantizer."""
        return _PPU_IN + unit_latency(cls.ppu_unit(cfg))

    @property
    def requant_latency(self) -> int:
        """Cycles of the PPU, its input register included (:meth:`ppu_latency_of`)."""
        return self.ppu_latency_of(self.cfg)

    @property
    def rcu_latency(self) -> int:
        """Cycles of the RCU (``golden.rdxe.Latency.rcu``)."""
        return unit_latency(self.rcu_unit(self.cfg))

    @property
    def row_latency(self) -> int:
        """:meth:`row_latency_of` the configuration."""
        return self.row_latency_of(self.cfg)

    @property
    def acc_latency(self) -> int:
        """Cycles from an output's last chunk on ``hlink_i`` to its final accumulator at the head
        of the hold queue: :attr:`row_latency`, the lane tree and the accumulator."""
        return self.row_latency + self.dot_latency + 1

    @property
    def queue_latency(self) -> int:
        """Cycles from a result leaving the PPU to ``o.valid`` (the result queue)."""
        return ResultQueue.LATENCY

    @property
    def latency(self) -> int:
        """Cycles from a PPU-only output's last chunk on ``hlink_i`` to its result on ``o``, with
        nothing ahead of it."""
        return self.acc_latency + self.requant_latency + self.queue_latency

    @property
    def credits(self) -> int:
        """Credits a source starts with: ``queue_depth``."""
        return self.cfg.queue_depth

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        depth = cfg.queue_depth
        link_i, link_o = self.hlink_i.payload, self.hlink_o.payload

        # ---- HLINK register; the WMEM row is read in the same cycle --------------------------
        # The memories read whatever the chunk's valid bit (the row is dropped with it), so that
        # the source's decision to send a chunk does not reach the block RAMs.
        m.d.sync += [self.hlink_o.valid.eq(self.hlink_i.valid), link_o.eq(link_i)]
        m.d.comb += [self.hlink_i.ready.eq(1), self.rc.ready.eq(1)]
        row_shape = data.ArrayLayout(signed(CODE_BITS), cfg.lanes)
        m.submodules.wmem = wmem = Memory(shape=row_shape, depth=cfg.wmem_depth, init=[])
        w_wr = wmem.write_port()
        w_rd = wmem.read_port()
        m.d.comb += [w_wr.addr.eq(self.wmem.payload.addr), w_wr.data.eq(self.wmem.payload.data),
                     w_wr.en.eq(self.wmem.valid), self.wmem.ready.eq(1), self.kv.ready.eq(1),
                     w_rd.addr.eq(link_i.row), w_rd.en.eq(~link_i.kv)]
        operand = delay(m, w_rd.data.as_value(), 1, name="wmem_row")
        if cfg.kv_rows:
            # The KV cache: byte-enabled writes (iWuR), one full row read per cycle.
            m.submodules.kv_cache = kv_cache = Memory(shape=row_shape, depth=cfg.kv_rows,
                                                      init=[])
            self.kv_memory = kv_cache            # for reading the cache back in simulation
            k_wr = kv_cache.write_port(granularity=1)
            k_rd = kv_cache.read_port()
            m.d.comb += [k_wr.addr.eq(self.kv.payload.addr), k_wr.data.eq(self.kv.payload.data),
                         k_wr.en.eq(Mux(self.kv.valid, self.kv.payload.en, 0)),
                         k_rd.addr.eq(link_i.row), k_rd.en.eq(link_i.kv)]
            # Each memory's row is registered before the choice (a block RAM's clock-to-output,
            # 5.8 ns on ECP5, leaves room for nothing behind it); the chunk's kv bit, registered
            # with it, picks the row.
            kv_row = delay(m, k_rd.data.as_value(), 1, name="kv_row")
            operand = Mux(delay(m, link_o.kv, 1, name="kv_sel"), kv_row, operand)
        # The row is registered (and the chunk waits for it) operand_stages times in all; the
        # further stages give the placer room to reach distant DSP sites.
        stages = cfg.operand_stages
        row = delay(m, operand, stages - 1, name="row")
        chunk = data.View(hlink_layout(cfg), delay(m, link_o.as_value(), stages, name="chunk"))
        chunk_valid = delay(m, self.hlink_o.valid, stages, name="chunk_valid", reset=True)

        # ---- lane tree and INT32 accumulator ----------------------------------------------------
        m.submodules.dot = dot = self.dot_unit(self.cfg)()
        m.d.comb += [dot.i.valid.eq(chunk_valid), dot.i.payload.a.eq(chunk.data),
                     dot.i.payload.b.eq(row)]
        lat = dot.latency
        # Exact for every GEMV within golden.rdxe.MAX_INPUTS (|acc| <= 2**30): no saturation.
        acc_sum, flags = dot_accumulator(m, dot, {"first": chunk.first, "last": chunk.last,
                                                  "rcu_sel": chunk.rcu,
                                                  "rc_last": chunk.rc_last})
        last, rcu_sel, rc_last = flags["last"], flags["rcu_sel"], flags["rc_last"]

        # ---- PPU table: read so that the entry arrives with the final sum --------------------
        # Read two cycles ahead and registered once: like the WMEM, the block RAM's output
        # is too slow to feed the hold queue's head directly.
        entry_layout = data.StructLayout({"m": signed(cfg.mult_bits),
                                          "shift": SHIFT_BITS})
        m.submodules.ppu_table = table = Memory(shape=entry_layout, depth=cfg.ppu_depth, init=[])
        t_wr = table.write_port()
        t_rd = table.read_port()
        lead = stages + lat - 2                    # from hlink_o to the table read
        m.d.comb += [t_wr.addr.eq(self.ppu.payload.addr), t_wr.data.m.eq(self.ppu.payload.m),
                     t_wr.data.shift.eq(self.ppu.payload.shift), t_wr.en.eq(self.ppu.valid),
                     self.ppu.ready.eq(1),
                     t_rd.addr.eq(delay(m, link_o.out, lead, name="out"))]
        entry = data.View(entry_layout, delay(m, t_rd.data.as_value(), 1, name="entry"))

        # ---- hold queue: finished accumulators; its head register is the accumulator register ----
        hold_layout = data.StructLayout({"acc": signed(ACC_BITS), "m": signed(cfg.mult_bits),
                                         "shift": SHIFT_BITS, "rcu": 1, "rc_last": 1})
        # The RCU's operands from head copies of their own, beside its multiplier blocks (their
        # one head register sat 6 to 7 ns of route away in a full engine: docs/rdxe.md 14.4).
        m.submodules.hold = hold = HeadQueue(hold_layout, depth, copy=True)
        m.d.comb += [hold.w.valid.eq(dot.o.valid & last), hold.w.payload.acc.eq(acc_sum),
                     hold.w.payload.m.eq(entry.m), hold.w.payload.shift.eq(entry.shift),
                     hold.w.payload.rcu.eq(rcu_sel), hold.w.payload.rc_last.eq(rc_last)]
        head = hold.o.payload

        # ---- RC factor queue: its head register is the broadcast register ---------------------
        m.submodules.factors = factors = HeadQueue(rc_layout(cfg), depth, copy=True)
        m.d.comb += [factors.w.valid.eq(self.rc.valid), factors.w.payload.eq(self.rc.payload)]
        factor = factors.o.payload

        with m.If(hold.lost | factors.lost):
            m.d.sync += self.overrun.eq(1)

        # ---- issue, in order: to the RCU (with a factor) or straight to the PPU ---------------
        m.submodules.results = queue = ResultQueue(result_layout(cfg), depth)
        wiring.connect(m, queue.o, wiring.flipped(self.o))
        m.submodules.rcu = rcu = self.rcu_unit(self.cfg)()
        m.submodules.ppu = ppu = self.ppu_unit(self.cfg)()
        in_rcu = Signal(range(rcu.latency + 1))     # items in the RCU, its output included
        rcu_idle = Signal(init=1)                   # in_rcu == 0, from a register
        to_rcu = Signal()
        to_ppu = Signal()
        m.d.comb += [
            to_rcu.eq(hold.o.valid & head.rcu & factors.o.valid & queue.can_issue),
            # A PPU-only output must not overtake (or collide with) the RCU's outputs.
            to_ppu.eq(hold.o.valid & ~head.rcu & rcu_idle & queue.can_issue),
            hold.o.ready.eq(to_rcu | to_ppu),
            factors.o.ready.eq(to_rcu & head.rc_last),
            queue.issue.eq(to_rcu | to_ppu),
            rcu.i.valid.eq(to_rcu), rcu.i.payload.x.eq(hold.copy.acc),
            rcu.i.payload.m.eq(factors.copy.m), rcu.i.payload.shift.eq(factor.shift),
            # Its pieces in logic from the heads themselves: the copies then load the blocks
            # alone (a copy feeding both sat 6.4 to 6.6 ns of route from a block, session 37).
            rcu.logic.x.eq(head.acc), rcu.logic.m.eq(factor.m),
        ]
        m.d.sync += [in_rcu.eq(in_rcu + to_rcu - rcu.o.valid),
                     rcu_idle.eq(~to_rcu & (in_rcu == rcu.o.valid))]
        ppu_m = delay(m, head.m, rcu.latency, name="ppu_m")
        ppu_shift = delay(m, head.shift, rcu.latency, name="ppu_shift")
        m.d.comb += [
            ppu.i.valid.eq(delay(m, rcu.o.valid | to_ppu, _PPU_IN, name="ppu_in_valid",
                                 reset=True)),
            ppu.i.payload.x.eq(delay(m, Mux(rcu.o.valid, rcu.o.payload.y, head.acc), _PPU_IN,
                                     name="ppu_in_x")),
            ppu.i.payload.m.eq(delay(m, Mux(rcu.o.valid, ppu_m, head.m), _PPU_IN,
                                     name="ppu_in_m")),
            ppu.i.payload.shift.eq(delay(m, Mux(rcu.o.valid, ppu_shift, head.shift), _PPU_IN,
                                         name="ppu_in_shift")),
            queue.w.valid.eq(ppu.o.valid), queue.w.payload.eq(ppu.o.payload.y),
            self.result_valid.eq(ppu.o.valid),
            self.credit.eq(self.o.valid & self.o.ready),
        ]
        return m


class HlinkSource(wiring.Component):
    """Feed a ring of VACs from a back-pressured chunk stream, starting an output only with a
    credit of every VAC.

    Keeps one counter per VAC, starting at the VACs' ``queue_depth``: a chunk flagged ``first``
    passes only when every counter is above zero and takes one from each; a ``credit`` pulse
    of VAC ``v`` gives one back. Other chunks pass freely, so an output's chunks are never held
    up once it has started. This is the source-side half of the VAC's flow control
    (:class:`Vac`): however ``o`` is back-pressured, no VAC owes more results than it can hold.

    Parameters
    ----------
    cfg : VacConfig
        The VACs' configuration (all VACs of a ring share it).
    vacs : int
        VACs on the ring, 1 to 64.

    Members
    -------
    i : In(stream.Signature(hlink_layout(cfg)))
        Chunks in ring order (the activation-reuse buffer or token buffer); ``i.ready`` is
        ``~first`` or a register (every counter above zero).
    o : Out(stream.Signature(hlink_layout(cfg)))
        To VAC 0's ``hlink_i``; combinational from ``i`` (latency 0); ``o.ready`` is ignored
        (a VAC is always ready).
    credit : In(vacs)
        Bit ``v``: VAC ``v``'s ``credit`` (usable the cycle after the pulse).

    Throughput: one chunk per cycle while credits last. A credit returns a full ring trip after
    its output starts: ``C - 1 + v + latency + 1`` cycles for VAC ``v`` and an output of ``C``
    chunks (plus any register on ``credit``), so a source that starts an output every ``C``
    cycles never waits when ``queue_depth * C`` covers that trip.
    """

    def __init__(self, cfg: VacConfig, *, vacs: int):
        self.cfg = _check(cfg)
        self.vacs = integer(vacs, "VAC count", 1, MAX_VACS)
        super().__init__({
            "i": In(stream.Signature(hlink_layout(cfg))),
            "o": Out(stream.Signature(hlink_layout(cfg))),
            "credit": In(vacs),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self.cfg.queue_depth
        counts = [Signal(range(depth + 1), init=depth, name=f"credits{v}")
                  for v in range(self.vacs)]
        # Every counter above zero, a register: the chunk stream's ready starts from it.
        room = Signal(init=1)
        first = self.i.payload.first
        m.d.comb += [self.i.ready.eq(~first | room),
                     self.o.valid.eq(self.i.valid & self.i.ready),
                     self.o.payload.eq(self.i.payload)]
        start = self.o.valid & first
        # A counter's next value is zero when it is 0 and no credit comes (no start), or when
        # it is 0 with a credit or 1 without (a start): both decided before ``start`` is known.
        empty_idle, empty_start = [], []
        for v, count in enumerate(counts):
            credit = self.credit[v]
            m.d.sync += count.eq(count - start + credit)
            empty_idle.append((count == 0) & ~credit)
            empty_start.append(Mux(credit, count == 0, count == 1))
        m.d.sync += room.eq(~Mux(start, Cat(*empty_start).any(), Cat(*empty_idle).any()))
        return m


class VacRing(wiring.Component):
    """One VAC on its ring: the :class:`HlinkSource` in front, and the vector engine's rule for
    RC factors, so that the VAC's streams are plain back-pressured streams (a ring of one, as a
    board harness or any stream player drives it).

    Chunks on ``hlink_i`` pass through an :class:`HlinkSource` of one VAC, which holds an
    output's first chunk back while the VAC owes ``queue_depth`` results; the VAC's ``credit``
    goes back to it. An RC factor on ``rc`` is taken only after its operation's first output
    has left the source (its last chunk, flagged ``rcu``), as the vector engine computes it from
    that input: factor ``k`` waits for the ``k``-th fused operation. The other streams are the
    VAC's own.

    Parameters
    ----------
    cfg : VacConfig
        The VAC's configuration; the source keeps ``queue_depth`` credits.

    Members
    -------
    hlink_i : In(stream.Signature(hlink_layout(cfg)))
        Activation chunks in ring order; ``ready`` low on an output's first chunk while no
        credit is left (:class:`HlinkSource`), high otherwise.
    hlink_o, wmem, kv, ppu, o, overrun
        The :class:`Vac`'s, unchanged.
    rc : In(stream.Signature(rc_layout(cfg)))
        RC factors, one per fused operation in operation order; ``ready`` from the cycle after
        the operation's first output left the source until its factor is taken.

    Latency and throughput: the VAC's (the source adds no cycle): one chunk per cycle while
    credits last, a result ``Vac.latency`` cycles after a plain output's last chunk. Bad input:
    as the VAC's; a chunk stream cannot overrun it, nor can factors.
    """

    def __init__(self, cfg: VacConfig):
        self.cfg = _check(cfg)
        self.vac = Vac(cfg)
        self.source = HlinkSource(cfg, vacs=1)
        members = self.vac.signature.members
        super().__init__({name: members[name] for name in members if name != "credit"})

    @property
    def latency(self) -> int:
        """:attr:`Vac.latency`: the source adds no cycle."""
        return self.vac.latency

    def elaborate(self, platform):
        m = Module()
        m.submodules.source = src = self.source
        m.submodules.vac = vac = self.vac
        wiring.connect(m, wiring.flipped(self.hlink_i), src.i)
        wiring.connect(m, src.o, vac.hlink_i)
        wiring.connect(m, vac.hlink_o, wiring.flipped(self.hlink_o))
        wiring.connect(m, vac.o, wiring.flipped(self.o))
        for name in ("wmem", "kv", "ppu"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(vac, name))
        m.d.comb += [src.credit.eq(vac.credit), self.overrun.eq(vac.overrun)]
        # Factors released and not yet taken: each belongs to an operation with an output the
        # VAC still owes, so there are at most queue_depth of them.
        chunk = src.o.payload
        fused_end = src.o.valid & chunk.last & chunk.rcu
        in_op, due = Signal(), Signal(range(self.cfg.queue_depth + 1))
        release = fused_end & ~in_op
        taken = self.rc.valid & self.rc.ready
        with m.If(fused_end):
            m.d.sync += in_op.eq(~chunk.rc_last)
        m.d.sync += due.eq(due + release - taken)
        m.d.comb += [self.rc.ready.eq(due != 0), vac.rc.valid.eq(taken),
                     vac.rc.payload.eq(self.rc.payload)]
        return m
