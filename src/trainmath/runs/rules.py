"""The rules a run keeps across its parts, each written once, and the list of every rule a
:class:`~trainmath.runs.description.Run` must keep.

Each rule returns the :class:`~trainmath.problems.Problem` s it finds. Rules that one layer
owns live there and are only listed here: a layout's splits
(:func:`trainmath.parallel.layout.layout_problems`), kernels
(:func:`trainmath.memory.kernels.kernel_problems`,
:func:`trainmath.memory.kernels.context_parallel_problems`,
:func:`trainmath.memory.kernels.loss_problems`,
:func:`trainmath.memory.kernels.activation_offload_problems`), a training setup's offload
(:func:`trainmath.memory.training.offload_problems`), a GPU's peaks
(:meth:`trainmath.hardware.Accelerator.peak_problems`). The rules written here are those that
need several parts at once: a sequence and the model's positions, a recipe and a layout, a
budget and a GPU, an adapter and the rest of the run. The planner drops layouts with the same
functions (:mod:`trainmath.planner.search`).
"""

from __future__ import annotations

from ..hardware import GPU_ALIASES, GPUS, gpu as accelerator
from ..memory.finetune import ADAPTER_RECIPES, Adapter, model_problems
from ..memory.checkpointing import compile_problems, policy_problems
from ..memory.kernels import (activation_offload_problems, context_parallel_problems,
                              kernel_problems, loss_problems)
from ..memory.recipes import peak_precision, peak_precision_problems, recipe
from ..memory.training import Training
from ..model.moe import Routing, routing_problems
from ..model.shape import ModelShape
from ..parallel.layout import Batch, Layout, layout_problems
from ..problems import Problem

#: What "a model shape" is, wherever a rule asks for one.
MODEL_SHAPE = "a model shape (a preset, a config.json or a shape's sizes)"


def positions_problems(model: ModelShape, seq_len: int) -> list[Problem]:
    """A sequence no longer than a model's learned positions: there is no embedding for a
    position past them. (Rotary models take longer sequences: :func:`positions_warning`.)"""
    if model.positions and seq_len > model.positions:
        return [Problem(("seq_len",), f"seq_len {seq_len} is longer than the {model.positions} "
                        f"learned positions of {model.name}; accepted: at most {model.positions}")]
    return []


def positions_warning(model: ModelShape, seq_len: int | None) -> str | None:
    """A rotary model asked for more tokens than its ``max_position_embeddings``: accepted, as
    long-context training with RoPE scaling does (Llama 3 §3.4: 8K to 128K), and said."""
    if seq_len and not model.positions and model.max_positions and seq_len > model.max_positions:
        return (f"seq_len {seq_len} is longer than the {model.max_positions} positions "
                f"{model.name} was trained for (max_position_embeddings): long-context training "
                "needs RoPE scaling (e.g. a larger rope_theta); memory and time are counted the "
                "same way")
    return None


def fsdp2_problems(recipe_name: str, lay: Layout) -> list[Problem]:
    """FSDP2 is modelled without expert parallelism (with pipelines, as torchtitan runs it)."""
    if recipe(recipe_name).name != "fsdp2":
        return []
    return [Problem((name, "recipe"), f"recipe 'fsdp2' with {name} > 1 is not modelled; "
                    f"accepted: {name} = 1") for name in ("ep",) if getattr(lay, name) > 1]


def time_problems(tokens: int | None, mfu: float | None) -> list[Problem]:
    """An MFU is an assumption for a time to train: it needs the tokens."""
    if mfu is not None and tokens is None:
        return [Problem(("mfu", "tokens"), "mfu needs tokens as well: an MFU assumed is for a "
                        "time to train, which needs the tokens")]
    return []


def predicted_time_problems(*, shape: ModelShape | None, batch: Batch, gpu: str | None,
                            timeable: str | None) -> list[Problem]:
    """Tokens without an MFU ask for the step time to be predicted: that needs a model shape,
    a sequence, a global batch and a GPU kind, and a run the step-time model times
    (``timeable``: why not, else None)."""
    missing = [name for name, have in (("a model shape", shape is not None),
                                       ("seq_len", batch.seq_len is not None),
                                       ("global_batch", batch.global_batch is not None),
                                       ("gpu", gpu is not None)) if not have]
    if missing:
        return [Problem(("tokens", "mfu"), "tokens without mfu asks for the step time to be "
                        "predicted, which needs " + ", ".join(missing) + "; accepted: give them, "
                        "or give mfu")]
    if timeable:
        return [Problem(("tokens", "mfu"), f"tokens without mfu: {timeable}; accepted: give mfu")]
    return []


def untimed_reason(training: Training) -> str | None:
    """Why the step-time model cannot time a run with this training setup, or None."""
    if training.offload != "none":
        return ("offload moves model states between the GPU and the CPU every step, which the "
                "step-time model does not time")
    return None


def budget_problems(training: Training, gpu_kind: str | None) -> list[Problem]:
    """A time to train needs a GPU kind, for its dense peak in the recipe's precision
    (:func:`trainmath.memory.recipes.peak_precision`), which that GPU must have."""
    if gpu_kind is None:
        return [Problem(("gpu",), "a time to train needs a GPU kind for its peak FLOP/s; "
                        f"accepted: gpu one of {', '.join([*GPUS, *GPU_ALIASES])}")]
    r = recipe(training.recipe)
    problems = peak_precision_problems(r)
    return problems or accelerator(gpu_kind).peak_problems(peak_precision(r))


