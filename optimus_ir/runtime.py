"""Run-time support of the code optimus_ir generates: the per-call member table of a shared-body kernel.

A kernel made by ``IdenticalKernelsToMemberTableKernel`` serves N members. Where each member's block starts, how many
elements it has, and the address of each of its tensors are read from one int64 table on the kernel's device::

    [ block starts of the members, padded to a power of two with INT64_MAX ]   (constant)
    [ numel of each member ]                                                     (constant)
    [ address of slot 0 of each member ] [ address of slot 1 of each member ] ...   (per call)

The addresses change only when the tensors do, so tables are cached by the addresses: a steady-state call costs a
``data_ptr()`` per tensor and one dict lookup, not a host-to-device copy. A table made or used while a CUDA graph is
being captured is kept for the life of the process: the graph's replays read it at that address.
"""

from __future__ import annotations

import collections

import torch

__all__ = ["MemberTable"]

_INT64_MAX = 2**63 - 1


class MemberTable:
    """The member table of one shared-body kernel: its constant part, and a cache of full tables by addresses."""

    def __init__(self, starts: list[int], numels: list[int], pad_to: int, cache_size: int = 16) -> None:
        self.constant = [*starts, *[_INT64_MAX] * (pad_to - len(starts)), *numels]
        self.cache_size = cache_size
        self._recent: collections.OrderedDict[tuple[object, ...], torch.Tensor] = collections.OrderedDict()
        self._kept: dict[tuple[object, ...], torch.Tensor] = {}

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor:
        """The table for one call: ``tensors`` are slot 0 of every member, then slot 1 of every member, ..."""
        device = tensors[0].device
        key = (device, *[t.data_ptr() for t in tensors])
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        table = self._kept.get(key)
        if table is not None:
            return table
        table = self._recent.get(key)
        if table is None:
            table = self._build(key[1:], device)
        else:
            self._recent.move_to_end(key)
        if capturing:
            self._kept[key] = table
            self._recent.pop(key, None)
        else:
            self._recent[key] = table
            if len(self._recent) > self.cache_size:
                self._recent.popitem(last=False)
        return table

    def _build(self, addresses: tuple[object, ...], device: torch.device) -> torch.Tensor:
        # explicit device: under cudagraph trees (and `with torch.device(...)`) the default device may be cuda
        host = torch.tensor([*self.constant, *addresses], dtype=torch.int64, device="cpu")
        if device.type == "cpu":
            return host
        # asynchronous (and capturable) only from pinned memory; the caching host allocator keeps the pinned block
        # until the copy is done, and a table kept for a captured graph keeps its source alive with it
        pinned = host.pin_memory()
        table = pinned.to(device, non_blocking=True)
        table._optimus_ir_source = pinned  # type: ignore[attr-defined]
        return table
