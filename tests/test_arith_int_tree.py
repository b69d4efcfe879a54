"""The pipelined reduction tree (hdl/arith/tree.py) in Amaranth's simulator.

Checks, for input counts 1..9 (odd ones included) and every register spacing: the latency formula
against a count of register stages written out by hand, the valid bit travelling with the data
(random bubbles), the result of an exact integer sum, and the summation order with a
non-commutative, non-associative combine step compared with trees written out by hand and with the
golden ``pairwise_reduce``. A pipelined combine (a two-cycle toy unit with always-ready streams)
checks the ``unit_combine`` path.
"""

import random

import numpy as np
import pytest
from amaranth import ClockDomain, Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from golden.arith.idot import pairwise_reduce
from hdl.arith.tree import reduce_tree, tree_latency, tree_levels, unit_combine

SEED = 20240603
MASK = 0xFFF


def skew(a, b):
    """Non-commutative, non-associative: 2a + 3b mod 4096."""
    return (2 * a + 3 * b) & MASK


class SkewUnit(wiring.Component):
    """A toy pipelined combine unit: y = skew(a, b), two register stages, always-ready streams."""

    i: In(stream.Signature(data.StructLayout({"a": 12, "b": 12}), always_ready=True))
    o: Out(stream.Signature(data.StructLayout({"y": 12}), always_ready=True))

    latency = 2

    @staticmethod
    def latency_of() -> int:
        return SkewUnit.latency

    def elaborate(self, platform):
        m = Module()
        mid = Signal(12)
        mid_valid = Signal()
        m.d.sync += [mid.eq((self.i.payload.a * 2 + self.i.payload.b * 3)[:12]),
                     mid_valid.eq(self.i.valid),
                     self.o.payload.y.eq(mid), self.o.valid.eq(mid_valid)]
        return m


def simulate(count, combine, register_every=1, width=12, signed_values=False, vectors=60,
             seed=SEED):
    """Drive random vectors with random bubbles; return (latency, sent, got) as lists."""
    rng = random.Random(seed + count * 10 + register_every)
    m = Module()
    m.domains.sync = ClockDomain()          # also when the tree has no register
    shape = signed if signed_values else unsigned
    values = [Signal(shape(width), name=f"v{i}") for i in range(count)]
    valid = Signal()
    result = reduce_tree(m, values, combine, valid=valid, register_every=register_every)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed_values else (0, MASK)
    inputs = [[rng.randint(lo, hi) for _ in range(count)] for _ in range(vectors)]
    sent, got = [], []
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        pending = list(inputs)
        for cycle in range(vectors * 3 + result.latency + 4):
            if pending and rng.random() < 0.6:
                vec = pending.pop(0)
                for sig, v in zip(values, vec):
                    ctx.set(sig, v)
                ctx.set(valid, 1)
                sent.append((cycle, vec))
            else:
                ctx.set(valid, 0)
                for sig in values:
                    ctx.set(sig, rng.randint(lo, hi))     # garbage while not valid
            if ctx.get(result.valid):
                got.append((cycle, ctx.get(result.value)))
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    return result.latency, sent, got


def by_hand(v):
    """The documented order written out for 1..9 inputs."""
    s = skew
    return {
        1: lambda: v[0],
        2: lambda: s(v[0], v[1]),
        3: lambda: s(s(v[0], v[1]), v[2]),
        4: lambda: s(s(v[0], v[1]), s(v[2], v[3])),
        5: lambda: s(s(s(v[0], v[1]), s(v[2], v[3])), v[4]),
        6: lambda: s(s(s(v[0], v[1]), s(v[2], v[3])), s(v[4], v[5])),
        7: lambda: s(s(s(v[0], v[1]), s(v[2], v[3])), s(s(v[4], v[5]), v[6])),
        8: lambda: s(s(s(v[0], v[1]), s(v[2], v[3])), s(s(v[4], v[5]), s(v[6], v[7]))),
        9: lambda: s(s(s(s(v[0], v[1]), s(v[2], v[3])), s(s(v[4], v[5]), s(v[6], v[7]))), v[8]),
    }[len(v)]()


def test_hand_order_matches_golden_pairwise():
    rng = np.random.default_rng(SEED)
    for count in range(1, 10):
        x = rng.integers(0, MASK + 1, size=(20, count))
        want = [by_hand(list(map(int, row))) for row in x]
        got = pairwise_reduce(x, skew, axis=-1)
        assert list(map(int, got)) == want, f"{count} inputs"


@pytest.mark.parametrize("count, register_every, latency", [
    (1, 1, 0), (2, 1, 1), (3, 1, 2), (4, 1, 2), (5, 1, 3), (8, 1, 3), (9, 1, 4), (64, 1, 6),
    (8, 2, 2), (9, 2, 2), (16, 3, 2), (64, 4, 2), (8, 0, 0), (64, 0, 0), (2, 5, 1),
])
def test_latency_formula(count, register_every, latency):
    assert tree_latency(count, register_every=register_every) == latency
    assert tree_latency(count, combine_latency=3) == 3 * tree_levels(count)


@pytest.mark.parametrize("count", range(1, 10))
@pytest.mark.parametrize("register_every", [0, 1, 2])
def test_order_and_valid(count, register_every):
    latency, sent, got = simulate(count, lambda m, a, b: (a * 2 + b * 3)[:12], register_every)
    assert latency == tree_latency(count, register_every=register_every)
    assert [c + latency for c, _ in sent] == [c for c, _ in got], "valid cycles"
    for (cycle, vec), (_, value) in zip(sent, got):
        assert value == by_hand(vec), f"inputs {vec} sent in cycle {cycle}"


@pytest.mark.parametrize("count", [1, 2, 5, 8, 13])
def test_exact_signed_sum(count):
    latency, sent, got = simulate(count, lambda m, a, b: a + b, 1, width=8, signed_values=True)
    assert [c + latency for c, _ in sent] == [c for c, _ in got]
    assert [v for _, v in got] == [sum(vec) for _, vec in sent]


@pytest.mark.parametrize("count", [1, 2, 3, 6, 9])
def test_pipelined_combine(count):
    combine = unit_combine(SkewUnit)
    assert combine.latency == 2
    latency, sent, got = simulate(count, combine)
    assert latency == 2 * tree_levels(count)
    assert [c + latency for c, _ in sent] == [c for c, _ in got], "valid cycles"
    assert [v for _, v in got] == [by_hand(vec) for _, vec in sent]


def test_errors():
    m = Module()
    with pytest.raises(ValueError, match="^Tree input count must be between 1 and 65536, not 0$"):
        reduce_tree(m, [], lambda m, a, b: a + b, valid=Signal())
    with pytest.raises(ValueError, match=r"^Tree register spacing \(levels per register, 0: "
                                         r"none\) must be between 0 and 64, not -1$"):
        reduce_tree(m, [Signal(4), Signal(4)], lambda m, a, b: a + b, valid=Signal(),
                    register_every=-1)
    with pytest.raises(TypeError, match="^Combine unit must be a wiring.Component class with a "
                                        "latency_of, not 3$"):
        unit_combine(3)
