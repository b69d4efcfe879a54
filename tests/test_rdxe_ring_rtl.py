"""The ring of DXEs in RTL (hdl/rdxe/ring.py, docs/rdxe.md 16.3) in Amaranth's simulator: tokens
of three requests of different lengths through 2 DXEs, the third taking a finished one's slot;
every output row against the ring's golden (:func:`golden.rdxe.ring.run_ring`), the DXT's KV
memories against its DXEs' caches, and every DXE's run start and finish, every dispatch and the
makespan against the cycle model (:func:`sim.rdxe.ring.schedule` with ``copy``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
import pytest

from sim.rdxe.host import dxt_loads, row_elements, row_values
from sim.rdxe.reduced import HEAD_DIM, HEADS, INPUTS, KV_HEADS, Host, layer_tables, \
    program, short, tokens
from golden.rdxe import assemble as A
from golden.rdxe import ring as R
from golden.rdxe.dxe import rms_eps
from hdl.rdxe.ctrl import CtrlConfig, Store
from hdl.rdxe.dxe import stride_value
from hdl.rdxe.isa import ProgramSpace
from hdl.rdxe.ring import Ring, copy_cycles
from hdl.rdxe.spec import DxtConfig
from sim.rdxe.ring import Request, rtl_costs, schedule
from tests.stream_sim import set_payload, shared, simulate
from tests.test_rdxe_assemble import variant
from tests.test_rdxe_loop import _caches, _kv_image
from tests.dxe_bench import DxeBench
from tests.test_rdxe_side import load_dxe, send

LANES, DXES, SLOTS = 4, 2, 2
#: The ring's short layer (sim/rdxe/reduced.py): the KV append and RoPE, 229 cycles a
#: token a DXE.
SHORT = short()
#: The small preset's controller and DXT, memories cut to the short layer, a KV group for each
#: of the two slots.
SPACE = ProgramSpace(tb_words=64, rr_bytes=64, registers=4, const_words=48, gemvs=1, align=LANES)
CTRL = CtrlConfig(SPACE, lanes=LANES, head_dim=HEAD_DIM, program_words=16)
DXT = DxtConfig(lanes=LANES, vacs=4, head_dim=HEAD_DIM, group_size=HEADS // KV_HEADS,
                kv_groups=KV_HEADS * SLOTS, wmem_depth=16, ppu_depth=32, kv_rows=16,
                max_inputs=16)
#: (prompt, generated) tokens: the second request finishes first and the third takes its slot.
LENGTHS = ((1, 2), (1, 1), (2, 1))


@dataclass
class Case:
    """A ring to run: its program, controller, DXT, layers (of tables) and requests."""

    program: list
    ctrl: CtrlConfig
    dxt: DxtConfig
    layers: int
    lengths: tuple
    slots: int = SLOTS

    def __post_init__(self):
        base = layer_tables()
        self.asm = A.assemble(self.program, base, INPUTS, ["h"], self.ctrl.space, HEAD_DIM,
                              in_place=("h",), keep=("cos", "sin"))
        self.tables = [variant(base, l) for l in range(self.layers)]
        self.split = R.split_layers(self.layers, DXES)
        firsts = np.cumsum((0,) + self.split)
        self.stacks = [A.stacked_tables(self.tables[a:b], self.asm)
                       for a, b in zip(firsts, firsts[1:])]
        self.ctrls = [replace(self.ctrl, layers=n) for n in self.split]
        self.rows = tuple(self.asm.inputs[name] // LANES + i for name in INPUTS
                          for i in range(INPUTS[name] // LANES))
        shapes = {i: g[0].shape for i, g in self.stacks[0][0].gemvs.items()}
        step = A.stride(self.asm)
        self.costs = rtl_costs(self.ctrl, replace(self.dxt, kv_groups=step.kv_groups),
                               self.asm.words, shapes, self.split)
        self.schedule = schedule([Request(p, g) for p, g in self.lengths], self.costs, None,
                                 self.slots, copy=len(self.rows))
        pool = iter(tokens(sum(p for p, _ in self.lengths)))
        self.requests = [R.RingRequest(tuple(next(pool) for _ in range(p)), g)
                         for p, g in self.lengths]

    def ring(self) -> Ring:
        return shared(Ring, tuple(self.ctrls), self.dxt, dxes=DXES, slots=self.slots,
                      rows=self.rows)

    def beats(self, inputs: dict) -> list[int]:
        """A token's inputs as the rows the ring moves, in its order."""
        return [v for name in INPUTS
                for v in row_values(np.asarray(inputs[name], np.uint32), LANES, 32)]

    def token(self, rows: list[int]) -> dict:
        """The rows the ring moves as a token's named regions (fp32 codes)."""
        words = np.array([e for r in rows for e in row_elements(r, LANES, 32)], np.uint32)
        out, at = {}, 0
        for name, n in INPUTS.items():
            out[name], at = words[at:at + n], at + n
        return out


