"""The GPU runtime: build the header with nvcc into a cached shared library and call
it on batches (``RobotHandle``)."""

from .cuda import cuda_arch, device_count, find_nvcc, nvcc_version
from .handle import RobotHandle, build_gpu_library

__all__ = ["RobotHandle", "build_gpu_library", "cuda_arch", "device_count", "find_nvcc", "nvcc_version"]
