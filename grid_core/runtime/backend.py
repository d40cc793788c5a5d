"""Backends over the generated code: a call checked once by its plan (:mod:`.plan`), run
through the generated C ABI (:mod:`grid_core.abi`) on the arrays' own kind (:mod:`.adapters`,
:mod:`.jax_ffi`).

:class:`Emulated` compiles the header as host C++ (``GRID_HOST_EMULATION``); ``CpuHandle`` and
the GPU runtime's ``RobotHandle`` share :class:`AbiBackend`.  All expose the same method names
and signatures as :class:`~grid_core.Reference` (DESIGN §3).
"""

from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from ..errors import GridError, InputError
from .adapters import DECLINED
from .plan import CallPlan, lean_path_for
from .settings import LAYOUTS, SETTINGS, LaunchSettings

__all__ = ["LAYOUTS", "SETTINGS", "AbiBackend", "Emulated", "emulation_command", "load_abi"]

_POOL: int | None = None
"""The process's thread pool: the table of the first library loaded (``grid_host_pool_lend``),
which every library loaded after adopts, so that the libraries of a process share one set of
workers instead of each spinning its own on the same cores (grid_host::PoolTable)."""
_POOL_LOCK = threading.Lock()


def load_abi(path) -> ctypes.CDLL:
    """Load a library built from :func:`grid_core.abi.abi_source`, declare its helpers, and have
    it run its host jobs on the process's one thread pool (:data:`_POOL`)."""
    global _POOL
    lib = ctypes.CDLL(str(path))
    lib.grid_host_pool_lend.restype = ctypes.c_void_p
    lib.grid_host_pool_adopt.argtypes = [ctypes.c_void_p]
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = lib.grid_host_pool_lend()
        else:
            lib.grid_host_pool_adopt(_POOL)  # 0 for a table of another version: its own pool then
    lib.grid_abi_error_string.restype = ctypes.c_char_p
    lib.grid_abi_malloc.restype = ctypes.c_void_p
    lib.grid_abi_malloc.argtypes = [ctypes.c_size_t]
    lib.grid_abi_free.argtypes = [ctypes.c_void_p]
    lib.grid_abi_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.grid_abi_set_poison.argtypes = [ctypes.c_int]
    return lib


