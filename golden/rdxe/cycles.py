"""Cycle model of the rDXE tile: the latencies of its units and registers (:class:`Latency`),
the cycles of every operation, and the KV-cache reads and writes of both layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdl.arith.requant import Requantizer
from hdl.latency import unit_latency
from hdl.rdxe.sequencer import DECODE
from hdl.rdxe.spec import VacConfig, VeConfig
from hdl.rdxe.vac import Vac
from hdl.rdxe.ve import Activations, RcUnit
from hdl.validate import integer

from .params import GBUS_BYTES, MAX_TOKENS, DxtConfig, _layout, _mode, _params, _ring, _vac_params

__all__ = [
    "Latency", "Cycles", "ReadCycles", "gemv_cycles", "rmsnorm_gemv_cycles", "qk_cycles",
    "softmax_pv_cycles", "command_cycles", "word_cycles", "kv_read_cycles", "kv_write_cycles",
    "layout_cycles",
]


# --- cycle model ----------------------------------------------------------------------------------

#: The RC unit's multiply-add, rsqrt and reciprocal latencies and an activation lane's
#: multiply's (the same at every configuration).
_RC_UNITS = RcUnit.latencies_of(VeConfig())
_ACT_UNITS = Activations.latencies_of(VeConfig())


@dataclass(frozen=True)
class Latency:
    """Latencies in cycles of the shared units the DXT is built from (their default pipeline
    depths in hdl/arith) and of the DXT's own registers and queues.

    ``dot(lanes) = 1 + log2(lanes)`` is the ``IntDot`` latency (products, then one register per
    tree level); ``accumulate`` the INT32 accumulator register; ``broadcast`` the RC factor's
    register on its way to every RCU (the head of each VAC's factor queue). The DXT's own:
    ``score_read`` (the VE's score buffer), ``queue`` (a buffered FIFO: the chunk queue in front
    of HLINK, and each VAC's result queue in front of the GBUS), ``row`` (a VAC's operand path,
    ``hdl.rdxe.Vac.row_latency = 1 + operand_stages``), ``wait`` (the sequencer seeing the
    sequential mode's factor), ``response`` (the response queue), ``word`` (the result stream's
    register) and ``accept`` (the sequencer's decode: an operation that waits for nothing issues
    its first request ``accept + 1`` cycles after the previous operation's last). ``decode`` is
    the registers a command passes before the sequencer takes it (the one it enters, the one it
    waits in decoded): a command taken alone issues its first request ``decode + accept``
    cycles later (back to back it is decoded while the previous operation issues, so the
    spacing above stays). ``split`` is the
    VE's register between exp2's result, split into the requantizer's significand and shift, and
    the activation requantizer (docs/rdxe.md section 9.1: the DXT's critical path ran through
    that split into the requantizer's multiplier). ``rc_out`` is the VE's register on the RC
    factor after the conversion's renormalization and saturation, before the factor fans out to
    the VACs. ``requant`` is the VE's requantizers' latency (the activation path's and the RC
    conversion's), ``ppu`` the PPU's (its input register, its partial products registered once
    more on their way from the multiplier blocks, then its shift in two steps),
    ``rcu`` the RCU's (its shift in two steps, and its partial products registered once more on
    their way from the multiplier blocks).
    ``gather`` is the skid buffer a VAC's result passes on its way into the gatherer (so that
    the gatherer's decision to take a word does not reach back into the VACs' queues).
    ``feed`` is the register behind the token buffer's block RAMs (and beside it on the
    activation path) before a chunk enters the chunk queue. ``int_to_float`` is an activation
    lane's conversion, ``sum_to_float`` the RC unit's (of the INT32 sum, its magnitude
    registered); ``fmac``, ``rsqrt`` and ``reciprocal`` are the RC unit's units (every
    Newton-Raphson product landed), the reciprocal hidden behind the RMSNorm path. Each is read
    off the unit the hardware builds (``hdl.rdxe.ve``).
    """

    requant: int = Requantizer.latency_of()
    ppu: int = Vac.ppu_latency_of(VacConfig())
    rcu: int = unit_latency(Vac.rcu_unit(VacConfig()))
    int_to_float: int = _ACT_UNITS["int_to_float"]
    sum_to_float: int = _RC_UNITS["int_to_float"]
    fmul: int = _ACT_UNITS["fmul"]
    fmac: int = _RC_UNITS["fmac"]
    exp2: int = _ACT_UNITS["exp2"]
    rsqrt: int = _RC_UNITS["rsqrt"]
    reciprocal: int = _RC_UNITS["reciprocal"]
    accumulate: int = 1
    broadcast: int = 1
    score_read: int = 2
    queue: int = 2
    row: int = Vac.row_latency_of(VacConfig())
    wait: int = 1
    response: int = 2
    word: int = 1
    accept: int = 1
    split: int = 1
    rc_out: int = 1
    decode: int = DECODE
    gather: int = 1
    feed: int = 1

    @classmethod
    def of(cls, params) -> Latency:
        """The latencies of the tile (``DxtConfig``) or the VACs (``VacConfig``) ``params``
        describes: those of its VACs' PPU, RCU and operand path (``hdl.rdxe.Vac.ppu_latency_of``,
        ``Vac.rcu_unit``, ``Vac.row_latency_of``: ``operand_stages`` and ``mult_bits`` count);
        the rest are the same at every configuration."""
        params = _vac_params(params)
        return cls(ppu=Vac.ppu_latency_of(params),
                   rcu=unit_latency(Vac.rcu_unit(params)), row=Vac.row_latency_of(params))

    def dot(self, lanes: int) -> int:
        return 1 + (lanes.bit_length() - 1)

    @property
    def activation(self) -> int:
        """``E``: the VE's exp path from a score to its activation, ``int_to_float + fmul +
        exp2 + split + requant``."""
        return self.int_to_float + self.fmul + self.exp2 + self.split + self.requant

    @property
    def request(self) -> int:
        """A request's issue to its chunk in the chunk queue: ``score_read + E + feed`` (every
        request takes the activation path's time, so chunks stay in order)."""
        return self.score_read + self.activation + self.feed

    @property
    def lead(self) -> int:
        """An operation's first request issued to its cycle 0 (its first chunk meeting its row at
        VAC 0's lane tree): ``request + queue + row``."""
        return self.request + self.queue + self.row

    @property
    def factor(self) -> int:
        """A sum's final accumulator to its RC factor leaving the VE: ``sum_to_float +
        max(fmac + rsqrt, reciprocal) + requant + rc_out`` (the reciprocal waits for the
        RMSNorm path, so factors leave in order)."""
        return (self.sum_to_float + max(self.fmac + self.rsqrt, self.reciprocal)
                + self.requant + self.rc_out)


