"""How each kind of array reaches the library, without importing any framework before its
arrays arrive.  JAX arrays take another road, an XLA FFI call (:mod:`.jax_ffi`).

- :data:`NUMPY`: numpy arrays and anything ``numpy.asarray`` takes, in host memory.
- :data:`TORCH_HOST`: PyTorch tensors in host memory (numpy arrays among them), read in place
  as numpy arrays; tensors out.
- :data:`CUDA`: PyTorch tensors and CuPy arrays on a CUDA device, and anything exposing
  ``__cuda_array_interface__`` or a CUDA ``__dlpack__`` (viewed through CuPy): read in place
  by device address; outputs made by the same framework on the same device, launched on its
  current stream (no host round trip).

Each adapter describes an array to the call plan (:mod:`.plan`, which judges it), tells whether
an array can take an output in place, and runs a checked call: host memory through the
library's host entry, which checks the values while it reads them; CUDA memory through the
device entry, values unscanned (that would cost a device reduction).  An array is read in
place where it is C-contiguous and of the handle's dtype, and copied (converted) otherwise.

The lean paths (:func:`numpy_lean`, :func:`torch_lean`, :func:`cupy_lean`) take positional
arrays that fit exactly, checked and packed by the C form of the call path
(:mod:`.fastcall`) or its Python form; they return :data:`DECLINED` for anything else.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..abi import BAD_QUATERNION, NONFINITE_INPUT

DECLINED = object()
"""A lean path's answer to a call it does not take: the checked path (:mod:`.plan`) takes it."""
KDL_CUDA = 2  # DLPack's kDLCUDA
_TORCH, _CUPY = 0, 1  # fastcall's array protocols (fastcall.c)
_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _module(x) -> str:
    return type(x).__module__.split(".", 1)[0]


def is_torch(x) -> bool:
    return _module(x) == "torch"


def is_device_array(x) -> bool:
    """Whether ``x`` lives in CUDA memory (a CUDA tensor, a CuPy array, anything exposing
    ``__cuda_array_interface__`` or a CUDA ``__dlpack__``)."""
    if x is None or isinstance(x, (np.ndarray, list, tuple, float, int)):
        return False
    if is_torch(x):
        return bool(getattr(x, "is_cuda", False))
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__"):
        try:
            return x.__dlpack_device__()[0] == KDL_CUDA
        except Exception:
            return False
    return False


def device_of(x) -> str:
    """Where a CUDA array lives, in words."""
    return f"device {x.device}" if is_torch(x) else "a CUDA device"


