"""The SHIELD controller's sub-components on their own, in Amaranth's simulator, each against a
plain Python model of its contract (hdl/edram: liveness, scheduler, request, response, status,
bankport)."""

import random
import re

import numpy as np
import pytest
from amaranth import Module
from amaranth.sim import Simulator

from hdl.edram import (LivenessTable, Op, Policy, RefreshPlan, ResponsePath, StatusCounters,
                       SweepScheduler)
from hdl.edram.bankport import BankPortDriver
from hdl.edram.liveness import PROBE_LATENCY
from hdl.edram.request import COMMIT_LATENCY, RequestPipeline
from hdl.edram.spec import SEGMENTS


def _run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def _bits(value: int, width: int) -> np.ndarray:
    return np.array([(value >> i) & 1 for i in range(width)], bool)


def _int(bits) -> int:
    return sum(1 << i for i, b in enumerate(bits) if b)


# --------------------------------------------------------------------------------------------------
# LivenessTable


@pytest.mark.parametrize("g_bits, banks", [(3, 2), (5, 4), (4, 1)])
def test_liveness_table_follows_its_updates(g_bits, banks):
    """Writes, range and class releases at random: the table, ``released``, ``any_live``, the
    probe (two cycles) and the registered views equal a model that applies each update at the end
    of its cycle."""
    rows = 1 << g_bits
    views = 2
    dut = LivenessTable(g_bits=g_bits, banks=banks, views=views)
    rng = random.Random(g_bits * 10 + banks)
    live, qo = np.zeros(rows, bool), np.zeros(rows, bool)

    async def bench(ctx):
        nonlocal live, qo
        probes, views_want = [], None
        for cycle in range(400):
            kind = rng.choice(["write", "write", "rows", "class", "none"])
            g, cls = rng.randrange(rows), rng.randrange(2)
            lo, hi = sorted((rng.randrange(rows), rng.randrange(rows)))
            span = np.zeros(rows, bool)
            span[lo:hi + 1] = True
            ends = {"rows": span, "class": np.ones(rows, bool)}.get(kind, np.zeros(rows, bool))
            u = dut.update
            ctx.set(u.write, kind == "write")
            ctx.set(u.hot, 1 << g)
            ctx.set(u.ends, _int(ends))
            ctx.set(u.qo, cls)
            probe = rng.randrange(rows)
            ctx.set(dut.probe_row, probe)
            view_rows = [rng.randrange(rows // banks) for _ in range(views)]
            for k, r in enumerate(view_rows):
                ctx.set(dut.view_row[k], r)
            await ctx.delay(1e-9)
            same = qo == bool(cls)
            ended = live & same & ends
            assert _int(ended) == ctx.get(dut.released), f"cycle {cycle}: released"
            assert ctx.get(dut.live) == _int(live) and ctx.get(dut.qo) == _int(qo)
            assert ctx.get(dut.any_live) == int(live.any()), f"cycle {cycle}: any_live"
            if len(probes) == PROBE_LATENCY:
                assert (ctx.get(dut.probe_live), ctx.get(dut.probe_qo)) == probes.pop(0)
            if views_want is not None:
                for k, (live_want, qo_want) in enumerate(views_want):
                    assert ctx.get(dut.view_live[k]) == live_want, f"cycle {cycle}: view {k}"
                    assert ctx.get(dut.view_qo[k]) == qo_want
            probes.append((int(live[probe]), int(qo[probe])))
            windows = [slice(r * banks, r * banks + banks) for r in view_rows]
            views_want = [(_int(live[w]), _int(qo[w])) for w in windows]
            live = live & ~ended
            if kind == "write":
                live[g], qo[g] = True, bool(cls)
            await ctx.tick()

    _run(dut, bench)


# --------------------------------------------------------------------------------------------------
# SweepScheduler

#: A small plan: 4 rows, slack 4; steps 5 and 9, and a policy without refresh for qo_mant.
SCHED_PLAN = RefreshPlan(clk_mhz=1, t_std_us=25, t_rel_us=41, t_kelle_us=25, rows=4, slack=4)


@pytest.mark.parametrize("segment, policy, busy, slack", [
    ("std", Policy.SHIELD, 0.9, 4), ("kv_mant", Policy.SHIELD, 0.6, 4),
    ("qo_mant", Policy.KELLE, 1.0, 4), ("kv_mant", Policy.STANDARD, 0.3, 4),
    ("std", Policy.STANDARD, 0.95, 6)])
def test_scheduler_refreshes_every_live_slot_in_time(segment, policy, busy, slack):
    """Rows live and die at random. Slots come every ``step`` cycles from the origin; the banks
    live in the slot cycle and in the cycle after (which the registered view shows a cycle late)
    are refreshed once each, never while accessed, within ``slack + 1`` cycles of the slot. A held
    admission keeps a forced refresh's cycle free, except where the refresh it was held for was
    not needed after all: its row died in the slot cycle (the smallest slack decides before the
    answer is whole)."""
    plan_args = dict(clk_mhz=1, t_std_us=25, t_rel_us=41, t_kelle_us=25, rows=4, slack=slack)
    if slack > 4:
        plan_args.update(t_std_us=40, t_rel_us=60, t_kelle_us=40)
    plan = {p: RefreshPlan(**plan_args).sweep(p, segment) for p in Policy}
    banks, lead = 2, COMMIT_LATENCY
    dut = SweepScheduler(plan=plan, rows=4, banks=banks, slack=slack, lead=lead)
    sweep = plan[policy]
    rng = random.Random(f"{segment} {policy.name} {busy} {slack}")
    flight = [0] * (lead - 1)          # banks of the requests committing in 1..lead-1 cycles
    live = np.zeros((4, banks), bool)  # the rows' liveness (row within a bank, bank)
    due: dict[int, tuple[int, int]] = {}     # bank -> (row, deadline)
    holds, forced_cycles, slots, shrunk = [], set(), [], []

    async def bench(ctx):
        ctx.set(dut.policy, policy.value)
        access, answers, views, ptr_before = 0, [], [0, 0], 0
        for cycle in range(600):
            hold = ctx.get(dut.hold)
            # Bank 0 takes most of the traffic, so that its refreshes have to be forced.
            admit = 0 if hold or rng.random() > busy else 1 << (rng.random() > 0.8)
            ctx.set(dut.access, access)
            for k in range(lead - 1):
                ctx.set(dut.planned[k], flight[k])
            ctx.set(dut.planned[lead - 1], admit)
            ctx.set(dut.slot_live, views[-1])
            await ctx.delay(1e-9)
            for row, when in list(answers):
                if cycle == when + 2:             # live in the slot cycle and the one after
                    both = views[-2] & views[-1]
                    for b in range(banks):
                        if both >> b & 1:
                            due[b] = (row, when + 1 + slack)
                    if views[-2] & ~both:
                        shrunk.append(when)
                    answers.remove((row, when))
            if hold:
                holds.append(cycle)
            issue, row = ctx.get(dut.issue), ctx.get(dut.row)
            assert issue & access == 0, f"cycle {cycle}: refresh of an accessed bank"
            for b in range(banks):
                if issue >> b & 1:
                    assert b in due and due[b][0] == row, f"cycle {cycle}: stray refresh {b}"
                    if cycle == due[b][1]:
                        forced_cycles.add(cycle)
                    del due[b]
            for b, (_, deadline) in due.items():
                assert cycle < deadline, f"cycle {cycle}: bank {b} missed its deadline"
            if ctx.get(dut.slot):
                slots.append(cycle)
                answers.append((ctx.get(dut.ptr), cycle))
                assert answers[-1][0] == (cycle // sweep.step) % 4
            ptr_now = ctx.get(dut.ptr)
            await ctx.tick()
            access, *rest = flight
            flight[:] = [*rest, admit]
            views.append(_int(live[ptr_now]))      # the view shows this cycle's state next
            if rng.random() < 0.05:                # a row of a bank is written or released
                r, b = rng.randrange(4), rng.randrange(banks)
                live[r, b] = not live[r, b]

    _run(dut, bench)
    if sweep is None:
        assert not slots and not holds
        return
    assert slots == list(range(0, 600, sweep.step))
    unused = [cycle for cycle in holds if cycle + lead not in forced_cycles]
    assert len(unused) <= len(shrunk), (unused, shrunk, sorted(forced_cycles))
    if busy >= 0.9:
        assert holds, "the traffic never made a refresh wait for admission"


def test_scheduler_parameter_errors():
    plan = {p: SCHED_PLAN.sweep(p, "std") for p in Policy}
    with pytest.raises(ValueError, match="^Refresh slack in cycles \\(slack\\) must be between "
                                         "4 and 1024, not 3$"):
        SweepScheduler(plan=plan, rows=4, banks=2, slack=3, lead=3)


# --------------------------------------------------------------------------------------------------
# RequestPipeline with the LivenessTable


def test_request_pipeline_resolves_against_the_liveness_it_commits_into():
    """Back-to-back requests on few rows (every bypass case): each commits ``COMMIT_LATENCY``
    cycles after admission with the refusal, liveness and mantissa segment that a model applying
    the requests one by one, in order, gives."""
    bank_bits, row_bits, col_bits = 1, 2, 1
    g_bits, rows = bank_bits + row_bits, 1 << (bank_bits + row_bits)
    pipe = RequestPipeline(bank_bits=bank_bits, row_bits=row_bits, col_bits=col_bits)
    table = LivenessTable(g_bits=g_bits, banks=2, views=1)
    m = Module()
    m.submodules.pipe, m.submodules.table = pipe, table
    c = pipe.commit
    ok = c.valid & ~c.refused
    m.d.comb += [table.update.write.eq(ok & (c.op == Op.WRITE)), table.update.hot.eq(c.hot),
                 table.update.ends.eq(c.ends), table.update.qo.eq(c.qo),
                 table.probe_row.eq(pipe.probe_row), pipe.probe_live.eq(table.probe_live),
                 pipe.probe_qo.eq(table.probe_qo), pipe.any_live.eq(table.any_live)]
    rng = random.Random(5)
    live, qo = np.zeros(rows, bool), np.zeros(rows, bool)
    sent, checked = [], 0

    def model(r):
        g, last = r["addr"] >> col_bits, r["last"] >> col_bits
        op, cls = Op(r["op"]), bool(r["cls"])
        if op == Op.WRITE:
            refused = bool(live[g] and qo[g] != cls)
            if not refused:
                live[g], qo[g] = True, cls
            return dict(refused=refused, mant_qo=cls)
        if op == Op.READ:
            return dict(refused=False, row_live=bool(live[g]), mant_qo=bool(qo[g]) if live[g]
                        else None)
        if op == Op.RELEASE_ROWS:
            if r["last"] < r["addr"]:
                return dict(refused=True)
            span = np.zeros(rows, bool)
            span[g:last + 1] = True
            live[:] &= ~(span & (qo == cls))
            return dict(refused=False)
        if op == Op.RELEASE_CLASS:
            live[:] &= ~(qo == cls)
            return dict(refused=False)
        return dict(refused=bool(live.any() or r["data"] >= len(Policy)))

    async def bench(ctx):
        nonlocal checked
        for cycle in range(500):
            valid = rng.random() < 0.8
            words = 1 << (g_bits + col_bits)
            r = dict(op=rng.choice([0, 0, 0, 1, 1, 2, 3, 4]), cls=rng.randrange(2),
                     addr=rng.randrange(words), last=rng.randrange(words), data=rng.randrange(4))
            ctx.set(pipe.admit.valid, valid)
            for name, value in r.items():
                ctx.set(pipe.admit.payload[name], value)
            await ctx.delay(1e-9)
            if ctx.get(c.valid):
                when, req = sent.pop(0)
                assert cycle == when + COMMIT_LATENCY
                want = model(req)
                got = dict(refused=bool(ctx.get(pipe.refused)), row_live=bool(ctx.get(c.row_live)),
                           mant_qo=bool(ctx.get(c.mant_qo)))
                for key, value in want.items():
                    if value is not None:
                        assert got[key] == value, f"cycle {cycle}: {req} {key}: {got} != {want}"
                checked += 1
            if valid:
                sent.append((cycle, r))
            await ctx.tick()

    _run(m, bench)
    assert checked > 350


# --------------------------------------------------------------------------------------------------
# ResponsePath, StatusCounters, BankPortDriver


def test_response_path_latency_order_and_credits():
    """Answers come out in order ``latency`` cycles later with the merged word; the credits let
    exactly ``depth`` requests in flight, and a cancel gives one back."""
    dut = ResponsePath(banks=2, depth=5)
    rng = random.Random(3)

    async def bench(ctx):
        ctx.set(dut.resp.ready, 1)
        words = {segment: [rng.randrange(1 << (9 if segment == "std" else 7)) for _ in range(2)]
                 for segment in SEGMENTS}
        for segment, values in words.items():
            for b, v in enumerate(values):
                ctx.set(getattr(dut, f"{segment}_rdata")[b], v)
        ctx.set(dut.issue, 1)                   # the request took its credit when admitted
        await ctx.tick()
        ctx.set(dut.issue, 0)
        ctx.set(dut.answer.valid, 1)
        ctx.set(dut.answer.bank, 1)
        ctx.set(dut.answer.qo, 1)
        ctx.set(dut.answer.live, 1)
        await ctx.tick()
        ctx.set(dut.answer.valid, 0)
        for cycle in range(1, 8):
            if ctx.get(dut.resp.valid):
                break
            await ctx.tick()
        assert cycle == ResponsePath.latency
        assert ctx.get(dut.resp.payload.data) == words["qo_mant"][1] | words["std"][1] << 7
        assert ctx.get(dut.resp.payload.live) == 1
        await ctx.tick()
        # Credits: with the sink stalled, five issues empty the queue's places.
        ctx.set(dut.resp.ready, 0)
        for k in range(5):
            assert ctx.get(dut.can_issue) == 1, f"credit {k}"
            ctx.set(dut.issue, 1)
            await ctx.tick()
        ctx.set(dut.issue, 0)
        await ctx.tick()
        assert ctx.get(dut.can_issue) == 0
        ctx.set(dut.cancel, 1)
        await ctx.tick()
        ctx.set(dut.cancel, 0)
        assert ctx.get(dut.can_issue) == 0                   # the place comes back through a
        await ctx.tick()                                     # register: after two edges
        assert ctx.get(dut.can_issue) == 1

    _run(dut, bench)


def test_status_counters_saturate_and_lag_two_cycles():
    dut = StatusCounters(width=8, banks=4)

    async def bench(ctx):
        ctx.set(dut.policy, Policy.KELLE.value)
        ctx.set(dut.events.std.refreshes, 0b1011)
        ctx.set(dut.events.refused, 1)
        await ctx.tick()
        ctx.set(dut.events.std.refreshes, 0)
        ctx.set(dut.events.refused, 0)
        assert ctx.get(dut.status.std.refreshes) == 0
        await ctx.tick()
        assert ctx.get(dut.status.std.refreshes) == 3 and ctx.get(dut.status.refused) == 1
        assert ctx.get(dut.status.policy) == Policy.KELLE.value
        ctx.set(dut.events.kv_mant.stall, 1)
        for _ in range(300):
            await ctx.tick()
        assert ctx.get(dut.status.kv_mant.stalls) == 255      # saturated, not wrapped

    _run(dut, bench)


def test_bank_port_driver_registers_access_and_refresh():
    dut = BankPortDriver(banks=2, rows=4, cols=4, width=9)

    async def bench(ctx):
        ctx.set(dut.access, 0b01)
        ctx.set(dut.write, 1)
        ctx.set(dut.row, 3)
        ctx.set(dut.col, 2)
        ctx.set(dut.wdata, 0x1A5)
        ctx.set(dut.issue, 0b10)
        ctx.set(dut.refresh_row, 1)
        await ctx.delay(1e-9)
        assert ctx.get(dut.port.we) == 0                      # registered: nothing yet
        await ctx.tick()
        port = dut.port
        assert (ctx.get(port.we), ctx.get(port.re), ctx.get(port.refresh)) == (0b01, 0, 0b10)
        assert (ctx.get(port.row[0]), ctx.get(port.col[0]), ctx.get(port.wdata[0])) == (3, 2, 0x1A5)
        assert ctx.get(port.row[1]) == 1
        ctx.set(dut.write, 0)
        ctx.set(dut.issue, 0)
        await ctx.tick()
        assert (ctx.get(port.we), ctx.get(port.re)) == (0, 0b01)

    _run(dut, bench)


@pytest.mark.parametrize("build, kind, message", [
    (lambda: RequestPipeline(bank_bits=9, row_bits=2, col_bits=1), ValueError,
     "Bank address bits (bank_bits) must be between 0 and 8, not 9"),
    (lambda: LivenessTable(g_bits=3, banks=3, views=1), ValueError,
     "Bank count (banks) must be a power of two between 1 and 4, not 3"),
    (lambda: LivenessTable(g_bits=0, banks=1, views=1), ValueError,
     "Global row bits (g_bits) must be between 1 and 14, not 0"),
    (lambda: ResponsePath(banks=2, depth=2), ValueError,
     "Response queue depth (depth) must be between 4 and 64, not 2"),
    (lambda: StatusCounters(width=7, banks=2), ValueError,
     "Counter width (width) must be between 8 and 64, not 7"),
    (lambda: BankPortDriver(banks=2, rows=3, cols=4, width=9), ValueError,
     "Rows per bank (rows) must be a power of two between 2 and 65536, not 3"),
    (lambda: SweepScheduler(plan={Policy.SHIELD: None}, rows=4, banks=2, slack=4, lead=3),
     ValueError, "Plan (plan) must give a sweep or None for each of SHIELD, STANDARD, KELLE, "
                 "not for SHIELD"),
])
def test_sub_component_parameter_errors(build, kind, message):
    with pytest.raises(kind, match="^" + re.escape(message) + "$"):
        build()
