"""Design-space model of KVNAND: decode latency of the discrete and compact variants and the two
baselines against context length, with out-of-memory marking and the best G1/G2 die split.

Source: "KVNAND: Efficient On-Device Large Language Model Inference Using DRAM-Free In-Flash
Computing" (paper 003), Sec. IV-A to IV-D (architecture, dataflow, head-group pipeline, KV
mapping), Sec. V-A (baselines, Table I) and Sec. V-B (Figs. 12 to 15). docs/reproduction.md has
the equations and the comparison; this package is the model.

What each design does per decoded token (all memory-bound GEMVs on the in-flash PEs of
``golden.inflash``; the NPU does softmax and the vector operations):

``base1`` (Base-1, weights-only in-flash computing with DRAM for KV)
    Per channel one IFC die holding weights and one LPDDR5X chip holding the KV cache (Lincoln
    scaled to 8 channels). Weight GEMVs on the IFC dies; Logit and Attend on the NPU, reading the
    KV cache from DRAM. OOM when the KV cache exceeds the DRAM.
``base2`` (Base-2, naive KV in flash)
    Base-1 with each DRAM replaced by a plain NAND die (no PE). The KV cache is written in
    generation order (the naive mapping), and the NPU reads it over the ONFI channels.
``compact`` (KVNAND-C-n)
    Weights and KV cache share all ``n`` IFC dies; every GEMV (QKV, Logit, Attend, O, FFN, LM
    head) runs on all planes, one after the other (no overlap: both contend for the same reads).
``discrete`` (KVNAND-D-(G1+G2))
    G1 dies hold the weights and run the weight GEMVs, G2 dies hold the KV cache and run Logit and
    Attend. The head-group (HG) pipeline overlaps QKV generation of one batch of head groups on G1
    with the attention of the previous batch on G2 (Fig. 10(a)).

The per-plane costs are the PE's own: :func:`golden.inflash.gemv_timing` for every weight GEMV
(the page pipeline whose period the RTL PE meets cycle for cycle) and
:func:`golden.inflash.attention_timing` for Logit and Attend on KV pages, with
:func:`golden.inflash.page_pipeline` to chain the pages one plane holds. Channel transfers,
DRAM reads and NPU work are bandwidth and throughput terms with the Table I figures.

The package holds :mod:`sim.kvnand.system` (Table I and the model shapes),
:mod:`sim.kvnand.decode` (capacity, per-plane costs, decode latency, sweep points) and
:mod:`sim.kvnand.report` (``memwall reproduce kvnand``).
"""

from __future__ import annotations

from .system import DESIGNS, Flash, NPU, System, Model, LLAMA2_7B, LLAMA31_8B, LLAMA31_70B, MODELS
from .decode import (Latency, Point, Outcome, design_label, footprint, decode_latency, best_split,
                     evaluate)
from .report import (PAPER_GEOMEAN, PAPER_C_OVER_BASE1_128, PAPER_C_OVER_D_128,
                     PAPER_D_OVER_BASE2_100K, PAPER_MAX_SPEEDUP_10K, PAPER_TPS_8B_100K,
                     PAPER_BEST_SPLIT_8B_1K, PAPER_HG_RATIO_10K, PAPER_FIG15_BEST_G2_100K,
                     PAPER_FIG15_CROSSOVER, PAPER_PAGE_PERIOD_US, PAPER_DIE_GBIT, reproduce)

__all__ = [
    "DESIGNS", "Flash", "NPU", "System", "Model", "LLAMA2_7B", "LLAMA31_8B", "LLAMA31_70B",
    "MODELS", "Latency", "Point", "Outcome", "design_label", "footprint", "decode_latency",
    "best_split", "evaluate", "PAPER_GEOMEAN", "PAPER_C_OVER_BASE1_128", "PAPER_C_OVER_D_128",
    "PAPER_D_OVER_BASE2_100K", "PAPER_MAX_SPEEDUP_10K", "PAPER_TPS_8B_100K",
    "PAPER_BEST_SPLIT_8B_1K", "PAPER_HG_RATIO_10K", "PAPER_FIG15_BEST_G2_100K",
    "PAPER_FIG15_CROSSOVER", "PAPER_PAGE_PERIOD_US", "PAPER_DIE_GBIT", "reproduce",
]
