"""Every change optimus_ir makes to Inductor, installed and undone here and nowhere else.

While a pass is enabled, once ``torch._inductor.config`` is imported (:func:`install_config_hooks`):

- ``config.post_grad_custom_post_pass``: an :class:`OptimusGraphPass` whose ``uuid()`` holds the package identity
  (version and a hash of its sources) and the enabled passes. It is the hook Inductor puts in its FX-graph and
  AOTAutograd cache keys, so a graph compiled with other passes, or by another optimus_ir, is never served. Its
  first call (a cache miss, just before lowering) installs the compile hooks below;
- ``config.pre_grad_custom_pass`` (keyed the same way): the graph rules on Dynamo's graph, before AOTAutograd;
- ``config.joint_custom_post_pass`` (keyed the same way): the lowering rules' preparation of the joint graph;
- ``config._pre_fusion_custom_pass`` (keyed the same way) and ``config._post_fusion_custom_pass``: the
  scheduler rules before and after Inductor's fusion (after them, the schedule's estimated peak, where the guard
  compares it).

Each chains whatever the user had installed there. Then (:func:`install_compile_hooks`), where Inductor has no
hook: the lowering of each op that has rules (``torch._inductor.lowering.lowerings[op]``), the rules that edit the
lowered operations before the scheduler is built (``GraphLowering._update_scheduler``), the wrapper rules
(``PythonWrapperCodegen.codegen_input_size_asserts``), the codegen of our group nodes
(``SIMDScheduling.codegen_combo_kernel``), the frees of regions of one allocation
(``PythonWrapperCodegen.codegen_free``), the op ``segment_sum`` (its dtype, shape, reads and Triton code, on the
handlers that need them; ``Scheduler.score_fusion_memory``: no fusion for the runs of one ids tensor its tables
read), the kernels' names (``codegen.triton.get_fused_kernel_name``: cut to fit Triton's cache file names, so that
Inductor's static launcher finds their cubins), the guard that keeps stock's code where ours would launch more kernels or peak higher
(``GraphLowering.codegen``, :mod:`optimus_ir.stock_guard`) and, with ``OPTIMUS_IR_DUMP`` set, the kernel dump
(``GraphLowering.save_output_code``); and, once ``torch._inductor.codecache`` is imported, the dump of graphs
served from Inductor's cache (``FxGraphCache.load_with_key``).

:func:`uninstall` puts back every original object. Installing twice changes nothing the second time. The
replacements themselves, these and the few that last one block of a rule, go through
:data:`optimus_ir.patching.PATCHES`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optimus_ir import drivers, dump, graph_state, passes, settings, stock_guard, summary
from optimus_ir.after_import import after_import
from optimus_ir.patching import PATCHES
from optimus_ir.records import add_listener, remove_listener, warn_once
from optimus_ir.rule import Stage

__all__ = ["install_compile_hooks", "install_config_hooks", "package_identity", "uninstall"]

#: Triton 3.6 names a kernel's cubin by the first 150 characters of the kernel's name, where Inductor 2.11's static
#: launcher looks for the whole name: a longer name is launched by Triton's Python launcher, at a higher host cost
#: per launch (measured on the H200, 2026-12-06: benchmarks/results/HISTORY.md). A fused name is cut so that
#: ``triton_poi_<fused>_<n>`` stays within it, ``n`` up to 6 digits.
MAX_FUSED_NAME = 150 - len("triton_poi__") - 6


@functools.cache
def package_identity() -> str:
    """Version plus a hash of every source file of the package: changes whenever our code does."""
    from optimus_ir.version import __version__

    digest = hashlib.sha256()
    packages = ("optimus_ir", "optimus_ir.lowering", "optimus_ir.scheduler_hooks")
    roots = [Path(p).resolve() for name in packages for p in importlib.util.find_spec(name).submodule_search_locations]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


@functools.cache
def _pass_classes() -> tuple[type, type, type, type]:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class _Keyed(CustomGraphPass):
        """A config hook whose ``uuid()`` carries optimus_ir's identity into Inductor's cache keys; it runs the
        pass that was installed before ours first."""

        def __init__(self, chained: Any) -> None:
            self.chained = chained

        def uuid(self) -> Any:
            chained = self.chained.uuid() if hasattr(self.chained, "uuid") else self.chained
            enabled = passes.active().key()
            return ("optimus_ir", type(self).__name__, package_identity(), enabled, settings.cache_key(), chained)

        def __reduce__(self) -> tuple[Any, ...]:
            # torch 2.11 keys its caches by a pickle of the config, the pre-grad hook included: pickled as its key
            return str, (repr(self.uuid()),)

    class OptimusGraphPass(_Keyed):
        """``post_grad_custom_post_pass``: the post-grad graph rules; and makes sure the compile hooks are
        installed, just before lowering."""

        def __call__(self, graph: Any) -> None:
            from optimus_ir import registry

            if self.chained is not None:
                self.chained(graph)
            drivers.run_graph_rules(registry.rules_of(Stage.POST_GRAD), graph)
            install_compile_hooks()
            for name in registry.unknown_rules(passes.active()):  # a typo switches nothing off
                warn_once(("rule", name), "optimus_ir: the switch names no rule %s (`python -m optimus_ir rules` "
                          "lists them)", name)

    class OptimusPreFusionPass(_Keyed):
        """``_pre_fusion_custom_pass``: the scheduler rules that run before Inductor's fusion."""

        def __call__(self, nodes: list[Any]) -> list[Any]:
            from optimus_ir import registry

            if self.chained is not None:
                nodes = self.chained(nodes)
            return drivers.run_scheduler_rules(registry.rules_of(Stage.PRE_FUSION), nodes)

    class OptimusJointPass(_Keyed):
        """``joint_custom_post_pass``: the rules' preparation of the joint forward + backward graph, before the
        partition (a backward rule cannot see how the forward made a saved tensor)."""

        def __call__(self, graph: Any) -> None:
            from optimus_ir import registry

            if self.chained is not None:
                self.chained(graph)
            drivers.prepare_joint_graph(registry.rules_of(Stage.LOWERING), graph)

    class OptimusPreGradPass(_Keyed):
        """``pre_grad_custom_pass``: the graph rules on Dynamo's graph. Keyed too: torch 2.15 runs a pre-grad pass
        after its cache lookup only where the pass has a ``uuid()``, and bypasses the caches otherwise."""

        def __call__(self, graph: Any) -> None:
            from optimus_ir import registry

            if self.chained is not None:
                self.chained(graph)
            if dump.dump_dir() is not None:
                dump.start()  # the dump of the graph compiled next holds these decisions too (its hooks come later)
            drivers.run_graph_rules(registry.rules_of(Stage.PRE_GRAD), graph)

    return OptimusGraphPass, OptimusPreFusionPass, OptimusJointPass, OptimusPreGradPass


