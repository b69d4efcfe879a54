"""Real-model runs of the rDXE family (:mod:`sim.llm.cases.rdxe`): one SmolLM2 layer's DXT
operations of the ``rdxe`` back-end on the ``rdxe-dxt`` tile.

The tile (:func:`tile`): the ``default`` preset (4 VACs of 4 lanes, the largest tile one ECP5
holds; it simulates about six times faster per cycle under Icarus than 4 VACs of 16 lanes) with
SmolLM2's GQA (``group_size`` 3, ``kv_groups`` 3: query head ``h`` reads KV group ``h // 3``,
as the back-end's tile) and ``kv_rows`` raised to the next power of two when the case's tokens
do not fit a group (the preset's 2048 rows hold 84 tokens per group). The fields the golden
numerics read (PPU multiplier width, clamp, RC factor width, fraction bits) are the back-end's,
which equal the preset's; the back-end's tile (16 VACs of 16 lanes) differs only in sizes, which
change no output bit.

Each op is one or more commands of the tile, sent by its testbench (:class:`~cocotb_tests.rdxe.
dxt_tb.DxtTB`), whose scoreboard checks every result word and response against the golden model
fed by the input monitors:

* a GEMV (``gemv`` or ``rmsnorm`` op) is split along its outputs into WMEM loads of at most
  ``vacs * min(wmem_depth // C, ppu_depth)`` outputs (:func:`slices`, ``C = ceil(K / lanes)``
  chunks per output; 28 of 576-input rows on the preset), each loaded (WMEM rows and PPU
  entries), then run by one command with the token's INT8 chunks (and, for RMSNorm, its
  ``eps`` code and ``fp32(1/K)``);
* the attention ops of a KV group first write the case's INT8 keys and values of positions
  ``0 .. T`` into the tile's iWuR cache through the tile's own K/V write path: a GEMV with the
  identity weights (``I_d``, PPU ``1 >> 0``, which passes the codes unchanged) and ``dest`` key
  or value per token (:meth:`~cocotb_tests.rdxe.dxt_tb.DxtTB.identity`); then, per query head of
  the group, a Q.K^T command (the INT8 query's chunks; the score PPU entry on every VAC), whose
  INT8 scores are ``qk.g<g>``'s output, and a P.V command on those scores (PPU ``1 >> prob_frac``
  per channel), whose 64 INT8 results are ``pv.g<g>``'s.

Every command of an op runs twice: alone with no idle cycles and no back-pressure (its cycles),
then with the testbench's random idle cycles on ``cmd`` and ``x`` and back-pressure on ``o`` and
``resp`` (left out when the run has no stalled pass, :func:`~cocotb_tests.realdata.
stalled_pass`); the test checks that both passes gave the same bits and writes the second. The loads
and the K/V writes run once, at full rate (they are most of the simulated cycles and no op's).

Cycles (:func:`model_cycles`): per command, from the cycle the tile takes the command to the
cycle it gives the command's response, in the pass without idle cycles or back-pressure (what
``measure`` in cocotb_tests/rdxe/dxt_tb.py times); an op's cycles are the sum over its commands
(its WMEM loads, or its group's three query heads). The model is
:func:`cocotb_tests.rdxe.dxt_tb.model_cycles` (``golden.rdxe``'s cycle model) of each command.
"""

from __future__ import annotations

import dataclasses

import cocotb
import numpy as np

from golden.rdxe.program import wmem_outputs
from hdl.rdxe import DESTS
from memwall import registry
from sim.llm.cases import CaseError

from ..rdxe.dxt_tb import DxtTB, fp32, model_cycles as command_cycles
from ..streams import to_signed
from ..tb import select_tb
from . import Run, case_ops, stalled_pass, write_result

__all__ = ["BLOCK", "PRESET", "TESTCASE", "tile", "slices", "runs", "model_cycles"]

#: The block, the preset the runs start from, and the cocotb test of every run.
BLOCK, PRESET, TESTCASE = "rdxe-dxt", "default", "realdata"
_GEMVS = ("gemv", "rmsnorm")
_OUT = DESTS.index("out")


def tile(ops) -> tuple[object, dict]:
    """The tile of a case (module notes) and the overrides of :data:`PRESET` it takes."""
    block = registry.get(BLOCK)
    preset = block.parameters(PRESET)
    meta = ops[0].meta
    want = dict(meta["numerics"], group_size=meta["group_size"], kv_groups=meta["kv_groups"])
    tokens = max([op.meta["tokens"] for op in ops if "tokens" in op.meta], default=0)
    kv_rows = preset.kv_rows
    while dataclasses.replace(preset, **want, kv_rows=kv_rows).capacity < tokens:
        kv_rows *= 2
    want["kv_rows"] = kv_rows
    overrides = {k: str(v) for k, v in want.items() if getattr(preset, k) != v}
    return block.parameters(PRESET, overrides), overrides


