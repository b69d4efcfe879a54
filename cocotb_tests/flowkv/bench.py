"""FlowKV benchmark: stream rates of one pair against the ideal ``d / P``, and the cycle model.

For the ``default`` pair with GQA (``G = 2``) and without (``G = 1``), at L = 256, 1K, 4K and 32K,
the ``full_rate`` cocotb test (one decode step at the last position, no idle cycles, no
back-pressure) measures cycles per K and V row, the fill (command to the first value beat), the
drain (last value beat to the last output beat), the total, and the achieved fraction of the K/V
stream bandwidth (2 beats per cycle). Beside each total: :func:`sim.flowkv.step_cycles`. Then the
decode throughput of the array at the paper's Gemma3 shapes from :func:`sim.flowkv.table`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from hdl.flowkv import FlowKVConfig, ScoreTile, ValueTile
from memwall import registry
from sim import flowkv as model

from ..launcher import run_block
from ..tb import ENV_METRICS
from .tb import ENV_LENGTH

__all__ = ["LENGTHS", "GROUPS", "pair_timing", "extra"]

#: Sequence lengths of the rate table.
LENGTHS = (256, 1024, 4096, 32768)
#: Query heads per KV head: GQA and MHA.
GROUPS = (2, 1)


def pair_timing(cfg) -> model.PairTiming:
    return model.PairTiming(head_dim=cfg.head_dim, lanes=cfg.lanes, group=cfg.group,
                            chunk=cfg.chunk, score=ScoreTile.score_latency_of(cfg),
                            item=ScoreTile.item_latency_of(cfg),
                            loop=ValueTile.loop_latency_of(cfg))


def extra(out_dir: Path, simulator: str, progress: Callable[[str], None]) -> str:
    """Run the rate sweep and return its Markdown section (also written to JSON)."""
    block = registry.get("flowkv")
    rows = []
    for group in GROUPS:
        params = block.parameters("default", {"group": str(group),
                                              "max_tokens": str(max(LENGTHS))})
        cfg = FlowKVConfig(**params.pair_args())
        for length in LENGTHS:
            progress(f"flowkv: full_rate G={group} L={length} under {simulator}")
            metrics = (out_dir / f"flowkv-rate-G{group}-L{length}.json").resolve()
            metrics.unlink(missing_ok=True)
            run_block("flowkv", params, simulator, testcase="full_rate",
                      extra_env={ENV_METRICS: str(metrics), ENV_LENGTH: str(length)})
            got = json.loads(metrics.read_text())["full_rate"]
            predicted = model.step_cycles(pair_timing(cfg), length)
            rows.append({"group": group, "length": length, **got,
                         "model_total": predicted["total"]})
    (out_dir / "flowkv-rates.json").write_text(json.dumps(rows, indent=2) + "\n")
    p = rows[0]
    lines = ["", "## Stream rates of one pair", "",
             f"The `default` pair (d = {block.parameters('default').head_dim}, "
             f"P = {block.parameters('default').lanes}, L_c = "
             f"{block.parameters('default').chunk}) with max_tokens raised from "
             f"{block.parameters('default').max_tokens} to {max(LENGTHS)}, one decode step "
             f"at p = L - 1, {simulator}, no idle cycles, no back-pressure. Ideal: "
             f"d / P = {p['ideal_cycles_per_row']} cycles per row on each stream. Bandwidth: "
             "K and V beats over the step's total cycles, of 2 per cycle. Model: "
             "`sim.flowkv.step_cycles`.", "",
             "| G | L | K cycles/row | V cycles/row | vs ideal | fill | drain | total | model "
             "| bandwidth |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        worst = max(r["k_cycles_per_row"], r["v_cycles_per_row"]) / r["ideal_cycles_per_row"]
        lines.append(f"| {r['group']} | {r['length']} | {r['k_cycles_per_row']:.3f} | "
                     f"{r['v_cycles_per_row']:.3f} | {100 * (worst - 1):+.2f}% | {r['fill']} | "
                     f"{r['drain']} | {r['total']} | {r['model_total']} | "
                     f"{100 * r['bandwidth']:.1f}% |")
    lines += ["", "## Decode throughput of the array (cycle model)", "", model.table(), ""]
    return "\n".join(lines) + "\n"
