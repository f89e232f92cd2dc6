"""Today's model families, measured as transformers builds them from their published config.json.

Each model here is a file of ``tests/data/hf-configs/`` (provenance in its ``SOURCES.json``),
optionally its ``text_config`` (a multimodal checkpoint's language model), with a few keys
overridden (fewer layers, so that a model too large for a step under fake tensors in a few
seconds keeps its real layer shapes). :meth:`ConfigFile.build` makes transformers' own model from
it: ``AutoConfig.for_model(model_type, **keys)``, then ``AutoModelForCausalLM.from_config`` (no
weights), training mode, ``use_cache=False``, with the attention implementation asked for.
``quantization_config`` (DeepSeek-V3's fp8 blocks, gpt-oss's mxfp4 experts) is kept as
published: ``from_config`` applies no quantizer, so every parameter is in the dtype asked for.

A record of one of them stores the file, its overrides and the keys read (``config``) instead of a
``shape``: the library reads the same keys (``trainmath.model.hfconfig.shape_from_config``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FOLDER = "tests/data/hf-configs"


@dataclass(frozen=True)
class ConfigFile:
    """One published config.json (or its ``text_config``), with the keys changed for the run."""

    name: str
    #: the file, relative to the repository root
    file: str
    #: keys replaced in the (text) config before transformers reads it
    overrides: dict[str, Any] = field(default_factory=dict)
    #: read the file's ``text_config`` (a multimodal checkpoint's language model)
    text_config: bool = False
    #: what the record should say about this model: what was changed and why
    notes: str = ""
    #: the attention implementations measured ("sdpa", "eager"), the first also for the step
    attentions: tuple[str, ...] = ("sdpa", "eager")
    #: what the record should say about one attention implementation (refusals, fallbacks)
    attention_notes: dict[str, str] = field(default_factory=dict)
    #: for a mixture of experts: how transformers runs the experts, what routing the bytes assume
    routing: str = ""
    #: attention implementations whose records the library does not predict, and why (a
    #: fallback only the CPU takes)
    not_compared: dict[str, str] = field(default_factory=dict)

    def published(self) -> dict[str, Any]:
        """The keys as published: the whole file, or its ``text_config``."""
        path = ROOT / self.file
        d = json.loads(path.read_text(encoding="utf-8"))
        if self.text_config:
            if "text_config" not in d:
                raise ValueError(f"{self.file} has no 'text_config'; accepted: a multimodal "
                                 "config.json that nests its language model's keys there")
            d = d["text_config"]
        return d

    def keys(self, layers: int | None = None) -> dict[str, Any]:
        """The published keys with the overrides applied, and ``layers`` decoder layers if given
        (a ``layer_types`` list is cut to the same length)."""
        d = self.published() | self.overrides
        if "model_type" not in d:
            raise ValueError(f"{self.file}: no 'model_type'; accepted: a config.json of a "
                             "transformers family")
        if layers is not None:
            if layers < 1:
                raise ValueError(f"layers = {layers}; accepted: 1 or more")
            d["num_hidden_layers"] = layers
            if isinstance(d.get("layer_types"), list):
                if len(d["layer_types"]) < layers:
                    raise ValueError(f"layers = {layers}: {self.file} lists only "
                                     f"{len(d['layer_types'])} layer_types")
                d["layer_types"] = d["layer_types"][:layers]
        return d

    @property
    def family(self) -> str:
        """transformers' ``model_type`` (of the ``text_config`` where that is read)."""
        return self.keys()["model_type"]

    @property
    def vocab(self) -> int:
        return self.keys()["vocab_size"]

    def notes_for(self, attention: str) -> str:
        """The record's notes for a run with ``attention``: the model's, the attention
        implementation's and the routing's, in that order."""
        if attention not in self.attentions:
            raise ValueError(f"attention {attention!r} for {self.name}; accepted: "
                             f"{', '.join(self.attentions)}")
        parts = (self.notes, self.attention_notes.get(attention, ""), self.routing)
        return " ".join(p for p in parts if p)

    def describe(self) -> dict[str, Any]:
        """What a record stores instead of a shape: ``{file, text_config, overrides, keys}``,
        ``keys`` being the (text) config as transformers read it, so that the library reads the
        same keys without opening the file (trainmath.checks.measured does no I/O)."""
        return {"file": self.file, "text_config": self.text_config,
                "overrides": dict(self.overrides),
                "keys": self.keys(self.overrides.get("num_hidden_layers"))}

    def transformers_config(self, attention: str, layers: int | None = None):
        """transformers' config object for these keys, for training without a cache."""
        from transformers import AutoConfig

        d = self.keys(layers)
        family = d.pop("model_type")
        d.pop("architectures", None)
        config = AutoConfig.for_model(family, **d)
        config.use_cache = False
        return config

    def build(self, attention: str, dtype, layers: int | None = None):
        """``AutoModelForCausalLM.from_config`` in training mode: no weights are read."""
        from transformers import AutoModelForCausalLM

        config = self.transformers_config(attention, layers)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype,
                                                 attn_implementation=attention)
        model.train()
        return model


def _file(name: str) -> str:
    return f"{FOLDER}/{name}"


_GROUPED_MM = (
    "Experts: transformers' default experts implementation, 'grouped_mm' "
    "(integrations/moe.py grouped_mm_experts_forward): the token copies are sorted by expert, "
    "one torch.nn.functional.grouped_mm per projection with offsets from a histogram of the "
    "expert ids. Routing: every tensor it saves is per (token, chosen expert) pair, top-k rows "
    "a token, or per expert (the offsets), whatever experts the router picks, so the bytes "
    "assume no routing: under fake tensors the router's choice has no values at all, and "
    "validate/test_hf_families.py checks that real tensors, routed unevenly by a real router "
    "with random weights, save exactly the same at small widths.")
