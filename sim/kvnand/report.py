"""Reproduce the KVNAND paper's Figs. 12 to 15: run the sweeps and build the report.

The paper's figures are here only to be compared against; the model never reads them.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from golden.inflash import MODES, gemv_timing

from ..plots import pyplot
from .system import LLAMA2_7B, LLAMA31_70B, LLAMA31_8B, MODELS, Model, System, _GIBIT, _KIB
from .decode import Latency, Outcome, Point, evaluate

__all__ = [
    "PAPER_GEOMEAN", "PAPER_C_OVER_BASE1_128", "PAPER_C_OVER_D_128", "PAPER_D_OVER_BASE2_100K",
    "PAPER_MAX_SPEEDUP_10K", "PAPER_TPS_8B_100K", "PAPER_BEST_SPLIT_8B_1K", "PAPER_HG_RATIO_10K",
    "PAPER_FIG15_BEST_G2_100K", "PAPER_FIG15_CROSSOVER", "PAPER_PAGE_PERIOD_US", "PAPER_DIE_GBIT",
    "reproduce",
]


# --- the paper's results: only ever compared against, never used by the model ---------------------

#: Abstract and Sec. I: geomean speedup over the DRAM-equipped IFC design (Base-1) at
#: 128/1K/10K-token contexts. Sec. V-B attributes the 128-token figure to KVNAND-C.
PAPER_GEOMEAN = {128: 1.98, 1024: 1.94, 10240: 2.05}
#: Sec. V-B: "At 128 context length, it [KVNAND-C] achieves 1.98 and 1.05 geomean speedup over
#: Base-1 and KVNAND-D across all models".
PAPER_C_OVER_BASE1_128 = 1.98
PAPER_C_OVER_D_128 = 1.05
#: Sec. V-B: KVNAND-D over Base-2 at a 100K-token context (of the five models, ours three).
PAPER_D_OVER_BASE2_100K = {"LLaMA2-7B": 6.8, "LLaMA3.1-8B": 4.0, "LLaMA3.1-70B": 2.5}
#: Sec. VII: "up to 2.3x speedup ... relative to SoTA DRAM-based IFC designs at 10K".
PAPER_MAX_SPEEDUP_10K = 2.3
#: Sec. VII: "an inference throughput of 10 tokens/s on LLaMA3.1-8B" at 100K.
PAPER_TPS_8B_100K = 10.0
#: Sec. V-B: "G1=15, G2=1 for LLaMA3.1-8B, 1K context-length".
PAPER_BEST_SPLIT_8B_1K = (15, 1)
#: Sec. V-B ablation (Fig. 14): HG parallelism brings KVNAND-D's latency at 10K tokens down to
#: as low as 82.4 % of the design without it.
PAPER_HG_RATIO_10K = 0.824
#: Sec. V-B DSE (Fig. 15), 8-die KVNAND, LLaMA3.1-70B W4A16: "the optimal configuration reaching
#: 4 dies in G2 at 100K tokens" and "KVNAND-D gradually outperforms KVNAND-C beyond 2K tokens".
PAPER_FIG15_BEST_G2_100K = 4
PAPER_FIG15_CROSSOVER = 2048
#: Sec. IV-C: a 4 KB page read in tR = 4 us, the PE sized to finish its MACs in the same time.
PAPER_PAGE_PERIOD_US = 4.0
#: Table I: 132.75 Gb per die.
PAPER_DIE_GBIT = 132.75


# --- the reproduction -----------------------------------------------------------------------------


def _k(t: int) -> str:
    return f"{t // 1024}K" if t % 1024 == 0 and t >= 1024 else str(t)


def _geomean(values) -> float:
    values = [v for v in values if math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def _plot(ctx, name: str, draw, *, ncols: int = 1, size=(7.0, 4.2)):
    plt = pyplot()

    fig, axes = plt.subplots(1, ncols, figsize=size, squeeze=False)
    draw(fig, axes[0])
    fig.tight_layout()
    path = ctx.save_plot(fig, name, dpi=110)
    return path


def _page_period_table(system: System) -> tuple[str, float]:
    """Per-plane page period and time of a full-page stream, per mode and FMAC count."""
    rows, fp16_us = [], math.nan
    for mode in MODES:
        for f in (2, 16):
            geo = replace(system.flash.geometry, fmacs=f)
            t = gemv_timing(geo, mode, 1024, 4096)
            period_us = system.flash.seconds(t.period) * 1e6
            if mode == "fp16" and f == system.flash.geometry.fmacs:
                fp16_us = period_us
            rows.append([mode, f, t.pages, int(t.transfer[0]), int(t.compute[0]), t.period,
                         f"{period_us:.2f}",
                         f"{geo.page_bytes / (system.flash.seconds(t.period) * 1e9):.3f}"])
    from ..reproduce import markdown_table
    return markdown_table(["mode", "F", "pages", "transfer (cyc)", "compute (cyc)",
                           "period (cyc)", "period (us)", "GB/s per plane"], rows), fp16_us


class _Sweep:
    """The outcomes of one sweep, indexed by (model, context, design, g1)."""

    def __init__(self, system: System, contexts: tuple[int, ...], found: list[Outcome]):
        self.system, self.contexts = system, contexts
        self.by = {(o.point.model.name, o.point.context, o.point.design, o.point.g1): o
                   for o in found}

    def lat(self, m: Model, t: int, design: str, g1: int | None = None) -> float:
        return self.by[(m.name, t, design, g1)].latency.seconds

    def splits(self, m: Model, t: int) -> list[Outcome]:
        """KVNAND-D outcomes that fit, by G1."""
        return [o for g in range(1, self.system.dies)
                if not (o := self.by[(m.name, t, "discrete", g)]).latency.oom]

    def best_d(self, m: Model, t: int) -> Outcome | None:
        ok = self.splits(m, t)
        return min(ok, key=lambda o: o.latency.seconds) if ok else None

    def best_d_s(self, m: Model, t: int) -> float:
        d = self.best_d(m, t)
        return d.latency.seconds if d else math.nan

    def best(self, m: Model, t: int) -> float:
        """The fastest KVNAND design's latency (``nan`` when all are OOM)."""
        return float(np.nanmin([self.lat(m, t, "compact"), self.best_d_s(m, t), math.inf]))

    def split_text(self, o: Outcome | None) -> str:
        return f"{o.point.g1}+{self.system.dies - o.point.g1}" if o else "OOM"


