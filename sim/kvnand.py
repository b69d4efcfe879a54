"""Design-space model of KVNAND: decode latency of the discrete and compact variants and the two
baselines against context length, with out-of-memory marking and the best G1/G2 die split.

Source: "KVNAND: Efficient On-Device Large Language Model Inference Using DRAM-Free In-Flash
Computing" (paper 003), Sec. IV-A to IV-D (architecture, dataflow, head-group pipeline, KV
mapping), Sec. V-A (baselines, Table I) and Sec. V-B (Figs. 12 to 15). docs/reproduction.md has
the equations and the comparison; this module is the model.

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
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field, replace

import numpy as np

from golden.inflash import (KV_FORMATS, MODES, FlashGeometry, KVLayout, PageTiming,
                            attention_timing, gemv_timing, kv_address, kv_page_count,
                            page_pipeline, stream_bytes)
from hdl.validate import integer

__all__ = [
    "DESIGNS", "Flash", "NPU", "System", "Model", "LLAMA2_7B", "LLAMA31_8B", "LLAMA31_70B",
    "MODELS", "Latency", "Point", "Outcome", "design_label", "footprint", "decode_latency",
    "best_split", "evaluate", "PAPER_GEOMEAN", "PAPER_C_OVER_BASE1_128", "PAPER_C_OVER_D_128",
    "PAPER_D_OVER_BASE2_100K", "PAPER_MAX_SPEEDUP_10K", "PAPER_TPS_8B_100K",
    "PAPER_BEST_SPLIT_8B_1K", "PAPER_HG_RATIO_10K", "PAPER_FIG15_BEST_G2_100K",
    "PAPER_FIG15_CROSSOVER", "PAPER_PAGE_PERIOD_US", "PAPER_DIE_GBIT", "reproduce",
]

#: Designs of the model: Base-1, Base-2, KVNAND-C and KVNAND-D.
DESIGNS = ("base1", "base2", "compact", "discrete")

# --- the paper's results: only ever compared against, never used by the model ---------------------

#: Abstract and Sec. I: geomean speedup over the DRAM-equipped IFC design (Base-1) at
#: 128/1K/10K-token contexts. Sec. V-B attributes the 128-token figure to KVNAND-C.
PAPER_GEOMEAN = {128: 1.98, 1024: 1.94, 10240: 2.05}
#: Sec. V-B: "At 128 context length, it [KVNAND-C] achieves 1.98 and 1.05 geomean speedup over
#: Base-1 and KVNAND-D across all models".
PAPER_C_OVER_BASE1_128 = 1.98
PAPER_C_OVER_D_128 = 1.05
#: Sec. V-B: KVNAND-D over Base-2 at a 100K-token context (of the five models, ours three).
PAPER_D_OVER_BASE2_100K = {"LLaMA2-7B": 6.8, "LLaMA3.1-8B": 4.0, "LLaMA3.1-70B": 2.5}
#: Sec. VII: "up to 2.3x speedup ... relative to SoTA DRAM-based IFC designs at 10K".
PAPER_MAX_SPEEDUP_10K = 2.3
#: Sec. VII: "an inference throughput of 10 tokens/s on LLaMA3.1-8B" at 100K.
PAPER_TPS_8B_100K = 10.0
#: Sec. V-B: "G1=15, G2=1 for LLaMA3.1-8B, 1K context-length".
PAPER_BEST_SPLIT_8B_1K = (15, 1)
#: Sec. V-B ablation (Fig. 14): HG parallelism brings KVNAND-D's latency at 10K tokens down to
#: as low as 82.4 % of the design without it.
PAPER_HG_RATIO_10K = 0.824
#: Sec. V-B DSE (Fig. 15), 8-die KVNAND, LLaMA3.1-70B W4A16: "the optimal configuration reaching
#: 4 dies in G2 at 100K tokens" and "KVNAND-D gradually outperforms KVNAND-C beyond 2K tokens".
PAPER_FIG15_BEST_G2_100K = 4
PAPER_FIG15_CROSSOVER = 2048
#: Sec. IV-C: a 4 KB page read in tR = 4 us, the PE sized to finish its MACs in the same time.
PAPER_PAGE_PERIOD_US = 4.0
#: Table I: 132.75 Gb per die.
PAPER_DIE_GBIT = 132.75

_GIBIT = 1 << 30                  # memory densities (Gb) are binary: 16 Gb = 2**34 bits
_MIB = 1 << 20
_KIB = 1 << 10
#: Bytes of one PE output word (fp32 code or int32, ``golden.inflash.y_layout``).
_OUT_BYTES = 4
#: NPU operations per softmax score (max, subtract, exp, sum, scale) and per element of the
#: per-layer vector work (norms, RoPE, SiLU, residuals): order-of-magnitude counts; at 32 TOPS
#: they are below a microsecond per layer.
_SOFTMAX_OPS = 5
_VECTOR_OPS = 8


# --- validation -----------------------------------------------------------------------------------


def _positive(value, what: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a positive number of {unit}, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number of {unit}, not {value!r}")
    return float(value)


def _choice(value, what: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(allowed[:-1]) + f" or {allowed[-1]}"
        raise ValueError(f"{what} must be {listed}, not {value!r}")
    return value


# --- the system (Table I) -------------------------------------------------------------------------


@dataclass(frozen=True)
class Flash:
    """The IFC flash dies and their channels (Table I).

    Parameters
    ----------
    geometry : FlashGeometry
        One plane and its PE: 4 KB pages, tR 4 us, tP 75 us, 16 FMACs at 400 MHz, 768 pages per
        block, 177 blocks per plane (:meth:`FlashGeometry.paper`; the transfer width, 4 bytes per
        cycle, is near the 14.6 Gb/s BCH decoder per plane).
    planes : int
        Planes per die (1 to 1024). Table I: 32.
    channel_gbs : float
        ONFI bandwidth of one channel, GB/s. Table I: 4.8 (ONFI 6.0).
    plain_die_gbit : float
        Capacity of Base-2's plain NAND die (no PE), Gb. Table I: 128.
    plane_kv_buffer_bytes : int
        KVNAND-C's KV buffer per plane, bytes (1 to 2**30). Table I: 8 KB.

    Raises
    ------
    TypeError, ValueError
        Naming the parameter, the allowed range and the value given.
    """

    geometry: FlashGeometry = field(default_factory=FlashGeometry.paper)
    planes: int = 32
    channel_gbs: float = 4.8
    plain_die_gbit: float = 128.0
    plane_kv_buffer_bytes: int = 8 * _KIB

    def __post_init__(self):
        if not isinstance(self.geometry, FlashGeometry):
            raise TypeError(f"Plane geometry must be a FlashGeometry, not {self.geometry!r}")
        integer(self.planes, "Planes per die", 1, 1024)
        _positive(self.channel_gbs, "Channel bandwidth channel_gbs", "GB/s")
        _positive(self.plain_die_gbit, "Plain die capacity plain_die_gbit", "Gb")
        integer(self.plane_kv_buffer_bytes, "KV buffer per plane in bytes", 1, 1 << 30)

    @property
    def die_bytes(self) -> int:
        """Data bytes of one IFC die: ``planes * pages_per_block * blocks * page_bytes``."""
        g = self.geometry
        return self.planes * g.pages * g.page_bytes

    @property
    def plain_die_bytes(self) -> int:
        return int(self.plain_die_gbit * _GIBIT) // 8

    def seconds(self, cycles) -> float:
        """Seconds of ``cycles`` PE clock cycles."""
        return float(cycles) / (self.geometry.clk_mhz * 1e6)


@dataclass(frozen=True)
class NPU:
    """The SoC: NPU throughput, KVNAND-D's KV buffer, and Base-1's DRAM (Table I).

    Parameters
    ----------
    tops : float
        NPU throughput, tera-operations per second. Table I: 32 (BF16 tensor core).
    kv_buffer_bytes : int
        KVNAND-D's SoC-side SRAM KV buffer, bytes (1 to 2**40). Table I: 5 MB.
    dram_gbit : float
        Capacity of one LPDDR5X chip, Gb (one per channel in Base-1). Table I: 16.
    dram_gbs : float
        Bandwidth of one DRAM chip, GB/s. Table I: 8.
    """

    tops: float = 32.0
    kv_buffer_bytes: int = 5 * _MIB
    dram_gbit: float = 16.0
    dram_gbs: float = 8.0

    def __post_init__(self):
        _positive(self.tops, "NPU throughput tops", "TOPS")
        integer(self.kv_buffer_bytes, "SoC KV buffer in bytes", 1, 1 << 40)
        _positive(self.dram_gbit, "DRAM chip capacity dram_gbit", "Gb")
        _positive(self.dram_gbs, "DRAM bandwidth dram_gbs", "GB/s")


#: KV element format of each weight precision: W8A8 keeps an 8-bit KV cache, W4A16 a 16-bit one.
_KV_FORMAT = {"fp16": "fp16", "bf16": "bf16", "w8a8": "int8", "w4a16": "fp16"}


@dataclass(frozen=True)
class System:
    """A KVNAND system and its baselines: channels, dies, precision.

    KVNAND has ``channels * dies_per_channel`` IFC dies. The baselines keep the channels and the
    dies per channel but make one die of each channel something else (Sec. V-A): Base-1 a DRAM
    chip, Base-2 a plain NAND die, leaving ``channels * (dies_per_channel - 1)`` IFC dies for the
    weights.

    Parameters
    ----------
    flash : Flash
    npu : NPU
    channels : int
        Flash channels (1 to 64). Paper: 8.
    dies_per_channel : int
        Dies per channel (1 to 16). Paper: 2 (16 IFC dies, KVNAND-C-16); 1 for the 8-die study
        of Fig. 15, which has no baselines.
    mode : str
        Weight precision of the GEMVs: ``fp16`` (the paper's full-precision models), ``bf16``,
        ``w8a8`` (8-bit KV cache) or ``w4a16`` (16-bit KV cache).
    baseline_fmacs : int
        FMACs per plane of the baselines' weight dies (Lincoln, Sec. IV-C: 2 balance a 4 KB fp16
        page in 4 us), a power of two from 1 to 16.
    partial_programs : int
        Programs one KV page may take (partial-page programming, 1 to 16). 1: a page is
        programmed once, so a KV buffer that cannot hold a page of every (layer, K|V, head)
        stream writes pages holding fewer tokens (the "limitation of its smaller KV buffer" of
        KVNAND-C, Sec. V-B); the paper names partial-page updates only as a further option
        (Sec. IV-D).
    """

    flash: Flash = field(default_factory=Flash)
    npu: NPU = field(default_factory=NPU)
    channels: int = 8
    dies_per_channel: int = 2
    mode: str = "fp16"
    baseline_fmacs: int = 2
    partial_programs: int = 1

    def __post_init__(self):
        if not isinstance(self.flash, Flash):
            raise TypeError(f"Flash must be a Flash, not {self.flash!r}")
        if not isinstance(self.npu, NPU):
            raise TypeError(f"NPU must be an NPU, not {self.npu!r}")
        integer(self.channels, "Channel count", 1, 64)
        integer(self.dies_per_channel, "Dies per channel", 1, 16)
        _choice(self.mode, "Precision mode", MODES)
        # The geometry checks its own FMAC count; building one validates this one.
        replace(self.flash.geometry, fmacs=integer(self.baseline_fmacs, "Baseline FMAC count",
                                                    1, 16))
        integer(self.partial_programs, "Partial programs per page", 1, 16)

    @property
    def dies(self) -> int:
        """IFC dies of KVNAND."""
        return self.channels * self.dies_per_channel

    @property
    def kv_format(self) -> str:
        return _KV_FORMAT[self.mode]

    @property
    def act_bytes(self) -> int:
        """Bytes of an activation element sent to the dies: 1 in w8a8, else 2."""
        return 1 if self.mode == "w8a8" else 2


# --- model shapes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """Decoder shapes of an LLM (public config.json figures).

    Parameters
    ----------
    name : str
    layers, d_model, heads, kv_heads, head_dim, ffn, vocab : int
        Decoder layers, hidden size, query heads, KV heads (``heads`` a multiple of it; equal for
        MHA), head dimension, FFN width (gate, up and down projections), vocabulary.
    """

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Model name must be a non-empty string, not {self.name!r}")
        integer(self.layers, "Layer count", 1, 1024)
        integer(self.d_model, "Hidden size d_model", 1, 1 << 16)
        integer(self.heads, "Query head count", 1, 1024)
        integer(self.kv_heads, "KV head count", 1, self.heads)
        if self.heads % self.kv_heads:
            raise ValueError(f"Query head count must be a multiple of the KV head count "
                             f"{self.kv_heads}, not {self.heads}")
        integer(self.head_dim, "Head dimension", 1, 1 << 12)
        integer(self.ffn, "FFN width", 1, 1 << 16)
        integer(self.vocab, "Vocabulary size", 1, 1 << 20)

    @property
    def group(self) -> int:
        """Query heads per KV head ``G`` (1 for MHA)."""
        return self.heads // self.kv_heads

    def layer_gemvs(self) -> dict[str, tuple[int, int]]:
        """``(rows, cols)`` of the GEMVs of one decoder layer, those sharing an input merged:
        QKV, O, gate and up (one GEMV of ``2 ffn`` rows), down."""
        q, kv, d = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.d_model
        return {"qkv": (q + 2 * kv, d), "o": (d, q), "gate_up": (2 * self.ffn, d),
                "down": (d, self.ffn)}

    def params(self) -> int:
        """Parameters: the layers' matrices and norms, untied embedding and LM head, final norm."""
        per_layer = sum(r * c for r, c in self.layer_gemvs().values()) + 2 * self.d_model
        return self.layers * per_layer + 2 * self.vocab * self.d_model + self.d_model

    def weight_bytes(self, mode: str) -> int:
        """Flash bytes of the weights in ``mode`` (:func:`golden.inflash.stream_bytes` per
        matrix; w4a16 includes its scales and offsets); norms are fp16."""
        per_layer = sum(stream_bytes(mode, r, c) for r, c in self.layer_gemvs().values())
        table = stream_bytes(mode, self.vocab, self.d_model)
        return self.layers * (per_layer + 4 * self.d_model) + 2 * table + 2 * self.d_model

    def kv_layout(self, kv_format: str = "fp16", page_bytes: int = 4096,
                  mapping: str = "page") -> KVLayout:
        return KVLayout(self.layers, self.kv_heads, self.head_dim, kv_format, page_bytes, mapping)

    def kv_token_bytes(self, kv_format: str = "fp16") -> int:
        """KV bytes one token adds: ``2 * layers * kv_heads * head_dim * element bytes``."""
        size = 1 if _choice(kv_format, "KV format", KV_FORMATS) == "int8" else 2
        return 2 * self.layers * self.kv_heads * self.head_dim * size