def address_of(a: np.ndarray) -> int:
    """The data address of a C-contiguous, non-empty array: through the buffer protocol (a
    fraction of ``a.ctypes.data``'s cost, which matters on a call path of a few µs)."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError, BufferError):  # read-only
        return a.ctypes.data


def _torch_dtype_name(dtype: np.dtype) -> str:
    return f"torch.{np.dtype(dtype).name}"


def _describe_torch(x):
    dt = x.dtype
    real = dt.is_floating_point or not (dt.is_complex or str(dt) == "torch.bool")
    return x, tuple(x.shape), str(dt).removeprefix("torch."), real


# -- the checked path's adapters ----------------------------------------------------------


class HostArrays:
    """numpy arrays, and anything ``numpy.asarray`` takes (lists, scalars)."""

    immutable = False
    tensors = False  # PyTorch tensors among the arrays (which may require grad)

    @staticmethod
    def describe(plan, port, x):
        """``(view, shape, dtype, real)`` of the input ``x`` of ``port``."""
        if not isinstance(x, np.ndarray):
            try:
                x = np.asarray(x)
            except Exception as exc:  # ragged lists and the like
                raise plan.errors(port).not_an_array(exc) from None
        return x, x.shape, x.dtype, x.dtype.kind in "fiu"

    @staticmethod
    def writable(o, shape, dtype) -> bool:
        return isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == shape and o.flags.c_contiguous and \
            o.flags.writeable

    @staticmethod
    def run(backend, plan, views, batch, params, outs):
        return run_host(backend, plan, views, batch, params, outs)


def run_host(backend, plan, views, batch, params, outs):
    """A checked call on numpy arrays through the host entry: each input as ``(n, *shape)``
    (a single state among a batch broadcast over it), C-contiguous and of the handle's dtype, in
    place where it already is; ``outs`` written in place, or new arrays."""
    dt, n = plan.dtype, 1 if batch is None else batch
    arrays = []
    for v, p in zip(views, plan.states):
        if v is not None:
            if v.ndim == len(p.shape):
                v = v[None] if batch is None else np.broadcast_to(v, (n, *p.shape))
            if v.dtype != dt or not v.flags.c_contiguous:
                v = np.ascontiguousarray(v, dtype=dt)
        arrays.append(v)
    shapes = [(n, *p.shape) for p in plan.outs]
    results = [np.empty(s, dt) for s in shapes] if outs is None else [o.reshape(s) for o, s in zip(outs, shapes)]
    code = plan.launch("host", [address_of(r) for r in results], [0 if a is None else address_of(a) for a in arrays],
                       plan.param_arrays(params), n)
    if code:
        error = plan.failure(code, arrays, batch)
        if error is not None:
            raise error
        backend._check(code, f"{plan.name} launch")
    if batch is None:
        results = [r[0] for r in results]
    return results[0] if len(results) == 1 else tuple(results)


class TorchHost(HostArrays):
    """PyTorch tensors in host memory, numpy arrays among them: read in place as numpy arrays
    (converted first where of another dtype), tensors out."""

    tensors = True

    @staticmethod
    def describe(plan, port, x):
        return _describe_torch(x) if is_torch(x) else HostArrays.describe(plan, port, x)

    @staticmethod
    def writable(o, shape, dtype) -> bool:
        return is_torch(o) and o.device.type == "cpu" and str(o.dtype) == _torch_dtype_name(dtype) and \
            tuple(o.shape) == shape and o.is_contiguous()

    @staticmethod
    def run(backend, plan, views, batch, params, outs):
        import torch

        want = torch.float32 if plan.dtype == np.float32 else torch.float64
        # a tensor of the handle's dtype that requires no grad is viewed as it is (detach and to cost a µs each)
        arrays = [(v.numpy() if v.dtype is want and not v.requires_grad else v.detach().to(want).numpy())
                  if is_torch(v) else v for v in views]
        result = run_host(backend, plan, arrays, batch, params, None if outs is None else
                          [o.detach().numpy() for o in outs])
        return tuple(map(torch.from_numpy, result)) if isinstance(result, tuple) else torch.from_numpy(result)


class DeviceArrays:
    """Arrays in CUDA memory: PyTorch tensors, CuPy arrays, and anything else exposing
    ``__cuda_array_interface__`` or a CUDA ``__dlpack__`` (viewed through CuPy)."""

    immutable = False
    tensors = True

    @staticmethod
    def describe(plan, port, x):
        if is_torch(x):
            return _describe_torch(x)
        x = _as_cupy(x)
        return x, tuple(x.shape), x.dtype, x.dtype.kind in "fiu"

    @staticmethod
    def writable(o, shape, dtype) -> bool:
        if is_torch(o):
            return bool(o.is_cuda) and str(o.dtype) == _torch_dtype_name(dtype) and tuple(o.shape) == shape and \
                o.is_contiguous()
        return _module(o) == "cupy" and o.dtype == dtype and tuple(o.shape) == shape and o.flags.c_contiguous

    @staticmethod
    def run(backend, plan, views, batch, params, outs):
        """On the device, on the framework's current stream, no host copy: a dtype other than
        the handle's converted there; values not scanned."""
        n = 1 if batch is None else batch
        arrays = [None if v is None else _on_device(v, plan.dtype, p.shape, batch) for v, p in zip(views, plan.states)]
        like = next(a for a in arrays if a is not None)
        results = list(outs) if outs is not None else \
            [_empty_like(like, p.shape if batch is None else (n, *p.shape), plan.dtype) for p in plan.outs]
        code = plan.launch("device", [_device_pointer(r) for r in results],
                           [0 if a is None else _device_pointer(a) for a in arrays], plan.param_arrays(params), n,
                           _stream_of(like))
        backend._check(code, f"{plan.name} launch")
        return results[0] if len(results) == 1 else tuple(results)


def _as_cupy(x):
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    return cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)


def _on_device(x, dtype, shape, batch):
    """``x`` contiguous, of ``dtype``, a single state among a batch broadcast over it: the same
    memory where it already is, a device-side copy where not."""
    if is_torch(x):
        import torch

        if batch is not None and x.dim() == len(shape):
            x = x.expand(batch, *shape)
        return x.to(torch.float32 if dtype == np.float32 else torch.float64).contiguous()
    import cupy

    if batch is not None and x.ndim == len(shape):
        x = cupy.broadcast_to(x, (batch, *shape))
    return cupy.ascontiguousarray(x, dtype=dtype)


