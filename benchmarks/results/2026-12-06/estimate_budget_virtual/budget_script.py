import runpy, sys
from optimus_ir.scheduler_hooks.horizontal import merging
merging.MAX_ESTIMATED_NODES = int(sys.argv[1])
sys.argv = ["benchmarks", "real", "--codegen-only", *sys.argv[2:]]
runpy.run_module("benchmarks", run_name="__main__")
