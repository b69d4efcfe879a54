"""SmolLM2's real tensors through the in-flash PE (``inflash``): the ``w4a16`` GEMVs of a
decoder layer's projections on the file's Q4_1 blocks, and Logit and Attend of each KV group
over the layer's fp16 KV pages (:mod:`sim.llm.cases.inflash`).

One simulation (:func:`runs`) does every op of the case on :data:`PRESET` with
:data:`OVERRIDES`, through the PE's own testbench (:class:`~cocotb_tests.inflash.env.
InflashTB`: its flash plane, its scoreboard checking every result against ``golden.inflash``
fed by the monitors). The test :func:`realdata` runs the ops in two passes:

1. every op at full rate (no idle cycles on ``cmd`` and ``x``, no back-pressure on ``y``, no
   gaps in the page stream): the outputs written, and the op's cycles as
   ``golden.inflash.gemv_timing`` and ``attention_timing`` count them, from the cycle its
   first page read is taken to its last ``y`` transfer, both included;
2. again, under the testbench's random idle cycles, back-pressure and page gaps (the
   regression's stimulus), every op whose model cycles are at most :data:`STALLED_CYCLES`
   (a Logit or Attend, a GEMV of up to about 19 pages: not the long projections of a whole
   layer, whose handshakes the block's own regression covers), unless the run has no stalled
   pass (:func:`~cocotb_tests.realdata.stalled_pass`): its outputs must equal the first pass's.

A GEMV's weights are programmed as pages from page 0 (``golden.inflash.weight_pages``); an
attention op's KV pages are the layer's cache (``keys`` and ``values`` of every KV head)
written by ``golden.inflash.kv_pages`` as a one-layer cache with the page-level mapping, so
the command names ``layer`` 0 and ``head`` ``g``: under that mapping a head's pages are its
own, and the pages of the model's other layers would never be read.

:func:`model_cycles` is the cycle model's total for the same command: the page schedule of
``golden.inflash`` plus the PE's ``pe_latency`` (a function of its parameters).
"""

from __future__ import annotations

import functools
import gc
import warnings

import cocotb
import numpy as np
from amaranth.hdl import UnusedElaboratable
from cocotb.triggers import ClockCycles

from golden import inflash as golden
from hdl.inflash.spec import Mode, Op as Command
from memwall import registry

from ..inflash.env import InflashTB
from . import Run, case_ops, stalled_pass, write_result

__all__ = ["BLOCK", "PRESET", "OVERRIDES", "runs", "model_cycles", "kv_layout", "realdata"]

BLOCK = "inflash"
#: Table I's plane: 4 KB pages, 4-byte transfers at 400 MHz.
PRESET = "default"
#: Q4_1's group of 32 (the preset's is 128); 8 FMACs, the fewest that keep up with the page
#: stream on SmolLM2's layer (a w4a16 page computes in 819 beats and streams in 1024 cycles;
#: a Logit or Attend page of 32 tokens x 3 heads x 8 beats in 768); rows and columns up to
#: 2048, the powers of two above its largest projection (1536 x 576, 576 x 1536); tR 0.5 us
#: (200 cycles). The RTL never counts tR, the plane does: at Table I's 4 us (1600 cycles)
#: every page would wait for the array and most simulated cycles would be idle; 200 cycles
#: still cover the longest ``x`` (ffn_down: 1536 / 8 = 192 beats), which a w4a16 GEMV takes
#: whole before its first beat and the cycle model assumes is in before the first page
#: (docs/inflash.md section 8).
OVERRIDES = {"fmacs": "8", "group_size": "32", "max_rows": "2048", "max_cols": "2048",
             "tR_us": "0.5"}
WHY = ("Table I's plane (4 KB pages, 4-byte transfers, 400 MHz) with F = 8, the fewest FMACs "
       "that keep up with its page stream on SmolLM2's layer, group_size 32 (Q4_1), max_rows = "
       "max_cols = 2048 (largest projection 1536 x 576), tR 0.5 us (the RTL does not count tR; "
       "200 cycles cover the longest x); Logit and Attend take a KV group's 3 query heads as "
       "G = 3")
#: Ops whose model cycles are at most this also run under the random stimulus (module notes).
STALLED_CYCLES = 20_000


def params():
    """The PE's parameters for SmolLM2's layer (:data:`PRESET`, :data:`OVERRIDES`)."""
    return registry.get(BLOCK).parameters(PRESET, OVERRIDES)


def runs(ops) -> list[Run]:
    """One simulation for every op of the case (any subset of a layer's, any position)."""
    if not ops:
        return []
    return [Run(BLOCK, params(), "realdata", tuple(op.name for op in ops), WHY)]


def _is_gemv(op) -> bool:
    return "." not in op.name


def kv_layout(op, page_bytes: int) -> golden.KVLayout:
    """The KV pages of an attention op: the layer's cache as a one-layer, page-level layout."""
    m = op.meta
    return golden.KVLayout(1, m["kv_heads"], m["head_dim"], "fp16", page_bytes=page_bytes,
                           mapping="page")