def _device_pointer(x) -> int:
    return int(x.data_ptr()) if is_torch(x) else int(x.data.ptr)


def _empty_like(like, shape, dtype):
    """An output array of ``like``'s framework, on its device."""
    if is_torch(like):
        return like.new_empty(shape, dtype=like.dtype)
    import cupy

    with cupy.cuda.Device(like.device.id):
        return cupy.empty(shape, dtype=dtype)


def _stream_of(like) -> int:
    """The framework's current stream on ``like``'s device."""
    if is_torch(like):
        import torch

        return int(torch.cuda.current_stream(like.device).cuda_stream)
    import cupy

    return int(cupy.cuda.get_current_stream().ptr)


NUMPY, TORCH_HOST, CUDA = HostArrays(), TorchHost(), DeviceArrays()


# -- the lean paths -----------------------------------------------------------------------


def _pack(plan, w, args, out, n: int, address, new_output, pointer):
    """Fill the argument words of a lean call: ``address(x, shape, writable)`` of every given
    array (None when it does not fit), 0 for an omitted optional input, the outputs (``out=``
    checked the same way, or ``new_output(shape)``) and the batch size (``n`` -1: one state,
    every array without the batch axis).  The outputs, or None when anything does not fit."""
    def full(shape):
        return shape if n < 0 else (n, *shape)

    i = plan.n_out
    for x, shape, req in zip(args, plan.state_shapes, plan.required):
        a = (None if req else 0) if x is None else address(x, full(shape), False)
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
        outs = [new_output(full(s)) for s in plan.out_shapes]
        for j, o in enumerate(outs):
            w[j] = pointer(o)
    elif plan.n_out == 1:
        outs = [out]
        a = address(out, full(plan.out_shapes[0]), True)
        if a is None:
            return None
        w[0] = a
    else:
        return None
    w[plan.i_n] = max(n, 1)
    return outs


def _lean_outputs(plan, out, n: int, new_output):
    """The C form's outputs: fresh (``new_output(shape)``; ``n`` -1: one state, no batch axis),
    or ``out=`` for a single output (checked by the C form); None when ``out=`` is given for
    several."""
    if out is None:
        return tuple([new_output((n, *s) if n >= 0 else s) for s in plan.out_shapes])
    return (out,) if plan.n_out == 1 else None


def _lean_result(backend, plan, err, outs):
    """A lean call's outputs; DECLINED for an input the library refused (the checked path names
    it)."""
    if err:
        if err <= NONFINITE_INPUT or err == BAD_QUATERNION:
            return DECLINED
        backend._check(err, f"{plan.name} launch")
    return outs[0] if len(outs) == 1 else tuple(outs)


def _batch_of(plan, x0, rank: int) -> int | None:
    """The lean batch size: -1 for one state (``rank`` one less than a batch's), None when the
    call is not for a lean path."""
    one = rank == plan.rank - 1
    if not one and (rank != plan.rank or x0.shape[0] == 0):
        return None
    return -1 if one else x0.shape[0]


def numpy_lean(backend, plan, args, out):
    """The lean numpy path: a batch of C-contiguous arrays of the handle's dtype, or one state
    (each input without its batch axis: a batch of one), passed positionally (params at their
    defaults), optional ``out=`` for a single output.  NaN and inf (and a free-flyer quaternion
    not of unit norm) are caught by the library while it reads the inputs."""
    x0 = args[0]
    n = _batch_of(plan, x0, x0.ndim)
    if n is None or len(args) > plan.n_state:
        return DECLINED
    dt = plan.dtype
    fc = plan.fastcall
    if fc is not None:  # the same, in C (grid_core/runtime/fastcall.c)
        outs = _lean_outputs(plan, out, n, lambda shape: np.empty(shape, dt))
        if outs is None:
            return DECLINED
        err = fc.host(*plan.fast_head, n, outs, plan.out_shapes, args, plan.state_shapes, plan.required)
        if err is None:
            return DECLINED
    else:
        def address(x, shape, writable):
            if type(x) is not np.ndarray or x.dtype != dt or not x.flags.c_contiguous or x.shape != shape or \
                    writable and not x.flags.writeable:
                return None
            return address_of(x)

        w = plan.words("host")
        outs = _pack(plan, w, args, out, n, address, lambda shape: np.empty(shape, dt), address_of)
        if outs is None:
            return DECLINED
        err = plan.host_fn(w)
    return _lean_result(backend, plan, err, outs)


