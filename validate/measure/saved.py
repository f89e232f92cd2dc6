"""Bytes saved for backward by one forward pass of a whole model, by scope and tensor by tensor."""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .hfconfigs import ConfigFile
from .models import build, decoder_layers, loss_of, runs, spec_of, vocab_of
from .tracking import SavedTensorCounter

PRECISIONS = {
    # name: (parameter dtype, autocast dtype or None)
    "bf16": (torch.bfloat16, None),
    "autocast-bf16": (torch.float32, torch.bfloat16),
}

METHOD = (
    "One forward pass of the whole model at full size under FakeTensorMode (no memory is "
    "allocated; shapes, dtypes and aliasing are PyTorch's own). A "
    "torch.autograd.graph.saved_tensors_hooks pack hook sees every tensor saved for backward; "
    "each storage counts once (views, and several saved tensors sharing one storage, are one). "
    "Parameters saved by the ops that use them are not counted (reported as parameters_saved); "
    "a 16-bit copy of a parameter that autocast makes and a matmul saves is counted, and also "
    "reported alone as weight_copies. A TorchDispatchMode records the aten op that allocated "
    "each storage. Per layer: forward hooks on each decoder layer scope the pack calls, so a "
    "layer's bytes are the storages saved only by ops inside that layer (hooks scoped to one "
    "layer, not the difference of L and L+1 layers; the tests check the two agree). Storages "
    "saved inside more than one layer (the rotary cos/sin tables, an attention mask) are "
    "'shared'; 'embedding' is everything saved before the first layer, 'output' after the last "
    "(final norm, LM head, loss). The token ids count as saved inputs (the embedding's backward "
    "scatters by them)."
)