def _ms(seconds: float) -> str:
    return "OOM" if not math.isfinite(seconds) else f"{1e3 * seconds:.2f}"


def reproduce(ctx) -> "Result":
    """KVNAND (paper 003): decode latency of KVNAND-C, KVNAND-D (every G1/G2 split) and the two
    baselines from 128 to 100K tokens, the best split, the geomean speedups, and the 8-die DSE
    of Fig. 15."""
    from ..reproduce import Result

    res = Result("KVNAND: DRAM-free in-flash computing, decode latency against context length")
    system = System()
    if ctx.quick:
        contexts, fig15 = (128, 1024, 10240, 102400), (2048, 102400)
    else:
        contexts = (128, 256, 512, 1024, 2048, 4096, 10240, 20480, 51200, 102400)
        fig15 = (128, 512, 1024, 2048, 4096, 10240, 20480, 51200, 102400)
    points = [Point(system, m, t, d) for m in MODELS for t in contexts
              for d in ("base1", "base2", "compact")]
    points += [Point(system, m, t, "discrete", g1) for m in MODELS for t in contexts
               for g1 in range(1, system.dies)]
    ctx.progress(f"{len(points)} design points, {len(MODELS)} models x {len(contexts)} contexts")
    sw = _Sweep(system, contexts, ctx.map(evaluate, points,
                                          label="KVNAND design space (16 dies)"))
    _sweep_tables(res, sw)
    _speedup_rows(res, sw)
    _system_tables(res, system)
    _sweep_plots(ctx, res, sw)
    _fig15(ctx, res, fig15)
    res.notes += _notes(system)
    from ..llm.accuracy import section
    section("kvnand", ctx, res)
    return res


