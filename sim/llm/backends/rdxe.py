"""The rDXE back-end: every projection, RMSNorm and attention on the DXT's bit-exact golden models
(:mod:`golden.rdxe`), SwiGLU and RoPE in float32 on the host (SwiGLU on the VE's activation
with ``glu="ve"``).

Quantization (measured and chosen in docs/llm.md, "rDXE"):

* **Weights**: per-output-channel symmetric INT8 of the float32 weights, ``s_w[o] = max|W[o]| /
  127``, codes ``RNE(W / s_w)``; the RMSNorm gain is folded into the weights of the projections
  that follow a norm (``W_g = W * gain``) before quantizing (rDXE's "merged offline").
* **GEMV inputs**: per-token dynamic symmetric INT8 (the host quantizes), ``s_x[t] = max|x[t]| /
  127``. A per-tensor scale fails on the residual's outlier channels (the notes list them).
* **PPU outputs** (INT8, dequantized by the host: ``y = code * s_out``): a static PPU table per
  output, calibrated once with a float run over a calibration text. After RMSNorm the output
  scale is independent of the token (``s_out[o] = max|y[o]| / 127`` over the calibration
  tokens, times ``headroom``) because the RC factor removes the input scale; the plain
  projections carry the token's input scale along: ``s_out[t, o] = s_x[t] * k[o]`` with ``k[o] =
  max_t |y[t, o]| / s_x[t] / 127`` (times ``headroom``), so the PPU multiplier ``s_w[o] / k[o]``
  is static too.
* **KV cache**: INT8 codes; K with one static scale per layer (Q.K^T's PPU takes one scale),
  V with a static scale per (KV head, channel) (P.V's output channel keeps V's scale). Q:
  per-token INT8 over all heads (the score PPU takes one multiplier per call).
* **SwiGLU** (``glu``): ``"host"`` (the default) in float32 on the host, ffn_down's input then
  quantized per token by the host; ``"ve"`` on the VE's activation (:func:`golden.rdxe.act.act`:
  ``silu(gate) * up`` from ffn_norm's INT8 codes and PPU scales, INT8 codes with one scale per
  token out), whose codes ffn_down's quantizer finds again exactly (the largest is +-127).
* **Scores**: INT8 with a static step per layer (``max |q.k| / sqrt(d) / 127`` calibrated); the
  softmax-P.V output is INT8 in V's scale (PPU ``m = 1``, ``shift = prob_frac``).
* **Host steps** (``host``): ``"host"`` (the default) quantizes the GEMV inputs, dequantizes the
  PPU codes, adds the residual and rotates Q and K (RoPE) in float32 / float64 NumPy;
  ``"dxe"`` (needs ``glu="ve"``) computes each of them as the DXE does, on the shared units'
  golden twins (:mod:`golden.rdxe.dxe`: fp32 residual on the GPPU, per-token INT8 on the VE, the
  score PPU's multiplier from Q's maximum), with the same scales and tables: a layer is then what
  a DXE computes bit for bit. The hooks carry the DXE's fp32 values as float32 arrays
  (:func:`golden.rdxe.dxe.codes_of` reads them back exactly).

A GEMV whose weights exceed one WMEM load (576 x 576 at the paper preset: 448 outputs per load)
is split along its outputs; every output's accumulator, RC factor and PPU entry are its own, so
the split does not change any output: the back-end checks each split fits (``wmem_image``) and
computes all outputs of a token in one :func:`golden.rdxe.accumulate` call. RMSNorm follows
:func:`golden.rdxe.rmsnorm_gemv_trace` step by step, batched across tokens (``rms_rc`` per
token, then ``accumulate``, ``rcu`` and ``ppu``); a test checks it against ``rmsnorm_gemv``
bit for bit on real layers.
"""

from __future__ import annotations


import numpy as np

from golden.arith.requant import requantize
from golden.rdxe import dxe as D
from golden.rdxe import model as G
from golden.rdxe.act import act, act_constants
from golden.rdxe.params import DxtConfig
from golden.rdxe.program import LayerTables, wmem_outputs

from ..model import (SUM_FACTOR, UNIT, Llama, Numerics, attention as float_attention, budgets,
                     causal_mask)
from ..score import default_text

__all__ = ["RDXE", "paper_params", "quantize_weights", "quantize_rows", "Calibration", "GLU_MODES",
           "HOST_MODES"]