@dataclass(frozen=True)
class Cycles:
    """Cycle count of one operation on a DXT.

    Attributes
    ----------
    total : int
        Cycles from cycle 0 (the first chunk meeting its row at VAC 0's lane tree) to the last
        result leaving a PPU (inclusive); for Q.K^T, to its last GBUS word (the write-back is
        part of it).
    macs : int
        Useful multiply-accumulates.
    utilization : float
        ``macs / (N * lanes * total)``.
    rc_ready : int or None
        Cycle at which the RC factor reaches the RCUs (VRC operations).
    hold : int
        Finished accumulators VAC 0 holds while waiting for the RC factor (fused mode).
    done : int
        Cycles from cycle 0 to the operation's last GBUS word (inclusive): the results leave
        the VACs four per cycle in output order. The DXT's response follows ``response`` cycles
        later, and the operation's first request went out ``Latency.lead`` cycles before cycle
        0.
    """

    total: int
    macs: int
    utilization: float
    rc_ready: int | None = None
    hold: int = 0
    done: int = 0


def _pos(value, what: str) -> int:
    return integer(value, what, 1, 1 << 30)


def _acc_ready(outputs: int, inputs: int, params: VacConfig, N: int, lat: Latency
               ) -> np.ndarray:
    """Cycle at which each output's accumulator holds its final value (first chunk at cycle 0)
    on ``N`` VACs, for every output of every pass: the last pass's padding outputs (past
    ``outputs``) are computed too, by the VACs that have no real output left."""
    C = -(-inputs // params.lanes)
    o = np.arange(-(-outputs // N) * N, dtype=np.int64)
    return (o // N) * C + (C - 1) + (o % N) + lat.dot(params.lanes) + lat.accumulate


def _gbus_moves(results: np.ndarray, lat: Latency) -> np.ndarray:
    """The cycle ``g_w`` each GBUS word moves for results leaving the PPUs at ``results`` (every
    output of every pass, in output order): a result is on its VAC's ``o`` ``queue`` cycles
    later and at the gatherer ``gather`` after that; word ``w`` (outputs ``4w .. 4w + 3``)
    moves at ``g_w = max(its results there, g_(w-1) + 1)``."""
    words = -(-len(results) // GBUS_BYTES)
    padded = np.full(words * GBUS_BYTES, -1, np.int64)
    padded[:len(results)] = results + lat.queue + lat.gather
    ready = padded.reshape(words, GBUS_BYTES).max(axis=1)
    # g_w = max_(v <= w) (R_v + w - v)
    return np.maximum.accumulate(ready - np.arange(words)) + np.arange(words)


def _gbus(results: np.ndarray, lat: Latency) -> int:
    """``done`` of results leaving the PPUs at ``results`` (:func:`_gbus_moves`): ``g_last +
    1``."""
    return int(_gbus_moves(results, lat)[-1]) + 1


def _cycles(total: int, outputs: int, inputs: int, params: VacConfig, N: int, **extra
            ) -> Cycles:
    macs = outputs * inputs
    return Cycles(int(total), macs, macs / (N * params.lanes * int(total)), **extra)


def gemv_cycles(outputs: int, inputs: int, params: DxtConfig | VacConfig,
                lat: Latency | None = None, *, vacs: int | None = None) -> Cycles:
    """Cycles of a plain GEMV of ``outputs`` x ``inputs`` on one DXT (a ``DxtConfig``), or on a
    ring of ``vacs`` VACs of a ``VacConfig``.

    Model: ``C = ceil(inputs / lanes)`` chunks per output; the token buffer streams the
    ``ceil(outputs / N)`` passes back to back, one lanes-wide chunk per cycle over HLINK; VAC
    ``v`` sees chunk ``j`` of pass ``p`` at cycle ``p*C + j + v`` (one cycle per HLINK hop) with
    its WMEM row; output ``o`` (VAC ``o mod N``, pass ``o // N``; the last pass's padding
    outputs included) has its accumulator at ``a_o = (o//N)*C + C - 1 + o mod N + dot +
    accumulate`` and its INT8 result ``ppu`` cycles later. ``total = max_o a_o + ppu +
    1``; ``done`` adds the GBUS (:func:`_gbus`).
    """
    params, N = _ring(params, vacs)
    lat = Latency.of(params) if lat is None else lat
    outputs, inputs = _pos(outputs, "Output count"), _pos(inputs, "Input length")
    results = _acc_ready(outputs, inputs, params, N, lat) + lat.ppu
    return _cycles(results.max() + 1, outputs, inputs, params, N, done=_gbus(results, lat))


def _rc_ready(inputs: int, params: VacConfig, lat: Latency) -> int:
    """The RC factor at the RCUs: the VE's sum taps chunk ``j`` at cycle ``j`` (where VAC 0's
    lane tree meets it), then ``dot + accumulate``, :attr:`Latency.factor` and the broadcast
    register."""
    C = -(-inputs // params.lanes)
    return C - 1 + lat.dot(params.lanes) + lat.accumulate + lat.factor + lat.broadcast


def _fused_results(outputs: int, inputs: int, params: VacConfig, N: int, lat: Latency,
                   rc_ready: int) -> np.ndarray:
    """The cycle each output (padding included) leaves its PPU in the fused mode (:func:`_fused`)."""
    ready = _acc_ready(outputs, inputs, params, N, lat)
    # Each VAC's RCU takes one accumulator per cycle, in output order and not before the factor:
    # s_k = max(a_k, rc_ready, s_(k-1) + 1) over the VAC's outputs o = v, v + N, ...
    entry = np.zeros_like(ready)
    for v in range(N):
        s = -1
        for index in range(v, len(ready), N):
            s = max(int(ready[index]), rc_ready, s + 1)
            entry[index] = s
    return entry + lat.rcu + lat.ppu


def _fused(outputs: int, inputs: int, params: VacConfig, N: int, lat: Latency, rc_ready: int
           ) -> Cycles:
    ready = _acc_ready(outputs, inputs, params, N, lat)
    hold = int(np.count_nonzero(ready[::N] < rc_ready))
    results = _fused_results(outputs, inputs, params, N, lat, rc_ready)
    return _cycles(results.max() + 1, outputs, inputs, params, N, rc_ready=rc_ready, hold=hold,
                   done=_gbus(results, lat))


def _sequential(plain: Cycles, inputs: int, params: VacConfig, N: int, lat: Latency,
                rc_ready: int) -> Cycles:
    """The sequential mode: the sum's pass (not on HLINK) gives the factor at ``rc_ready``; the
    sequencer sees it ``wait`` cycles later and normalizes the ``C`` chunks in the token buffer
    (one read per cycle), then issues the plain GEMV, whose cycle 0 comes ``lead`` cycles after
    its first request."""
    C = -(-inputs // params.lanes)
    start = rc_ready + lat.wait + C + lat.lead
    return _cycles(start + plain.total, plain.macs // inputs, inputs, params, N,
                   rc_ready=rc_ready, done=start + plain.done)


def rmsnorm_gemv_cycles(outputs: int, inputs: int, params: DxtConfig | VacConfig, *,
                        mode: str = "fused", lat: Latency | None = None,
                        vacs: int | None = None) -> Cycles:
    """Cycles of an RMSNorm-GEMV, fused or sequential, on one DXT (a ``DxtConfig``) or on a
    ring of ``vacs`` VACs of a ``VacConfig`` (:func:`gemv_cycles`).

    The VE's sum ``IntDot(x, x)`` takes chunk ``j`` at cycle ``j``, where VAC 0's lane tree meets
    it; then its accumulator, ``sum_to_float``, ``fmac``, ``rsqrt``, the RC
    conversion (a requantizer) and the broadcast register::

        rc_ready = C - 1 + dot + accumulate + sum_to_float + fmac + rsqrt + requant
                   + broadcast

    Fused: the GEMV runs as :func:`gemv_cycles`; a finished accumulator waits for ``rc_ready``,
    then RCU and PPU. Each VAC's RCU takes one accumulator per cycle in output order, so VAC
    ``v``'s outputs enter it at ``s_k = max(a_k, rc_ready, s_(k-1) + 1)`` and ``total = max_v
    s_last + rcu + ppu + 1`` (``max(max_o a_o, rc_ready) + rcu + ppu + 1`` when no VAC holds
    more than one finished accumulator at ``rc_ready``). Sequential: ``x`` fills the token
    buffer while the VE sums it (cycle 0 is its first chunk at the sum), and ``total = rc_ready
    + wait + C + lead + gemv_cycles(...).total`` (:func:`_sequential`).
    """
    params, N = _ring(params, vacs)
    lat = Latency.of(params) if lat is None else lat
    mode = _mode(mode)
    outputs, inputs = _pos(outputs, "Output count"), _pos(inputs, "Input length")
    rc_ready = _rc_ready(inputs, params, lat)
    if mode == "fused":
        return _fused(outputs, inputs, params, N, lat, rc_ready)
    plain = gemv_cycles(outputs, inputs, params, lat, vacs=vacs)
    return _sequential(plain, inputs, params, N, lat, rc_ready)


def softmax_pv_cycles(tokens: int, params: DxtConfig, *, mode: str = "fused",
                      lat: Latency | None = None) -> Cycles:
    """Cycles of one head's softmax-P.V (``head_dim`` outputs, ``tokens`` inputs).

    The INT8 scores and their maximum are in the VE (:func:`qk_cycles`). The VE reads ``lanes``
    scores per cycle and makes ``lanes`` activations per cycle through ``lanes`` copies of
    ``int_to_float``, ``fmul``, ``exp2`` and a requantizer (``E = Latency.activation``); like
    every request, an activation reaches VAC 0's lane tree ``lead`` cycles after its request, at
    cycle ``j`` for chunk ``j``, where the VE's ``sum p`` (the RMSNorm sum's IntDot, with ones)
    takes it. The factor ``reciprocal(P)`` leaves the converter with the RMSNorm path's latency,
    so ``rc_ready`` is RMSNorm's formula with ``C = ceil(tokens / lanes)``.

    Fused: the activations are the P.V GEMV's first pass (and fill the token buffer for the
    later ones): :func:`gemv_cycles` with the RCU schedule of :func:`rmsnorm_gemv_cycles`.
    Sequential: the activations fill the token buffer while the VE sums them; ``total =
    rc_ready + wait + C + lead + gemv_cycles(head_dim, tokens).total``.
    """
    params = _params(params)
    lat = Latency.of(params) if lat is None else lat
    mode = _mode(mode)
    tokens = integer(tokens, "Token count", 1, MAX_TOKENS)
    rc_ready = _rc_ready(tokens, params, lat)
    d, N = params.head_dim, params.vacs
    if mode == "fused":
        return _fused(d, tokens, params, N, lat, rc_ready)
    return _sequential(gemv_cycles(d, tokens, params, lat), tokens, params, N, lat, rc_ready)


def qk_cycles(tokens: int, params: DxtConfig, lat: Latency | None = None) -> Cycles:
    """Cycles of one head's Q.K^T with INT8 write-back to the VE (iWuR layout).

    A GEMV with ``tokens`` outputs and ``head_dim`` inputs: token ``t`` on VAC ``t mod N`` (its
    owner), one key row per cycle, the query re-streamed every pass; the score leaves the PPU at
    ``r_t = a_t + ppu`` and is on the VAC's ``o`` ``queue`` cycles later, at the gatherer
    ``gather`` after that. The GBUS moves ``GBUS_BYTES`` scores per transfer in token order, one
    transfer per cycle: transfer ``w`` happens at ``g_w = max(max r_t + queue + gather over its
    scores, g_(w-1) + 1)`` (the last pass's
    padding tokens included), and the VE stores the scores and updates the running maximum as
    they come. ``total = done = g_last + 1``.
    """
    params = _params(params)
    lat = Latency.of(params) if lat is None else lat
    tokens = integer(tokens, "Token count", 1, MAX_TOKENS)
    results = _acc_ready(tokens, params.head_dim, params, params.vacs, lat) + lat.ppu
    done = _gbus(results, lat)
    return _cycles(done, tokens, params.head_dim, params, params.vacs, done=done)


@dataclass(frozen=True)
class ReadCycles:
    """KV-cache reads of one head's Q.K^T or P.V.

    Attributes
    ----------
    reads : np.ndarray
        ``(N,)`` row reads of each VAC's cache.
    cycles : int
        ``max(reads)``: read-port cycles of the DXT (one read per VAC per cycle).
    utilization : float
        Operand bytes the MACs use over the bytes the ports could deliver in ``cycles``:
        ``useful / (N * lanes * cycles)``.
    """

    reads: np.ndarray
    cycles: int
    utilization: float


def command_cycles(kind: str, a: int, b: int, params: DxtConfig, *, mode: str = "fused") -> int:
    """Cycles from a DXT command taken to its response, for a command that waits for nothing and
    whose chunks come at full rate: the command's decode register, the sequencer's accept,
    ``lead`` to cycle 0, ``done``, the response queue. ``kind`` is ``gemv`` or ``rmsnorm``
    (``a`` outputs, ``b`` inputs), ``qk`` or ``pv`` (``a`` tokens)."""
    lat = Latency.of(params)
    if kind == "gemv":
        c = gemv_cycles(a, b, params, lat)
    elif kind == "rmsnorm":
        c = rmsnorm_gemv_cycles(a, b, params, mode=mode, lat=lat)
    elif kind == "qk":
        c = qk_cycles(a, params, lat)
    elif kind == "pv":
        c = softmax_pv_cycles(a, params, mode=mode, lat=lat)
    else:
        raise ValueError(f"command kind must be one of gemv, rmsnorm, qk, pv, not {kind!r}")
    return lat.decode + lat.accept + lat.lead + c.done - 1 + lat.response


def word_cycles(kind: str, a: int, b: int, params: DxtConfig) -> np.ndarray:
    """Cycles from a DXT command taken to each of its result words on ``o`` (fused mode; the
    words of padding outputs only are not sent), for a command as :func:`command_cycles` times
    it: a word leaves ``o`` the cycle after the GBUS moves it, so the last one ``response - 1``
    cycles before the response. ``kind`` is ``gemv``, ``rmsnorm`` (``a`` outputs, ``b``
    inputs), ``qk`` or ``pv`` (``a`` tokens)."""
    params = _params(params)
    lat = Latency.of(params)
    N = params.vacs
    if kind in ("gemv", "qk"):
        outputs, inputs = (a, b) if kind == "gemv" else (a, params.head_dim)
        results = _acc_ready(outputs, inputs, params, N, lat) + lat.ppu
    elif kind in ("rmsnorm", "pv"):
        outputs, inputs = (a, b) if kind == "rmsnorm" else (params.head_dim, a)
        results = _fused_results(outputs, inputs, params, N, lat,
                                 _rc_ready(inputs, params, lat))
    else:
        raise ValueError(f"command kind must be one of gemv, rmsnorm, qk, pv, not {kind!r}")
    moves = _gbus_moves(results, lat)
    return moves[:-(-outputs // GBUS_BYTES)] + lat.decode + lat.accept + lat.lead + 1


def kv_read_cycles(tokens: int, op: str, params: DxtConfig, layout: str = "iwur"
                   ) -> ReadCycles:
    """KV-cache row reads of one head's ``op`` (``"qk"`` or ``"pv"``) over ``tokens`` tokens.

    Model: each VAC reads every cache row holding operands of its outputs once, and uses all of
    them. For iWuR a row is one operand chunk as the MAC takes it (a chunk of a key for Q.K^T;
    ``lanes`` tokens of one value channel for P.V). The baseline (K column-wise, V row-wise) is
    given an operand staging buffer in every VAC so that it too uses each row it reads in full:
    a ``d x lanes`` transpose buffer turns ``d`` K rows (one channel of ``lanes`` slots each)
    into ``lanes`` keys, and a V row (one token's channels of that VAC) feeds one byte to each of
    its ``c_v`` channels' chunks. ``T_v = ceil((tokens - v) / N)`` tokens and ``c_v`` value
    channels belong to VAC ``v``. Reads per VAC:

    ========  =========================  ==================================
    op        iWuR                       baseline
    ========  =========================  ==================================
    qk        ``T_v * d / lanes``        ``ceil(T_v / lanes) * d``
    pv        ``c_v * ceil(T / lanes)``  ``T * ceil(c_v / lanes)``
    ========  =========================  ==================================

    Useful bytes: ``T_v * d`` (qk) and ``c_v * T`` (pv) in both layouts. So Q.K^T reads the same
    (the baseline pays a transpose buffer), and P.V reads ``lanes / c`` times more rows in the
    baseline (a V row holds ``c`` of its ``lanes`` bytes; 4 at the defaults).
    """
    params = _params(params)
    layout = _layout(layout)
    tokens = integer(tokens, "Token count", 1, MAX_TOKENS)
    if op not in ("qk", "pv"):
        raise ValueError(f"Operation must be 'qk' or 'pv', not {op!r}")
    N, L, d = params.vacs, params.lanes, params.head_dim
    v = np.arange(N, dtype=np.int64)
    if op == "qk":
        per_vac = np.maximum(0, -(-(tokens - v) // N))
        useful = per_vac * d
        reads = per_vac * params.key_rows if layout == "iwur" else -(-per_vac // L) * d
    else:
        per_vac = np.array([len(range(i, d, N)) for i in range(N)], np.int64)
        useful = per_vac * tokens
        reads = per_vac * -(-tokens // L) if layout == "iwur" else tokens * -(-per_vac // L)
    cycles = int(reads.max())
    return ReadCycles(reads, cycles, float(useful.sum()) / (N * L * cycles))


def layout_cycles(tokens: int, op: str, params: DxtConfig, layout: str = "iwur", *,
                  mode: str = "fused", lat: Latency | None = None) -> int:
    """Cycles of one head's Q.K^T (``op="qk"``) or softmax-P.V (``"pv"``, ``mode``) with the KV
    cache in ``layout``.

    iWuR: :func:`qk_cycles` / :func:`softmax_pv_cycles` (the DXT built). Baseline (modelled, not
    built): the same plus the extra read-port cycles of :func:`kv_read_cycles` (a VAC's chunk
    stream waits for its reads), and for Q.K^T the ``d`` reads that fill the transpose buffer
    before the first key can go (iWuR reads ``d / lanes`` rows before it).
    """
    params = _params(params)
    lat = Latency.of(params) if lat is None else lat
    layout = _layout(layout)
    if op == "qk":
        iwur = qk_cycles(tokens, params, lat).total
    elif op == "pv":
        iwur = softmax_pv_cycles(tokens, params, mode=mode, lat=lat).total
    else:
        raise ValueError(f"Operation must be 'qk' or 'pv', not {op!r}")
    if layout == "iwur":
        return iwur
    extra = (kv_read_cycles(tokens, op, params, "baseline").cycles -
             kv_read_cycles(tokens, op, params).cycles)
    if op == "qk":
        extra += params.head_dim - params.key_rows
    return iwur + max(0, extra)


def kv_write_cycles(params: DxtConfig, layout: str = "iwur") -> dict[str, int]:
    """Cycles to write one token into one KV group's caches.

    ``gbus``: key transfers over the GBUS, ``d / GBUS_BYTES`` (both layouts: the key goes to its
    owner). ``k``: writes into the owner's cache: iWuR one byte-enabled row write per transfer
    (``d / 4``), baseline one byte per row (``d``). ``v``: writes per VAC, in parallel, no GBUS:
    iWuR one byte per row (``ceil(d / N)``), baseline one row (``ceil(ceil(d / N) / lanes)``).
    """
    params = _params(params)
    layout = _layout(layout)
    d, c, L = params.head_dim, params.value_rows, params.lanes
    gbus = -(-d // GBUS_BYTES)
    if layout == "iwur":
        return {"gbus": gbus, "k": gbus, "v": c}
    return {"gbus": gbus, "k": d, "v": -(-c // L)}
