"""The shape of a decoder-only transformer, shared by every paper's system model.

:class:`ModelShape` holds what a model's public configuration says (layers, hidden size, query and
KV heads, head dimension, FFN width, vocabulary, gated FFN or not), each field checked once. A
paper that prices the model differently keeps its own arithmetic; a paper that needs a field no
other paper has (FlowKV's sliding window, OPT's learned positions) adds it in a thin subclass.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import ClassVar

from hdl.validate import integer

__all__ = ["ModelShape"]


@dataclass(frozen=True)
class ModelShape:
    """Decoder shapes of an LLM (public config.json figures).

    Parameters
    ----------
    name : str
        Label for tables (the only positional field).
    layers : int
        Decoder layers, 1 to 1024.
    heads : int
        Query heads, 1 to 1024.
    head_dim : int
        Head dimension, 1 to 4096.
    kv_heads : int or None
        KV heads, 1 to ``heads`` and dividing it (GQA); ``None`` gives ``heads`` (MHA).
    d_model : int or None
        Hidden size (the residual stream's width), 1 to 65536; ``None`` where a paper does not
        need it. It need not be ``heads * head_dim`` (Qwen3-4B: 2560 against 4096).
    ffn : int or None
        FFN width (the up projection's outputs), 1 to 2**22; ``None`` where not needed.
    vocab : int or None
        Vocabulary size, 1 to 2**20; ``None`` where not needed.
    gated : bool
        Gated FFN (gate, up and down projections, as LLaMA's SwiGLU or MT5's gated GELU) or a
        single up projection (OPT's ReLU).

    A subclass names the optional fields its model needs in :attr:`required`.

    Raises
    ------
    TypeError, ValueError
        A message naming the field, the allowed values and the value given.
    """

    #: Optional fields a subclass cannot do without.
    required: ClassVar[tuple[str, ...]] = ()

    name: str
    _: KW_ONLY
    layers: int
    heads: int
    head_dim: int
    kv_heads: int | None = None
    d_model: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    gated: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Model name must be a non-empty string, not {self.name!r}")
        integer(self.layers, "Layer count", 1, 1024)
        integer(self.heads, "Query head count", 1, 1024)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        integer(self.kv_heads, "KV head count", 1, self.heads)
        if self.heads % self.kv_heads:
            raise ValueError(f"Query head count must be a multiple of the KV head count "
                             f"{self.kv_heads}, not {self.heads}")
        integer(self.head_dim, "Head dimension", 1, 1 << 12)
        for value, what, maximum in ((self.d_model, "Hidden size d_model", 1 << 16),
                                     (self.ffn, "FFN width", 1 << 22),
                                     (self.vocab, "Vocabulary size", 1 << 20)):
            if value is not None:
                integer(value, what, 1, maximum)
        if not isinstance(self.gated, bool):
            raise TypeError(f"Gated must be True or False, not {self.gated!r}")
        for field in self.required:
            if getattr(self, field) is None:
                raise TypeError(f"{type(self).__name__} {self.name} needs {field}, not None")

    @property
    def group(self) -> int:
        """Query heads per KV head ``G`` (1 for MHA)."""
        return self.heads // self.kv_heads

    @property
    def d_q(self) -> int:
        """Width of Q and of the attention output O: ``heads * head_dim``."""
        return self.heads * self.head_dim

    @property
    def d_kv(self) -> int:
        """Width of K and of V: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def weights_per_layer(self) -> int:
        """Weights of one layer's matrices: Q, K, V, O and the FFN's two or three projections
        (norms and biases left out). Needs ``d_model`` and ``ffn``."""
        for field in ("d_model", "ffn"):
            if getattr(self, field) is None:
                raise ValueError(f"The weights of {self.name} need its {field}, which is None")
        attention = self.d_model * (2 * self.d_q + 2 * self.d_kv)
        return attention + (3 if self.gated else 2) * self.d_model * self.ffn
