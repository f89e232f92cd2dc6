"""Published model shapes (:data:`PRESETS`), how each is commonly trained
(:data:`TRAINING_DEFAULTS`), and the GPT shapes of the Megatron-LM papers with the closed-form
parameter count Megatron-LM uses for them (:func:`megatron_param_count`,
:func:`megatron_omissions`: exactly what that count leaves out).

>>> preset("llama-2-7b").layers, trained_with(preset("llama-3-8b")).recipe
(32, 'bf16-mixed')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from .shape import ModelShape, param_breakdown, shape
from ..units import choice, positive_int


#: A GPT MLP's width in units of the hidden size: 4h (Vaswani et al. 2017, §3.3; Brown et al.
#: 2020, GPT-3, §2.1).
GPT_FFN_MULTIPLIER = 4
#: Weight-matrix parameters of one GPT layer in units of h²: attention 4h² and a 4h-wide MLP
#: 8h², the 12lh² of Megatron-LM's parameter count (Narayanan et al. 2021, §5.1).
MEGATRON_WEIGHTS_PER_H2 = 12
#: Biases and LayerNorm parameters of one GPT layer in units of h: the 13lh of the same count
#: (attention biases 4h, MLP biases 5h, two LayerNorms 4h).
MEGATRON_VECTORS_PER_H = 13


def gpt_shape(name: str, *, layers: int, hidden: int, heads: int, vocab: int, positions: int,
              tied_embeddings: bool = True, source: str = "") -> ModelShape:
    """A GPT-style shape, the one Korthikanti et al. 2022 and Narayanan et al. 2021 analyse.

    GeLU MLP of width 4h, multi-head attention (kv_heads = a), LayerNorm, biases on every
    linear layer, dropout, learned absolute positions, tied input and output embeddings
    (Radford et al. 2019, GPT-2; Brown et al. 2020, GPT-3 §2.1).
    """
    hidden = positive_int("hidden", hidden)
    return shape(name, layers=layers, hidden=hidden, heads=heads,
                 ffn=GPT_FFN_MULTIPLIER * hidden, vocab=vocab,
                 mlp="gelu", norm="layernorm", bias=True, tied_embeddings=tied_embeddings,
                 positions=positions, dropout=True, source=source)


def is_gpt_style(m: ModelShape) -> bool:
    """True when ``m`` has the GPT layer: GeLU MLP of width 4h, MHA, LayerNorm, biases, dropout."""
    return (m.mlp == "gelu" and m.ffn == GPT_FFN_MULTIPLIER * m.hidden and m.kv_heads == m.heads
            and m.norm == "layernorm" and m.bias and m.dropout)


def _check_gpt_style(m: ModelShape, what: str) -> None:
    if not is_gpt_style(m):
        raise ValueError(
            f"{what} holds for GPT-style shapes only (GeLU MLP of width 4h, kv_heads = heads, "
            f"LayerNorm, biases, dropout); {m.name!r} has mlp={m.mlp!r}, ffn={m.ffn}, "
            f"kv_heads={m.kv_heads}, heads={m.heads}, norm={m.norm!r}, bias={m.bias}, "
            f"dropout={m.dropout}"
        )


def megatron_param_count(m: ModelShape) -> int:
    """Megatron-LM's parameter count for a GPT shape: 12lh²(1 + 13/(12h) + (V + s)/(12lh)).

    Narayanan et al. 2021, *Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM*, §5.1, with l layers, hidden size h, vocabulary V and s the number of
    learned positions. Expanded it is 12lh² + 13lh + (V + s)h: per layer 12h² weights and 13h
    biases and LayerNorm parameters, plus one token-embedding and one position-embedding
    matrix. :func:`megatron_omissions` lists what :func:`~trainmath.model.shape.param_count` counts beyond it.
    """
    _check_gpt_style(m, "Megatron-LM's 12lh²(1 + 13/(12h) + (V+s)/(12lh))")
    if not m.positions:
        raise ValueError(f"{m.name!r} has no learned positions; the formula's s is their number")
    l, h, v, s = m.layers, m.hidden, m.vocab, m.positions
    w, b = MEGATRON_WEIGHTS_PER_H2, MEGATRON_VECTORS_PER_H
    p = w * l * h * h * (1 + Fraction(b, w * h) + Fraction(v + s, w * l * h))
    return int(p)  # a whole number: 12lh² + 13lh + (V + s)h


def megatron_omissions(m: ModelShape) -> dict[str, int]:
    """Parameters of a GPT shape that :func:`megatron_param_count` leaves out, by name.

    Always the final LayerNorm before the output layer (gain and bias, 2h); also the output
    projection (Vh) when the embeddings are not tied, since the formula counts one V×h matrix.
    ``param_count(m) == megatron_param_count(m) + sum(megatron_omissions(m).values())``.
    """
    _check_gpt_style(m, "Megatron-LM's 12lh²(1 + 13/(12h) + (V+s)/(12lh))")
    left_out = {"final LayerNorm (gain and bias)": param_breakdown(m).final_norm}
    if not m.tied_embeddings:
        left_out["untied output projection (LM head)"] = param_breakdown(m).lm_head
    return left_out


# Llama 2's paper (Touvron et al. 2023b) gives context length and GQA in its Table 1, not h, a
# or L; those are in the released config.json files and, for the 7B and 65B/70B sizes, in the
# LLaMA paper's Table 2 (Touvron et al. 2023a).
_LLAMA2 = ("config.json of meta-llama/{} (h, a and L as in Touvron et al. 2023a, LLaMA, Table 2); "
           "Touvron et al. 2023b, Llama 2, Table 1 (context length, GQA)")
_LLAMA1 = ("Touvron et al. 2023a, LLaMA, Table 2 (LLaMA-{1}: h, a, L, {2} parameters, context "
           "2048); config.json of huggyllama/{0} (intermediate_size), the checkpoint QLoRA's "
           "Guanaco scripts load")
_LLAMA3 = "Dubey et al. 2024, The Llama 3 Herd of Models, Table 3; config.json of meta-llama/{}"

_NARAYANAN = "Narayanan et al. 2021, Table 1 (a, h, l; V 51200, s 2048)"
_KORTHIKANTI = "Korthikanti et al. 2022, Table 3 (a, h, l; V 51200, s 2048)"
#: (name, heads, hidden, layers, source) of the Megatron-LM GPT models in the papers' tables
_MEGATRON_GPTS = (
    ("1.7b", 24, 2304, 24, _NARAYANAN), ("3.6b", 32, 3072, 30, _NARAYANAN),
    ("7.5b", 32, 4096, 36, _NARAYANAN), ("18.4b", 48, 6144, 40, _NARAYANAN),
    ("39.1b", 64, 8192, 48, _NARAYANAN), ("76.1b", 80, 10240, 60, _NARAYANAN),
    ("145.6b", 96, 12288, 80, _NARAYANAN), ("310.1b", 128, 16384, 96, _NARAYANAN),
    ("529.6b", 128, 20480, 105, _NARAYANAN + "; the 530B of " + _KORTHIKANTI),
    ("1t", 160, 25600, 128, _NARAYANAN + " (1008.0B); the 1T of " + _KORTHIKANTI),
    ("22b", 64, 6144, 48, _KORTHIKANTI), ("175b", 96, 12288, 96, _KORTHIKANTI),
)

#: Published shapes by name (:func:`preset`), each with its source in ``source``. Their
#: ``max_positions`` is ``max_position_embeddings`` of the released config.json (GPT-3: its
#: 2,048 learned positions); Mistral-7B's ``sliding_window`` is its config's and its paper's.
#:
#: :meta hide-value:
PRESETS: dict[str, ModelShape] = {
    p.name: p
    for p in (
        shape(
            "llama-2-7b", layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000,
            max_positions=4096,
            source=_LLAMA2.format("Llama-2-7b-hf") + "; max_position_embeddings 4096",
        ),
        shape(
            "llama-2-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000,
            max_positions=4096,
            source=_LLAMA2.format("Llama-2-70b-hf") + " (GQA with 8 key-value heads); "
                   "max_position_embeddings 4096",
        ),
        shape(
            "llama-3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256,
            max_positions=8192,
            source=_LLAMA3.format("Meta-Llama-3-8B") + "; max_position_embeddings 8192",
        ),
        shape(
            "llama-3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256,
            max_positions=8192,
            source=_LLAMA3.format("Meta-Llama-3-70B") + "; max_position_embeddings 8192",
        ),
        shape(
            "llama-33b", layers=60, hidden=6656, heads=52, ffn=17920, vocab=32000,
            max_positions=2048,
            source=_LLAMA1.format("llama-30b", "33B", "32.5B"),
        ),
        shape(
            "llama-65b", layers=80, hidden=8192, heads=64, ffn=22016, vocab=32000,
            max_positions=2048,
            source=_LLAMA1.format("llama-65b", "65B", "65.2B"),
        ),
        shape(
            "mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
            max_positions=32768, sliding_window=4096,
            source="Jiang et al. 2023, Mistral 7B, Table 1 (window_size 4096); config.json of "
                   "mistralai/Mistral-7B-v0.1 (max_position_embeddings 32768, sliding_window 4096)",
        ),
        gpt_shape(
            "gpt3-175b", layers=96, hidden=12288, heads=96, vocab=50257, positions=2048,
            source="Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1 and §2.1 "
                   "(FFN 4h, n_ctx 2048); GPT-2's 50257-token BPE vocabulary and tied embeddings "
                   "(Radford et al. 2019)",
        ),
        shape(
            "llama-3-405b", layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248,
            vocab=128256, max_positions=131072,
            source=_LLAMA3.format("Llama-3.1-405B") + "; max_position_embeddings 131072",
        ),
        # Megatron-LM's GPT models: Narayanan et al. 2021 Table 1 (weak scaling) and Korthikanti
        # et al. 2022 Table 3; vocabulary 51,200 (GPT-2's, padded), sequence 2,048, GPT layers.
        *(gpt_shape(f"megatron-gpt-{size}", layers=layers, hidden=hidden, heads=heads,
                    vocab=51200, positions=2048, source=source)
          for size, heads, hidden, layers, source in _MEGATRON_GPTS),
        shape(
            "mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
            max_positions=32768, experts=8, experts_per_token=2,
            source="Jiang et al. 2024, Mixtral of Experts, Table 1 (8 experts, top-2); config.json "
                   "of mistralai/Mixtral-8x7B-v0.1 (intermediate_size 14336 per expert, "
                   "num_local_experts 8, num_experts_per_tok 2, max_position_embeddings 32768, "
                   "sliding_window null)",
        ),
        # today's models: each shape is its released config.json, key for key
        # (trainmath.model.hfconfig reads the same file into the same shape: tests/test_hfconfig.py)
        shape(
            "qwen3-8b", layers=36, hidden=4096, heads=32, kv_heads=8, ffn=12288, vocab=151936,
            max_positions=40960, qk_norm="head",
            source="config.json of Qwen/Qwen3-8B (q_norm and k_norm per head, 8 key-value heads, "
                   "max_position_embeddings 40960); Yang et al. 2025, Qwen3 Technical Report, "
                   "Table 1",
        ),
        shape(
            "qwen3-30b-a3b", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144, vocab=151936,
            max_positions=40960, head_width=128, qk_norm="head", experts=128,
            experts_per_token=8, expert_ffn=768, hf_family="qwen3_moe",
            source="config.json of Qwen/Qwen3-30B-A3B (head_dim 128, 128 experts of 768, top 8, "
                   "no shared expert); Yang et al. 2025, Qwen3 Technical Report, Table 2",
        ),
        shape(
            "deepseek-v3", layers=61, hidden=7168, heads=128, ffn=18432, vocab=129280,
            max_positions=163840, head_width=192, rotary_dim=64, kv_rank=512, q_rank=1536,
            v_head_width=128, experts=256, experts_per_token=8, shared_experts=1,
            expert_ffn=2048, dense_layers=3, mtp_layers=1, hf_family="deepseek_v3",
            source="config.json of deepseek-ai/DeepSeek-V3 (kv_lora_rank 512, q_lora_rank 1536, "
                   "qk_nope 128 + qk_rope 64, v_head_dim 128; 256 routed experts of 2048 and 1 "
                   "shared, top 8; first_k_dense_replace 3; num_nextn_predict_layers 1); "
                   "DeepSeek-AI 2024, DeepSeek-V3 Technical Report, §2.1–2.2 and §4.2",
        ),
        shape(
            "gemma-2-9b", layers=42, hidden=3584, heads=16, kv_heads=8, ffn=14336, vocab=256000,
            mlp="geglu", tied_embeddings=True, max_positions=8192, sliding_window=4096,
            head_width=256, norm_placement="sandwich", global_every=2, attention_softcap=50.0,
            final_softcap=30.0, hf_family="gemma2",
            source="config.json of google/gemma-2-9b (head_dim 256, sliding_window 4096 on every "
                   "other layer, soft-caps 50 and 30); Gemma Team 2024, Gemma 2, Table 1 and §2",
        ),
        shape(
            "gpt-oss-20b", layers=24, hidden=2880, heads=64, kv_heads=8, ffn=2880, vocab=201088,
            bias=True, max_positions=131072, sliding_window=128, head_width=64, experts=32,
            experts_per_token=4, expert_ffn=2880, global_every=2, attention_sinks=True,
            hf_family="gpt_oss",
            source="config.json of openai/gpt-oss-20b (head_dim 64, 32 experts of 2880, top 4, "
                   "biases, sinks, a 128-token window on every other layer); OpenAI 2025, "
                   "gpt-oss-120b & gpt-oss-20b Model Card, §2",
        ),
        shape(
            "llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
            vocab=128256, max_positions=131072,
            source=_LLAMA3.format("Llama-3.1-8B") + "; max_position_embeddings 131072 (the "
                   "Llama 3 8B shape, trained on to 128K tokens, §3.4.2)",
        ),
        shape(
            "qwen2-7b", layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064,
            qkv_bias=True, max_positions=131072,
            source="config.json of Qwen/Qwen2-7B (biases on q, k and v; 4 key-value heads; "
                   "untied head); Yang et al. 2024, Qwen2 Technical Report, Table 1",
        ),
        shape(
            "qwen2.5-7b", layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064,
            qkv_bias=True, max_positions=131072,
            source="config.json of Qwen/Qwen2.5-7B (the Qwen2 7B shape; Qwen2.5-Math-7B keeps it "
                   "with max_position_embeddings 4096); Qwen Team 2024, Qwen2.5 Technical "
                   "Report, Table 1",
        ),
        shape(
            "qwen2.5-1.5b", layers=28, hidden=1536, heads=12, kv_heads=2, ffn=8960, vocab=151936,
            qkv_bias=True, tied_embeddings=True, max_positions=131072,
            source="config.json of Qwen/Qwen2.5-1.5B (tied embeddings, 2 key-value heads; "
                   "Qwen2.5-Math-1.5B keeps the shape with max_position_embeddings 4096); Qwen "
                   "Team 2024, Qwen2.5 Technical Report, Table 1",
        ),
        shape(
            "qwen2.5-14b", layers=48, hidden=5120, heads=40, kv_heads=8, ffn=13824, vocab=152064,
            qkv_bias=True, max_positions=131072,
            source="config.json of Qwen/Qwen2.5-14B (Qwen2.5-Coder-14B keeps the shape); Qwen "
                   "Team 2024, Qwen2.5 Technical Report, Table 1",
        ),
        shape(
            "qwen2-72b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=29568, vocab=152064,
            qkv_bias=True, max_positions=131072,
            source="config.json of Qwen/Qwen2-72B (biases on q, k and v; 8 key-value heads; "
                   "Qwen2.5-72B keeps the shape); "
                   "Yang et al. 2024, Qwen2 Technical Report, Table 1",
        ),
    )
}


@dataclass(frozen=True)
class TrainedWith:
    """How a preset model is commonly trained: the defaults :func:`trainmath.runs.description.run` assumes.

    ``recipe`` names a :data:`trainmath.memory.recipes.RECIPES` entry and ``implementation`` a
    :data:`trainmath.memory.kernels.IMPLEMENTATIONS` profile; ``source`` says where each comes
    from, or that it is assumed.
    """

    recipe: str
    implementation: str
    source: str


_NO_RECIPE = ("bf16-mixed: bf16 mixed precision as ZeRO §3.1 counts it (assumed: the paper names "
              "no framework recipe)")

#: The kernels and recipe each preset is commonly trained with (:class:`TrainedWith`); a shape
#: that is not a preset gets :data:`CUSTOM_DEFAULTS`.
#:
#: :meta hide-value:
TRAINING_DEFAULTS: dict[str, TrainedWith] = {
    **dict.fromkeys(("llama-2-7b", "llama-2-70b", "llama-33b", "llama-65b"), TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: attention that stores no s×s tensor, Touvron et al. 2023a (LLaMA) §2.4, "
        "kept for Llama 2 (Touvron et al. 2023b §2.2); " + _NO_RECIPE)),
    **dict.fromkeys(("llama-3-8b", "llama-3.1-8b", "llama-3-70b"), TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: FlashAttention-style kernels, as for Llama 2 (assumed: Dubey et al. 2024 "
        "do not name their attention kernel); " + _NO_RECIPE)),
    "mistral-7b": TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: FlashAttention and xFormers kernels for its sliding window, Jiang et al. "
        "2023 (Mistral 7B) §2; " + _NO_RECIPE),
    "llama-3-405b": TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: FlashAttention-style kernels, as for Llama 2 (assumed: Dubey et al. 2024 "
        "do not name their attention kernel); " + _NO_RECIPE),
    **dict.fromkeys([f"megatron-gpt-{g[0]}" for g in _MEGATRON_GPTS], TrainedWith(
        "megatron", "megatron-eager",
        "megatron: Megatron-LM's own recipe (16-bit weights, fp32 gradients and optimizer "
        "states), the framework the papers ran; megatron-eager: its unfused attention, the layer "
        "Korthikanti et al. 2022 §4.1 count (both papers predate FlashAttention)")),
    "gpt3-175b": TrainedWith(
        "bf16-mixed", "megatron-eager",
        "megatron-eager: Megatron-LM's unfused attention, the layer Korthikanti et al. 2022 §4.1 "
        "count for this shape (GPT-3 predates FlashAttention); " + _NO_RECIPE),
    **dict.fromkeys(("qwen3-8b", "qwen3-30b-a3b", "gemma-2-9b", "gpt-oss-20b", "qwen2-7b",
                     "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b", "qwen2-72b"), TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: FlashAttention-style kernels (assumed: the reports name no kernels); "
        + _NO_RECIPE)),
    "deepseek-v3": TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: FlashAttention-style kernels (assumed); bf16-mixed: ZeRO's 16 bytes "
        "(assumed: DeepSeek-AI 2024 §3.3 trained in FP8 with BF16 optimizer moments and FP32 "
        "master weights and gradients, a recipe not modelled here)"),
    "mixtral-8x7b": TrainedWith(
        "bf16-mixed", "megatron-te",
        "megatron-te: FlashAttention-style kernels, as for Mistral 7B, whose architecture Mixtral "
        "keeps (Jiang et al. 2024 §2; assumed: the paper names no kernels); " + _NO_RECIPE),
}

#: The defaults for a shape that is not a preset, or a parameter count: the ZeRO paper's count
#: and eq. 1's kernels (Korthikanti et al. 2022 §4.1).
CUSTOM_DEFAULTS = TrainedWith(
    "bf16-mixed", "megatron-eager",
    "assumed for a shape that is not a preset: bf16-mixed, the ZeRO paper's 16 bytes (§3.1), and "
    "megatron-eager, the kernels of Korthikanti et al. 2022's eq. 1")


def preset_like(model: ModelShape) -> str | None:
    """The name of the preset whose shape ``model`` has, every field but its name and source
    equal (a config.json read by :mod:`trainmath.model.hfconfig`, say), or None."""
    if PRESETS.get(model.name) == model:
        return model.name
    for p in PRESETS.values():
        if replace(p, name=model.name, source=model.source) == model:
            return p.name
    return None


def trained_with(model: ModelShape) -> TrainedWith:
    """The defaults for ``model``: its preset's (:data:`TRAINING_DEFAULTS`) when it has a
    preset's shape (:func:`preset_like`: the preset itself, or the same shape under another
    name, such as that model's config.json), else :data:`CUSTOM_DEFAULTS`."""
    like = preset_like(model)
    return CUSTOM_DEFAULTS if like is None else TRAINING_DEFAULTS[like]


def preset(name: str) -> ModelShape:
    """The preset shape called ``name``; a ValueError lists the known ones."""
    return PRESETS[choice("model preset", name, PRESETS)]
