"""Command line: ``python -m optimus_ir demo``, ``python -m optimus_ir report module:function --inputs ...``,
``python -m optimus_ir check module:function --inputs ...`` and ``python -m optimus_ir rules``.

Both compile twice, stock Inductor and optimus_ir, for a CUDA sm_90 target (virtual when there is no GPU), and
print the counts, optimus_ir's Triton kernels (stock's with ``--stock-kernels``), every rewrite decision and a
one-line summary. Nothing is run.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any
from unittest import mock

import torch

from optimus_ir.dump import DUMP_ENV
from optimus_ir.passes import parse_switch
from optimus_ir.inspect import CompileReport, TraceError, check_numerics, compile_report


def split_relu_cat(x: torch.Tensor, pieces: int = 64) -> torch.Tensor:
    """The demo's first case: split into ``pieces``, relu each, cat them back in reverse order."""
    return torch.cat([torch.relu(p) for p in reversed(x.chunk(pieces, dim=1))], dim=1)


def split_mixed_cat(x: torch.Tensor, pieces: int = 16) -> torch.Tensor:
    """The demo's second case: a different pointwise op on alternate pieces, then cat."""
    ops = (torch.tanh, torch.sigmoid)
    return torch.cat([ops[i % 2](p) for i, p in enumerate(x.chunk(pieces, dim=1))], dim=1)


def _print_kernels(label: str, report: CompileReport) -> None:
    print(f"--- {label} kernels")
    for kernel in report.kernels:
        print(f"# {kernel.name} (launched {report.launches.count(kernel.name)}x)")
        print(kernel.source[kernel.source.index("@triton.jit"):].rstrip())
        print()


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _print_report(title: str, stock: CompileReport, ours: CompileReport, kernels: bool, stock_kernels: bool) -> None:
    """The counts and optimus_ir's kernels first, the rewrites after, stock's kernels only when asked for, and a
    one-line summary last."""
    print(f"=== {title}")
    for label, report in (("stock Inductor", stock), ("optimus_ir", ours)):
        launches = _counted(len(report.launches), "kernel launch", "kernel launches")
        distinct = _counted(len(report.kernels), "distinct Triton kernel", "distinct Triton kernels")
        print(f"{label}: {launches}, {distinct}")
    if kernels:
        _print_kernels("optimus_ir", ours)
    if stock_kernels:
        _print_kernels("stock Inductor", stock)
    print("--- rewrites")
    for record in ours.rewrites:
        print(f"  {record}")
    fired = sorted({record.rule for record in ours.rewrites if record.fired})
    launches = f"{len(stock.launches)} → {len(ours.launches)} kernel launches per call"
    print(f"=> {launches}; fired: {', '.join(fired) or 'none'}")
    print()


def _compare(
    fn: Callable[..., Any], inputs: tuple[Any, ...], passes: Any, dump: str | None = None, dynamic: bool = False,
    training: bool | None = None,
) -> tuple[CompileReport, CompileReport]:
    """Stock's report and optimus_ir's; with ``dump``, optimus_ir's compile writes the dump there, as
    ``OPTIMUS_IR_DUMP`` does."""
    stock = compile_report(fn, inputs, passes=None, dynamic=dynamic, training=training)
    with mock.patch.dict(os.environ, {DUMP_ENV: dump} if dump else {}):
        ours = compile_report(fn, inputs, passes=passes, dynamic=dynamic, training=training)
    return stock, ours


def demo(args: argparse.Namespace) -> int:
    x = torch.randn(64, 4096)
    cases = [
        (f"split into {args.pieces} → relu → cat reversed, x: [64, 4096] fp32", lambda t: split_relu_cat(t, args.pieces)),
        ("split into 16 → tanh / sigmoid alternating → cat", split_mixed_cat),
    ]
    for title, fn in cases:
        stock, ours = _compare(fn, (x,), "all")
        _print_report(title, stock, ours, not args.counts_only, args.stock_kernels)
    return 0


class UsageError(Exception):
    """A bad command line: reported in one line, exit code 2 (as argparse does for its own errors)."""


