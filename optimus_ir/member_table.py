"""The layout of a member table: what the kernel's prologue reads and the run time writes, defined once.

A table is one int64 tensor. For ``members`` members, of ``values`` values each beyond their numel, and tensor
slots after that::

    [0, pad_to)                                   where each member's blocks start (int64 max past the last member)
    [pad_to, pad_to + members)                    each member's numel
    value_row(j) + member                         value j of each member (a divisor, a row length)
    address_row(slot) + member                    each member's address of tensor slot ``slot``

``pad_to`` is ``members`` rounded up to a power of two: the prologue finds a block's member with one
``tl.arange(0, pad_to)`` over the starts.
"""

from __future__ import annotations

import dataclasses

__all__ = ["INT64_MAX", "MemberTableLayout", "padded_members"]

INT64_MAX = 2**63 - 1


def padded_members(members: int) -> int:
    """``members`` rounded up to a power of two: the length of the table's starts."""
    return 1 << (members - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class MemberTableLayout:
    members: int
    pad_to: int
    values: int = 0

    @property
    def numels_row(self) -> int:
        return self.pad_to

    def value_row(self, j: int) -> int:
        return self.pad_to + self.members * (1 + j)

    def address_row(self, slot: int) -> int:
        return self.pad_to + self.members * (1 + self.values + slot)

    @staticmethod
    def constant(pad_to: int, starts: list[int], numels: list[int], values: list[int]) -> list[int]:
        """The part of the table that does not depend on addresses: starts, numels, values (row after row); the
        addresses follow, slot after slot."""
        return [*starts, *[INT64_MAX] * (pad_to - len(starts)), *numels, *values]
