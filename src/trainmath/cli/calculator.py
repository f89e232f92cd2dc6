"""The calculator page's Python side: the command's flags as a form, and its result as HTML.

The site's calculator runs this module in the reader's browser (Pyodide), so that the page
computes nothing itself. The form is made from the command's flag table
(:data:`trainmath.cli.flags.FLAGS`, by :func:`forms`, at docs build time); the form's values
become the command's arguments (:func:`to_argv`); :func:`calculate` runs the command line once
(:func:`trainmath.cli.command.execute`: one estimate or one plan per change of the form) and
draws that same result as HTML (:data:`RENDERERS`), beside the JSON the command prints and a
one-line summary. Bad input gives the command's own message, and :func:`field_of` names the
field it is about: the first field the library's problems name that the reader filled in.

Every subcommand gets a form (a tab of the page).

>>> [f.name for f in forms()[0].groups[0].fields][:3]
['model', 'params', 'setup']
>>> to_argv("estimate", [("model", "llama-3-8b"), ("dp", "8"), ("sequence-parallel", "on")])
['estimate', '--model', 'llama-3-8b', '--dp', '8', '--sequence-parallel', '--json']
>>> out = run_command(["estimate", "--dp", "0", "--params", "7e9", "--json"])
>>> out.status, out.stderr
(2, "trainmath: error: argument --dp: '0' is not a positive whole number\\n")
>>> field_of(out.stderr, forms()[0])
'dp'
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Callable, Sequence

from ..planner.candidates import Plan
from ..report.post_training import render_post_training_page, summarize_post_training
from ..runs.post_training import PostTrainingEstimate
from ..problems import Problem
from ..report.page import (render_check_page, render_estimate, render_plan_page, summarize_check,
                           summarize_estimate, summarize_plan)
from .command import Outcome, execute
from ..units import unknown
from .flags import COMMANDS, GROUPS, PROG, Flag, build_parser, flags_of

#: Option metavars whose value is a file: the form has a text area, whose text is written to a
#: file of that name (in the working directory) and the name passed to the command.
FILE_METAVARS = ("PATH", "FILE")
#: Flags the form leaves out: --json, which the calculator always passes.
_SKIP = ("--json",)
#: The library's names for a problem's fields where the form's differ (``zero_stage`` is
#: ``--zero``, ``v`` is ``--interleave``); every other name is the flag's, with dashes.
_FIELD_NAMES = {"zero_stage": "zero", "v": "interleave"}


@dataclass(frozen=True)
class Field:
    """One option of a subcommand, as the form shows it.

    ``name`` is its first long option without the dashes (the form field's name and the key in
    the page's URL); ``kind`` is "choice" (a select of ``choices``), "switch" (``--x`` or
    ``--no-x``), "flag" (a checkbox), "file" (a text area) or "text". ``default`` is the
    command's default as text ("" when it has none).
    """

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    default: str
    choices: tuple[str, ...] = ()
    metavar: str = ""

    @property
    def flag(self) -> str:
        """The option as the command line writes it, ``--seq-len`` ("" for the form's own
        :data:`SETUP` field, which stands for several)."""
        return self.flags[0] if self.flags else ""

    @property
    def label(self) -> str:
        """The field's name in plain words (:data:`LABELS`), or "" where the flag is its name."""
        return LABELS.get(self.name, "")

    @property
    def placeholder(self) -> str:
        """What an empty field means, as a value: the command's default (``1``, ``adamw``) or
        what it does without one (:data:`EMPTY_MEANS`); "" when the flag is simply left out."""
        return EMPTY_MEANS.get(self.name, self.default)


@dataclass(frozen=True)
class Group:
    """A group of the subcommand's flags: its title and fields. ``key`` names it in the page's
    link (which groups are open); ``quick`` marks the first form, always shown."""

    title: str
    fields: tuple[Field, ...]
    key: str = ""
    quick: bool = False


