"""Where a rewrite reads a value that stock Inductor would have stored first, it rounds it as that store would.

Inductor's kernels compute bf16 and fp16 in fp32 and round to the buffer's dtype on each store. A cat that a rule
folds away (a later piece computes the cat's region instead of loading it, a split of a cat reads the cat's input)
skips a store that stock's kernels make, and with it a rounding that eager makes too. Rounding there keeps stock's
numbers: a chain of 12 folded bf16 layers otherwise drifted from eager by 0.0027 where stock is within 7e-7.
"""

from __future__ import annotations

from typing import Any

import torch

#: Dtypes that Inductor's kernels compute in a wider type (fp32) and round to on each store.
COMPUTED_WIDER = (torch.bfloat16, torch.float16)


def as_loaded(handler: Any, value: Any, dtype: torch.dtype) -> Any:
    """``value`` as a load returns it from the ``dtype`` buffer it would have been stored into: rounded to ``dtype``
    and widened again where kernels compute ``dtype`` in fp32, as Inductor's lowering emulates eager's casts
    (``emulate_precision_casts``). ``handler``: an ops handler for raw values, ``ops`` for ``OpsValue``s.

    Before: ``tanh(load(x))``, read through a folded bf16 cat. After: ``to_dtype(to_dtype(tanh(load(x)), bf16,
    use_compute_types=False), bf16)``, which a Triton kernel computes as ``tmp.to(tl.bfloat16).to(tl.float32)``.
    """
    if dtype not in COMPUTED_WIDER:
        return value
    return handler.to_dtype(handler.to_dtype(value, dtype, use_compute_types=False), dtype)


def rounded_as_stored(box: Any) -> Any:
    """``box`` (a TensorBox) as its buffer would hold it: itself where it is stored already or where its dtype is
    computed as it is, else a Pointwise of its values rounded by :func:`as_loaded`."""
    from torch._inductor import ir
    from torch._inductor.virtualized import ops

    if box.get_dtype() not in COMPUTED_WIDER or ir.is_storage_and_layout(box):
        return box
    loader = box.make_loader()
    return ir.Pointwise.create(
        device=box.get_device(), dtype=box.get_dtype(),
        inner_fn=lambda index: as_loaded(ops, loader(index), box.get_dtype()), ranges=list(box.get_size()),
    )
