"""optimus_ir on models nobody here wrote: transformers models built from their configs, and timm image models
(ResNet-50, ConvNeXt-tiny) when timm is installed; random weights, no downloads. With the passes on and off, in
the same run, each compiled cold: kernels per call, time per call, first call (compile) seconds, peak GPU memory
of a call, max relative error against eager and against stock Inductor. A variant that fails leaves its error in
its row, and the script exits 1 after writing the results.

    python -m benchmarks real --out benchmarks/results/<date>       # on a GPU
    python -m benchmarks real --codegen-only                        # anywhere: virtual sm_90 kernel counts

Any failure or slowdown is a bug to fix, not a row to drop.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.measure import (
    VARIANTS,
    cold_compile,
    cuda_time_ms,
    graph_replay_ms,
    header,
    kernels_per_call,
    max_rel_error,
    peak_memory_bytes,
    timed_first_call,
    variant_context,
    write_results,
)
from optimus_ir.inspect import compile_report
from optimus_ir.records import recording

Model = tuple[str, Callable[[], torch.nn.Module], Callable[[], tuple[torch.Tensor, ...]]]


def all_models() -> list[Model]:
    """Every model: name, a builder of a module returning one tensor, a maker of its inputs (on the CPU)."""
    return _transformers_models() + _timm_models()


def _transformers_models() -> list[Model]:
    import transformers as tf

    def ids(batch: int = 4, length: int = 128, vocab: int = 1000) -> Callable[[], tuple[torch.Tensor, ...]]:
        return lambda: (torch.randint(0, vocab, (batch, length)),)

    small = dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=1000)
    return [
        ("bert", lambda: _LastHidden(tf.BertModel(tf.BertConfig(**small))), ids()),
        (
            "gpt2",
            lambda: _LastHidden(tf.GPT2Model(tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000))),
            ids(),
        ),
        (
            "t5-encoder",
            lambda: _LastHidden(
                tf.T5EncoderModel(tf.T5Config(num_layers=2, d_model=256, num_heads=4, d_ff=1024, vocab_size=1000))
            ),
            ids(),
        ),
        (
            "llama",
            lambda: _LastHidden(tf.LlamaModel(tf.LlamaConfig(**small, num_key_value_heads=2))),
            ids(),
        ),
        (
            "vit",
            lambda: _LastHidden(
                tf.ViTModel(tf.ViTConfig(**{k: v for k, v in small.items() if k != "vocab_size"}, image_size=64))
            ),
            lambda: (torch.randn(4, 3, 64, 64),),
        ),
    ]


def _timm_models() -> list[Model]:
    """timm's ResNet-50 and ConvNeXt-tiny (``pretrained=False``) on 8 images of 160 x 160; none when timm is not
    installed."""
    try:
        import timm
    except ImportError:
        print("timm is not installed: no timm models", file=sys.stderr)
        return []
    images = lambda: (torch.randn(8, 3, 160, 160),)  # noqa: E731
    return [
        (name, lambda name=name: timm.create_model(name, pretrained=False), images)
        for name in ("resnet50", "convnext_tiny")
    ]


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).last_hidden_state


def codegen_only() -> None:
    for name, build, inputs in all_models():
        model = build().eval()
        try:
            with torch.no_grad():
                stock = compile_report(model, inputs(), passes=None)
                ours = compile_report(model, inputs())
        except Exception as error:  # report it, go on with the other models
            print(f"{name}: {type(error).__name__}: {error}")
            continue
        print(f"{name}: launches stock {len(stock.launches)} optimus_ir {len(ours.launches)}")
        for record in ours.rewrites:
            print(f"   {record}")


def on_gpu(out: Path, only: list[str] | None = None) -> bool:
    """Measure every model (or those in ``only``) under stock Inductor and optimus_ir; write the results. False if
    any variant failed."""
    models = [m for m in all_models() if not only or m[0] in only]
    rows = [row for name, build, make_inputs in models for row in _measure_model(name, build, make_inputs)]
    columns = list(dict.fromkeys(column for row in rows for column in row))
    write_results(out, "real_models", header(" ".join(sys.argv)), rows, columns)
    return not any("error" in row for row in rows)


def _measure_model(
    name: str, build: Callable[[], torch.nn.Module], make_inputs: Callable[[], tuple[torch.Tensor, ...]]
) -> list[dict[str, Any]]:
    """The rows of one model: stock Inductor, then optimus_ir, each compiled cold; a failure goes in its row."""
    torch.manual_seed(0)
    model = build().eval().cuda()
    inputs = tuple(x.cuda() for x in make_inputs())
    rows, outputs = [], {}
    with torch.no_grad():
        expected = model(*inputs)
        for variant in [v for v in VARIANTS if v.name in ("stock", "optimus_ir")]:
            row: dict[str, Any] = {"model": name, "variant": variant.name}
            try:
                with cold_compile(), variant_context(variant), recording() as records:
                    compiled = torch.compile(model)
                    call = lambda: compiled(*inputs)  # noqa: E731
                    outputs[variant.name], row["first call s"] = timed_first_call(call)
                    row["kernels/call"] = kernels_per_call(call)
                    row["ms/call"] = cuda_time_ms(call)
                    row["peak MiB"] = peak_memory_bytes(call) / 2**20  # before any graph capture, as in suite.py
                    row["graph replay ms"] = graph_replay_ms(call)  # GPU time: far less host noise than ms/call
                row["max rel err"] = max_rel_error(outputs[variant.name], expected)
                row["vs stock"] = max_rel_error(outputs[variant.name], outputs["stock"]) if "stock" in outputs else None
                row["rules fired"] = sum(r.fired for r in records)
                row["rules rejected"] = sum(not r.fired for r in records)
            except Exception as error:  # report it in the row, go on with the other models
                traceback.print_exc()
                row["error"] = f"{type(error).__name__}: {error}"[:500]
            rows.append(row)
            print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--codegen-only", action="store_true")
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    args = parser.parse_args()
    if args.codegen_only:
        codegen_only()
    elif not on_gpu(args.out, args.only):
        sys.exit(1)


if __name__ == "__main__":
    main()
