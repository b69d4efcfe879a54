"""SHIELD policy benchmark: throughput, refresh-lost cycles and refresh energy from the RTL counters.

Runs the ``policy_bench`` cocotb test (every row live, half KV and half QO, random reads at 100%
offered load, once per policy) and turns its refresh counters into per-row refresh rates: ``r_s``
refreshes per live row per cycle in segment ``s``. A stored KV word then costs ``9 r_std + 7 r_kv``
bit-refreshes per cycle and a QO word ``9 r_std + 7 r_qo``, so the refresh power of a workspace
with KV share ``f`` is ``P(f) = 9 r_std + 7 (f r_kv + (1 - f) r_qo)`` (rows refresh independently,
so this is exact in steady state). The workloads' shares come from :mod:`sim.shield`; the same
shares go through the paper's Eqs. 4 to 9 (:func:`golden.edram.policy_power`) for comparison.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from golden import edram as golden
from memwall import registry
from sim.shield import PAPER, SCENARIOS, TRACE, workload_ratio

from ..launcher import run_block
from ..tb import ENV_METRICS

__all__ = ["BENCH_OVERRIDES", "policy_figures", "extra"]

#: The benchmarked controller: 64 rows of 4 words in 4 banks, at 4 MHz so T_rel is 4864 cycles;
#: the default preset's slack of 8 (the small preset's 4 is the least the controller allows).
BENCH_OVERRIDES = {"banks": "4", "rows": "16", "cols": "4", "clk_mhz": "4", "slack": "8"}


def policy_figures(runs: dict) -> dict[str, dict]:
    """Per policy: access rate, lost fraction and the per-row refresh rates of each segment."""
    out = {}
    for policy, run in runs.items():
        rates = {s: run["refreshes"][s] / (run["live_rows"][s] * run["cycles"])
                 for s in golden.SEGMENTS}
        out[policy] = {"per_cycle": run["accesses"] / run["cycles"],
                       "lost": run["lost_cycles"] / run["cycles"], "rates": rates}
    return out


def _power(rates: dict):
    bits_std, bits_mant = golden.STD_BITS, golden.MANT_BITS
    return lambda f: bits_std * rates["std"] + bits_mant * (f * rates["kv_mant"]
                                                            + (1 - f) * rates["qo_mant"])


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def extra(out_dir: Path, simulator: str, progress: Callable[[str], None]) -> str:
    """Run the policy benchmark and return its Markdown section (also written to JSON)."""
    params = registry.get("edram").parameters("small", BENCH_OVERRIDES)
    metrics = (out_dir / "edram-policy-metrics.json").resolve()
    metrics.unlink(missing_ok=True)
    progress(f"edram: policy benchmark under {simulator} (three policies, 100% load)")
    run_block("edram", params, simulator, testcase="policy_bench",
              extra_env={ENV_METRICS: str(metrics), "MEMWALL_EDRAM_BENCH": "1"})
    measured = json.loads(metrics.read_text())["policy_bench"]
    figures = policy_figures(measured["runs"])
    clk = params.clk_mhz
    lines = ["", "## Refresh policies (RTL counters)", "",
             f"`edram` at `small` with {BENCH_OVERRIDES} ({params.banks * params.rows} rows of "
             f"{params.cols} words, {clk} MHz, slack {params.slack}), every row live (half KV, "
             f"half QO), random reads at 100% offered load for "
             f"{measured['runs']['shield']['cycles']} cycles per policy, {simulator}.", ""]
    rows = []
    for policy, fig in figures.items():
        per_ms = {s: f"{fig['rates'][s] * clk * 1000:.2f}" for s in golden.SEGMENTS}
        rows.append([policy, f"{fig['per_cycle']:.4f}", f"{100 * fig['lost']:.2f} %",
                     per_ms["std"], per_ms["kv_mant"], per_ms["qo_mant"]])
    lines += _table(["policy", "accesses/cycle", "cycles lost to refresh",
                     "std refreshes/row/ms", "kv_mant", "qo_mant"], rows)
    lines += ["", "Refresh energy against the standard baseline, from the RTL's rates (`RTL`) and "
              "from Eqs. 4 to 9 at the same KV shares (`Eq.`), leakage excluded. Workload shares "
              "from `sim/shield.py` (Qwen3-8B dimensions; the token counts are assumptions, the "
              "paper gives none).", ""]
    p_rtl = {policy: _power(fig["rates"]) for policy, fig in figures.items()}
    rows, results = [], {}
    for workload in (*SCENARIOS, TRACE):
        base_rtl = workload_ratio(p_rtl["standard"], workload)
        base_eq = workload_ratio(lambda f: golden.policy_power("standard", f), workload)
        entry = {}
        for policy in ("shield", "kelle"):
            rtl = base_rtl / workload_ratio(p_rtl[policy], workload)
            eq = base_eq / workload_ratio(lambda f, p=policy: golden.policy_power(p, f), workload)
            entry[policy] = {"gain_rtl": rtl, "gain_eq": eq, "reduction_rtl": 1 - 1 / rtl,
                             "reduction_eq": 1 - 1 / eq}
        results[workload.name] = entry
        s, k = entry["shield"], entry["kelle"]
        rows.append([f"{workload.name} ({workload.prompt}+{workload.generate})",
                     f"{s['gain_rtl']:.3f}x ({100 * s['reduction_rtl']:.1f} %)",
                     f"{s['gain_eq']:.3f}x ({100 * s['reduction_eq']:.1f} %)",
                     f"{k['gain_rtl']:.3f}x", f"{k['gain_eq']:.3f}x"])
    lines += _table(["workload", "SHIELD RTL", "SHIELD Eq.", "Kelle-like RTL", "Kelle-like Eq."],
                    rows)
    lines += ["", f"Paper: SHIELD cuts refresh energy by {100 * PAPER['reduction']:.0f} % with a "
              f"gain of about {PAPER['shield_gain']}x in every scenario; Kelle "
              f"{PAPER['kelle_gain'][0]}x to {PAPER['kelle_gain'][1]}x. The equations with the "
              f"paper's own T_std and T_rel give a larger cut (docs/edram_models.md, 'Gap to the "
              f"paper's headline numbers'); the RTL is within the sweep's rounding of them."]
    (out_dir / "edram-policies.json").write_text(json.dumps(
        {"parameters": params.as_dict(), "measured": measured, "figures": figures,
         "workloads": results, "paper": PAPER}, indent=2) + "\n")
    return "\n".join(lines) + "\n"
