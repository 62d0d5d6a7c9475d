"""Every part the screen rejects is rejected by the full estimate too (screen off, budget unlimited)."""
import sys
sys.path.insert(0, "benchmarks")
import torch
from workloads import WORKLOADS, output_loss
from optimus_ir.inspect import report_for
import optimus_ir.scheduler_hooks.horizontal as H
w, size, dt = sys.argv[1:4]
model, inputs = WORKLOADS[w].make(size, dict(fp32=torch.float32, bf16=torch.bfloat16)[dt])
class Loss(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, *xs): return output_loss(s.m(*xs))
def run():
    rep = report_for(Loss(model), inputs, passes="all", virtual=True)
    return {(r.nodes, r.fired, r.detail.split(" (")[0].split(" →")[0][:30]) for r in rep.rewrites if r.rule == H.IdenticalKernelsToMemberTableKernel.name}, len(rep.launches)
on, lon = run()
orig = H._live_while_running
H._live_while_running = lambda m, b: (0, 0)
H.MAX_ESTIMATED_NODES = 10**9
off, loff = run()
screened = {k[0] for k in on if k[2].startswith("their own")}
rejected_off = {k[0] for k in off if k[2].startswith("estimated peak")}
fired_off = {k[0] for k in off if k[1]}
print("launches on/off", lon, loff, "screened", len(screened), "of which estimate rejects", len(screened & rejected_off), "fired off", len(screened & fired_off), "untried off", len(screened - rejected_off - fired_off))
print("fired on == fired off:", {k[0] for k in on if k[1]} == fired_off)