def count_only_problems(lay: Layout, batch: Batch, routing: Routing = Routing()
                        ) -> list[Problem]:
    """A parameter count cannot be split over tp, pp or ep ranks, nor scheduled in a pipeline,
    nor routed: one problem naming every part that needs a shape."""
    given = {"global_batch": batch.global_batch, "v": lay.v if lay.v > 1 else None,
             "tp": lay.tp if lay.tp > 1 else None, "pp": lay.pp if lay.pp > 1 else None,
             "ep": lay.ep if lay.ep > 1 else None, "etp": lay.etp,
             "capacity_factor": None if routing.capacity_factor is None
             else f"{float(routing.capacity_factor):g}",
             "expert_load": None if routing.load == "balanced" else routing.load}
    needs = tuple(name for name, value in given.items() if value is not None)
    if not needs:
        return []
    listing = " and ".join(f"{name} {given[name]}" for name in needs)
    verb = "need" if len(needs) > 1 else "needs"
    return [Problem(needs, f"{listing} {verb} a model shape, not a parameter count alone: how the "
                    "layers split over ranks and stages depends on it; accepted: "
                    f"{MODEL_SHAPE}, or tp = pp = v = ep = 1 and no global_batch")]


def adapter_problems(adapter: Adapter, *, shape: ModelShape | None, layout: Layout,
                     training: Training, timed: bool) -> list[Problem]:
    """What a LoRA or QLoRA run needs: a Llama-style shape, the whole model on each device (dp
    replicas only), no ZeRO, no offload, no time to train (``timed``), an adapter recipe."""
    a, lay, t = adapter, layout, training
    if not isinstance(a, Adapter):
        raise ValueError(f"adapter must be a trainmath.memory.finetune.Adapter or None, got {a!r}")
    if shape is None:
        return [Problem(("model",), "a LoRA or QLoRA run needs a model shape, not a parameter count "
                        f"alone: the adapter's size depends on the matrices; accepted: {MODEL_SHAPE}")]
    problems = model_problems(shape)
    split = {k: getattr(lay, k) for k in ("tp", "pp", "cp", "v") if getattr(lay, k) > 1}
    if split:
        given = ", ".join(f"{k} {n}" for k, n in split.items())
        problems.append(Problem(tuple(split), "LoRA and QLoRA are modelled with the whole model on "
                                f"each device; got {given}; accepted: tp = pp = cp = v = 1 (dp "
                                "replicas are fine)"))
    if t.zero_stage not in (None, 0):
        problems.append(Problem(("zero_stage",), f"ZeRO stage {t.zero_stage} with an adapter is not "
                                "modelled; accepted: 0"))
    if t.offload != "none":
        problems.append(Problem(("offload",), f"offload {t.offload!r} with an adapter is not "
                                "modelled; accepted: offload 'none'"))
    for name, value in (("loss", t.loss), ("activation_offload", t.activation_offload)):
        if value not in ("standard", "none"):
            problems.append(Problem((name,), f"{name} {value!r} with an adapter is not "
                                    "modelled; accepted: " + ("loss 'standard'" if name == "loss"
                                                              else "activation_offload 'none'")))
    if timed:
        problems.append(Problem(("tokens", "mfu"), "a time to train with an adapter is not modelled "
                                "(its backward computes no gradients for the frozen weights, so 6 "
                                "FLOPs per parameter and token overcounts); accepted: no tokens and "
                                "mfu"))
    if t.recipe is not None and t.recipe not in ADAPTER_RECIPES:
        problems.append(Problem(("recipe",), f"recipe {t.recipe!r} for the adapter's weights is not "
                                f"modelled; accepted: {', '.join(ADAPTER_RECIPES)}"))
    return problems


def run_problems(model: ModelShape, *, layout: Layout, training: Training, batch: Batch
                 ) -> list[Problem]:
    """Every rule a resolved run with a model shape must keep, in this order: the layout's
    (with the batch and sequence), the model's positions, context parallelism's kernels, the
    implementation's kernels, FSDP2's layouts, a mixture's routing."""
    lay, t = layout, training
    problems = layout_problems(model, lay, seq_len=batch.seq_len, global_batch=batch.global_batch,
                               micro_batch=None if batch.global_batch is None else batch.micro_batch)
    if batch.seq_len is not None:
        problems += positions_problems(model, batch.seq_len)
        problems += context_parallel_problems(lay.cp, t.attention)
    problems += kernel_problems(model, t.implementation, tp=lay.tp, cp=lay.cp,
                                sequence_parallel=lay.sequence_parallel, recompute=t.recompute,
                                mlp_kernel=t.mlp_kernel)
    problems += policy_problems(model, recompute=t.recompute, policy=t.recompute_policy,
                                implementation=t.implementation, tp=lay.tp, cp=lay.cp,
                                sequence_parallel=lay.sequence_parallel)
    problems += compile_problems(model, compiled=t.compiled, recompute=t.recompute,
                                 implementation=t.implementation, tp=lay.tp)
    problems += loss_problems(t.loss, t.loss_chunks, tp=lay.tp, seq_len=batch.seq_len)
    problems += activation_offload_problems(t.activation_offload, pp=lay.pp)
    return problems + fsdp2_problems(t.recipe, lay) + routing_problems(model, t.routing)
