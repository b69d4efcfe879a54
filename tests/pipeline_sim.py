"""Drive an always-ready pipelined unit in Amaranth's simulator, with random bubbles.

Shared by the in-process RTL tests of the numeric units: each item is written into ``i.payload``
on a cycle chosen at random (``idle`` is the chance of a bubble instead), and every ``o.valid``
beat is recorded with its cycle, so a test can check both the values and that each result comes
exactly ``latency`` cycles after its input.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["PipelineRun", "run_pipeline"]


@dataclass
class PipelineRun:
    """Outputs in order, and the cycle each input went in and each output came out."""

    outputs: list[int]
    in_cycles: list[int]
    out_cycles: list[int]

    @property
    def delays(self) -> np.ndarray:
        """Cycles from each input to its output (all equal to the unit's latency if correct)."""
        return np.array(self.out_cycles) - np.array(self.in_cycles)


def _set(ctx, payload, name: str, value):
    field, _, lane = name.partition(".")           # "a.3": lane 3 of array field a
    target = payload[field]
    if lane:
        ctx.set(target[int(lane)], int(value))
    elif isinstance(value, (Sequence, np.ndarray)):  # a whole array field, one value per lane
        for index, item in enumerate(value):
            ctx.set(target[index], int(item))
    else:
        ctx.set(target, int(value))


def run_pipeline(component, items: Sequence[dict], *, idle: float = 0.3, seed: int = 0,
                 output: str = "y") -> PipelineRun:
    """Feed ``items`` (dicts of payload fields) through ``component`` and collect ``o.payload``
    field ``output`` (a list of lane values for an array field); fails if outputs stop
    coming."""
    rng = random.Random(seed)
    run = PipelineRun([], [], [])

    async def bench(ctx):
        cycle, index = 0, 0
        while len(run.outputs) < len(items):
            assert cycle < 4 * len(items) + 100, \
                f"outputs stopped coming: {len(run.outputs)} of {len(items)} after {cycle} cycles"
            send = index < len(items) and rng.random() >= idle
            ctx.set(component.i.valid, int(send))
            if send:
                for name, value in items[index].items():
                    _set(ctx, component.i.payload, name, value)
                run.in_cycles.append(cycle)
                index += 1
            await ctx.tick()
            cycle += 1
            if ctx.get(component.o.valid):
                field = component.o.payload[output]
                if isinstance(field.shape(), data.ArrayLayout):   # an array field: every lane
                    run.outputs.append([int(ctx.get(field[k]))
                                        for k in range(field.shape().length)])
                else:
                    run.outputs.append(int(ctx.get(field)))
                run.out_cycles.append(cycle)

    sim = Simulator(component)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return run
