"""Price one decoder-layer operation on one DXE from the golden DXT cycle model.

The first layer of :mod:`sim.rdxe`: the model shapes (:class:`Decoder`), the mapping of a layer
onto the eight DXTs (:func:`layer_cycles`, :func:`layer_macs`) and the cycle table that
``python -m sim.rdxe`` prints (:func:`cycle_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from golden.rdxe import (MAX_TOKENS, DxtConfig, gemv_cycles, qk_cycles, rmsnorm_gemv_cycles,
                         softmax_pv_cycles)
from hdl.validate import integer

from ..models import ModelShape

__all__ = [
    "OPS", "CONTEXT_OPS", "DXTS_PER_DXE", "Decoder", "MT5_SMALL", "OPT_350M", "MODELS",
    "layer_cycles", "layer_macs", "token_layer_cycles", "cycle_table",
]


#: DXTs per DXE (Sec. III, Fig. 2: "eight decoder execution tiles").
DXTS_PER_DXE = 8
#: The operations of one decoder layer, in order (Sec. IV-A: "QKV, Q x K, P x V, projection, and
#: FFN"); RMSNorm is fused into ``qkv`` and ``ffn_up`` (VRC), the softmax into ``pv``.
OPS = ("qkv", "qk", "pv", "proj", "ffn_up", "ffn_down")
#: The operations whose cost depends on the context length.
CONTEXT_OPS = ("qk", "pv")


# --- model shapes ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Decoder(ModelShape):
    """A :class:`~sim.models.ModelShape` as the ring sees it.

    ``d_model`` and ``ffn`` must be given, and every head is its own KV group (``kv_heads`` equal
    to ``heads``, the default): the mapping puts a head, its keys and its values on one DXT.
    ``gated`` doubles the FFN's up projection (MT5's gated GELU).

    Raises
    ------
    TypeError, ValueError
        A message naming the field, the allowed values and the value given.
    """

    required = ("d_model", "ffn")

    def __post_init__(self):
        super().__post_init__()
        if self.kv_heads != self.heads:
            raise ValueError(f"A Decoder's KV head count must equal its head count "
                             f"{self.heads}, not {self.kv_heads}")


#: The paper's MT5 decoder layer (Sec. IV-A: d_model 512, 6 heads, d_ffn 1024); 8 decoder layers,
#: 64-wide heads and the gated-GELU FFN are google/mt5-small's public configuration. Fig. 3 runs
#: eight layers on four DXEs. The decoder's cross-attention is not in the paper's operation list
#: and is not modelled.
MT5_SMALL = Decoder("MT5-small", layers=8, d_model=512, heads=6, head_dim=64, ffn=1024,
                    gated=True)
#: OPT-350M's decoder shape (public configuration: 24 layers, width 1024, 16 heads, FFN 4096,
#: ReLU); the paper evaluates one OPT-350M layer for VRC (Sec. III-B).
OPT_350M = Decoder("OPT-350M", layers=24, d_model=1024, heads=16, head_dim=64, ffn=4096)
MODELS = {m.name: m for m in (MT5_SMALL, OPT_350M)}


# --- cost of one layer operation ------------------------------------------------------------------


def _check_model(model) -> Decoder:
    if not isinstance(model, Decoder):
        raise TypeError(f"Model must be a Decoder, not {type(model).__name__}")
    return model


def _check_params(params, model: Decoder) -> DxtConfig:
    if not isinstance(params, DxtConfig):
        raise TypeError(f"Parameters must be a DxtConfig, not {type(params).__name__}")
    if params.head_dim != model.head_dim:
        raise ValueError(f"The DXT's head dimension must equal the model's ({model.head_dim}), "
                         f"not {params.head_dim}")
    return params


def _check_op(op) -> str:
    if op not in OPS:
        raise ValueError(f"Operation must be one of {', '.join(map(repr, OPS))}, not {op!r}")
    return op


def layer_cycles(model: Decoder, op: str, context: int, params: DxtConfig = DxtConfig(), *,
                 batch: int = 1, dxts: int = DXTS_PER_DXE) -> int:
    """Return the cycles one DXE spends on operation ``op`` of one layer for ``batch`` tokens.

    The cycles come from the DXT cycle model of :mod:`golden.rdxe`, which the DXT RTL
    (``hdl.rdxe.Dxt``) meets cycle for cycle (tests/test_rdxe_dxt.py).

    Parameters
    ----------
    model : Decoder
        The layer's shape.
    op : str
        One of :data:`OPS`.
    context : int
        Tokens the attention covers, the new one included: 1 to 65536. Only ``qk`` and ``pv``
        depend on it.
    params : DxtConfig
        The DXT (its ``head_dim`` must be the model's).
    batch : int
        Tokens processed together (1 to 1024): their linear layers are one GEMV with ``batch``
        times the outputs (each weight row meets ``batch`` activation vectors), their attention
        runs once per token.
    dxts : int
        DXTs per DXE, 1 to 64 (8).

    Returns
    -------
    int
        Cycles of the busiest DXT, which sets the DXE's time:

        * ``qkv``: ``rmsnorm_gemv_cycles(batch * 3 * h * d, d_model)`` with ``h = ceil(H /
          dxts)`` heads per DXT (fused RMSNorm);
        * ``qk``, ``pv``: ``batch * h * qk_cycles(context)`` and ``batch * h *
          softmax_pv_cycles(context, mode="fused")``;
        * ``proj``: ``gemv_cycles(batch * ceil(d_model / dxts), H * d)``;
        * ``ffn_up``: ``rmsnorm_gemv_cycles(batch * ceil(g * ffn / dxts), d_model)``, ``g = 2``
          when gated;
        * ``ffn_down``: ``gemv_cycles(batch * ceil(d_model / dxts), ffn)``.

    Raises
    ------
    TypeError, ValueError
        A message naming the argument, the allowed values and the value given.
    """
    model = _check_model(model)
    op = _check_op(op)
    params = _check_params(params, model)
    context = integer(context, "Context length", 1, MAX_TOKENS)
    batch = integer(batch, "Batch size", 1, 1024)
    dxts = integer(dxts, "DXT count", 1, 64)
    h = -(-model.heads // dxts)
    D, width = model.d_model, model.heads * model.head_dim
    if op == "qkv":
        return rmsnorm_gemv_cycles(batch * 3 * h * model.head_dim, D, params).total
    if op == "qk":
        return batch * h * qk_cycles(context, params).total
    if op == "pv":
        return batch * h * softmax_pv_cycles(context, params, mode="fused").total
    if op == "proj":
        return gemv_cycles(batch * -(-D // dxts), width, params).total
    if op == "ffn_up":
        up = (2 if model.gated else 1) * model.ffn
        return rmsnorm_gemv_cycles(batch * -(-up // dxts), D, params).total
    return gemv_cycles(batch * -(-D // dxts), model.ffn, params).total


def layer_macs(model: Decoder, op: str, context: int) -> int:
    """Return the useful multiply-accumulates of ``op`` for one token of one layer.

    ``qkv`` ``3 H d D``, ``qk`` and ``pv`` ``H d T``, ``proj`` ``D H d``, ``ffn_up`` ``g F D``
    (``g = 2`` gated), ``ffn_down`` ``D F``; ``T`` is ``context``.
    """
    model = _check_model(model)
    op = _check_op(op)
    context = integer(context, "Context length", 1, MAX_TOKENS)
    D, width = model.d_model, model.heads * model.head_dim
    return {"qkv": 3 * width * D, "qk": width * context, "pv": width * context,
            "proj": D * width, "ffn_up": (2 if model.gated else 1) * model.ffn * D,
            "ffn_down": D * model.ffn}[op]


def token_layer_cycles(model: Decoder, context: int, params: DxtConfig = DxtConfig(), *,
                       batch: int = 1, dxts: int = DXTS_PER_DXE) -> dict[str, int]:
    """Return ``{op: cycles}`` of one layer (every op of :data:`OPS`) and their ``"total"``."""
    out = {op: layer_cycles(model, op, context, params, batch=batch, dxts=dxts) for op in OPS}
    out["total"] = sum(out.values())
    return out


@lru_cache(maxsize=64)
def _layer_table(model: Decoder, params: DxtConfig, dxts: int, batch: int, tmax: int
                 ) -> np.ndarray:
    """Cycles of one whole layer for ``batch`` tokens at contexts ``0 .. tmax`` (index = T)."""
    fixed = sum(layer_cycles(model, op, 1, params, batch=batch, dxts=dxts)
                for op in OPS if op not in CONTEXT_OPS)
    table = np.zeros(tmax + 1, np.int64)
    for T in range(1, tmax + 1):
        table[T] = fixed + sum(layer_cycles(model, op, T, params, batch=batch, dxts=dxts)
                               for op in CONTEXT_OPS)
    return table


def _macs_table(model: Decoder, tmax: int) -> np.ndarray:
    """Useful MACs of one token through one layer at contexts ``0 .. tmax``."""
    fixed = sum(layer_macs(model, op, 1) for op in OPS if op not in CONTEXT_OPS)
    T = np.arange(tmax + 1, dtype=np.int64)
    return fixed + 2 * model.heads * model.head_dim * T


def _tmax(tokens: int) -> int:
    """The table size for ``tokens``: the next power of two (so the cache is reused)."""
    return max(16, 1 << (tokens - 1).bit_length())


def cycle_table(models=(MT5_SMALL, OPT_350M), contexts=(1, 64, 256, 1024),
                params: DxtConfig = DxtConfig()) -> str:
    """Markdown table of one layer's cycles on one DXE per operation, and the DXE's MAC use."""
    from ..reproduce import markdown_table
    rows = []
    macs_per_cycle = DXTS_PER_DXE * params.vacs * params.lanes
    for m in models:
        for T in contexts:
            c = token_layer_cycles(m, T, params)
            macs = sum(layer_macs(m, op, T) for op in OPS)
            rows.append([m.name, T] + [c[op] for op in OPS] +
                        [c["total"], f"{100 * macs / (macs_per_cycle * c['total']):.1f} %"])
    return markdown_table(["model", "context"] + list(OPS) + ["layer", "DXE MAC use"], rows)
