"""The pages' small calculators: a few fields of ``trainmath estimate`` and a chart of its result.

A topic page shows, beside its lesson, a form of the fields its idea turns on (a preset of
:data:`PRESETS`: the memory page the model, recipe and sequence length; the ZeRO page the model,
data-parallel size and ZeRO stage; the distributed page the model, the layout and the GPU) and a
stacked bar of what is alive at the step's peak on the fullest GPU, by kind
(:func:`trainmath.report.page.peak_bar`, the calculator page's chart). It is the calculator
page's command run the same way (:func:`trainmath.cli.calculator.to_argv` and
:func:`trainmath.cli.command.execute`: the same library, in the same Pyodide runtime in the
browser), so the chart, the calculator and the terminal cannot disagree; a link opens the
calculator with the same inputs (:func:`calculator_fragment`). The arguments a preset holds but
does not show (the GPU on the memory page, the sequence length on the ZeRO page) stay fixed and
appear in the "same as" command line.

The distributed page's preset is the site's running example
(:mod:`trainmath.report.running_example`: Llama-3-70B on 512 H100s), as command-line arguments
(:func:`running_example_argv`).

>>> p = preset("zero")
>>> p.fields
('model', 'dp', 'zero')
>>> shown, fixed = split_values(p, p.example)
>>> shown
[('model', 'llama-3-8b'), ('dp', '8'), ('zero', '3')]
>>> fixed
[('seq-len', '4096'), ('gpu', 'h100-sxm')]
>>> out = json.loads(calculate("zero", json.dumps(shown + fixed)))
>>> out["status"], out["summary"]
(0, 'Peak of a step: 43.94 GB per device (backward); fits')
>>> out["link"]
'cmd=estimate&model=llama-3-8b&dp=8&zero=3&seq-len=4096&gpu=h100-sxm'
>>> json.loads(calculate("zero", json.dumps([("model", "llama-3-8b"), ("dp", "0")])))["field"]
'dp'
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from urllib.parse import urlencode

from ..report import running_example as example
from ..report.page import peak_bar, summarize_estimate
from .calculator import PROG, _form, field_of, form_values, to_argv
from .command import execute
from .flags import UsageError

#: The subcommand every small calculator runs.
COMMAND = "estimate"


@dataclass(frozen=True)
class Preset:
    """One page's small calculator: its ``name`` (the directive's argument), its ``title`` (the
    form's legend), the estimate form's ``fields`` it shows, in order, and its ``example``
    command line (the initial values; the arguments of fields it does not show stay fixed)."""

    name: str
    title: str
    fields: tuple[str, ...]
    example: tuple[str, ...]


def running_example_argv() -> tuple[str, ...]:
    """The site's running example (:mod:`trainmath.report.running_example`) as the arguments of
    ``trainmath estimate``.

    >>> " ".join(running_example_argv())
    '--model llama-3-70b --seq-len 8192 --dp 16 --tp 8 --pp 4 --interleave 5 --sequence-parallel --global-batch 1024 --zero 1 --gpu h100-sxm --gpus-per-node 8'
    """
    layout = example.LAYOUT
    argv = ["--model", example.MODEL, "--seq-len", str(example.SEQ_LEN),
            "--dp", str(layout["dp"]), "--tp", str(layout["tp"]), "--pp", str(layout["pp"]),
            "--interleave", str(layout["v"])]
    if layout["sequence_parallel"]:
        argv.append("--sequence-parallel")
    argv += ["--global-batch", str(example.GLOBAL_BATCH), "--zero", str(example.ZERO_STAGE),
             "--gpu", example.GPU, "--gpus-per-node", str(example.GPUS_PER_NODE)]
    return tuple(argv)


#: The presets, by name: the memory, ZeRO and distributed pages' fields.
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("memory", "Memory per GPU: the model, the recipe, the sequence length",
           ("model", "recipe", "seq-len"),
           ("--model", "llama-3-8b", "--recipe", "bf16-mixed", "--seq-len", "8192",
            "--gpu", "h100-sxm")),
    Preset("zero", "Sharding the states: the model, data-parallel size, ZeRO stage",
           ("model", "dp", "zero"),
           ("--model", "llama-3-8b", "--dp", "8", "--zero", "3", "--seq-len", "4096",
            "--gpu", "h100-sxm")),
    Preset("distributed", "A layout: the model, data, tensor and pipeline sizes, the GPU",
           ("model", "dp", "tp", "pp", "gpu"), running_example_argv()),
)}


def preset(name: str) -> Preset:
    """The preset called ``name``; a clear error naming the accepted ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown calculator preset {name!r}; accepted: "
                         + ", ".join(PRESETS)) from None


def split_values(p: Preset, argv: tuple[str, ...] | list[str]) -> tuple[list[tuple[str, str]],
                                                                        list[tuple[str, str]]]:
    """The form values (name, text) of a command line of ``trainmath estimate``, checked by its
    parser: those of the preset's fields, in the preset's order (empty for a field the command
    line leaves out), and the rest, in the command line's order, which stay fixed. A command
    line the parser refuses raises ValueError with its message."""
    try:
        _, values = form_values([COMMAND, *argv])
    except UsageError as exc:
        raise ValueError(f"{PROG} {COMMAND}: {exc}") from None
    given = dict(values)
    shown = [(name, given.get(name, "")) for name in p.fields]
    fixed = [(k, v) for k, v in values if k not in p.fields]
    return shown, fixed


def calculator_fragment(values: list[tuple[str, str]]) -> str:
    """The calculator page's address fragment (after ``#``) for these form values: the page
    reads it and shows the same result (docs/_static/calculator.js)."""
    return urlencode([("cmd", COMMAND), *[(k, v) for k, v in values if v.strip()]])


def calculate(name: str, values_json: str) -> str:
    """What a small calculator calls on every change: its preset's ``name`` and every value (a
    JSON list of [name, text] pairs: the shown fields and the fixed ones) in, a JSON object out:
    ``status``, ``stdout`` and ``stderr`` (the command's), ``command_line``, ``field`` (the
    field an error is about, or null), ``summary`` (the peak and whether it fits), ``chart``
    (:func:`trainmath.report.page.peak_bar`, or "") and ``link`` (:func:`calculator_fragment`)."""
    preset(name)
    form = _form(COMMAND)
    values = [(str(k), str(v)) for k, v in json.loads(values_json)]
    given = [k for k, v in values if v.strip()]
    link = calculator_fragment(values)
    try:
        argv = to_argv(COMMAND, values)
    except ValueError as exc:  # a value the form itself cannot pass on
        message = f"{PROG}: error: {exc}\n"
        return json.dumps({"status": 2, "stdout": "", "stderr": message, "command_line": None,
                           "field": field_of(message, form), "summary": "", "chart": "",
                           "link": link})
    outcome = execute(argv)
    summary = chart = ""
    field = None
    if outcome.status == 0:
        summary, chart = summarize_estimate(outcome.result), peak_bar(outcome.result)
    else:
        field = field_of(outcome.stderr, form, outcome.problems, given)
    return json.dumps({"status": outcome.status, "stdout": outcome.stdout,
                       "stderr": outcome.stderr,
                       "command_line": shlex.join([PROG, *argv[:-1]]), "field": field,
                       "summary": summary, "chart": chart, "link": link})
