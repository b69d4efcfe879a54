"""cocotb testbench of the rDXE decoder execution tile (``rdxe-dxt``).

The testbench loads WMEM rows and PPU entries (``wmem``, ``ppu``), sends commands (``cmd``) and
token chunks (``x``) with random idle cycles, and takes results (``o``) and responses (``resp``)
with random back-pressure. Loads and commands come in phases: a phase's loads, then its commands,
then every response, so no load races an operation that reads its place (the contract leaves that
order to the host).

The model (:class:`DxtModel`) is fed by the input monitors only. It mirrors every VAC's WMEM and
PPU table, keeps the KV caches as the tile must hold them (``golden.rdxe.kv_address``: keys in
their owner VAC ``t mod N``, values column by column in VAC ``e mod N``), and the scores of the
last Q.K^T. Each command, with its token chunks, becomes golden operations on what the mirrors
hold: ``golden.rdxe.gemv`` and ``rmsnorm_gemv`` (the weights of output ``o`` are rows ``row + p C
.. + C - 1`` of VAC ``o mod N``, its PPU entry ``entry + p``), a key or value written into the
mirrored cache, ``qk_scores`` against the cached keys, ``softmax_pv`` of the last scores against
the cached values; the refusal rules of ``hdl.rdxe.Dxt`` decide the error responses. The
scoreboards check every word on ``o`` (the bytes its ``keep`` marks) and every response, in
order.

Tests: ``random_ops`` (GEMVs and RMSNorm-GEMVs of random shapes, fused and sequential, keys and
values written to the cache, Q.K^T and P.V in both modes, interleaved), ``attention_overflow``
(the cache filled to capacity, writes past it and bad commands refused, attention over every
stored token), ``backpressure`` (``o`` and ``resp`` mostly not ready for long stretches) and
``full_rate`` (back-to-back GEMVs with no idle cycles and no back-pressure: one chunk per cycle
into HLINK; reports the MAC utilization).
"""

from __future__ import annotations

import collections
import math
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, RisingEdge

from golden import rdxe as golden
from golden.arith.float import from_float
from hdl.arith.format import FP32
from hdl.rdxe import DESTS, GBUS_BYTES, OPS

from ..functional import sampler
from ..streams import to_signed, to_unsigned
from ..tb import BlockTB, select_tb

__all__ = ["DxtModel", "DxtTB", "ENV_GEMV"]

#: Benchmarks: the GEMV shape and count of ``full_rate`` ("M,K,count").
ENV_GEMV = "MEMWALL_RDXE_GEMV"

_GEMV, _RMS, _QK, _PV = (OPS.index(n) for n in ("gemv", "rmsnorm", "qk", "pv"))
_OUT, _KEY, _VALUE = (DESTS.index(n) for n in ("out", "key", "value"))


def fp32(value: float) -> int:
    return int(from_float(np.float64(value), FP32))


#: Why ``hdl.rdxe.Dxt`` refuses a command, in the order it checks (docs/rdxe.md).
REFUSALS = ("empty_gemv", "too_many_chunks", "bad_dest", "kv_shape", "cache_full",
            "no_tokens", "too_many_tokens", "bad_head")


def refusal(cfg, c) -> str | None:
    """The first of :data:`REFUSALS` that refuses command ``c``, None when it is taken."""
    if c["op"] in (_GEMV, _RMS):
        if c["outputs"] == 0 or c["chunks"] == 0:
            return "empty_gemv"
        if c["chunks"] > cfg.chunks:
            return "too_many_chunks"
        if c["dest"] > _VALUE:
            return "bad_dest"
        if c["dest"] in (_KEY, _VALUE):
            if c["outputs"] != cfg.head_dim or c["head"] >= cfg.kv_groups:
                return "kv_shape"
            if c["tokens"] >= cfg.capacity:
                return "cache_full"
        return None
    if c["tokens"] == 0:
        return "no_tokens"
    if c["tokens"] > cfg.capacity:
        return "too_many_tokens"
    return "bad_head" if c["head"] >= cfg.heads else None


