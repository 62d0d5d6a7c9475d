"""optimus_ir: split/cat (vertical) and replicated-op (horizontal) cleanups done in Inductor IR.

Turn it on with ``OPTIMUS_IR=1`` (no code change), or from Python::

    import optimus_ir
    optimus_ir.enable()                 # every pass; or enable("splitcat") / enable(["splitcat", "horizontal"])
    with optimus_ir.enabled("splitcat"):
        ...
    optimus_ir.disable()

Importing this package imports neither ``torch._inductor`` nor the rules: ``import torch`` loads it through the
``torch.backends`` entry point, and must stay fast.
"""

from optimus_ir.switch import PASSES, disable, enable, enabled, enabled_passes
from optimus_ir.version import __version__

__all__ = ["PASSES", "__version__", "disable", "enable", "enabled", "enabled_passes"]
