"""What a rule is: its stage, its base class, and how it says that it does not apply.

A rule is one small class with a docstring that shows the IR before and after; its name (in the dump, the logs,
the counters and the switch) is its class's. By stage:

- :class:`GraphRule` (``Stage.PRE_GRAD``) rewrites Dynamo's FX graph before AOTAutograd traces it (Inductor's
  ``pre_grad_custom_pass``): only where what follows would otherwise be traced, differentiated and lowered once per
  piece. At ``Stage.POST_GRAD`` it rewrites each graph Inductor compiles (a forward, a backward) just before it is
  lowered (``post_grad_custom_post_pass``): where a rewrite spans several aten ops that Inductor lowers one at a
  time. Its ``rewrite`` edits the graph in place, checking a candidate whole before changing it, and reports
  through :func:`optimus_ir.records.record`.

- :class:`LoweringRule` (``Stage.LOWERING``) replaces the lowering of one aten op (e.g. ``aten.cat``) for the inputs
  it recognizes. Its ``rewrite`` returns ``(ir_result, what_it_did)`` or raises :class:`Reject` with the reason; the
  driver then tries the next rule and finally the stock lowering.
- :class:`SchedulerRule` rewrites the graph's operations before the scheduler is built
  (``Stage.PRE_SCHEDULER``), or the scheduler's node list before (``Stage.PRE_FUSION``) or after
  (``Stage.POST_FUSION``) Inductor's own fusion. Its ``rewrite`` returns the new list and reports through
  :func:`optimus_ir.records.record`.
- :class:`WrapperRule` (``Stage.WRAPPER``) rewrites the lines Inductor writes into a graph's Python wrapper for its
  inputs' checks. Its ``rewrite`` returns ``(lines, inputs_concerned, what_it_did)`` or raises :class:`Reject`.

The rules, in the order they are tried, are listed once: ``optimus_ir.registry.RULES``.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

__all__ = ["GraphRule", "LoweringRule", "NotApplicable", "Reject", "SchedulerRule", "Stage", "WrapperRule"]


class Stage(enum.Enum):
    """Where in Inductor's compile a rule runs, in compile order."""

    PRE_GRAD = "pre_grad"  # on Dynamo's FX graph, before AOTAutograd
    POST_GRAD = "post_grad"  # on each post-grad graph (forward, backward), just before lowering
    LOWERING = "lowering"  # in place of an aten op's lowering (and, before it, on the joint graph)
    PRE_SCHEDULER = "pre_scheduler"  # on ``V.graph.operations``, before the scheduler traces their bodies
    PRE_FUSION = "pre_fusion"  # on the scheduler's nodes, before Inductor's fusion
    POST_FUSION = "post_fusion"  # on the scheduler's nodes, after Inductor's fusion
    WRAPPER = "wrapper"  # on the lines of the wrapper that check the graph's inputs


class Reject(Exception):
    """Raised by a rule that does not apply; the message says why (it goes to the dump)."""


class NotApplicable(Reject):
    """Raised by a rule for inputs that are not of its kind at all (a slice of something that is not a cat): the
    driver moves on without recording it, so the dump lists the decisions about real candidates only."""


class _Rule:
    """What every rule has: its name (its class's, unless the class says otherwise), its pass and its stage."""

    name: ClassVar[str]
    pass_name: ClassVar[str]
    stage: ClassVar[Stage]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in vars(cls):
            cls.name = cls.__name__


class GraphRule(_Rule):
    """Base of rules that rewrite an FX graph: Dynamo's before AOTAutograd, or a post-grad one (see :class:`Stage`)."""

    stage: ClassVar[Stage] = Stage.PRE_GRAD

    def rewrite(self, graph: Any) -> None:
        raise NotImplementedError


class LoweringRule(_Rule):
    """Base of rules that take over the lowering of one aten op for the inputs they recognize."""

    stage: ClassVar[Stage] = Stage.LOWERING
    op: ClassVar[Any]  # the aten OpOverload whose lowering the rule takes over, or a tuple of them
    #: a firing can make the graph launch more kernels than stock (the op is lowered to other nodes, so what fuses
    #: changes): the stock guard compares such a graph with stock's. False for views (they remove copies) and for
    #: ATen calls replaced by kernels (an ATen call counts one launch in the wrapper, whatever it launches)
    may_add_launches: ClassVar[bool] = False

    def rewrite(self, *args: Any, **kwargs: Any) -> tuple[Any, str]:
        raise NotImplementedError

    def prepare_joint_graph(self, graph: Any) -> None:
        """Before the partitioner splits the joint forward + backward FX graph: record in ``node.meta`` the facts
        only it shows, for ``rewrite`` to read when the backward is lowered on its own (the partitioner copies
        ``meta``), and make the backward stop reading what ``rewrite`` will not need (so that the forward need not
        save it). Anything changed must compute the same values. Default: nothing."""


class SchedulerRule(_Rule):
    """Base of rules that rewrite the operations or scheduler nodes of a graph (see :class:`Stage`)."""

    stage: ClassVar[Stage] = Stage.POST_FUSION

    def rewrite(self, nodes: list[Any]) -> list[Any]:
        raise NotImplementedError


class WrapperRule(_Rule):
    """Base of rules that rewrite the lines of a graph's Python wrapper that check its inputs (what
    ``PythonWrapperCodegen.codegen_input_size_asserts`` writes at the start of ``call``)."""

    stage: ClassVar[Stage] = Stage.WRAPPER

    def rewrite(self, wrapper: Any, lines: list[str]) -> tuple[list[str], list[str], str]:
        raise NotImplementedError

