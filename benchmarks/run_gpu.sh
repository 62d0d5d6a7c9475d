#!/usr/bin/env bash
# Everything the GPU box runs for optimus_ir, in one call: install, then the parts asked for (default: all of them).
#   bash benchmarks/run_gpu.sh OUT_DIR [PARTS] [SUITE_ARGS...]
# PARTS is a comma list of: check (virtual-vs-real kernels + numerics), splitcat (split/cat storms), horizontal
# (N-identical-op storms, CUDA graphs, dynamic shapes), host (host time per call), real (real models), suite (the workload suite, benchmarks/suite.py; quick plan unless SUITE_ARGS say otherwise), e.g.
#   bash benchmarks/run_gpu.sh /root/out suite
#   bash benchmarks/run_gpu.sh /root/out suite --plan full --only dlrm multitask
set -u
out=${1:?usage: run_gpu.sh OUT_DIR [check,splitcat,horizontal,host,real,suite] [SUITE_ARGS...]}
parts=,${2:-check,splitcat,horizontal,real,suite},
shift $(($# < 2 ? $# : 2))
for part in ${parts//,/ }; do
  case $part in check | splitcat | horizontal | host | real | suite) ;; *) echo "unknown part: $part" >&2; exit 2 ;; esac
done
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
status=0
[[ $parts == *,check,* ]] && { python3 benchmarks/gpu_check.py --out "$out" || status=1; }
[[ $parts == *,splitcat,* ]] && { python3 benchmarks/split_cat_bench.py --out "$out" || status=1; }
[[ $parts == *,horizontal,* ]] && { python3 benchmarks/horizontal_bench.py --out "$out" || status=1; }
[[ $parts == *,host,* ]] && { python3 benchmarks/host_overhead.py --out "$out" || status=1; }
[[ $parts == *,real,* ]] && { python3 benchmarks/real_models.py --out "$out" || status=1; }
[[ $parts == *,suite,* ]] && { python3 benchmarks/suite.py --out "$out" "$@" || status=1; }
exit $status
