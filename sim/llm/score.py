"""Perplexity and agreement of a back-end's next-token distributions, as llama.cpp's perplexity
tool reports them.

Contract: :func:`log_probs` runs a model over ``N + 1`` token ids (batched prefill in chunks,
with the KV cache carried between them) and returns the ``N`` next-token log-distributions that
predict ids ``1..N``, each from every id before it; :func:`metrics` turns them into perplexity
and, given the float reference's, mean KL divergence ``KL(float || back-end)`` and top-1
agreement. :func:`default_text` is the text scored when none is given.
"""

from __future__ import annotations

import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

__all__ = ["TextError", "Text", "default_text", "read_text", "log_probs", "metrics",
           "DEFAULT_TOPICS", "score_point", "ScoreJob", "share", "reference_log_probs", "model_file"]

#: The default text: sections of the Python Language Reference as CPython ships them in
#: ``pydoc_data.topics`` (PSF License 2.0), English prose: "Execution model", then "The standard
#: type hierarchy". Its exact bytes follow the Python version; the SHA-256 is reported.
DEFAULT_TOPICS = ("execmodel", "types")


class TextError(ValueError):
    """A text that cannot be scored; the message is one line."""


@dataclass(frozen=True)
class Text:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def describe(self) -> dict:
        return {"name": self.name, "sha256": self.sha256, "chars": len(self.text)}


def default_text() -> Text:
    from pydoc_data.topics import topics
    ver = ".".join(map(str, sys.version_info[:3]))
    return Text(f"Python {ver} pydoc_data.topics: {', '.join(DEFAULT_TOPICS)}",
                "\n\n".join(topics[k] for k in DEFAULT_TOPICS))


def read_text(path: str | Path) -> Text:
    """A UTF-8 text file; :class:`TextError` for a missing, empty or non-UTF-8 one."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TextError(f"{path}: cannot read the text ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextError(f"{path}: not UTF-8 (byte {exc.start}: {data[exc.start]:#04x}); give a "
                        f"UTF-8 text") from None
    if not text.strip():
        raise TextError(f"{path}: the text is empty")
    return Text(str(path), text)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return x.astype(np.float32)


def log_probs(model, ids, *, chunk: int = 256,
              progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """``(N, vocab)`` float32 log-probabilities predicting ``ids[1:]`` (see the module notes)."""
    ids = list(ids)
    n = len(ids) - 1
    if n < 1:
        raise TextError(f"scoring needs at least 2 tokens, not {len(ids)}")
    cache = model.new_cache()
    out = np.empty((n, model.config.vocab), np.float32)
    for start in range(0, n, chunk):
        end = min(n, start + chunk)
        out[start:end] = _log_softmax(model.forward(ids[start:end], cache))
        if progress is not None:
            progress(end, n)
    return out


def metrics(lp: np.ndarray, ids, reference: np.ndarray | None = None) -> dict:
    """Perplexity of ``ids[1:]`` under ``lp``; with the float reference's ``reference``, the mean
    ``KL(reference || lp)`` in nats and the share of positions whose most likely token agrees."""
    targets = np.asarray(list(ids)[1:lp.shape[0] + 1])
    nll = -lp[np.arange(lp.shape[0]), targets].astype(np.float64)
    out = {"ppl": float(np.exp(nll.mean())), "nll": float(nll.mean())}
    if reference is not None:
        p = np.exp(reference.astype(np.float64))
        kl = (p * (reference.astype(np.float64) - lp.astype(np.float64))).sum(axis=-1)
        out["kl_to_float"] = float(kl.mean())
        out["top1_agree_with_float"] = float(
            (reference.argmax(axis=-1) == lp.argmax(axis=-1)).mean())
    return out


#: Model files opened in this process, by path (None: the default model): a Dask worker opens
#: each once; the CLI hands over the one it opened (:func:`share`).
_FILES: dict = {}


def share(mf) -> None:
    """Let :func:`score_point` use the already opened model file ``mf`` for its path."""
    _FILES[str(mf.path)] = mf


def model_file(path: str | None):
    """The model file at ``path`` (None: the default), opened once per process."""
    if path not in _FILES:
        from .loader import load
        _FILES[path] = load(path)
    return _FILES[path]


#: The float reference's log-probabilities of the last text scored here, by (path, ids).
_REFERENCE: dict = {}


def reference_log_probs(path: str | None, ids: tuple[int, ...], progress=None) -> np.ndarray:
    """The float reference's log-probabilities over ``ids`` (kept for the last text)."""
    from .model import Llama
    if (path, ids) not in _REFERENCE:
        _REFERENCE.clear()                      # one text at a time: (N, vocab) float32 each
        _REFERENCE[path, ids] = log_probs(Llama(model_file(path)), ids, progress=progress)
    return _REFERENCE[path, ids]


class ScoreJob(NamedTuple):
    """One back-end to score: the GGUF path (None: the default model), the token ids, the
    numerics name and its options as ``(key, value)`` pairs. Its repr names the back-end only."""

    path: str | None
    ids: tuple
    name: str
    options: tuple = ()

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options)
        return f"{self.name}({opts})" if opts else self.name


def score_point(point: ScoreJob, progress: Callable[[str, int, int], None] | None = None
                ) -> dict:
    """Score one back-end (a :class:`ScoreJob`, or the same four values as a tuple);
    ``progress(what, done, total)`` hears of every chunk of tokens scored.

    A module-level function of picklable arguments, for :meth:`sim.reproduce.Context.map` and
    ``memwall model score`` on a Dask cluster: each worker process loads the model and scores
    the float reference once (cached), then the back-end; returns :func:`metrics` against float,
    with ``delta_ppl_pct`` and ``seconds``, the time of the back-end's own forward passes (the
    float point's too: it is scored afresh, not read from the cache).
    """
    from .backends import numerics
    from .model import Llama
    path, ids, name, options = point
    ids = tuple(int(i) for i in ids)
    mf = model_file(path)
    def told(what):
        return None if progress is None else (lambda done, n: progress(what, done, n))
    start = time.perf_counter()
    if name == "float" and not options:         # timed on its own, not read from the cache
        lp = reference = log_probs(Llama(mf), ids, progress=told(name))
    else:
        reference = reference_log_probs(path, ids, told("float reference"))
        start = time.perf_counter()
        lp = log_probs(Llama(mf, numerics(name, mf, **dict(options))), ids,
                       progress=told(name))
    seconds = round(time.perf_counter() - start, 2)
    row = metrics(lp, ids, reference)
    row["seconds"] = seconds
    row["delta_ppl_pct"] = 100.0 * (row["ppl"] / metrics(reference, ids)["ppl"] - 1.0)
    return row
