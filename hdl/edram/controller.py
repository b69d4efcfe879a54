"""SHIELD segmented-refresh eDRAM controller: a short parent wiring its sub-components."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..validate import integer, power_of_two
from .bankport import BankPortDriver
from .liveness import LivenessTable
from .ports import BankPortSignature, Op, request_layout, response_layout
from .request import COMMIT_LATENCY, RequestPipeline, segment_banks
from .response import ResponsePath
from .scheduler import SweepScheduler
from .spec import MANT_BITS, SEGMENT_BITS, SEGMENTS, Policy, RefreshPlan
from .status import StatusCounters, counter_layout, status_layout

__all__ = ["EdramController", "counter_layout", "status_layout"]

#: Largest ``banks * rows`` (the liveness state is one register bit pair per row).
MAX_ROWS_TOTAL = 1 << 14


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
    the bank; the controller keeps that cycle free of accesses by admitting no request
    ``commit_latency`` cycles before it. No live row's age ever exceeds its segment's interval,
    whatever the requests (proved formally in tests/test_edram_hdl.py).

    Sub-components (docs/edram.md has the diagram): :class:`~.request.RequestPipeline` (decode,
    resolve, commit), :class:`~.liveness.LivenessTable`, a :class:`~.scheduler.SweepScheduler`
    and a :class:`~.bankport.BankPortDriver` per segment, :class:`~.response.ResponsePath` and
    :class:`~.status.StatusCounters`.

    Parameters
    ----------
    banks : int
        Banks per segment, a power of two from 1 to 256.
    rows : int
        Rows per bank, a power of two from 2 to 65536.
    cols : int
        Words per row, a power of two from 2 to 4096. ``banks * rows`` is at most 16384.
    clk_mhz : float
        Clock frequency in MHz, a positive number; intervals are converted to cycles with it.
    t_std_us, t_rel_us, t_kelle_us : float
        Standard, relaxed (SHIELD KV mantissa) and Kelle-like KV-mantissa refresh intervals in us,
        each at least one clock period (rounded down to whole cycles).
    slack : int
        Cycles a due refresh may wait for accesses, ``commit_latency + 1`` (4) to 1024: a forced
        refresh must be known when the request that would collide with it is admitted.
    policy : Policy
        Policy after reset.
    counter_width : int
        Width of every status counter, 8 to 64.
    response_depth : int
        Responses that may wait for ``resp.ready`` (4 to 64). Every request holds a place from
        admission until it commits without an answer or its response is taken, so
        ``read_latency + 1`` (9) keeps reads at one per cycle.

    Members
    -------
    req : In(stream.Signature(request_layout(addr_bits)))
        Requests (:class:`~hdl.edram.ports.Op`): ``WRITE`` (addr, cls, data), ``READ`` (addr),
        ``RELEASE_ROWS`` (cls, addr, last: the class's rows holding words ``addr..last``),
        ``RELEASE_CLASS`` (cls), ``SET_POLICY`` (data = policy code). ``ready`` is a function of
        registers only (never of ``valid`` or the payload): low while the response queue is full,
        in the cycle ``commit_latency`` before a forced refresh, and in the cycle after a
        ``SET_POLICY`` is accepted.
    resp : Out(stream.Signature(response_layout()))
        One response per ``READ`` (``data``; ``live`` = its row was live) and one per refused
        request (``error = 1``, ``data = 0``), in request order. Refused are: a ``WRITE`` to a row
        live with the other class; ``RELEASE_ROWS`` with ``last < addr``; ``SET_POLICY`` with an
        unknown code or while any row is live. A refused request changes nothing.
    status : Out(status_layout(counter_width))
        Active policy, refused-request count, and per segment the row refreshes, reads, writes and
        stall cycles (cycles a valid request waited because a forced refresh of that segment held
        admission). Events are counted at the end of the cycle they happen in.
    std, kv_mant, qo_mant : Out(BankPortSignature(banks, rows, cols, width))
        The segments' macro ports (9, 7 and 7 bits wide).

    Latency: a request accepted in cycle ``t`` commits in ``c = t + commit_latency``: a write or
    a release takes effect at the end of ``c``; a ``SET_POLICY`` not refused there makes
    ``c + policy_latency`` the new policy's first cycle and the sweeps' phase origin, and no
    request is accepted in ``t + 1``. A ``READ`` drives its banks in ``c + 1`` and its response
    is valid from ``t + read_latency`` (queue empty). ``status`` shows an event
    ``status_latency`` cycles after the cycle it happens in.
    """

    #: Cycles from a request's acceptance to its commit.
    commit_latency = COMMIT_LATENCY
    #: Cycles from a SET_POLICY's commit to the new sweep's phase origin.
    policy_latency = 2
    #: Cycles from an event (a commit, a refresh) to the cycle ``status`` counts it in.
    status_latency = 2
    #: Cycles from a READ's acceptance to its response's ``valid``.
    read_latency = COMMIT_LATENCY + ResponsePath.latency

    def __init__(self, *, banks: int = 4, rows: int = 64, cols: int = 16, clk_mhz: float = 100.0,
                 t_std_us: float = 45.0, t_rel_us: float = 1216.0, t_kelle_us: float = 1969.0,
                 slack: int = 8, policy: Policy = Policy.SHIELD, counter_width: int = 32,
                 response_depth: int = 10):
        self.bank_bits = power_of_two(banks, "Bank count (banks)", 1, 256)
        self.row_bits = power_of_two(rows, "Rows per bank (rows)", 2, 65536)
        self.col_bits = power_of_two(cols, "Words per row (cols)", 2, 4096)
        if banks * rows > MAX_ROWS_TOTAL:
            raise ValueError(f"Total rows per segment (banks x rows) must be at most "
                             f"{MAX_ROWS_TOTAL}, not {banks * rows}")
        integer(slack, "Refresh slack in cycles (slack)", COMMIT_LATENCY + 1, 1024)
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

    @property
    def words(self) -> int:
        return self.banks * self.rows * self.cols

    def elaborate(self, platform):
        m = Module()
        # Kept as attributes so that formal harnesses reach their state (after elaboration).
        self.pipeline = pipe = RequestPipeline(bank_bits=self.bank_bits, row_bits=self.row_bits,
                                               col_bits=self.col_bits)
        self.table = table = LivenessTable(g_bits=self.bank_bits + self.row_bits,
                                           banks=self.banks, views=len(SEGMENTS))
        self.schedulers = {
            segment: SweepScheduler(plan={p: self.plan.sweep(p, segment) for p in Policy},
                                    rows=self.rows, banks=self.banks, slack=self.slack,
                                    lead=COMMIT_LATENCY)
            for segment in SEGMENTS}
        #: Liveness and class (1 = QO) of every global row.
        self.live, self.row_class = table.live, table.qo
        m.submodules.pipeline = pipe
        m.submodules.table = table
        m.submodules.response = response = ResponsePath(banks=self.banks,
                                                        depth=self.response_depth)
        m.submodules.counters = counters = StatusCounters(width=self.counter_width,
                                                          banks=self.banks)
        cmd, refused = pipe.commit, pipe.refused
        # An accepted SET_POLICY (refused or not is known at its commit, from ``any_live``)
        # restarts the sweeps a cycle later, from a register: the restart reaches every
        # scheduler's timer. Admission leaves the cycle after a SET_POLICY empty, so that nothing
        # commits with the restart and the new origin slot still finds every row dead.
        policy = Signal(2, init=self.policy.value)
        restart = Signal()
        new_policy = Signal(2)
        m.d.sync += [restart.eq(cmd.valid & (cmd.op == Op.SET_POLICY) & ~refused),
                     new_policy.eq(cmd.data)]
        with m.If(restart):
            m.d.sync += policy.eq(new_policy)
        m.d.comb += counters.policy.eq(policy)

        # ---- admission: from registers only ----------------------------------------------------
        holds = Cat(s.hold for s in self.schedulers.values())
        after_policy = Signal()
        m.d.comb += self.req.ready.eq(response.can_issue & ~holds.any() & ~after_policy)
        admitted = self.req.valid & self.req.ready
        p = self.req.payload
        m.d.sync += after_policy.eq(admitted & (p.op == Op.SET_POLICY))
        m.d.comb += [pipe.admit.valid.eq(admitted), pipe.admit.payload.eq(p),
                     response.issue.eq(admitted)]
        admit_plan = segment_banks(m, p.op, p.cls, p.addr[self.col_bits:][:self.bank_bits],
                                   self.banks, "admit_plan")

        # ---- the commit: liveness (masks and flags decoded a stage before), answers -----------
        is_read = cmd.op == Op.READ
        m.d.comb += [
            table.update.write.eq(cmd.write_ok), table.update.hot.eq(cmd.hot),
            table.update.ends.eq(cmd.ends), table.update.qo.eq(cmd.qo),
            table.probe_row.eq(pipe.probe_row),
            pipe.probe_live.eq(table.probe_live), pipe.probe_qo.eq(table.probe_qo),
            pipe.any_live.eq(table.any_live),
        ]
        answers = cmd.valid & (is_read | refused)
        bank = cmd.g[:self.bank_bits] if self.bank_bits else 0
        m.d.comb += [
            response.answer.valid.eq(answers), response.answer.error.eq(refused),
            response.answer.live.eq(cmd.row_live & ~refused), response.answer.qo.eq(cmd.mant_qo),
            response.answer.bank.eq(bank),
            response.cancel.eq(cmd.valid & ~answers),
            counters.events.refused.eq(cmd.valid & refused),
        ]

        # ---- per segment: sweep, refreshes around the accesses, the macro port ----------------
        for segment in SEGMENTS:
            self._segment(m, segment, policy, restart, admit_plan, admitted)

        wiring.connect(m, response.resp, wiring.flipped(self.resp))
        for segment in SEGMENTS:
            m.d.comb += getattr(response, f"{segment}_rdata").eq(getattr(self, segment).rdata)
        m.d.comb += self.status.eq(counters.status)
        return m

    def _segment(self, m: Module, segment: str, policy, restart, admit_plan, admitted):
        """One segment: its scheduler, its port driver and its events."""
        sched = self.schedulers[segment]
        m.submodules[f"{segment}_sweep"] = sched
        m.submodules[f"{segment}_port"] = driver = BankPortDriver(
            banks=self.banks, rows=self.rows, cols=self.cols, width=SEGMENT_BITS[segment])
        wiring.connect(m, driver.port, wiring.flipped(getattr(self, segment)))
        cmd, table, pipe = self.pipeline.commit, self.table, self.pipeline
        banks = self.banks

        used = {"std": cmd.access, "kv_mant": cmd.access & ~cmd.mant_qo,
                "qo_mant": cmd.access & cmd.mant_qo}[segment]
        access = Signal(banks, name=f"{segment}_access")
        m.d.comb += access.eq(Mux(used, cmd.bank_hot, 0))

        view = SEGMENTS.index(segment)
        m.d.comb += table.view_row[view].eq(sched.ptr)
        live, slot_qo = table.view_live[view], table.view_qo[view]
        slot_live = {"std": live, "kv_mant": live & ~slot_qo, "qo_mant": live & slot_qo}[segment]
        # The requests committing in the next cycles: in resolve, in decode, admitted now.
        planned = [pipe.upcoming[0][segment], pipe.upcoming[1][segment],
                   Mux(admitted, admit_plan[segment], 0)]
        m.d.comb += [
            sched.policy.eq(policy), sched.restart.eq(restart), sched.slot_live.eq(slot_live),
            sched.access.eq(access),
            *(sched.planned[k].eq(banks_of) for k, banks_of in enumerate(planned)),
        ]
        wdata = cmd.data[MANT_BITS:] if segment == "std" else cmd.data[:MANT_BITS]
        m.d.comb += [
            driver.access.eq(access), driver.write.eq(cmd.op == Op.WRITE),
            driver.row.eq(cmd.g[self.bank_bits:]), driver.col.eq(cmd.col),
            driver.wdata.eq(wdata), driver.issue.eq(sched.issue),
            driver.refresh_row.eq(sched.row),
        ]
        events = m.submodules.counters.events[segment]
        m.d.comb += [
            events.refreshes.eq(sched.issue),
            events.read.eq(access.any() & (cmd.op == Op.READ)),
            events.write.eq(access.any() & (cmd.op == Op.WRITE)),
            events.stall.eq(self.req.valid & sched.hold),
        ]