#: VRC modes, as the golden model names them.
VRC_MODES = ("fused", "sequential")
#: Where SwiGLU runs: float32 on the host, or the VE's activation unit (golden.rdxe.act).
GLU_MODES = ("host", "ve")
#: Where the steps between the GEMVs run: NumPy on the host, or the DXE's units (golden.rdxe.dxe).
HOST_MODES = ("host", "dxe")
#: The paper's DXT (memwall's ``rdxe-dxt`` "paper" preset): 16 VACs of 16 lanes, 1024 WMEM rows.
PAPER = dict(lanes=16, wmem_depth=1024, ppu_depth=1024, mult_bits=32, clamp="symmetric",
             rc_bits=25, kv_rows=1024, queue_depth=32, operand_stages=4, vacs=16, head_dim=64,
             norm_frac=4, prob_frac=7, max_inputs=4096)
#: Default calibration tokens: default_text()'s tokens 4096 .. 4351, disjoint from the scored
#: start of the text.
CALIBRATION = (4096, 4352)
GLU_VE = ("golden.rdxe.act.act: silu(gate) * up of ffn_norm's INT8 codes with its per-channel "
          "PPU scales, INT8 out with one scale per token (two passes over the codes)")
HOST_DXE = {
    "quantize": "golden.rdxe.dxe.quantize: max |x| per token, reciprocal, requantizer (VE)",
    "dequantize": "golden.rdxe.dxe.dequantize / dequantize_token: fp32 fmul by the static scale "
                  "(and the token's max) (GPPU)",
    "residual": "golden.rdxe.dxe.residual_add: fp32 fadd (GPPU)",
    "rope": "golden.rdxe.dxe.rope: fp32 fmul/fadd with the host's fp32 cos/sin table (GPPU)",
    "keep": "golden.rdxe.dxe.quantize_static: K, V INT8 by the requantizer with static factors",
    "scores": "golden.rdxe.dxe.score_factor: Q INT8 per token, the score PPU from fmul(M_q, c)",
}
_NORMED = {"attn_norm": ("attn_q", "attn_k", "attn_v"), "ffn_norm": ("ffn_gate", "ffn_up")}


def paper_params(config, tokens: int | None = None) -> DxtConfig:
    """The paper preset's tile with the model's GQA (``group_size``, ``kv_groups``) and head
    dimension, and a KV cache of at least ``tokens`` tokens per group (the model's context by
    default: ``kv_rows`` raised to a power of two; the preset's 1024 rows hold 672 tokens)."""
    tokens = config.context if tokens is None else tokens
    kw = dict(PAPER, head_dim=config.head_dim, group_size=config.group, kv_groups=config.kv_heads)
    while True:
        p = DxtConfig(**kw)
        if p.capacity >= tokens:
            return p
        kw["kv_rows"] *= 2


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric INT8 per row (last axis): ``(codes int8, scale float64)``, ``scale = max|x| /
    127`` (1 for an all-zero row), codes ``RNE(x / scale)``."""
    x = np.asarray(x, np.float64)
    scale = np.abs(x).max(axis=-1) / 127.0
    scale = np.where(scale > 0, scale, 1.0)
    return np.clip(np.rint(x / scale[..., None]), -127, 127).astype(np.int8), scale


def quantize_weights(w: np.ndarray, gain: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel INT8 of ``w`` ``(out, in)`` with the RMSNorm ``gain`` folded in."""
    w = np.asarray(w, np.float64)
    return quantize_rows(w if gain is None else w * np.asarray(gain, np.float64)[None, :])


