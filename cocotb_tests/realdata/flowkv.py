"""Real-model runs of the FlowKV family (:mod:`sim.llm.cases.flowkv`): the attention of one
SmolLM2 decode step on the tile pair and on the array of pairs.

These are the attention steps only: the back-end's projections are FusedDQP on Q4NX weights,
which no block of this family computes.

Which block runs what (:func:`runs`):

* ``flowkv`` takes the ``attention.kv<g>`` ops, one decode step per KV head in turn on one pair:
  the ``default`` preset (``d`` 64, ``P`` 4 lanes, ``L_c`` 16, as SmolLM2's head dimension and
  the back-end's chunk) with ``group`` 3 (SmolLM2's GQA); ``max_tokens`` 4096 unless the step
  holds more rows (then the next power of two).
* ``flowkv-array`` takes the ``attention`` op, the whole step on one pair per KV head: the
  ``default`` preset (``d`` 32, ``G`` 2, 4 pairs, ``max_tokens`` 1024, ``P`` 2) with ``head_dim``
  64, ``group`` 3, ``pairs`` 3 (SmolLM2's shapes) and ``max_tokens`` raised to the next power of
  two when the step holds more rows.

The case's ``head_dim``, ``group`` and ``chunk`` (the back-end's) are always the run's; a
parameter that differs from the preset is an override, named in the run's ``why``.

In the simulator each op runs twice through the block's own testbench
(:class:`cocotb_tests.flowkv.tb.FlowKVTB`, whose scoreboard checks every output beat against
:func:`golden.flowkv.attend` fed by the input monitors): first with no idle cycles and no
back-pressure, which gives the op's cycles, then with the testbench's random idle cycles and
back-pressure, whose outputs are written as the op's result after the test checked that both
passes gave the same bits. Each pass drains before the next op starts.

Cycles (:func:`model_cycles`): from the cycle the block takes the step's command to the cycle it
hands out the step's last output beat (of every pair), both included, in the pass without idle
cycles or back-pressure: what :func:`sim.flowkv.step_cycles` counts (``total``), with the
latencies of the pair's tiles (:func:`cocotb_tests.flowkv.bench.pair_timing`). The array's pairs
take one command and run side by side, so its step takes one pair's cycles.
"""

from __future__ import annotations

import cocotb
import numpy as np

from hdl.flowkv import FlowKVConfig
from memwall import registry
from sim.flowkv import step_cycles

from ..flowkv.bench import pair_timing
from ..flowkv.tb import FlowKVTB
from . import Run, case_ops, write_result

__all__ = ["PAIR", "ARRAY", "PRESET", "runs", "model_cycles", "pair_steps", "array_steps"]

#: The blocks: one pair (``attention.kv<g>`` ops) and one pair per KV head (``attention``).
PAIR, ARRAY = "flowkv", "flowkv-array"
#: The preset both runs start from.
PRESET = "default"
#: The cocotb test of each block's run.
_TESTCASE = {PAIR: "pair_steps", ARRAY: "array_steps"}


def _params(block: str, meta: dict) -> tuple[object, dict]:
    """The block's :data:`PRESET` sized for the step in ``meta``, and the overrides used."""
    preset = registry.get(block).presets[PRESET]
    want = {"head_dim": meta["head_dim"], "group": meta["group"], "chunk": meta["chunk"],
            # The command's length must fit: the next power of two above the preset's if not.
            "max_tokens": max(preset.max_tokens, 1 << (meta["length"] - 1).bit_length())}
    if block == ARRAY:
        want["pairs"] = meta["kv_heads"]
    overrides = {k: str(v) for k, v in want.items() if getattr(preset, k) != v}
    return registry.get(block).parameters(PRESET, overrides), overrides


def _key(op) -> tuple:
    """What sizes a run: ops that agree on it share one."""
    return tuple(op.meta.get(k) for k in ("head_dim", "group", "chunk", "length", "kv_heads"))


def runs(ops) -> list[Run]:
    """One ``flowkv`` run for the ``attention.kv<g>`` ops and one ``flowkv-array`` run for the
    ``attention`` ops of each step shape (module notes); a case has one shape."""
    out = []
    for block, ours in ((PAIR, [op for op in ops if "kv_head" in op.meta]),
                        (ARRAY, [op for op in ops if "kv_heads" in op.meta])):
        shapes: dict[tuple, list] = {}
        for op in ours:
            shapes.setdefault(_key(op), []).append(op)
        for same in shapes.values():
            params, overrides = _params(block, same[0].meta)
            what = ("one decode step per KV head in turn" if block == PAIR
                    else "the whole decode step, one pair per KV head")
            out.append(Run(block, params, _TESTCASE[block], tuple(op.name for op in same),
                           f"{what}; preset {PRESET} with "
                           + (", ".join(f"{k}={v}" for k, v in overrides.items()) or "no change")
                           + " (SmolLM2's head_dim and GQA group, the back-end's chunk, "
                             "max_tokens >= the step's rows)"))
    return out


