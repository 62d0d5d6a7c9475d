"""The graph inputs whose alignment the member tables check instead of Inductor: shared by the rule that moves
them (``InputAlignmentCheckedByMemberTables``) and the merged kernels' codegen, which gives them back where a
merged kernel falls back to stock kernels."""

from __future__ import annotations

from collections.abc import Iterable

from optimus_ir.graph_state import current as graph_state
from optimus_ir.records import record

RULE = "InputAlignmentCheckedByMemberTables"


def moved_to_tables() -> dict[str, int]:
    """This graph's inputs whose alignment its member tables check, by their index among its inputs."""
    return graph_state().alignment_in_tables


def check_alignment_again(names: Iterable[str]) -> None:
    """Inductor checks the alignment of ``names`` again: a merged kernel that read them fell back to stock kernels,
    which take them as aligned."""
    from torch._inductor.virtualized import V

    moved = moved_to_tables()
    again = [name for name in names if name in moved]
    if again:
        V.graph.inputs_to_check.extend(moved.pop(name) for name in again)
        V.graph.inputs_to_check.sort()
        record(RULE, False, again, "their merged kernel fell back to stock kernels: Inductor checks them again")
