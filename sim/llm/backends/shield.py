"""SHIELD numerics: the float model whose attention workspace sits in segmented-refresh eDRAM.

Contract
--------
:class:`Shield` is the float reference (:class:`sim.llm.model.Numerics`) except for what storage
does: Q and O (the QO workspace, ``keep(kind="q"/"o")``) and K and V (the KV cache,
``keep("k"/"v")``) are rounded to BF16 (round to nearest even, ``ml_dtypes``), their 16-bit codes
get bit errors from :mod:`golden.edram`, and they come back as float32 (or the back-end's
``dtype``). Projections, norms, RoPE, attention, SwiGLU and the head stay float.

Two ways to choose the errors:

* ``policy`` (``shield``, ``standard``, ``kelle``): each bit's error probability is the golden
  decay model :func:`golden.edram.ber` at the worst age the bit reaches in its segment,
  ``min(residency, refresh interval)``, with the intervals from
  :func:`golden.edram.policy_intervals_us` and the segments of the paper (sign and exponent in
  ``std``, the mantissa in :func:`golden.edram.mantissa_segment` of the tensor's class: ``kv_mant``
  for K and V, ``qo_mant`` for Q and O). Residencies (docs/llm.md, "SHIELD"):
  Q and O live ``qo_us`` = 1500 us (the paper's Fig. 1(b) bound on one layer's QO lifetime, where
  the golden model is calibrated to 0.04 %); a K or V entry lives from its write to its last read,
  ``kv_us`` = infinity by default (at sim/shield.py's 1 ms per decode step every entry but the
  two newest outlives T_rel), so its worst age is its segment's refresh interval. Errors are drawn
  once, when the datum is written (refresh latching of decayed cells is not modelled).
* ``ber`` (Fig. 2's sweeps): a fixed rate on the bits ``mask`` of the tensors ``target`` (``all``:
  Q, K, V, O; ``qo``; ``kv``), by Algorithm 1 (:func:`golden.edram.inject_algorithm1`, ``rho =
  ber`` per element, each masked bit of a hit element flips with probability 1/2: the paper's
  method and axis) or per bit (:func:`golden.edram.inject`, ``method="bits"``). The mask defaults
  to every bit for ``target="all"`` and to :data:`golden.edram.MASK_MANTISSA` otherwise.

Random numbers: one generator per (layer, kind), seeded by ``(seed, layer, kind)``, drawing on at
every call. A run from a fresh back-end (or after :meth:`Shield.reset`) is reproducible; a
prefill and a token-by-token decode of the same ids draw different errors (the calls differ), so
the cache-equals-recompute check holds only without errors (``ber=0`` or ``standard``).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from golden import edram
from sim.llm.model import Numerics, budgets

__all__ = ["Shield", "KINDS", "KIND_CLASS", "TARGETS", "METHODS", "MASK_STD", "QO_US", "KV_US",
           "to_bf16_codes", "from_bf16_codes"]

#: The tensors ``keep`` sees, in the order that seeds their generators.
KINDS = ("q", "k", "v", "o")
#: The tensor class (golden.edram.TENSOR_CLASSES) of each kind.
KIND_CLASS = {"q": "QO", "o": "QO", "k": "KV", "v": "KV"}
#: Sweep targets: which tensors get errors.
TARGETS = {"all": KINDS, "qo": ("q", "o"), "kv": ("k", "v")}
#: Sweep injection methods: the paper's Algorithm 1, or independent bit flips.
METHODS = ("algorithm1", "bits")
#: The sign and exponent bits (the ``std`` segment) of a BF16 code.
MASK_STD = edram.MASK_ALL & ~edram.MASK_MANTISSA
#: Residency of Q and O (us): the paper's bound on one layer's QO lifetime (Fig. 1(b)).
QO_US = 1500.0
#: Residency of a K or V entry (us): persistent, longer than any refresh interval.
KV_US = math.inf

_BF16 = ml_dtypes.bfloat16


def to_bf16_codes(x: np.ndarray) -> np.ndarray:
    """BF16 codes (``np.uint16``) of ``x`` rounded to nearest even."""
    return np.asarray(x, dtype=np.float32).astype(_BF16).view(np.uint16)


def from_bf16_codes(codes: np.ndarray, dtype=np.float32) -> np.ndarray:
    """The values of BF16 codes in ``dtype`` (exact: BF16 is a prefix of float32)."""
    return np.asarray(codes, dtype=np.uint16).view(_BF16).astype(dtype)


def _choice(value, allowed, what):
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, allowed))}, "
                         f"not {value!r}")
    return value


def _residency(value, what):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{what} must be a positive number of microseconds (inf allowed), "
                         f"not {value!r}")
    return float(value)


class Shield(Numerics):
    """Float model with BF16 Q, K, V, O in SHIELD's eDRAM segments (module notes).

    Parameters
    ----------
    mf : sim.llm.loader.ModelFile
        The model.
    policy : {"shield", "standard", "kelle"} or None
        Refresh policy whose decay model draws the errors; ``None``: BF16 storage without errors.
        Ignored when ``ber`` is given.
    ber : float, optional
        Fixed error rate for the Fig. 2 sweeps (``rho`` of Algorithm 1, or the per-bit rate with
        ``method="bits"``), in [0, 1].
    mask : int, optional
        The 16-bit mask of the bits that may flip in a sweep; default every bit for
        ``target="all"``, the mantissa (``0x007F``) for ``qo`` and ``kv``.
    seed : int
        Seeds the generators (with the layer and the kind).
    dtype : numpy dtype
        The float model's dtype.
    target : {"all", "qo", "kv"}
        Which tensors a sweep hits (the others still round to BF16).
    method : {"algorithm1", "bits"}
        Sweep injection: the paper's Algorithm 1 or independent bit flips.
    qo_us, kv_us : float
        Residencies (us) of Q/O and of a K/V entry under a policy (module notes).
    kelle_scope : {"mantissa", "word"}
        What ``kelle`` relaxes: the KV mantissa (golden default) or the whole KV word.
    """

    emulated = {
        "keep q, o": "float32 -> BF16 (RNE, ml_dtypes), golden.edram.inject per segment at "
                     "ber(min(qo_us, interval)) (policy) or inject_algorithm1/inject (ber), "
                     "-> float32",
        "keep k, v": "same, KV mantissa in kv_mant: ber(min(kv_us, interval)) per segment",
        "norm_project, project, glu, attention, rope, head": "float32 (Numerics)",
    }
    #: A stored value read back may be off by BF16's rounding; bit errors show as over budget.
    budgets = budgets(None, None, keep_q="bf16", keep_o="bf16")

    def __init__(self, mf, policy="shield", ber=None, mask=None, seed=0, dtype=np.float32, *,
                 target="all", method="algorithm1", qo_us=QO_US, kv_us=KV_US,
                 kelle_scope="mantissa"):
        super().__init__(mf, dtype=dtype)
        self.target = _choice(target, tuple(TARGETS), "Target")
        self.method = _choice(method, METHODS, "Method")
        self.kelle_scope = _choice(kelle_scope, edram.KELLE_SCOPES, "Kelle scope")
        self.qo_us = _residency(qo_us, "QO residency qo_us")
        self.kv_us = _residency(kv_us, "KV residency kv_us")
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"Seed must be a non-negative integer, not {seed!r}")
        self.seed = int(seed)
        if ber is not None:
            if isinstance(ber, bool) or not isinstance(ber, (int, float, np.floating)) \
                    or not 0 <= ber <= 1:
                raise ValueError(f"BER must be a number between 0 and 1, not {ber!r}")
            self.ber = float(ber)
            default = edram.MASK_ALL if target == "all" else edram.MASK_MANTISSA
            self.mask = default if mask is None else mask
            if isinstance(self.mask, bool) or not isinstance(self.mask, (int, np.integer)) \
                    or not 0 <= self.mask <= edram.MASK_ALL:
                raise ValueError(f"Mask must be an integer between 0 and {edram.MASK_ALL:#06x}, "
                                 f"not {mask!r}")
            self.mask = int(self.mask)
            self.policy = None
            self.name = f"shield-ber{self.ber:g}-{self.target}-{self.mask:#06x}"
        else:
            if mask is not None:
                raise ValueError(f"Mask applies to a BER sweep only (ber=None), not {mask!r}")
            if policy is not None:
                _choice(policy, edram.POLICIES, "Policy")
            self.ber, self.mask, self.policy = None, None, policy
            self.name = "shield-bf16" if policy is None else f"shield-{policy}"
        self.rates = self._policy_rates() if self.policy is not None else None
        self.reset()

    def _policy_rates(self) -> dict[str, tuple[float, float]]:
        """``kind -> (ber of sign/exponent bits, ber of mantissa bits)`` under the policy."""
        iv = edram.policy_intervals_us(self.policy)
        rates = {}
        for kind in KINDS:
            cls = KIND_CLASS[kind]
            life = self.qo_us if cls == "QO" else self.kv_us
            t_std = iv["std"]
            if self.policy == "kelle" and self.kelle_scope == "word" and cls == "KV":
                t_std = iv["kv_mant"]        # the paper's Kelle relaxes the whole KV word
            t_mant = iv[edram.mantissa_segment(cls)]
            # The worst age of a bit: its residency, or its refresh interval if that is shorter.
            rates[kind] = (float(edram.ber(min(life, t_std))),
                           float(edram.ber(min(life, t_mant))))
        return rates

    def reset(self) -> None:
        """Restart every generator: the next run draws the same errors as the first."""
        self._rngs = {}

    def rng(self, layer: int, kind: str) -> np.random.Generator:
        """The generator of ``(layer, kind)``, seeded by ``(seed, layer, kind)``."""
        key = (layer, kind)
        if key not in self._rngs:
            self._rngs[key] = np.random.default_rng([self.seed, layer, KINDS.index(kind)])
        return self._rngs[key]

    def store(self, layer: int, kind: str, codes: np.ndarray) -> np.ndarray:
        """What the eDRAM returns for the BF16 ``codes`` of ``(layer, kind)``: codes with errors."""
        rng = self.rng(layer, kind)
        if self.ber is not None:
            if kind not in TARGETS[self.target] or self.ber == 0:
                return codes
            if self.method == "algorithm1":
                return edram.inject_algorithm1(codes, self.ber, self.mask, rng)
            return edram.inject(codes, self.ber, self.mask, rng)
        if self.policy is None:
            return codes
        p_std, p_mant = self.rates[kind]
        # Two calls, one per segment: their bits decay independently at their own rates.
        codes = edram.inject(codes, p_std, MASK_STD, rng)
        return edram.inject(codes, p_mant, edram.MASK_MANTISSA, rng)

    def keep(self, layer: int, kind: str, x: np.ndarray) -> np.ndarray:
        """``x`` stored as BF16 in the eDRAM and read back: rounded (RNE), errors added by
        :meth:`store`, returned in the back-end's dtype (any shape)."""
        _choice(kind, KINDS, "Kind")
        codes = self.store(layer, kind, to_bf16_codes(x))
        return from_bf16_codes(codes, self.dtype)
