"""Real-model cases of the rDXE family (``rdxe-dxt``): the operations the rDXE back-end
(:class:`sim.llm.backends.rdxe.RDXE`, ``--numerics rdxe``) runs on the DXT in one decoder layer's
decode step, in the codes the tile takes and gives.

Operations (op names), in the order the layer runs them:

* ``attn_norm``: the fused RMSNorm-GEMV of the residual into Q, K and V (``960 x 576``: the
  three projections share the norm and the INT8 input), INT8 weights with the norm gain folded
  in, per-output PPU entries, the token's INT8 input and its epsilon code;
* ``qk.g<g>`` and ``pv.g<g>`` for each KV group ``g``: Q.K^T of the group's 3 query heads
  against the INT8 keys of positions ``0 .. T`` (INT8 scores out) and softmax-P.V of those
  scores against the INT8 values (INT8 outputs in V's scale);
* ``attn_output``: the plain GEMV ``576 x 576`` of the INT8 attention output;
* ``ffn_norm``: the fused RMSNorm-GEMV into gate and up (``3072 x 576``);
* ``ffn_down``: the plain GEMV ``576 x 1536`` of the INT8 SwiGLU output.

RoPE, SwiGLU and the quantization of activations (per token) and of the KV cache stay on the
host, as in the back-end. Every expected array is the back-end's own result for the captured
call: the GEMVs' codes come from the back-end's tables and :meth:`RDXE.rmsnorm_codes` /
:func:`golden.rdxe.ppu` of :func:`golden.rdxe.accumulate` (what :meth:`RDXE.project` calls),
and are checked against the floats the back-end returned (codes times its output scales); the
attention's from :meth:`RDXE.score_codes`, :func:`golden.rdxe.qk_scores` and
:func:`golden.rdxe.softmax_pv` (the steps of :func:`golden.rdxe.attention`), checked the same way.
A disagreement raises :class:`sim.llm.cases.CaseError`: the case would not be the back-end's.
"""

from __future__ import annotations

import numpy as np

from golden.rdxe import model as G

from ..backends.rdxe import quantize_rows
from . import CaseError, Op

__all__ = ["NUMERICS", "OPTIONS", "KINDS", "ops"]

#: The back-end whose decode step a case captures (fused VRC).
NUMERICS = "rdxe"
#: The operations of a layer, in order (module notes).
KINDS = ("attn_norm", "attention", "attn_output", "ffn_norm", "ffn_down")
#: ``kinds``: which operations (None: all of :data:`KINDS`); ``rows``: the first ``rows``
#: outputs of each GEMV (None: all); ``groups``: the KV groups whose attention is taken (None:
#: all).
OPTIONS = {"kinds": None, "rows": None, "groups": None}
#: The norms' fused GEMVs and the projections they feed (as the back-end's tables hold them).
_NORMED = {"attn_norm": ("attn_q", "attn_k", "attn_v"), "ffn_norm": ("ffn_gate", "ffn_up")}
#: The fields of the tile's parameters the golden numerics read (the rest size the tile).
NUMERIC_FIELDS = ("mult_bits", "clamp", "rc_bits", "norm_frac", "prob_frac")


def _options(cap, kinds, rows, groups) -> tuple[tuple, int | None, tuple]:
    """Check the options; return ``(kinds, rows, groups)`` with None resolved."""
    given = KINDS if kinds is None else tuple(kinds)
    if not given or any(k not in KINDS for k in given):
        raise CaseError(f"kinds must be a non-empty list of {', '.join(KINDS)}, not "
                        f"{list(given)}")
    kinds = tuple(k for k in KINDS if k in given)          # the layer's order
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise CaseError(f"rows must be None or an integer >= 1, not {rows!r}")
    heads = cap.numerics.config.kv_heads
    groups = tuple(range(heads)) if groups is None else tuple(groups)
    if not groups or any(isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < heads
                         for g in groups) or len(set(groups)) != len(groups):
        raise CaseError(f"groups must be distinct KV groups from 0 to {heads - 1}, not "
                        f"{list(groups)}")
    return kinds, rows, groups


def _meta(nx, kind: str, **extra) -> dict:
    """An op's meta: its kind, the numeric fields and the GQA of the back-end's tile."""
    p = nx.params
    return {"kind": kind, "numerics": {f: getattr(p, f) for f in NUMERIC_FIELDS},
            "group_size": nx.config.group, "kv_groups": nx.config.kv_heads, **extra}


def _shape(rows: int | None, M: int, K: int, what: str) -> str:
    """``[rows of ]M x K what``: a GEMV's real shape, and how much of it the case keeps."""
    return f"{'' if rows is None or rows >= M else f'{rows} of '}{M} x {K} {what}"


def _check(name: str, got, want) -> None:
    """Raise unless the floats rebuilt from the codes are the back-end's, bit for bit."""
    if not np.array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32)):
        raise CaseError(f"{name}: the codes do not give the back-end's result")


