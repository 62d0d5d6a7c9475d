"""Run Inductor-generated Triton kernels on CPU through Triton's interpreter.

:func:`cpu_triton_interpreter` lets a machine without a GPU (CI) check the numerics of the Triton code that Inductor
generates: inside it, ``torch.compile`` on CPU tensors emits Triton kernels (``cpu_backend="triton"``) and runs them
with ``TRITON_INTERPRET=1``, where Triton executes every program of the launch grid in numpy. Inductor only needs a
Triton driver to hash kernels; without a GPU a stand-in reports an sm_90 CUDA target.

Stock Triton 3.6 cannot run all of Inductor's kernels that way, or not exactly. While a kernel runs, this module adds
to the language patches that the interpreter installs for it (``triton.runtime.interpreter._patch_lang``):

* ``libdevice`` functions. ``triton.language.extra.libdevice`` holds stubs that only the compiler dispatches to a
  backend, and the interpreter's ``create_extern_elementwise`` raises. Each supported stub is replaced by the CUDA
  backend's implementation (so argument checks, broadcasting and result dtypes are Triton's own), and the builder's
  extern call evaluates a numpy reference of the function (:data:`INTERPRETER_LIBDEVICE`).
* ``@triton.jit`` functions created before ``TRITON_INTERPRET`` was set (``tl.sum``, ``tl.zeros`` and Inductor's
  ``triton_helpers`` are decorated when their modules are imported) are ``JITFunction`` objects that refuse to be
  called; they are called as interpreted functions.
* ``tl.reduce`` with a custom combine function (``triton_helpers.max2``, ``max_with_index``, ``welford``, ...) falls
  back to one Python call per element (about a minute for one 37 x 129 argmax); it is replaced by a tree reduction
  that calls the combine function ``log2(n)`` times on whole blocks.
* Casts from and to bfloat16: the interpreter truncates fp32 -> bf16 where compiled Triton rounds to nearest even.
* ``tl.dot`` of bfloat16 operands: the interpreter multiplies their bits (held as uint16); they are widened to
  fp32 first (exact), as the tensor cores read them.
* Atomic adds whose mask (or value) is broadcast to the pointers' block: the interpreter reads each operand's memory
  as contiguous, and a broadcast view has stride 0; each is made a contiguous array of the pointers' shape.
* ``range(0, r0_numel, R0_BLOCK)`` in looped reductions converts a one-element array with ``int()``, which numpy >=
  2.4 rejects; the conversion goes through ``ndarray.item()``.

And two to Inductor: a true division by a constant is lowered as a product by its reciprocal, as on a GPU (on the
CPU Inductor keeps the division). And a 0-d CPU graph input is passed to a Triton kernel by value
(``GraphLowering.is_unspec_arg``), which on CPU makes every 0-d input a value. A backward's 0-d saved tensor that
AOTAutograd donates is then both that value and, where Inductor writes a gradient over it in place, the kernel's
output pointer: the kernel does not compile (``tmp1 = in_out_ptr0``). On a GPU such a tensor is a GPU tensor, passed
by address; so it is here too.

For the duration of the context, jitted functions are rewritten with ``not x`` evaluated elementwise on blocks, as
the compiler does (see :func:`_ast_transformer`), and numpy's floating-point warnings are off during launches.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import math
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np
import torch
import triton
import triton.language as tl
import triton.language.extra.cuda.libdevice as cuda_libdevice
from torch.utils._triton import triton_backend, triton_hash_with_backend
from triton.backends.compiler import GPUTarget
from triton.language.extra import libdevice
from triton.runtime import interpreter
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

__all__ = ["INTERPRETER_LIBDEVICE", "cpu_triton_interpreter"]


def _via_torch(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[np.ndarray], np.ndarray]:
    """Evaluates a special function that numpy lacks with its (vectorised) torch CPU kernel."""
    return lambda x: fn(torch.from_numpy(x)).numpy()


def _ilogb(x: np.ndarray) -> np.ndarray:
    """``ilogb`` with CUDA's special values: INT_MIN for 0 and NaN, INT_MAX for infinities."""
    exponent = np.frexp(x)[1].astype(np.int64) - 1
    exponent = np.where(np.isinf(x), np.iinfo(np.int32).max, exponent)
    return np.where((x == 0) | np.isnan(x), np.iinfo(np.int32).min, exponent)


