"""Grouped bar charts of benchmark results: one group of bars per case, one bar per variant, one panel per metric,
log scale. Reads the JSON that ``measure.write_results`` writes (``suite.json``, ``split_cat.json``,
``real_models.json``); needs only matplotlib.

    python -m benchmarks plot RESULTS.json OUT.png
    python -m benchmarks plot RESULTS.json OUT.png --metrics "kernels/call" "ms/call" "replay ms" "first call s"
    python -m benchmarks plot RUN1.json RUN2.json OUT.png      # the rows of several runs in one chart
    python -m benchmarks plot suite_summary.json OUT.png --variants stock optimus_ir --where mode=training

A row without a positive number for a metric (a failed CUDA-graph capture, say) has no bar there; a row with an
error has the word "error" in its place.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

#: The row fields that name a case, in label order; every other field is a variant or a metric.
CASE_FIELDS = ("workload", "model", "size", "dtype", "mode")
DEFAULT_METRICS = ("kernels/call", "ms/call")


def case_label(row: dict[str, Any]) -> str:
    return " ".join(str(row[field]) for field in CASE_FIELDS if field in row)


def plot(results: dict[str, Any], out: Path, metrics: tuple[str, ...] = DEFAULT_METRICS) -> None:
    """Draw ``metrics`` of ``results`` (``{"meta": ..., "rows": [...]}``) as grouped bars into ``out``."""
    rows = results["rows"]
    cases = list(dict.fromkeys(case_label(row) for row in rows))
    variants = list(dict.fromkeys(row["variant"] for row in rows))
    values = {(case_label(row), row["variant"]): row for row in rows}
    width = 0.8 / len(variants)
    figure_size = (max(8.0, 0.25 * len(cases) * len(variants) + 2), 3.5 * len(metrics))
    figure, axes = plt.subplots(len(metrics), 1, figsize=figure_size, squeeze=False, sharex=True)
    for axis, metric in zip(axes[:, 0], metrics):
        for j, variant in enumerate(variants):
            offset = (j - (len(variants) - 1) / 2) * width
            color = f"C{j}"
            bars = [
                (i + offset, value)
                for i, case in enumerate(cases)
                if isinstance(value := values.get((case, variant), {}).get(metric), (int, float)) and value > 0
            ]
            axis.bar([x for x, _ in bars], [y for _, y in bars], width, label=variant, color=color)
            for i, case in enumerate(cases):
                if "error" in values.get((case, variant), {}):
                    where = (i + offset, 0.02)
                    axis.annotate("error", where, xycoords=("data", "axes fraction"), rotation=90, ha="center",
                                  va="bottom", fontsize=7, color=color)
        axis.set_yscale("log")
        axis.set_ylabel(metric)
        axis.grid(axis="y", which="both", alpha=0.3)
    axes[-1, 0].set_xticks(range(len(cases)), cases, rotation=30, ha="right", fontsize=8)
    axes[0, 0].legend(ncols=len(variants), fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.02))
    meta = results.get("meta", {})
    figure.suptitle(" · ".join(str(meta[k]) for k in ("device", "torch", "date") if k in meta), fontsize=10)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="+", help="results JSON files, then the PNG to write")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="row fields to plot")
    parser.add_argument("--variants", nargs="+", help="only these variants' rows, in this order")
    parser.add_argument("--where", nargs="+", default=[], metavar="FIELD=VALUE", help="only rows with these values")
    args = parser.parse_args()
    *inputs, out = args.results
    if not inputs:
        parser.error("give at least one results JSON file and the PNG to write")
    runs = [json.loads(path.read_text()) for path in inputs]
    rows = [row for run in runs for row in run["rows"]]
    for condition in args.where:
        field, _, value = condition.partition("=")
        rows = [row for row in rows if str(row.get(field)) == value]
    if args.variants:
        rows = sorted((r for r in rows if r["variant"] in args.variants), key=lambda r: args.variants.index(r["variant"]))
    plot({"meta": runs[0].get("meta", {}), "rows": rows}, out, tuple(args.metrics))


if __name__ == "__main__":
    main()
