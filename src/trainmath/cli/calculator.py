"""The calculator page's Python side: the command's own flags as a form, and its output as HTML.

The site's calculator runs this module in the reader's browser (Pyodide), so that the page
computes nothing itself: the form is made from the command's argument parser
(:func:`forms`, at docs build time), the form's values become the command's arguments
(:func:`to_argv`), the command runs exactly as at a terminal with ``--json``
(:func:`run_command`: :func:`trainmath.cli.command.main`, its stdout, stderr and exit status), and its
result is drawn as HTML (:func:`~trainmath.report.page.render_estimate`: the per-device table in GB and GiB, the
step's peak, whether it fits, a stacked bar of what is alive at the peak, and the arithmetic
of every figure from :func:`trainmath.report.terms.explain`). Bad input gives the command's own
message, and :func:`field_of` names the field it is about.

Every subcommand of the parser gets a form (a tab of the page): one whose output this module
does not draw shows the command's JSON as it is.

>>> [f.name for f in forms()[0].groups[0].fields][:3]
['model', 'config', 'params']
>>> to_argv("estimate", [("model", "llama-3-8b"), ("dp", "8"), ("sequence-parallel", "on")])
['estimate', '--model', 'llama-3-8b', '--dp', '8', '--sequence-parallel', '--json']
>>> out = run_command(["estimate", "--dp", "0", "--params", "7e9", "--json"])
>>> out.status, out.stderr
(2, "trainmath: error: argument --dp: '0' is not a positive whole number\\n")
>>> field_of(out.stderr, forms()[0])
'dp'
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Callable, Sequence

from .command import PROG, build_parser, main
from ..report.page import _e, render_estimate, summarize_estimate, summarize_plan


#: Option metavars whose value is a file: the form has a text area, whose text is written to a
#: file of that name (in the working directory) and the name passed to the command.
FILE_METAVARS = ("PATH", "FILE")
#: Actions the form leaves out: help, and --json, which the calculator always passes.
_SKIP = ("help", "json")


@dataclass(frozen=True)
class Field:
    """One option of a subcommand, as the form shows it.

    ``name`` is its first long option without the dashes (the form field's name and the key in
    the page's URL); ``kind`` is "choice" (a select of ``choices``), "switch" (``--x`` or
    ``--no-x``), "flag" (a checkbox), "file" (a text area), "text", or "positional".
    ``default`` is the command's default as text ("" when it has none).
    """

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    default: str
    choices: tuple[str, ...] = ()
    metavar: str = ""
    many: bool = False

    @property
    def flag(self) -> str:
        """The option as the command line writes it, ``--seq-len`` (a positional: its name)."""
        return self.flags[0] if self.flags else self.name


@dataclass(frozen=True)
class Group:
    """An argument group of the parser: its title and fields."""

    title: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Form:
    """One subcommand: its name, help, and argument groups."""

    command: str
    help: str
    groups: tuple[Group, ...]
    #: whether the subcommand has ``--json`` (the calculator then always passes it)
    json: bool = True

    def field(self, name: str) -> Field:
        """The field called ``name`` (its long option without dashes)."""
        for g in self.groups:
            for f in g.fields:
                if f.name == name:
                    return f
        raise ValueError(f"unknown field {name!r} of {self.command!r}; accepted: "
                         + ", ".join(f.name for g in self.groups for f in g.fields))


def _field(action: argparse.Action) -> Field | None:
    if action.dest in _SKIP or action.help == argparse.SUPPRESS:
        return None
    longs = [o for o in action.option_strings if o.startswith("--")]
    name = longs[0][2:] if longs else action.dest
    help_text = action.help or ""
    default = action.default
    default = "" if default in (None, False, argparse.SUPPRESS) else str(default)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    many = action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction)
    choices = action.choices or getattr(action.type, "accepted", None)
    if not action.option_strings:
        kind = "positional"
    elif isinstance(action, argparse.BooleanOptionalAction):
        kind = "switch"
    elif action.nargs == 0:
        kind = "flag"
    elif choices and not many:
        kind = "choice"
    elif metavar in FILE_METAVARS or isinstance(action.type, argparse.FileType):
        kind = "file"
    else:
        kind = "text"
    return Field(name, tuple(longs or action.option_strings), kind, help_text, default,
                 tuple(str(c) for c in choices or ()), metavar, many)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def forms(parser: argparse.ArgumentParser | None = None) -> tuple[Form, ...]:
    """A :class:`Form` for every subcommand of ``parser`` (default: the ``trainmath`` command's,
    :func:`trainmath.cli.command.build_parser`), its groups and fields in the parser's order."""
    parser = parser or build_parser()
    out = []
    for name, help_text, sub in _subcommands(parser):
        groups = []
        for g in sub._action_groups:
            fields = tuple(f for f in map(_field, g._group_actions) if f is not None)
            if fields:
                title = g.title if g.title not in ("options", "optional arguments",
                                                   "positional arguments") else "options"
                groups.append(Group(title, fields))
        has_json = any("--json" in a.option_strings for a in sub._actions)
        out.append(Form(name, help_text or sub.description or "", tuple(groups), has_json))
    return tuple(out)


def _form(command: str, parser: argparse.ArgumentParser | None = None) -> Form:
    for f in forms(parser):
        if f.command == command:
            return f
    raise ValueError(f"unknown command {command!r}; accepted: "
                     + ", ".join(f.command for f in forms(parser)))


def file_name(field: Field) -> str:
    """The file a text area's content is written to (in the working directory): ``config.json``
    for ``--config``."""
    return f"{field.name}.json"