# numpy references for the libdevice functions that Inductor emits (``libdevice.<name>`` in
# torch/_inductor/codegen/triton.py and runtime/triton_helpers.py, less the ROCm-only ``fast_tanhf``), plus ``log``,
# ``sqrt`` and ``rint``. Arguments arrive with the dtypes of the CUDA dispatch table (fp32/fp64, int32 exponents);
# results are cast to the table's return dtype, so e.g. ``isnan`` yields int32 as in libdevice. An fp32 function
# computes in fp32 except where noted.
_LIBDEVICE_IMPLS: dict[str, Callable[..., np.ndarray]] = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "atanh": np.arctanh,
    "ceil": np.ceil,
    "copysign": np.copysign,
    "cos": np.cos,
    "cosh": np.cosh,
    "cyl_bessel_i0": _via_torch(torch.special.i0),
    "cyl_bessel_i1": _via_torch(torch.special.i1),
    "erf": _via_torch(torch.special.erf),
    "erfc": _via_torch(torch.special.erfc),
    "erfcx": _via_torch(torch.special.erfcx),
    "erfinv": _via_torch(torch.special.erfinv),
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "floor": np.floor,
    # Fused for fp32 (computed in fp64, rounded once); plain multiply-add for fp64.
    "fma": lambda a, b, c: a.astype(np.float64) * b + c,
    "fmod": np.fmod,
    "hypot": np.hypot,
    "ilogb": _ilogb,
    "isinf": np.isinf,
    "isnan": np.isnan,
    "j0": _via_torch(torch.special.bessel_j0),
    "j1": _via_torch(torch.special.bessel_j1),
    "ldexp": np.ldexp,
    "lgamma": _via_torch(torch.lgamma),
    "llrint": np.rint,
    "log": np.log,
    "log10": np.log10,
    "log1p": np.log1p,
    "log2": np.log2,
    "mul_rn": np.multiply,
    "nearbyint": np.rint,
    "nextafter": np.nextafter,
    "pow": np.power,
    "rint": np.rint,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
    "signbit": np.signbit,
    "sin": np.sin,
    "sinh": np.sinh,
    "sqrt": np.sqrt,
    "tan": np.tan,
    "tanh": np.tanh,
    "trunc": np.trunc,
    "y0": _via_torch(torch.special.bessel_y0),
    "y1": _via_torch(torch.special.bessel_y1),
}

#: Names of the ``triton.language.extra.libdevice`` functions that run under :func:`cpu_triton_interpreter`.
INTERPRETER_LIBDEVICE: frozenset[str] = frozenset(_LIBDEVICE_IMPLS)


# The numpy reference of the libdevice function being called; read by the builder's extern elementwise call.
_libdevice_impl: contextvars.ContextVar[Callable[..., np.ndarray]] = contextvars.ContextVar("_libdevice_impl")


def _create_extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):
    """``InterpreterBuilder.create_extern_elementwise`` for the libdevice functions of :func:`_libdevice_functions`."""
    impl = _libdevice_impl.get(None)
    if impl is None:
        raise NotImplementedError(f"extern function {symbol} is not supported in interpreter mode")
    result = np.asarray(impl(*(arg.data for arg in args))).astype(interpreter._get_np_dtype(ret_type))
    return interpreter.TensorHandle(result, ret_type.scalar)


def _libdevice_functions() -> dict[str, Callable[..., object]]:
    """Interpreter versions of the supported libdevice functions: the CUDA backend's dispatching wrappers, run with
    the interpreter's semantic while :data:`_libdevice_impl` names the numpy reference for the extern call."""
    def bind(name: str) -> Callable[..., object]:
        fn = getattr(cuda_libdevice, name)
        impl = _LIBDEVICE_IMPLS[name]

        def call(*args, **kwargs):
            kwargs["_semantic"] = interpreter.interpreter_semantic
            token = _libdevice_impl.set(impl)
            try:
                return fn(*args, **kwargs)
            finally:
                _libdevice_impl.reset(token)

        return call

    return {name: bind(name) for name in _LIBDEVICE_IMPLS}


_stock_cast_impl = interpreter.InterpreterBuilder.cast_impl