def slices(cfg, outputs: int, inputs: int) -> list[tuple[int, int]]:
    """The output ranges ``[a, b)`` of a GEMV's WMEM loads on the tile ``cfg`` (module notes).

    Raises
    ------
    ValueError
        An output's chunks exceed the WMEM depth or the token buffer.
    """
    chunks, most = -(-inputs // cfg.lanes), min(cfg.wmem_depth, cfg.chunks)
    if chunks > most:
        raise ValueError(f"GEMV input length must be at most {most * cfg.lanes} ({most} chunks "
                         f"of {cfg.lanes}: the WMEM depth and the token buffer) on this tile, "
                         f"not {inputs}")
    step = wmem_outputs(inputs, cfg)
    return [(a, min(a + step, outputs)) for a in range(0, outputs, step)]


def runs(ops) -> list[Run]:
    """One run of every op on one tile (module notes): the ops share the tile, and each run
    would generate its Verilog again.

    Raises
    ------
    CaseError
        A P.V without the Q.K^T of its group (P.V reads the scores the Q.K^T left).
    """
    if not ops:
        return []
    params, overrides = tile(ops)
    qk = {op.meta["group"] for op in ops if op.meta["kind"] == "qk"}
    alone = [op.name for op in ops if op.meta["kind"] == "pv" and op.meta["group"] not in qk]
    if alone:
        raise CaseError(f"{', '.join(alone)} need the Q.K^T of their group in the same run")
    loads = sum(len(slices(params, *op.inputs["w"].shape)) for op in ops
                if op.meta["kind"] in _GEMVS)
    how = ([f"the GEMVs in {loads} WMEM loads"] if loads else []) + \
        (["K and V written by the identity GEMV"] if qk else [])
    return [Run(BLOCK, params, TESTCASE, tuple(op.name for op in ops),
                f"preset {PRESET} ({params.vacs} VACs of {params.lanes} lanes) with "
                + ", ".join(f"{k}={v}" for k, v in overrides.items())
                + f" (SmolLM2's GQA; {params.capacity} tokens per KV group); " + ", ".join(how))]


def model_cycles(run: Run, op) -> int:
    """The cycle model's cycles of ``op``'s commands on the run's tile (module notes)."""
    cfg, meta = run.params, op.meta
    if meta["kind"] in _GEMVS:
        M, K = op.inputs["w"].shape
        return sum(command_cycles(cfg, meta["kind"], meta.get("mode", "-"), b - a, K)
                   for a, b in slices(cfg, M, K))
    per_head = command_cycles(cfg, meta["kind"], meta.get("mode", "-"), meta["tokens"], 0)
    return cfg.group_size * per_head


# --- in the simulator -------------------------------------------------------------------------

class _Commands:
    """Send commands through a :class:`DxtTB` and take each one's result words and, at full
    rate, its cycles."""

    def __init__(self, tb: DxtTB):
        self.tb = tb
        self.words = tb.record("o")
        self.rates = {**{n: d.idle for n, d in tb.drivers.items()},
                      **{n: s.backpressure for n, s in tb.sinks.items()}}
        self.stressed(False)

    def stressed(self, on: bool) -> None:
        """The testbench's random idle cycles on ``cmd`` and ``x`` and back-pressure on ``o``
        and ``resp`` (on), or none anywhere (off); the loads never idle."""
        for name, driver in self.tb.drivers.items():
            driver.idle = self.rates[name] if on and name in ("cmd", "x") else 0.0
        for name, sink in self.tb.sinks.items():
            sink.backpressure = self.rates[name] if on else 0.0

    async def loaded(self) -> None:
        """Wait until every WMEM row and PPU entry queued has been taken."""
        for name in ("wmem", "ppu"):
            await self.tb.drivers[name].wait_idle()

    async def run(self, sends, name: str) -> tuple[list[np.ndarray], list[int]]:
        """Send each of ``sends`` (callables that queue one command and its chunks) alone at
        full rate, then all of them with idle cycles and back-pressure; return each command's
        results (checked equal in both passes) and its full-rate cycles."""
        tb, fast, cycles = self.tb, [], []
        await self.loaded()
        for send in sends:
            start = len(self.words)
            send()
            await tb.settle()
            fast += self.results(start)
            cycles.append(tb.output_monitors["resp"].last_cycle -
                          tb.input_monitors["cmd"].last_cycle)
        if not stalled_pass():
            return fast, cycles
        self.stressed(True)
        start = len(self.words)
        for send in sends:
            send()
        await tb.settle()
        self.stressed(False)
        slow = self.results(start)
        for i, (a, b) in enumerate(zip(fast, slow)):
            if len(a) != len(b) or not np.array_equal(a, b):
                bad = int(np.argmax(a != b)) if len(a) == len(b) else min(len(a), len(b))
                raise AssertionError(f"{name}: command {i}, result {bad}: the full-rate pass and "
                                     f"the pass with idle cycles and back-pressure differ")
        return slow, cycles

    def results(self, start: int) -> list[np.ndarray]:
        """The INT8 results of each command whose words came out since ``start``."""
        out, current = [], []
        for _, item in self.words[start:]:
            current += [to_signed(item[f"data.{k}"], 8) for k in range(4)
                        if item["keep"] >> k & 1]
            if item["last"]:
                out.append(np.array(current, np.int64))
                current = []
        if current:
            raise AssertionError(f"result words without their last word: {current}")
        return out


async def _gemv(cmds: _Commands, op) -> None:
    """A GEMV or RMSNorm-GEMV op, one WMEM load at a time (module notes)."""
    tb, meta = cmds.tb, op.meta
    W, x, m, shift = (op.inputs[k] for k in ("w", "x", "m", "shift"))
    M, K = W.shape
    got, cycles = [], 0
    for a, b in slices(tb.cfg, M, K):
        row, entry, C = tb.load_weights(W[a:b].astype(np.int64), m[a:b], shift[a:b])
        fields = dict(outputs=b - a, chunks=C, row=row, entry=entry, dest=_OUT)
        if meta["kind"] == "rmsnorm":
            fields.update(seq=int(meta["mode"] == "sequential"), inv_k=fp32(1 / K),
                          eps=int(op.inputs["eps"]))

        def send(fields=fields, C=C):
            tb.command(meta["kind"], **fields)
            tb.tokens(x.astype(np.int64), C)
        (y,), (n,) = await cmds.run([send], op.name)
        got.append(y)
        cycles += n
    write_result(op.name, {"y": np.concatenate(got).astype(np.int8)}, cycles)
    tb.log.info("%s: %d cycles at full rate in %d WMEM loads", op.name, cycles, len(got))


async def _write_kv(tb: DxtTB, group: int, arrays: dict) -> None:
    """Write ``arrays`` (``"key"`` and/or ``"value"``: ``(T, d)`` INT8 of tokens ``0 .. T-1``)
    into KV group ``group`` by the identity GEMV (module notes)."""
    tb.identity()
    await tb.phase([{"kind": "kv", "dest": DESTS.index(dest), "group": group, "token": t,
                     "v": src[t].astype(np.int64)}
                    for t in range(len(next(iter(arrays.values()))))
                    for dest, src in arrays.items()])


async def _attention(cmds: _Commands, qk, pv) -> None:
    """Q.K^T (and P.V, unless ``pv`` is None) of one KV group's query heads (module
    notes)."""
    tb = cmds.tb
    g, n = qk.meta["group"], qk.meta["tokens"]
    await _write_kv(tb, g, {"key": qk.inputs["k"]} | ({} if pv is None else
                                                      {"value": pv.inputs["v"]}))
    N, d = tb.cfg.vacs, tb.cfg.head_dim
    qk_entry = tb.place(0, 1)[1]
    tb.load_entries(qk_entry, 1, int(qk.inputs["m"]), int(qk.inputs["shift"]), N)
    if pv is not None:
        passes = -(-d // N)
        pv_entry = tb.place(0, passes)[1]
        tb.load_entries(pv_entry, passes, pv.inputs["m"], pv.inputs["shift"], d)
    sends = []
    for j, q in enumerate(qk.inputs["q"]):
        head = g * tb.cfg.group_size + j
        sends.append(lambda head=head, q=q: (
            tb.command("qk", entry=qk_entry, head=head, tokens=n),
            tb.tokens(q.astype(np.int64), tb.cfg.key_rows)))
        if pv is not None:
            sends.append(lambda head=head: tb.command(
                "pv", seq=int(pv.meta["mode"] == "sequential"), entry=pv_entry, head=head,
                tokens=n, scale=int(pv.inputs["scale"])))
    got, cycles = await cmds.run(sends, qk.name if pv is None else f"{qk.name}, {pv.name}")
    step = 1 if pv is None else 2
    for i, op in enumerate([qk] if pv is None else [qk, pv]):
        name = "s" if op is qk else "o"
        write_result(op.name, {name: np.stack(got[i::step]).astype(np.int8)},
                     sum(cycles[i::step]))
        tb.log.info("%s: %d cycles at full rate", op.name, sum(cycles[i::step]))


@cocotb.test()
async def realdata(dut):
    """The ops of this run (:func:`case_ops`): GEMVs one WMEM load at a time, attention one KV
    group at a time (module notes)."""
    tb = select_tb(dut, {BLOCK: DxtTB})
    cmds = _Commands(tb)
    await tb.reset()
    ops = case_ops()
    for op in ops:
        if op.meta["kind"] in _GEMVS:
            await _gemv(cmds, op)
    pvs = {op.meta["group"]: op for op in ops if op.meta["kind"] == "pv"}
    for op in ops:
        if op.meta["kind"] == "qk":
            await _attention(cmds, op, pvs.get(op.meta["group"]))
