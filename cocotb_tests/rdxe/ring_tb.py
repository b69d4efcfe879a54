"""cocotb testbench of the ring of DXEs (``rdxe-ring``, docs/rdxe.md 16.4).

The host's part, through the ring's ports only: each DXE loaded on its ``dxe[i]`` ports as the
``rdxe-dxe`` testbench loads an engine (:func:`~sim.rdxe.host.host_loads`: the
stride, each layer's score step, the DXT side's fixed entries, tables, WMEM rows and PPU
entries, ``eps``; the TB and rr-SRAM cleared, the program and the layers' stacked constants
written), the program read back on ``ext``, ``words`` held at the whole program; then requests played through ``input`` and ``output`` as the ring's host
(:class:`Dispatcher`): tokens in the cycle model's order, each as soon as it is ready (a
request's first token once it holds a slot, a prompt token after the one before it, a generated
one once the pass before it has left ``output``, its inputs made from that pass's rows by the
toy host of sim/rdxe/reduced.py); at the end each DXE's token rows and KV caches read
back (the rows on ``ext``, the caches through the simulator's hierarchy).

The layer: :func:`sim.rdxe.reduced.attention` at the block's shape (query heads
``group_size x kv_groups / (layers x slots)`` of ``head_dim``, the residual ``heads x
head_dim``), assembled to loop, ``layers`` distinct layers a DXE (tests/test_rdxe_assemble.py's
``variant``). Its output reads the slot's KV cache, so a token run in another slot, or a slot
not started over, gives other rows.

The model (:class:`RingModel`) is fed by the input monitors: it mirrors each DXE's memories
from the ``ext`` writes (:class:`~sim.rdxe.host.DxeModel`) and answers the host's
reads from them; for each token that entered on ``input`` (its rows, slot, restart) it runs the
ring's golden DXEs (:class:`golden.rdxe.ring.Dxe`) in turn and expects the rows, the slot and
no error on ``output``. At the end every request's outputs are also checked against
:func:`golden.rdxe.ring.run_ring`, and, at full rate, every dispatch, every DXE's run start
and finish (seen on the stages' ``run`` and ``done``) and every pass's exit from ``output``
against :func:`sim.rdxe.ring.schedule` with ``copy`` (the model is the timing's
specification).

Tests: ``full_rate`` (3 requests of 2, 1 and 3 passes, 2 slots: the third joins in the second's
slot after it left; no idle, no back-pressure: cycle-exact), ``stalled`` (longer prompts so
tokens follow each other, the host idle 30 % of cycles, ``output`` not taken in every other
window of 1,000 cycles and 30 % of the others: a DXE holds its ``done``; rows exact).
"""

from __future__ import annotations

import dataclasses

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from golden.rdxe import assemble as A
from golden.rdxe import ring as R
from hdl.rdxe.ctrl import Store
from hdl.rdxe.ring import copy_cycles
from sim.rdxe import reduced
from sim.rdxe.host import DxeModel, host_loads, row_elements, row_values
from sim.rdxe.ring import Request, rtl_costs, schedule

from ..functional import sampler
from ..streams import ClockService, PayloadCodec, StreamSink
from ..tb import BlockTB, block_params, select_tb

__all__ = ["RingLayer", "ring_layer", "RingModel", "Dispatcher", "RingTB"]

#: Cycles of the windows in which ``stalled`` alternately takes ``output`` and not.
STALL_WINDOW = 1000


@dataclasses.dataclass
class RingLayer:
    """What the ring runs: the assembled ``asm``, every layer's ``tables`` (``dxes x layers``),
    each DXE's stacked tables, the TB ``inputs`` (name -> elements) and the toy ``host``."""

    asm: A.Assembled
    tables: list
    stacks: list
    inputs: dict
    host: reduced.Host
    hidden: int


