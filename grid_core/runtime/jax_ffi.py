"""JAX arrays in, JAX arrays out, through an XLA FFI custom call.

Every algorithm of a handle is one ``jax.ffi.ffi_call`` of the target :data:`TARGET`,
whose handler (``jax_ffi.cc``) calls the library's packed device entry on XLA's stream
with XLA's buffers: no copy, no synchronisation, and the call composes with the rest of a
JAX program.  It works eagerly and under ``jax.jit`` and ``jax.vmap`` (a vmapped call is
one larger batch).  Params (``gravity``, ``dt``) are attributes of the call, so under
``jax.jit`` they must be concrete values, not traced ones.  The differentiable algorithms
carry derivative rules (:mod:`.jax_rules`: ``jax.grad``, ``jax.jacfwd``, ``jax.jacrev``, and
second derivatives of inverse dynamics); ``jax.grad`` through another raises JAX's own error.

The call plan (:mod:`.plan`) judges JAX arrays as it judges the others, through
:data:`JAX`: eagerly before the call, and when JAX traces it (shapes and dtypes, under
``jax.jit`` too).  Values are checked on a backend that runs on the host, for arrays that hold
them (not tracers): NaN and inf, and a free-flyer quaternion of q not of unit norm.

The handler library is robot-independent: built once per jaxlib version with the host C++
compiler against the headers jaxlib ships (``jax.ffi.include_dir()``) and cached by
content (:mod:`grid_core.buildcache`).  On XLA:CPU the same call runs an
:class:`~grid_core.testing.Emulated` or :class:`~grid_core.CpuHandle` library (how CI tests this path
without a GPU).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from pathlib import Path

import numpy as np

from .. import buildcache
from ..errors import BuildError, InputError
from . import jax_rules
from .adapters import DECLINED, HostArrays

TARGET = "grid_rbd_call"
_lock = threading.Lock()
_state: dict = {}


def is_jax(x) -> bool:
    """A JAX array or a JAX tracer (inside ``jax.jit``/``jax.vmap``), without importing JAX."""
    return type(x).__module__.split(".", 1)[0] in ("jax", "jaxlib")


def _build() -> Path:
    import jax
    import jaxlib

    include = Path(jax.ffi.include_dir())
    if not (include / "xla" / "ffi" / "api" / "ffi.h").is_file():
        raise BuildError(f"jaxlib {jaxlib.__version__} ships no XLA FFI headers under {include}")
    source = Path(__file__).with_name("jax_ffi.cc").read_text()
    cmd = [*buildcache.host_compiler(), "-std=c++17", "-O2", "-fPIC", "-shared", f"-I{include}", "-o", "{out}",
           "jax_ffi.cc", "-ldl"]
    path, _ = buildcache.build("jax-ffi", {"jax_ffi.cc": source}, cmd, "libgrid_jax_ffi.so",
                               extra={"jaxlib": jaxlib.__version__})
    return path


def register() -> None:
    """Build the handler library (once per jaxlib version) and register :data:`TARGET` with
    XLA for the GPU and the CPU (once per process)."""
    if "lib" in _state:
        return
    with _lock:
        if "lib" in _state:
            return
        import jax

        try:
            lib = ctypes.CDLL(str(_build()))
        except BuildError as exc:
            raise BuildError(f"the JAX call path needs its XLA FFI handler, which did not build: {exc}") from None
        # (a CPU-only jaxlib takes the CUDA registration too, keeping it for a plugin it lacks)
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.grid_ffi_call_host), platform="cpu")
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.grid_ffi_call_cuda), platform="CUDA")
        lib.grid_ffi_record.restype = ctypes.c_int64
        lib.grid_ffi_record.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
        _state["lib"] = lib


@contextlib.contextmanager
def recorded_host_calls():
    """Record the calls XLA:CPU makes of the handler, in this process, while the block runs:
    yields a list that holds, after the block, ``(device id, batch size)`` per call, in the
    order they ran (which device ran which shard of a sharded batch; tests)."""
    register()
    lib, calls = _state["lib"], []
    lib.grid_ffi_record(1, None, 0)
    try:
        yield calls
    finally:
        n = lib.grid_ffi_record(0, None, 0)
        out = (ctypes.c_int64 * (2 * n))()
        lib.grid_ffi_record(-1, out, n)
        calls += [(int(out[2 * k]), int(out[2 * k + 1])) for k in range(n)]


def shard_batch(fn, mesh, axis: str):
    """``fn`` (a handle's method, or any function of batched arrays) on arrays whose batch
    axis is sharded over ``mesh``'s axis ``axis``: each device calls ``fn`` on its own shard
    (``jax.shard_map``), no gather; the output sharded the same way.  Under ``jax.jit``,
    ``jax.grad`` and the rest as ``fn`` itself; every argument carries the batch axis."""
    import jax
    from jax.sharding import PartitionSpec

    specs = {"mesh": mesh, "in_specs": PartitionSpec(axis), "out_specs": PartitionSpec(axis)}
    # the check off: the FFI call has no replication rule; every operand is split on one axis
    if hasattr(jax, "shard_map"):
        return jax.shard_map(fn, check_vma=False, **specs)
    from jax.experimental.shard_map import shard_map  # JAX before 0.7

    return shard_map(fn, check_rep=False, **specs)


def _param_values(plan, params) -> tuple[float, ...]:
    """Every param's float64 values (checked by the plan; None: its default), concatenated: the
    call's attribute."""
    values = []
    for p, v in zip(plan.params, params):
        values += np.asarray(p.default if v is None else v, dtype=np.float64).ravel().tolist()
    return tuple(values)


def _function(backend, plan, present: tuple[bool, ...], params: tuple[float, ...], raw: bool = False):
    """The jitted call of one algorithm for one set of present inputs, params and launch
    settings, cached on the backend.  Its arguments are judged by the plan while JAX traces
    it, which happens once per shape and dtype signature: a later call with the same signature
    costs only JAX's own dispatch.  The FFI call carries the algorithm's derivative rule
    (:mod:`.jax_rules`), none when ``raw``."""
    key = (plan.name, present, params, backend._launch_of(plan.name), raw)
    cache = backend.__dict__.setdefault("_jax_functions", {})
    fn = cache.get(key)
    if fn is not None:
        return fn
    import jax
    import jax.numpy as jnp

    index, k = [], 0
    for here in present:
        index.append(k if here else -1)
        k += here
    dtype = backend.dtype
    attrs = dict(
        library=str(backend._library_file()),
        symbol=f"grid_abi_{plan.name}_{backend._suffix()}_packed",
        itemsize=int(dtype.itemsize),
        inputs=np.array(index, dtype=np.int64),
        input_sizes=np.array([math.prod(s) for s in plan.state_shapes], dtype=np.int64),
        output_sizes=np.array([math.prod(s) for s in plan.out_shapes], dtype=np.int64),
        params=np.array(params, dtype=np.float64),
        param_sizes=np.array([math.prod(p.shape) for p in plan.params], dtype=np.int64),
        launch=np.array(backend._launch_of(plan.name), dtype=np.int64),
    )

    def call(*xs):
        # runs while JAX traces: shapes and dtypes are known, values are not
        given = iter(xs)
        views, batch = plan.check_states(JAX, [next(given) if here else None for here in present])
        lead = () if batch is None else (batch,)
        converted = []
        for v, p in zip(views, plan.states):
            if v is not None:
                v = jnp.broadcast_to(v, (*lead, *p.shape))  # a single state among a batch: over it
                converted.append(v if v.dtype == dtype else v.astype(dtype))
        results = [jax.ShapeDtypeStruct((*lead, *s), dtype) for s in plan.out_shapes]
        ffi = jax.ffi.ffi_call(TARGET, results, vmap_method="broadcast_all")

        def core(*arrays):
            values = ffi(*arrays, **attrs)
            return values[0] if len(values) == 1 else tuple(values)

        if not raw:
            core = jax_rules.differentiable(backend, plan, present, params, core, _function_raw)
        return core(*converted)

    fn = cache[key] = jax.jit(call)
    return fn


def _function_raw(backend, plan, present, params):
    return _function(backend, plan, present, params, raw=True)


def _check_mode(backend, plan) -> None:
    import jax

    if backend.dtype == np.float64 and not jax.config.jax_enable_x64:
        raise InputError(f"{plan.name}: a float64 handle needs JAX's 64-bit mode "
                         "(jax.config.update('jax_enable_x64', True))")


class JaxArrays:
    """JAX arrays and tracers (numpy arrays among them are constants of the call): one jitted
    XLA FFI call, JAX arrays out."""

    immutable = True
    tensors = False

    @staticmethod
    def describe(plan, port, x):
        if not is_jax(x):
            return HostArrays.describe(plan, port, x)
        dt = x.dtype
        real = _REAL.get(dt)
        if real is None:
            import jax.numpy as jnp

            real = _REAL[dt] = bool(jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.integer))
        return x, tuple(x.shape), dt, real

    @staticmethod
    def run(backend, plan, views, batch, params, outs):
        _check_mode(backend, plan)
        if not backend.accepts_device_arrays:  # values in device memory are not scanned, as CUDA arrays'
            plan.check_values(views)  # (those that hold values: not tracers)
        register()
        present = tuple(v is not None for v in views)
        return _function(backend, plan, present, _param_values(plan, params))(*(v for v in views if v is not None))