def norm_op(cap, norm: str, rows: int | None) -> Op:
    """The fused RMSNorm-GEMV ``norm`` (``attn_norm`` or ``ffn_norm``) of the decode token."""
    nx = cap.numerics
    call = cap.one("norm_project", norm=norm)
    wq, m, shift, s_out, _ = nx.tables(cap.layer)[norm]
    xq, s_x = quantize_rows(call.args[0])
    codes = nx.rmsnorm_codes(wq, xq, s_x, m, shift)
    _check(norm, (codes * s_out).astype(np.float32), np.concatenate(call.result, axis=1))
    M, K = wq.shape
    keep = slice(0, M if rows is None else min(rows, M))
    names = "|".join(_NORMED[norm])
    return Op(norm, _shape(rows, M, K, f"RMSNorm-GEMV ({names}), INT8"),
              {"x": xq[0], "w": wq[keep], "m": m[keep], "shift": shift[keep],
               "eps": G.eps_code(nx.config.rms_eps, s_x[0])},
              {"y": codes[0, keep].astype(np.int8)},
              _meta(nx, "rmsnorm", mode=nx.vrc))


def project_op(cap, name: str, rows: int | None) -> Op:
    """The plain GEMV ``name`` (``attn_output`` or ``ffn_down``) of the decode token."""
    nx = cap.numerics
    call = cap.one("project", name=name)
    wq, m, shift, k = nx.tables(cap.layer)[name]
    xq, s_x = quantize_rows(call.args[1])
    codes = G.ppu(nx.accumulate(wq, xq), m, shift, nx.params)
    _check(name, (codes * k[None, :] * s_x[:, None]).astype(np.float32), call.result)
    M, K = wq.shape
    keep = slice(0, M if rows is None else min(rows, M))
    return Op(name, _shape(rows, M, K, "GEMV, INT8"),
              {"x": xq[0], "w": wq[keep], "m": m[keep], "shift": shift[keep]},
              {"y": codes[0, keep].astype(np.int8)}, _meta(nx, "gemv"))


def attention_ops(cap, groups) -> list[Op]:
    """Q.K^T and softmax-P.V of each KV group in ``groups`` for the decode token (the 3 query
    heads of the group over the INT8 keys and values of positions ``0 .. T``)."""
    nx = cap.numerics
    call = cap.one("attention")
    q, k, v, first = call.args
    if q.shape[0] != 1:
        raise CaseError(f"attention: a decode step has one query token, not {q.shape[0]}")
    p, t = nx.params, nx.tables(cap.layer)
    G_size, n = nx.config.group, first + 1
    qq, sm, ss, scale = nx.score_codes(cap.layer, q[0])
    heads = np.arange(qq.shape[0])
    K = np.ascontiguousarray(k[:n].transpose(1, 0, 2))               # (groups, n, d)
    V = np.ascontiguousarray(v[:n].transpose(1, 0, 2))
    _, s = G.qk_scores(qq, K[heads // G_size], sm, ss, p)           # (heads, n)
    pv_m, pv_shift = 1, p.prob_frac
    out = G.softmax_pv(s, V[heads // G_size], scale, pv_m, pv_shift, p, mode=nx.vrc)
    s_v = np.repeat(t["v"], G_size, axis=0)
    _check("attention", (out * s_v).astype(np.float32), call.result[0])
    d = qq.shape[1]
    result = []
    for g in groups:
        hs = slice(g * G_size, (g + 1) * G_size)
        where = f"{G_size} heads x {n} tokens x {d}, KV group {g}"
        result.append(Op(f"qk.g{g}", f"Q.K^T {where}, INT8",
                         {"q": qq[hs], "k": K[g], "m": np.int64(sm), "shift": np.int64(ss)},
                         {"s": s[hs].astype(np.int8)},
                         _meta(nx, "qk", group=g, tokens=n)))
        result.append(Op(f"pv.g{g}", f"softmax-P.V {where}, INT8",
                         {"v": V[g], "scale": np.uint32(scale),
                          "m": np.full(d, pv_m, np.int64), "shift": np.full(d, pv_shift, np.int64)},
                         {"o": out[hs].astype(np.int8)},
                         _meta(nx, "pv", group=g, tokens=n, mode=nx.vrc)))
    return result


def ops(cap, *, kinds=None, rows=None, groups=None) -> list[Op]:
    """The rDXE operations of the captured decode step (module notes).

    Parameters
    ----------
    cap : sim.llm.cases.Capture
        A decode step of the ``rdxe`` back-end.
    kinds : sequence of str, optional
        Which of :data:`KINDS` (default all).
    rows : int, optional
        Keep the first ``rows`` outputs of each GEMV (default all): a reduced case.
    groups : sequence of int, optional
        The KV groups whose Q.K^T and P.V are taken (default all).

    Raises
    ------
    CaseError
        Bad options, or codes that do not give the back-end's results.
    """
    kinds, rows, groups = _options(cap, kinds, rows, groups)
    result = []
    for kind in kinds:
        if kind in _NORMED:
            result.append(norm_op(cap, kind, rows))
        elif kind == "attention":
            result += attention_ops(cap, groups)
        else:
            result.append(project_op(cap, kind, rows))
    return result