def _device_lean(backend, plan, args, out, n: int, protocol: int, array_type, dtype, dev: int, new_output, stream,
                 fits, pointer):
    """The lean path of arrays read by attribute (PyTorch, CuPy), on the device entry (CUDA
    memory, launched on ``stream``) or, with ``dev`` -1, on the host entry (PyTorch tensors in
    host memory, ``stream`` None): in C where it could be built (``fastcall.device``), else
    packed here (``fits(x, shape, writable, array_type, dtype, dev)``: the address of an array
    that fits, else None; ``pointer(o)``: a new output's)."""
    host = dev < 0
    if plan.fastcall is not None:
        outs = _lean_outputs(plan, out, n, new_output)
        if outs is None:
            return DECLINED
        head = plan.fast_head[:4] if host else plan.fast_device_head
        err = plan.fastcall.device(*head, protocol, array_type, dtype, dev, stream, n, outs, plan.out_shapes, args,
                                   plan.state_shapes, plan.required, out is None)  # (outputs made here: trusted)
        if err is None:
            return DECLINED
    else:
        w = plan.words("host" if host else "device")
        outs = _pack(plan, w, args, out, n, lambda x, shape, writable: fits(x, shape, writable, array_type, dtype, dev),
                     new_output, pointer)
        if outs is None:
            return DECLINED
        if not host:
            w[plan.i_n + 5] = stream
        err = (plan.host_fn if host else plan.device_fn)(w)
    return _lean_result(backend, plan, err, outs)


def _torch_fits(x, shape, writable, tensor, tdtype, dev):
    # a tensor that requires grad: the checked path, which differentiates the call (.autograd_torch)
    if type(x) is not tensor or x.dtype is not tdtype or x.requires_grad or x.get_device() != dev or \
            not x.is_contiguous() or x.shape != shape:
        return None
    return x.data_ptr()


def _cupy_fits(x, shape, writable, ndarray, dtype, dev):
    if type(x) is not ndarray or x.dtype != dtype or not x.flags.c_contiguous or x.device.id != dev or \
            x.shape != shape:
        return None
    return x.data.ptr


def torch_lean(backend, plan, args, out):
    """The lean path for contiguous tensors of the handle's dtype on one device, passed
    positionally (params at their defaults), optional ``out=`` for a single output: CUDA
    tensors on the current stream (a backend that runs on the GPU), tensors in host memory
    through the host entry (any backend), which checks their values."""
    tensor, tdtype, raw_stream, host_output = plan.torch or plan.torch_parts()
    x0 = args[0]
    n = _batch_of(plan, x0, x0.dim())
    if n is None or len(args) > plan.n_state:
        return DECLINED
    dev = x0.get_device()  # -1: host memory
    if dev < 0:
        fc = plan.fastcall
        if fc is not None and out is None:  # the common call, straight to the C form (_device_lean's first branch)
            outs = tuple([host_output((n, *s) if n >= 0 else s) for s in plan.out_shapes])
            err = fc.device(*plan.fast_host_head, _TORCH, tensor, tdtype, -1, None, n, outs, plan.out_shapes, args,
                            plan.state_shapes, plan.required, True)
            return DECLINED if err is None else _lean_result(backend, plan, err, outs)
        return _device_lean(backend, plan, args, out, n, _TORCH, tensor, tdtype, dev, host_output, None, _torch_fits,
                            tensor.data_ptr)
    if not backend.accepts_device_arrays:
        return DECLINED
    # x0 has the dtype and the device of the outputs
    return _device_lean(backend, plan, args, out, n, _TORCH, tensor, tdtype, dev, x0.new_empty, raw_stream(dev),
                        _torch_fits, tensor.data_ptr)


def cupy_lean(backend, plan, args, out):
    """The lean path for C-contiguous CuPy arrays of the handle's dtype on the current device,
    passed positionally (params at their defaults), optional ``out=`` for a single output;
    launched on CuPy's current stream."""
    ndarray, current_stream, current_device, empty = plan.cupy or plan.cupy_parts()
    x0 = args[0]
    n = _batch_of(plan, x0, x0.ndim)
    if n is None or len(args) > plan.n_state:
        return DECLINED
    dt = plan.dtype
    return _device_lean(backend, plan, args, out, n, _CUPY, ndarray, dt, current_device(),
                        lambda shape: empty(shape, dt), current_stream().ptr, _cupy_fits, lambda o: o.data.ptr)
