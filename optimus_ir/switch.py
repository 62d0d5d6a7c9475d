"""The on/off switch: which optimus_ir passes are enabled, and the hooks that make Inductor use them.

Users enable optimus_ir without touching their program::

    OPTIMUS_IR=1 python train.py                    # every pass
    OPTIMUS_IR=splitcat python train.py             # a subset (comma list of pass names)
    OPTIMUS_IR=0 python train.py                    # off (the same as unset)

This works because ``import torch`` calls every entry point of the ``torch.backends`` group, and ours is
:func:`_autoload`. From Python the same is :func:`enable`, :func:`disable` and the :func:`enabled` context manager.

Nothing is imported or patched while no pass is enabled. Enabling sets, once ``torch._inductor.config`` is
imported (lazily, so ``import torch`` stays as fast as without us):

- ``config.post_grad_custom_post_pass``: an :class:`OptimusGraphPass` whose ``uuid()`` holds the package identity
  (version and a hash of its sources) and the enabled passes. It is the only hook Inductor puts in its FX-graph and
  AOTAutograd cache keys, so a graph compiled with other passes, or by another optimus_ir, is never served. It
  chains whatever pass the user had installed;
- ``config.joint_custom_post_pass`` (keyed the same way): the rules' preparation of the joint forward + backward
  graph (facts backward lowerings read; saved tensors they will not need, no longer read);
- ``config._pre_fusion_custom_pass`` (keyed the same way) and ``config._post_fusion_custom_pass``: the
  scheduler-time rules, before and after Inductor's fusion (each chaining a user's pass).

The first call of the post-grad pass (a cache miss, just before lowering) installs the rest: the rules' lowering
overrides (``torch._inductor.lowering.lowerings[op]``, each falling back to the stock lowering when its pass is
off), the rules that edit the lowered operations before the scheduler is built (``GraphLowering._update_scheduler``,
which has no config hook), the rules that rewrite a wrapper's input checks (``codegen_input_size_asserts`` of
``PythonWrapperCodegen``, no hook either) and the kernel dump when ``OPTIMUS_IR_DUMP`` is set.
:func:`disable` undoes all of it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import importlib.abc
import importlib.machinery
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["PASSES", "enable", "disable", "enabled", "enabled_passes", "parse_passes"]

#: Every pass, by the name users give in ``OPTIMUS_IR`` / :func:`enable`.
PASSES: tuple[str, ...] = ("splitcat", "horizontal")

_ENV = "OPTIMUS_IR"
_ON_WORDS = frozenset({"1", "all", "on", "true", "yes"})
_OFF_WORDS = frozenset({"", "0", "none", "off", "false", "no"})

_enabled: frozenset[str] = frozenset()
_suspended = contextvars.ContextVar("optimus_ir_suspended", default=False)
_installed_pass: Any = None  # the OptimusGraphPass we put into config, while enabled


def parse_passes(spec: str | Iterable[str] | None) -> frozenset[str]:
    """Turn ``"all"``, ``"0"``, ``"splitcat,horizontal"``, a list of names, or None into a set of pass names.

    Raises ValueError for an unknown pass name.
    """
    if spec is None:
        return frozenset()
    if isinstance(spec, str):
        word = spec.strip().lower()
        if word in _ON_WORDS:
            return frozenset(PASSES)
        if word in _OFF_WORDS:
            return frozenset()
        spec = [name.strip() for name in word.split(",") if name.strip()]
    names = frozenset(spec)
    unknown = sorted(names - set(PASSES))
    if unknown:
        raise ValueError(f"unknown optimus_ir pass(es) {unknown}; known: {list(PASSES)}")
    return names


def enabled_passes() -> frozenset[str]:
    """The passes the rules must apply right now (none inside :func:`suspended`)."""
    return frozenset() if _suspended.get() else _enabled


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Within the block every rule falls back to stock Inductor; hooks stay installed, nothing is reconfigured.

    Used to lower a graph a second time, stock, in the middle of a compile (the dump's "without" side).
    """
    token = _suspended.set(True)
    try:
        yield
    finally:
        _suspended.reset(token)


def enable(passes: str | Iterable[str] = "all") -> None:
    """Enable ``passes`` ("all", or pass names) for every later compile, and only those."""
    global _enabled
    _enabled = parse_passes(passes)
    if _enabled:
        _after_import("torch._inductor.config", _install_config_hooks)
    else:
        _uninstall()


def disable() -> None:
    """Disable every pass and undo every patch, as if optimus_ir was never enabled."""
    enable(())


