"""UMDAM system model: LPDDR5 bank timing, NPU/PIM bandwidth per address mapping, TTFT and TTLT.

The paper (002, "UMDAM: A Unified Data Layout and DRAM Address Mapping for Heterogeneous NPU-PIM")
evaluates its layout in Ramulator 2 with the LPDDR5 timings of its Table I and an NPU and an
AiM-style PIM on OPT models (Table II). This package rebuilds that evaluation in three layers.

1. **DRAM timing** (:class:`Lpddr5Timing`, :func:`simulate_stream`, :func:`simulate_pim`). Physical
   addresses go through the RTL mapper's golden twin (:func:`golden.umdam.map_addresses`) to
   ``(channel, bank, row)``; a per-request loop then places ACT, PRE and RD/WR commands on an
   open-page controller per channel:

   * row hit: ``RD >= ACT + nRCD``; closed bank: ``ACT >= PRE + nRPpb``, ``ACT >= ACT_prev + nRC``;
     row conflict: ``PRE >= max(ACT + nRAS, RD + nRTP, WR + nCWL + nBL + nWR)`` then ACT;
   * per channel: ``RD >= RD_prev + max(nCCD, nBL)`` (the data bus), ``ACT >= ACT_prev + nRRD``,
     at most four ACTs in ``nFAW``, ``WR >= RD_prev + nCL + nBL + 2 - nCWL``,
     ``RD >= WR_prev + nCWL + nBL + nWTR``;
   * read data occupies ``[RD + nCL, RD + nCL + nBL)``, so one access to a closed bank ends after
     ``nRCD + nCL + nBL`` cycles.

   Column commands leave each channel in request order; a request enters its channel's queue
   (``queue`` entries, Ramulator 2's default of 32) when the request ``queue`` places ahead of it
   has issued its column command, and its PRE/ACT may then go ahead of earlier requests' column
   commands (bank look-ahead). The NPU is one agent issuing its stream in order over all channels
   (a full queue stalls it); the PIM is one agent per bank (16 per channel, AiM-style), each
   streaming its own bank's data, with no shared data bus: the bank's column cadence ``nCCD`` is
   its limit. Refresh and command-bus slots are not modelled.

2. **Layouts per mapping** (:class:`LayoutPoint`, :func:`measure_layout`). For a weight matrix of
   ``R x C`` FP16 values and a mapping ``M`` of :data:`hdl.umdam.NAMED_MAPPINGS`:

   * the *NPU tensor* is the matrix in the NPU's NN tile order (128 x 64 tiles, column-major),
     stored contiguously; the NPU reads it as a sequential burst stream;
   * the *PIM layout* is Algorithm 1's coordinates composed by ``M``
     (:func:`golden.umdam.layout_addresses`): every column in one bank, read by the bank's PIM
     unit top to bottom (:func:`golden.umdam.walk` with ``order="pim"``);
   * the layout is *unified* when the two are the same bytes (only under ``umdam``); otherwise a
     design needs a *re-layout*: a copy engine moves the matrix between them, reading
     ``chunk_bytes`` of the PIM layout and writing them to the NPU tensor, chunk after chunk.

3. **Inference latency** (:class:`OptModel`, :func:`latency`). Prefill runs on the NPU as a
   roofline per operator, ``t = max(FLOPs / 16 TFLOPS, bytes / B_NPU)`` with ``B_NPU`` the
   bandwidth measured in 2.; decode GEMVs (and the first token's LM head) run on the PIM,
   ``t = max(FLOPs / 512 GFLOPS, bytes / (512 GB/s x eta_PIM))`` with ``eta_PIM`` the measured
   per-bank streaming efficiency. The paper's baseline adds one re-layout of all decoder weights
   before the prefill; UMDAM has none.

:func:`reproduce` (``memwall reproduce umdam``) runs the mapping table, the per-model
measurements and the TTFT/TTLT grids, beside the paper's 2.8x-3.0x TTFT and up to 2.18x TTLT.

The package holds one module per layer: :mod:`sim.umdam.dram` (1.), :mod:`sim.umdam.layout`
(2.), :mod:`sim.umdam.models` (3.) and :mod:`sim.umdam.report` (the reproduction).
"""

from __future__ import annotations

from .dram import Lpddr5Timing, AccessStats, bursts, simulate_stream, simulate_pim
from .layout import LayoutPoint, LayoutResult, measure_layout, nn_order
from .models import (OptModel, OPT_125M, OPT_1_3B, OPT_6_7B, OPT_30B, MODELS, NpuSpec, PimSpec, Op,
                     prefill_ops, decode_ops, lm_head_op, op_seconds, Rates, latency, padding_bytes)
from .report import (PAPER_TTFT_SPEEDUP, PAPER_TTLT_SPEEDUP_MAX, PAPER_TTLT_MIN_REDUCTION,
                     PAPER_MEMORY_GBPS, PAPER_PIM_GBPS, reproduce)

__all__ = [
    "Lpddr5Timing", "AccessStats", "bursts", "simulate_stream", "simulate_pim",
    "LayoutPoint", "LayoutResult", "measure_layout", "nn_order",
    "OptModel", "OPT_125M", "OPT_1_3B", "OPT_6_7B", "OPT_30B", "MODELS",
    "NpuSpec", "PimSpec", "Op", "prefill_ops", "decode_ops", "lm_head_op", "op_seconds",
    "Rates", "latency", "padding_bytes",
    "PAPER_TTFT_SPEEDUP", "PAPER_TTLT_SPEEDUP_MAX", "PAPER_TTLT_MIN_REDUCTION",
    "PAPER_MEMORY_GBPS", "PAPER_PIM_GBPS", "reproduce",
]
