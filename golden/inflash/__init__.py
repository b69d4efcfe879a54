"""Bit-exact, timing and float64 models of the KVNAND in-flash GEMV processing element (issue 6):
the flash plane's page pipeline, the weight-to-page layout, GEMV in four precision modes, the
page-level and naive KV-cache mappings, Logit and Attend on KV pages, and read-disturb counters.

Source: "KVNAND: Efficient On-Device Large Language Model Inference Using DRAM-Free In-Flash
Computing", Sec. IV-A to IV-D and Table I. docs/inflash_models.md is the contract of this layer:
the byte layouts, the operation orders, the cycle formula with its derivation, the exactness notes
and the error bounds with their measured worst cases.

Formats. Floats travel as bit patterns (``np.uint16`` fp16/bf16, ``np.uint32`` fp32); every float
operation is a call to a shared golden twin (:mod:`golden.arith`): ``fmul``, ``fadd``,
``fconvert``, ``int_to_float``, with :func:`golden.arith.idot.pairwise_reduce` as the only tree
order and :func:`golden.arith.idot.dot` for exact integer dot products. Round to nearest even,
flush-to-zero, canonical NaN.

Modes (``W`` is ``rows x cols``, ``y = W x``):

``fp16``, ``bf16``
    ``y[r] = tree(fmul(W[r, k], x[k]) for k in 0..cols-1)``: products 16 x 16 -> fp32 (exact
    unless a bf16 product leaves the fp32 normal range), summed by ``fadd`` (fp32) in the pairwise
    tree order (``(p0+p1), (p2+p3), ...``, an odd last value passed to the next level). Output:
    fp32 codes, not rounded further.
``w8a8``
    ``y[r] = sum(W[r, k] * x[k])`` in int8 x int8, exact (any order); ``cols <= 2**16`` keeps every
    sum inside int32. Output: raw int32 (no requantization; the consumer is the NPU).
``w4a16``
    Unsigned int4 codes ``q`` (0..15), per (row, group of ``g`` columns) an fp16 scale ``s`` and
    offset ``o``, the weight being ``s * q + o``; fp16 activations. Order (``G = cols / g``
    groups)::

        D[r, j] = tree(fmul(int_to_float(q[r, k]), x[k]) for k in group j)   (fp16 x fp16 -> fp32)
        X[j]    = tree(fconvert(x[k], fp16, fp32) for k in group j)        (once per GEMV)
        t[r, j] = fadd(fmul(s[r, j], D[r, j]), fmul(o[r, j], X[j]))       (fp16 x fp32 -> fp32)
        y[r]    = tree(t[r, j] for j in 0..G-1)

    which folds the offset as ``o * sum(x)`` so that the weight lanes are the same fp16 lanes as
    the ``fp16`` mode. Output: fp32 codes.

Every result is independent of the FMAC count ``F`` (a power of two from 1 to 16): an ``F``-lane
tree per beat of ``F`` elements, the last beat of a row padded with ``-0`` products, followed by
a pairwise tree over the beat sums is the same tree (docs, section 5).

Layout. A matrix is serialized row-major into a byte stream (fp16/bf16: two bytes per element,
little-endian; w8a8: one byte; w4a16: one record per (row, group): scale, offset (two bytes each,
little-endian), then ``g / 2`` bytes of codes, element ``2i`` in the low nibble) and cut into
consecutive pages; rows and records may straddle pages; the unused tail of the last page is
``0xFF`` (the erased state).

KV cache. An entry is one token's key or value vector of one (layer, KV head): ``d`` elements,
``entry_bytes = d * bytes per element``; a page holds ``T_p = page_bytes // entry_bytes`` entries.
Generation order of entries is token, layer, K before V, head. The naive mapping writes entries
in that order, ``T_p`` per page; the page-level mapping gives each (layer, K|V, head) its own pages
of ``T_p`` consecutive tokens. Logit is ``q . k_t`` (the same pairwise tree over ``d``), Attend is
``sum_t p_t v_t`` accumulated sequentially in token order from ``-0``.

Timing. Two registers (data, cache) pipeline the array reads (``tR``) with the page stream into
the PE (transfer at ``transfer_bytes`` per cycle, compute at ``F`` elements per cycle):
page ``k`` enters the cache register at ``c_k = tR + sum_{i<k} max(tR, P_i)`` with
``P_i = max(transfer_i, compute_i)``, and the GEMV ends at ``c_{n-1} + P_{n-1} + pe_latency``.

References: :func:`gemv_reference`, :func:`logit_reference`, :func:`attend_reference` are float64
(or exact integer) sums written independently; :func:`gemv_bound`, :func:`logit_bound`,
:func:`attend_bound` state how far the bit-exact results may be from them; ``python -m
golden.inflash`` measures the worst cases.

The package holds one job per module: :mod:`~golden.inflash.params` (the modes, formats, limits
and argument checks), :mod:`~golden.inflash.weights` (weight matrices and their page layout),
:mod:`~golden.inflash.kv` (the KV-cache mappings, page images and read-disturb counters),
:mod:`~golden.inflash.model` (the bit-exact GEMV, Logit and Attend),
:mod:`~golden.inflash.reference` (the float64 references and error bounds),
:mod:`~golden.inflash.cycles` (the page pipeline and schedules) and
:mod:`~golden.inflash.survey` (the measurement). This module re-exports their public names.
"""

from hdl.inflash.spec import (FlashGeometry, MAX_COLS, MAX_FMACS, MAX_GROUP, MAX_ROWS, MIN_GROUP,
                              SCALE_BYTES, busy_cycles)

from .batch import W4A16Batch
from .cycles import PageTiming, attention_timing, beats_per_page, gemv_timing, page_pipeline
from .kv import (KVLayout, KVWrite, KV_RECORD, block_reads, kv_address, kv_entries, kv_page_count,
                 kv_page_sequence, kv_pages, kv_pages_read, kv_read, kv_table, kv_write)
from .model import attend, attend_pages, gemv, group_sums, logit, logit_pages
from .params import ACC_LOOP, ERASED, K, KV_FORMATS, MAPPINGS, MAX_TOKENS, MODES, V
from .reference import (attend_bound, attend_reference, gemv_bound, gemv_reference, logit_bound,
                        logit_reference)
from .weights import Weights, page_count, stream_bytes, weight_pages, weights_from_pages

__all__ = [
    "MODES", "KV_FORMATS", "MAPPINGS", "K", "V", "MAX_ROWS", "MAX_COLS", "MAX_FMACS",
    "MAX_TOKENS", "MIN_GROUP", "MAX_GROUP", "SCALE_BYTES", "ERASED", "ACC_LOOP",
    "busy_cycles", "FlashGeometry", "Weights", "stream_bytes", "page_count", "weight_pages",
    "weights_from_pages", "group_sums", "gemv", "W4A16Batch", "gemv_reference", "gemv_bound",
    "PageTiming", "page_pipeline", "beats_per_page", "gemv_timing", "KVLayout", "kv_address",
    "kv_table", "kv_page_count", "kv_page_sequence", "kv_pages_read", "kv_pages", "kv_read",
    "kv_entries", "KV_RECORD", "KVWrite", "kv_write",
    "logit", "attend", "logit_pages", "attend_pages", "logit_reference", "attend_reference",
    "logit_bound", "attend_bound", "attention_timing", "block_reads",
]
