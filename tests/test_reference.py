"""The API reference (docs/reference/) covers the whole public library, and everything in it is documented.

Public: a module's ``__all__`` where it has one, else every name that does not start with ``_``
and that the module defines itself (functions, classes, constants assigned at module level), and
the public methods and properties of its public classes. A new function without a docstring, or
a new module without a reference page, fails here rather than going unnoticed; the build
(``make docs``, nitpicky) then checks that every entry renders and every cross-reference resolves.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from functools import cache
from pathlib import Path

import pytest
from sphinx.pycode import ModuleAnalyzer

import trainmath

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"

#: Modules with no reference page: the claim machinery is leaving the library for its own
#: package, and ``__main__`` only runs the command (documented on the trainmath.cli.command page).
NOT_IN_REFERENCE = {"trainmath.claims", "trainmath.__main__"}

#: Every module of every layer (a package's ``__init__`` only describes its layer).
MODULES = sorted(
    m.name for m in pkgutil.walk_packages(trainmath.__path__, "trainmath.")
    if not m.ispkg and m.name not in NOT_IN_REFERENCE
)


@cache
def _source(module_name: str) -> ast.Module:
    return ast.parse(Path(importlib.import_module(module_name).__file__).read_text(encoding="utf-8"))


def _defined(module_name: str) -> dict[str, ast.stmt]:
    """Each name the module's top level defines (def, class or assignment) and its statement."""
    found: dict[str, ast.stmt] = {}
    for node in _source(module_name).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            found.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
    return found


def public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    defined = _defined(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in defined if not n.startswith("_")]
    return [n for n in names if n in defined and n != "__all__"]


def public_members(cls: type) -> list[str]:
    """Methods and properties a class defines itself (dataclass fields are attributes)."""
    return [name for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))]


def _objects() -> list[tuple[str, str, str]]:
    """(module, dotted name inside it, kind) for every public object of the reference."""
    objects = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in public_names(module_name):
            node = _defined(module_name)[name]
            if isinstance(node, ast.ClassDef):
                objects.append((module_name, name, "class"))
                objects += [(module_name, f"{name}.{member}", "member")
                            for member in public_members(getattr(module, name))]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                objects.append((module_name, name, "function"))
            else:
                objects.append((module_name, name, "constant"))
    return objects


OBJECTS = _objects()


def _docstring(module_name: str, dotted: str, kind: str) -> str | None:
    if kind == "member":  # a method may inherit its docstring, as autodoc shows it
        owner, member = dotted.split(".")
        return inspect.getdoc(getattr(getattr(importlib.import_module(module_name), owner), member))
    return ast.get_docstring(_defined(module_name)[dotted])  # its own, not one dataclass wrote


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_function_and_class_has_a_docstring(module_name):
    missing = [f"{m}.{dotted}" for m, dotted, kind in OBJECTS
               if m == module_name and kind != "constant" and not (_docstring(m, dotted, kind) or "").strip()]
    assert not missing, f"no docstring (say what it computes and its source): {', '.join(missing)}"


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_constant_has_a_doc_comment(module_name):
    """autodoc lists a module-level constant only when a ``#:`` comment documents it."""
    attr_docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
    missing = [f"{m}.{name}" for m, name, kind in OBJECTS
               if m == module_name and kind == "constant" and ("", name) not in attr_docs]
    assert not missing, f"no `#:` doc comment above, so the reference leaves out: {', '.join(missing)}"


# -- what the reference pages document ---------------------------------------------------------

_DIRECTIVE = re.compile(r"^\.\. (auto\w+):: *(\S+)\n((?:[ \t]+:[\w-]+:.*\n)*)", re.MULTILINE)
_MYST_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{(auto\w+)\} *(\S+)\n((?::[\w-]+:.*\n)*)", re.MULTILINE)


def _options(block: str) -> dict[str, list[str]]:
    options = {}
    for line in block.splitlines():
        key, _, value = line.strip()[1:].partition(":")
        options[key] = [v.strip() for v in value.split(",") if v.strip()]
    return options


