"""Drive a component's valid/ready streams in Amaranth's simulator, with idle cycles and back-pressure.

The in-process twin of cocotb_tests/streams.py for quick unit tests of stream components: each input
stream gets a list of payloads (dicts of field values, a list for an array field) and sends them in
order with a random idle chance per cycle; each output stream is read with a random chance of
``ready`` being low, and its payloads are recorded as dicts of the fields asked for (or as integers,
for a stream whose fields are given as ``None``). A ``watch`` hook, called every cycle, drives what
the streams do not (a serial line, a stall window) and samples pulses; the handshakes counted are
the ones on the signals after it, so it may also hold a ``valid`` or a ``ready`` low.

:func:`simulate` runs a testbench on a component's simulation, built once per component object and
reset for each later run: building a large block's simulation (elaborating it and compiling it to
Python) takes as long as a test's run, so tests that share a component (a cached constructor)
share the build.
"""

from __future__ import annotations

import functools
import random
import weakref
from typing import Mapping, Sequence

from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["run_streams", "simulate", "shared", "set_payload"]

#: component -> (its Simulator, the slot holding the testbench of the current run).
_SIMULATIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@functools.cache
def shared(cls, *args, **kwargs):
    """``cls(*args, **kwargs)``, one object per argument set: the tests of a module that build
    their component through it share its simulation (:func:`simulate`); tests/conftest.py drops
    them after each test module."""
    return cls(*args, **kwargs)


def simulate(component, bench, *, period: float = 1e-8) -> None:
    """Run the async testbench ``bench(ctx)`` on ``component`` with a clock of ``period`` seconds
    until it returns.

    The first run of a component builds its simulation; later runs reset it (every signal and
    memory to its initial value, the clock restarted: the state of a new simulation) and reuse
    it. A run that raises drops the simulation, so that the next one starts from a new build.
    """
    entry = _SIMULATIONS.get(component)
    if entry is None or entry[2] != period:
        sim, slot = Simulator(component), {}

        async def current(ctx):
            await slot["bench"](ctx)

        sim.add_clock(period)
        sim.add_testbench(current)
        entry = _SIMULATIONS[component] = (sim, slot, period)
    else:
        entry[0].reset()
    sim, slot, _ = entry
    slot["bench"] = bench
    try:
        sim.run()
    except BaseException:
        _SIMULATIONS.pop(component, None)
        raise


def set_payload(ctx, view, value):
    """Set ``view`` (a payload or a field of it) to ``value``: a dict of fields, a list for an
    array field, or an integer."""
    if isinstance(value, Mapping):
        for name, item in value.items():
            set_payload(ctx, view[name], item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            ctx.set(view[index], int(item))
    else:
        ctx.set(view, int(value))


def _get(ctx, view, fields):
    if fields is None:
        return int(ctx.get(view))
    out = {}
    for name in fields:
        target = view[name]
        layout = target.shape()
        if isinstance(layout, data.ArrayLayout):
            out[name] = [int(ctx.get(target[i])) for i in range(layout.length)]
        else:
            out[name] = int(ctx.get(target))
    return out


def run_streams(component, inputs: Mapping[str, Sequence], outputs: Mapping[str, Sequence[str]],
                *, done, idle: float = 0.3, stall: float = 0.3, seed: int = 0,
                max_cycles: int = 200_000, finish=None, accepted_at=None, watch=None):
    """Run ``component`` until ``done(received)`` is true; return ``(received, cycles)``.

    ``finish``, if given, is awaited with the simulator context once ``done`` holds (to read
    memories or state at the end of the run). ``accepted_at``, if given, a dict, gets per input
    stream the list of cycles in which its items were taken. ``watch``, if given, is called as
    ``watch(ctx, cycle)`` every cycle once the streams' signals are set, before the handshakes
    are sampled.

    ``inputs`` maps a stream name to its payloads; ``outputs`` maps a stream name to the payload
    fields to record. ``received`` maps each output stream to a list of dicts. The run fails
    after ``max_cycles`` cycles, naming what was still waiting.
    """
    rng = random.Random(seed)
    received = {name: [] for name in outputs}
    sent = {name: 0 for name in inputs}
    state = {"cycles": 0}

    async def bench(ctx):
        cycle = 0
        while not done(received):
            assert cycle < max_cycles, (
                f"run stopped after {cycle} cycles: sent "
                + ", ".join(f"{n} {sent[n]}/{len(inputs[n])}" for n in inputs)
                + "; received " + ", ".join(f"{n} {len(received[n])}" for n in received))
            for name, items in inputs.items():
                port = getattr(component, name)
                offer = sent[name] < len(items) and rng.random() >= idle
                ctx.set(port.valid, int(offer))
                if offer:
                    set_payload(ctx, port.payload, items[sent[name]])
            for name in outputs:
                ctx.set(getattr(component, name).ready, int(rng.random() >= stall))
            if watch is not None:
                watch(ctx, cycle)
            # Sample the handshakes before the edge (ready/valid are combinational here).
            accepted = {n: ctx.get(getattr(component, n).valid)
                        and ctx.get(getattr(component, n).ready) for n in inputs}
            delivered = {}
            for name, fields in outputs.items():
                port = getattr(component, name)
                if ctx.get(port.ready) and ctx.get(port.valid):
                    delivered[name] = _get(ctx, port.payload, fields)
            await ctx.tick()
            cycle += 1
            for name, ok in accepted.items():
                sent[name] += int(bool(ok))
                if ok and accepted_at is not None:
                    accepted_at.setdefault(name, []).append(cycle - 1)
            for name, value in delivered.items():
                received[name].append(value)
        state["cycles"] = cycle
        if finish is not None:
            await finish(ctx)

    simulate(component, bench)
    return received, state["cycles"]
