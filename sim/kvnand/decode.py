"""Price one decoded token on each design: capacity, per-plane costs and decode latency.

The footprint and out-of-memory check (:func:`footprint`), the PE's page pipeline per plane,
transfers and GEMVs on a die group, the decode latency of the four designs
(:func:`decode_latency`), the best G1/G2 split (:func:`best_split`) and one sweep point
(:class:`Point`, :func:`evaluate`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from golden.inflash import (FlashGeometry, KVLayout, PageTiming, attention_timing, gemv_timing,
                            kv_address, kv_page_count, page_pipeline)
from hdl.validate import integer

from .system import DESIGNS, Model, System, _GIBIT, _choice

__all__ = [
    "Latency", "Point", "Outcome", "design_label", "footprint", "decode_latency", "best_split",
    "evaluate",
]


#: Bytes of one PE output word (fp32 code or int32, ``golden.inflash.y_layout``).
_OUT_BYTES = 4
#: NPU operations per softmax score (max, subtract, exp, sum, scale) and per element of the
#: per-layer vector work (norms, RoPE, SiLU, residuals): order-of-magnitude counts; at 32 TOPS
#: they are below a microsecond per layer.
_SOFTMAX_OPS = 5
_VECTOR_OPS = 8


# --- results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """Decode latency of one token of one design at one context length.

    ``seconds`` is ``nan`` when the design is out of memory (``oom``): ``need`` bytes do not fit
    in ``capacity`` bytes of the memory named by ``memory``. ``parts`` (seconds) split the token:
    ``weights`` (weight GEMVs with their transfers, the HG pipeline's QKV stage included in
    KVNAND-D), ``attention`` (what attention adds to the token: Logit, softmax, Attend and their
    transfers; in KVNAND-D only the part the HG pipeline does not hide), ``kv_write`` (program and
    transfer of new KV pages not hidden behind idle dies), ``other`` (embedding read, LM head
    logits, NPU vector work). ``hg_stages`` is the HG pipeline depth used (KVNAND-D).
    """

    design: str
    context: int
    seconds: float
    oom: bool
    memory: str
    need: int
    capacity: int
    parts: tuple[tuple[str, float], ...] = ()
    hg_stages: int = 0

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.seconds if not self.oom else math.nan


def design_label(system: System, design: str, g1: int | None = None) -> str:
    """The paper's name of a design: ``Base-1``, ``Base-2``, ``KVNAND-C-16``,
    ``KVNAND-D-(12+4)``."""
    design = _choice(design, "Design", DESIGNS)
    if design == "base1":
        return "Base-1"
    if design == "base2":
        return "Base-2"
    if design == "compact":
        return f"KVNAND-C-{system.dies}"
    g1 = _split(system, g1)
    return f"KVNAND-D-({g1}+{system.dies - g1})"


def _split(system: System, g1) -> int:
    if system.dies < 2:
        raise ValueError(f"KVNAND-D needs at least 2 dies, not {system.dies}")
    return integer(g1, "G1 die count g1", 1, system.dies - 1)


def _context(context) -> int:
    return integer(context, "Context length", 1, 1 << 24)


def _check(system, model, design, mapping) -> None:
    if not isinstance(system, System):
        raise TypeError(f"System must be a System, not {type(system).__name__}")
    if not isinstance(model, Model):
        raise TypeError(f"Model must be a Model, not {type(model).__name__}")
    design = _choice(design, "Design", DESIGNS)
    _choice(mapping, "KV mapping", ("page", "naive"))
    if design in ("base1", "base2") and system.dies_per_channel < 2:
        raise ValueError(f"The baselines need at least 2 dies per channel (one IFC die and one "
                         f"DRAM or plain NAND die), not {system.dies_per_channel}")


# --- capacity -------------------------------------------------------------------------------------


def footprint(system: System, model: Model, context: int, design: str, *, g1: int | None = None,
              mapping: str = "page") -> tuple[bool, str, int, int]:
    """Check that a design holds the weights and the KV cache of ``context`` tokens.

    Returns ``(fits, memory, need, capacity)`` for the tightest memory: the weights must fit in
    the weight dies, and the KV cache (flash: whole pages, ``kv_page_count * page_bytes``;
    DRAM: ``context * kv_token_bytes``) in its memory:

    - ``base1``: weights in ``channels * (dies_per_channel - 1)`` IFC dies, KV in ``channels``
      DRAM chips;
    - ``base2``: the same weight dies, KV (naive mapping) in ``channels`` plain NAND dies;
    - ``compact``: weights and KV together in all ``dies`` IFC dies;
    - ``discrete``: weights in ``g1`` dies, KV in ``dies - g1`` dies (Sec. V-B: "the combined size
      of weights and KV cache must not exceed the available flash capacity", per group).

    KVNAND pages hold ``T_w`` tokens of one stream (:func:`_fill`), so the KV cache takes
    ``ceil(context / T_w) * S`` pages.
    """
    _check(system, model, design, mapping)
    t = _context(context)
    fl = system.flash
    weights = model.weight_bytes(system.mode)
    kv_fmt = system.kv_format
    if design == "base1":
        checks = [("weight dies", weights, _baseline_dies(system) * fl.die_bytes),
                  ("DRAM", t * model.kv_token_bytes(kv_fmt),
                   int(system.channels * system.npu.dram_gbit * _GIBIT) // 8)]
    else:
        layout = model.kv_layout(kv_fmt, fl.geometry.page_bytes,
                                 "naive" if design == "base2" else mapping)
        filled = _fill(system, model, layout, _kv_buffer(system, design))[1]
        if filled == layout.tokens_per_page:
            kv = kv_page_count(layout, t) * fl.geometry.page_bytes
        else:                       # pages written with fewer tokens: more of them
            kv = -(-t // filled) * layout.entries_per_token * fl.geometry.page_bytes
        if design == "base2":
            checks = [("weight dies", weights, _baseline_dies(system) * fl.die_bytes),
                      ("plain NAND dies", kv, system.channels * fl.plain_die_bytes)]
        elif design == "compact":
            checks = [("IFC dies", weights + kv, system.dies * fl.die_bytes)]
        else:
            g1 = _split(system, g1)
            checks = [("G1 dies", weights, g1 * fl.die_bytes),
                      ("G2 dies", kv, (system.dies - g1) * fl.die_bytes)]
    memory, need, have = max(checks, key=lambda c: c[1] / c[2])
    return need <= have, memory, need, have


def _baseline_dies(system: System) -> int:
    return system.channels * (system.dies_per_channel - 1)


def _kv_buffer(system: System, design: str) -> int:
    """KV buffer bytes that gather new entries before they are programmed: KVNAND-C's per-plane
    buffers over all planes, KVNAND-D's SoC buffer; the baselines' naive writer needs a page."""
    if design == "compact":
        return system.dies * system.flash.planes * system.flash.plane_kv_buffer_bytes
    if design == "discrete":
        return system.npu.kv_buffer_bytes
    return system.flash.geometry.page_bytes


def _fill(system: System, model: Model, layout: KVLayout, buffer_bytes: int) -> tuple[int, int]:
    """Return ``(f, T_w)``: tokens gathered per flush and tokens per written page.

    Page-level mapping: the buffer holds ``floor(buffer / token bytes)`` tokens of every stream,
    so ``f = min(T_p, max(1, that))``; each flush programs one (partial) page per stream, and a
    page takes at most ``partial_programs`` flushes: ``T_w = min(T_p, f * partial_programs)``.
    The naive mapping fills whole pages in generation order from a one-page buffer:
    ``f = T_w = T_p``.
    """
    tp = layout.tokens_per_page
    if layout.mapping == "naive":
        return tp, tp
    f = min(tp, max(1, buffer_bytes // model.kv_token_bytes(layout.kv_format)))
    return f, min(tp, f * system.partial_programs)


# --- per-plane costs (the PE's page pipeline) -----------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _gemv_plane(geometry: FlashGeometry, mode: str, rows: int, cols: int,
                planes: int) -> tuple[float, int]:
    """Seconds of one GEMV split over ``planes`` planes, and the column parts per row.

    Rows are dealt to planes first (Lincoln's row distribution, each plane a GEMV of
    ``ceil(rows / a)`` rows, ``a = min(rows, planes)``); planes left over split the columns
    (tensor parallelism, ``c = planes // a`` parts, partial sums added on the NPU). The busiest
    plane's :func:`golden.inflash.gemv_timing` total is the GEMV's time.
    """
    a = min(rows, planes)
    c = max(1, planes // a)
    unit = 128 if mode == "w4a16" else 1          # w4a16 splits on whole groups of 128
    c = min(c, max(1, cols // unit))
    cols_pp = -(-cols // (c * unit)) * unit
    c = -(-cols // cols_pp)
    timing = gemv_timing(geometry, mode, -(-rows // a), cols_pp)
    return timing.total / (geometry.clk_mhz * 1e6), c


@functools.lru_cache(maxsize=1024)
def _head_timing(geometry: FlashGeometry, layout: KVLayout, context: int, op: str,
                 group: int, filled: int) -> PageTiming:
    """Logit (K pages) or Attend (V pages) of one head group over all ``context`` tokens, its
    pages holding ``filled`` tokens each (``T_p``: :func:`golden.inflash.attention_timing` as
    is). With fewer, the pages carry ``filled`` entries at the per-entry transfer and compute of
    ``attention_timing``'s full page (``ceil(n entry_bytes / W)``, ``n`` times its cycles per
    token) through the same :func:`golden.inflash.page_pipeline`."""
    if filled == layout.tokens_per_page or layout.mapping == "naive":
        return attention_timing(geometry, layout, context, op=op, group=group)
    page = attention_timing(geometry, layout, layout.tokens_per_page, op=op, group=group)
    per_token = int(page.compute[0]) // layout.tokens_per_page
    n = -(-context // filled)
    counts = np.full(n, filled, dtype=np.int64)
    counts[-1] = context - (n - 1) * filled
    transfer = -(-counts * layout.entry_bytes // geometry.transfer_bytes)
    return page_pipeline(geometry.tR_cycles, transfer, counts * per_token)


def _attention_plane(geometry: FlashGeometry, layout: KVLayout, context: int, op: str,
                     group: int, heads: int, planes: int, filled: int) -> float:
    """Seconds of Logit or Attend of ``heads`` head groups spread over ``planes`` planes.

    A head group's K (V) pages are dealt round-robin to ``planes // heads`` planes, so the
    busiest plane streams the first ``ceil(n / s)`` pages of the group's schedule; with more head
    groups than planes a plane streams ``ceil(heads / planes)`` groups' pages back to back.
    """
    head = _head_timing(geometry, layout, context, op, group, filled)
    if heads >= planes:
        k = -(-heads // planes)
        transfer, compute = np.tile(head.transfer, k), np.tile(head.compute, k)
    else:
        share = -(-head.pages // (planes // heads))
        transfer, compute = head.transfer[:share], head.compute[:share]
    return page_pipeline(geometry.tR_cycles, transfer, compute).total / (geometry.clk_mhz * 1e6)


# --- transfers and GEMVs on a die group -----------------------------------------------------------


@dataclass(frozen=True)
class _Group:
    """A set of IFC dies used together: its planes, its geometry and its channels."""

    dies: int
    geometry: FlashGeometry
    planes: int
    channels: int          # channels the dies sit on
    per_channel: int       # dies on the busiest of them
    channel_gbs: float

    @classmethod
    def of(cls, system: System, dies: int, *, fmacs: int | None = None,
           per_channel: int | None = None) -> "_Group":
        """``dies`` IFC dies packed ``per_channel`` (default: ``dies_per_channel``) to a
        channel, with ``fmacs`` FMACs per plane (default: the flash geometry's)."""
        geo = system.flash.geometry
        if fmacs is not None:
            geo = replace(geo, fmacs=fmacs)
        channels = min(system.channels, -(-dies // (per_channel or system.dies_per_channel)))
        return cls(dies, geo, dies * system.flash.planes, channels, -(-dies // channels),
                   system.flash.channel_gbs)

    def spread(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` spread evenly over the group's channels."""
        return nbytes / (self.channels * self.channel_gbs * 1e9)

    def broadcast(self, nbytes: float) -> float:
        """Seconds to send ``nbytes`` to every die (dies of one channel take turns)."""
        return nbytes * self.per_channel / (self.channel_gbs * 1e9)


def _gemv(system: System, group: _Group, rows: int, cols: int, *, x_in: bool = True) -> float:
    """Seconds of a GEMV on a die group: input broadcast, the planes, outputs to the NPU.

    The input streams in during the first array read (inflash_models.md section 6: ``x`` has
    ``tR`` to arrive), so only its excess over ``tR`` counts; the outputs (one fp32 word per row
    and column part) leave over the group's channels afterwards.
    """
    plane, parts = _gemv_plane(group.geometry, system.mode, rows, cols, group.planes)
    t_r = system.flash.seconds(group.geometry.tR_cycles)
    x = group.broadcast(cols * system.act_bytes) if x_in else 0.0
    return max(0.0, x - t_r) + plane + group.spread(rows * parts * _OUT_BYTES)


def _npu(system: System, ops: float) -> float:
    return ops / (system.npu.tops * 1e12)


def _attention_ifc(system: System, model: Model, group: _Group, layout: KVLayout, t: int,
                   heads: int, filled: int) -> float:
    """Seconds of the attention of ``heads`` head groups on a die group holding their KV.

    ``q`` (``G`` heads per group) goes to every die; Logit on the K pages, the scores (fp32) out
    to the NPU while the planes compute; softmax on the NPU; the probabilities (2 bytes) back to
    the planes holding the tokens while Attend streams the V pages; each die adds its planes'
    partial outputs in its global buffer and sends ``G * head_dim`` fp32 words for each head
    group it holds a part of.
    """
    g, d = model.group, model.head_dim
    geo = group.geometry
    q_in = group.broadcast(heads * g * d * system.act_bytes)
    logit = _attention_plane(geo, layout, t, "logit", g, heads, group.planes, filled)
    attend = _attention_plane(geo, layout, t, "attend", g, heads, group.planes, filled)
    scores = heads * g * t
    per_die = group.planes // group.dies
    spans = max(1, min(group.dies, -(-(group.planes // heads) // per_die)))  # dies per group
    out = group.spread(heads * spans * g * d * _OUT_BYTES)
    return (q_in + max(logit, group.spread(scores * _OUT_BYTES))
            + _npu(system, _SOFTMAX_OPS * scores)
            + max(attend, group.spread(scores * 2)) + out)


# --- decode latency -------------------------------------------------------------------------------


def decode_latency(system: System, model: Model, context: int, design: str, *,
                   g1: int | None = None, hg_stages: int | None = None,
                   mapping: str = "page") -> Latency:
    """Return the decode latency of one token at ``context`` tokens of KV cache.

    Parameters
    ----------
    system : System
    model : Model
    context : int
        Tokens in the KV cache (1 to 2**24); all are in flash (or DRAM), as in the paper.
    design : str
        ``base1``, ``base2``, ``compact`` or ``discrete`` (:data:`DESIGNS`).
    g1 : int
        ``discrete`` only: dies in G1 (1 to ``dies - 1``); G2 has the rest.
    hg_stages : int or None
        ``discrete`` only: HG pipeline depth, a divisor of ``kv_heads`` (1 turns the HG
        parallelism off: all QKV, then all attention); ``None`` takes the fastest divisor.
    mapping : str
        KV mapping of the KVNAND designs: ``page`` (the paper's page-level mapping) or ``naive``
        (generation order, the ablation of Fig. 14). Base-2 is always naive.

    Returns
    -------
    Latency
        ``seconds`` is ``nan`` and ``oom`` set when the design cannot hold the weights and the KV
        cache (:func:`footprint`).

    Raises
    ------
    TypeError, ValueError
        A bad system, model, design, context, split, stage count or mapping.
    """
    _check(system, model, design, mapping)
    t = _context(context)
    if design == "discrete":
        g1 = _split(system, g1)
    elif g1 is not None:
        raise ValueError(f"G1 die count g1 applies to the discrete design only, not {design}")
    if hg_stages is not None:
        if design != "discrete":
            raise ValueError(f"HG pipeline stages apply to the discrete design only, "
                             f"not {design}")
        integer(hg_stages, "HG pipeline stages", 1, model.kv_heads)
        if model.kv_heads % hg_stages:
            raise ValueError(f"HG pipeline stages must divide the KV head count "
                             f"{model.kv_heads}, not {hg_stages}")
    label = design_label(system, design, g1)
    fits, memory, need, have = footprint(system, model, t, design, g1=g1, mapping=mapping)
    if not fits:
        return Latency(label, t, math.nan, True, memory, need, have)
    if design in ("base1", "base2"):
        parts, stages = _baseline(system, model, t, design), 0
    elif design == "compact":
        parts, stages = _compact(system, model, t, mapping), 0
    else:
        parts, stages = _discrete(system, model, t, g1, hg_stages, mapping)
    total = sum(parts.values())
    return Latency(label, t, total, False, memory, need, have, tuple(parts.items()), stages)


def _common(system: System, model: Model, weights: _Group) -> tuple[float, float]:
    """Seconds of (O + FFN per layer, LM head + embedding read + per-token NPU work)."""
    gemvs = model.layer_gemvs()
    layer = sum(_gemv(system, weights, *gemvs[k]) for k in ("o", "gate_up", "down"))
    fl = system.flash
    # The next token's embedding: one page read and the row to the NPU.
    embed = fl.seconds(weights.geometry.tR_cycles) + weights.spread(model.d_model * 2)
    head = _gemv(system, weights, model.vocab, model.d_model)
    vector = _npu(system, model.layers * _VECTOR_OPS * (model.d_model + model.ffn)
                  + model.vocab)
    return layer, embed + head + vector


def _baseline(system: System, model: Model, t: int, design: str) -> dict[str, float]:
    """Base-1 / Base-2: weight GEMVs on the IFC dies, attention on the NPU.

    Per layer, with ``b`` KV bytes of one layer's K (or V): Base-1 reads it from the DRAM chips,
    ``b / (channels * dram_gbs)``; Base-2 from the plain NAND dies, the slower of the channels
    (only the needed entries cross them, ``b / (channels * channel_gbs)``) and the planes, each
    reading its share of the naive-mapping pages through the two-register pipeline. Both are
    bounded below by the NPU's ``4 * heads * head_dim * t`` operations.
    """
    fl, npu = system.flash, system.npu
    weights = _Group.of(system, _baseline_dies(system), fmacs=system.baseline_fmacs,
                        per_channel=system.dies_per_channel - 1)
    rest, token = _common(system, model, weights)
    qkv = _gemv(system, weights, *model.layer_gemvs()["qkv"])
    kv_fmt = system.kv_format
    elem = 1 if kv_fmt == "int8" else 2
    b = t * model.kv_heads * model.head_dim * elem
    new = 2 * model.kv_heads * model.head_dim * elem                  # this token's K and V
    flops = _npu(system, 2 * model.heads * model.head_dim * t)        # Logit (Attend the same)
    softmax = _npu(system, _SOFTMAX_OPS * model.heads * t)
    if design == "base1":
        bw = system.channels * npu.dram_gbs * 1e9
        read = max(b / bw, flops)
        return {"weights": model.layers * (qkv + rest),
                "attention": model.layers * (2 * read + softmax),
                "kv_write": model.layers * new / bw, "other": token}
    geo = fl.geometry
    layout = model.kv_layout(kv_fmt, geo.page_bytes, "naive")
    planes = system.channels * fl.planes
    channel = b / (system.channels * fl.channel_gbs * 1e9)
    read = max(_naive_layer_read(geo, layout, t, planes), channel, flops)
    # The new entries go to the plain dies through a one-page buffer, full pages programmed in
    # generation order: token bytes / page pages per token, spread over the plain dies' planes.
    # The plain dies are idle during every weight GEMV, which hides the programming.
    per_token = model.kv_token_bytes(kv_fmt)
    program = per_token / geo.page_bytes / planes * fl.seconds(geo.tP_cycles)
    idle = model.layers * (qkv + rest) + token
    transfer = per_token / (system.channels * fl.channel_gbs * 1e9)
    att = 2 * read + softmax
    return {"weights": model.layers * (qkv + rest), "attention": model.layers * att,
            "kv_write": transfer + max(0.0, program - idle), "other": token}


@functools.lru_cache(maxsize=256)
def _naive_layer_read(geometry: FlashGeometry, layout: KVLayout, t: int, planes: int) -> float:
    """Seconds for the plain dies' planes to read one layer's K pages (all heads, tokens
    ``0 .. t - 1``) under the naive mapping: the distinct pages (:func:`golden.inflash.kv_address`)
    dealt round-robin to the planes, each plane's share through the two-register pipeline (the
    plane streams each page's needed entries out at its transfer width)."""
    heads = np.arange(layout.kv_heads)[:, None]
    page, _ = kv_address(layout, 0, heads, np.arange(t)[None, :], 0)
    pages, per_page = np.unique(page, return_counts=True)
    share = -(-len(pages) // planes)
    used = per_page[:share] * layout.entry_bytes
    transfer = -(-used // geometry.transfer_bytes)
    return page_pipeline(geometry.tR_cycles, transfer, np.zeros_like(transfer)).total \
        / (geometry.clk_mhz * 1e6)


def _compact(system: System, model: Model, t: int, mapping: str) -> dict[str, float]:
    """KVNAND-C: every GEMV on all dies, one after the other.

    Per layer: QKV; K and V (after RoPE on the NPU) back to the planes' KV buffers; attention of
    all head groups; O; FFN. The KV buffers (8 KB per plane) flush to KV blocks of the same plane,
    ``S / f`` programs per token (:func:`_fill`) spread over all planes, each blocking its plane
    for ``tP``: nothing hides it.
    """
    fl = system.flash
    group = _Group.of(system, system.dies)
    rest, token = _common(system, model, group)
    layout = model.kv_layout(system.kv_format, fl.geometry.page_bytes, mapping)
    qkv = _gemv(system, group, *model.layer_gemvs()["qkv"])
    kv_back = group.spread(2 * model.kv_heads * model.head_dim * layout.element_bytes)
    f, filled = _fill(system, model, layout, _kv_buffer(system, "compact"))
    att = _attention_ifc(system, model, group, layout, t, model.kv_heads, filled)
    program = layout.entries_per_token / f / group.planes * fl.seconds(fl.geometry.tP_cycles)
    return {"weights": model.layers * (qkv + rest), "attention": model.layers * (kv_back + att),
            "kv_write": program, "other": token}


def _discrete(system: System, model: Model, t: int, g1: int, hg_stages: int | None,
              mapping: str) -> tuple[dict[str, float], int]:
    """KVNAND-D-(G1+G2): weights on G1, KV and attention on G2, the HG pipeline between them.

    Per layer, with the ``kv_heads`` head groups in ``m`` batches of ``k = kv_heads / m``:
    ``a`` = QKV of one batch on G1 (``k (G + 2) head_dim`` rows; the layer input is broadcast
    once), ``b`` = that batch's ``q`` to G2 and its attention there; two-stage pipeline
    ``a + (m - 1) max(a, b) + b`` (Fig. 10(a)); then O and FFN on G1. New K and V gather in the
    SoC KV buffer (5 MB) and flush to G2 (``S / f`` programs per token) while G2 idles during O, FFN
    and the LM head, so only what exceeds that idle time counts.
    """
    fl = system.flash
    g2 = system.dies - g1
    weights, kv = _Group.of(system, g1), _Group.of(system, g2)
    rest, token = _common(system, model, weights)
    layout = model.kv_layout(system.kv_format, fl.geometry.page_bytes, mapping)
    f, filled = _fill(system, model, layout, _kv_buffer(system, "discrete"))
    rows_per_group = (model.group + 2) * model.head_dim
    x_in = max(0.0, weights.broadcast(model.d_model * system.act_bytes)
               - fl.seconds(weights.geometry.tR_cycles))
    stages = ([hg_stages] if hg_stages is not None
              else [m for m in range(1, model.kv_heads + 1) if model.kv_heads % m == 0])
    best = None
    for m in stages:
        k = model.kv_heads // m
        a = _gemv(system, weights, k * rows_per_group, model.d_model, x_in=False)
        b = _attention_ifc(system, model, kv, layout, t, k, filled)
        layer = x_in + a + (m - 1) * max(a, b) + b
        if best is None or layer < best[0]:
            best = (layer, m, m * a)
    # The layer's QKV on its own (m a) counts as weights; what the pipeline adds, as attention.
    layer, m, qkv = best
    per_token = model.kv_token_bytes(layout.kv_format)
    program = layout.entries_per_token / f / kv.planes * fl.seconds(fl.geometry.tP_cycles)
    idle = model.layers * rest + token
    write = kv.spread(per_token) + max(0.0, program - idle)
    return ({"weights": model.layers * (x_in + qkv + rest),
             "attention": model.layers * (layer - x_in - qkv), "kv_write": write,
             "other": token}, m)


def best_split(system: System, model: Model, context: int, **kwargs) -> Latency | None:
    """The fastest KVNAND-D split at ``context`` (``None`` when every split is out of memory)."""
    found = [decode_latency(system, model, context, "discrete", g1=g1, **kwargs)
             for g1 in range(1, system.dies)]
    found = [r for r in found if not r.oom]
    return min(found, key=lambda r: r.seconds) if found else None


# --- sweep points ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One sweep point: a design (and split) of a system on a model at a context length."""

    system: System
    model: Model
    context: int
    design: str
    g1: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What :func:`evaluate` found: the latency, and the ablations (``None`` when not
    applicable or out of memory): KVNAND-D without HG parallelism (``no_hg``), KVNAND-C with the
    naive KV mapping (``naive``)."""

    point: Point
    latency: Latency
    no_hg: Latency | None = None
    naive: Latency | None = None


def evaluate(point: Point) -> Outcome:
    """Evaluate one :class:`Point` (the function ``ctx.map`` runs on the workers)."""
    if not isinstance(point, Point):
        raise TypeError(f"Point must be a Point, not {type(point).__name__}")
    p = point
    lat = decode_latency(p.system, p.model, p.context, p.design, g1=p.g1)
    no_hg = naive = None
    if not lat.oom and p.design == "discrete":
        no_hg = decode_latency(p.system, p.model, p.context, p.design, g1=p.g1, hg_stages=1)
    if not lat.oom and p.design == "compact":
        naive = decode_latency(p.system, p.model, p.context, p.design, mapping="naive")
        naive = None if naive.oom else naive
    return Outcome(p, lat, no_hg, naive)
