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
}

#: ``hidden_act`` values that make a gated MLP SwiGLU (SiLU is Swish with β = 1).
_SILU = ("silu", "swish")
#: ``hidden_act`` / ``activation_function`` values that are a GeLU (exact or approximated).
_GELU = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python")


class _Keys:
    """A config's keys, read with messages that name the key and the family."""

    def __init__(self, d: dict[str, Any], family: str) -> None:
        self.d, self.family = d, family

    def size(self, key: str) -> int:
        """A required positive whole number."""
        if key not in self.d or self.d[key] is None:
            raise ValueError(f"config.json of a {self.family!r} model has no {key!r}; accepted: a "
                             "positive whole number (the family's configuration requires it)")
        return self.whole(key, self.d[key])

    def whole(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"config.json key {key!r} is {value!r}; accepted: a positive whole "
                             "number")
        return value

    def get(self, key: str, default: Any) -> Any:
        """An optional key, with the default the family's configuration class gives it."""
        value = self.d.get(key)
        return default if value is None else value

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
    accepted = ", ".join(_FAMILIES)
    model_type = d.get("model_type")
    archs = d.get("architectures") or []
    if model_type is None:
        for arch in archs:
            if arch in ARCHITECTURES:
                return ARCHITECTURES[arch]
        raise ValueError(f"config.json has no 'model_type' and no known 'architectures' entry "
                         f"(got {archs!r}); accepted model_type: {accepted}")
    if model_type not in _FAMILIES:
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


_FAMILIES: dict[str, Callable[[_Keys], dict[str, Any]]] = {
    "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "qwen2": _qwen2,
    "gemma": _gemma, "gpt2": _gpt2, "gpt_neox": _gpt_neox,
}
#: The families :func:`shape_from_config` reads (``model_type`` values).
FAMILIES = tuple(_FAMILIES)


def shape_from_config(d: dict[str, Any], name: str = "config.json", source: str = "") -> ModelShape:
    """The :class:`~trainmath.model.shape.ModelShape` a Hugging Face ``config.json`` describes.

    ``d`` is the parsed JSON object; ``name`` names the shape (:func:`load_config` uses the
    file's path). The family comes from ``model_type`` (or ``architectures``), see the module
    docstring for what each family maps to.
    """
    family = family_of(d)
    fields = _FAMILIES[family](_Keys(d, family))
    return shape(name, source=source or f"config.json ({family})", **fields)


def load_config(path: str | Path, name: str | None = None) -> ModelShape:
    """Read a ``config.json`` file into a shape named ``name`` (default: the path as given)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read config {str(path)!r}: {exc.strerror}; accepted: the path "
                         "of a Hugging Face config.json") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"config {str(path)!r} is not JSON ({exc.msg}, line {exc.lineno}); "
                         "accepted: a Hugging Face config.json") from None
    return shape_from_config(d, name=str(path) if name is None else name,
                             source=f"config.json at {path}")
