"""Measurement behind docs/rdxe_models.md: the worst errors against the float64 references and
the bounds on random inputs, and the cycle table at the issue's sizes (``python -m golden.rdxe``).
"""

from __future__ import annotations

import math

import numpy as np

from .cycles import gemv_cycles, kv_read_cycles, qk_cycles, rmsnorm_gemv_cycles, softmax_pv_cycles
from .model import eps_code, log2_scale, rmsnorm_gemv, softmax_pv
from .params import LAYOUTS, MODES, DxtConfig
from .reference import (rmsnorm_error_bound, rmsnorm_gemv_reference, softmax_error_bound,
                        softmax_pv_reference)


# --- measurement ----------------------------------------------------------------------------------


def _worst(trials, lo: int, hi: int) -> tuple[float, float]:
    """The worst ``|out - clip(ref)|`` and the worst ratio of that error to its bound over
    ``(out, ref, bound)`` trials; ``lo``, ``hi``: the output range ``ref`` is clipped to."""
    worst = ratio = 0.0
    for out, ref, bound in trials:
        err = np.abs(out - np.clip(ref, lo, hi))
        worst, ratio = max(worst, err.max()), max(ratio, (err / bound).max())
    return worst, ratio


def _rmsnorm_trial(K: int, M: int, spread: int, mode: str, seed: int, params: DxtConfig):
    """One random RMSNorm-GEMV: the model's output, the reference and the bound."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-spread, spread + 1, K)
    W = rng.integers(-127, 128, (M, K))
    m = rng.integers(1 << 30, 1 << 31, M)
    # Outputs spread over the INT8 range: y ~ sqrt(K) * 127 * 2**F * m / 2**shift.
    shift = np.full(M, 31 + int(round(math.log2(math.sqrt(K) * 2 ** params.norm_frac
                                                * 127 / 40))))
    eps = eps_code(1e-5, 0.05)
    p = DxtConfig(wmem_depth=1 << 20)
    return (rmsnorm_gemv(W, x, m, shift, eps, p, mode=mode),
            rmsnorm_gemv_reference(W, x, m, shift, eps, p.norm_frac),
            rmsnorm_error_bound(W, x, m, shift, eps, p, mode=mode))


def _softmax_trial(T: int, step: float, kind: str, mode: str, seed: int, params: DxtConfig):
    """One random softmax-P.V of scores of ``kind``: the model's output, the reference and the
    bound."""
    rng = np.random.default_rng(seed)
    s = {"normal": np.clip(np.rint(rng.normal(0, 30, T)), -128, 127),
         "wide": rng.integers(-128, 128, T),
         "dominant": np.r_[127, rng.integers(-128, 20, T - 1)],
         "equal": np.full(T, 5)}[kind].astype(np.int64)
    V = rng.integers(-127, 128, (T, params.head_dim))
    scale = log2_scale(step)
    m = np.full(params.head_dim, 1 << 30)
    shift = 30 + params.prob_frac
    return (softmax_pv(s, V, scale, m, shift, params, mode=mode),
            softmax_pv_reference(s, V, scale, m, shift, params.prob_frac),
            softmax_error_bound(s, V, scale, m, shift, params, mode=mode))


def _survey(seeds: int = 40) -> None:
    """Print the worst errors against the float64 references and the bounds, and the cycle
    table at the issue's sizes."""
    params = DxtConfig()
    lo, hi = params.out_limits
    print("RMSNorm-GEMV: worst |out - clip(ref)| (output steps) and worst error / bound")
    for K, M, spread in ((64, 32, 127), (1024, 64, 127), (1024, 64, 8), (4096, 16, 127),
                         (1024, 64, 1)):
        for mode in MODES:
            worst, ratio = _worst((_rmsnorm_trial(K, M, spread, mode, seed, params)
                                   for seed in range(seeds)), lo, hi)
            print(f"  K={K:<5} M={M:<3} |x|<={spread:<3} {mode:<10} worst {worst:.4f}  "
                  f"error/bound {ratio:.4f}")
    print("softmax-P.V: worst |out - clip(ref)| (output steps) and worst error / bound")
    for T, step, kind in ((16, 0.1, "normal"), (256, 0.1, "normal"), (1024, 0.05, "normal"),
                          (1024, 0.02, "wide"), (1000, 0.1, "dominant"), (512, 0.1, "equal")):
        for mode in MODES:
            worst, ratio = _worst((_softmax_trial(T, step, kind, mode, seed, params)
                                   for seed in range(seeds // 4)), lo, hi)
            print(f"  T={T:<5} step={step:<5} {kind:<9} {mode:<10} worst {worst:.4f}  "
                  f"error/bound {ratio:.4f}")
    print("cycles (default DXT: 16 VACs x 16 lanes)")
    for name, M, K in (("OPT-350M QKV 3072x1024", 3072, 1024), ("OPT-350M FFN1 4096x1024", 4096,
                       1024), ("MT5 QKV 1152x512", 1152, 512), ("MT5 FFN1 1024x512", 1024, 512)):
        plain = gemv_cycles(M, K, params)
        fused = rmsnorm_gemv_cycles(M, K, params, mode="fused")
        seq = rmsnorm_gemv_cycles(M, K, params, mode="sequential")
        print(f"  {name:<24} plain {plain.total:>6} ({plain.utilization:.4f})  fused "
              f"{fused.total:>6} (+{fused.total / plain.total - 1:.4%})  sequential "
              f"{seq.total:>6} (x{seq.total / fused.total:.3f})")
    for T in (64, 256, 1024):
        fused = softmax_pv_cycles(T, params, mode="fused")
        seq = softmax_pv_cycles(T, params, mode="sequential")
        qk = qk_cycles(T, params)
        reads = {lay: (kv_read_cycles(T, "qk", params, lay).cycles +
                       kv_read_cycles(T, "pv", params, lay).cycles) for lay in LAYOUTS}
        print(f"  T={T:<5} Q.K^T {qk.total:>5}  P.V fused {fused.total:>5} sequential "
              f"{seq.total:>5} (x{seq.total / fused.total:.3f})  KV reads iWuR "
              f"{reads['iwur']:>5} baseline {reads['baseline']:>6}")