#: How people name the way they train, each as the flags of the command it stands for: the
#: form's first field, so that "FSDP" is a choice and not ``--recipe fsdp2``. The recipes are
#: :data:`trainmath.memory.recipes.RECIPES` (fsdp2 shards at ZeRO-3, as FSDP2 does; deepspeed
#: at the stage given; megatron keeps fp32 gradients, its distributed optimizer ZeRO-1) and the
#: adapters :data:`trainmath.memory.finetune.METHODS`. A flag typed below overrides its part.
SETUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ddp": ("plain DDP (every GPU a full copy)", ("--zero", "0")),
    "fsdp": ("PyTorch FSDP (fully sharded)", ("--recipe", "fsdp2")),
    "zero1": ("DeepSpeed ZeRO-1", ("--recipe", "deepspeed", "--zero", "1")),
    "zero2": ("DeepSpeed ZeRO-2", ("--recipe", "deepspeed", "--zero", "2")),
    "zero3": ("DeepSpeed ZeRO-3", ("--recipe", "deepspeed", "--zero", "3")),
    "megatron": ("Megatron-LM (distributed optimizer)", ("--recipe", "megatron", "--zero", "1")),
    "lora": ("LoRA (a 16-bit frozen model)", ("--finetune", "lora")),
    "qlora": ("QLoRA (a 4-bit frozen model)", ("--finetune", "qlora")),
}
#: The form's field for :data:`SETUPS` (it has no flag of its own).
SETUP = "setup"
#: The fields of each subcommand's first form, in order: what people know about their run.
#: The rest of the flags are in groups that open on demand.
QUICK: dict[str, tuple[str, ...]] = {
    "estimate": ("model", "params", SETUP, "gpu", "dp", "seq-len", "micro-batch"),
    "plan": ("model", "gpu", "gpus", "seq-len", "global-batch"),
    "check": ("model", SETUP, "gpu", "dp", "seq-len", "micro-batch"),
}
#: Groups shown open when the page loads (the reader's opening and closing then goes in the
#: link): the check tab's "what the run showed", its reason to be.
OPEN: dict[str, tuple[str, ...]] = {"check": ("measured",)}
#: Plain names of the first forms' fields (the flag stands beside them).
LABELS = {"model": "Model", "params": "or its size", SETUP: "How you train", "gpu": "GPU",
          "dp": "GPUs", "seq-len": "Sequence (tokens)", "micro-batch": "Micro-batch",
          "gpus": "GPUs in all", "global-batch": "Batch (sequences)"}
#: What an empty field means where the flag has no default value to show.
EMPTY_MEANS = {"model": "choose a model", SETUP: "as set below",
               "recipe": "the model's own", "zero": "the recipe's", "gpu": "none: no fit check",
               "seq-len": "none: no activations", "implementation": "the model's own",
               "optimizer-impl": "the recipe's", "attention": "the kernels'",
               "kv-heads": "= heads", "etp": "= tp", "expert-ffn": "= ffn",
               "gpus-per-node": "8", "lora-rank": "16", "lora-targets": "q,v",
               "lora-dropout": "0", "global-batch": "one micro-batch per GPU",
               "stage-layers": "even"}


#: The calculator's tab for each subcommand: what a reader comes to it for.
TAB_TITLES = {"estimate": "Will it fit?", "plan": "Which layout?", "check": "Check my run"}


@dataclass(frozen=True)
class Form:
    """One subcommand: its name, help, and groups of fields."""

    command: str
    help: str
    groups: tuple[Group, ...]

    @property
    def title(self) -> str:
        """The tab's title (:data:`TAB_TITLES`; the subcommand's name when it has none)."""
        return TAB_TITLES.get(self.command, f"trainmath {self.command}")

    def field(self, name: str) -> Field:
        """The field called ``name`` (its long option without dashes)."""
        for g in self.groups:
            for f in g.fields:
                if f.name == name:
                    return f
        raise ValueError(f"unknown field {name!r} of {self.command!r}; accepted: "
                         + ", ".join(f.name for g in self.groups for f in g.fields))

    @property
    def fields(self) -> tuple[Field, ...]:
        """Every field, group by group."""
        return tuple(f for g in self.groups for f in g.fields)


def _field(f: Flag) -> Field:
    if f.kind == "both":
        kind = "switch"
    elif f.kind in ("on", "off"):
        kind = "flag"
    elif f.choices:
        kind = "choice"
    elif f.metavar in FILE_METAVARS:
        kind = "file"
    else:
        kind = "text"
    default = "" if f.default in (None, False) else str(f.default)
    return Field(f.name, f.names, kind, f.help, default, tuple(str(c) for c in f.choices),
                 f.metavar or "")


def _setup_field() -> Field:
    return Field(SETUP, (), "choice", "how the run keeps and shards its states, by the name "
                 "people use; the \"Same as\" line shows the flags it stands for",
                 "", tuple(SETUPS))


def forms() -> tuple[Form, ...]:
    """A :class:`Form` for every subcommand of :data:`trainmath.cli.flags.COMMANDS`: its first
    form (:data:`QUICK`), then its groups and fields in the order of the flag table."""
    out = []
    for command, (help_text, _) in COMMANDS.items():
        flags = [f for f in flags_of(command) if f.names[0] not in _SKIP]
        quick = QUICK.get(command, ())
        by_name = {f.name: _field(f) for f in flags}
        by_name[SETUP] = _setup_field()
        first = tuple(by_name[n] for n in quick if n in by_name)
        groups = [Group(title, tuple(_field(f) for f in flags if f.group == key
                                     and f.name not in quick), key)
                  for key, title in GROUPS[command]]
        own = tuple(_field(f) for f in flags if not f.group and f.name not in quick)
        if own:
            groups.insert(0, Group("options", own, "options"))
        if first:
            groups.insert(0, Group("your run", first, "first", quick=True))
        out.append(Form(command, help_text, tuple(g for g in groups if g.fields)))
    return tuple(out)


