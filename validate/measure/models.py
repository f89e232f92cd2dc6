"""The models measured: a reference transformer with the library's kernels, and Hugging Face's.

**The reference model** (:class:`Reference`) is written here in plain PyTorch to run exactly the
kernel set that ``trainmath.memory.activations`` documents tensor by tensor, i.e. what Megatron-LM with
Transformer Engine keeps on a GPU:

- norms are fused kernels (autograd Functions here) that save only their 16-bit input and fp32
  per-token statistics (RMSNorm: 1/rms; LayerNorm: mean and 1/σ), as the CUDA kernels do (the
  CPU's ``F.layer_norm`` keeps bf16 statistics and ``F.rms_norm`` saves fp32 copies);
- attention is ``F.scaled_dot_product_attention`` (PyTorch's CPU flash kernel: Q, K, V, O and an
  fp32 log-sum-exp, like FlashAttention-2) with native GQA, or "eager": K and V repeated to all
  heads, softmax(QKᵀ/√d + mask) in the compute dtype, and for GPT shapes a dropout on the
  probabilities, then the product with V;
- rotary embeddings multiply by cos and sin tables computed once per forward pass (the
  multiplies save only the tables, constants shared by all layers);
- dropout is ``torch.native_dropout``, which saves a 1-byte mask (the CUDA path of
  ``F.dropout``; on the CPU ``F.dropout`` saves a 2-byte noise tensor). With SDPA the GPT
  model's attention dropout is off: the CPU falls back to the unfused math kernel with dropout,
  while FlashAttention on a GPU keeps only an RNG seed and offset for it;
- the loss is ``F.cross_entropy(logits.float(), targets)``.

**Hugging Face** models are ``transformers``' own ``LlamaForCausalLM`` and ``MistralForCausalLM``
built from a config (no weights), in training mode, with ``use_cache=False``, called as
``model(input_ids=..., labels=...).loss`` as its Trainer does. Today's families (Qwen3,
DeepSeek-V3, Gemma 2 and 3, gpt-oss, OLMo 2, Llama 4) are built the same way from their published
config.json (``hfconfigs``), whatever class transformers picks for them.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from .hfconfigs import ConfigFile

F = nn.functional


class FusedRMSNorm(torch.autograd.Function):
    """y = x / rms(x) · w. Saves x (its own dtype) and an fp32 1/rms per token."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        dims = tuple(range(grad.dim() - 1))
        grad_weight = (grad.float() * normed).sum(dims).to(weight.dtype)
        g = grad.float() * weight.float()
        grad_x = rstd * (g - normed * (g * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, None


class FusedLayerNorm(torch.autograd.Function):
    """y = (x - mean) / σ · w + b. Saves x and fp32 mean and 1/σ per token (the CUDA kernel's)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        xf = x.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return ((xf - mean) * rstd).to(x.dtype) * weight + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved_tensors
        normed = (x.float() - mean) * rstd
        dims = tuple(range(grad.dim() - 1))
        grad_weight = (grad.float() * normed).sum(dims).to(weight.dtype)
        grad_bias = grad.float().sum(dims).to(weight.dtype)
        g = grad.float() * weight.float()
        grad_x = rstd * (g - g.mean(-1, keepdim=True) - normed * (g * normed).mean(-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, grad_bias, None


def dropout(x, p: float):
    return torch.native_dropout(x, p, True)[0] if p else x


def _rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Norm(nn.Module):
    def __init__(self, shape: dict, dtype) -> None:
        super().__init__()
        h = shape["hidden"]
        self.eps = shape["norm_eps"]
        self.layernorm = shape["norm"] == "layernorm"
        self.weight = nn.Parameter(torch.ones(h, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(h, dtype=dtype)) if self.layernorm else None

    def forward(self, x):
        if self.layernorm:
            return FusedLayerNorm.apply(x, self.weight, self.bias, self.eps)
        return FusedRMSNorm.apply(x, self.weight, self.eps)


class Layer(nn.Module):
    """One pre-norm decoder layer: Megatron-LM's order for GPT shapes, Llama's otherwise."""

    def __init__(self, shape: dict, attention: str, dtype) -> None:
        super().__init__()
        h, a, kv_heads, f = shape["hidden"], shape["heads"], shape["kv_heads"], shape["ffn"]
        self.h, self.a, self.kv_heads, self.d = h, a, kv_heads, h // a
        self.attention, self.p = attention, shape["dropout_p"]
        self.gpt, bias = shape["mlp"] == "gelu", shape["bias"]
        self.norm1, self.norm2 = Norm(shape, dtype), Norm(shape, dtype)
        kv = kv_heads * self.d
        if self.gpt:  # fused QKV projection (Megatron-LM)
            self.qkv = nn.Linear(h, h + 2 * kv, bias=bias, dtype=dtype)
            self.up = nn.Linear(h, f, bias=bias, dtype=dtype)
        else:
            self.q = nn.Linear(h, h, bias=bias, dtype=dtype)
            self.k = nn.Linear(h, kv, bias=bias, dtype=dtype)
            self.v = nn.Linear(h, kv, bias=bias, dtype=dtype)
            self.gate = nn.Linear(h, f, bias=bias, dtype=dtype)
            self.up = nn.Linear(h, f, bias=bias, dtype=dtype)
        self.o = nn.Linear(h, h, bias=bias, dtype=dtype)
        self.down = nn.Linear(f, h, bias=bias, dtype=dtype)

    def _attend(self, x, rope, mask):
        b, s, _ = x.shape
        a, kvh, d = self.a, self.kv_heads, self.d
        if self.gpt:
            q, k, v = self.qkv(x).view(b, s, 3, a, d).unbind(2)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        else:
            cos, sin = rope
            q = _rotate(self.q(x).view(b, s, a, d).transpose(1, 2), cos, sin)
            k = _rotate(self.k(x).view(b, s, kvh, d).transpose(1, 2), cos, sin)
            v = self.v(x).view(b, s, kvh, d).transpose(1, 2)
        if self.attention == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kvh < a)
        else:
            if kvh < a:  # repeat K and V to all heads (Megatron-LM and Hugging Face do)
                rep = a // kvh
                k = k[:, :, None].expand(b, kvh, rep, s, d).reshape(b, a, s, d)
                v = v[:, :, None].expand(b, kvh, rep, s, d).reshape(b, a, s, d)
            scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(d)) + mask
            o = dropout(torch.softmax(scores, dim=-1), self.p) @ v
        return dropout(self.o(o.transpose(1, 2).reshape(b, s, self.h)), self.p)

    def forward(self, x, rope, mask):
        x = x + self._attend(self.norm1(x), rope, mask)
        y = self.norm2(x)
        if self.gpt:
            y = self.down(F.gelu(self.up(y)))
        else:
            y = self.down(F.silu(self.gate(y)) * self.up(y))
        return x + dropout(y, self.p)


class Reference(nn.Module):
    """Embedding, ``layers`` decoder layers, final norm, LM head and fp32 cross entropy."""

    def __init__(self, shape: dict, attention: str = "sdpa", dtype=torch.bfloat16,
                 layers: int | None = None) -> None:
        super().__init__()
        if attention not in ("sdpa", "eager"):
            raise ValueError(f"attention {attention!r}; accepted: sdpa, eager")
        h, V = shape["hidden"], shape["vocab"]
        self.shape, self.p = shape, shape["dropout_p"]
        self.embed = nn.Embedding(V, h, dtype=dtype)
        self.pos = nn.Embedding(shape["positions"], h, dtype=dtype) if shape["positions"] else None
        n = shape["layers"] if layers is None else layers
        self.layers = nn.ModuleList(Layer(shape, attention, dtype) for _ in range(n))
        self.norm = Norm(shape, dtype)
        self.head = None if shape["tied_embeddings"] else nn.Linear(h, V, bias=False, dtype=dtype)
        self.attention = attention

    def forward(self, tokens, targets):
        b, s = tokens.shape
        y, alive = self._hidden(tokens)  # alive: the locals this forward keeps until it returns
        logits = F.linear(y, self.head_weight())
        return F.cross_entropy(logits.float().view(b * s, -1), targets.view(b * s))

    def head_weight(self) -> torch.Tensor:
        """The LM head's weight (the embedding's, when tied)."""
        return self.embed.weight if self.head is None else self.head.weight

    def hidden_states(self, tokens):
        """The final norm's output: what the LM head multiplies (a chunked loss takes it, as a
        model with ``skip_output_layer`` returns it)."""
        return self._hidden(tokens)[0]

    def _hidden(self, tokens):
        """The final norm's output, and the tensors the forward pass made on its way (the
        rotary frequencies and angles, the mask, the last layer's output), which :meth:`forward`
        holds until it returns."""
        b, s = tokens.shape
        angle = inv = None
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(s))
        x = dropout(x, self.p)
        rope = mask = None
        if self.shape["rope_theta"]:
            d = self.shape["hidden"] // self.shape["heads"]
            inv = self.shape["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
            angle = torch.outer(torch.arange(s, dtype=torch.float32), inv)
            angle = torch.cat([angle, angle], dim=-1)
            rope = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        if self.attention == "eager":
            mask = torch.full((s, s), float("-inf"), dtype=x.dtype).triu(1)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.norm(x), (angle, inv, mask, x)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder layers of a reference or Hugging Face model."""
    return model.layers if isinstance(model, Reference) else model.model.layers


