"""Running a page: its code and its claims in document order, in one namespace.

:func:`run_page` is what a documentation build calls once per page: it runs each block of
code (through a callback, so a build can capture a notebook cell's outputs) and checks each
claim after the code above it, yielding a :class:`Result` with the arithmetic a reader sees.
"""

from __future__ import annotations

import ast
import doctest
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .arithmetic import Arithmetic, explain
from .language import ClaimError, check, describe, parse_statement
from .scanner import Claim, Code, Page


@dataclass(frozen=True)
class Result:
    """One claim, checked: the computed value, why it fails (None if it holds), the arithmetic."""

    claim: Claim
    value: object | None
    failure: str | None
    arithmetic: Arithmetic | None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def reason(self) -> str:
        """Why the claim fails: what was stated, what was computed, from what, and why."""
        c = self.claim
        if self.value is None:
            return f"cannot check {c.raw.strip()!r}: {self.failure}"
        return (f"stated {c.text!r}, computed {describe(self.value)} from `{c.expr}`: "
                f"{self.failure}")

    def message(self, path: str) -> str:
        """The failure as one line: ``file:line:column:`` and :meth:`reason`."""
        return f"{path}:{self.claim.where}: {self.reason()}"


def run_code(source: str, namespace: dict, filename: str) -> None:
    """Run one block of a page's Python (a doctest block runs example by example)."""
    if source.lstrip().startswith(">>>"):
        for example in doctest.DocTestParser().get_examples(source):
            exec(compile(example.source, filename, "single"), namespace)  # noqa: S102
    else:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102


def verify(claim: Claim, namespace: dict) -> tuple[object, str | None]:
    """Evaluate ``claim`` in ``namespace``: (value, failure or None).

    Raises :class:`ClaimError` for a claim that cannot be read, and whatever the expression
    raises.
    """
    if claim.error:
        raise ClaimError(claim.error)
    statement = parse_statement(claim.text)
    value = eval(claim.expr, namespace)  # noqa: S307 - the page's own expression
    return value, check(statement, value, claim.tolerance)


def definitions_in(source: str) -> dict[str, str]:
    """``name -> source of its value`` for each top-level ``name = value`` in ``source``.

    A name imported with ``from module import name`` maps to that import statement.
    """
    if source.lstrip().startswith(">>>"):
        source = "\n".join(e.source for e in doctest.DocTestParser().get_examples(source))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    found[alias.asname or alias.name] = f"from {node.module} import {alias.name}"
            continue
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        for target in targets:
            value = node.value
            if isinstance(target, ast.Name):
                found[target.id] = ast.get_source_segment(source, value) or ast.unparse(value)
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                    and len(target.elts) == len(value.elts):  # a, b = 1, 2
                for name, part in zip(target.elts, value.elts):
                    if isinstance(name, ast.Name):
                        found[name.id] = ast.get_source_segment(source, part) or ast.unparse(part)
    return found


def check_claim(claim: Claim, namespace: dict, definitions: dict[str, str],
                library: tuple[str, ...] = ()) -> Result:
    """Check one claim in ``namespace`` and explain its arithmetic; never raises."""
    try:
        value, failure = verify(claim, namespace)
    except ClaimError as exc:
        return Result(claim, None, str(exc), None)
    except Exception as exc:  # noqa: BLE001 - an expression that raises is a failed claim
        return Result(claim, None, f"`{claim.expr}` raised {type(exc).__name__}: {exc}", None)
    try:
        arithmetic = explain(claim.expr, namespace, value, definitions, library)
    except Exception:  # noqa: BLE001 - the check stands; show the expression alone
        arithmetic = Arithmetic(claim.expr, (), describe(value), ())
    return Result(claim, value, failure, arithmetic)


Execute = Callable[[Code, dict], None]


def run_page(page: Page, namespace: dict, filename: str = "<page>",
             execute: Execute | None = None, library: tuple[str, ...] = ()) -> Iterator[Result]:
    """Run the page's code and check its claims in document order.

    ``execute(code, namespace)`` runs one block (default: :func:`run_code`); an exception it
    raises propagates, after which the caller decides what the remaining claims are.
    """
    definitions: dict[str, str] = {}
    for item in page.items():
        if isinstance(item, Code):
            if execute is None:
                run_code(item.source, namespace, f"{filename}:{item.line}")
            else:
                execute(item, namespace)
            definitions.update(definitions_in(item.source))
            continue
        yield check_claim(item, namespace, definitions, library)
