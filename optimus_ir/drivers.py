"""How rules run: each driver applies the enabled rules of one stage in order, records their decisions, and falls
back to what stock Inductor does where a rule rejects or raises. A compile never fails because of a rule.

The drivers are handed the rules (``optimus_ir.registry.RULES``, filtered by stage) by :mod:`optimus_ir.patches`,
which puts them where Inductor calls them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from optimus_ir import graph_state, summary
from optimus_ir.passes import rule_applies
from optimus_ir.records import record
from optimus_ir.rule import GraphRule, LoweringRule, NotApplicable, Reject, SchedulerRule, WrapperRule

__all__ = [
    "LoweringDriver", "RAISE_RULE_ERRORS", "prepare_joint_graph", "raise_where_strict", "run_graph_rules",
    "run_scheduler_rules", "run_wrapper_rules", "stock_lowering",
]

log = logging.getLogger("optimus_ir")

#: a rule that runs longer than this says so once, while it runs: where a long compile's time goes
PROGRESS_AFTER_S = 5.0
#: the tests' setting (``tests/conftest.py``): a rule that raises fails the compile, a defect to see (a torch
#: upgrade that breaks a rule breaks the tests), where users get stock's code and a warning naming the rule
RAISE_RULE_ERRORS = False


def raise_where_strict(error: Exception) -> None:
    """Raise ``error`` again under :data:`RAISE_RULE_ERRORS`, unless it is a rule saying that it cannot
    (``NotImplementedError``): every catch-all of a rule calls this first."""
    if RAISE_RULE_ERRORS and not isinstance(error, NotImplementedError):
        raise error


@contextlib.contextmanager
def _running(rule: str, nodes: int) -> Iterator[None]:
    """One rule's run: its seconds in Inductor's compile-time metrics as ``optimus_ir.<rule>``
    (``torch._dynamo.utils.compile_times()``), and past :data:`PROGRESS_AFTER_S` a line saying it still runs and on
    how many nodes (a WARNING, shown by default; INFO under ``OPTIMUS_IR_QUIET=1``)."""
    from torch._dynamo.utils import dynamo_timed

    say = log.info if summary.quiet() else log.warning
    timer = threading.Timer(PROGRESS_AFTER_S, say, ("optimus_ir: %s still running on %d nodes (%.0f s so far)",
                                                     rule, nodes, PROGRESS_AFTER_S))
    timer.daemon = True
    timer.start()
    try:
        with dynamo_timed(f"optimus_ir.{rule}"):
            yield
    finally:
        timer.cancel()


def _applies(rule: Any) -> bool:
    """Whether ``rule`` applies now: its pass enabled and not suspended, the rule not switched off, nor suspended in
    the graph being compiled (``GraphState.suspended_rules``)."""
    if not rule_applies(rule.name, rule.pass_name):
        return False
    state = graph_state.existing()
    return state is None or rule.name not in state.suspended_rules


class LoweringDriver:
    """Stands in ``lowerings[op]``: tries the enabled rules for ``op`` in order, else the stock lowering."""

    def __init__(self, op: Any, stock: Callable[..., Any], rules: Sequence[LoweringRule]) -> None:
        self.op = op
        self.stock = stock
        self.rules = list(rules)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor.virtualized import V

        active = [r for r in self.rules if _applies(r)]
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
                raise_where_strict(error)
                log.warning("optimus_ir rule %s raised; using stock lowering", rule.name, exc_info=True)
                frame = traceback.extract_tb(error.__traceback__)[-1]
                record(rule.name, False, nodes, f"internal error {error!r} at {frame.name}:{frame.lineno}")
            else:
                record(rule.name, True, nodes, detail)
                if V.graph is not None:
                    state = graph_state.current()
                    if fx_node is not None:
                        state.rule_values[fx_node] = result
                    if rule.may_add_launches:
                        state.may_add_launches.add(rule.name)
                return result
        return self.stock(*args, **kwargs)


def stock_lowering(op: Any) -> Callable[..., Any]:
    """Inductor's own lowering of ``op`` (what ``lowerings[op]`` held before a driver took its place)."""
    from torch._inductor.lowering import lowerings

    lowering = lowerings[op]
    return lowering.stock if isinstance(lowering, LoweringDriver) else lowering


