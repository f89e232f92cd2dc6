"""Measured truth for trainmath.memory.activations: the bytes PyTorch saves for backward, on the CPU.

Each test builds a layer from plain PyTorch ops, runs its forward pass under
``torch.autograd.graph.saved_tensors_hooks`` and adds up every storage saved for backward,
each once (several saved tensors are views of one storage: Q, K and V of a fused projection,
a ``view`` fed to a matmul), skipping the parameters and the constants every layer shares (the
causal mask, the rotary cos/sin tables). The library's figure must match to the byte: a
mismatch is fixed in the formula or in the modelled set of tensors, never with a tolerance.

What the CPU measures and what it does not:

- Dropout: on CUDA ``F.dropout`` runs ``native_dropout``, which saves a 1-byte bool mask; on
  the CPU ``F.dropout`` multiplies by a 16-bit noise tensor (2 bytes a value). The layers call
  ``torch.native_dropout`` directly, the CUDA path, so the 1-byte mask is what is measured.
- LayerNorm: the CPU kernel keeps its mean and 1/σ in the input's dtype (2 bytes each in
  bf16), the CUDA kernel in fp32; the GPT tests pass ``stat_bytes=2``. The RMSNorm here is an
  autograd.Function that saves its input and an fp32 1/rms, as fused RMSNorm kernels do
  (``F.rms_norm`` on the CPU is a composite that saves fp32 copies of the whole input).
- FlashAttention: ``F.scaled_dot_product_attention`` on the CPU runs PyTorch's CPU flash kernel
  (asserted below), which saves Q, K, V, the output and an fp32 log-sum-exp, like
  FlashAttention-2 on a GPU; the GPU kernels themselves are not measured here. With dropout
  the CPU falls back to the unfused math path, so attention dropout under flash is not measured.
- Tensor parallelism is measured as one rank's share of the computation (heads, kv_heads and
  ffn divided by tp, norms and dropouts whole); the collectives, which save nothing, are left out.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from trainmath.memory.embedding_and_loss import input_activations, output_activations
from trainmath.memory.activations import layer_activations  # noqa: E402
from trainmath.model.presets import gpt_shape
from trainmath.model.shape import shape  # noqa: E402
from validate.measure.models import FusedRMSNorm  # noqa: E402

BYTES = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}


def saved_bytes(fn, skip, *inputs) -> int:
    """Bytes of every storage ``fn(*inputs)`` saves for backward, each storage once."""
    skip_ptrs = {x.untyped_storage().data_ptr() for x in skip}
    seen: dict[int, int] = {}
    keep = []  # hold every saved tensor so no storage is freed and its address reused

    def pack(x):
        keep.append(x)
        storage = x.untyped_storage()
        if storage.data_ptr() not in skip_ptrs:
            seen[storage.data_ptr()] = storage.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        out = fn(*inputs)
    out.float().sum().backward()  # the graph is real: gradients reach the input
    assert inputs[0].grad is not None and torch.isfinite(inputs[0].grad.float()).all()
    return sum(seen.values())


def _params(shapes: dict[str, tuple[int, ...]], dtype, ones=()) -> dict:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, size in shapes.items():
        if name in ones:
            value = torch.ones(size)
        else:
            value = torch.randn(size, generator=gen) / math.sqrt(size[-1])
        out[name] = value.to(dtype).requires_grad_()
    return out


def _dropout(x, p):
    return torch.native_dropout(x, p, True)[0]


# --- GPT-style layer: LayerNorm, fused QKV, eager softmax(QKᵀ)V with dropout, GeLU MLP --------

def gpt_layer(b, s, h, a, dtype, tp=1, p=0.1):
    """One pre-LN GPT layer (Megatron's order), or one tensor-parallel rank's share of it."""
    d, ha, f = h // a, h // tp, 4 * h // tp  # ha: this rank's attention width (a/tp heads)
    P = _params(dict(ln1w=(h,), ln1b=(h,), wqkv=(3 * ha, h), bqkv=(3 * ha,), wo=(h, ha), bo=(h,),
                     ln2w=(h,), ln2b=(h,), w1=(f, h), b1=(f,), w2=(h, f), b2=(h,)), dtype,
                ones=("ln1w", "ln2w"))
    mask = torch.full((s, s), float("-inf"), dtype=dtype).triu(1)  # additive: add saves nothing

    def forward(x):
        y = F.layer_norm(x, (h,), P["ln1w"], P["ln1b"])
        q, k, v = F.linear(y, P["wqkv"], P["bqkv"]).view(b, s, 3, a // tp, d).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        probs = torch.softmax((q @ k.transpose(-2, -1)) * (1 / math.sqrt(d)) + mask, dim=-1)
        context = (_dropout(probs, p) @ v).transpose(1, 2).reshape(b, s, ha)
        x = x + _dropout(F.linear(context, P["wo"], P["bo"]), p)
        y = F.layer_norm(x, (h,), P["ln2w"], P["ln2b"])
        return x + _dropout(F.linear(F.gelu(F.linear(y, P["w1"], P["b1"])), P["w2"], P["b2"]), p)

    return forward, [*P.values(), mask]


GPT_CASES = [(1, 16, 32, 4), (2, 16, 32, 4), (3, 24, 48, 6), (2, 8, 64, 2), (4, 32, 64, 8)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize(("b", "s", "h", "a"), GPT_CASES)
def test_gpt_layer(b, s, h, a, dtype):
    forward, skip = gpt_layer(b, s, h, a, dtype)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    measured = saved_bytes(forward, skip, x)
    model = gpt_shape("gpt", layers=1, hidden=h, heads=a, vocab=64, positions=s)
    n = BYTES[dtype]
    predicted = layer_activations(model, s, b, value_bytes=n, stat_bytes=n)  # CPU LayerNorm stats
    assert measured == predicted.total.n
    if n == 2:  # Korthikanti eq. 1 plus the statistics they leave out
        assert measured == 34 * s * b * h + 5 * a * s * s * b + 2 * 2 * 2 * s * b


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize(("b", "s", "h", "a"), [(2, 16, 32, 4), (1, 24, 64, 8)])
def test_gpt_layer_one_tensor_parallel_rank(b, s, h, a, tp):
    """sbh(10 + 24/t + 5as/(ht)) per rank, t = tp (Korthikanti et al. 2022, Table 2): the norms,
    their outputs and the masks stay whole."""
    forward, skip = gpt_layer(b, s, h, a, torch.bfloat16, tp=tp)
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    model = gpt_shape("gpt", layers=1, hidden=h, heads=a, vocab=64, positions=s)
    assert saved_bytes(forward, skip, x) == layer_activations(model, s, b, tp=tp, stat_bytes=2).total.n


# --- Llama-style layer: RMSNorm, separate Q/K/V, RoPE, GQA, no dropout, SwiGLU ---------------

def rms_norm(x, weight):
    """The fused RMSNorm of the measured reference model: saves its input and an fp32 1/rms."""
    return FusedRMSNorm.apply(x, weight, 1e-5)


def _rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin  # the multiplies save cos and sin only


def llama_layer(b, s, h, a, kv_heads, f, attention, dtype):
    d, kv = h // a, kv_heads * h // a
    P = _params(dict(n1=(h,), wq=(h, h), wk=(kv, h), wv=(kv, h), wo=(h, h),
                     n2=(h,), wg=(f, h), wu=(f, h), wd=(h, f)), dtype, ones=("n1", "n2"))
    angle = torch.outer(torch.arange(s).float(), 1e4 ** (-torch.arange(0, d, 2).float() / d))
    cos, sin = torch.cat([angle, angle], -1).cos().to(dtype), torch.cat([angle, angle], -1).sin().to(dtype)
    mask = torch.full((s, s), float("-inf"), dtype=dtype).triu(1)
    rep = a // kv_heads

    def forward(x):
        y = rms_norm(x, P["n1"])
        q = _rotate(F.linear(y, P["wq"]).view(b, s, a, d).transpose(1, 2), cos, sin)
        k = _rotate(F.linear(y, P["wk"]).view(b, s, kv_heads, d).transpose(1, 2), cos, sin)
        v = F.linear(y, P["wv"]).view(b, s, kv_heads, d).transpose(1, 2)
        if attention == "eager":  # repeat K and V to all heads, as Hugging Face's repeat_kv does
            k = k[:, :, None].expand(b, kv_heads, rep, s, d).reshape(b, a, s, d)
            v = v[:, :, None].expand(b, kv_heads, rep, s, d).reshape(b, a, s, d)
            o = torch.softmax((q @ k.transpose(-2, -1)) * (1 / math.sqrt(d)) + mask, dim=-1) @ v
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            assert type(o.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
        x = x + F.linear(o.transpose(1, 2).reshape(b, s, h), P["wo"])
        y = rms_norm(x, P["n2"])
        return x + F.linear(F.silu(F.linear(y, P["wg"])) * F.linear(y, P["wu"]), P["wd"])

    return forward, [*P.values(), cos, sin, mask]


LLAMA_CASES = [(1, 16, 32, 4, 2, 48), (2, 16, 32, 4, 1, 40), (2, 8, 64, 4, 4, 96), (3, 32, 64, 8, 2, 176)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("attention", ["eager", "flash"])
@pytest.mark.parametrize(("b", "s", "h", "a", "kv_heads", "f"), LLAMA_CASES)
def test_llama_layer(b, s, h, a, kv_heads, f, attention, dtype):
    forward, skip = llama_layer(b, s, h, a, kv_heads, f, attention, dtype)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    measured = saved_bytes(forward, skip, x)
    model = shape("llama", layers=1, hidden=h, heads=a, kv_heads=kv_heads, ffn=f, vocab=64)
    assert measured == layer_activations(model, s, b, attention=attention).total.n


# --- the embedding, and the logits and fp32 cross entropy over the vocabulary -----------------

@pytest.mark.parametrize(("b", "s", "h", "V"), [(2, 16, 32, 100), (3, 8, 64, 257)])
def test_gpt_embedding(b, s, h, V):
    P = _params(dict(wte=(V, h), wpe=(s, h)), torch.bfloat16)
    tokens = torch.randint(V, (b, s))
    positions = torch.arange(s)

    def forward(x):  # x: a stand-in input so the helper can check a gradient arrives
        return x + _dropout(F.embedding(tokens, P["wte"]) + F.embedding(positions, P["wpe"]), 0.1)

    x = torch.zeros(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    model = gpt_shape("gpt", layers=1, hidden=h, heads=4, vocab=V, positions=s)
    assert saved_bytes(forward, list(P.values()), x) == input_activations(model, s, b).total.n


@pytest.mark.parametrize("kind", ["gpt", "llama"])
@pytest.mark.parametrize(("b", "s", "h", "V"), [(2, 16, 32, 100), (3, 8, 64, 257)])
def test_output_layer_and_loss(b, s, h, V, kind):
    """Final norm, LM head, ``F.cross_entropy(logits.float(), targets)``: fp32 log-softmax saved."""
    dtype = torch.bfloat16
    P = _params(dict(nw=(h,), nb=(h,), head=(V, h)), dtype, ones=("nw",))
    targets = torch.randint(V, (b * s,))

    def forward(x):
        if kind == "gpt":
            y = F.layer_norm(x, (h,), P["nw"], P["nb"])
        else:
            y = rms_norm(x, P["nw"])
        logits = F.linear(y, P["head"]).float()
        return F.cross_entropy(logits.view(b * s, V), targets)

    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    if kind == "gpt":
        model, stat = gpt_shape("gpt", layers=1, hidden=h, heads=4, vocab=V, positions=s), 2
    else:
        model, stat = shape("llama", layers=1, hidden=h, heads=4, ffn=3 * h, vocab=V), 4
    predicted = output_activations(model, s, b, stat_bytes=stat)
    assert saved_bytes(forward, list(P.values()), x) == predicted.total.n
