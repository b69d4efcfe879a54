"""FusedDQP (hdl/flowkv/dqp*.py): its parameters' messages, the Q4NX record layout, the cycle
model against the RTL in Amaranth's simulator, and SmolLM2's real layer-0 ``attn_q`` weights
through the block, bit for bit against golden/flowkv_dqp.py.

Measured (2 cores, loaded by other jobs): the simulations take 5 to 20 s each; the 64-row real
slice at 32 lanes (about 70 s) runs with ``--slow``, its datapath at 8 lanes in ``make test``.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from golden.flowkv_dqp_streams import job_streams, random_q4nx
from golden.arith.float import fconvert, from_float, to_float
from golden.flowkv_dqp import (GROUP, Q4NX, dequantize, dequantize_reference, gemm,
                               q4nx_from_q41, q4nx_from_records, q4nx_records)
from hdl.arith.format import BF16, FP16, FP32
from hdl.flowkv import DQPConfig, FusedDQP
from hdl.flowkv.dqp_acc import GroupAccumulators
from hdl.flowkv.dqp_spec import command_cycles
from memwall import registry

from .stream_sim import run_streams, shared

SEED = 42


def _build(lanes, tile):
    """The engine, one object per parameter set: tests that use the same share its simulation
    (:func:`tests.stream_sim.shared`)."""
    return shared(FusedDQP, lanes=lanes, tile=tile, max_inputs=1024, max_outputs=tile * 64)


def _sim_items(streams: dict, lanes: int) -> dict:
    """The cocotb items of :func:`job_streams` as :func:`run_streams` takes them (an array
    field as a list)."""
    out = dict(streams)
    out["a"] = [{"data": [item[f"data.{i}"] for i in range(lanes)]} for item in streams["a"]]
    return out


def _run(dut, jobs, *, idle=0.0, stall=0.0, seed=SEED):
    """Run ``jobs`` (``(w, a, bf16)``; ``a`` None: dequantization) back to back; return the
    ``y`` and ``w`` items, each output's transfer cycles and the ``q`` transfer cycles."""
    cfg = dut.cfg
    streams = {"cmd": [], "q": [], "a": []}
    want_y = want_w = 0
    for w, a, bf16 in jobs:
        for name, items in _sim_items(job_streams(cfg, w, a, bf16=bf16), cfg.lanes).items():
            streams[name] += items
        if a is None:
            want_w += w.q.size // cfg.lanes
        else:
            want_y += w.shape[0]
    cycles = {"y": [], "w": []}

    def watch(ctx, cycle):
        for name in cycles:
            port = getattr(dut, name)
            if ctx.get(port.valid) and ctx.get(port.ready):
                cycles[name].append(cycle)
    accepted = {}
    got, _ = run_streams(dut, streams, {"y": ["data", "last"], "w": ["data", "last"]},
                         done=lambda r: len(r["y"]) >= want_y and len(r["w"]) >= want_w,
                         idle=idle, stall=stall, seed=seed, watch=watch, accepted_at=accepted)
    return got, cycles, accepted.get("q", [])


def _rows(w: Q4NX, start: int, stop: int) -> Q4NX:
    return Q4NX(d=w.d[start:stop], m=w.m[start:stop], q=w.q[start:stop])


def _expected_y(w: Q4NX, a, bf16=False) -> list[int]:
    y = gemm(dequantize(w), np.asarray(a)[None])[0]
    return [int(v) for v in (fconvert(y, FP32, BF16) if bf16 else y)]


