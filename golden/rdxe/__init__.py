"""Bit-exact and float64 models of the rDXE decoder execution tile (issue 5): INT8 GEMV on vector
-accumulate cores (VACs), vector recompute (VRC) fusing RMSNorm and softmax into the GEMV, the iWuR
KV cache with GQA, and cycle formulas for the tile.

Source: Tao, Luo et al., "An 11.16 uJ/token Edge SLM Decoder Accelerator with Scalable Ring-based
Configuration for Token-level Pipelining in 16nm FinFET" (rDXE), Sec. III (Figs. 2, 4, 5).
docs/rdxe_models.md is the contract of this layer: formats, the operation orders, the storage
layouts, the cycle model and the error bounds with their measured worst cases.

Datapath (every step is one of the shared units' golden twins, :mod:`golden.arith`):

* **VAC**: ``lanes`` INT8 x INT8 products summed by the integer lane tree (``IntDot``) into an
  INT32 accumulator, one lanes-wide chunk per cycle (integer, exact, order-free). Output ``o`` of a
  GEMV runs on VAC ``o mod N`` in pass ``o // N``.
* **PPU**: ``out = requantize(acc, M[o], shift[o])`` to INT8 (per-output multiplier and shift).
* **RC factor**: a 25-bit pair ``(m, s)``: an unsigned ``rc_bits - 6`` = 19-bit significand ``m``
  (``2**18 <= m < 2**19``, or 0) and the requantizer's 6-bit shift ``s``; its value is
  ``m * 2**-s = rc * 2**F`` with ``F`` fraction bits kept for the next stage. :func:`to_rc`
  converts an fp32 factor (significand rounded half to even by the requantizer).
* **RCU**: ``y = requantize(acc, m, s, out_bits=32, clamp='full')`` = ``RNE(acc * rc * 2**F)``,
  then the PPU. Two roundings, both in a shared ``Requantizer``.
* **RMSNorm (VRC)**: ``S = sum x**2`` (IntDot, exact); ``v = fmac(fp32(S), fp32(1/K), eps_q)``;
  ``rc = rsqrt(v)``; ``F = norm_frac``. Fused: ``out = PPU(RCU(W_g . x))``. Sequential:
  ``x_n = requantize(x, m, s)`` (INT8, the same RC), ``out = PPU(W_g . x_n)``.
* **Softmax (VRC)**: INT8 scores ``s``, running max ``mx``; ``e_t = exp2(fp32(s_t - mx) * c)``
  (``c`` = fp32 log2 scale); ``p_t = RNE(127 * e_t)`` (INT8 activations in [0, 127], ``exp(0)``
  -> 127); ``rc = reciprocal(fp32(sum p))``; ``F = prob_frac``. Fused: ``out = PPU(RCU(p . V))``.
  Sequential: ``prob = requantize(p, m, s)`` (INT8), ``out = PPU(prob . V)``.
* **iWuR KV cache**: token ``t``'s key goes (over GBUS, byte enables) to VAC ``t mod N``, one key
  per ``head_dim / lanes`` rows; value channel ``e`` stays in VAC ``e mod N``, rows of ``lanes``
  tokens (written column by column). Baseline: the same owners, K column-wise, V row-wise.

The golden models follow the specification, not the RTL pipeline. The float64 references
(``*_reference``) are written independently and naively; the ``*_bound`` functions are the stated
bounds. ``python -m golden.rdxe`` measures the worst cases and prints the cycle table.

Every model takes the hardware's own parameters, checked once on construction: a tile's
``hdl.rdxe.DxtConfig``, one VAC's ``hdl.rdxe.VacConfig`` for a VAC's own steps (both re-exported
here). The package holds one job per module: :mod:`~golden.rdxe.params` (the constants and
argument checks), :mod:`~golden.rdxe.model` (the bit-exact model), :mod:`~golden.rdxe.act` (the
VE's activations: SwiGLU's SiLU and GELU), :mod:`~golden.rdxe.kv` (the KV
cache layouts), :mod:`~golden.rdxe.reference` (the float64 references and error bounds),
:mod:`~golden.rdxe.cycles` (the cycle model) and :mod:`~golden.rdxe.survey` (the measurement).
This module re-exports their public names.
"""

from ..arith.func import EXP2_ERROR, RECIP_ERROR, RSQRT_ERROR
from .act import (ACT_CODE_ERROR, BETA_GELU, BETA_SILU, GELU_FORM_GAP, ActTrace, act, act_codes,
                  act_constants, act_reference, act_reference_codes, act_scale, act_value_bound,
                  act_values, gelu, gelu_form_gap, silu_glu)
from .cycles import (Cycles, Latency, ReadCycles, command_cycles, gemv_cycles, kv_read_cycles,
                     kv_write_cycles, layout_cycles, qk_cycles, rmsnorm_gemv_cycles,
                     softmax_pv_cycles, word_cycles)
from .kv import KVImage, kv_address, kv_capacity, kv_groups, kv_image, kv_read
from .model import (RCFactor, RmsNormTrace, SoftmaxTrace, accumulate, attention, attention_cached,
                    eps_code, gemv, log2_scale, ppu, ppu_code, qk_scores, rcu, rms_rc, rmsnorm_gemv,
                    rmsnorm_gemv_trace, softmax_activations, softmax_pv, softmax_pv_trace,
                    softmax_rc, to_rc, wmem_image)
from .params import (GBUS_BYTES, LAYOUTS, MAX_INPUTS, MAX_TOKENS, MODES, P_ONE, SHIFT_MAX,
                     DxtConfig, VacConfig)
from .reference import (gemv_reference, mode_gap_bound, rmsnorm_error_bound, rmsnorm_gemv_reference,
                        softmax_error_bound, softmax_pv_reference)

__all__ = [
    "LAYOUTS", "MODES", "P_ONE", "SHIFT_MAX", "GBUS_BYTES", "MAX_INPUTS", "MAX_TOKENS",
    "EXP2_ERROR", "RECIP_ERROR", "RSQRT_ERROR",
    "DxtConfig", "VacConfig", "RCFactor", "RmsNormTrace", "SoftmaxTrace", "KVImage", "Latency",
    "Cycles", "ReadCycles",
    "accumulate", "ppu", "ppu_code", "to_rc", "rcu", "wmem_image", "gemv",
    "eps_code", "rms_rc", "rmsnorm_gemv", "rmsnorm_gemv_trace",
    "log2_scale", "softmax_activations", "softmax_rc", "softmax_pv", "softmax_pv_trace",
    "kv_groups", "kv_address", "kv_capacity", "kv_image", "kv_read",
    "qk_scores", "attention", "attention_cached",
    "gemv_reference", "rmsnorm_gemv_reference", "softmax_pv_reference",
    "rmsnorm_error_bound", "softmax_error_bound", "mode_gap_bound",
    "gemv_cycles", "rmsnorm_gemv_cycles", "qk_cycles", "softmax_pv_cycles", "command_cycles", "word_cycles",
    "kv_read_cycles", "kv_write_cycles", "layout_cycles",
    "BETA_SILU", "BETA_GELU", "ACT_CODE_ERROR", "GELU_FORM_GAP", "ActTrace", "act_constants",
    "act_values", "act_scale", "act_codes", "act", "silu_glu", "gelu", "act_reference",
    "act_reference_codes", "act_value_bound", "gelu_form_gap",
]
