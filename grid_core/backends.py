"""Backends over the generated code: validated numpy in, a call through the
generated C ABI (:mod:`grid_core.abi`), numpy out.

:class:`Emulated` compiles the header as host C++ (``GRID_HOST_EMULATION``); the
GPU runtime's ``RobotHandle`` shares :class:`AbiBackend`.  Both expose the same
method names and signatures as :class:`~grid_core.Reference` (DESIGN §3).
"""

from __future__ import annotations

import ctypes

import numpy as np

from .errors import GridError

LAYOUTS = {"auto": 0, "block": 1, "per_state": 2}


def load_abi(path) -> ctypes.CDLL:
    """Load a library built from :func:`grid_core.abi.abi_source` and declare its helpers."""
    lib = ctypes.CDLL(str(path))
    lib.grid_abi_error_string.restype = ctypes.c_char_p
    lib.grid_abi_malloc.restype = ctypes.c_void_p
    lib.grid_abi_malloc.argtypes = [ctypes.c_size_t]
    lib.grid_abi_free.argtypes = [ctypes.c_void_p]
    lib.grid_abi_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
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
        other.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_buffers"})
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

    def _device_buffer(self, key: str, nbytes: int) -> int:
        """A device buffer for ``key`` of at least ``nbytes`` (reused across calls)."""
        buffers = self.__dict__.setdefault("_buffers", {})
        ptr, size = buffers.get(key, (None, 0))
        if ptr is None or size < nbytes:
            lib = self._lib()
            if ptr is not None:
                lib.grid_abi_free(ctypes.c_void_p(ptr))
            ptr = lib.grid_abi_malloc(ctypes.c_size_t(max(nbytes, 1)))
            if not ptr:
                raise GridError(f"cannot allocate {nbytes} bytes of device memory")
            buffers[key] = (ptr, nbytes)
        return ptr

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            msg = self._lib().grid_abi_error_string(err)
            raise GridError(
                f"{what} on {self.robot.name}: CUDA error {err}: {msg.decode() if msg else '?'} "
                f"(layout {self.layout}, tier {self.tier}, threads {self.threads}, blocks {self.blocks})"
            )

    def _call(self, alg, args, kwargs):
        """numpy in: staged through reused device buffers (host memory under emulation)."""
        from .reference import bind_inputs

        bound, batch = bind_inputs(alg, self.robot, args, kwargs)
        n = 1 if batch is None else batch
        lib = self._lib()
        outs = [np.full((n, *p.shape), np.nan, dtype=self.dtype) for p in alg.outputs(self.robot)]
        cargs: list = []
        for o, p in zip(outs, alg.outputs(self.robot)):
            ptr = self._device_buffer(f"out:{p.name}", o.nbytes)
            self._check(lib.grid_abi_memcpy(ctypes.c_void_p(ptr), o.ctypes.data_as(ctypes.c_void_p),
                                            ctypes.c_size_t(o.nbytes), 1), "poisoning outputs")
            cargs.append(ctypes.c_void_p(ptr))
        for p in alg.inputs(self.robot):
            if p.kind == "state":
                x = bound[p.name]
                if x is None:
                    cargs.append(ctypes.c_void_p(None))
                    continue
                a = np.ascontiguousarray(np.broadcast_to(x, (n, *p.shape)), dtype=self.dtype)
                ptr = self._device_buffer(f"in:{p.name}", a.nbytes)
                self._check(lib.grid_abi_memcpy(ctypes.c_void_p(ptr), a.ctypes.data_as(ctypes.c_void_p),
                                                ctypes.c_size_t(a.nbytes), 1), "copying inputs")
                cargs.append(ctypes.c_void_p(ptr))
            elif p.kind == "param":
                a = np.ascontiguousarray(bound[p.name], dtype=self.dtype)
                self.__dict__.setdefault("_keep", []).append(a)
                cargs.append(a.ctypes.data_as(ctypes.c_void_p))
        fn = getattr(lib, f"grid_abi_{alg.name}_{self._suffix()}")
        err = fn(*cargs, n, LAYOUTS[self.layout], self.tier, self.threads, self.blocks, None)
        if err == 0:
            err = lib.grid_abi_synchronize()
        self._check(err, f"{alg.name} launch")
        for o, c in zip(outs, cargs):
            self._check(lib.grid_abi_memcpy(o.ctypes.data_as(ctypes.c_void_p), c, ctypes.c_size_t(o.nbytes), 0),
                        "copying outputs")
        self.__dict__.pop("_keep", None)
        outs = [o.astype(np.float64) if batch is not None else o[0].astype(np.float64) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def close(self) -> None:
        """Free the device buffers (also done when the backend is collected)."""
        buffers = self.__dict__.pop("_buffers", {})
        handle = self.__dict__.get("_handle")
        if handle is not None:
            for ptr, _ in buffers.values():
                handle.grid_abi_free(ctypes.c_void_p(ptr))

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing to report to
            pass

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        from .hooks import registry

        algs = registry().algorithms
        if name not in algs or name not in self._emitted():
            raise AttributeError(
                f"{type(self).__name__} has no algorithm '{name}' (built: {', '.join(self._emitted())})"
            )
        alg = algs[name]
        return lambda *args, **kwargs: self._call(alg, args, kwargs)


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
