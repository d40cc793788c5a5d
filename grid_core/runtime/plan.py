"""The call plan of one algorithm on one backend, and the one place a call's inputs are judged.

A :class:`CallPlan` is built once per algorithm and launch configuration: the ports, the C
entries (:data:`grid_core.abi.PACKED_TAIL`) and their prefilled argument words.  A call is
checked by it once, whatever arrays carry it: the arguments are bound to the ports,
the kind of the arrays picks an adapter (:mod:`.adapters`: numpy, PyTorch, CUDA arrays;
:mod:`.jax_ffi`: JAX), and through that adapter's view of each array the plan checks where it
lives (``device``), its dtype (real), its shape (one state, or a batch ``(N, ...)``) and batch
size, the params (finite, of their shape) and ``out=`` (writable, C-contiguous, of the handle's
dtype and the outputs' shape).  The values of arrays in host memory are checked by the library
while it reads them (NaN and inf; a free-flyer quaternion of q not of unit norm), and its code
becomes the error naming the argument here (:meth:`CallPlan.failure`).  Every refusal is a
one-line :class:`~grid_core.errors.InputError` whose text is the same for every kind of array
and the Reference's own (:mod:`grid_core.reference`).

Then :meth:`CallPlan.run` executes the checked call on the adapter: a function of the backend,
the plan and checked arrays, which is what a framework's custom operator calls.  The lean paths
(numpy, PyTorch, CuPy, JAX arrays passed positionally that fit exactly) skip the checks' Python
and decline (:data:`~.adapters.DECLINED`) whatever they do not take, never raising: the checked
path then takes the call.
"""

from __future__ import annotations

import copy
import ctypes
import math
import threading

import numpy as np

from ..abi import BAD_QUATERNION, NONFINITE_INPUT, PACKED_TAIL
from ..errors import InputError
from ..model.robot import QUATERNION_TOLERANCE
from ..reference import PortErrors, bind_arguments, check_quaternions, is_configuration
from . import adapters, jax_ffi


_NUMPY_SCALARS = (np.float64, np.float32, np.int64, np.int32)
_BOUND_VIEWS = 16
"""How many sets of param values a plan keeps a view of (:meth:`CallPlan.bound`)."""


