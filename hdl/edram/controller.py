"""SHIELD segmented-refresh eDRAM controller."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..pipeline import ResultQueue
from ..validate import integer, power_of_two
from .ports import BankPortSignature, Op, TensorClass, request_layout, response_layout
from .spec import MANT_BITS, SEGMENT_BITS, SEGMENTS, Policy, RefreshPlan

__all__ = ["EdramController", "counter_layout", "status_layout"]

#: Largest ``banks * rows`` (the liveness state is one register bit pair per row).
MAX_ROWS_TOTAL = 1 << 14


def counter_layout(width: int) -> data.StructLayout:
    """Per-segment event counters (each saturates at its maximum)."""
    return data.StructLayout({"refreshes": width, "reads": width, "writes": width,
                              "stalls": width})


def status_layout(width: int) -> data.StructLayout:
    """Status port: active policy, refused requests and the counters of every segment."""
    return data.StructLayout({"policy": 2, "refused": width,
                              **{segment: counter_layout(width) for segment in SEGMENTS}})


def _saturating_add(m: Module, counter: Value, increment: Value):
    total = Signal(len(counter) + 1)
    m.d.comb += total.eq(counter + increment)
    m.d.sync += counter.eq(Mux(total[-1], (1 << len(counter)) - 1, total))


def _popcount(bits: Value) -> Value:
    return sum((bits[i] for i in range(len(bits))), Const(0, 1)) if len(bits) else Const(0, 1)


class EdramController(wiring.Component):
    """Store BF16 words in three eDRAM segments with lifecycle-aware, per-segment refresh.

    Each word is split on write: its sign and exponent (bits 15..7) go to the ``std`` segment, its
    mantissa (bits 6..0) to ``kv_mant`` or ``qo_mant`` by the request's tensor class; a read merges
    them again. All three segments have the same geometry, so word address ``addr`` is word
    ``col = addr % cols`` of row ``row = addr // (cols * banks)`` in bank
    ``bank = (addr // cols) % banks`` of every segment; ``g = addr // cols`` is its global row.

    A row holds one tensor class at a time and is *live* from its first write until a release.
    Only live rows are refreshed: ``std`` rows whatever their class, ``kv_mant`` rows of class KV,
    ``qo_mant`` rows of class QO. Each segment sweeps its rows with the interval that the active
    policy gives it (:class:`~hdl.edram.spec.RefreshPlan`, :class:`~hdl.edram.spec.Sweep`): a
    due refresh waits while accesses use its bank, and when its ``slack`` cycles are spent it takes
    the bank and the access that wanted it waits one cycle. No live row's age ever exceeds its
    segment's interval, whatever the requests (proved formally in tests/test_edram_hdl.py).

    Parameters
    ----------
    banks : int
        Banks per segment, a power of two from 1 to 256.
    rows : int
        Rows per bank, a power of two from 2 to 65536.
    cols : int
        Words per row, a power of two from 2 to 4096. ``banks * rows`` is at most 16384.
    clk_mhz : float
        Clock frequency in MHz; intervals are converted to cycles with it.
    t_std_us, t_rel_us, t_kelle_us : float
        Standard, relaxed (SHIELD KV mantissa) and Kelle-like KV-mantissa refresh intervals in us.
    slack : int
        Cycles a due refresh may wait for accesses, 0 to 1024.
    policy : Policy
        Policy after reset.
    counter_width : int
        Width of every status counter, 8 to 64.
    response_depth : int
        Responses that may wait for ``resp.ready`` (4 to 64); at least 5 keeps reads at one per
        cycle.

    Members
    -------
    req : In(stream.Signature(request_layout(addr_bits)))
        Requests (:class:`~hdl.edram.ports.Op`): ``WRITE`` (addr, cls, data), ``READ`` (addr),
        ``RELEASE_ROWS`` (cls, addr, last: the class's rows holding words ``addr..last``),
        ``RELEASE_CLASS`` (cls), ``SET_POLICY`` (data = policy code). One per cycle when no
        refresh is forced into its banks and a response slot is free.
    resp : Out(stream.Signature(response_layout()))
        One response per ``READ`` (``data``; ``live`` = its row was live) and one per refused
        request (``error = 1``, ``data = 0``), in request order. Refused are: a ``WRITE`` to a row
        live with the other class; ``RELEASE_ROWS`` with ``last < addr``; ``SET_POLICY`` with an
        unknown code or while any row is live. A refused request changes nothing.
    status : Out(status_layout(counter_width))
        Active policy, refused-request count, and per segment the row refreshes, reads, writes and
        stall cycles (cycles a valid request waited for a forced refresh in that segment).
    std, kv_mant, qo_mant : Out(BankPortSignature(banks, rows, cols, width))
        The segments' macro ports (9, 7 and 7 bits wide).

    Latency: a ``READ`` accepted in cycle ``t`` drives its banks in ``t + 1``, gets the data in
    ``t + 2``, enters the response queue at the end of ``t + 2`` and is valid from ``t + 4``
    (``read_latency``; the queue's output register is the fourth cycle). Writes and releases take
    effect at the end of their accept cycle. A ``SET_POLICY`` waits until no refresh is pending;
    once accepted, the cycle after it is the new sweep phase origin.
    """

    #: Cycles from a READ's acceptance to its response's ``valid``.
    read_latency = 4

    def __init__(self, *, banks: int = 4, rows: int = 64, cols: int = 16, clk_mhz: float = 100.0,
                 t_std_us: float = 45.0, t_rel_us: float = 1216.0, t_kelle_us: float = 1969.0,
                 slack: int = 8, policy: Policy = Policy.SHIELD, counter_width: int = 32,
                 response_depth: int = 8):
        self.bank_bits = power_of_two(banks, "Bank count (banks)", 1, 256)
        self.row_bits = power_of_two(rows, "Rows per bank (rows)", 2, 65536)
        self.col_bits = power_of_two(cols, "Words per row (cols)", 2, 4096)
        if banks * rows > MAX_ROWS_TOTAL:
            raise ValueError(f"Total rows per segment (banks x rows) must be at most "
                             f"{MAX_ROWS_TOTAL}, not {banks * rows}")
        integer(slack, "Refresh slack in cycles (slack)", 0, 1024)
        integer(counter_width, "Counter width (counter_width)", 8, 64)
        integer(response_depth, "Response queue depth (response_depth)", 4, 64)
        if not isinstance(policy, Policy):
            raise TypeError(f"Policy (policy) must be one of "
                            f"{', '.join(p.name for p in Policy)}, not {policy!r}")
        self.banks, self.rows, self.cols = banks, rows, cols
        self.slack, self.policy = slack, policy
        self.counter_width, self.response_depth = counter_width, response_depth
        self.plan = RefreshPlan(clk_mhz, t_std_us, t_rel_us, t_kelle_us, rows, slack)
        self.addr_bits = self.bank_bits + self.row_bits + self.col_bits
        super().__init__({
            "req": In(stream.Signature(request_layout(self.addr_bits))),
            "resp": Out(stream.Signature(response_layout())),
            "status": Out(status_layout(counter_width)),
            **{segment: Out(BankPortSignature(banks, rows, cols, SEGMENT_BITS[segment]))
               for segment in SEGMENTS},
        })
        rows_total = banks * rows
        #: Liveness and class (1 = QO) of every global row; exposed for formal harnesses.
        self.live = Signal(rows_total)
        self.row_class = Signal(rows_total)

    @property
    def words(self) -> int:
        return self.banks * self.rows * self.cols

    def elaborate(self, platform):
        m = Module()
        banks, rows_total = self.banks, self.banks * self.rows
        live, row_class = self.live, self.row_class
        req, p = self.req, self.req.payload

        # ---- decode the head request ------------------------------------------------------------
        col = p.addr[:self.col_bits]
        g = p.addr[self.col_bits:]
        bank = g[:self.bank_bits]
        row = g[self.bank_bits:]
        row_live = live.bit_select(g, 1)
        row_qo = row_class.bit_select(g, 1)
        op = p.op
        is_write, is_read = op == Op.WRITE, op == Op.READ
        is_release_rows, is_release_class = op == Op.RELEASE_ROWS, op == Op.RELEASE_CLASS
        is_set_policy = op == Op.SET_POLICY
        req_qo = p.cls == TensorClass.QO
        any_live = live.any()

        refused = Signal()
        m.d.comb += refused.eq(
            (is_write & row_live & (row_qo != req_qo))
            | (is_release_rows & (p.last < p.addr))
            | (is_set_policy & (any_live | (p.data >= len(Policy)))))
        responds = is_read | refused
        accesses = (is_write & ~refused) | is_read
        mant_qo = Mux(is_write, req_qo, row_qo)
        bank_hot = Signal(banks)
        m.d.comb += bank_hot.eq(Const(1, banks) << bank if banks > 1 else 1)
        touches = {
            "std": Mux(accesses, bank_hot, 0),
            "kv_mant": Mux(accesses & ~mant_qo, bank_hot, 0),
            "qo_mant": Mux(accesses & mant_qo, bank_hot, 0),
        }

        # ---- refresh sweeps: slots, pending refreshes and slack ----------------------------------
        policy = Signal(2, init=self.policy.value)
        restart = Signal()
        sweeps = {}
        for segment in SEGMENTS:
            plan = {pol: self.plan.sweep(pol, segment) for pol in Policy}
            steps = [s.step for s in plan.values() if s is not None]
            tick = Signal(range(max(steps, default=1)), name=f"{segment}_tick")
            ptr = Signal(self.row_bits, name=f"{segment}_ptr")
            pend = Signal(banks, name=f"{segment}_pend")
            pend_row = Signal(self.row_bits, name=f"{segment}_pend_row")
            slack = Signal(range(self.slack + 1), name=f"{segment}_slack")
            enabled = Signal(name=f"{segment}_enabled")
            step_last = Signal.like(tick, name=f"{segment}_step_last")
            with m.Switch(policy):
                for pol, sweep in plan.items():
                    with m.Case(pol.value):
                        m.d.comb += enabled.eq(sweep is not None)
                        m.d.comb += step_last.eq(sweep.step - 1 if sweep else 0)
            slot = Signal(name=f"{segment}_slot")
            urgent = Signal(banks, name=f"{segment}_urgent")
            m.d.comb += [slot.eq(enabled & (tick == 0)),
                         urgent.eq(Mux(slack == 0, pend, 0))]
            with m.If(restart | ~enabled):
                m.d.sync += [tick.eq(0), ptr.eq(0)]
            with m.Elif(tick == step_last):
                m.d.sync += [tick.eq(0), ptr.eq(ptr + 1)]
            with m.Else():
                m.d.sync += tick.eq(tick + 1)
            sweeps[segment] = dict(tick=tick, ptr=ptr, pend=pend, pend_row=pend_row, slack=slack,
                                   slot=slot, urgent=urgent, enabled=enabled, plan=plan)
        self.sweeps = sweeps
        any_pend = Cat(s["pend"] for s in sweeps.values()).any()

        conflict = {segment: Signal(name=f"{segment}_conflict") for segment in SEGMENTS}
        for segment in SEGMENTS:
            m.d.comb += conflict[segment].eq((sweeps[segment]["urgent"] & touches[segment]).any())
        # Responses land in a queue with a credit per place (hdl.pipeline.ResultQueue): a request
        # that answers is taken only if its response will have a place.
        queue = ResultQueue(m, self.resp, depth=self.response_depth, name="queue")
        m.d.comb += req.ready.eq(~Cat(conflict.values()).any()
                                 & (~responds | queue.can_issue)
                                 & ~(is_set_policy & ~refused & any_pend))
        accept = req.valid & req.ready
        m.d.comb += [restart.eq(accept & is_set_policy & ~refused),
                     queue.issue.eq(accept & responds)]
        with m.If(restart):
            m.d.sync += policy.eq(p.data)

        # ---- liveness: writes set, releases clear -----------------------------------------------
        class_match = Signal(rows_total)
        in_range = Signal(rows_total)
        release = Signal(rows_total)
        g_lo, g_hi = p.addr[self.col_bits:], p.last[self.col_bits:]
        m.d.comb += [
            class_match.eq(Mux(req_qo, row_class, ~row_class)),
            in_range.eq(Cat((g_lo <= i) & (i <= g_hi) for i in range(rows_total))),
            release.eq(Mux(accept & ~refused & is_release_rows, in_range & class_match, 0)
                       | Mux(accept & is_release_class, class_match, 0)),
        ]
        write = accept & is_write & ~refused
        g_hot = Signal(rows_total)
        m.d.comb += g_hot.eq(Mux(write, Const(1, rows_total) << g, 0))
        m.d.sync += [live.eq((live & ~release) | g_hot),
                     row_class.eq((row_class & ~g_hot) | Mux(req_qo, g_hot, 0))]

        # ---- per segment: slots see liveness, refreshes fill idle bank cycles -------------------
        for segment in SEGMENTS:
            s = sweeps[segment]
            port = getattr(self, segment)
            ptr, pend = s["ptr"], s["pend"]
            slot_live = live.word_select(ptr, banks) & ~release.word_select(ptr, banks)
            slot_qo = row_class.word_select(ptr, banks)
            if segment == "kv_mant":
                slot_live = slot_live & ~slot_qo
            elif segment == "qo_mant":
                slot_live = slot_live & slot_qo
            access = Signal(banks, name=f"{segment}_access")
            issue = Signal(banks, name=f"{segment}_issue")
            m.d.comb += [access.eq(Mux(accept, touches[segment], 0)),
                         issue.eq(pend & ~access)]
            with m.If(s["slot"]):
                m.d.sync += [pend.eq(slot_live), s["pend_row"].eq(ptr), s["slack"].eq(self.slack)]
            with m.Else():
                m.d.sync += pend.eq(pend & ~issue)
                with m.If(s["slack"] != 0):
                    m.d.sync += s["slack"].eq(s["slack"] - 1)
            s.update(access=access, issue=issue)

            width = SEGMENT_BITS[segment]
            wdata = p.data[MANT_BITS:] if segment == "std" else p.data[:MANT_BITS]
            m.d.sync += [port.we.eq(Mux(is_write, access, 0)),
                         port.re.eq(Mux(is_read, access, 0)),
                         port.refresh.eq(issue)]
            for b in range(banks):
                with m.If(access[b]):
                    m.d.sync += [port.row[b].eq(row), port.col[b].eq(col),
                                 port.wdata[b].eq(wdata)]
                with m.Elif(issue[b]):
                    m.d.sync += port.row[b].eq(s["pend_row"])

            counters = self.status[segment]
            _saturating_add(m, counters.refreshes, _popcount(issue))
            _saturating_add(m, counters.reads, accept & is_read & access.any())
            _saturating_add(m, counters.writes, accept & is_write & access.any())
            _saturating_add(m, counters.stalls, req.valid & conflict[segment])
        _saturating_add(m, self.status.refused, accept & refused)
        m.d.comb += self.status.policy.eq(policy)

        # ---- responses: two stages follow the macro read, then a queue --------------------------
        stage_layout = data.StructLayout({"valid": 1, "error": 1, "live": 1, "qo": 1,
                                          "bank": max(self.bank_bits, 1)})
        stage1, stage2 = Signal(stage_layout), Signal(stage_layout)
        m.d.sync += [stage1.valid.eq(accept & responds), stage1.error.eq(refused),
                     stage1.live.eq(row_live & ~refused), stage1.qo.eq(mant_qo),
                     stage1.bank.eq(bank if self.bank_bits else 0),
                     stage2.eq(stage1)]
        sel = stage2.bank if self.bank_bits else 0
        std_word = self.std.rdata[sel]
        mant_word = Mux(stage2.qo, self.qo_mant.rdata[sel], self.kv_mant.rdata[sel])
        merged = Signal(response_layout())
        m.d.comb += [
            merged.data.eq(Mux(stage2.error, 0, Cat(mant_word, std_word))),
            merged.live.eq(stage2.live),
            merged.error.eq(stage2.error),
            queue.w_en.eq(stage2.valid),
            queue.w_data.eq(merged),
        ]
        return m