def _sweep_tables(res, sw: _Sweep) -> None:
    from ..reproduce import markdown_table

    rows = []
    for m in MODELS:
        for t in sw.contexts:
            d = sw.best_d(m, t)
            rows.append([m.name, _k(t), _ms(sw.lat(m, t, "base1")), _ms(sw.lat(m, t, "base2")),
                         _ms(sw.lat(m, t, "compact")),
                         f"{_ms(d.latency.seconds)} ({sw.split_text(d)})" if d else "OOM"])
    res.tables.append((
        "Decode latency per token (ms), 8 channels x 2 dies", "\n".join([
            "Base-1: 8 IFC dies (F = 2) + 8 x 16 Gb LPDDR5X at 8 GB/s; Base-2: 8 IFC dies + 8 "
            "plain 128 Gb NAND dies, naive KV mapping; KVNAND-C-16 and KVNAND-D-(G1+G2) on 16 "
            "IFC dies (Table I: 32 planes, 16 FMACs, tR 4 us, 4.8 GB/s channels), fp16 weights "
            "and KV. KVNAND-D: the fastest split (G1+G2 in brackets). OOM: the weights or the KV "
            "cache do not fit (`footprint`).", "",
            markdown_table(["model", "context", "Base-1", "Base-2", "KVNAND-C-16",
                            "best KVNAND-D"], rows, align="llrrrr")])))
    rows = []
    for m in MODELS:
        for t in sw.contexts:
            d, ok = sw.best_d(m, t), sw.splits(m, t)
            c = sw.lat(m, t, "compact")
            if d is None and not math.isfinite(c):
                fastest = "OOM"
            elif d is None or c <= d.latency.seconds:
                fastest = f"KVNAND-C-{sw.system.dies}"
            else:
                fastest = d.latency.design
            rows.append([m.name, _k(t), f"{ok[0].point.g1}..{ok[-1].point.g1}" if ok else "none",
                         sw.split_text(d), str(d.latency.hg_stages) if d else "-",
                         f"{d.no_hg.seconds / d.latency.seconds:.3f}" if d else "-", fastest])
    res.tables.append(("Best G1/G2 split of KVNAND-D per context", "\n".join([
        "Feasible G1: splits whose weights fit in G1 and whose KV cache fits in G2. HG stages: "
        "the HG pipeline depth of the best split (1 = no overlap); no-HG / HG: its latency "
        "without the HG parallelism over its latency with it. Fastest: the fastest KVNAND design "
        "at that context.", "",
        markdown_table(["model", "context", "feasible G1", "best G1+G2", "HG stages",
                        "no-HG / HG", "fastest"], rows, align="llrrrrl")])))


