"""The C form of the numpy call path (``fastcall.c``): built on first use with the host C
compiler against this interpreter's headers, cached by content (:mod:`grid_core.buildcache`),
and loaded as an extension module.  Where it cannot be built (no compiler, no ``Python.h``)
or ``GRID_NO_FASTCALL`` is set, :func:`module` returns ``None`` and the backends run the same
path in Python, a few µs slower per call.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import threading
import warnings
from pathlib import Path

from .. import buildcache
from ..errors import BuildError

ENV_DISABLE = "GRID_NO_FASTCALL"
NAME = "_grid_fastcall"  # PyInit__grid_fastcall in fastcall.c
MAX_WORDS, MAX_ARRAYS = 64, 32  # the C form's tables (fastcall.c)
_lock = threading.Lock()
_state: dict = {}


def _build() -> Path:
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise BuildError(f"no Python.h under {include} (install the interpreter's development headers)")
    source = Path(__file__).with_name("fastcall.c").read_text()
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", "{out}", "fastcall.c"]
    path, _ = buildcache.build("fastcall", {"fastcall.c": source}, cmd, f"{NAME}.so",
                               extra={"python": sys.implementation.cache_tag, "soabi": sysconfig.get_config_var("SOABI")})
    return path


def module():
    """The built extension module, or ``None`` (the pure-Python path is used instead)."""
    if "module" in _state:
        return _state["module"]
    with _lock:
        if "module" not in _state:
            mod = None
            if not os.environ.get(ENV_DISABLE):
                try:
                    path = _build()
                    loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
                    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
                    mod = importlib.util.module_from_spec(spec)
                    loader.exec_module(mod)
                except (BuildError, OSError, ImportError) as exc:
                    warnings.warn(f"grid: the C call path is unavailable, using the Python one: "
                                  f"{str(exc).splitlines()[0]}", RuntimeWarning, stacklevel=2)
                    mod = None
            _state["module"] = mod
    return _state["module"]
