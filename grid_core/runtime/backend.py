"""Backends over the generated code: validated numpy in, a call through the
generated C ABI (:mod:`grid_core.abi`), numpy out.

:class:`Emulated` compiles the header as host C++ (``GRID_HOST_EMULATION``); the
GPU runtime's ``RobotHandle`` shares :class:`AbiBackend`.  Both expose the same
method names and signatures as :class:`~grid_core.Reference` (DESIGN §3).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..abi import PACKED_TAIL, TRANSFERS
from ..errors import GridError, InputError

LAYOUTS = {"auto": 0, "block": 1, "per_state": 2}
SETTINGS = ("layout", "tier", "threads", "blocks", "transfer")
NONFINITE_INPUT = -1000  # GRID_ABI_NONFINITE_INPUT of grid_core.abi
BAD_QUATERNION = -900  # GRID_ABI_BAD_QUATERNION: a free-flyer quaternion of q not of unit norm
_FALLBACK = object()
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address(a: np.ndarray) -> int:
    """The data address of a C-contiguous, non-empty array: through the buffer protocol (a
    fraction of ``a.ctypes.data``'s cost, which matters on a call path of a few µs)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):  # read-only
        return a.ctypes.data


class _Plan:
    """The lean call of one algorithm under one launch configuration, built once: the packed
    C entries (:data:`grid_core.abi.PACKED_TAIL`), the expected shapes, the default params,
    and per-thread argument words (ctypes releases the GIL during a call, so two threads
    never share one array)."""

    def __init__(self, backend: AbiBackend, alg):
        ins, outs = backend._ports(alg)
        states = [p for p in ins if p.kind == "state"]
        params = [p for p in ins if p.kind == "param"]
        self.alg = alg
        self.name = alg.name
        self.dtype = backend.dtype
        # tuples: the C form (fastcall.c) takes them as they are
        self.state_shapes = tuple(p.shape for p in states)
        self.required = tuple(not p.optional for p in states)
        self.out_shapes = tuple(p.shape for p in outs)
        self.rank = len(states[0].shape) + 1 if states else -1
        self.n_out, self.n_state = len(outs), len(states)
        # the lean paths take params at their defaults only
        self.ok = bool(states) and all(p.default is not None for p in params)
        self.defaults = [np.ascontiguousarray(p.default, dtype=self.dtype) for p in params if p.default is not None]
        k = len(outs) + len(states) + len(params)
        self.i_n = k
        layout, tier, threads, blocks, transfer = backend._settings_of(alg.name)
        words = [0] * (k + len(PACKED_TAIL))
        words[len(outs) + len(states):k] = [d.ctypes.data for d in self.defaults]
        words[k + 1:k + 5] = [layout, tier, threads, blocks]
        self._type = ctypes.c_uint64 * len(words)
        # each entry's prefilled words; read by the C form and copied per thread, never written
        self._templates = {"host": self._type(*words[:-1], transfer), "device": self._type(*words)}
        lib, stem = backend._lib(), f"grid_abi_{alg.name}_{backend._suffix()}"
        self.host_fn = getattr(lib, f"{stem}{backend.host_form}_packed")  # no argtypes: an array passes as its address
        self.device_fn = getattr(lib, f"{stem}_packed")
        self.local = threading.local()
        # the C form of the numpy path (grid_core.runtime.fastcall), when it could be built
        from . import fastcall

        # (its fixed-size word and array tables: an algorithm with more ports takes the Python form)
        fits = len(words) <= fastcall.MAX_WORDS and len(outs) + len(states) <= fastcall.MAX_ARRAYS
        self.fastcall = fastcall.module() if fits else None
        self.fast_head = (ctypes.cast(self.host_fn, ctypes.c_void_p).value, ctypes.addressof(self._templates["host"]),
                          len(words), k, self.dtype.itemsize, self.dtype.char)
        self.fast_device_head = (ctypes.cast(self.device_fn, ctypes.c_void_p).value,
                                 ctypes.addressof(self._templates["device"]), len(words), k)
        self.torch = None  # (Tensor type, dtype, current raw stream), on the first tensor
        self.cupy = None  # (ndarray type, current stream, current device, empty), on the first CuPy array
        self.jax: dict = {}  # inputs given -> the jitted FFI call, params at their defaults (runtime.jax_ffi)
        self.paths: dict = {}  # argument type -> its lean path (or None: the general path)

    def words(self, entry: str):
        """This thread's argument words for the ``"host"`` or ``"device"`` entry."""
        local = self.local.__dict__
        w = local.get(entry)
        if w is None:
            w = local[entry] = self._type.from_buffer_copy(self._templates[entry])
        return w

    def torch_parts(self):
        import torch

        # the raw current stream: torch.cuda.current_stream() builds a Stream object (~5 µs)
        self.torch = (torch.Tensor, torch.float32 if self.dtype == np.float32 else torch.float64,
                      torch._C._cuda_getCurrentRawStream)
        return self.torch

    def cupy_parts(self):
        import cupy

        self.cupy = (cupy.ndarray, cupy.cuda.get_current_stream, cupy.cuda.runtime.getDevice, cupy.empty)
        return self.cupy


# fastcall.device's array protocols (fastcall.c)
_TORCH, _CUPY = 0, 1


def is_device_array(x) -> bool:
    from .arrays import is_device_array as check

    return check(x)


def _check_settings(settings: dict) -> None:
    for k, v in settings.items():
        if k not in SETTINGS:
            raise TypeError(f"unknown launch setting '{k}' (settings: {', '.join(SETTINGS)})")
    if "layout" in settings and settings["layout"] not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}")
    if "transfer" in settings and settings["transfer"] not in TRANSFERS:
        raise ValueError(f"transfer must be one of {', '.join(TRANSFERS)}")


