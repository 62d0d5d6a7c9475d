"""The rule decisions, wrapper code and launches of every compile target of the shared registry
(``optimus_ir.testing.compile_targets``: the golden cases, the model families at the tiny and small sizes, the
storms and the chains), compiled with every pass by ``optimus_ir.inspect.compile_report`` (the virtual sm_90 device
where there is no GPU; nothing runs): a snapshot to compare before and after a change that must not change
behaviour.

    python -m benchmarks decisions NEW.json [--only SUBSTRING ...]     # compile every target, write NEW.json
    python -m benchmarks decisions NEW.json --compare OLD.json         # ... then compare it with OLD.json
    python -m benchmarks decisions NEW.json --compare OLD.json --no-compile   # compare two snapshots

The snapshot: ``{key: {"records": [str(record), ...], "wrapper": normalized wrapper, "launches": [...]}}``, or
``{key: {"error": repr(exception)}}`` where building or compiling the target raised. It is rewritten after each
target, so a run cut short leaves what it compiled. The comparison says, per key, whether its records, wrapper and
launches are identical, and prints the first lines that differ; it exits 1 where anything differs.

The registry depends on torch alone: copied into an older checkout (``optimus_ir/testing/``, with this file), it
makes the snapshot of the older code.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the fields of a snapshot's entry that are compared, in the order they are reported
FIELDS = ("records", "wrapper", "launches")


def snapshot_of(build: Any) -> dict[str, Any]:
    """The entry of one target: its records, normalized wrapper and launches, or the error that stopped it."""
    from optimus_ir.codegen_text import normalize
    from optimus_ir.inspect import compile_report

    try:
        fn, inputs = build()
        report = compile_report(fn, tuple(inputs))
        return {
            "records": [str(record) for record in report.rewrites],
            "wrapper": normalize(report.wrapper),
            "launches": list(report.launches),
        }
    except Exception as error:  # the snapshot says so; the other targets go on
        return {"error": repr(error)}


def take(path: Path, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Compile every target (or those whose key contains one of ``only``), writing ``path`` after each."""
    from optimus_ir.testing import compile_targets

    snapshot: dict[str, Any] = {}
    path.parent.mkdir(parents=True, exist_ok=True)
    for key, build in compile_targets():
        if only and not any(part in key for part in only):
            continue
        start = time.perf_counter()
        snapshot[key] = snapshot_of(build)
        error = snapshot[key].get("error")
        print(f"{key}: {time.perf_counter() - start:.1f} s" + (f" ERROR {error[:200]}" if error else ""), flush=True)
        path.write_text(json.dumps(snapshot, indent=1, sort_keys=True))
    return snapshot


def _as_lines(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.splitlines()
    if isinstance(value, list):
        return [str(item) for item in value]
    return [json.dumps(value)]


def first_differences(old: Any, new: Any, lines: int = 12) -> list[str]:
    """The first ``lines`` lines of a unified diff of ``old`` against ``new`` (lists or text)."""
    diff = difflib.unified_diff(_as_lines(old), _as_lines(new), "before", "after", n=1, lineterm="")
    return [line for _, line in zip(range(lines), diff)]


def compare(old: dict[str, Any], new: dict[str, Any], lines: int = 12) -> tuple[list[str], bool]:
    """A report of ``new`` against ``old``, key by key: identical, or which fields differ and how (first lines),
    its last line counting the identical keys; and whether every key is identical."""
    report = []
    same = 0
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            report.append(f"{key}: only before")
            continue
        if key not in old:
            report.append(f"{key}: only after")
            continue
        before, after = old[key], new[key]
        fields = [f for f in ("error", *FIELDS) if f in before or f in after]
        differing = [f for f in fields if before.get(f) != after.get(f)]
        if not differing:
            same += 1
            report.append(f"{key}: identical" + (" (both failed the same way)" if "error" in fields else ""))
            continue
        identical = [f for f in fields if f not in differing]
        report.append(f"{key}: DIFFERS in {', '.join(differing)}" + (f"; identical {', '.join(identical)}"
                                                                      if identical else ""))
        for field in differing:
            report.extend(f"    {field}: {line}" for line in first_differences(before.get(field), after.get(field),
                                                                               lines))
    keys = len(old.keys() | new.keys())
    report.append(f"{same} of {keys} keys identical (records, wrapper and launches)")
    return report, same == keys


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="the snapshot to write (or, with --no-compile, to read)")
    parser.add_argument("--only", nargs="+", metavar="SUBSTRING", help="only the keys that contain one of these")
    parser.add_argument("--compare", type=Path, metavar="OLD.json", help="compare the snapshot with this one")
    parser.add_argument("--no-compile", action="store_true", help="read PATH instead of compiling (with --compare)")
    parser.add_argument("--lines", type=int, default=12, help="diff lines shown per differing field")
    args = parser.parse_args(argv)
    if args.no_compile:
        if not args.compare:
            parser.error("--no-compile needs --compare")
        new = json.loads(args.path.read_text())
    else:
        new = take(args.path, args.only)
    if args.compare:
        old = json.loads(args.compare.read_text())
        if args.only:
            old = {key: value for key, value in old.items() if any(part in key for part in args.only)}
        report, identical = compare(old, new, args.lines)
        print("\n".join(report))
        sys.exit(0 if identical else 1)


if __name__ == "__main__":
    main()
