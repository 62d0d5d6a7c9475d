"""One table of every suite case measured: optimus_ir against stock Inductor, combo kernels and FX Optimus, each case
from the last of the given runs that measured it (all variants of a case come from that one run).

    python -m benchmarks summary OUT.md RUN1/suite.json RUN2/suite.json ...

Writes OUT.md (the table, then the cases where optimus_ir is slower per call or in replay than stock, uses more
peak memory, or errs more than stock against eager beyond the dtype's tolerance) and OUT.json (the rows the table
came from, each with the run it came from, in ``plot.py``'s format).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

CASE_FIELDS = ("workload", "size", "dtype", "mode")
COMPARED = ("stock", "combo_kernels", "fx_optimus", "optimus_ir")
MODE_ORDER = {"inference": 0, "training": 1}
SIZE_ORDER = {"small": 0, "large": 1}
DTYPE_ORDER = {"fp32": 0, "bf16": 1}

#: A difference below this fraction of stock's is the spread of repeated runs, not a slowdown (the README quotes
#: the spread of real models' per-call times across runs).
NOISE = 0.05
#: An error against eager is a mismatch above twice stock's and above ``torch.testing.assert_close``'s default
#: relative tolerance for the dtype (a fused kernel that keeps fp32 between ops that eager rounds to bf16 differs
#: from eager by less than one bf16 rounding).
RTOL = {"fp32": 1.3e-6, "bf16": 1.6e-2}


def _case(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(row[field] for field in CASE_FIELDS)


def latest_cases(files: list[Path]) -> dict[tuple[str, ...], tuple[Path, dict[str, dict[str, Any]]]]:
    """Case → (file, variant → row), from the last file that has the case's optimus_ir row without an error."""
    cases: dict[tuple[str, ...], tuple[Path, dict[str, dict[str, Any]]]] = {}
    for file in files:
        rows = json.loads(file.read_text())["rows"]
        by_case: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {}
        for row in rows:
            by_case.setdefault(_case(row), {})[row["variant"]] = row
        for case, variants in by_case.items():
            ours = variants.get("optimus_ir")
            if ours is not None and not ours.get("error") and "stock" in variants:
                cases[case] = (file, variants)
    return dict(sorted(cases.items(), key=lambda kv: _order(kv[0])))


def _order(case: tuple[str, ...]) -> tuple[Any, ...]:
    workload, size, dtype, mode = case
    return (workload != "dlrm", workload, MODE_ORDER[mode], SIZE_ORDER[size], DTYPE_ORDER[dtype])


def _num(row: dict[str, Any] | None, metric: str) -> float | None:
    value = None if row is None or row.get("error") else row.get(metric)
    return value if isinstance(value, (int, float)) else None


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "–"
    return f"{numerator / denominator:.2g}x" if numerator / denominator < 10 else f"{numerator / denominator:.0f}x"


def _cells(variants: dict[str, dict[str, Any]], metric: str) -> str:
    return " / ".join(_fmt(_num(variants.get(name), metric)) for name in COMPARED)


def findings(case: tuple[str, ...], variants: dict[str, dict[str, Any]]) -> list[str]:
    """What in this case goes against optimus_ir's promises: slower, more memory, larger errors than stock."""
    stock, ours = variants["stock"], variants["optimus_ir"]
    notes = []
    for metric, what in (("ms/call", "per call"), ("replay ms", "in replay")):
        a, b = _num(stock, metric), _num(ours, metric)
        if a and b and b > a * (1 + NOISE):
            notes.append(f"slower {what}: {_fmt(b)} vs {_fmt(a)} ms")
    a, b = _num(stock, "peak MiB"), _num(ours, "peak MiB")
    if a is not None and b is not None and b > a + 0.5:
        notes.append(f"peak memory above stock's: {_fmt(b)} vs {_fmt(a)} MiB")
    a, b = _num(stock, "max rel err"), _num(ours, "max rel err")
    if a is not None and b is not None and b > max(2 * a, RTOL[case[2]]):
        notes.append(f"error against eager above 2x stock's and the dtype's tolerance: {b:.2g} vs {a:.2g}")
    if ours.get("finite") is False:
        notes.append("non-finite output")
    return notes


def table(cases: dict[tuple[str, ...], tuple[Path, dict[str, dict[str, Any]]]]) -> list[str]:
    lines = [
        "| workload | size | dtype | mode | kernels/call: " + " / ".join(COMPARED) + " | ms/call: same order "
        "| replay ms: same order | first call s: same order | peak MiB: stock / optimus_ir "
        "| optimus_ir vs stock: kernels, per call, replay | max rel err: stock / optimus_ir | run |",
        "|" + "---|" * 12,
    ]
    for case, (file, variants) in cases.items():
        stock, ours = variants["stock"], variants["optimus_ir"]
        versus = ", ".join(
            (
                _ratio(_num(stock, "kernels/call"), _num(ours, "kernels/call")) + " fewer",
                _ratio(_num(stock, "ms/call"), _num(ours, "ms/call")),
                _ratio(_num(stock, "replay ms"), _num(ours, "replay ms")),
            )
        )
        errors = " / ".join(
            "–" if (e := _num(v, "max rel err")) is None else f"{e:.2g}" for v in (stock, ours)
        )
        peaks = " / ".join(_fmt(_num(v, "peak MiB")) for v in (stock, ours))
        lines.append(
            f"| {' | '.join(case)} | {_cells(variants, 'kernels/call')} | {_cells(variants, 'ms/call')} "
            f"| {_cells(variants, 'replay ms')} | {_cells(variants, 'first call s')} | {peaks} | {versus} "
            f"| {errors} | {file.parent.name}/{file.name} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="OUT.md; OUT.json is written beside it")
    parser.add_argument("runs", type=Path, nargs="+", help="suite.json files, oldest first")
    args = parser.parse_args()
    cases = latest_cases(args.runs)
    notes = {case: findings(case, variants) for case, (_, variants) in cases.items()}
    lines = [
        "# suite summary",
        "",
        f"{len(cases)} cases; each from the last of these runs that measured it: "
        + ", ".join(f"`{run}`" for run in args.runs),
        "",
        *table(cases),
        "",
        "## Where optimus_ir does worse than stock Inductor",
        "",
        f"(slower per call or in replay by more than {NOISE:.0%}, peak memory higher by more than 0.5 MiB, error "
        "against eager above both 2x stock's and `assert_close`'s default rtol for the dtype: "
        + ", ".join(f"{d} {r:g}" for d, r in RTOL.items())
        + ")",
        "",
    ]
    flagged = [(case, n) for case, n in notes.items() if n]
    lines += [f"- {' '.join(case)}: " + "; ".join(n) for case, n in flagged] or ["- none"]
    args.out.write_text("\n".join(lines) + "\n")
    first_meta = json.loads(args.runs[-1].read_text()).get("meta", {})
    rows = [
        row | {"run": f"{file.parent.name}/{file.name}", "findings": notes[case]}
        for case, (file, variants) in cases.items()
        for row in variants.values()
    ]
    meta = {k: first_meta[k] for k in ("date", "torch", "triton", "device") if k in first_meta}
    meta["command"] = "benchmarks/summary.py " + " ".join(str(a) for a in (args.out, *args.runs))
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