def _ppu_table(scale: np.ndarray, mult_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``(m, shift)`` int64 per output from :func:`golden.rdxe.ppu_code`."""
    codes = [G.ppu_code(float(s), mult_bits) for s in np.ravel(scale)]
    return (np.array([c[0] for c in codes], np.int64), np.array([c[1] for c in codes], np.int64))


class Calibration(Numerics):
    """A float run that records the static scales' statistics (per-channel maxima)."""

    def __init__(self, mf, dtype=np.float32):
        super().__init__(mf, dtype)
        self.out_max: dict = {}      # (layer, name) -> max |y[o]| (normed) or max |y / s_x|
        self.in_max: dict = {}       # (layer, norm) -> max |h[:, i]| per channel (residual)
        self.kv_max: dict = {}       # (layer, "k"/"v") -> max |k| per (head, channel)
        self.score_max: dict = {}    # layer -> max |q.k| / sqrt(d) (causal)

    def _record(self, store: dict, key, value: np.ndarray) -> None:
        store[key] = value if key not in store else np.maximum(store[key], value)

    def norm_project(self, layer, h, norm, names):
        self._record(self.in_max, (layer, norm), np.abs(h).max(axis=0))
        out = super().norm_project(layer, h, norm, names)
        for name, y in zip(names, out):
            self._record(self.out_max, (layer, name), np.abs(y).max(axis=0))
        return out

    def project(self, layer, name, x):
        y = super().project(layer, name, x)
        if name in ("attn_output", "ffn_down"):
            _, s_x = quantize_rows(x)
            self._record(self.out_max, (layer, name), (np.abs(y) / s_x[:, None]).max(axis=0))
        return y

    def keep(self, layer, kind, x):
        if kind in ("k", "v"):
            self._record(self.kv_max, (layer, kind), np.abs(x).max(axis=0))
        return x

    def attention(self, layer, q, k, v, first):
        t, heads, d = q.shape
        g = heads // k.shape[1]
        s = np.einsum("thd,shd->hts", q, np.repeat(k, g, axis=1)) / np.sqrt(d)
        s = np.where(causal_mask(t, k.shape[0], first)[None], np.abs(s), 0)
        self._record(self.score_max, layer, np.float64(s.max()))
        return float_attention(q, k, v, first)


class RDXE(Numerics):
    """INT8 numerics of the rDXE tile (module notes).

    Parameters
    ----------
    mf : ModelFile
    vrc : str
        ``"fused"`` (RMSNorm and softmax factors applied to the accumulators, the paper's VRC) or
        ``"sequential"`` (normalize to INT8 first).
    dtype : float32 only (the host's float steps).
    params : DxtConfig, optional
        The tile; default :func:`paper_params` of the model.
    calibration : sequence of int, optional
        Token ids of the calibration run (default: :data:`CALIBRATION` of ``default_text()``).
    headroom : float
        Factor (>= 1) on every calibrated maximum: room for values past the calibration's.
    glu : str
        ``"host"`` (SwiGLU in float32 on the host) or ``"ve"`` (the VE's activation on the INT8
        codes, :meth:`glu`).
    host : str
        ``"host"`` (the steps between the GEMVs in NumPy on the host) or ``"dxe"`` (on the DXE's
        units, :mod:`golden.rdxe.dxe`; needs ``glu="ve"``).
    """

    name = "rdxe"
    budgets = budgets("int8", "int8")
    emulated = {
        "norm_project": "golden.rdxe: rms_rc per token, accumulate (INT8 x INT8 -> INT32), rcu "
                        "(fused) or requantize to INT8 first (sequential), ppu: the steps of "
                        "rmsnorm_gemv_trace batched over tokens; weights INT8 per output with "
                        "the norm gain folded, input INT8 per token",
        "project": "golden.rdxe.accumulate + ppu (gemv's numerics; attn_output, ffn_down), "
                   "input INT8 per token, split along outputs to fit the WMEM",
        "keep": "host: K INT8 (one scale per layer), V INT8 (scale per head/channel) in the "
                "cache; q, o unchanged (float)",
        "attention": "golden.rdxe.attention (qk_scores, softmax_pv_trace with the VRC mode) per "
                     "query token, all 9 heads over 3 KV groups; Q INT8 per token; output INT8 "
                     "in V's scale, dequantized by the host",
        "glu": "float32 on the host (glu='ve': golden.rdxe.act)",
        "rope": "float32 on the host",
    }

    def __init__(self, mf, vrc: str = "fused", dtype=np.float32, *, params: DxtConfig | None = None,
                 calibration=None, headroom: float = 2.0, glu: str = "host", host: str = "host"):
        if vrc not in VRC_MODES:
            raise ValueError(f"vrc must be one of {', '.join(VRC_MODES)}, not {vrc!r}")
        if glu not in GLU_MODES:
            raise ValueError(f"glu must be one of {', '.join(GLU_MODES)}, not {glu!r}")
        if host not in HOST_MODES:
            raise ValueError(f"host must be one of {', '.join(HOST_MODES)}, not {host!r}")
        if host == "dxe" and glu != "ve":
            raise ValueError(f"host='dxe' needs glu='ve' (a DXE runs SwiGLU on its VE), not "
                             f"glu={glu!r}")
        if np.dtype(dtype) != np.float32:
            raise ValueError(f"dtype must be float32 (the host's float steps), not "
                             f"{np.dtype(dtype)}")
        if not (isinstance(headroom, (int, float)) and headroom >= 1):
            raise ValueError(f"headroom must be a number >= 1, not {headroom!r}")
        if params is not None and not isinstance(params, DxtConfig):
            raise ValueError(f"params must be a golden.rdxe DxtConfig or None, not "
                             f"{type(params).__name__}")
        super().__init__(mf, dtype)
        self.vrc = vrc
        self.name = ("rdxe" if vrc == "fused" else "rdxe-seq") + \
            ("-dxe" if host == "dxe" else "-ve" if glu == "ve" else "")
        self.glu_mode = glu
        self.dxe = host == "dxe"
        if glu == "ve":
            self.emulated = {**self.emulated, "glu": GLU_VE}
            # INT8 with a per-token step, like a GEMV's input: relative to the norm its error
            # grows with the token's max / rms, so the projections' allowance.
            self.budgets = {**self.budgets, "glu": SUM_FACTOR * UNIT["int8"]}
        if self.dxe:
            self.emulated = {**self.emulated, "rope": HOST_DXE["rope"],
                             "keep": HOST_DXE["keep"] + "; q, o unchanged (fp32)",
                             "attention": self.emulated["attention"].replace(
                                 "by the host", "by the GPPU (fp32)"),
                             **{f"dxe.{k}": v for k, v in HOST_DXE.items()
                                if k not in ("rope", "keep")}}
        self.params = paper_params(mf.config) if params is None else params
        self.headroom = float(headroom)
        if calibration is None:
            from ..tokenizer import tokenizer
            calibration = tokenizer(mf).encode(default_text().text)[slice(*CALIBRATION)]
        self.calib = Calibration(mf)
        Llama(mf, self.calib).forward(list(calibration))
        self._layers: dict = {}

    # --- static tables ---------------------------------------------------------------------------

    def split(self, inputs: int) -> int:
        """Outputs per WMEM and PPU load of a GEMV with ``inputs`` inputs
        (:func:`golden.rdxe.program.wmem_outputs`)."""
        return wmem_outputs(inputs, self.params)

    def _check_fits(self, wq: np.ndarray) -> None:
        """Each output slice of one WMEM load must fit (``wmem_image`` raises otherwise)."""
        step = self.split(wq.shape[1])
        G.wmem_image(wq[:step], self.params)

    def tables(self, layer: int) -> dict:
        """The layer's INT8 weights, PPU tables and static scales (built once, then kept)."""
        if layer in self._layers:
            return self._layers[layer]
        p, hr, cal = self.params, self.headroom, self.calib
        t: dict = {}
        for norm, names in _NORMED.items():
            gain = self.mf.float32(f"blk.{layer}.{norm}.weight")
            wq, s_w = quantize_weights(np.concatenate([self.weight(layer, n) for n in names]),
                                       gain)
            s_out = np.concatenate([cal.out_max[(layer, n)] for n in names]) * hr / 127.0
            s_out = np.where(s_out > 0, s_out, 1.0)
            self._check_fits(wq)
            t[norm] = (wq, *_ppu_table(s_w * 2.0 ** -p.norm_frac / s_out, p.mult_bits), s_out,
                       [self.weight(layer, n).shape[0] for n in names])
        for name in ("attn_output", "ffn_down"):
            wq, s_w = quantize_weights(self.weight(layer, name))
            k = cal.out_max[(layer, name)] * hr / 127.0
            k = np.where(k > 0, k, 1.0)
            self._check_fits(wq)
            t[name] = (wq, *_ppu_table(s_w / k, p.mult_bits), k)
        for kind in ("k", "v"):
            mx = cal.kv_max[(layer, kind)] * hr / 127.0          # (kv_heads, head_dim)
            t[kind] = np.full_like(mx, mx.max()) if kind == "k" else np.where(mx > 0, mx, 1.0)
        t["score_step"] = cal.score_max[layer] * hr / 127.0
        s_out, sizes = t["ffn_norm"][3], t["ffn_norm"][4]
        t["glu"] = (s_out[:sizes[0]], s_out[sizes[0]:],
                    *act_constants(s_out[:sizes[0]], s_out[sizes[0]:]))
        if self.dxe:
            t["dxe"] = self._dxe_constants(t)
        self._layers[layer] = t
        return t

    def _dxe_constants(self, t: dict) -> dict:
        """The fp32 constants of the DXE's steps (:mod:`golden.rdxe.dxe`), rounded once from the
        layer's static scales: PPU output scales (normed projections), ``k / 127`` (plain
        projections), the KV cache's ``1 / (127 s)`` and V's scale, the score constant."""
        d = self.config.head_dim
        out = {norm: D.fp32(t[norm][3]) for norm in _NORMED}
        out.update({name: D.fp32(t[name][3] / 127.0) for name in ("attn_output", "ffn_down")})
        out.update({kind: D.static_inverse(t[kind]) for kind in ("k", "v")})
        out["v_scale"] = D.fp32(t["v"])
        out["score"] = D.fp32(float(t["k"].max()) / (127.0 * np.sqrt(d) * t["score_step"]))
        return out

    def dxe_tables(self, layer: int) -> LayerTables:
        """What a DXE holds for ``layer`` (``host="dxe"``): the layer's GEMVs and the fp32
        constants of :meth:`_dxe_constants`, named as :func:`golden.rdxe.program.llama_layer`
        reads them."""
        if not self.dxe:
            raise ValueError(f"dxe_tables needs host='dxe' numerics, not {self.name}")
        t = self.tables(layer)
        dx = t["dxe"]
        gemvs = {name: t[name][:3] for name in (*_NORMED, "attn_output", "ffn_down")}
        vectors = {name: dx[name] for name in ("attn_norm", "attn_output", "ffn_down")}
        vectors.update({"k_inv": dx["k"].reshape(-1), "v_inv": dx["v"].reshape(-1),
                        "v_scale": np.repeat(dx["v_scale"], self.config.group, axis=0).ravel(),
                        "glu_a": t["glu"][2], "glu_c": t["glu"][3]})
        return LayerTables(gemvs, vectors, {"score": dx["score"]}, G.log2_scale(t["score_step"]),
                           self.config.rms_eps, self.params, self.vrc)

    # --- operations ------------------------------------------------------------------------------

    def accumulate(self, wq: np.ndarray, xq: np.ndarray) -> np.ndarray:
        """INT32 accumulators ``(T, M)`` of every token over all outputs (the WMEM loads'
        outputs side by side): :func:`golden.rdxe.accumulate` of all tokens at once."""
        return G.accumulate(wq, xq)

    def rmsnorm_codes(self, wq, xq, s_x, m, shift, eps_q=None) -> np.ndarray:
        """INT8 outputs ``(T, M)`` of the RMSNorm-GEMV of INT8 ``xq`` ``(T, K)`` (input steps
        ``s_x``; or the epsilon's fp32 codes per token, ``eps_q``, as the DXE computes them):
        :func:`golden.rdxe.rmsnorm_gemv_trace`'s steps, batched over tokens."""
        p = self.params
        if eps_q is None:
            eps_q = [G.eps_code(self.config.rms_eps, s) for s in s_x]
        rc = [G.rms_rc(x, e, p)[3] for x, e in zip(xq, eps_q)]
        rc = G.RCFactor(np.array([r.m for r in rc], np.int64)[:, None],
                        np.array([r.shift for r in rc], np.int64)[:, None])
        if self.vrc == "fused":
            return G.ppu(G.rcu(self.accumulate(wq, xq), rc), m, shift, p)
        x_norm = requantize(xq, rc.m, rc.shift, out_bits=8, clamp=p.clamp)
        return G.ppu(self.accumulate(wq, x_norm), m, shift, p)

    def norm_project(self, layer, h, norm, names):
        if norm not in _NORMED or tuple(names) != _NORMED[norm]:
            return super().norm_project(layer, h, norm, names)
        t = self.tables(layer)
        wq, m, shift, s_out, sizes = t[norm]
        if self.dxe:
            xq = D.quantize(D.codes_of(h))
            eps = D.rms_eps(xq.k, self.config.rms_eps)
            codes = self.rmsnorm_codes(wq, xq.codes, None, m, shift, eps_q=eps)
            y = D.values_of(D.dequantize(codes, t["dxe"][norm]))
        else:
            xq, s_x = quantize_rows(h)
            y = (self.rmsnorm_codes(wq, xq, s_x, m, shift) * s_out).astype(np.float32)
        return np.split(y, np.cumsum(sizes)[:-1], axis=1)

    def project(self, layer, name, x):
        t = self.tables(layer)
        wq, m, shift, k = t[name]
        if self.dxe:
            xq = D.quantize(D.codes_of(x))
            codes = G.ppu(self.accumulate(wq, xq.codes), m, shift, self.params)
            return D.values_of(D.dequantize_token(codes, t["dxe"][name], xq.top))
        xq, s_x = quantize_rows(x)
        codes = G.ppu(self.accumulate(wq, xq), m, shift, self.params)
        return (codes * k[None, :] * s_x[:, None]).astype(np.float32)

    def rope(self, layer, x, tables):
        """RoPE: float32 (``host="host"``) or the GPPU's (:func:`golden.rdxe.dxe.rope`) with the
        host's table, ``tables`` (float32 values of the float64 cos and sin, rounded once)."""
        if not self.dxe:
            return super().rope(layer, x, tables)
        return D.values_of(D.rope(D.codes_of(x), *(D.codes_of(c) for c in tables)))

    def residual(self, layer, h, y):
        """The residual add: float32, or the GPPU's fp32 adder (``host="dxe"``)."""
        if not self.dxe:
            return super().residual(layer, h, y)
        return D.values_of(D.residual_add(D.codes_of(h), D.codes_of(y)))

    def glu(self, layer, gate, up):
        """SwiGLU: float32 on the host (``glu="host"``) or the VE's activation
        (:func:`golden.rdxe.act.act`) on the INT8 codes behind ``gate`` and ``up`` (ffn_norm's
        outputs, ``code * s_out`` in float32: dividing by ``s_out`` gives each code back within
        ``2**-23`` of it), returned as ``code * M / 127`` in float32."""
        if self.glu_mode == "host":
            return super().glu(layer, gate, up)
        s_gate, s_up, a, c = self.tables(layer)["glu"]
        trace = act(np.rint(gate / s_gate).astype(np.int64), np.rint(up / s_up).astype(np.int64),
                    a, c)
        return (trace.codes * trace.scale[..., None]).astype(np.float32)

    def keep(self, layer, kind, x):
        if kind not in ("k", "v"):
            return x
        t = self.tables(layer)
        if self.dxe:
            return D.quantize_static(D.codes_of(x), t["dxe"][kind]).astype(np.int8)
        return np.clip(np.rint(x / t[kind]), -127, 127).astype(np.int8)

    def restore(self, layer, kind, stored):
        if kind not in ("k", "v"):
            return stored
        return (stored * self.tables(layer)[kind]).astype(np.float32)

    def score_codes(self, layer, q) -> tuple[np.ndarray, int, int, np.uint32]:
        """One query token's operands of :func:`golden.rdxe.attention`: ``q`` ``(heads, d)`` as
        INT8 (one scale over all heads), the score PPU's multiplier and shift (Q's and K's
        scales and ``1/sqrt(d)`` over the layer's score step) and the log2 scale of one score
        step."""
        t, p = self.tables(layer), self.params
        step = t["score_step"]
        if self.dxe:
            qz = D.quantize(D.codes_of(np.reshape(q, -1)))
            rc = D.score_factor(qz.top, t["dxe"]["score"], p)
            return qz.codes.reshape(q.shape), int(rc.m), int(rc.shift), G.log2_scale(step)
        qq, s_q = quantize_rows(np.reshape(q, -1))
        sm, ss = G.ppu_code(float(s_q) * float(t["k"].max()) / np.sqrt(q.shape[-1]) / step,
                            p.mult_bits)
        return qq.reshape(q.shape), sm, ss, G.log2_scale(step)

    def attention(self, layer, q, k, v, first):
        """Decode attention per query token on :func:`golden.rdxe.attention` (module notes)."""
        t, p = self.tables(layer), self.params
        K = np.ascontiguousarray(k.transpose(1, 0, 2))              # (groups, S, d)
        V = np.ascontiguousarray(v.transpose(1, 0, 2))
        out = np.empty(q.shape, np.float32)
        g = q.shape[1] // k.shape[1]
        s_v = np.repeat(t["dxe"]["v_scale"] if self.dxe else t["v"], g, axis=0)   # (heads, d)
        for i in range(q.shape[0]):
            qq, sm, ss, scale = self.score_codes(layer, q[i])
            n = first + i + 1
            codes = G.attention(qq, K[:, :n], V[:, :n], score_m=sm, score_shift=ss,
                                scale=scale, m=1, shift=p.prob_frac, params=p, mode=self.vrc)
            out[i] = D.values_of(D.dequantize(codes, s_v)) if self.dxe else codes * s_v
        return out
