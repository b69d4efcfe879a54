"""cocotb testbench of FusedDQP (``flowkv-dqp``).

The model is fed by the input monitors: the commands, the ``q`` bytes (cut into 20-byte row
records) and the ``a`` inputs the design really took, each handed in order to the oldest
command still short of them (the engine takes records and activation groups ahead of their
command). A dequantization command's records give their ``w`` beats at once
(:func:`golden.flowkv_dqp.dequantize`); a GEMV's tile gives its ``m`` results once its records
and its activation are in (:func:`golden.flowkv_dqp.gemm` of the dequantized tile, rounded by
:func:`golden.arith.float.fconvert` for bf16).

Tests: ``random_jobs`` (GEMV in fp32 and bf16 and dequantization back to back, one and many
groups and tiles), ``corner_cases`` (negative minimums, zero and subnormal scales and minimums,
infinities and NaN in scales, minimums and inputs, overflow of ``d q + m``, flushed products,
bf16 ties and overflow of the result) and ``full_rate`` (one GEMV and one dequantization with no
idle cycles and no back-pressure: weights per cycle, against the cycle model).
"""

from __future__ import annotations

import collections
import os

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from golden.arith.float import fconvert, from_float, to_float
from golden.flowkv_dqp import GROUP, RECORD_BYTES, Q4NX, dequantize, gemm, q4nx_from_records
from golden.flowkv_dqp_streams import job_streams, random_q4nx
from hdl.arith.format import BF16, FP32
from hdl.flowkv import DQPConfig
from hdl.flowkv.dqp_spec import command_cycles

from ..arith_float_tb import CLASSES, float_class
from ..functional import sampler
from ..tb import BlockTB, block_params

#: Environment variables of the ``full_rate`` shape (benchmarks may set them).
ENV_INPUTS, ENV_OUTPUTS = "MEMWALL_DQP_INPUTS", "MEMWALL_DQP_OUTPUTS"
#: Float classes a result can have (subnormal results are flushed).
_RESULTS = tuple(c for c in CLASSES if c != "subnormal")


class _Job:
    """One command and the records and inputs the design took for it."""

    def __init__(self, cfg: DQPConfig, item: dict):
        self.cfg = cfg
        self.groups, self.tiles = item["groups"] + 1, item["tiles"] + 1
        self.dequant, self.bf16 = bool(item["dequant"]), bool(item["bf16"])
        self.records: list[np.ndarray] = []
        self.inputs: list[int] = []
        self.done = 0                                # records (dequant) or rows (GEMV) out

    @property
    def tile_records(self) -> int:
        return self.groups * self.cfg.tile

    def need(self, kind: str) -> int:
        if kind == "records":
            return self.tiles * self.tile_records - len(self.records)
        return 0 if self.dequant else self.tiles * self.groups * GROUP - len(self.inputs)

    def results(self) -> list[dict]:
        """The outputs the records and inputs taken so far complete."""
        out = []
        if self.dequant:
            total = self.tiles * self.tile_records
            while self.done < len(self.records):
                w = dequantize(q4nx_from_records(self.records[self.done], 1, GROUP, 1))[0]
                self.done += 1
                L = self.cfg.lanes
                for b in range(self.cfg.beats):
                    out.append({**{f"data.{i}": int(x) for i, x in enumerate(w[b * L:(b + 1) * L])},
                                "last": int(self.done == total and b == self.cfg.beats - 1)})
            return out
        m, G = self.cfg.tile, self.groups
        K = G * GROUP
        while self.done < self.tiles * m:
            # Row r of tile t is complete with its record in the tile's last group: the
            # engine's first results leave before the tile's last records arrive.
            t, r = divmod(self.done, m)
            rows = min(m, len(self.records) - t * G * m - (G - 1) * m)
            if rows <= r or len(self.inputs) < (t + 1) * K:
                break
            part = np.stack([self.records[(t * G + g) * m + j]
                             for g in range(G) for j in range(r, rows)])
            w = dequantize(q4nx_from_records(part, rows - r, K, rows - r))
            a = np.array(self.inputs[t * K:(t + 1) * K], np.uint16)
            y = gemm(w, a[None])[0]
            if self.bf16:
                y = fconvert(y, FP32, BF16)
            out += [{"data": int(v), "last": int(self.done + k + 1 == self.tiles * m)}
                    for k, v in enumerate(y)]
            self.done += rows - r
        return out


