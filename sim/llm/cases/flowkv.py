"""FlowKV real-model case: the attention of one decode step, as the FlowKV blocks take it.

The ``flowkv`` back-end (:mod:`sim.llm.backends.flowkv`) computes a layer's attention with
:func:`golden.flowkv.attend_many`, which is :func:`golden.flowkv.attend` per KV head: the
decode step at position ``T`` attends keys ``0 .. T`` of the bf16 KV cache, chunk ``L_c`` of the
back-end (``numerics.chunk``). The projections around it are FusedDQP on Q4NX weights, whose
RTL is not part of this family's blocks; these ops are the attention steps only.

Ops (inputs and outputs are bf16 codes, ``np.uint16``; ``G`` query heads per KV head, ``d``
the head dimension):

* ``attention.kv<g>``: one KV head ``g`` and its ``G`` query heads, what one tile pair
  (``flowkv``) computes in one decode step: ``q`` ``(G, d)``, ``k`` and ``v`` ``(T + 1, d)``,
  ``o`` ``(G, d)``;
* ``attention``: every head of the layer over every KV head, what an array of one pair per KV
  head (``flowkv-array``) computes in one decode step: ``q`` ``(H, d)``, ``k`` and ``v``
  ``(T + 1, KVH, d)``, ``o`` ``(H, d)``.

The inputs are the attention hook's own arguments and the expected ``o`` is the hook's result
(bf16 values in float32, converted to their codes exactly): nothing is recomputed here. ``meta``
holds the step's command (``position``, ``length``), the back-end's ``chunk``, the shapes and,
for ``attention.kv<g>``, ``kv_head``.
"""

from __future__ import annotations

import numpy as np

from golden.arith.float import from_float, to_float
from hdl.arith.format import BF16

from . import CaseError, Capture, Op

__all__ = ["NUMERICS", "OPTIONS", "ops"]

NUMERICS = "flowkv"
#: ``kv_heads``: the KV heads to make ``attention.kv<g>`` ops of (a list of indices; ``None``:
#: every KV head of the model); ``step``: add the whole step's ``attention`` op.
OPTIONS = {"kv_heads": None, "step": True}


def _bf16_codes(values: np.ndarray, what: str) -> np.ndarray:
    """The bf16 codes of ``values``, which the back-end returned as bf16 values in float32."""
    codes = from_float(np.asarray(values, np.float64), BF16)
    back = to_float(codes, BF16)
    if not np.array_equal(back, np.asarray(values, np.float64), equal_nan=True):
        raise CaseError(f"{what}: the back-end's result is not bf16 values")
    return codes


def _kv_heads(kv_heads, count: int) -> list[int]:
    if kv_heads is None:
        return list(range(count))
    if not isinstance(kv_heads, (list, tuple)) or not kv_heads:
        raise CaseError(f"kv_heads must be None or a non-empty list of KV heads from 0 to "
                        f"{count - 1}, not {kv_heads!r}")
    for g in kv_heads:
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < count:
            raise CaseError(f"kv_heads must hold KV heads from 0 to {count - 1}, not {g!r}")
    if len(set(kv_heads)) != len(kv_heads):
        raise CaseError(f"kv_heads must not repeat a KV head, not {list(kv_heads)!r}")
    return list(kv_heads)


def ops(cap: Capture, *, kv_heads=None, step: bool = True) -> list[Op]:
    """The attention ops of ``cap``'s decode step (module notes).

    Parameters
    ----------
    cap : Capture
        A decode step of the ``flowkv`` back-end.
    kv_heads : list of int, optional
        The KV heads to make one-pair ops of; ``None`` (default): every KV head.
    step : bool
        Also make the whole step's ``attention`` op (the array's).

    Raises
    ------
    CaseError
        ``kv_heads`` not a non-empty list of distinct KV heads of the model, ``step`` not a
        bool, a capture of another back-end.
    """
    if not isinstance(step, bool):
        raise CaseError(f"step must be True or False, not {step!r}")
    if getattr(cap.numerics, "name", None) != NUMERICS:
        raise CaseError(f"a FlowKV case needs a capture of the {NUMERICS} back-end, not "
                        f"{getattr(cap.numerics, 'name', cap.numerics)!r}")
    call = cap.one("attention")
    q, k, v, first = call.args
    tokens, heads, d = q.shape
    length, kvh = k.shape[:2]
    if tokens != 1 or first != cap.position or length != cap.position + 1:
        raise CaseError(f"layer {cap.layer}: expected one decode query at position "
                        f"{cap.position} over {cap.position + 1} keys, the back-end attended "
                        f"{tokens} at {first} over {length}")
    group = heads // kvh
    o = _bf16_codes(call.result[0], f"layer {cap.layer} attention")
    meta = {"position": int(first), "length": int(length), "chunk": int(cap.numerics.chunk),
            "head_dim": int(d), "group": int(group)}
    keys = f"{length} keys (L_c {meta['chunk']})"
    out = []
    for g in _kv_heads(kv_heads, kvh):
        heads_g = slice(g * group, (g + 1) * group)
        out.append(Op(f"attention.kv{g}",
                      f"{group} query heads x {d} over {keys} of KV head {g}, bf16",
                      {"q": q[0, heads_g], "k": k[:, g], "v": v[:, g]},
                      {"o": o[heads_g]}, {**meta, "kv_head": g}))
    if step:
        out.append(Op("attention", f"{heads} query heads x {d} over {keys} of {kvh} KV heads, "
                      "bf16", {"q": q[0], "k": k, "v": v}, {"o": o}, {**meta, "kv_heads": kvh}))
    return out
