"""The documentation: it builds with warnings as errors, and its algorithm pages are generated
from the registered plugins (STYLE convention 10), third-party ones included.

The build runs ``python -m sphinx -W -b html`` in a subprocess on a copy of ``docs/`` (beside
links to the repository's ``examples/`` and ``benchmarks/``), so the pages it generates land in
the copy, never in the working tree, and concurrent builds cannot meet.

The example plugin package ``examples/plugin_gravity_compensation`` is pip-installed into a
temporary ``--target`` directory, as tests/test_third_party_plugin.py does; its own tests must
pass there.  The site is built once (a minute and a half of Sphinx on CI's two cores), with the
plugin on the path: its page must be there beside the built-in ones, which the other tests read.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import grid_core
from grid_core.composer import GenerateOptions, generate, plan_arena
from grid_core.sphinxext import DEFAULT_TOLERANCES, MARKER, layer_signatures, tolerances_of, write_pages

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PLUGIN = ROOT / "examples" / "plugin_gravity_compensation"
ARENA_ROBOTS = ("iiwa14", "hyq", "atlas")


def clean_env(site: Path | None = None) -> dict:
    env = dict(os.environ)  # GRID_DISABLE_PLUGINS included: the pages follow this process's registry
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return env


def build_docs(tmp: Path, site: Path | None = None) -> Path:
    """Build the site from a copy of docs/; return the HTML directory."""
    root = tmp / "root"
    root.mkdir()
    shutil.copytree(DOCS, root / "docs",
                    ignore=shutil.ignore_patterns("_build", "algorithms", "_generated", "__pycache__"))
    for name in ("examples", "benchmarks"):
        (root / name).symlink_to(ROOT / name, target_is_directory=True)
    out = tmp / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(root / "docs"), str(out)],
        capture_output=True, text=True, env=clean_env(site), timeout=600,
    )
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def page_text(path: Path) -> str:
    """The text of an HTML page, tags removed (code blocks keep their line breaks)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


@pytest.fixture(scope="module")
def site_html(tmp_path_factory, plugin_site) -> Path:
    """The site, built with the example plugin package on the path (:func:`plugin_site`): the
    built-in pages and the third-party plugin's (test_the_example_plugin_gets_its_page) from one build."""
    return build_docs(tmp_path_factory.mktemp("docs"), site=plugin_site[0])


def registered() -> dict:
    return grid_core.algorithms()


