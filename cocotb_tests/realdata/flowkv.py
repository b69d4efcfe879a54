"""Real-model runs of the FlowKV family (:mod:`sim.llm.cases.flowkv`): one SmolLM2 decode
step's projections on FusedDQP and its attention on the tile pair and on the array of pairs.

Which block runs what (:func:`runs`):

* ``flowkv-dqp`` takes the projection ops (``attn_q`` ... ``ffn_down``), one GEMV command each,
  in one simulation: the ``paper`` preset (32 lanes, one Q4NX group of one row a cycle; tile
  ``m`` 32, the case's :data:`sim.llm.cases.flowkv.TILE`, which divides every SmolLM2
  projection's rows) with ``max_inputs`` 2048 and ``max_outputs`` 1536
  (:data:`DQP_OVERRIDES`: SmolLM2's largest ``K`` and ``N`` are 1536; the preset's Gemma3 limits
  only widen the command's counters), raised to fit a larger op.
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

In the simulator each op runs through the block's own testbench (:class:`cocotb_tests.flowkv.
tb.FlowKVTB`, whose scoreboard checks every output beat against :func:`golden.flowkv.attend`
fed by the input monitors; :class:`cocotb_tests.flowkv.dqp_tb.DQPTB`, checking every ``y``
against :func:`golden.flowkv_dqp.gemm` likewise): first with no idle cycles and no
back-pressure, which gives the op's cycles, then with the testbench's random idle cycles and
back-pressure (a projection only when its model cycles are at most :data:`STALLED_CYCLES`),
whose outputs must equal the first pass's (left out when the run has no stalled pass,
:func:`~cocotb_tests.realdata.stalled_pass`). Each pass drains before the next op starts.

Cycles (:func:`model_cycles`): a projection's from its first weight beat's transfer to its last
``y`` transfer, both included, at full rate: :func:`hdl.flowkv.dqp_spec.command_cycles`
(``total``). An attention step's from the cycle the block takes the step's command to the cycle
it hands out the step's last output beat (of every pair), both included: what
:func:`sim.flowkv.step_cycles` counts (``total``), with the latencies of the pair's tiles
(:func:`cocotb_tests.flowkv.bench.pair_timing`). The array's pairs take one command and run side
by side, so its step takes one pair's cycles.
"""

from __future__ import annotations

import cocotb
import numpy as np

from golden.flowkv_dqp import q4nx_from_records
from hdl.flowkv import FlowKVConfig
from hdl.flowkv.dqp_spec import command_cycles
from memwall import registry
from sim.flowkv import step_cycles
from sim.llm.cases.flowkv import TILE
from sim.llm.loader import PROJECTIONS

from ..flowkv.bench import pair_timing
from ..flowkv.dqp_tb import DQPTB
from ..flowkv.tb import FlowKVTB
from . import Run, case_ops, stalled_pass, write_result

__all__ = ["PAIR", "ARRAY", "DQP", "PRESET", "DQP_PRESET", "DQP_OVERRIDES", "STALLED_CYCLES",
           "runs", "model_cycles", "pair_steps", "array_steps", "projections"]

#: The blocks: one pair (``attention.kv<g>`` ops), one pair per KV head (``attention``) and
#: FusedDQP (the projections).
PAIR, ARRAY, DQP = "flowkv", "flowkv-array", "flowkv-dqp"
#: The preset both attention runs start from.
PRESET = "default"
#: FusedDQP's preset and its overrides for SmolLM2 (module notes).
DQP_PRESET = "paper"
DQP_OVERRIDES = {"max_inputs": 2048, "max_outputs": 1536}
#: Projections whose model cycles are at most this also run under the random stimulus: the
#: make-test case's slices; a whole layer's 110,592 weight beats stay at full rate (the block's
#: own regression covers its handshakes).
STALLED_CYCLES = 4_000
#: The cocotb test of each block's run.
_TESTCASE = {PAIR: "pair_steps", ARRAY: "array_steps", DQP: "projections"}


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


