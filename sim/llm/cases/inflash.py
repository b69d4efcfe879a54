"""KVNAND (``inflash``) real-model cases: one decoder layer's operations as the in-flash PE
takes them, from the ``kvnand`` back-end's decode step (:mod:`sim.llm.backends.kvnand`).

Operations (:func:`ops`), in the layer's order:

* the seven projections (:data:`PROJECTIONS`): a ``w4a16`` GEMV of the file's Q4_1 blocks
  (``codes`` 0..15, fp16 ``scales`` ``d`` and ``offsets`` ``m``, group 32) on the fp16 codes
  ``x`` of the activation; expected ``y``, the fp32 codes the back-end's GEMV returned (the
  captured ``norm_project`` / ``project`` results). ``x`` is the back-end's own conversion
  (:meth:`KVNAND.codes <sim.llm.backends.kvnand.KVNAND.codes>`: saturation at +-65504, RNE,
  subnormals flushed) of the captured float input: the RMSNorm output (``attn_q/k/v``,
  ``ffn_gate/up``), the attention output (``attn_output``), the SwiGLU output (``ffn_down``).
* per KV group ``g`` (SmolLM2: 3, each serving 3 query heads), ``logit.g<g>``: the group's 3
  query heads (fp16 codes the back-end kept) stacked as Logit's ``G`` rows, over the keys of
  tokens ``0 .. T`` on the layer's fp16 KV pages; expected ``scores`` ``(G, T + 1)`` fp32
  codes. ``attend.g<g>``: the back-end's probabilities (fp16 codes) of those rows over the
  values; expected ``o`` ``(G, head_dim)``, the captured attention output of the group's heads.
  Both carry the layer's whole cache (``keys``, ``values`` ``(T + 1, kv_heads, head_dim)``):
  the KV pages hold all of it.

The attention hook returns only Attend's output, so the scores and the probabilities are
recomputed with the functions the back-end calls on the captured inputs
(:func:`golden.inflash.model.logit`, :func:`sim.llm.backends.kvnand.softmax`,
:func:`golden.arith.float.from_float`), at decode every key seen (:func:`sim.llm.model.
causal_mask`); tests/test_cases_inflash.py checks that Attend of those probabilities is the
captured output bit for bit, so they are the back-end's.

Options (:data:`OPTIONS`): ``ops`` (the kinds to build: projection names, ``logit``,
``attend``; default all), ``rows`` (the first ``rows`` rows of each projection, a slice for a
short simulation; default all), ``kv_groups`` (default all).

``memwall model generate --rtl`` (:mod:`cocotb_tests.realdata.swap`) runs the hooks of
:data:`SWAP_HOOKS` on the PE: one call's ops (:func:`swap_options`), and the hook's result put
back together from what the RTL returned (:func:`assemble`).
"""

from __future__ import annotations

import numpy as np

from golden.arith.float import from_float
from golden.inflash.model import logit
from hdl.arith.format import FP16

from ..backends.kvnand import FP16_MAX, softmax
from ..loader import Q41_GROUP
from ..model import causal_mask
from . import CaseError, Op

__all__ = ["NUMERICS", "OPTIONS", "PROJECTIONS", "KINDS", "SWAP_HOOKS", "ops",
           "attention_inputs", "swap_options", "assemble"]

NUMERICS = "kvnand"
OPTIONS = {"ops": None, "rows": None, "kv_groups": None}
#: The layer's projections in the order it runs them.
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
#: Every op kind a case can hold.
KINDS = PROJECTIONS + ("logit", "attend")
#: The hooks whose work the PE does: the projections and the attention (RMSNorm, RoPE, the
#: softmax, SwiGLU and the residual adds stay on the host).
SWAP_HOOKS = ("norm_project", "project", "attention")
#: The input of each projection: (hook, the hook's ``norm`` or ``name`` argument).
_SOURCES = {"attn_q": "attn_norm", "attn_k": "attn_norm", "attn_v": "attn_norm",
            "ffn_gate": "ffn_norm", "ffn_up": "ffn_norm", "attn_output": None,
            "ffn_down": None}


def _options(cap, kinds, rows, kv_groups) -> tuple[tuple, int | None, tuple]:
    """Check the options; return the kinds, the row count and the KV groups."""
    kvh = cap.numerics.config.kv_heads
    if kinds is None:
        kinds = KINDS
    if isinstance(kinds, str) or not all(k in KINDS for k in kinds) or not kinds:
        raise CaseError(f"ops must be a non-empty list of {', '.join(KINDS)}, not {kinds!r}")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise CaseError(f"rows must be a whole number of rows >= 1 (or None: all), "
                        f"not {rows!r}")
    groups = range(kvh) if kv_groups is None else kv_groups
    if isinstance(groups, (str, int)) or not groups or not all(
            isinstance(g, int) and not isinstance(g, bool) and 0 <= g < kvh for g in groups):
        raise CaseError(f"kv_groups must be a non-empty list of KV groups from 0 to {kvh - 1}, "
                        f"not {kv_groups!r}")
    return tuple(kinds), rows, tuple(sorted(set(groups)))


