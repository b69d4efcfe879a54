"""In-process tests of the rDXE DXT RTL (Amaranth simulator): every operation bit for bit against
golden.rdxe with idle cycles and back-pressure, fused against sequential, GQA, the iWuR KV cache
and its overflow, the accuracy bounds, and the cycle model.

A :class:`Program` lays operations out (WMEM rows and PPU entries from ``golden.rdxe.wmem_image``,
commands, token chunks) and computes what each must give with the golden model from the
operation's own operands; :class:`Tile` holds the commands back until every load is in, and
:func:`tests.stream_sim.run_streams` drives it with random idle cycles on every input and random
back-pressure on ``o`` and ``resp``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from golden import rdxe as golden
from golden.arith.float import from_float
from hdl.arith.format import FP32
from hdl.rdxe import DESTS, OPS, Dxt, DxtConfig

from .stream_sim import set_payload, run_streams, shared, simulate

SMALL = dict(lanes=4, vacs=4, wmem_depth=160, ppu_depth=64, kv_rows=64, queue_depth=8,
             head_dim=16, max_inputs=64)
#: Width of :class:`Tile`'s load count (a program's WMEM and PPU loads).
LOAD_BITS = 16


def fp32(value: float) -> int:
    return int(from_float(np.float64(value), FP32))


class Tile(wiring.Component):
    """A :class:`Dxt` whose ``cmd`` waits until ``loads`` WMEM and PPU loads have been taken.

    ``loads`` is an input the testbench holds for the whole run, so that one tile (and its
    simulation, ``stream_sim.shared``) serves every program of a configuration.
    """

    def __init__(self, cfg: DxtConfig):
        self.dxt = Dxt(cfg)
        sig = self.dxt.signature
        super().__init__({**{name: member for name, member in sig.members.items()},
                          "loads": In(LOAD_BITS)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.dxt = dxt = self.dxt
        loaded = Signal(LOAD_BITS)
        done = loaded == self.loads
        m.d.sync += loaded.eq(loaded + (self.wmem.valid & self.wmem.ready)
                              + (self.ppu.valid & self.ppu.ready))
        for name in ("x", "wmem", "ppu"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(dxt, name))
        for name in ("o", "resp"):
            wiring.connect(m, getattr(dxt, name), wiring.flipped(getattr(self, name)))
        m.d.comb += [dxt.cmd.valid.eq(self.cmd.valid & done),
                     dxt.cmd.payload.eq(self.cmd.payload),
                     self.cmd.ready.eq(dxt.cmd.ready & done)]
        return m


@dataclass
class Program:
    """Operations for one tile: loads, commands, token chunks and what comes out."""

    cfg: DxtConfig
    wmem: list = field(default_factory=list)
    ppu: list = field(default_factory=list)
    cmds: list = field(default_factory=list)
    x: list = field(default_factory=list)
    words: list = field(default_factory=list)          # expected o words (data, keep, last)
    resps: list = field(default_factory=list)
    row: int = 0
    entry: int = 0
    spans: list = field(default_factory=list)          # (first word, results) per operation

    def results(self, words, n: int) -> np.ndarray:
        """Operation ``n``'s results (of those that send results) in the received ``words``."""
        first, count = self.spans[n]
        flat = [v for data, _, _ in words[first:first + -(-count // 4)] for v in data]
        return np.array(flat[:count])

    def __post_init__(self):
        self._identity = None

    # --- placement -------------------------------------------------------------------------

    def _load_weights(self, W, m, shift) -> tuple[int, int, int]:
        """Load ``W`` (M, K) and its PPU entries; return ``(row, entry, chunks)``."""
        cfg, N, L = self.cfg, self.cfg.vacs, self.cfg.lanes
        M, K = W.shape
        C, P = -(-K // L), -(-M // N)
        image = golden.wmem_image(W, self.cfg)
        row, entry = self.row, self.entry
        assert row + P * C <= cfg.wmem_depth and entry + P <= cfg.ppu_depth, "tile too small"
        for v in range(N):
            for r in range(P * C):
                self.wmem.append({"vac": v, "addr": row + r,
                                  "data": [int(b) for b in image[v, r]]})
        self._entries(entry, P, m, shift, M)
        self.row += P * C
        self.entry += P
        return row, entry, C

    def _entries(self, entry, passes, m, shift, outputs):
        N = self.cfg.vacs
        assert entry + passes <= self.cfg.ppu_depth, "PPU tables too small"
        m = np.broadcast_to(m, (outputs,))
        shift = np.broadcast_to(shift, (outputs,))
        for p in range(passes):
            for v in range(N):
                o = p * N + v
                mo, so = (int(m[o]), int(shift[o])) if o < outputs else (0, 0)
                self.ppu.append({"vac": v, "addr": entry + p, "m": mo, "shift": so})

    def _send_x(self, x, chunks):
        L = self.cfg.lanes
        xp = np.zeros(chunks * L, np.int64)
        xp[:len(x)] = x
        for j in range(chunks):
            self.x.append({"data": [int(b) for b in xp[j * L:(j + 1) * L]]})

    def _expect(self, y, ok=True):
        y = [int(v) for v in y]
        self.spans.append((len(self.words), len(y)))
        for w in range(-(-len(y) // 4)):
            part = y[4 * w:4 * w + 4]
            self.words.append((part, (1 << len(part)) - 1, int(4 * w + 4 >= len(y))))
        self.resps.append(int(not ok))

    def command(self, op, **fields):
        cmd = {"op": OPS.index(op), "seq": 0, "dest": 0, "outputs": 0, "chunks": 0, "row": 0,
               "entry": 0, "head": 0, "tokens": 0, "inv_k": 0, "eps": 0, "scale": 0}
        cmd.update(fields)
        self.cmds.append(cmd)

    # --- operations --------------------------------------------------------------------------

    def gemv(self, W, x, m, shift, *, rmsnorm=None, mode="fused"):
        """A plain GEMV, or with ``rmsnorm`` (the fp32 eps code) an RMSNorm-GEMV."""
        W, x = np.asarray(W), np.asarray(x)
        row, entry, C = self._load_weights(W, m, shift)
        fields = dict(outputs=W.shape[0], chunks=C, row=row, entry=entry)
        if rmsnorm is None:
            self.command("gemv", **fields)
            want = golden.gemv(W, x, m, shift, self.cfg)
        else:
            self.command("rmsnorm", seq=int(mode == "sequential"), inv_k=fp32(1 / len(x)),
                         eps=int(rmsnorm), **fields)
            want = golden.rmsnorm_gemv(W, x, m, shift, rmsnorm, self.cfg, mode=mode)
        self._send_x(x, C)
        self._expect(want)
        return want

    def _identity_region(self):
        """WMEM rows and PPU entries of the identity GEMV (d x d, PPU 1 >> 0) that writes a
        token's key or value from ``x``."""
        if self._identity is None:
            d = self.cfg.head_dim
            self._identity = self._load_weights(np.eye(d, dtype=np.int64), 1, 0)
        return self._identity

    def kv_write(self, kind, vector, group, token, *, ok=True):
        row, entry, C = self._identity_region()
        d = self.cfg.head_dim
        self.command("gemv", dest=DESTS.index(kind), outputs=d, chunks=C, row=row, entry=entry,
                     head=group, tokens=token)
        self._send_x(vector, C)
        self.resps.append(int(not ok))

    def qk(self, q, K, head, m, shift):
        """Q.K^T of ``q`` against the ``len(K)`` keys of ``head``'s group (their values ``K``
        as written); returns the INT8 scores."""
        entry = self.entry
        self._entries(entry, 1, np.full(1, m), np.full(1, shift), 1)
        # Every VAC's entry holds the score scale.
        for item in self.ppu[-self.cfg.vacs:]:
            item.update(m=int(m), shift=int(shift))
        self.entry += 1
        self.command("qk", entry=entry, head=head, tokens=len(K))
        self._send_x(q, self.cfg.key_rows)
        _, s = golden.qk_scores(np.asarray(q), np.asarray(K), m, shift, self.cfg)
        self._expect(s)
        return s

    def pv(self, s, V, head, scale, m, shift, *, mode="fused"):
        d, N = self.cfg.head_dim, self.cfg.vacs
        entry = self.entry
        passes = -(-d // N)
        self._entries(entry, passes, m, shift, d)
        self.entry += passes
        self.command("pv", seq=int(mode == "sequential"), entry=entry, head=head,
                     tokens=len(V), scale=int(scale))
        want = golden.softmax_pv(np.asarray(s), np.asarray(V), scale, m, shift, self.cfg,
                                 mode=mode)
        self._expect(want)
        return want

    def refused(self, op, **fields):
        """A command the tile must refuse (its x chunks, if any, follow)."""
        self.command(op, **fields)
        self.resps.append(1)

    # --- running -----------------------------------------------------------------------------

    def run(self, *, seed: int, idle: float = 0.3, stall: float = 0.3,
            max_cycles: int = 200_000, finish=None):
        """Run the program; check every word on ``o`` (its kept bytes) and every response.
        Returns ``(words, cycles)``; ``finish(ctx, tile)`` runs at the end (reads state)."""
        tile = shared(Tile, self.cfg)
        loads = len(self.wmem) + len(self.ppu)
        inputs = {"wmem": self.wmem, "ppu": self.ppu, "cmd": self.cmds, "x": self.x}
        outputs = {"o": ["data", "keep", "last"], "resp": ["error"]}
        received, cycles = run_streams(
            tile, inputs, outputs, seed=seed, idle=idle, stall=stall, max_cycles=max_cycles,
            done=lambda rec: len(rec["resp"]) >= len(self.resps)
            and len(rec["o"]) >= len(self.words),
            finish=None if finish is None else lambda ctx: finish(ctx, tile),
            watch=lambda ctx, cycle: ctx.set(tile.loads, loads))
        got = [(_masked(r["data"], r["keep"]), r["keep"], r["last"]) for r in received["o"]]
        want = [(_masked(d + [0] * (4 - len(d)), k), k, last) for d, k, last in self.words]
        assert len(got) == len(want), f"{len(got)} words, expected {len(want)}"
        for n, (g, w) in enumerate(zip(got, want)):
            assert g == w, f"word {n}: expected {w}, got {g}"
        assert [r["error"] for r in received["resp"]] == self.resps
        return got, cycles


def _masked(data, keep):
    return [int(v) if keep >> k & 1 else 0 for k, v in enumerate(data)]


def _scales(rng, M, k, bits=32):
    """PPU multipliers and shifts of ``M`` scales drawn from 0.7 to 1.4 times ``k``, each the
    code ``golden.rdxe.ppu_code`` gives it: a ``bits``-bit multiplier using its full width (its
    top magnitude bit set) and the shift that goes with it, one more or less where a draw
    crosses a power of two."""
    codes = [golden.ppu_code(float(scale), bits) for scale in k * rng.uniform(0.7, 1.4, M)]
    return tuple(np.array(column, np.int64) for column in zip(*codes))


# --- operations bit for bit -----------------------------------------------------------------------

# At SMALL (the registry's small preset with twice the KV rows) with --slow: cocotb's random_ops
# on rdxe-dxt-small runs random GEMVs and RMSNorm-GEMVs of both modes, one pass and several,
# partial chunks, in make test. The VAC's parameter corners are checked here only.
@pytest.mark.parametrize("extra", [pytest.param({}, marks=pytest.mark.slow),
                                   {"clamp": "full", "queue_depth": 3, "operand_stages": 1,
                                    "mult_bits": 16, "rc_bits": 16}])
def test_plain_and_rmsnorm_gemvs(extra):
    """Plain GEMVs (one and several passes, partial chunks, M not a multiple of N or 4) and
    RMSNorm-GEMVs fused and sequential, interleaved; also with the VAC's parameter corners (the
    'full' clamp, the fewest credits, one operand stage, a 16-bit PPU multiplier, a 10-bit RC
    significand)."""
    cfg = DxtConfig(**{**SMALL, **extra})
    prog = Program(cfg)
    rng = np.random.default_rng(1)
    eps = golden.eps_code(1e-5, 0.05)
    for n, (M, K) in enumerate([(5, 7), (9, 16), (3, 1), (12, 13), (6, 9), (4, 20)]):
        W = rng.integers(-128, 128, (M, K))
        x = rng.integers(-128, 128, K)
        if n % 3 == 0:
            prog.gemv(W, x, *_scales(rng, M, 60 / (5500 * math.sqrt(K)), cfg.mult_bits))
        else:
            mode = "fused" if n % 3 == 1 else "sequential"
            prog.gemv(W, x, *_scales(rng, M, 1 / (20 * math.sqrt(K)), cfg.mult_bits),
                      rmsnorm=eps, mode=mode)
    prog.run(seed=1)


def _attention(prog: Program, rng, *, heads, T, group_of=None, K=None, V=None, mode="fused",
               score=(1 << 30, 36), step=0.2):
    """Write ``T`` tokens' keys and values into every KV group the heads use, then Q.K^T and
    P.V for every head; returns the outputs. ``group_of[h]`` defaults to ``h // G``."""
    cfg = prog.cfg
    d, G = cfg.head_dim, cfg.group_size
    group_of = group_of or [h // G for h in range(heads)]
    groups = sorted(set(group_of))
    lo = prog.cfg.out_limits[0]
    if K is None:
        K = {g: rng.integers(lo, 128, (T, d)) for g in groups}
        V = {g: rng.integers(lo, 128, (T, d)) for g in groups}
    for t in range(T):
        for g in groups:
            prog.kv_write("key", K[g][t], g, t)
            prog.kv_write("value", V[g][t], g, t)
    scale = golden.log2_scale(step)
    outs = []
    for h in range(heads):
        g = group_of[h]
        q = rng.integers(-128, 128, d)
        s = prog.qk(q, K[g], h, *score)
        m, shift = _scales(rng, d, 1 / 128 * 1.5)
        outs.append(prog.pv(s, V[g], h, scale, m, shift, mode=mode))
    return outs


def test_gqa_outputs_identical_for_every_group_size(slow_run):
    """Six query heads whose KV groups all hold the same keys and values: group sizes 1, 2, 3
    and 6 (six, three, two and one KV groups in the caches) give the same outputs, and each is
    golden's."""
    outputs = []
    # --slow: G = 2 and 6 too (about 7 s a tile); make test compares MHA with G = 3, two KV
    # groups of three heads (a group size that is not a power of two).
    for G in (1, 2, 3, 6) if slow_run else (1, 3):
        cfg = DxtConfig(**{**SMALL, "group_size": G, "kv_groups": 6 // G})
        prog = Program(cfg)
        rng = np.random.default_rng(3)
        T, d = 2, cfg.head_dim
        K0, V0 = rng.integers(-127, 128, (T, d)), rng.integers(-127, 128, (T, d))
        groups = range(6 // G)
        _attention(prog, rng, heads=6, T=T, K={g: K0 for g in groups},
                   V={g: V0 for g in groups})
        words, _ = prog.run(seed=G, idle=0.2, stall=0.2)
        outputs.append(words)
    assert all(o == outputs[0] for o in outputs[1:])


def _read_caches(cfg, tile, images):
    """A ``finish`` hook: read every VAC's KV cache into ``images`` (N, kv_rows, lanes)."""
    async def finish(ctx, tile):
        for v, vac in enumerate(tile.dxt.vacs):
            mem = vac.kv_memory
            for r in range(cfg.kv_rows):
                images[v, r] = [ctx.get(mem.data[r][k]) for k in range(cfg.lanes)]
    return finish


def test_kv_cache_image_and_overflow():
    """Two of three KV groups filled to capacity in interleaved order, then keys and values of
    tokens at and past the capacity and of a group that does not exist: each refused with an
    error response; the caches hold exactly golden.rdxe.kv_image of each group (iWuR: one key per
    d/lanes rows in its owner VAC t mod N, values column by column in VAC e mod N) and nothing
    else, and attention over every stored token still equals golden."""
    cfg = DxtConfig(**{**SMALL, "kv_groups": 3, "group_size": 2})
    params = cfg
    cap = cfg.capacity
    assert cap == golden.kv_capacity(params) == 8
    prog = Program(cfg)
    rng = np.random.default_rng(4)
    d = cfg.head_dim
    groups = (0, 2)
    K = {g: rng.integers(-127, 128, (cap + 2, d)) for g in groups}
    V = {g: rng.integers(-127, 128, (cap + 2, d)) for g in groups}
    for t in range(cap):
        for g in groups:
            prog.kv_write("key", K[g][t], g, t)
            prog.kv_write("value", V[g][t], g, t)
    for t in (cap, cap + 1):
        prog.kv_write("key", K[0][t], 0, t, ok=False)
        prog.kv_write("value", V[2][t], 2, t, ok=False)
    prog.kv_write("key", K[0][0], 3, 0, ok=False)                  # no group 3
    for h in (1, 4):                                                # heads of groups 0 and 2
        g = h // 2
        s = prog.qk(rng.integers(-128, 128, d), K[g][:cap], h, 1 << 30, 36)
        prog.pv(s, V[g][:cap], h, golden.log2_scale(0.1), *_scales(rng, d, 1 / 64))
    images = np.zeros((cfg.vacs, cfg.kv_rows, cfg.lanes), np.int64)
    prog.run(seed=4, idle=0.2, stall=0.2, finish=_read_caches(cfg, None, images))
    want = np.zeros_like(images)
    for g in groups:
        img = golden.kv_image(K[g], V[g], params, group=g)
        assert img.tokens == cap and not img.responses[cap:].any()
        want += img.data
    assert np.array_equal(images, want)


# --slow: cocotb's attention_overflow on rdxe-dxt-small (make test, Icarus) sends one command per
# refusal rule to the same tile, their chunks drained, and runs attention after them.
@pytest.mark.slow
def test_refused_commands():
    """Bad operands are refused with an error response and their token chunks are drained: a
    GEMV of 0 outputs, a Q.K^T over more tokens than the capacity, a P.V of a head that does not
    exist, a key of the wrong length; the commands after them run normally."""
    cfg = DxtConfig(**SMALL)
    prog = Program(cfg)
    rng = np.random.default_rng(6)
    W, x = rng.integers(-128, 128, (3, 8)), rng.integers(-128, 128, 8)
    prog.refused("gemv", outputs=0, chunks=2)
    prog._send_x(x, 2)
    prog.refused("qk", head=0, tokens=cfg.capacity + 1)
    prog._send_x(x, cfg.key_rows)
    prog.refused("pv", head=1, tokens=3)
    prog.refused("gemv", dest=DESTS.index("key"), outputs=5, chunks=2, tokens=0)
    prog._send_x(x, 2)
    prog.gemv(W, x, *_scales(rng, 3, 60 / (5500 * 3)))
    prog.run(seed=6)


def _unit_query(d):
    q = np.zeros(d, np.int64)
    q[0] = 1
    return q


def test_fused_and_sequential_modes():
    """Where docs/rdxe_models.md section 5 says the modes agree bit for bit (RMSNorm with x =
    +-8, eps 0 or 2**-30: R = 2; softmax with p = [127, 1]: R = 1) the tile's two modes give the
    same outputs; where it pins a difference (RMSNorm x = [3, 4]: -5 against -4; one token:
    V against V 127/128) the tile gives exactly those."""
    cfg = DxtConfig(**SMALL)
    prog = Program(cfg)
    rng = np.random.default_rng(7)
    d = cfg.head_dim
    x8 = np.array([8, -8] * 8)
    W = rng.integers(-127, 128, (9, 16))
    for eps in (0, fp32(2.0 ** -30)):
        a = prog.gemv(W, x8, 1, 3, rmsnorm=np.uint32(eps), mode="fused")
        b = prog.gemv(W, x8, 1, 3, rmsnorm=np.uint32(eps), mode="sequential")
        assert a.tolist() == b.tolist()
    pinned = [prog.gemv(np.array([[1, 1], [1, -1]]), np.array([3, 4]), 1, 0,
                        rmsnorm=np.uint32(0), mode=mode).tolist() for mode in golden.MODES]
    assert pinned == [[32, -5], [32, -4]]
    # Scores straight from the keys: q = e_0 and a score scale of 1 give s_t = K[t, 0].
    K = np.zeros((2, d), np.int64)
    K[:, 0] = [0, -7]
    V = rng.integers(-127, 128, (2, d))
    for t in range(2):
        prog.kv_write("key", K[t], 0, t)
        prog.kv_write("value", V[t], 0, t)
    outs = []
    for mode in golden.MODES:
        s = prog.qk(_unit_query(d), K, 0, 1 << 30, 30)
        assert s.tolist() == [0, -7]
        outs.append(prog.pv(s, V, 0, np.uint32(fp32(1.0)), 1 << 30, 37, mode=mode).tolist())
    assert outs[0] == outs[1]
    # One token: probability 1 saturates to 127/128 in the sequential mode only.
    one = np.zeros((1, d), np.int64)
    one[0, :4] = [10, -20, 127, -127]
    prog.kv_write("value", one[0], 0, 0)
    outs = []
    for mode in golden.MODES:
        s = prog.qk(_unit_query(d), K[:1], 0, 1 << 30, 30)
        outs.append(prog.pv(s, one, 0, np.uint32(fp32(0.125)), 1 << 30, 37,
                            mode=mode)[:4].tolist())
    assert outs == [[10, -20, 127, -127], [10, -20, 126, -126]]
    prog.run(seed=7)


def test_accuracy_within_the_documented_bounds():
    """The tile's outputs against the float64 references, within golden's bounds: RMSNorm on
    random inputs and on an all-zero input with eps 0 and eps > 0 (all outputs 0); softmax-P.V
    with one dominant score and with a row of equal scores (both modes)."""
    cfg = DxtConfig(**SMALL)
    prog = Program(cfg)
    params = prog.cfg
    lo, hi = params.out_limits
    rng = np.random.default_rng(8)
    d = cfg.head_dim
    checks = []
    eps_codes = (np.uint32(0), golden.eps_code(1e-5, 0.05))
    for x in (rng.integers(-128, 128, 24), np.zeros(24, np.int64), np.zeros(24, np.int64)):
        for mode in golden.MODES:
            eps = eps_codes[len(checks) // 2 % 2] if not x.any() else eps_codes[1]
            W = rng.integers(-127, 128, (10, 24))
            m, shift = _scales(rng, 10, 1 / (20 * math.sqrt(24)))
            span = len(prog.spans)
            prog.gemv(W, x, m, shift, rmsnorm=eps, mode=mode)
            ref = golden.rmsnorm_gemv_reference(W, x, m, shift, eps, params.norm_frac)
            bound = golden.rmsnorm_error_bound(W, x, m, shift, eps, params, mode=mode)
            checks.append((span, np.clip(ref, lo, hi), bound, not x.any()))
    # Softmax: a dominant key (its score 127, the others near -128) and equal keys.
    T = 12
    dominant = np.zeros((T, d), np.int64)
    dominant[:, 0] = -120
    dominant[5, 0] = 127
    equal = np.zeros((T, d), np.int64)
    equal[:, 0] = 9
    V = rng.integers(-127, 128, (T, d))
    for keys in (dominant, equal):
        for t in range(T):
            prog.kv_write("key", keys[t], 0, t)
            prog.kv_write("value", V[t], 0, t)
        for mode in golden.MODES:
            s = prog.qk(_unit_query(d), keys, 0, 1 << 30, 30)
            scale = golden.log2_scale(0.25)
            m, shift = _scales(rng, d, 1 / 128)
            span = len(prog.spans)
            prog.pv(s, V, 0, scale, m, shift, mode=mode)
            ref = golden.softmax_pv_reference(s, V, scale, m, shift, params.prob_frac)
            bound = golden.softmax_error_bound(s, V, scale, m, shift, params, mode=mode)
            checks.append((span, np.clip(ref, lo, hi), bound, False))
    words, _ = prog.run(seed=8, idle=0.2, stall=0.2)
    for span, ref, bound, zero in checks:
        out = prog.results(words, span)
        assert np.all(np.abs(out - ref) <= bound), (span, out, ref, bound)
        if zero:
            assert not out.any()


# --- the cycle model ------------------------------------------------------------------------------

def _timed(prog: Program):
    """Run ``prog`` with no idle cycles and no back-pressure; return, for its last operation, the
    cycles of its first request, its last result leaving a PPU, its last GBUS word and its
    response (``Dxt.start``, ``Dxt.result``, ``Dxt.gbus``, ``resp.valid``)."""
    tile = shared(Tile, prog.cfg)
    dxt = tile.dxt
    inputs = {"wmem": prog.wmem, "ppu": prog.ppu, "cmd": prog.cmds, "x": prog.x}
    events = {"start": [], "result": [], "gbus": [], "resp": []}

    async def bench(ctx):
        sent = dict.fromkeys(inputs, 0)
        cycle = 0
        ctx.set(tile.loads, len(prog.wmem) + len(prog.ppu))
        ctx.set(tile.o.ready, 1)
        ctx.set(tile.resp.ready, 1)
        while len(events["resp"]) < len(prog.resps):
            assert cycle < 20_000, "timing run did not finish"
            for name, items in inputs.items():
                port = getattr(tile, name)
                ctx.set(port.valid, int(sent[name] < len(items)))
                if sent[name] < len(items):
                    set_payload(ctx, port.payload, items[sent[name]])
            taken = {n: sent[n] < len(inputs[n]) and ctx.get(getattr(tile, n).ready)
                     for n in inputs}
            for name, signal in (("start", dxt.start), ("gbus", dxt.gbus),
                                 ("resp", tile.resp.valid)):
                if ctx.get(signal):
                    events[name].append(cycle)
            if ctx.get(dxt.result):
                events["result"].append(cycle)
            await ctx.tick()
            cycle += 1
            for name in inputs:
                sent[name] += int(bool(taken[name]))

    simulate(tile, bench)
    return events["start"][-1], events["result"][-1], events["gbus"][-1], events["resp"][-1]


@pytest.mark.parametrize("op, size", [
    ("gemv", (5, 4)), ("rmsnorm-fused", (16, 4)), ("rmsnorm-sequential", (13, 20)),
    ("qk", 7), ("pv-fused", 6), ("pv-sequential", 3)])
def test_cycles_match_the_model(op, size):
    """golden.rdxe's cycle model, exactly: an operation's first request goes out
    ``Latency.lead`` cycles before its cycle 0; its last result leaves a PPU at ``total - 1``,
    its last GBUS word at ``done - 1``, and its response comes ``response`` cycles after that
    (the last pass's padding outputs, parked accumulators, the sequential mode's normalization
    and the GBUS included)."""
    cfg = DxtConfig(**SMALL)
    prog = Program(cfg)
    params, lat = prog.cfg, golden.Latency.of(cfg)
    rng = np.random.default_rng(9)
    kind, _, mode = op.partition("-")
    if kind in ("gemv", "rmsnorm"):
        M, K = size
        W, x = rng.integers(-128, 128, (M, K)), rng.integers(-128, 128, K)
        eps = None if kind == "gemv" else golden.eps_code(1e-5, 0.05)
        prog.gemv(W, x, *_scales(rng, M, 1 / 300), rmsnorm=eps, mode=mode or "fused")
        model = (golden.gemv_cycles(M, K, params, lat) if kind == "gemv" else
                 golden.rmsnorm_gemv_cycles(M, K, params, mode=mode, lat=lat))
    else:
        T, d = size, cfg.head_dim
        K, V = rng.integers(-127, 128, (T, d)), rng.integers(-127, 128, (T, d))
        for t in range(T):
            prog.kv_write("key", K[t], 0, t)
            prog.kv_write("value", V[t], 0, t)
        s = prog.qk(rng.integers(-128, 128, d), K, 0, 1 << 30, 36)
        if kind == "pv":
            prog.pv(s, V, 0, golden.log2_scale(0.2), *_scales(rng, d, 1 / 128), mode=mode)
            model = golden.softmax_pv_cycles(T, params, mode=mode, lat=lat)
        else:
            model = golden.qk_cycles(T, params, lat)
    start, result, gbus, resp = _timed(prog)
    zero = start + lat.lead
    if kind != "qk":
        assert result - zero + 1 == model.total
    assert (gbus - zero + 1, resp - gbus) == (model.done, lat.response)