def _form(command: str) -> Form:
    for f in forms():
        if f.command == command:
            return f
    raise ValueError(f"unknown command {command!r}; accepted: " + ", ".join(COMMANDS))


def file_name(field: Field) -> str:
    """The file a text area's content is written to (in the working directory): ``config.json``
    for ``--config``."""
    return f"{field.name}.json"


def to_argv(command: str, values: Sequence[tuple[str, str]],
            write: Callable[[str, str], None] | None = None) -> list[str]:
    """The command line the form's ``values`` (name, text) give, with ``--json``; an empty
    value is left out (the command's default). A "file" field's text goes to ``write(name,
    text)`` (default: a file in the working directory, :func:`file_name`) and the option gets
    the file's name."""
    form = _form(command)
    argv = [command]
    for name, text in values:
        f = form.field(name)
        if f.kind != "file":
            text = text.strip()
        if not text.strip():
            continue
        if f.name == SETUP:
            if text not in SETUPS:
                raise ValueError(unknown("setup (how you train)", text, SETUPS))
            argv += SETUPS[text][1]
        elif f.kind == "flag":
            argv.append(f.flag)
        elif f.kind == "switch":
            if text not in ("yes", "no"):
                raise ValueError(f"{f.flag}: {text!r}; accepted: yes, no")
            argv.append(f.flag if text == "yes" else "--no-" + f.flag[2:])
        elif f.kind == "file":
            path = file_name(f)
            (write or _write)(path, text)
            argv += [f.flag, path]
        else:
            argv += [f.flag, text]
    return argv + ["--json"]


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def run_command(argv: Sequence[str]) -> Outcome:
    """Run ``trainmath`` with ``argv`` as at a terminal (:func:`trainmath.cli.command.execute`):
    its exit status, what it printed, and what it computed."""
    return execute(argv)


def field_of(message: str, form: Form, problems: Sequence[Problem] = (),
             given: Sequence[str] = ()) -> str | None:
    """The field an error is about. With the library's ``problems``: the first field they name
    that the reader filled in (``given``), else the first they name that the form has. Else,
    from the message: the first option it names (``--seq-len``), then the field whose name it
    mentions first, as a word (``seq_len``); None when neither."""
    names = {f.name for f in form.fields}
    named = [_FIELD_NAMES.get(k, k.replace("_", "-")) for p in problems for k in p.fields]
    named = [n for n in named if n in names]
    for n in named:
        if n in given:
            return n
    if named:
        return named[0]
    flags = {}
    for f in form.fields:
        for flag in f.flags:
            flags[flag] = f.name
            if f.kind == "switch":
                flags["--no-" + flag[2:]] = f.name
    for token in re.findall(r"--[a-z][a-z0-9-]*", message):
        if token in flags:
            return flags[token]
    found = []
    for f in form.fields:
        m = re.search(rf"(?<![\w-]){re.escape(f.name.replace('-', '_'))}(?![\w-])", message)
        if m:
            found.append((m.start(), f.name))
    return min(found)[1] if found else None


def _suggestions(e, outcome: Outcome):
    """What the page shows under an estimate judged against a GPU: the command's own
    ``--suggest`` answer, which the page asks for even unticked, so a run that does not fit
    always says what to change and one that fits its room (the JSON and the command line stay
    the command's as given)."""
    if outcome.suggestions is not None or e.fits is None:
        return outcome.suggestions
    from ..planner.suggest import suggest
    return suggest(e.run)


def _plan_page(p: Plan, outcome: Outcome) -> str:
    return render_plan_page(p, outcome.args.top, outcome.args.explain)


def _estimate_page(e, outcome: Outcome) -> str:
    """An estimate, or a post-training estimate (``--post-training``), drawn."""
    if isinstance(e, PostTrainingEstimate):
        return render_post_training_page(e)
    return render_estimate(e, _suggestions(e, outcome))


def _estimate_summary(e) -> str:
    """One line of an estimate, or of a post-training estimate."""
    if isinstance(e, PostTrainingEstimate):
        return summarize_post_training(e)
    return summarize_estimate(e)


#: How the calculator draws each subcommand's result (the Estimate, the post-training estimate or the Plan it computed).
RENDERERS: dict[str, Callable[[object, Outcome], str]] = {
    "estimate": _estimate_page,
    "plan": _plan_page,
    "check": lambda dg, outcome: render_check_page(dg),
}