def _load(target: str) -> Callable[..., Any]:
    """The callable ``module:function`` names (``module:Class`` of an ``nn.Module``: an instance of it)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"expected module:function, got {target!r}")
    sys.path.insert(0, ".")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"cannot import {module_name!r}: {error}") from error
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module_name!r} has no {attribute!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    if not callable(obj):
        raise UsageError(f"{target!r} is not callable")
    return obj


def _inputs(expression: str) -> tuple[Any, ...]:
    """The positional inputs: a tuple is the arguments, anything else (a tensor, a list of them) one argument."""
    try:
        value = eval(expression, {"torch": torch})  # the user's own expression, as on a Python prompt
    except Exception as error:
        raise UsageError(f"--inputs {expression!r}: {type(error).__name__}: {error}") from error
    return value if isinstance(value, tuple) else (value,)


def _passes(spec: str) -> str | None:
    from optimus_ir.registry import unknown_rules

    try:
        unknown = unknown_rules(parse_switch(spec))
    except ValueError as error:
        raise UsageError(f"--passes {spec!r}: {error}") from error
    if unknown:
        raise UsageError(f"--passes {spec!r}: no rule named {', '.join(unknown)} (`python -m optimus_ir rules`)")
    return spec if spec != "none" else None


def report(args: argparse.Namespace) -> int:
    fn, inputs, passes = _load(args.target), _inputs(args.inputs), _passes(args.passes)
    training = args.mode == "training"
    stock, ours = _compare(fn, inputs, passes, args.dump, args.dynamic, training)
    mode = "a training step: forward and backward graphs" if training else "inference"
    _print_report(f"{args.target} ({mode})", stock, ours, not args.counts_only, args.stock_kernels)
    if args.dump:
        print(f"dump written to {args.dump} (index.html)")
    return 0


def check(args: argparse.Namespace) -> int:
    """The generated kernels run through Triton's interpreter against eager; exit code 1 where they differ."""
    fn, inputs, passes = _load(args.target), _inputs(args.inputs), _passes(args.passes)
    try:
        result = check_numerics(fn, inputs, passes=passes, training=args.mode == "training")
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise UsageError(f"the compile or its run failed ({type(error).__name__}: {first_line})") from error
    what = "outputs, then gradients" if args.mode == "training" else "outputs"
    print(f"=== {args.target} ({args.mode}): the Triton kernels for a CUDA device, run by Triton's interpreter, "
          f"against eager ({what})")
    for i, (error, bound) in enumerate(zip(result.errors, result.bounds, strict=True)):
        print(f"  {i}: relative error {error:.2e} (at most {bound:.0e}){'' if error <= bound else '  <- differs'}")
    fired = sorted({record.rule for record in result.rewrites if record.fired})
    verdict = "as eager" if result.passed else "NOT as eager"
    print(f"=> {verdict}; largest relative error {max(result.errors, default=0.0):.2e}; fired: "
          f"{', '.join(fired) or 'none'}")
    return 0 if result.passed else 1


#: the characters of a rule's first docstring line that ``rules`` prints
_SUMMARY = 90


def rules(args: argparse.Namespace) -> int:
    """Every rule in the order it is tried: its name, pass, stage and the first line of its docstring."""
    from optimus_ir.registry import RULES

    for rule in RULES:
        summary = (type(rule).__doc__ or "").strip().splitlines()[0]
        summary = summary if len(summary) <= _SUMMARY else summary[:_SUMMARY - 1] + "…"
        print(f"{rule.name:<48} {rule.pass_name:<11} {rule.stage.value:<13} {summary}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m optimus_ir",
        description="Show the Triton kernels stock Inductor and optimus_ir generate (CUDA sm_90 target; "
        "virtual when no GPU is present).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="built-in split/cat-heavy examples")
    demo_parser.add_argument("--pieces", type=int, default=64)
    demo_parser.add_argument("--counts-only", action="store_true", help="print counts and rewrites, no kernels")
    demo_parser.add_argument("--stock-kernels", action="store_true", help="also print stock Inductor's kernels")
    demo_parser.set_defaults(run=demo)
    report_parser = commands.add_parser("report", help="compile your function, stock and with optimus_ir")
    report_parser.add_argument("target", help="module:function (or module:Module class, built with no arguments)")
    report_parser.add_argument(
        "--inputs", required=True, help="Python expression for the example inputs, e.g. 'torch.randn(64, 4096)': a "
        "tuple is the positional arguments, anything else (a list too) one argument; CPU tensors stand for CUDA ones",
    )
    report_parser.add_argument(
        "--mode", choices=("inference", "training"), default="inference",
        help="inference (default: as under torch.no_grad(), whatever requires grad) or a training step (forward and "
        "backward graphs)",
    )
    report_parser.add_argument(
        "--passes", default="all", help="'all', 'none', or a comma list of pass names and rule names (-Name: off)",
    )
    report_parser.add_argument("--counts-only", action="store_true", help="print counts and rewrites, no kernels")
    report_parser.add_argument("--stock-kernels", action="store_true", help="also print stock Inductor's kernels")
    report_parser.add_argument("--dump", help="also write the dump (same layout as OPTIMUS_IR_DUMP) to this folder")
    report_parser.add_argument(
        "--dynamic", action="store_true",
        help="every input size symbolic, as after a loop's shapes change (torch.compile's dynamic=True)",
    )
    report_parser.set_defaults(run=report)
    check_parser = commands.add_parser(
        "check", help="run the kernels optimus_ir generates for your function on the CPU (Triton's interpreter) "
        "and compare them with eager",
    )
    check_parser.add_argument("target", help="module:function (or module:Module class, built with no arguments)")
    check_parser.add_argument(
        "--inputs", required=True, help="as report's (CPU tensors; small: the interpreter is slow)",
    )
    check_parser.add_argument("--passes", default="all", help="as report's")
    check_parser.add_argument("--mode", choices=("inference", "training"), default="inference",
                              help="inference, or a training step: the gradients compared too")
    check_parser.set_defaults(run=check)
    rules_parser = commands.add_parser("rules", help="list every rule: its name, pass, stage and what it does")
    rules_parser.set_defaults(run=rules)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, TraceError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
