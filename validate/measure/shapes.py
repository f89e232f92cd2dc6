"""The model shapes measured: every hyperparameter, as plain data (no torch needed to read them).

The keys match the fields of ``trainmath.model.shape.ModelShape`` (layers, hidden, heads, kv_heads,
ffn, vocab, mlp, norm, bias, tied_embeddings, positions, dropout) so the library can rebuild each
shape and recompute its prediction; ``norm_eps``, ``rope_theta`` and ``sliding_window`` are the
extra settings the Hugging Face configs need (they change no byte count at these lengths), and
``dropout_p`` the probability the reference GPT model uses.
"""

from __future__ import annotations

_LLAMA2 = "Touvron et al. 2023, Llama 2, Table 1; config.json of meta-llama/Llama-2-7b-hf"
_LLAMA3 = "Dubey et al. 2024, The Llama 3 Herd of Models, Table 3; config.json of meta-llama/Meta-Llama-3-8B"
_MISTRAL = "Jiang et al. 2023, Mistral 7B, Table 1; config.json of mistralai/Mistral-7B-v0.1"
_GPT3_XL = ("Brown et al. 2020, GPT-3, Table 2.1 (XL: 24 layers, d_model 2048, d_head 128, n_ctx "
            "2048); the table's 24 heads do not multiply out with d_head 128 to d_model 2048, so "
            "16 heads of 128 as GPT-NeoX's and Megatron-LM's 1.3B configs use; GPT-2's "
            "50257-token vocabulary, tied embeddings")
_MIXTRAL = ("Jiang et al. 2024, Mixtral of Experts, Table 1; config.json of "
            "mistralai/Mixtral-8x7B-v0.1 (8 experts of intermediate_size 14336, top 2)")
_KORTHIKANTI = ("Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer "
                "Models, Table 3 (22B: h 6144, a 64, L 48, V 51200); GPT layer, tied embeddings")


def _llama(name, *, layers, hidden, heads, kv_heads, ffn, vocab, rope_theta, source, **extra):
    return dict(name=name, family="llama", layers=layers, hidden=hidden, heads=heads,
                kv_heads=kv_heads, ffn=ffn, vocab=vocab, mlp="swiglu", norm="rmsnorm", bias=False,
                tied_embeddings=False, positions=0, dropout=False, dropout_p=0.0, norm_eps=1e-5,
                rope_theta=rope_theta, sliding_window=None, source=source) | extra


def _gpt(name, *, layers, hidden, heads, vocab, positions, source):
    return dict(name=name, family="gpt", layers=layers, hidden=hidden, heads=heads,
                kv_heads=heads, ffn=4 * hidden, vocab=vocab, mlp="gelu", norm="layernorm",
                bias=True, tied_embeddings=True, positions=positions, dropout=True, dropout_p=0.1,
                norm_eps=1e-5, rope_theta=None, sliding_window=None, source=source)


SHAPES: dict[str, dict] = {
    s["name"]: s
    for s in (
        _llama("llama-2-7b", layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008,
               vocab=32000, rope_theta=10000.0, source=_LLAMA2),
        _llama("llama-3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
               vocab=128256, rope_theta=500000.0, source=_LLAMA3),
        _llama("mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
               vocab=32000, rope_theta=10000.0, source=_MISTRAL, family="mistral",
               sliding_window=4096),
        _gpt("gpt3-xl", layers=24, hidden=2048, heads=16, vocab=50257, positions=2048,
             source=_GPT3_XL),
        _gpt("korthikanti-22b", layers=48, hidden=6144, heads=64, vocab=51200, positions=2048,
             source=_KORTHIKANTI),
        _llama("mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
               vocab=32000, rope_theta=1e6, source=_MIXTRAL, family="mixtral", experts=8,
               experts_per_token=2),
    )
}
#: The mixtures of experts: measured with Hugging Face's model only (the reference model is
#: dense), saved tensors only.
MOE = tuple(name for name, s in SHAPES.items() if s.get("experts"))


def for_length(name: str, s: int) -> dict:
    """The shape to run at sequence length ``s``: learned positions grow to cover s."""
    shape = dict(SHAPES[name])
    if shape["positions"] and s > shape["positions"]:
        shape["positions"] = s
    return shape


def param_count(shape: dict) -> int:
    """Parameters counted from the matrices (the same arithmetic as trainmath.model.shape)."""
    h, kv, f = shape["hidden"], shape["kv_heads"] * shape["hidden"] // shape["heads"], shape["ffn"]
    attention = 2 * h * h + 2 * h * kv + ((2 * h + 2 * kv) if shape["bias"] else 0)
    if shape["mlp"] == "gelu":
        mlp = 2 * h * f + ((f + h) if shape["bias"] else 0)
    else:
        mlp = 3 * h * f + ((2 * f + h) if shape["bias"] else 0)
    norm = 2 * h if shape["norm"] == "layernorm" else h
    embed = shape["vocab"] * h + shape["positions"] * h
    head = 0 if shape["tied_embeddings"] else shape["vocab"] * h
    return embed + shape["layers"] * (attention + mlp + 2 * norm) + norm + head
