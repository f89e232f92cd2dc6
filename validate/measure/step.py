"""One whole training step (forward, backward, AdamW step) per precision recipe: the model states
it leaves behind and the peak of live memory during it.

Each recipe is built the way its framework does it, in plain PyTorch:

``zero-bf16`` / ``zero-fp16``
    ZeRO paper §3.1 mixed precision (DeepSpeed's FP16_Optimizer without partitioning): 16-bit
    parameters and gradients; an fp32 master copy of every parameter that AdamW (two fp32
    moments) updates. For the step each 16-bit gradient is converted to an fp32 gradient of its
    master, all at once; after the step those fp32 gradients are dropped and the masters copied
    into the 16-bit parameters. The 16-bit gradients stay until the next ``zero_grad``.
    2 + 2 + 4 + 8 = 16 bytes per parameter. (fp16 without a loss scaler: the scaler adds one
    fp32 scalar, and its overflow check reads values, which fake tensors do not have.)
``megatron-bf16``
    Megatron-LM's Float16OptimizerWithFloat16Params with ``accumulate_allreduce_grads_in_fp32``:
    bf16 parameters; one contiguous fp32 ``main_grad`` buffer with a view per parameter; a
    post-accumulate-grad hook adds each bf16 gradient into its ``main_grad`` and frees it;
    the fp32 master's ``.grad`` is the ``main_grad`` view itself (no copy).
    2 + 4 + 4 + 8 = 18 bytes per parameter.
``bf16-master-naive``
    What straightforward code does: bf16 parameters and gradients, an fp32 master whose
    ``.grad`` is set to ``p.grad.float()`` and left alive, the bf16 gradient too.
    2 + 2 + 4 + 4 + 8 = 20 bytes per parameter.
``bf16-master-free-grads``
    As the naive recipe, but each bf16 gradient is freed as soon as it is copied to fp32.
``autocast-fp32``
    fp32 parameters, ``torch.autocast("cpu", torch.bfloat16)`` around the forward pass, fp32
    gradients, AdamW. 4 + 4 + 8 = 16 bytes per parameter.
``fsdp2-bf16``
    ``fully_shard`` on each decoder layer and the root, ``MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32)``, fp32 sharded parameters, on a fake process group of ``dp`` ranks,
    measured as rank ``rank``: (4 + 4 + 8)/dp per parameter, plus padding.

AdamW is ``torch.optim.AdamW``; ``foreach`` is passed explicitly (its CUDA default is True, its
CPU default False). Its step counters (one fp32 scalar tensor per parameter tensor) are
reported apart from the moments.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

from .hfconfigs import ConfigFile
from .models import build, decoder_layers, loss_of, runs, spec_of, vocab_of
from .tracking import AllocationTracker, distinct_bytes, dtype_name, local

RECIPES = ("zero-bf16", "zero-fp16", "megatron-bf16", "bf16-master-naive",
           "bf16-master-free-grads", "autocast-fp32", "fsdp2-bf16")

METHOD_STATES = (
    "After one real training step (forward and backward of one micro-batch, then "
    "optimizer.step()) of the full-size model under FakeTensorMode, before zero_grad: the "
    "distinct storages behind the parameters (a DTensor's local shard under FSDP2), their "
    "gradients as the recipe keeps them (p.grad, Megatron's main_grad buffer, the masters' "
    "fp32 .grad), the fp32 master weights and the optimizer's state tensors, each storage "
    "once (Megatron's master .grad is a view of main_grad: counted once). AdamW's 'step' "
    "entries are reported apart as step_counters."
)

METHOD_PEAK = (
    "A TorchDispatchMode under FakeTensorMode registers every storage each aten op returns and "
    "a weak reference to it notices when PyTorch frees it (UntypedStorage.resize_, which FSDP2 "
    "uses to free and re-allocate unsharded parameters, is wrapped too), giving the bytes alive "
    "after every op of the step; the peak is the largest, with the phase it falls in (forward, "
    "backward, optimizer step) and the live storages then, by category. Categories are roles "
    "over a storage's life: parameters, master weights, gradients, optimizer states (moments), "
    "step counters, FSDP gathered parameters (all-gather buffers and unsharded parameters), "
    "FSDP reduce-scatter buffers, logits (any tensor whose last dimension is the vocabulary: "
    "logits, their fp32 copy, log-softmax, their gradients), weight copies (casts of "
    "parameters, e.g. autocast's 16-bit weights), activations (saved for backward) and "
    "temporaries (everything else). Memory inside one kernel (workspaces) and the CUDA caching "
    "allocator's rounding and fragmentation are not seen: this is the sum of live tensors, a "
    "lower bound for torch.cuda.max_memory_allocated. The tests check the peak against "
    "torch.distributed._tools.mem_tracker.MemTracker."
)


def _recipe_dtypes(recipe: str):
    if recipe == "zero-fp16":
        return torch.float16, None
    if recipe in ("autocast-fp32", "fsdp2-bf16"):
        return torch.float32, (torch.bfloat16 if recipe == "autocast-fp32" else None)
    return torch.bfloat16, None


def _states(params, master, opt, extra_grads=()) -> dict:
    opt_tensors = [v for p in (master or params) for k, v in opt.state[p].items() if k != "step"]
    steps = [v for p in (master or params) for k, v in opt.state[p].items() if k == "step"]
    grads = [p.grad for p in params] + [m.grad for m in master or ()] + list(extra_grads)
    out = {
        "parameters": distinct_bytes(params),
        "gradients": distinct_bytes(grads),
        "master_weights": distinct_bytes(master or ()),
        "optimizer_states": distinct_bytes(opt_tensors),
    }
    out["total"] = sum(out.values())
    out["step_counters"] = {"count": len(steps), "bytes": distinct_bytes(steps),
                            "dtype": sorted({dtype_name(s.dtype) for s in steps})}
    out["dtypes"] = {
        "parameters": sorted({dtype_name(p.dtype) for p in params}),
        "gradients": sorted({dtype_name(g.dtype) for g in grads if g is not None}),
        "optimizer_states": sorted({dtype_name(t.dtype) for t in opt_tensors}),
    }
    return out


@contextlib.contextmanager
def _process_group(dp: int, rank: int):
    if dp == 1:
        yield None
        return
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=rank, world_size=dp, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (dp,))  # outside FakeTensorMode: it reads its rank map
    finally:
        dist.destroy_process_group()


def measure_step(model: str | dict | ConfigFile, implementation: str, recipe: str, s: int = 2048, b: int = 1, *,
                 foreach: bool = False, dp: int = 1, rank: int = 0,
                 layers: int | None = None, fake: bool = True, observer=None,
                 device: str = "cpu", prepare=None, loss_fn=None,
                 tracker_class=AllocationTracker) -> dict:
    """Run two training steps of ``model`` with ``recipe``; return the states and the peaks.

    ``fake=False`` runs on real tensors (small shapes only: the tests compare the two);
    ``observer(model, optimizer)``, if given, returns a context manager entered around the
    second step (the tests pass PyTorch's MemTracker to check the peak). ``device="cuda"``
    (real tensors only) builds the model and the batch on the GPU and autocasts there
    (``python -m validate.gpu``). ``model`` is as for ``saved.measure_saved``; a config.json
    model's result adds ``runs`` (what transformers ran). ``prepare(model)``, if given, changes
    the model once it is built, before ``fully_shard`` (``checkpointing``: each layer wrapped in
    op-level checkpointing, or compiled). ``loss_fn(net, tokens, targets,
    tracker)``, if given, computes the loss instead of the model's own (``techniques``: a
    chunked loss, offloaded activations), counted by a ``tracker_class`` tracker.
    """
    if device != "cpu" and (fake or dp > 1):
        raise ValueError(f"device={device!r} runs real tensors on one device: fake=False, dp=1")
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; accepted: {', '.join(RECIPES)}")
    if (recipe == "fsdp2-bf16") != (dp > 1):
        raise ValueError(f"dp = {dp}: fsdp2-bf16 needs dp > 1, the other recipes dp = 1")
    spec = spec_of(model, s)
    param_dtype, autocast = _recipe_dtypes(recipe)
    fake_mode = FakeTensorMode() if fake else contextlib.nullcontext()
    on_device = torch.device(device) if device != "cpu" else contextlib.nullcontext()
    with _process_group(dp, rank) as mesh, fake_mode, on_device:
        torch.manual_seed(0)
        net = build(implementation, spec, param_dtype, layers)
        if prepare is not None:
            prepare(net)
        if recipe == "fsdp2-bf16":
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for layer in decoder_layers(net):
                fully_shard(layer, mesh=mesh, mp_policy=mp)
            fully_shard(net, mesh=mesh, mp_policy=mp)
        params = list(net.parameters())
        vocab = vocab_of(spec)
        tokens = torch.randint(0, vocab, (b, s))
        targets = torch.randint(0, vocab, (b, s))
        tracker = tracker_class(vocab=vocab)
        with tracker:
            tracker.tag(params, "parameters")
            tracker.tag(net.buffers(), "parameters")
            master = None
            main_grads = []
            if recipe in ("zero-bf16", "zero-fp16", "megatron-bf16", "bf16-master-naive",
                          "bf16-master-free-grads"):
                master = [p.detach().float() for p in params]
                tracker.tag(master, "master weights")
            if recipe == "megatron-bf16":
                buffer = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32)
                tracker.tag(buffer, "gradients")
                offset = 0
                for p in params:
                    p.main_grad = buffer[offset:offset + p.numel()].view_as(p)
                    offset += p.numel()

                    def accumulate(p):
                        p.main_grad.add_(p.grad)
                        p.grad = None
                    p.register_post_accumulate_grad_hook(accumulate)
                main_grads = [p.main_grad for p in params]
            opt = torch.optim.AdamW(master or params, lr=1e-4, foreach=foreach)
            first = None
            for step in (1, 2):
                watching = contextlib.nullcontext()
                if step == 2:  # the steady state: optimizer states exist from the start
                    first = {"bytes": tracker.peak, "phase": tracker.peak_phase,
                             "alive": tracker.peak_breakdown()}
                    tracker.set_phase("zero_grad")
                    for p in params:
                        p.grad = None
                    for m in master or ():
                        m.grad = None
                    if main_grads:
                        buffer.zero_()
                    tracker.reset_peak()
                    if recipe == "fsdp2-bf16":
                        _tag_unsharded_grads(net, tracker)
                    if observer:
                        watching = observer(net, opt)
                with watching:
                    _one_step(net, recipe, params, master, opt, tokens, targets, autocast,
                              tracker, device, loss_fn)
            tracker.set_phase("after step")
            states = _states(params, master, opt, main_grads)
            alive_after = tracker.now()
        result = {
            "parameters_count": sum(local(p).numel() for p in params) if dp == 1 else
            sum(p.numel() for p in params),
            "states": states,
            "peak": {
                "bytes": tracker.peak,
                "phase": tracker.peak_phase,
                "op": tracker.peak_op,
                "alive": tracker.peak_breakdown(),
                "largest": tracker.peak_largest(),
            },
            "phase_peaks": dict(tracker.phase_peaks),
            "first_step_peak": first,
            "alive_after_step": alive_after,
        }
        if dp > 1:
            result["local_parameters"] = sum(local(p).numel() for p in params)
        if isinstance(spec, ConfigFile):
            result["runs"] = runs(net)
    return result


def _one_step(net, recipe, params, master, opt, tokens, targets, autocast, tracker,
              device: str = "cpu", loss_fn=None) -> None:
    """Forward, backward and the recipe's optimizer step, with the phases marked."""
    tracker.set_phase("forward")
    cast = torch.autocast(device, dtype=autocast) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(_tag_saved(tracker), lambda x: x), cast:
        loss = (loss_of(net, tokens, targets) if loss_fn is None
                else loss_fn(net, tokens, targets, tracker))
    tracker.set_phase("backward")
    loss.backward()
    del loss
    tracker.tag((p.grad for p in params), "gradients")

    tracker.set_phase("optimizer step")
    with torch.no_grad():
        if master is not None and recipe != "megatron-bf16":
            for m, p in zip(master, params):
                m.grad = p.grad.float()
                tracker.tag(m.grad, "gradients")
                if recipe == "bf16-master-free-grads":
                    p.grad = None
        elif recipe == "megatron-bf16":
            for m, p in zip(master, params):
                m.grad = p.main_grad.float()  # already fp32: the same storage
        opt.step()
        tracker.tag((v for st in opt.state.values() for k, v in st.items() if k != "step"),
                    "optimizer states")
        tracker.tag((v for st in opt.state.values() for k, v in st.items() if k == "step"),
                    "step counters")
        if master is not None:
            if recipe.startswith("zero"):
                for m in master:
                    m.grad = None
            for m, p in zip(master, params):
                p.copy_(m)


def _tag_unsharded_grads(net, tracker: AllocationTracker) -> None:
    """Tag the gradients autograd accumulates into FSDP2's unsharded parameters.

    They live from the layer's backward until FSDP copies them into its reduce-scatter buffer.
    The unsharded parameters exist after the first forward pass (FSDP2 makes them lazily);
    they are reached through FSDP2's internal FSDPParam objects, for this pinned torch.
    """
    from torch.distributed.fsdp import FSDPModule

    def tag(p):
        tracker.tag(p.grad, "gradients")

    found = 0
    for module in net.modules():
        if isinstance(module, FSDPModule):
            for group in module._get_fsdp_state()._fsdp_param_groups:
                for fsdp_param in group.fsdp_params:
                    fsdp_param._unsharded_param.register_post_accumulate_grad_hook(tag)
                    found += 1
    assert found == len(list(net.parameters())), "every parameter has one FSDPParam"


def _tag_saved(tracker: AllocationTracker):
    def pack(x):
        tracker.tag(x, "activations")
        return x
    return pack