async def _load(ctx, ring: Ring, case: Case, d: int) -> DxeBench:
    """DXE ``d``'s loads on its host ports: the stride, each layer's score step (several
    layers), the DXT side's tables, the program and the stacked constants."""
    port, stacked = ring.dxe[d], case.stacks[d]
    ctrl = case.ctrls[d]
    wmem, ppu, table, fixed = dxt_loads(stacked[0], case.asm, case.dxt, flat=stacked[0])
    step = A.stride(case.asm)
    stride = stride_value(ctrl, case.dxt, step.gemvs, step.const_words, step.kv_groups,
                          case.slots)
    for name, value in stride.items() if "stride" in ring.host_ports else ():
        ctx.set(getattr(port.stride, name), value)
    if ctrl.layers > 1:
        del fixed["score_scale"]
        await send(ctx, port.scales, [{"layer": l, "value": int(v.score_scale)}
                                      for l, v in enumerate(stacked)])
    # fp32(127**2 eps), as cocotb_tests/rdxe/dxe_tb.py: rms_eps of k = 1.0 is eps itself.
    one = np.float32(1.0).view(np.uint32)
    ctx.set(port.eps, int(rms_eps(np.array([one]), stacked[0].rms_eps)[0]))
    host = SimpleNamespace(slots=case.slots, cfg=ctrl,
                           **{n: getattr(port, n) for n in ring.host_ports})
    return await load_dxe(ctx, host, case.asm, stacked[0], (wmem, ppu, table, fixed),
                          restart=False)


class _Host:
    """The ring's host in the bench: tokens enter in the schedule's order, each as soon as it is
    ready (a request's first token once it holds a slot, a prompt token once the one before it
    entered, a generated one once the pass before it left the ring, its inputs then made from
    that pass's output by the toy host of tests/test_rdxe_ring.py); it records every dispatch,
    every output token and each request's admission."""

    def __init__(self, case: Case, order: list, idle: float, seed: int):
        self.case, self.order, self.idle = case, order, idle
        self.rng = random.Random(seed)
        self.slot = R.dispatch_slots([r.passes for r in case.requests], case.slots, order)
        n = len(case.requests)
        self.ready = [0 if r < case.slots else None for r in range(n)]
        self.waiting = list(range(min(case.slots, n), n))
        self.inputs = [r.prompt[0] for r in case.requests]
        self.sent, self.left = [0] * n, [0] * n
        self.beats, self.next, self.dispatch, self.outputs = [], 0, [], []
        self.rows, self.step = [], Host()

    def offer(self, cycle: int):
        """The beat offered in ``cycle`` (a dict), or None."""
        if not self.beats and self.next < len(self.order):
            r = self.order[self.next]
            if self.ready[r] is not None and self.ready[r] <= cycle:
                k = self.sent[r]
                meta = {"slot": self.slot[r], "restart": int(k == 0), "position": 0}
                self.beats = [{"data": v, **meta} for v in self.case.beats(self.inputs[r])]
                self.current = (r, k)
        return self.beats[0] if self.beats and self.rng.random() >= self.idle else None

    def taken(self, cycle: int):
        """The offered beat was taken in ``cycle``."""
        r, k = self.current
        if len(self.beats) == len(self.case.rows):
            self.dispatch.append((r, k, cycle))
        self.beats.pop(0)
        if not self.beats:
            self.sent[r], self.next = k + 1, self.next + 1
            request = self.case.requests[r]
            if k + 1 < len(request.prompt):
                self.inputs[r], self.ready[r] = request.prompt[k + 1], self.dispatch[-1][2]
            else:
                self.ready[r] = None               # a generated token: when this one left

    def output(self, beat: dict, cycle: int):
        """An output beat taken in ``cycle``: a whole token's rows end its pass."""
        self.rows.append(beat)
        if len(self.rows) < len(self.case.rows):
            return
        rows, self.rows = self.rows, []
        r = self.order[len(self.outputs)]
        k = self.left[r]
        self.left[r] += 1
        token = self.case.token([b["data"] for b in rows])
        self.outputs.append((r, k, token, {(b["slot"], b["error"]) for b in rows}, cycle + 1))
        request = self.case.requests[r]
        if k + 1 == request.passes:
            if self.waiting:
                self.ready[self.waiting.pop(0)] = cycle + 1
        elif k + 1 >= len(request.prompt):
            self.inputs[r], self.ready[r] = self.step(r, k + 1, {"h": token["h"]}), cycle + 1


