#!/usr/bin/env bash
# The GPU box in one call: install the package, then `python -m benchmarks all` (its --help lists the parts), e.g.
#   bash benchmarks/run_gpu.sh --out /root/out [--parts tests,chains,storms,real,suite] [SUITE_ARGS...]
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 1
exec python3 -m benchmarks all "$@"
