"""Where transformers' own code for a family saves other tensors than ``LlamaForCausalLM``.

The "hf" kernels (:mod:`trainmath.memory.kernels`) count what Hugging Face's Llama, Mistral and
Mixtral code saves for backward. Qwen 2 and 3 and Phi-3 run the same code paths; other families
differ in four places, each read from the family's ``modeling_*.py`` (transformers 5.18) and
measured tensor by tensor under fake tensors (validate/measure, recorded in
``docs/_data/measurements.json``):

- **the RMSNorm's weight.** ``LlamaRMSNorm`` multiplies ``weight * x.to(input_dtype)`` and so
  keeps the 16-bit normalised input for the weight's gradient; ``Olmo2RMSNorm`` and
  ``GptOssRMSNorm`` multiply in fp32 before casting (``(self.weight * hidden_states)
  .to(input_dtype)``), keeping it in fp32; ``GemmaRMSNorm`` (Gemma 1, 2, 3) multiplies by
  ``1.0 + self.weight.float()`` in fp32, keeping the fp32 normalised input and the fp32
  ``1 + weight`` (one value per channel) for each norm.
- **eager attention's softmax.** Llama's ``eager_attention_forward`` runs
  ``softmax(..., dtype=torch.float32).to(query.dtype)``: an fp32 output and its 16-bit copy.
  Llama 4's and gpt-oss's run the softmax in the model's dtype: one 16-bit tensor, and
  gpt-oss keeps the int64 index of each row's maximum, taken over the scores and the sink
  before its softmax.
- **the router.** Mixtral's and Qwen3-MoE's softmax over all E experts in fp32, top k, and the
  sum that renormalises them (Qwen3-MoE gathers each copy's weight in 16 bits); DeepSeek's
  routers (``DeepseekV2Moe``'s gate, ``DeepseekV3TopkRouter``) compute their logits from an
  fp32 copy of the input and of the weight, then a softmax (V2) or a sigmoid (V3) over the E
  experts in fp32; gpt-oss takes the top k of its logits and a
  16-bit softmax over those k; Llama 4 keeps its top-1 index and a sigmoid over the E scores
  in fp32 and in 16 bits.
- **the rotary tables.** Llama's are s × d in the model's dtype; OLMo 2 rotates in fp32
  (fp32 tables), gpt-oss keeps s × d/2 tables (it rotates the two halves of each head), and
  Gemma 3 makes a second pair for its local layers (``rope_local_base_freq``).
- **the experts.** Mixtral's, Qwen3-MoE's, DeepSeek's and gpt-oss's experts run
  transformers' ``grouped_mm`` path on the token copies routed to them; Llama 4's
  ``Llama4TextMoe`` repeats every token to every expert (``hidden_states.repeat(num_experts,
  1)``), scales it by its router score and runs all experts on all tokens with one ``bmm``, so
  its experts save E·T copies, not k·T. gpt-oss's expert MLP clamps its gate and up halves and
  computes ``(up + 1) · gate · sigmoid(1.702 · gate)``: seven expert-widths per copy where a
  SwiGLU saves four.

Small tensors these families save are left out where they are under a ten-thousandth of a
layer (DeepSeek-V3's group-limited routing masks: about 0.02% of an MoE layer).

>>> hf_family("gemma2").norm_scale
'fp32-offset'
>>> hf_family("").eager_softmax
'fp32'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import choice

#: How a family's RMSNorm applies its weight (see the module docstring).
NORM_SCALES = ("16-bit", "fp32", "fp32-offset")
#: The routers: "softmax" (Mixtral, Qwen3-MoE), "fp32-input" (DeepSeek-V2/V3), "topk-softmax"
#: (gpt-oss), "sigmoid-top1" (Llama 4).
ROUTERS = ("softmax", "fp32-input", "topk-softmax", "sigmoid-top1")


@dataclass(frozen=True)
class HFFamily:
    """What one transformers family saves where it differs from ``LlamaForCausalLM``."""

    #: the ``model_type``; "" for Llama's own code (Llama, Mistral, Mixtral, Qwen 2 and 3, Phi-3)
    name: str
    #: where its code is (``transformers/models/...``)
    code: str
    norm_scale: str = "16-bit"
    #: "fp32" (an fp32 softmax and its 16-bit copy) or "16-bit"
    eager_softmax: str = "fp32"
    #: keeps the int64 index of each score row's maximum (gpt-oss's sinks)
    max_index: bool = False
    router: str = "softmax"
    #: bytes of each token copy's routing weight gathered for the combine (4: fp32)
    gathered_weight_bytes: int = 4
    #: "grouped_mm": the experts see their routed copies; "every-token": all experts all tokens
    experts: str = "grouped_mm"
    #: expert-widths an expert's MLP saves per token copy: 4 for SwiGLU (gate, up, SiLU, product)
    expert_widths: int = 4
    #: the rotary tables: "16-bit" (s × d each, cast to the model's dtype), "fp32" (OLMo 2
    #: rotates in fp32) or "half" (gpt-oss: s × d/2 each, the halves rotated apart)
    rotary: str = "16-bit"
    #: pairs of rotary tables a forward pass makes where local and global layers rotate with
    #: different bases (Gemma 3's ``rope_local_base_freq``): 2
    rotary_pairs: int = 1

    def __post_init__(self) -> None:
        choice("norm_scale", self.norm_scale, NORM_SCALES)
        choice("eager_softmax", self.eager_softmax, ("fp32", "16-bit"))
        choice("router", self.router, ROUTERS)
        choice("experts", self.experts, ("grouped_mm", "every-token"))
        choice("rotary", self.rotary, ("16-bit", "fp32", "half"))


_GEMMA = dict(norm_scale="fp32-offset")
#: The families whose code differs, by ``model_type`` (a :class:`~trainmath.model.shape.ModelShape`'s
#: ``hf_family``); "" is Llama's.
HF_FAMILIES: dict[str, HFFamily] = {f.name: f for f in (
    HFFamily("", "llama/modeling_llama.py, mistral/, mixtral/, qwen2/, qwen3/, phi3/"),
    HFFamily("gemma", "gemma/modeling_gemma.py: GemmaRMSNorm", **_GEMMA),
    HFFamily("gemma2", "gemma2/modeling_gemma2.py: Gemma2RMSNorm", **_GEMMA),
    HFFamily("gemma3_text", "gemma3/modeling_gemma3.py: Gemma3RMSNorm, rotary_emb_local",
             rotary_pairs=2, **_GEMMA),
    HFFamily("olmo2", "olmo2/modeling_olmo2.py: Olmo2RMSNorm, apply_rotary_pos_emb",
             norm_scale="fp32", rotary="fp32"),
    HFFamily("qwen3_moe", "qwen3_moe/modeling_qwen3_moe.py: Qwen3MoeTopKRouter",
             gathered_weight_bytes=2),
    HFFamily("deepseek_v2", "deepseek_v2/modeling_deepseek_v2.py: DeepseekV2Moe", router="fp32-input"),
    HFFamily("deepseek_v3", "deepseek_v3/modeling_deepseek_v3.py: DeepseekV3TopkRouter",
             router="fp32-input"),
    HFFamily("gpt_oss", "gpt_oss/modeling_gpt_oss.py: GptOssRMSNorm, GptOssTopKRouter, "
             "GptOssExperts", norm_scale="fp32", eager_softmax="16-bit", max_index=True,
             router="topk-softmax", gathered_weight_bytes=2, expert_widths=7, rotary="half"),
    HFFamily("llama4_text", "llama4/modeling_llama4.py: Llama4TextMoe, Llama4Router",
             eager_softmax="16-bit", router="sigmoid-top1", experts="every-token"),
)}


def hf_family(name: str) -> HFFamily:
    """The :class:`HFFamily` called ``name`` ("" for Llama's code); a ValueError lists them."""
    return HF_FAMILIES[choice("hf_family", name, HF_FAMILIES)]


def norm_keeps(family: HFFamily, autocast: bool) -> tuple[int | None, bool]:
    """What one of the family's RMSNorms keeps for its weight's gradient: the bytes per value
    of its normalised input (None: the model's 16-bit dtype; 4: fp32, as autocast's fp32
    parameters also make it) and whether it keeps Gemma's fp32 ``1 + weight`` too."""
    fp32 = autocast or family.norm_scale != "16-bit"
    return (4 if fp32 else None), family.norm_scale == "fp32-offset"
