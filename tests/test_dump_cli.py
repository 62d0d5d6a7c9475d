"""The kernel dump (OPTIMUS_IR_DUMP) and the command line (python -m optimus_ir)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import optimus_ir
from optimus_ir.interpret import cpu_triton_interpreter

ROOT = Path(__file__).resolve().parent.parent


def _reversed_split_relu_cat(x):
    return torch.cat([torch.relu(p) for p in reversed(x.split(8, dim=1))], dim=1)


def _cat_with_materialized_piece(x):
    pieces = [torch.relu(p) for p in x.split(8, dim=1)]
    return torch.cat(pieces[::-1], dim=1), pieces[0]


def test_dump_writes_both_sides_counts_and_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMUS_IR_DUMP", str(tmp_path))
    x = torch.randn(4, 96)
    with optimus_ir.enabled(), cpu_triton_interpreter():
        torch.compile(_reversed_split_relu_cat)(x)
        torch._dynamo.reset()
        outputs = torch.compile(_cat_with_materialized_piece)(x)
    torch.testing.assert_close(outputs, _cat_with_materialized_piece(x))
    graphs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(graphs) == 2
    first, second = (json.loads((g / "summary.json").read_text()) for g in graphs)
    assert first["launches"] == {"stock": 12, "optimus_ir": 1}
    assert first["rewrites"][0]["fired"] and first["rewrites"][0]["rule"] == "SplitCatToPointwise"
    assert "triton_poi_fused_cat_relu_split_0.run(" in (graphs[0] / "optimus_ir.py").read_text()
    assert (graphs[0] / "stock.py").read_text().count(".run(") == 12
    # the cat is left to stock (a piece is also returned); the horizontal pass then merges the per-piece kernels, of
    # two bodies (the returned piece's kernel also writes it), into one kernel of two classes
    assert second["launches"] == {"stock": 12, "optimus_ir": 1}
    reasons = (graphs[1] / "rewrites.txt").read_text()
    assert "has another consumer" in reasons and "FIRED    IdenticalKernelsToMemberTableKernel" in reasons
    index = (tmp_path / "index.md").read_text()
    assert "launches 12 stock → 1 optimus_ir; fired: SplitCatToPointwise" in index


def test_a_dump_folder_that_cannot_be_written_warns_once_and_fails_no_compile(tmp_path, monkeypatch, caplog):
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("OPTIMUS_IR_DUMP", str(tmp_path / "a_file" / "dump"))
    x = torch.randn(4, 96)
    with optimus_ir.enabled(), cpu_triton_interpreter():
        for fn in (_reversed_split_relu_cat, _cat_with_materialized_piece):
            torch._dynamo.reset()
            torch.testing.assert_close(torch.compile(fn)(x), fn(x))
    warned = [r.getMessage() for r in caplog.records if "no dump" in r.getMessage()]
    assert len(warned) == 1 and "a_file/dump cannot be written" in warned[0]


def test_the_dump_holds_the_decisions_on_dynamos_graph_of_the_first_compile(tmp_path, monkeypatch):
    import torch.nn.functional as F

    def pieces_normed(x, w, b):
        return torch.cat([torch.tanh(F.layer_norm(p, (8,), w[i], b[i])) for i, p in enumerate(x.split(8, 1))], 1)

    monkeypatch.setenv("OPTIMUS_IR_DUMP", str(tmp_path))
    inputs = (torch.randn(16, 32), torch.randn(4, 8), torch.randn(4, 8))
    with optimus_ir.enabled(), cpu_triton_interpreter(), torch._inductor.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(pieces_normed)(*inputs), pieces_normed(*inputs))
    (graph,) = (p for p in tmp_path.iterdir() if p.is_dir())
    assert "FIRED    PieceLayerNormsToOneLayerNorm" in (graph / "rewrites.txt").read_text()


def test_no_dump_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("OPTIMUS_IR_DUMP", raising=False)
    monkeypatch.chdir(tmp_path)
    with optimus_ir.enabled(), cpu_triton_interpreter():
        torch.compile(_reversed_split_relu_cat)(torch.randn(4, 96))
    assert list(tmp_path.iterdir()) == []


def _relu_cat_of_list(features):
    return torch.cat([torch.relu(f) for f in features], 1)


def _product(a, b):
    return a @ b


def _cli(*args):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    result = subprocess.run(
        [sys.executable, "-m", "optimus_ir", *args], cwd=ROOT, env=environ, capture_output=True, text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_cli_report_on_a_user_function(tmp_path):
    out = _cli(
        "report", "optimus_ir.testing.golden_splitcat:split64_relu_cat_reversed", "--inputs", "torch.randn(64, 4096)", "--dump", str(tmp_path)
    )
    assert "stock Inductor: 64 kernel launches" in out
    assert "optimus_ir: 1 kernel launch, 1 distinct Triton kernel" in out
    assert "FIRED    SplitCatToPointwise on cat" in out
    assert out.count("def triton_poi_fused_") == 1  # ours only: stock's 64 kernels with --stock-kernels
    assert out.index("def triton_poi_fused_cat_relu_split_0(") < out.index("--- rewrites")
    assert [line for line in out.splitlines() if line.startswith("=> ")] == [
        "=> 64 → 1 kernel launches per call; fired: SplitCatToPointwise"
    ]
    assert json.loads((tmp_path / "graph_0" / "summary.json").read_text())["launches"] == {"stock": 64, "optimus_ir": 1}


def test_cli_report_of_a_module_is_inference_unless_a_training_step_is_asked_for():
    target, inputs = "tests.test_grouped_matmuls:Towers", "tuple(torch.randn(64, 32) for _ in range(16))"
    out = _cli("report", target, "--inputs", inputs, "--counts-only")
    # (its parameters require grad: inference all the same, as under torch.no_grad())
    assert out.splitlines()[0] == f"=== {target} (inference)"
    assert "fired: InputAssertsToOneCheck, MatmulChainsToGroupedMlp" in out
    out = _cli("report", target, "--inputs", inputs, "--counts-only", "--mode", "training")
    assert out.splitlines()[0] == f"=== {target} (a training step: forward and backward graphs)"
    assert "IndependentMatmulsToGroupedMatmul" in out and "MatmulChainsToGroupedMlp" not in out


def test_cli_inputs_a_tuple_is_the_arguments_a_list_one_argument():
    out = _cli("report", "tests.test_dump_cli:_relu_cat_of_list", "--inputs", "[torch.randn(4, 8)] * 3",
               "--counts-only")
    assert "=> " in out
    out = _cli("report", "tests.test_dump_cli:_product", "--inputs", "(torch.randn(4, 3), torch.randn(3, 5))",
               "--counts-only")
    assert "extern_kernels.mm" not in out and "=> 1 → 1 kernel launches per call" in out


def test_cli_a_tracing_error_says_only_what_applies():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    result = subprocess.run(
        [sys.executable, "-m", "optimus_ir", "report", "tests.test_dump_cli:_product", "--inputs",
         "(torch.randn(4, 3), torch.randn(4, 3))"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 2
    assert "must have same reduction dim" in result.stderr and "CPU tensors stand for" not in result.stderr


def test_cli_report_with_every_size_symbolic_names_the_symbol_a_rule_cannot_take():
    # (the width as a symbol: the split's last piece is what is left of it, of a symbolic width along the cat)
    out = _cli(
        "report", "optimus_ir.testing.golden_splitcat:split64_relu_cat_reversed", "--inputs", "torch.randn(64, 4096)",
        "--dynamic", "--counts-only",
    )
    assert re.search(r"rejected SplitCatToPointwise on cat: a piece of symbolic size s\d+ - 4032 along the cat", out)
    assert "=> 64 → 1 kernel launches per call" in out  # the horizontal pass merges the pieces' kernels instead
    assert "symbolic sizes, starts per call" in out


def test_cli_demo_counts():
    out = _cli("demo", "--counts-only")
    assert out.splitlines()[1:3] == [
        "stock Inductor: 64 kernel launches, 64 distinct Triton kernels",
        "optimus_ir: 1 kernel launch, 1 distinct Triton kernel",
    ]
    assert out.count("optimus_ir: 1 kernel launch,") == 2
    assert out.count("=> ") == 2 and out.strip().splitlines()[-1].startswith("=> 16 → 1 kernel launches per call")
    assert "def triton_" not in out


_TOWERS = ("tests.test_grouped_matmuls:Towers", "--inputs", "tuple(torch.randn(64, 32) for _ in range(16))")


def test_cli_check_runs_the_generated_kernels_against_eager():
    out = _cli("check", *_TOWERS)
    assert out.splitlines()[-1].startswith("=> as eager; largest relative error ")
    assert "MatmulChainsToGroupedMlp" in out.splitlines()[-1]  # the two-layer kernel ran in the interpreter
    out = _cli("check", *_TOWERS, "--mode", "training")
    # the output, the 16 inputs' gradients, the 64 parameters', and the summary
    assert len([line for line in out.splitlines() if "relative error" in line]) == 1 + 16 + 16 * 4 + 1
    assert out.splitlines()[-1].startswith("=> as eager") and "IndependentMatmulsToGroupedMatmul" in out


def test_cli_check_exits_1_where_a_kernel_is_wrong(capsys):
    from unittest import mock

    from optimus_ir import grouped_mm
    from optimus_ir.cli import main

    def wrong(*args, out, **kwargs):
        for y in out:
            y.fill_(1.0)

    with mock.patch.object(grouped_mm, "launch_mlp", lambda *a, **k: wrong(*a, out=a[7], **k)):
        assert main(["check", *_TOWERS]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("=> NOT as eager")


def test_cli_rules_lists_every_rule_in_order_with_its_pass_and_stage():
    from optimus_ir.registry import RULES

    lines = _cli("rules").splitlines()
    assert [line.split()[:3] for line in lines] == [[r.name, r.pass_name, r.stage.value] for r in RULES]
    assert "Products of one depth and kind, each small" in lines[[r.name for r in RULES].index(
        "IndependentMatmulsToGroupedMatmul")]


def test_cli_demo_prints_stock_kernels_only_when_asked():
    assert _cli("demo", "--stock-kernels").count("def triton_") == 64 + 1 + 16 + 1


def test_environment_variable_alone_turns_64_kernels_into_1(tmp_path):
    """A user program with no optimus_ir code: OPTIMUS_IR=1 and the dump show 64 → 1, outputs equal eager."""
    program = tmp_path / "user_program.py"
    program.write_text(
        "import torch\n"
        "from optimus_ir.interpret import cpu_triton_interpreter  # only to run Triton kernels on this CPU\n"
        "def f(x):\n"
        "    return torch.cat([torch.relu(p) for p in reversed(x.split(64, dim=1))], dim=1)\n"
        "x = torch.randn(64, 4096)\n"
        "with cpu_triton_interpreter():\n"
        "    out = torch.compile(f)(x)\n"
        "torch.testing.assert_close(out, f(x), rtol=0, atol=0)\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    environ.update(OPTIMUS_IR="1", OPTIMUS_IR_DUMP=str(tmp_path / "dump"))
    result = subprocess.run([sys.executable, str(program)], env=environ, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    index = (tmp_path / "dump" / "index.md").read_text()
    assert "launches 64 stock → 1 optimus_ir; fired: SplitCatToPointwise" in index


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "no_such_module:f", "--inputs", "torch.randn(4)"], "cannot import 'no_such_module'"),
        (["report", "optimus_ir.cli:no_such_function", "--inputs", "torch.randn(4)"], "has no 'no_such_function'"),
        (["report", "optimus_ir.cli", "--inputs", "torch.randn(4)"], "expected module:function"),
        (["report", "optimus_ir.cli:main", "--inputs", "torch.randn(4"], "--inputs 'torch.randn(4': SyntaxError"),
        (["report", "optimus_ir.cli:main", "--inputs", "torch.randn(4)", "--passes", "bogus"], "unknown optimus_ir pass"),
        (["report", "optimus_ir.cli:main", "--inputs", "torch.randn(4)", "--passes", "all,-NoSuchRule"],
         "no rule named NoSuchRule"),
    ],
)
def test_cli_answers_a_bad_command_line_in_one_line_with_exit_code_2(args, message):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPTIMUS_IR")}
    result = subprocess.run(
        [sys.executable, "-m", "optimus_ir", *args], cwd=ROOT, env=environ, capture_output=True, text=True,
        timeout=600,
    )
    errors = [line for line in result.stderr.splitlines() if "Warning" not in line and line.strip()]
    assert result.returncode == 2
    assert len(errors) == 1 and errors[0].startswith("python -m optimus_ir: error: ") and message in errors[0], errors


def test_the_dump_counts_inductors_cpp_kernels_on_the_cpu(tmp_path, monkeypatch):
    """On a machine without a GPU, ``torch.compile`` of CPU tensors gives Inductor's C++ kernels: the dump counts
    them, so a split/cat rewrite does not read as "0 → 0"."""
    monkeypatch.setenv("OPTIMUS_IR_DUMP", str(tmp_path))
    x = torch.randn(4, 96)
    with optimus_ir.enabled("splitcat"), torch._inductor.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        out = torch.compile(lambda t: torch.cat([torch.relu(p) for p in reversed(t.split(8, 1))], 1) * 2)(x)
    torch.testing.assert_close(out, torch.cat([torch.relu(p) for p in reversed(x.split(8, 1))], 1) * 2)
    (folder,) = tmp_path.glob("graph_*")  # (numbered over the process)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["launches"] == {"stock": 1, "optimus_ir": 1}
    assert "launches 1 stock → 1 optimus_ir; fired: SplitCatToPointwise" in (tmp_path / "index.md").read_text()


def test_a_graph_served_from_inductors_cache_is_dumped_with_a_warning(tmp_path):
    """A user's second run of the same program compiles nothing: the dump still has the graph (its cached wrapper
    code), says it came from the cache, and a warning says how to see the decisions."""
    program = tmp_path / "user_program.py"
    program.write_text(
        "import torch\n"
        "def f(x):\n"
        "    return torch.cat([torch.relu(p) for p in reversed(x.split(8, 1))], 1) * 2\n"
        "torch.compile(f)(torch.randn(4, 96))\n"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPTIMUS_IR", "TORCHINDUCTOR"))}
    environ.update(OPTIMUS_IR="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for run in ("first", "second"):
        environ["OPTIMUS_IR_DUMP"] = str(tmp_path / run)
        result = subprocess.run([sys.executable, str(program)], env=environ, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, result.stderr
        runs.append(result)
    first = (tmp_path / "first" / "index.md").read_text()
    assert "fired: SplitCatToPointwise" in first and "cache" not in first
    second = (tmp_path / "second" / "index.md").read_text()
    assert "served from Inductor's cache" in second and "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1" in second, second
    summary = json.loads((tmp_path / "second" / "graph_0" / "summary.json").read_text())
    assert summary["from_cache"] and summary["rewrites"] == [] and summary["launches"]["optimus_ir"] == 1
    cached_code = (tmp_path / "second" / "graph_0" / "optimus_ir.py").read_text()
    assert cached_code == (tmp_path / "first" / "graph_0" / "optimus_ir.py").read_text()
    assert "optimus_ir: a graph was served from Inductor's cache" in runs[1].stderr
