"""The model file's own tokenizer: GPT-2-style byte-level BPE built from the GGUF vocabulary and
merges with the ``tokenizers`` package; nothing is downloaded.

Contract: :func:`tokenizer` returns an object with ``encode(text) -> list[int]`` (BOS first when
the file's ``tokenizer.ggml.add_bos_token`` asks for one) and ``decode(ids) -> str``. Control
tokens (GGUF token type 3, such as ``<|im_start|>``) are matched in the text as single tokens, as
llama.cpp does with ``special=True``. A tokenizer model or pre-tokenizer other than ``gpt2`` with
one of the pre-tokenizers below is a :class:`~sim.llm.loader.ModelError`.
"""

from __future__ import annotations

from .loader import ModelError, ModelFile

__all__ = ["Tokenizer", "tokenizer"]

#: GGUF ``tokenizer.ggml.pre`` names and the ``tokenizers`` pre-tokenizers that reproduce
#: llama.cpp's regular expressions for them: ``smollm`` (like ``starcoder``) splits every digit
#: apart before the GPT-2 pattern; ``gpt-2`` and ``default`` use the GPT-2 pattern alone.
_SPLIT_DIGITS = {"smollm": True, "starcoder": True, "refact": True, "gpt-2": False,
                 "default": False}
_CONTROL = 3


class Tokenizer:
    """Byte-level BPE from a GGUF file (see the module notes)."""

    def __init__(self, mf: ModelFile):
        from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, \
            pre_tokenizers
        fields = mf.reader.fields
        def get(key, default=None):
            return fields[key].contents() if key in fields else default
        kind, pre = get("tokenizer.ggml.model"), get("tokenizer.ggml.pre", "default")
        if kind != "gpt2" or pre not in _SPLIT_DIGITS:
            raise ModelError(f"{mf.path}: the tokenizer is {kind} with the pre-tokenizer {pre}; "
                             f"memwall reads gpt2 BPE with "
                             f"{', '.join(sorted(_SPLIT_DIGITS))}")
        tokens = get("tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ", 1)) for m in get("tokenizer.ggml.merges", [])]
        types = get("tokenizer.ggml.token_type", [1] * len(tokens))
        tok = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        steps = [pre_tokenizers.Digits(individual_digits=True)] if _SPLIT_DIGITS[pre] else []
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t, k in zip(tokens, types) if k == _CONTROL])
        self._tok = tok
        self.add_bos = mf.config.add_bos
        self.bos_id = mf.config.bos_id
        self.eos_id = mf.config.eos_id
        self.vocab = len(tokens)

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if self.add_bos and self.bos_id is not None else []) + ids

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


def tokenizer(mf: ModelFile) -> Tokenizer:
    """The tokenizer of ``mf``."""
    return Tokenizer(mf)
