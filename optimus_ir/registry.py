"""Rule registry and the thin drivers that apply rules and record what fired and why others did not.

A rule is one small class with a docstring that shows the IR before and after. Three kinds:

- :class:`LoweringRule` replaces the lowering of one aten op (e.g. ``aten.cat``) for the inputs it recognizes. Its
  ``rewrite`` returns ``(ir_result, what_it_did)`` or raises :class:`Reject` with the reason; the driver then tries
  the next rule and finally the stock lowering.
- :class:`SchedulerRule` rewrites the graph's operations before the scheduler is built, or the scheduler's node
  list before or after Inductor's own fusion. Its ``rewrite`` returns the new list and reports through
  :func:`record`.
- :class:`WrapperRule` rewrites the lines Inductor writes into a graph's Python wrapper for its inputs' checks.
  Its ``rewrite`` returns ``(lines, inputs_concerned, what_it_did)`` or raises :class:`Reject`; the driver then
  writes stock's lines.

Any exception in a rule other than :class:`Reject` is caught: the node gets the stock treatment and the dump shows
the error. A compile never fails because of a rule.

Every decision becomes a :class:`RewriteRecord`, delivered to whoever listens (:func:`recording`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import traceback
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from optimus_ir.switch import enabled_passes

log = logging.getLogger("optimus_ir")

__all__ = [
    "LoweringRule",
    "NotApplicable",
    "Reject",
    "RewriteRecord",
    "SchedulerRule",
    "WrapperRule",
    "lowering_rules",
    "record",
    "recording",
    "register",
    "scheduler_rules",
    "wrapper_rules",
]


class Reject(Exception):
    """Raised by a rule that does not apply; the message says why (it goes to the dump)."""


class NotApplicable(Reject):
    """Raised by a rule for inputs that are not of its kind at all (a slice of something that is not a cat): the
    driver moves on without recording it, so the dump lists the decisions about real candidates only."""


@dataclasses.dataclass(frozen=True)
class RewriteRecord:
    """One decision of one rule on one candidate."""

    rule: str
    fired: bool
    nodes: tuple[str, ...]  # the FX nodes (lowering) or scheduler nodes (scheduler) concerned
    detail: str  # fired: what was done; not fired: why not

    def __str__(self) -> str:
        verdict = "FIRED   " if self.fired else "rejected"
        return f"{verdict} {self.rule} on {', '.join(self.nodes)}: {self.detail}"


class LoweringRule:
    """Base of rules that take over the lowering of one aten op for the inputs they recognize."""

    name: ClassVar[str]
    pass_name: ClassVar[str]
    op: ClassVar[Any]  # the aten OpOverload whose lowering the rule takes over, or a tuple of them

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        raise NotImplementedError

    def prepare_joint_graph(self, graph: Any) -> None:
        """Before the partitioner splits the joint forward + backward FX graph: record in ``node.meta`` the facts
        only it shows, for ``rewrite`` to read when the backward is lowered on its own (the partitioner copies
        ``meta``), and make the backward stop reading what ``rewrite`` will not need (so that the forward need not
        save it). Anything changed must compute the same values. Default: nothing."""


class SchedulerRule:
    """Base of rules that rewrite ``V.graph.operations`` before the scheduler is built (``stage =
    "pre_scheduler"``: IR operations, whose bodies the scheduler has not traced yet), or the scheduler's node list
    before (``"pre_fusion"``) or after (``"post_fusion"``) Inductor's own fusion."""

    name: ClassVar[str]
    pass_name: ClassVar[str]
    stage: ClassVar[str] = "post_fusion"

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        raise NotImplementedError


class WrapperRule:
    """Base of rules that rewrite the lines of a graph's Python wrapper that check its inputs (what
    ``PythonWrapperCodegen.codegen_input_size_asserts`` writes at the start of ``call``)."""

    name: ClassVar[str]
    pass_name: ClassVar[str]

    def rewrite(self, wrapper: Any, lines: list[str]) -> tuple[list[str], list[str], str]:
        raise NotImplementedError


_LOWERING_RULES: list[LoweringRule] = []
_SCHEDULER_RULES: list[SchedulerRule] = []
_WRAPPER_RULES: list[WrapperRule] = []


def register(rule_class: type) -> type:
    """Class decorator: add one instance of the rule to the registry (in definition order)."""
    if issubclass(rule_class, LoweringRule):
        _LOWERING_RULES.append(rule_class())
    elif issubclass(rule_class, SchedulerRule):
        _SCHEDULER_RULES.append(rule_class())
    elif issubclass(rule_class, WrapperRule):
        _WRAPPER_RULES.append(rule_class())
    else:
        raise TypeError(f"{rule_class} is not a LoweringRule, SchedulerRule or WrapperRule")
    return rule_class


