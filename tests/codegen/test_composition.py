"""The pattern every GPU algorithm follows (grid_core.emit.layers), checked on what is emitted:

* no emitter under grid_algorithms/ or examples/ hand-writes an offset, a padding or another
  algorithm's call (the generator and the composer's handle own those);
* the example plugin composes inverse dynamics by handle: its kernel loads XImats once per
  state (in its device layer) and its inner calls inverse_dynamics' inner, the call node made
  from the very signature that emits inverse_dynamics;
* a call is checked against its callee's signature at generation time.
"""

from __future__ import annotations

import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

from conftest import load
from grid_core.composer import Composer, GenerateOptions, generate
from grid_core.emit import nodes as n
from grid_core.emit.signature import Call, Param, Signature, TemplateParam
from grid_core.errors import CodegenError
from grid_core.hooks import build_registry, registry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin_gravity_compensation" / "grid_example_gravity" / "gravity_compensation.py"
HAND_WRITTEN = [
    (re.compile(r"\b[sd]_\w+\s*\+\s*\d+\b"), "a hand-computed offset (s_arena + 8)"),
    (re.compile(r"\d+\s*\*\s*NUM_(BODIES|VEL|POS|JOINTS)\b"), "an offset in robot sizes (6 * NUM_BODIES)"),
    (re.compile(r"-\(-.*//\s*\d+\)\s*\*\s*\d+"), "hand padding arithmetic"),
]