def _operation(c) -> str:
    """A command's operation and, for RMSNorm-GEMV and P.V, its mode."""
    name = OPS[c["op"]]
    return f"{name}_{'sequential' if c['seq'] else 'fused'}" if c["op"] in (_RMS, _PV) else name


def _sampler(block: str, cfg):
    """The coverpoints of a command the tile took: its operation (and mode), where a GEMV's
    results go, whether a GEMV takes one pass of the VACs or several (and a partial last one),
    and why the tile refused it (:func:`refusal`, worked out once per command); an operation
    crossed with refused or not."""
    def passes(c):
        if c["op"] not in (_GEMV, _RMS) or c["refusal"]:
            return None
        return "one_pass" if c["outputs"] <= cfg.vacs else \
            "passes_partial_last" if c["outputs"] % cfg.vacs else "whole_passes"
    operations = ["gemv", "rmsnorm_fused", "rmsnorm_sequential", "qk", "pv_fused",
                  "pv_sequential"]
    sample = sampler({
        f"{block}.operation": (_operation, operations),
        f"{block}.dest": (lambda c: DESTS[c["dest"]] if c["op"] in (_GEMV, _RMS) and
                          c["dest"] <= _VALUE else None, DESTS),
        f"{block}.passes": (passes, ("one_pass", "whole_passes", "passes_partial_last")),
        f"{block}.refusal": (lambda c: c["refusal"], REFUSALS),
        f"{block}.refused": (lambda c: c["refusal"] is not None, (False, True)),
    }, {f"{block}.operation_x_refused": [f"{block}.operation", f"{block}.refused"]})
    return lambda c: sample({**c, "refusal": refusal(cfg, c)})


