"""The arithmetic behind a claim, as a reader wants to see it.

For ``N_PAPER - 1`` the reader sees ``= 64 − 1`` and ``= 63``; for ``bpp.total``, where
``total`` is a property that adds four fields, ``= weights + gradients + master_weights +
optimizer_states``, then ``= 2 + 2 + 4 + 8`` and ``= 16``; for a name the page defined from a
call, the call it came from. :func:`explain` builds these steps from the expression's syntax
tree and the values in the page's namespace, and names the library functions that computed
the result, so a popup can link to their reference entries.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from fractions import Fraction

from .language import as_number, bytes_of, describe, fmt

_ATOMS = (ast.Name, ast.Attribute, ast.Subscript, ast.Call)
_MAX_STEP = 240  # characters: a step longer than this is left out rather than wrapped


@dataclass(frozen=True)
class Arithmetic:
    """How a claim's value was computed: the expression, the steps, the value, the sources."""

    expr: str
    #: intermediate forms, each read as "= step": names replaced by what they mean or hold
    steps: tuple[str, ...]
    #: the exact value, spelled out (both GB and GiB for bytes)
    value: str
    #: qualified names of the library functions or classes that computed it
    sources: tuple[str, ...]
    #: where the expression's names come from: ``"bpp = bytes_per_param('bf16-mixed')"``
    where: tuple[str, ...] = ()


def short(value: object) -> str | None:
    """A computed number as a step shows it, or None when it is not a number.

    Bytes show in GB when that is exact to three decimals, else as a byte count.
    """
    n = bytes_of(value)
    if n is not None:
        gb = n / 10**9
        if (gb * 1000).denominator == 1 and n >= 10**6:
            return f"{_decimal(gb)} GB"
        return f"{fmt(n)} bytes"
    try:
        x = as_number(value)
    except ValueError:
        return None
    return _decimal(x) if (x * 10**6).denominator == 1 else fmt(x)


def _decimal(x: Fraction) -> str:
    whole = f"{x.numerator // x.denominator:,}" if x >= 0 else f"-{(-x).numerator // (-x).denominator:,}"
    rest = abs(x) - int(abs(x))
    if rest == 0:
        return whole
    digits = f"{float(rest):.6f}"[2:].rstrip("0")
    return f"{whole}.{digits}"


def _pretty(source: str) -> str:
    """Python operators as arithmetic: ``*`` as ×, ``-`` as −, ``**`` as ^."""
    return (source.replace(" ** ", "^").replace("**", "^").replace(" * ", " × ")
            .replace(" - ", " − ").replace(" / ", " / ").replace(" // ", " ÷ "))


class _Substitute(ast.NodeTransformer):
    """Replace each maximal name, attribute, subscript or call that holds a number by it."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, _ATOMS) and not isinstance(getattr(node, "ctx", None), ast.Store):
            try:
                value = eval(compile(ast.Expression(node), "<claim>", "eval"), self.namespace)  # noqa: S307
            except Exception:  # noqa: BLE001 - leave what cannot be evaluated as written
                value = None
            text = short(value)
            if text is not None:
                return ast.copy_location(ast.Name(id=text, ctx=ast.Load()), node)
            if isinstance(node, ast.Call):  # keep the call; show its numeric arguments
                node.args = [self.visit(a) for a in node.args]
                for kw in node.keywords:
                    kw.value = self.visit(kw.value)
                return node
            if isinstance(node, ast.Name):
                return node
        return self.generic_visit(node)


def _substituted(tree: ast.AST, namespace: dict) -> str:
    """``tree`` with its numbers filled in; a call at the top keeps its name, showing its arguments."""
    body = ast.parse(ast.unparse(tree), mode="eval").body
    sub = _Substitute(namespace)
    if isinstance(body, ast.Call):
        body.args = [sub.visit(a) for a in body.args]
        for kw in body.keywords:
            kw.value = sub.visit(kw.value)
    else:
        body = sub.visit(body)
    return _pretty(ast.unparse(body))


def _property_expression(owner: object, attr: str) -> tuple[ast.expr, dict] | None:
    """The ``return`` expression of a one-line property ``attr`` on ``owner``'s class."""
    prop = getattr(type(owner), attr, None)
    if not isinstance(prop, property) or prop.fget is None:
        return None
    try:
        source = textwrap.dedent(inspect.getsource(prop.fget))
        func = ast.parse(source).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    return body[0].value, {**prop.fget.__globals__, "self": owner}


class _Unself(ast.NodeTransformer):
    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return ast.copy_location(ast.Name(id=node.attr, ctx=ast.Load()), node)
        return self.generic_visit(node)


