"""SHIELD workload footprints: the KV share of the attention workspace in the paper's scenarios.

The paper evaluates three workloads (Sec. IV-C: Summary, prefill-dominant; Translation, balanced;
Storytelling, decode-dominant) and a Prefill=128 / Decode=256 trace, but gives neither their token
counts nor their footprints. This module states a footprint model and the token counts it assumes,
so the benchmark can feed the same KV shares into the RTL and into Eqs. 4 to 9.

Footprint model (one decoder layer's attention workspace, the paper's Eqs. 1 to 3): a step that
processes ``n`` new tokens with ``ctx`` tokens of context holds the transient ``Q`` and ``O``
(``n x d_model`` each) and the persistent ``K`` and ``V`` (``ctx x d_kv`` each)::

    B_QO = 2 n d_model,   B_KV = 2 ctx d_kv,   f = B_KV / (B_KV + B_QO)

Prefill is one step with ``n = ctx = prompt``; decode step ``t`` has ``n = 1`` and
``ctx = prompt + t``. A step lasts in proportion to the tokens it processes (a prefill of ``P``
tokens takes as long as ``P`` decode steps), and its refresh energy is its workspace size times
its duration times the per-bit power at its share ``f``; so a workload's energy is the sum over
steps of ``weight * power(f)`` with ``weight = n * (B_KV + B_QO)``.
The model dimensions default to Qwen3-8B's (the paper's example: d_model 4096, 8 KV heads of 128).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Model", "QWEN3_8B", "Workload", "SCENARIOS", "TRACE", "step_fractions",
           "workload_ratio"]


@dataclass(frozen=True)
class Model:
    """Attention dimensions: model width and the width of K (and of V)."""

    name: str
    d_model: int
    d_kv: int


QWEN3_8B = Model("Qwen3-8B", d_model=4096, d_kv=8 * 128)


@dataclass(frozen=True)
class Workload:
    """A generation: ``prompt`` tokens prefilled, then ``generate`` decode steps."""

    name: str
    prompt: int
    generate: int

    def __post_init__(self):
        for value, what in ((self.prompt, "Prompt length"), (self.generate, "Generated tokens")):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{what} must be a positive integer, not {value!r}")


#: Assumed token counts (not in the paper): prefill-dominant, balanced, decode-dominant.
SCENARIOS = (Workload("Summary", 1024, 64), Workload("Translation", 256, 256),
             Workload("Storytelling", 64, 1024))
#: The paper's Fig. 5(b) trace.
TRACE = Workload("Prefill=128/Decode=256", 128, 256)


def step_fractions(workload: Workload, model: Model = QWEN3_8B) -> tuple[np.ndarray, np.ndarray]:
    """KV share ``f`` of every step and its energy weight ``n * B_total``: prefill first."""
    ctx = workload.prompt + np.arange(workload.generate + 1)
    n = np.where(np.arange(workload.generate + 1) == 0, workload.prompt, 1)
    kv = 2.0 * ctx * model.d_kv
    qo = 2.0 * n * model.d_model
    return kv / (kv + qo), n * (kv + qo)


def workload_ratio(power, workload: Workload, model: Model = QWEN3_8B) -> float:
    """Energy-weighted mean of ``power(f)`` over a workload's steps (``power`` vectorized)."""
    f, weight = step_fractions(workload, model)
    return float(np.sum(weight * power(f)) / np.sum(weight))


def plot_ber(path, *, t_max_us: float = 3000.0) -> None:
    """Plot the calibrated retention model's BER against time, with the policies' intervals."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from golden import edram as golden

    t = np.geomspace(10.0, t_max_us, 400)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.loglog(t, golden.ber(t), label="BER(t), lognormal retention model")
    marks = [(golden.T_STD_US, "T_std = 45 us"), (golden.T_REL_US, "T_rel = 1216 us"),
             (1500.0, "QO lifetime 1.5 ms"), (golden.T_KELLE_US, "T_kelle = 1969 us")]
    for k, (t_us, label) in enumerate(marks):
        p = float(golden.ber(t_us))
        ax.axvline(t_us, linestyle=":", color=f"C{k + 1}")
        ax.plot([t_us], [p], "o", color=f"C{k + 1}", label=f"{label}: BER {p:.2g}")
    ax.set_ylim(1e-24, 1)
    ax.set_xlabel("time since last write or refresh (us)")
    ax.set_ylabel("bit error rate")
    ax.set_title("3T eDRAM retention model (golden/edram.py, calibrated to the paper)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)  # values in the legend: the marks crowd
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":      # python -m sim.shield docs/img/edram_ber.png
    import sys

    plot_ber(sys.argv[1] if len(sys.argv) > 1 else "edram_ber.png")
