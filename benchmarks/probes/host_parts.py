"""Host cost of the per-call steps of a merged 128 × tanh kernel's wrapper, each timed alone on CPU tensors (no GPU
needed; the steps are host work either way): Inductor's own per-input asserts and alignment checks (stock pays
them too), the output allocation split into 128 views (autograd views, as until the ninth session, and tensors of
their own to autograd, ``runtime.tensors_of``, as now), and the member table's lookup by addresses (given each
output view, as until the eighth session, and given their one allocation, as now), and the inputs' asserts as
optimus_ir's wrapper makes them (``InputAssertsToOneCheck``: one ``InputChecks.check`` call), and a merged
backward's check of which saved tensors the call alone holds (``runtime.sole_holders``). ``--device cuda``
times the same steps on CUDA tensors (the host work differs by device: the tensors' checks, their allocation).

    python -m benchmarks host-parts --out DIR [--device cuda]
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from pathlib import Path

import torch
from torch._C._dynamo.guards import _empty_strided_cuda as empty_strided_cuda
from torch._C._dynamo.guards import assert_size_stride
from torch._inductor.utils import copy_misaligned_inputs

from benchmarks.measure import header, write_results
from optimus_ir.runtime import InputChecks, MemberTable, sole_holders, tensors_of

MEMBERS, ROWS, WIDTH = 128, 256, 512


def _us(fn, number: int = 500) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    inputs = [torch.empty(ROWS, WIDTH, device=args.device) for _ in range(MEMBERS)]
    whole = torch.empty(MEMBERS, ROWS, WIDTH, device=args.device)
    outputs = whole.unbind(0)
    rows_of_all = whole.view(MEMBERS * ROWS, WIDTH)  # the allocation as the wrapper makes it
    numel = ROWS * WIDTH
    starts, numels = list(range(0, MEMBERS * numel, numel)), [numel] * MEMBERS
    # until the eighth session the table was given each output view; now the outputs' one allocation
    by_view = MemberTable(starts, numels, MEMBERS)
    by_view(*inputs, *outputs)
    offsets = [0] * MEMBERS + [i * numel * whole.element_size() for i in range(MEMBERS)]
    by_allocation = MemberTable(starts, numels, MEMBERS, byte_offsets=offsets, spans=[1] * MEMBERS + [MEMBERS])
    by_allocation(*inputs, whole)
    saved = tuple(inputs)
    checks = InputChecks([((ROWS, WIDTH), (WIDTH, 1))] * MEMBERS)
    checks.assert_size_stride(*inputs)
    steps = {
        "Inductor: 128 assert_size_stride (stock too)": lambda: [
            assert_size_stride(x, (ROWS, WIDTH), (WIDTH, 1)) for x in inputs
        ],
        "optimus_ir: the same asserts as one check (InputChecks.check)": lambda: checks.check(*inputs),
        "Inductor: alignment check of 128 inputs (stock too)": lambda: copy_misaligned_inputs(
            list(inputs), list(range(MEMBERS))
        ),
        "optimus_ir until the ninth session: one output split into 128 views (unbind)": lambda: whole.unbind(0),
        "optimus_ir: one output split into 128 tensors (tensors_of: split_with_sizes below autograd's view "
        "tracking)": lambda: tensors_of(rows_of_all, (ROWS,) * MEMBERS),
        "optimus_ir: member table lookup by 256 addresses (each output view)": lambda: by_view(*inputs, *outputs),
        "optimus_ir: member table lookup by 129 addresses (the outputs' one allocation)": lambda: by_allocation(
            *inputs, whole
        ),
        "optimus_ir: which of 128 saved tensors the call alone holds (sole_holders, a merged backward)": lambda: (
            sole_holders(saved)
        ),
    }
    if whole.is_cuda:  # the wrapper's lines around its launches, and freeing what a call returns
        device = whole.device.index

        def device_lines() -> None:
            with torch.cuda._DeviceGuard(device):
                torch.cuda.set_device(device)
                torch._C._cuda_getCurrentRawStream(device)

        steps["the wrapper's device guard, set_device and stream (stock too)"] = device_lines
        steps["one allocation of all 128 outputs (empty_strided_cuda)"] = lambda: empty_strided_cuda(
            (MEMBERS * ROWS, WIDTH), (WIDTH, 1), torch.float32
        )
        steps["128 allocations, one per output, as stock's wrapper (empty_strided_cuda)"] = lambda: [
            empty_strided_cuda((ROWS, WIDTH), (WIDTH, 1), torch.float32) for _ in range(MEMBERS)
        ]
    rows = [{"step": name, "us per call": round(_us(fn), 1)} for name, fn in steps.items()]
    meta = header(" ".join(sys.argv)) | {"cpu": platform.processor() or platform.machine(), "tensors on": args.device}
    write_results(args.out, f"host_parts_{args.device.split(':')[0]}", meta, rows, ["step", "us per call"])


if __name__ == "__main__":
    main()
