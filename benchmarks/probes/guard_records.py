"""The stock guard's decisions where a model of the real suite is compiled as the suite compiles it
(``torch.compile`` on the device, one training step or inference call), against ``compile_report``'s: whether the
guard compared each graph, and the FX nodes of those it did not.

    python -m benchmarks guard-records seed-16x4-bf16-unequal/training
"""

from __future__ import annotations

import argparse

import torch

import optimus_ir
from benchmarks.measure import OwnInductor, cold_compile
from benchmarks.real_models import outputs_of, prepared_case
from optimus_ir import stock_guard
from optimus_ir.records import recording
from optimus_ir.testing.workloads import output_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="+", help="model/mode cases of the real suite")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for case in args.cases:
        _, mode, module, inputs = prepared_case(case, device)
        compiled = torch.compile(module, backend=OwnInductor())
        with cold_compile(), optimus_ir.enabled(), recording() as records, \
                torch.set_grad_enabled(mode == "training"):
            outputs = outputs_of(compiled(*inputs))
            if mode == "training":
                output_loss(outputs).backward()
        guard = [r for r in records if r.rule in (stock_guard.RULE, stock_guard.PEAK_RULE)]
        print(f"{case} on {device}: {len(records)} decisions, {len(guard)} of the guard")
        for record in guard:
            print(f"    {record}")


if __name__ == "__main__":
    main()
