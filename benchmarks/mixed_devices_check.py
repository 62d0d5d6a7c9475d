"""On real devices: members on different devices are never one group (the horizontal issue's "mixed devices").

    python benchmarks/mixed_devices_check.py --out DIR

Each case is one graph of copies of one op whose tensors are on several devices, compiled with optimus_ir and
compared with eager. For each: the horizontal pass's fired decisions (how many members each merged), the CUDA
kernels one call launches on each GPU (profiler), and the max relative error.

- ``cpu + cuda:0``: 4 copies on CUDA tensors and 4 on CPU tensors. The CUDA ones merge into one kernel; the CPU ones
  are Inductor's C++ kernels (no Triton backend there: never merged).
- ``cuda:0 + cuda:1`` (a machine of two GPUs): 4 copies on each GPU: one merged kernel per GPU, none across them.
- ``cuda:0 × 0-d cpu``: 4 CUDA tensors each scaled by a 0-d CPU tensor, which the kernel is passed by value: a
  number each (never one kernel: it would read the first member's number), and one number for all (one kernel).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import gpu_check_out_dir, header, max_rel_error, write_results  # noqa: E402

import optimus_ir  # noqa: E402
from optimus_ir.registry import recording  # noqa: E402

RULE = "IdenticalKernelsToMemberTableKernel"


def tanh_each(*xs):
    return [torch.tanh(x) for x in xs]


def layer_norm_each(*xs):
    return [F.layer_norm(x, x.shape[-1:]) for x in xs]


def scaled_each(*args):
    n = len(args) // 2
    return [x * s + 1 for x, s in zip(args[:n], args[n:])]


def kernels_by_device(call: Callable[[], object]) -> dict[int, int]:
    """CUDA kernels one call launches, by GPU index."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return dict(sorted(Counter(e.device_index for e in kernels).items()))


def check(case: str, fn: Callable, inputs: list[torch.Tensor]) -> dict:
    expected = fn(*inputs)
    torch._dynamo.reset()
    with optimus_ir.enabled(), recording() as records:
        run = torch.compile(fn)
        actual = run(*inputs)
    fired = [r for r in records if r.rule == RULE and r.fired]
    return {
        "case": case,
        "op": fn.__name__,
        "merged groups (members each)": " ".join(str(len(r.nodes)) for r in fired),
        "CUDA kernels per call by GPU": str(kernels_by_device(lambda: run(*inputs))),
        "max rel err": max_rel_error(actual, expected),
        "decisions": "; ".join(f"{'FIRED' if r.fired else 'rejected'}: {r.detail}" for r in records if r.rule == RULE),
    }


def main() -> None:
    out = gpu_check_out_dir()
    placements = {"cpu + cuda:0": ["cpu", "cuda:0"]}
    if torch.cuda.device_count() > 1:
        placements["cuda:0 + cuda:1"] = ["cuda:0", "cuda:1"]
    cases = [
        (case, fn, [torch.randn(256 + 32 * i, 512, device=device) for device in devices for i in range(4)])
        for case, devices in placements.items()
        for fn in (tanh_each, layer_norm_each)
    ]
    xs = [torch.randn(256 + 32 * i, 512, device="cuda:0") for i in range(4)]
    cases += [
        ("cuda:0 × 0-d cpu, a number each", scaled_each, xs + [torch.tensor(float(i + 2)) for i in range(4)]),
        ("cuda:0 × 0-d cpu, one number", scaled_each, xs + [torch.tensor(3.0)] * 4),
    ]
    rows = []
    for case, fn, inputs in cases:
        try:
            rows.append(check(case, fn, inputs))
        except Exception as error:  # record it, check the rest
            rows.append({"case": case, "op": fn.__name__, "decisions": f"error: {error!r}"[:500]})
        print(rows[-1], flush=True)
    columns = ["case", "op", "merged groups (members each)", "CUDA kernels per call by GPU", "max rel err", "decisions"]
    write_results(out, "mixed_devices_check", header(" ".join(sys.argv)), rows, columns)


if __name__ == "__main__":
    main()