class AbiBackend(LaunchSettings):
    """Outputs are poisoned with NaN before each call, so an element the kernel never
    writes fails the comparison."""

    # the C entry of host memory, grid_abi_X_f64{host_form} and its packed form
    host_form = "_host"
    # CUDA arrays: only a backend that runs on the GPU takes them
    accepts_device_arrays = False
    generate_options: dict = {}
    """What the library was generated with (:func:`grid_core.generate`'s options)."""

    def __init__(self, robot, algorithms, dtype, *, layout="auto", tier=0, threads=0, blocks=0, transfer="auto"):
        from ..loader import load_robot

        self.robot = load_robot(robot)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, not {self.dtype}")
        self._init_settings(layout, tier, threads, blocks, transfer)
        self.algorithms = algorithms

    def _lib(self):
        raise NotImplementedError

    def _library_file(self):
        """The built library's path (the JAX path's handler loads it by name)."""
        raise NotImplementedError

    def _build(self) -> None:
        """Build (or find in the cache) the library of :attr:`generate_options`."""
        raise NotImplementedError

    def _suffix(self) -> str:
        return "f32" if self.dtype == np.float32 else "f64"

    def _emitted(self) -> list[str]:
        from ..composer import resolve_algorithms

        return [a.name for a in resolve_algorithms(self.algorithms)]

    def _plan(self, alg) -> CallPlan:
        plans = self.__dict__.setdefault("_plans", {})
        plan = plans.get(alg.name)
        if plan is None:
            plan = plans[alg.name] = CallPlan(self, alg)
        return plan

    def _launched_as(self, other: "AbiBackend") -> "AbiBackend":
        """This build under ``other``'s launch configuration (its settings, per algorithm too)."""
        view = self.with_launch(**{k: getattr(other, k) for k in SETTINGS})
        if "_per_algorithm" in other.__dict__:
            view.__dict__["_per_algorithm"] = {a: dict(v) for a, v in other._per_algorithm.items()}
        return view

    def set_poison(self, on: bool = True) -> None:
        """Fill outputs with NaN before every host-memory launch (tests: unwritten elements fail); the
        libraries built later for other option values (:meth:`_generated_for`) too."""
        self.__dict__["_poison"] = bool(on)
        self._lib().grid_abi_set_poison(1 if on else 0)

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            msg = self._lib().grid_abi_error_string(err)
            raise GridError(
                f"{what} on {self.robot.name}: CUDA error {err}: {msg.decode() if msg else '?'} "
                f"(layout {self.layout}, tier {self.tier}, threads {self.threads}, blocks {self.blocks}, "
                f"transfer {self.transfer})"
            )

    @property
    def frames(self) -> tuple[str, ...] | None:
        """The frames the library was generated for (None: the default choice)."""
        return self.generate_options.get("frames")

    def _values(self, alg) -> dict:
        """The values of ``alg``'s option ports in this library (fixed when it was generated:
        :func:`~grid_core.algorithm.generation_values`)."""
        from ..algorithm import generation_values
        from ..composer import GenerateOptions

        cache = self.__dict__.setdefault("_value_cache", {})
        if alg.name not in cache:
            cache[alg.name] = generation_values(alg, self.robot, GenerateOptions(**self.generate_options))
        return cache[alg.name]

    def _ports(self, alg):
        cache = self.__dict__.setdefault("_port_cache", {})
        if alg.name not in cache:  # outputs sized for the option values the code was generated for
            cache[alg.name] = (tuple(alg.inputs(self.robot)), tuple(alg.outputs(self.robot, **self._values(alg))))
        return cache[alg.name]

    def _generated_for(self, alg, args, kwargs):
        """A call's option-port arguments (``frames``, ...) taken out of its arguments, and the
        backend whose code was generated for their values: this one where they are its values (or
        not given), else the same backend built for them (once per set of values, kept on this
        one): other ``frames`` as :attr:`frames`, another value of a port ``X`` as the algorithm
        option ``X`` (:func:`~grid_core.algorithm.generation_values`); a value not among the port's
        :attr:`~grid_core.algorithm.Port.choices` is refused before any build."""
        from ..algorithm import check_choice
        from ..model.frames import resolve_frames

        known = self.__dict__.setdefault("_option_ports", {})  # (alg.inputs builds its ports: tens of µs)
        ports = known.get(alg.name)
        if ports is None:
            ports = known[alg.name] = {p.name: (i, p) for i, p in enumerate(self._ports(alg)[0]) if p.kind == "option"}
        if not kwargs and all(i >= len(args) for i, _ in ports.values()):
            return args, kwargs, self  # no option given: this build's values
        at = {i for i, _ in ports.values()}
        given = {name: args[i] for name, (i, _) in ports.items() if i < len(args)}
        # the others stay at their positions (an option before them given as None), the trailing options dropped
        args = tuple(None if i in at else a for i, a in enumerate(args))
        while args and len(args) - 1 in at:
            args = args[:-1]
        for name in ports:
            if name in kwargs:
                given[name] = kwargs.pop(name)
        built = self._values(alg)
        wanted = {}
        for name, value in given.items():
            if value is None:
                continue
            if name == "frames":
                chosen = resolve_frames(self.robot, value, alg.name)
                if chosen != built["frames"]:
                    wanted["frames"] = tuple(f.name for f in chosen)
                continue
            if check_choice(value, ports[name][1].choices, alg.name, name) != built[name]:  # before any build
                wanted[name] = value
        if not wanted:
            return args, kwargs, self
        key = tuple(sorted(wanted.items()))
        views = self.__dict__.setdefault("_option_views", {})
        if key not in views:
            builds = self.__dict__.setdefault("_option_builds", {})  # shared by this build's launch copies
            if key not in builds:
                builds[key] = self._built_for(alg, wanted)
            views[key] = builds[key]._launched_as(self)  # under this one's launch configuration
        return args, kwargs, views[key]

    def _built_for(self, alg, wanted: dict) -> "AbiBackend":
        """This backend's library generated with other option values of ``alg`` (``wanted``:
        ``frames`` names, or the value of another option port)."""
        other = self._copy("_port_cache", "_value_cache", "_option_builds", "_jax_functions")
        opts, wanted = dict(self.generate_options), dict(wanted)
        if "frames" in wanted:
            opts["frames"] = wanted.pop("frames")
        if wanted:
            from ..composer import GenerateOptions

            per = {a: dict(v) for a, v in GenerateOptions(**opts).algorithm_options}
            per[alg.name] = {**per.get(alg.name, {}), **wanted}
            opts["algorithm_options"] = per
        other.generate_options = opts
        other._build()
        if self.__dict__.get("_poison"):
            other.set_poison(True)
        return other

    def _call(self, alg, args, kwargs, out=None):
        """The checked path: any accepted arguments, judged once by the plan, then run."""
        return self._plan(alg).call(self, args, kwargs, out)

    def _refused(self, alg, args, kwargs, result):
        """``result``, unless the generated code marked a state it refuses (an emitter's
        ``refusals_as_nan``: NaN in that state's outputs, where the reference raises an
        InputError): then the reference's own error for the first such state, so every backend
        names the cause as the Reference does.  numpy results only: CUDA arrays are not scanned
        (as their inputs are not)."""
        from ..reference import Reference, bind_inputs

        outs = result if isinstance(result, tuple) else (result,)
        if not all(type(o) is np.ndarray for o in outs):
            return result
        ins, ports = self._ports(alg)
        marked = [np.flatnonzero(np.isnan(o.reshape(-1, math.prod(p.shape))).any(axis=1))
                  for o, p in zip(outs, ports)]
        if not any(m.size for m in marked):
            return result
        s = int(min(m[0] for m in marked if m.size))
        bound, batch = bind_inputs(alg, self.robot, args, kwargs)
        one = {p.name: bound[p.name][s] if batch is not None and p.batched and bound[p.name] is not None
               else bound[p.name] for p in ins}
        one.update(self._values(alg))  # the option ports as generated
        getattr(Reference(self.robot), alg.name)(**one)  # raises the InputError naming the cause
        raise InputError(f"{alg.name} on robot '{self.robot.name}': the generated code ({self.dtype.name}) gives no "
                         f"result for state {s} (NaN) where the float64 reference gives one: the input is too "
                         f"ill-conditioned for {self.dtype.name}")

    def close(self) -> None:
        """Kept for symmetry: the library owns its buffers for the life of the process."""

    def __dir__(self):
        # the algorithm methods are resolved in __getattr__: list them too (tab completion)
        return sorted(set(super().__dir__()) | set(self._emitted()))

    def __getattr__(self, name: str):
        # called only until the method is bound into the instance dict below
        if name.startswith("_"):
            raise AttributeError(name)
        from ..hooks import registry

        algs = registry().algorithms
        if name not in algs or name not in self._emitted():
            raise AttributeError(
                f"{type(self).__name__} has no algorithm '{name}' (built: {', '.join(self._emitted())})"
            )
        alg = algs[name]
        from ..reference import inverts_mass_matrix, singular_mass_matrix

        if self.robot.massless_joints and inverts_mass_matrix(alg, algs):
            def method(*args, out=None, **kwargs):
                raise singular_mass_matrix(alg, self.robot)

            method.__name__ = name
            return method

        # the option ports (frames, ...) are fixed when the code is generated: a call with other
        # values runs a build for them
        has_options = any(p.kind == "option" for p in alg.inputs(self.robot))
        refusals = getattr(alg.emitter, "refusals_as_nan", False)

        def method(*args, out=None, **kwargs):
            if has_options:
                args, kwargs, target = self._generated_for(alg, args, kwargs)
                if target is not self:
                    return getattr(target, name)(*args, out=out, **kwargs)
            result = run(args, out, dict(kwargs))
            return self._refused(alg, args, kwargs, result) if refusals else result

        def run(args, out, kwargs):
            if args and not kwargs:
                plan, lean_args = self._plan(alg), args
                if not plan.ok:  # params without a default (dt), given positionally: a view at their values
                    plan, lean_args = plan.bound(args) or (plan, args)
                if plan.ok:
                    t = type(lean_args[0])
                    try:
                        lean = plan.paths[t]
                    except KeyError:
                        lean = plan.paths[t] = lean_path_for(self, t)
                    if lean is not None:
                        result = lean(self, plan, lean_args, out)
                        if result is not DECLINED:
                            return result
            return self._call(alg, args, kwargs, out)

        method.__name__ = name
        method.__doc__ = alg.summary
        self.__dict__.setdefault("_methods", {})[name] = method
        self.__dict__[name] = method
        return method


