"""trainmath.cli.calculator and the calculator page's Sphinx extension, without a browser.

The browser suite (tests/browser/test_calculator.py) checks the page in Chromium against the
command; these check the pieces: the form and the parser are both made from the flag table,
values and command lines map both ways, the command's output is passed on unchanged and
computed once per change, and a subcommand added to the table gets its own tab and form with
no change to the page.
"""

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainmath import hardware
from trainmath.cli import calculator
from trainmath.cli import command as cli
from trainmath.cli import flags
from trainmath.memory import kernels, recipes
from trainmath.model import presets
from trainmath.cli.calculator import (FILE_METAVARS, calculate, field_of, form_values, forms, run_command, to_argv)

ROOT = Path(__file__).resolve().parents[1]


def _estimate_form():
    (form,) = [f for f in forms() if f.command == "estimate"]
    return form


def test_the_form_has_every_option_of_the_command_and_its_choices():
    form = _estimate_form()
    fields = {f.name: f for g in form.groups for f in g.fields}
    options = {o for f in flags.flags_of("estimate") for o in f.names} - {"--json"}
    shown = {flag for f in fields.values() for flag in f.flags}
    assert shown == options
    usage = _help("estimate")
    assert all(o in usage for o in options)  # the parser is made from the same table
    assert fields["model"].choices == tuple(presets.PRESETS)
    assert fields["gpu"].choices == (*hardware.GPUS, *hardware.GPU_ALIASES)
    assert fields["recompute"].choices == tuple(kernels.RECOMPUTE_KINDS)
    assert set(recipes.RECIPES) <= set(fields["recipe"].choices)
    assert fields["dropout"].kind == "switch" and fields["sequence-parallel"].kind == "flag"
    assert fields["seq-len"].kind == "text" and fields["dp"].default == "1"
    assert [g.title for g in form.groups][:3] == [
        "your run", "model (a preset, a parameter count, or a shape)", "training"]
    # the first form asks what people know; the rest opens on demand
    assert [f.name for f in form.groups[0].fields] == list(calculator.QUICK["estimate"])
    assert form.groups[0].quick and not any(g.quick for g in form.groups[1:])
    assert fields["setup"].choices == tuple(calculator.SETUPS) and not fields["setup"].flags


def test_values_and_command_lines_map_both_ways():
    line = ["estimate", "--model", "llama-3-8b", "--no-dropout", "--sequence-parallel", "--tp",
            "2", "--seq-len", "4096"]
    command, values = form_values(line)
    assert command == "estimate"
    assert to_argv(command, values) == [*line, "--json"]
    assert to_argv("estimate", [("dp", "  "), ("model", "gpt3-175b")]) == [
        "estimate", "--model", "gpt3-175b", "--json"]  # an empty field: the command's default
    with pytest.raises(ValueError, match="unknown field 'nope'"):
        to_argv("estimate", [("nope", "1")])


CASES = [["--model", "llama-3-70b", "--seq-len", "4096", "--tp", "8", "--pp", "4", "--dp", "2",
          "--global-batch", "32", "--gpu", "h100-sxm"],
         ["--params", "7e9", "--gpu-memory", "80GB"],
         ["--model", "llama-3-8b", "--seq-len", "99999"]]