def _directives(text: str):
    for m in _DIRECTIVE.finditer(text):  # inside {eval-rst}
        yield m[1], m[2], _options(m[3])
    for m in _MYST_DIRECTIVE.finditer(text):  # MyST's own directive syntax
        yield m[2], m[3], _options(m[4])


@cache
def documented() -> dict[str, str]:
    """Every qualified name the reference pages document, and the page that documents it."""
    found: dict[str, str] = {}
    for page in sorted(REFERENCE.rglob("*.md")):
        for kind, target, options in _directives(page.read_text(encoding="utf-8")):
            if kind == "automodule":
                found[target] = str(page.relative_to(REFERENCE))
                if "members" not in options or target not in MODULES:
                    continue
                listed = set(options["members"]) or set(public_names(target))
                listed -= set(options.get("exclude-members", []))
                for module_name, dotted, _ in OBJECTS:
                    if module_name == target and dotted.split(".")[0] in listed:
                        found[f"{module_name}.{dotted}"] = page.name
            else:  # autofunction, autoclass (with :members:, its members too), autodata ...
                found[target] = str(page.relative_to(REFERENCE))
                if kind == "autoclass" and "members" in options:
                    for module_name, dotted, _ in OBJECTS:
                        if f"{module_name}.{dotted}".startswith(target + "."):
                            found[f"{module_name}.{dotted}"] = str(page.relative_to(REFERENCE))
    return found


@pytest.mark.parametrize("module_name", MODULES)
def test_module_has_a_reference_page(module_name):
    assert module_name in documented(), (
        f"{module_name} has no page in docs/reference/: add one (`.. automodule:: {module_name}` "
        f"with :members: and :undoc-members:) and list it in docs/reference/index.md"
    )


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_object_is_on_a_reference_page(module_name):
    missing = [f"{m}.{dotted}" for m, dotted, _ in OBJECTS
               if m == module_name and f"{m}.{dotted}" not in documented()]
    assert not missing, f"public but on no page in docs/reference/: {', '.join(missing)}"


def test_package_exports_are_documented_where_they_are_defined():
    for name in trainmath.__all__:
        value = getattr(trainmath, name)
        home = getattr(value, "__module__", None) or next(
            m for m in MODULES if name in public_names(m))  # a constant: the module that assigns it
        assert f"{home}.{name}" in documented(), f"trainmath.{name} ({home}) is not in the reference"


def test_reference_index_lists_every_page():
    """One toctree per layer of the library; together they list every page once."""
    index = (REFERENCE / "index.md").read_text(encoding="utf-8")
    entries = [line.strip() for toctree in re.findall(r"```\{toctree\}\n(.*?)```", index, re.DOTALL)
               for line in toctree.splitlines() if line.strip() and not line.startswith(":")]
    pages = {p.relative_to(REFERENCE).with_suffix("").as_posix() for p in REFERENCE.rglob("*.md")}
    assert len(entries) == len(set(entries)) and set(entries) == pages - {"index"}


def test_reference_pages_follow_the_layout():
    """A module's page sits where the module sits: trainmath/memory/peak.py, memory/peak.md."""
    for module_name in MODULES:
        page = REFERENCE / (module_name.removeprefix("trainmath.").replace(".", "/") + ".md")
        assert page.exists() and f"automodule:: {module_name}" in page.read_text(), module_name


def test_reference_prose_states_no_numbers():
    """The claim lint reads docs/*.md, not docs/reference/: numbers belong in the docstrings."""
    for page in sorted(REFERENCE.rglob("*.md")):
        prose = re.sub(r"^(`{3,}).*?^\1", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        prose = re.sub(r"`[^`]*`", "", prose)  # inline code and role targets
        for number in re.finditer(r"(?<![\w-])\d[\d.,]*", prose):
            raise AssertionError(f"{page.relative_to(ROOT)}: number {number[0]!r} in the prose; "
                                 "state it in a docstring (computed, tested) or on a checked page")
