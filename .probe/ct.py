"""Compile time of one workload's training compile on the virtual device, with estimate counts."""
import sys, time, collections, re
sys.path.insert(0, "benchmarks")
import torch
from workloads import WORKLOADS, output_loss
from optimus_ir.inspect import report_for
import optimus_ir.scheduler_hooks.horizontal as H

w, size, dt, passes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
dtype = dict(fp32=torch.float32, bf16=torch.bfloat16)[dt]
model, inputs = WORKLOADS[w].make(size, dtype)
stats = collections.Counter()
orig = H._peak_memory
def counted(nodes, b):
    t = time.perf_counter(); r = orig(nodes, b); stats["est_s"] += time.perf_counter() - t; stats["est"] += 1; return r
H._peak_memory = counted
t = time.perf_counter()
class Loss(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, *xs): return output_loss(s.m(*xs))
rep = report_for(Loss(model), inputs, passes=None if passes == "none" else passes, virtual=True)
total = time.perf_counter() - t
print(f"total {total:.1f}s estimates {stats['est']} in {stats['est_s']:.1f}s launches {[len(g) for g in [rep.launches]]}")
reasons = collections.Counter()
for r in rep.rewrites:
    if r.rule != "IdenticalKernelsToMemberTableKernel": continue
    n = len(r.nodes) if hasattr(r, "nodes") else 0
    d = re.sub(r"\d+ → \d+ bytes.*", "PEAK", r.detail)
    d = re.sub(r"\d+", "N", d)[:90]
    reasons[(r.fired, n, d)] += 1
for k, v in sorted(reasons.items(), key=lambda kv: (-kv[0][1], kv[0][0])): print(v, k)
