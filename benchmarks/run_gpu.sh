#!/usr/bin/env bash
# Everything the GPU box runs for optimus_ir, in one call: install, then the parts asked for (default: all of them).
#   bash benchmarks/run_gpu.sh OUT_DIR [PARTS] [SUITE_ARGS...]
# PARTS is a comma list of: check (virtual-vs-real kernels + numerics; member tables under moving addresses and threads; mixed devices; every torch.compile mode; random storms and split/cat chains), splitcat (split/cat storms), horizontal
# (N-identical-op storms, CUDA graphs, dynamic shapes), host (host time per call; the per-call ledger of the storms), real (real models), suite (the workload suite, benchmarks/suite.py; quick plan unless SUITE_ARGS say otherwise), e.g.
#   bash benchmarks/run_gpu.sh /root/out suite
#   bash benchmarks/run_gpu.sh /root/out suite --plan full --only dlrm multitask
# On a machine of several GPUs the suite runs as one process per GPU (--shard i/N), each writing OUT_DIR/suite_shardI/
# and OUT_DIR/suite_shardI.log; benchmarks/plot.py takes all their suite.json files at once.
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
[[ $parts == *,check,* ]] && { python3 benchmarks/table_slots_check.py --out "$out" || status=1; }
[[ $parts == *,check,* ]] && { python3 benchmarks/mixed_devices_check.py --out "$out" || status=1; }
[[ $parts == *,check,* ]] && { python3 benchmarks/modes_check.py --out "$out" || status=1; }
[[ $parts == *,check,* ]] && { python3 benchmarks/random_storms_check.py --out "$out" || status=1; }
[[ $parts == *,check,* ]] && { python3 benchmarks/random_chains_check.py --out "$out" || status=1; }
[[ $parts == *,splitcat,* ]] && { python3 benchmarks/split_cat_bench.py --out "$out" || status=1; }
[[ $parts == *,horizontal,* ]] && { python3 benchmarks/horizontal_bench.py --out "$out" || status=1; }
[[ $parts == *,host,* ]] && { python3 benchmarks/host_overhead.py --out "$out" || status=1; }
[[ $parts == *,host,* ]] && { python3 benchmarks/per_call_ledger.py --out "$out" || status=1; }
[[ $parts == *,real,* ]] && { python3 benchmarks/real_models.py --out "$out" || status=1; }
if [[ $parts == *,suite,* ]]; then
  # one suite process per GPU, each on every N-th case and a share of the CPUs (Inductor's compile workers)
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
  if ((gpus > 1)); then
    pids=()
    for ((i = 0; i < gpus; i++)); do
      CUDA_VISIBLE_DEVICES=$i TORCHINDUCTOR_COMPILE_THREADS=$(($(nproc) / gpus)) \
        python3 benchmarks/suite.py --out "$out/suite_shard$i" --shard "$i/$gpus" "$@" >"$out/suite_shard$i.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  else
    python3 benchmarks/suite.py --out "$out" "$@" || status=1
  fi
fi
exit $status