def _cast_impl(self, src, dst_type):
    """``InterpreterBuilder.cast_impl`` with exact bfloat16 conversions. The interpreter truncates fp32 -> bf16 where
    compiled Triton rounds to nearest even, and casts the stored uint16 bits numerically in other conversions from or
    to bf16; those between bf16 and floats or signed integers go through torch here."""
    src_type, dst_scalar = src.dtype.scalar, dst_type.scalar
    other = dst_scalar if src_type == tl.bfloat16 else src_type
    if tl.bfloat16 not in (src_type, dst_scalar) or other == tl.bfloat16 or not (
        other.is_floating() or other.is_int_signed()
    ):
        return _stock_cast_impl(self, src, dst_type)
    data = torch.from_numpy(np.require(src.data, requirements="W"))  # torch warns on read-only arrays
    if dst_scalar == tl.bfloat16:
        result = data.to(torch.bfloat16).view(torch.uint16).numpy()
    else:  # bf16 -> fp32 is exact; numpy casts on from there
        result = data.view(torch.bfloat16).float().numpy().astype(interpreter._get_np_dtype(dst_scalar))
    return interpreter.TensorHandle(result, dst_scalar)


_stock_atomic_rmw = interpreter.InterpreterBuilder.create_atomic_rmw


def _create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
    """``InterpreterBuilder.create_atomic_rmw`` on contiguous arrays of the pointers' shape: the interpreter's C++
    reads each operand's memory as contiguous, and a mask broadcast along a block's rows (``xmask`` of an atomic add
    in a persistent reduction) is a view with stride 0, of which it read the first row's worth only."""
    shape = ptr.data.shape

    def whole(handle):
        return interpreter.TensorHandle(np.ascontiguousarray(np.broadcast_to(handle.data, shape)), handle.dtype)

    return _stock_atomic_rmw(self, rmw_op, whole(ptr), whole(val), whole(mask), sem, scope)


def _call_jit_function(self, *args, **kwargs):
    """``JITFunction.__call__`` while a kernel is interpreted: call the function as Triton would have had it been
    decorated under ``TRITON_INTERPRET=1``."""
    return interpreter.InterpretedFunction(self.fn)(*args, **kwargs)


def _slice_axis(array: np.ndarray, axis: int, start: int, stop: int, step: int = 1) -> np.ndarray:
    """``array[..., start:stop:step, ...]`` with the slice on ``axis``."""
    index = [slice(None)] * array.ndim
    index[axis] = slice(start, stop, step)
    return array[tuple(index)]