def _run(case: Case, idle: float = 0.0, stall: int = 0, seed: int = 0):
    """Load the ring, run the requests through it (``idle``: the chance the host offers no row
    in a cycle; ``stall``: windows of that many cycles, every other one without ``output``
    taken); return a namespace of the host, the DXEs' run starts and finishes (cycles from the
    first cycle a token may enter), the KV memories at the end, the cycles each DXE held its
    ``done``, and what the host read on each DXE's ``ext``: its program after the loads, its
    token rows at the end."""
    ring = case.ring()
    host = _Host(case, case.schedule.order, idle, seed)
    total = sum(r.passes for r in case.requests)
    starts, finishes = [[] for _ in ring.engines], [[] for _ in ring.engines]
    kv, held, run = [], [0] * DXES, SimpleNamespace()
    # A lost token would hold the host forever: the model's makespan, three times over and the
    # stalls' windows with back-pressure.
    limit = case.schedule.makespan + 1 if not (idle or stall) else \
        3 * case.schedule.makespan + 4 * stall

    async def bench(ctx):
        for name, value in (("pc", 0), ("count", len(case.asm.words))):
            ctx.set(getattr(ring.words, name), value)
        benches = [await _load(ctx, ring, case, d) for d in range(DXES)]
        # The host's reads through the ring: each DXE's program read back on its ext.
        run.programs = [await b.read_rows(Store.PROG, 0, len(case.asm.words)) for b in benches]
        cycle, was_done = 0, [0] * DXES
        while len(host.outputs) < total:
            assert cycle < limit, f"stopped at cycle {cycle}: {len(host.outputs)} of {total} " \
                                  f"tokens out (the model's makespan {case.schedule.makespan})"
            beat = host.offer(cycle)
            ctx.set(ring.input.valid, beat is not None)
            if beat is not None:
                set_payload(ctx, ring.input.payload, beat)
            ctx.set(ring.output.ready, not stall or (cycle // stall) % 2 == 0)
            taken = beat is not None and ctx.get(ring.input.ready)
            out = ctx.get(ring.output.valid) and ctx.get(ring.output.ready)
            if out:
                got = {n: ctx.get(getattr(ring.output.payload, n)) for n in ("data", "slot",
                                                                                "error")}
            for d, engine in enumerate(ring.engines):
                if ctx.get(engine.run.valid) and ctx.get(engine.run.ready):
                    starts[d].append(cycle)
                done = ctx.get(engine.done.valid)
                if done and not was_done[d]:
                    finishes[d].append(cycle + 1)   # the model's finish: done's handshake after
                was_done[d] = done and not ctx.get(engine.done.ready)
                held[d] += was_done[d]
            await ctx.tick()
            if taken:
                host.taken(cycle)
            if out:
                host.output(got, cycle)
            cycle += 1
        ctx.set(ring.input.valid, 0)
        kv.extend([await _caches(ctx, SimpleNamespace(dxt_cfg=case.dxt, side=e.side))
                   for e in ring.engines])
        # The stages have let go of ext: each DXE's token rows read back by the host.
        run.rows = [[(await b.read_rows(Store.TB, row, 1))[0] for row in case.rows]
                    for b in benches]
    simulate(ring, bench)
    run.host, run.starts, run.finishes, run.kv, run.held = \
        host, np.array(starts).T, np.array(finishes).T, kv, held
    return run


def _check_outputs(case: Case, run):
    """Every pass's rows equal the golden ring's (``h``) and its inputs' (``cos``, ``sin``
    kept); every output carries its request's slot and no error; the KV memories hold each
    golden DXE's caches at their groups; the host's reads on each DXE's ``ext`` give its
    program and, at the end, its last token's rows as the golden DXE's TB holds them."""
    host, kv = run.host, run.kv
    engines = []
    want = R.run_ring(case.asm, case.tables, DXES, case.slots, case.requests, Host(),
                      case.schedule.order, engines)
    inputs = {}
    for r, request in enumerate(case.requests):
        for k, token in enumerate(request.prompt):
            inputs[(r, k)] = token
    assert len(host.outputs) == sum(len(w) for w in want)
    for r, k, token, meta, _ in host.outputs:
        assert np.array_equal(token["h"], want[r][k]["h"]), \
            f"request {r} pass {k}: h differs at {np.flatnonzero(token['h'] != want[r][k]['h'])}"
        if (r, k) in inputs:
            for name in ("cos", "sin"):
                assert np.array_equal(token[name], inputs[(r, k)][name]), (r, k, name)
        assert meta == {(host.slot[r], 0)}, f"request {r} pass {k}: (slot, error) {meta}"
    for d, (engine, image, words, rows) in enumerate(zip(engines, kv, run.programs, run.rows)):
        assert words == list(case.asm.words), f"DXE {d}: program read back {words}"
        tb = row_values(engine.state.tb.words, LANES, 32)
        assert rows == [tb[r] for r in case.rows], f"DXE {d}: TB rows {rows}"
        caches = {g: ([x[None] for x in engine.keys[g]], [v[None] for v in engine.values[g]])
                  for g in engine.keys}
        want_kv = _kv_image(caches, case.dxt)
        assert np.array_equal(image.astype(np.int8), want_kv), \
            f"DXE {d}: KV memories differ at (vac, row, lane) " \
            f"{np.argwhere(image.astype(np.int8) != want_kv)[:4].tolist()}"


def _check_timing(case: Case, run) -> float:
    """Every dispatch, every DXE's run start and finish, and the makespan the model's; return
    the measured utilization (busy over DXEs x makespan)."""
    host, starts, finishes = run.host, run.starts, run.finishes
    s = case.schedule
    assert host.dispatch == s.dispatch
    assert starts.tolist() == s.start.tolist(), f"starts {starts.tolist()}, model " \
                                                f"{s.start.tolist()}"
    assert finishes.tolist() == s.finish.tolist(), f"finishes {finishes.tolist()}, model " \
                                                   f"{s.finish.tolist()}"
    makespan = max(cycle for *_, cycle in host.outputs)
    assert makespan == s.makespan
    busy = (finishes - starts).sum(axis=0)
    assert busy.tolist() == s.busy.tolist()
    return float(busy.sum()) / (DXES * makespan)


@pytest.fixture(scope="module")
def short():
    return Case(SHORT, CTRL, DXT, DXES, LENGTHS)


# --slow (32 s, 11 s of it the simulator's build of two DXEs):
# cocotb_tests/test_rdxe_ring.py::test_rdxe_ring[rdxe-ring-small-icarus] runs the same check on
# the generated Verilog in make test (three requests through 2 DXEs of 2 slots: every row, slot
# and KV memory against the golden, every dispatch, run start and finish and exit against the
# model); this one runs the RTL in Amaranth's simulator, for debugging without a build.
@pytest.mark.slow
def test_three_requests_pass_two_dxes(short):
    """Two DXEs of one layer (the short program), two slots, requests of 1 + 2, 1 + 1 and 2 + 1
    prompt + generated tokens, the third joining in the second's slot when its last token has
    left: every output row bit-exact, the KV memories each golden DXE's, and every dispatch,
    DXE start and finish and the makespan equal to the schedule's."""
    run = _run(short)
    _check_outputs(short, run)
    s = short.schedule
    assert s.slots == [0, 1, 1] and s.admitted[2] == s.finished[1] > 0
    utilization = _check_timing(short, run)
    assert utilization == pytest.approx(s.ring_utilization, abs=0)
    print(f"\nring: {DXES} DXEs x 1 layer, {len(s.dispatch)} tokens, makespan {s.makespan}, "
          f"busy {s.busy.tolist()}, utilization {utilization:.4f} (model "
          f"{s.ring_utilization:.4f}); copy {copy_cycles(len(short.rows))}")


def test_the_ring_is_checked():
    for dxes in (0, 9):
        with pytest.raises(ValueError, match=f"^DXE count must be between 1 and 8, not {dxes}$"):
            Ring(CTRL, DXT, dxes=dxes, slots=SLOTS, rows=(0,))
    with pytest.raises(TypeError, match=r"^Controllers must be a CtrlConfig or 2 of them \(one "
                                        r"a DXE\), not \(CtrlConfig"):
        Ring((CTRL,), DXT, dxes=2, slots=SLOTS, rows=(0,))
    other = replace(CTRL, program_words=32)
    with pytest.raises(ValueError, match="^DXE 1's controller must be DXE 0's but for its "
                                         "layers, not CtrlConfig"):
        Ring((CTRL, other), DXT, dxes=2, slots=SLOTS, rows=(0,))
    with pytest.raises(ValueError, match=r"^The controller's lanes and head dimension \(4, 8\) "
                                         r"must be the DXT's \(8, 8\)$"):
        Ring(CTRL, replace(DXT, lanes=8), dxes=2, slots=SLOTS, rows=(0,))
    with pytest.raises(ValueError, match="^A token row must be between 0 and 15, not 16$"):
        Ring(CTRL, DXT, dxes=2, slots=SLOTS, rows=(0, 16))
    with pytest.raises(ValueError, match=r"^Token rows must be distinct, not \(1, 1\)$"):
        Ring(CTRL, DXT, dxes=2, slots=SLOTS, rows=(1, 1))
    with pytest.raises(ValueError, match="^Slots must be between 1 and 16, not 17$"):
        Ring(CTRL, DXT, dxes=2, slots=17, rows=(0,))
    with pytest.raises(ValueError, match=r"^A ring of copies \(copy=6\) has links of one token: "
                                         r"link must be None and buffer 0, not 6 and 0$"):
        schedule([Request(1, 1)], [lambda T: 10], 6, 1, copy=6)


# --slow (about 60 s): test_three_requests_pass_two_dxes runs the same ring in make test,
# without idle rows or back-pressure, so that its timing is the model's.
@pytest.mark.slow
def test_back_pressure_holds_the_ring():
    """The short ring with longer prompts (tokens back to back fill every link), the host idle
    in 30 % of cycles and ``output`` not taken in every other window of 1,000 cycles: the last
    link stays full, the last DXE holds its ``done``, its input link fills and the DXE before it
    holds its own; every output row and the KV memories are still the golden's, and each DXE
    runs its tokens one after another."""
    case = Case(SHORT, CTRL, DXT, DXES, ((4, 1), (3, 1), (1, 2)))
    run = _run(case, idle=0.3, stall=1000, seed=4)
    print(f"\ncycles each DXE held its done: {run.held}")
    assert all(run.held)
    _check_outputs(case, run)
    starts, finishes = run.starts, run.finishes
    assert np.all(starts[1:] >= finishes[:-1]) and np.all(starts[:, 1:] > finishes[:, :-1])
    assert max(c for *_, c in run.host.outputs) > case.schedule.makespan


# --slow (about 60 s): the one-slot ring's stage drives the DXE's plain restart and position;
# test_three_requests_pass_two_dxes runs the slotted ring in make test.
@pytest.mark.slow
def test_one_slot_runs_the_requests_in_turn():
    """The short ring with one slot (a KV group a DXE): each request alone, the next joining in
    the slot when the one before has left, its restart and position on the DXE's plain inputs;
    rows, KV memories and timing as the slotted ring's test."""
    case = Case(SHORT, CTRL, replace(DXT, kv_groups=KV_HEADS), DXES, LENGTHS, slots=1)
    run = _run(case)
    _check_outputs(case, run)
    assert case.schedule.order == [0, 0, 1, 2, 2]
    utilization = _check_timing(case, run)
    print(f"\none slot: makespan {case.schedule.makespan}, utilization {utilization:.4f}")


#: The whole reduced layer (sim/rdxe/reduced.py), 2 DXEs of 2 layers: the loop's
#: controller (tests/test_rdxe_loop.py) and the slots' DXT (a KV group for each of 2 slots x 2
#: layers, tests/test_rdxe_slots.py); the requests of tests/test_rdxe_ring.py.
FULL_LENGTHS = ((2, 3), (1, 2), (3, 1))


# --slow (about 10 min): the whole layer's 3,278 cycles a token a DXE; make test's
# test_three_requests_pass_two_dxes runs the same ring on a short program.
@pytest.mark.slow
def test_the_reduced_layer_on_two_dxes_of_two_layers():
    """Every word of the reduced layer, 2 DXEs x 2 layers, 2 slots, 9 tokens of the three
    requests of tests/test_rdxe_ring.py: every output row bit-exact against the ring's golden,
    the KV memories each golden DXE's, every dispatch, start and finish and the makespan the
    schedule's; the utilization printed beside the model's."""
    from tests.test_rdxe_loop import CFG
    from tests.test_rdxe_slots import DXT as SLOT_DXT
    case = Case(program(), CFG, SLOT_DXT, 2 * DXES, FULL_LENGTHS)
    run = _run(case)
    _check_outputs(case, run)
    utilization = _check_timing(case, run)
    s = case.schedule
    assert utilization == pytest.approx(s.ring_utilization, abs=0)
    print(f"\nring: {DXES} DXEs x 2 layers, {len(s.dispatch)} tokens, makespan {s.makespan}, "
          f"busy {s.busy.tolist()}, utilization {utilization:.4f} (model "
          f"{s.ring_utilization:.4f})")
