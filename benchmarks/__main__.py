"""``python -m benchmarks <command> [ARGS...]``: every benchmark and probe of optimus_ir by one command line;
``python -m benchmarks <command> --help`` shows a command's arguments."""

from __future__ import annotations

import importlib
import sys

#: command → (module, what it does), in the order --help lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "suite": ("benchmarks.suite", "the workload suite (model families, inference and training) under every variant"),
    "storms": ("benchmarks.storms", "N copies of one small op: variants, CUDA graphs, dynamic shapes"),
    "chains": ("benchmarks.chains", "split -> pointwise -> cat chains under every variant"),
    "real": ("benchmarks.real_models", "real models (hetero GNN, CNNs, MoE, DLRM), inference and training: stock / "
             "combo / optimus_ir (--codegen-only: no GPU)"),
    "loops": ("benchmarks.loops", "real models over streams of batches whose shapes change (recompiles, steady "
              "state against one frozen batch): stock / combo / optimus_ir (--scale tiny: CPU)"),
    "per-call": ("benchmarks.per_call", "time per call of the storms, variants in interleaved rounds, and its floors"),
    "first-call": ("benchmarks.first_call", "cold-compile seconds, stock and optimus_ir alternating, and their phases"),
    "memory": ("benchmarks.memory", "what is allocated at the peak of one call, stock against optimus_ir"),
    "all": ("benchmarks.run_all", "the GPU box: the CUDA tests (tests/gpu), chains, storms, real, suite"),
    "summary": ("benchmarks.summary", "one table of every suite case from several runs (no GPU needed)"),
    "plot": ("benchmarks.plot", "bar charts of results JSON (needs matplotlib)"),
    "decisions": ("benchmarks.probes.decisions", "rule records, wrappers and launches of every registry target "
                  "(no GPU needed); --compare OLD.json"),
    "per-call-profile": ("benchmarks.probes.per_call_profile", "profile of calls of suite cases, variants in turn"),
    "host-parts": ("benchmarks.probes.host_parts", "host cost of each per-call step of a merged wrapper (CPU default)"),
    "launch-cost": ("benchmarks.probes.launch_cost", "host us of one Triton launch by grid size"),
    "table-misses": ("benchmarks.probes.table_misses", "address sets of member tables over calls, cache misses"),
    "table-blocks": ("benchmarks.probes.member_table_blocks", "hand-written member-table kernels by block size"),
    "step-events": ("benchmarks.probes.training_step_events", "CUDA events and peak memory of a training step's "
                    "first steps"),
    "peak-tolerance": ("benchmarks.probes.peak_tolerance", "what a tolerance in the memory check would buy"),
    "virtual-vs-compile": ("benchmarks.probes.virtual_vs_compile", "compile_report's graphs against torch.compile's"),
    "report-modules": ("benchmarks.probes.report_modules", "compile_report on real modules torch.compile takes"),
    "guard-cost": ("benchmarks.probes.guard_cost", "compile seconds with and without the stock guard (no GPU needed)"),
    "guard-records": ("benchmarks.probes.guard_records", "the stock guard's decisions in a compile as the real suite's"),
    "seed-scale": ("benchmarks.probes.seed_scale", "issue 33's seed at full size: first call, kernels, ms per call, by variant in processes of their own; the floor of any case"),
    "gram-entries": ("benchmarks.probes.gram_entries", "DLRM's interaction: bmm and gather against the kept pairs' dot products"),
    "matmul-sum-cost": ("benchmarks.probes.matmul_sum_cost", "sums of Linears as one reduction against cuBLAS, by "
                        "size (the bound's calibration), and real models with and without it"),
    "launchers": ("benchmarks.probes.launchers", "a real model's Triton kernels by launcher (static or Triton's "
                  "Python one), by variant"),
    "dynamic-shapes": ("benchmarks.probes.dynamic_shapes", "every registry target compiled with symbolic sizes, "
                       "stock against optimus_ir: launches, rules fired, rejections naming a symbol (no GPU needed)"),
    "virtual-peaks": ("benchmarks.probes.virtual_peaks", "launches and replayed wrapper peaks per graph on the virtual device, stock against optimus_ir"),
    "alignment-ab": ("benchmarks.probes.alignment_ab", "member tables with and without alignment hints"),
    "flat-transpose-cost": ("benchmarks.probes.flat_transpose_cost", "transposes over one flat index against 2-d "
                            "tiles (the cost model's calibration)"),
    "call-events": ("benchmarks.probes.call_events", "a real model's CUDA events call by call, those not in every "
                    "call named"),
    "host-gap": ("benchmarks.probes.host_gap", "a real model's ms per call by variant, calls interleaved; code "
                 "compiled under one variant's settings, called under another's"),
    "order-drift": ("benchmarks.probes.order_drift", "a real model's ms per call by the variants' order in the run"),
    "compile-profile": ("benchmarks.probes.compile_profile", "a real model's compile under cProfile, stock or "
                        "optimus_ir (no GPU needed)"),
    "compile-times": ("benchmarks.probes.compile_times", "a real model's first compile seconds, stock / optimus_ir, "
                      "and Dynamo + AOTAutograd alone (no GPU needed)"),
    "merge-cost": ("benchmarks.probes.merge_cost", "a real model's device time, stock against optimus_ir, by the "
                   "launches that changed"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m benchmarks <command> [ARGS...]", "       python -m benchmarks <command> --help"]
    sections = {"suite": "benchmarks (on a GPU):", "summary": "results:", "decisions": "probes (benchmarks/probes/):"}
    for name, (_, what) in COMMANDS.items():
        if name in sections:
            lines += ["", sections[name]]
        lines.append(f"  {name:<{width}}  {what}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return
    command, *rest = argv
    if command not in COMMANDS:
        print(f"unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        sys.exit(2)
    module = importlib.import_module(COMMANDS[command][0])
    sys.argv = [f"python -m benchmarks {command}", *rest]  # each command parses sys.argv; results record it
    module.main()


if __name__ == "__main__":
    main(sys.argv[1:])