def _expected_w(w: Q4NX, tile: int) -> np.ndarray:
    """The dequantized weights in stream order (tiles, groups, rows)."""
    rows, cols = w.shape
    return dequantize(w).reshape(rows // tile, tile, cols // GROUP, GROUP) \
        .transpose(0, 2, 1, 3).reshape(-1)


# --------------------------------------------------------------------------------------------
# Parameters

@pytest.mark.parametrize("kwargs, error, message", [
    ({"lanes": 12}, ValueError, "Lane count (whole bytes per weight beat, one group per cycle at "
                                "most) must be 8, 16 or 32, not 12"),
    ({"lanes": True}, TypeError, "Lane count (whole bytes per weight beat, one group per cycle "
                                 "at most) must be 8, 16 or 32, not True"),
    ({"tile": 0}, ValueError, "Output tile (rows held in accumulators) must be between 1 and "
                              "4096, not 0"),
    ({"tile": 4097}, ValueError, "Output tile (rows held in accumulators) must be between 1 and "
                                 "4096, not 4097"),
    ({"lanes": 16, "tile": 7, "max_outputs": 7}, ValueError,
     "Output tile must be at least 8 rows at 16 lanes (each group's rows must take 15 cycles: "
     "accumulator loop and activation reload), not 7"),
    ({"lanes": 32, "tile": 13, "max_outputs": 13}, ValueError,
     "Output tile must be at least 14 rows at 32 lanes (each group's rows must take 14 cycles: "
     "accumulator loop and activation reload), not 13"),
    ({"max_inputs": 1000}, ValueError, "Largest input count max_inputs must be a power of two "
                                       "between 32 and 65536, not 1000"),
    ({"max_inputs": 16}, ValueError, "Largest input count max_inputs must be a power of two "
                                     "between 32 and 65536, not 16"),
    ({"max_outputs": 100}, ValueError, "Largest output count max_outputs must be a multiple of "
                                       "the output tile 8, not 100"),
    ({"max_outputs": 1 << 25}, ValueError, "Largest output count max_outputs must be between 1 "
                                           "and 16777216, not 33554432"),
])
def test_parameters_are_checked(kwargs, error, message):
    args = {"lanes": 8, "tile": 8, "max_inputs": 256, "max_outputs": 64, **kwargs}
    with pytest.raises(error) as caught:
        DQPConfig(**args)
    assert str(caught.value) == message
    with pytest.raises(error):
        FusedDQP(**args)


def test_registry_rejects_by_name():
    block = registry.get("flowkv-dqp")
    with pytest.raises(registry.ParameterError, match="not 12"):
        block.parameters("small", {"lanes": "12"})
    with pytest.raises(registry.ParameterError, match="at least 5 rows at 8 lanes"):
        block.parameters("small", {"tile": "4", "max_outputs": "64"})


def test_least_tile_is_the_accumulator_loop_and_the_activation_reload():
    """The bounds the messages name, from the units' latencies: the accumulator's read, the
    register behind it, the adder and the write (9 cycles: the read port is not transparent),
    and the activation bank's hold (the issue register and the dequantizer less the inputs'
    register, 13 cycles) plus its reload (``32 / lanes`` beats): the reload is the bound at
    every lane count."""
    assert DQPConfig.acc_loop_of() == 9 and DQPConfig.act_hold_of() == 13
    assert [DQPConfig.min_cycles(n) for n in (8, 16, 32)] == [17, 15, 14]


@pytest.mark.parametrize("gap", [DQPConfig.acc_loop_of(), DQPConfig.acc_loop_of() - 1])
def test_accumulator_loop_is_exact(gap):
    """A row's second group sum ``gap`` cycles after its first: at ``acc_loop`` cycles the
    accumulator holds the first (1.5 + 2.25 = 3.75), one cycle sooner it still holds what was
    there before (0, so 2.25 comes out): acc_loop is the least spacing, not a bound above it."""
    acc = GroupAccumulators(DQPConfig(lanes=32, tile=16, max_inputs=1024, max_outputs=1024))
    code = {v: int(from_float(np.float32(v), FP32)) for v in (1.5, 2.25, 3.75)}
    out = []

    async def bench(ctx):
        for cycle in range(gap + 40):
            first, second = cycle == 0, cycle == gap
            ctx.set(acc.i.valid, first or second)
            ctx.set(acc.i.payload.value, code[1.5] if first else code[2.25])
            ctx.set(acc.i.payload.first, first)
            ctx.set(acc.i.payload.last, second)
            ctx.set(acc.i.payload.final, second)
            if ctx.get(acc.o.valid):
                out.append(ctx.get(acc.o.payload.data))
            await ctx.tick()
    sim = Simulator(acc)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert out == [code[3.75] if gap == DQPConfig.acc_loop_of() else code[2.25]]


def test_command_cycles_refuses_shapes():
    cfg = DQPConfig(lanes=8, tile=8, max_inputs=256, max_outputs=64)
    with pytest.raises(ValueError, match="Input count K must be between 32 and 256, not 512"):
        command_cycles(cfg, inputs=512, outputs=8)
    with pytest.raises(ValueError, match="K must be a multiple of 32 and N of the tile 8, not "
                                         "K = 40, N = 8"):
        command_cycles(cfg, inputs=40, outputs=8)
    with pytest.raises(TypeError, match="must be a DQPConfig"):
        command_cycles({"lanes": 8}, inputs=32, outputs=8)


# --------------------------------------------------------------------------------------------
# The Q4NX record layout

def test_record_layout_by_hand():
    """Row 0, group 0: codes 0..15, 15..0 in element order, two a byte, low nibble first;
    d = 1.5 (0x3FC0), m = -2 (0xC000), little-endian; records in tile, group, row order."""
    q = np.zeros((2, 64), np.uint8)
    q[0, :32] = np.r_[np.arange(16), np.arange(15, -1, -1)]
    d = np.array([[0x3FC0, 0x0001], [0x1234, 0x4321]], np.uint16)
    m = np.array([[0xC000, 0x0002], [0x5678, 0x8765]], np.uint16)
    w = Q4NX(d=d, m=m, q=q)
    rec = q4nx_records(w, 2)
    assert rec.shape == (4, 20)
    assert list(rec[0, :16]) == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE,
                                 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01]
    assert list(rec[0, 16:]) == [0xC0, 0x3F, 0x00, 0xC0]
    # Group 0 of rows 0 and 1, then group 1 of rows 0 and 1.
    assert [int(r[16]) | int(r[17]) << 8 for r in rec] == [0x3FC0, 0x1234, 0x0001, 0x4321]
    back = q4nx_from_records(rec, 2, 64, 2)
    assert all(np.array_equal(getattr(back, k), getattr(w, k)) for k in "dmq")
    with pytest.raises(ValueError, match="tile must be a positive integer dividing the 2 rows"):
        q4nx_records(w, 3)
    with pytest.raises(ValueError, match="records must hold 80 bytes for 2 x 64, not 60"):
        q4nx_from_records(rec[:3], 2, 64, 2)