def robot(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return grid_core.load_robot(name)


# -- the site ----------------------------------------------------------------------------------


def test_every_registered_algorithm_has_a_page(site_html):
    index = (site_html / "algorithms" / "index.html").read_text()
    for name, alg in registered().items():
        page = site_html / "algorithms" / f"{name}.html"
        assert page.is_file(), name
        assert f'href="{name}.html"' in index, name
        text = page_text(page)
        assert alg.summary.split()[0] in text
        for key in ("P1", "P2", "P3", "P4"):
            assert key in text, (name, key)
        if not alg.has_emitter():
            assert "not yet emitted" in text, name


def test_inverse_dynamics_page_has_the_signatures_and_the_arena(site_html):
    text = page_text(site_html / "algorithms" / "inverse_dynamics.html")
    sigs = layer_signatures(robot("iiwa14"), "inverse_dynamics")
    names = [f for f, _, _ in sigs]
    for layer in ("inverse_dynamics_inner", "inverse_dynamics_device", "inverse_dynamics_kernel",
                  "inverse_dynamics_per_state_kernel", "inverse_dynamics_launch", "inverse_dynamics"):
        assert layer in names, layer
    for _, _, decl in sigs:
        assert decl in text, decl  # the declarations of the header, as printed for iiwa14
    assert "template <typename T, int RESOURCE_TIER = TIER_SHARED>" in text
    assert "INVERSE_DYNAMICS_DEVICE_DYNAMIC_SHARED_MEM_BYTES" in text
    # the arena: regions and the rungs with their byte sizes, per robot
    alg = registered()["inverse_dynamics"]
    assert "spilled to d_workspace" in text
    for name in ARENA_ROBOTS:
        r = robot(name)
        assert f"{name} (nq = {r.nq}, nv = {r.nv}, {r.num_bodies} bodies)" in text
        plan = plan_arena(alg, r, GenerateOptions(target_shared_mem_bytes=None))
        for rung in plan.rungs:
            smem, ws = plan.smem_elements(rung), plan.workspace_elements(rung)
            assert f"{smem * 4} / {smem * 8}" in text and f"{ws * 4} / {ws * 8}" in text, (name, rung.level)
    assert "vaf" in text and "MINIMAL" in text


def test_guides_reference_and_benchmarks(site_html):
    for page in ("index", "guides/quickstart", "guides/inline_cuda", "guides/training", "guides/plugin",
                 "reference/api", "reference/hooks", "reference/cli", "benchmarks"):
        assert (site_html / f"{page}.html").is_file(), page
    hooks = page_text(site_html / "reference" / "hooks.html")
    assert "grid_register_algorithms" in hooks and "Return a list of" in hooks  # the hookspec docstrings
    cli = page_text(site_html / "reference" / "cli.html")
    assert "grid build" in cli and "--disable-plugin" in cli
    inline = page_text(site_html / "guides" / "inline_cuda.html")
    assert "INVERSE_DYNAMICS_DEVICE_DYNAMIC_SHARED_MEM_BYTES" in inline and "fused_control_step_kernel" in inline
    bench = page_text(site_html / "benchmarks.html")
    if list((ROOT / "benchmarks" / "results").glob("*.json")):
        assert "inverse_dynamics kernel time vs N" in (site_html / "benchmarks.html").read_text()
    else:
        assert "No benchmark results are committed yet" in bench
    if (DOCS / "reference_timings.md").is_file():
        assert (site_html / "_generated" / "reference_timings.html").is_file()
    # math renders without network: MathJax ships inside the site
    assert (site_html / "_static" / "mathjax" / "tex-chtml.js").is_file()


def test_the_training_guide_ran_its_examples(site_html):
    """Dynamics in a training loop: the PyTorch and JAX examples ran while the docs built (both
    frameworks are test extras), and their gradients did their job: the policy's loss fell, the
    reaching distance shrank below 2 cm."""
    text = page_text(site_html / "guides" / "training.html")
    assert "What it printed when this page was built" in text and "Not run" not in text
    losses = [float(x) for x in re.findall(r"step +\d+  loss (\S+)", text)]
    assert len(losses) == 4 and losses[-1] < 0.2 * losses[0], losses
    distances = [float(x) for x in re.findall(r"mean distance (\S+) m", text)]
    assert len(distances) == 5 and distances[-1] < 2e-2 < distances[0], distances
    assert "guides/training.html" in (site_html / "index.html").read_text()


def _squeeze(text: str) -> str:
    return re.sub(r"\(\s+", "(", " ".join(text.split()))


def test_the_inline_guide_quotes_the_device_signature_of_the_header(site_html):
    """The guide writes the signature out by hand: it must still be the header's."""
    (decl,) = [d for f, _, d in layer_signatures(robot("iiwa14"), "inverse_dynamics") if f == "inverse_dynamics_device"]
    decl = "\n".join(ln for ln in decl.splitlines() if not ln.startswith("//"))
    assert _squeeze(decl) in _squeeze(page_text(site_html / "guides" / "inline_cuda.html"))


# -- the extension, in process -------------------------------------------------------------------


def test_tolerances_default_to_the_ladder_and_follow_the_attribute():
    algs = registered()
    assert tolerances_of(algs["inverse_dynamics"]) == DEFAULT_TOLERANCES
    class ReferenceOnly(type(algs["inverse_dynamics"])):  # every built-in emits: one without its emitter
        emitter = None

    assert tolerances_of(ReferenceOnly()) == DEFAULT_TOLERANCES[:1]

    class Own(type(algs["inverse_dynamics"])):
        tolerances = (("reference vs something", "float64", 1e-12),)

    assert tolerances_of(Own()) == (("reference vs something", "float64", 1e-12),)


def test_layer_signatures_are_the_printed_declarations():
    """The docs read each layer's signature node; printed, it is the header's line."""
    header = generate(robot("iiwa14"), ["inverse_dynamics"])
    flat = _squeeze(header)
    sigs = layer_signatures(robot("iiwa14"), "inverse_dynamics")
    assert [f for f, _, _ in sigs][:3] == ["inverse_dynamics_inner", "inverse_dynamics_device", "inverse_dynamics_kernel"]
    for f, _, decl in sigs:
        code = [ln for ln in decl.splitlines() if not ln.startswith("//")]
        assert _squeeze(" ".join(code)).rstrip(";") + " {" in flat, f


def test_write_pages_removes_stale_generated_pages_only(tmp_path):
    (tmp_path / "gone_algorithm.rst").write_text(MARKER + "\n\ngone\n====\n")
    (tmp_path / "handwritten.rst").write_text("kept\n====\n")
    written = write_pages(tmp_path, arena_robots=("iiwa14",))
    assert not (tmp_path / "gone_algorithm.rst").exists()
    assert (tmp_path / "handwritten.rst").exists()
    assert {p.stem for p in written} == {"index", *registered()}
    mtime = (tmp_path / "index.rst").stat().st_mtime_ns
    write_pages(tmp_path, arena_robots=("iiwa14",))  # unchanged text: not rewritten
    assert (tmp_path / "index.rst").stat().st_mtime_ns == mtime


# -- the example plugin package ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> tuple[Path, Path]:
    """``(target, source)``: the example plugin pip-installed from a copy of its source."""
    src = tmp_path_factory.mktemp("gravity_src") / PLUGIN.name
    shutil.copytree(PLUGIN, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__",
                                                               ".pytest_cache"))
    target = tmp_path_factory.mktemp("gravity_site")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--quiet", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "grid_example_gravity-0.1.0.dist-info").is_dir()
    return target, src


