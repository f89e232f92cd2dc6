"""Each rule is one function, written once: the run, the planner, the library's checked
functions and the command all report it in the same words, and every problem names its fields.
"""

import ast
import functools
import json
from pathlib import Path

import pytest

from trainmath.cli.command import execute
from trainmath.memory.activations import layer_activations
from trainmath.memory.stages import stage_activations
from trainmath.model.presets import preset
from trainmath.parallel.layout import Layout
from trainmath.parallel.placement import stage_params
from trainmath.planner.search import plan
from trainmath.problems import Invalid
from trainmath.report.data import plan_dict
from trainmath.runs.description import run
from trainmath.time.communication import communication

SRC = Path(__file__).resolve().parents[1] / "src" / "trainmath"

#: The words of rules the review found written several times; each must now be in one place.
RULE_WORDS = [
    "{name} {value} is not divisible by tp",
    "cannot fill pp {pp} stages",
    "is not divisible by 2 × cp",
    "is not divisible by tp × cp",
    "is not divisible by dp × micro-batch",
    "is modelled with attention='flash' only",
    "learned positions of {model.name}",
    "{model.name} was trained for (max_position_embeddings)",
    "with {name} > 1 is not modelled",
    "asks for the step time to be predicted",
    "needs a model shape, not a parameter count alone",
    "a time to train needs a GPU kind",
    "contradicts implementation",
    "kernels cannot run",
    "tp {lay.tp} spans nodes of",
]


@functools.cache
def _code_strings() -> list[tuple[str, str]]:
    """Every string literal in the library's code (f-strings joined, docstrings left out)."""
    found = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if id(node) in parts:
                continue
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else
                               "{" + ast.unparse(v.value) + "}" for v in node.values)
                found.append((str(path.relative_to(SRC)), text))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                found.append((str(path.relative_to(SRC)), node.value))
    return found


@pytest.mark.parametrize("words", RULE_WORDS)
def test_a_rule_is_worded_once(words):
    strings = _code_strings()
    # implicit concatenation splits a message over literals: join each module's in order too
    where = [p for p, s in strings if words in s]
    if not where:
        joined = {}
        for p, s in strings:
            joined[p] = joined.get(p, "") + s
        where = [p for p, s in joined.items() if words in s]
        assert len(where) == 1, (words, where)
        return
    assert len(where) == 1, (words, where)


def test_the_same_rule_speaks_the_same_words_everywhere():
    """heads % tp, from the run, the planner, the per-layer activations, the per-stage
    parameters and the traffic: one message."""
    m = preset("llama-3-8b")
    words = "heads 32 is not divisible by tp 3"
    with pytest.raises(Invalid) as run_error:
        run(m, tp=3)
    assert words in str(run_error.value)
    assert ("heads", "tp") in [p.fields for p in run_error.value.problems]
    for call in (lambda: layer_activations(m, 4096, 1, tp=3),
                 lambda: stage_params(m, Layout(tp=3)),
                 lambda: communication(m, Layout(tp=3), seq_len=4096, micro_batch=1,
                                       global_batch=8)):
        with pytest.raises(Invalid, match=words):
            call()
    p = plan(m, gpu="h100-sxm", gpus=24, seq_len=4096, global_batch=48, tp_across_nodes=True)
    reasons = [c["reason"] for c in plan_dict(p)["candidates"] if c["tp"] == 3]
    assert reasons and all(words in r for r in reasons)
    out = execute(["estimate", "--model", "llama-3-8b", "--tp", "3"])
    assert out.status == 2 and words in out.stderr
    assert [p.fields for p in out.problems][0] == ("heads", "tp")


def test_a_run_reports_every_problem_at_once():
    with pytest.raises(Invalid) as error:
        run("llama-2-7b", tp=3, pp=40, seq_len=8190, cp=2, attention="eager")
    fields = error.value.fields
    assert {"heads", "tp", "layers", "pp", "seq_len", "cp", "attention"} <= set(fields)
    text = str(error.value)
    assert text.count("invalid layout (") == 1  # one heading for the layout's problems
    assert "cannot fill pp 40 stages" in text and "attention='flash' only" in text


def test_the_stage_rule_is_the_layout_rule():
    with pytest.raises(Invalid, match="layers 32 cannot fill pp 40 stages"):
        stage_activations(preset("llama-2-7b"), 2048, 1, pp=40)


def test_the_calculator_places_a_problem_by_the_fields_the_reader_gave():
    from trainmath.cli.calculator import calculate

    values = [["model", "llama-3-8b"], ["tp", "3"]]
    out = json.loads(calculate("estimate", json.dumps(values)))
    assert out["status"] == 2 and out["field"] == "tp"  # heads is the preset's, tp the reader's
    shape = [["layers", "2"], ["hidden", "96"], ["heads", "3"], ["ffn", "96"], ["vocab", "64"],
             ["tp", "2"]]
    out = json.loads(calculate("estimate", json.dumps(shape)))
    assert out["status"] == 2 and out["field"] == "heads"  # both given: the first named


def test_every_fp8_recipe_is_timed_at_its_own_peak():
    """The recipe's peak precision is decided once: a plan of fp8-te is timed at the fp8 peak,
    as the estimate's time to train is (H100 SXM: 1,978.9 dense fp8 against 989.4 bf16 TFLOP/s,
    NVIDIA's datasheet)."""
    from trainmath.time.gemm import GEMM_UNITS
    from trainmath.time.network import Fabric
    from trainmath.time.step import step_time

    lay = Layout(dp=8)
    kw = dict(seq_len=8192, global_batch=64, micro_batch=1, zero_stage=3, recompute="none",
              implementation="megatron-te", fabric=Fabric.of("h100-sxm"))
    bf16 = step_time(preset("llama-3-8b"), lay, recipe="bf16-mixed", **kw)
    fp8 = step_time(preset("llama-3-8b"), lay, recipe="fp8-te", **kw)
    e = GEMM_UNITS["h100-sxm"].e_max  # the measured best shares of each peak (MAMF)
    assert fp8.gemm / bf16.gemm == pytest.approx(e["bf16"] * 989.4 / (e["fp8"] * 1978.9), rel=0.1)
    assert fp8.attention == bf16.attention  # attention stays in 16 bits
    p = plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64, recipe="fp8-te")
    assert p.precision == "fp8"
