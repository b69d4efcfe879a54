"""NumPy models of the SHIELD segmented-refresh eDRAM (issue 4): BF16 segment split and merge, the
3T-eDRAM retention model, expected refresh counts, the paper's refresh-power equations (Eqs. 4 to 9)
and the paper's Algorithm 1 fault injection.

Source: Zhang and Fong, "SHIELD: A Segmented Hierarchical Memory Architecture for Energy-Efficient
LLM Inference on Edge NPUs", arXiv:2604.07396 (the paper). docs/edram_models.md gives the
derivations, the calibration result and what the paper leaves unspecified.

* Segments. A BF16 word (:data:`hdl.arith.format.BF16`) splits into the standard segment ``std``
  (sign and exponent, ``1 + exp_bits = 9`` bits, ``bits >> man_bits``) and a 7-bit mantissa
  (``bits & (2**man_bits - 1)``). The mantissa goes to ``kv_mant`` (relaxed refresh) for tensor
  class ``KV`` and to ``qo_mant`` (refresh-less) for class ``QO``: a routing decision by class,
  :func:`mantissa_segment`. ``merge(*split(x)) == x`` for every code.
* Retention. Each cell's retention time is lognormal: ``ln t_ret ~ N(mu, sigma**2)``, so the bit
  error rate of a cell left ``t`` after its last write or refresh is

      BER(t) = P(t_ret <= t) = Phi((ln t - mu) / sigma),

  with ``mu`` and ``sigma`` solved in closed form from the paper's two points (BER 1e-4 at 1216 us,
  0.04 % at 1500 us), :data:`RETENTION`.
* Refresh counts. A row live over ``[s, e)`` (written at ``s``, released at ``e``) under a refresh
  interval of ``I`` cycles is refreshed exactly when its age reaches ``I``: at ``s + k*I`` for every
  ``k >= 1`` with ``s + k*I < min(e, duration)``, so it receives ``max(0, (min(e, duration) - s -
  1) // I)`` refreshes; a refresh-less segment (``I = None``) gives 0.
* Power (paper Eqs. 4 to 9): ``P = P_leak + E_ref_cycle * sum(w_seg / T_seg)`` with the weight
  ``w_seg`` the segment's share of the workspace bits (9/16, 7/16 * B_KV/B_total, 7/16 *
  B_QO/B_total) and ``1 / T_seg = 0`` for a refresh-less segment.
* Fault injection: :func:`inject` flips each bit selected by a mask independently with probability
  ``ber`` (the physical model the retention BER describes); :func:`inject_algorithm1` is the paper's
  Algorithm 1 verbatim (each element hit with probability ``rho`` is XORed with a random 16-bit
  pattern ANDed with the mask).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable

import numpy as np

from hdl.arith.format import BF16
from hdl.edram.spec import MANT_BITS, SEGMENT_BITS, SEGMENTS, STD_BITS

__all__ = [
    "STD_BITS", "MANT_BITS", "SEGMENTS", "SEGMENT_BITS", "TENSOR_CLASSES", "MANTISSA_SEGMENT",
    "POLICIES", "KELLE_SCOPES", "T_STD_US", "T_REL_US", "KELLE_BER", "PAPER_P_LEAK_MW",
    "MASK_MANTISSA", "MASK_ALL", "split", "merge", "mantissa_segment", "Retention", "calibrate",
    "RETENTION", "ber", "t_for_ber", "T_KELLE_US", "lifetime_refreshes", "refresh_counts",
    "policy_intervals_us", "p_ref_std", "p_base", "p_ref_exp", "p_ref_kv", "p_ref_qo", "p_shield",
    "eta", "eta_approx", "policy_power", "efficiency_gain", "refresh_energy_reduction", "inject",
    "inject_algorithm1", "sweep_refreshes", "sweep_counts",
]

# --- segments -------------------------------------------------------------------------------------

# STD_BITS (9), MANT_BITS (7), SEGMENTS and SEGMENT_BITS are the shared description's
# (hdl/edram/spec.py), as the BF16 format is hdl/arith/format.py's.
#: Tensor classes of a write request.
TENSOR_CLASSES = ("KV", "QO")
#: The segment holding the mantissa of each tensor class.
MANTISSA_SEGMENT = {"KV": "kv_mant", "QO": "qo_mant"}

_MANT_MASK = (1 << MANT_BITS) - 1
_WORD_MAX = (1 << BF16.width) - 1
#: Masks for :func:`inject`: the mantissa only, and every bit.
MASK_MANTISSA = _MANT_MASK
MASK_ALL = _WORD_MAX


def _codes(values, what: str, width: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "ui":
        raise TypeError(f"{what} must be an integer array, not {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= 1 << width):
        bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
        raise ValueError(f"{what} must be {width}-bit codes between 0 and {(1 << width) - 1}, "
                         f"not {bad}")
    return arr.astype(np.uint16)


def split(bits) -> tuple[np.ndarray, np.ndarray]:
    """Split BF16 bit patterns into ``(std, mant)``.

    ``std = bits >> 7`` (sign and 8-bit exponent, 9 bits), ``mant = bits & 0x7F`` (7 bits); both
    ``np.uint16``. Widths come from :data:`hdl.arith.format.BF16`.
    """
    b = _codes(bits, "BF16 bits", BF16.width)
    return b >> np.uint16(MANT_BITS), b & np.uint16(_MANT_MASK)


def merge(std, mant) -> np.ndarray:
    """Merge ``std`` (9-bit) and ``mant`` (7-bit) segments into BF16 bit patterns (``np.uint16``):
    ``(std << 7) | mant``. The arrays broadcast."""
    s = _codes(std, "Standard segment", STD_BITS)
    m = _codes(mant, "Mantissa segment", MANT_BITS)
    return (s << np.uint16(MANT_BITS)) | m


def mantissa_segment(tensor_class: str) -> str:
    """The segment that stores the mantissa of ``tensor_class`` (``KV`` -> ``kv_mant``, ``QO`` ->
    ``qo_mant``)."""
    if tensor_class not in MANTISSA_SEGMENT:
        raise ValueError(f"Tensor class must be one of {', '.join(TENSOR_CLASSES)}, "
                         f"not {tensor_class!r}")
    return MANTISSA_SEGMENT[tensor_class]


# --- retention ------------------------------------------------------------------------------------

#: Standard refresh interval (paper Eq. 4, citing Kong et al. 2008), microseconds.
T_STD_US = 45.0
#: Relaxed refresh interval of the KV mantissa (paper Sec. III-B), microseconds.
T_REL_US = 1216.0
#: The BER the paper says Kelle applies to the KV cache (Sec. IV-D).
KELLE_BER = 2e-3
#: eDRAM data-array leakage of a 2 MB workspace from DESTINY (paper Sec. IV-A), milliwatts.
PAPER_P_LEAK_MW = 0.95

_STD_NORMAL = NormalDist()


@dataclass(frozen=True)
class Retention:
    """Lognormal per-cell retention time: ``ln t_ret ~ N(mu, sigma**2)``, ``t_ret`` in us.

    ``median_us = exp(mu)`` is the median cell retention time.
    """

    mu: float
    sigma: float

    @property
    def median_us(self) -> float:
        return math.exp(self.mu)


def calibrate(t1_us: float, ber1: float, t2_us: float, ber2: float) -> Retention:
    """Solve the lognormal retention model through ``BER(t1) = ber1`` and ``BER(t2) = ber2``.

    With ``z_i = Phi^-1(ber_i)``: ``sigma = (ln t2 - ln t1) / (z2 - z1)``, ``mu = ln t1 - sigma *
    z1``. Needs ``0 < t1 < t2`` and ``0 < ber1 < ber2 < 1`` (a distribution function increases).
    """
    if not (0 < t1_us < t2_us and math.isfinite(t2_us)):
        raise ValueError(f"Calibration times must satisfy 0 < t1 < t2 < inf, not t1={t1_us!r}, "
                         f"t2={t2_us!r}")
    if not 0 < ber1 < ber2 < 1:
        raise ValueError(f"Calibration BERs must satisfy 0 < ber1 < ber2 < 1, not ber1={ber1!r}, "
                         f"ber2={ber2!r}")
    z1, z2 = _STD_NORMAL.inv_cdf(ber1), _STD_NORMAL.inv_cdf(ber2)
    sigma = (math.log(t2_us) - math.log(t1_us)) / (z2 - z1)
    return Retention(mu=math.log(t1_us) - sigma * z1, sigma=sigma)


#: The model calibrated to the paper: BER 1e-4 at 1216 us and 0.04 % (4e-4) at 1500 us.
RETENTION = calibrate(T_REL_US, 1e-4, 1500.0, 4e-4)

_erfc = np.frompyfunc(math.erfc, 1, 1)
_inv_cdf = np.frompyfunc(_STD_NORMAL.inv_cdf, 1, 1)


def ber(t_us, model: Retention = RETENTION) -> np.ndarray:
    """Bit error rate of a cell ``t_us`` microseconds after its last write or refresh.

    ``BER(t) = Phi((ln t - mu) / sigma) = erfc(-(ln t - mu) / (sigma * sqrt 2)) / 2``; 0 at
    ``t = 0``, 1 at ``t = inf``. Vectorized (float64 array of the shape of ``t_us``).
    """
    t = np.asarray(t_us, dtype=np.float64)
    if np.isnan(t).any() or (t < 0).any():
        bad = t[np.isnan(t) | (t < 0)].flat[0]
        raise ValueError(f"Retention time must be a non-negative number of microseconds, "
                         f"not {bad}")
    with np.errstate(divide="ignore"):
        x = -(np.log(t) - model.mu) / (model.sigma * math.sqrt(2.0))
    return 0.5 * np.asarray(_erfc(x), dtype=np.float64).reshape(t.shape)


def t_for_ber(p, model: Retention = RETENTION) -> np.ndarray:
    """Inverse of :func:`ber`: the time (us) at which a cell's BER reaches ``p``.

    ``t = exp(mu + sigma * Phi^-1(p))``; 0 for ``p = 0``, ``inf`` for ``p = 1``. Vectorized.
    """
    q = np.asarray(p, dtype=np.float64)
    if np.isnan(q).any() or (q < 0).any() or (q > 1).any():
        bad = q[np.isnan(q) | (q < 0) | (q > 1)].flat[0]
        raise ValueError(f"Bit error rate must be between 0 and 1, not {bad}")
    inner = np.where((q > 0) & (q < 1), q, 0.5)  # the end points are set below
    z = np.asarray(_inv_cdf(inner), dtype=np.float64).reshape(q.shape)
    t = np.exp(model.mu + model.sigma * z)
    return np.where(q == 0, 0.0, np.where(q == 1, np.inf, t))


#: Kelle-like relaxed interval: where the calibrated model reaches :data:`KELLE_BER` (us).
T_KELLE_US = float(t_for_ber(KELLE_BER))


# --- refresh counts -------------------------------------------------------------------------------

def _interval(interval):
    if interval is None:
        return None
    if not isinstance(interval, (int, np.integer)) or isinstance(interval, bool) or interval < 1:
        raise ValueError(f"Refresh interval must be a positive integer number of cycles or None "
                         f"(refresh-less), not {interval!r}")
    return int(interval)


def lifetime_refreshes(interval, start, end, duration=None) -> np.ndarray:
    """Refreshes a row live over ``[start, end)`` receives within ``[0, duration)``.

    The row is written at ``start`` (age 0) and refreshed exactly when its age reaches
    ``interval`` cycles, at ``start + k * interval`` for each ``k >= 1`` before ``stop =
    min(end, duration)``: ``max(0, (stop - start - 1) // interval)``. A release at exactly
    ``start + k * interval`` makes that refresh unnecessary. ``interval=None`` (refresh-less)
    gives 0. Vectorized over ``start`` and ``end``; ``duration=None`` means no cut-off.
    """
    iv = _interval(interval)
    s = np.asarray(start, dtype=np.int64)
    e = np.asarray(end, dtype=np.int64)
    if s.size and (s < 0).any():
        raise ValueError(f"Lifetime start must be a cycle >= 0, not {int(s.min())}")
    if (np.broadcast_to(e, np.broadcast_shapes(s.shape, e.shape))
            <= np.broadcast_to(s, np.broadcast_shapes(s.shape, e.shape))).any():
        raise ValueError("Lifetime end (exclusive) must be after its start (start < end)")
    stop = e if duration is None else np.minimum(e, _duration(duration))
    if iv is None:
        return np.zeros(np.broadcast_shapes(s.shape, e.shape), np.int64)
    return np.maximum(0, (stop - s - 1) // iv)


def _duration(duration) -> int:
    if not isinstance(duration, (int, np.integer)) or isinstance(duration, bool) or duration < 0:
        raise ValueError(f"Duration must be a non-negative integer number of cycles, "
                         f"not {duration!r}")
    return int(duration)


def refresh_counts(interval, history: Iterable[tuple[int, int, int]],
                   duration: int) -> dict[int, int]:
    """Expected refreshes per row of one segment over ``[0, duration)``.

    Parameters
    ----------
    interval : int or None
        The segment's refresh interval in cycles; ``None`` for a refresh-less segment.
    history : iterable of (row, start, end)
        Lifetimes, ``end`` exclusive. A lifetime starts with a write (age 0); a rewrite of a live
        row is a new lifetime starting at the rewrite (end the previous one there). Lifetimes of
        one row must not overlap.
    duration : int
        Cycles simulated; refreshes due at or after ``duration`` are not counted.

    Returns
    -------
    dict of int to int
        Every row of the history, with its count (0 for refresh-less segments).
    """
    _interval(interval)
    _duration(duration)
    rows: dict[int, list[tuple[int, int]]] = {}
    for entry in history:
        row, start, end = (int(v) for v in entry)
        if row < 0:
            raise ValueError(f"Row must be >= 0, not {row}")
        if not 0 <= start < end:
            raise ValueError(f"Lifetime of row {row} must satisfy 0 <= start < end, "
                             f"not [{start}, {end})")
        rows.setdefault(row, []).append((start, end))
    counts = {}
    for row, spans in sorted(rows.items()):
        spans.sort()
        for (_, e0), (s1, _) in zip(spans, spans[1:]):
            if s1 < e0:
                raise ValueError(f"Lifetimes of row {row} overlap: one ends at {e0}, the next "
                                 f"starts at {s1}")
        arr = np.array(spans, dtype=np.int64)
        counts[row] = int(lifetime_refreshes(interval, arr[:, 0], arr[:, 1], duration).sum())
    return counts


def sweep_refreshes(step: int, rows: int, row, start, end) -> np.ndarray:
    """Refreshes a row live over ``(start, end)`` gets from a distributed-refresh sweep.

    The sweep (docs/edram.md, :class:`hdl.edram.spec.Sweep`) gives row ``row`` a slot at
    cycles ``row * step + k * rows * step``, ``k >= 0``, counted from the phase origin. A row is
    refreshed once for each slot it is live both before and after: ``start < slot < end``, where
    ``start`` is the cycle its first write takes effect in (the controller's commit cycle) and
    ``end`` the cycle its release does. A write in the slot cycle itself restores the row, and a
    release in it ends the need.
    Vectorized over ``row``, ``start`` and ``end``; for a row still live at the end of a
    simulation, pass that cycle as ``end``.
    """
    for value, name in ((step, "Sweep step"), (rows, "Sweep rows")):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")
    r = np.asarray(row, dtype=np.int64)
    s = np.asarray(start, dtype=np.int64)
    e = np.asarray(end, dtype=np.int64)
    if r.size and ((r < 0) | (r >= rows)).any():
        raise ValueError(f"Row must be between 0 and {rows - 1}")
    period = step * rows
    phase = r * step
    first = np.maximum(0, (s - phase) // period + 1)         # first k with slot > start
    last = -((phase - e) // period) - 1                       # last k with slot < end
    return np.maximum(0, last - first + 1)


def sweep_counts(step: int | None, rows: int, history: Iterable[tuple[int, int, int]]) -> int:
    """Total refreshes of one segment for lifetimes ``(row, start, end)`` (row within its bank).

    ``step=None`` is a refresh-less segment (0). Lifetimes of one bank-row must not overlap; a
    row in another bank with the same index is a separate entry with the same slots.
    """
    entries = np.array([tuple(int(v) for v in e) for e in history], dtype=np.int64).reshape(-1, 3)
    if step is None or not len(entries):
        return 0
    if (entries[:, 1] >= entries[:, 2]).any():
        raise ValueError("Lifetime end must be after its start")
    return int(sweep_refreshes(step, rows, entries[:, 0], entries[:, 1], entries[:, 2]).sum())


# --- policies and power ---------------------------------------------------------------------------

#: Refresh policies: SHIELD, the standard baseline and a KV-only (Kelle-like) relaxation.
POLICIES = ("shield", "standard", "kelle")
#: What the Kelle-like policy relaxes: the KV mantissa only (what the segmented hardware can do,
#: the default) or every bit of a KV word (the paper's "overall BER policy to the KV cache").
KELLE_SCOPES = ("mantissa", "word")


def _policy(policy):
    if policy not in POLICIES:
        raise ValueError(f"Refresh policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    return policy


def policy_intervals_us(policy: str, *, t_std: float = T_STD_US, t_rel: float = T_REL_US,
                        t_kelle: float = T_KELLE_US) -> dict[str, float]:
    """Refresh interval (us) of each segment under ``policy``; ``inf`` means refresh-less.

    ``standard``: every segment at ``t_std``; ``shield``: ``std`` at ``t_std``, ``kv_mant`` at
    ``t_rel``, ``qo_mant`` refresh-less; ``kelle``: ``kv_mant`` at ``t_kelle``, the others at
    ``t_std`` (the segmented hardware cannot relax KV exponents: ``std`` holds both classes).
    """
    _policy(policy)
    if policy == "standard":
        return {"std": t_std, "kv_mant": t_std, "qo_mant": t_std}
    if policy == "shield":
        return {"std": t_std, "kv_mant": t_rel, "qo_mant": math.inf}
    return {"std": t_std, "kv_mant": t_kelle, "qo_mant": t_std}


def _positive(value, what):
    v = np.asarray(value, dtype=np.float64)
    if np.isnan(v).any() or (v <= 0).any():
        raise ValueError(f"{what} must be positive, not {v[np.isnan(v) | (v <= 0)].flat[0]}")
    return v


def _fraction(b_part, b_total, what):
    part = np.asarray(b_part, dtype=np.float64)
    total = _positive(b_total, "Workspace capacity B_total")
    f = part / total
    if np.isnan(f).any() or (f < 0).any() or (f > 1).any():
        raise ValueError(f"{what} must be between 0 and B_total, not {part} of {total}")
    return f


def p_ref_std(e_ref_cycle, t_std=T_STD_US):
    """Standard refresh power ``P_ref_std = E_ref_cycle / T_std`` (Eq. 4, second term)."""
    return np.asarray(e_ref_cycle, dtype=np.float64) / _positive(t_std, "T_std")


def p_base(p_leak, e_ref_cycle, t_std=T_STD_US):
    """Baseline power ``P_base = P_leak + E_ref_cycle / T_std`` (Eq. 4)."""
    return np.asarray(p_leak, dtype=np.float64) + p_ref_std(e_ref_cycle, t_std)


def p_ref_exp(e_ref_cycle, t_std=T_STD_US):
    """Sign + exponent refresh power ``P_ref,exp = 9/16 * E_ref_cycle / T_std`` (Eq. 6)."""
    return STD_BITS / BF16.width * p_ref_std(e_ref_cycle, t_std)


def p_ref_kv(e_ref_cycle, b_kv, b_total, t_rel=T_REL_US):
    """KV-mantissa refresh power ``P_ref,kv = 7/16 * B_KV/B_total * E_ref_cycle / T_rel``
    (Eq. 7)."""
    f = _fraction(b_kv, b_total, "B_KV")
    return MANT_BITS / BF16.width * f * np.asarray(e_ref_cycle, float) / _positive(t_rel, "T_rel")


def p_ref_qo(b_qo, b_total):
    """QO-mantissa refresh power ``P_ref,qo = 7/16 * B_QO/B_total * 0 = 0`` (Eq. 8)."""
    return 0.0 * _fraction(b_qo, b_total, "B_QO")


def p_shield(p_leak, e_ref_cycle, b_kv, b_qo, b_total, t_std=T_STD_US, t_rel=T_REL_US):
    """SHIELD power ``P_SHIELD = P_leak + P_ref,exp + P_ref,kv + P_ref,qo`` (Eq. 5)."""
    if np.any(np.asarray(b_kv, float) + np.asarray(b_qo, float) > np.asarray(b_total, float)):
        raise ValueError("B_KV + B_QO must not exceed B_total")
    return (np.asarray(p_leak, dtype=np.float64) + p_ref_exp(e_ref_cycle, t_std)
            + p_ref_kv(e_ref_cycle, b_kv, b_total, t_rel) + p_ref_qo(b_qo, b_total))


def eta(p_leak, e_ref_cycle, b_kv, b_qo, b_total, t_std=T_STD_US, t_rel=T_REL_US):
    """Normalized energy reduction ``eta = 1 - P_SHIELD / P_base`` (Eq. 9, exact form)."""
    return 1.0 - (p_shield(p_leak, e_ref_cycle, b_kv, b_qo, b_total, t_std, t_rel)
                  / p_base(p_leak, e_ref_cycle, t_std))


def eta_approx(b_kv, b_total, t_std=T_STD_US, t_rel=T_REL_US):
    """Eq. 9's approximation ``1 - [9/16 + 7/16 * (B_KV/B_total) * (T_std/T_rel)]`` (exact when
    ``P_leak = 0``)."""
    f = _fraction(b_kv, b_total, "B_KV")
    w = BF16.width
    return 1.0 - (STD_BITS / w + MANT_BITS / w * f * _positive(t_std, "T_std")
                  / _positive(t_rel, "T_rel"))


def policy_power(policy: str, kv_fraction, *, p_leak=0.0, e_ref_cycle=T_STD_US, t_std=T_STD_US,
                 t_rel=T_REL_US, t_kelle=T_KELLE_US, kelle_scope="mantissa"):
    """Workspace power under ``policy`` for a KV share ``kv_fraction = B_KV / B_total`` (the rest is
    QO).

    ``P = P_leak + E_ref_cycle * sum over (class, field) of w / T``, with weights ``9/16 * share``
    (sign + exponent) and ``7/16 * share`` (mantissa) and ``1/T = 0`` when refresh-less. For
    ``shield`` this is Eq. 5 to 8, for ``standard`` Eq. 4. ``kelle`` relaxes the KV mantissa to
    ``t_kelle`` (``kelle_scope="mantissa"``) or the whole KV word (``"word"``). Defaults are
    normalized units: ``e_ref_cycle = t_std`` (the energy of one refresh sweep of the whole
    workspace is not given by the paper; this makes the standard refresh power 1, so ``p_leak``
    reads as the ratio ``P_leak / P_ref_std``) and ``p_leak=0`` (refresh power only).
    """
    _policy(policy)
    if kelle_scope not in KELLE_SCOPES:
        raise ValueError(f"Kelle scope must be one of {', '.join(KELLE_SCOPES)}, "
                         f"not {kelle_scope!r}")
    f = np.asarray(kv_fraction, dtype=np.float64)
    if np.isnan(f).any() or (f < 0).any() or (f > 1).any():
        raise ValueError(f"KV fraction must be between 0 and 1, not "
                         f"{f[np.isnan(f) | (f < 0) | (f > 1)].flat[0]}")
    iv = policy_intervals_us(policy, t_std=t_std, t_rel=t_rel, t_kelle=t_kelle)
    for name, t in iv.items():
        _positive(t, f"Interval of segment {name}")
    rate = {seg: 0.0 if math.isinf(t) else 1.0 / t for seg, t in iv.items()}
    ws, wm = STD_BITS / BF16.width, MANT_BITS / BF16.width
    if policy == "kelle" and kelle_scope == "word":
        exp_rate = ws * ((1 - f) * rate["std"] + f / t_kelle)
    else:
        exp_rate = ws * rate["std"]
    mant_rate = wm * (f * rate["kv_mant"] + (1 - f) * rate["qo_mant"])
    return np.asarray(p_leak, dtype=np.float64) + np.asarray(e_ref_cycle, float) * (exp_rate
                                                                                   + mant_rate)


def efficiency_gain(policy: str, kv_fraction, **kwargs):
    """Efficiency gain ``P_base / P_policy`` (Sec. IV-C), same keywords as :func:`policy_power`."""
    return policy_power("standard", kv_fraction, **kwargs) / policy_power(policy, kv_fraction,
                                                                           **kwargs)


def refresh_energy_reduction(policy: str, kv_fraction, **kwargs):
    """Refresh-energy reduction ``1 - P_ref,policy / P_ref,std`` (leakage excluded)."""
    kwargs = dict(kwargs, p_leak=0.0)
    return 1.0 - policy_power(policy, kv_fraction, **kwargs) / policy_power("standard",
                                                                            kv_fraction, **kwargs)


# --- fault injection ------------------------------------------------------------------------------

def _mask(mask) -> int:
    if not isinstance(mask, (int, np.integer)) or isinstance(mask, bool) or \
            not 0 <= mask <= _WORD_MAX:
        raise ValueError(f"Mask must be an integer between 0 and {_WORD_MAX:#06x}, not {mask!r}")
    return int(mask)


def _probability(p, what, shape=None):
    q = np.asarray(p, dtype=np.float64)
    if np.isnan(q).any() or (q < 0).any() or (q > 1).any():
        raise ValueError(f"{what} must be between 0 and 1, not "
                         f"{q[np.isnan(q) | (q < 0) | (q > 1)].flat[0]}")
    return q if shape is None else np.broadcast_to(q, shape)


def inject(bits, ber, mask: int, rng: np.random.Generator) -> np.ndarray:
    """Flip each bit of ``bits`` selected by ``mask`` independently with probability ``ber``.

    ``bits``: BF16 patterns (``np.uint16`` array); ``ber``: a probability or an array broadcasting
    to ``bits`` (per-element, e.g. ``ber(age)``); ``mask``: 16-bit, e.g. :data:`MASK_MANTISSA`
    (``0x007F``) or :data:`MASK_ALL`; ``rng``: a ``numpy.random.Generator``. Bits outside the mask
    never change. Returns a new ``np.uint16`` array.
    """
    b = _codes(bits, "BF16 bits", BF16.width)
    m = _mask(mask)
    p = _probability(ber, "Bit error rate", b.shape)
    positions = [i for i in range(BF16.width) if m >> i & 1]
    flips = np.zeros(b.shape, np.uint16)
    if positions:
        draws = rng.random(b.shape + (len(positions),)) < p[..., None]
        weights = np.array([1 << i for i in positions], np.uint16)
        flips = (draws * weights).sum(axis=-1, dtype=np.uint16)
    return b ^ flips


def inject_algorithm1(bits, rho, mask: int, rng: np.random.Generator) -> np.ndarray:
    """The paper's Algorithm 1 (lines 6 to 9) on BF16 patterns.

    ``B_flip = U(shape) < rho``; ``N_bits = RandomInt16 AND M``; ``X_noisy = X XOR (N_bits *
    B_flip)``. Each element is hit with probability ``rho`` and then each masked bit flips with
    probability 1/2, so a masked bit flips with probability ``rho / 2``.
    """
    b = _codes(bits, "BF16 bits", BF16.width)
    m = _mask(mask)
    p = _probability(rho, "Flip probability rho", b.shape)
    hit = rng.random(b.shape) < p
    noise = rng.integers(0, 1 << BF16.width, size=b.shape, dtype=np.uint16) & np.uint16(m)
    return b ^ (noise * hit).astype(np.uint16)
