"""LoRA with peft on Hugging Face's Llama at full size: trainable parameters, bytes saved for
backward, model states after an AdamW step, and the step's peak.

``get_peft_model(LlamaForCausalLM, LoraConfig(r, target_modules, lora_dropout))`` with peft's
defaults (``autocast_adapter_dtype=True``: adapters in fp32 over a bf16 base), under
FakeTensorMode. Two things differ from a GPU run and are patched for the build only: peft moves
each new adapter to its base layer's device (``_move_adapter_to_device_of_base_layer``, then
``module.to(device)``), which swaps parameters and cannot swap a fake tensor; here the adapters
are made on the CPU in fp32 from the start, which is where peft's fp32 autocast leaves them.
The forward and backward passes and the step are peft's, transformers' and PyTorch's own code.
"""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import shapes
from .models import build, decoder_layers, loss_of
from .saved import _summarise, layer_scopes
from .step import _one_step
from .tracking import AllocationTracker, SavedTensorCounter, distinct_bytes, dtype_name

ALL_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")
HF_MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
              "up": "up_proj", "down": "down_proj"}

METHOD = (
    "peft's get_peft_model on transformers' LlamaForCausalLM (bf16, attn_implementation="
    "'sdpa'), LoraConfig(r, target_modules, lora_dropout=0), adapters in fp32 (peft's "
    "autocast_adapter_dtype default), under FakeTensorMode; peft's move of each new adapter to "
    "its base layer's device is skipped (fake parameters cannot be swapped): the adapters are "
    "made in fp32 on the CPU, as peft leaves them. Saved for backward: as for kind 'saved'. "
    "States and peak: as for kind 'step', AdamW over the trainable parameters only "
    "(model.parameters() with requires_grad), foreach as recorded."
)


@contextlib.contextmanager
def _fake_friendly_peft():
    """Skip peft's device moves, which swap parameters (impossible for fake tensors)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    move = BaseTunerLayer._move_adapter_to_device_of_base_layer
    to = torch.nn.Module.to

    def same_device_to(self, *args, **kwargs):
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is None and (device is None or device.type == "cpu"):
            return self
        return to(self, *args, **kwargs)

    BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda self, *a, **k: None
    torch.nn.Module.to = same_device_to
    try:
        yield
    finally:
        BaseTunerLayer._move_adapter_to_device_of_base_layer = move
        torch.nn.Module.to = to


def lora_model(base: torch.nn.Module, rank: int, targets: tuple[str, ...], dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=dropout,
                        target_modules=[HF_MODULES[t] for t in targets])
    return get_peft_model(base, config)


def trainable_on_meta(model: str, rank: int, targets: tuple[str, ...]) -> tuple[int, int]:
    """peft's (trainable, all) parameter counts for ``model`` built on the meta device."""
    from .models import hf_model

    with torch.device("meta"):
        base = hf_model(shapes.for_length(model, 2048), "sdpa", torch.bfloat16)
        peft_model = lora_model(base, rank, targets)
    return peft_model.get_nb_trainable_parameters()


def measure_lora(model: str | dict, rank: int, targets: tuple[str, ...], s: int = 2048, b: int = 1,
                 *, foreach: bool = False, layers: int | None = None, fake: bool = True,
                 observer=None, device: str = "cpu") -> dict:
    """Saved for backward, states after the second step and the peak of LoRA on ``model``.

    ``observer(model, optimizer)``, if given, returns a context manager entered around the
    second step; ``device="cuda"`` (real tensors only) builds and runs on the GPU
    (``python -m validate.gpu``).
    """
    if device != "cpu" and fake:
        raise ValueError(f"device={device!r} runs real tensors: fake=False")
    shape = shapes.for_length(model, s) if isinstance(model, str) else dict(model)
    fake_mode = FakeTensorMode() if fake else contextlib.nullcontext()
    patch = _fake_friendly_peft() if fake else contextlib.nullcontext()
    on_device = torch.device(device) if device != "cpu" else contextlib.nullcontext()
    with fake_mode, on_device:
        torch.manual_seed(0)
        with patch:
            net = lora_model(build("hf-sdpa", shape, torch.bfloat16, layers), rank, targets)
        inner = net.base_model.model
        params = list(net.parameters())
        trainable = [p for p in params if p.requires_grad]
        tokens = torch.randint(0, shape["vocab"], (b, s))
        targets_ = torch.randint(0, shape["vocab"], (b, s))

        # 1. saved for backward, one forward pass, scoped by decoder layer (on the CPU only:
        # on a GPU the counter's references would stay in the allocator's peak)
        saved = None
        if device == "cpu":
            counter = SavedTensorCounter(parameters=[*params, *net.buffers()], inputs=[tokens, targets_])
            with layer_scopes(counter, decoder_layers(inner)), counter():
                loss = loss_of(inner, tokens, targets_)
            saved = _summarise(counter, len(decoder_layers(inner)))
            del loss
            counter.release()

        # 2. two steps: states and the steady-state peak
        tracker = AllocationTracker(vocab=shape["vocab"])
        with tracker:
            tracker.tag(params, "parameters")
            tracker.tag(net.buffers(), "parameters")
            opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=foreach)
            first = None
            for step in (1, 2):
                watching = contextlib.nullcontext()
                if step == 2:
                    first = {"bytes": tracker.peak, "phase": tracker.peak_phase,
                             "alive": tracker.peak_breakdown()}
                    tracker.set_phase("zero_grad")
                    for p in trainable:
                        p.grad = None
                    tracker.reset_peak()
                    if observer:
                        watching = observer(net, opt)
                with watching:  # forward, backward and AdamW over the adapters alone
                    _one_step(inner, None, trainable, None, opt, tokens, targets_, None, tracker,
                              device)
            tracker.set_phase("after step")
            frozen = [p for p in params if not p.requires_grad]
            opt_tensors = [v for st in opt.state.values() for k, v in st.items() if k != "step"]
            steps = [v for st in opt.state.values() for k, v in st.items() if k == "step"]
            states = {
                "parameters": distinct_bytes(params),
                "frozen_parameters": distinct_bytes(frozen),
                "trainable_parameters": distinct_bytes(trainable),
                "gradients": distinct_bytes(p.grad for p in params),
                "master_weights": 0,
                "optimizer_states": distinct_bytes(opt_tensors),
            }
            states["total"] = (states["parameters"] + states["gradients"]
                               + states["optimizer_states"])
            states["step_counters"] = {"count": len(steps), "bytes": distinct_bytes(steps),
                                       "dtype": sorted({dtype_name(t.dtype) for t in steps})}
            states["dtypes"] = {
                "frozen": sorted({dtype_name(p.dtype) for p in frozen}),
                "trainable": sorted({dtype_name(p.dtype) for p in trainable}),
                "optimizer_states": sorted({dtype_name(t.dtype) for t in opt_tensors}),
            }
            alive_after = tracker.now()
        trainable_count, all_count = net.get_nb_trainable_parameters()
    return {
        "trainable_count": trainable_count,
        "parameters_count": all_count,
        "saved": saved,
        "states": states,
        "peak": {"bytes": tracker.peak, "phase": tracker.peak_phase, "op": tracker.peak_op,
                 "alive": tracker.peak_breakdown(), "largest": tracker.peak_largest()},
        "phase_peaks": dict(tracker.phase_peaks),
        "first_step_peak": first,
        "alive_after_step": alive_after,
    }
