"""Draw docs/headline.png: kernels and ms per call of the five storms, stock / combo kernels / optimus_ir.

Reads two committed results files (H200, torch 2.11.0+cu130) and needs only matplotlib:

    python docs/headline.py            # writes docs/headline.png
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
KERNELS = RESULTS / "2026-11-30" / "horizontal_tensors_of.json"  # kernels per call
PER_CALL = RESULTS / "2026-12-01" / "per_call_ledger_alignment_in_tables.json"  # ms per call, variants side by side

STORMS = {  # workload name in both files → label
    "128x tanh [256x512] float32": "128 × tanh\nfp32",
    "128x tanh [256x512] bfloat16": "128 × tanh\nbf16",
    "64x layer_norm [256x512] float32": "64 × layer norm\nfp32",
    "96x gelu on 7 sizes [64..4096 x 256] float32": "96 × gelu\n7 row counts",
    "48x row sum [512..2048 x 512] float32": "48 × row sum\nragged",
}
VARIANTS = {"stock": "stock Inductor", "combo_kernels": "combo_kernels=True", "optimus_ir": "optimus_ir"}
COLORS = {"stock": "#9a9a9a", "combo_kernels": "#6b9bd1", "optimus_ir": "#d1495b"}


def _values(path: Path, metric: str) -> dict[tuple[str, str], float]:
    rows = json.loads(path.read_text())["rows"]
    return {(row["workload"], row["variant"]): row[metric] for row in rows if metric in row}


def main() -> None:
    panels = [  # title, values, label format, log scale, source
        ("kernels per call, log scale", _values(KERNELS, "kernels/call"), "{:.0f}", True,
         f"{KERNELS.parent.name}/{KERNELS.stem}.md"),
        ("ms per call, median of 5 rounds", _values(PER_CALL, "ms/call median"), "{:.2f}", False,
         f"{PER_CALL.parent.name}/{PER_CALL.stem}.md"),
    ]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    width = 0.27
    for axis, (title, values, fmt, log, source) in zip(axes, panels):
        for j, variant in enumerate(VARIANTS):
            xs = [i + (j - 1) * width for i in range(len(STORMS))]
            ys = [values[(storm, variant)] for storm in STORMS]
            axis.bar(xs, ys, width, label=VARIANTS[variant], color=COLORS[variant])
            for x, y in zip(xs, ys):
                axis.annotate(fmt.format(y), (x, y), xytext=(0, 2), textcoords="offset points", ha="center",
                              va="bottom", fontsize=7)
        if log:
            axis.set_yscale("log")
            axis.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
        axis.set_title(f"{title}  ({source})", fontsize=9)
        axis.set_xticks(range(len(STORMS)), list(STORMS.values()), fontsize=8)
        axis.grid(axis="y", which="major", alpha=0.3)
        axis.spines[["top", "right"]].set_visible(False)
        low, high = axis.get_ylim()
        axis.set_ylim(low, high * (1.6 if log else 1.08))
    axes[0].legend(fontsize=8, frameon=False, loc="upper right")
    figure.suptitle("N copies of one op in one graph, one H200, torch 2.11.0+cu130 (lower is better)", fontsize=10)
    figure.tight_layout()
    out = Path(__file__).resolve().parent / "headline.png"
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
