"""A Hugging Face ``config.json`` read into a :class:`~trainmath.model.shape.ModelShape`.

Hugging Face transformers keeps a model's shape in ``config.json`` under names of its own, one
set per family (``LlamaConfig``, ``GPT2Config``, ``GPTNeoXConfig``, ... in
``transformers/models/<family>/configuration_<family>.py``). :func:`shape_from_config` maps
the families below onto the library's fields, key by key, and refuses what it cannot map:

============  ===============================================================================
family        what its config says, and the shape it gives
============  ===============================================================================
llama         SwiGLU (``hidden_act`` silu), RMSNorm, rotary positions, GQA, no biases unless
              ``attention_bias`` (q, k, v and o) or ``mlp_bias``
mistral       as llama, with ``sliding_window``
mixtral       as mistral, the MLP a mixture of ``num_local_experts`` experts, top
              ``num_experts_per_tok``, each ``intermediate_size`` wide
qwen2         as mistral, with biases on q, k and v only (``Qwen2Attention``); the window
              applies only with ``use_sliding_window``
gemma         GeGLU (a GeLU-gated MLP), RMSNorm, ``head_dim`` (256 for gemma-7b, not h / a),
              tied embeddings (``GemmaConfig``'s default)
gpt2          GeLU MLP 4h wide (``n_inner`` null), LayerNorm, biases, dropout, ``n_positions``
              learned positions, tied embeddings
gpt_neox      GeLU MLP, LayerNorm, biases, untied ``embed_out``, ``rotary_pct`` of each head
              rotated (GPT-NeoX-20B and Pythia)
============  ===============================================================================

A key that is missing is looked up in the family's configuration class defaults only where
transformers itself defaults it (``tie_word_embeddings``, ``num_key_value_heads``,
``head_dim``, ``sliding_window``, ...); the shape's sizes (hidden size, layers, heads,
MLP width, vocabulary) must be in the file. A missing size, an unknown family or keys that
contradict each other raise a ValueError naming the key and what is accepted.

>>> m = shape_from_config({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
...     "vocab_size": 128256, "max_position_embeddings": 8192, "hidden_act": "silu"},
...     name="Meta-Llama-3-8B")
>>> from trainmath.model.shape import param_count
>>> param_count(m)
8030261248
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from .shape import ModelShape, shape


#: ``model_type`` by the architecture class a config lists in ``architectures``, for configs
#: that give only the latter.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "GemmaForCausalLM": "gemma",
    "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
    "GptOssForCausalLM": "gpt_oss",
    "Olmo2ForCausalLM": "olmo2",
    "Mistral3ForConditionalGeneration": "mistral3",
    "Ministral3ForCausalLM": "ministral3",
}

#: ``hidden_act`` values that make a gated MLP SwiGLU (SiLU is Swish with β = 1).
_SILU = ("silu", "swish")
#: ``hidden_act`` / ``activation_function`` values that are a GeLU (exact or approximated).
_GELU = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python")


#: Sizes a family's released configs leave out and its configuration class fills in
#: (transformers' ``Gemma3TextConfig``: google/gemma-3-4b-it's and -27b-it's ``text_config``
#: give no vocabulary, 4b's no heads either).
CLASS_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma3_text": {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256},
}


class _Keys:
    """A config's keys, read with messages that name the key and the family."""

    def __init__(self, d: dict[str, Any], family: str) -> None:
        self.d, self.family = d, family
        self.defaults = CLASS_DEFAULTS.get(family, {})

    def size(self, key: str) -> int:
        """A required positive whole number (or its configuration class's default, where the
        family's released configs rely on it: :data:`CLASS_DEFAULTS`)."""
        if key not in self.d or self.d[key] is None:
            if key in self.defaults:
                return self.defaults[key]
            raise ValueError(f"config.json of a {self.family!r} model has no {key!r}; accepted: a "
                             "positive whole number (the family's configuration requires it)")
        return self.whole(key, self.d[key])

    def refuse(self, key: str, modelled: Any, why: str) -> None:
        """A key whose value changes the arithmetic in a way the library does not model: refused
        by name unless it has the ``modelled`` value (or is absent)."""
        value = self.d.get(key)
        if value is not None and value != modelled:
            raise ValueError(f"config.json key {key!r} is {value!r} for a {self.family!r} model: "
                             f"{why}, which is not modelled; accepted: {modelled!r}")

    def whole(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"config.json key {key!r} is {value!r}; accepted: a positive whole "
                             "number")
        return value

    def get(self, key: str, default: Any) -> Any:
        """An optional key, with the default the family's configuration class gives it."""
        value = self.d.get(key)
        if value is None:
            return self.defaults.get(key, default)
        return value

    def number(self, key: str, default: float = 0.0) -> float:
        """An optional non-negative number (a cap, a factor); null or absent is ``default``."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"config.json key {key!r} is {value!r}; accepted: a non-negative "
                             "number or null")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"config.json key {key!r} is {value!r}; accepted: true or false")
        return value

    def activation(self, key: str, accepted: tuple[str, ...], default: str | None = None) -> str:
        value = self.get(key, default)
        if value not in accepted:
            raise ValueError(f"config.json key {key!r} is {value!r} for a {self.family!r} model; "
                             f"accepted: {', '.join(accepted)}")
        return value


def family_of(d: dict[str, Any]) -> str:
    """The family of a config: its ``model_type``, else that of its first ``architectures``
    entry; a ValueError names the accepted ones."""
    if not isinstance(d, dict):
        raise ValueError(f"a config must be a JSON object, got {type(d).__name__}")
    accepted = ", ".join((*_FAMILIES, *COMPOSITE))
    model_type = d.get("model_type")
    archs = d.get("architectures") or []
    if model_type is None:
        for arch in archs:
            if arch in ARCHITECTURES:
                return ARCHITECTURES[arch]
        raise ValueError(f"config.json has no 'model_type' and no known 'architectures' entry "
                         f"(got {archs!r}); accepted model_type: {accepted}")
    if model_type not in _FAMILIES and model_type not in COMPOSITE:
        raise ValueError(f"config.json 'model_type' {model_type!r} is not a family this library "
                         f"reads; accepted: {accepted}")
    for arch in archs:
        if arch in ARCHITECTURES and ARCHITECTURES[arch] != model_type:
            raise ValueError(f"config.json 'architectures' lists {arch!r}, a "
                             f"{ARCHITECTURES[arch]!r} model, but 'model_type' is {model_type!r}; "
                             "accepted: an architecture of that model_type")
    return model_type


def _attention(k: _Keys, hidden: int, heads: int, head_dim_key: bool) -> tuple[int, int]:
    """(kv_heads, head_width) checked: kv heads divide the heads, and a ``head_dim`` key agrees
    with h / a where the family has no separate head width."""
    kv = k.whole("num_key_value_heads", k.get("num_key_value_heads", heads))
    if heads % kv:
        raise ValueError(f"config.json 'num_key_value_heads' {kv} does not divide "
                         f"'num_attention_heads' {heads}; accepted: a divisor of {heads}")
    head_dim = k.get("head_dim", None)
    if head_dim is None:
        if hidden % heads:
            raise ValueError(f"config.json 'hidden_size' {hidden} is not divisible by "
                             f"'num_attention_heads' {heads} and there is no 'head_dim'; "
                             "accepted: a multiple of the heads, or a head_dim key")
        return kv, 0
    head_dim = k.whole("head_dim", head_dim)
    if head_dim * heads == hidden:
        return kv, 0
    if not head_dim_key:
        raise ValueError(f"config.json 'head_dim' {head_dim} × 'num_attention_heads' {heads} = "
                         f"{head_dim * heads} contradicts 'hidden_size' {hidden}; a "
                         f"{k.family!r} model has heads of h / a; accepted: head_dim = "
                         f"{hidden // heads if hidden % heads == 0 else 'hidden_size / heads'}")
    return kv, head_dim


def _common(k: _Keys) -> dict[str, Any]:
    """The keys Llama, Mistral, Mixtral, Qwen2 and Gemma share."""
    hidden = k.size("hidden_size")
    heads = k.size("num_attention_heads")
    positions = k.get("max_position_embeddings", None)
    return dict(layers=k.size("num_hidden_layers"), hidden=hidden, heads=heads,
                ffn=k.size("intermediate_size"), vocab=k.size("vocab_size"),
                max_positions=0 if positions is None else k.whole("max_position_embeddings",
                                                                  positions),
                norm="rmsnorm")


def _llama_like(k: _Keys, *, head_dim_key: bool = True, window: bool = False,
                tied_default: bool = False) -> dict[str, Any]:
    out = _common(k)
    k.activation("hidden_act", _SILU, "silu")
    kv, width = _attention(k, out["hidden"], out["heads"], head_dim_key)
    bias = k.flag("attention_bias", False)
    mlp_bias = k.flag("mlp_bias", False)
    if bias != mlp_bias:
        raise ValueError(f"config.json 'attention_bias' {bias} with 'mlp_bias' {mlp_bias} is not "
                         "modelled; accepted: both false (every released model) or both true")
    out.update(kv_heads=kv, head_width=width, mlp="swiglu", bias=bias,
               tied_embeddings=k.flag("tie_word_embeddings", tied_default))
    window_size = k.get("sliding_window", None) if window else None
    if window_size is not None:
        out["sliding_window"] = k.whole("sliding_window", window_size)
    return out


def _llama(k: _Keys) -> dict[str, Any]:
    return _llama_like(k)


def _mistral(k: _Keys) -> dict[str, Any]:
    return _llama_like(k, window=True)


def _mixtral(k: _Keys) -> dict[str, Any]:
    out = _llama_like(k, window=True)
    experts = k.size("num_local_experts")
    top_k = k.size("num_experts_per_tok")
    if top_k > experts:
        raise ValueError(f"config.json 'num_experts_per_tok' {top_k} exceeds 'num_local_experts' "
                         f"{experts}; accepted: 1 to {experts}")
    out.update(experts=experts, experts_per_token=top_k)
    return out


def _qwen2(k: _Keys) -> dict[str, Any]:
    out = _llama_like(k)
    out["bias"] = False
    out["qkv_bias"] = True  # Qwen2Attention: q_proj, k_proj, v_proj with bias=True, o_proj none
    # Qwen2 applies its window only with use_sliding_window (configuration_qwen2.py)
    if k.flag("use_sliding_window", False) and k.get("sliding_window", None) is not None:
        out["sliding_window"] = k.whole("sliding_window", k.d["sliding_window"])
    return out


def _gemma(k: _Keys) -> dict[str, Any]:
    out = _common(k)
    # GemmaMLP applies hidden_activation (gelu_pytorch_tanh) to the gate; older configs say
    # hidden_act "gelu". Either way a GeLU-gated MLP.
    for key in ("hidden_activation", "hidden_act"):
        if k.get(key, None) is not None:
            k.activation(key, _GELU)
    kv, width = _attention(k, out["hidden"], out["heads"], True)
    bias = k.flag("attention_bias", False)
    if bias:
        raise ValueError("config.json 'attention_bias' true is not modelled for a 'gemma' model; "
                         "accepted: false (every released Gemma)")
    out.update(kv_heads=kv, head_width=width, mlp="geglu",
               tied_embeddings=k.flag("tie_word_embeddings", True))  # GemmaConfig's default
    return out


def _gpt2(k: _Keys) -> dict[str, Any]:
    hidden = k.size("n_embd")
    heads = k.size("n_head")
    if hidden % heads:
        raise ValueError(f"config.json 'n_embd' {hidden} is not divisible by 'n_head' {heads}; "
                         "accepted: a multiple of the heads")
    k.activation("activation_function", _GELU, "gelu_new")
    inner = k.get("n_inner", None)
    ffn = 4 * hidden if inner is None else k.whole("n_inner", inner)
    positions = k.size("n_positions")
    return dict(layers=k.size("n_layer"), hidden=hidden, heads=heads, ffn=ffn,
                vocab=k.size("vocab_size"), mlp="gelu", norm="layernorm", bias=True,
                tied_embeddings=k.flag("tie_word_embeddings", True), positions=positions,
                dropout=any(k.get(p, 0.1) for p in ("attn_pdrop", "resid_pdrop", "embd_pdrop")))


def _gpt_neox(k: _Keys) -> dict[str, Any]:
    out = _common(k)
    out["norm"] = "layernorm"
    k.activation("hidden_act", _GELU, "gelu")
    hidden, heads = out["hidden"], out["heads"]
    if hidden % heads:
        raise ValueError(f"config.json 'hidden_size' {hidden} is not divisible by "
                         f"'num_attention_heads' {heads}; accepted: a multiple of the heads")
    if not k.flag("attention_bias", True):
        raise ValueError("config.json 'attention_bias' false is not modelled for a 'gpt_neox' "
                         "model; accepted: true (GPT-NeoX-20B and Pythia)")
    pct = k.get("rotary_pct", 0.25)  # GPTNeoXConfig's default
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 1:
        raise ValueError(f"config.json 'rotary_pct' is {pct!r}; accepted: a number in (0, 1]")
    rotary = int(hidden // heads * pct)  # GPTNeoXAttention: int(head_size * rotary_pct)
    out.update(mlp="gelu", bias=True, tied_embeddings=k.flag("tie_word_embeddings", False),
               rotary_dim=0 if rotary == hidden // heads else rotary,
               dropout=bool(k.get("attention_dropout", 0.0) or k.get("hidden_dropout", 0.0)))
    return out


def _global_period(k: _Keys, types_key: str, local_names: tuple[str, ...], default: int) -> int:
    """Every how-many-th layer attends globally, from a ``layer_types`` list (each entry
    "sliding_attention", "chunked_attention" or "full_attention"), or ``default`` without one;
    0 when every layer is local. A list that is not periodic is refused by name."""
    types = k.d.get(types_key)
    if types is None:
        return default
    if not isinstance(types, list) or not types:
        raise ValueError(f"config.json key {types_key!r} is {types!r}; accepted: a list of layer "
                         "types")
    full = [i for i, t in enumerate(types) if t not in local_names]
    if not full:
        return 0
    period = full[0] + 1
    if [i for i in range(len(types)) if (i + 1) % period == 0] != full:
        raise ValueError(f"config.json {types_key!r} puts global attention on layers {full[:6]}…, "
                         f"not every {period}th; accepted: a periodic pattern (layer i global "
                         "when (i + 1) is a multiple of the period)")
    return period


def _every_other_window(k: _Keys) -> dict[str, Any]:
    """A sliding window on alternate layers (Gemma 2's and gpt-oss's ``layer_types``, every
    other one "sliding_attention" by default): the window and the global period; none without
    ``sliding_window``."""
    window = k.get("sliding_window", None)
    if window is None:
        return {}
    return dict(sliding_window=k.whole("sliding_window", window),
                global_every=_global_period(k, "layer_types", ("sliding_attention",), 2))


def _qwen3(k: _Keys) -> dict[str, Any]:
    out = _llama_like(k)
    k.refuse("attention_bias", False, "biases on q, k, v and o only")
    k.refuse("use_sliding_window", False, "a window on the layers up to max_window_layers")
    out["qk_norm"] = "head"  # Qwen3Attention: q_norm and k_norm over head_dim
    return out


def _qwen3_moe(k: _Keys) -> dict[str, Any]:
    out = _qwen3(k)
    k.refuse("mlp_only_layers", [], "dense MLPs on listed layers")
    experts, top_k = k.size("num_experts"), k.size("num_experts_per_tok")
    _top_k(experts, top_k, "num_experts")
    out.update(experts=experts, experts_per_token=top_k,
               expert_ffn=k.size("moe_intermediate_size"),
               moe_every=k.whole("decoder_sparse_step", k.get("decoder_sparse_step", 1)))
    return out


def _top_k(experts: int, top_k: int, key: str) -> None:
    if top_k > experts:
        raise ValueError(f"config.json 'num_experts_per_tok' {top_k} exceeds {key!r} {experts}; "
                         f"accepted: 1 to {experts}")


def _deepseek(k: _Keys) -> dict[str, Any]:
    """DeepSeek-V2 and V3: multi-head latent attention, DeepSeekMoE, dense first layers."""
    out = _common(k)
    k.activation("hidden_act", _SILU, "silu")
    k.refuse("attention_bias", False, "biases on the down-projections")
    k.refuse("mlp_bias", False, "biases on the MLPs")
    k.refuse("moe_layer_freq", 1, "a mixture on every n-th layer only")
    nope, rope = k.size("qk_nope_head_dim"), k.size("qk_rope_head_dim")
    q_rank = k.d["q_lora_rank"] if "q_lora_rank" in k.d else 1536  # DeepseekV2/V3Config default
    experts, top_k = k.size("n_routed_experts"), k.size("num_experts_per_tok")
    _top_k(experts, top_k, "n_routed_experts")
    out.update(kv_heads=out["heads"], head_width=nope + rope, rotary_dim=rope,
               kv_rank=k.size("kv_lora_rank"),
               q_rank=0 if q_rank is None else k.whole("q_lora_rank", q_rank),
               v_head_width=k.size("v_head_dim"), mlp="swiglu",
               tied_embeddings=k.flag("tie_word_embeddings", False),
               experts=experts, experts_per_token=top_k,
               shared_experts=int(k.get("n_shared_experts", 0) or 0),
               expert_ffn=k.size("moe_intermediate_size"),
               dense_layers=int(k.get("first_k_dense_replace", 0) or 0),
               mtp_layers=int(k.get("num_nextn_predict_layers", 0) or 0))
    return out


def _gemma2(k: _Keys) -> dict[str, Any]:
    out = _gemma(k)
    out.update(norm_placement="sandwich",  # Gemma2DecoderLayer: four norms
               attention_softcap=k.number("attn_logit_softcapping"),
               final_softcap=k.number("final_logit_softcapping"), **_every_other_window(k))
    return out


def _gemma3_text(k: _Keys) -> dict[str, Any]:
    out = _gemma2(k)
    out["qk_norm"] = "head"  # Gemma3Attention: q_norm and k_norm over head_dim
    if out.get("sliding_window"):  # Gemma3TextConfig: sliding_window_pattern, default 6
        period = k.whole("sliding_window_pattern", k.get("sliding_window_pattern", 6))
        out["global_every"] = _global_period(k, "layer_types", ("sliding_attention",), period)
    return out


def _phi3(k: _Keys) -> dict[str, Any]:
    out = _llama_like(k, window=True)
    # Phi3Attention and Phi3MLP have no biases whatever attention_bias says (bias=False)
    out.update(bias=False)
    factor = k.number("partial_rotary_factor", 1.0)
    if not 0 < factor <= 1:
        raise ValueError(f"config.json 'partial_rotary_factor' is {factor!r}; accepted: (0, 1]")
    head = out["head_width"] or out["hidden"] // out["heads"]
    rotary = int(head * factor)  # Phi3RotaryEmbedding: int(head_dim * partial_rotary_factor)
    out.update(rotary_dim=0 if rotary == head else rotary,
               dropout=bool(k.get("resid_pdrop", 0.0) or k.get("embd_pdrop", 0.0)
                            or k.get("attention_dropout", 0.0)))
    return out


def _llama4_text(k: _Keys) -> dict[str, Any]:
    out = _llama_like(k)
    k.refuse("attention_bias", False, "biases on q, k, v and o only")
    experts, top_k = k.size("num_local_experts"), k.size("num_experts_per_tok")
    _top_k(experts, top_k, "num_local_experts")
    chunk = k.get("attention_chunk_size", None)
    out.update(qk_norm="l2" if k.flag("use_qk_norm", True) else "",
               experts=experts, experts_per_token=top_k, shared_experts=1,
               expert_ffn=k.size("intermediate_size"),
               ffn=k.size("intermediate_size_mlp") if "intermediate_size_mlp" in k.d
               else k.size("intermediate_size"),
               moe_every=k.whole("interleave_moe_layer_step",
                                 k.get("interleave_moe_layer_step", 1)))
    if chunk is not None:
        out["attention_chunk"] = k.whole("attention_chunk_size", chunk)
        interval = k.whole("no_rope_layer_interval", k.get("no_rope_layer_interval", 4))
        out["global_every"] = _global_period(k, "layer_types", ("chunked_attention",), interval)
    return out


def _gpt_oss(k: _Keys) -> dict[str, Any]:
    out = _common(k)
    k.activation("hidden_act", _SILU, "silu")
    k.refuse("attention_bias", True, "attention without its biases")
    kv, width = _attention(k, out["hidden"], out["heads"], True)
    experts = k.size("num_local_experts")
    top_k = k.size("num_experts_per_tok") if "num_experts_per_tok" in k.d \
        else k.size("experts_per_token")
    _top_k(experts, top_k, "num_local_experts")
    out.update(kv_heads=kv, head_width=width, mlp="swiglu", bias=True, attention_sinks=True,
               tied_embeddings=k.flag("tie_word_embeddings", False), experts=experts,
               experts_per_token=top_k, expert_ffn=k.size("intermediate_size"),
               **_every_other_window(k))
    return out


def _olmo2(k: _Keys) -> dict[str, Any]:
    out = _llama_like(k)
    k.refuse("attention_bias", False, "biases on q, k, v and o only")
    out.update(norm_placement="post",  # Olmo2DecoderLayer: norms after attention and the MLP
               qk_norm="full")  # Olmo2Attention: q_norm (a·d) and k_norm (kv·d)
    return out


def _ministral3(k: _Keys) -> dict[str, Any]:
    return _llama_like(k, window=True)


_FAMILIES: dict[str, Callable[[_Keys], dict[str, Any]]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2,
    "gemma": _gemma, "gpt2": _gpt2, "gpt_neox": _gpt_neox,
    "qwen3": _qwen3, "qwen3_moe": _qwen3_moe, "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "gemma2": _gemma2, "gemma3_text": _gemma3_text, "phi3": _phi3, "llama4_text": _llama4_text,
    "gpt_oss": _gpt_oss, "olmo2": _olmo2, "ministral3": _ministral3,
}
#: Families whose config nests the language model under ``text_config`` (a vision model and a
#: projector beside it, which are not counted), and the text model's family when the nested
#: config does not say.
COMPOSITE: dict[str, str] = {"gemma3": "gemma3_text", "llama4": "llama4_text",
                             "mistral3": "mistral"}
#: The families whose transformers code saves other tensors than Llama's: their shapes name
#: it (``hf_family``, :data:`trainmath.memory.hf_families.HF_FAMILIES` says how it differs).
OWN_CODE = ("gemma", "gemma2", "gemma3_text", "olmo2", "qwen3_moe", "deepseek_v2",
            "deepseek_v3", "gpt_oss", "llama4_text")
#: The families :func:`shape_from_config` reads (``model_type`` values).
FAMILIES = tuple(_FAMILIES)


def shape_from_config(d: dict[str, Any], name: str = "config.json", source: str = "") -> ModelShape:
    """The :class:`~trainmath.model.shape.ModelShape` a Hugging Face ``config.json`` describes.

    ``d`` is the parsed JSON object; ``name`` names the shape (:func:`load_config` uses the
    file's path). The family comes from ``model_type`` (or ``architectures``), see the module
    docstring for what each family maps to.
    """
    family = family_of(d)
    outer = family
    if family in COMPOSITE:  # the language model sits under text_config
        text = d.get("text_config")
        if not isinstance(text, dict):
            raise ValueError(f"config.json of a {family!r} model has no 'text_config' object; "
                             "accepted: the composite config as released, with its text_config")
        d = text
        family = text.get("model_type") or COMPOSITE[outer]
        if family not in _FAMILIES:
            raise ValueError(f"config.json 'text_config' 'model_type' {family!r} is not a family "
                             f"this library reads; accepted: {', '.join(_FAMILIES)}")
    fields = _FAMILIES[family](_Keys(d, family))
    if family in OWN_CODE:
        fields["hf_family"] = family
    what = family if outer == family else f"{outer}, its text_config {family}"
    return shape(name, source=source or f"config.json ({what})", **fields)


#: The deepest nesting of objects and arrays :func:`load_config` reads. A Hugging Face
#: config.json nests a few levels (a composite model's ``text_config`` holding ``rope_scaling``);
#: a text nested thousands deep is not one, and would exhaust Python's stack in the decoder
#: (in the browser's Pyodide, before its recursion limit: a crash, not an error).
MAX_JSON_DEPTH = 64


def json_depth(text: str) -> int:
    """How deep ``text``'s brackets nest (``{``, ``[``), outside its strings: counted without
    decoding, so that any text can be measured.

    >>> json_depth('{"a": [1, {"b": "[[["}]}'), json_depth("[" * 100000 + "]" * 100000)
    (3, 100000)
    """
    depth = deepest = 0
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', text):
        c = token.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def load_config(path: str | Path, name: str | None = None) -> ModelShape:
    """Read a ``config.json`` file into a shape named ``name`` (default: the path as given)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read config {str(path)!r}: {exc.strerror}; accepted: the path "
                         "of a Hugging Face config.json") from None
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"config {str(path)!r} nests {depth} levels of brackets; accepted: a "
                         f"Hugging Face config.json (at most {MAX_JSON_DEPTH} levels)")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"config {str(path)!r} is not JSON ({exc.msg}, line {exc.lineno}); "
                         "accepted: a Hugging Face config.json") from None
    return shape_from_config(d, name=str(path) if name is None else name,
                             source=f"config.json at {path}")
