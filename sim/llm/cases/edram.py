"""Real-model cases of the SHIELD eDRAM family (``edram``, ``edram-fpga``): the BF16 Q, K, V and
O that one decode step of the ``shield`` back-end keeps in the eDRAM workspace, under each refresh
policy.

One op per policy in ``policies`` and tensor in ``kinds``, named ``<policy>.<kind>``
(``shield.q``), in the order the step keeps them (q, k, v, o):

* ``inputs["data"]``: the BF16 codes the back-end stores, ``to_bf16_codes`` of ``keep``'s
  argument (the function :meth:`sim.llm.backends.shield.Shield.keep` calls), flattened in C order:
  Q 9 heads x 64 = 576 words, K and V 3 x 64 = 192, O 576;
* ``inputs["lost_std"]``, ``inputs["lost_mant"]``: the bit errors the back-end's injection drew
  for those words, per segment: the 9-bit sign-and-exponent mask (the ``std`` segment) and the
  7-bit mantissa mask (``kv_mant`` for K and V, ``qo_mant`` for Q and O). The decay harness makes
  exactly those cells lose their charge (:mod:`cocotb_tests.edram.macro`, scripted decay);
* ``expected["data"]``: the codes ``keep`` returned (its result is BF16-valued, so the codes are
  exact).

How the back-end's injection maps to the segments: :meth:`Shield.store` calls
:func:`golden.edram.inject` twice, once on the sign and exponent bits (``MASK_STD``) at the BER of
their worst age and once on the mantissa (``MASK_MANTISSA``) at the BER of theirs, each bit a
Bernoulli draw of "its retention time is shorter than its worst age", drawn once per write. The
two masks are disjoint and are exactly :func:`golden.edram.split`'s segments, so the flip pattern
``returned ^ written`` splits into the two segments' losses without loss or overlap. A test
(tests/test_cases_edram.py) redraws the injection from a fresh back-end with the prefill's draws
replayed and finds the same pattern: the losses are the golden's draws for this step.

The ``shield`` policy is the capture :func:`sim.llm.cases.case` made (``NUMERICS``); each other
policy is captured here with its own back-end (``shield-standard``, ``shield-kelle``) over the
same prompt and layer, since its errors change the KV cache and every later activation.

Meta per op: ``policy``, ``kind``, ``cls`` (``QO`` or ``KV``), ``segment`` (the mantissa's),
``ber_std`` and ``ber_mant`` (the rates the back-end drew at), ``lost_bits`` (flipped bits),
``residency_us`` (how long the back-end says the tensor lives: ``qo_us`` for Q and O; ``None`` for
K and V, which live until the cache is freed).
"""

from __future__ import annotations

import math

import numpy as np

from golden import edram
from sim.llm.backends import NUMERICS as BACKENDS
from sim.llm.backends import numerics
from sim.llm.backends.shield import KIND_CLASS, KINDS, to_bf16_codes

from . import CaseError, Op, capture

__all__ = ["NUMERICS", "OPTIONS", "POLICY_BACKENDS", "ops"]

#: The back-end :func:`sim.llm.cases.case` captures: SHIELD's own policy.
NUMERICS = "shield"
#: ``policies``: the refresh policies, each its own back-end run; ``kinds``: the tensors kept.
OPTIONS = {"policies": list(edram.POLICIES), "kinds": list(KINDS)}
#: policy -> the name of the ``Shield`` back-end with that policy (sim.llm.backends.NUMERICS).
POLICY_BACKENDS = {kwargs["policy"]: name for name, (_, cls, kwargs) in BACKENDS.items()
                   if cls == "Shield" and kwargs.get("policy") in edram.POLICIES}


def _choices(value, allowed, what: str) -> list:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value \
            or len(set(value)) != len(value) or not set(value) <= set(allowed):
        raise CaseError(f"{what} must be a non-empty list of distinct names from "
                        f"{', '.join(allowed)}, not {value!r}")
    return [a for a in allowed if a in value]      # the step's order, whatever the option's


def ops(cap, *, policies=OPTIONS["policies"], kinds=OPTIONS["kinds"]) -> list[Op]:
    """The ops of the case (module notes) from the ``shield`` capture ``cap``."""
    policies = _choices(policies, edram.POLICIES, "policies")
    kinds = _choices(kinds, KINDS, "kinds")
    out = []
    for policy in policies:
        here = cap
        if policy != cap.numerics.policy:
            here = capture(cap.numerics.mf, numerics(POLICY_BACKENDS[policy], cap.numerics.mf),
                           cap.ids, cap.layer)
        out += [_op(here, policy, kind) for kind in kinds]
    return out


def _op(cap, policy: str, kind: str) -> Op:
    """One tensor of one policy's step: written codes, the drawn losses, what ``keep`` returned."""
    call = cap.one("keep", kind=kind)
    x = call.args[1]
    written = to_bf16_codes(x).reshape(-1)
    returned = to_bf16_codes(call.result).reshape(-1)
    lost_std, lost_mant = edram.split(written ^ returned)
    nx = cap.numerics
    cls = KIND_CLASS[kind]
    ber_std, ber_mant = nx.rates[kind]
    residency = nx.qo_us if cls == "QO" else nx.kv_us
    dims = " x ".join(str(d) for d in x.shape[1:])
    meta = {"policy": policy, "kind": kind, "cls": cls, "segment": edram.mantissa_segment(cls),
            "ber_std": ber_std, "ber_mant": ber_mant,
            "lost_bits": int(np.bitwise_count(written ^ returned).sum()),
            "residency_us": None if math.isinf(residency) else residency,
            "layer": cap.layer, "position": cap.position}
    return Op(f"{policy}.{kind}", f"{kind.upper()} {dims} = {written.size} bf16 words",
              {"data": written, "lost_std": lost_std, "lost_mant": lost_mant},
              {"data": returned}, meta)

