"""Reading Inductor's Python wrapper code: the Triton kernels it defines, the kernels one call launches, and a
normalized text without run-dependent parts (for golden files). Pure text; no torch import."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["GraphCode", "Kernel", "module_level_size_symbols", "normalize", "parse_wrapper"]

#: the names Inductor gives size symbols in a wrapper (``s0``, ``u1``; ``ks0`` is a kernel's argument)
_SIZE_SYMBOL = re.compile(r"[su]\d+")


@dataclass(frozen=True)
class Kernel:
    """A Triton kernel defined in a wrapper.

    Attributes:
        name: the kernel's variable name in the wrapper, e.g. ``"triton_poi_fused_cat_relu_0"``.
        source: the kernel's Triton source (the text between the ``async_compile.triton(...)`` triple quotes).
    """

    name: str
    source: str


@dataclass
class GraphCode:
    """The code Inductor generated for one graph.

    Attributes:
        name: ``"inference"``, ``"forward"`` or ``"backward"``.
        wrapper: the full Python wrapper code.
        kernels: each distinct Triton kernel defined in the wrapper, in order of definition.
        launches: the names of every kernel one call of the wrapper launches, in order: Triton kernels
            (``name.run(...)``), Inductor's C++ kernels on the CPU (``cpp_fused_0(...)``) and extern calls
            (``extern_kernels.mm``, ``aten.*`` / ``torch.ops.*`` fallbacks), and the tensor methods a mix-order
            reduction's wrapper code calls to add its partial sums (``aten.sum``, and ``aten._to_copy`` where it
            casts them). Identical kernels are defined once and launched many times, so count launches.
    """

    name: str
    wrapper: str
    kernels: list[Kernel]
    launches: list[str]


_KERNEL_DEFINITION = re.compile(
    r"^(?P<name>\w+) = async_compile\.triton\('(?P=name)', '''\n(?P<source>.*?)''', "
    r"device_str='\w+'\)\n",
    re.DOTALL | re.MULTILINE,
)
_LAUNCH = re.compile(
    r"\b(?P<triton>\w+)\.run\("
    r"|\b(?P<extern>extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\("
)
#: a mix-order reduction's second stage in the wrapper, one line per partial sum (``SIMDScheduling.
#: _codegen_mix_order_reduction``): ``buf4 = workspace_0[a : b].view(n, r).sum(dim=0)``, ``.to(torch.bfloat16)`` after
#: it where the buffer is not fp32; each call is a kernel of ATen's
_MIX_ORDER_SUM = re.compile(
    r"^\s*\w+ = \w+\[[^\]]*\]\.view\([^)]*\)\.(?P<op>sum|prod|amin|amax)\(dim=0\)(?P<cast>\.to\()?"
)
#: Inductor's C++ kernels (CPU): ``cpp_fused_relu_0 = async_compile.cpp_pybinding([...], r'''...''')``
_CPP_DEFINITION = re.compile(r"^(?P<name>\w+) = async_compile\.cpp_pybinding\(.*?'''\)\n", re.DOTALL | re.MULTILINE)


def parse_wrapper(wrapper: str, name: str = "inference") -> GraphCode:
    """Split a wrapper into its kernel definitions and the launches of one call."""
    kernels = [Kernel(m["name"], m["source"]) for m in _KERNEL_DEFINITION.finditer(wrapper)]
    host_code = _KERNEL_DEFINITION.sub("", wrapper)
    cpp = [m["name"] for m in _CPP_DEFINITION.finditer(host_code)]
    host_code = _CPP_DEFINITION.sub("", host_code)
    launch = _LAUNCH if not cpp else re.compile(_LAUNCH.pattern + r"|\b(?P<cpp>" + "|".join(cpp) + r")\(")
    launches = []
    for line in host_code.splitlines():
        if mix_order := _MIX_ORDER_SUM.match(line):
            launches += [f"aten.{mix_order['op']}", *(["aten._to_copy"] if mix_order["cast"] else [])]
        else:
            launches += [m[m.lastgroup] for m in launch.finditer(line)]
    return GraphCode(name, wrapper, kernels, launches)


_NORMALIZATIONS = (
    # "# kernel path: /tmp/torchinductor_user/ab/cabc...py"
    (re.compile(r"^# kernel path: .*$", re.MULTILINE), "# kernel path: <path>"),
    # "'backend_hash': 'A1B2...'"
    (re.compile(r"'backend_hash': '[0-9A-Fa-f]+'"), "'backend_hash': '<hash>'"),
    # Inductor's cache directories, e.g. /tmp/torchinductor_user/xy/...
    (re.compile(r"/\S*torchinductor_[^/\s]+/\S+"), "<path>"),
)


def normalize(text: str) -> str:
    """Remove the run-dependent parts of generated code (kernel paths, Triton's backend hash, cache
    directories), keeping everything else as written."""
    for pattern, replacement in _NORMALIZATIONS:
        text = pattern.sub(replacement, text)
    return text


def module_level_size_symbols(wrapper: str) -> set[str]:
    """The size symbols the wrapper's module-level code reads: a wrapper that reads one fails with a ``NameError``
    when it is loaded, since symbols are bound only inside ``call`` (from its inputs' sizes)."""
    found = set()
    for statement in ast.parse(wrapper).body:
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found |= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and _SIZE_SYMBOL.fullmatch(n.id)}
    return found