def _load_rules() -> None:
    """Import the modules that define rules (they register themselves)."""
    import optimus_ir.lowering.views  # noqa: F401  (first: its cat rule must be tried before SplitCatToPointwise)
    import optimus_ir.lowering.embedding_bag  # noqa: F401
    import optimus_ir.lowering.split_cat  # noqa: F401
    import optimus_ir.scheduler_hooks.scatter_targets  # noqa: F401
    import optimus_ir.scheduler_hooks.horizontal  # noqa: F401
    import optimus_ir.scheduler_hooks.piece_groups  # noqa: F401
    import optimus_ir.scheduler_hooks.input_checks  # noqa: F401


def lowering_rules() -> list[LoweringRule]:
    _load_rules()
    return list(_LOWERING_RULES)


def scheduler_rules() -> list[SchedulerRule]:
    _load_rules()
    return list(_SCHEDULER_RULES)


def wrapper_rules() -> list[WrapperRule]:
    _load_rules()
    return list(_WRAPPER_RULES)


# ----------------------------------------------------------------------------------------------- records

_listeners: list[list[RewriteRecord]] = []


def add_listener(records: list[RewriteRecord]) -> None:
    """Append every later :class:`RewriteRecord` to ``records`` (until :func:`remove_listener`)."""
    _listeners.append(records)


def remove_listener(records: list[RewriteRecord]) -> None:
    _listeners.remove(records)


@contextlib.contextmanager
def recording() -> Iterator[list[RewriteRecord]]:
    """Collect every :class:`RewriteRecord` made inside the block into the yielded list."""
    records: list[RewriteRecord] = []
    add_listener(records)
    try:
        yield records
    finally:
        remove_listener(records)


def record(rule: str, fired: bool, nodes: Any, detail: str) -> None:
    """Report one decision to every listener and to the ``optimus_ir`` logger."""
    entry = RewriteRecord(rule, fired, tuple(str(n) for n in nodes), detail)
    log.debug("%s", entry)
    for records in _listeners:
        records.append(entry)


# ----------------------------------------------------------------------------------------------- drivers


class _LoweringDriver:
    """Stands in ``lowerings[op]``: tries the enabled rules for ``op`` in order, else the stock lowering."""

    def __init__(self, op: Any, stock: Callable[..., Any], rules: list[LoweringRule]) -> None:
        self.op = op
        self.stock = stock
        self.rules = rules

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor.virtualized import V

        active = [r for r in self.rules if r.pass_name in enabled_passes()]
        if not active:
            return self.stock(*args, **kwargs)
        fx_node = V.graph.current_node if V.graph is not None else None
        nodes = (fx_node.name,) if fx_node is not None else (str(self.op),)
        for rule in active:
            try:
                result, detail = rule.rewrite(*args, **kwargs)
            except NotApplicable:
                continue
            except Reject as reason:
                record(rule.name, False, nodes, str(reason))
            except Exception as error:  # a rule must never fail a compile
                log.warning("optimus_ir rule %s raised; using stock lowering", rule.name, exc_info=True)
                frame = traceback.extract_tb(error.__traceback__)[-1]
                record(rule.name, False, nodes, f"internal error {error!r} at {frame.name}:{frame.lineno}")
            else:
                record(rule.name, True, nodes, detail)
                return result
        return self.stock(*args, **kwargs)


_stock_lowerings: dict[Any, Callable[..., Any]] = {}


def stock_lowering(op: Any) -> Callable[..., Any]:
    """Inductor's own lowering of ``op`` (what ``lowerings[op]`` was before our driver took its place)."""
    from torch._inductor.lowering import lowerings

    return _stock_lowerings.get(op, lowerings[op])


def install_lowerings() -> None:
    """Put a :class:`_LoweringDriver` in ``torch._inductor.lowering.lowerings`` for every op that has rules."""
    from torch._inductor.lowering import lowerings

    by_op: dict[Any, list[LoweringRule]] = {}
    for rule in lowering_rules():
        for op in rule.op if isinstance(rule.op, tuple) else (rule.op,):
            by_op.setdefault(op, []).append(rule)
    for op, rules in by_op.items():
        if op not in _stock_lowerings:
            _stock_lowerings[op] = lowerings[op]
            lowerings[op] = _LoweringDriver(op, lowerings[op], rules)


