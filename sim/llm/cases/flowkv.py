"""FlowKV real-model cases: one decode step of a layer as the FlowKV family's blocks take it,
from the ``flowkv`` back-end (:mod:`sim.llm.backends.flowkv`): the projections on FusedDQP
(``flowkv-dqp``) and the attention on the tile pair (``flowkv``) or the array (``flowkv-array``).

Ops (:func:`ops`), in the layer's order: ``attn_q``, ``attn_k``, ``attn_v``, the attention ops,
``attn_output``, ``ffn_gate``, ``ffn_up``, ``ffn_down``.

* Projections (the names of :data:`sim.llm.loader.PROJECTIONS`): FusedDQP's GEMV ``y = W a``.
  Inputs ``records``, the Q4NX row records of the weights in the engine's stream order
  (:func:`golden.flowkv_dqp.q4nx_records` at tile :data:`TILE` of the back-end's
  :meth:`~sim.llm.backends.flowkv.FlowKV.q4nx`: the file's Q4_1 blocks, ``d`` and ``m`` rounded
  to bf16), and ``a``, the bf16 codes the back-end made of the float input
  (:meth:`~sim.llm.backends.flowkv.FlowKV.activation`): the RMSNorm output (``attn_q/k/v``,
  ``ffn_gate/up``), the attention output (``attn_output``), the SwiGLU output (``ffn_down``).
  Expected ``y``: the fp32 codes of the back-end's own result (the captured ``norm_project`` or
  ``project`` call; float32, exact). ``meta``: ``rows`` (those computed), ``of_rows``, ``cols``,
  ``tile``.
* ``attention.kv<g>``: one KV head ``g`` and its ``G`` query heads, what one tile pair
  (``flowkv``) computes in one decode step: ``q`` ``(G, d)``, ``k`` and ``v`` ``(T + 1, d)``,
  ``o`` ``(G, d)`` (bf16 codes, ``np.uint16``);
* ``attention``: every head of the layer over every KV head, what an array of one pair per KV
  head (``flowkv-array``) computes in one decode step: ``q`` ``(H, d)``, ``k`` and ``v``
  ``(T + 1, KVH, d)``, ``o`` ``(H, d)``.

The attention inputs are the attention hook's own arguments and the expected ``o`` is the hook's
result (bf16 values in float32, converted to their codes exactly); the decode step at position
``T`` attends keys ``0 .. T``, chunk ``L_c`` of the back-end (``numerics.chunk``). ``meta``
holds the step's command (``position``, ``length``), the back-end's ``chunk``, the shapes and,
for ``attention.kv<g>``, ``kv_head``.

Options (:data:`OPTIONS`): ``ops``, the kinds to build (:data:`KINDS`: projection names,
``attention.kv`` for the per-pair ops, ``attention`` for the array's; default all); ``rows``,
the first ``rows`` output rows of each projection (a positive multiple of :data:`TILE`, for a
short simulation; default all); ``kv_heads``, the KV heads of the ``attention.kv<g>`` ops
(default all).

``memwall model generate --numerics flowkv --rtl`` (:mod:`cocotb_tests.realdata.swap`) runs the
hooks of :data:`SWAP_HOOKS` on the blocks: a projection call on FusedDQP, the attention call on
the array (:func:`swap_options`), and the hook's result put back together from what the RTL
returned (:func:`assemble`). RMSNorm, RoPE, SwiGLU, the residual adds, the embedding and the
LM head stay on the host.
"""

from __future__ import annotations

import numpy as np

from golden.arith.float import from_float, to_float
from golden.flowkv_dqp import Q4NX, q4nx_records
from hdl.arith.format import BF16

from ..loader import PROJECTIONS
from . import CaseError, Capture, Op
from . import inflash

__all__ = ["NUMERICS", "OPTIONS", "KINDS", "TILE", "SWAP_HOOKS", "ops", "swap_options",
           "assemble"]

NUMERICS = "flowkv"
OPTIONS = {"ops": None, "rows": None, "kv_heads": None}
#: Every op kind a case can hold: the projections, the pair's and the array's attention.
KINDS = PROJECTIONS + ("attention.kv", "attention")
#: FusedDQP's output tile ``m`` of the records: the paper's decode tile (32 rows, Sec. 3.2.1),
#: a divisor of every SmolLM2 projection's rows (192, 576, 1536); the runs use it.
TILE = 32
#: The hooks whose work the blocks do: the projections (FusedDQP) and the attention (FlowKV).
SWAP_HOOKS = ("norm_project", "project", "attention")


def _bf16_codes(values: np.ndarray, what: str) -> np.ndarray:
    """The bf16 codes of ``values``, which the back-end returned as bf16 values in float32."""
    codes = from_float(np.asarray(values, np.float64), BF16)
    back = to_float(codes, BF16)
    if not np.array_equal(back, np.asarray(values, np.float64), equal_nan=True):
        raise CaseError(f"{what}: the back-end's result is not bf16 values")
    return codes


