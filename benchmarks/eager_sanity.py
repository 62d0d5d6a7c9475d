"""Each suite workload in eager mode only, one process, CUDA_LAUNCH_BLOCKING=1: does eager alone raise a CUDA error?

    CUDA_LAUNCH_BLOCKING=1 python benchmarks/eager_sanity.py dlrm qkv_transformer
"""

import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite import Case, prepare  # noqa: E402

for workload in sys.argv[1:]:
    for dtype, mode in (("fp32", "inference"), ("fp32", "training"), ("bf16", "inference")):
        case = Case(workload, "small", dtype, mode)
        try:
            call, result, _ = prepare(case, compiled=False)
            call()
            torch.cuda.synchronize()
            print(f"{workload} {dtype} {mode}: ok", flush=True)
        except Exception:
            print(f"{workload} {dtype} {mode}: FAILED", flush=True)
            traceback.print_exc(limit=6)