def _speedup_rows(res, sw: _Sweep) -> None:
    from ..reproduce import Row

    ctxs, big = sw.contexts, sw.contexts[-1]
    speed = {(m.name, t): sw.lat(m, t, "base1") / sw.best(m, t) for m in MODELS for t in ctxs}
    models = ", ".join(m.name for m in MODELS)
    for t in PAPER_GEOMEAN:
        if t in ctxs:
            res.rows.append(Row(f"geomean speedup, fastest KVNAND / Base-1, {_k(t)} tokens",
                                PAPER_GEOMEAN[t], _geomean(speed[(m.name, t)] for m in MODELS),
                                "x", f"Abstract; paper: 5 models, ours: {models}"))
    if 128 in ctxs:
        res.rows.append(Row(
            "geomean speedup, KVNAND-C-16 / Base-1, 128 tokens", PAPER_C_OVER_BASE1_128,
            _geomean(sw.lat(m, 128, "base1") / sw.lat(m, 128, "compact") for m in MODELS), "x",
            "Sec. V-B"))
        res.rows.append(Row(
            "geomean speedup, KVNAND-C-16 / best KVNAND-D, 128 tokens", PAPER_C_OVER_D_128,
            _geomean(sw.best_d_s(m, 128) / sw.lat(m, 128, "compact") for m in MODELS), "x",
            "Sec. V-B"))
    if 10240 in ctxs:
        top = max(MODELS, key=lambda m: speed[(m.name, 10240)])
        res.rows.append(Row("largest speedup over Base-1 at 10K tokens", PAPER_MAX_SPEEDUP_10K,
                            speed[(top.name, 10240)], "x", f"Sec. VII; ours: {top.name}"))
    for m in MODELS:
        d = sw.best_d(m, big)
        res.rows.append(Row(f"KVNAND-D / Base-2 at {_k(big)} tokens, {m.name}",
                            PAPER_D_OVER_BASE2_100K[m.name],
                            sw.lat(m, big, "base2") / sw.best_d_s(m, big), "x",
                            f"Sec. V-B; best split {sw.split_text(d)}"))
    res.rows.append(Row(f"fastest KVNAND throughput, LLaMA3.1-8B, {_k(big)} tokens",
                        PAPER_TPS_8B_100K, 1.0 / sw.best(LLAMA31_8B, big), "tokens/s",
                        "Sec. VII"))
    if 1024 in ctxs:
        res.rows.append(Row("best split, LLaMA3.1-8B, 1K tokens",
                            "%d+%d" % PAPER_BEST_SPLIT_8B_1K,
                            sw.split_text(sw.best_d(LLAMA31_8B, 1024)), "", "Sec. V-B (G1+G2)"))
    if 10240 in ctxs:
        ratios = {m.name: (d := sw.best_d(m, 10240)).latency.seconds / d.no_hg.seconds
                  for m in MODELS}
        low = min(ratios, key=ratios.get)
        res.rows.append(Row("KVNAND-D latency with / without HG parallelism, 10K, lowest",
                            100 * PAPER_HG_RATIO_10K, 100 * ratios[low], "%",
                            f"Fig. 14; ours: {low}, best split"))
    oom = [m.name for m in MODELS if math.isnan(sw.lat(m, big, "base1"))]
    res.rows.append(Row(f"Base-1 out of memory at {_k(big)} tokens", "all five models",
                        ", ".join(oom) if oom else "none", "",
                        "Sec. V-B; the 8 x 16 Gb DRAM holds the KV cache"))
    c7 = sw.by[(LLAMA2_7B.name, big, "compact", None)]
    if c7.naive is not None:
        page_att = dict(c7.latency.parts)["attention"]
        naive_att = dict(c7.naive.parts)["attention"]
        res.rows.append(Row(f"KVNAND-C-16 attention latency, page-level / naive mapping, "
                            f"LLaMA2-7B, {_k(big)}", None, 100 * page_att / naive_att, "%",
                            "Fig. 14 gives 1.9 % for OPT-30B (MHA, not modelled)"))


