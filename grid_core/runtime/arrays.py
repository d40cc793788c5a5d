"""CUDA arrays from other frameworks, without importing any of them.

PyTorch tensors, CuPy arrays and anything exposing ``__cuda_array_interface__``
or a CUDA ``__dlpack__`` are read in place: a device pointer, a shape and a
dtype; outputs are made by the same framework on the same device, so results
stay on the GPU (no host round trip).  JAX arrays take another road, an XLA FFI
call (:mod:`grid_core.runtime.jax_ffi`).
"""

from __future__ import annotations

import attrs
import numpy as np

from ..errors import InputError

KDL_CUDA = 2


def _module(x) -> str:
    return type(x).__module__.split(".", 1)[0]


@attrs.define
class DeviceArray:
    obj: object
    ptr: int
    shape: tuple
    dtype: np.dtype
    framework: str  # "torch", "cupy"


def is_device_array(x) -> bool:
    if x is None or isinstance(x, (np.ndarray, list, tuple, float, int)):
        return False
    mod = _module(x)
    if mod == "torch":
        return bool(getattr(x, "is_cuda", False))
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__"):
        try:
            return x.__dlpack_device__()[0] == KDL_CUDA
        except Exception:
            return False
    return False


def _framework(x) -> str:
    mod = _module(x)
    if mod in ("torch", "cupy"):
        return mod
    return "cupy"  # anything else with the interface is viewed through CuPy


def wrap(name: str, x, dtype: np.dtype) -> DeviceArray:
    """A contiguous view (or a device-side copy) of ``x`` in ``dtype``."""
    fw = _framework(x)
    if fw == "torch":
        import torch

        want = torch.float32 if dtype == np.float32 else torch.float64
        if x.dtype != want:
            if x.dtype.is_complex or x.dtype == torch.bool:
                raise InputError(f"argument '{name}' has dtype {x.dtype}, expected a real floating-point tensor")
            x = x.to(want)
        if not x.is_contiguous():
            x = x.contiguous()
        return DeviceArray(x, x.data_ptr(), tuple(x.shape), np.dtype(dtype), "torch")
    import cupy

    if not hasattr(x, "__cuda_array_interface__") or _module(x) != "cupy":
        x = cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)
    if x.dtype.kind not in "fiu":
        raise InputError(f"argument '{name}' has dtype {x.dtype}, expected a real floating-point array")
    x = cupy.ascontiguousarray(x, dtype=dtype)
    return DeviceArray(x, int(x.data.ptr), tuple(x.shape), np.dtype(dtype), "cupy")


def raw_ptr(x) -> int:
    """The device address of ``x`` as given (to tell a view from a converted copy)."""
    if _framework(x) == "torch":
        return int(x.data_ptr())
    return int(x.__cuda_array_interface__["data"][0])


def empty(like: DeviceArray, shape, dtype) -> DeviceArray:
    """An output array of ``like``'s framework, on its device."""
    if like.framework == "torch":
        import torch

        t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.float64,
                        device=like.obj.device)
        return DeviceArray(t, t.data_ptr(), tuple(shape), np.dtype(dtype), "torch")
    import cupy

    with cupy.cuda.Device(_cupy_device(like)):
        c = cupy.empty(shape, dtype=dtype)
    return DeviceArray(c, int(c.data.ptr), tuple(shape), np.dtype(dtype), like.framework)


def _cupy_device(like: DeviceArray) -> int:
    dev = getattr(like.obj, "device", None)
    if hasattr(dev, "id"):
        return int(dev.id)
    return 0


def stream_of(like: DeviceArray) -> int:
    """The framework's current stream on ``like``'s device (0: the default stream)."""
    if like.framework == "torch":
        import torch

        return int(torch.cuda.current_stream(like.obj.device).cuda_stream)
    if like.framework == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0
