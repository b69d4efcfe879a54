"""The papers' accuracy claims on a real model: each paper's back-ends scored against float on
SmolLM2, as sections of ``memwall reproduce`` (rows beside the paper's, a table, plots).

Contract: :func:`score_points` scores :class:`Point` s on the reproduction's Dask cluster
(:meth:`sim.reproduce.Context.map`, one back-end per task, :func:`sim.llm.score.score_point`);
:func:`shield_section` and :func:`claim_section` add them to a :class:`sim.reproduce.Result`:
rows beside the paper's claim, a table, plots. The model and the text are the defaults of
``memwall model score`` unless given (the tests pass a tiny GGUF). :func:`section` is what a
paper's ``reproduce`` calls: a quick reproduction (``--quick``) leaves the model out and says so,
since even a few tokens through the hardware back-ends cost the test suite minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Point", "TOKENS", "score_points", "accuracy_table", "token_ids", "section",
           "shield_section", "claim_section"]

#: Predictions scored by a reproduction (the issue's 256 tokens).
TOKENS = 256


@dataclass(frozen=True)
class Point:
    """One back-end run: ``label`` for the tables, the ``numerics`` name and its options."""

    label: str
    numerics: str
    options: tuple = ()


def token_ids(path, tokens: int) -> tuple[int, ...]:
    """The first ``tokens + 1`` ids of the default text under the model's tokenizer."""
    from .score import model_file, default_text
    from .tokenizer import tokenizer
    ids = tokenizer(model_file(path)).encode(default_text().text)[:tokens + 1]
    return tuple(ids)


def score_points(ctx, points: list[Point], *, path=None, tokens: int | None = None,
                 label: str = "accuracy") -> tuple[list[dict], int]:
    """Score ``points`` (in parallel on ``ctx``'s cluster); return their rows and the count of
    predictions scored."""
    from .score import ScoreJob, score_point
    n = TOKENS if tokens is None else tokens
    path = None if path is None else str(path)
    ids = token_ids(path, n)
    items = [ScoreJob(path, ids, p.numerics, p.options) for p in points]
    return ctx.map(score_point, items, label=label), len(ids) - 1


def accuracy_table(points: list[Point], rows: list[dict]) -> str:
    """Markdown: perplexity, its change against float, KL and top-1 agreement of each point
    (``collapsed`` where an Inf or NaN reached the logits)."""
    import math

    from sim.reproduce import markdown_table

    def cells(r):
        if not math.isfinite(r["ppl"]):
            return ["collapsed (NaN)", "–", "–"]
        return [f"{r['ppl']:.3f}", f"{r['delta_ppl_pct']:+.2f} %", f"{r['kl_to_float']:.5f}"]
    return markdown_table(
        ["numerics", "perplexity", "vs float", "KL to float (nats)", "top-1 agreement", "s"],
        [[p.label, *cells(r), f"{100 * r['top1_agree_with_float']:.1f} %",
          f"{r['seconds']:.0f}"] for p, r in zip(points, rows)])


# --- SHIELD: Fig. 2 and Table II --------------------------------------------------------------

#: Fig. 2's error rates: (a) uniform over the QO words, (b) QO mantissas, (c) KV mantissas.
SHIELD_SWEEPS = {
    "a": ("Fig. 2(a): uniform BER over Q and O (all 16 bits)", "qo", "all",
          (1e-7, 1e-6, 1e-5, 1e-4)),
    "b": ("Fig. 2(b): QO mantissas", "qo", "mantissa", (1e-4, 1e-3, 1e-2, 0.1, 0.25)),
    "c": ("Fig. 2(c): KV mantissas", "kv", "mantissa", (1e-4, 1e-3, 1e-2, 0.1, 0.25)),
}
#: The paper's threshold of numerical instability: perplexity 3 % above the error-free one.
SHIELD_THRESHOLD = 0.03


def shield_points() -> tuple[list[Point], dict]:
    from golden.edram import MASK_ALL, MASK_MANTISSA
    policies = [Point("standard refresh", "shield-standard"), Point("SHIELD", "shield"),
                Point("Kelle-like (KV mantissas at 2e-3)", "shield-kelle")]
    sweeps = {}
    for key, (title, target, bits, bers) in SHIELD_SWEEPS.items():
        mask = MASK_ALL if bits == "all" else MASK_MANTISSA
        sweeps[key] = [Point(f"{title}, BER {b:g}", "shield",
                             (("ber", b), ("target", target), ("mask", mask))) for b in bers]
    return policies, sweeps


def shield_section(ctx, res, *, path=None, tokens: int | None = None) -> None:
    """Table II's row for SmolLM2 and Fig. 2's three sweeps, with plots."""
    policies, sweeps = shield_points()
    points = policies + [p for ps in sweeps.values() for p in ps]
    rows, n = score_points(ctx, points, path=path, tokens=tokens,
                           label="SHIELD accuracy on SmolLM2")
    std, shield, kelle = rows[:3]
    from sim.reproduce import Row
    res.rows += [
        Row("Table II, SHIELD: perplexity change against standard refresh", "+0.00..+0.02",
            shield["ppl"] - std["ppl"], note=f"SmolLM2-135M, {n} tokens; the paper's five "
            f"models on WikiText-2", fmt="+.3f"),
        Row("Table II, Kelle-like: perplexity change against standard refresh", "-0.00..+0.03",
            kelle["ppl"] - std["ppl"], note="KV mantissas at Kelle's 2e-3 BER", fmt="+.3f")]
    k = 3
    for key, ps in sweeps.items():
        part = rows[k:k + len(ps)]
        k += len(ps)
        limit = _tolerated(part, ps, std)
        paper = {"a": "1e-6", "b": "0.25", "c": "1e-4"}[key]
        res.rows.append(Row(f"{SHIELD_SWEEPS[key][0]}: highest BER within 3 %", paper,
                            "none" if limit is None else f"{limit:g}",
                            note="of the points run; perplexity of each in the table below"))
    res.tables.append((f"Accuracy on SmolLM2-135M ({n} tokens, the default text of `memwall "
                       f"model score`)", accuracy_table(points, rows)))
    res.plots.append(_shield_plot(ctx, sweeps, rows[3:], std))
    res.notes.append(
        "Accuracy: SmolLM2-135M-Instruct (Q4_1) with Q, K, V and O stored as BF16 in the eDRAM "
        "segments, bit errors by golden.edram's decay model (policies: each segment's refresh "
        "interval, QO resident 1.5 ms, a KV entry's worst age its segment's interval) or at a "
        "given BER with Algorithm 1 (rho per element, each masked bit flipped with probability "
        "1/2); the rest float32 (docs/llm.md). 'collapsed' marks a flipped exponent that made "
        "an Inf or NaN, which attention spreads to every later position. One seed per point.")