#: A one-line summary of each subcommand's result, for the bar that stays in view.
SUMMARIES: dict[str, Callable[[object], str]] = {"estimate": _estimate_summary,
                                                 "plan": summarize_plan,
                                                 "check": summarize_check}


def calculate(command: str, values_json: str) -> str:
    """What the page calls on every change: the form's values (a JSON list of [name, text]
    pairs) in, a JSON object out: ``argv`` and ``command_line`` (as a terminal would run it),
    ``status``, ``stdout`` and ``stderr`` (the command's, unchanged), ``field`` (the field an
    error is about, or null), ``html`` (the result drawn, or "") and ``summary`` (one line of
    it, or ""). The command line is computed once: the JSON, the drawing and the summary are
    three renderings of the same result."""
    form = _form(command)
    values = [(str(k), str(v)) for k, v in json.loads(values_json)]
    given = [k for k, v in values if v.strip()]
    try:
        argv = to_argv(command, values)
    except ValueError as exc:  # a value the form itself cannot pass on
        message = f"{PROG}: error: {exc}\n"
        return json.dumps({"argv": None, "command_line": None, "status": 2, "stdout": "",
                           "stderr": message, "field": field_of(message, form), "html": "",
                           "summary": ""})
    outcome = execute(argv)
    page = summary = ""
    warnings: list[tuple[str | None, str]] = []
    if outcome.status == 0:
        page = RENDERERS[command](outcome.result, outcome)
        summary = SUMMARIES[command](outcome.result)
        warnings = [(field_of(p.message, form, [p], given), p.message)
                    for p in _warning_problems(outcome.result)]
    field = (field_of(outcome.stderr, form, outcome.problems, given) if outcome.status else None)
    return json.dumps({
        "argv": argv, "command_line": shlex.join([PROG, *argv]),
        "status": outcome.status, "stdout": outcome.stdout, "stderr": outcome.stderr,
        "field": field, "html": page, "summary": summary, "warnings": warnings})


def _warning_problems(result: object) -> list[Problem]:
    """The warnings of an estimate's run (each naming its fields), or a plan's (none named)."""
    run = getattr(result, "run", None) or getattr(getattr(result, "estimate", None), "run", None)
    if run is not None:
        return run.warning_problems()
    return [Problem((), w) for w in getattr(result, "warnings", ())]


#: A plan from a link on more GPUs than this asks before it runs: the planner tries every
#: split of the count, and at 10,000 GPUs it ran 20 s in the browser (issue 25).
CAUTION_GPUS = 4096


def caution(command: str, values_json: str) -> str:
    """Why a run a link asks for could take long, to ask the reader before it starts ("" when
    it is quick): a plan on more than :data:`CAUTION_GPUS` GPUs.

    >>> caution("plan", '[["gpus", "100000"]]')[:46]
    'This link asks the planner for 100,000 GPUs: i'
    >>> caution("plan", '[["gpus", "64"]]'), caution("estimate", '[["dp", "100000"]]')
    ('', '')
    """
    values = dict((str(k), str(v)) for k, v in json.loads(values_json))
    if command == "plan":
        try:
            gpus = int(values.get("gpus", "").strip())
        except ValueError:
            return ""
        if gpus > CAUTION_GPUS:
            return (f"This link asks the planner for {gpus:,} GPUs: it tries every split of "
                    f"them, which can take minutes (more than {CAUTION_GPUS:,} GPUs). Run it, "
                    "or change the count first.")
    return ""


def form_values(argv: Sequence[str], check: bool = True) -> tuple[str, list[tuple[str, str]]]:
    """The subcommand and form values (name, text) of a command line such as
    ``["estimate", "--model", "llama-3-8b", "--dp", "8"]``: the inverse of :func:`to_argv`,
    for the page's example inputs. With ``check`` the command line must parse."""
    argv = [a for a in argv if a != "--json"]
    if check:
        build_parser().parse_args([*argv])
    form = _form(argv[0])
    by_flag = {}
    for f in form.fields:
        for flag in f.flags:
            by_flag[flag] = (f, "on" if f.kind == "flag" else "yes")
        if f.kind == "switch":
            by_flag["--no-" + f.flags[0][2:]] = (f, "no")
    values, i = [], 1
    while i < len(argv):
        flag = argv[i]
        if flag not in by_flag:
            raise ValueError(f"{flag!r} is not an option of {form.command!r} the form shows")
        f, on = by_flag[flag]
        if f.kind in ("flag", "switch"):
            values.append((f.name, on))
            i += 1
        else:
            values.append((f.name, argv[i + 1]))
            i += 2
    return form.command, values


def working_directory(path: str) -> None:
    """Make ``path`` (created if missing) the directory pasted files are written to."""
    os.makedirs(path, exist_ok=True)
    os.chdir(path)