def _system_tables(res, system: System) -> None:
    from ..reproduce import Row, markdown_table

    fl = system.flash
    period_table, fp16_us = _page_period_table(system)
    res.rows.append(Row("page period of the GEMV PE, fp16, F = 16", PAPER_PAGE_PERIOD_US,
                        fp16_us, "us", "golden gemv_timing (= the RTL PE, cycle for cycle)"))
    res.rows.append(Row("flash capacity per IFC die", PAPER_DIE_GBIT,
                        8 * fl.die_bytes / _GIBIT, "Gb", "Table I geometry x 32 planes", ".5g"))
    res.tables.append(("Page period of one plane's PE (`golden.inflash.gemv_timing`)", "\n".join([
        "A 1024 x 4096 GEMV on one plane, tR 4 us = 1600 cycles at 400 MHz, 4 bytes per cycle. "
        "The period `max(tR, transfer, compute)` of a full page sets every weight GEMV's and "
        "every KV page's pace in the model.", "", period_table])))
    rows = []
    for m in MODELS:
        w = m.weight_bytes(system.mode)
        kv = m.kv_token_bytes(system.kv_format)
        rows.append([m.name, f"{m.params() / 1e9:.2f}", f"{w / 1e9:.1f}", f"{kv / _KIB:.0f}",
                     f"{kv * 102400 / 1e9:.1f}", f"{w / fl.die_bytes:.2f}",
                     f"{kv * 102400 / fl.die_bytes:.2f}"])
    res.tables.append(("Footprints (fp16)", "\n".join([
        f"IFC die: {fl.die_bytes / 1e9:.2f} GB ({8 * fl.die_bytes / _GIBIT:.2f} Gb); DRAM of "
        f"Base-1: {system.channels} x {system.npu.dram_gbit:g} Gb = "
        f"{system.channels * system.npu.dram_gbit * _GIBIT / 8e9:.2f} GB; plain dies of Base-2: "
        f"{system.channels} x {fl.plain_die_gbit:g} Gb.", "",
        markdown_table(["model", "params (B)", "weights (GB)", "KV per token (KiB)",
                        "KV at 100K (GB)", "weights / die", "KV at 100K / die"], rows)])))


def _fig15(ctx, res, contexts: tuple[int, ...]) -> None:
    """Fig. 15: the 8-die DSE on LLaMA3.1-70B, W4A16 and W8A8 (KVNAND-C-8 and every split)."""
    from ..reproduce import Row, markdown_table

    systems = {mode: System(dies_per_channel=1, mode=mode) for mode in ("w4a16", "w8a8")}
    dies = next(iter(systems.values())).dies
    pts = [Point(s, LLAMA31_70B, t, "compact") for s in systems.values() for t in contexts]
    pts += [Point(s, LLAMA31_70B, t, "discrete", g) for s in systems.values() for t in contexts
            for g in range(1, dies)]
    dse = {(o.point.system.mode, o.point.context, o.point.g1): o.latency
           for o in ctx.map(evaluate, pts, label="8-die DSE, LLaMA3.1-70B (Fig. 15)")}
    labels = [f"C-{dies}"] + [f"D-({g}+{dies - g})" for g in range(1, dies)]

    def row(mode, t) -> list[Latency]:
        return [dse[(mode, t, g)] for g in [None, *range(1, dies)]]

    for mode, system in systems.items():
        rows = []
        for t in contexts:
            cells = row(mode, t)
            low = min((c.seconds for c in cells if not c.oom), default=math.nan)
            rows.append([_k(t)] + ["" if c.oom else f"**{1e3 * c.seconds:.0f}**"
                                   if c.seconds == low else f"{1e3 * c.seconds:.0f}"
                                   for c in cells])
        res.tables.append((
            f"8-die DSE, LLaMA3.1-70B {mode.upper()}: latency per token (ms)", "\n".join([
                f"Fig. 15's grid: blank = OOM, bold = fastest. {system.channels} channels x 1 "
                f"die; KV cache {system.kv_format}.", "",
                markdown_table(["context"] + labels, rows)])))
    compact, *splits = row("w4a16", contexts[-1])
    ok = [(g, c) for g, c in enumerate(splits, 1) if not c.oom]
    g1, best = min(ok, key=lambda gc: gc[1].seconds) if ok else (None, None)
    res.rows.append(Row(f"8-die DSE, LLaMA3.1-70B W4A16: G2 of the best split at "
                        f"{_k(contexts[-1])}", PAPER_FIG15_BEST_G2_100K,
                        dies - g1 if g1 else math.nan, "dies", "Fig. 15", ".0f"))

    def d_wins(t) -> bool:
        c, *ds = row("w4a16", t)
        return any(not x.oom and (c.oom or x.seconds < c.seconds) for x in ds)

    beyond = [t for t in contexts if d_wins(t)]
    gap = f"; at {_k(contexts[-1])} the best KVNAND-D takes " \
          f"{best.seconds / compact.seconds:.2f}x KVNAND-C's time" if best else ""
    res.rows.append(Row("8-die DSE, LLaMA3.1-70B W4A16: contexts where KVNAND-D beats KVNAND-C",
                        f"beyond {_k(PAPER_FIG15_CROSSOVER)} tokens",
                        f"from {_k(beyond[0])} tokens" if beyond else "none", "",
                        "Fig. 15" + gap))

    def draw(fig, axes):
        for ax, mode in zip(axes, systems):
            grid = np.array([[np.nan if c.oom else c.seconds for c in row(mode, t)]
                             for t in contexts]).T
            norm = grid / np.nanmin(grid, axis=0)
            im = ax.imshow(norm, aspect="auto", cmap="viridis_r", vmin=1.0,
                           vmax=min(3.0, float(np.nanmax(norm))))
            ax.set_xticks(range(len(contexts)), [_k(t) for t in contexts], fontsize=7)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("configuration (G1+G2 dies)")
            ax.set_title(f"LLaMA3.1-70B {mode.upper()}, {dies} dies (blank = OOM)")
            fig.colorbar(im, ax=ax, label="latency / fastest at that context")
    res.plots.append(_plot(ctx, "dse_8die_70b.png", draw, ncols=2, size=(12.0, 4.4)))


