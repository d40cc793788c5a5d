"""What a new user meets first: signatures and shape messages as a user writes them, the README
stating generically what runs where, backends listing their methods."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import grid_core
from conftest import load
from grid_core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def test_the_integrator_signature_shows_dt_as_required():
    ref = grid_core.Reference(load("iiwa14"))
    sig = inspect.signature(ref.integrator)
    assert sig.parameters["dt"].default is inspect.Parameter.empty
    assert str(sig) == "(q, qd, tau, dt, method='semi_implicit_euler', f_ext=None, gravity=(0.0, 0.0, -9.81))"
    assert str(inspect.signature(ref.inverse_dynamics)) == "(q, qd, qdd, f_ext=None, gravity=(0.0, 0.0, -9.81))"


def test_shape_messages_print_n_7_not_n_7_comma():
    ref = grid_core.Reference(load("iiwa14"))
    with pytest.raises(InputError) as info:
        ref.inverse_dynamics(np.zeros((3, 6)), np.zeros((3, 7)), np.zeros((3, 7)))
    assert str(info.value) == "inverse_dynamics: argument 'q' has shape (3, 6), expected (7,) or (N, 7)"
    with pytest.raises(InputError, match=re.escape("expected (7, 6) or (N, 7, 6)")):
        ref.inverse_dynamics(np.zeros(7), np.zeros(7), np.zeros(7), f_ext=np.zeros(6))


def test_the_readme_says_generically_what_runs_where():
    """The README claims no algorithm list that goes stale as emitters land: it points at `grid list`."""
    text = " ".join((ROOT / "README.md").read_text().split())
    assert ("Every algorithm has its float64 reference; the generated code (host-emulated, on the CPU, on the "
            "GPU) runs the algorithms whose plugin has an emitter. `grid list` prints which run where") in text
    assert "grid robots" in text


def test_the_cache_location_is_documented_and_honoured(tmp_path, monkeypatch):
    from grid_core import buildcache

    text = " ".join((ROOT / "docs" / "guides" / "quickstart.rst").read_text().split())
    assert "under ``$GRID_CACHE_DIR`` when it is set, else ``$XDG_CACHE_HOME/grid`` (by default ``~/.cache/grid``)" in text
    monkeypatch.setenv("GRID_CACHE_DIR", str(tmp_path / "c"))
    assert buildcache.cache_dir() == tmp_path / "c"