_DEEPSEEK = (
    "num_hidden_layers 61 -> 5 (first_k_dense_replace 3 kept: layers 0-2 dense, 3-4 MoE), so "
    "that both kinds of layer are measured at their real widths and a step runs under fake "
    "tensors in seconds; num_nextn_predict_layers 1 -> 0, since transformers does not build "
    "the multi-token-prediction module (the record then says what was built); every other key "
    "as published (quantization_config fp8 is kept and ignored by from_config: bf16 "
    "parameters).")
_DEEPSEEK_SDPA = (
    "SDPA on the CPU: multi-head latent attention gives SDPA a query and key head dim of 192 "
    "(qk_nope 128 + qk_rope 64) and a value head dim of 128; PyTorch's CPU flash kernel needs "
    "one head dim for all three (sdp_utils_cpp.cpp: 'Flash attention requires q,k,v to have "
    "the same last dimension'), so SDPA runs its math fallback (attention_ops: _safe_softmax): "
    "fp32 copies of the scaled Q and Kᵀ, fp32 probabilities s×s per head and an fp32 V are "
    "saved. A GPU may pick a fused kernel that takes a different value head dim (not measured "
    "here).")
_GEMMA2_SDPA = (
    "transformers' SDPA path drops the attention soft-capping: sdpa_attention_forward takes the "
    "softcap argument (attn_logit_softcapping 50.0) and ignores it, so hf-sdpa computes "
    "attention without tanh capping, silently (validate/test_hf_families.py checks it); the "
    "final logit soft-capping (30.0) runs as in eager.")
_GEMMA2_EAGER = (
    "Eager applies the attention soft-capping (tanh, 50.0) to the scores before the softmax and "
    "the final logit soft-capping (30.0).")
_GPT_OSS = (
    "As published (24 layers; quantization_config mxfp4 is kept and ignored by from_config: "
    "bf16 experts). transformers refuses SDPA for gpt_oss (GptOssPreTrainedModel._supports_sdpa "
    "is False: from_config with attn_implementation='sdpa' raises a ValueError; "
    "validate/test_hf_families.py checks it), so only eager is measured: the per-head sinks "
    "are concatenated to the scores and the softmax runs over s + 1 columns in bf16.")
_LLAMA4 = (
    "text_config, num_hidden_layers 48 -> 4 (no_rope_layers makes every 4th layer NoPE global "
    "attention and the other three chunked attention with rope: 4 layers hold one of each "
    "pattern), so that a step runs under fake tensors in seconds; every other key as published "
    "(interleave_moe_layer_step 1: every layer MoE).")
_LLAMA4_EXPERTS = (
    "Experts: transformers' Llama4TextExperts, which the experts interface does not dispatch "
    "(its own forward): every token goes through every expert, scaled by the router's sigmoid "
    "score (zero outside its top 1): the hidden states are repeated for all 16 experts and one "
    "bmm runs per projection over all of them. Routing: the bytes do not depend on it; they are "
    "those of 16 experts for every token, not of the 1 chosen.")

#: The models measured from their config.json, by the name their ids use.
CONFIG_FILES: dict[str, ConfigFile] = {c.name: c for c in (
    ConfigFile("qwen3-8b", _file("Qwen3-8B.json"), notes="As published (36 layers)."),
    ConfigFile("qwen3-30b-a3b", _file("Qwen3-30B-A3B.json"), routing=_GROUPED_MM,
               notes="As published (48 layers, every one MoE: 128 experts, top 8)."),
    ConfigFile("deepseek-v3", _file("DeepSeek-V3.json"),
               {"num_hidden_layers": 5, "num_nextn_predict_layers": 0},
               notes=_DEEPSEEK, attentions=("eager", "sdpa"),
               attention_notes={"sdpa": _DEEPSEEK_SDPA}, routing=_GROUPED_MM,
               not_compared={"sdpa": "PyTorch's CPU math fallback for unequal query and value "
                                     "head dims (notes); the library counts the fused kernel a "
                                     "GPU runs"}),
    ConfigFile("gemma-2-9b", _file("gemma-2-9b.json"),
               notes="As published (42 layers, sliding window 4096 on the even layers).",
               attention_notes={"sdpa": _GEMMA2_SDPA, "eager": _GEMMA2_EAGER}),
    ConfigFile("gpt-oss-20b", _file("gpt-oss-20b.json"), notes=_GPT_OSS, attentions=("eager",),
               routing=_GROUPED_MM),
    ConfigFile("olmo-2-7b", _file("OLMo-2-1124-7B.json"), notes="As published (32 layers)."),
    ConfigFile("gemma-3-12b", _file("gemma-3-12b-it.json"), text_config=True,
               notes="text_config only (the language model, Gemma3ForCausalLM, no vision tower), "
                     "as published (48 layers: 5 with a sliding window of 1024, then 1 global)."),
    ConfigFile("llama-4-scout", _file("Llama-4-Scout-17B-16E-Instruct.json"),
               {"num_hidden_layers": 4}, text_config=True, notes=_LLAMA4,
               routing=_LLAMA4_EXPERTS),
)}


def config_file(name: str) -> ConfigFile:
    """The :class:`ConfigFile` called ``name``; a ValueError lists the names there are."""
    try:
        return CONFIG_FILES[name]
    except KeyError:
        raise ValueError(f"no config.json model {name!r}; accepted: "
                         f"{', '.join(CONFIG_FILES)}") from None