@pytest.mark.parametrize("args", CASES)
def test_the_page_gets_what_the_command_prints(args):
    """The JSON (or message) calculate passes on is the command's, byte for byte, as a new
    process prints it."""
    command, values = form_values(["estimate", *args], check=False)
    out = json.loads(calculate(command, json.dumps(values)))
    ran = subprocess.run([sys.executable, "-m", "trainmath", "estimate", *args, "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert (out["status"], out["stdout"], out["stderr"]) == (ran.returncode, ran.stdout, ran.stderr)
    assert out["command_line"] == "trainmath estimate " + " ".join(args) + " --json"
    if ran.returncode == 0:
        assert "Show the arithmetic" in out["html"] and out["field"] is None
    else:
        assert out["html"] == "" and out["field"] == "seq-len"


def test_errors_are_placed_beside_the_field_they_name():
    form = _estimate_form()
    assert field_of("trainmath: error: argument --micro-batch: '0' is not", form) == "micro-batch"
    assert field_of("--no-dropout contradicts", form) == "dropout"
    assert field_of("seq_len 9000 is longer than", form) == "seq-len"
    assert field_of("something else entirely", form) is None
    assert field_of("offload 'optimizer' needs ZeRO stage 2", form) == "offload"  # the first named
    assert run_command(["estimate", "--model", "nope", "--json"]).status == 2


def _help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.build_parser().parse_args([command, "--help"])
    return out.getvalue()


def _with_a_sketch(monkeypatch):
    """The flag table with one more subcommand, as a later branch might add one: a PATH option
    (a pasted config), a number and a switch; and an existing flag that it shares."""
    monkeypatch.setitem(flags.COMMANDS, "sketch", ("a subcommand to come", "Sketch a run."))
    monkeypatch.setitem(flags.GROUPS, "sketch", (("model", "model"), ("run", "the run")))
    shared = [f for f in flags.FLAGS if f.names[0] == "--model" and "plan" in f.commands]
    extra = (flags.Flag(("--config",), ("sketch",), "model", "a Hugging Face config.json",
                        metavar="PATH"),
             flags.Flag(("--gpus",), ("sketch",), "run", "GPUs to plan for",
                        parse=flags.parse_positive),
             flags.Flag(("--fast",), ("sketch",), "run", "skip the slow part", kind="on"))
    table = tuple(f if f not in shared else flags.Flag(**{**f.__dict__,
                                                          "commands": (*f.commands, "sketch")})
                  for f in flags.FLAGS) + extra
    monkeypatch.setattr(flags, "FLAGS", table)


def test_a_new_subcommand_gets_its_own_form(tmp_path, monkeypatch):
    _with_a_sketch(monkeypatch)
    assert [f.command for f in forms()][-1] == "sketch"
    sketch = forms()[-1]
    fields = {f.name: f for g in sketch.groups for f in g.fields}
    assert list(fields) == ["model", "config", "gpus", "fast"]
    assert fields["config"].kind == "file" and "PATH" in FILE_METAVARS
    assert fields["fast"].kind == "flag" and fields["model"].kind == "choice"
    assert "--fast" in _help("sketch") and "GPUs to plan for" in _help("sketch")
    monkeypatch.chdir(tmp_path)
    argv = to_argv("sketch", [("config", '{"hidden_size": 8}'), ("gpus", "8"), ("fast", "on")])
    assert argv == ["sketch", "--config", "config.json", "--gpus", "8", "--fast", "--json"]
    assert (tmp_path / "config.json").read_text() == '{"hidden_size": 8}'


def test_one_estimate_and_one_plan_per_change_of_the_form(monkeypatch):
    """The calculator computes once: the JSON, the drawing and the summary are renderings of
    the same Estimate (or Plan)."""
    calls = {"estimate": 0, "plan": 0}
    real_estimate, real_plan = cli.estimate, cli.plan

    def counted(name, real):
        def f(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return f

    monkeypatch.setattr(cli, "estimate", counted("estimate", real_estimate))
    monkeypatch.setattr(cli, "plan", counted("plan", real_plan))
    monkeypatch.setattr("trainmath.runs.estimates.estimate", counted("estimate", real_estimate))
    out = json.loads(calculate("estimate", json.dumps([["model", "llama-3-8b"], ["dp", "8"],
                                                       ["seq-len", "8192"], ["gpu", "h100-sxm"]])))
    assert out["status"] == 0 and "Show the arithmetic" in out["html"] and out["summary"]
    assert calls == {"estimate": 1, "plan": 0}
    out = json.loads(calculate("plan", json.dumps([["model", "llama-3-8b"], ["gpu", "h100-sxm"],
                                                   ["gpus", "8"], ["seq-len", "4096"],
                                                   ["global-batch", "32"]])))
    assert out["status"] == 0 and out["summary"].startswith("Fastest")
    assert calls == {"estimate": 1, "plan": 1}


def test_no_argparse_private_attribute_is_read():
    """The form comes from the flag table, not from the parser's insides."""
    private = ("._actions", "._group_actions", "._action_groups", "._choices_actions",
               "_SubParsersAction", "._option_string_actions")
    for path in (ROOT / "src" / "trainmath").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not [p for p in private if p in text], path
    ext = (ROOT / "docs" / "_ext" / "trainmath_calculator.py").read_text(encoding="utf-8")
    assert not [p for p in private if p in ext]


def _extension():
    spec = importlib.util.spec_from_file_location(
        "trainmath_calculator", ROOT / "docs" / "_ext" / "trainmath_calculator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_has_a_tab_per_subcommand(monkeypatch):
    pytest.importorskip("sphinx")
    ext = _extension()
    monkeypatch.setattr(ext, "runtime_bytes", lambda: 13_500_000)
    one = ext.calculator_html(["estimate --model llama-3-8b --dp 8 --sequence-parallel"])
    assert one.count('role="tab"') == len(forms()) and 'data-command="estimate"' in one
    assert '<option value="llama-3-8b" selected>' in one and 'value="8"' in one
    assert 'name="sequence-parallel" value="on" checked' in one
    before = len(forms())
    _with_a_sketch(monkeypatch)
    more = ext.calculator_html(["estimate --params 7e9"])
    assert more.count('role="tab"') == before + 1 and 'id="tm-calc-panel-sketch"' in more
    assert '<textarea id="tm-calc-sketch-config" name="config"' in more
    with pytest.raises(Exception):
        ext.calculator_html(["estimate --dp 0"])  # an example the command refuses


def test_the_planner_tab_gets_what_the_command_prints():
    args = ["--model", "llama-3-8b", "--gpus", "16", "--gpu", "h100-sxm", "--seq-len", "4096",
            "--global-batch", "64"]
    command, values = form_values(["plan", *args])
    out = json.loads(calculate(command, json.dumps(values)))
    ran = subprocess.run([sys.executable, "-m", "trainmath", "plan", *args, "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert (out["status"], out["stdout"]) == (ran.returncode, ran.stdout) == (0, ran.stdout)
    text = subprocess.run([sys.executable, "-m", "trainmath", "plan", *args],
                          capture_output=True, text=True, cwd=ROOT).stdout
    assert '<table class="tm-calc-table tm-calc-plan">' in out["html"]  # a table, not a dump
    assert "<h3>Why the fastest wins</h3>" in out["html"] and text.splitlines()[0] in out["html"]


def test_the_summary_says_what_the_command_text_says(capsys):
    """The line that stays in view: the peak and the verdict, as the command's own text output
    prints them; the planner's best layout, as its table's first row."""
    args = ["--model", "llama-3-8b", "--dp", "8", "--zero", "3", "--seq-len", "8192",
            "--gpu", "h100-sxm"]
    _, values = form_values(["estimate", *args])
    out = json.loads(calculate("estimate", json.dumps(values)))
    assert cli.main(["estimate", *args]) == 0
    text = capsys.readouterr().out
    peak_line = next(line for line in text.splitlines() if "peak of a step" in line)
    assert peak_line.split()[4] + " GB" in out["summary"]
    assert ("; fits" in out["summary"]) == (": yes," in text)
    plan_args = ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "16", "--seq-len",
                 "8192", "--global-batch", "128"]
    _, values = form_values(["plan", *plan_args])
    out = json.loads(calculate("plan", json.dumps(values)))
    assert cli.main(["plan", *plan_args]) == 0
    first = next(line for line in capsys.readouterr().out.splitlines()
                 if line.split()[:1] == ["1"]).split()
    assert f"dp {first[1]} × tp {first[2]} × pp {first[3]} × cp {first[4]}" in out["summary"]
    assert f"{first[12]} s a step" in out["summary"] and f"MFU {first[13]}" in out["summary"]
    bad = json.loads(calculate("estimate", json.dumps([("model", "llama-3-8b"), ("dp", "0")])))
    assert bad["status"] == 2 and bad["summary"] == ""


# -- issue 25: an answer in seconds, words a reader understands, never a hang ------------------
def test_how_people_train_maps_to_the_commands_flags():
    """"FSDP" is a choice: PyTorch FSDP shards parameters, gradients and optimizer states
    (Zhao et al. 2023, §3), ZeRO stage 3; DeepSpeed's ZeRO-2 is stage 2 (Rajbhandari et al.
    2020, §5); LoRA trains an adapter on the frozen model (Hu et al. 2021)."""
    base = [("model", "llama-3-8b"), ("dp", "8"), ("seq-len", "4096")]
    for setup, zero, recipe, finetune in (("fsdp", 3, "fsdp2", "full"),
                                          ("zero2", 2, "deepspeed", "full"),
                                          ("ddp", 0, "bf16-mixed", "full"),
                                          ("lora", None, None, "lora")):
        out = json.loads(calculate("estimate", json.dumps([*base, ("setup", setup)])))
        assert out["status"] == 0, out["stderr"]
        data = json.loads(out["stdout"])
        if zero is not None:
            assert (data["inputs"]["zero"], data["inputs"]["recipe"]) == (zero, recipe)
        assert f"--finetune {finetune}" in out["command_line"] or finetune == "full"
    # a flag set below overrides its part of the setup (argparse keeps the last)
    argv = to_argv("estimate", [("setup", "zero3"), ("zero", "1")])
    assert argv == ["estimate", "--recipe", "deepspeed", "--zero", "3", "--zero", "1", "--json"]
    out = json.loads(calculate("estimate", json.dumps([("params", "7e9"), ("setup", "nope")])))
    assert out["status"] == 2 and "accepted: ddp, fsdp" in out["stderr"] and out["field"] == "setup"


def test_a_misspelled_name_says_what_it_likely_means():
    with pytest.raises(ValueError, match=r"unknown model preset 'llama-3-8B'; did you mean "
                                         r"llama-3-8b\? accepted: llama-2-7b"):
        presets.preset("llama-3-8B")
    out = run_command(["estimate", "--model", "llama-3-8B", "--json"])
    assert out.status == 2 and "did you mean llama-3-8b?" in out.stderr
    assert field_of(out.stderr, _estimate_form()) == "model"
    assert "did you mean" not in run_command(["estimate", "--model", "gpt", "--json"]).stderr


def test_a_config_nested_beyond_reason_is_an_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    out = run_command(["estimate", "--config", str(deep), "--json"])
    assert out.status == 2 and "nests 100000 levels" in out.stderr
    real = ROOT / "tests" / "data" / "hf-configs" / "Meta-Llama-3-8B.json"
    assert run_command(["estimate", "--config", str(real), "--json"]).status == 0


def test_inputs_beyond_physical_sense_are_warned_beside_their_fields():
    """Switch-C has 1571B parameters (Fedus et al. 2022, Table 9), the most of a published
    trained model; Llama 3 405B trained on up to 16K H100s (Dubey et al. 2024, §3.3)."""
    from trainmath.model.shape import scale_problems
    from trainmath.parallel.layout import cluster_problems

    assert scale_problems(100 * 1571 * 10**9) == [] and scale_problems(100 * 1571 * 10**9 + 1)
    assert cluster_problems(100 * 16384) == [] and cluster_problems(100 * 16384 + 1)
    out = json.loads(calculate("estimate", json.dumps([("params", "1e16"), ("dp", "1000000000")])))
    assert out["status"] == 0
    assert [f for f, _ in out["warnings"]] == ["params", "dp"]
    assert len(json.loads(out["stdout"])["inputs"]["warnings"]) == 2  # the command says them too
    ok = json.loads(calculate("estimate", json.dumps([("model", "llama-3-70b"), ("dp", "64")])))
    assert ok["warnings"] == []


def test_a_link_cannot_start_a_plan_on_a_huge_cluster_unasked():
    assert "100,000 GPUs" in calculator.caution("plan", json.dumps([("gpus", "100000")]))
    assert calculator.caution("plan", json.dumps([("gpus", "4096")])) == ""


def test_help_texts_are_plain_text():
    """No argparse escape (``%%``) reaches the page, and an empty field shows a value."""
    for form in forms():
        for f in form.fields:
            assert "%%" not in f.help, f.name
    assert _estimate_form().field("dp").placeholder == "1"
    assert _estimate_form().field("seq-len").placeholder.startswith("none")
