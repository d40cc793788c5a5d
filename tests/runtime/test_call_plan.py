"""One call plan (grid_core.runtime.plan) judges a call's inputs, whatever carries them: on
CpuHandle, numpy arrays, PyTorch CPU tensors and JAX CPU arrays with the same bad input raise the
same one-line InputError (the Reference's text where it has one), and good inputs come back as
the kind that went in, read in place where the layout allows."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import grid_core
from conftest import load
from grid_core import Reference
from grid_core.errors import InputError
from grid_core.testing import assert_close, random_state

N = 4
ADAPTERS = {"numpy": np.asarray, "torch": torch.from_numpy, "jax": jnp.asarray}
HOST = "pass numpy arrays (or PyTorch tensors and JAX arrays on the CPU), or use RobotHandle for CUDA arrays"
QUATERNION = "not a unit quaternion: normalise it, or start from robot.neutral() or robot.random_configuration(rng)"
OUT = ("inverse_dynamics: out= for 'tau' must be a writable C-contiguous float64 array of shape (4, 18), of the "
       "inputs' kind")


class CudaArray:
    """An array in CUDA memory, as far as the plan can tell (``__cuda_array_interface__``)."""

    __cuda_array_interface__ = {"shape": (N, 19), "typestr": "<f8", "data": (1 << 40, False), "version": 3}


def _set(name, index, value):
    def edit(x):
        x[name] = x[name].copy()
        x[name][index] = value
    return edit


def _replace(name, make):
    def edit(x):
        x[name] = make(x[name])
    return edit


# a bad input: how it is made from good numpy inputs (q, qd, qdd), and the message of every adapter
BAD = {
    "complex dtype": (_replace("qd", lambda a: a.astype(np.complex128)),
                      "inverse_dynamics: argument 'qd' has dtype complex128, expected a real floating-point array "
                      "of shape (18,)"),
    "bool dtype": (_replace("qdd", lambda a: a > 0),
                   "inverse_dynamics: argument 'qdd' has dtype bool, expected a real floating-point array of "
                   "shape (18,)"),
    "on a CUDA device": (_replace("q", lambda a: CudaArray()),
                         f"inverse_dynamics: argument 'q' is on a CUDA device and CpuHandle runs on the host; {HOST}"),
    "NaN": (_set("qd", (1, 2), np.nan), "inverse_dynamics: argument 'qd' contains NaN or inf"),
    "inf": (_set("qdd", (3, 17), -np.inf), "inverse_dynamics: argument 'qdd' contains NaN or inf"),
    "zero quaternion": (_set("q", (1, slice(3, 7)), 0.0),
                        "inverse_dynamics: argument 'q' holds a free-flyer quaternion q[1, 3:7] (x y z w) of norm 0 "
                        f"(1 of 4 states), {QUATERNION}"),
    "long quaternion": (_set("q", (2, 6), 3.0),
                        "inverse_dynamics: argument 'q' holds a free-flyer quaternion q[2, 3:7] (x y z w) of norm "
                        f"{{norm}} (1 of 4 states), {QUATERNION}"),
    "batch mismatch": (_replace("qd", lambda a: a[:3]),
                       "inverse_dynamics: argument 'qd' has batch size 3 but 'q' has 4"),
    "trailing shape": (_replace("qdd", lambda a: a[:, :-1]),
                       "inverse_dynamics: argument 'qdd' has shape (4, 17), expected (18,) or (N, 18)"),
    "extra axis": (_replace("q", lambda a: a[None]),
                   "inverse_dynamics: argument 'q' has shape (1, 4, 19), expected (19,) or (N, 19)"),
    "f_ext shape": (lambda x: x.update(f_ext=np.zeros((N, 13, 5))),
                    "inverse_dynamics: argument 'f_ext' has shape (4, 13, 5), expected (13, 6) or (N, 13, 6)"),
    "missing": (lambda x: x.pop("qdd"), "inverse_dynamics: argument 'qdd' is required, expected shape (18,)"),
}
# out= (written in place): numpy and PyTorch; JAX arrays are immutable (test_jax_takes_no_out below)
BAD_OUT = {
    "non-contiguous out=": lambda like: like(np.zeros((N, 36)))[:, ::2],
    "float32 out=": lambda like: like(np.zeros((N, 18), np.float32)),
    "out= of another shape": lambda like: like(np.zeros((N, 17))),
}


@pytest.fixture(scope="module")
def go2():
    return load("go2")


@pytest.fixture(scope="module")
def cpu(go2):
    handle = grid_core.CpuHandle(go2, ["inverse_dynamics"], quiet=True)
    handle.set_poison(True)  # outputs start as NaN: an element the kernel never writes fails
    return handle


pytestmark = pytest.mark.usefixtures("x64")  # JAX's 64-bit mode, a float64 handle needs it


def good(robot, rng) -> dict:
    return dict(zip(("q", "qd", "qdd"), random_state(robot, rng, N)))


def carried(x: dict, adapter: str) -> dict:
    """The inputs as ``adapter``'s arrays (a CUDA stand-in stays itself)."""
    return {k: v if isinstance(v, CudaArray) else ADAPTERS[adapter](v) for k, v in x.items()}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_a_bad_input_is_one_message_on_every_adapter(cpu, go2, rng, adapter, case):
    edit, message = BAD[case]
    x = good(go2, rng)
    edit(x)
    if "{norm}" in message:
        message = message.format(norm=f"{np.linalg.norm(x['q'][2, 3:7]):.6g}")
    x = carried(x, adapter)
    positional = [x[k] for k in ("q", "qd", "qdd", "f_ext") if k in x]
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):  # positionally: a lean path first
        cpu.inverse_dynamics(*positional)
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):  # by keyword: the checked path
        cpu.inverse_dynamics(**x)


