"""optimus_ir on models nobody here wrote: transformers models built from their configs (random weights, no
downloads). With the passes on and off, in the same run: outputs equal within tolerance, kernels per call, time.

    python benchmarks/real_models.py --out benchmarks/results/<date>       # on a GPU
    python benchmarks/real_models.py --codegen-only                        # anywhere: virtual sm_90 kernel counts

Any failure or slowdown is a bug to fix, not a row to drop.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _models() -> list[tuple[str, Callable[[], torch.nn.Module], Callable[[], tuple[torch.Tensor, ...]]]]:
    import transformers as tf

    def ids(batch: int = 4, length: int = 128, vocab: int = 1000) -> Callable[[], tuple[torch.Tensor, ...]]:
        return lambda: (torch.randint(0, vocab, (batch, length)),)

    small = dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=1000)
    return [
        ("bert", lambda: tf.BertModel(tf.BertConfig(**small)), ids()),
        ("gpt2", lambda: tf.GPT2Model(tf.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000)), ids()),
        (
            "t5-encoder",
            lambda: tf.T5EncoderModel(tf.T5Config(num_layers=2, d_model=256, num_heads=4, d_ff=1024, vocab_size=1000)),
            ids(),
        ),
        (
            "llama",
            lambda: tf.LlamaModel(tf.LlamaConfig(**small, num_key_value_heads=2)),
            ids(),
        ),
        (
            "vit",
            lambda: tf.ViTModel(tf.ViTConfig(**{k: v for k, v in small.items() if k != "vocab_size"}, image_size=64)),
            lambda: (torch.randn(4, 3, 64, 64),),
        ),
    ]


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).last_hidden_state


def codegen_only() -> None:
    from optimus_ir.inspect import compile_report

    for name, build, inputs in _models():
        model = _LastHidden(build().eval())
        with torch.no_grad():
            stock = compile_report(model, inputs(), passes=None)
            ours = compile_report(model, inputs())
        print(f"{name}: launches stock {len(stock.launches)} optimus_ir {len(ours.launches)}")
        for record in ours.rewrites:
            print(f"   {record}")


def on_gpu(out: Path) -> None:
    from measure import VARIANTS, cuda_time_ms, header, kernels_per_call, max_rel_error, timed_first_call
    from measure import variant_context, write_results

    from optimus_ir.registry import recording

    rows = []
    variants = [v for v in VARIANTS if v.name in ("stock", "optimus_ir")]
    for name, build, make_inputs in _models():
        torch.manual_seed(0)
        model = _LastHidden(build().eval()).cuda()
        inputs = tuple(x.cuda() for x in make_inputs())
        with torch.no_grad():
            expected = model(*inputs)
            for variant in variants:
                torch._dynamo.reset()
                with variant_context(variant), recording() as records:
                    compiled = torch.compile(model)
                    actual, compile_s = timed_first_call(lambda: compiled(*inputs))
                call = lambda: compiled(*inputs)  # noqa: E731
                rows.append(
                    {
                        "model": name,
                        "variant": variant.name,
                        "kernels/call": kernels_per_call(call),
                        "ms/call": cuda_time_ms(call),
                        "first call s": compile_s,
                        "max rel err": max_rel_error(actual, expected),
                        "rules fired": sum(r.fired for r in records),
                        "rules rejected": sum(not r.fired for r in records),
                    }
                )
                print(rows[-1], flush=True)
    write_results(out, "real_models", header(" ".join(sys.argv)), rows, list(rows[0]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--codegen-only", action="store_true")
    args = parser.parse_args()
    if args.codegen_only:
        codegen_only()
    else:
        on_gpu(args.out)


if __name__ == "__main__":
    main()
