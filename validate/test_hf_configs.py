"""trainmath.model.hfconfig against Hugging Face transformers: each published config.json of
tests/data/hf-configs/ built with ``AutoModelForCausalLM.from_config`` on the meta device (no
memory), its parameters counted by PyTorch. A second source beside the published totals that
tests/test_hfconfig.py asserts: the count and every parameter tensor's size must match."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trainmath.model.hfconfig import load_config  # noqa: E402
from trainmath.model.shape import param_count, param_shapes  # noqa: E402

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "tests" / "data" / "hf-configs").glob("*.json"))


def hf_model(path: Path):
    d = json.loads(path.read_text(encoding="utf-8"))
    kind = d.pop("model_type")
    d.pop("architectures", None)
    config = transformers.AutoConfig.for_model(kind, **d)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def test_every_family_is_here():
    assert len(CONFIGS) == 7


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_parameter_count_and_tensors_match_transformers(path):
    model = hf_model(path)
    params = list(model.parameters())  # tied weights appear once
    shape = load_config(path)
    assert sum(p.numel() for p in params) == param_count(shape)
    ours = param_shapes(shape)
    theirs = sorted(p.numel() for p in params)
    mine = sorted([math.prod(t) for t in ours.layer] * ours.layers + [math.prod(t) for t in ours.root])
    assert theirs == mine  # the same tensors (GPT-2's Conv1D keeps them transposed)