@pytest.mark.parametrize("case", list(BAD_OUT))
@pytest.mark.parametrize("adapter", ["numpy", "torch"])
def test_a_bad_out_is_one_message_on_every_adapter(cpu, go2, rng, adapter, case):
    x = carried(good(go2, rng), adapter)
    out = BAD_OUT[case](ADAPTERS[adapter])
    with pytest.raises(InputError, match=f"^{re.escape(OUT)}$"):
        cpu.inverse_dynamics(*x.values(), out=out)
    assert not np.any(np.asarray(out))  # left as it was


def test_a_gravity_that_is_not_finite_is_one_message(cpu, go2, rng):
    for adapter in ADAPTERS:
        x = carried(good(go2, rng), adapter)
        with pytest.raises(InputError, match=r"^inverse_dynamics: argument 'gravity' must be finite with shape "
                                             r"\(3,\)$"):
            cpu.inverse_dynamics(**x, gravity=[0.0, np.nan, -9.81])


def test_one_state_of_a_zero_quaternion_is_one_message(cpu, go2):
    q = go2.neutral()
    q[3:7] = 0.0
    message = f"inverse_dynamics: argument 'q' holds a free-flyer quaternion q[3:7] (x y z w) of norm 0, {QUATERNION}"
    for adapter, like in ADAPTERS.items():
        with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
            cpu.inverse_dynamics(like(q), like(np.zeros(18)), like(np.zeros(18)))
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        Reference(go2).inverse_dynamics(q, np.zeros(18), np.zeros(18))


def test_a_tensor_on_another_device_is_named(cpu, go2, rng):
    x = carried(good(go2, rng), "torch")
    x["qd"] = x["qd"].to("meta")
    with pytest.raises(InputError, match=r"^inverse_dynamics: argument 'qd' is on device meta, where CpuHandle "
                                         r"cannot run; pass arrays in host memory$"):
        cpu.inverse_dynamics(*x.values())


