"""Sybil runs every page: its Python, its claims in document order, and the number lint.

A page's code cells, python fences and invisible blocks run in one namespace per page; each
claim is evaluated in that namespace after the code above it. A claim that does not hold and a
number that is neither a claim nor a marked non-claim each fail with the file and the line.
A ``console`` fence that starts with ``$ trainmath`` runs each command and compares its output.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from functools import lru_cache
from pathlib import Path

from sybil import Region, Sybil
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser
from sybil.parsers.rest import DocTestParser
from sybil.sybil import SybilCollection

from trainmath import claims

ROOT = Path(__file__).parent


def _relative(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return path


def _evaluate_claim(example) -> str | None:
    claim: claims.Claim = example.parsed
    path = _relative(example.path)
    try:
        value, failure = claim.verify(example.namespace)
    except claims.ClaimError as exc:
        return f"{path}:{claim.line}: cannot check {claim.raw!r}: {exc}"
    except Exception as exc:  # noqa: BLE001 - an expression that raises is a failed claim
        return f"{path}:{claim.line}: `{claim.expr}` raised {type(exc).__name__}: {exc}"
    return claim.failure(path, value, failure) if failure else None


def _evaluate_unchecked(example) -> str:
    return example.parsed.message(_relative(example.path))


#: The claim and lint parsers read the same page: scan it once.
_scan = lru_cache(maxsize=32)(claims.scan)


def claim_parser(document):
    """One region per claim: evaluated after the code above it, in the page's namespace."""
    for claim in _scan(document.text).claims:
        yield Region(claim.start, claim.end, claim, _evaluate_claim)


def lint_parser(document):
    """One failing region per number that is neither a claim nor marked as not a claim."""
    for number in _scan(document.text).unchecked:
        yield Region(number.start, number.end, number, _evaluate_unchecked)


_CONSOLE = re.compile(r"^```console\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def _run_command(example) -> str | None:
    """Run ``trainmath ...`` in-process; its output must equal what the page shows."""
    from trainmath.cli import main

    command, expected = example.parsed
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(shlex.split(command)[1:])
    got = "\n".join(line.rstrip() for line in (out.getvalue() + err.getvalue()).splitlines())
    want_status = 2 if expected.startswith("trainmath: error:") else 0
    if got == expected and status == want_status:
        return None
    return (f"{_relative(example.path)}:{example.line}: `$ {command}` exited {status} and "
            f"printed:\n{got}\n--- but the page shows (exit {want_status}):\n{expected}")


def console_parser(document):
    """Each ``$ trainmath ...`` line of a console fence, with the output shown under it."""
    for block in _CONSOLE.finditer(document.text):
        body, offset = block["body"], block.start("body")
        if not body.startswith("$ trainmath"):
            continue
        for m in re.finditer(r"^\$ (?P<cmd>(?:.*\\\n)*.*)\n(?P<out>(?:(?!\$ ).*\n)*)", body, re.MULTILINE):
            command = " ".join(part.rstrip("\\").strip() for part in m["cmd"].splitlines())
            expected = "\n".join(line.rstrip() for line in m["out"].rstrip("\n").splitlines())
            yield Region(offset + m.start(), offset + m.end(), (command, expected), _run_command)


_code = [
    PythonCodeBlockParser(),
    CodeBlockParser(language="ipython3", evaluator=PythonEvaluator()),
]

def _close_figures(namespace) -> None:
    """Pages draw with matplotlib; free each page's figures when its examples are done."""
    plt = namespace.get("plt")
    if plt is not None:
        plt.close("all")


pages = Sybil(
    parsers=[*_code, claim_parser, lint_parser, console_parser],
    patterns=["docs/*.md"],
    excludes=["docs/_build/*"],
    teardown=_close_figures,
    name="pages",
)
# README and CONTRIBUTING: their examples and claims run, but they may talk about numbers
# (Python versions, timings) without the lint.
guides = Sybil(parsers=[*_code, claim_parser, console_parser],
               patterns=["README.md", "CONTRIBUTING.md"],
               name="guides")

# The library's docstrings: each ``>>>`` example runs, in its module's namespace (sybil imports
# src/trainmath/x.py as trainmath.x, the installed package, whatever pytest's import mode).
library = Sybil(parsers=[DocTestParser()], patterns=["src/trainmath/*.py"],
                excludes=["src/trainmath/__main__.py"], name="docstrings")

pytest_collect_file = SybilCollection([pages, guides, library]).pytest()