def test_the_example_plugin_passes_its_own_tests(plugin_site, tmp_path):
    target, src = plugin_site
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(src / "tests")],
        capture_output=True, text=True, env=clean_env(target), cwd=tmp_path, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", proc.stdout) and " failed" not in proc.stdout


def test_the_example_plugin_gets_its_page(site_html):
    out = site_html
    page = out / "algorithms" / "gravity_compensation.html"
    assert page.is_file()
    text = page_text(page)
    assert "grid-example-gravity" in text
    assert "gravity_compensation_kernel(" in text and "gravity_compensation_launch(" in text
    assert "reference vs grid_core.Reference(robot).inverse_dynamics(q, 0, 0)" in text  # its own tolerances
    assert 'href="gravity_compensation.html"' in (out / "algorithms" / "index.html").read_text()
    # the built-in pages are all still there
    for name in registered():
        assert (out / "algorithms" / f"{name}.html").is_file(), name


# -- docs for users ---------------------------------------------------------------------------

INTERNAL = re.compile(r"DESIGN\s*§|\bseeds? 0\d\d\b|ANCHORS|STYLE\.md|\.\./shared/")
# Still in docstrings of modules their owners are rewriting now (grid_core.emit, grid_core.sphinxext):
# each entry is the sentence, to delete here when its module is fixed.
PENDING = ()  # phrases of pages whose owners have not yet rewritten them


def test_the_home_page_shows_where_each_algorithm_runs_from_the_registry(site_html):
    from grid_core.algorithm import BACKENDS

    text = " ".join(page_text(site_html / "index.html").split())
    assert "algorithm " + " ".join(BACKENDS) in text
    for name, alg in registered().items():
        cells = ["yes"] + ["yes" if alg.has_emitter() else "no"] * 3
        assert f"{name} {' '.join(cells)}" in text, name


def test_the_benchmark_page_opens_with_the_newest_summary(site_html):
    text = page_text(site_html / "benchmarks.html")
    if not list((ROOT / "benchmarks" / "results").glob("*.json")):
        pytest.skip("no benchmark result committed")
    summary, log, measured = (text.index(s) for s in ("Summary: the newest results", "Run log",
                                                       "What the columns measure"))
    assert summary < log < measured
    page = (site_html / "benchmarks.html").read_text()  # the newest kernel plot is in the summary
    assert page.index("Summary: the newest results") < page.index("inverse_dynamics kernel time vs N") < \
        page.index("Run log")
    assert "kernel timings" in text and "runtime overheads" in text


