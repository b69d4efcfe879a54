"""Simulate a workload on the ring of DXEs, token-pipelined (rDXE) or in padded batches.

The second and third layers of :mod:`sim.rdxe`: the workloads (:func:`workload`), the ring
(:class:`Ring`, :func:`simulate_rdxe`), the batched baseline (:func:`simulate_batched`) and one
sweep point of either (:class:`Point`, :func:`run_point`). The same line of servers on the RTL's
costs (docs/rdxe.md, section 16): a DXE's cost from its layer program's cycle model
(:func:`program_cycles`, :func:`rtl_costs`) and the ring's timing of a list of requests
(:func:`schedule`), which the ring's RTL is to meet cycle for cycle.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from golden.rdxe import MAX_TOKENS, DxtConfig, command_cycles, kv_capacity, word_cycles
from golden.rdxe.ring import dispatch_slots, split_layers
from hdl.rdxe.ctrl import LAYER_OVERHEAD, CtrlConfig, run_cycles
from hdl.rdxe.dxts import check_dxts, output_shares, result_queue_depth, shared_cycles
from hdl.rdxe.dxtside import instruction_cycles as dxt_instruction_cycles
from hdl.rdxe.isa import OPCODES, instruction_layout
from hdl.rdxe.ring import MAX_ROWS, copy_cycles
from hdl.validate import integer

from .layers import (DXTS_PER_DXE, Decoder, MT5_SMALL, _check_model, _check_params, _layer_table,
                     _macs_table, _tmax)

__all__ = [
    "DISTRIBUTIONS", "SYSTEMS", "LAYER_OVERHEAD", "Request", "Ring", "SimResult", "Point",
    "Schedule", "split_layers", "workload", "simulate_rdxe", "simulate_batched", "run_point",
    "program_cycles", "rtl_costs", "schedule",
]


#: The two systems a sweep point can simulate.
SYSTEMS = ("rdxe", "batch")
#: Request-length distributions (prompt range, generation range, kind). The paper publishes no
#: workload for its utilization figures; "uniform" is ours, the others test the sensitivity.
DISTRIBUTIONS = {
    "uniform": ((16, 256), (16, 256), "uniform"),
    "loguniform": ((8, 512), (8, 512), "loguniform"),
    "equal": ((136, 136), (136, 136), "uniform"),
}

_MHZ_MAX = 10_000.0


# --- workload -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request: ``prompt`` tokens in, ``generate`` tokens out (both 1 to 32768).

    It passes the ring ``prompt + generate - 1`` times: the prompt tokens, then each generated
    token but the last is fed back.
    """

    prompt: int
    generate: int

    def __post_init__(self):
        integer(self.prompt, "Prompt length", 1, MAX_TOKENS // 2)
        integer(self.generate, "Generation length", 1, MAX_TOKENS // 2)

    @property
    def passes(self) -> int:
        return self.prompt + self.generate - 1


def workload(n: int, seed: int, dist: str = "uniform") -> list[Request]:
    """Return ``n`` requests with prompt and generation lengths drawn independently.

    ``dist`` is a key of :data:`DISTRIBUTIONS`: ``"uniform"`` (integers uniform on 16..256, both),
    ``"loguniform"`` (log-uniform on 8..512, both), ``"equal"`` (136 and 136: no spread). The
    NumPy generator is seeded with ``seed``.
    """
    n = integer(n, "Request count", 1, 1 << 20)
    seed = integer(seed, "Seed", 0, (1 << 32) - 1)
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"Distribution must be one of {', '.join(map(repr, DISTRIBUTIONS))}, "
                         f"not {dist!r}")
    (p_lo, p_hi), (g_lo, g_hi), kind = DISTRIBUTIONS[dist]
    rng = np.random.default_rng(seed)

    def draw(lo, hi):
        if kind == "uniform":
            return rng.integers(lo, hi + 1, n)
        return np.floor(np.exp(rng.uniform(math.log(lo), math.log(hi + 1), n))).astype(int)

    prompts, gens = draw(p_lo, p_hi), draw(g_lo, g_hi)
    return [Request(int(p), int(g)) for p, g in zip(prompts, gens)]


# --- the ring -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ring:
    """A ring of DXEs and how it is run.

    Parameters
    ----------
    model : Decoder
        The decoder whose layers the ring holds.
    stages : int
        DXEs in the ring, 1 to the model's layer count (4: Fig. 3).
    slots : int
        Resident requests (rDXE) or resident batches (baseline), 1 to 4096 (4: Fig. 3's four
        users).
    f_mhz : float
        DXE clock in MHz, above 0 (200: the fastest point of Fig. 6's table).
    link_mbps : float or None
        Bandwidth of the link into each DXE in Mb/s (800: "16-channel quad-SPI with a bandwidth of
        800 Mb/s", Sec. III-A), or None for no links (tokens move in zero time).
    buffer : int
        Extra token slots in front of each server, 0 to 64 (0: each server holds one token).
    params : DxtConfig
        The DXT.
    dxts : int
        DXTs per DXE, 1 to 64 (8).

    Raises
    ------
    TypeError, ValueError
        A message naming the field, the allowed values and the value given.
    """

    model: Decoder = MT5_SMALL
    stages: int = 4
    slots: int = 4
    f_mhz: float = 200.0
    link_mbps: float | None = 800.0
    buffer: int = 0
    params: DxtConfig = DxtConfig()
    dxts: int = DXTS_PER_DXE

    def __post_init__(self):
        _check_model(self.model)
        integer(self.stages, "Ring size", 1, self.model.layers)
        integer(self.slots, "Resident request count", 1, 4096)
        _positive(self.f_mhz, "Clock frequency (MHz)", _MHZ_MAX)
        if self.link_mbps is not None:
            _positive(self.link_mbps, "Link bandwidth (Mb/s)", 1e6)
        integer(self.buffer, "Buffer depth", 0, 64)
        _check_params(self.params, self.model)
        integer(self.dxts, "DXT count", 1, 64)

    @property
    def layers(self) -> tuple[int, ...]:
        """Layers held by each DXE."""
        return split_layers(self.model.layers, self.stages)

    @property
    def link_cycles(self) -> int:
        """DXE cycles to move one token (``d_model`` INT8 values) over a link: ``ceil(8 d_model
        f / bandwidth)``; 0 without links."""
        if self.link_mbps is None:
            return 0
        return math.ceil(8 * self.model.d_model * self.f_mhz / self.link_mbps - 1e-9)

    @property
    def macs_per_cycle(self) -> int:
        """MACs of the whole ring per cycle: ``S * dxts * vacs * lanes``."""
        return self.stages * self.dxts * self.params.vacs * self.params.lanes

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV cache per layer a DXE holds (summed over its resident requests): a DXT's
        KV caches hold ``kv_capacity`` tokens of one KV group and hold ``ceil(H / dxts)`` groups
        for each of the DXE's layers (its most loaded DXE)."""
        groups = -(-self.model.heads // self.dxts) * max(self.layers)
        return kv_capacity(self.params) // groups

    @property
    def servers(self) -> int:
        """Servers of the line: ``2 S`` with links, ``S`` without."""
        return 2 * self.stages if self.link_mbps is not None else self.stages


def _positive(value, what: str, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number above 0 and at most {maximum:g}, "
                        f"not {value!r}")
    if not 0 < value <= maximum or not math.isfinite(value):
        raise ValueError(f"{what} must be above 0 and at most {maximum:g}, not {value!r}")
    return float(value)


@dataclass
class SimResult:
    """What one simulation measured (times in DXE cycles).

    Attributes
    ----------
    makespan : int
        Cycle the last request's last token left the ring (all requests present at cycle 0).
    busy : np.ndarray
        ``(S,)`` cycles each DXE computed (padding included).
    useful : np.ndarray
        ``(S,)`` cycles each DXE spent on real tokens.
    useful_macs : int
        Multiply-accumulates of the real tokens at their real contexts.
    macs_per_cycle : int
        MACs the ring has per cycle.
    admitted, finished : np.ndarray
        Per request: the cycle its slot was given, the cycle its last token left the ring.
    inter_token : np.ndarray
        Per request: mean cycles between its generated tokens leaving the ring (NaN for one
        generated token).
    generated : int
        Generated tokens.
    kv_peak : int
        Largest sum of the final KV lengths (tokens, padding included) of the owners resident at
        one time: an upper bound of the KV cache one layer needs.
    intervals : list
        ``(server, start, finish, owner)`` of every service when recorded, else empty.
    """

    makespan: int
    busy: np.ndarray
    useful: np.ndarray
    useful_macs: int
    macs_per_cycle: int
    admitted: np.ndarray
    finished: np.ndarray
    inter_token: np.ndarray
    generated: int
    kv_peak: int
    intervals: list = field(default_factory=list)

    @property
    def mac_utilization(self) -> float:
        """Useful MACs over the MACs the ring could do in the makespan."""
        return self.useful_macs / (self.macs_per_cycle * self.makespan)

    @property
    def useful_utilization(self) -> float:
        """DXE cycles spent on real tokens over ``S`` times the makespan."""
        return float(self.useful.sum()) / (len(self.useful) * self.makespan)

    @property
    def busy_utilization(self) -> float:
        """DXE cycles spent computing (padding included) over ``S`` times the makespan."""
        return float(self.busy.sum()) / (len(self.busy) * self.makespan)

    @property
    def latency(self) -> np.ndarray:
        """Per request: cycles from the start (all requests arrive at cycle 0) to its end."""
        return self.finished.astype(np.int64)

    @property
    def service(self) -> np.ndarray:
        """Per request: cycles from its admission to its end."""
        return (self.finished - self.admitted).astype(np.int64)


@dataclass
class _Owner:
    """A unit of admission: one request (rDXE) or one batch (baseline)."""

    passes: int            # passes through the ring
    dependent_from: int    # first pass that waits for the previous one to leave the ring
    context: np.ndarray    # (passes,) padded context of each pass (cost lookup)
    useful: np.ndarray     # (passes,) fraction of each pass's cycles spent on real tokens
    macs: np.ndarray       # (passes,) useful MACs of each pass (all layers)
    kv: int                # KV tokens at the end (padding included)


def _ring_servers(ring: Ring, owners: list[_Owner], batch: int) -> list:
    """The ring's line of servers for ``batch`` tokens a unit: per server its DXE (None for a
    link) and its cost by context (the model's layer table times the DXE's layers; a link's
    ``batch`` tokens)."""
    tmax = _tmax(max(int(o.context.max()) for o in owners))
    table = _layer_table(ring.model, ring.params, ring.dxts, batch, tmax)
    stage_cost = [[int(c) for c in n * table] for n in ring.layers]   # per DXE, by context
    link = None if ring.link_mbps is None else [batch * ring.link_cycles] * (tmax + 1)
    return _servers(stage_cost, link)


def _servers(stage_cost: list, link) -> list:
    """The line: each DXE's ``(index, cost by context)``, each after a link ``(None, link)`` when
    ``link`` (its cost by context) is given: ``link_in, DXE_0, link, DXE_1, ...``."""
    if link is None:
        return list(enumerate(stage_cost))
    return [server for d, cost in enumerate(stage_cost) for server in ((None, link), (d, cost))]


def _line(servers: list, stages: int, slots: int, buffer: int, owners: list[_Owner],
          record: bool, moves=None):
    """Run ``owners`` through a line of ``servers`` (per server its DXE index, or None for a
    link, and its cost by context), ``stages`` DXEs, ``slots`` owners resident.

    Exact recurrence of a line of single-token servers with blocking after service and FIFO order
    (tokens never overtake), fed by a round-robin dispatcher: token ``k`` starts on server ``s`` at
    ``max(arrival, leave[k-1][s])``, finishes ``cost`` later and leaves at ``max(finish,
    leave[k-1-b][s+1]) + move`` (``b`` = ``buffer``; ``move``: ``moves[s]``, the cycles the
    server stays held while it hands the token on once the next place is free, 0 by default);
    the dispatcher chooses token ``k`` when the first server frees (``leave[k-1][0]``) among the
    owners whose next token is ready then. Returns busy and useful cycles per DXE, the owners'
    admission cycles, every pass's leave cycle from the last server (per owner), the useful
    MACs, the recorded intervals and the recorded dispatches (``(owner, pass, cycle)``).
    """
    M, b = len(servers), buffer
    last = [0] * M                    # leave cycle of each server's latest token
    hist = [deque(maxlen=b + 1) for _ in range(M)]
    busy, useful = np.zeros(stages), np.zeros(stages)
    macs = 0
    n = len(owners)
    admitted = np.zeros(n, np.int64)
    leaves = [np.zeros(o.passes, np.int64) for o in owners]
    intervals, dispatched = [], []
    nxt = [0] * n                     # next pass of each owner
    ready = [0] * n                   # cycle that pass may enter
    served = [-1] * n                 # last dispatch (round robin)
    active = list(range(min(slots, n)))
    queue = deque(range(len(active), n))

    while active:
        free = last[0]
        waiting = [o for o in active if ready[o] <= free]
        if waiting:
            o = min(waiting, key=lambda i: (served[i], i))
        else:
            o = min(active, key=lambda i: (ready[i], served[i], i))
        own, k = owners[o], nxt[o]
        t = max(ready[o], free)
        served[o] = t
        T = int(own.context[k])
        frac = float(own.useful[k])
        arrival = t
        for s, (d, costs) in enumerate(servers):
            cost = costs[T]
            start = max(arrival, last[s])
            finish = start + cost
            if s + 1 < M:
                h = hist[s + 1]
                leave = max(finish, h[0]) if len(h) == b + 1 else finish
            else:
                leave = finish
            if moves is not None:
                leave += moves[s]
            hist[s].append(leave)
            last[s] = leave
            arrival = leave
            if d is not None:
                busy[d] += cost
                useful[d] += cost * frac
            if record:
                intervals.append((s, start, finish, o))
        if record:
            dispatched.append((o, k, t))
        macs += int(own.macs[k])
        leaves[o][k] = arrival
        nxt[o] = k + 1
        if k + 1 == own.passes:
            active.remove(o)
            if queue:
                new = queue.popleft()
                admitted[new] = ready[new] = arrival
                active.append(new)
        else:
            ready[o] = arrival if k + 1 >= own.dependent_from else t
    return busy, useful, admitted, leaves, macs, intervals, dispatched


def _kv_peak(admitted: np.ndarray, finished: np.ndarray, kv: list[int]) -> int:
    """The most KV-cache bytes resident at once, from each request's admission and finish."""
    events = sorted([(int(a), 1, i) for i, a in enumerate(admitted)] +
                    [(int(f), 0, i) for i, f in enumerate(finished)])
    level = peak = 0
    for _, arriving, i in events:                 # departures first at equal cycles
        level += kv[i] if arriving else -kv[i]
        peak = max(peak, level)
    return peak


def _check_requests(requests) -> list[Request]:
    if isinstance(requests, Request):
        requests = [requests]
    try:
        requests = list(requests)
    except TypeError:
        raise TypeError(f"Requests must be a non-empty sequence of Request, not "
                        f"{type(requests).__name__}") from None
    if not requests:
        raise ValueError("Requests must be a non-empty sequence of Request, not an empty one")
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"Requests must be a non-empty sequence of Request, not a sequence "
                            f"holding {type(r).__name__}")
    return requests


def _check_ring(ring) -> Ring:
    if not isinstance(ring, Ring):
        raise TypeError(f"Ring must be a Ring, not {type(ring).__name__}")
    return ring


def simulate_rdxe(requests, ring: Ring = Ring(), *, record: bool = False) -> SimResult:
    """Simulate token-level pipelining of ``requests`` on ``ring``.

    Every token of a request passes every DXE once: its prompt tokens back to back, each
    generated token after the previous one left the ring. ``ring.slots`` requests are resident;
    the next one (in order) takes the slot a finished one frees. ``record`` keeps every service
    interval (for a Gantt chart).
    """
    requests, ring = _check_requests(requests), _check_ring(ring)
    L = ring.model.layers
    tmax = _tmax(max(r.passes for r in requests))
    mac_table = L * _macs_table(ring.model, tmax)
    owners = []
    for r in requests:
        ctx = np.arange(1, r.passes + 1)
        owners.append(_Owner(r.passes, r.prompt, ctx, np.ones(r.passes), mac_table[ctx],
                             r.passes))
    busy, useful, admitted, leaves, macs, iv, _ = _line(
        _ring_servers(ring, owners, 1), ring.stages, ring.slots, ring.buffer, owners, record)
    finished = np.array([lv[-1] for lv in leaves], np.int64)
    itl = np.array([(lv[-1] - lv[r.prompt - 1]) / (r.generate - 1) if r.generate > 1
                    else np.nan for r, lv in zip(requests, leaves)])
    return SimResult(int(finished.max()), busy, useful, macs, ring.macs_per_cycle, admitted,
                     finished, itl, sum(r.generate for r in requests),
                     _kv_peak(admitted, finished, [o.kv for o in owners]), iv)


def simulate_batched(requests, ring: Ring = Ring(), batch: int = 8, *, record: bool = False
                     ) -> SimResult:
    """Simulate static padded batching of ``requests`` on ``ring``, ``batch`` requests a batch.

    Batch ``j`` holds requests ``j*batch`` to ``(j+1)*batch - 1`` (the last may be short: its
    empty slots are computed as padding). Its prompts are left-padded to its longest prompt
    ``P``; it then generates until its longest generation ``G`` is done: ``P + G - 1`` steps,
    each carrying ``batch`` tokens at the padded context ``k + 1``. Real tokens: request ``i``'s
    prompt at steps ``P - p_i .. P - 1`` and its generation at ``P .. P + g_i - 2``; their useful
    MACs use their real context. A request ends when its own last token leaves the ring (its
    batch may still run: the measure favours the baseline). ``ring.slots`` batches are resident.
    """
    requests, ring = _check_requests(requests), _check_ring(ring)
    batch = integer(batch, "Batch size", 1, 1024)
    L = ring.model.layers
    groups = [requests[j:j + batch] for j in range(0, len(requests), batch)]
    tmax = _tmax(max(max(r.prompt for r in g) + max(r.generate for r in g) for g in groups))
    mac_table = L * _macs_table(ring.model, tmax)
    owners, ends, firsts = [], [], []
    for g in groups:
        P, G = max(r.prompt for r in g), max(r.generate for r in g)
        steps = P + G - 1
        k = np.arange(steps)
        p = np.array([r.prompt for r in g])[:, None]
        last = np.array([P + r.generate - 2 for r in g])
        real = (k[None, :] >= P - p) & (k[None, :] <= last[:, None])
        real_ctx = np.clip(k[None, :] - (P - p) + 1, 0, tmax)
        macs = np.where(real, mac_table[real_ctx], 0).sum(axis=0)
        owners.append(_Owner(steps, P, k + 1, real.sum(axis=0) / batch, macs, batch * steps))
        ends.append(last)
        firsts.append(P - 1)
    busy, useful, adm_b, leaves, macs, iv, _ = _line(
        _ring_servers(ring, owners, batch), ring.stages, ring.slots, ring.buffer, owners, record)
    admitted, finished, itl = [], [], []
    for j, g in enumerate(groups):
        lv = leaves[j]
        for r, e in zip(g, ends[j]):
            admitted.append(adm_b[j])
            finished.append(lv[e])
            itl.append((lv[e] - lv[firsts[j]]) / (r.generate - 1) if r.generate > 1 else np.nan)
    finished = np.array(finished, np.int64)
    return SimResult(int(max(lv[-1] for lv in leaves)), busy, useful, macs, ring.macs_per_cycle,
                     np.array(admitted, np.int64), finished, np.array(itl),
                     sum(r.generate for r in requests),
                     _kv_peak(adm_b, np.array([lv[-1] for lv in leaves]),
                              [o.kv for o in owners]), iv)


# --- sweep points ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One sweep point: a system on a ring over one seeded workload.

    ``system`` is ``"rdxe"`` (token-level pipelining; ``batch`` must be 1) or ``"batch"`` (the
    padded baseline, ``batch``-way).
    """

    ring: Ring
    system: str
    batch: int
    seed: int
    requests: int
    dist: str = "uniform"

    def __post_init__(self):
        _check_ring(self.ring)
        if self.system not in SYSTEMS:
            raise ValueError(f"System must be 'rdxe' or 'batch', not {self.system!r}")
        integer(self.batch, "Batch size", 1, 1024)
        if self.system == "rdxe" and self.batch != 1:
            raise ValueError(f"Batch size of the rdxe system must be 1, not {self.batch}")
        integer(self.requests, "Request count", 1, 1 << 20)
        integer(self.seed, "Seed", 0, (1 << 32) - 1)
        if self.dist not in DISTRIBUTIONS:
            raise ValueError(f"Distribution must be one of "
                             f"{', '.join(map(repr, DISTRIBUTIONS))}, not {self.dist!r}")

    @property
    def label(self) -> str:
        return "rDXE" if self.system == "rdxe" else f"{self.batch}-way batch"


def run_point(point: Point) -> dict:
    """Simulate ``point`` and return its figures (a picklable dict; times in ms at the ring's
    clock): ``mac``, ``useful``, ``busy`` (utilizations, 0..1), ``makespan`` (cycles),
    ``throughput`` (generated tokens/s), ``latency`` (per request, from cycle 0), ``service``
    (per request, from admission), ``itl`` (mean inter-token time), ``kv_peak`` (tokens)."""
    if not isinstance(point, Point):
        raise TypeError(f"Point must be a Point, not {type(point).__name__}")
    reqs = workload(point.requests, point.seed, point.dist)
    if point.system == "rdxe":
        res = simulate_rdxe(reqs, point.ring)
    else:
        res = simulate_batched(reqs, point.ring, point.batch)
    ms = 1e-3 / point.ring.f_mhz
    return {"mac": res.mac_utilization, "useful": res.useful_utilization,
            "busy": res.busy_utilization, "makespan": res.makespan,
            "throughput": res.generated / (res.makespan * ms * 1e-3),
            "latency": (res.latency * ms).tolist(), "service": (res.service * ms).tolist(),
            "itl": float(np.nanmean(res.inter_token) * ms), "kv_peak": res.kv_peak}


# --- the ring on the RTL's costs ------------------------------------------------------------------


def program_cycles(ctrl: CtrlConfig, dxt: DxtConfig, words, gemv_shapes: dict, tokens: int,
                   dxts: int = 1, groups: int | None = None) -> int:
    """Cycles from ``run`` taken to ``done.valid`` for one layer's ``words``: the controller's
    model (:func:`hdl.rdxe.ctrl.run_cycles`), each DXT instruction's by the DXT side's
    (:func:`hdl.rdxe.dxtside.instruction_cycles`) with its commands timed by the DXT's
    (:func:`golden.rdxe.command_cycles`). ``gemv_shapes``: ``(M, K)`` by GEMV table index;
    ``dxt``: the DXT as the layer sees it (its ``kv_groups`` the layer's KV groups, the groups
    the DXT side appends to and attends over); ``tokens``: the context, the KV cache's tokens
    after the run's append. Only the attention depends on it. On several ``dxts`` (docs/rdxe.md
    16.5) a GEMV runs on each DXT's share of its outputs at once, and every command's cycles
    run to its results written (:func:`hdl.rdxe.dxts.shared_cycles`); the KV groups, one at a
    time, are ``groups`` (by default ``dxts`` x the DXT's), each with the DXT's group of heads."""
    tokens = integer(tokens, "Context length", 1, MAX_TOKENS)
    D = check_dxts(dxts)
    G = D * dxt.kv_groups if groups is None else integer(groups, "KV groups", 1,
                                                          D * dxt.kv_groups)
    cycles = []
    for word in words:
        f = instruction_layout(ctrl.space).from_bits(word)
        op = OPCODES[f.op]
        if op in ("gemv", "gemv_norm"):
            M, K = gemv_shapes[f.table]
            kind = "gemv" if op == "gemv" else "rmsnorm"
            commands = [(_on_dxts(dxt, D, kind, M, K, split=True), True)]
        elif op == "kv_append":
            one = _on_dxts(dxt, D, "gemv", dxt.head_dim, dxt.head_dim, keep=False)
            commands = [(one, True)] * (2 * G)
        elif op == "attend":
            commands = [(_on_dxts(dxt, D, "qk", tokens, 0, keep=False), True),
                        (_on_dxts(dxt, D, "pv", tokens, 0), False)] * G * dxt.group_size
        else:
            continue
        cycles.append(dxt_instruction_cycles(dxt, op, commands, G * dxt.group_size))
    return run_cycles(ctrl, words, cycles)


def _on_dxts(dxt: DxtConfig, dxts: int, kind: str, a: int, b: int, keep: bool = True,
             split: bool = False) -> int:
    """A command's cycles on ``dxts`` DXTs (:func:`golden.rdxe.command_cycles` for one): a GEMV
    on each DXT's share (``split``), or on one DXT; its result words written unless not
    ``keep`` (:func:`hdl.rdxe.dxts.shared_cycles`)."""
    if dxts == 1:
        return command_cycles(kind, a, b, dxt)
    shares = [n for _, n in output_shares(a, dxts, dxt.vacs) if n] if split else [a]
    return shared_cycles([(command_cycles(kind, n, b, dxt),
                           word_cycles(kind, n, b, dxt) if keep else ()) for n in shares],
                         result_queue_depth(dxt))


def rtl_costs(ctrl: CtrlConfig, dxt: DxtConfig, words, gemv_shapes: dict, layers,
              layer_overhead: int = LAYER_OVERHEAD) -> list:
    """Each DXE's cost of a token at context ``T``, for DXEs holding ``layers`` (a count each)
    and running ``words`` once per layer: ``n * (program_cycles(T) + layer_overhead)`` for its
    ``n`` layers (:func:`program_cycles`'s arguments). Returns one function of ``T`` a DXE."""
    layer_overhead = integer(layer_overhead, "Layer overhead", 0, 1 << 16)
    layers = [integer(n, "Layers of a DXE", 1, 1024) for n in layers]
    words = tuple(words)
    cache: dict[tuple, int] = {}

    def layer(T: int) -> int:
        # Only the attention's commands depend on T, and they step every few tokens: one
        # evaluation per step.
        key = (command_cycles("qk", T, 0, dxt), command_cycles("pv", T, 0, dxt))
        if key not in cache:
            cache[key] = program_cycles(ctrl, dxt, words, gemv_shapes, T) + layer_overhead
        return cache[key]
    return [lambda T, n=n: n * layer(T) for n in layers]


@dataclass
class Schedule:
    """The ring's timing of a list of requests (:func:`schedule`; cycles from 0, all requests
    present then).

    Attributes
    ----------
    dispatch : list
        ``(request, pass, cycle)`` of every token in the order it entered the ring.
    start, finish : np.ndarray
        ``(tokens, S)``: the cycle each DXE started and finished each token (dispatch order).
    busy : np.ndarray
        ``(S,)`` cycles each DXE computed.
    makespan : int
        Cycle the last token left the ring.
    slots : list
        Each request's slot (:func:`golden.rdxe.ring.dispatch_slots`).
    admitted, finished : np.ndarray
        Per request: the cycle it took its slot, the cycle its last token left the ring.
    leaves : list
        Per request: the cycle each of its passes left the ring (an ``np.ndarray`` each).
    """

    dispatch: list
    start: np.ndarray
    finish: np.ndarray
    busy: np.ndarray
    makespan: int
    slots: list
    admitted: np.ndarray
    finished: np.ndarray
    leaves: list

    @property
    def order(self) -> list[int]:
        """The request of each token, in the order the tokens entered the ring."""
        return [r for r, _, _ in self.dispatch]

    @property
    def utilization(self) -> np.ndarray:
        """Per DXE: cycles computed over the makespan."""
        return self.busy / self.makespan

    @property
    def ring_utilization(self) -> float:
        """Cycles the DXEs computed over ``S`` times the makespan."""
        return float(self.busy.sum()) / (len(self.busy) * self.makespan)


def schedule(requests, costs, link: int | None, slots: int, buffer: int = 0,
             copy: int | None = None) -> Schedule:
    """Time ``requests`` (:class:`Request`) on a ring whose DXE ``d`` takes ``costs[d](T)``
    cycles for a token at context ``T`` (:func:`rtl_costs`) and whose links take ``link``
    cycles a token (its rows; None: no links), ``slots`` requests resident and ``buffer`` extra
    token places before each server: the recurrence and the dispatcher of
    :func:`simulate_rdxe` (``_line``) on these costs.

    ``copy``: the ring in RTL (:class:`hdl.rdxe.ring.Ring`, docs/rdxe.md 16.3), whose tokens
    are ``copy`` TB rows (``link`` None, ``buffer`` 0). Each link is a buffer of one token that
    the host fills a row a cycle (the first), the DXE before it copies into (the others) or
    ``output`` empties a row a cycle (the last); a DXE holds its token while it copies it in
    from its full input link and while it copies it out once its output link is free
    (:func:`hdl.rdxe.ring.copy_cycles`). A DXE's start and finish are then its run taken and
    the cycle after ``done.valid``; a token's dispatch is its first row's beat.

    Raises
    ------
    TypeError, ValueError
        A message naming the argument, the allowed values and the value given.
    """
    requests = _check_requests(requests)
    if not isinstance(costs, (list, tuple)) or not costs or not all(map(callable, costs)):
        raise TypeError(f"Costs must be a non-empty list of functions of the context, not "
                        f"{costs!r}")
    if link is not None:
        link = integer(link, "Link cycles", 0, 1 << 20)
    slots = integer(slots, "Resident request count", 1, 4096)
    buffer = integer(buffer, "Buffer depth", 0, 64)
    if copy is not None:
        copy = integer(copy, "Token rows", 1, MAX_ROWS)
        if link is not None or buffer:
            raise ValueError(f"A ring of copies (copy={copy}) has links of one token: link "
                             f"must be None and buffer 0, not {link!r} and {buffer!r}")
    owners = [_Owner(r.passes, r.prompt, np.arange(1, r.passes + 1), np.ones(r.passes),
                     np.zeros(r.passes, np.int64), r.passes) for r in requests]
    tmax = max(r.passes for r in requests)
    tables = [[0] + [integer(cost(T), "A DXE's cost", 0, 1 << 40) for T in range(1, tmax + 1)]
              for cost in costs]
    if copy is None:
        servers = _servers(tables, None if link is None else [link] * (tmax + 1))
        moves = None
    else:
        servers, moves = _copy_servers(tables, copy, tmax)
    busy, _, admitted, leaves, _, iv, dispatched = _line(servers, len(costs), slots, buffer,
                                                         owners, True, moves)
    dxe = [s for s, (d, _) in enumerate(servers) if d is not None]
    iv = np.array(iv, np.int64).reshape(len(dispatched), len(servers), 4)
    finished = np.array([lv[-1] for lv in leaves], np.int64)
    return Schedule([(int(o), int(k), int(t)) for o, k, t in dispatched], iv[:, dxe, 1],
                    iv[:, dxe, 2], busy.astype(np.int64), int(finished.max()),
                    dispatch_slots([r.passes for r in requests], slots,
                                   [o for o, _, _ in dispatched]), admitted, finished, leaves)


def _copy_servers(tables: list, rows: int, tmax: int) -> tuple[list, list]:
    """The RTL ring's line (:func:`schedule`'s ``copy``): the first link (the host's ``rows``
    beats), then each DXE and the link after it, each link's move the copy into the next DXE
    (the last's, ``output``'s ``rows`` beats), each DXE's its copy out."""
    copy_in, copy_out = copy_cycles(rows)
    servers, moves = [(None, [rows] * (tmax + 1))], [copy_in]
    for d, cost in enumerate(tables):
        servers += [(d, cost), (None, [0] * (tmax + 1))]
        moves += [copy_out, copy_in]
    moves[-1] = rows
    return servers, moves
