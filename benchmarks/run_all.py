"""Everything the GPU box runs for optimus_ir, in one call: the parts asked for, one after the other, each in a
process of its own, the results in OUT_DIR. Exits 1 if any part failed (the others still run).

    python -m benchmarks all --out OUT_DIR [--parts tests,chains,storms,real,suite] [SUITE_ARGS...]
    python -m benchmarks all --out /root/out --parts suite --plan full --only dlrm multitask

Parts: ``tests`` (``python -m pytest tests/gpu``: every golden case's kernels on the real device and its numerics,
member tables under moving addresses, streams, threads and CUDA graphs, mixed devices, every ``torch.compile``
mode, random storms and chains, training errors against float64, eager sanity; a JUnit report in
OUT_DIR/gpu_tests.xml), ``chains``, ``storms``, ``per-call``, ``real``, ``suite`` (the quick plan unless
SUITE_ARGS say otherwise). Default: all but ``per-call``. On a machine of several GPUs the suite runs as one
process per GPU (``--shard i/N``), each writing OUT_DIR/suite_shardI/ and OUT_DIR/suite_shardI.log;
``python -m benchmarks plot`` takes all their suite.json files at once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PARTS = ("tests", "chains", "storms", "per-call", "real", "suite")
DEFAULT_PARTS = ("tests", "chains", "storms", "real", "suite")


def _run(command: list[str], **kwargs) -> bool:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, **kwargs).returncode == 0


def _suite(out: Path, suite_args: list[str]) -> bool:
    import torch

    gpus = torch.cuda.device_count()
    command = [sys.executable, "-m", "benchmarks", "suite"]
    if gpus <= 1:
        return _run([*command, "--out", str(out), *suite_args])
    processes = []
    for i in range(gpus):  # one process per GPU, each on every N-th case and a share of the CPUs (compile workers)
        env = os.environ | {"CUDA_VISIBLE_DEVICES": str(i),
                            "TORCHINDUCTOR_COMPILE_THREADS": str(max(1, (os.cpu_count() or 1) // gpus))}
        log = open(out / f"suite_shard{i}.log", "w")  # noqa: SIM115 (closed below)
        shard = [*command, "--out", str(out / f"suite_shard{i}"), "--shard", f"{i}/{gpus}", *suite_args]
        print("+", " ".join(shard), ">", log.name, flush=True)
        processes.append((subprocess.Popen(shard, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    ok = True
    for process, log in processes:
        ok = process.wait() == 0 and ok
        log.close()
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma list of: {', '.join(PARTS)}")
    args, suite_args = parser.parse_known_args()
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {unknown}; known: {', '.join(PARTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONUNBUFFERED"] = "1"
    import torch
    import triton

    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
    failed = []
    for part in (p for p in PARTS if p in parts):
        if part == "tests":
            ok = _run([sys.executable, "-m", "pytest", "tests/gpu", "-q", "-rfEs",
                       f"--junitxml={args.out / 'gpu_tests.xml'}"])
        elif part == "suite":
            ok = _suite(args.out, suite_args)
        else:
            ok = _run([sys.executable, "-m", "benchmarks", part, "--out", str(args.out)])
        if not ok:
            failed.append(part)
    print(f"failed: {', '.join(failed)}" if failed else "every part passed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