def test_no_user_page_points_at_documents_the_user_does_not_have(site_html):
    """The design notes, seeds and anchors live outside the distribution: user pages (the README,
    the guides, the reference, the benchmarks, `grid review`) explain in place instead."""
    sources = [ROOT / "README.md", *DOCS.glob("*.rst"), *DOCS.glob("*.md"), *(DOCS / "guides").glob("*.rst"),
               *(DOCS / "reference").glob("*.rst")]
    built = [p for p in site_html.rglob("*.html") if "algorithms" not in p.parts and "_modules" not in p.parts]
    found = [f"{p.name}: {m.group(0)}" for p in sources for m in INTERNAL.finditer(p.read_text())]
    for p in built:
        text = page_text(p)
        for pending in PENDING:
            text = text.replace(pending, "")
        found += [f"{p.name}: {m.group(0)}" for m in INTERNAL.finditer(text)]
    for name, alg in registered().items():
        found += [f"grid review {name}: {m.group(0)}" for m in INTERNAL.finditer(alg.review.render(emitted=True))]
    assert found == []


def test_the_summary_keeps_each_robots_newest_timings(tmp_path):
    """A newer run of a few robots (atlas and g1's Minv) takes their rows in the summary; the
    others (go2, hyq, iiwa14) keep those of the older run that last timed them, which timed g1
    too (its g1 rows are not in the summary)."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import grid_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    for name in ("2026-12-02_H200_b3cf4ce-mapped.json", "2026-12-03_H200_b000eab.json"):
        shutil.copy(ROOT / "benchmarks" / "results" / name, results / name)
    text = grid_docs.results_text(tmp_path, tmp_path / "out")
    summary = text[:text.index("Run log")]
    parts = {part.split("\n", 1)[0]: part for part in re.split(r"(?m)^(?=\*\*)", summary)
             if part.startswith("**kernel timings of minv**")}
    assert len(parts) == 2, list(parts)
    (newer, newer_body), (older, older_body) = parts.items()
    assert "(atlas, g1)" in newer and "b000eab" in newer and "minv, g1" in newer_body
    assert "(iiwa14, hyq, go2)" in older and "b3cf4ce-mapped" in older
    assert "minv, hyq" in older_body and "minv, g1" not in older_body


def test_the_anchor_table_sets_each_published_cell_beside_the_newest_timing(tmp_path):
    """Upstream's published cells (resident / with copies) beside the newest run's auto-layout row:
    a cell beaten both ways, one beaten resident only, one timed by no run; a newer run of the same
    cell replaces an older one."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import grid_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))

    def row(n, layout, resident, io=-1.0, resolved=None):
        return {"robot": "g1", "algorithm": "idsva_so", "n": n, "layout": layout,
                "resolved": resolved or layout, "resident_us": resident, "io_us": io}

    older = {"date": "2026-12-01T00:00Z", "gpu": "GPU A, driver 1", "time": [row(16, "auto", 1.0, 1.0, "block")]}
    newer = {"date": "2026-12-05T00:00Z", "gpu": "GPU B, driver 2",
             "time": [row(16, "auto", 800.0, 1000.0, "per_state"), row(16, "block", 600.0),
                      row(16, "per_state", 800.0), row(256, "auto", 1000.0, 9500.0, "per_state")]}
    up = {"idsva_so": {"g1": {16: (854.0, 1361.0), 256: (1339.0, 9404.0), 1024: (4580.0, 37271.0)}},
          "aba": {"g1": {16: (1.0, 1.0)}}}
    text = "\n".join(grid_docs.anchor_table([(Path("b.json"), newer), (Path("a.json"), older)], up))
    cells = [c.strip() for c in re.findall(r"^\s+[*]? +- (.*)$", text, re.M)]
    rows = [cells[i:i + 10] for i in range(10, len(cells), 10)]
    assert rows == [
        ["idsva_so", "g1", "16", "800.00 (per_state)", "600.00 (block)", "854", "1000.00", "1361", "yes",
         "GPU B, 2026-12-05"],
        ["idsva_so", "g1", "256", "1000.00 (per_state)", "1000.00 (per_state)", "1339", "9500.00", "9404",
         "resident only", "GPU B, 2026-12-05"],
        ["idsva_so", "g1", "1024", "not timed", "\\-", "4580", "\\-", "37271", "\\-", "\\-"]]
    assert "Of the 3 cells" in text and "timed 2; 1 of them are beaten" in text
