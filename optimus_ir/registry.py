"""Every rule, in the one order in which they are tried: ``RULES``.

Lowering rules for the same aten op are tried in this order (a cat that tiles slices becomes a view before it is
considered for a pointwise kernel); scheduler rules of one stage run in this order (the horizontal merges before
the piece groups, which leave alone what was merged; the alignment rule after both, over the merged kernels).
Where each rule runs is its :class:`~optimus_ir.rule.Stage`.
"""

from __future__ import annotations

from optimus_ir.lowering.embedding_bag import (
    EmbeddingBagBackwardOfRegularBagsToScatterAdd,
    EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd,
    EmbeddingBagToSegmentSum,
)
from optimus_ir.lowering.gram_entries import SelectedGramEntriesToDotProducts
from optimus_ir.lowering.grouped_layer_norm import PieceLayerNormsToOneLayerNorm
from optimus_ir.lowering.grouped_matmuls import IndependentMatmulsToGroupedMatmul, MatmulChainsToGroupedMlp
from optimus_ir.lowering.matmul_epilogue import MatmulBiasReluToAddmmActivation
from optimus_ir.lowering.matmul_row_scale import RowScaledMatmulInputToScaledProduct
from optimus_ir.lowering.matmul_sum import SharedOperandMatmulsToOneMatmul, SummedSmallMatmulsToOneReduction
from optimus_ir.lowering.matvec import MatvecToRowReduction
from optimus_ir.lowering.repeated_values import RepeatedComputationToFirstValue
from optimus_ir.lowering.split_cat import CatConsumerIntoPieces, SplitCatToPointwise
from optimus_ir.lowering.views import (
    CatOfTilingSlicesToView,
    SliceOfCatToInput,
    SplitOfCatToInputs,
    SplitWithSizesOfCatToInputs,
)
from optimus_ir.passes import Switch
from optimus_ir.rule import GraphRule, LoweringRule, SchedulerRule, Stage, WrapperRule
from optimus_ir.scheduler_hooks.dead_folded_cats import DeadFoldedCatElimination
from optimus_ir.scheduler_hooks.horizontal.rule import IdenticalKernelsToMemberTableKernel
from optimus_ir.scheduler_hooks.input_checks import InputAlignmentCheckedByMemberTables, InputAssertsToOneCheck
from optimus_ir.scheduler_hooks.piece_groups import PieceGroupToComboKernel
from optimus_ir.scheduler_hooks.scatter_targets import ScatterTargetFilledAfterScatterInputs
from optimus_ir.scheduler_hooks.unread_concats import UnreadConcatElimination

__all__ = ["RULES", "rules_of", "unknown_rules"]

Rule = GraphRule | LoweringRule | SchedulerRule | WrapperRule

RULES: tuple[Rule, ...] = (
    # splitcat, Dynamo's graph
    PieceLayerNormsToOneLayerNorm(),
    # horizontal, each post-grad graph
    MatmulChainsToGroupedMlp(),  # two layers a member; the products left: the next one
    IndependentMatmulsToGroupedMatmul(),
    # splitcat, lowering
    CatOfTilingSlicesToView(),
    SliceOfCatToInput(),
    SplitOfCatToInputs(),
    SplitWithSizesOfCatToInputs(),
    # horizontal, lowering (and the joint graph)
    EmbeddingBagToSegmentSum(),
    EmbeddingBagBackwardOfRegularBagsToScatterAdd(),  # bags of one size; the next one takes all others
    EmbeddingBagBackwardOfRuntimeOffsetsToScatterAdd(),
    RowScaledMatmulInputToScaledProduct(),
    SummedSmallMatmulsToOneReduction(),  # small sums; larger ones of shared operands: the next one
    SharedOperandMatmulsToOneMatmul(),
    RepeatedComputationToFirstValue(),
    MatvecToRowReduction(),
    SelectedGramEntriesToDotProducts(),
    # splitcat, lowering
    SplitCatToPointwise(),
    CatConsumerIntoPieces(),
    MatmulBiasReluToAddmmActivation(),
    # before the scheduler, before and after fusion
    UnreadConcatElimination(),
    ScatterTargetFilledAfterScatterInputs(),
    IdenticalKernelsToMemberTableKernel(),
    PieceGroupToComboKernel(),
    DeadFoldedCatElimination(),
    InputAlignmentCheckedByMemberTables(),
    # the wrapper
    InputAssertsToOneCheck(),
)


def rules_of(stage: Stage) -> list[Rule]:
    """The rules of ``stage``, in order."""
    return [rule for rule in RULES if rule.stage is stage]


def unknown_rules(switch: Switch) -> list[str]:
    """The names ``switch`` gives that no rule has."""
    return sorted(switch.named_rules - {rule.name for rule in RULES})