@dataclasses.dataclass
class _ReplacedMethod:
    """A method of an Inductor class that optimus_ir replaces while enabled, where Inductor has no hook; ``stock``
    is Inductor's own while it is replaced."""

    module: str
    owner: str
    name: str
    stock: Callable[..., Any] | None = None

    def replace(self, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Put ``make(stock)`` in its place (idempotent)."""
        if self.stock is None:
            owner = getattr(importlib.import_module(self.module), self.owner)
            self.stock = getattr(owner, self.name)
            setattr(owner, self.name, make(self.stock))

    def restore(self) -> None:
        if self.stock is not None:
            setattr(getattr(importlib.import_module(self.module), self.owner), self.name, self.stock)
            self.stock = None


_UPDATE_SCHEDULER = _ReplacedMethod("torch._inductor.graph", "GraphLowering", "_update_scheduler")
_INPUT_ASSERTS = _ReplacedMethod(
    "torch._inductor.codegen.wrapper", "PythonWrapperCodegen", "codegen_input_size_asserts"
)


def install_pre_scheduler_pass() -> None:
    """Make ``GraphLowering._update_scheduler`` run the ``pre_scheduler`` rules on the graph's operations before
    it builds the scheduler from them (Inductor has no hook there)."""

    def with_rules(stock: Callable[[Any], None]) -> Callable[[Any], None]:
        def _update_scheduler(graph: Any) -> None:
            graph.operations = run_scheduler_rules("pre_scheduler", graph.operations)
            stock(graph)

        return _update_scheduler

    _UPDATE_SCHEDULER.replace(with_rules)


def uninstall_pre_scheduler_pass() -> None:
    _UPDATE_SCHEDULER.restore()


def install_wrapper_rules() -> None:
    """Make ``PythonWrapperCodegen.codegen_input_size_asserts`` pass the lines stock writes through the enabled
    wrapper rules (Inductor has no hook there either)."""

    def with_rules(stock: Callable[[Any], None]) -> Callable[[Any], None]:
        def codegen_input_size_asserts(wrapper: Any) -> None:
            from torch._inductor.utils import IndentedBuffer

            prefix, wrapper.prefix = wrapper.prefix, IndentedBuffer()
            try:
                stock(wrapper)
                lines = wrapper.prefix.getvalue().splitlines()
            finally:
                wrapper.prefix = prefix
            for line in run_wrapper_rules(wrapper, lines):
                prefix.writeline(line)

        return codegen_input_size_asserts

    _INPUT_ASSERTS.replace(with_rules)


def uninstall_wrapper_rules() -> None:
    _INPUT_ASSERTS.restore()


def run_wrapper_rules(wrapper: Any, lines: list[str]) -> list[str]:
    """Run the enabled wrapper rules in order on ``lines``; a rule that rejects or raises leaves them as they were."""
    from torch._inductor.virtualized import V

    for rule in wrapper_rules():
        if rule.pass_name not in enabled_passes():
            continue
        try:
            lines, inputs, detail = rule.rewrite(wrapper, lines)
        except NotApplicable:
            continue
        except Reject as reason:
            record(rule.name, False, V.graph.graph_input_names, str(reason))
        except Exception as error:  # a rule must never fail a compile
            log.warning("optimus_ir rule %s raised; wrapper lines left as they were", rule.name, exc_info=True)
            record(rule.name, False, V.graph.graph_input_names,
                   f"internal error {error!r}; wrapper lines left as they were")
        else:
            record(rule.name, True, inputs, detail)
    return lines


def uninstall_lowerings() -> None:
    """Restore the stock lowerings."""
    if not _stock_lowerings:
        return
    from torch._inductor.lowering import lowerings

    for op, stock in _stock_lowerings.items():
        lowerings[op] = stock
    _stock_lowerings.clear()


def prepare_joint_graph(graph: Any) -> None:
    """``config.joint_custom_post_pass``: each enabled lowering rule prepares the joint graph (never fails)."""
    for rule in lowering_rules():
        if rule.pass_name not in enabled_passes():
            continue
        try:
            rule.prepare_joint_graph(graph)
        except Exception as error:  # a rule must never fail a compile
            log.warning("optimus_ir rule %s raised preparing the joint graph", rule.name, exc_info=True)
            record(rule.name, False, ["<joint graph>"], f"internal error {error!r} preparing the joint graph")


#: The pass that was in ``config._post_fusion_custom_pass`` before ours; run first.
chained_post_fusion_pass: Callable[[list[Any]], list[Any]] | None = None


def post_fusion_pass(nodes: list[Any]) -> list[Any]:
    """``config._post_fusion_custom_pass``: runs the enabled post-fusion scheduler rules in order."""
    if chained_post_fusion_pass is not None:
        nodes = chained_post_fusion_pass(nodes)
    return run_scheduler_rules("post_fusion", nodes)


def run_scheduler_rules(stage: str, nodes: list[Any]) -> list[Any]:
    """Run the enabled scheduler rules of ``stage`` in order; a rule that raises leaves the nodes as they were.

    Each rule's seconds go to Inductor's compile-time metrics as ``optimus_ir.<rule name>``
    (``torch._dynamo.utils.compile_times()``, beside ``Scheduler.__init__`` that contains them)."""
    from torch._dynamo.utils import dynamo_timed

    for rule in scheduler_rules():
        if rule.pass_name not in enabled_passes() or rule.stage != stage:
            continue
        try:
            with dynamo_timed(f"optimus_ir.{rule.name}"):
                nodes = rule.rewrite(nodes)
        except Exception as error:  # a rule must never fail a compile
            log.warning("optimus_ir rule %s raised; nodes left as they were", rule.name, exc_info=True)
            record(rule.name, False, ["<scheduler>"], f"internal error {error!r}; nodes left as they were")
    return nodes