LLAMA2_7B = Model("LLaMA2-7B", layers=32, d_model=4096, heads=32, kv_heads=32, head_dim=128,
                  ffn=11008, vocab=32000)
LLAMA31_8B = Model("LLaMA3.1-8B", layers=32, d_model=4096, heads=32, kv_heads=8, head_dim=128,
                   ffn=14336, vocab=128256)
LLAMA31_70B = Model("LLaMA3.1-70B", layers=80, d_model=8192, heads=64, kv_heads=8, head_dim=128,
                    ffn=28672, vocab=128256)
MODELS = (LLAMA2_7B, LLAMA31_8B, LLAMA31_70B)


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


# --- the reproduction -----------------------------------------------------------------------------


def _k(t: int) -> str:
    return f"{t // 1024}K" if t % 1024 == 0 and t >= 1024 else str(t)


def _geomean(values) -> float:
    values = [v for v in values if math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def _plot(ctx, name: str, draw, *, ncols: int = 1, size=(7.0, 4.2)):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    draw(fig, axes[0])
    fig.tight_layout()
    path = ctx.save_plot(fig, name, dpi=110)
    return path


def _page_period_table(system: System) -> tuple[str, float]:
    """Per-plane page period and time of a full-page stream, per mode and FMAC count."""
    rows, fp16_us = [], math.nan
    for mode in MODES:
        for f in (2, 16):
            geo = replace(system.flash.geometry, fmacs=f)
            t = gemv_timing(geo, mode, 1024, 4096)
            period_us = system.flash.seconds(t.period) * 1e6
            if mode == "fp16" and f == system.flash.geometry.fmacs:
                fp16_us = period_us
            rows.append([mode, f, t.pages, int(t.transfer[0]), int(t.compute[0]), t.period,
                         f"{period_us:.2f}",
                         f"{geo.page_bytes / (system.flash.seconds(t.period) * 1e9):.3f}"])
    from .reproduce import markdown_table
    return markdown_table(["mode", "F", "pages", "transfer (cyc)", "compute (cyc)",
                           "period (cyc)", "period (us)", "GB/s per plane"], rows), fp16_us


class _Sweep:
    """The outcomes of one sweep, indexed by (model, context, design, g1)."""

    def __init__(self, system: System, contexts: tuple[int, ...], found: list[Outcome]):
        self.system, self.contexts = system, contexts
        self.by = {(o.point.model.name, o.point.context, o.point.design, o.point.g1): o
                   for o in found}

    def lat(self, m: Model, t: int, design: str, g1: int | None = None) -> float:
        return self.by[(m.name, t, design, g1)].latency.seconds

    def splits(self, m: Model, t: int) -> list[Outcome]:
        """KVNAND-D outcomes that fit, by G1."""
        return [o for g in range(1, self.system.dies)
                if not (o := self.by[(m.name, t, "discrete", g)]).latency.oom]

    def best_d(self, m: Model, t: int) -> Outcome | None:
        ok = self.splits(m, t)
        return min(ok, key=lambda o: o.latency.seconds) if ok else None

    def best_d_s(self, m: Model, t: int) -> float:
        d = self.best_d(m, t)
        return d.latency.seconds if d else math.nan

    def best(self, m: Model, t: int) -> float:
        """The fastest KVNAND design's latency (``nan`` when all are OOM)."""
        return float(np.nanmin([self.lat(m, t, "compact"), self.best_d_s(m, t), math.inf]))

    def split_text(self, o: Outcome | None) -> str:
        return f"{o.point.g1}+{self.system.dies - o.point.g1}" if o else "OOM"


def _ms(seconds: float) -> str:
    return "OOM" if not math.isfinite(seconds) else f"{1e3 * seconds:.2f}"


def reproduce(ctx) -> "Result":
    """KVNAND (paper 003): decode latency of KVNAND-C, KVNAND-D (every G1/G2 split) and the two
    baselines from 128 to 100K tokens, the best split, the geomean speedups, and the 8-die DSE
    of Fig. 15."""
    from .reproduce import Result

    res = Result("KVNAND: DRAM-free in-flash computing, decode latency against context length")
    system = System()
    if ctx.quick:
        contexts, fig15 = (128, 1024, 10240, 102400), (2048, 102400)
    else:
        contexts = (128, 256, 512, 1024, 2048, 4096, 10240, 20480, 51200, 102400)
        fig15 = (128, 512, 1024, 2048, 4096, 10240, 20480, 51200, 102400)
    points = [Point(system, m, t, d) for m in MODELS for t in contexts
              for d in ("base1", "base2", "compact")]
    points += [Point(system, m, t, "discrete", g1) for m in MODELS for t in contexts
               for g1 in range(1, system.dies)]
    ctx.progress(f"{len(points)} design points, {len(MODELS)} models x {len(contexts)} contexts")
    sw = _Sweep(system, contexts, ctx.map(evaluate, points,
                                          label="KVNAND design space (16 dies)"))
    _sweep_tables(res, sw)
    _speedup_rows(res, sw)
    _system_tables(res, system)
    _sweep_plots(ctx, res, sw)
    _fig15(ctx, res, fig15)
    res.notes += _notes(system)
    return res


def _sweep_tables(res, sw: _Sweep) -> None:
    from .reproduce import markdown_table

    rows = []
    for m in MODELS:
        for t in sw.contexts:
            d = sw.best_d(m, t)
            rows.append([m.name, _k(t), _ms(sw.lat(m, t, "base1")), _ms(sw.lat(m, t, "base2")),
                         _ms(sw.lat(m, t, "compact")),
                         f"{_ms(d.latency.seconds)} ({sw.split_text(d)})" if d else "OOM"])
    res.tables.append((
        "Decode latency per token (ms), 8 channels x 2 dies", "\n".join([
            "Base-1: 8 IFC dies (F = 2) + 8 x 16 Gb LPDDR5X at 8 GB/s; Base-2: 8 IFC dies + 8 "
            "plain 128 Gb NAND dies, naive KV mapping; KVNAND-C-16 and KVNAND-D-(G1+G2) on 16 "
            "IFC dies (Table I: 32 planes, 16 FMACs, tR 4 us, 4.8 GB/s channels), fp16 weights "
            "and KV. KVNAND-D: the fastest split (G1+G2 in brackets). OOM: the weights or the KV "
            "cache do not fit (`footprint`).", "",
            markdown_table(["model", "context", "Base-1", "Base-2", "KVNAND-C-16",
                            "best KVNAND-D"], rows, align="llrrrr")])))
    rows = []
    for m in MODELS:
        for t in sw.contexts:
            d, ok = sw.best_d(m, t), sw.splits(m, t)
            c = sw.lat(m, t, "compact")
            if d is None and not math.isfinite(c):
                fastest = "OOM"
            elif d is None or c <= d.latency.seconds:
                fastest = f"KVNAND-C-{sw.system.dies}"
            else:
                fastest = d.latency.design
            rows.append([m.name, _k(t), f"{ok[0].point.g1}..{ok[-1].point.g1}" if ok else "none",
                         sw.split_text(d), str(d.latency.hg_stages) if d else "-",
                         f"{d.no_hg.seconds / d.latency.seconds:.3f}" if d else "-", fastest])
    res.tables.append(("Best G1/G2 split of KVNAND-D per context", "\n".join([
        "Feasible G1: splits whose weights fit in G1 and whose KV cache fits in G2. HG stages: "
        "the HG pipeline depth of the best split (1 = no overlap); no-HG / HG: its latency "
        "without the HG parallelism over its latency with it. Fastest: the fastest KVNAND design "
        "at that context.", "",
        markdown_table(["model", "context", "feasible G1", "best G1+G2", "HG stages",
                        "no-HG / HG", "fastest"], rows, align="llrrrrl")])))


def _speedup_rows(res, sw: _Sweep) -> None:
    from .reproduce import Row

    ctxs, big = sw.contexts, sw.contexts[-1]
    speed = {(m.name, t): sw.lat(m, t, "base1") / sw.best(m, t) for m in MODELS for t in ctxs}
    models = ", ".join(m.name for m in MODELS)
    for t in PAPER_GEOMEAN:
        if t in ctxs:
            res.rows.append(Row(f"geomean speedup, fastest KVNAND / Base-1, {_k(t)} tokens",
                                PAPER_GEOMEAN[t], _geomean(speed[(m.name, t)] for m in MODELS),
                                "x", f"Abstract; paper: 5 models, ours: {models}"))
    if 128 in ctxs:
        res.rows.append(Row(
            "geomean speedup, KVNAND-C-16 / Base-1, 128 tokens", PAPER_C_OVER_BASE1_128,
            _geomean(sw.lat(m, 128, "base1") / sw.lat(m, 128, "compact") for m in MODELS), "x",
            "Sec. V-B"))
        res.rows.append(Row(
            "geomean speedup, KVNAND-C-16 / best KVNAND-D, 128 tokens", PAPER_C_OVER_D_128,
            _geomean(sw.best_d_s(m, 128) / sw.lat(m, 128, "compact") for m in MODELS), "x",
            "Sec. V-B"))
    if 10240 in ctxs:
        top = max(MODELS, key=lambda m: speed[(m.name, 10240)])
        res.rows.append(Row("largest speedup over Base-1 at 10K tokens", PAPER_MAX_SPEEDUP_10K,
                            speed[(top.name, 10240)], "x", f"Sec. VII; ours: {top.name}"))
    for m in MODELS:
        d = sw.best_d(m, big)
        res.rows.append(Row(f"KVNAND-D / Base-2 at {_k(big)} tokens, {m.name}",
                            PAPER_D_OVER_BASE2_100K[m.name],
                            sw.lat(m, big, "base2") / sw.best_d_s(m, big), "x",
                            f"Sec. V-B; best split {sw.split_text(d)}"))
    res.rows.append(Row(f"fastest KVNAND throughput, LLaMA3.1-8B, {_k(big)} tokens",
                        PAPER_TPS_8B_100K, 1.0 / sw.best(LLAMA31_8B, big), "tokens/s",
                        "Sec. VII"))
    if 1024 in ctxs:
        res.rows.append(Row("best split, LLaMA3.1-8B, 1K tokens",
                            "%d+%d" % PAPER_BEST_SPLIT_8B_1K,
                            sw.split_text(sw.best_d(LLAMA31_8B, 1024)), "", "Sec. V-B (G1+G2)"))
    if 10240 in ctxs:
        ratios = {m.name: (d := sw.best_d(m, 10240)).latency.seconds / d.no_hg.seconds
                  for m in MODELS}
        low = min(ratios, key=ratios.get)
        res.rows.append(Row("KVNAND-D latency with / without HG parallelism, 10K, lowest",
                            100 * PAPER_HG_RATIO_10K, 100 * ratios[low], "%",
                            f"Fig. 14; ours: {low}, best split"))
    oom = [m.name for m in MODELS if math.isnan(sw.lat(m, big, "base1"))]
    res.rows.append(Row(f"Base-1 out of memory at {_k(big)} tokens", "all five models",
                        ", ".join(oom) if oom else "none", "",
                        "Sec. V-B; the 8 x 16 Gb DRAM holds the KV cache"))
    c7 = sw.by[(LLAMA2_7B.name, big, "compact", None)]
    if c7.naive is not None:
        page_att = dict(c7.latency.parts)["attention"]
        naive_att = dict(c7.naive.parts)["attention"]
        res.rows.append(Row(f"KVNAND-C-16 attention latency, page-level / naive mapping, "
                            f"LLaMA2-7B, {_k(big)}", None, 100 * page_att / naive_att, "%",
                            "Fig. 14 gives 1.9 % for OPT-30B (MHA, not modelled)"))


def _system_tables(res, system: System) -> None:
    from .reproduce import Row, markdown_table

    fl = system.flash
    period_table, fp16_us = _page_period_table(system)
    res.rows.append(Row("page period of the GEMV PE, fp16, F = 16", PAPER_PAGE_PERIOD_US,
                        fp16_us, "us", "golden gemv_timing (= the RTL PE, cycle for cycle)"))
    res.rows.append(Row("flash capacity per IFC die", PAPER_DIE_GBIT,
                        8 * fl.die_bytes / _GIBIT, "Gb", "Table I geometry x 32 planes", ".5g"))
    res.tables.append(("Page period of one plane's PE (`golden.inflash.gemv_timing`)", "\n".join([
        "A 1024 x 4096 GEMV on one plane, tR 4 us = 1600 cycles at 400 MHz, 4 bytes per cycle. "
        "The period `max(tR, transfer, compute)` of a full page sets every weight GEMV's and "
        "every KV page's pace in the model.", "", period_table])))
    rows = []
    for m in MODELS:
        w = m.weight_bytes(system.mode)
        kv = m.kv_token_bytes(system.kv_format)
        rows.append([m.name, f"{m.params() / 1e9:.2f}", f"{w / 1e9:.1f}", f"{kv / _KIB:.0f}",
                     f"{kv * 102400 / 1e9:.1f}", f"{w / fl.die_bytes:.2f}",
                     f"{kv * 102400 / fl.die_bytes:.2f}"])
    res.tables.append(("Footprints (fp16)", "\n".join([
        f"IFC die: {fl.die_bytes / 1e9:.2f} GB ({8 * fl.die_bytes / _GIBIT:.2f} Gb); DRAM of "
        f"Base-1: {system.channels} x {system.npu.dram_gbit:g} Gb = "
        f"{system.channels * system.npu.dram_gbit * _GIBIT / 8e9:.2f} GB; plain dies of Base-2: "
        f"{system.channels} x {fl.plain_die_gbit:g} Gb.", "",
        markdown_table(["model", "params (B)", "weights (GB)", "KV per token (KiB)",
                        "KV at 100K (GB)", "weights / die", "KV at 100K / die"], rows)])))


def _fig15(ctx, res, contexts: tuple[int, ...]) -> None:
    """Fig. 15: the 8-die DSE on LLaMA3.1-70B, W4A16 and W8A8 (KVNAND-C-8 and every split)."""
    from .reproduce import Row, markdown_table

    systems = {mode: System(dies_per_channel=1, mode=mode) for mode in ("w4a16", "w8a8")}
    dies = next(iter(systems.values())).dies
    pts = [Point(s, LLAMA31_70B, t, "compact") for s in systems.values() for t in contexts]
    pts += [Point(s, LLAMA31_70B, t, "discrete", g) for s in systems.values() for t in contexts
            for g in range(1, dies)]
    dse = {(o.point.system.mode, o.point.context, o.point.g1): o.latency
           for o in ctx.map(evaluate, pts, label="8-die DSE, LLaMA3.1-70B (Fig. 15)")}
    labels = [f"C-{dies}"] + [f"D-({g}+{dies - g})" for g in range(1, dies)]

    def row(mode, t) -> list[Latency]:
        return [dse[(mode, t, g)] for g in [None, *range(1, dies)]]

    for mode, system in systems.items():
        rows = []
        for t in contexts:
            cells = row(mode, t)
            low = min((c.seconds for c in cells if not c.oom), default=math.nan)
            rows.append([_k(t)] + ["" if c.oom else f"**{1e3 * c.seconds:.0f}**"
                                   if c.seconds == low else f"{1e3 * c.seconds:.0f}"
                                   for c in cells])
        res.tables.append((
            f"8-die DSE, LLaMA3.1-70B {mode.upper()}: latency per token (ms)", "\n".join([
                f"Fig. 15's grid: blank = OOM, bold = fastest. {system.channels} channels x 1 "
                f"die; KV cache {system.kv_format}.", "",
                markdown_table(["context"] + labels, rows)])))
    compact, *splits = row("w4a16", contexts[-1])
    ok = [(g, c) for g, c in enumerate(splits, 1) if not c.oom]
    g1, best = min(ok, key=lambda gc: gc[1].seconds) if ok else (None, None)
    res.rows.append(Row(f"8-die DSE, LLaMA3.1-70B W4A16: G2 of the best split at "
                        f"{_k(contexts[-1])}", PAPER_FIG15_BEST_G2_100K,
                        dies - g1 if g1 else math.nan, "dies", "Fig. 15", ".0f"))

    def d_wins(t) -> bool:
        c, *ds = row("w4a16", t)
        return any(not x.oom and (c.oom or x.seconds < c.seconds) for x in ds)

    beyond = [t for t in contexts if d_wins(t)]
    gap = f"; at {_k(contexts[-1])} the best KVNAND-D takes " \
          f"{best.seconds / compact.seconds:.2f}x KVNAND-C's time" if best else ""
    res.rows.append(Row("8-die DSE, LLaMA3.1-70B W4A16: contexts where KVNAND-D beats KVNAND-C",
                        f"beyond {_k(PAPER_FIG15_CROSSOVER)} tokens",
                        f"from {_k(beyond[0])} tokens" if beyond else "none", "",
                        "Fig. 15" + gap))

    def draw(fig, axes):
        for ax, mode in zip(axes, systems):
            grid = np.array([[np.nan if c.oom else c.seconds for c in row(mode, t)]
                             for t in contexts]).T
            norm = grid / np.nanmin(grid, axis=0)
            im = ax.imshow(norm, aspect="auto", cmap="viridis_r", vmin=1.0,
                           vmax=min(3.0, float(np.nanmax(norm))))
            ax.set_xticks(range(len(contexts)), [_k(t) for t in contexts], fontsize=7)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("configuration (G1+G2 dies)")
            ax.set_title(f"LLaMA3.1-70B {mode.upper()}, {dies} dies (blank = OOM)")
            fig.colorbar(im, ax=ax, label="latency / fastest at that context")
    res.plots.append(_plot(ctx, "dse_8die_70b.png", draw, ncols=2, size=(12.0, 4.4)))


def _sweep_plots(ctx, res, sw: _Sweep) -> None:
    xs = np.array(sw.contexts, float)
    designs = (("base1", "Base-1 (IFC + DRAM KV)", "o-"),
               ("base2", "Base-2 (naive KV in flash)", "s-"),
               ("compact", f"KVNAND-C-{sw.system.dies}", "^-"),
               ("best-D", "KVNAND-D, best split", "v-"))

    def series(m, d):
        get = sw.best_d_s if d == "best-D" else lambda m, t: sw.lat(m, t, d)
        return np.array([get(m, t) for t in sw.contexts])

    def draw_latency(fig, axes):
        for ax, m in zip(axes, MODELS):
            for d, name, style in designs:
                ax.plot(xs, 1e3 * series(m, d), style, label=name, markersize=4)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("decode latency per token (ms)")
            ax.set_title(m.name)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle("Decode latency against context (OOM points absent)")
    res.plots.append(_plot(ctx, "latency_vs_context.png", draw_latency, ncols=3,
                           size=(14.0, 4.4)))

    def draw_split(fig, axes):
        ax = axes[0]
        for k, m in enumerate(MODELS):
            best = [sw.best_d(m, t) for t in sw.contexts]
            ax.plot(xs, [sw.system.dies - o.point.g1 if o else np.nan for o in best], "o-",
                    color=f"C{k}", label=f"{m.name}: G2 of the best split")
            c_wins = [t for t, o in zip(sw.contexts, best) if sw.lat(m, t, "compact")
                      <= (o.latency.seconds if o else math.inf)]
            ax.plot(c_wins, [0.25 + 0.2 * k] * len(c_wins), "x", color=f"C{k}",
                    label=f"{m.name}: KVNAND-C-{sw.system.dies} faster than every split")
        ax.set_xscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("KV dies G2 of KVNAND-D-(G1+G2) (dies)")
        ax.set_ylim(0, sw.system.dies)
        ax.set_title(f"Best G1/G2 split per context ({sw.system.dies} IFC dies)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    res.plots.append(_plot(ctx, "best_split.png", draw_split))

    def draw_speedup(fig, axes):
        ax = axes[0]
        for k, m in enumerate(MODELS):
            best = np.array([sw.best(m, t) for t in sw.contexts])
            ax.plot(xs, series(m, "base1") / best, "o-", color=f"C{k}",
                    label=f"{m.name}: over Base-1")
            ax.plot(xs, series(m, "base2") / best, "s--", color=f"C{k}",
                    label=f"{m.name}: over Base-2")
        ax.plot(list(PAPER_GEOMEAN), list(PAPER_GEOMEAN.values()), "k*", markersize=10,
                label="paper: geomean over Base-1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("speedup of the fastest KVNAND (x)")
        ax.set_title("Speedup of KVNAND over the baselines (OOM baseline points absent)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    res.plots.append(_plot(ctx, "speedup.png", draw_speedup))


def _notes(system: System) -> list[str]:
    fl = system.flash
    return [
        "Model. Decode only, one token, all context tokens already in flash (or DRAM). Weight "
        "GEMVs: rows dealt to the planes of the weight dies (columns split too when there are "
        "more planes than rows), each plane's time the golden `gemv_timing` total of its share; "
        "QKV, gate+up share their inputs and run as one GEMV each. Logit/Attend: each head "
        "group's K (V) pages dealt to the planes holding that group's KV, the busiest plane's "
        "pages through `attention_timing`'s schedule (`page_pipeline`). Transfers over the "
        f"{system.channels} ONFI channels at {fl.channel_gbs:g} GB/s; softmax and vector work "
        f"on the {system.npu.tops:g} TOPS NPU. KVNAND-C runs QKV, attention, O and FFN in "
        "sequence; KVNAND-D pipelines QKV of a batch of head groups on G1 with attention of the "
        "previous batch on G2 (the batch size is chosen per point: one batch = no HG "
        "parallelism), then O and FFN on G1.",
        "Garbled equations. The text lost the symbols of the per-token KV size (Sec. III-B), the "
        "tokens-to-fill-a-page formula (Sec. IV-D) and the HG arithmetic intensity. Derived: "
        "KV bytes per token = 2 x layers x kv_heads x head_dim x element bytes; tokens per page "
        "T_p = page_bytes // (head_dim x element bytes) = 16 for fp16, d = 128 (the paper's "
        "'256B' entry); a head group's Logit/Attend serves G = heads / kv_heads query heads per "
        "page read, so 16 FMACs keep G = 8 read-bound.",
        "KV placement. The paper's KVNAND-C keeps each head's KV in the planes that generated "
        "it (head parallelism; its T_p formula suggests head-dimension slices). The model deals "
        "whole-entry pages of the golden page-level layout over the planes instead: the same "
        "pages per plane (hence the same tR-bound time), while the PE keeps the full head "
        "dimension per token, so the plane stays read-bound (the Attend loop's 11 cycles per "
        "token cost 176 of a page's 1600 cycles; head-dimension slices of 2 to 8 elements would "
        "make Attend loop-bound on the golden PE).",
        "Baselines. Base-1 (Lincoln scaled, Sec. V-A): 8 channels, each one IFC die (F = 2, "
        "Lincoln's balance point; fp16 is read-bound either way) and one 16 Gb LPDDR5X at 8 GB/s "
        "holding only the KV cache; Logit/Attend on the NPU at the DRAM bandwidth. Base-2: the "
        "DRAM replaced by a plain 128 Gb NAND die; KV pages in generation order (naive mapping, "
        "`kv_address`), the NPU reading each layer's K then V over the channels; its planes are "
        "rarely the bound, the 4.8 GB/s channels are. KVNAND: 16 IFC dies, as Sec. V-A's "
        "'replacing the KV cache flash with compute-enabled IFC dies' implies (KVNAND-C-16).",
        "Why KVNAND-C is about 2x Base-1 at short contexts: there the token is all weight "
        "GEMVs, read-bound at one page per tR per plane, and KVNAND-C has 16 IFC dies against "
        "Base-1's 8. The speedup grows with context for the MHA model (its KV traffic, 512 KiB "
        "per token, runs at 64 GB/s from DRAM against ~0.5 TB/s of page reads in flash) and much "
        "less for the GQA models (128 and 320 KiB per token).",
        "OOM. The DRAM of Base-1 is 8 x 16 Gb = 16 GiB by Table I; with only the KV cache in it, "
        "LLaMA3.1-8B (128 KiB per token, 12.5 GiB at 100K) fits, so the model does not reproduce "
        "the paper's statement that Base-1 is out of memory at 100K for every model (nor that the "
        "GQA models exhaust it at 50K). The paper does not say what else its DRAM holds "
        "(embeddings and intermediates in Lincoln) or how much; nothing is added here to force "
        "the OOM. LLaMA3.1-70B in fp16 (141 GB) needs 8 of the 16 IFC dies for its weights: "
        "KVNAND-D splits with G1 < 8 are OOM, and Base-1/Base-2 hold it in exactly 8 dies.",
        "KV writes. KVNAND-C flushes its 8 KB-per-plane buffers, KVNAND-D its 5 MB SoC buffer, "
        "as (partial) pages of every (layer, K|V, head) stream; each program blocks a plane for "
        "tP = 75 us. KVNAND-D and Base-2 program while their KV dies idle (weight GEMVs), "
        "KVNAND-C cannot hide it. The amortized cost is below 1 % of a token everywhere.",
        "KVNAND-C against KVNAND-D. On the same dies KVNAND-C is faster than the best split at "
        "every point of both sweeps: it runs every GEMV on all dies, while the HG pipeline of "
        "KVNAND-D hides only the QKV generation (a quarter of a layer's weight reads for MHA, a "
        "tenth for these GQA models) behind the attention and gives up G2's share of the FFN. "
        "KVNAND-C's smaller KV buffer (pages of 8 tokens instead of 16 for LLaMA2-7B on 16 "
        "dies, 6 for LLaMA3.1-70B on 8) doubles or nearly triples its KV page reads and "
        "narrows the gap at 100K (1.07x on the 8-die W4A16 grid) without closing it. The "
        "paper has KVNAND-D ahead beyond 2K tokens in Fig. 15, whose numbers are not in the "
        "text; no stated parameter gives KVNAND-D that lead here, and none is tuned to make "
        "it. The best split itself (G2 = 4 at 100K; 15+1 for LLaMA3.1-8B at 1K) agrees with "
        "the paper.",
        "Gaps. At 10K tokens the speedup over Base-1 (LLaMA2-7B 2.9x) exceeds the paper's "
        "'up to 2.3x': Base-1 reads LLaMA2-7B's 5 GB of KV at 8 x 8 GB/s, 84 ms per token, "
        "against about 20 ms of attention in KVNAND-C. The paper does not give its Base-1 "
        "attention model (Lincoln's) beyond Table I; a faster Base-1 KV path or a slower "
        "in-flash attention would bring the two together. For the same reason the 100K "
        "throughput of LLaMA3.1-8B (18 tokens/s) exceeds the paper's 10. The KVNAND-D over "
        "Base-2 ratios at 100K (4.8, 3.9, 2.3 against 6.8, 4.0, 2.5) follow the channel-bound "
        "Base-2: 38.4 GB/s of ONFI for the NPU's KV reads.",
        "Not modelled: prefill, speculative decoding, energy and cost (Sec. V-B/V-C), channel "
        "contention between G1 and G2 dies sharing a channel, the newest tokens still in the KV "
        "buffer, OPT-30B and Mixtral-8x7B (the paper's geomeans are over five models, ours over "
        "three). Contexts: K = 1024 tokens (10K = 10240, 100K = 102400).",
    ]