def emulation_command(source: str) -> list[str]:
    """The host compiler's command building ``source`` (which includes a generated header) as a
    host-emulated shared library (``{out}``)."""
    from .. import buildcache

    # -O0: the generated code is long straight-line code, which g++ optimises slowly (g1 with every
    # emitted algorithm: 91 s at -O1, 31 s at -O0); the emulation runs small batches, for checking
    return [*buildcache.host_compiler(), "-std=c++17", "-O0", "-fPIC", "-shared", *buildcache.private_symbols(),
            "-DGRID_HOST_EMULATION", "-Wall", "-Wno-unused-variable", "-Wno-unused-but-set-variable",
            "-o", "{out}", source]


class Emulated(AbiBackend):
    """The generated header compiled as host C++ (``GRID_HOST_EMULATION``), behind the
    same methods as :class:`~grid_core.Reference`.  Built once per content hash.

    ``layout`` (``auto``, ``block``, ``per_state``), ``tier`` and ``threads`` select
    the launch; ``generate_options`` go to :func:`grid_core.composer.generate`
    (``target_shared_mem_bytes=0`` forces the deepest spill rung; ``frames=`` the frames of the
    end-effector algorithms, whose calls with other ``frames`` build, once, the library for those).  The first call compiles
    the library (seconds to tens of seconds for a large robot; progress and one status line on
    stderr, none with ``quiet``), cached by content under ``GRID_CACHE_DIR``.
    """

    def __init__(self, robot, algorithms=None, dtype=np.float64, *, layout="auto", tier=0, threads=0, blocks=0,
                 transfer="auto", quiet: bool = False, **generate_options):
        super().__init__(robot, algorithms, dtype, layout=layout, tier=tier, threads=threads, blocks=blocks,
                         transfer=transfer)
        self.generate_options = generate_options
        self.quiet = quiet
        self._build()

    def _build(self) -> None:
        self._handle = None  # compiled on first use

    def sources(self) -> dict[str, str]:
        from ..abi import abi_source
        from ..composer import generate

        header = generate(self.robot, self.algorithms, **self.generate_options)
        ns = self.generate_options.get("namespace", "grid")
        return {"grid.cuh": header, "abi.cpp": abi_source(
            self.robot, self.algorithms, "grid.cuh", ns, frames=self.generate_options.get("frames"),
            algorithm_options=self.generate_options.get("algorithm_options"))}

    def library_path(self, quiet: bool = True):
        """The compiled library (built on first use; ``quiet=False`` reports the build as the GPU
        build does)."""
        from .. import buildcache

        cmd = emulation_command("abi.cpp")
        path, _ = buildcache.build_reported(f"{','.join(self._emitted())}[{self.robot.name}]", "host emulation",
                                            "the host-emulated build failed", f"emu-{self.robot.name}",
                                            self.sources(), cmd, "libgrid_emu.so", quiet=quiet)
        return path

    def _lib(self):
        if self._handle is None:
            self._handle = load_abi(self.library_path(quiet=self.quiet))
        return self._handle

    def _library_file(self):
        return self.library_path()