def ring_layer(params) -> RingLayer:
    """The layer at the ring's shape (module notes); raises AssertionError when its inputs are
    not the ring's ``rows`` TB rows."""
    from tests.test_rdxe_assemble import variant

    d, kv = params.head_dim, params.kv_groups // (params.layers * params.slots)
    heads = params.group_size * kv
    hidden = heads * d
    base = reduced.layer_tables(hidden, 2 * hidden, heads, kv, d)
    inputs = {"h": hidden, "cos": d // 2, "sin": d // 2}
    asm = A.assemble(reduced.short(heads, kv, d), base, inputs, ["h"], params.space(), d,
                     in_place=("h",), keep=("cos", "sin"))
    L = params.lanes
    rows = [asm.inputs[name] // L + i for name, n in inputs.items() for i in range(-(-n // L))]
    assert rows == list(range(params.rows)), \
        f"the layer's inputs are TB rows {rows}, the ring moves rows 0 to {params.rows - 1}"
    tables = [variant(base, l) for l in range(params.dxes * params.layers)]
    n = params.layers
    stacks = [A.stacked_tables(tables[i * n:(i + 1) * n], asm) for i in range(params.dxes)]
    return RingLayer(asm, tables, stacks, inputs, reduced.Host(hidden, d), hidden)


def ring_schedule(params, layer: RingLayer, lengths):
    """The cycle model of ``lengths`` (prompt, generated) requests on this ring
    (:func:`sim.rdxe.ring.schedule` with ``copy``: docs/rdxe.md 16.3)."""
    step = A.stride(layer.asm)
    shapes = {i: g[0].shape for i, g in layer.stacks[0][0].gemvs.items()}
    view = dataclasses.replace(params.dxt_config(), kv_groups=step.kv_groups)
    costs = rtl_costs(params.ctrl_config(), view, layer.asm.words, shapes,
                      (params.layers,) * params.dxes)
    return schedule([Request(p, g) for p, g in lengths], costs, None, params.slots,
                    copy=params.rows)


def token_rows(layer: RingLayer, token: dict, lanes: int) -> list[int]:
    """A token's inputs (name -> fp32 codes) as the TB rows the ring moves, in order."""
    return [v for name in layer.inputs
            for v in row_values(np.asarray(token[name], np.uint32), lanes, 32)]


def rows_token(layer: RingLayer, rows: list[int], lanes: int) -> dict:
    """:func:`token_rows`' inverse."""
    words = np.array([e for r in rows for e in row_elements(r, lanes, 32)], np.uint32)
    out, at = {}, 0
    for name, n in layer.inputs.items():
        out[name] = words[at:at + n]
        at += -(-n // lanes) * lanes
    return out


class RingModel:
    """The ring's contract, fed by the input monitors (module notes)."""

    def __init__(self, params, layer: RingLayer):
        self.params, self.layer, self.lanes = params, layer, params.lanes
        self.mirrors = [DxeModel(params, layer.asm, stack) for stack in layer.stacks]
        n = params.layers
        self.golden = [R.Dxe(layer.asm, layer.tables[i * n:(i + 1) * n], params.slots)
                       for i in range(params.dxes)]
        self.beats: list[dict] = []
        self.checked = False

    def ext(self, d: int, item) -> list[dict]:
        return self.mirrors[d].ext(item)

    def _check_loads(self):
        """The golden runs the layer's words and constants: each DXE must hold them."""
        for d, (mirror, stack) in enumerate(zip(self.mirrors, self.layer.stacks)):
            words = list(self.layer.asm.words)
            assert mirror.prog[:len(words)] == words, f"DXE {d}: program written differs"
            const = stack[0].vectors.words
            assert np.array_equal(mirror.const[:len(const)], const), \
                f"DXE {d}: constants written differ from its layers'"
        self.checked = True

    def input(self, beat) -> list[dict]:
        """A beat on ``input``; a token's last: its rows through every golden DXE."""
        self.beats.append(beat)
        if len(self.beats) < self.params.rows:
            return []
        beats, self.beats = self.beats, []
        if not self.checked:
            self._check_loads()
        last = beats[-1]
        slot = last["slot"]
        token = rows_token(self.layer, [b["data"] for b in beats], self.lanes)
        for dxe, mirror in zip(self.golden, self.mirrors):
            if last["restart"]:
                dxe.positions[slot] = last["position"]
            token = dxe.token(slot, token)
            for name, value in token.items():     # the DXE's TB after the run, for host reads
                at = self.layer.asm.inputs[name]
                mirror.tb[at:at + len(value)] = value
        return [{"data": v, "slot": slot, "error": 0}
                for v in token_rows(self.layer, token, self.lanes)]


class Dispatcher:
    """The ring's host (module notes): queues each token's rows on the ``input`` driver, each
    behind a gate for the cycle it is ready, in the model's ``order``; takes each pass's rows
    from ``output`` as they come. Cycles are counted from ``start``."""

    def __init__(self, tb: "RingTB", requests, order):
        self.tb, self.requests, self.order = tb, requests, order
        self.slot = R.dispatch_slots([r.passes for r in requests], tb.params.slots, order)
        n, slots = len(requests), tb.params.slots
        self.ready = [0 if r < slots else None for r in range(n)]
        self.waiting = list(range(min(slots, n), n))
        self.inputs = [r.prompt[0] for r in requests]
        self.sent, self.left = [0] * n, [0] * n
        self.next, self.start = 0, None
        #: Per pass in the order they left: (request, pass, token, exit cycle).
        self.outputs: list[tuple] = []

    def begin(self):
        """Tokens may enter from the next cycle on."""
        self.start = self.tb.counter.cycle + 1
        self.pump()

    def pump(self):
        driver = self.tb.drivers["input"]
        while self.next < len(self.order):
            r = self.order[self.next]
            if self.ready[r] is None:
                return
            k, at = self.sent[r], self.start + self.ready[r]
            driver.gate(lambda at=at: self.tb.counter.cycle >= at)
            meta = {"slot": self.slot[r], "restart": int(k == 0), "position": 0}
            driver.send_all({"data": v, **meta}
                            for v in token_rows(self.tb.layer, self.inputs[r], self.tb.lanes))
            self.sent[r], self.next = k + 1, self.next + 1
            request = self.requests[r]
            if k + 1 < len(request.prompt):       # the next prompt token follows this one
                self.inputs[r], self.ready[r] = request.prompt[k + 1], 0
            else:                                 # a generated one: when this pass has left
                self.ready[r] = None

    def output(self, rows: list[int], cycle: int):
        """A pass's rows, the last taken in ``cycle``."""
        r = self.order[len(self.outputs)]
        k = self.left[r]
        self.left[r] += 1
        token = rows_token(self.tb.layer, rows, self.tb.lanes)
        leave = cycle + 1 - self.start
        self.outputs.append((r, k, token, leave))
        request = self.requests[r]
        if k + 1 == request.passes:
            if self.waiting:
                self.ready[self.waiting.pop(0)] = leave
        elif k + 1 >= len(request.prompt):
            self.inputs[r] = self.tb.layer.host(r, k + 1, {"h": token["h"]})
            self.ready[r] = leave
        self.pump()

    @property
    def done(self) -> bool:
        return len(self.outputs) == sum(r.passes for r in self.requests)


class WindowSink(StreamSink):
    """``output``'s sink for ``stalled``: not ready in every other window of ``window`` cycles,
    and with the random back-pressure in the others."""

    def __init__(self, dut, prefix, clk, rng, backpressure, window: int):
        self.window, self.service = window, ClockService.of(clk)
        super().__init__(dut, prefix, clk, rng, backpressure)

    def _on_edge(self):
        if (self.service.cycle // self.window) % 2:
            if self._ready != 0:
                self.ready.value = self._ready = 0
            return
        super()._on_edge()


def _samplers(block: str, slots: int) -> dict:
    """Coverpoints of the tokens the ring took and gave (module notes of :class:`RingTB`)."""
    used = sampler({f"{block}.slot": (lambda i: i["slot"], list(range(slots)))})
    events = ("join_while_running", "slot_reused", "output_stalled_done_held")
    event = sampler({f"{block}.event": (lambda e: e, events)})
    return {"output": used, "event": event}


class RingTB(BlockTB):
    """The ring with its host: loads, requests, read-backs (module notes).

    Functional coverage, sampled from what the monitors saw: every slot on ``output``; a
    request joining (its first token taken on ``input``) while another request's token is in
    the ring; a slot taken by a request after another left it; ``output`` not ready while its
    token waits and the last DXE's ``done`` is held (valid, not taken)."""

    def __init__(self, dut, *, window: int = 0, backpressure: float = 0.3, **kwargs):
        p = block_params()
        self.dxes = p.dxes
        streams = ("table", "wmem", "ppu", "ext") + (("scales",) if p.layers > 1 else ())
        # With windows, output's sink is WindowSink (the plain one then stays ready).
        super().__init__(dut, inputs=("input", *(f"dxe__{d}__{s}" for d in range(p.dxes)
                                                 for s in streams)),
                         outputs=("output", *(f"dxe__{d}__ext_data" for d in range(p.dxes))),
                         backpressure=0.0 if window else backpressure, **kwargs)
        if window:
            self.sinks["output"] = WindowSink(dut, "output", self.clk, self.rng, backpressure,
                                              window)
        self.layer = ring_layer(p)
        self.rmodel = RingModel(p, self.layer)
        self.lanes = p.lanes
        self.samplers = _samplers(self.block.name, p.slots)
        self.out_rows: list[int] = []
        self.dispatch: list[tuple] = []
        self.in_rows = 0
        self.dispatcher: Dispatcher | None = None
        self.starts = [[] for _ in range(p.dxes)]
        self.finishes = [[] for _ in range(p.dxes)]
        self.held = [0] * p.dxes
        self._done_was = [False] * p.dxes
        self.stages = [getattr(dut, f"stage{d}") for d in range(p.dxes)]
        self.in_flight = 0
        self.slot_owner: dict[int, int] = {}
        ClockService.of(self.clk).on_read(self._watch_stages)

    def _watch_stages(self):
        """Each DXE's run taken (a start) and its ``done.valid`` rising (a finish: the cycle
        after, as the model counts), and the cycles a ``done`` is held."""
        if self.dispatcher is None or self.dispatcher.start is None:
            return
        cycle = self.counter.cycle - self.dispatcher.start
        for d, stage in enumerate(self.stages):
            if int(stage.run__valid.value) and int(stage.run__ready.value):
                self.starts[d].append(cycle)
            done = bool(int(stage.done__valid.value))
            taken = done and bool(int(stage.done__ready.value))
            if done and not self._done_was[d]:
                self.finishes[d].append(cycle + 1)
            self._done_was[d] = done and not taken
            self.held[d] += self._done_was[d]
        last = self.dxes - 1
        if self._done_was[last] and not int(self.dut.output__ready.value) and \
                int(self.dut.output__valid.value):
            self.samplers["event"]("output_stalled_done_held")

    def observe(self, stream, item, cycle):
        super().observe(stream, item, cycle)
        rows = self.params.rows
        if stream == "input":
            if self.in_rows % rows == 0:
                self._joined(item, cycle)
            self.in_rows += 1
        elif stream == "output":
            self.out_rows.append(item["data"])
            if len(self.out_rows) == rows:
                rows_, self.out_rows = self.out_rows, []
                self.in_flight -= 1
                self.dispatcher.output(rows_, cycle)

    def _joined(self, item, cycle):
        """A token's first row taken on ``input``: a dispatch."""
        start = self.dispatcher.start
        r = self.dispatcher.order[len(self.dispatch)]
        k = len([x for x in self.dispatch if x[0] == r])
        self.dispatch.append((r, k, cycle - start))
        if item["restart"]:
            if self.in_flight:
                self.samplers["event"]("join_while_running")
            if item["slot"] in self.slot_owner and self.slot_owner[item["slot"]] != r:
                self.samplers["event"]("slot_reused")
            self.slot_owner[item["slot"]] = r
        self.in_flight += 1

    def model(self, stream, item):
        if stream == "input":
            return {"output": self.rmodel.input(item)}
        if stream.endswith("__ext"):
            d = int(stream.split("__")[1])
            return {f"dxe__{d}__ext_data": self.rmodel.ext(d, item)}
        return {}

    # --- the host ---------------------------------------------------------------------------

    def ext_reads(self, d: int, store: Store, rows):
        self.send(f"dxe__{d}__ext", [{"store": store.value, "row": r, "write": 0, "data": 0,
                                      "mask": 0} for r in rows])

    async def load(self):
        """Each DXE's loads on its ``dxe[i]`` ports (module notes); ``words`` held."""
        asm = self.layer.asm
        self.dut.words.value = PayloadCodec(self.ports["words"]).pack(
            {"pc": 0, "count": len(asm.words)})
        for d, stack in enumerate(self.layer.stacks):
            ports, streams = host_loads(self.params, asm, stack)
            for name, value in ports.items():
                getattr(self.dut, f"dxe__{d}__{name}").value = value
            for name, items in streams.items():
                self.send(f"dxe__{d}__{name}", items)
            self.ext_reads(d, Store.PROG, range(len(asm.words)))
        await self.drain()

    async def play(self, lengths, stall_cycles: int = 10_000) -> Dispatcher:
        """Run requests of ``lengths`` ((prompt, generated) tokens) through the ring in the
        model's order; then read each DXE's token rows back on its ``ext``."""
        total = sum(p for p, _ in lengths)
        pool = iter(reduced.tokens(total, self.layer.hidden, self.params.head_dim))
        requests = [R.RingRequest(tuple(next(pool) for _ in range(p)), g) for p, g in lengths]
        self.schedule = ring_schedule(self.params, self.layer, lengths)
        self.dispatcher = Dispatcher(self, requests, self.schedule.order)
        self.dispatcher.begin()
        # A generated token is queued when the pass before it leaves, after drain may have
        # seen every driver idle: drain again until every pass is out.
        for _ in range(sum(r.passes for r in requests)):
            await self.drain(stall_cycles=stall_cycles)
            if self.dispatcher.done:
                break
        assert self.dispatcher.done, \
            f"{len(self.dispatcher.outputs)} passes came out of {sum(r.passes for r in requests)}"
        for d in range(self.dxes):
            self.ext_reads(d, Store.TB, range(self.params.rows))
        await self.drain()
        self.requests = requests
        return self.dispatcher

    # --- checks -----------------------------------------------------------------------------

    def check_golden(self):
        """Every pass's rows against :func:`golden.rdxe.ring.run_ring` in the model's order."""
        want = R.run_ring(self.layer.asm, self.layer.tables, self.dxes, self.params.slots,
                          self.requests, self.layer.host, self.schedule.order)
        for r, k, token, _ in self.dispatcher.outputs:
            assert np.array_equal(token["h"], want[r][k]["h"]), \
                f"request {r} pass {k}: h differs from run_ring's at " \
                f"{np.flatnonzero(token['h'] != want[r][k]['h']).tolist()}"
        assert self.dispatcher.slot == self.schedule.slots

    def check_caches(self):
        """Each DXE's KV memories (read through the hierarchy) against its golden DXE's caches
        at their groups."""
        from tests.test_rdxe_loop import _kv_image

        dxt = self.params.dxt_config()
        for d, dxe in enumerate(self.rmodel.golden):
            got = np.zeros((dxt.vacs, dxt.kv_rows, dxt.lanes), np.int8)
            side = getattr(self.dut, f"dxe{d}").side.dxt
            for v in range(dxt.vacs):
                cache = getattr(side, f"vac{v}").kv_cache
                for row in range(dxt.kv_rows):
                    got[v, row] = np.array(row_elements(int(cache[row].value), dxt.lanes, 8),
                                           np.uint8).view(np.int8)
            caches = {g: ([x[None] for x in dxe.keys[g]], [x[None] for x in dxe.values[g]])
                      for g in dxe.keys}
            want = _kv_image(caches, dxt)
            assert np.array_equal(got, want), \
                f"DXE {d}: KV memories differ at (vac, row, lane) " \
                f"{np.argwhere(got != want)[:4].tolist()}"

    def check_timing(self) -> float:
        """Every dispatch, every DXE's run start and finish, every pass's exit and the
        makespan the model's; return the utilization (busy over DXEs x makespan)."""
        s = self.schedule
        assert self.dispatch == s.dispatch, f"dispatches {self.dispatch}, model {s.dispatch}"
        starts, finishes = np.array(self.starts).T, np.array(self.finishes).T
        assert starts.tolist() == s.start.tolist(), \
            f"DXE run starts {starts.tolist()}, model {s.start.tolist()}"
        assert finishes.tolist() == s.finish.tolist(), \
            f"DXE finishes {finishes.tolist()}, model {s.finish.tolist()}"
        for r, k, _, leave in self.dispatcher.outputs:
            assert leave == s.leaves[r][k], \
                f"request {r} pass {k} left output at {leave}, model {s.leaves[r][k]}"
        makespan = max(leave for *_, leave in self.dispatcher.outputs)
        assert makespan == s.makespan
        busy = (finishes - starts).sum(axis=0)
        assert busy.tolist() == s.busy.tolist()
        return float(busy.sum()) / (self.dxes * makespan)


def _tb(dut, **kwargs) -> RingTB:
    return select_tb(dut, {"rdxe-ring": RingTB}, **kwargs)


#: Requests of the tests, (prompt, generated) tokens: passes 2, 1 and 3; the third joins in the
#: second's slot after its one pass has left.
LENGTHS = ((1, 2), (1, 1), (3, 1))
#: ``stalled``'s: longer prompts, so that tokens follow each other through the ring.
STALLED = ((4, 1), (3, 1), (1, 2))


@cocotb.test()
async def full_rate(dut):
    """The requests of :data:`LENGTHS`, no idle, no back-pressure: every output row and slot
    the model's and run_ring's, the KV memories each golden DXE's, the host's reads on each
    ``ext`` its program and its last token's rows; every dispatch, DXE start and finish, pass
    exit and the makespan the cycle model's. Reports the utilization."""
    tb = _tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    await tb.load()
    await ClockCycles(tb.clk, 2)
    await tb.play(LENGTHS)
    tb.check_golden()
    tb.check_caches()
    utilization = tb.check_timing()
    s = tb.schedule
    assert s.slots[2] == s.slots[1] and s.admitted[2] == s.finished[1] > 0
    tb.report("full_rate", items=len(s.dispatch), cycles=s.makespan,
              per_cycle=round(len(s.dispatch) / s.makespan, 6), latency=s.leaves[0][0],
              latency_meaning="first token's first row on input to its last row out",
              busy=s.busy.tolist(), utilization=round(utilization, 4),
              copy=list(copy_cycles(tb.params.rows)))


@cocotb.test()
async def stalled(dut):
    """The requests of :data:`STALLED`, the host idle 30 % of cycles, ``output`` not taken in
    every other window of :data:`STALL_WINDOW` cycles and 30 % of the others: every row, slot
    and KV memory still exact, the last DXE held its ``done``, each DXE ran its tokens one
    after another."""
    tb = _tb(dut, idle=0.3, backpressure=0.3, window=STALL_WINDOW)
    await tb.reset()
    await tb.load()
    await tb.play(STALLED, stall_cycles=10 * STALL_WINDOW)
    tb.check_golden()
    tb.check_caches()
    tb.log.info("cycles each DXE held its done: %s", tb.held)
    assert tb.held[-1] > 0, "the last DXE never held its done: the stalls did not reach it"
    starts, finishes = np.array(tb.starts), np.array(tb.finishes)
    assert np.all(starts[:, 1:] > finishes[:, :-1])