def hf_config(shape: dict, attention: str, layers: int | None = None):
    """A transformers config for ``shape`` (Llama, Mistral or Mixtral), for training without a
    cache."""
    from transformers import LlamaConfig, MistralConfig

    common = dict(
        vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["ffn"],
        num_hidden_layers=shape["layers"] if layers is None else layers,
        num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
        rms_norm_eps=shape["norm_eps"], tie_word_embeddings=shape["tied_embeddings"],
        use_cache=False, attention_dropout=0.0, attn_implementation=attention,
    )
    rope = {"rope_type": "default", "rope_theta": shape["rope_theta"]}
    if shape["family"] == "mistral":
        return MistralConfig(**common, max_position_embeddings=32768,
                             sliding_window=shape["sliding_window"], rope_parameters=rope)
    if shape["family"] == "llama":
        return LlamaConfig(**common, max_position_embeddings=8192, rope_parameters=rope)
    if shape["family"] == "mixtral":
        from transformers import MixtralConfig

        return MixtralConfig(**common, max_position_embeddings=32768, sliding_window=None,
                             rope_parameters=rope, num_local_experts=shape["experts"],
                             num_experts_per_tok=shape["experts_per_token"],
                             router_jitter_noise=0.0)
    raise ValueError(f"no Hugging Face model for family {shape['family']!r}; accepted: llama, "
                     "mistral, mixtral")


