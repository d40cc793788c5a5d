"""Backends over the generated code: validated numpy in, a call through the
generated C ABI (:mod:`grid_core.abi`), numpy out.

:class:`Emulated` compiles the header as host C++ (``GRID_HOST_EMULATION``); the
GPU runtime's ``RobotHandle`` shares :class:`AbiBackend`.  Both expose the same
method names and signatures as :class:`~grid_core.Reference` (DESIGN §3).
"""

from __future__ import annotations

import ctypes

import numpy as np

from .errors import GridError, InputError

LAYOUTS = {"auto": 0, "block": 1, "per_state": 2}
NONFINITE_INPUT = -1000  # GRID_ABI_NONFINITE_INPUT of grid_core.abi
_FALLBACK = object()


def is_device_array(x) -> bool:
    from .runtime.arrays import is_device_array as check

    return check(x)


def _outputs(out, ports, n, batch, dtype) -> list[np.ndarray]:
    """Output arrays: the caller's ``out=`` (checked) or fresh ones."""
    shapes = [(n, *p.shape) if batch is not None else (1, *p.shape) for p in ports]
    if out is None:
        return [np.empty(s, dtype=dtype) for s in shapes]
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(ports):
        raise InputError(f"out= needs {len(ports)} array(s)")
    checked = []
    for o, s, p in zip(outs, shapes, ports):
        want = s if batch is not None else s[1:]
        if not (isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == tuple(want) and o.flags.c_contiguous):
            raise InputError(f"out= for '{p.name}' must be a C-contiguous {np.dtype(dtype).name} array of shape "
                             f"{tuple(want)}")
        checked.append(o.reshape(s))
    return checked


def load_abi(path) -> ctypes.CDLL:
    """Load a library built from :func:`grid_core.abi.abi_source` and declare its helpers."""
    lib = ctypes.CDLL(str(path))
    lib.grid_abi_error_string.restype = ctypes.c_char_p
    lib.grid_abi_malloc.restype = ctypes.c_void_p
    lib.grid_abi_malloc.argtypes = [ctypes.c_size_t]
    lib.grid_abi_free.argtypes = [ctypes.c_void_p]
    lib.grid_abi_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.grid_abi_set_poison.argtypes = [ctypes.c_int]
    return lib


