"""trainmath.model.hfconfig against Hugging Face transformers: each published config.json of
tests/data/hf-configs/ built with ``AutoModelForCausalLM.from_config`` on the meta device (no
memory), its parameters counted by PyTorch. A second source beside the published totals that
tests/test_hfconfig.py asserts: the count and every parameter tensor's size must match.

Every file of the folder (provenance in its SOURCES.json) is here, composite configs (Gemma 3,
Llama 4, Mistral 3) by their language model: transformers builds their ``text_config`` as a
causal LM, which is what the library counts (the vision tower is not)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trainmath.model.hfconfig import COMPOSITE, FAMILIES, family_of, load_config  # noqa: E402
from trainmath.model.shape import param_count, param_shapes  # noqa: E402

FOLDER = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf-configs"
CONFIGS = sorted(p for p in FOLDER.glob("*.json") if p.name != "SOURCES.json")


def _family(path: Path) -> str:
    """The family whose keys the library reads: a composite config's text family."""
    d = json.loads(path.read_text(encoding="utf-8"))
    family = family_of(d)
    if family in COMPOSITE:
        return d["text_config"].get("model_type") or COMPOSITE[family]
    return family


def hf_model(path: Path):
    """transformers' model of the config on the meta device: of a composite config, its
    language model alone (its text_config as a causal LM)."""
    d = json.loads(path.read_text(encoding="utf-8"))
    if family_of(d) in COMPOSITE:
        d = d["text_config"] | {"model_type": _family(path)}
    kind = d.pop("model_type")
    d.pop("architectures", None)
    config = transformers.AutoConfig.for_model(kind, **d)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config)


def test_every_family_is_here():
    assert {_family(p) for p in CONFIGS} == set(FAMILIES)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_parameter_count_and_tensors_match_transformers(path):
    """Every parameter of the language model, counted by PyTorch, against the library's count;
    for dense models tensor by tensor. transformers does not build DeepSeek-V3's
    multi-token-prediction module (``num_nextn_predict_layers``): its count is the library's
    without it. A mixture's experts are one fused tensor per projection in transformers, and
    Phi-3's ``qkv_proj`` and ``gate_up_proj`` fuse the library's separate matrices, so for
    those only the total is compared."""
    model = hf_model(path)
    params = list(model.parameters())  # tied weights appear once
    shape = load_config(path)
    if shape.mtp_layers:
        shape = replace(shape, mtp_layers=0)
    assert sum(p.numel() for p in params) == param_count(shape)
    if shape.moe or _family(path) == "phi3":
        return
    ours = param_shapes(shape)
    theirs = sorted(p.numel() for p in params)
    mine = sorted(math.prod(t) for layer in ours.per_layer for t in layer) + \
        [math.prod(t) for t in ours.root]
    mine.sort()
    assert theirs == mine  # the same tensors (GPT-2's Conv1D keeps them transposed)