@contextlib.contextmanager
def enabled(passes: str | Iterable[str] | None = "all") -> Iterator[frozenset[str]]:
    """Within the block exactly ``passes`` are enabled (None: none); the previous state is restored after."""
    previous = _enabled
    enable(passes or ())
    try:
        yield _enabled
    finally:
        enable(previous)


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: called by ``import torch``. Reads ``OPTIMUS_IR``.

    It must never break ``import torch``: a bad value is reported as a warning and leaves optimus_ir off.
    """
    spec = os.environ.get(_ENV)
    if spec is None or spec.strip().lower() in _OFF_WORDS:
        return
    try:
        enable(spec)
    except ValueError as error:
        warnings.warn(f"optimus_ir: ignoring {_ENV}={spec!r}: {error}", stacklevel=2)


@functools.cache
def package_identity() -> str:
    """Version plus a hash of every source file of the package: changes whenever our code does."""
    from optimus_ir import __version__

    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for package_dir in _package_dirs(root):
        for path in sorted(package_dir.glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


def _package_dirs(root: Path) -> list[Path]:
    import optimus_ir.lowering
    import optimus_ir.scheduler_hooks

    return [root] + [Path(p).resolve() for m in (optimus_ir.lowering, optimus_ir.scheduler_hooks) for p in m.__path__]


@functools.cache
def _pass_classes() -> tuple[type, type, type]:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    from optimus_ir import registry

    class _Keyed(CustomGraphPass):
        """A config hook whose ``uuid()`` carries optimus_ir's identity into Inductor's cache keys; it runs the
        pass that was installed before ours first."""

        def __init__(self, chained: Any) -> None:
            self.chained = chained

        def uuid(self) -> Any:
            chained = self.chained.uuid() if hasattr(self.chained, "uuid") else self.chained
            return ("optimus_ir", type(self).__name__, package_identity(), tuple(sorted(_enabled)), chained)

    class OptimusGraphPass(_Keyed):
        """``post_grad_custom_post_pass``: changes no FX node (the rewrites happen in lowering and scheduling);
        makes sure the lowering overrides and the dump are installed, just before lowering."""

        def __call__(self, graph: Any) -> None:
            if self.chained is not None:
                self.chained(graph)
            _install_compile_hooks()

    class OptimusPreFusionPass(_Keyed):
        """``_pre_fusion_custom_pass``: the scheduler rules that run before Inductor's fusion."""

        def __call__(self, nodes: list[Any]) -> list[Any]:
            if self.chained is not None:
                nodes = self.chained(nodes)
            return registry.run_scheduler_rules("pre_fusion", nodes)

    class OptimusJointPass(_Keyed):
        """``joint_custom_post_pass``: the rules' preparation of the joint forward + backward graph, before the
        partition (a backward rule cannot see how the forward made a saved tensor)."""

        def __call__(self, graph: Any) -> None:
            if self.chained is not None:
                self.chained(graph)
            registry.prepare_joint_graph(graph)

    return OptimusGraphPass, OptimusPreFusionPass, OptimusJointPass


def _install_config_hooks() -> None:
    """Install the config hooks (cache-keyed post-grad pass, scheduler pass); the lowering overrides wait."""
    global _installed_pass
    if not _enabled:
        return  # disabled again before torch._inductor.config was imported
    import torch._inductor.config as config

    from optimus_ir import registry

    post_grad_class, pre_fusion_class, joint_class = _pass_classes()
    if _installed_pass is None:
        _installed_pass = post_grad_class(config.post_grad_custom_post_pass)
        config.post_grad_custom_post_pass = _installed_pass
    if not isinstance(config._pre_fusion_custom_pass, pre_fusion_class):
        config._pre_fusion_custom_pass = pre_fusion_class(config._pre_fusion_custom_pass)
    if not isinstance(config.joint_custom_post_pass, joint_class):
        config.joint_custom_post_pass = joint_class(config.joint_custom_post_pass)
    if config._post_fusion_custom_pass is not registry.post_fusion_pass:
        registry.chained_post_fusion_pass = config._post_fusion_custom_pass
        config._post_fusion_custom_pass = registry.post_fusion_pass


def _install_compile_hooks() -> None:
    """Install the lowering overrides and the dump (idempotent; imports torch._inductor.lowering)."""
    from optimus_ir import dump, registry

    dump.install()
    registry.install_lowerings()
    registry.install_pre_scheduler_pass()
    registry.install_wrapper_rules()


def _uninstall() -> None:
    global _installed_pass
    config = sys.modules.get("torch._inductor.config")
    if config is None:
        return
    if _installed_pass is not None:
        if config.post_grad_custom_post_pass is _installed_pass:
            config.post_grad_custom_post_pass = _installed_pass.chained
        _installed_pass = None
    if isinstance(config._pre_fusion_custom_pass, _pass_classes()[1]):
        config._pre_fusion_custom_pass = config._pre_fusion_custom_pass.chained
    if isinstance(config.joint_custom_post_pass, _pass_classes()[2]):
        config.joint_custom_post_pass = config.joint_custom_post_pass.chained
    dump = sys.modules.get("optimus_ir.dump")
    if dump is not None:
        dump.uninstall()
    registry = sys.modules.get("optimus_ir.registry")
    if registry is not None:
        registry.uninstall_lowerings()
        registry.uninstall_pre_scheduler_pass()
        registry.uninstall_wrapper_rules()
        if config._post_fusion_custom_pass is registry.post_fusion_pass:
            config._post_fusion_custom_pass = registry.chained_post_fusion_pass
            registry.chained_post_fusion_pass = None


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Meta-path finder that runs a callback right after one module has been executed."""

    def __init__(self, fullname: str, callback: Callable[[], None]) -> None:
        self.fullname = fullname
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.fullname:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        callback = self.callback

        def exec_then_callback(module: Any) -> None:
            exec_module(module)
            callback()

        spec.loader.exec_module = exec_then_callback  # type: ignore[method-assign]
        return spec


def _after_import(fullname: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` now if ``fullname`` is imported, else right after it gets imported."""
    if fullname in sys.modules:
        callback()
        return
    if not any(isinstance(f, _RunAfterImport) and f.fullname == fullname for f in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport(fullname, callback))