class DxtModel:
    """The tile's contract, fed by the input monitors: :meth:`step` returns the words and
    responses of every command whose token chunks have all arrived."""

    def __init__(self, cfg):
        self.cfg = cfg
        N, L = cfg.vacs, cfg.lanes
        self.wmem = np.zeros((N, cfg.wmem_depth, L), np.int64)
        self.table = np.zeros((N, cfg.ppu_depth, 2), np.int64)
        self.kv = np.zeros((N, cfg.kv_rows, L), np.int64)
        self.cmds: collections.deque = collections.deque()
        self.x: collections.deque = collections.deque()
        self.scores = None
        self.done = 0
        self.drop = 0                  # token chunks of refused commands still to come

    def wmem_write(self, item):
        self.wmem[item["vac"], item["addr"]] = [to_signed(item[f"data.{k}"], 8)
                                                for k in range(self.cfg.lanes)]

    def ppu_write(self, item):
        self.table[item["vac"], item["addr"]] = (to_signed(item["m"], self.cfg.mult_bits),
                                                 item["shift"])

    def chunk(self, item):
        if self.drop:                  # a refused command's chunk: drained, unused
            self.drop -= 1
            return
        self.x.append([to_signed(item[f"data.{k}"], 8) for k in range(self.cfg.lanes)])

    def command(self, item):
        self.cmds.append(dict(item))

    # --- execution ------------------------------------------------------------------------

    def _refused(self, c) -> bool:
        """``hdl.rdxe.Dxt``'s refusal rules."""
        return refusal(self.cfg, c) is not None

    def _chunks_needed(self, c) -> int:
        if c["op"] in (_GEMV, _RMS):
            return c["chunks"]
        return self.cfg.key_rows if c["op"] == _QK else 0

    def step(self) -> tuple[list[dict], list[dict]]:
        words, resps = [], []
        while self.cmds:
            c = self.cmds[0]
            if self._refused(c):       # answered at once; its chunks are drained later
                self.cmds.popleft()
                take = min(len(self.x), self._chunks_needed(c))
                for _ in range(take):
                    self.x.popleft()
                self.drop += self._chunks_needed(c) - take
                resps.append({"error": 1})
                continue
            if len(self.x) < self._chunks_needed(c):
                break
            self.cmds.popleft()
            x = np.array([v for _ in range(self._chunks_needed(c)) for v in self.x.popleft()],
                         np.int64)
            y = {_GEMV: self._gemv, _RMS: self._gemv, _QK: self._qk, _PV: self._pv}[c["op"]](c, x)
            if os.environ.get("DXT_DEBUG"):
                print("CMD", c, None if y is None else list(y), file=open("/tmp/dxt_debug.txt", "a"))
            if y is not None:
                words += _words(y)
            resps.append({"error": 0})
            self.done += 1
        return words, resps

    def _weights(self, c):
        N, L = self.cfg.vacs, self.cfg.lanes
        M, C = c["outputs"], c["chunks"]
        W = np.zeros((M, C * L), np.int64)
        m, shift = np.zeros(M, np.int64), np.zeros(M, np.int64)
        for o in range(M):
            p, v = divmod(o, N)
            W[o] = self.wmem[v, c["row"] + p * C:c["row"] + p * C + C].ravel()
            m[o], shift[o] = self.table[v, c["entry"] + p]
        return W, m, shift

    def _gemv(self, c, x):
        W, m, shift = self._weights(c)
        if c["op"] == _GEMV:
            y = golden.gemv(W, x, m, shift, self.cfg)
        else:
            mode = "sequential" if c["seq"] else "fused"
            y = golden.rmsnorm_gemv(W, x, m, shift, np.uint32(c["eps"]), self.cfg, mode=mode,
                                    inv_k=np.uint32(c["inv_k"]))
        if c["dest"] == _OUT:
            return y
        t, d = c["tokens"], self.cfg.head_dim
        kind = "k" if c["dest"] == _KEY else "v"
        vac, row, col = golden.kv_address(kind, t, np.arange(d), self.cfg, group=c["head"])
        self.kv[vac, row, col] = y
        return None

    def _cached(self, kind, group, T):
        t, ch = np.meshgrid(np.arange(T), np.arange(self.cfg.head_dim), indexing="ij")
        vac, row, col = golden.kv_address(kind, t, ch, self.cfg, group=group)
        return self.kv[vac, row, col]

    def _qk(self, c, q):
        T, N = c["tokens"], self.cfg.vacs
        K = self._cached("k", c["head"] // self.cfg.group_size, T)
        acc, _ = golden.qk_scores(q, K, 1, 0, self.cfg)
        t = np.arange(T)
        entry = self.table[t % N, c["entry"]]             # token t's score on VAC t mod N
        self.scores = golden.ppu(acc, entry[:, 0], entry[:, 1], self.cfg)
        return self.scores

    def _pv(self, c, _):
        T, N, d = c["tokens"], self.cfg.vacs, self.cfg.head_dim
        if self.scores is None or len(self.scores) != T:
            raise AssertionError(f"a P.V of {T} tokens must follow a Q.K^T of as many")
        V = self._cached("v", c["head"] // self.cfg.group_size, T)
        e = np.arange(d)
        entry = self.table[e % N, c["entry"] + e // N]
        mode = "sequential" if c["seq"] else "fused"
        return golden.softmax_pv(self.scores, V, np.uint32(c["scale"]), entry[:, 0],
                                 entry[:, 1], self.cfg, mode=mode)


def _words(y) -> list[dict]:
    """Expected GBUS words of results ``y``: 4 per word, only the kept bytes checked."""
    y = [int(v) for v in y]
    out = []
    for w in range(-(-len(y) // GBUS_BYTES)):
        part = y[GBUS_BYTES * w:GBUS_BYTES * (w + 1)]
        item = {f"data.{k}": to_unsigned(v, 8) for k, v in enumerate(part)}
        item.update(keep=(1 << len(part)) - 1, last=int(GBUS_BYTES * (w + 1) >= len(y)))
        out.append(item)
    return out


class DxtTB(BlockTB):
    """One tile with its loads, commands, token chunks, results and responses."""

    def __init__(self, dut, **kwargs):
        super().__init__(dut, inputs=("wmem", "ppu", "cmd", "x"), outputs=("o", "resp"),
                         **kwargs)
        self.cfg = self.params
        self.dmodel = DxtModel(self.cfg)
        self.samplers = {"cmd": _sampler(self.block.name, self.cfg)}
        self.rng_np = np.random.default_rng(self.rng.getrandbits(32))
        self.row = self.entry = 0
        self.sent_cmds = 0
        self._identity = None

    def model(self, stream, item):
        handler = {"wmem": self.dmodel.wmem_write, "ppu": self.dmodel.ppu_write,
                   "cmd": self.dmodel.command, "x": self.dmodel.chunk}[stream]
        handler(item)
        words, resps = self.dmodel.step()
        return {"o": words, "resp": resps}

    # --- stimulus -----------------------------------------------------------------------------

    async def settle(self):
        """Wait until every command sent has its response (the end of a phase)."""
        await self.drain(stall_cycles=20_000)
        self.row = self.entry = 0
        self._identity = None

    def place(self, rows: int, entries: int) -> tuple[int, int]:
        """Reserve ``rows`` WMEM rows and ``entries`` PPU entries for this phase (cleared by
        :meth:`settle`); return the first of each."""
        cfg = self.cfg
        if self.row + rows > cfg.wmem_depth or self.entry + entries > cfg.ppu_depth:
            raise ValueError("phase too large for the WMEM or the PPU tables")
        row, entry = self.row, self.entry
        self.row += rows
        self.entry += entries
        return row, entry

    def load_weights(self, W, m, shift) -> tuple[int, int, int]:
        """Load ``W`` (M, K) as ``golden.rdxe.wmem_image`` lays it out, and its PPU entries;
        return ``(row, entry, chunks)``."""
        cfg, N, L = self.cfg, self.cfg.vacs, self.cfg.lanes
        M, K = W.shape
        C, P = -(-K // L), -(-M // N)
        row, entry = self.place(P * C, P)
        image = golden.wmem_image(W, self.cfg)
        rows = [{"vac": v, "addr": row + r,
                 **{f"data.{k}": to_unsigned(image[v, r, k], 8) for k in range(L)}}
                for v in range(N) for r in range(P * C)]
        self.rng.shuffle(rows)
        self.send("wmem", rows)
        self.load_entries(entry, P, m, shift, M)
        return row, entry, C

    def load_entries(self, entry, passes, m, shift, outputs):
        N = self.cfg.vacs
        m, shift = np.broadcast_to(m, (outputs,)), np.broadcast_to(shift, (outputs,))
        items = []
        for p in range(passes):
            for v in range(N):
                o = p * N + v
                mo, so = (int(m[o]), int(shift[o])) if o < outputs else (0, 0)
                items.append({"vac": v, "addr": entry + p, "m": to_unsigned(mo, self.cfg.mult_bits),
                              "shift": so})
        self.send("ppu", items)

    def command(self, op, **fields):
        cmd = dict.fromkeys(("seq", "dest", "outputs", "chunks", "row", "entry", "head",
                             "tokens", "inv_k", "eps", "scale"), 0)
        cmd.update(fields, op=OPS.index(op))
        self.send("cmd", [cmd])
        self.sent_cmds += 1

    def tokens(self, x, chunks):
        L = self.cfg.lanes
        xp = np.zeros(chunks * L, np.int64)
        xp[:len(x)] = x
        self.send("x", [{f"data.{k}": to_unsigned(xp[j * L + k], 8) for k in range(L)}
                        for j in range(chunks)])

    def scales(self, M, k):
        """PPU multipliers and shifts near the scale ``k`` (31-bit multipliers)."""
        shift = np.full(M, 31 + int(math.floor(-math.log2(k))))
        m = np.round(k * 2.0 ** shift * self.rng_np.uniform(0.7, 1.4, M)).astype(np.int64)
        return np.clip(m, 1, (1 << 31) - 1), shift

    # --- operations (phases: loads first) -----------------------------------------------------

    def gemv(self, M, K, *, rms: str | None = None, dest: int = _OUT, head=0, token=0,
             W=None, x=None):
        rng = self.rng_np
        W = rng.integers(-128, 128, (M, K)) if W is None else W
        x = rng.integers(-128, 128, K) if x is None else x
        scale = 60 / (5500 * math.sqrt(K)) if rms is None else 1 / (20 * math.sqrt(K))
        row, entry, C = self.load_weights(W, *self.scales(M, scale))
        return {"kind": "gemv", "row": row, "entry": entry, "C": C, "M": M, "x": x, "rms": rms,
                "dest": dest, "head": head, "token": token, "K": K}

    def identity(self):
        """The identity GEMV (d x d, PPU 1 >> 0) that writes a token's key or value from x."""
        if self._identity is None:
            d = self.cfg.head_dim
            self._identity = self.load_weights(np.eye(d, dtype=np.int64), 1, 0)
        return self._identity

    def run_op(self, op):
        """Send one prepared operation's command and chunks."""
        if op["kind"] == "gemv":
            fields = dict(outputs=op["M"], chunks=op["C"], row=op["row"], entry=op["entry"],
                          dest=op["dest"], head=op["head"], tokens=op["token"])
            if op["rms"] is None:
                self.command("gemv", **fields)
            else:
                self.command("rmsnorm", seq=int(op["rms"] == "sequential"),
                             inv_k=fp32(1 / op["K"]), eps=int(golden.eps_code(1e-5, 0.05)),
                             **fields)
            self.tokens(op["x"], op["C"])
        elif op["kind"] == "kv":
            row, entry, C = self.identity()
            self.command("gemv", dest=op["dest"], outputs=self.cfg.head_dim, chunks=C, row=row,
                         entry=entry, head=op["group"], tokens=op["token"])
            self.tokens(op["v"], C)
        elif op["kind"] == "qk":
            self.command("qk", entry=op["entry"], head=op["head"], tokens=op["T"])
            self.tokens(op["q"], self.cfg.key_rows)
        elif op["kind"] == "pv":
            self.command("pv", seq=int(op["mode"] == "sequential"), entry=op["entry"],
                         head=op["head"], tokens=op["T"], scale=int(golden.log2_scale(0.15)))

    def attention_ops(self, T, head, modes=("fused",)):
        """Q.K^T and P.V (in each of ``modes``) of ``head`` over ``T`` tokens, entries loaded."""
        d, N = self.cfg.head_dim, self.cfg.vacs
        qk_entry = self.place(0, 1)[1]
        self.load_entries(qk_entry, 1, 1 << 30, 36, N)      # every VAC: the score scale
        ops = []
        for mode in modes:
            passes = -(-d // N)
            entry = self.place(0, passes)[1]
            self.load_entries(entry, passes, *self.scales(d, 1 / 100), d)
            ops.append({"kind": "qk", "entry": qk_entry, "head": head, "T": T,
                        "q": self.rng_np.integers(-128, 128, d)})
            ops.append({"kind": "pv", "entry": entry, "head": head, "T": T, "mode": mode})
        return ops

    def kv_ops(self, tokens, group=0):
        """Keys and values of ``tokens`` written by the identity GEMV (loaded now)."""
        self.identity()
        lo = -127 if self.cfg.clamp == "symmetric" else -128
        ops = []
        for t in tokens:
            for dest in (_KEY, _VALUE):
                ops.append({"kind": "kv", "dest": dest, "group": group, "token": t,
                            "v": self.rng_np.integers(lo, 128, self.cfg.head_dim)})
        return ops

    async def phase(self, ops):
        """Wait for the loads queued so far, then send ``ops``; then wait for every response."""
        for name in ("wmem", "ppu"):
            await self.drivers[name].wait_idle()
        for op in ops:
            self.run_op(op)
        await self.settle()


def _tb(dut, **kwargs) -> DxtTB:
    return select_tb(dut, {"rdxe-dxt": DxtTB}, **kwargs)


@cocotb.test()
async def random_ops(dut):
    """Random GEMVs and RMSNorm-GEMVs (fused and sequential), keys and values written through the
    GBUS, Q.K^T and P.V in both modes, interleaved over several phases."""
    tb = _tb(dut)
    await tb.reset()
    rng = tb.rng_np
    L = tb.cfg.lanes
    token = 0
    for phase in range(3):
        ops = []
        for n in range(4):
            M = int(rng.integers(1, 3 * tb.cfg.vacs))
            K = int(rng.integers(1, 5 * L))
            rms = (None, "fused", "sequential")[int(rng.integers(0, 3))]
            ops.append(tb.gemv(M, K, rms=rms))
        T = min(tb.cfg.capacity, token + 2 + phase)
        ops += tb.kv_ops(range(token, T))
        token = T
        ops += tb.attention_ops(T, 0, modes=("fused", "sequential"))
        order = ops[:4]
        rng.shuffle(order)
        await tb.phase(order[:2] + ops[4:] + order[2:])
    assert tb.dmodel.done > 0


@cocotb.test()
async def attention_overflow(dut):
    """The cache filled to capacity, then keys and values past it (refused, nothing stored),
    bad commands (refused, their chunks drained), and attention over every stored token."""
    tb = _tb(dut, idle=0.2, backpressure=0.2)
    await tb.reset()
    cap = tb.cfg.capacity
    await tb.phase(tb.kv_ops(range(cap)))
    ops = tb.kv_ops([cap, cap + 1])
    await tb.phase(ops)
    tb.command("gemv", outputs=0, chunks=2)
    tb.tokens(np.zeros(1), 2)
    tb.command("qk", head=0, tokens=cap + 1)
    tb.tokens(np.zeros(1), tb.cfg.key_rows)
    for op, fields, chunks in _refused_commands(tb):
        tb.command(op, **fields)
        tb.tokens(np.zeros(1), chunks)
    await tb.settle()
    await tb.phase(tb.attention_ops(cap, 0, modes=("fused", "sequential")))


def _refused_commands(tb) -> list[tuple[str, dict, int]]:
    """One command per refusal rule and mode (``REFUSALS``), with the token chunks each one
    takes, where its fields can hold the bad value: ``(op, fields, chunks)``."""
    cfg = tb.cfg
    widest = {f["name"]: (1 << f["width"]) - 1 for f in tb.ports["cmd__payload"]["fields"]}
    key = DESTS.index("key")
    bad = [("rmsnorm", dict(outputs=0, chunks=1), 1),
           ("rmsnorm", dict(outputs=0, chunks=1, seq=1), 1),
           ("gemv", dict(outputs=1, chunks=1, dest=len(DESTS)), 1),
           ("gemv", dict(outputs=cfg.head_dim + 1, chunks=1, dest=key), 1),
           ("gemv", dict(outputs=1, chunks=cfg.chunks + 1), cfg.chunks + 1),
           ("qk", dict(tokens=0), cfg.key_rows),
           ("qk", dict(tokens=1, head=cfg.heads), cfg.key_rows),
           ("pv", dict(tokens=0), 0),
           ("pv", dict(tokens=0, seq=1), 0)]
    return [b for b in bad if all(v <= widest[k] for k, v in b[1].items())]


@cocotb.test()
async def backpressure(dut):
    """``o`` and ``resp`` mostly not ready for long stretches while GEMVs and attention run."""
    tb = _tb(dut, idle=0.05, backpressure=0.85)
    await tb.reset()
    rng = tb.rng_np
    ops = [tb.gemv(int(rng.integers(1, 20)), int(rng.integers(1, 12)),
                   rms=("fused" if n % 2 else None)) for n in range(4)]
    ops += tb.kv_ops(range(5)) + tb.attention_ops(5, 0, modes=("fused",))
    await tb.phase(ops)


@cocotb.test()
async def full_rate(dut):
    """Back-to-back GEMVs, no idle cycles, no back-pressure: the chunks enter HLINK one per
    cycle; reports the tile's MAC utilization from the first chunk taken to the last word."""
    tb = _tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    cfg = tb.cfg
    spec = os.environ.get(ENV_GEMV)
    if spec:
        M, K, count = (int(v) for v in spec.split(","))
    else:
        M, K, count = cfg.vacs * min(cfg.ppu_depth, 16), 4 * cfg.lanes, 3
    op = tb.gemv(M, K)
    for name in ("wmem", "ppu"):
        await tb.drivers[name].wait_idle()
    for _ in range(count):
        tb.run_op({**op, "x": tb.rng_np.integers(-128, 128, K)})
    await tb.settle()
    x, o = tb.input_monitors["x"], tb.output_monitors["o"]
    span = o.last_cycle - x.first_cycle + 1
    C, P = op["C"], -(-M // cfg.vacs)
    items = count * P * C
    macs = count * M * K
    # The model: back to back, each operation's requests follow the previous one's after the
    # sequencer's decode; the last one's words leave lead + done cycles after its first request.
    lat = golden.Latency.of(cfg)
    model = ((count - 1) * (P * C + lat.accept) + lat.lead +
             golden.gemv_cycles(M, K, cfg, lat).done + lat.word)
    tb.report("full_rate", items=items, cycles=span, per_cycle=round(items / span, 4),
              latency=o.first_cycle - x.first_cycle, latency_meaning="first token chunk taken "
              "to the first result word", macs=macs, M=M, K=K, count=count,
              utilization=round(macs / (cfg.vacs * cfg.lanes * span), 4), model=model)
    assert span == model, f"{count} GEMVs of {M} x {K} took {span} cycles, the model {model}"


#: Benchmarks: the operation ``measure`` times, "kind,mode,a,b": ``gemv,-,M,K``,
#: ``rmsnorm,fused|sequential,M,K``, ``qk,-,T,0``, ``pv,fused|sequential,T,0``.
ENV_OP = "MEMWALL_RDXE_OP"


def model_cycles(cfg, kind, mode, a, b) -> int:
    """Cycles from an operation's command taken to its response, by ``golden.rdxe``'s cycle
    model, for an operation that waits for nothing: the command's decode register, the
    sequencer's accept, ``lead`` to cycle 0, ``done``, the response queue."""
    return golden.command_cycles(kind, a, b, cfg, mode=mode)


@cocotb.test()
async def measure(dut):
    """Time one operation alone (``MEMWALL_RDXE_OP``), no idle cycles and no back-pressure:
    cycles from its command taken to its response, against the cycle model (equal). A P.V runs
    after its Q.K^T has answered, against whatever the cache holds (zeros here)."""
    tb = _tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    spec = os.environ.get(ENV_OP, "gemv,-,16,64")
    kind, mode, a, b = spec.split(",")
    a, b = int(a), int(b)
    if kind in ("gemv", "rmsnorm"):
        op = tb.gemv(a, b, rms=None if kind == "gemv" else mode)
        ops = [op]
    else:
        ops = tb.attention_ops(a, 0, modes=(mode if kind == "pv" else "fused",))
        if kind == "qk":
            ops = ops[:1]
        else:
            await tb.phase(ops[:1])
            ops = ops[1:]
    for name in ("wmem", "ppu"):
        await tb.drivers[name].wait_idle()
    taken = tb.input_monitors["cmd"].transfers
    await ClockCycles(tb.clk, 2)
    for op in ops:
        tb.run_op(op)
    await tb.settle()
    cmd, resp = tb.input_monitors["cmd"], tb.output_monitors["resp"]
    assert cmd.transfers == taken + 1
    cycles = resp.last_cycle - cmd.last_cycle
    model = model_cycles(tb.cfg, kind, mode, a, b)
    tb.report("measure", op=spec, cycles=cycles, model=model)
    assert cycles == model, f"{spec}: {cycles} cycles from command to response, model {model}"