def _activation(cap, name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """The float input of projection ``name`` in the step, what the back-end made of it
    (fp16 codes), and the saturation counter's key it used."""
    source = _SOURCES[name]
    if source is None:
        call = cap.one("project", name=name)
        x, key = call.args[1], name
        result = call.result
    else:
        x = cap.one("norm", norm=source).result
        call = cap.one("norm_project", norm=source)
        result = call.result[list(call.args[2]).index(name)]
        key = source
    # The back-end's own conversion (saturation, RNE, flush): one rule, in the back-end.
    codes = cap.numerics.codes(x, FP16, key)
    return np.asarray(x, np.float32)[0], codes[0], result


def _projection(cap, name: str, rows: int | None) -> Op:
    x, codes, result = _activation(cap, name)
    blocks = cap.numerics.mf.q41(f"blk.{cap.layer}.{name}.weight")
    full, cols = blocks.q.shape
    r = full if rows is None else min(rows, full)
    y = np.asarray(result, np.float32)[0].view(np.uint32)[:r]
    flushed = int(np.count_nonzero((x != 0) & ((codes & 0x7FFF) == 0)))
    shape = (f"{full} x {cols}" if r == full else f"rows 0-{r - 1} of {full} x {cols}") + \
        f", w4a16 ({blocks.source} blocks, group {Q41_GROUP}) x fp16"
    return Op(name, shape,
              {"codes": blocks.q[:r], "scales": blocks.d[:r], "offsets": blocks.m[:r],
               "x": codes},
              {"y": y.copy()},
              {"rows": r, "cols": cols, "group_size": Q41_GROUP, "of_rows": full,
               "saturated": int(np.count_nonzero(np.abs(x) > FP16_MAX)), "flushed": flushed,
               "max_abs_x": float(np.abs(x).max())})


def attention_inputs(cap, g: int) -> dict:
    """KV group ``g``'s Logit and Attend operands and results at the step: ``q`` ``(G, d)``,
    the layer's ``keys`` and ``values`` ``(T + 1, kv_heads, d)`` codes, Logit's ``scores``
    ``(G, T + 1)`` fp32 codes, the probabilities ``p`` ``(G, T + 1)`` fp16 codes, and the
    captured output ``o`` ``(G, d)`` fp32 codes (module notes)."""
    call = cap.one("attention")
    q, k, v, first = call.args
    t_new, heads, d = q.shape
    kvh = k.shape[1]
    group = heads // kvh
    seen = first + t_new
    rows = q.reshape(t_new, kvh, group, d)[0, g]
    scores = logit(rows, k[:seen, g], "fp16")
    mask = np.repeat(causal_mask(t_new, seen, first), group, axis=0)
    p = from_float(softmax(scores.view(np.float32), mask, d), FP16)
    out = np.asarray(call.result, np.float32).reshape(t_new, kvh, group, d)[0, g]
    return {"q": rows, "keys": k[:seen], "values": v[:seen], "scores": scores, "p": p,
            "o": out.view(np.uint32).copy()}


def _attention(cap, g: int, kinds) -> list[Op]:
    a = attention_inputs(cap, g)
    G, d = a["q"].shape
    tokens, kvh = a["keys"].shape[:2]
    meta = {"group": g, "query_heads": G, "head_dim": d, "tokens": tokens, "kv_heads": kvh,
            "layer": cap.layer}
    cache = {"keys": a["keys"], "values": a["values"]}
    out = []
    if "logit" in kinds:
        out.append(Op(f"logit.g{g}", f"{G} query heads x {tokens} tokens x {d}, fp16 KV pages",
                      {"q": a["q"], **cache}, {"scores": a["scores"]}, meta))
    if "attend" in kinds:
        zeros = int(np.count_nonzero((a["p"] & 0x7FFF) == 0))
        out.append(Op(f"attend.g{g}", f"{G} query heads x {tokens} tokens x {d}, fp16 KV pages",
                      {"p": a["p"], **cache}, {"o": a["o"]},
                      {**meta, "zero_probabilities": zeros}))
    return out


def ops(cap, *, ops=None, rows=None, kv_groups=None) -> list[Op]:
    """The layer's operations at the captured step (module notes), in the layer's order: the
    attention projections, Logit and Attend per KV group, then the output and FFN
    projections."""
    kinds, rows, groups = _options(cap, ops, rows, kv_groups)
    out = [_projection(cap, n, rows) for n in PROJECTIONS[:3] if n in kinds]
    for g in groups if {"logit", "attend"} & set(kinds) else ():
        out += _attention(cap, g, kinds)
    return out + [_projection(cap, n, rows) for n in PROJECTIONS[3:] if n in kinds]


def swap_options(hook: str, args: tuple) -> dict:
    """The options of :func:`ops` for one call of a hook of :data:`SWAP_HOOKS` (``args``: the
    call's arguments after ``layer``): its projections, or Logit and Attend of every KV group."""
    if hook == "norm_project":
        return {"ops": list(args[2])}
    if hook == "project":
        return {"ops": [args[0]]}
    return {"ops": ["logit", "attend"]}


def assemble(hook: str, args: tuple, outputs: dict):
    """The hook's result, as the back-end returns it, from the outputs of its ops
    (``{op name: {output name: array}}``, the expected arrays' names and codes): float32
    ``(1, rows)`` per projection, the attention's ``(1, heads, head_dim)``."""
    def row(name):
        return np.asarray(outputs[name]["y"], np.uint32).view(np.float32)[None, :]
    if hook == "norm_project":
        return [row(name) for name in args[2]]
    if hook == "project":
        return row(args[0])
    q, k = args[0], args[1]
    sums = [np.asarray(outputs[f"attend.g{g}"]["o"], np.uint32) for g in range(k.shape[1])]
    return np.stack(sums).view(np.float32).reshape(q.shape)