def test_jax_takes_no_out(cpu, go2, rng):
    x = carried(good(go2, rng), "jax")
    with pytest.raises(InputError, match=r"^inverse_dynamics: JAX arrays are immutable; out= is not taken with JAX "
                                         r"inputs$"):
        cpu.inverse_dynamics(*x.values(), out=np.zeros((N, 18)))


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_the_kind_that_goes_in_comes_out(cpu, go2, rng, adapter, general_calls):
    """Positional arrays of the handle's dtype take the lean path (read in place); anything else
    (keywords, another dtype, a strided view, a single state among a batch) the checked path:
    the same answer, the same kind of array."""
    x = good(go2, rng)
    f_ext = rng.normal(size=(N, 13, 6))
    ref = Reference(go2)
    expected = ref.inverse_dynamics(**x)
    kind = {"numpy": np.ndarray, "torch": torch.Tensor, "jax": jax.Array}[adapter]
    like = ADAPTERS[adapter]
    args = [like(v) for v in x.values()]
    calls = general_calls(cpu)
    for out, want in ((cpu.inverse_dynamics(*args), expected),
                      (cpu.inverse_dynamics(*[a[1] for a in args]), expected[1]),  # one state
                      (cpu.inverse_dynamics(*args, like(f_ext)), ref.inverse_dynamics(**x, f_ext=f_ext))):
        assert isinstance(out, kind) and out.shape == want.shape
        assert_close(np.asarray(out), want, 1e-9)
    assert calls == [], "a lean path declined arrays that fit"
    wide = np.zeros((N, 2 * go2.nv))
    wide[:, ::2] = x["qd"]
    checked = {
        "keywords": (dict(zip(("q", "qd", "qdd"), args)), expected),
        "float32": (dict(q=args[0], qd=like(x["qd"].astype(np.float32)), qdd=args[2]),
                    ref.inverse_dynamics(x["q"], x["qd"].astype(np.float32), x["qdd"])),
        "strided": (dict(q=args[0], qd=like(wide)[:, ::2], qdd=args[2]), expected),
        "one qdd for all": (dict(q=args[0], qd=args[1], qdd=args[2][0]),
                            ref.inverse_dynamics(x["q"], x["qd"], x["qdd"][0])),
        "gravity": (dict(q=args[0], qd=args[1], qdd=args[2], gravity=(0.5, -1.0, -3.0)),
                    ref.inverse_dynamics(**x, gravity=np.array([0.5, -1.0, -3.0]))),
    }
    for what, (kwargs, want) in checked.items():
        out = cpu.inverse_dynamics(**kwargs)
        assert isinstance(out, kind), what
        assert_close(np.asarray(out), want, 1e-9, what)


@pytest.mark.parametrize("adapter", ["numpy", "torch"])
def test_out_is_written_in_place(cpu, go2, rng, adapter, general_calls):
    x = good(go2, rng)
    expected = Reference(go2).inverse_dynamics(**x)
    like = ADAPTERS[adapter]
    args = [like(v) for v in x.values()]
    calls = general_calls(cpu)
    out = like(np.full((N, go2.nv), np.nan))
    address = out.ctypes.data if adapter == "numpy" else out.data_ptr()
    assert cpu.inverse_dynamics(*args, out=out) is out  # the lean path
    assert calls == []
    assert cpu.inverse_dynamics(q=args[0], qd=args[1], qdd=args[2], out=out) is out  # the checked path
    assert calls == [1]
    assert (out.ctypes.data if adapter == "numpy" else out.data_ptr()) == address
    assert_close(np.asarray(out), expected, 1e-9)