def _sweep_plots(ctx, res, sw: _Sweep) -> None:
    xs = np.array(sw.contexts, float)
    designs = (("base1", "Base-1 (IFC + DRAM KV)", "o-"),
               ("base2", "Base-2 (naive KV in flash)", "s-"),
               ("compact", f"KVNAND-C-{sw.system.dies}", "^-"),
               ("best-D", "KVNAND-D, best split", "v-"))

    def series(m, d):
        get = sw.best_d_s if d == "best-D" else lambda m, t: sw.lat(m, t, d)
        return np.array([get(m, t) for t in sw.contexts])

    def draw_latency(fig, axes):
        for ax, m in zip(axes, MODELS):
            for d, name, style in designs:
                ax.plot(xs, 1e3 * series(m, d), style, label=name, markersize=4)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("context length (tokens)")
            ax.set_ylabel("decode latency per token (ms)")
            ax.set_title(m.name)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle("Decode latency against context (OOM points absent)")
    res.plots.append(_plot(ctx, "latency_vs_context.png", draw_latency, ncols=3,
                           size=(14.0, 4.4)))

    def draw_split(fig, axes):
        ax = axes[0]
        for k, m in enumerate(MODELS):
            best = [sw.best_d(m, t) for t in sw.contexts]
            ax.plot(xs, [sw.system.dies - o.point.g1 if o else np.nan for o in best], "o-",
                    color=f"C{k}", label=f"{m.name}: G2 of the best split")
            c_wins = [t for t, o in zip(sw.contexts, best) if sw.lat(m, t, "compact")
                      <= (o.latency.seconds if o else math.inf)]
            ax.plot(c_wins, [0.25 + 0.2 * k] * len(c_wins), "x", color=f"C{k}",
                    label=f"{m.name}: KVNAND-C-{sw.system.dies} faster than every split")
        ax.set_xscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("KV dies G2 of KVNAND-D-(G1+G2) (dies)")
        ax.set_ylim(0, sw.system.dies)
        ax.set_title(f"Best G1/G2 split per context ({sw.system.dies} IFC dies)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    res.plots.append(_plot(ctx, "best_split.png", draw_split))

    def draw_speedup(fig, axes):
        ax = axes[0]
        for k, m in enumerate(MODELS):
            best = np.array([sw.best(m, t) for t in sw.contexts])
            ax.plot(xs, series(m, "base1") / best, "o-", color=f"C{k}",
                    label=f"{m.name}: over Base-1")
            ax.plot(xs, series(m, "base2") / best, "s--", color=f"C{k}",
                    label=f"{m.name}: over Base-2")
        ax.plot(list(PAPER_GEOMEAN), list(PAPER_GEOMEAN.values()), "k*", markersize=10,
                label="paper: geomean over Base-1")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("speedup of the fastest KVNAND (x)")
        ax.set_title("Speedup of KVNAND over the baselines (OOM baseline points absent)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    res.plots.append(_plot(ctx, "speedup.png", draw_speedup))


def _notes(system: System) -> list[str]:
    fl = system.flash
    return [
        "Model. Decode only, one token, all context tokens already in flash (or DRAM). Weight "
        "GEMVs: rows dealt to the planes of the weight dies (columns split too when there are "
        "more planes than rows), each plane's time the golden `gemv_timing` total of its share; "
        "QKV, gate+up share their inputs and run as one GEMV each. Logit/Attend: each head "
        "group's K (V) pages dealt to the planes holding that group's KV, the busiest plane's "
        "pages through `attention_timing`'s schedule (`page_pipeline`). Transfers over the "
        f"{system.channels} ONFI channels at {fl.channel_gbs:g} GB/s; softmax and vector work "
        f"on the {system.npu.tops:g} TOPS NPU. KVNAND-C runs QKV, attention, O and FFN in "
        "sequence; KVNAND-D pipelines QKV of a batch of head groups on G1 with attention of the "
        "previous batch on G2 (the batch size is chosen per point: one batch = no HG "
        "parallelism), then O and FFN on G1.",
        "Garbled equations. The text lost the symbols of the per-token KV size (Sec. III-B), the "
        "tokens-to-fill-a-page formula (Sec. IV-D) and the HG arithmetic intensity. Derived: "
        "KV bytes per token = 2 x layers x kv_heads x head_dim x element bytes; tokens per page "
        "T_p = page_bytes // (head_dim x element bytes) = 16 for fp16, d = 128 (the paper's "
        "'256B' entry); a head group's Logit/Attend serves G = heads / kv_heads query heads per "
        "page read, so 16 FMACs keep G = 8 read-bound.",
        "KV placement. The paper's KVNAND-C keeps each head's KV in the planes that generated "
        "it (head parallelism; its T_p formula suggests head-dimension slices). The model deals "
        "whole-entry pages of the golden page-level layout over the planes instead: the same "
        "pages per plane (hence the same tR-bound time), while the PE keeps the full head "
        "dimension per token, so the plane stays read-bound (the Attend loop's 11 cycles per "
        "token cost 176 of a page's 1600 cycles; head-dimension slices of 2 to 8 elements would "
        "make Attend loop-bound on the golden PE).",
        "Baselines. Base-1 (Lincoln scaled, Sec. V-A): 8 channels, each one IFC die (F = 2, "
        "Lincoln's balance point; fp16 is read-bound either way) and one 16 Gb LPDDR5X at 8 GB/s "
        "holding only the KV cache; Logit/Attend on the NPU at the DRAM bandwidth. Base-2: the "
        "DRAM replaced by a plain 128 Gb NAND die; KV pages in generation order (naive mapping, "
        "`kv_address`), the NPU reading each layer's K then V over the channels; its planes are "
        "rarely the bound, the 4.8 GB/s channels are. KVNAND: 16 IFC dies, as Sec. V-A's "
        "'replacing the KV cache flash with compute-enabled IFC dies' implies (KVNAND-C-16).",
        "Why KVNAND-C is about 2x Base-1 at short contexts: there the token is all weight "
        "GEMVs, read-bound at one page per tR per plane, and KVNAND-C has 16 IFC dies against "
        "Base-1's 8. The speedup grows with context for the MHA model (its KV traffic, 512 KiB "
        "per token, runs at 64 GB/s from DRAM against ~0.5 TB/s of page reads in flash) and much "
        "less for the GQA models (128 and 320 KiB per token).",
        "OOM. The DRAM of Base-1 is 8 x 16 Gb = 16 GiB by Table I; with only the KV cache in it, "
        "LLaMA3.1-8B (128 KiB per token, 12.5 GiB at 100K) fits, so the model does not reproduce "
        "the paper's statement that Base-1 is out of memory at 100K for every model (nor that the "
        "GQA models exhaust it at 50K). The paper does not say what else its DRAM holds "
        "(embeddings and intermediates in Lincoln) or how much; nothing is added here to force "
        "the OOM. LLaMA3.1-70B in fp16 (141 GB) needs 8 of the 16 IFC dies for its weights: "
        "KVNAND-D splits with G1 < 8 are OOM, and Base-1/Base-2 hold it in exactly 8 dies.",
        "KV writes. KVNAND-C flushes its 8 KB-per-plane buffers, KVNAND-D its 5 MB SoC buffer, "
        "as (partial) pages of every (layer, K|V, head) stream; each program blocks a plane for "
        "tP = 75 us. KVNAND-D and Base-2 program while their KV dies idle (weight GEMVs), "
        "KVNAND-C cannot hide it. The amortized cost is below 1 % of a token everywhere.",
        "KVNAND-C against KVNAND-D. On the same dies KVNAND-C is faster than the best split at "
        "every point of both sweeps: it runs every GEMV on all dies, while the HG pipeline of "
        "KVNAND-D hides only the QKV generation (a quarter of a layer's weight reads for MHA, a "
        "tenth for these GQA models) behind the attention and gives up G2's share of the FFN. "
        "KVNAND-C's smaller KV buffer (pages of 8 tokens instead of 16 for LLaMA2-7B on 16 "
        "dies, 6 for LLaMA3.1-70B on 8) doubles or nearly triples its KV page reads and "
        "narrows the gap at 100K (1.07x on the 8-die W4A16 grid) without closing it. The "
        "paper has KVNAND-D ahead beyond 2K tokens in Fig. 15, whose numbers are not in the "
        "text; no stated parameter gives KVNAND-D that lead here, and none is tuned to make "
        "it. The best split itself (G2 = 4 at 100K; 15+1 for LLaMA3.1-8B at 1K) agrees with "
        "the paper.",
        "Gaps. At 10K tokens the speedup over Base-1 (LLaMA2-7B 2.9x) exceeds the paper's "
        "'up to 2.3x': Base-1 reads LLaMA2-7B's 5 GB of KV at 8 x 8 GB/s, 84 ms per token, "
        "against about 20 ms of attention in KVNAND-C. The paper does not give its Base-1 "
        "attention model (Lincoln's) beyond Table I; a faster Base-1 KV path or a slower "
        "in-flash attention would bring the two together. For the same reason the 100K "
        "throughput of LLaMA3.1-8B (18 tokens/s) exceeds the paper's 10. The KVNAND-D over "
        "Base-2 ratios at 100K (4.8, 3.9, 2.3 against 6.8, 4.0, 2.5) follow the channel-bound "
        "Base-2: 38.4 GB/s of ONFI for the NPU's KV reads.",
        "Not modelled: prefill, speculative decoding, energy and cost (Sec. V-B/V-C), channel "
        "contention between G1 and G2 dies sharing a channel, the newest tokens still in the KV "
        "buffer, OPT-30B and Mixtral-8x7B (the paper's geomeans are over five models, ours over "
        "three). Contexts: K = 1024 tokens (10K = 10240, 100K = 102400).",
    ]
