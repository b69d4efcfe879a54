"""Describe the KVNAND hardware (Table I) and the model shapes the designs are priced on.

The flash, the NPU, the whole system (:class:`Flash`, :class:`NPU`, :class:`System`) and the
LLaMA decoders (:class:`Model`), each validated once, with the checks they share.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from golden.inflash import KV_FORMATS, MODES, FlashGeometry, KVLayout, stream_bytes
from golden.inflash.params import _choice        # one check of a named choice, golden's
from hdl.validate import integer, positive

from ..models import ModelShape

__all__ = [
    "DESIGNS", "Flash", "NPU", "System", "Model", "LLAMA2_7B", "LLAMA31_8B", "LLAMA31_70B",
    "MODELS",
]


#: Designs of the model: Base-1, Base-2, KVNAND-C and KVNAND-D.
DESIGNS = ("base1", "base2", "compact", "discrete")

_GIBIT = 1 << 30                  # memory densities (Gb) are binary: 16 Gb = 2**34 bits
_MIB = 1 << 20
_KIB = 1 << 10


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
        positive(self.channel_gbs, "Channel bandwidth channel_gbs", "GB/s")
        positive(self.plain_die_gbit, "Plain die capacity plain_die_gbit", "Gb")
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
        positive(self.tops, "NPU throughput tops", "TOPS")
        integer(self.kv_buffer_bytes, "SoC KV buffer in bytes", 1, 1 << 40)
        positive(self.dram_gbit, "DRAM chip capacity dram_gbit", "Gb")
        positive(self.dram_gbs, "DRAM bandwidth dram_gbs", "GB/s")


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


@dataclass(frozen=True, kw_only=True)
class Model(ModelShape):
    """A :class:`~sim.models.ModelShape` with the sizes KVNAND prices: where its weights and KV
    cache go in flash.

    ``d_model``, ``ffn`` and ``vocab`` must be given; ``gated`` defaults to True (LLaMA's gate, up
    and down projections, the gate and up merged in one GEMV). The embedding and the LM head are
    untied.
    """

    required = ("d_model", "ffn", "vocab")

    gated: bool = True

    def layer_gemvs(self) -> dict[str, tuple[int, int]]:
        """``(rows, cols)`` of the GEMVs of one decoder layer, those sharing an input merged:
        QKV, O, gate and up (one GEMV of ``2 ffn`` rows; ``ffn`` when not gated), down."""
        q, kv, d = self.d_q, self.d_kv, self.d_model
        return {"qkv": (q + 2 * kv, d), "o": (d, q),
                "gate_up": ((2 if self.gated else 1) * self.ffn, d), "down": (d, self.ffn)}

    def params(self) -> int:
        """Parameters: the layers' matrices and norms, untied embedding and LM head, final norm."""
        per_layer = self.weights_per_layer + 2 * self.d_model
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