def model_cycles(run: Run, op) -> int:
    """:func:`sim.flowkv.step_cycles` (``total``) of the step on the run's pair (module notes)."""
    cfg = FlowKVConfig(**run.params.pair_args())
    return step_cycles(pair_timing(cfg), op.meta["length"], op.meta["position"])["total"]


# --- in the simulator -------------------------------------------------------------------------

def _operands(tb: FlowKVTB, op) -> tuple:
    """``q``, ``K``, ``V`` of ``op`` for :meth:`FlowKVTB.step`: arrays for one pair, lists of
    one array per pair (KV head) for the array."""
    q, k, v = (op.inputs[name] for name in ("q", "k", "v"))
    if tb.pairs is None:
        return q, k, v
    kvh, group = op.meta["kv_heads"], op.meta["group"]
    if tb.pairs != kvh:
        raise AssertionError(f"{op.name}: {kvh} KV heads, the array has {tb.pairs} pairs")
    return ([q[g * group:(g + 1) * group] for g in range(kvh)],
            [k[:, g] for g in range(kvh)], [v[:, g] for g in range(kvh)])


def _output(cfg: FlowKVConfig, name: str, beats: list) -> np.ndarray:
    """``O`` ``(G, d)`` from one pair's output beats ``(cycle, item)`` of one step."""
    out = np.zeros((cfg.group, cfg.head_dim), np.uint16 if cfg.out_fmt.width == 16 else np.uint32)
    for cycle, item in beats:
        if item["error"]:
            raise AssertionError(f"{name}: cycle {cycle}: the block refused the step")
        lanes = slice(item["beat"] * cfg.lanes, (item["beat"] + 1) * cfg.lanes)
        out[item["head"], lanes] = [item[f"data.{i}"] for i in range(cfg.lanes)]
    if len(beats) != cfg.group * cfg.beats:
        raise AssertionError(f"{name}: {len(beats)} output beats, not {cfg.group * cfg.beats}")
    return out


async def _pass(tb: FlowKVTB, op, rates: dict | None) -> tuple[np.ndarray, int]:
    """Run ``op``'s decode step to its end: ``rates`` (stream -> idle or back-pressure
    probability) as given, or none; return ``O`` and the step's cycles (module notes)."""
    for name, driver in tb.drivers.items():
        driver.idle = rates[name] if rates else 0.0
    for name, sink in tb.sinks.items():
        sink.backpressure = rates[name] if rates else 0.0
    records = [tb.record(o) for *_, o in tb.names]
    starts = [len(r) for r in records]
    q, K, V = _operands(tb, op)
    tb.step(op.meta["length"], op.meta["position"], q=q, K=K, V=V)
    await tb.drain()
    beats = [r[s:] for r, s in zip(records, starts)]
    out = np.concatenate([_output(tb.cfg, op.name, b) for b in beats])
    last = max(b[-1][0] for b in beats)
    return out, last - tb.input_monitors["cmd"].last_cycle + 1


async def _steps(dut) -> None:
    """Every op of this run (:func:`case_ops`), each at full rate (cycles) and then with random
    idle cycles and back-pressure (the outputs written), module notes."""
    tb = FlowKVTB(dut)
    rates = {**{n: d.idle for n, d in tb.drivers.items()},
             **{n: s.backpressure for n, s in tb.sinks.items()}}
    await tb.reset()
    for op in case_ops():
        fast, cycles = await _pass(tb, op, None)
        out, _ = await _pass(tb, op, rates)
        if not np.array_equal(fast, out):
            bad = tuple(int(i) for i in np.argwhere(fast != out)[0])
            raise AssertionError(f"{op.name}: O{list(bad)} is {int(fast[bad]):#06x} at full rate, "
                                 f"{int(out[bad]):#06x} with idle cycles and back-pressure")
        tb.log.info("%s: %d cycles at full rate", op.name, cycles)
        write_result(op.name, {"o": out}, cycles)


@cocotb.test()
async def pair_steps(dut):
    """The ``attention.kv<g>`` ops on one pair, one decode step each (module notes)."""
    await _steps(dut)


@cocotb.test()
async def array_steps(dut):
    """The ``attention`` op on the array, one pair per KV head (module notes)."""
    await _steps(dut)