# --------------------------------------------------------------------------------------------
# The RTL in Amaranth's simulator

@pytest.mark.parametrize("lanes, tile", [
    (8, 5),
    # 30 s and about a minute here, mostly the simulator's compile: 8 lanes in make test.
    pytest.param(16, 8, marks=pytest.mark.slow),
    pytest.param(32, 14, marks=pytest.mark.slow),
])
def test_cycle_model_is_the_rtl_at_the_least_tile(lanes, tile):
    """At the least tile each lane count allows (at 32 lanes the bound is met with no cycle to
    spare: 14 rows, 14 cycles a group), a GEMV and a dequantization at full rate: one weight
    beat a cycle, and the first and last results at the cycles of :func:`command_cycles`,
    counted from the first weight beat."""
    dut = _build(lanes, tile)
    rng = np.random.default_rng(SEED)
    K, N = 96, 2 * tile
    for dequant in (False, True):
        w = random_q4nx(rng, N, K)
        a = None if dequant else from_float(rng.standard_normal(K), BF16)
        got, cycles, q_cycles = _run(dut, [(w, a, False)])
        model = command_cycles(dut.cfg, inputs=K, outputs=N, dequant=dequant)
        out = cycles["w" if dequant else "y"]
        assert q_cycles[-1] - q_cycles[0] + 1 == len(q_cycles) == model["issue"], \
            "a stall in the weight stream"
        assert (out[0] - q_cycles[0], out[-1] - q_cycles[0]) == (model["first"], model["last"])
        if dequant:
            assert np.array_equal(np.concatenate([r["data"] for r in got["w"]]),
                                  _expected_w(w, tile))
        else:
            assert [r["data"] for r in got["y"]] == _expected_y(w, a)