def _samplers(block: str, cfg: DQPConfig) -> dict:
    """Coverpoints of the commands taken, the records' scales and minimums, and the results."""
    def shape(item):
        return ("one" if item["groups"] == 0 else "many", "one" if item["tiles"] == 0 else "many")

    cmd_points = {
        f"{block}.mode": (lambda i: "dequant" if i["dequant"] else "gemv", ("gemv", "dequant")),
        f"{block}.format": (lambda i: None if i["dequant"] else ("bf16" if i["bf16"] else "fp32"),
                            ("fp32", "bf16")),
        f"{block}.groups": (lambda i: shape(i)[0], ("one", "many")),
        f"{block}.tiles": (lambda i: shape(i)[1], ("one", "many")),
    }
    record_points = {
        f"{block}.scale": (lambda r: float_class(r["scale"], BF16), CLASSES),
        f"{block}.minimum": (lambda r: float_class(r["minimum"], BF16), CLASSES),
        f"{block}.minimum_sign": (lambda r: "negative" if r["minimum"] >> 15 else "positive",
                                  ("positive", "negative")),
    }
    return {
        "cmd": sampler(cmd_points, {f"{block}.groups_x_tiles": [f"{block}.groups",
                                                                 f"{block}.tiles"]}),
        "record": sampler(record_points),
        # A result with bits 16 to 31 zero is bf16 (fp32 gives no subnormal: its only such
        # code is +0, a zero either way).
        "y": sampler({f"{block}.result": (lambda i: float_class(i["data"], FP32) if i["data"] >> 16
                                          else float_class(i["data"], BF16), _RESULTS)}),
        "w": sampler({f"{block}.weight": (lambda v: float_class(v, BF16), _RESULTS)}),
    }


