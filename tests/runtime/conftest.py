"""Fixtures of the runtime's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def x64():
    """JAX's 64-bit mode for one module's float64 checks (a float64 handle needs it), restored after."""
    jax = pytest.importorskip("jax")
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)
