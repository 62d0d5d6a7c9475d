"""``torch.compile(model, backend="optimus_ir")``: Inductor with optimus_ir's passes, for that compile alone.

    torch.compile(model, backend="optimus_ir")                              # every pass
    torch.compile(model, backend="optimus_ir", mode="reduce-overhead")     # Inductor's modes
    torch.compile(model, backend="optimus_ir", options={"optimus_ir": "splitcat", "max_autotune": True})

``options`` are Inductor's, as ``torch.compile(..., options=...)`` takes them, plus ``"optimus_ir"``: the passes and
rules, as ``OPTIMUS_IR`` names them (default: every pass). They apply to this compile's graphs, its backward too
(compiled at the first backward), whatever ``OPTIMUS_IR`` says for other compiles. Dynamo finds the backend by its
``torch_dynamo_backends`` entry point. The hooks it installs stay, inert where no pass applies, until
:func:`optimus_ir.disable`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from optimus_ir import patches
from optimus_ir.passes import Switch, compiling_with, parse_switch
from optimus_ir.switch import for_this_torch

__all__ = ["optimus_ir"]

#: the key of ``options`` that names the passes
PASSES_OPTION = "optimus_ir"


def optimus_ir(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], mode: str | None = None,
               options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The Dynamo backend: Inductor's ``compile_fx`` with the passes of ``options["optimus_ir"]``."""
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    options = dict(options or {})
    chosen = for_this_torch(parse_switch(options.pop(PASSES_OPTION, "all")))
    if chosen.passes:
        patches.install_config_hooks()
    config_patches = {**(list_mode_options(mode) if mode else {}), **options}
    return _within(chosen, compile_fx)(gm, example_inputs, inner_compile=_within(chosen, compile_fx_inner),
                                       config_patches=config_patches)


def _within(chosen: Switch, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with the passes ``chosen`` (the backward's inner compile runs after ``compile_fx`` returned)."""
    @functools.wraps(fn)
    def within(*args: Any, **kwargs: Any) -> Any:
        with compiling_with(chosen):
            return fn(*args, **kwargs)

    return within