def batch_of(name: str, shaped, what: str) -> int | None:
    """The batch size of state inputs given as ``(port, shape)`` pairs, each of shape
    ``port.shape`` (one state) or ``(N, *port.shape)``; None when all are single states.
    Other shapes, unequal batch sizes and a mix of the two forms are refused, naming the
    argument (``what`` names the kind of array in the last message)."""
    batch, single = None, False
    for p, shape in shaped:
        if len(shape) == len(p.shape) + 1 and shape[1:] == p.shape:
            if batch is not None and shape[0] != batch:
                raise InputError(f"{name}: argument '{p.name}' has batch size {shape[0]}, others {batch}")
            batch = shape[0]
        elif shape == p.shape:
            single = True
        else:
            raise InputError(f"{name}: argument '{p.name}' has shape {shape}, expected {p.shape} "
                             f"or (N, {', '.join(map(str, p.shape))})")
    if single and batch is not None:
        raise InputError(f"{name}: mix of batched and single-state {what} inputs (batch them all)")
    return batch


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
        if not (isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == tuple(want) and o.flags.c_contiguous
                and o.flags.writeable):
            raise InputError(f"out= for '{p.name}' must be a writable C-contiguous {np.dtype(dtype).name} array of "
                             f"shape {tuple(want)}")
        checked.append(o.reshape(s))
    return checked


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