def _expand_property(node: ast.expr, namespace: dict) -> list[str]:
    """Steps for ``x.attr`` where ``attr`` is a property: its formula, then its numbers."""
    if not isinstance(node, ast.Attribute):
        return []
    try:
        owner = eval(compile(ast.Expression(node.value), "<claim>", "eval"), namespace)  # noqa: S307
    except Exception:  # noqa: BLE001
        return []
    found = _property_expression(owner, node.attr)
    for _ in range(3):  # follow a property that only renames another: total -> model_states
        if found is None:
            return []
        expr, scope = found
        if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)
                and expr.value.id == "self"):
            break
        found = _property_expression(owner, expr.attr)
    else:
        return []
    formula = _pretty(ast.unparse(_Unself().visit(ast.parse(ast.unparse(expr), mode="eval").body)))
    return [formula, _substituted(expr, scope)]


def _qualified(obj: object, library: tuple[str, ...]) -> str | None:
    obj = getattr(obj, "__func__", obj)
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None)
    if not name or not callable(obj) or "<" in name:
        return None
    if library and not _in_library(module, library):
        return None
    if not library and module in ("builtins", ""):
        return None
    return f"{module}.{name}"


def _in_library(module: str, library: tuple[str, ...]) -> bool:
    return not library or any(module == p or module.startswith(p + ".") for p in library)


def _sources(trees: list[ast.AST], namespace: dict, library: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for tree in trees:
        for node in ast.walk(tree):
            target = None
            if isinstance(node, ast.Call):
                target = node.func
            elif isinstance(node, ast.Attribute):
                try:
                    owner = eval(compile(ast.Expression(node.value), "<claim>", "eval"), namespace)  # noqa: S307
                except Exception:  # noqa: BLE001
                    continue
                # a property or a field of a library object: its reference entry (or its class's)
                home = next((k for k in type(owner).__mro__ if node.attr in vars(k)), type(owner))
                name = _qualified(home, library) if not isinstance(owner, type) else None
                if name:
                    found.append(f"{name}.{node.attr}")
                continue
            if target is None:
                continue
            try:
                func = eval(compile(ast.Expression(target), "<claim>", "eval"), namespace)  # noqa: S307
            except Exception:  # noqa: BLE001
                continue
            name = _qualified(func, library)
            if name:
                found.append(name)
    return list(dict.fromkeys(found))


def explain(expr: str, namespace: dict, value: object, definitions: dict[str, str] | None = None,
            library: tuple[str, ...] = ()) -> Arithmetic:
    """The arithmetic behind ``expr`` (already evaluated to ``value`` in ``namespace``).

    ``definitions`` maps names the page assigned to the source of what it assigned
    (``{"state": "training_state(N)"}``); ``library`` names the packages whose functions count
    as sources (all but builtins when empty).

    >>> ns = {"N_PAPER": 64}
    >>> a = explain("N_PAPER - 1", ns, 63)
    >>> a.steps, a.value
    (('64 − 1',), '63')
    """
    definitions = definitions or {}
    tree = ast.parse(expr, mode="eval").body
    steps: list[str] = []
    trees: list[ast.AST] = [tree]
    if isinstance(tree, ast.Name) and tree.id in definitions:
        definition = definitions[tree.id]
        try:
            defined = ast.parse(definition, mode="eval").body
        except SyntaxError:
            defined = None
        if defined is not None and not isinstance(defined, ast.Constant):
            steps.append(_pretty(ast.unparse(defined)))
            trees.append(defined)
            steps.append(_substituted(defined, namespace))
            steps.extend(_expand_property(defined, namespace))
    else:
        steps.append(_substituted(tree, namespace))
        steps.extend(_expand_property(tree, namespace))
    where: list[str] = []
    imported: list[str] = []
    names = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)), key=lambda n: n.col_offset)
    for name in dict.fromkeys(n.id for n in names):
        if name not in definitions:
            continue
        definition = definitions[name]
        if definition.startswith("from "):  # from module import attr
            _, module, _, attr = definition.split()
            where.append(definition)
            imported.append(f"{module}.{attr}")
            continue
        try:
            defined = ast.parse(definition, mode="eval").body
        except SyntaxError:
            continue
        is_input = isinstance(defined, ast.Constant) or (
            isinstance(defined, ast.UnaryOp) and isinstance(defined.operand, ast.Constant))
        if name == getattr(tree, "id", None) and not is_input:
            continue  # the steps already show what the claim's one name was defined as
        where.append(f"{name} = {_pretty(definition)}" + (" (an input)" if is_input else ""))
        if name != getattr(tree, "id", None):
            trees.append(defined)
    final = short(value)
    kept: list[str] = []
    for step in steps:
        if step in (expr, _pretty(expr), final) or step in kept or len(step) > _MAX_STEP:
            continue
        kept.append(step)
    sources = _sources([*trees[1:], trees[0]], namespace, library)  # the page's calls first
    sources += [q for q in imported if _in_library(q.rsplit(".", 1)[0], library)]
    return Arithmetic(expr=_pretty(" ".join(expr.split())), steps=tuple(kept),
                      value=describe(value), sources=tuple(dict.fromkeys(sources))[:3],
                      where=tuple(where))

