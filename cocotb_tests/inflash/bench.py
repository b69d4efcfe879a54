"""KVNAND benchmark: the page period against ``max(tR, transfer, compute)`` over ``F`` and ``tR``,
PE and flash-read utilization of a LLaMA-7B layer slice in each mode, and page reads of
attention at 1K and 10K tokens under the page-level and the naive mapping.

Everything is measured on the RTL under the cocotb testbench (``cocotb_tests/inflash/tb.py``)
against the behavioural plane, at the paper's plane (4096-byte pages, ``W`` = 4, 400 MHz):

* **Period sweep.** The ``full_rate`` test's fp16 GEMV (12 pages of one 2048-column row each,
  no idle cycles, no back-pressure) at ``F`` = 1, 2, 4, 16 and ``tR`` = 1, 2, 4 us (the plane's
  ``tR`` is set through :data:`~cocotb_tests.inflash.env.ENV_TR_US`: the RTL never counts it,
  so the design is built once per ``F``).
* **Layer slice.** The ``full_rate`` test on 24 rows of 4096 columns (``d_model`` of LLaMA-7B)
  in every mode at the ``default`` (``F`` = 2) and ``paper`` (``F`` = 16) presets: PE
  utilization (beats over cycles) and flash-read utilization (``n tR`` over cycles); beside
  them ``golden.inflash.gemv_timing`` of the whole 4096 x 4096 layer.
* **GQA compute.** The ``attention_reads`` test's Logit with ``G`` = 8 query heads per KV head
  (``d`` = 128, page-level, 160 tokens) at ``F`` = 2, 4, 16 and the paper's ``tR``: where the
  compute of a page (``16 G ceil(d / F)``) stops being hidden under ``tR``.
* **Attention reads.** The ``attention_reads`` test: one Logit (MHA, fp16, ``d`` = 128) of a
  head group at 1024 and 10000 tokens, page-level and naive, the pages the plane served and
  its per-block counters against ``golden.inflash.kv_pages_read`` and ``block_reads``. The
  plane's ``tR`` is cut to one cycle for these runs (10000 naive reads at 1600 cycles would take
  16 M cycles); the read counts do not depend on it, and the time at the paper's ``tR`` is
  ``attention_timing``'s.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from golden import inflash as golden
from memwall import registry

from ..launcher import run_block
from ..tb import ENV_METRICS
from .env import ENV_TR_US
from .tb import ENV_ATTENTION, ENV_COLS, ENV_MODES, ENV_ROWS

__all__ = ["SWEEP_F", "SWEEP_TR_US", "SLICE", "GQA_F", "READ_TOKENS", "extra"]

#: FMAC counts and read times of the period sweep.
SWEEP_F = (1, 2, 4, 16)
SWEEP_TR_US = (1.0, 2.0, 4.0)
#: Rows and columns of the layer slice.
SLICE = (24, 4096)
#: Sequence lengths of the attention read counts.
READ_TOKENS = (1024, 10000)
#: The attention layout: LLaMA2-7B's head (d = 128, fp16), 8 layers with one KV head on the
#: plane (head parallelism), so S = 16 = T_p: one token per naive page, as for every real model.
READ_LAYOUT = {"layers": 8, "kv_heads": 1, "head_dim": 128}
#: A one-cycle tR for the read-count runs (0.0025 us at 400 MHz).
FAST_TR_US = 0.0025
#: The GQA compute sweep: FMAC counts, query heads per KV head, tokens (10 page-level pages).
GQA_F = (2, 4, 16)
GQA_GROUP = 8
GQA_TOKENS = 160


def _run(params, simulator, name, out_dir, env, test="full_rate") -> dict:
    metrics = (out_dir / f"inflash-{name}.json").resolve()
    metrics.unlink(missing_ok=True)
    run_block("inflash", params, simulator, testcase=test,
              extra_env={ENV_METRICS: str(metrics), **env})
    return json.loads(metrics.read_text())[test]


def _sweep(out_dir, simulator, progress) -> tuple[list[dict], str]:
    block = registry.get("inflash")
    rows = []
    for F in SWEEP_F:
        params = block.parameters("default", {"fmacs": str(F)})
        for tR in SWEEP_TR_US:
            progress(f"inflash: period sweep F={F} tR={tR} us under {simulator}")
            got = _run(params, simulator, f"sweep-F{F}-tR{tR}", out_dir,
                       {ENV_MODES: "fp16", ENV_TR_US: str(tR)})
            f = {k[len("fp16_"):]: v for k, v in got.items() if k.startswith("fp16_")}
            bound = max(f["tR"], f["transfer"], f["compute"])
            stage = max(f["transfer"], f["compute"])
            rows.append({"F": F, "tR_us": tR, **f, "bound": bound, "stage": stage})
    lines = ["## Page period against max(tR, transfer, compute)", "",
             "fp16 GEMV, 12 pages of 4096 bytes (one 2048-column row each), W = 4, no idle "
             "cycles, no back-pressure. Period: the mean from the second page's start to the "
             "last's. Excess: total cycles (first read to last y) less n x period; the model's "
             "is the pipeline's fill and drain, min(tR, P) + pe_latency with P = max(transfer, "
             "compute).", "",
             "| F | tR (cycles) | transfer | compute | bound | period | off bound | pages | total "
             "| n x period | excess | min(tR, P) + pe_latency |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        off = (r["period"] - r["bound"]) / r["bound"]
        n_period = r["pages"] * r["period"]
        lines.append(f"| {r['F']} | {r['tR']} | {r['transfer']} | {r['compute']} | "
                     f"{r['bound']} | {r['period']:g} | {100 * off:+.2f} % | {r['pages']} | "
                     f"{r['total']} | {n_period:g} | {r['total'] - n_period:g} | "
                     f"{min(r['tR'], r['stage']) + r['pe_latency']} |")
    hidden = sorted({r["F"] for r in rows if r["compute"] <= r["tR"] and r["tR_us"] == 4.0})
    lines += ["", f"At tR = 4 us (1600 cycles) compute is hidden (compute <= tR) from F = "
              f"{hidden[0] if hidden else '-'} on.", ""]
    return rows, "\n".join(lines)


def _layer_slice(out_dir, simulator, progress) -> tuple[list[dict], str]:
    block = registry.get("inflash")
    rows = []
    n_rows, cols = SLICE
    for preset in ("default", "paper"):
        params = block.parameters(preset)
        progress(f"inflash: layer slice {n_rows} x {cols} at {preset} under {simulator}")
        got = _run(params, simulator, f"slice-{preset}", out_dir,
                   {ENV_ROWS: str(n_rows), ENV_COLS: str(cols)})
        geometry = params.geometry()
        for mode in golden.MODES:
            f = {k[len(mode) + 1:]: v for k, v in got.items() if k.startswith(mode + "_")}
            beats = int(golden.beats_per_page(mode, n_rows, cols, fmacs=params.fmacs,
                                              group_size=params.group_size,
                                              page_bytes=params.page_bytes).sum())
            full = golden.gemv_timing(geometry, mode, cols, cols, group_size=params.group_size,
                                      pe_latency=f["pe_latency"])
            full_beats = int(golden.beats_per_page(mode, cols, cols, fmacs=params.fmacs,
                                                   group_size=params.group_size,
                                                   page_bytes=params.page_bytes).sum())
            rows.append({"preset": preset, "F": params.fmacs, "mode": mode, **f,
                         "beats": beats, "pe_util": beats / f["total"],
                         "read_util": f["pages"] * f["tR"] / f["total"],
                         "full_pages": full.pages, "full_total": full.total,
                         "full_pe_util": full_beats / full.total,
                         "full_read_util": full.pages * full.tR / full.total})
    lines = [f"## LLaMA-7B layer slice ({n_rows} x {cols})", "",
             "One plane, 4096-byte pages, tR = 1600 cycles, W = 4. PE utilization: beats (one "
             "per cycle at F lanes) over total cycles; flash-read utilization: n tR over total "
             "cycles. The whole 4096 x 4096 layer (golden.inflash.gemv_timing with the RTL's "
             "pe_latency; the RTL meets it cycle for cycle on the slice) has the same period "
             "per page and amortizes the fill (one tR) and the drain over 170 times as many "
             "rows: its utilizations are the steady state's.", "",
             "| preset | F | mode | pages | period | total | PE util | read util "
             "| layer pages | layer cycles | layer PE util | layer read util |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['F']} | {r['mode']} | {r['pages']} | "
                     f"{r['period']:g} | {r['total']} | {r['pe_util']:.3f} | "
                     f"{r['read_util']:.3f} | {r['full_pages']} | {r['full_total']} | "
                     f"{r['full_pe_util']:.3f} | {r['full_read_util']:.3f} |")
    return rows, "\n".join(lines) + "\n"


def _gqa(out_dir, simulator, progress) -> tuple[list[dict], str]:
    block = registry.get("inflash")
    rows = []
    for F in GQA_F:
        params = block.parameters("default", {"fmacs": str(F)})
        progress(f"inflash: GQA Logit G={GQA_GROUP} F={F} under {simulator}")
        spec = {"op": "logit", "tokens": GQA_TOKENS, "group": GQA_GROUP, "mapping": "page",
                **READ_LAYOUT}
        got = _run(params, simulator, f"gqa-F{F}", out_dir,
                   {ENV_ATTENTION: json.dumps(spec)}, test="attention_reads")
        rows.append({"F": F, **got})
    lines = ["## Attention compute against tR (GQA)", "",
             f"Logit of one KV head for G = {GQA_GROUP} query heads, d = 128, fp16, "
             f"{GQA_TOKENS} tokens on page-level pages (16 tokens a page), tR = 1600 cycles, "
             "no idle cycles. Compute per page: 16 G ceil(d / F). Period: the mean page "
             "period from the second page on; total against attention_timing.", "",
             "| F | transfer | compute | bound | period | total | model total |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['F']} | {r['transfer']} | {r['compute']} | "
                     f"{max(r['tR'], r['transfer'], r['compute'])} | {r['period']:g} | "
                     f"{r['total']} | {r['model_total']} |")
    hidden = [r["F"] for r in rows if r["compute"] <= r["tR"]]
    plane = block.parameters("default").geometry()
    layout = golden.KVLayout(**READ_LAYOUT, page_bytes=plane.page_bytes)

    def smallest(group):
        """The smallest power-of-two F whose page compute attention_timing hides under tR."""
        for f in (1, 2, 4, 8, 16):
            t = golden.attention_timing(dataclasses.replace(plane, fmacs=f), layout,
                                        layout.tokens_per_page, group=group)
            if t.compute.max() <= t.tR:
                return f
        return None

    lines += ["", f"Measured: compute is hidden under tR from F = "
              f"{min(hidden) if hidden else '-'} of these on. attention_timing: the smallest "
              f"power of two that hides it is F = {smallest(GQA_GROUP)} for G = {GQA_GROUP} "
              f"(the paper's 16 for GQA) and F = {smallest(1)} for MHA, G = 1 (the paper's "
              "2).", ""]
    return rows, "\n".join(lines)


def _attention_reads(out_dir, simulator, progress) -> tuple[list[dict], str]:
    block = registry.get("inflash")
    params = block.parameters("default")
    plane = params.geometry()
    rows = []
    for tokens in READ_TOKENS:
        for mapping in golden.MAPPINGS:
            progress(f"inflash: attention reads T={tokens} {mapping} under {simulator}")
            spec = {"op": "logit", "tokens": tokens, "group": 1, "mapping": mapping,
                    **READ_LAYOUT}
            got = _run(params, simulator, f"reads-{tokens}-{mapping}", out_dir,
                       {ENV_ATTENTION: json.dumps(spec), ENV_TR_US: str(FAST_TR_US)},
                       test="attention_reads")
            layout = golden.KVLayout(**READ_LAYOUT, page_bytes=params.page_bytes,
                                     mapping=mapping)
            at_paper = golden.attention_timing(plane, layout, tokens)
            rows.append({"tokens": tokens, "mapping": mapping, **got,
                         "paper_cycles": at_paper.total,
                         "paper_ms": at_paper.total / plane.clk_mhz / 1000})
    lines = ["## Page reads of attention", "",
             "One Logit (MHA, G = 1) of one head group (layer 0, head 0), fp16, d = 128, "
             f"{READ_LAYOUT['layers']} layers with one KV head on the plane (S = 16 = T_p). "
             "Reads: pages the plane served (per-block counters equal to "
             "golden.inflash.block_reads); model: golden.inflash.kv_pages_read. The time at the "
             "paper's tR (1600 cycles) is attention_timing's; the simulation ran with a "
             "one-cycle tR, where the RTL's total equals attention_timing's at that tR "
             "(`match`).", "",
             "| tokens | mapping | reads | model | blocks touched | cycles (tR = 1) "
             f"| match | cycles at tR = {plane.tR_us:g} us | ms |",
             "|---:|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tokens']} | {r['mapping']} | {r['reads']} | {r['model_reads']} | "
                     f"{r['blocks']} | {r['total']} | {r['total'] == r['model_total']} | "
                     f"{r['paper_cycles']} | {r['paper_ms']:.2f} |")
    for tokens in READ_TOKENS:
        page, naive = (next(r for r in rows if r["tokens"] == tokens and r["mapping"] == m)
                       for m in golden.MAPPINGS)
        lines.append(f"\nAt {tokens} tokens the naive mapping reads {naive['reads']} pages, "
                     f"{naive['reads'] / page['reads']:.0f} times the page-level mapping's "
                     f"{page['reads']}.")
    return rows, "\n".join(lines) + "\n"


def extra(out_dir: Path, simulator: str, progress: Callable[[str], None]) -> str:
    """Run the four benchmarks and return their Markdown sections (also written to JSON)."""
    sections, results = [], {}
    for name, bench in (("sweep", _sweep), ("slice", _layer_slice), ("gqa", _gqa),
                        ("reads", _attention_reads)):
        rows, text = bench(out_dir, simulator, progress)
        results[name] = rows
        sections.append(text)
    (out_dir / "inflash-extra.json").write_text(json.dumps(results, indent=2) + "\n")
    return "\n" + "\n".join(sections)
