"""llama.cpp on the same GGUF file, through ``llama-cpp-python`` (the ``llamacpp`` extra:
``pip install -e '.[llamacpp]'``, which compiles llama.cpp: about 11 minutes of CPU here), as the
outside check of the float reference.

Contract: :func:`available` says whether the package imports; :class:`LlamaCpp` tokenizes,
returns the next-token logits of every position of a sequence (one batched evaluation) and greedy
decodes, each timed. llama.cpp quantizes activations to 8 bits per block of 32 inside its Q4_1
dot products, so its figures are close to the float reference's, not equal (docs/llm.md).
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["available", "LlamaCpp"]


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


class LlamaCpp:
    """One llama.cpp context on ``path`` with ``n_ctx`` positions and ``threads`` threads."""

    def __init__(self, path, n_ctx: int = 2048, threads: int = 2):
        import llama_cpp
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                                   n_threads_batch=threads, n_batch=512, logits_all=True,
                                   verbose=False)

    def tokenize(self, text: str) -> list[int]:
        """Token ids as llama.cpp makes them (BOS as the file asks, control tokens matched)."""
        return list(self.llm.tokenize(text.encode(), add_bos=self.llm.metadata.get(
            "tokenizer.ggml.add_bos_token", "true") == "true", special=True))

    def logits(self, ids) -> tuple[np.ndarray, float]:
        """Logits ``(len(ids), vocab)`` of every position, and the seconds taken."""
        self.llm.reset()
        start = time.perf_counter()
        self.llm.eval(list(ids))
        seconds = time.perf_counter() - start
        return np.array(self.llm.scores[:len(ids)], np.float32), seconds

    def generate(self, ids, tokens: int) -> tuple[list[int], float]:
        """Greedy continuation of ``ids`` and its decode speed in tokens per second."""
        self.llm.reset()
        self.llm.eval(list(ids))
        out = []
        start = time.perf_counter()
        for _ in range(tokens):
            nxt = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            out.append(nxt)
            self.llm.eval([nxt])
        return out, tokens / (time.perf_counter() - start)


def compare(mf, text: str, tokens: int, reference: np.ndarray | None = None,
            threads: int = 2) -> dict:
    """llama.cpp beside the float reference on the first ``tokens + 1`` tokens of ``text``.

    Returns whether both tokenizers give the same ids (``same_ids``, and the first position
    where they part), and llama.cpp's :func:`~sim.llm.score.metrics` against the float
    reference's log-probabilities ``reference`` (computed here when not given), its seconds.
    """
    from .model import Llama
    from .score import _log_softmax, log_probs, metrics
    from .tokenizer import tokenizer
    ours = tokenizer(mf).encode(text)
    cpp = LlamaCpp(mf.path, n_ctx=max(512, tokens + 1), threads=threads)
    theirs = cpp.tokenize(text)
    n = min(len(ours), len(theirs))
    parted = next((i for i in range(n) if ours[i] != theirs[i]), None if len(ours) == len(
        theirs) else n)
    ids = ours[:tokens + 1]
    if reference is None:
        reference = log_probs(Llama(mf), ids)
    logits, seconds = cpp.logits(ids[:-1])
    row = metrics(_log_softmax(logits), ids, reference)
    row["delta_ppl_pct"] = 100.0 * (row["ppl"] / metrics(reference, ids)["ppl"] - 1.0)
    row.update(seconds=round(seconds, 2), same_ids=parted is None, ids_part_at=parted)
    return row
