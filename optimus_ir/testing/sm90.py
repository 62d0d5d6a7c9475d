"""Triton's own compiler, run on a kernel Inductor wrote for the virtual sm_90 device: the interpreter accepts code
that the compiler refuses (a loop bound of the wrong type, a constexpr used as a tensor), and a machine without a
GPU still has Triton's compiler and its ``ptxas``.

The compile runs in a process of its own: Triton's interpreter patches ``triton.language`` for good once it has run
a kernel, and the compiler then fails on any kernel.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["compile_for_sm90", "compile_kernel_for_sm90"]


def compile_for_sm90(source: str, constexprs: dict[str, int]) -> int:
    """Compile the kernel of ``source`` (an Inductor kernel module, as ``compile_report`` gives it) for sm_90 with
    ``constexprs`` as its block sizes; the size of the cubin. Raises with Triton's error where it does not compile."""
    signature = ast.literal_eval(re.search(r"triton_meta=(\{'signature': \{[^}]*\})", source).group(1) + "}")
    name = re.search(r"@triton\.jit\ndef (\w+)\(", source).group(1)
    # the autotuning decorator launches; the driver line wants a GPU: the jitted functions alone
    text = re.sub(r"@triton_heuristics\.\w+\(.*?\n\)\n", "", source, flags=re.S)
    text = text.replace("triton_helpers.set_driver_to_gpu()", "")
    path = Path(tempfile.mkdtemp(prefix="optimus_ir_sm90_")) / "kernel.py"  # @triton.jit reads its source file
    path.write_text(text)
    request = json.dumps([str(path), name, signature["signature"], constexprs])
    done = subprocess.run([sys.executable, __file__, request], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} does not compile for sm_90:\n{done.stderr[-4000:]}")
    return int(done.stdout.split()[-1])


def compile_kernel_for_sm90(factory: str, signature: dict[str, str], constexprs: dict[str, object]) -> int:
    """Compile the kernel ``factory`` (``module:function``) returns when called with ``False`` (a kernel of ours,
    made for the compiler, not the interpreter) for sm_90; a constexpr ``"tl.<dtype>"`` is that Triton dtype. The
    size of the cubin; raises with Triton's error where it does not compile."""
    request = json.dumps(["factory", factory, signature, constexprs])
    done = subprocess.run([sys.executable, __file__, request], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{factory} does not compile for sm_90:\n{done.stderr[-4000:]}")
    return int(done.stdout.split()[-1])


def _compile_factory(factory: str, signature: dict[str, str], constexprs: dict[str, object]) -> int:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module_name, _, function = factory.partition(":")
    kernel = getattr(importlib.import_module(module_name), function)(False)
    values = {k: getattr(tl, v[3:]) if isinstance(v, str) and v.startswith("tl.") else v for k, v in constexprs.items()}
    source = ASTSource(fn=kernel, signature=signature, constexprs=values)
    return len(triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["cubin"])


def _compile(path: str, name: str, signature: dict[str, str], constexprs: dict[str, int]) -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location(f"optimus_ir_sm90_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = {arg: constexprs[arg] for arg, kind in signature.items() if kind == "constexpr"}
    source = ASTSource(fn=getattr(module, name), signature=signature, constexprs=values)
    return len(triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["cubin"])


if __name__ == "__main__":
    arguments = json.loads(sys.argv[1])
    print(_compile_factory(*arguments[1:]) if arguments[0] == "factory" else _compile(*arguments))