def post_fusion_pass(nodes: list[Any]) -> list[Any]:
    """``config._post_fusion_custom_pass`` (Inductor keys it by qualified name): the post-fusion scheduler rules."""
    import torch._inductor.config as config

    from optimus_ir import registry
    from optimus_ir.scheduler_hooks.horizontal import memory

    chained = PATCHES.original(config, "_post_fusion_custom_pass")
    if chained is not None:
        nodes = chained(nodes)
    nodes = drivers.run_scheduler_rules(registry.rules_of(Stage.POST_FUSION), nodes)
    memory.estimate_for_the_guard(nodes)
    return nodes


def install_config_hooks() -> None:
    """The config hooks (cache-keyed); the compile hooks wait for the first compile."""
    import torch._inductor.config as config

    post_grad, pre_fusion, joint, pre_grad = _pass_classes()
    PATCHES.replace(config, "post_grad_custom_post_pass", post_grad)
    PATCHES.replace(config, "_pre_fusion_custom_pass", pre_fusion)
    PATCHES.replace(config, "joint_custom_post_pass", joint)
    PATCHES.replace(config, "pre_grad_custom_pass", pre_grad)
    PATCHES.replace(config, "_post_fusion_custom_pass", lambda _: post_fusion_pass)
    after_import("torch._inductor.codecache", _install_cache_hook)


def _install_cache_hook() -> None:
    """A graph served from Inductor's cache gets a dump folder too (no compile hook runs for it)."""
    if not passes.configured().passes:
        return  # disabled again before torch._inductor.codecache was imported
    from torch._inductor.codecache import FxGraphCache

    PATCHES.replace(FxGraphCache, "load_with_key", lambda stock: staticmethod(dump.cache_hook(stock)))