def _strings(source: str) -> list[tuple[int, str]]:
    """The string literals of a Python source (what an emitter prints), with their lines."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.STRING:
            out.append((tok.start[0], tok.string))
    return out


def _defects(path: Path, own: set[str], others: set[str]) -> list[str]:
    source = path.read_text()
    found = []
    for line, text in _strings(source):
        for pattern, what in HAND_WRITTEN:
            if pattern.search(text):
                found.append(f"{path.name}:{line}: {what}: {text[:80]}")
        for m in re.finditer(r"\b(\w+?)_(inner|state|device|kernel|launch)\s*[<(]", text):
            if m.group(1) in others - own:
                found.append(f"{path.name}:{line}: a hand-typed call of {m.group(0)}: {text[:80]}")
    # f-strings: the pieces outside the braces are in the literal already; a Python-side
    # padding formula is code, not a string
    for lineno, line in enumerate(source.splitlines(), 1):
        if re.search(r"-\(-.*//\s*\d+\)\s*\*\s*\d+", line):
            found.append(f"{path.name}:{lineno}: hand padding arithmetic: {line.strip()[:80]}")
    return found


def _emitter_modules():
    algs = registry().algorithms
    paths = sorted((ROOT / "grid_algorithms").glob("*.py")) + sorted((ROOT / "examples").rglob("*.py"))
    return [p for p in paths if "tests" not in p.parts], set(algs) | {"gravity_compensation"}


def test_no_emitter_hand_writes_offsets_or_other_algorithms_calls():
    paths, names = _emitter_modules()
    defects = []
    for path in paths:
        own = {path.stem}
        defects += _defects(path, own, names)
    assert not defects, "\n".join(defects)


def test_the_scan_finds_what_the_first_emitter_did(tmp_path):
    """The retired patterns (the first emitter's, and the example's copy of it) are caught."""
    bad = tmp_path / "gravity_compensation.py"
    bad.write_text(
        'A = "T *s_q = s_arena + 8"\n'
        'B = "T *s_a = s_vaf + 6 * NUM_BODIES"\n'
        'off = -(-r.elements // 4) * 4\n'
        'C = "inverse_dynamics_inner<T, VAF_IN_SMEM>(s_tau, s_q, s_zero, s_zero, nullptr, s_XI, s_vaf, d_vaf, g)"\n')
    found = _defects(bad, {"gravity_compensation"}, {"inverse_dynamics", "gravity_compensation"})
    assert {f.split(":")[1] for f in found} == {"1", "2", "3", "4"}, found


def _example_registry():
    spec = importlib.util.spec_from_file_location("grid_example_gravity_under_test", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return build_registry(extra_plugins=[("gravity_compensation_under_test", module)])


def _function(text: str, name: str) -> str:
    start = re.search(rf"\n__\w+__ [^\n]*\b{name}\(", text).start()
    return text[start:text.index("\n}\n", start)]


@pytest.mark.parametrize("robot", ["iiwa14", "go2"])
def test_example_loads_ximats_once_and_calls_the_inner_by_handle(robot):
    reg = _example_registry()
    r = load(robot)
    text = generate(r, ["gravity_compensation"], registry=reg)
    device = _function(text, "gravity_compensation_device")
    inner = _function(text, "gravity_compensation_inner")
    kernel = _function(text, "gravity_compensation_kernel")
    # once per state: the kernel calls the device layer once per state, which loads once
    assert device.count("load_update_XImats<T>(") == 1
    assert "load_update_XImats" not in inner and "load_update_XImats" not in kernel
    assert kernel.count("gravity_compensation_device<T,") == 3  # one per tier
    assert "inverse_dynamics_inner<T, VAF_IN_SMEM>(s_tau_g, s_q, s_zero, s_zero, nullptr, s_XI, s_vaf, d_vaf, " \
           "gravity);" in inner
    assert "inverse_dynamics_state<T, false, false>(tau_g, q, zero, nullptr, nullptr, gravity);" in text
    # the call node's callee is the signature inverse_dynamics is emitted from (the handle)
    composer = Composer(r, GenerateOptions(), reg)
    mine, rnea = composer.layers("gravity_compensation"), composer.layers("inverse_dynamics")
    inner_fn = next(x for x in mine.emit() if isinstance(x, n.Function) and x.signature is mine.inner)
    calls = [x for x in inner_fn.body if isinstance(x, Call)]
    assert [c.callee for c in calls] == [rnea.inner]
    assert rnea.inner is composer.layers("inverse_dynamics").inner
    # the composed band is the callee's region, planned into the orchestrator's arena
    assert {r.name for r in mine.scratch_regions} == {"zero", "vaf"}


def test_calls_are_checked_against_the_signature():
    sig = Signature("f_inner", [Param("T *", "s_x"), Param("const T *", "s_y"), Param("T *", "s_temp", "nullptr")],
                    template=[TemplateParam("typename", "T"), TemplateParam("bool", "X_IN_SMEM", "true")])
    assert sig.call({"s_x": "a", "s_y": "b"}, {"T": "T"}).expr() == "f_inner<T>(a, b)"
    with pytest.raises(CodegenError, match="missing argument 's_y'"):
        sig.call({"s_x": "a"})
    with pytest.raises(CodegenError, match="no parameter 's_z'"):
        sig.call({"s_x": "a", "s_y": "b", "s_z": "c"})
    with pytest.raises(CodegenError, match="no template parameter"):
        sig.call({"s_x": "a", "s_y": "b"}, {"T": "T", "Y_IN_SMEM": "true"})


@pytest.mark.parametrize("robot", ["iiwa14", "go2", "erd:panda"])
def test_forward_dynamics_loads_ximats_once_and_calls_minv_and_rnea_by_handle(robot):
    """The orchestrator's contract: one XImats load per state (its device layer), then the
    inners of inverse_dynamics and minv called through their handles, not copies of them (the
    method forced to Minv (tau - bias): the tuning file may bake ABA for a robot, tested below)."""
    r = load(robot)
    by_minv = {"forward_dynamics": {"method": "minv"}}
    text = generate(r, ["forward_dynamics"], algorithm_options=by_minv)
    device = _function(text, "forward_dynamics_device")
    inner = _function(text, "forward_dynamics_inner")
    kernel = _function(text, "forward_dynamics_kernel")
    assert device.count("load_update_XImats<T>(") == 1
    assert "load_update_XImats" not in inner and "load_update_XImats" not in kernel
    assert kernel.count("forward_dynamics_device<T,") == 3  # one per tier
    composer = Composer(r, GenerateOptions(algorithm_options=by_minv))
    mine = composer.layers("forward_dynamics")
    rnea, minv = composer.layers("inverse_dynamics"), composer.layers("minv")
    inner_fn = next(x for x in mine.emit() if isinstance(x, n.Function) and x.signature is mine.inner)
    assert [c.callee for c in inner_fn.body if isinstance(c, Call)] == [rnea.inner, minv.inner]
    state_fn = next(x for x in mine.emit() if isinstance(x, n.Function) and x.signature is mine.state)
    assert [c.callee for c in state_fn.body if isinstance(c, Call)] == [rnea.state, minv.state]
    # each callee's inner is in the header once (its own definition), called from the orchestrator
    for callee in ("inverse_dynamics_inner", "minv_inner"):
        assert len(re.findall(rf"\n__device__ [^\n]*\b{callee}\(", text)) == 1
        assert f"{callee}<T" in inner
    # the callees' scratch is planned into the orchestrator's arena, next to its own
    names = {x.name for x in mine.scratch_regions}
    assert {"bias", "zero", "Minv"} <= names
    assert {x.name for x in rnea.scratch_regions} | {x.name for x in minv.scratch_regions} <= names


@pytest.mark.parametrize("robot", ["iiwa14", "g1"])
def test_forward_dynamics_by_aba_calls_aba_by_handle(robot):
    """With ABA (forced here; the tuning file bakes it for these robots on the H200) the
    orchestrator still loads XImats once and calls aba's inner and per-state step through their
    handles."""
    r = load(robot)
    by_aba = {"forward_dynamics": {"method": "aba"}}
    text = generate(r, ["forward_dynamics"], algorithm_options=by_aba)
    assert _function(text, "forward_dynamics_device").count("load_update_XImats<T>(") == 1
    composer = Composer(r, GenerateOptions(algorithm_options=by_aba))
    mine, aba = composer.layers("forward_dynamics"), composer.layers("aba")
    inner_fn = next(x for x in mine.emit() if isinstance(x, n.Function) and x.signature is mine.inner)
    assert [c.callee for c in inner_fn.body if isinstance(c, Call)] == [aba.inner]
    state_fn = next(x for x in mine.emit() if isinstance(x, n.Function) and x.signature is mine.state)
    assert [c.callee for c in state_fn.body if isinstance(c, Call)] == [aba.state]
    assert len(re.findall(r"\n__device__ [^\n]*\baba_inner\(", text)) == 1


@pytest.mark.parametrize(("reuses", "message"), [
    ({"inv_M": ("aba", "Minv")}, "reuses 'inv_M' from 'aba', not declared in Emitter.composes"),
    ({"nothing": ("forward_dynamics", "Minv")}, "reused field 'nothing' is not an arena region of its own"),
    ({"qdd": ("forward_dynamics", "Minv")}, "reused field 'qdd' has no field 'Minv' of 12 scalars"),
])
def test_a_reuse_the_plan_cannot_hold_is_refused(monkeypatch, reuses, message):
    """Emitter.reuses binds a field to what a composed inner leaves (forward_dynamics_gradient's
    inv_M to forward dynamics' Minv, tested with the algorithm); a callee it does not compose, a
    field that is no region of its own, or one of another size fails at generation time."""
    from grid_algorithms.forward_dynamics_gradient import ForwardDynamicsGradientEmitter

    monkeypatch.setattr(ForwardDynamicsGradientEmitter, "reuses", reuses)
    by_minv = {"forward_dynamics": {"method": "minv"}}
    with pytest.raises(CodegenError, match=re.escape(message)):
        generate(load("hyq"), ["forward_dynamics_gradient"], algorithm_options=by_minv)


def _fixing_registry(method: str, callers=("toy_fd_a",)):
    """A registry with toy orchestrators that compose forward dynamics with ``method`` fixed
    (Emitter.compose_options), whatever the header's forward dynamics runs."""
    import types

    from grid_core import Algorithm, Port, hookimpl
    from grid_core.algorithm import dynamics_inputs
    from grid_core.arena import callee_rung, spill_ladder
    from grid_core.emit.emitter import Emitter
    from grid_core.emit.storage import regions
    from grid_core.review import ParallelismReview, not_applicable

    toy = not_applicable("a test's toy: its callee's review holds")

    def make(name):
        class ToyEmitter(Emitter):
            global_inputs = nullable_inputs = ("f_ext",)
            composes = ("forward_dynamics",)
            compose_options = {"forward_dynamics": {"method": method}}

            def inner_body(self, layers):
                return [layers.call_inner(layers.compose("forward_dynamics"), s_qdd="s_qdd", s_q="s_q",
                                          s_qd="s_qd", s_tau="s_tau", f_ext="f_ext")]

        class Toy(Algorithm):
            locals()["name"] = name
            summary = "qdd by forward dynamics, its method fixed by the caller"
            depends_on = ("forward_dynamics",)
            emitter = ToyEmitter
            review = ParallelismReview(P1=toy, P2=toy, P3=toy, P4=toy)

            def inputs(self, robot):
                return dynamics_inputs(robot, "tau")

            def outputs(self, robot, **options):
                return (Port("qdd", (robot.nv,), "joint accelerations"),)

            def reference(self, ctx, q, qd, tau, f_ext=None):
                return ctx.forward_dynamics(q, qd, tau, f_ext)

            def arenas(self, robot, options=None):
                return regions(())

            def spill_rungs(self, robot, options=None):
                return spill_ladder(("the callee's first spill", {callee_rung("forward_dynamics", 1)}, "its rung 1"))

        return Toy

    toys = [make(c) for c in callers]
    plugin = types.SimpleNamespace(grid_register_algorithms=hookimpl(lambda: toys))
    return build_registry(extra_plugins=[("toy_fixing_under_test", plugin)])


@pytest.mark.parametrize("robot", ["hyq", "erd:panda"])
def test_options_a_caller_fixes_on_an_inner_make_one_variant(robot):
    """Emitter.compose_options: two callers fix ABA on forward dynamics where the header's runs
    Minv (hyq's tuning, panda's default): the composer builds one variant, forward_dynamics_aba,
    which both call by handle; it is emitted once, right after forward dynamics' own layers (its
    callees are in the header by then), as its sizing constants, inner and per-state function, no
    kernel or launcher; and it compiles (host C++, the emulation's build)."""
    import shutil
    import subprocess

    reg = _fixing_registry("aba", ("toy_fd_a", "toy_fd_b"))
    r = load(robot)
    composer = Composer(r, GenerateOptions(), reg)
    plain = composer.layers("forward_dynamics")
    assert plain.ctx.algorithm_options.method == "minv"
    a, b = composer.layers("toy_fd_a"), composer.layers("toy_fd_b")
    variant = a.compose("forward_dynamics")
    assert variant is b.compose("forward_dynamics") and variant is not plain
    assert (variant.name, variant.pfx, variant.fixed_options) == ("forward_dynamics_aba", "FORWARD_DYNAMICS_ABA",
                                                                 {"method": "aba"})
    assert variant.ctx.algorithm_options.method == "aba" and variant.callers == ["toy_fd_a", "toy_fd_b"]
    assert composer.variants("forward_dynamics") == [variant]
    assert composer.layers("aba") is variant.compose("aba")  # its own callees are the header's
    inner_fn = next(x for x in a.emit() if isinstance(x, n.Function) and x.signature is a.inner)
    assert [c.callee for c in inner_fn.body if isinstance(c, Call)] == [variant.inner]
    text = generate(r, ["toy_fd_a", "toy_fd_b"], registry=reg)
    assert len(re.findall(r"\n__device__ [^\n]*\bforward_dynamics_aba_inner\(", text)) == 1
    assert len(re.findall(r"\bforward_dynamics_aba_state\(", text)) == 1
    assert not re.search(r"forward_dynamics_aba_(kernel|launch|device|per_state)", text)
    assert "// ---- forward_dynamics_aba: forward_dynamics with method = aba, as toy_fd_a, toy_fd_b composes" in text
    assert text.index(" forward_dynamics_kernel(") < text.index("---- forward_dynamics_aba") \
        < text.index("---- toy_fd_a")
    assert "forward_dynamics_aba_inner<T" in _function(text, "toy_fd_a_inner")
    cxx = shutil.which("g++") or shutil.which("c++")
    probe = f"#define GRID_HOST_EMULATION\n{text}\n" \
            "template cudaError_t grid::toy_fd_a_launch<double>(double *, const double *, const double *, " \
            "const double *, const double *, const double *, int, grid::LaunchConfig, double *, size_t, " \
            "cudaStream_t);\n"
    done = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-x", "c++", "-"], input=probe, text=True,
                          capture_output=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_options_that_resolve_to_the_headers_share_its_layers():
    """A caller fixing the method the header's forward dynamics runs anyway gets those layers: no
    variant, nothing emitted twice."""
    reg = _fixing_registry("minv")
    composer = Composer(load("hyq"), GenerateOptions(), reg)
    assert composer.layers("toy_fd_a").compose("forward_dynamics") is composer.layers("forward_dynamics")
    assert composer.variants("forward_dynamics") == []
    text = generate(load("hyq"), ["toy_fd_a"], registry=reg)
    assert "forward_dynamics_minv" not in text and "forward_dynamics_inner<T" in _function(text, "toy_fd_a_inner")


def test_fixing_the_options_of_an_inner_it_does_not_compose_is_refused():
    from grid_core.emit.emitter import Emitter
    from grid_core.errors import PluginError

    class Stray(Emitter):
        composes = ("minv",)
        compose_options = {"forward_dynamics": {"method": "aba"}}

        def inner_body(self, layers):
            return []

    class Alg:
        depends_on = ("minv",)

        def arenas(self):
            return ()

        def spill_rungs(self):
            return ()

    with pytest.raises(PluginError, match=r"fixes the options of \['forward_dynamics'\], which it does not compose"):
        Stray.validate(Alg, "toy")
