"""What `make validate` installed: the pinned versions, and torch's CPU build (issue 9, item 7)."""

import re
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def _validate_pins() -> dict[str, str]:
    group = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["validate"]
    pins = {}
    for requirement in group:
        name, sep, version = requirement.partition("==")
        assert sep, f"{requirement!r}: the validate group pins exact versions"
        pins[name] = version
    return pins


def test_the_makefile_installs_the_pinned_torch():
    (version,) = re.findall(r"^TORCH\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert version == _validate_pins()["torch"]


def test_installed_versions_are_the_pins():
    import transformers
    pins = _validate_pins()
    assert torch.__version__.split("+")[0] == pins["torch"]
    assert transformers.__version__ == pins["transformers"]
    # LoRA and QLoRA (validate/test_finetune.py), DeepSpeed-Ulysses (test_context_parallel.py)
    for name in ("peft", "bitsandbytes", "deepspeed"):
        module = pytest.importorskip(name)
        assert module.__version__ == pins[name]


def test_torch_is_the_cpu_build():
    """The CUDA build would have pulled gigabytes of nvidia-* wheels for checks that run on
    the CPU; the CPU build has no CUDA runtime."""
    assert torch.version.cuda is None, f"torch {torch.__version__} is built for CUDA {torch.version.cuda}"
