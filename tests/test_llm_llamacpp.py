"""The float reference beside llama.cpp on the same file (llama-cpp-python, the `llamacpp` extra
that `make test-all` installs): the same token ids, perplexity within 2 %, the same most likely
next token at >= 95 % of the positions (docs/llm.md has the measured figures)."""

from __future__ import annotations

import pytest

from memwall.cli import main
from sim.llm import llamacpp
from sim.llm.model import Llama
from sim.llm.score import default_text, log_probs, metrics
from sim.llm.tokenizer import tokenizer


def test_score_llamacpp_without_the_extra_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(llamacpp, "available", lambda: False)
    assert main(["model", "score", "--tokens", "4", "--llamacpp"]) == 2
    err = capsys.readouterr().err
    assert "make llamacpp" in err and err.count("\n") == 1


def _need_llamacpp():
    if not llamacpp.available():
        pytest.skip("llama-cpp-python is not installed: `make llamacpp` (the llamacpp extra)")


@pytest.mark.slow      # llama.cpp is an optional extra; the tokenizer's own tests run always
def test_same_token_ids_as_llamacpp(smol):
    _need_llamacpp()
    cpp = llamacpp.LlamaCpp(smol.path, n_ctx=512)
    ours = tokenizer(smol)
    text = default_text().text
    for piece in (text, "Hello, world! 12345 <|im_start|>user\nHi<|im_end|>\n", "  a\tb\n\nc"):
        assert ours.encode(piece) == cpp.tokenize(piece)


@pytest.mark.slow
def test_float_reference_agrees_with_llamacpp(smol):
    _need_llamacpp()
    ids = tokenizer(smol).encode(default_text().text)[:1025]
    reference = log_probs(Llama(smol), ids)
    row = llamacpp.compare(smol, default_text().text, 1024, reference)
    assert row["same_ids"]
    assert abs(row["delta_ppl_pct"]) < 2.0, row
    assert row["top1_agree_with_float"] >= 0.95, row
    assert metrics(reference, ids)["ppl"] > 1
