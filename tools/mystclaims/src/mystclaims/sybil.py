"""sybil parsers: every page's code, claims, unchecked numbers and console examples as tests.

The usual ``conftest.py``::

    from mystclaims.sybil import collect

    pytest_collect_file = collect(pages=["docs/*.md"], guides=["README.md"])

Each claim is a test that runs after the code above it, in the page's namespace; each number
that is neither a claim nor marked ``{nonclaim}`...``` is a failing test (pages only, not
guides); each ``$ prog ...`` line of a ``console`` fence runs ``prog`` in-process (when
``commands`` names it) and compares what it prints with the lines under it.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from sybil import Region, Sybil
from sybil.parsers.rest import DocTestParser
from sybil.sybil import SybilCollection
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser

from .runner import Result, check_claim
from .scanner import Lint, Unchecked, scan

#: A command run in-process: argv (without the program name) -> exit status.
Command = Callable[[Sequence[str]], int]


def _relative(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


@lru_cache(maxsize=64)
def _scan(text: str, lint: Lint):
    return scan(text, lint=lint)


def _rules(names: Iterable[str], lint: Lint | None) -> Lint:
    lint = lint or Lint()
    return replace(lint, names=lint.names | frozenset(names))


def claim_parser(names: Iterable[str] = (), lint: Lint | None = None) -> Callable:
    """A parser with one region per claim: checked after the code above it."""
    rules = _rules(names, lint)

    def evaluate(example) -> str | None:
        result: Result = check_claim(example.parsed, example.namespace, {})
        return None if result.ok else result.message(_relative(example.path))

    def parse(document):
        for claim in _scan(document.text, rules).claims:
            yield Region(claim.start, claim.end, claim, evaluate)

    return parse


def lint_parser(names: Iterable[str] = (), lint: Lint | None = None) -> Callable:
    """A parser with one failing region per thing the lint reports (:class:`~mystclaims.scanner.Lint`):
    a number, in digits or in words, that is neither a claim nor a non-claim, and, when the
    rules ask, a citation year or a source link typed in prose."""
    rules = _rules(names, lint)

    def evaluate(example) -> str:
        number: Unchecked = example.parsed
        return number.message(_relative(example.path))

    def parse(document):
        for number in _scan(document.text, rules).unchecked:
            yield Region(number.start, number.end, number, evaluate)

    return parse


_CONSOLE = re.compile(r"^```console\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
_PROMPT = re.compile(r"^\$ (?P<cmd>(?:.*\\\n)*.*)\n(?P<out>(?:(?!\$ ).*\n)*)", re.MULTILINE)


def console_parser(commands: dict[str, Command]) -> Callable:
    """A parser for ``$ prog ...`` lines of console fences whose ``prog`` is in ``commands``.

    The command runs in-process; its stdout and stderr, with trailing spaces stripped, must
    equal the lines under the prompt. Output that starts with ``prog: error:`` expects exit
    status 2, anything else 0.
    """

    def evaluate(example) -> str | None:
        command, expected = example.parsed
        argv = shlex.split(command)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = commands[argv[0]](argv[1:])
        got = "\n".join(line.rstrip() for line in (out.getvalue() + err.getvalue()).splitlines())
        want = 2 if expected.startswith(f"{argv[0]}: error:") else 0
        if got == expected and status == want:
            return None
        return (f"{_relative(example.path)}:{example.line}: `$ {command}` exited {status} and "
                f"printed:\n{got}\n--- but the page shows (exit {want}):\n{expected}")

    def parse(document):
        for block in _CONSOLE.finditer(document.text):
            body, offset = block["body"], block.start("body")
            for m in _PROMPT.finditer(body):
                command = " ".join(part.rstrip("\\").strip() for part in m["cmd"].splitlines())
                if shlex.split(command)[:1] and shlex.split(command)[0] in commands:
                    expected = "\n".join(line.rstrip() for line in m["out"].rstrip("\n").splitlines())
                    yield Region(offset + m.start(), offset + m.end(), (command, expected), evaluate)

    return parse


def code_parsers() -> list:
    """sybil's MyST parsers for ``python`` fences and code cells, and ``ipython3`` cells."""
    return [PythonCodeBlockParser(), CodeBlockParser(language="ipython3", evaluator=PythonEvaluator())]


def close_figures(namespace: dict) -> None:
    """Free the matplotlib figures a page drew, once its examples are done."""
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def collect(pages: Sequence[str] = ("docs/*.md",), guides: Sequence[str] = (),
            names: Iterable[str] = (), commands: dict[str, Command] | None = None,
            excludes: Sequence[str] = ("docs/_build/*",), teardown=close_figures,
            docstrings: Sequence[str] = (), docstring_excludes: Sequence[str] = (),
            lint: Lint | None = None):
    """The ``pytest_collect_file`` hook for a site: pages are linted, guides are not.

    ``lint`` holds the site's lint rules (:class:`~mystclaims.scanner.Lint`: number words,
    whether citation years and source links may be typed in prose); ``names`` add to its names.

    ``docstrings`` are patterns of Python files whose docstrings' ``>>>`` examples run (sybil
    imports each file as its module, so the examples see the module's namespace).

    ``names`` are tokens that start with a digit but are names (``1F1B``); ``commands`` maps a
    program name in console fences to a function that runs it in-process. Patterns are relative
    to the folder of the file that calls this (the ``conftest.py``), as in sybil itself.
    """
    root = str(Path(sys._getframe(1).f_code.co_filename).resolve().parent)
    rules = _rules(names, lint)
    common = [*code_parsers(), claim_parser(lint=rules)]
    if commands:
        common.append(console_parser(commands))
    page_sybil = Sybil(parsers=[*common, lint_parser(lint=rules)], patterns=list(pages),
                       excludes=list(excludes), teardown=teardown, name="pages", path=root)
    sybils = [page_sybil]
    if guides:
        sybils.append(Sybil(parsers=common, patterns=list(guides), teardown=teardown,
                            name="guides", path=root))
    if docstrings:
        sybils.append(Sybil(parsers=[DocTestParser()], patterns=list(docstrings),
                            excludes=list(docstring_excludes), name="docstrings", path=root))
    return SybilCollection(sybils).pytest()