def to_argv(command: str, values: Sequence[tuple[str, str]],
            parser: argparse.ArgumentParser | None = None,
            write: Callable[[str, str], None] | None = None) -> list[str]:
    """The command line the form's ``values`` (name, text) give, with ``--json`` where the
    subcommand has it; an empty
    value is left out (the command's default). A "file" field's text goes to ``write(name,
    text)`` (default: a file in the working directory, :func:`file_name`) and the option gets
    the file's name."""
    form = _form(command, parser)
    argv, positional = [command], []
    for name, text in values:
        f = form.field(name)
        if f.kind not in ("file",):
            text = text.strip()
        if not text.strip():
            continue
        if f.kind == "flag":
            argv.append(f.flag)
        elif f.kind == "switch":
            if text not in ("yes", "no"):
                raise ValueError(f"{f.flag}: {text!r}; accepted: yes, no")
            argv.append(f.flag if text == "yes" else "--no-" + f.flag[2:])
        elif f.kind == "file":
            path = file_name(f)
            (write or _write)(path, text)
            argv += [f.flag, path]
        elif f.kind == "positional":
            positional += text.split() if f.many else [text]
        elif f.many:
            argv += [f.flag, *text.split()]
        else:
            argv += [f.flag, text]
    return argv + positional + (["--json"] if form.json else [])


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


@dataclass(frozen=True)
class Outcome:
    """What the command did: its exit status and everything it printed."""

    argv: tuple[str, ...]
    status: int
    stdout: str
    stderr: str


def run_command(argv: Sequence[str]) -> Outcome:
    """Run ``trainmath`` (:func:`trainmath.cli.command.main`) with ``argv``, as at a terminal: its
    stdout and stderr captured, its exit status returned."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exc:  # argparse's own exits (--help, a usage error)
            status = exc.code if isinstance(exc.code, int) else 2
    return Outcome(tuple(argv), status or 0, out.getvalue(), err.getvalue())


def field_of(message: str, form: Form) -> str | None:
    """The field an error message is about: the first option it names (``--seq-len``), else
    the field whose name it mentions first, as a word (``seq_len``); None when neither."""
    flags = {}
    for g in form.groups:
        for f in g.fields:
            for flag in f.flags:
                flags[flag] = f.name
                if f.kind == "switch":
                    flags["--no-" + flag[2:]] = f.name
    for token in re.findall(r"--[a-z][a-z0-9-]*", message):
        if token in flags:
            return flags[token]
    found = []
    for g in form.groups:
        for f in g.fields:
            m = re.search(rf"(?<![\w-]){re.escape(f.name.replace('-', '_'))}(?![\w-])", message)
            if m:
                found.append((m.start(), f.name))
    return min(found)[1] if found else None


def render_text(argv: Sequence[str], stdout: str) -> str:
    """The command's own table for ``argv``: the same command run again without ``--json``
    (for a subcommand, such as ``plan``, whose JSON is for scripts rather than for reading)."""
    text = run_command([a for a in argv if a != "--json"]).stdout
    return f'<pre class="tm-calc-text" tabindex="0">{_e(text)}</pre>'


#: a one-line summary of each subcommand's JSON (a subcommand without one shows none)
SUMMARIES: dict[str, Callable[[str], str]] = {"estimate": summarize_estimate,
                                              "plan": summarize_plan}

#: How the calculator draws each subcommand's output; others show their JSON as it is.
RENDERERS: dict[str, Callable[[Sequence[str], str], str]] = {"estimate": render_estimate,
                                                            "plan": render_text}


def calculate(command: str, values_json: str, parser: argparse.ArgumentParser | None = None
              ) -> str:
    """What the page calls on every change: the form's values (a JSON list of [name, text]
    pairs) in, a JSON object out: ``argv`` and ``command_line`` (as a terminal would run it),
    ``status``, ``stdout`` and ``stderr`` (the command's, unchanged), ``field`` (the field an
    error is about, or null), ``html`` (the result drawn, or "") and ``summary`` (one line of
    it, :data:`SUMMARIES`, or "")."""
    form = _form(command, parser)
    values = [(str(k), str(v)) for k, v in json.loads(values_json)]
    try:
        argv = to_argv(command, values, parser)
    except ValueError as exc:  # a value the form itself cannot pass on
        message = f"{PROG}: error: {exc}\n"
        return json.dumps({"argv": None, "command_line": None, "status": 2, "stdout": "",
                           "stderr": message, "field": field_of(message, form), "html": "",
                           "summary": ""})
    outcome = run_command(argv)
    page = summary = ""
    if outcome.status == 0:
        render = RENDERERS.get(command)
        page = (render(argv, outcome.stdout) if render else
                f'<pre class="tm-calc-raw">{_e(outcome.stdout)}</pre>')
        summarize = SUMMARIES.get(command)
        summary = summarize(outcome.stdout) if summarize and "--json" in argv else ""
    return json.dumps({
        "argv": argv, "command_line": shlex.join([PROG, *argv]),
        "status": outcome.status, "stdout": outcome.stdout, "stderr": outcome.stderr,
        "field": field_of(outcome.stderr, form) if outcome.status else None, "html": page,
        "summary": summary})


def form_values(argv: Sequence[str], parser: argparse.ArgumentParser | None = None,
                check: bool = True) -> tuple[str, list[tuple[str, str]]]:
    """The subcommand and form values (name, text) of a command line such as
    ``["estimate", "--model", "llama-3-8b", "--dp", "8"]``: the inverse of :func:`to_argv`,
    for the page's example inputs. With ``check`` the command line must parse."""
    argv = [a for a in argv if a != "--json"]
    if check:
        (parser or build_parser()).parse_args([*argv])
    form = _form(argv[0], parser)
    by_flag = {}
    for g in form.groups:
        for f in g.fields:
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
