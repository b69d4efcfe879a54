"""Estimate OPT inference latency (TTFT, TTLT) on the NPU and the PIM from measured rates.

Layer 3 of :mod:`sim.umdam`: the model shapes, the prefill and decode operator lists and the
roofline latency (:class:`OptModel`, :func:`latency`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import golden.umdam as golden
from hdl.validate import integer, positive

from ..models import ModelShape

__all__ = [
    "OptModel", "OPT_125M", "OPT_1_3B", "OPT_6_7B", "OPT_30B", "MODELS", "NpuSpec", "PimSpec", "Op",
    "prefill_ops", "decode_ops", "lm_head_op", "op_seconds", "Rates", "latency", "padding_bytes",
]


# --------------------------------------------------------------------------------------------------
# 3. Models and latency


@dataclass(frozen=True, kw_only=True)
class OptModel(ModelShape):
    """An OPT decoder's shapes (Table II; FFN width and vocabulary from the OPT paper [18]).

    A :class:`~sim.models.ModelShape` with OPT's defaults and its learned positions.

    Parameters
    ----------
    name : str
    d_model, head_dim, heads, layers : int
        Table II's embedding dimension, head dimension, heads and blocks; ``heads * head_dim``
        must be ``d_model`` (one KV head per head).
    ffn : int or None
        FFN width (one ReLU up projection); ``None`` gives OPT's ``4 * d_model``.
    vocab : int
        50272, OPT's tokenizer (the LM head is tied to the embedding).
    max_positions : int
        2048, OPT's learned positions (1 to 2**20): prompt plus generated tokens may not exceed
        it.
    """

    required = ("d_model",)

    vocab: int = 50272
    max_positions: int = 2048

    def __post_init__(self):
        super().__post_init__()
        integer(self.max_positions, f"{self.name} max_positions", 1, 1 << 20)
        if self.heads * self.head_dim != self.d_model:
            raise ValueError(f"{self.name}: heads x head_dim must equal d_model ({self.d_model}),"
                             f" not {self.heads} x {self.head_dim}")
        if self.kv_heads != self.heads:
            raise ValueError(f"{self.name}: OPT has a KV head per head ({self.heads}), "
                             f"not {self.kv_heads}")
        if self.ffn is None:
            object.__setattr__(self, "ffn", 4 * self.d_model)

    def matrices(self) -> list[tuple[str, int, int]]:
        """Weight matrices of one decoder layer as ``(name, rows = inputs, cols = outputs)``."""
        d, f = self.d_model, self.ffn
        return [("qkv", d, 3 * d), ("out", d, d), ("fc1", d, f), ("fc2", f, d)]

    @property
    def layer_weights(self) -> int:
        """Weights in the decoder layers (the ones a re-layout moves)."""
        return self.layers * self.weights_per_layer

    @property
    def params(self) -> int:
        """Weights including the tied embedding / LM head (biases and norms left out)."""
        return self.layer_weights + self.vocab * self.d_model + self.max_positions * self.d_model


#: Table II. Head dim x heads = embedding dimension in every row.
OPT_125M = OptModel("OPT-125M", d_model=768, head_dim=64, heads=12, layers=12)
OPT_1_3B = OptModel("OPT-1.3B", d_model=2048, head_dim=64, heads=32, layers=24)
OPT_6_7B = OptModel("OPT-6.7B", d_model=4096, head_dim=128, heads=32, layers=32)
OPT_30B = OptModel("OPT-30B", d_model=7168, head_dim=128, heads=56, layers=48)
MODELS = (OPT_125M, OPT_1_3B, OPT_6_7B, OPT_30B)


@dataclass(frozen=True)
class NpuSpec:
    """The NPU of Table I: two Ascend 310B at 8 TFLOPS each (FP16), 8 MB on-chip buffer."""

    tflops: float = 16.0
    buffer_bytes: int = 8 << 20

    def __post_init__(self):
        positive(self.tflops, "NPU throughput tflops", "TFLOPS")
        integer(self.buffer_bytes, "NPU buffer buffer_bytes", 0, 1 << 40)


@dataclass(frozen=True)
class PimSpec:
    """The LPDDR5-PIM of Table I: 512 GFLOPS and 512 GB/s of internal bandwidth."""

    gflops: float = 512.0
    internal_gbps: float = 512.0

    def __post_init__(self):
        positive(self.gflops, "PIM throughput gflops", "GFLOPS")
        positive(self.internal_gbps, "PIM internal bandwidth internal_gbps", "GB/s")


@dataclass(frozen=True)
class Op:
    """One operator: floating-point operations and DRAM bytes it moves."""

    name: str
    flops: float
    bytes: float


def _tokens(value, what: str, model: OptModel) -> int:
    return integer(value, what, 1, model.max_positions)


def prefill_ops(model: OptModel, prompt: int, *, buffer_bytes: int = 8 << 20,
                elem_bytes: int = 2) -> list[Op]:
    """The prefill's operators for ``prompt`` tokens, summed over the layers (FP16 by default).

    Per layer, each GEMM reads its weights once. Its input and output activations
    (``L x rows`` and ``L x cols``) stay in the NPU's on-chip buffer when together they fit in
    ``buffer_bytes`` (Table I: 8 MB), and otherwise go through DRAM once each. Causal attention
    does ``2 d L (L + 1)`` FLOPs (``QK^T`` and ``PV`` over the ``L (L + 1) / 2`` visible pairs),
    always writes K and V to the DRAM KV cache, and moves Q, K, V and O through DRAM only when
    they do not fit in the buffer. The embedding and position gathers read ``2 L d`` values.
    Norms, softmax and GELU are left out (small next to the GEMMs).
    """
    if not isinstance(model, OptModel):
        raise TypeError(f"model must be an OptModel, not {model!r}")
    L = _tokens(prompt, "Prompt length (tokens)", model)
    integer(buffer_bytes, "NPU buffer buffer_bytes", 0, 1 << 40)
    d, e, n = model.d_model, elem_bytes, model.layers

    def spill(nbytes):
        return 0 if nbytes <= buffer_bytes else nbytes
    ops = [Op("embed", 0.0, 2 * L * d * e)]
    for name, rows, cols in model.matrices():
        ops.append(Op(name, 2.0 * L * rows * cols * n,
                      (e * rows * cols + spill(e * L * (rows + cols))) * n))
        if name == "qkv":
            ops.append(Op("attention", 2.0 * d * L * (L + 1) * n,
                          (e * 2 * L * d + spill(e * 4 * L * d)) * n))
    return ops


def decode_ops(model: OptModel, context: int, elem_bytes: int = 2) -> list[Op]:
    """One decode step's GEMVs with ``context`` tokens of KV cache (all layers, no LM head).

    Each weight GEMV reads its matrix once (2 FLOPs per weight); attention reads K and V
    (``context x d_model`` each) once, 2 FLOPs per element.
    """
    if not isinstance(model, OptModel):
        raise TypeError(f"model must be an OptModel, not {model!r}")
    p = _tokens(context, "Context length (tokens)", model)
    d, e, n = model.d_model, elem_bytes, model.layers
    ops = [Op(name, 2.0 * rows * cols * n, e * rows * cols * n)
           for name, rows, cols in model.matrices()]
    ops.append(Op("attention", 4.0 * p * d * n, e * 2 * p * d * n))
    return ops


def lm_head_op(model: OptModel, elem_bytes: int = 2) -> Op:
    """The LM head GEMV for one token (the tied ``vocab x d_model`` embedding)."""
    if not isinstance(model, OptModel):
        raise TypeError(f"model must be an OptModel, not {model!r}")
    return Op("lm_head", 2.0 * model.vocab * model.d_model,
              elem_bytes * model.vocab * model.d_model)


def op_seconds(ops, flops_per_s: float, bytes_per_s: float) -> float:
    """Roofline time of operators run one after another: ``sum max(F / P, B / BW)``."""
    positive(flops_per_s, "Compute rate flops_per_s", "FLOP/s")
    positive(bytes_per_s, "Bandwidth bytes_per_s", "B/s")
    return sum(max(o.flops / flops_per_s, o.bytes / bytes_per_s) for o in ops)


@dataclass(frozen=True)
class Rates:
    """The rates one system runs at: compute from Table I, bandwidths from the DRAM model.

    ``npu_gbps`` is the NPU's measured sequential bandwidth, ``pim_gbps`` the PIM's effective
    internal bandwidth (Table I's 512 GB/s times the measured per-bank streaming efficiency),
    ``relayout_s_per_byte`` the measured copy time per weight byte (0: no re-layout),
    ``npu_buffer_bytes`` the NPU's on-chip buffer (Table I: 8 MB).
    """

    npu_tflops: float
    npu_gbps: float
    pim_gflops: float
    pim_gbps: float
    relayout_s_per_byte: float = 0.0
    npu_buffer_bytes: int = 8 << 20

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "npu_buffer_bytes":
                integer(value, "NPU buffer npu_buffer_bytes", 0, 1 << 40)
            elif f.name == "relayout_s_per_byte":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                        not math.isfinite(value) or value < 0:
                    raise ValueError(f"Re-layout time relayout_s_per_byte must be a finite "
                                     f"number of at least 0, not {value!r}")
            else:
                positive(value, f"Rate {f.name}")


_DECODE_ON = ("pim", "npu")


def latency(model: OptModel, prompt: int, generated: int, rates: Rates, *,
            decode_on: str = "pim", elem_bytes: int = 2) -> dict[str, float]:
    """TTFT and TTLT of one query, in seconds, with their parts.

    ``relayout`` (``rates.relayout_s_per_byte`` times the decoder weights' bytes, paid once
    before the prefill) + ``prefill`` (NPU roofline) + ``first`` (the first token's LM head) is
    the TTFT; ``decode`` adds the remaining ``generated - 1`` tokens, token ``t`` attending to
    ``prompt + t`` positions, for the TTLT. GEMVs run on the PIM (``decode_on="pim"``) or on the
    NPU (``"npu"``, the NPU-only system).
    """
    if not isinstance(model, OptModel):
        raise TypeError(f"model must be an OptModel, not {model!r}")
    if not isinstance(rates, Rates):
        raise TypeError(f"rates must be a Rates, not {rates!r}")
    if decode_on not in _DECODE_ON:
        raise ValueError(f"decode_on must be one of {', '.join(_DECODE_ON)}, not {decode_on!r}")
    L = _tokens(prompt, "Prompt length (tokens)", model)
    N = integer(generated, "Generated tokens", 1, model.max_positions)
    if L + N > model.max_positions:
        raise ValueError(f"Prompt plus generated tokens must be at most {model.max_positions} "
                         f"for {model.name}, not {L} + {N}")
    npu = (rates.npu_tflops * 1e12, rates.npu_gbps * 1e9)
    gemv = npu if decode_on == "npu" else (rates.pim_gflops * 1e9, rates.pim_gbps * 1e9)
    relayout = rates.relayout_s_per_byte * model.layer_weights * elem_bytes
    prefill = op_seconds(prefill_ops(model, L, buffer_bytes=rates.npu_buffer_bytes,
                                     elem_bytes=elem_bytes), *npu)
    first = op_seconds([lm_head_op(model, elem_bytes)], *gemv)
    decode = 0.0
    if N > 1:
        # Weights and attention are each linear in the context, so a step's time is
        # a + b * p; summing the roofline per step keeps the max per operator exact.
        fixed = op_seconds(decode_ops(model, 1, elem_bytes)[:-1]
                           + [lm_head_op(model, elem_bytes)], *gemv)
        per_pos = op_seconds([decode_ops(model, 1, elem_bytes)[-1]], *gemv)
        positions = (N - 1) * L + N * (N - 1) / 2          # sum of L + t for t = 1 .. N-1
        decode = fixed * (N - 1) + per_pos * positions
    ttft = relayout + prefill + first
    return {"relayout": relayout, "prefill": prefill, "first": first, "decode": decode,
            "ttft": ttft, "ttlt": ttft + decode}


def padding_bytes(geometry, rows: int, cols: int, elem_bytes: int = 2) -> int:
    """Bytes Algorithm 1 reserves for padding a ``rows x cols`` matrix up to whole tiles."""
    th, tw = golden.tile_shape(geometry, elem_bytes)
    ntr, ntc = golden.tile_grid(geometry, rows, cols, elem_bytes)
    return (ntr * th * ntc * tw - rows * cols) * elem_bytes