def test_back_pressure_and_idle_cycles_keep_every_bit():
    """GEMV in fp32 and bf16, a dequantization and a GEMV with an activation per tile, back to
    back, with 40 % idle inputs and 40 % back-pressure (8 lanes, the serial tree in use)."""
    dut = _build(8, 8)
    rng = np.random.default_rng(SEED + 1)
    w1, w2, w3 = (random_q4nx(rng, 16, 64), random_q4nx(rng, 8, 32), random_q4nx(rng, 16, 64))
    a1 = from_float(rng.standard_normal(64), BF16)
    a3 = from_float(rng.standard_normal((2, 64)), BF16)
    got, _, _ = _run(dut, [(w1, a1, False), (w1, a1, True), (w2, None, False), (w3, a3, False)],
                     idle=0.4, stall=0.4)
    want = (_expected_y(w1, a1) + _expected_y(w1, a1, bf16=True)
            + _expected_y(_rows(w3, 0, 8), a3[0]) + _expected_y(_rows(w3, 8, 16), a3[1]))
    assert [r["data"] for r in got["y"]] == want
    assert [i for i, r in enumerate(got["y"]) if r["last"]] == [15, 31, 47]
    assert np.array_equal(np.concatenate([r["data"] for r in got["w"]]), _expected_w(w2, 8))
    assert [r["last"] for r in got["w"]] == [0] * 31 + [1]


# --------------------------------------------------------------------------------------------
# Real weights: SmolLM2 layer 0 attn_q (Q4_1), through Q4NX

@pytest.fixture(scope="module")
def attn_q(smol):
    """Layer 0's ``attn_q`` as Q4NX and a real input: the attention RMSNorm of a token's
    embedding, rounded to bf16."""
    from sim.llm.model import Numerics
    q41 = smol.q41("blk.0.attn_q.weight")
    h = smol.float32("token_embd.weight")[[504, 2365]]
    x = Numerics(smol).norm(h, 0, "attn_norm")
    return q41, q4nx_from_q41(q41.d, q41.m, q41.q), from_float(x, BF16)


@pytest.mark.parametrize("lanes, tile, rows", [
    (8, 8, 8),
    # The slice, at 32 lanes (4.5 min here, loaded): 8 lanes and 8 rows in make test.
    pytest.param(32, 16, 64, marks=pytest.mark.slow),
])
def test_real_weights_bit_exact(attn_q, lanes, tile, rows):
    """A slice of ``rows`` x 576 of layer 0's ``attn_q``: the GEMV (fp32; at 64 rows bf16 too)
    and the dequantization, bit for bit the golden model's."""
    _, w, x = attn_q
    w = _rows(w, 0, rows)
    dut = _build(lanes, tile)
    jobs = [(w, x[0], False)] + ([(w, x[1], True)] if rows > tile else []) + [(w, None, False)]
    got, _, _ = _run(dut, jobs)
    want = _expected_y(w, x[0]) + (_expected_y(w, x[1], True) if rows > tile else [])
    assert [r["data"] for r in got["y"]] == want
    assert np.array_equal(np.concatenate([r["data"] for r in got["w"]]), _expected_w(w, tile))


def test_bf16_rounding_of_scales_and_minimums(attn_q):
    """What Q4NX's bf16 ``d`` and ``m`` add against Q4_1 in float64, on the whole tensor
    (docs/flowkv.md, FusedDQP): the relative Frobenius error of ``d q + m`` (bf16 ``d``, ``m``,
    no rounding of ``w``) and of the bf16 weights, against ``d q + m`` with the file's fp16
    ``d`` and ``m`` in float64. Measured 0.453 % and 0.474 %. Each is bounded element by element
    by the roundings that make it: ``2**-8 (|d q| + |m|)`` for ``d`` and ``m``, and
    ``2**-8 |w|`` more (plus fp32's ``2**-24``) for ``w``."""
    q41, w, _ = attn_q
    rows, cols = q41.q.shape
    d16, m16 = (to_float(v, FP16)[..., None] for v in (q41.d, q41.m))
    q = q41.q.reshape(rows, -1, GROUP)
    exact = (d16 * q + m16).reshape(rows, cols)
    spread = (np.abs(d16 * q) + np.abs(m16)).reshape(rows, cols)
    dm, wb = dequantize_reference(w), to_float(dequantize(w), BF16)
    assert np.all(np.abs(dm - exact) <= 2.0 ** -8 * spread)
    assert np.all(np.abs(wb - exact) <= 2.0 ** -8 * spread + (2.0 ** -8 + 2.0 ** -24) * np.abs(dm))
    rel = [float(np.linalg.norm(v - exact) / np.linalg.norm(exact)) for v in (dm, wb)]
    print(f"\nattn_q, layer 0: relative error of bf16 d, m: {100 * rel[0]:.3f} %; with w "
          f"rounded to bf16: {100 * rel[1]:.3f} %")
    assert round(100 * rel[0], 3) == 0.453 and round(100 * rel[1], 3) == 0.474
