"""What the tests and the benchmarks compile, in one registry: the golden cases, the model families of the suite,
the storms and the split/cat chains. It depends on torch alone (nothing of optimus_ir), so it can be dropped into
an older checkout to compare the same workloads before and after a change.

- :data:`REGISTRY`: key → :class:`Entry` (kind ``"case"``, ``"model"``, ``"storm"`` or ``"chain"``, the entry's own
  name, and the :class:`~optimus_ir.testing.case.Case`, :class:`~optimus_ir.testing.workloads.Workload`,
  :class:`~optimus_ir.testing.storms.Storm` or :class:`~optimus_ir.testing.storms.Chain` itself). Keys:
  ``case:<name>``, ``model:<name>``, ``storm:<name>:<dtype>`` (two storms share a name in fp32 and bf16) and
  ``chain:<name>``.
- :func:`compile_targets`: every key with the function that builds its (function or module, example inputs),
  what the decision snapshot (``python -m benchmarks decisions``) compiles.
- The modules: :mod:`~optimus_ir.testing.golden_cases` (``CASES``), :mod:`~optimus_ir.testing.workloads`
  (``WORKLOADS``, ``train_step``; the classes in :mod:`~optimus_ir.testing.models`) and
  :mod:`~optimus_ir.testing.storms` (``STORMS``, ``CHAINS``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

from optimus_ir.testing.case import Case
from optimus_ir.testing.golden_cases import CASES
from optimus_ir.testing.storms import CHAINS, STORMS, TRAINING_CHAINS, TRAINING_STORMS, Chain, Storm
from optimus_ir.testing.workloads import WORKLOADS, Workload

__all__ = [
    "CASES",
    "CHAINS",
    "KINDS",
    "REGISTRY",
    "STORMS",
    "TRAINING_CHAINS",
    "TRAINING_STORMS",
    "WORKLOADS",
    "Entry",
    "compile_targets",
    "entries",
]

KINDS = ("case", "model", "storm", "chain")

#: the sizes of the model families that :func:`compile_targets` compiles (``large`` is for GPUs only)
COMPILE_SIZES = ("tiny", "small")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One workload of the registry.

    Attributes:
        kind: ``"case"`` (a golden case), ``"model"`` (a model family of the suite), ``"storm"`` (N copies of one
            op) or ``"chain"`` (split → pointwise → cat layers).
        name: the workload's own name (a golden file is named after its case).
        value: the case, workload, storm or chain.
        training: a chain of ``TRAINING_CHAINS``, or a storm also measured in a training step.
    """

    kind: str
    name: str
    value: Case | Workload | Storm | Chain
    training: bool = False

    @property
    def key(self) -> str:
        if self.kind == "storm":
            return f"storm:{self.name}:{self.value.dtype}"
        return f"{self.kind}:{self.name}"


def _entries() -> list[Entry]:
    found = [Entry("case", case.name, case) for case in CASES]
    found += [Entry("model", name, workload) for name, workload in WORKLOADS.items()]
    found += [Entry("storm", s.name, s, s.name in TRAINING_STORMS and s.dtype == torch.float32) for s in STORMS]
    found += [Entry("chain", c.name, c) for c in CHAINS]
    found += [Entry("chain", c.name, c, training=True) for c in TRAINING_CHAINS]
    return found


REGISTRY: dict[str, Entry] = {entry.key: entry for entry in _entries()}
assert len(REGISTRY) == len(_entries()), "two registry entries have one key"


def entries(kind: str | None = None) -> list[Entry]:
    """The entries of ``kind`` (every entry where None), in registry order."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {KINDS}")
    return [entry for entry in REGISTRY.values() if kind is None or entry.kind == kind]


Target = tuple[Callable[..., Any] | torch.nn.Module, tuple[Any, ...]]


def compile_targets(storm_device: str | None = None) -> Iterator[tuple[str, Callable[[], Target]]]:
    """Every compile target as ``(key, build)``; ``build()`` returns ``(fn_or_module, example_inputs)``, seeded the
    same whenever it is called. In order:

    - ``case:<name>``: each golden case, ``torch.manual_seed(0)`` then ``case.make_inputs()``;
    - ``workload:<name>:<size>:inference|training``: each model family at ``tiny`` and ``small``,
      ``workload.make(size)`` (seeded); for inference the model's parameters are made not to require grad;
    - ``storm:<name>:<dtype>:inference|training``: each storm, ``torch.manual_seed(0)`` then
      ``make(dtype, requires_grad)``, on ``storm_device`` (default: CUDA where there is one, else the CPU, whose
      tensors stand for CUDA tensors in ``compile_report``);
    - ``chain:<name>``: each chain, ``torch.manual_seed(0)`` then ``torch.randn(*shape, dtype=dtype)``, requiring
      grad for ``TRAINING_CHAINS``.
    """
    if storm_device is None:
        storm_device = "cuda" if torch.cuda.is_available() else "cpu"
    for case in CASES:
        yield f"case:{case.name}", lambda case=case: _seeded(case.fn, case.make_inputs)
    for name, workload in WORKLOADS.items():
        for size in COMPILE_SIZES:
            for training in (False, True):
                mode = "training" if training else "inference"
                yield f"workload:{name}:{size}:{mode}", lambda w=workload, s=size, t=training: _model(w, s, t)
    for storm in STORMS:
        for grad in (False, True):
            mode = "training" if grad else "inference"
            make = lambda s=storm, g=grad: tuple(s.make(s.dtype, g, device=storm_device))  # noqa: E731
            yield f"storm:{storm.name}:{storm.dtype}:{mode}", lambda s=storm, m=make: _seeded(s.fn, m)
    for chains, grad in ((CHAINS, False), (TRAINING_CHAINS, True)):
        for chain in chains:
            make = lambda c=chain, g=grad: (c.make(requires_grad=g),)  # noqa: E731
            yield f"chain:{chain.name}", lambda c=chain, m=make: _seeded(c.fn, m)


def _seeded(fn: Callable[..., Any], make: Callable[[], tuple[Any, ...]]) -> Target:
    torch.manual_seed(0)
    return fn, tuple(make())


def _model(workload: Workload, size: str, training: bool) -> Target:
    model, inputs = workload.make(size)
    if not training:
        model.requires_grad_(False)
    return model, inputs
