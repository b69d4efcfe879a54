"""FlowKV numerics: projections by FusedDQP on Q4NX weights, attention by the FlowKV tile pair.

What each operation computes (``FlowKV.emulated`` says the same, one line each):

* projections (``attn_q/k/v``, ``attn_output``, ``ffn_gate/up/down``): the Q4_1 weights of the
  file (:meth:`sim.llm.loader.ModelFile.q41`) become Q4NX (:func:`golden.flowkv_dqp.q4nx_from_q41`:
  fp16 scales and minimums rounded to bf16), are dequantized to bf16
  (:func:`golden.flowkv_dqp.dequantize`), the float32 activation is rounded to bf16
  (:func:`golden.arith.float.from_float`, RNE) and :func:`golden.flowkv_dqp.gemm` multiplies them
  into fp32 (exact products, a 32-lane fp32 tree per group, an fp32 accumulator across groups);
  the fp32 result goes back to the host as float32 (exact).
* ``keep``: ``q``, ``k``, ``v`` rounded to bf16 codes (RNE, ``from_float``); the KV cache holds
  bf16 codes. ``o`` is unchanged (the projection rounds it to bf16 anyway).
* attention: :func:`golden.flowkv.attend_many`, bit for bit
  :func:`golden.flowkv.attend` per query position and KV head (decode steps; a prefill is one
  decode step per position with the causal keys ``0 .. p``), chunk ``L_c`` (default 16), bf16
  output read back as float32.
* host float32 (none of the FlowKV blocks computes them): RMSNorm, RoPE, SwiGLU, the residual
  adds, the embedding, the final norm and the LM head.
"""

from __future__ import annotations

import numpy as np

from golden.arith.float import from_float, to_float
from golden.flowkv import attend_many
from golden.flowkv_dqp import Q4NX, dequantize, gemm, q4nx_from_q41
from hdl.arith.format import BF16, FP32
from hdl.flowkv.spec import MAX_CHUNK
from hdl.validate import power_of_two

from ..loader import ModelFile
from ..model import Numerics, budgets

__all__ = ["FlowKV", "DEFAULT_CHUNK"]

#: The chunk length of memwall's registry ``flowkv`` preset ``default``
#: (``memwall.blocks.flowkv.FlowKVParams().chunk``). sim/ must not import memwall/, and hdl's
#: :class:`hdl.flowkv.spec.FlowKVConfig` has no default chunk, so the value is copied here; a
#: test checks it against the registry.
DEFAULT_CHUNK = 16


class FlowKV(Numerics):
    """FusedDQP projections on Q4NX weights and FlowKV attention (module notes).

    Parameters
    ----------
    mf : ModelFile
        The model; its projections must be available as Q4_1 blocks (``mf.q41``).
    chunk : int, optional
        FlowKV chunk length ``L_c``, a power of two from 1 to 4096; default :data:`DEFAULT_CHUNK`.
    dtype : numpy dtype
        Host float type of the steps that stay on the host: float32 (default) or float64.

    Raises
    ------
    ValueError
        A chunk that is not a power of two from 1 to 4096, a dtype other than float32/float64.
    """

    name = "flowkv"
    emulated = {
        "projections": "golden.flowkv_dqp.gemm: Q4NX (q4nx_from_q41: fp16 d, m -> bf16) "
                       "dequantized to bf16 (dequantize), bf16 activation, fp32 lane tree "
                       "and accumulator",
        "keep q/k/v": "golden.arith.float.from_float to bf16 codes (KV cache in bf16)",
        "keep o": "float32 (rounded to bf16 by the next projection)",
        "attention": "golden.flowkv.attend_many = golden.flowkv.attend per position and "
                     "KV head (chunked online softmax, bf16 out)",
        "rms_norm": "float32 (host)",
        "rope": "float32 (host)",
        "glu": "float32 SwiGLU (host)",
        "residual": "float32 (host)",
    }

    def __init__(self, mf: ModelFile, chunk: int | None = None, dtype=np.float32):
        if np.dtype(dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, not {np.dtype(dtype)}")
        super().__init__(mf, dtype)
        chunk = DEFAULT_CHUNK if chunk is None else chunk
        try:
            power_of_two(chunk, "chunk", 1, MAX_CHUNK)
        except TypeError as err:             # the brief wants a ValueError for bad parameters
            raise ValueError(str(err)) from None
        self.chunk = int(chunk)
        self._weights: dict[tuple[int, str], np.ndarray] = {}

    def q4nx(self, layer: int, name: str) -> Q4NX:
        """The Q4NX weights of ``blk.layer.name`` (the file's Q4_1 blocks, ``d``, ``m`` in bf16)."""
        q = self.mf.q41(f"blk.{layer}.{name}.weight")
        return q4nx_from_q41(q.d, q.m, q.q)

    def bf16_weight(self, layer: int, name: str) -> np.ndarray:
        """The dequantized Q4NX weight codes ``(out, in)`` of ``blk.layer.name`` (cached)."""
        key = (layer, name)
        if key not in self._weights:
            self._weights[key] = dequantize(self.q4nx(layer, name))
        return self._weights[key]

    @staticmethod
    def activation(x: np.ndarray) -> np.ndarray:
        """The bf16 codes (RNE) of the float activation ``x`` that FusedDQP multiplies."""
        return from_float(np.asarray(x, np.float64), BF16)

    def project(self, layer: int, name: str, x: np.ndarray) -> np.ndarray:
        y = to_float(gemm(self.bf16_weight(layer, name), self.activation(x)), FP32)
        return y.astype(self.dtype)

    budgets = budgets("bf16", "bf16", keep_q="bf16")

    def keep(self, layer: int, kind: str, x: np.ndarray) -> np.ndarray:
        if kind in ("q", "k", "v"):
            return from_float(np.asarray(x, np.float64), BF16)
        return x

    def restore(self, layer: int, kind: str, stored) -> np.ndarray:
        return to_float(stored, BF16).astype(self.dtype) if kind in ("q", "k", "v") else stored

    def attention(self, layer: int, q, k, v, first: int) -> np.ndarray:
        out = attend_many(q, k, v, first, chunk=self.chunk)
        return to_float(out, BF16).astype(self.dtype)