@contextlib.contextmanager
def layer_scopes(counter: SavedTensorCounter, layers):
    """Name what ``counter`` sees by where the forward pass is: "embedding" before the first of
    ``layers`` (the decoder layers), "layer i" inside layer i, "output" after it."""
    counter.scope = "embedding"
    handles = []
    for i, layer in enumerate(layers):
        def enter(_m, _a, i=i):
            counter.scope = f"layer {i}"

        def leave(_m, _a, _o):
            counter.scope = "output"
        handles += [layer.register_forward_pre_hook(enter), layer.register_forward_hook(leave)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _entry(t) -> list:
    return [t.op, t.dtype, list(t.shape), t.nbytes, t.kind]


def measure_saved(model: str | dict | ConfigFile, implementation: str, s: int, b: int = 1,
                  precision: str = "bf16", layers: int | None = None, backward: bool = False,
                  fake: bool = True, prepare=None) -> dict:
    """Bytes ``implementation`` saves for backward for one micro-batch of ``model``.

    ``model``: a name of ``shapes.SHAPES`` or ``hfconfigs.CONFIG_FILES``, a shape dict or a
    :class:`~.hfconfigs.ConfigFile`; ``implementation``: reference-sdpa, reference-eager,
    hf-sdpa, hf-eager (see models.py); ``precision``: "bf16" (bf16 parameters) or
    "autocast-bf16" (fp32 parameters under ``torch.autocast("cpu", torch.bfloat16)``);
    ``layers`` overrides the number of layers; ``backward`` also runs the backward pass;
    ``fake=False`` runs on real tensors (small shapes only: the tests compare the two). A
    config.json model's result adds ``runs`` (what transformers ran) and ``layer_groups``.
    ``prepare``, if given, is called on the model once built (a technique wrapping its layers).
    """
    spec = spec_of(model, s)
    param_dtype, autocast = PRECISIONS[precision]
    with (FakeTensorMode() if fake else contextlib.nullcontext()):
        torch.manual_seed(0)
        net = build(implementation, spec, param_dtype, layers)
        if prepare is not None:
            prepare(net)
        vocab = vocab_of(spec)
        tokens = torch.randint(0, vocab, (b, s))
        targets = torch.randint(0, vocab, (b, s))
        tensors = [*net.parameters(), *net.buffers()]
        counter = SavedTensorCounter(parameters=tensors, inputs=[tokens, targets])
        cast = (torch.autocast("cpu", dtype=autocast) if autocast else contextlib.nullcontext())
        with layer_scopes(counter, decoder_layers(net)):
            with counter(), cast:
                loss = loss_of(net, tokens, targets)
            if backward:
                loss.backward()
                missing = [n for n, p in net.named_parameters() if p.grad is None]
                assert not missing, f"no gradient reached {missing[:3]}"
        kernels = sorted({t.op for t in counter.saved.values()
                          if "attention" in t.op or "softmax" in t.op})
        result = _summarise(counter, len(decoder_layers(net)))
        result["attention_ops"] = kernels
        if isinstance(spec, ConfigFile):
            result["runs"] = runs(net)
            result["layer_groups"] = layer_groups(counter, net)
        counter.release()
        return result


def _by_scope(counter: SavedTensorCounter) -> dict[str, list]:
    """The saved storages (parameters left out) by the one scope that saved them, or "shared"."""
    out: dict[str, list] = {}
    for t in sorted(counter.saved.values(), key=lambda t: t.order):
        if t.kind != "parameter":
            scope = t.scopes[0] if len(set(t.scopes)) == 1 else "shared"
            out.setdefault(scope, []).append(t)
    return out


def _layer_kind(model, i: int) -> dict:
    """What makes decoder layer ``i`` of a transformers model the kind it is: its config's
    ``layer_types`` entry, its attention and MLP classes, the attention's window and rope."""
    layer = decoder_layers(model)[i]
    attention = getattr(layer, "self_attn", None)
    mlp = getattr(layer, "mlp", None) or getattr(layer, "feed_forward", None)
    types = getattr(model.config, "layer_types", None)
    out = {"layer_type": types[i] if types else None,
           "attention": type(attention).__name__ if attention is not None else None,
           "mlp": type(mlp).__name__ if mlp is not None else None}
    for key in ("sliding_window", "use_rope"):
        if hasattr(attention, key):
            out[key] = getattr(attention, key)
    return out


def layer_groups(counter: SavedTensorCounter, model) -> list[dict]:
    """The decoder layers grouped by what they save (the same tensor list, op by op), in the
    order of their first layer: each group's layers, bytes per layer, the kinds of layer in it
    (:func:`_layer_kind`, each distinct one once) and its first layer's tensor list."""
    by_scope = _by_scope(counter)
    groups: dict[tuple, dict] = {}
    for i in range(len(decoder_layers(model))):
        tensors = [_entry(t) for t in by_scope.get(f"layer {i}", [])]
        key = tuple((op, dtype, tuple(shape), nbytes, kind)
                    for op, dtype, shape, nbytes, kind in tensors)
        group = groups.setdefault(key, {"layers": [], "bytes": sum(e[3] for e in tensors),
                                        "kinds": [], "tensors": tensors})
        group["layers"].append(i)
        kind = _layer_kind(model, i)
        if kind not in group["kinds"]:
            group["kinds"].append(kind)
    return list(groups.values())


def _summarise(counter: SavedTensorCounter, n_layers: int) -> dict:
    by_scope = _by_scope(counter)
    params_saved = sum(t.nbytes for t in counter.saved.values() if t.kind == "parameter")

    def total(scope, kind=None):
        return sum(t.nbytes for t in by_scope.get(scope, []) if kind is None or t.kind == kind)

    per_layer = [total(f"layer {i}") for i in range(n_layers)]
    shown = 1 if n_layers > 1 else 0  # layer 0 is the same in every model here; show the second
    everything = [t for ts in by_scope.values() for t in ts]
    return {
        "total": sum(t.nbytes for t in everything),
        "weight_copies": sum(t.nbytes for t in everything if t.kind == "weight copy"),
        "parameters_saved": params_saved,
        "embedding": total("embedding"),
        "per_layer": per_layer,
        "layer_weight_copies": total(f"layer {shown}", "weight copy"),
        "output": total("output"),
        "shared": total("shared"),
        "layer_shown": shown,
        "layer_tensors": [_entry(t) for t in by_scope.get(f"layer {shown}", [])],
        "embedding_tensors": [_entry(t) for t in by_scope.get("embedding", [])],
        "output_tensors": [_entry(t) for t in by_scope.get("output", [])],
        "shared_tensors": [_entry(t) for t in by_scope.get("shared", [])],
    }
