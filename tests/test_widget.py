"""trainmath.cli.widget and the {calculator-widget} directive, without a browser.

The browser suite (tests/browser/test_widget.py) checks the small calculators in Chromium; these
check the pieces: each preset's example parses and fits its fields, the result is the
command's and the calculator page's (the same JSON, the same chart), the distributed preset is
the site's running example, errors name their field, and the markup works without JavaScript
(the chart of the example, a sentence, a link carrying the inputs).
"""

import importlib.util
import json
from pathlib import Path

import pytest

from trainmath.cli.calculator import calculate as calculator_calculate
from trainmath.cli.widget import (PRESETS, calculate, calculator_fragment, preset,
                                  running_example_argv, split_values)
from trainmath.report.page import peak_bar
from trainmath.report.running_example import example_estimate

ROOT = Path(__file__).resolve().parents[1]


def _all(p):
    shown, fixed = split_values(p, p.example)
    return shown + fixed


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_gives_the_calculators_result(name):
    values = _all(PRESETS[name])
    out = json.loads(calculate(name, json.dumps(values)))
    page = json.loads(calculator_calculate("estimate", json.dumps(values)))
    assert out["status"] == page["status"] == 0, out["stderr"]
    assert out["stdout"] == page["stdout"]  # the same command, the same JSON
    assert out["summary"] == page["summary"]
    assert out["chart"] in page["html"]  # the calculator page's own bar
    assert out["command_line"] + " --json" == page["command_line"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_shows_its_fields_and_keeps_the_rest(name):
    p = PRESETS[name]
    shown, fixed = split_values(p, p.example)
    assert [k for k, _ in shown] == list(p.fields)
    assert all(v for _, v in shown), "the example fills every field shown"
    assert not {k for k, _ in fixed} & set(p.fields)


def test_the_distributed_preset_is_the_running_example():
    p = preset("distributed")
    assert p.example == running_example_argv()
    out = json.loads(calculate("distributed", json.dumps(_all(p))))
    assert out["chart"] == peak_bar(example_estimate())
    assert json.loads(out["stdout"])["peak"]["bytes"] == example_estimate().peak.peak.total.n


def test_bad_input_names_its_field():
    out = json.loads(calculate("zero", json.dumps([("model", "llama-3-8b"), ("dp", "0")])))
    assert out["status"] == 2 and out["field"] == "dp" and out["chart"] == ""
    assert out["stderr"].startswith("trainmath: error: argument --dp")
    with pytest.raises(ValueError, match="unknown calculator preset 'fsdp'; accepted: memory"):
        preset("fsdp")


def test_the_link_carries_every_input():
    assert calculator_fragment([("model", "llama-3-8b"), ("recipe", ""), ("seq-len", "8192")]) \
        == "cmd=estimate&model=llama-3-8b&seq-len=8192"


def _extension():
    spec = importlib.util.spec_from_file_location(
        "trainmath_calculator", ROOT / "docs" / "_ext" / "trainmath_calculator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_markup_works_without_javascript(monkeypatch):
    pytest.importorskip("sphinx")
    ext = _extension()
    monkeypatch.setattr(ext, "runtime_bytes", lambda: 13_500_000)
    markup = ext.widget_html("zero", None, "tm-w-1", "", "calculator.html")
    values = _all(preset("zero"))
    out = json.loads(calculate("zero", json.dumps(values)))
    assert out["chart"] in markup and out["summary"] in markup  # drawn at build time
    assert '<fieldset class="tm-w-fieldset" disabled>' in markup  # until the script runs
    assert "needs JavaScript" in markup
    assert f'href="calculator.html#{out["link"].replace("&", "&amp;")}"' in markup
    assert '<option value="3" selected>' in markup and 'id="tm-w-1-dp"' in markup
    assert 'data-pyodide="_static/pyodide/"' in markup and "13.5 MB" in markup
    nested = ext.widget_html("memory", ["--model", "mistral-7b"], "tm-w-2", "../",
                             "../calculator.html")
    assert 'data-wheel="../_static/calculator/' in nested and 'value="mistral-7b" selected' in nested
    with pytest.raises(ValueError, match="--dp"):
        ext.widget_html("zero", ["--model", "llama-3-8b", "--dp", "0"], "tm-w-3", "", "c.html")
    with pytest.raises(ValueError, match="unknown calculator preset"):
        ext.widget_html("nope", None, "tm-w-4", "", "c.html")
