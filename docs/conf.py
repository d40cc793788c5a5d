"""Sphinx configuration of the GRiD documentation.

Build (warnings are errors; no network needed):

    sphinx-build -W -b html docs docs/_build/html

The pages under ``algorithms/`` are generated at build time from the registered
plugins by :mod:`grid_core.sphinxext` (installed third-party algorithms included);
``_generated/`` holds the benchmark plots and tables (``_ext/grid_docs.py``).
Both are build outputs, not sources to edit.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent  # the repository: examples/ and benchmarks/results/ are read from here
sys.path.insert(0, str(DOCS / "_ext"))

import grid_core  # noqa: E402

project = "GRiD"
author = "the GRiD developers"
copyright = "the GRiD developers, MIT licence"
release = version = grid_core.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # (sic: a hyphenated module) MathJax served from _static: the pages render math without network
    "sphinx_click",
    "grid_core.sphinxext",  # one page per registered algorithm (algorithms/)
    "grid_docs",  # benchmark plots and tables, the optional reference-timings page
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []
root_doc = "index"

html_theme = "furo"
html_title = f"GRiD {release}"
html_static_path = ["_static"]
html_css_files = ["grid.css"]
html_theme_options = {"navigation_with_keys": True}
html_last_updated_fmt = None

autodoc_member_order = "bysource"
autodoc_typehints = "signature"

# grid_core.sphinxext
grid_algorithm_dir = "algorithms"
grid_sample_robot = "iiwa14"
grid_arena_robots = ("iiwa14", "hyq", "atlas")

# grid_docs
grid_docs_root = str(ROOT)
