"""Measurement behind docs/inflash_models.md: the worst errors against the references and the
bounds on random inputs, and the timing tables (``python -m golden.inflash``).
"""

from __future__ import annotations

import math

import numpy as np

from hdl.arith.format import FP16
from hdl.inflash.spec import FlashGeometry

from ..arith.float import from_float
from .cycles import attention_timing, gemv_timing
from .kv import KVLayout, kv_pages_read
from .model import attend, gemv, logit
from .params import MAPPINGS, MODES, _FLOAT, _KV_FLOAT, _values
from .reference import (_dequantized, attend_bound, attend_reference, gemv_bound, gemv_reference,
                        logit_bound, logit_reference)
from .weights import Weights


# --- measurement ----------------------------------------------------------------------------------


def _quantize(rng: np.random.Generator, rows: int, cols: int, group: int) -> Weights:
    """Random w4a16 weights: N(0, 1) rows quantized per group to ``s * q + o``, ``o`` the group
    minimum, ``s = (max - min) / 15``."""
    w = rng.standard_normal((rows, cols // group, group))
    lo, hi = w.min(2), w.max(2)
    s = from_float((hi - lo) / 15, FP16)
    o = from_float(lo, FP16)
    sv, ov = _values(s, FP16)[..., None], _values(o, FP16)[..., None]
    q = np.clip(np.rint((w - ov) / sv), 0, 15).astype(np.uint8).reshape(rows, cols)
    return Weights("w4a16", q, s, o, group)


def _survey(seeds: int = 4) -> None:
    """Print the worst errors against the references and the bounds on random inputs."""
    print("GEMV: W, x ~ N(0, 1) (w4a16: N(0, 1) quantized per group of 128)")
    print("mode   rows  cols   worst |y-ref|/A          worst |y-ref|/bound  bound/A")
    for mode in ("fp16", "bf16", "w4a16", "w8a8"):
        for rows, cols in ((64, 128), (64, 4096), (8, 16384), (4, 65536)):
            worst_a = worst_b = bound_a = 0.0
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                if mode == "w8a8":
                    w = Weights(mode, rng.integers(-128, 128, (rows, cols)))
                    x = rng.integers(-128, 128, cols)
                    got = gemv(w, x).astype(object)
                    assert (got == gemv_reference(w, x)).all()
                    continue
                fmt = _FLOAT[mode]
                if mode == "w4a16":
                    w = _quantize(rng, rows, cols, 128)
                else:
                    w = Weights(mode, from_float(rng.standard_normal((rows, cols)), fmt))
                x = from_float(rng.standard_normal(cols), fmt)
                got = _values_fp32(gemv(w, x))
                ref = gemv_reference(w, x)
                wabs = np.abs(_dequantized(w) if mode == "w4a16" else _values(w.codes, fmt))
                mass = wabs @ np.abs(_values(x, fmt))
                err = np.abs(got - ref)
                bound = gemv_bound(w, x)
                worst_a = max(worst_a, float((err / mass).max()))
                worst_b = max(worst_b, float((err / bound).max()))
                bound_a = max(bound_a, float((bound / mass).max()))
            if mode == "w8a8":
                print(f"{mode:<6} {rows:<5} {cols:<6} 0 (exact, {seeds} seeds)")
                continue
            print(f"{mode:<6} {rows:<5} {cols:<6} {worst_a:.3e} (2**{_log2(worst_a):6.2f})  "
                  f"{worst_b:.3e}            {bound_a:.3e}")
    print()
    print("Logit: q, K ~ N(0, 1); Attend: p = softmax of N(0, 1) scores (rounded), V ~ N(0, 1)")
    print("op      fmt   G  T      d    worst |err|/sum|ab|      worst |err|/bound  bound/sum|ab|")
    for op in ("logit", "attend"):
        for fmt_name in ("fp16", "bf16"):
            fmt = _KV_FLOAT[fmt_name]
            for heads, t, d in ((1, 16, 128), (4, 1000, 128), (8, 10000, 128), (1, 100000, 64)):
                if op == "logit" and t > 10000:
                    continue
                worst_a = worst_b = bound_a = 0.0
                for seed in range(max(1, seeds // (4 if t >= 10000 else 1))):
                    rng = np.random.default_rng(seed)
                    v = from_float(rng.standard_normal((t, d)), fmt)
                    if op == "logit":
                        q = from_float(rng.standard_normal((heads, d)), fmt)
                        got = _values_fp32(logit(q, v, fmt_name))
                        ref = logit_reference(q, v, fmt_name)
                        bound = logit_bound(q, v, fmt_name)
                        mass = np.abs(_values(q, fmt)) @ np.abs(_values(v, fmt)).T
                    else:
                        s = rng.standard_normal((heads, t))
                        e = np.exp(s - s.max(1, keepdims=True))
                        p = from_float(e / e.sum(1, keepdims=True), fmt)
                        got = _values_fp32(attend(p, v, fmt_name))
                        ref = attend_reference(p, v, fmt_name)
                        bound = attend_bound(p, v, fmt_name)
                        mass = np.abs(_values(p, fmt)) @ np.abs(_values(v, fmt))
                    err = np.abs(got - ref)
                    worst_a = max(worst_a, float((err / mass).max()))
                    worst_b = max(worst_b, float((err / bound).max()))
                    bound_a = max(bound_a, float((bound / mass).max()))
                print(f"{op:<7} {fmt_name:<5} {heads:<2} {t:<6} {d:<4} {worst_a:.3e} "
                      f"(2**{_log2(worst_a):6.2f})  {worst_b:.3e}          {bound_a:.3e}")


def _values_fp32(codes: np.ndarray) -> np.ndarray:
    return np.asarray(codes, dtype=np.uint32).view(np.float32).astype(np.float64)


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else -math.inf


def _timing_tables() -> None:
    """Print GEMV schedules of a 4096 x 4096 layer and the attention page reads and schedules."""
    print("GEMV 4096 x 4096 on one plane (tR 4 us = 1600 cycles, 4 B/cycle, 400 MHz, w4a16 g=128)")
    print("mode   F   pages  transfer  compute  period  total cycles  total ms  PE util  "
          "read util")
    for mode in MODES:
        for f in (1, 2, 4, 8, 16):
            t = gemv_timing(FlashGeometry(fmacs=f), mode, 4096, 4096)
            print(f"{mode:<6} {f:<3} {t.pages:<6} {int(t.transfer[0]):<9} {int(t.compute[0]):<8} "
                  f"{t.period:<7} {t.total:<13} {t.total / 400e3:<9.3f} "
                  f"{t.compute.sum() / t.total:<8.3f} {t.pages * t.tR / t.total:.3f}")
    print()
    print("Attention page reads of one head group (K; V is the same), fp16, d = 128")
    print("model                 T      page-level  naive   ratio")
    for name, layout in (("LLaMA2-7B (MHA 32x32)", KVLayout(32, 32, 128)),
                         ("LLaMA3-8B (GQA 32x8)", KVLayout(32, 8, 128))):
        for t in (1024, 10240, 10000, 100000):
            a, b = kv_pages_read(layout, t), kv_pages_read(layout.with_mapping("naive"), t)
            print(f"{name:<21} {t:<6} {a:<11} {b:<7} {b / a:.2f}")
    print()
    print("Logit schedule of one head group at T = 10000 (fp16, d = 128, 4 KB pages)")
    print("case                        F   mapping  pages  compute/page  period  total cycles")
    for name, layout, group in (("MHA (LLaMA2-7B)", KVLayout(32, 32, 128), 1),
                                ("GQA group 8 (LLaMA3-70B)", KVLayout(80, 8, 128), 8)):
        for f in (2, 16):
            for mapping in MAPPINGS:
                t = attention_timing(FlashGeometry(fmacs=f), layout.with_mapping(mapping),
                                     10000, group=group)
                print(f"{name:<27} {f:<3} {mapping:<8} {t.pages:<6} {int(t.compute[0]):<13} "
                      f"{t.period:<7} {t.total}")
