"""What the package declares is what it imports: the standard library, except the extras."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: Third-party imports allowed per module; everything else must be the standard library.
EXTRAS = {"precision.py": {"numpy", "ml_dtypes"}, "report/plots.py": {"matplotlib"}}


def _third_party_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__"}


def test_only_the_extras_modules_import_beyond_the_standard_library():
    package = ROOT / "src" / "trainmath"
    found = {p.relative_to(package).as_posix(): _third_party_imports(p) for p in package.rglob("*.py")}
    assert {name: mods for name, mods in found.items() if mods} == EXTRAS


def test_pyproject_declares_it():
    project = PYPROJECT["project"]
    assert project["dependencies"] == []
    extras = project["optional-dependencies"]
    assert list(extras) == ["precision", "plots"]
    assert set(extras["precision"]) == EXTRAS["precision.py"]
    assert set(extras["plots"]) == EXTRAS["report/plots.py"]
    groups = PYPROJECT["dependency-groups"]
    assert {"test", "docs", "validate"} <= set(groups)
    assert "sybil" in groups["test"] and "sphinx" in groups["docs"]


def test_the_command_runs_without_numpy():
    code = ("import sys, trainmath, trainmath.cli.command, trainmath.runs.estimates;"
            "print(sorted(m for m in ('numpy', 'ml_dtypes', 'sphinx', 'sybil') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