def _tree_reduce(self, input):
    """Vectorised ``ReduceOps.generic_reduce``: combines adjacent pairs of whole slices until one is left, instead of
    calling ``combine_fn`` once per element. Exact for the associative combine functions that ``tl.reduce`` requires
    (the order of combination is a tree, as on a GPU)."""
    original_axis = self.axis
    input, axis = self.unravel(input, self.axis)
    dtypes = [arg.dtype for arg in input]
    data = [arg.handle.data for arg in input]
    while (n := data[0].shape[axis]) > 1:
        paired = 2 * (n // 2)
        lhs = [self.to_tensor(_slice_axis(d, axis, 0, paired, 2), dtype) for d, dtype in zip(data, dtypes, strict=True)]
        rhs = [self.to_tensor(_slice_axis(d, axis, 1, paired, 2), dtype) for d, dtype in zip(data, dtypes, strict=True)]
        combined = interpreter.InterpretedFunction(self.combine_fn.fn)(*lhs, *rhs)
        combined = combined if isinstance(combined, tuple) else (combined,)
        shape = lhs[0].handle.data.shape
        data = [
            np.concatenate(
                [
                    np.broadcast_to(c.handle.data if isinstance(c, tl.tensor) else c, shape).astype(d.dtype),
                    _slice_axis(d, axis, paired, n),  # the odd one out, if any
                ],
                axis=axis,
            )
            for c, d in zip(combined, data, strict=True)
        ]
    results = []
    for d, dtype in zip(data, dtypes, strict=True):
        if original_axis is None:
            d = d.reshape(1) if self.keep_dims else d.item()
        elif not self.keep_dims:
            d = np.squeeze(d, axis)
        results.append(self.to_tensor(d, dtype))
    return results


def _logical_not(value):
    """``not value`` as compiled Triton evaluates it: elementwise on tensors."""
    return value.__not__() if isinstance(value, tl.tensor) else not value


def _ast_transformer():
    """The interpreter's AST rewriting of jitted functions, plus ``not x`` -> ``_logical_not(x)``. Without it Python
    evaluates ``not`` on a block as the negation of its truthiness, False for any block of several elements
    (``triton_helpers.maximum_with_index`` then loses NaNs: argmax/argmin of rows holding NaN go wrong)."""

    class Transformer(interpreter.ASTTransformer):
        def visit_Assign(self, node):
            node.value = self.visit(node.value)  # the base class rewrites the value without visiting it
            return super().visit_Assign(node)

        def visit_UnaryOp(self, node):
            node = self.generic_visit(node)
            if not isinstance(node.op, ast.Not):
                return node
            module = ast.Call(
                func=ast.Name(id="__import__", ctx=ast.Load()),
                args=[ast.Constant(value=__name__)],
                keywords=[ast.keyword(arg="fromlist", value=ast.List(elts=[ast.Constant(value="_logical_not")],
                                                                     ctx=ast.Load()))],
            )
            call = ast.Call(func=ast.Attribute(value=module, attr="_logical_not", ctx=ast.Load()), args=[node.operand],
                            keywords=[])
            return ast.copy_location(call, node)

    return Transformer()


_stock_create_dot = interpreter.InterpreterBuilder.create_dot


def _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """``InterpreterBuilder.create_dot`` with bfloat16 operands widened to fp32 (see the module docstring)."""
    widened = [
        interpreter.TensorHandle(torch.from_numpy(x.data).view(torch.bfloat16).float().numpy(), tl.float32)
        if x.dtype.scalar == tl.bfloat16 else x
        for x in (a, b)
    ]
    return _stock_create_dot(self, *widened, d, input_precision, max_num_imprecise_acc)


@contextlib.contextmanager
def _interpreter_patches() -> Iterator[None]:
    """Extends the interpreter's per-kernel language patches (``_patch_lang``) with the additions described in the
    module docstring. They are installed for each kernel launch and undone with the interpreter's own."""
    original_patch_lang = interpreter._patch_lang
    functions = _libdevice_functions()
    launch = interpreter.GridExecutor.__call__

    def quiet_launch(self, *args, **kwargs):
        # Compiled kernels raise no floating-point exceptions; numpy would warn, e.g. on masked-off lanes.
        with np.errstate(all="ignore"):
            return launch(self, *args, **kwargs)

    def patch_lang(fn):
        scope = original_patch_lang(fn)
        for name, function in functions.items():
            scope.set_attr(libdevice, name, function)
        scope.set_attr(interpreter.InterpreterBuilder, "create_extern_elementwise", _create_extern_elementwise)
        scope.set_attr(interpreter.InterpreterBuilder, "cast_impl", _cast_impl)
        scope.set_attr(interpreter.InterpreterBuilder, "create_atomic_rmw", _create_atomic_rmw)
        scope.set_attr(interpreter.InterpreterBuilder, "create_dot", _create_dot)
        scope.set_attr(JITFunction, "__call__", _call_jit_function)
        scope.set_attr(interpreter.ReduceOps, "generic_reduce", _tree_reduce)
        scope.set_attr(tl.tensor, "__index__", lambda self: int(self.handle.data.item()))
        return scope

    with (
        mock.patch.object(interpreter, "_patch_lang", patch_lang),
        mock.patch.object(interpreter.GridExecutor, "__call__", quiet_launch),
        mock.patch.object(interpreter.FunctionRewriter, "ast_transformer", _ast_transformer()),
        # Functions rewritten here (with the transformer above) are cached only for the duration of the context.
        mock.patch.object(interpreter.InterpretedFunction, "rewritten_fn", {}),
    ):
        yield


@contextlib.contextmanager
def _donated_saved_tensors_by_address() -> Iterator[None]:
    """0-d graph inputs that AOTAutograd donates (a backward's saved tensors) are passed to kernels by address, as
    on a GPU, not by value (see the module docstring)."""
    from torch._inductor import ir
    from torch._inductor.graph import GraphLowering

    stock = GraphLowering.is_unspec_arg

    def is_unspec_arg(self: GraphLowering, name: str) -> bool:
        return stock(self, name) and not isinstance(self.graph_inputs_original.get(name), ir.DonatedBuffer)

    with mock.patch.object(GraphLowering, "is_unspec_arg", is_unspec_arg):
        yield


@contextlib.contextmanager
def _division_by_constants_as_on_gpus() -> Iterator[None]:
    """A true division by a constant lowered as a product by its reciprocal, as Inductor lowers it on every device but
    the CPU (``lowering.div_prim``): the kernels run here are then the sm_90 kernels (a layer norm's backward divides
    its ``rstd`` by the row's length)."""
    from torch._inductor import lowering

    stock = lowering.div_prim

    def div_prim(a, b):
        divisor = lowering.get_constant_value(b)
        if divisor is None or all(lowering.is_boolean_type(x) or lowering.is_integer_type(x) for x in (a, b)):
            return stock(a, b)
        return lowering.mul(a, 1.0 / divisor.value if divisor.value else math.copysign(math.inf, divisor.value))

    with mock.patch.object(lowering, "div_prim", div_prim):
        yield


class _InterpreterDriver:
    """Stand-in for the active Triton driver on a machine without a GPU. Inductor's Triton codegen asks the driver for
    the target only to hash kernels; the interpreter itself needs no driver."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


def _has_active_driver() -> bool:
    try:
        return driver.active is not None
    except RuntimeError:  # "0 active drivers": no GPU
        return False


@contextlib.contextmanager
def _driver_for_codegen() -> Iterator[None]:
    """Makes ``triton.runtime.driver.active`` usable: keeps a working driver, or installs :class:`_InterpreterDriver`
    where there is none (and forgets the backend hash derived from it on exit)."""
    if _has_active_driver():
        yield
        return
    try:
        with mock.patch.object(driver, "_active", _InterpreterDriver()):
            yield
    finally:
        triton_backend.cache_clear()
        triton_hash_with_backend.cache_clear()


@contextlib.contextmanager
def _divisibility_as_on_gpus() -> Iterator[None]:
    """A GPU compiles a kernel for the divisibility its meta declares (``triton_meta["configs"]``: a parameter by its
    position, a multiple of 16) and trusts it at every launch; the interpreter ignores it. Here a launch whose
    integer argument is declared a multiple of 16 and is not one fails (a meta whose hint fell on a size symbol
    was a wrong answer on the GPU only)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    run = CachingAutotuner.run

    def checked_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        for (index,), hints in self.triton_meta["configs"][0].items():
            value = args[index]
            if ["tt.divisibility", 16] in hints and isinstance(value, int) and value % 16:
                raise AssertionError(f"{self.fn.__name__}: argument {self.fn.arg_names[index]} = {value} is "
                                     "declared a multiple of 16 (its meta's divisibility hint)")
        return run(self, *args, **kwargs)

    with mock.patch.object(CachingAutotuner, "run", checked_run):
        yield


@contextlib.contextmanager
def cpu_triton_interpreter() -> Iterator[None]:
    """Within this context torch.compile(...) on CPU tensors generates Triton kernels (cpu_backend="triton")
    and runs them in Triton's interpreter on CPU, with libdevice supported. Everything is restored on exit.

    Inside, ``TRITON_INTERPRET=1`` (environment and ``triton.knobs.runtime.interpret``), Inductor's
    ``cpu_backend="triton"``, and the FX graph and AOT autograd caches are off so that interpreted kernels and normal
    ones never share a cache entry. Dynamo is reset on entry and on exit: functions compiled inside must also be called
    inside, and recompile normally afterwards. See the module docstring for the additions to the interpreter; a
    launch whose integer argument breaks the divisibility its kernel's meta declares fails, as the GPU would compute
    wrong values there.
    """
    import torch._dynamo
    import torch._functorch.config
    import torch._inductor.config

    torch._dynamo.reset()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(triton.knobs.runtime.scope())  # restores the knobs and their environment variables
            triton.knobs.runtime.interpret = True
            os.environ["TRITON_INTERPRET"] = "1"  # read directly by Inductor, whether or not knobs propagate it
            stack.enter_context(
                torch._inductor.config.patch(cpu_backend="triton", fx_graph_cache=False, fx_graph_remote_cache=False)
            )
            stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
            stack.enter_context(_driver_for_codegen())
            stack.enter_context(warnings.catch_warnings())
            # From triton_helpers.set_driver_to_cpu() in every kernel module; the interpreter needs no CPU backend.
            warnings.filterwarnings("ignore", "Could not find an active CPU backend", UserWarning)
            stack.enter_context(_interpreter_patches())
            stack.enter_context(_donated_saved_tensors_by_address())
            stack.enter_context(_division_by_constants_as_on_gpus())
            stack.enter_context(_divisibility_as_on_gpus())
            yield
    finally:
        torch._dynamo.reset()