def install_compile_hooks() -> None:
    """The lowering overrides and the method replacements (imports ``torch._inductor.lowering``)."""
    from torch._inductor.codegen import triton as triton_codegen
    from torch._inductor.codegen.simd import SIMDScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.graph import GraphLowering
    from torch._inductor.lowering import lowerings

    from optimus_ir import registry

    by_op: dict[Any, list[Any]] = {}
    for rule in registry.rules_of(Stage.LOWERING):
        for op in rule.op if isinstance(rule.op, tuple) else (rule.op,):
            by_op.setdefault(op, []).append(rule)
    for op, rules in by_op.items():
        PATCHES.replace(lowerings, op, functools.partial(drivers.LoweringDriver, op, rules=rules), item=True)
    PATCHES.replace(GraphLowering, "_update_scheduler", _with_pre_scheduler_rules)
    PATCHES.replace(PythonWrapperCodegen, "codegen_input_size_asserts", _with_wrapper_rules)
    PATCHES.replace(PythonWrapperCodegen, "codegen_free", _with_regions_freed)
    PATCHES.replace(SIMDScheduling, "codegen_combo_kernel", _with_group_kernels)
    PATCHES.replace(GraphLowering, "codegen", lambda stock: summary.summarized(stock_guard.codegen_hook(stock)))
    add_listener(summary.SINCE_LAST_LINE)
    PATCHES.replace(triton_codegen, "get_fused_kernel_name", _within_cubin_names)
    _install_segment_sum()
    if dump.dump_dir() is not None:
        PATCHES.replace(GraphLowering, "save_output_code", lambda stock: staticmethod(dump.output_code_hook(stock)))
        dump.start()


def _install_segment_sum() -> None:
    """``ops.segment_sum`` (:mod:`optimus_ir.segment_sum`) on the handlers that have no default for a new op."""
    from torch._inductor.codegen.triton import TritonKernelOverrides
    from torch._inductor.dependencies import _RecordLoadStoreInner
    from torch._inductor.dtype_propagation import DtypePropagationOpsHandler
    from torch._inductor.loop_body import CaptureIndexing
    from torch._inductor.ops_handler import DefaultHandler, OpCounterCSE
    from torch._inductor.scheduler import Scheduler
    from torch._inductor.shape_propagation import ShapePropagationOpsHandler

    from optimus_ir import segment_sum  # (imports Inductor: not before the first compile)

    name = segment_sum.NAME
    PATCHES.replace(DefaultHandler, name, lambda _: DefaultHandler._call_default(name))
    PATCHES.replace(TritonKernelOverrides, name, lambda _: staticmethod(segment_sum.triton))
    PATCHES.replace(DtypePropagationOpsHandler, name, lambda _: staticmethod(segment_sum.dtype))
    PATCHES.replace(ShapePropagationOpsHandler, name, lambda _: staticmethod(segment_sum.shape))
    PATCHES.replace(_RecordLoadStoreInner, name, lambda _: segment_sum.record_reads)
    PATCHES.replace(CaptureIndexing, name, lambda _: segment_sum.capture)
    PATCHES.replace(OpCounterCSE, name, lambda _: segment_sum.count)
    PATCHES.replace(Scheduler, "score_fusion_memory", segment_sum.fusion_score_without_shared_runs)


def uninstall() -> None:
    """Put back everything :func:`install_config_hooks` and :func:`install_compile_hooks` replaced."""
    PATCHES.undo()
    dump.stop()
    remove_listener(summary.SINCE_LAST_LINE)


def _within_cubin_names(stock: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(stock)
    def get_fused_kernel_name(*args: Any, **kwargs: Any) -> str:
        return stock(*args, **kwargs)[:MAX_FUSED_NAME]

    return get_fused_kernel_name


def _with_pre_scheduler_rules(stock: Callable[[Any], None]) -> Callable[[Any], None]:
    from optimus_ir import registry

    @functools.wraps(stock)
    def _update_scheduler(graph: Any) -> None:
        graph.operations = drivers.run_scheduler_rules(registry.rules_of(Stage.PRE_SCHEDULER), graph.operations)
        stock(graph)

    return _update_scheduler


def _with_wrapper_rules(stock: Callable[[Any], None]) -> Callable[[Any], None]:
    from optimus_ir import registry

    @functools.wraps(stock)
    def codegen_input_size_asserts(wrapper: Any) -> None:
        from torch._inductor.utils import IndentedBuffer

        prefix, wrapper.prefix = wrapper.prefix, IndentedBuffer()
        try:
            stock(wrapper)
            lines = wrapper.prefix.getvalue().splitlines()
        finally:
            wrapper.prefix = prefix
        for line in drivers.run_wrapper_rules(registry.rules_of(Stage.WRAPPER), wrapper, lines):
            prefix.writeline(line)

    return codegen_input_size_asserts


def _with_regions_freed(stock: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    @functools.wraps(stock)
    def codegen_free(wrapper: Any, buffer: Any) -> None:
        state = graph_state.existing()
        regions = None if state is None else state.regions.get(wrapper)
        if regions is None or not regions.free(buffer):
            stock(wrapper, buffer)

    return codegen_free


def _with_group_kernels(stock: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    from optimus_ir.scheduler_hooks.node_graph import GroupKernelNode

    @functools.wraps(stock)
    def codegen_combo_kernel(backend: Any, node: Any) -> None:
        if isinstance(node, GroupKernelNode):
            return node.codegen(backend, stock)
        return stock(backend, node)

    return codegen_combo_kernel
