"""How far one training step's parameter updates are from the same step in float64, per parameter, for eager fp32,
stock Inductor, combo kernels and optimus_ir: tells a rewrite's error apart from the model's own sensitivity to
fp32 rounding (the suite's "max rel err" compares against eager fp32 only).

    python benchmarks/training_errors.py --out DIR [--workload dlrm] [--size small]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import VARIANTS, cold_compile, header, variant_context, write_results  # noqa: E402
from workloads import WORKLOADS, make_optimizer, train_step  # noqa: E402


def step_updates(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], compiled: bool) -> dict[str, torch.Tensor]:
    """Each parameter's change in one step (after one eager step, as the suite does), in float64."""
    optimizer = make_optimizer(model)
    train_step(model, optimizer, inputs)
    before = {name: p.detach().double().clone() for name, p in model.named_parameters()}
    step = torch.compile(train_step) if compiled else train_step
    step(model, optimizer, inputs)
    return {name: p.detach().double() - before[name] for name, p in model.named_parameters()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workload", default="dlrm", choices=list(WORKLOADS))
    parser.add_argument("--size", default="small")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--variants", nargs="+", default=["eager", "stock", "combo_kernels", "optimus_ir"])
    args = parser.parse_args()
    model, inputs = WORKLOADS[args.workload].make(args.size, torch.float32, args.device)
    as_double = [x.double() if x.is_floating_point() else x for x in inputs]
    reference = step_updates(copy.deepcopy(model).double(), tuple(as_double), compiled=False)
    rows = []
    for variant in (v for v in VARIANTS if v.name in args.variants):
        with cold_compile(), variant_context(variant):
            updates = step_updates(copy.deepcopy(model), inputs, variant.compile)
        errors = {
            name: float((updates[name] - ref).norm() / ref.norm().clamp_min(1e-30)) for name, ref in reference.items()
        }
        worst = sorted(errors, key=errors.get, reverse=True)[:3]
        rows.append(
            {
                "variant": variant.name,
                "max rel err vs fp64": errors[worst[0]],
                "worst parameters": ", ".join(f"{name} {errors[name]:.3g}" for name in worst),
                "norm of worst update": float(reference[worst[0]].norm()),
            }
        )
        print(rows[-1], flush=True)
    meta = header(" ".join(sys.argv)) | {"workload": args.workload, "size": args.size}
    columns = ["variant", "max rel err vs fp64", "worst parameters", "norm of worst update"]
    write_results(args.out, f"training_errors_{args.workload}_{args.size}", meta, rows, columns)


if __name__ == "__main__":
    main()
