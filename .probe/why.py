import sys, collections
sys.path.insert(0, "benchmarks")
import torch
from workloads import WORKLOADS, output_loss
from optimus_ir.inspect import report_for
model, inputs = WORKLOADS[sys.argv[1]].make(sys.argv[2], dict(fp32=torch.float32, bf16=torch.bfloat16)[sys.argv[3]])
class Loss(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, *xs): return output_loss(s.m(*xs))
rep = report_for(Loss(model), inputs, passes="all", virtual=True)
for r in rep.rewrites:
    if r.rule == "IdenticalKernelsToMemberTableKernel":
        print(r.fired, len(r.nodes), r.nodes[:3], r.detail[:200])
import pickle; pickle.dump(rep.graphs if hasattr(rep, "graphs") else None, open("/tmp/graphs.pkl", "wb"))