class AbiBackend:
    """Outputs are poisoned with NaN before each call, so an element the kernel never
    writes fails the comparison."""

    # the C entry of the numpy path, grid_abi_X_f64{host_form} and its packed form
    host_form = "_host"
    generate_options: dict = {}
    """What the library was generated with (:func:`grid_core.generate`'s options)."""

    def __init__(self, robot, algorithms, dtype, *, layout="auto", tier=0, threads=0, blocks=0, transfer="auto"):
        from ..loader import load_robot

        self.robot = load_robot(robot)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, not {self.dtype}")
        _check_settings({"layout": layout, "transfer": transfer})
        self.layout, self.tier, self.threads, self.blocks = layout, int(tier), int(threads), int(blocks)
        self.transfer = transfer
        self.algorithms = algorithms

    def _forget_plans(self) -> None:
        """Drop everything derived from the launch settings (and the bound methods using it)."""
        for name in self.__dict__.pop("_methods", {}):
            self.__dict__.pop(name, None)
        self.__dict__.pop("_launch_cache", None)
        self.__dict__.pop("_plans", None)

    def with_launch(self, **kw):
        """The same build with another launch configuration (layout, tier, threads, blocks,
        transfer)."""
        _check_settings(kw)
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._forget_plans()
        other.__dict__.pop("_per_algorithm", None)
        for k, v in kw.items():
            setattr(other, k, v)
        return other

    def _lib(self):
        raise NotImplementedError

    def _library_file(self):
        """The built library's path (the JAX path's handler loads it by name)."""
        raise NotImplementedError

    def _suffix(self) -> str:
        return "f32" if self.dtype == np.float32 else "f64"

    def _emitted(self) -> list[str]:
        from ..composer import resolve_algorithms

        return [a.name for a in resolve_algorithms(self.algorithms)]

    def configure(self, algorithm: str | None = None, **launch) -> None:
        """Set the launch (layout, tier, threads, blocks) and the host path's ``transfer``
        (``auto``, ``copy``: the copy engine, ``mapped``: mapped pinned memory) of one
        algorithm, or the default."""
        _check_settings(launch)
        if algorithm is None:
            for k, v in launch.items():
                setattr(self, k, v)
        else:
            self.__dict__.setdefault("_per_algorithm", {}).setdefault(algorithm, {}).update(launch)
        self._forget_plans()

    def _settings_of(self, name: str) -> tuple[int, int, int, int, int]:
        """(layout, tier, threads, blocks, transfer) of one algorithm, as the C ABI takes them."""
        key = (name, self.layout, self.tier, self.threads, self.blocks, self.transfer)
        cache = self.__dict__.setdefault("_launch_cache", {})
        if key not in cache:
            cfg = {k: getattr(self, k) for k in SETTINGS}
            cfg.update(self.__dict__.get("_per_algorithm", {}).get(name, {}))
            cache[key] = (LAYOUTS[cfg["layout"]], int(cfg["tier"]), int(cfg["threads"]), int(cfg["blocks"]),
                          TRANSFERS[cfg["transfer"]])
        return cache[key]

    def _launch_of(self, name: str) -> tuple[int, int, int, int]:
        return self._settings_of(name)[:4]

    def _plan(self, alg) -> _Plan:
        plans = self.__dict__.setdefault("_plans", {})
        plan = plans.get(alg.name)
        if plan is None:
            plan = plans[alg.name] = _Plan(self, alg)
        return plan

    def set_poison(self, on: bool = True) -> None:
        """Fill outputs with NaN before every numpy-path launch (tests: unwritten elements fail)."""
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

    def _ports(self, alg):
        from ..algorithm import generation_values

        cache = self.__dict__.setdefault("_port_cache", {})
        if alg.name not in cache:  # outputs sized for the frames the code was generated for
            cache[alg.name] = (tuple(alg.inputs(self.robot)),
                               tuple(alg.outputs(self.robot, **generation_values(alg, self.robot, self))))
        return cache[alg.name]

    def _build(self) -> None:
        """Build (or find in the cache) the library of :attr:`generate_options`."""
        raise NotImplementedError

    def _generated_for(self, alg, position: int, args, kwargs):
        """A call's ``frames`` (the port at ``position``) taken out of its arguments, and the backend
        whose code was generated for them: this one where they are its frames (or not given), else
        the same backend built for them (once per set of frames, kept on this one)."""
        from ..algorithm import generation_values
        from ..model.frames import resolve_frames

        if len(args) > position:
            frames, args = args[position], args[:position] + args[position + 1:]
        else:
            frames = kwargs.pop("frames", None)
        if frames is None:
            return args, kwargs, self
        chosen = resolve_frames(self.robot, frames, alg.name)
        if chosen == generation_values(alg, self.robot, self)["frames"]:
            return args, kwargs, self
        key = tuple(f.name for f in chosen)
        builds = self.__dict__.setdefault("_frame_builds", {})
        if key not in builds:
            other = type(self).__new__(type(self))
            other.__dict__.update(self.__dict__)
            other._forget_plans()
            for derived in ("_port_cache", "_host_plans", "_frame_builds"):
                other.__dict__.pop(derived, None)
            other.generate_options = {**self.generate_options, "frames": key}
            other._build()
            builds[key] = other
        return args, kwargs, builds[key]

    def _call(self, alg, args, kwargs):
        """The general path: any accepted input, validated and converted as needed."""
        out = kwargs.pop("out", None)
        from . import jax_ffi

        values = (*args, *kwargs.values())
        if any(jax_ffi.is_jax(x) for x in values):
            # JAX arrays and tracers: one XLA FFI call (XLA's buffers and stream, jit and vmap)
            return jax_ffi.call(self, alg, args, kwargs, out)
        for x in values:
            if type(x) is not np.ndarray and x is not None and is_device_array(x):
                if not self.accepts_device_arrays:
                    raise InputError(f"{alg.name}: {type(self).__name__} runs on the host; pass numpy arrays, "
                                     "or use RobotHandle for CUDA arrays")
                return self._call_device(alg, args, kwargs, out)
        return self._call_host(alg, args, kwargs, out)

    def _host_plan(self, alg):
        """Per-algorithm call plan of the numpy path, built once: ports, defaults, the C entry."""
        plans = self.__dict__.setdefault("_host_plans", {})
        plan = plans.get(alg.name)
        if plan is None:
            ins, outs = self._ports(alg)
            fn = getattr(self._lib(), f"grid_abi_{alg.name}_{self._suffix()}{self.host_form}")
            nargs = len(outs) + sum(1 for p in ins if p.kind in ("state", "param"))
            fn.argtypes = [ctypes.c_void_p] * nargs + [ctypes.c_int] * 6
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
            from ..reference import bind_inputs

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
            from ..reference import bind_inputs

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
        err = fn(*cargs, n, *self._settings_of(alg.name))
        if err <= NONFINITE_INPUT or err == BAD_QUATERNION:  # found while staging: name the argument
            from ..reference import bind_inputs

            bind_inputs(alg, self.robot, args, kwargs)
            raise InputError(f"{alg.name}: a state input contains NaN or inf" if err != BAD_QUATERNION else
                             f"{alg.name}: argument 'q' holds a free-flyer quaternion not of unit norm")
        self._check(err, f"{alg.name} launch")
        if out is not None:
            return out
        result = [o if batch is not None else o[0] for o in outs]
        return result[0] if len(result) == 1 else tuple(result)

    @staticmethod
    def _pack(plan: _Plan, w, args, out, n: int, address, new_output, pointer):
        """Fill the argument words of a lean call: ``address(x, shape, writable)`` of every
        given array (None when it does not fit), 0 for an omitted optional input, the outputs
        (``out=`` checked the same way, or ``new_output(shape)``) and the batch size.  The
        outputs, or None when anything does not fit (the caller takes the general path)."""
        i = plan.n_out
        for x, shape, req in zip(args, plan.state_shapes, plan.required):
            a = (None if req else 0) if x is None else address(x, (n, *shape), False)
            if a is None:
                return None
            w[i] = a
            i += 1
        for req in plan.required[len(args):]:
            if req:
                return None
            w[i] = 0
            i += 1
        if out is None:
            outs = [new_output((n, *s)) for s in plan.out_shapes]
            for j, o in enumerate(outs):
                w[j] = pointer(o)
        elif plan.n_out == 1:
            outs = [out]
            a = address(out, (n, *plan.out_shapes[0]), True)
            if a is None:
                return None
            w[0] = a
        else:
            return None
        w[plan.i_n] = n
        return outs

    @staticmethod
    def _lean_outputs(plan: _Plan, out, n: int, new_output):
        """The C forms' outputs: fresh (``new_output(shape)``; ``n`` -1: one state, no batch
        axis), or ``out=`` for a single output (checked by the C form); None when ``out=`` is
        given for several."""
        if out is None:
            return tuple([new_output((n, *s) if n >= 0 else s) for s in plan.out_shapes])
        return (out,) if plan.n_out == 1 else None

    def _numpy_fast(self, plan: _Plan, args, out):
        """The lean numpy path: a batch of C-contiguous arrays of the handle's dtype, or one
        state (each input without its batch axis: a batch of one), passed positionally (params
        at their defaults), optional ``out=`` for a single output.  NaN and inf are caught by
        the library while it stages the inputs.  Anything else: the general path."""
        x0 = args[0]
        if len(args) > plan.n_state:
            return _FALLBACK
        one = x0.ndim == plan.rank - 1  # one state: the C form's batch size -1
        if not one and x0.ndim != plan.rank:
            return _FALLBACK
        n = -1 if one else x0.shape[0]
        if n == 0:
            return _FALLBACK
        dt = plan.dtype
        fc = plan.fastcall
        if fc is not None:  # the same, in C (grid_core/runtime/fastcall.c)
            outs = self._lean_outputs(plan, out, n, lambda shape: np.empty(shape, dt))
            if outs is None:
                return _FALLBACK
            err = fc.host(*plan.fast_head, n, outs, plan.out_shapes, args, plan.state_shapes, plan.required)
            if err is None:
                return _FALLBACK
        elif one:  # the Python form: views of a batch of one
            if any(type(x) is not np.ndarray for x in args if x is not None) or \
                    out is not None and type(out) is not np.ndarray:
                return _FALLBACK
            batch = self._numpy_fast(plan, tuple(None if x is None else x[None] for x in args),
                                     None if out is None else out[None])
            if batch is _FALLBACK:
                return _FALLBACK
            if out is not None:
                return out
            return batch[0] if plan.n_out == 1 else tuple(b[0] for b in batch)
        else:
            def address(x, shape, writable):
                if type(x) is not np.ndarray or x.dtype != dt or not x.flags.c_contiguous or x.shape != shape or \
                        writable and not x.flags.writeable:
                    return None
                return _address(x)

            w = plan.words("host")
            outs = self._pack(plan, w, args, out, n, address, lambda shape: np.empty(shape, dt), _address)
            if outs is None:
                return _FALLBACK
            err = plan.host_fn(w)
        if err:
            if err <= NONFINITE_INPUT or err == BAD_QUATERNION:
                return _FALLBACK  # the general path names the argument
            self._check(err, f"{plan.name} launch")
        return outs[0] if len(outs) == 1 else tuple(outs)

    # CUDA arrays: only a backend that runs on the GPU takes them
    accepts_device_arrays = False

    def _lean_path_for(self, t: type):
        """The lean path for arguments of type ``t`` (by its first argument), or None."""
        if t is np.ndarray:
            return AbiBackend._numpy_fast
        module = t.__module__.split(".", 1)[0]
        if module in ("jax", "jaxlib") and t.__name__ == "ArrayImpl":
            from . import jax_ffi

            return jax_ffi.lean
        if not self.accepts_device_arrays:
            return None
        if module == "torch" and t.__name__ == "Tensor":
            return AbiBackend._torch_fast
        if module == "cupy" and t.__name__ == "ndarray":
            return AbiBackend._cupy_fast
        return None

    def _launch_packed(self, plan: _Plan, w, outs, stream: int):
        w[plan.i_n + 5] = stream
        err = plan.device_fn(w)
        if err:
            self._check(err, f"{plan.name} launch")
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _device_fastcall(self, plan: _Plan, args, out, n: int, protocol: int, array_type, dtype, dev: int,
                         new_output, stream: int):
        """The lean CUDA-array path in C: outputs allocated here (``new_output(shape)``) unless
        ``out=`` is given, every array checked and the launch made by ``fastcall.device``."""
        outs = self._lean_outputs(plan, out, n, new_output)
        if outs is None:
            return _FALLBACK
        err = plan.fastcall.device(*plan.fast_device_head, protocol, array_type, dtype, dev, stream, n, outs,
                                   plan.out_shapes, args, plan.state_shapes, plan.required)
        if err is None:
            return _FALLBACK
        if err:
            self._check(err, f"{plan.name} launch")
        return outs[0] if len(outs) == 1 else outs

    def _cupy_fast(self, plan: _Plan, args, out):
        """The lean path for C-contiguous CuPy arrays of the handle's dtype on the current
        device, passed positionally (params at their defaults), optional ``out=`` for a
        single output; launched on CuPy's current stream.  Anything else: the general path."""
        ndarray, current_stream, current_device, empty = plan.cupy or plan.cupy_parts()
        x0 = args[0]
        if len(args) > plan.n_state or x0.ndim != plan.rank or x0.shape[0] == 0:
            return _FALLBACK
        dev, dt = current_device(), plan.dtype
        if plan.fastcall is not None:  # the same, in C (grid_core/runtime/fastcall.c)
            return self._device_fastcall(plan, args, out, x0.shape[0], _CUPY, ndarray, dt, dev,
                                         lambda shape: empty(shape, dt), current_stream().ptr)

        def address(x, shape, writable):
            if type(x) is not ndarray or x.dtype != dt or not x.flags.c_contiguous or x.device.id != dev or \
                    x.shape != shape:
                return None
            return x.data.ptr

        w = plan.words("device")
        outs = self._pack(plan, w, args, out, x0.shape[0], address, lambda shape: empty(shape, dt),
                          lambda o: o.data.ptr)
        if outs is None:
            return _FALLBACK
        return self._launch_packed(plan, w, outs, current_stream().ptr)

    def _torch_fast(self, plan: _Plan, args, out):
        """The lean path for contiguous CUDA tensors of the handle's dtype on one device,
        passed positionally (params at their defaults), optional ``out=`` for a single
        output; launched on the current stream.  Anything else: the general path."""
        tensor, tdtype, raw_stream = plan.torch or plan.torch_parts()
        x0 = args[0]
        if len(args) > plan.n_state:
            return _FALLBACK
        dev = x0.get_device()
        if dev < 0 or x0.dim() != plan.rank or x0.shape[0] == 0:
            return _FALLBACK
        if plan.fastcall is not None:  # the same, in C (grid_core/runtime/fastcall.c)
            return self._device_fastcall(plan, args, out, x0.shape[0], _TORCH, tensor, tdtype, dev, x0.new_empty,
                                         raw_stream(dev))

        def address(x, shape, writable):
            if type(x) is not tensor or x.dtype is not tdtype or x.get_device() != dev or not x.is_contiguous() \
                    or x.shape != shape:
                return None
            return x.data_ptr()

        w = plan.words("device")
        # x0 has the dtype and the device of the outputs
        outs = self._pack(plan, w, args, out, x0.shape[0], address, x0.new_empty, tensor.data_ptr)
        if outs is None:
            return _FALLBACK
        return self._launch_packed(plan, w, outs, raw_stream(dev))

    def _call_device(self, alg, args, kwargs, out):
        """CUDA arrays in -> the same kind out, on the framework's current stream, no host copy.

        Shapes and dtypes are checked (a dtype other than the handle's is converted on the
        device); values are not scanned for NaN, which would cost a device reduction."""
        from ..reference import bind_arguments
        from . import arrays

        ins, outs_p = self._ports(alg)
        given = bind_arguments(alg.name, ins, args, kwargs)
        like = None
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
            like = like or d
            states.append((p, d))
        batch = batch_of(alg.name, [(p, d.shape) for p, d in filter(None, states)], "CUDA")
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
        self._check(err, f"{alg.name} launch")
        result = [d.obj for d in wrapped]
        return result[0] if len(result) == 1 else tuple(result)

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

        # the frames are fixed when the code is generated: a call with others runs a build for them
        frames_at = next((i for i, p in enumerate(alg.inputs(self.robot)) if p.kind == "option"), None)

        def method(*args, out=None, **kwargs):
            if frames_at is not None:
                args, kwargs, target = self._generated_for(alg, frames_at, args, kwargs)
                if target is not self:
                    return getattr(target, name)(*args, out=out, **kwargs)
            if args and not kwargs:
                plan = self._plan(alg)
                if plan.ok:
                    t = type(args[0])
                    try:
                        fast = plan.paths[t]
                    except KeyError:
                        fast = plan.paths[t] = self._lean_path_for(t)
                    if fast is not None:
                        result = fast(self, plan, args, out)
                        if result is not _FALLBACK:
                            return result
            if out is not None:
                kwargs["out"] = out
            return self._call(alg, args, kwargs)

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
        return {"grid.cuh": header, "abi.cpp": abi_source(self.robot, self.algorithms, "grid.cuh", ns,
                                                          frames=self.generate_options.get("frames"))}

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
