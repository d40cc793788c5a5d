"""Every module of grid_core, grid_plugins and grid_algorithms imports cleanly under
``python -W error`` (STYLE convention 9): no import emits any warning.

One subprocess imports them all, each in its own ``try``, and reports per module;
a module that fails is dropped from ``sys.modules``, so a module importing it fails
too and is reported as well.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

PACKAGES = ("grid_core", "grid_plugins", "grid_algorithms", "grid_robots")


def all_modules() -> list[str]:
    names = []
    for pkg_name in PACKAGES:
        pkg = importlib.import_module(pkg_name)
        names.append(pkg_name)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg_name}.")]
    return sorted(names)


MODULES = all_modules()

_SCRIPT = """
import importlib, json, sys, traceback
results = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        results[name] = "ok"
    except BaseException as exc:
        results[name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def import_results() -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", _SCRIPT, *MODULES],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # nothing printed on import either
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_module_list_is_complete():
    for expected in ("grid_core.cli", "grid_core.model.builder", "grid_plugins.urdf", "grid_plugins.erd",
                     "grid_algorithms.inverse_dynamics", "grid_core.emit.printer"):
        assert expected in MODULES


def test_warnings_are_errors_in_the_subprocess():
    """The harness really turns a warning into a failed import (else the test proves nothing)."""
    code = _SCRIPT.replace("importlib.import_module(name)", "import warnings; warnings.warn('x', DeprecationWarning)")
    proc = subprocess.run([sys.executable, "-W", "error", "-c", code, "json"], capture_output=True, text=True,
                          timeout=60)
    assert json.loads(proc.stdout) == {"json": "DeprecationWarning: x"}


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_without_warnings(module, import_results):
    assert import_results[module] == "ok"


_LIGHT = """
import sys
import grid_algorithms.crba, grid_algorithms.inverse_dynamics
from grid_core import Algorithm, Port, hookimpl
heavy = sorted(m for m in sys.modules if m.startswith(("grid_core.runtime", "grid_core.abi", "grid_core.composer")))
print(",".join(heavy))
"""


def test_plugin_face_is_light():
    """What a plugin imports (an algorithm module, ``Algorithm``, ``Port``, ``hookimpl``) loads
    no runtime module, no C ABI and no composer."""
    proc = subprocess.run([sys.executable, "-c", _LIGHT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"a plugin import loaded {proc.stdout.strip()}"
