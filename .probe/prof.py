import sys, cProfile, pstats
sys.path.insert(0, "benchmarks")
import torch
from workloads import WORKLOADS, output_loss
from optimus_ir.inspect import report_for
import optimus_ir.scheduler_hooks.horizontal as H
model, inputs = WORKLOADS[sys.argv[1]].make(sys.argv[2], torch.float32)
prof = cProfile.Profile()
orig = H._peak_memory
def profiled(nodes, b):
    prof.enable()
    try: return orig(nodes, b)
    finally: prof.disable()
H._peak_memory = profiled
class Loss(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, *xs): return output_loss(s.m(*xs))
rep = report_for(Loss(model), inputs, passes="all", virtual=True)
st = pstats.Stats(prof); st.sort_stats(sys.argv[3] if len(sys.argv) > 3 else "cumulative").print_stats(40)
