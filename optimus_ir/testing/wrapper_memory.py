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
"""

from __future__ import annotations

import math
import re

__all__ = ["peak_bytes"]

_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}
_ALLOCATION = re.compile(r"(\w+) = empty_strided_cuda\(\(([\d, ]*)\), \([\d, ]*\), torch\.(\w+)\)")
_INPUT = re.compile(r"(\w+) = rand_strided\(\(([\d, ]*)\), \([\d, ]*\), device='cuda:0', dtype=torch\.(\w+)\)")
_EXTERN_OUTPUT = re.compile(r"assert_size_stride\((\w+), \(([\d, ]*)\), \([\d, ]*\), '")
_EXTERN_CALL = re.compile(r"\w+ = torch\.ops\.")
_REUSE = re.compile(r"(\w+) = (?:reinterpret_tensor\()?(\w+)(?:, [^;]*\))?; del (\w+)  # reuse")
_WRITTEN_OVER = re.compile(r"(\w+) = (\w+) if \w+\[\d+\] else empty_strided_cuda\(")
_REGIONS = re.compile(r"((?:\w+, )+)= tensors_of(?:_each_row|_padded_rows)?\((\w+), ")
_NOT_FREED = ("primals_", "tangents_", "arg")


def _bytes(shape: str, dtype: str) -> int:
    numel = math.prod(int(d) for d in shape.split(",") if d.strip())
    return -(-numel * _ITEMSIZE[dtype] // 512) * 512


def peak_bytes(wrapper: str) -> int:
    """The most bytes live at once while the wrapper's ``call`` runs (see the module docstring)."""
    call = wrapper[wrapper.index("def call(self, args)") : wrapper.index("def get_args()")]
    size = {
        name: _bytes(shape, dtype)
        for name, shape, dtype in _INPUT.findall(wrapper[wrapper.index("def get_args()") :])
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
        if _EXTERN_CALL.match(statement):
            live_at_extern_call = live
        for name, shape, dtype in _ALLOCATION.findall(statement):
            size[name], names[name] = _bytes(shape, dtype), set()
            name_it(name, name)
            live += size[name]
        for name, shape in _EXTERN_OUTPUT.findall(statement):
            size[name], names[name] = _bytes(shape, "float32"), set()
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