def hf_model(shape: dict, attention: str, dtype, layers: int | None = None) -> nn.Module:
    """``LlamaForCausalLM`` or ``MistralForCausalLM`` for ``shape``, no weights, training mode."""
    from transformers import AutoModelForCausalLM

    config = hf_config(shape, attention, layers)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    model.train()
    return model


def build(implementation: str, shape: dict | ConfigFile, dtype,
          layers: int | None = None) -> nn.Module:
    """``implementation`` is "reference-sdpa", "reference-eager", "hf-sdpa" or "hf-eager";
    ``shape`` a shape dict (``shapes``) or a published config.json (``hfconfigs.ConfigFile``),
    which only Hugging Face's implementations build."""
    kind, _, attention = implementation.partition("-")
    if isinstance(shape, ConfigFile):
        if kind != "hf":
            raise ValueError(f"implementation {implementation!r} for {shape.name}, a config.json "
                             "model; accepted: hf-sdpa, hf-eager")
        return shape.build(attention, dtype, layers)
    if kind == "reference":
        return Reference(shape, attention, dtype, layers)
    if kind == "hf":
        return hf_model(shape, attention, dtype, layers)
    raise ValueError(f"unknown implementation {implementation!r}; accepted: "
                     "reference-sdpa, reference-eager, hf-sdpa, hf-eager")


def spec_of(model: str | dict | ConfigFile, s: int) -> dict | ConfigFile:
    """What to build for ``model`` at sequence length ``s``: a shape dict (a name of
    ``shapes.SHAPES``, or a dict as it is) or a :class:`~.hfconfigs.ConfigFile` (a name of
    ``hfconfigs.CONFIG_FILES``, or one as it is)."""
    from . import hfconfigs, shapes

    if isinstance(model, ConfigFile):
        return model
    if isinstance(model, dict):
        return dict(model)
    if model in hfconfigs.CONFIG_FILES:
        return hfconfigs.CONFIG_FILES[model]
    if model in shapes.SHAPES:
        return shapes.for_length(model, s)
    raise ValueError(f"unknown model {model!r}; accepted: {', '.join(shapes.SHAPES)}, "
                     f"{', '.join(hfconfigs.CONFIG_FILES)}")


def vocab_of(spec: dict | ConfigFile) -> int:
    """The vocabulary size of a shape dict or a config.json model."""
    return spec.vocab if isinstance(spec, ConfigFile) else spec["vocab"]


def runs(model: nn.Module) -> dict:
    """What transformers actually runs for a model it built: its class, the attention
    implementation it settled on (it may refuse one or fall back) and, for a mixture of experts,
    the experts' class and implementation ("grouped_mm", "eager", ...; "own forward" for an
    experts class transformers does not dispatch)."""
    config = model.config
    out = {"class": type(model).__name__, "attn_implementation": config._attn_implementation,
           "experts": None}
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            dispatched = hasattr(module, "has_gate")  # set by @use_experts_implementation
            out["experts"] = {"class": type(module).__name__,
                              "implementation": config._experts_implementation if dispatched
                              else "own forward"}
            break
    return out


@contextlib.contextmanager
def _eager_mask_decisions():
    """Make Hugging Face decide its attention mask as it does on real tensors.

    ``transformers.masking_utils.find_packed_sequence_indices`` reads the position ids' values
    to detect several sequences packed in one row; on a FakeTensor it cannot, takes it for
    tracing (``is_tracing``) and keeps a mask, so SDPA gets an explicit s×s mask that each layer
    converts and saves, which eager code does not do. Our position ids are 0..s-1 in every row
    (one sequence per row), for which the eager answer is None: that is returned for fake
    tensors; real tensors take the library's own path (the tests compare the two).
    """
    from torch._subclasses.fake_tensor import FakeTensor
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices

    def find_packed_sequence_indices(position_ids):
        if isinstance(position_ids, FakeTensor):
            return None
        return original(position_ids)

    masking_utils.find_packed_sequence_indices = find_packed_sequence_indices
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def loss_of(model: nn.Module, tokens, targets):
    """The scalar loss the way each implementation's training loop gets it."""
    if isinstance(model, Reference):
        return model(tokens, targets)
    with _eager_mask_decisions():
        return model(input_ids=tokens, labels=targets).loss
