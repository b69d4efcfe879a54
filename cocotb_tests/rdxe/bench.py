"""rDXE benchmark sections: MAC utilization, fused against sequential VRC, iWuR against the
baseline KV layout.

Measured: the ``default`` DXT (``rdxe-dxt``) in simulation (``full_rate`` and ``measure`` of
cocotb_tests/rdxe/dxt_tb.py, no idle cycles, no back-pressure), every figure next to
``golden.rdxe``'s cycle model, which must give the same cycle count (the tests assert it). The
model then gives the figures at the paper's tile (16 VACs of 16 lanes) and layer shapes, which
are too large to simulate in a benchmark's time: OPT-350M-like (d_model 1024) and the paper's MT5
layer (d_model 512, 6 heads, d_ffn 1024), mapped onto a DXE of 8 DXTs as ``sim.rdxe.layer_cycles``
maps them. The baseline KV layout is a model only (``golden.rdxe.layout_cycles``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from golden import rdxe as golden
from memwall import registry
from sim import rdxe as ring

from ..launcher import run_block
from ..tb import ENV_METRICS
from .dxt_tb import ENV_GEMV, ENV_OP

__all__ = ["extra", "GEMVS", "ATTENTION", "PAPER"]

#: GEMVs measured on the default tile: (label, M, K); each fills the 1024 WMEM rows.
GEMVS = (("d_model 1024 input", 16, 1024), ("d_model 512 input", 32, 512))
#: Tokens of the P.V measured on the default tile (its KV group holds 256).
ATTENTION = (64, 256)
#: The paper's figures (Sec. III-B, III-C).
PAPER = {"nonlinear": 4.66, "end_to_end": 1.31, "iwur": (1.36, 1.54)}
#: The paper's DXT and the DXE's tile count (sim.rdxe).
PAPER_TILE = golden.DxtConfig()
DXTS = ring.DXTS_PER_DXE


def _run(block, params, simulator, out_dir, name, env) -> dict:
    metrics = (out_dir / f"rdxe-{name}.json").resolve()
    metrics.unlink(missing_ok=True)
    run_block(block, params, simulator, testcase=name.split("-")[0],
              extra_env={ENV_METRICS: str(metrics), **env})
    return json.loads(metrics.read_text())[name.split("-")[0]]


def _measure(params, simulator, out_dir, progress, spec: str) -> dict:
    progress(f"rdxe-dxt: measure {spec} under {simulator}")
    tag = "measure-" + spec.replace(",", "_")
    return _run("rdxe-dxt", params, simulator, out_dir, tag, {ENV_OP: spec})


def extra(out_dir: Path, simulator: str, progress: Callable[[str], None]) -> str:
    """Run the measurements and return the Markdown sections (also written to JSON)."""
    block = registry.get("rdxe-dxt")
    params = block.parameters("default")
    results = {"gemv": [], "attention": [], "stream": None}
    lines = ["", "## rDXE: measured on the default DXT", "",
             f"`rdxe-dxt` default ({params.vacs} VACs of {params.lanes} lanes, d = "
             f"{params.head_dim}), {simulator}, no idle cycles, no back-pressure. Cycles from a "
             "command taken to its response, alone in the tile; `model` is "
             "`golden.rdxe`'s cycle model (decode + lead + done + response), which the `measure` "
             "test asserts equal.", ""]

    # MAC utilization: back-to-back GEMVs filling the WMEM.
    M, K, count = 64, 256, 4
    progress(f"rdxe-dxt: full_rate {count} GEMVs {M} x {K} under {simulator}")
    stream = _run("rdxe-dxt", params, simulator, out_dir, "full_rate",
                  {ENV_GEMV: f"{M},{K},{count}"})
    results["stream"] = stream
    lines += [f"**MAC utilization.** {count} GEMVs of {M} x {K} back to back: "
              f"{stream['cycles']} cycles from the first token chunk to the last result word "
              f"(model {stream['model']}), {100 * stream['utilization']:.2f} % of "
              f"{params.vacs} x {params.lanes} lanes x cycles. One VAC alone: the `full_rate` "
              "row above (one chunk per cycle: every lane busy every cycle).", ""]

    lines += ["| GEMV (M x K) | plain | fused | sequential | model (p / f / s) | fused vs plain "
              "| sequential vs fused |", "|---|---:|---:|---:|---|---:|---:|"]
    for label, M, K in GEMVS:
        got = {mode: _measure(params, simulator, out_dir, progress,
                              f"{'gemv' if mode == 'plain' else 'rmsnorm'},{mode},{M},{K}")
               for mode in ("plain", "fused", "sequential")}
        results["gemv"].append({"M": M, "K": K, **got})
        c = {k: v["cycles"] for k, v in got.items()}
        lines.append(f"| {label}: {M} x {K} | {c['plain']} | {c['fused']} | {c['sequential']} | "
                     f"{got['plain']['model']} / {got['fused']['model']} / "
                     f"{got['sequential']['model']} | {100 * (c['fused'] / c['plain'] - 1):+.1f} %"
                     f" | {c['sequential'] / c['fused']:.2f}x |")
    lines += ["", "| softmax-P.V, T | Q.K^T | fused | sequential | model (qk / f / s) | "
              "sequential vs fused |", "|---:|---:|---:|---:|---|---:|"]
    for T in ATTENTION:
        qk = _measure(params, simulator, out_dir, progress, f"qk,-,{T},0")
        got = {mode: _measure(params, simulator, out_dir, progress, f"pv,{mode},{T},0")
               for mode in ("fused", "sequential")}
        results["attention"].append({"T": T, "qk": qk, **got})
        lines.append(f"| {T} | {qk['cycles']} | {got['fused']['cycles']} | "
                     f"{got['sequential']['cycles']} | {qk['model']} / {got['fused']['model']} / "
                     f"{got['sequential']['model']} | "
                     f"{got['sequential']['cycles'] / got['fused']['cycles']:.2f}x |")
    (out_dir / "rdxe-measured.json").write_text(json.dumps(results, indent=2) + "\n")
    lines += ["", paper_tables(), ""]
    return "\n".join(lines) + "\n"


def _vrc(model, T: int):
    """Per-DXT cycles of a layer's VRC operations (``sim.rdxe.layer_cycles``' shapes) in both
    modes: RMSNorm-GEMVs (QKV, FFN up) and P.V."""
    h = -(-model.heads // DXTS)
    up = (2 if model.gated else 1) * model.ffn
    shapes = {"qkv": (3 * h * model.head_dim, model.d_model), "ffn_up": (-(-up // DXTS),
                                                                        model.d_model)}
    out = {}
    for op, (M, K) in shapes.items():
        out[op] = {mode: golden.rmsnorm_gemv_cycles(M, K, PAPER_TILE, mode=mode)
                   for mode in golden.MODES}
        out[op]["plain"] = golden.gemv_cycles(M, K, PAPER_TILE)
        out[op]["shape"] = (M, K)
    out["pv"] = {mode: golden.softmax_pv_cycles(T, PAPER_TILE, mode=mode)
                 for mode in golden.MODES}
    out["pv"]["heads"] = h
    return out


def paper_tables() -> str:
    """The cycle model at the paper's tile and layer shapes (the model the default tile's
    measurements validate)."""
    lines = ["## rDXE at the paper's tile (cycle model)", "",
             f"16 VACs of 16 lanes, d = 64 (`golden.rdxe.DxtConfig()`), one DXT of a DXE of "
             f"{DXTS}; shapes as `sim.rdxe.layer_cycles` maps a layer. The non-linear step: "
             "the cycles it adds to the plain GEMV (fused: the RC factor and the RCU; "
             "sequential: the sum, the factor, normalizing the token buffer, and refilling the "
             "tile). End to end: one whole layer at context T (`sim.rdxe.token_layer_cycles`, "
             "fused), and the same with the sequential RMSNorm-GEMVs and P.V.", "",
             "| layer op (M x K) | plain | fused | sequential | fused vs plain | non-linear step "
             "seq / fused | paper |", "|---|---:|---:|---:|---:|---:|---:|"]
    for model in (ring.OPT_350M, ring.MT5_SMALL):
        v = _vrc(model, 256)
        for op in ("qkv", "ffn_up"):
            c = v[op]
            step_f = c["fused"].total - c["plain"].total
            step_s = c["sequential"].total - c["plain"].total
            lines.append(f"| {model.name} {op} {c['shape'][0]} x {c['shape'][1]} | "
                         f"{c['plain'].total} | {c['fused'].total} | {c['sequential'].total} | "
                         f"{100 * step_f / c['plain'].total:+.2f} % | {step_s / step_f:.1f}x "
                         f"| up to {PAPER['nonlinear']}x |")
    lines += ["", "| layer, context T | fused layer | sequential layer | end to end | paper |",
              "|---|---:|---:|---:|---:|"]
    for model in (ring.OPT_350M, ring.MT5_SMALL):
        for T in (64, 256, 1024):
            fused = ring.token_layer_cycles(model, T, PAPER_TILE)["total"]
            v = _vrc(model, T)
            delta = sum(v[op]["sequential"].total - v[op]["fused"].total
                        for op in ("qkv", "ffn_up"))
            delta += v["pv"]["heads"] * (v["pv"]["sequential"].total - v["pv"]["fused"].total)
            lines.append(f"| {model.name}, T = {T} | {fused} | {fused + delta} | "
                         f"{(fused + delta) / fused:.3f}x | up to {PAPER['end_to_end']}x |")
    lines += ["", "**iWuR against the baseline layout** (K column-wise, V row-wise, each VAC "
              "with a staging buffer so that every row it reads is used in full: "
              "`golden.rdxe.kv_read_cycles`, `layout_cycles`). Per head at the paper's tile; "
              "the layer column swaps the baseline's Q.K^T and P.V into the fused layer.", "",
              "| T | Q.K^T iWuR / baseline | P.V iWuR / baseline | read-port use P.V iWuR / "
              "baseline | MT5 layer iWuR / baseline | layer speed-up | paper |",
              "|---:|---|---|---|---|---:|---:|"]
    for T in (64, 256, 1024):
        qk = [golden.layout_cycles(T, "qk", PAPER_TILE, lay) for lay in golden.LAYOUTS]
        pv = [golden.layout_cycles(T, "pv", PAPER_TILE, lay) for lay in golden.LAYOUTS]
        use = [golden.kv_read_cycles(T, "pv", PAPER_TILE, lay).utilization
               for lay in golden.LAYOUTS]
        h = -(-ring.MT5_SMALL.heads // DXTS)
        layer = ring.token_layer_cycles(ring.MT5_SMALL, T, PAPER_TILE)["total"]
        base = layer + h * (qk[1] - qk[0] + pv[1] - pv[0])
        lo, hi = PAPER["iwur"]
        lines.append(f"| {T} | {qk[0]} / {qk[1]} | {pv[0]} / {pv[1]} | {100 * use[0]:.0f} % / "
                     f"{100 * use[1]:.0f} % | {layer} / {base} | {base / layer:.3f}x | "
                     f"{lo}x to {hi}x |")
    return "\n".join(lines)
