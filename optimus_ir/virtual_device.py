"""The virtual CUDA device: ``cuda:0`` as an NVIDIA H200 (sm_90) answers every query that Inductor, Triton and the
fake-tensor machinery make for code generation, on a machine without one (:mod:`optimus_ir.virtual_cuda` generates
code for it). Nothing can run on it.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
from torch._dynamo import device_interface
from torch._inductor import utils as inductor_utils
from torch._inductor.runtime.hints import DeviceProperties
from torch._subclasses import fake_tensor
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime import driver as triton_driver

__all__ = ["virtual_cuda_available", "virtual_cuda_device"]

_CUDA = torch.device("cuda", 0)


# ---------------------------------------------------------------------------
# The virtual device
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _VirtualDeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports on an NVIDIA H200
    (read on one with torch 2.11, CUDA 13), attribute for attribute; the
    identity fields (``uuid``, ``pci_*``) are placeholders."""

    name: str = "NVIDIA H200"
    major: int = 9
    minor: int = 0
    total_memory: int = 150109880320
    multi_processor_count: int = 132
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    regs_per_multiprocessor: int = 65536
    warp_size: int = 32
    shared_memory_per_block: int = 49152
    shared_memory_per_block_optin: int = 232448
    shared_memory_per_multiprocessor: int = 233472
    L2_cache_size: int = 60 * 2**20
    clock_rate: int = 1980000
    memory_clock_rate: int = 3201000
    memory_bus_width: int = 6016
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    gcnArchName: str = "NVIDIA H200"
    uuid: str = "00000000-0000-0000-0000-000000000000"
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0


_H200 = _VirtualDeviceProperties()


class _VirtualTritonDriver(DriverBase):
    """A Triton driver for the virtual device: enough for code generation
    (target queries), and nothing that would launch or load a kernel."""

    @classmethod
    def is_active(cls) -> bool:
        return False

    def __init__(self) -> None:
        super().__init__()
        self.utils = types.SimpleNamespace(
            get_device_properties=_triton_device_properties
        )

    def map_python_to_cpp_type(self, ty: str) -> str:
        from triton.backends.nvidia.driver import ty_to_cpp

        return ty_to_cpp(ty)

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", _H200.major * 10 + _H200.minor, _H200.warp_size)

    def get_current_device(self) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return _CUDA

    def get_benchmarker(self) -> Callable[..., Any]:
        raise RuntimeError("the virtual CUDA device cannot run kernels")


def _triton_device_properties(device: int) -> dict[str, int]:
    """The answer of Triton's ``driver.active.utils.get_device_properties``."""
    return {
        "max_shared_mem": _H200.shared_memory_per_block_optin,
        "max_num_regs": _H200.regs_per_multiprocessor,
        "multiprocessor_count": _H200.multi_processor_count,
        "warpSize": _H200.warp_size,
        "sm_clock_rate": _H200.clock_rate,
        "mem_clock_rate": _H200.memory_clock_rate,
        "mem_bus_width": _H200.memory_bus_width,
    }


def _device_index(device: Any = None) -> int:
    """The index a device argument of a ``torch.cuda`` query names (0 if none)."""
    if isinstance(device, int):
        index = device
    elif device is None:
        index = 0
    else:
        index = torch.device(device).index or 0
    if index != 0:
        raise RuntimeError(f"the virtual CUDA device has one device, not cuda:{index}")
    return index


def _get_device_properties(device: Any = None) -> _VirtualDeviceProperties:
    _device_index(device)
    return _H200


def _get_device_capability(device: Any = None) -> tuple[int, int]:
    _device_index(device)
    return (_H200.major, _H200.minor)


def _get_device_name(device: Any = None) -> str:
    _device_index(device)
    return _H200.name


def _exchange_device(device: int) -> int:
    """``torch.cuda._exchange_device``: switch to ``device`` (-1: none) and
    return the previous device."""
    _device_index(max(device, 0))
    return 0


def _no_op(*args: Any, **kwargs: Any) -> None:
    """Stands for a device call that has no effect on code generation."""


def _device_query_caches() -> tuple[Any, ...]:
    """Cached functions whose results depend on the CUDA device (its presence,
    properties or Triton target): cleared when the virtual device comes and
    goes, so that neither the real device's (or its absence's) answers leak
    into the virtual one nor the reverse. Every cache of the two modules of
    device queries is taken, whatever a torch release names them."""
    from torch._inductor import comm_analysis
    from torch._inductor.codecache import CacheBase
    from torch._inductor.codegen.cuda import cuda_env
    from torch._inductor.kernel import mm
    from torch.utils import _triton

    module_caches = tuple(
        cached
        for module in (inductor_utils, _triton)
        for cached in vars(module).values()
        if callable(getattr(cached, "cache_clear", None))
    )
    return (
        DeviceProperties.create,
        CacheBase.get_system,
        mm._is_sm7x_or_older_gpu,
        comm_analysis.get_gpu_type,
        cuda_env.get_cuda_arch,
        *module_caches,
    )


def _clear_device_query_caches() -> None:
    for cached in _device_query_caches():
        cached.cache_clear()


@contextlib.contextmanager
def virtual_cuda_device() -> Iterator[None]:
    """Make ``cuda:0`` an H200-like sm_90 device for code generation.

    Patches (all undone on exit):

    * ``torch.cuda`` availability, count, current device, properties,
      capability and name queries; device switches (``set_device``,
      ``_exchange_device``) and RNG-state calls become no-ops;
    * the same queries on ``torch._dynamo.device_interface.CudaInterface``,
      which binds the ``torch.cuda`` functions at import time, and its
      worker-side properties cache;
    * ``fake_tensor.init_gpu_context``, which would allocate on the device;
    * Triton's active driver, which answers ``get_current_target()`` with
      ``GPUTarget("cuda", 90, 32)``;
    * Inductor's cached device queries are cleared on entry and on exit.
    """
    cuda = torch.cuda
    iface = device_interface.CudaInterface
    queries: dict[str, Callable[..., Any]] = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "get_device_properties": _get_device_properties,
        "get_device_capability": _get_device_capability,
        "get_device_name": _get_device_name,
        "set_device": _device_index,
        "_exchange_device": _exchange_device,
        "_maybe_exchange_device": _exchange_device,
        "get_rng_state": lambda device="cuda": torch.empty(0, dtype=torch.uint8),
        "set_rng_state": _no_op,
    }
    interface_queries = {
        "current_device": queries["current_device"],
        "set_device": queries["set_device"],
        "device_count": queries["device_count"],
        "get_device_properties": queries["get_device_properties"],
        "exchange_device": queries["_exchange_device"],
        "maybe_exchange_device": queries["_maybe_exchange_device"],
    }
    with contextlib.ExitStack() as stack:
        for name, replacement in queries.items():
            stack.enter_context(mock.patch.object(cuda, name, replacement))
        for name, replacement in interface_queries.items():
            stack.enter_context(
                mock.patch.object(iface, name, staticmethod(replacement))
            )
        for worker_cache in (
            device_interface.caching_worker_device_properties,
            device_interface.caching_worker_current_devices,
        ):
            stack.enter_context(mock.patch.dict(worker_cache, clear=True))
        stack.enter_context(mock.patch.object(fake_tensor, "init_gpu_context", _no_op))
        stack.enter_context(
            mock.patch.object(triton_driver, "_active", _VirtualTritonDriver())
        )
        stack.callback(_clear_device_query_caches)
        _clear_device_query_caches()
        yield


def virtual_cuda_available() -> bool:
    """True when code generation needs the virtual device: no real CUDA device."""
    return not torch.cuda.is_available()
