"""Rule decisions: one :class:`RewriteRecord` per decision, delivered to whoever listens (:func:`recording`, the
dump), to the ``optimus_ir`` logger and to Inductor's counters.

As Inductor's own passes report theirs:

- ``TORCH_LOGS="optimus_ir"`` logs each decision, one line each (INFO); ``TORCH_LOGS="+optimus_ir"`` adds the
  details behind them (DEBUG: each memory estimate of a tried merge, for one);
- ``torch._dynamo.utils.counters["optimus_ir"]["<rule>"]`` counts a rule's firings, ``"<rule>_rejected"`` its
  rejections, over the process (``counters.clear()`` resets them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Iterator

__all__ = ["RewriteRecord", "add_listener", "record", "recording", "remove_listener", "warn_once"]

log = logging.getLogger("optimus_ir")

#: the nodes a decision's line names (the rest counted: the dump's summary and records keep them all)
_NODES_SHOWN = 6
_warned: set[object] = set()  # what :func:`warn_once` has warned of


@dataclasses.dataclass(frozen=True)
class RewriteRecord:
    """One decision of one rule on one candidate."""

    rule: str
    fired: bool
    nodes: tuple[str, ...]  # the FX nodes (lowering) or scheduler nodes (scheduler) concerned
    detail: str  # fired: what was done; not fired: why not

    def __str__(self) -> str:
        verdict = "FIRED   " if self.fired else "rejected"
        shown = ", ".join(self.nodes[:_NODES_SHOWN])
        if len(self.nodes) > _NODES_SHOWN:
            shown += f" and {len(self.nodes) - _NODES_SHOWN} more"
        return f"{verdict} {self.rule} on {shown}: {self.detail}"


def warn_once(key: object, message: str, *args: object) -> None:
    """A warning on the ``optimus_ir`` logger, the first time ``key`` comes in this process (a setting read at every
    decision, a name given once for every compile)."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


_listeners: list[list[RewriteRecord]] = []


def add_listener(records: list[RewriteRecord]) -> None:
    """Append every later :class:`RewriteRecord` to ``records`` (until :func:`remove_listener`); once, however
    often it is added."""
    if not any(listener is records for listener in _listeners):
        _listeners.append(records)


def remove_listener(records: list[RewriteRecord]) -> None:
    """Stop appending to ``records`` (this list, not an equal one); nothing where it is not listening."""
    _listeners[:] = [listener for listener in _listeners if listener is not records]


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
    from torch._dynamo.utils import counters

    entry = RewriteRecord(rule, fired, tuple(str(n) for n in nodes), detail)
    log.info("%s", entry)
    counters["optimus_ir"][rule if fired else f"{rule}_rejected"] += 1
    for records in _listeners:
        records.append(entry)