def test_torch_tensors_are_read_in_place(cpu, go2, rng, monkeypatch):
    """The checked path views tensors in host memory as numpy arrays, without a copy where they
    are C-contiguous and of the handle's dtype (the library reads the tensor's own memory)."""
    from grid_core.runtime import adapters

    x = good(go2, rng)
    tensors = [torch.from_numpy(v) for v in x.values()]
    seen = []
    real = adapters.run_host

    def spy(backend, plan, views, batch, params, outs):
        seen.extend(v.ctypes.data for v in views if v is not None)
        return real(backend, plan, views, batch, params, outs)

    monkeypatch.setattr(adapters, "run_host", spy)
    out = cpu.inverse_dynamics(q=tensors[0], qd=tensors[1], qdd=tensors[2])
    assert seen == [t.data_ptr() for t in tensors]
    assert_close(out.numpy(), Reference(go2).inverse_dynamics(**x), 1e-9)


@pytest.mark.parametrize("case", ["NaN", "zero quaternion", "trailing shape", "extra axis", "bool dtype"])
@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_the_same_messages_without_the_c_form(cpu, go2, rng, adapter, case):
    """Where the C form of the call path cannot be built, its Python form declines the same
    calls and the plan's checks say the same."""
    run = cpu.with_launch()
    run._plan(grid_core.registry().algorithm("inverse_dynamics")).fastcall = None
    edit, message = BAD[case]
    x = good(go2, rng)
    edit(x)
    x = carried(x, adapter)
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        run.inverse_dynamics(*x.values())
    y = carried(good(go2, rng), adapter)
    assert_close(np.asarray(run.inverse_dynamics(*y.values())),
                 Reference(go2).inverse_dynamics(*(np.asarray(v) for v in y.values())), 1e-9)


def test_the_runtime_modules_import_one_way():
    """No circle among the runtime's modules, counting the imports inside functions: backend ->
    plan -> adapters, jax_ffi -> adapters."""
    import ast
    from pathlib import Path

    from grid_core import runtime

    folder = Path(runtime.__file__).parent
    names = {p.stem for p in folder.glob("*.py")}
    graph = {}
    for name in names:
        tree = ast.parse((folder / f"{name}.py").read_text())
        graph[name] = {
            target for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1
            for target in ([node.module] if node.module else [a.name for a in node.names]) if target in names
        } - {name}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph[start])

    circles = sorted(name for name in graph if reaches(name, name))
    assert circles == [], f"modules on an import circle: {circles}"
    assert {"plan", "settings"} <= graph["backend"] and "backend" not in graph["jax_ffi"] | graph["plan"]


@pytest.mark.parametrize("adapter", list(ADAPTERS))
def test_a_param_without_a_default_given_positionally_takes_the_lean_path(go2, rng, adapter, general_calls):
    """The integrator's dt (no default) given positionally after the states: the lean path, on a
    view of the plan at that value (one per value, kept), the Reference's answer and the kind that
    went in; dt by keyword, or not finite (named as ever), the checked path."""
    from tests.generated import gradient_handle

    h = gradient_handle("go2")  # (the tests' shared handle of go2, the integrator among its calls)
    x = dict(zip(("q", "qd", "tau"), random_state(go2, rng, N)))
    like, ref = ADAPTERS[adapter], Reference(go2)
    kind = {"numpy": np.ndarray, "torch": torch.Tensor, "jax": jax.Array}[adapter]
    args = [like(v) for v in x.values()]
    calls = general_calls(h)
    for dt in (0.01, 0.02, 0.01):
        for out, want in zip(h.integrator(*args, dt), ref.integrator(**x, dt=dt), strict=True):
            assert isinstance(out, kind)
            assert_close(np.asarray(out), want, 1e-9)
    assert calls == [], "the lean path declined a positional dt"
    plan = h._plan(grid_core.registry().algorithm("integrator"))
    assert not plan.ok and set(plan._bound) == {(0.01,), (0.02,)}
    for out, want in zip(h.integrator(*args, dt=0.02), ref.integrator(**x, dt=0.02), strict=True):
        assert_close(np.asarray(out), want, 1e-9)
    assert calls == [1]
    with pytest.raises(InputError, match="^integrator: argument 'dt' must be finite with shape \\(\\)$"):
        h.integrator(*args, float("nan"))