class AbiBackend:
    """Outputs are poisoned with NaN before each call, so an element the kernel never
    writes fails the comparison."""

    def __init__(self, robot, algorithms, dtype, *, layout="auto", tier=0, threads=0, blocks=0):
        from .loader import load_robot

        self.robot = load_robot(robot)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, not {self.dtype}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
        self.layout, self.tier, self.threads, self.blocks = layout, int(tier), int(threads), int(blocks)
        self.algorithms = algorithms

    def with_launch(self, **kw):
        """The same build with another launch configuration (layout, tier, threads, blocks)."""
        other = type(self).__new__(type(self))
        other.__dict__.update({k: v for k, v in self.__dict__.items()
                               if k not in ("_per_algorithm", "_methods", "_launch_cache")})
        for k, v in kw.items():
            if k not in ("layout", "tier", "threads", "blocks"):
                raise TypeError(f"unknown launch setting '{k}'")
            setattr(other, k, v)
        return other

    def _lib(self):
        raise NotImplementedError

    def _suffix(self) -> str:
        return "f32" if self.dtype == np.float32 else "f64"

    def _emitted(self) -> list[str]:
        from .composer import resolve_algorithms

        return [a.name for a in resolve_algorithms(self.algorithms)]

    def configure(self, algorithm: str | None = None, **launch) -> None:
        """Set the launch (layout, tier, threads, blocks) of one algorithm, or the default."""
        for k in launch:
            if k not in ("layout", "tier", "threads", "blocks"):
                raise TypeError(f"unknown launch setting '{k}'")
        if "layout" in launch and launch["layout"] not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
        if algorithm is None:
            for k, v in launch.items():
                setattr(self, k, v)
        else:
            self.__dict__.setdefault("_per_algorithm", {}).setdefault(algorithm, {}).update(launch)
        self.__dict__.pop("_launch_cache", None)

    def _launch_of(self, name: str) -> tuple[int, int, int, int]:
        key = (name, self.layout, self.tier, self.threads, self.blocks)
        cache = self.__dict__.setdefault("_launch_cache", {})
        if key not in cache:
            cfg = {"layout": self.layout, "tier": self.tier, "threads": self.threads, "blocks": self.blocks}
            cfg.update(self.__dict__.get("_per_algorithm", {}).get(name, {}))
            cache[key] = (LAYOUTS[cfg["layout"]], int(cfg["tier"]), int(cfg["threads"]), int(cfg["blocks"]))
        return cache[key]

    def set_poison(self, on: bool = True) -> None:
        """Fill outputs with NaN before every numpy-path launch (tests: unwritten elements fail)."""
        self._lib().grid_abi_set_poison(1 if on else 0)

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            msg = self._lib().grid_abi_error_string(err)
            raise GridError(
                f"{what} on {self.robot.name}: CUDA error {err}: {msg.decode() if msg else '?'} "
                f"(layout {self.layout}, tier {self.tier}, threads {self.threads}, blocks {self.blocks})"
            )

    def _ports(self, alg):
        cache = self.__dict__.setdefault("_port_cache", {})
        if alg.name not in cache:
            cache[alg.name] = (tuple(alg.inputs(self.robot)), tuple(alg.outputs(self.robot)))
        return cache[alg.name]

    def _call(self, alg, args, kwargs):
        out = kwargs.pop("out", None)
        if args and not kwargs:
            if type(args[0]) is np.ndarray:
                result = self._call_numpy(alg, args, out)
                if result is not _FALLBACK:
                    return result
            elif type(args[0]).__name__ == "Tensor":
                result = self._call_torch(alg, args, out)
                if result is not _FALLBACK:
                    return result
        for x in (*args, *kwargs.values()):
            if type(x) is not np.ndarray and x is not None and is_device_array(x):
                return self._call_device(alg, args, kwargs, out)
        return self._call_host(alg, args, kwargs, out)

    def _host_plan(self, alg):
        """Per-algorithm call plan of the numpy path, built once: ports, defaults, the C entry."""
        plans = self.__dict__.setdefault("_host_plans", {})
        plan = plans.get(alg.name)
        if plan is None:
            ins, outs = self._ports(alg)
            fn = getattr(self._lib(), f"grid_abi_{alg.name}_{self._suffix()}_host")
            nargs = len(outs) + sum(1 for p in ins if p.kind in ("state", "param"))
            fn.argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int] * 5
            defaults = {p.name: np.ascontiguousarray(p.default, dtype=self.dtype)
                        for p in ins if p.kind == "param" and p.default is not None}
            plan = (ins, outs, fn, defaults, [p.name for p in ins])
            plans[alg.name] = plan
        return plan

    def _call_host(self, alg, args, kwargs, out):
        """numpy in -> numpy out: one ABI call stages everything through pinned buffers.

        Fast path for numpy float arrays of the right shapes; anything else goes through
        the Reference's full validation and conversion first."""
        ins, outs_p, fn, defaults, names = self._host_plan(alg)
        if len(args) > len(names) or any(k not in names for k in kwargs):
            from .reference import bind_inputs

            bind_inputs(alg, self.robot, args, kwargs)  # raises the InputError naming the argument
        given = dict(zip(names, args))
        given.update(kwargs)
        batch = None
        arrays_in = []
        fast = True
        for p in ins:
            if p.kind != "state":
                continue
            x = given.get(p.name)
            if x is None:
                if not p.optional:
                    fast = False
                    break
                arrays_in.append(None)
                continue
            if type(x) is not np.ndarray or x.dtype.kind != "f":
                fast = False
                break
            if x.shape == p.shape:
                nb = None
            elif x.ndim == len(p.shape) + 1 and x.shape[1:] == p.shape:
                nb = x.shape[0]
            else:
                fast = False
                break
            if nb is not None:
                if batch is not None and nb != batch:
                    fast = False
                    break
                batch = nb
            elif batch is not None:
                fast = False
                break
            arrays_in.append(x)
        if fast and batch is not None and any(x is not None and x.ndim == len(p.shape)
                                              for x, p in zip(arrays_in, [q for q in ins if q.kind == "state"])):
            fast = False
        if not fast:
            from .reference import bind_inputs

            bound, batch = bind_inputs(alg, self.robot, args, kwargs)
            arrays_in = [bound[p.name] for p in ins if p.kind == "state"]
        n = 1 if batch is None else batch
        outs = _outputs(out, outs_p, n, batch, self.dtype)
        cargs = [o.ctypes.data for o in outs]
        keep = []
        states = iter(arrays_in)
        for p in ins:
            if p.kind == "state":
                x = next(states)
                if x is None:
                    cargs.append(None)
                    continue
                if x.shape == p.shape:
                    x = x[None]
                a = x if (x.dtype == self.dtype and x.flags.c_contiguous) else \
                    np.ascontiguousarray(np.broadcast_to(x, (n, *p.shape)), dtype=self.dtype)
            elif p.kind == "param":
                x = given.get(p.name)
                a = defaults[p.name] if x is None else np.ascontiguousarray(x, dtype=self.dtype)
                if a.shape != p.shape or not np.isfinite(a).all():
                    raise InputError(f"{alg.name}: argument '{p.name}' must be finite with shape {p.shape}")
            else:
                continue
            keep.append(a)
            cargs.append(a.ctypes.data)
        err = fn(*cargs, n, *self._launch_of(alg.name))
        if err <= NONFINITE_INPUT:  # the library found NaN/inf while staging: name the argument
            from .reference import bind_inputs

            bind_inputs(alg, self.robot, args, kwargs)
            raise InputError(f"{alg.name}: a state input contains NaN or inf")
        self._check(err, f"{alg.name} launch")
        if out is not None:
            return out
        result = [o if batch is not None else o[0] for o in outs]
        return result[0] if len(result) == 1 else tuple(result)

    def _call_numpy(self, alg, args, out):
        """The lean numpy path: a batch of C-contiguous arrays of the handle's dtype, passed
        positionally (params at their defaults).  NaN/inf are caught by the library while it
        stages the inputs.  Anything else: the general path."""
        ins, outs_p, fn, defaults, names = self._host_plan(alg)
        states = self.__dict__.get("_np_states", {}).get(alg.name)
        if states is None:
            states = [p for p in ins if p.kind == "state"]
            self.__dict__.setdefault("_np_states", {})[alg.name] = states
        if len(args) > len(states) or out is not None:
            return _FALLBACK
        x0 = args[0]
        if x0.ndim != len(states[0].shape) + 1:
            return _FALLBACK
        n = x0.shape[0]
        dtype = self.dtype
        ptrs = []
        for x, p in zip(args, states):
            if x is None:
                if not p.optional:
                    return _FALLBACK
                ptrs.append(None)
                continue
            if type(x) is not np.ndarray or x.dtype != dtype or not x.flags.c_contiguous or \
                    x.shape[0] != n or x.shape[1:] != p.shape:
                return _FALLBACK
            ptrs.append(x.ctypes.data)
        for p in states[len(args):]:
            if not p.optional:
                return _FALLBACK
            ptrs.append(None)
        outs = [np.empty((n, *p.shape), dtype=dtype) for p in outs_p]
        params = [defaults[p.name].ctypes.data for p in ins if p.kind == "param"]
        err = fn(*[o.ctypes.data for o in outs], *ptrs, *params, n, *self._launch_of(alg.name))
        if err <= NONFINITE_INPUT:
            return _FALLBACK  # the general path names the argument
        self._check(err, f"{alg.name} launch")
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _torch_plan(self, alg):
        plans = self.__dict__.setdefault("_torch_plans", {})
        plan = plans.get(alg.name)
        if plan is None:
            import torch

            ins, outs = self._ports(alg)
            states = [p for p in ins if p.kind == "state"]
            params = [p for p in ins if p.kind == "param"]
            fn = getattr(self._lib(), f"grid_abi_{alg.name}_{self._suffix()}")
            fn.argtypes = [ctypes.c_void_p] * (len(outs) + len(states) + len(params)) + [ctypes.c_int] * 5 + \
                [ctypes.c_void_p]
            defaults = [np.ascontiguousarray(p.default, dtype=self.dtype) for p in params]
            tdtype = torch.float32 if self.dtype == np.float32 else torch.float64
            get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            plan = (states, outs, defaults, fn, tdtype, get_stream, torch.empty)
            plans[alg.name] = plan
        return plan

    def _call_torch(self, alg, args, out):
        """The lean path for contiguous CUDA tensors of the handle's dtype, passed positionally
        (state inputs only; params at their defaults).  Anything else: the general path."""
        states, outs_p, defaults, fn, tdtype, get_stream, empty = self._torch_plan(alg)
        if get_stream is None or len(args) > len(states) or out is not None and len(outs_p) != 1:
            return _FALLBACK
        x0 = args[0]
        if not x0.is_cuda or x0.dim() != len(states[0].shape) + 1:
            return _FALLBACK
        n = x0.shape[0]
        ptrs = []
        for x, p in zip(args, states):
            if x is None:
                if not p.optional:
                    return _FALLBACK
                ptrs.append(None)
                continue
            if type(x) is not type(x0) or x.dtype is not tdtype or not x.is_contiguous() or \
                    x.shape[0] != n or tuple(x.shape[1:]) != p.shape or x.device != x0.device:
                return _FALLBACK
            ptrs.append(x.data_ptr())
        for p in states[len(args):]:
            if not p.optional:
                return _FALLBACK
            ptrs.append(None)
        if out is None:
            outs = [empty((n, *p.shape), dtype=tdtype, device=x0.device) for p in outs_p]
        else:
            if type(out) is not type(x0) or out.dtype is not tdtype or not out.is_contiguous() or \
                    out.shape != (n, *outs_p[0].shape) or out.device != x0.device:
                return _FALLBACK
            outs = [out]
        err = fn(*[o.data_ptr() for o in outs], *ptrs, *[d.ctypes.data for d in defaults], n,
                 *self._launch_of(alg.name), get_stream(x0.device.index))
        self._check(err, f"{alg.name} launch")
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _call_device(self, alg, args, kwargs, out):
        """CUDA arrays in -> the same kind out, on the framework's current stream, no host copy.

        Shapes and dtypes are checked (a dtype other than the handle's is converted on the
        device); values are not scanned for NaN, which would cost a device reduction."""
        from .runtime import arrays

        ins, outs_p = self._ports(alg)
        names = [p.name for p in ins]
        if len(args) > len(names):
            raise InputError(f"{alg.name}: takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise InputError(f"{alg.name}: unexpected argument '{k}' (takes {', '.join(names)})")
            given[k] = v
        batch, like = None, None
        states, params = [], []
        for p in ins:
            x = given.get(p.name, p.default)
            if p.kind == "param":
                a = np.ascontiguousarray(np.asarray(x, dtype=self.dtype).reshape(p.shape))
                params.append(a)
                continue
            if p.kind != "state":
                continue
            if x is None:
                if not p.optional:
                    raise InputError(f"{alg.name}: argument '{p.name}' is required")
                states.append(None)
                continue
            if not arrays.is_device_array(x):
                raise InputError(f"{alg.name}: argument '{p.name}' is on the host while others are CUDA arrays; "
                                 "pass every array on the same side")
            d = arrays.wrap(p.name, x, self.dtype)
            if len(d.shape) == len(p.shape) + 1 and d.shape[1:] == p.shape:
                if batch is not None and d.shape[0] != batch:
                    raise InputError(f"{alg.name}: argument '{p.name}' has batch size {d.shape[0]}, others {batch}")
                batch = d.shape[0]
            elif d.shape != p.shape:
                raise InputError(f"{alg.name}: argument '{p.name}' has shape {d.shape}, expected {p.shape} "
                                 f"or (N, {', '.join(map(str, p.shape))})")
            like = like or d
            states.append((p, d))
        if any(s is not None and batch is not None and s[1].shape == s[0].shape for s in states):
            raise InputError(f"{alg.name}: mix of batched and single-state CUDA inputs (batch them all)")
        n = 1 if batch is None else batch
        shapes = [(n, *p.shape) if batch is not None else p.shape for p in outs_p]
        if out is not None:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(outs_p):
                raise InputError(f"{alg.name}: out= needs {len(outs_p)} array(s)")
            wrapped = []
            for o, shape in zip(outs, shapes):
                d = arrays.wrap("out", o, self.dtype)
                if d.ptr != arrays.raw_ptr(o) or d.shape != tuple(shape):
                    raise InputError(f"{alg.name}: out= must be a contiguous {np.dtype(self.dtype).name} CUDA array "
                                     f"of shape {shape}")
                wrapped.append(d)
        else:
            wrapped = [arrays.empty(like, shape, self.dtype) for shape in shapes]
        c_args = [ctypes.c_void_p(d.ptr) for d in wrapped]
        c_args += [ctypes.c_void_p(None) if s is None else ctypes.c_void_p(s[1].ptr) for s in states]
        c_args += [a.ctypes.data_as(ctypes.c_void_p) for a in params]
        fn = getattr(self._lib(), f"grid_abi_{alg.name}_{self._suffix()}")
        err = fn(*c_args, n, *self._launch_of(alg.name), ctypes.c_void_p(arrays.stream_of(like)))
        if err == 0 and like.framework == "jax":
            err = self._lib().grid_abi_synchronize()
        self._check(err, f"{alg.name} launch")
        result = [arrays.finish(d) for d in wrapped]
        return result[0] if len(result) == 1 else tuple(result)

    def close(self) -> None:
        """Kept for symmetry: the library owns its buffers for the life of the process."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        method = self.__dict__.get("_methods", {}).get(name)
        if method is not None:
            return method
        from .hooks import registry

        algs = registry().algorithms
        if name not in algs or name not in self._emitted():
            raise AttributeError(
                f"{type(self).__name__} has no algorithm '{name}' (built: {', '.join(self._emitted())})"
            )
        alg = algs[name]

        def method(*args, **kwargs):
            return self._call(alg, args, kwargs)

        method.__name__ = name
        method.__doc__ = alg.summary
        self.__dict__.setdefault("_methods", {})[name] = method
        return method


class Emulated(AbiBackend):
    """The generated header compiled as host C++ (``GRID_HOST_EMULATION``), behind the
    same methods as :class:`~grid_core.Reference`.  Built once per content hash.

    ``layout`` (``auto``, ``block``, ``per_state``), ``tier`` and ``threads`` select
    the launch; ``generate_options`` go to :func:`grid_core.composer.generate`
    (``target_shared_mem_bytes=0`` forces the deepest spill rung).
    """

    def __init__(self, robot, algorithms=None, dtype=np.float64, *, layout="auto", tier=0, threads=0, blocks=0,
                 **generate_options):
        super().__init__(robot, algorithms, dtype, layout=layout, tier=tier, threads=threads, blocks=blocks)
        self.generate_options = generate_options
        self._handle = None

    def sources(self) -> dict[str, str]:
        from .abi import abi_source
        from .composer import generate

        header = generate(self.robot, self.algorithms, **self.generate_options)
        ns = self.generate_options.get("namespace", "grid")
        return {"grid.cuh": header, "abi.cpp": abi_source(self.robot, self.algorithms, "grid.cuh", ns)}

    def library_path(self):
        from . import buildcache

        cmd = [*buildcache.host_compiler(), "-std=c++17", "-O1", "-fPIC", "-shared", "-DGRID_HOST_EMULATION",
               "-Wall", "-Wno-unused-variable", "-Wno-unused-but-set-variable", "-o", "{out}", "abi.cpp"]
        path, _ = buildcache.build(f"emu-{self.robot.name}", self.sources(), cmd, "libgrid_emu.so")
        return path

    def _lib(self):
        if self._handle is None:
            self._handle = load_abi(self.library_path())
        return self._handle
