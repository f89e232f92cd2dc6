"""trainmath.cli.calculator and the calculator page's Sphinx extension, without a browser.

The browser suite (tests/browser/test_calculator.py) checks the page in Chromium against the
command; these check the pieces: the form mirrors the parser, values and command lines map both
ways, the command's output is passed on unchanged, and a subcommand added to the parser (such as
a planner) gets its own tab and form with no change to the page.
"""

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainmath import hardware
from trainmath.cli import command as cli
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
    (est,) = [a for a in cli.build_parser()._actions
              if isinstance(a, argparse._SubParsersAction)]
    options = {o for a in est.choices["estimate"]._actions for o in a.option_strings
               if o.startswith("--") and o not in ("--help", "--json")}
    shown = {flag for f in fields.values() for flag in f.flags}
    assert shown == options
    assert fields["model"].choices == tuple(presets.PRESETS)
    assert fields["gpu"].choices == (*hardware.GPUS, *hardware.GPU_ALIASES)
    assert fields["recompute"].choices == tuple(kernels.RECOMPUTE_KINDS)
    assert set(recipes.RECIPES) <= set(fields["recipe"].choices)
    assert fields["dropout"].kind == "switch" and fields["sequence-parallel"].kind == "flag"
    assert fields["seq-len"].kind == "text" and fields["dp"].default == "1"
    assert [g.title for g in form.groups][:2] == ["model (a preset, a parameter count, or a shape)",
                                                  "training"]


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


def _parser_with_a_planner():
    """The command's parser with one more subcommand, as a later branch might add one: a
    positional, a PATH option (a pasted config), a list, and no --json."""
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sketch = sub.add_parser("sketch", help="a subcommand to come")
    sketch.add_argument("gpus", type=int, help="GPUs to plan for")
    group = sketch.add_argument_group("model")
    group.add_argument("--config", metavar="PATH", help="a Hugging Face config.json")
    group.add_argument("--stages", type=int, nargs="+", help="zero stages to try")
    return parser


def test_a_new_subcommand_gets_its_own_form(tmp_path, monkeypatch):
    parser = _parser_with_a_planner()
    assert [f.command for f in forms(parser)][-1] == "sketch"
    sketch = forms(parser)[-1]
    fields = {f.name: f for g in sketch.groups for f in g.fields}
    assert fields["config"].kind == "file" and "PATH" in FILE_METAVARS
    assert fields["gpus"].kind == "positional" and fields["stages"].many
    monkeypatch.chdir(tmp_path)
    argv = to_argv("sketch", [("config", '{"hidden_size": 8}'), ("stages", "1 3"), ("gpus", "8")],
                   parser)
    # no --json: this one has none (the calculator passes it only where there is one)
    assert argv == ["sketch", "--config", "config.json", "--stages", "1", "3", "8"]
    assert (tmp_path / "config.json").read_text() == '{"hidden_size": 8}'


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
    more = ext.calculator_html(["estimate --params 7e9"], _parser_with_a_planner())
    assert more.count('role="tab"') == len(forms()) + 1 and 'id="tm-calc-panel-sketch"' in more
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
    assert out["html"].startswith('<pre class="tm-calc-text"') and text.splitlines()[0] in out["html"]


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
    assert f"{first[10]} s a step" in out["summary"] and f"MFU {first[11]}" in out["summary"]
    bad = json.loads(calculate("estimate", json.dumps([("model", "llama-3-8b"), ("dp", "0")])))
    assert bad["status"] == 2 and bad["summary"] == ""
