#!/usr/bin/env bash
# Everything the GPU box runs for optimus_ir, in one call: install, virtual-vs-real kernels + numerics, benchmarks.
#   bash benchmarks/run_gpu.sh OUT_DIR
set -u
out=${1:?usage: run_gpu.sh OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
status=0
python3 benchmarks/gpu_check.py --out "$out" || status=1
python3 benchmarks/split_cat_bench.py --out "$out" || status=1
python3 benchmarks/real_models.py --out "$out" || status=1
exit $status