JAX = JaxArrays()
_REAL: dict = {}  # dtype -> whether it is real (jnp.issubdtype costs a µs)


def lean(backend, plan, args, out):
    """The lean path: arrays passed positionally, params at their defaults: straight into the
    cached jitted call, judged by the plan when JAX traces it; on a host backend, arrays whose
    values the C form finds good (``CallPlan.values_code``).  Anything else returns ``DECLINED``
    (the checked path, which names what is wrong)."""
    if out is not None or any(x is None for x in args) or len(args) > plan.n_state:
        return DECLINED  # (an input given as None: the checked path omits it)
    fn = plan.jax.get(len(args))
    if fn is None:
        if any(plan.required[len(args):]):
            return DECLINED
        _check_mode(backend, plan)
        register()
        present = tuple(k < len(args) for k in range(plan.n_state))
        fn = plan.jax[len(args)] = _function(backend, plan, present, _param_values(plan, plan.param_values))
    if not backend.accepts_device_arrays and plan.values_code((*args, *(None,) * (plan.n_state - len(args)))) != 0:
        return DECLINED  # a value to name, or arrays not in host memory (a GPU's, traced ones)
    try:
        return fn(*args)
    except InputError as exc:  # the plan's, while JAX traced the call: without the note JAX adds to it
        raise InputError(str(exc)) from None
