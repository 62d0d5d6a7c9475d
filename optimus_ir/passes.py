"""The pass names, and which passes and rules apply right now.

This is state of the process, not of a graph: :mod:`optimus_ir.switch` sets it, every rule driver reads it. A
switch names passes and, one by one, rules::

    all                                  every rule
    splitcat,horizontal                  the rules of these passes
    all,-SplitCatToPointwise             every rule but that one
    -SplitCatToPointwise                 the same
    splitcat,IndependentMatmulsToGroupedMatmul
                                         the split/cat rules, and that one of the horizontal pass
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import re
from collections.abc import Iterable, Iterator

__all__ = [
    "PASSES", "Switch", "active", "compiling_with", "configured", "enabled_passes", "parse_passes",
    "parse_switch", "rule_applies", "set_enabled", "suspended",
]

#: Every pass, by the name users give in ``OPTIMUS_IR`` / :func:`optimus_ir.enable`.
PASSES: tuple[str, ...] = ("splitcat", "horizontal")

ON_WORDS = frozenset({"1", "all", "on", "true", "yes"})
OFF_WORDS = frozenset({"", "0", "none", "off", "false", "no"})
#: how a rule's name looks in a switch (``-`` before it: switched off)
_RULE_NAME = re.compile(r"-?[A-Z][A-Za-z0-9]*")


@dataclasses.dataclass(frozen=True)
class Switch:
    """Which passes run (their hooks installed and called), and which of their rules apply."""

    #: the passes that run
    passes: frozenset[str] = frozenset()
    #: the passes every rule of which applies (the others' only where named in ``rules``)
    whole: frozenset[str] = frozenset()
    #: rules named on
    rules: frozenset[str] = frozenset()
    #: rules named off
    without: frozenset[str] = frozenset()

    def applies(self, rule: str, pass_name: str) -> bool:
        return (pass_name in self.whole or rule in self.rules) and rule not in self.without

    @property
    def named_rules(self) -> frozenset[str]:
        return self.rules | self.without

    def key(self) -> tuple[tuple[str, ...], ...]:
        """What Inductor's cache keys hold of it."""
        return tuple(tuple(sorted(names)) for names in (self.passes, self.whole, self.rules, self.without))


_enabled = Switch()
#: the switch of the compile in progress, where it came through ``backend="optimus_ir"``: in place of the process's
_compiling: contextvars.ContextVar[Switch | None] = contextvars.ContextVar("optimus_ir_compiling", default=None)
_suspended: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "optimus_ir_suspended", default=frozenset()
)


def parse_switch(spec: str | Iterable[str] | Switch | None) -> Switch:
    """Turn ``"all"``, ``"0"``, ``"splitcat,horizontal"``, ``"all,-RuleName"``, a list of such words, or None into
    a :class:`Switch`. Raises ValueError for a word that is neither a pass nor a rule's name (rule names are
    checked against the rules where they are installed: this module knows none)."""
    if isinstance(spec, Switch):
        return spec
    if spec is None:
        return Switch()
    if isinstance(spec, str):
        if spec.strip().lower() in OFF_WORDS:
            return Switch()
        spec = [word.strip() for word in spec.split(",") if word.strip()]
    whole, rules, without = set(), set(), set()
    for word in spec:
        if word.lower() in ON_WORDS:
            whole.update(PASSES)
        elif word.lower() in PASSES:
            whole.add(word.lower())
        elif _RULE_NAME.fullmatch(word):
            (without if word.startswith("-") else rules).add(word.lstrip("-"))
        else:
            raise ValueError(f"unknown optimus_ir pass or rule {word!r}; passes: {list(PASSES)}, rules: `python -m "
                             "optimus_ir rules`")
    if not whole and not rules and without:  # only rules switched off: of every pass
        whole.update(PASSES)
    return Switch(frozenset(PASSES) if rules else frozenset(whole), frozenset(whole), frozenset(rules),
                  frozenset(without))


def parse_passes(spec: str | Iterable[str] | None) -> frozenset[str]:
    """The passes that run under the switch ``spec`` (:func:`parse_switch`)."""
    return parse_switch(spec).passes


def set_enabled(switch: Switch) -> None:
    global _enabled
    _enabled = switch


def configured() -> Switch:
    """The switch the process set (also inside :func:`suspended`)."""
    return _enabled


def active() -> Switch:
    """The switch of the compile in progress: its backend's, else the process's (what Inductor's cache keys hold)."""
    return _compiling.get() or _enabled


def enabled_passes() -> frozenset[str]:
    """The passes whose rules may apply right now: the compile's (:func:`active`), less those :func:`suspended`."""
    return active().passes - _suspended.get()


def rule_applies(rule: str, pass_name: str) -> bool:
    """Whether the rule ``rule`` of the pass ``pass_name`` applies right now."""
    return pass_name in enabled_passes() and active().applies(rule, pass_name)


@contextlib.contextmanager
def compiling_with(switch: Switch) -> Iterator[None]:
    """Within the block ``switch`` decides, whatever the process's says: one compile's own passes and rules."""
    token = _compiling.set(switch)
    try:
        yield
    finally:
        _compiling.reset(token)


@contextlib.contextmanager
def suspended(names: Iterable[str] = PASSES) -> Iterator[None]:
    """Within the block the rules of the passes ``names`` (default: every pass) fall back to stock Inductor; hooks
    stay installed, nothing is reconfigured.

    Used to lower a graph once more in the middle of a compile: stock (the dump's "without" side, the guard's
    comparison), or without the split/cat pass (the guard's way back under stock's peak).
    """
    token = _suspended.set(_suspended.get() | frozenset(names))
    try:
        yield
    finally:
        _suspended.reset(token)