class CallPlan:
    """Everything one algorithm's calls on one backend need, built once: the ports, the packed C
    entries, the default params and per-thread argument words (ctypes releases the GIL during a
    call, so two threads never share one array); the checks of a call; its launch."""

    def __init__(self, backend, alg):
        ins, outs = backend._ports(alg)
        self.alg, self.name, self.dtype, self.robot = alg, alg.name, backend.dtype, backend.robot
        self.ins, self.outs = ins, outs
        self.states = tuple(p for p in ins if p.kind == "state")
        self.params = tuple(p for p in ins if p.kind == "param")
        # tuples: the C form (fastcall.c) takes them as they are
        self.state_shapes = tuple(p.shape for p in self.states)
        self.required = tuple(not p.optional for p in self.states)
        self.out_shapes = tuple(p.shape for p in outs)
        self.rank = len(self.states[0].shape) + 1 if self.states else -1
        self.n_out, self.n_state = len(outs), len(self.states)
        self.configuration = next((k for k, p in enumerate(self.states) if is_configuration(p, self.robot)), None)
        lo, hi = (1 - QUATERNION_TOLERANCE) ** 2, (1 + QUATERNION_TOLERANCE) ** 2  # as the library's check
        self.values_head = (-1 if self.configuration is None else self.configuration, self.robot.nq,
                            tuple(self.robot.quaternion_indices), lo, hi)  # fastcall.values's
        self.defaults = tuple(None if p.default is None else np.ascontiguousarray(p.default, dtype=self.dtype)
                              for p in self.params)
        # the lean paths take params at their defaults only (or at the values of a view, :meth:`bound`)
        self.ok = bool(self.states) and all(d is not None for d in self.defaults)
        self.param_values = (None,) * len(self.params)  # float64 values (None: the default), the JAX path's
        k = self.i_n = self.n_out + self.n_state + len(self.params)
        self._settings = backend._settings_of(alg.name)
        lib, stem = backend._lib(), f"grid_abi_{alg.name}_{backend._suffix()}"
        self.host_fn = getattr(lib, f"{stem}{backend.host_form}_packed")  # no argtypes: an array passes as its address
        self.device_fn = getattr(lib, f"{stem}_packed")
        # the C form of the lean paths (grid_core.runtime.fastcall), when it could be built
        from . import fastcall

        # (its fixed-size word and array tables: an algorithm with more ports takes the Python form)
        fits = k + len(PACKED_TAIL) <= fastcall.MAX_WORDS and self.n_out + self.n_state <= fastcall.MAX_ARRAYS
        self.fastcall = fastcall.module() if fits else None
        self._prefill()
        self.torch = None  # (Tensor type, dtype, current raw stream, host output), on the first tensor
        self.cupy = None  # (ndarray type, current stream, current device, empty), on the first CuPy array
        self.jax: dict = {}  # inputs given -> the jitted FFI call, params at :attr:`param_values` (runtime.jax_ffi)
        self.paths: dict = {}  # argument type -> its lean path (or None: the checked path)
        # the leading inputs a lean call may give positionally with its params of no default (the integrator's
        # q, qd, tau, dt): states and scalar params only, up to the last param without a default; else None
        last = max((i for i, p in enumerate(ins) if p.kind == "param" and p.default is None), default=None)
        lead = ins[:last + 1] if last is not None else ()
        self._lead = lead if lead and all(p.kind == "state" or p.kind == "param" and p.shape == () for p in lead) \
            else None
        self._bound: dict = {}  # param values -> the view of them (bound)

    def _prefill(self) -> None:
        """The entries' prefilled argument words (the params' at :attr:`defaults`), per-thread
        words and the C form's heads."""
        k = self.i_n
        layout, tier, threads, blocks, transfer = self._settings
        words = [0] * (k + len(PACKED_TAIL))
        words[self.n_out + self.n_state:k] = [0 if d is None else d.ctypes.data for d in self.defaults]
        words[k + 1:k + 5] = [layout, tier, threads, blocks]
        self._type = ctypes.c_uint64 * len(words)
        # each entry's prefilled words; read by the C form and copied per thread, never written
        self._templates = {"host": self._type(*words[:-1], transfer), "device": self._type(*words)}
        self.local = threading.local()
        self.fast_head = (ctypes.cast(self.host_fn, ctypes.c_void_p).value, ctypes.addressof(self._templates["host"]),
                          len(words), k, self.dtype.itemsize, self.dtype.char)
        self.fast_host_head = self.fast_head[:4]  # the host entry's head for the device form (PyTorch in host memory)
        self.fast_device_head = (ctypes.cast(self.device_fn, ctypes.c_void_p).value,
                                 ctypes.addressof(self._templates["device"]), len(words), k)

    def bound(self, args):
        """``(view, states)`` for a lean call whose arguments ``args`` are the leading inputs up to
        its last param without a default (the integrator's ``(q, qd, tau, dt)``), those params
        finite Python or numpy numbers: the view is this plan with them as its params' values (made
        once per set of values, a few kept), ``states`` the other arguments; None for any other
        call (the checked path takes it, and names what is wrong)."""
        lead = self._lead
        if lead is None or len(args) != len(lead):
            return None
        states, values = [], []
        for a, p in zip(args, lead):
            if p.kind == "state":
                states.append(a)
            elif type(a) in (float, int) or type(a) in _NUMPY_SCALARS:
                values.append(float(a))
            else:
                return None
        key = tuple(values)
        view = self._bound.get(key)
        if view is None:
            if not all(map(math.isfinite, key)):
                return None
            if len(self._bound) >= _BOUND_VIEWS:
                self._bound.pop(next(iter(self._bound)))
            given = dict(zip((p.name for p in lead if p.kind == "param"), key))
            view = copy.copy(self)
            view.defaults = tuple(np.full((), given[p.name], self.dtype) if p.name in given else d
                                  for p, d in zip(self.params, self.defaults))
            view.param_values = tuple(given.get(p.name) for p in self.params)
            view.ok, view.jax, view._lead, view._bound = True, {}, None, {}
            view._prefill()
            self._bound[key] = view
        return view, tuple(states)

    # -- the checks ---------------------------------------------------------------------------

    def call(self, backend, args, kwargs, out):
        """The checked path: any accepted arguments, judged once, then run."""
        given = bind_arguments(self.name, self.ins, args, kwargs)
        xs = [given.get(p.name) for p in self.states]
        adapter = self.adapter_of(backend, xs)
        views, batch = self.check_states(adapter, xs)
        params = self.check_params(given)
        outs = self.check_out(adapter, out, batch)
        if adapter.tensors:
            from . import autograd_torch

            if autograd_torch.wants_grad(views):  # tensors that require grad: the autograd operator
                return autograd_torch.apply(backend, self, views, batch, params, outs)
        return self.run(backend, adapter, views, batch, params, outs, out)

    def adapter_of(self, backend, xs):
        """The adapter of the arrays' kind, refusing an array where the backend cannot run: JAX
        arrays (numpy ones among them are JAX constants), CUDA arrays (all of them, and only on a
        backend that runs on the GPU), PyTorch tensors in host memory, numpy."""
        given = [(p, x) for p, x in zip(self.states, xs) if x is not None]
        cls = type(backend).__name__
        on_device = [(p, x) for p, x in given if adapters.is_device_array(x)]
        if on_device and not backend.accepts_device_arrays:
            p, x = on_device[0]
            raise InputError(f"{self.name}: argument '{p.name}' is on {adapters.device_of(x)} and {cls} runs on the "
                             "host; pass numpy arrays (or PyTorch tensors and JAX arrays on the CPU), or use "
                             "RobotHandle for CUDA arrays")
        if any(jax_ffi.is_jax(x) for _, x in given):
            return jax_ffi.JAX
        if on_device:
            host = next((p for p, x in given if not adapters.is_device_array(x)), None)
            if host is not None:
                raise InputError(f"{self.name}: argument '{host.name}' is on the host while others are CUDA arrays; "
                                 "pass every array on the same side")
            return adapters.CUDA
        tensors = [(p, x) for p, x in given if adapters.is_torch(x)]
        for p, x in tensors:
            if x.device.type != "cpu":
                where = "in host memory or on a CUDA device" if backend.accepts_device_arrays else "in host memory"
                raise InputError(f"{self.name}: argument '{p.name}' is on device {x.device}, where {cls} cannot run; "
                                 f"pass arrays {where}")
        return adapters.TORCH_HOST if tensors else adapters.NUMPY

    def check_states(self, adapter, xs) -> tuple[list, int | None]:
        """Each state input through ``adapter``'s view of it (None where omitted): given if
        required, of a real dtype, of its port's shape or ``(N, *shape)``, one batch size N for
        all (a single state among a batch is broadcast over it, as the Reference does).  The
        views and the batch size (None: single states)."""
        views, batch, first = [], None, None
        for p, x in zip(self.states, xs):
            if x is None:
                if not p.optional:
                    raise self.errors(p).required()
                views.append(None)
                continue
            v, shape, dtype, real = adapter.describe(self, p, x)
            if not real:
                raise self.errors(p).dtype(dtype)
            if shape == p.shape:
                n = None
            elif len(shape) == len(p.shape) + 1 and shape[1:] == p.shape:
                n = shape[0]
            else:
                raise self.errors(p).shape_of(shape)
            if n is not None:
                if batch is not None and n != batch:
                    raise self.errors(p).batch(n, first, batch)
                batch, first = n, p.name
            views.append(v)
        return views, batch

    def errors(self, port) -> PortErrors:
        """The errors of one input port (grid_core.reference: the Reference's own texts)."""
        return PortErrors(self.name, port.name, port.shape, port.kind == "state")

    def check_params(self, given) -> tuple:
        """Each param as float64 values, finite and of its port's shape (None: its default);
        a traced JAX value is refused, for it is an attribute of the call."""
        values = []
        for p, default in zip(self.params, self.defaults):
            x = given.get(p.name)
            if x is None:
                if default is None:
                    raise self.errors(p).required()
                values.append(None)
                continue
            try:
                a = np.asarray(x, dtype=np.float64)
            except Exception as exc:  # a tracer (jax.errors.TracerArrayConversionError and kin), a string
                if jax_ffi.is_jax(x):
                    raise InputError(f"{self.name}: argument '{p.name}' must be a concrete value (under jax.jit, pass "
                                     f"it as a static argument or a Python number): {type(exc).__name__}") from None
                a = None
            if a is None or a.shape != p.shape or not np.isfinite(a).all():
                raise InputError(f"{self.name}: argument '{p.name}' must be finite with shape {p.shape}")
            values.append(a)
        return tuple(values)

    def check_out(self, adapter, out, batch) -> tuple | None:
        """``out=``: one array per output, each written in place by ``adapter``."""
        if out is None:
            return None
        if adapter.immutable:
            raise InputError(f"{self.name}: JAX arrays are immutable; out= is not taken with JAX inputs")
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != self.n_out:
            raise InputError(f"{self.name}: out= needs {self.n_out} array(s)")
        for o, p in zip(outs, self.outs):
            shape = p.shape if batch is None else (batch, *p.shape)
            if not adapter.writable(o, shape, self.dtype):
                raise InputError(f"{self.name}: out= for '{p.name}' must be a writable C-contiguous "
                                 f"{self.dtype.name} array of shape {shape}, of the inputs' kind")
        return outs

    def values_code(self, arrays) -> int | None:
        """What the library would say of the values of these state inputs in host memory (None
        where omitted), which no library reads first (JAX arrays): 0, or its code for an input it
        refuses (:meth:`failure`); None where the C form (``fastcall.values``) cannot tell (not
        built, or an array it cannot read as the inputs' shapes)."""
        fc = self.fastcall
        return None if fc is None else fc.values(tuple(arrays), self.state_shapes, *self.values_head)

    def check_values(self, arrays) -> None:
        """Values of state inputs in host memory (None where omitted), of shapes checked already,
        which no library reads first (JAX arrays): finite, and q's free-flyer quaternions of unit
        norm (in C, :meth:`values_code`; the error named here)."""
        if self.values_code(arrays) == 0:
            return
        arrays = [None if a is None else _values_of(a) for a in arrays]
        for p, a in zip(self.states, arrays):
            if a is not None and not np.isfinite(a).all():
                raise self.errors(p).nonfinite()
        if self.configuration is not None and arrays[self.configuration] is not None:
            check_quaternions(self.name, "q", arrays[self.configuration], self.robot)

    def failure(self, code: int, arrays, batch) -> InputError | None:
        """The error a host entry's ``code`` means, naming the argument (the state inputs as it
        read them: ``(n, *shape)`` arrays, None where omitted); None for a code of another kind."""
        if code <= NONFINITE_INPUT:
            p = self.states[NONFINITE_INPUT - code]
            return self.errors(p).nonfinite()
        if code == BAD_QUATERNION:
            q = arrays[self.configuration]
            try:
                check_quaternions(self.name, "q", q if batch is not None else q[0], self.robot)
            except InputError as exc:
                return exc
            return InputError(f"{self.name}: argument 'q' holds a free-flyer quaternion not of unit norm")
        return None

    # -- running a checked call ---------------------------------------------------------------

    def run(self, backend, adapter, views, batch, params=None, outs=None, out=None):
        """A checked call on ``adapter``: the state inputs' views (None where omitted) as
        :meth:`check_states` returned them, the batch size (None: single states), the params
        (float64 values, None or omitted: their defaults) and the outputs (checked ``out=``, the
        caller's ``out`` returned as given; None: new ones of the inputs' kind)."""
        if params is None:
            params = (None,) * len(self.params)
        result = adapter.run(backend, self, views, batch, params, outs)
        return result if out is None else out

    def param_arrays(self, params) -> list[np.ndarray]:
        """The params as the library reads them: host arrays of the handle's dtype."""
        return [d if v is None else np.ascontiguousarray(v, dtype=self.dtype) for v, d in zip(params, self.defaults)]

    def words(self, entry: str):
        """This thread's argument words for the ``"host"`` or ``"device"`` entry (params at
        their defaults: the lean paths' own)."""
        local = self.local.__dict__
        w = local.get(entry)
        if w is None:
            w = local[entry] = self._type.from_buffer_copy(self._templates[entry])
        return w

    def launch(self, entry: str, outs, states, params, n: int, stream: int | None = None) -> int:
        """Call the packed ``"host"`` or ``"device"`` entry on addresses (0 for an omitted
        input), params (host arrays of the handle's dtype, kept alive by the caller) and the
        batch size; the entry's code."""
        w = self._type.from_buffer_copy(self._templates[entry])
        values = [*outs, *states, *map(adapters.address_of, params)]
        w[:len(values)] = values
        w[self.i_n] = n
        if stream is not None:
            w[self.i_n + 5] = stream
        return (self.host_fn if entry == "host" else self.device_fn)(w)

    def torch_parts(self):
        import torch

        dt, from_numpy = self.dtype, torch.from_numpy
        # the raw current stream: torch.cuda.current_stream() builds a Stream object (~5 µs)
        self.torch = (torch.Tensor, torch.float32 if dt == np.float32 else torch.float64,
                      getattr(torch._C, "_cuda_getCurrentRawStream", None),  # (absent from a CPU build)
                      lambda shape: from_numpy(np.empty(shape, dt)))  # a host output: a fraction of torch.empty's cost
        return self.torch

    def cupy_parts(self):
        import cupy

        self.cupy = (cupy.ndarray, cupy.cuda.get_current_stream, cupy.cuda.runtime.getDevice, cupy.empty)
        return self.cupy


def _values_of(x) -> np.ndarray | None:
    """The values of an array in host memory; None for one that holds none (a JAX tracer)."""
    try:
        return np.asarray(x)
    except Exception:  # jax.errors.TracerArrayConversionError
        return None


def lean_path_for(backend, t: type):
    """The lean path for arguments of type ``t`` (by the first argument), or None."""
    if t is np.ndarray:
        return adapters.numpy_lean
    module = t.__module__.split(".", 1)[0]
    if module in ("jax", "jaxlib") and t.__name__ == "ArrayImpl":
        return jax_ffi.lean
    if module == "torch" and t.__name__ == "Tensor":
        return adapters.torch_lean  # host memory on any backend, CUDA memory on the GPU's
    if module == "cupy" and t.__name__ == "ndarray" and backend.accepts_device_arrays:
        return adapters.cupy_lean
    return None
