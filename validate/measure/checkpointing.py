"""Op-level selective activation checkpointing and torch.compile's partitioner, measured at full
size under FakeTensorMode on the reference model (``models.Reference``, reference-sdpa).

**Op-level checkpointing** (``op-sac``) wraps every decoder layer in
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)`` with
``create_selective_checkpoint_contexts`` and a policy function, as torchtitan's ``SelectiveAC``
does (``torchtitan/distributed/activation_checkpoint.py`` at commit b5bcd76c66d0, lines 31-94:
the save set; lines 241-287: the policy, written out in :func:`torchtitan_policy`). Its cached op
outputs live in a dispatch mode's dictionary, not in autograd's saved tensors, so
``saved_tensors_hooks`` do not see them: what a layer keeps is measured as the storages
**allocated inside that layer and still alive at the end of the forward pass** (its cached op
outputs and its output, which the next layer's checkpoint holds as its input), and the whole
model's as every storage the forward pass allocated and left alive, plus the token ids and
targets the embedding and the loss save. The step's peak is measured as for ``step``
(``step.measure_step``, with the layers wrapped before ``fully_shard``).

On the CPU ``F.scaled_dot_product_attention`` runs ``_scaled_dot_product_flash_attention_for_cpu``,
which is not in torchtitan's save set (it lists the CUDA kernels); it is added as the CUDA flash
kernel's stand-in, so the CPU run saves what the GPU run saves.

**torch.compile** (``compile``): each decoder layer is traced by AOTAutograd (``aot_module``,
what ``torch.compile`` runs under its backend) and split into forward and backward graphs by
``min_cut_rematerialization_partition``, the partitioner Inductor uses; the graphs run as
traced (no code generation). The tensors the forward graph hands to the backward are saved with
``ctx.save_for_backward``, so the ordinary saved-tensor count (``saved.measure_saved``)
measures them.
"""

from __future__ import annotations

import functools
import warnings
import weakref

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .models import build, decoder_layers, loss_of, spec_of, vocab_of

#: The policies measured: torchtitan's, and one a user states (the attention kernel's outputs
#: alone saved).
POLICIES = ("torchtitan", "attention")

METHOD = (
    "Every decoder layer of the reference model wrapped in torch.utils.checkpoint.checkpoint("
    "use_reentrant=False, context_fn=lambda: create_selective_checkpoint_contexts(policy)) as "
    "torchtitan's SelectiveAC wraps each transformer block (torchtitan/distributed/"
    "activation_checkpoint.py at b5bcd76c66d0); one forward pass at full size under "
    "FakeTensorMode. The cached op outputs live outside autograd's saved tensors, so a layer's "
    "bytes are the storages allocated inside it and still alive when the forward pass ends (its "
    "cached outputs and its own output, which the next layer's checkpoint keeps as its input); "
    "the whole model's, every storage the forward pass allocated and left alive, with the token "
    "ids and targets. Policies: 'torchtitan' (its save set, the CPU flash kernel standing in for "
    "the CUDA one, and every second mm recomputed, the count restarting in each layer), "
    "'attention' (only the attention kernel's outputs saved). A step's peak as kind step."
)

METHOD_COMPILE_OP = (
    "Every decoder layer of the reference model wrapped in torch.utils.checkpoint.checkpoint("
    "use_reentrant=False) with create_selective_checkpoint_contexts(policy) as for kind op-sac, "
    "then torch.compile(fullgraph=True) with AOTAutograd's min_cut_rematerialization_partition "
    "and no code generation (torchtitan applies its checkpointing before compiling each block); "
    "under FakeTensorMode at full size. Dynamo turns the checkpoint into its higher-order op, "
    "AOTAutograd tags each node with the policy's decision and the partitioner keeps those tags; "
    "what the compiled forward saves for backward (ctx.save_for_backward) is counted as for kind "
    "saved: storages, each once, parameters apart."
)

METHOD_COMPILE = (
    "Each decoder layer of the reference model traced by AOTAutograd (functorch.compile."
    "aot_module, what torch.compile runs under its backend) with min_cut_rematerialization_"
    "partition, the partitioner Inductor uses; the forward and backward graphs run as traced, "
    "under FakeTensorMode at full size. What the forward graph saves for the backward one "
    "(ctx.save_for_backward) is counted as for kind saved: storages, each once, parameters "
    "apart."
)


