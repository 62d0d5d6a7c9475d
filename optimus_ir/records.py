"""Rule decisions: one :class:`RewriteRecord` per decision, delivered to whoever listens (:func:`recording`, the
dump) and to the ``optimus_ir`` logger."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Iterator

__all__ = ["RewriteRecord", "add_listener", "record", "recording", "remove_listener"]

log = logging.getLogger("optimus_ir")


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


def record(rule: str, fired: bool, nodes: Iterable[object], detail: str) -> None:
    """Report one decision to every listener and to the ``optimus_ir`` logger."""
    entry = RewriteRecord(rule, fired, tuple(str(n) for n in nodes), detail)
    log.debug("%s", entry)
    for records in _listeners:
        records.append(entry)