def run_graph_rules(rules: Sequence[GraphRule], graph: Any) -> None:
    """``config.pre_grad_custom_pass`` (Dynamo's graph) or ``post_grad_custom_post_pass`` (a post-grad graph): the
    enabled ``rules`` on the graph, in order. A rule that raises gets the graph back as it was before it (a copy,
    put back in its module)."""
    import torch

    for rule in rules:
        if not rule_applies(rule.name, rule.pass_name):
            continue
        kept, copies = torch.fx.Graph(), {}
        kept.output(kept.graph_copy(graph, copies))
        for node, copy in copies.items():  # what Dynamo sets on nodes beyond their meta (``_dynamo_source``)
            for name, value in vars(node).items():
                vars(copy).setdefault(name, value)
        try:
            with _running(rule.name, len(graph.nodes)):
                rule.rewrite(graph)
            graph.lint()
        except Exception as error:  # a rule must never fail a compile
            raise_where_strict(error)
            log.warning("optimus_ir rule %s raised; Dynamo's graph put back as it was", rule.name, exc_info=True)
            record(rule.name, False, ["<graph>"], f"internal error {error!r}; the graph put back as it was")
            graph.owning_module.graph = kept
            graph = kept


def prepare_joint_graph(rules: Sequence[LoweringRule], graph: Any) -> None:
    """``config.joint_custom_post_pass``: each enabled lowering rule prepares the joint graph (never fails)."""
    for rule in rules:
        if not rule_applies(rule.name, rule.pass_name):
            continue
        try:
            rule.prepare_joint_graph(graph)
        except Exception as error:  # a rule must never fail a compile
            raise_where_strict(error)
            log.warning("optimus_ir rule %s raised preparing the joint graph", rule.name, exc_info=True)
            record(rule.name, False, ["<joint graph>"], f"internal error {error!r} preparing the joint graph")


def run_scheduler_rules(rules: Sequence[SchedulerRule], nodes: list[Any]) -> list[Any]:
    """Run the enabled ``rules`` (of one stage) in order; a rule that raises leaves the nodes as they were.

    Each rule's seconds go to Inductor's compile-time metrics as ``optimus_ir.<rule name>``
    (``torch._dynamo.utils.compile_times()``, beside ``Scheduler.__init__`` that contains them)."""
    for rule in rules:
        if not _applies(rule):
            continue
        try:
            with _running(rule.name, len(nodes)):
                nodes = rule.rewrite(nodes)
        except Exception as error:  # a rule must never fail a compile
            raise_where_strict(error)
            log.warning("optimus_ir rule %s raised; nodes left as they were", rule.name, exc_info=True)
            record(rule.name, False, ["<scheduler>"], f"internal error {error!r}; nodes left as they were")
    return nodes


def run_wrapper_rules(rules: Sequence[WrapperRule], wrapper: Any, lines: list[str]) -> list[str]:
    """Run the enabled ``rules`` in order on ``lines``; a rule that rejects or raises leaves them as they were."""
    from torch._inductor.virtualized import V

    for rule in rules:
        if not rule_applies(rule.name, rule.pass_name):
            continue
        try:
            lines, inputs, detail = rule.rewrite(wrapper, lines)
        except NotApplicable:
            continue
        except Reject as reason:
            record(rule.name, False, V.graph.graph_input_names, str(reason))
        except Exception as error:  # a rule must never fail a compile
            raise_where_strict(error)
            log.warning("optimus_ir rule %s raised; wrapper lines left as they were", rule.name, exc_info=True)
            record(rule.name, False, V.graph.graph_input_names,
                   f"internal error {error!r}; wrapper lines left as they were")
        else:
            record(rule.name, True, inputs, detail)
    return lines
