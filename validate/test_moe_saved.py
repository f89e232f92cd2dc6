"""Measured truth for a mixture-of-experts layer: what Hugging Face's ``MixtralForCausalLM``
saves for backward, against :mod:`trainmath.memory.activations` with the ``hf-sdpa`` kernels.

Mixtral's MoE block routes data-dependently: ``MixtralExperts.forward`` loops over the experts
that ``nonzero`` finds hit and gathers each one's tokens with ``torch.where``, shapes that a
FakeTensor cannot know. So these runs use real tensors and the real router (random weights,
so the tokens spread unevenly over the experts) at reduced widths. Every tensor the block
saves is per token or per token copy (k per token), with nothing per expert, so the bytes do
not depend on how the router spreads the tokens, and the library's count, which assumes
balanced routing for the split over devices, must equal the measurement to the byte at any
width; the full-size count is the same formula at Mixtral's widths.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainmath.memory.activations import layer_activations
from trainmath.memory.stages import stage_activations  # noqa: E402
from trainmath.model.shape import shape as model_shape  # noqa: E402
from validate.measure.saved import measure_saved  # noqa: E402

# Mixtral-8x7B's structure (8 experts, top 2, GQA 4:1, untied) at widths a CPU runs in seconds.
SMALL = [
    dict(layers=2, hidden=256, heads=8, kv_heads=2, ffn=512, vocab=1000, experts=8,
         experts_per_token=2, s=256),
    dict(layers=2, hidden=128, heads=4, kv_heads=1, ffn=384, vocab=512, experts=4,
         experts_per_token=1, s=512),
    dict(layers=3, hidden=192, heads=6, kv_heads=2, ffn=256, vocab=640, experts=16,
         experts_per_token=4, s=128),
]


def _shapes(c: dict) -> tuple[dict, object]:
    measured = dict(name="mixtral-small", family="mixtral", layers=c["layers"], hidden=c["hidden"],
                    heads=c["heads"], kv_heads=c["kv_heads"], ffn=c["ffn"], vocab=c["vocab"],
                    mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False, positions=0,
                    dropout=False, dropout_p=0.0, norm_eps=1e-5, rope_theta=1e6,
                    sliding_window=None, experts=c["experts"],
                    experts_per_token=c["experts_per_token"])
    ours = model_shape("mixtral-small", layers=c["layers"], hidden=c["hidden"], heads=c["heads"],
                       kv_heads=c["kv_heads"], ffn=c["ffn"], vocab=c["vocab"],
                       experts=c["experts"], experts_per_token=c["experts_per_token"])
    return measured, ours


@pytest.mark.parametrize("c", SMALL, ids=lambda c: f"E{c['experts']}k{c['experts_per_token']}h{c['hidden']}")
def test_mixtral_layer_and_model_saved_bytes_match_the_library(c):
    measured, ours = _shapes(c)
    got = measure_saved(measured, "hf-sdpa", c["s"], fake=False)
    layer = layer_activations(ours, c["s"], 1, implementation="hf-sdpa")
    assert got["per_layer"] == [layer.total.n] * c["layers"]
    stage = stage_activations(ours, c["s"], 1, implementation="hf-sdpa")
    assert got["total"] == stage.total.n


def test_the_routing_is_really_uneven():
    """The check above holds whatever the router does: here some experts get more tokens."""
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter

    torch.manual_seed(0)
    router = MixtralTopKRouter(MixtralConfig(hidden_size=256, num_local_experts=8,
                                             num_experts_per_tok=2))
    torch.nn.init.normal_(router.weight)
    _, _, index = router(torch.randn(256, 256))
    counts = torch.bincount(index.flatten(), minlength=8)
    assert counts.sum() == 512 and counts.max() > counts.min()