def torchtitan_save_ops() -> set:
    """torchtitan's ``_get_default_save_ops`` (lines 31-94 at b5bcd76c66d0): the partitioner's
    compute-intensive ops, the other SDPA kernels, ``max``, flex attention, ``linear``,
    ``topk``, the collectives whose outputs are kept; plus the CPU flash kernel (module
    docstring)."""
    from torch._functorch.partitioners import get_default_op_list

    aten = torch.ops.aten
    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_attention_math.default,
            aten._scaled_dot_product_fused_attention_overrideable.default,
            aten.max.default, torch._higher_order_ops.flex_attention, aten.linear.default,
            aten.topk.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default,
            torch.ops._c10d_functional.all_to_all_single.default}
    ops.add(aten._scaled_dot_product_flash_attention_for_cpu.default)  # the CPU's flash kernel
    return ops


_ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def torchtitan_policy():
    """torchtitan's policy function (``SelectiveAC._wrap_block``, lines 241-276 at
    b5bcd76c66d0), without the force-recompute shapes (a dense model has no router): a new
    counter per checkpointed call; every mm or linear counted; the save set's ops MUST_SAVE,
    except every second mm, PREFER_RECOMPUTE; everything else PREFER_RECOMPUTE."""
    from torch.utils.checkpoint import CheckpointPolicy

    save_ops = torchtitan_save_ops()
    mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def wrapped_policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if func in mm_ops:
            meta[key] += 1
        if func in save_ops:
            if func in mm_ops and meta[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return wrapped_policy


def attention_policy():
    """A policy a user states: save the attention kernel's outputs, recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy

    def policy(ctx, func, *args, **kwargs):
        name = getattr(func, "__name__", "").split(".")[0]
        if name in _ATTENTION:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class Checkpointed(nn.Module):
    """One decoder layer under op-level checkpointing: a fresh policy for every call, as
    torchtitan's ``context_fn`` makes one. The ``context_fn`` is made here, outside ``forward``,
    as torchtitan makes it before compiling its blocks: Dynamo refuses one made inside the
    compiled region ("checkpoint not implemented for NestedUserFunctionVariable context_fn")."""

    def __init__(self, layer: nn.Module, policy: str) -> None:
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        super().__init__()
        self.layer = layer
        make = {"torchtitan": torchtitan_policy, "attention": attention_policy}[policy]
        self.context_fn = lambda: create_selective_checkpoint_contexts(make())

    def forward(self, *args):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.layer, *args, use_reentrant=False, preserve_rng_state=False,
                          context_fn=self.context_fn)


def wrap_layers(net: nn.Module, policy: str) -> None:
    """Replace every decoder layer of ``net`` by its :class:`Checkpointed` wrapper."""
    layers = decoder_layers(net)
    for i, layer in enumerate(layers):
        layers[i] = Checkpointed(layer, policy)


class _Alive(TorchDispatchMode):
    """Every storage an op returns, with the scope it was allocated in, while it is alive."""

    def __init__(self, parameters=()) -> None:
        super().__init__()
        self.scope = "embedding"
        self.skip = {id(p.untyped_storage()) for p in parameters}  # weights and their views
        self.live: dict[int, tuple[str, int, str, tuple]] = {}
        self._refs: dict[int, weakref.ref] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        self._record(func, flat)
        return out

    def _record(self, func, flat) -> None:
        """Note each new storage behind the tensors in ``flat``, which ``func`` returned."""
        for t in flat:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                key = id(st)
                if key in self.skip or (key in self.live and self._refs[key]() is st):
                    continue
                self.live[key] = (self.scope, st.nbytes(), getattr(func, "__name__", str(func)),
                                  tuple(t.shape))

                def freed(_ref, key=key, self=self):
                    self.live.pop(key, None)
                    self._refs.pop(key, None)
                self._refs[key] = weakref.ref(st, freed)


def measure_op_sac(model: str, s: int, b: int = 1, policy: str = "torchtitan",
                   layers: int | None = None) -> dict:
    """What the reference model keeps for backward under op-level checkpointing (module
    docstring): per layer, the whole model, and the storages one layer keeps."""
    spec = spec_of(model, s)
    with FakeTensorMode():
        torch.manual_seed(0)
        net = build("reference-sdpa", spec, torch.bfloat16, layers)
        wrap_layers(net, policy)
        vocab = vocab_of(spec)
        tokens = torch.randint(0, vocab, (b, s))
        targets = torch.randint(0, vocab, (b, s))
        alive = _Alive([*net.parameters(), *net.buffers()])
        handles = []
        for i, w in enumerate(decoder_layers(net)):
            def enter(_m, _a, i=i):
                alive.scope = f"layer {i}"

            def leave(_m, _a, _o):
                alive.scope = "output"
            handles += [w.register_forward_pre_hook(enter), w.register_forward_hook(leave)]
        with alive:
            loss = loss_of(net, tokens, targets)
        for h in handles:
            h.remove()
        entries = list(alive.live.values())
        n = len(decoder_layers(net))
        per_layer = [sum(e[1] for e in entries if e[0] == f"layer {i}") for i in range(n)]
        shown = 1 if n > 1 else 0
        inputs = tokens.untyped_storage().nbytes() + targets.untyped_storage().nbytes()
        result = {
            "total": sum(e[1] for e in entries) + inputs,
            "per_layer": per_layer,
            "embedding": sum(e[1] for e in entries if e[0] == "embedding"),
            "output": sum(e[1] for e in entries if e[0] == "output"),
            "inputs": inputs,
            "layer_shown": shown,
            "layer_tensors": [[op, list(shape), nbytes] for scope, nbytes, op, shape in entries
                              if scope == f"layer {shown}"],
        }
        loss.backward()
        missing = [name for name, p in net.named_parameters() if p.grad is None]
        assert not missing, f"no gradient reached {missing[:3]}"
        return result


def _traced(template: nn.Module, bw_compiler=None):
    """``template``'s forward traced by AOTAutograd with the min-cut partitioner, its parameters
    the traced function's first inputs (``torch.func.functional_call``), as ``torch.compile``
    lifts them: one trace serves every layer of the same shape. ``bw_compiler`` sees the
    backward graph (the tests read what it is handed)."""
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition

    names = [n for n, _ in template.named_parameters()]

    def fn(*flat):
        params = dict(zip(names, flat[:len(names)]))
        x, cos, sin = flat[len(names):]
        rope = None if cos is None else (cos, sin)
        return torch.func.functional_call(template, params, (x, rope, None))

    def nop(gm, _inputs):
        return make_boxed_func(gm)

    return aot_function(fn, fw_compiler=nop, bw_compiler=bw_compiler or nop,
                        partition_fn=min_cut_rematerialization_partition)


class Compiled(nn.Module):
    """One decoder layer run through a traced forward and backward (:func:`_traced`)."""

    def __init__(self, layer: nn.Module, traced) -> None:
        super().__init__()
        self.layer = layer
        self.traced = traced

    def forward(self, x, rope, mask):
        if mask is not None:
            raise ValueError("compiled layers are measured with SDPA (no mask); accepted: "
                             "reference-sdpa")
        cos, sin = rope if rope is not None else (None, None)
        return self.traced(*self.layer.parameters(), x, cos, sin)


def compile_layers(net: nn.Module, s: int, b: int = 1) -> None:
    """Replace every decoder layer of ``net`` by a :class:`Compiled` one, sharing one trace,
    traced here on inputs of ``b`` sequences of ``s`` tokens made for it: AOTAutograd keeps the
    inputs it traced on, which would otherwise be the first step's own tensors."""
    layers = decoder_layers(net)
    traced = _traced(layers[0])
    first = layers[0]
    p = next(first.parameters())
    x = torch.zeros(b, s, first.h, dtype=p.dtype, requires_grad=True)
    cos = sin = torch.zeros(s, first.d, dtype=p.dtype)
    traced(*first.parameters(), x, cos, sin)
    for i, layer in enumerate(layers):
        layers[i] = Compiled(layer, traced)


def compile_op_layers(net: nn.Module, policy: str, s: int, b: int = 1) -> None:
    """Every decoder layer of ``net`` under op-level checkpointing with ``policy`` and then
    ``torch.compile`` (torchtitan's order: ``apply_ac`` before ``apply_compile``), with
    AOTAutograd's min-cut partitioner and no code generation. Dynamo turns the checkpoint into
    its higher-order op and AOTAutograd tags each node with the policy's decision, which the
    partitioner keeps (MUST_SAVE saved where the backward needs it, PREFER_RECOMPUTE
    recomputed). Dynamo captures the first layer once, here, on inputs made for it (it refuses
    to run under the saved-tensor counter's dispatch mode: "non-infra torch dispatch mode
    present"); every layer then calls what the ``aot_autograd`` backend returned, as the
    compiled frame would, with its own parameters."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    def nop(gm, _inputs):
        return make_boxed_func(gm)

    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop,
                           partition_fn=min_cut_rematerialization_partition)
    captured = {}

    def capture(gm, example_inputs):
        captured["fn"] = backend(gm, example_inputs)
        captured["inputs"] = list(example_inputs)
        return captured["fn"]

    layers = decoder_layers(net)
    first = layers[0]
    p = next(first.parameters())
    x = torch.zeros(b, s, first.h, dtype=p.dtype, requires_grad=True)
    cos, sin = torch.zeros(s, first.d, dtype=p.dtype), torch.zeros(s, first.d, dtype=p.dtype)
    torch._dynamo.reset()
    with warnings.catch_warnings():  # Dynamo instantiates the norms' autograd.Function itself,
        warnings.simplefilter("ignore", DeprecationWarning)  # which warns (an error under pytest)
        torch.compile(Checkpointed(first, policy), backend=capture,
                      fullgraph=True)(x, (cos, sin), None)
    names = {id(t): n for n, t in first.named_parameters()}
    order = []
    for t in captured["inputs"]:
        if id(t) in names:
            order.append(names[id(t)])
        else:
            found = [k for k, v in (("x", x), ("cos", cos), ("sin", sin)) if v is t]
            if not found:
                raise RuntimeError(f"the compiled layer takes an input that is not a parameter, x, "
                                   f"cos or sin: {type(t).__name__} {getattr(t, 'shape', t)}")
            order.append("=" + found[0])
    for i, layer in enumerate(layers):
        layers[i] = _CompiledOp(layer, captured["fn"], tuple(order))


class _CompiledOp(nn.Module):
    """One decoder layer run through the compiled function :func:`compile_op_layers` captured,
    its inputs in the captured graph's order (``"=x"``, ``"=cos"``, ``"=sin"`` or a parameter's
    name)."""

    def __init__(self, layer: nn.Module, fn, order: tuple[str, ...]) -> None:
        super().__init__()
        self.layer = layer
        self.fn = fn
        self.order = order

    def forward(self, x, rope, mask):
        if mask is not None:
            raise ValueError("compiled layers are measured with SDPA (no mask); accepted: "
                             "reference-sdpa")
        given = {"=x": x, "=cos": rope[0], "=sin": rope[1]}
        params = dict(self.layer.named_parameters())
        out = self.fn(*[given[k] if k in given else params[k] for k in self.order])
        return out[0] if isinstance(out, (list, tuple)) else out


def measure_compiled_op(model: str, s: int, b: int = 1, policy: str = "torchtitan",
                        layers: int | None = None) -> dict:
    """What the reference model saves for backward with its layers under op-level checkpointing
    and compiled (:func:`compile_op_layers`), counted as ``saved.measure_saved`` counts it: the
    compiled function saves with ``ctx.save_for_backward``, no policy cache is left at run time."""
    from . import saved

    return saved.measure_saved(model, "reference-sdpa", s, b, "bf16", layers=layers,
                               backward=True,
                               prepare=functools.partial(compile_op_layers, policy=policy, s=s,
                                                         b=b))


def measure_compiled(model: str, s: int, b: int = 1, layers: int | None = None) -> dict:
    """What the reference model saves for backward with its layers compiled (module docstring),
    counted as ``saved.measure_saved`` counts it."""
    from . import saved

    return saved.measure_saved(model, "reference-sdpa", s, b, "bf16", layers=layers,
                               backward=True, prepare=functools.partial(compile_layers, s=s, b=b))
