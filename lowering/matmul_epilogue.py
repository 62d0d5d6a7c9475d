"""A matmul's bias and relu in the matmul's own call: one launch where Inductor makes two.

Inductor lowers ``relu(x @ w.t() + b)`` (``nn.Linear`` then ``nn.ReLU``) to an extern ``mm`` and a Triton kernel
that adds the bias and applies the relu. ATen's ``_addmm_activation`` computes the same in one cuBLASLt call (its
bias and relu epilogue where the shapes allow, else addmm then relu), and Inductor falls back to ATen for it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import ir
from torch._inductor.lowering import lowerings
from torch._inductor.virtualized import V

from optimus_ir.lowering import boxed, triton_kernels
from optimus_ir.rule import LoweringRule, NotApplicable, Reject

aten = torch.ops.aten

#: dtypes of cuBLASLt's bias epilogue
_EPILOGUE_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _only_reader(node: Any, reader: Any) -> bool:
    return isinstance(node, torch.fx.Node) and list(node.users) == [reader]


def _matmul_and_bias(relu: Any) -> tuple[Any, Any]:
    """The FX nodes of the matmul and the bias of ``relu(addmm(bias, x, w))`` or ``relu(add(bias, mm(x, w)))``
    (either order of the add; Inductor's post-grad passes make the second of the first on CUDA), each read once;
    raises NotApplicable otherwise."""
    source = relu.args[0]
    if not _only_reader(source, relu):
        raise NotApplicable("not the relu of a matmul read once")
    if source.target is aten.addmm.default and len(source.args) == 3 and not source.kwargs:
        return source, source.args[0]
    if source.target is aten.add.Tensor and len(source.args) == 2 and not source.kwargs:
        for mm, bias in (source.args, source.args[::-1]):
            if _only_reader(mm, source) and mm.target is aten.mm.default and isinstance(bias, torch.fx.Node):
                return mm, bias
    raise NotApplicable("not the relu of a matmul plus a bias")


def _extern_matmul(x: Any) -> Any:
    """The extern kernel of the matmul that ``x`` (the relu's lowered input) is, or reads; None if not one."""
    data = x.data.data if isinstance(x, ir.TensorBox) and isinstance(x.data, ir.StorageBox) else None
    if isinstance(data, ir.ExternKernelOut):
        return data
    found = [buf for name in x.get_read_names() if isinstance(buf := V.graph.get_buffer(name), ir.ExternKernelOut)]
    return found[0] if len(found) == 1 else None


class MatmulBiasReluToAddmmActivation(LoweringRule):
    """``relu(mm(x, w) + b)`` or ``relu(addmm(b, x, w))``, ``b`` a row of the output's width →
    ``_addmm_activation(b, x, w)``: one ATen call (cuBLASLt with its bias and relu epilogue) instead of an extern
    ``mm`` and a Triton kernel.

    Before (``nn.Linear(64, 128)`` then ``nn.ReLU``; ``x [256, 64]``)::

        buf0 = extern mm(x, reinterpret(w, [64, 128], [1, 64]))
        buf1 = Pointwise(relu(load(b, i1) + load(buf0, 128*i0 + i1)))      # realized in place of buf0

    After::

        buf1 = FallbackKernel(aten._addmm_activation(b, x, reinterpret(w, [64, 128], [1, 64])))
        # buf0: no reader left, removed by the scheduler's dead-node elimination

    The mm's inputs are those of its lowered ``ExternKernel`` (the FX graph's values are freed after their last
    reader). The bias must be a graph input (a parameter), 1-d, of the output's width and dtype (any number of rows);
    fp32, fp16 or bf16, where Inductor writes Triton kernels (on the CPU, ATen's call is addmm then relu).
    """

    pass_name = "splitcat"
    op = aten.relu.default

    def rewrite(self, x: Any) -> tuple[Any, str]:
        relu = V.graph.current_node
        if relu is None:
            raise NotApplicable("no FX node")
        mm, bias = _matmul_and_bias(relu)
        device = x.get_device()
        if device is None or not triton_kernels(device) or x.get_dtype() not in _EPILOGUE_DTYPES:
            raise Reject(f"{x.get_dtype()} on {device}: the epilogue is for fp32, fp16 and bf16 beside Triton kernels")
        b = V.graph.graph_inputs.get(bias.name)
        if b is None:
            raise Reject(f"the bias {bias.name} is computed in the graph, not a graph input")
        rows, width = x.get_size()  # (rows may be a symbol: cuBLASLt takes any count)
        sizes = V.graph.sizevars
        if len(b.get_size()) != 1 or not sizes.statically_known_equals(b.get_size()[0], width):
            raise Reject(f"a bias of {list(b.get_size())}, not a row of the output's {width} columns")
        if b.get_dtype() != x.get_dtype():
            raise Reject(f"a bias of {b.get_dtype()}, not the output's {x.get_dtype()}")
        matmul = _extern_matmul(x)
        if matmul is None or len(matmul.inputs) not in (2, 3):
            raise Reject(f"the matmul {mm.name} is not one extern kernel (mm or addmm)")
        x_in, w_in = (boxed(t) for t in matmul.inputs[-2:])
        out = lowerings[aten._addmm_activation.default](b, x_in, w_in)
        return out, f"{mm.name} + {bias.name} then relu ({rows}x{width}) → one _addmm_activation call"