def _dqp_params(ops) -> tuple[object, dict]:
    """FusedDQP's :data:`DQP_PRESET` with :data:`DQP_OVERRIDES`, raised to fit ``ops``."""
    preset = registry.get(DQP).presets[DQP_PRESET]
    cols = max(op.meta["cols"] for op in ops)
    rows = max(op.meta["rows"] for op in ops)
    # The records' tile is the case's; the preset's is the same, so no override shows.
    want = {"tile": TILE,
            "max_inputs": max(DQP_OVERRIDES["max_inputs"], 1 << (cols - 1).bit_length()),
            "max_outputs": max(DQP_OVERRIDES["max_outputs"], -(-rows // TILE) * TILE)}
    overrides = {k: str(v) for k, v in want.items() if getattr(preset, k) != v}
    return registry.get(DQP).parameters(DQP_PRESET, overrides), overrides


def _dqp_run(ops) -> list[Run]:
    """One ``flowkv-dqp`` run for the projection ops (module notes)."""
    ours = [op for op in ops if op.name in PROJECTIONS]
    if not ours:
        return []
    params, overrides = _dqp_params(ours)
    return [Run(DQP, params, _TESTCASE[DQP], tuple(op.name for op in ours),
                f"one GEMV command per projection; preset {DQP_PRESET} (32 lanes, tile {TILE}) "
                f"with " + ", ".join(f"{k}={v}" for k, v in overrides.items())
                + " (SmolLM2's K and N up to 1536)")]


def runs(ops) -> list[Run]:
    """One ``flowkv-dqp`` run for the projections, one ``flowkv`` run for the
    ``attention.kv<g>`` ops and one ``flowkv-array`` run for the ``attention`` ops of each step
    shape (module notes); a case has one shape."""
    out = _dqp_run(ops)
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
    """:func:`hdl.flowkv.dqp_spec.command_cycles` (``total``) of a projection on the run's
    engine, :func:`sim.flowkv.step_cycles` (``total``) of an attention step on the run's pair
    (module notes)."""
    if run.block == DQP:
        return command_cycles(run.params.config(), inputs=op.meta["cols"],
                              outputs=op.meta["rows"])["total"]
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
        out = (await _pass(tb, op, rates))[0] if stalled_pass() else fast
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


# --- FusedDQP ---------------------------------------------------------------------------------

def _set_rates(tb: DQPTB, rates: dict | None) -> None:
    for name, driver in tb.drivers.items():
        driver.idle = rates[name] if rates else 0.0
    for name, sink in tb.sinks.items():
        sink.backpressure = rates[name] if rates else 0.0


async def _gemv(tb: DQPTB, op, seen: list) -> tuple[np.ndarray, int]:
    """Run projection ``op`` alone (the engine idle before and after): ``y`` and its cycles from
    the first weight beat's transfer to the last ``y`` transfer, both included."""
    m = op.meta
    w = q4nx_from_records(op.inputs["records"], m["rows"], m["cols"], m["tile"])
    q_monitor = tb.input_monitors["q"]
    q_monitor.first_cycle = None                       # this command's first weight beat
    first = len(seen)
    tb.job(w, op.inputs["a"])
    await tb.drain()
    got = seen[first:]
    if len(got) != m["rows"]:
        raise AssertionError(f"{op.name}: {len(got)} results, not {m['rows']}")
    y = np.array([item["data"] for _, item in got], np.uint32)
    return y, got[-1][0] - q_monitor.first_cycle + 1


@cocotb.test()
async def projections(dut):
    """The projection ops on FusedDQP, one GEMV each: at full rate (the cycles), then those of
    at most :data:`STALLED_CYCLES` model cycles under the testbench's random idle cycles and
    back-pressure; both passes' ``y`` equal (module notes)."""
    tb = DQPTB(dut)
    rates = {**{n: d.idle for n, d in tb.drivers.items()},
             **{n: s.backpressure for n, s in tb.sinks.items()}}
    _set_rates(tb, None)
    await tb.reset()
    seen = tb.record("y")
    for op in case_ops():
        _set_rates(tb, None)
        y, cycles = await _gemv(tb, op, seen)
        tb.log.info("%s (%s): %d cycles at full rate", op.name, op.shape, cycles)
        model = command_cycles(tb.cfg, inputs=op.meta["cols"], outputs=op.meta["rows"])
        if stalled_pass() and model["total"] <= STALLED_CYCLES:
            _set_rates(tb, rates)
            again, stalled = await _gemv(tb, op, seen)
            tb.log.info("%s: %d cycles under random stimulus", op.name, stalled)
            if not np.array_equal(y, again):
                bad = int(np.argwhere(y != again)[0][0])
                raise AssertionError(f"{op.name}: y[{bad}] is {int(y[bad]):#010x} at full rate, "
                                     f"{int(again[bad]):#010x} with idle cycles and "
                                     "back-pressure")
        write_result(op.name, {"y": y}, cycles)
