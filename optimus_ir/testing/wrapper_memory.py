"""Peak memory of a generated wrapper, replayed from its text: what tests compare between stock Inductor and
optimus_ir, so that a claim "this rewrite does not raise peak memory" is checked against the code that runs.

The replay follows the wrapper's own statements: ``empty_strided_cuda`` allocates (rounded up to the caching
allocator's 512-byte blocks), ``x = y; del y  # reuse`` and ``x = reinterpret_tensor(y, ...); del y  # reuse``
hand a buffer over, ``a, b, = tensors_of(x, ...)`` (or ``tensors_of_each_row``, ``tensors_of_padded_rows``) make
regions of one allocation, ``x = y if sole[i] else empty_strided_cuda(...)`` (a merged kernel's output written over
a saved tensor the call alone holds) hands ``y`` over, and ``del x`` frees an allocation once no name of it is left. Graph inputs count from the
start where the wrapper frees them (a backward's saved tensors, named neither ``primals_*``, ``tangents_*`` nor
``arg*``, as in Inductor's ``is_nonfreeable_buffers``); their sizes come from the wrapper's ``get_args``.
Tensors that extern kernels allocate themselves (an ATen fallback's outputs) are sized by the
``assert_size_stride(name, size, stride, 'op')`` that follows the call, at 4 bytes an element (the wrapper does not
say their dtype), and are live from the call on (the ``del`` of its inputs come between the two).

Symbolic sizes (a dynamic-shape compile) are evaluated at the wrapper's own example sizes: the integers ``get_args``
passes, bound to size symbols by the call's ``s0 = arg0_1`` (and what the call computes from them, ``ps0 = ...``).
"""

from __future__ import annotations

import ast
import math
import re

__all__ = ["peak_bytes"]

_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}
_ALLOCATION = re.compile(r"(\w+) = empty_strided_cuda\((\(.*?\)), \(.*?\), torch\.(\w+)\)")
_INPUT = re.compile(r"(\w+) = rand_strided\((\([\d, ]*\)), \([\d, ]*\), device='cuda:0', dtype=torch\.(\w+)\)")
_EXTERN_OUTPUT = re.compile(r"assert_size_stride\((\w+), (\(.*?\)), \(.*?\), '")
_INTEGER_ARG = re.compile(r"(\w+) = (\d+)$")
_SIZE_BINDING = re.compile(r"(\w+) = ([\w\s+*/()-]+)$")
_EXTERN_CALL = re.compile(r"\w+ = torch\.ops\.")
_REUSE = re.compile(r"(\w+) = (?:reinterpret_tensor\()?(\w+)(?:, [^;]*\))?; del (\w+)  # reuse")
_WRITTEN_OVER = re.compile(r"(\w+) = (\w+) if \w+\[\d+\] else empty_strided_cuda\(")
_REGIONS = re.compile(r"((?:\w+, )+)= tensors_of(?:_each_row|_padded_rows)?\((\w+), ")
_NOT_FREED = ("primals_", "tangents_", "arg")


def _bytes(shape: str, dtype: str, sizes: dict[str, int]) -> int:
    """Bytes of an allocation of ``shape`` (the wrapper's text of a tuple, its symbols' values in ``sizes``)."""
    numel = math.prod(_evaluated(shape, sizes))
    return -(-numel * _ITEMSIZE[dtype] // 512) * 512


def _evaluated(expression: str, sizes: dict[str, int]) -> object:
    """The value of one expression of the wrapper's text (sizes: integers, size symbols, ``+ * // ( )``)."""
    tree = ast.parse(expression, mode="eval")
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return eval(compile(tree, "<wrapper>", "eval"), {"__builtins__": {}}, {n: sizes[n] for n in names})


def peak_bytes(wrapper: str) -> int:
    """The most bytes live at once while the wrapper's ``call`` runs (see the module docstring)."""
    call = wrapper[wrapper.index("def call(self, args)") : wrapper.index("def get_args()")]
    example = wrapper[wrapper.index("def get_args()") :]
    sizes = {name: int(value) for line in example.splitlines() for name, value in _INTEGER_ARG.findall(line.strip())}
    size = {
        name: _bytes(shape, dtype, sizes)
        for name, shape, dtype in _INPUT.findall(example)
        if not name.startswith(_NOT_FREED)
    }
    names = {name: {name} for name in size}  # by allocation: the names that hold it
    allocation_of = {name: name for name in size}
    live = peak = sum(size.values())
    live_at_extern_call = 0  # with the outputs of the last extern call seen so far

    def name_it(name: str, allocation: str) -> None:
        allocation_of[name] = allocation
        names[allocation].add(name)

    for line in call.splitlines():
        statement = line.strip()
        binding = _SIZE_BINDING.match(statement)
        if binding and binding.group(1) not in sizes and _names_in(binding.group(2)) <= sizes.keys():
            sizes[binding.group(1)] = int(_evaluated(binding.group(2), sizes))
        if _EXTERN_CALL.match(statement):
            live_at_extern_call = live
        for name, shape, dtype in _ALLOCATION.findall(statement):
            size[name], names[name] = _bytes(shape, dtype, sizes), set()
            name_it(name, name)
            live += size[name]
        for name, shape in _EXTERN_OUTPUT.findall(statement):
            size[name], names[name] = _bytes(shape, "float32", sizes), set()
            name_it(name, name)
            live += size[name]
            live_at_extern_call += size[name]
            peak = max(peak, live_at_extern_call)
        peak = max(peak, live)
        if regions := _REGIONS.match(statement):
            for name in regions.group(1).split(", ")[:-1]:
                name_it(name, allocation_of[regions.group(2)])
        if written_over := _WRITTEN_OVER.match(statement):  # as where a call alone holds its saved tensors
            name_it(written_over.group(1), allocation_of[written_over.group(2)])
        if reuse := _REUSE.match(statement):
            if reuse.group(2) in allocation_of:
                name_it(reuse.group(1), allocation_of[reuse.group(2)])
        for name in re.findall(r"(?:^|; )del (\w+)", statement):
            allocation = allocation_of.pop(name, None)
            if allocation is not None:
                names[allocation].discard(name)
                if not names[allocation]:
                    live -= size[allocation]
    return peak


def _names_in(expression: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", expression))