def _kinds(kinds) -> tuple:
    if kinds is None:
        return KINDS
    if isinstance(kinds, str) or not isinstance(kinds, (list, tuple)) or not kinds \
            or not all(k in KINDS for k in kinds):
        raise CaseError(f"ops must be a non-empty list of {', '.join(KINDS)}, not {kinds!r}")
    return tuple(kinds)


def _rows(rows) -> int | None:
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1
                             or rows % TILE):
        raise CaseError(f"rows must be a positive multiple of the tile {TILE} (or None: all), "
                        f"not {rows!r}")
    return rows


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


def _projection_call(cap: Capture, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The float input of projection ``name`` in the step and the back-end's result for it."""
    for call in cap.find("norm_project"):
        h, norm, names = call.args
        if name in names:
            return cap.one("norm", norm=norm).result, call.result[list(names).index(name)]
    call = cap.one("project", name=name)
    return call.args[1], call.result


def _projection(cap: Capture, name: str, rows: int | None) -> Op:
    x, result = _projection_call(cap, name)
    nx = cap.numerics
    w = nx.q4nx(cap.layer, name)
    full, cols = w.shape
    r = full if rows is None else min(rows, full)
    if r % TILE:
        raise CaseError(f"layer {cap.layer} {name}: {r} rows are not a multiple of the tile "
                        f"{TILE}")
    part = Q4NX(d=w.d[:r], m=w.m[:r], q=w.q[:r])
    y = np.asarray(result, np.float32)[0, :r].view(np.uint32).copy()
    shape = (f"{full} x {cols}" if r == full else f"rows 0-{r - 1} of {full} x {cols}") + \
        ", Q4NX (Q4_1 blocks, bf16 d and m) x bf16"
    return Op(name, shape, {"records": q4nx_records(part, TILE), "a": nx.activation(x)[0]},
              {"y": y}, {"rows": r, "of_rows": full, "cols": cols, "tile": TILE,
                         "max_abs_a": float(np.abs(np.asarray(x, np.float64)).max())})


def _attention(cap: Capture, kinds: tuple, kv_heads) -> list[Op]:
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
    for g in _kv_heads(kv_heads, kvh) if "attention.kv" in kinds else ():
        heads_g = slice(g * group, (g + 1) * group)
        out.append(Op(f"attention.kv{g}",
                      f"{group} query heads x {d} over {keys} of KV head {g}, bf16",
                      {"q": q[0, heads_g], "k": k[:, g], "v": v[:, g]},
                      {"o": o[heads_g]}, {**meta, "kv_head": g}))
    if "attention" in kinds:
        out.append(Op("attention", f"{heads} query heads x {d} over {keys} of {kvh} KV heads, "
                      "bf16", {"q": q[0], "k": k, "v": v}, {"o": o}, {**meta, "kv_heads": kvh}))
    return out


def ops(cap: Capture, *, ops=None, rows=None, kv_heads=None) -> list[Op]:
    """The ops of ``cap``'s decode step (module notes), in the layer's order.

    Parameters
    ----------
    cap : Capture
        A decode step of the ``flowkv`` back-end.
    ops : list of str, optional
        The kinds to build (:data:`KINDS`); ``None`` (default): all.
    rows : int, optional
        The first ``rows`` rows of each projection, a positive multiple of :data:`TILE`;
        ``None`` (default): all.
    kv_heads : list of int, optional
        The KV heads to make ``attention.kv<g>`` ops of; ``None`` (default): every KV head.

    Raises
    ------
    CaseError
        An unknown kind, ``rows`` not a positive multiple of :data:`TILE`, ``kv_heads`` not a
        non-empty list of distinct KV heads of the model, a capture of another back-end.
    """
    kinds, rows = _kinds(ops), _rows(rows)
    if getattr(cap.numerics, "name", None) != NUMERICS:
        raise CaseError(f"a FlowKV case needs a capture of the {NUMERICS} back-end, not "
                        f"{getattr(cap.numerics, 'name', cap.numerics)!r}")
    out = [_projection(cap, n, rows) for n in PROJECTIONS[:3] if n in kinds]
    if {"attention.kv", "attention"} & set(kinds):
        out += _attention(cap, kinds, kv_heads)
    return out + [_projection(cap, n, rows) for n in PROJECTIONS[3:] if n in kinds]


def swap_options(hook: str, args: tuple) -> dict:
    """The options of :func:`ops` for one call of a hook of :data:`SWAP_HOOKS` (``args``: the
    call's arguments after ``layer``): its projections on FusedDQP, or the whole step's
    attention on the array."""
    if hook == "attention":
        return {"ops": ["attention"]}
    return inflash.swap_options(hook, args)


def assemble(hook: str, args: tuple, outputs: dict):
    """The hook's result, as the back-end returns it, from the outputs of its ops (``{op name:
    {output name: array}}``, the expected arrays' names and codes): float32 ``(1, rows)`` per
    projection (as :func:`sim.llm.cases.inflash.assemble`), the attention's bf16 values as
    float32 ``(1, heads, head_dim)``."""
    if hook != "attention":
        return inflash.assemble(hook, args, outputs)
    o = to_float(np.asarray(outputs["attention"]["o"], np.uint16), BF16)
    return o.astype(np.float32).reshape(args[0].shape)