@functools.lru_cache(maxsize=None)
def _pe_latency(block: str, params, mode: Mode, op: Command = Command.GEMV, **kwargs) -> int:
    """The PE's ``pe_latency`` at ``params``: the component is built for it, not elaborated
    (collected under a filter of Amaranth's warning, as ``registry.Block.validate`` does)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        latency = registry.get(block).elaborate(params).pe_latency(mode, op, **kwargs)
        gc.collect()
    return latency


def model_cycles(run: Run, op) -> int:
    """The cycle model's total for ``op`` on ``run``'s PE (module notes): from the first page
    read to the last output, ``pe_latency`` included."""
    return _predict(run.params.geometry(), functools.partial(_pe_latency, run.block, run.params),
                    op)


def _predict(geometry, pe_latency, op) -> int:
    """:func:`model_cycles` on a plane ``geometry`` and a PE whose ``pe_latency`` is given."""
    m = op.meta
    if _is_gemv(op):
        return golden.gemv_timing(geometry, "w4a16", m["rows"], m["cols"],
                                  group_size=m["group_size"],
                                  pe_latency=pe_latency(Mode.W4A16)).total
    kind = op.name.split(".")[0]
    timing = golden.attention_timing(geometry, kv_layout(op, geometry.page_bytes), m["tokens"],
                                     op=kind, group=m["query_heads"], layer=0, head=m["group"])
    latency = pe_latency(Mode.FP16, Command[kind.upper()], query_heads=m["query_heads"],
                         head_dim=m["head_dim"],
                         last_page=(int(timing.transfer[-1]), int(timing.compute[-1])))
    return timing.total + latency


def _issue(tb: InflashTB, op) -> None:
    """Program ``op``'s pages from page 0 and send its command and ``x``."""
    m = op.meta
    if _is_gemv(op):
        w = golden.Weights("w4a16", op.inputs["codes"], op.inputs["scales"],
                           op.inputs["offsets"], m["group_size"])
        tb.gemv("w4a16", m["rows"], m["cols"], page=0, weights=w, x=op.inputs["x"])
        return
    kind = op.name.split(".")[0]
    layout = kv_layout(op, tb.cfg.page_bytes)
    tb.attention(kind, "fp16", m["query_heads"], m["tokens"], layers=1,
                 kv_heads=layout.kv_heads, head_dim=layout.head_dim, layer=0, head=m["group"],
                 page=0, keys=op.inputs["keys"][:, None], values=op.inputs["values"][:, None],
                 a=op.inputs["q" if kind == "logit" else "p"])


def _outputs(op, words: list[dict]) -> dict:
    """The RTL's ``y`` words of ``op`` as its expected arrays (GEMV ``y`` by row; Logit's
    token-major scores as ``(G, T)``; Attend's head-major sums as ``(G, d)``)."""
    if any(w["error"] for w in words):
        raise AssertionError(f"{op.name}: the PE refused the command ({op.shape})")
    y = np.array([w["value"] for w in words], np.uint32)
    m = op.meta
    if _is_gemv(op):
        return {"y": y}
    if op.name.startswith("logit"):
        return {"scores": y.reshape(m["tokens"], m["query_heads"]).T.copy()}
    return {"o": y.reshape(m["query_heads"], m["head_dim"])}


async def _run(tb: InflashTB, op, seen: list) -> tuple[dict, int]:
    """Do ``op`` alone (the PE idle before and after); its outputs and its cycles from the
    first page read taken to the last ``y``, both included."""
    first_out, first_read = len(seen), len(tb.plane.read_start)
    _issue(tb, op)
    await tb.drain()
    got = seen[first_out:]
    return _outputs(op, [item for _, item in got]), got[-1][0] - tb.plane.read_start[
        first_read] + 1


def _stimulus(tb: InflashTB, idle: dict, backpressure: float, gaps: float) -> tuple:
    """Set the idle probability of each input driver, the back-pressure on ``y`` and the page
    gaps of the plane; return the previous ones (the same three)."""
    before = ({p: d.idle for p, d in tb.drivers.items()}, tb.sinks["y"].backpressure,
              tb.plane.gaps)
    for port, driver in tb.drivers.items():
        driver.idle = idle[port]
    tb.sinks["y"].backpressure, tb.plane.gaps = backpressure, gaps
    return before


@cocotb.test()
async def realdata(dut):
    """The case's ops at full rate (cycles), then those of at most :data:`STALLED_CYCLES`
    under the testbench's random stimulus; every result checked by the PE's scoreboard against
    golden.inflash, both passes' outputs equal (module notes)."""
    tb = InflashTB(dut)
    random = _stimulus(tb, dict.fromkeys(tb.drivers, 0.0), 0.0, 0.0)
    await tb.reset()
    await ClockCycles(tb.clk, 2)
    seen = tb.record("y")
    ops = case_ops()
    results, cycles = {}, {}
    for op in ops:
        results[op.name], cycles[op.name] = await _run(tb, op, seen)
        tb.log.info("%s (%s): %d cycles at full rate", op.name, op.shape, cycles[op.name])
    _stimulus(tb, *random)
    for op in ops if stalled_pass() else []:
        if _predict(tb.geometry, tb.component.pe_latency, op) > STALLED_CYCLES:
            continue
        outputs, stalled = await _run(tb, op, seen)
        tb.log.info("%s: %d cycles under random stimulus", op.name, stalled)
        for name, arr in outputs.items():
            assert np.array_equal(arr, results[op.name][name]), \
                f"{op.name}: {name} differs between the full-rate and the stalled pass"
    tb.check_block_reads()
    for op in ops:
        write_result(op.name, results[op.name], cycles[op.name])
