"""A third-party plugin, pip-installed, is found, listed, blockable and used; malformed
plugins are rejected with a PluginError naming the plugin (DESIGN §2, STYLE conventions 2-3).

The plugin lives in ``tests/third_party/grid_example_thirdparty`` (distribution
``grid-example-thirdparty`` 0.3.1, entry point ``example_thirdparty`` in the group
``grid``).  It is installed once per session with pip into a temporary ``--target``
directory (no network: ``--no-index --no-deps --no-build-isolation``) and seen by
``grid`` subprocesses through ``PYTHONPATH`` only, exactly as an installed one is.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from grid_core import Algorithm, Port, Reference, RobotLoader, hookimpl
from grid_core.derivatives import Rule
from grid_core.errors import PluginError
from grid_core.hooks import build_registry
from grid_core.review import ParallelismReview, not_applicable

PKG = Path(__file__).resolve().parent / "third_party" / "grid_example_thirdparty"
DIST = "grid-example-thirdparty 0.3.1"
BUILTIN = "grid-rbd 0.1.0"


def grid_script() -> list[str]:
    here = Path(sys.executable).with_name("grid")
    if here.exists():
        return [str(here)]
    found = shutil.which("grid")
    assert found, "the 'grid' console script is not installed"
    return [found]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The plugin pip-installed into a fresh directory (built from a copy of its source,
    so the build leaves nothing in the repository)."""
    src = tmp_path_factory.mktemp("thirdparty_src") / PKG.name
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("thirdparty_site")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "--quiet", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, (
        "pip could not build the example plugin (setuptools < 70.1 needs the 'wheel' package "
        "for --no-build-isolation):\n" + proc.stdout + proc.stderr
    )
    assert (target / "grid_example_thirdparty-0.3.1.dist-info").is_dir()
    assert (target / "grid_example_thirdparty" / "__init__.py").is_file()
    return target