class DQPTB(BlockTB):
    """Streams ``cmd``, ``q``, ``a`` in; ``y`` and ``w`` out."""

    def __init__(self, dut, **kwargs):
        self.cfg = block_params().config()
        super().__init__(dut, inputs=("cmd", "q", "a"), outputs=("y", "w"), **kwargs)
        self.jobs: collections.deque[_Job] = collections.deque()
        self.pending = {"records": collections.deque(), "inputs": collections.deque()}
        self.q_bytes = bytearray()
        self.samplers = _samplers(self.block.name, self.cfg)

    def observe(self, stream, item, cycle):
        if stream == "w":                              # every weight of the beat
            for i in range(self.cfg.lanes):
                self.samplers["w"](item[f"data.{i}"])
        elif stream in ("cmd", "y"):
            self.samplers[stream](item)

    # --- model --------------------------------------------------------------------------------

    def model(self, stream, item):
        cfg = self.cfg
        if stream == "cmd":
            self.jobs.append(_Job(cfg, item))
        elif stream == "q":
            self.q_bytes += int(item["data"]).to_bytes(cfg.beat_bits // 8, "little")
            while len(self.q_bytes) >= RECORD_BYTES:
                record = np.frombuffer(bytes(self.q_bytes[:RECORD_BYTES]), np.uint8)
                del self.q_bytes[:RECORD_BYTES]
                self.samplers["record"]({"scale": int(record[16]) | int(record[17]) << 8,
                                         "minimum": int(record[18]) | int(record[19]) << 8})
                self.pending["records"].append(record)
        else:
            self.pending["inputs"].extend(item[f"data.{i}"] for i in range(cfg.lanes))
        out = {"y": [], "w": []}
        for job in self.jobs:
            for kind, taken in (("records", job.records), ("inputs", job.inputs)):
                while self.pending[kind] and job.need(kind):
                    taken.append(self.pending[kind].popleft())
            out["w" if job.dequant else "y"] += job.results()
        while self.jobs and not any(self.jobs[0].need(k) for k in ("records", "inputs")):
            self.jobs.popleft()
        return out

    # --- stimulus -----------------------------------------------------------------------------

    def job(self, w: Q4NX, a=None, *, bf16: bool = False):
        """Queue one command: ``y = W a`` (``a`` given: bf16 codes ``(K,)``, or per tile
        ``(tiles, K)``) or the dequantization of ``w``."""
        for name, items in job_streams(self.cfg, w, a, bf16=bf16).items():
            self.send(name, items)

    def normal(self, shape, scale=1.0) -> np.ndarray:
        return from_float(self.np_rng().standard_normal(shape) * scale, BF16)

    def np_rng(self) -> np.random.Generator:
        return np.random.default_rng(self.rng.getrandbits(32))

    def shape(self, groups: int, tiles: int) -> tuple[int, int]:
        """``(N, K)`` of ``tiles`` tiles and ``groups`` groups, within the limits."""
        cfg = self.cfg
        return (min(tiles, cfg.max_tiles) * cfg.tile, min(groups, cfg.max_groups) * GROUP)


def _tb(dut, **kwargs) -> DQPTB:
    return DQPTB(dut, **kwargs)


@cocotb.test()
async def random_jobs(dut):
    """GEMV in fp32 and bf16 and dequantization, back to back: one and many groups and tiles."""
    tb = _tb(dut)
    await tb.reset()
    cfg = tb.cfg
    for n, (groups, tiles) in enumerate([(1, 1), (3, 1), (2, 2)]):
        N, K = tb.shape(groups, tiles)
        w = random_q4nx(tb.np_rng(), N, K)
        tb.job(w, tb.normal(K), bf16=bool(n % 2))
        if n % 2:
            tb.job(random_q4nx(tb.np_rng(), N, K))
    # A different activation per tile (the engine takes each tile's as it comes).
    N, K = tb.shape(2, 2)
    tb.job(random_q4nx(tb.np_rng(), N, K), tb.normal((N // cfg.tile, K)))
    await tb.drain()


def _corner_matrix(tb: DQPTB, K: int) -> tuple[Q4NX, np.ndarray]:
    """A tile whose rows each hold one corner: ``(w, a)``."""
    cfg = tb.cfg
    m, G = cfg.tile, K // GROUP
    w = random_q4nx(tb.np_rng(), m, K)
    d, mn, q = w.d.copy(), w.m.copy(), w.q.copy()
    corners = [
        ("negative minimum", lambda r: mn.__setitem__(r, from_float(
            -np.abs(tb.np_rng().standard_normal(G)) - 0.25, BF16))),
        ("zero scale", lambda r: d.__setitem__(r, 0)),
        ("negative zero scale and minimum", lambda r: (d.__setitem__(r, 0x8000),
                                                       mn.__setitem__(r, 0x8000))),
        ("subnormal scale and minimum", lambda r: (d.__setitem__(r, 0x0041),
                                                   mn.__setitem__(r, 0x8003))),
        ("infinite scale (inf x 0 = NaN)", lambda r: d.__setitem__(r, 0x7F80)),
        ("NaN minimum", lambda r: mn.__setitem__(r, 0x7FC1)),
        ("d q + m above the bf16 range", lambda r: (d.__setitem__(r, 0x7F7F),
                                                    q.__setitem__(r, 15))),
        # 2**-126 (1 + 2**-7) - 2**-126 = 2**-133: below fp32's normals, flushed to +0.
        ("d q + m cancelling to a subnormal", lambda r: (d.__setitem__(r, 0x0081),
                                                        mn.__setitem__(r, 0x8080),
                                                        q.__setitem__(r, 1))),
    ]
    for row, (_, make) in enumerate(corners[:m]):
        make(row)
    return Q4NX(d=d, m=mn, q=q), tb.normal(K)


@cocotb.test()
async def corner_cases(dut):
    """Special scales, minimums and inputs; flushed products; bf16 ties and overflow; one group
    over two tiles."""
    tb = _tb(dut)
    await tb.reset()
    N, K = tb.shape(2, 1)
    w, a = _corner_matrix(tb, K)
    tb.job(w, a)
    tb.job(w, a, bf16=True)
    tb.job(w)
    # Positive inputs: the row of -0 weights sums to -0 in every group, which only the
    # accumulator's -0 seed keeps (+0 + -0 would be +0).
    tb.job(w, from_float(np.abs(to_float(a, BF16)), BF16))
    # Infinite and NaN inputs, and inputs so small that every product is flushed.
    a_special = a.copy()
    a_special[1], a_special[GROUP + 2] = 0x7F80, 0xFFC0
    w_plain = random_q4nx(tb.np_rng(), N, K)
    tb.job(w_plain, a_special)
    tb.job(w_plain, from_float(np.full(K, 2.0 ** -120), BF16))
    # NaN scales and infinite minimums of both signs, on one group and two tiles.
    N1, K1 = tb.shape(1, 2)
    w_inf = random_q4nx(tb.np_rng(), N1, K1)
    w_inf.d[0], w_inf.m[1], w_inf.m[N1 - 1] = 0x7FC0, 0xFF80, 0x7F80
    tb.job(w_inf, tb.normal(K1))
    tb.job(w_inf)
    # bf16 rounding of y: 1 + 2**-8 (a tie, to even: 1), 1 + 3 * 2**-8 (a tie, up: 1 + 2**-6),
    # 1 + 2**-8 + 2**-20 (above the tie: up), and fp32 results above the bf16 range.
    ones = Q4NX(d=np.full((N, K // GROUP), 0x3F80, np.uint16),
                m=np.zeros((N, K // GROUP), np.uint16), q=np.zeros((N, K), np.uint8))
    ones.q[:, 0] = 1
    ones.q[:, 1] = 1
    ones.q[1::4, 2] = 1                                         # adds a[2] on some rows
    ones.d[2::4, 0] = 0x7F7F                                    # y ~ 3.4e38: bf16 overflows
    a_ties = np.zeros(K, np.uint16)
    a_ties[0] = 0x3F80
    a_ties[1] = from_float(np.array([2.0 ** -8]), BF16)[0]
    a_ties[2] = from_float(np.array([2.0 ** -20]), BF16)[0]
    tb.job(ones, a_ties, bf16=True)
    a_ties[1] = from_float(np.array([3 * 2.0 ** -8]), BF16)[0]
    tb.job(ones, a_ties, bf16=True)
    await tb.drain()


@cocotb.test()
async def full_rate(dut):
    """One GEMV, then one dequantization, with no idle cycles and no back-pressure."""
    tb = _tb(dut, idle=0.0, backpressure=0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    cfg = tb.cfg
    # Long enough for the fill to be small beside the stream at the default preset (16K
    # cycles); a quarter of the limits at the small one (2 groups, 2 tiles: 128 beats).
    K = int(os.environ.get(ENV_INPUTS, min(cfg.max_inputs // 4, 1024)))
    N = int(os.environ.get(ENV_OUTPUTS, min(cfg.max_outputs // 4,
                                            cfg.tile * max(2, 512 // cfg.tile))))
    got = {mode: await _run_alone(tb, mode, K, N) for mode in ("gemv", "dequant")}
    g = got["gemv"]
    tb.report("full_rate", items=K * N, cycles=g["q_span"],
              per_cycle=round(K * N / g["q_span"], 4), latency=g["last"] - (g["q_span"] - 1),
              latency_meaning="last weight beat to the last result (GEMV)",
              K=K, N=N, lanes=cfg.lanes, tile=cfg.tile, total_cycles=g["last"] + 1,
              per_cycle_total=round(K * N / (g["last"] + 1), 4),
              bytes_per_cycle=round(K * N * 5 / 8 / g["q_span"], 3),
              dequant_per_cycle=round(K * N / got["dequant"]["q_span"], 4),
              dequant_total_cycles=got["dequant"]["last"] + 1)


async def _run_alone(tb: DQPTB, mode: str, K: int, N: int) -> dict:
    """Run one ``K x N`` command of ``mode`` with nothing else in flight; check one weight beat
    a cycle and the first and last outputs' cycles against the cycle model."""
    for monitor in (*tb.input_monitors.values(), *tb.output_monitors.values()):
        monitor.first_cycle = None                     # this command's first transfers
    q_mon = tb.input_monitors["q"]
    sent = q_mon.transfers
    tb.job(random_q4nx(tb.np_rng(), N, K), tb.normal(K) if mode == "gemv" else None)
    await tb.drain()
    out = tb.output_monitors["y" if mode == "gemv" else "w"]
    beats, start = q_mon.transfers - sent, q_mon.first_cycle
    span = q_mon.last_cycle - start + 1
    model = command_cycles(tb.cfg, inputs=K, outputs=N, dequant=mode == "dequant")
    first, last = out.first_cycle - start, out.last_cycle - start
    assert span == beats, f"{mode}: {beats} weight beats took {span} cycles, not one a cycle"
    assert (first, last) == (model["first"], model["last"]), \
        f"{mode}: first and last output {first} and {last} cycles after the first weight beat; " \
        f"the cycle model says {model['first']} and {model['last']}"
    return {"q_span": span, "first": first, "last": last}
