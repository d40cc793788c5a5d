"""JAX arrays in, JAX arrays out, through an XLA FFI custom call.

Every algorithm of a handle is one ``jax.ffi.ffi_call`` of the target :data:`TARGET`,
whose handler (``jax_ffi.cc``) calls the library's packed device entry on XLA's stream
with XLA's buffers: no copy, no synchronisation, and the call composes with the rest of a
JAX program.  It works eagerly and under ``jax.jit`` and ``jax.vmap`` (a vmapped call is
one larger batch).  Params (``gravity``, ``dt``) are attributes of the call, so under
``jax.jit`` they must be concrete values, not traced ones.  No derivative rule is defined:
``jax.grad`` through a call raises JAX's own error.

The handler library is robot-independent: built once per jaxlib version with the host C++
compiler against the headers jaxlib ships (``jax.ffi.include_dir()``) and cached by
content (:mod:`grid_core.buildcache`).  On XLA:CPU the same call runs an
:class:`~grid_core.testing.Emulated` library (how CI tests this path without a GPU).
"""

from __future__ import annotations

import ctypes
import math
import threading
from pathlib import Path

import numpy as np

from .. import buildcache
from .backend import _FALLBACK, batch_of
from ..errors import BuildError, InputError

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
        _state["lib"] = lib


def _params(alg, ins, given) -> tuple[float, ...]:
    """Every param's values, concatenated: concrete, finite, of its port's shape."""
    values = []
    for p in ins:
        if p.kind != "param":
            continue
        x = given.get(p.name, p.default)
        try:
            a = np.asarray(x, dtype=np.float64)
        except Exception as exc:  # a tracer: jax.errors.TracerArrayConversionError and kin
            raise InputError(f"{alg.name}: argument '{p.name}' must be a concrete value (under jax.jit, pass it as "
                             f"a static argument or a Python number): {type(exc).__name__}") from None
        if a.shape != p.shape or not np.isfinite(a).all():
            raise InputError(f"{alg.name}: argument '{p.name}' must be finite with shape {p.shape}")
        values += a.ravel().tolist()
    return tuple(values)


def _function(backend, alg, present: tuple[bool, ...], params: tuple[float, ...]):
    """The jitted call of one algorithm for one set of present inputs, params and launch
    settings, cached on the backend.  Its arguments are checked and converted while JAX
    traces it, which happens once per shape and dtype signature: a later call with the same
    signature costs only JAX's own dispatch."""
    key = (alg.name, present, params, backend._launch_of(alg.name))
    cache = backend.__dict__.setdefault("_jax_functions", {})
    fn = cache.get(key)
    if fn is not None:
        return fn
    import jax
    import jax.numpy as jnp

    ins, outs = backend._ports(alg)
    given = [p for p, here in zip((p for p in ins if p.kind == "state"), present) if here]
    index, k = [], 0
    for here in present:
        index.append(k if here else -1)
        k += here
    dtype = backend.dtype
    attrs = dict(
        library=str(backend._library_file()),
        symbol=f"grid_abi_{alg.name}_{backend._suffix()}_packed",
        itemsize=int(dtype.itemsize),
        inputs=np.array(index, dtype=np.int64),
        input_sizes=np.array([math.prod(p.shape) for p in ins if p.kind == "state"], dtype=np.int64),
        output_sizes=np.array([math.prod(p.shape) for p in outs], dtype=np.int64),
        params=np.array(params, dtype=np.float64),
        param_sizes=np.array([math.prod(p.shape) for p in ins if p.kind == "param"], dtype=np.int64),
        launch=np.array(backend._launch_of(alg.name), dtype=np.int64),
    )

    def call(*xs):
        # runs while JAX traces: shapes and dtypes are known, values are not
        for p, x in zip(given, xs):
            if not (jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.integer)):
                raise InputError(f"{alg.name}: argument '{p.name}' has dtype {x.dtype}, expected a real array")
        batch = batch_of(alg.name, [(p, tuple(x.shape)) for p, x in zip(given, xs)], "JAX")
        converted = [x if x.dtype == dtype else x.astype(dtype) for x in xs]
        lead = () if batch is None else (batch,)
        results = [jax.ShapeDtypeStruct((*lead, *p.shape), dtype) for p in outs]
        values = jax.ffi.ffi_call(TARGET, results, vmap_method="broadcast_all")(*converted, **attrs)
        return values[0] if len(values) == 1 else tuple(values)

    fn = cache[key] = jax.jit(call)
    return fn


def _check_mode(backend, alg) -> None:
    import jax

    if backend.dtype == np.float64 and not jax.config.jax_enable_x64:
        raise InputError(f"{alg.name}: a float64 handle needs JAX's 64-bit mode "
                         "(jax.config.update('jax_enable_x64', True))")


def lean(backend, plan, args, out):
    """The lean path: arrays passed positionally, params at their defaults: straight into
    the cached jitted call (checked when JAX traces it).  Anything else returns
    ``FALLBACK`` (the general path, :func:`call`)."""

    if out is not None or any(x is None for x in args):
        return _FALLBACK  # (an input given as None: the general path omits it)
    fn = plan.jax.get(len(args))
    if fn is None:
        if len(args) > plan.n_state or any(plan.required[len(args):]):
            return _FALLBACK
        _check_mode(backend, plan.alg)
        register()
        ins, _ = backend._ports(plan.alg)
        present = tuple(k < len(args) for k in range(plan.n_state))
        fn = plan.jax[len(args)] = _function(backend, plan.alg, present, _params(plan.alg, ins, {}))
    return fn(*args)


def call(backend, alg, args, kwargs, out):
    """``alg`` on JAX arrays (or tracers), any arguments: bound to the ports, then one
    jitted FFI call; returns JAX arrays."""
    if out is not None:
        raise InputError(f"{alg.name}: JAX arrays are immutable; out= is not taken with JAX inputs")
    _check_mode(backend, alg)
    register()
    from ..reference import bind_arguments

    ins, _ = backend._ports(alg)
    given = bind_arguments(alg.name, ins, args, kwargs)
    xs, present = [], []
    for p in ins:
        if p.kind != "state":
            continue
        x = given.get(p.name)
        if x is None and not p.optional:
            raise InputError(f"{alg.name}: argument '{p.name}' is required")
        present.append(x is not None)
        if x is not None:
            xs.append(x)
    return _function(backend, alg, tuple(present), _params(alg, ins, given))(*xs)