def run_grid(args, site: Path | None, env_extra=None, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GRID_DISABLE_PLUGINS"}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env.update(env_extra or {})
    return subprocess.run([*grid_script(), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def listed(stdout: str, name: str) -> str | None:
    """The ``grid list`` line of ``name`` (algorithm or loader), or None."""
    for line in stdout.splitlines():
        if line.split()[:1] == [name] and line.startswith("  "):
            return line
    return None


# -- through the CLI, installed with pip ----------------------------------------------------

def test_list_shows_the_plugin_and_its_distribution(site):
    proc = run_grid(["-v", "list"], site)
    assert proc.returncode == 0, proc.stderr
    algo = listed(proc.stdout, "total_mass")
    loader = listed(proc.stdout, "twolink")
    assert algo and f"{DIST}  total mass of the robot" in algo and "[reference only]" in algo
    assert loader and f"{DIST}  a planar two-link arm" in loader
    assert BUILTIN in listed(proc.stdout, "inverse_dynamics")
    assert re.search(r"^  example_thirdparty +grid-example-thirdparty 0\.3\.1 +\(grid_example_thirdparty\)$",
                     proc.stdout, re.M)
    # the section each sits in
    algorithms, loaders = proc.stdout.split("robot loaders:")
    assert algo in algorithms and loader in loaders


def test_without_the_install_it_is_absent(site):
    proc = run_grid(["list"], None)
    assert proc.returncode == 0
    assert listed(proc.stdout, "total_mass") is None and listed(proc.stdout, "twolink") is None


@pytest.mark.parametrize("how", ["option", "env"])
def test_blocking_the_plugin_hides_it(site, how):
    if how == "option":
        proc = run_grid(["--disable-plugin", "example_thirdparty", "list"], site)
    else:
        proc = run_grid(["list"], site, {"GRID_DISABLE_PLUGINS": "example_thirdparty"})
    assert proc.returncode == 0, proc.stderr
    assert "grid-example-thirdparty" not in proc.stdout
    assert listed(proc.stdout, "total_mass") is None and listed(proc.stdout, "twolink") is None
    assert BUILTIN in listed(proc.stdout, "inverse_dynamics")  # the rest still loads
    assert BUILTIN in listed(proc.stdout, "urdf")


def test_review_of_the_plugin_algorithm(site):
    proc = run_grid(["review", "total_mass"], site)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"total_mass ({DIST}): total mass of the robot, every link included (kg)"
    assert lines[1] == "GPU emitter: not yet emitted (the review states the plan)"
    assert [ln.split(":")[0][:2] for ln in lines if re.match(r"P[1-4] ", ln)] == ["P1", "P2", "P3", "P4"]
    assert "P4 offline memory layout (sparse compaction, coalescing, topology helpers): todo" in lines
    assert "    fold the sum offline into one constant of the header" in lines


def test_info_of_the_plugin_robot(site):
    proc = run_grid(["info", "twolink:arm"], site)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "robot: twolink_arm  (twolink:arm)" in out
    assert "nq: 2  nv: 2  bodies: 2" in out
    assert "depth: 2 levels; bodies per BFS level: [1, 1]" in out
    assert "  0: shoulder -> elbow" in out
    assert re.search(r"^ +1 elbow +revolute +q\[1:2\] v\[1:2\] +parent shoulder$", out, re.M)


def test_plugin_robot_errors_and_blocking(site, tmp_path):
    proc = run_grid(["info", "twolink:leg"], site)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["grid: error: twolink:leg: unknown; this loader builds 'twolink:arm'"]
    proc = run_grid(["--disable-plugin", "example_thirdparty", "info", "twolink:arm"], site)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("grid: error: unknown loader 'twolink' in 'twolink:arm'")


def test_an_entry_point_that_fails_to_import(tmp_path):
    """A broken installed plugin stops ``grid`` with one line naming it; blocking it by
    name skips it before it is imported."""
    info = tmp_path / "broken_grid_plugin-0.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-grid-plugin\nVersion: 0.2\n")
    (info / "entry_points.txt").write_text("[grid]\nbroken = no_such_module_for_grid_tests\n")
    proc = run_grid(["list"], tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "grid: error: plugin 'broken' (broken-grid-plugin 0.2, no_such_module_for_grid_tests) failed to "
        "import: ModuleNotFoundError: No module named 'no_such_module_for_grid_tests'"
    ]
    proc = run_grid(["--disable-plugin", "broken", "list"], tmp_path)
    assert proc.returncode == 0 and "inverse_dynamics" in proc.stdout


# -- in-process: the same module through build_registry(extra_plugins=...) -------------------

@pytest.fixture(scope="module")
def plugin():
    spec = importlib.util.spec_from_file_location(
        "grid_example_thirdparty", PKG / "grid_example_thirdparty" / "__init__.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_registered_in_process(plugin):
    reg = build_registry(extra_plugins=[("example_thirdparty", plugin)])
    assert reg.origin["algorithm:total_mass"] == "example_thirdparty"
    assert reg.origin["loader:twolink"] == "example_thirdparty"
    assert type(reg.algorithms["total_mass"]).__qualname__ == "TotalMass"
    assert "inverse_dynamics" in reg.algorithms and "urdf" in reg.loaders
    assert reg.plugins["example_thirdparty"].distribution == "<extra>"


def test_total_mass_reference_matches_pinocchio(plugin, robot_cache):
    import pinocchio as pin

    from tests.pin_bridge import pin_model

    reg = build_registry(extra_plugins=[("example_thirdparty", plugin)])
    for name in ("iiwa14", "hyq", "g1"):
        robot = robot_cache(name)
        model = pin_model(robot)
        expected = pin.computeTotalMass(model) + model.inertias[0].mass  # bodies + world-fixed links
        ref = Reference(robot, registry=reg)
        q = robot.neutral()  # a zero quaternion is refused
        assert abs(ref.total_mass(q)[0] - expected) <= 1e-12 * expected, name
        assert ref.total_mass(np.stack([q, q, q])).shape == (3, 1)
    arm = reg.loaders["twolink"].load("arm", floating_base=False, strict_inertia=True)
    assert (arm.nq, arm.nv, [b.joint.name for b in arm.bodies]) == (2, 2, ["shoulder", "elbow"])
    assert Reference(arm, registry=reg).total_mass(np.zeros(2))[0] == pytest.approx(2.5, rel=1e-15)


# -- malformed plugins -------------------------------------------------------------------------

REVIEW = ParallelismReview(
    P1=not_applicable("test"), P2=not_applicable("test"), P3=not_applicable("test"), P4=not_applicable("test")
)


def algorithm(cls_name: str, **overrides) -> type:
    ns = dict(
        name="tp_algo",
        summary="a test algorithm",
        review=REVIEW,
        inputs=lambda self, robot: (Port("q", (robot.nq,)),),
        outputs=lambda self, robot: (Port("y", (1,)),),
        reference=lambda self, ctx, q: np.zeros(1),
    )
    ns.update(overrides)
    return type(cls_name, (Algorithm,), ns)


def plugin_module(name: str, **hooks) -> types.ModuleType:
    module = types.ModuleType(f"{name}_module")
    for hook, fn in hooks.items():
        setattr(module, hook, hookimpl(fn) if not hasattr(fn, "grid_impl") else fn)
    return module


def registers(*classes):
    return lambda: list(classes)


class NotALoader:
    name = "notaloader"


def _raises():
    raise RuntimeError("boom")


@hookimpl
def _wrong_argument(robot):
    return []


_wrong_argument.__name__ = "grid_register_algorithms"

MALFORMED = {
    "bad_noreview": (
        dict(grid_register_algorithms=registers(algorithm("NoReview", review=None))),
        r"^plugin 'bad_noreview' \(<extra> ?\), algorithm class [\w.]*NoReview: 'review' must be a "
        r"ParallelismReview",
    ),
    "bad_signature": (
        dict(grid_register_algorithms=_wrong_argument),
        r"^plugin 'bad_signature' \(<extra> ?\) is malformed: .*hook 'grid_register_algorithms'"
        r"(.|\n)*grid_register_algorithms\(robot\)(.|\n)*'robot'",
    ),
    "bad_hookname": (
        dict(grid_register_algoritms=registers(algorithm("Typo"))),
        r"^plugin 'bad_hookname' \(<extra> ?\) is malformed: unknown hook 'grid_register_algoritms'",
    ),
    "bad_duplicate": (
        dict(grid_register_algorithms=registers(algorithm("MyRNEA", name="inverse_dynamics"))),
        r"^plugin 'bad_duplicate' \(<extra> ?\): algorithm 'inverse_dynamics' \([\w.]*MyRNEA\) is already "
        r"registered by plugin 'inverse_dynamics' \(grid-rbd\)",
    ),
    "bad_duplicate_loader": (
        dict(grid_register_robot_loaders=registers(type("MyErd", (RobotLoader,), {"name": "erd"}))),
        r"^plugin 'bad_duplicate_loader' \(<extra> ?\): loader 'erd' \([\w.]*MyErd\) is already registered "
        r"by plugin 'erd' \(grid-rbd\)",
    ),
    "bad_depends": (
        dict(grid_register_algorithms=registers(
            algorithm("NeedsGhost", name="needs_ghost", depends_on=("ghost_algorithm",)))),
        r"^plugin 'bad_depends' \(<extra>\): algorithm 'needs_ghost' depends on 'ghost_algorithm', which "
        r"no plugin registers$",
    ),
    "bad_loader": (
        dict(grid_register_robot_loaders=registers(NotALoader)),
        r"^plugin 'bad_loader' \(<extra> ?\): grid_register_robot_loaders\(\) returned <class '[\w.]*NotALoader'>, "
        r"not a subclass of grid_core\.loader\.RobotLoader$",
    ),
    "bad_raises": (
        dict(grid_register_algorithms=_raises),
        r"^plugin 'bad_raises' \(<extra> ?\): grid_register_algorithms\(\) raised RuntimeError: boom$",
    ),
    "bad_return": (
        dict(grid_register_algorithms=lambda: algorithm("Bare")),
        r"^plugin 'bad_return' \(<extra> ?\): grid_register_algorithms\(\) must return a list of classes",
    ),
    "bad_name": (
        dict(grid_register_algorithms=registers(algorithm("Spaced", name="total mass"))),
        r"^plugin 'bad_name' .*Spaced: 'name' must be a Python identifier, got 'total mass'",
    ),
    "bad_unimplemented": (
        dict(grid_register_algorithms=registers(algorithm("NoMath", reference=Algorithm.reference))),
        r"^plugin 'bad_unimplemented' .*NoMath: 'reference' is not implemented",
    ),
    "bad_derivatives": (
        dict(grid_register_algorithms=registers(algorithm("NotARule", derivatives=("q",)))),
        r"^plugin 'bad_derivatives' .*NotARule: 'derivatives' must be a grid_core\.derivatives\.Rule or None",
    ),
    "bad_derivative_inputs": (
        dict(grid_register_algorithms=registers(algorithm(
            "QSecond", derivatives=Rule(("qd", "q"), (), lambda kernels, x, params, wanted: {})))),
        r"^plugin 'bad_derivative_inputs' .*QSecond: 'derivatives' inputs must be q first, each once, "
        r"got \('qd', 'q'\)",
    ),
    "urdf": (  # a name an installed plugin already has
        dict(grid_register_algorithms=registers(algorithm("Fine"))),
        r"^plugin 'urdf' is provided twice: by grid-rbd 0\.1\.0 and by <extra>",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_plugin_is_rejected_naming_it(name):
    hooks, pattern = MALFORMED[name]
    with pytest.raises(PluginError) as info:
        build_registry(extra_plugins=[(name, plugin_module(name, **hooks))])
    assert re.search(pattern, str(info.value)), str(info.value)


def test_each_malformed_plugin_is_accepted_once_blocked():
    extras = [(name, plugin_module(name, **hooks)) for name, (hooks, _) in MALFORMED.items()]
    reg = build_registry(blocked=list(MALFORMED), extra_plugins=extras)
    assert not set(MALFORMED) & set(reg.plugins)
    assert "urdf" not in reg.loaders  # blocking a name blocks the installed plugin of that name too
    assert "inverse_dynamics" in reg.algorithms


def test_the_well_formed_twin_registers():
    """The base of the malformed cases is itself valid (so each case fails for its own reason)."""
    reg = build_registry(extra_plugins=[("fine", plugin_module("fine", grid_register_algorithms=registers(
        algorithm("Fine"))))])
    assert reg.origin["algorithm:tp_algo"] == "fine"


def test_missing_dependency_mentions_blocking():
    needs = algorithm("NeedsId", name="needs_id", depends_on=("inverse_dynamics",))
    with pytest.raises(PluginError, match=r"depends on 'inverse_dynamics', which no plugin registers \(blocked\?\)"):
        build_registry(blocked=["inverse_dynamics"],
                       extra_plugins=[("needs", plugin_module("needs", grid_register_algorithms=registers(needs)))])
