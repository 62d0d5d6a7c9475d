"""The one record of what optimus_ir has replaced in Inductor: each replacement with the object it replaced.

:mod:`optimus_ir.patches` installs the hooks through it while a pass is enabled and undoes them all; a rule that
needs Inductor to behave otherwise for one block (its memory planning reusing what it worked out, a combo kernel's
block size) replaces through :meth:`Patches.scoped`, undone when the block ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["PATCHES", "Patches"]

_ABSENT = object()  # an attribute the owner did not have in its own ``__dict__`` (inherited, or none)


@dataclasses.dataclass
class _Applied:
    owner: Any  # a class, a module, a config module, or a dict (``item``)
    name: Any  # attribute name, or the dict's key
    item: bool
    original: Any
    replacement: Any


def _raw(owner: Any, name: Any, item: bool) -> Any:
    if item:
        return owner.get(name, _ABSENT)
    if isinstance(owner, type):  # as stored: a staticmethod stays one
        return owner.__dict__.get(name, _ABSENT)
    return getattr(owner, name, _ABSENT)


class Patches:
    """The replacements in force, each with the object it replaced."""

    def __init__(self) -> None:
        self._applied: dict[tuple[int, Any], _Applied] = {}

    def replace(self, owner: Any, name: Any, make: Callable[[Any], Any], *, item: bool = False) -> None:
        """Put ``make(current)`` in place of ``owner.name`` (``owner[name]`` where ``item``; ``current`` is None where
        there is none), unless ours is there."""
        key = (id(owner), name)
        current = _raw(owner, name, item)
        applied = self._applied.get(key)
        if applied is not None and current is applied.replacement:
            return
        visible = owner.get(name) if item else getattr(owner, name, None)
        replacement = make(visible)
        if item:
            owner[name] = replacement
        else:
            setattr(owner, name, replacement)
        self._applied[key] = _Applied(owner, name, item, current, _raw(owner, name, item))

    def original(self, owner: Any, name: Any, *, item: bool = False) -> Any:
        """What ``owner.name`` (or ``owner[name]``) is without our replacement."""
        applied = self._applied.get((id(owner), name))
        current = _raw(owner, name, item) if applied is None else applied.original
        if current is _ABSENT:
            return getattr(owner, name) if not item else None
        return current.__func__ if isinstance(current, staticmethod) else current

    @contextlib.contextmanager
    def scoped(self, owner: Any, name: Any, make: Callable[[Any], Any]) -> Iterator[None]:
        """Within the block, ``make(current)`` in place of ``owner.name``; the original again after it."""
        self.replace(owner, name, make)
        try:
            yield
        finally:
            self.undo(owner, name)

    def applied(self) -> list[_Applied]:
        return list(self._applied.values())

    def undo(self, owner: Any | None = None, name: Any = None) -> None:
        """Put back every original (or ``owner.name``'s); one the user replaced after us is left as the user's."""
        for key, applied in reversed(list(self._applied.items())):
            if owner is not None and (applied.owner is not owner or applied.name != name):
                continue
            del self._applied[key]
            if _raw(applied.owner, applied.name, applied.item) is not applied.replacement:
                continue
            if applied.original is _ABSENT:
                if applied.item:
                    del applied.owner[applied.name]
                else:
                    delattr(applied.owner, applied.name)
            elif applied.item:
                applied.owner[applied.name] = applied.original
            else:
                setattr(applied.owner, applied.name, applied.original)


PATCHES = Patches()
