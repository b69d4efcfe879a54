"""rDXE ring: token-level pipelining of many requests over a ring of DXEs, against padded batches.

Source: Tao, Luo et al., "An 11.16 uJ/token Edge SLM Decoder Accelerator with Scalable Ring-based
Configuration for Token-level Pipelining in 16nm FinFET" (rDXE), Sec. II (contribution 1: "77.8%
utilization across diverse workloads") and Sec. III-A (Fig. 3: "Relative to a baseline supporting
8-way and 16-way simultaneous vector dot-product execution, rDXE delivers 32.7% and 52.4% higher
utilization").

The model has three layers:

* **Cost of one layer operation** (:func:`layer_cycles`): the cycles one DXE (eight DXTs, Sec. III)
  spends on one operation of one decoder layer for ``batch`` tokens at a context of ``context``
  tokens. It is the only place the per-operation cost comes from. It evaluates the DXT's cycle
  model in :mod:`golden.rdxe`, which the DXT RTL (``hdl.rdxe.Dxt``) meets cycle for cycle
  (tests/test_rdxe_dxt.py), at the paper's DXT (tests/test_sim_rdxe.py). Mapping onto
  the eight DXTs (Sec. III-C): the attention heads are split by output channel, one KV group per
  DXT, so the fused-RMSNorm QKV GEMV of a head runs on that head's DXT (``ceil(H / 8)`` heads per
  DXT), then its Q.K^T and fused softmax-P.V; the projection and the FFN GEMVs split their outputs
  over all eight DXTs. The operations of a layer run one after another (each needs the whole
  output of the one before); a DXE's time for an operation is its busiest DXT's.
* **The ring** (:func:`simulate_rdxe`): ``stages`` DXEs, each holding a contiguous slice of the
  layers (weights stationary), joined by the 800 Mb/s quad-SPI links (Sec. III-A). The line of
  servers is ``link_in, DXE_0, link, DXE_1, ..., link, DXE_(S-1)``; ``link_in`` carries the new
  prompt tokens and the tokens fed back from the last DXE. Every server holds one token: a link
  transfers the next token while the DXE computes the current one ("the interface transfers only
  one token during the computation of the previous token"), and a finished token waits in its
  server until the next one is free (blocking after service; ``buffer`` adds slots). Tokens never
  overtake. ``slots`` requests are resident (Fig. 3: four users on four DXEs); a finished request
  frees its slot for the next one at once. A prompt token may enter as soon as the first server is
  free (the prompt is processed token by token, Sec. III-A: "seamless dataflow across both prefill
  and generation"); a generation token of request ``r`` only after ``r``'s previous token has left
  the last DXE. Among the ready tokens the first server takes the least recently served request
  (round robin).
* **The baseline** (:func:`simulate_batched`): the same ring, the same costs and the same rules,
  but static padded batching: requests are grouped in arrival order into batches of ``batch``
  (8 or 16); the unit that flows is one step of a whole batch; every request is left-padded to the
  batch's longest prompt and the batch runs to its longest generation (Sec. II: "requests with
  differing sequence lengths must be padded", "overall latency is limited by the request with the
  longest decode sequence"). The ``batch`` tokens of a step share each weight row (the
  ``batch``-way dot product: a GEMV of ``batch`` times the outputs), while attention runs per
  request over the padded context. ``slots`` batches are resident, so the baseline keeps as many
  units in flight as rDXE and its losses are the padding and the batch granularity.

Utilization is measured three ways over the makespan of a closed workload (all requests present at
time 0): **MAC utilization** (useful multiply-accumulates over the ``S * 8 * 16 * 16`` MACs per
cycle), **useful DXE time** (cycles DXEs spend on real tokens over ``S`` times the makespan) and
**busy DXE time** (including padding). With the same useful work in both systems, the ratio of MAC
utilizations is the ratio of throughputs.

``python -m sim.rdxe`` prints the per-layer cycle table of the two model shapes.

The package holds one module per part: :mod:`sim.rdxe.layers` (cost of one layer operation),
:mod:`sim.rdxe.ring` (workloads, the ring, the baseline and sweep points) and
:mod:`sim.rdxe.report` (``memwall reproduce rdxe``); beside them, for the RTL's tests and board
vectors, :mod:`sim.rdxe.reduced` (the reduced Llama layer) and :mod:`sim.rdxe.host` (a DXE's
host: its loads, the engine's contract at its ports, its cycle model).
"""

from __future__ import annotations

from .layers import (OPS, CONTEXT_OPS, DXTS_PER_DXE, Decoder, MT5_SMALL, OPT_350M, MODELS,
                     layer_cycles, layer_macs, token_layer_cycles, cycle_table)
from .ring import (DISTRIBUTIONS, SYSTEMS, Request, Ring, SimResult, Point, split_layers, workload,
                   simulate_rdxe, simulate_batched, run_point)
from .report import PAPER_UTILIZATION, PAPER_GAIN_8WAY, PAPER_GAIN_16WAY, reproduce

__all__ = [
    "OPS", "CONTEXT_OPS", "DXTS_PER_DXE", "DISTRIBUTIONS", "SYSTEMS",
    "PAPER_UTILIZATION", "PAPER_GAIN_8WAY", "PAPER_GAIN_16WAY",
    "Decoder", "MT5_SMALL", "OPT_350M", "MODELS", "Request", "Ring", "SimResult", "Point",
    "layer_cycles", "layer_macs", "token_layer_cycles", "split_layers", "workload",
    "simulate_rdxe", "simulate_batched", "run_point", "cycle_table", "reproduce",
]