def _tolerated(rows, points, base) -> float | None:
    """The highest BER whose perplexity stays within the 3 % threshold of ``base``."""
    import math
    ok = [dict(p.options)["ber"] for p, r in zip(points, rows)
          if math.isfinite(r["ppl"]) and r["ppl"] <= base["ppl"] * (1 + SHIELD_THRESHOLD)]
    return max(ok) if ok else None


def _shield_plot(ctx, sweeps, rows, base):
    import math

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), sharey=True)
    k = 0
    for ax, (key, ps) in zip(axes, sweeps.items()):
        part = rows[k:k + len(ps)]
        k += len(ps)
        bers = [dict(p.options)["ber"] for p in ps]
        ppl = [r["ppl"] if math.isfinite(r["ppl"]) else float("nan") for r in part]
        ax.semilogx(bers, ppl, "o-", label="SmolLM2-135M")
        ax.set_xlim(min(bers) / 2, max(bers) * 2)
        lost = [b for b, r in zip(bers, part) if not math.isfinite(r["ppl"])]
        if lost:            # an Inf or NaN reached the output: no perplexity to plot
            top = max([p for p in ppl if math.isfinite(p)] + [base["ppl"] * 1.1])
            ax.plot(lost, [top] * len(lost), "x", color="C3", ms=9, label="collapsed (NaN)")
        ax.axhline(base["ppl"] * (1 + SHIELD_THRESHOLD), color="C3", ls="--", lw=1,
                   label="3 % threshold")
        ax.axhline(base["ppl"], color="0.5", lw=0.8, label="error-free (BF16)")
        ax.set_title(SHIELD_SWEEPS[key][0].split(": ", 1)[1], fontsize=9)
        ax.set_xlabel("BER (Algorithm 1's rho)")
    axes[0].set_ylabel("perplexity")
    axes[0].legend(fontsize=7)
    fig.suptitle("SHIELD Fig. 2 on SmolLM2-135M", fontsize=10)
    fig.tight_layout()
    return ctx.save_plot(fig, "accuracy_fig2.png")


# --- rDXE, KVNAND, FlowKV: a back-end against float ---------------------------------------------

#: Per paper: the back-ends scored, the paper's claim and the row's figure name.
CLAIMS = {
    "rdxe": ([Point("float32 reference", "float"), Point("rDXE INT8, fused VRC", "rdxe"),
              Point("rDXE INT8, sequential VRC", "rdxe-seq")],
             "only a slight accuracy loss from quantization (OPT-350M)"),
    "kvnand": ([Point("float32 reference", "float"),
                Point("KVNAND w4a16, fp16 KV pages", "kvnand"),
                Point("KVNAND w4a16, bf16 KV pages", "kvnand-bf16")],
               "precision modes (no perplexity given)"),
    "flowkv": ([Point("float32 reference", "float"), Point("Q4NX + FlowKV", "flowkv")],
               "unmodified LLMs, full model accuracy"),
}


def claim_section(paper: str, ctx, res, *, path=None, tokens: int | None = None) -> None:
    """The paper's back-ends against float: rows (perplexity change) and a table."""
    from sim.reproduce import Row
    points, claim = CLAIMS[paper]
    rows, n = score_points(ctx, points, path=path, tokens=tokens,
                           label=f"{paper} accuracy on SmolLM2")
    for p, r in zip(points[1:], rows[1:]):
        res.rows.append(Row(f"Accuracy, {p.label}: perplexity change against float32 (%)",
                            claim, r["delta_ppl_pct"], fmt="+.2f",
                            note=f"SmolLM2-135M, {n} tokens; KL {r['kl_to_float']:.2g} nats, "
                                 f"top-1 agreement {100 * r['top1_agree_with_float']:.1f} %"))
    res.tables.append((f"Accuracy on SmolLM2-135M ({n} tokens, the default text of `memwall "
                       f"model score`)", accuracy_table(points, rows)))
    res.notes.append(f"Accuracy: {claim} in the paper; here every operation of the family's "
                     f"hardware runs on its bit-exact golden model on a real model, the rest "
                     f"in float32 (docs/llm.md has what each back-end emulates and why it "
                     f"loses what it loses).")


def section(paper: str, ctx, res) -> None:
    """The accuracy part of ``paper``'s reproduction (left out of a quick one, with a note)."""
    if ctx.quick:
        res.notes.append(f"Accuracy on SmolLM2-135M: left out of a quick run; `memwall "
                         f"reproduce {paper}` scores {TOKENS} tokens through the back-ends "
                         f"(docs/llm.md).")
        return
    if paper == "shield":
        shield_section(ctx, res)
    else:
        claim_section(paper, ctx, res)
