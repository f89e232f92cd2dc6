"""The ``trainmath`` command: the site's arithmetic at a terminal, with JSON for scripts.

``trainmath estimate`` gives the memory one device needs to train a model: weights, gradients,
master weights, optimizer states and activations, for the fullest pipeline stage. It only
parses and renders: the flags become a :class:`trainmath.runs.description.Run` (:func:`to_run`), the
library's :func:`trainmath.runs.estimates.estimate` does the arithmetic once, and the reports
print it (:func:`~trainmath.report.text.render`, or :func:`~trainmath.report.data.estimate_json`
with ``--json``); with ``--suggest``, :func:`trainmath.planner.suggest.suggest` adds what to
change when it does not fit, or the room it has; ``trainmath plan`` likewise with :func:`trainmath.planner.search.plan`. The
flags are the table of :mod:`trainmath.cli.flags`. :func:`execute` returns what a command line
printed and computed (the calculator page calls it); every invalid input exits with status 2
and one line on stderr that names the bad value and what is accepted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..memory.finetune import Adapter, DEFAULT_TARGETS
from ..memory.finetune_presets import adapter_preset
from ..memory.offload import Tiers
from ..memory.rollout import Engine
from ..memory.training import Training
from ..model.hfconfig import load_config
from ..model.moe import Routing
from ..model.presets import preset
from ..model.shape import ModelShape, modified, shape
from ..parallel.layout import Batch, Layout, gpus_problems
from ..planner.candidates import Plan
from ..planner.search import plan
from ..problems import Invalid, Problem, check
from ..report.data import check_json, estimate_json, plan_json
from ..report.text import render, render_check, render_plan
from ..runs.description import Budget, Gpu, Run
from ..runs.estimates import Estimate, estimate
from ..runs.post_training import PostTraining, PostTrainingEstimate, post_training_estimate
from ..runs.rules import time_problems
from ..report.post_training import post_training_json, render_post_training
from ..checks.diagnosis import Diagnosis, diagnose
from ..checks.loglines import read_log
from ..checks.oom import read_oom
from ..time.step import Overlap, Timing
from .flags import PROG, UsageError, build_parser, flags_of

if TYPE_CHECKING:
    from ..planner.suggest import Suggestions


_SHAPE_FLAGS = ("layers", "hidden", "heads", "ffn", "vocab")
_MOE_FLAGS = ("experts", "experts_per_token", "shared_experts", "expert_ffn")


def _adapter(args: argparse.Namespace) -> Adapter | None:
    """The adapter the fine-tuning flags describe, or None for full fine-tuning."""
    given = {f"--{k.replace('_', '-')}": v for k, v in (
        ("lora_rank", args.lora_rank), ("lora_targets", args.lora_targets),
        ("lora_dropout", args.lora_dropout)) if v is not None}
    if args.double_quant is not None:
        given["--no-double-quant"] = True
    if args.norm_dtype is not None:
        given["--norm-dtype"] = True
    if args.finetune == "full":
        if given:
            raise UsageError(f"{next(iter(given))} needs --finetune lora or qlora (it describes an "
                             "adapter; --finetune full trains every parameter)")
        return None
    if args.double_quant is not None and args.finetune != "qlora":
        raise UsageError("--no-double-quant needs --finetune qlora (only QLoRA quantises the base)")
    return Adapter(
        args.finetune, 16 if args.lora_rank is None else args.lora_rank,
        DEFAULT_TARGETS if args.lora_targets is None else args.lora_targets,
        0.0 if args.lora_dropout is None else args.lora_dropout,
        True if args.double_quant is None else args.double_quant,
        "16-bit" if args.norm_dtype is None else args.norm_dtype)


#: The flags an adapter recipe sets, with the value each has when not given.
_PRESET_FLAGS = {"finetune": "full", "lora_rank": None, "lora_targets": None, "lora_dropout": None,
                 "norm_dtype": None, "recipe": None, "optimizer": "adamw", "recompute": "none",
                 "micro_batch": 1, "seq_len": None}


#: The post-training flags, with the value each has when not given (the others need
#: --post-training): the flag table's own defaults.
_POST_FLAGS = {f.key: f.default for f in flags_of("estimate")
               if f.group == "posttraining" and f.key != "post_training"}


def _post_training(args: argparse.Namespace) -> PostTraining | None:
    """The post-training setup the flags describe, or None without --post-training."""
    given = [k for k, default in _POST_FLAGS.items()
             if getattr(args, k, default) != default]
    if getattr(args, "post_training", None) is None:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --post-training dpo, ppo or "
                             "grpo (it describes a post-training step)")
        return None
    if args.suggest:
        raise UsageError("--suggest does not take --post-training yet: it changes the policy's "
                         "run alone; read each phase's parts instead")
    if args.post_training == "dpo":
        engine_flags = [k for k in given if k in _ENGINE_FLAGS or k in ("prompts", "rollout_gpus")]
        if engine_flags:
            raise UsageError(f"--{engine_flags[0].replace('_', '-')} describes the rollout engine, "
                             "and dpo generates nothing (accepted for ppo and grpo)")
    engine = Engine(gpu_memory_utilization=args.gpu_memory_utilization, tp=args.rollout_tp,
                    weights=args.rollout_weights, kv_dtype=args.kv_cache_dtype,
                    block_size=args.block_size, max_model_len=args.max_model_len,
                    max_num_seqs=args.max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens,
                    cuda_graphs=not args.enforce_eager, sleep_level=args.sleep_level)
    return PostTraining(args.post_training, placement=args.placement, engine=engine,
                        prompt_len=args.prompt_len, response_len=args.response_len,
                        prompts=args.prompts, group_size=args.group_size,
                        reference=args.reference, reward_model=args.reward_model,
                        offload_reference=args.offload_reference,
                        offload_policy=args.offload_policy,
                        logprob_micro_batch=args.logprob_micro_batch,
                        rollout_gpus=args.rollout_gpus, logprob_dtype=args.logprob_dtype)


#: The flags of the rollout engine (ppo and grpo only).
_ENGINE_FLAGS = ("placement", "rollout_tp", "gpu_memory_utilization", "rollout_weights",
                 "kv_cache_dtype", "block_size", "max_model_len", "max_num_seqs",
                 "max_num_batched_tokens", "enforce_eager", "sleep_level")


def _with_adapter_recipe(args: argparse.Namespace) -> argparse.Namespace:
    """The flags with ``--adapter-recipe``'s values wherever a flag is at its default."""
    if getattr(args, "adapter_recipe", None) is None:
        return args
    p = adapter_preset(args.adapter_recipe)
    values = {"finetune": p.method, "lora_rank": p.rank, "lora_targets": p.targets,
              "lora_dropout": p.dropout, "norm_dtype": p.norm_dtype, "recipe": p.recipe,
              "optimizer": p.optimizer, "recompute": p.recompute, "micro_batch": p.micro_batch,
              "seq_len": p.seq_len}
    merged = argparse.Namespace(**vars(args))
    for name, default in _PRESET_FLAGS.items():
        if getattr(args, name) == default:
            setattr(merged, name, values[name])
    return merged


# -- from flags to a run ------------------------------------------------------------------------
def _model(args: argparse.Namespace) -> ModelShape | int:
    """The model the flags name: a parameter count, a preset (changed by shape flags) or a shape."""
    given = {f: getattr(args, f) for f in (*_SHAPE_FLAGS, "kv_heads", "mlp", "norm", "dropout",
                                           "tied_embeddings", *_MOE_FLAGS)
             if getattr(args, f) is not None}
    if args.config is not None:
        if args.model or args.params is not None:
            extra = "--model" if args.model else "--params"
            raise UsageError(f"--config {args.config} cannot be combined with {extra}: give one "
                             "model")
        return modified(load_config(args.config), **given)
    if args.params is not None:
        if args.model or given:
            extra = "--model" if args.model else "--" + next(iter(given)).replace("_", "-")
            raise UsageError(f"--params {args.params} cannot be combined with {extra}: give a "
                             "parameter count or a model (preset or shape), not both")
        return args.params
    if args.model:
        return modified(preset(args.model), **given)
    missing = [f"--{f}" for f in _SHAPE_FLAGS if f not in given]
    if len(missing) == len(_SHAPE_FLAGS):
        raise UsageError("no model given; accepted: --model PRESET, --config PATH, --params N, or "
                         "a shape (--layers --hidden --heads --ffn --vocab)")
    if missing:
        raise UsageError(f"a shape needs {' '.join(missing)} as well (or start from --model)")
    return shape("custom", **given)


def to_run(args: argparse.Namespace) -> Run:
    """The :class:`~trainmath.runs.description.Run` the parsed flags describe; the library checks it."""
    args = _with_adapter_recipe(args)
    model = _model(args)
    lay = Layout(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, v=args.interleave,
                 sequence_parallel=args.sequence_parallel, ep=args.ep,
                 stages=args.stage_layers or (), etp=args.etp, schedule=args.schedule,
                 cp_kind=args.cp_kind)
    check([*time_problems(args.tokens, args.mfu),
           *([] if args.gpus is None else gpus_problems(args.gpus, lay))])
    return Run(
        model=model,
        training=Training(recipe=args.recipe, optimizer=args.optimizer,
                          zero_stage=args.zero, recompute=args.recompute,
                          implementation=args.implementation, mlp_kernel=args.mlp_kernel,
                          attention=args.attention, optimizer_impl=args.optimizer_impl,
                          offload=args.offload, routing=_routing(args),
                          recompute_policy=args.recompute_policy, compiled=args.compile,
                          loss=args.loss, loss_chunks=args.loss_chunks,
                          activation_offload=args.activation_offload),
        layout=lay,
        batch=Batch(args.seq_len, args.micro_batch, args.global_batch),
        gpu=None if args.gpu is None and args.gpu_memory is None else Gpu(args.gpu_memory, args.gpu),
        overhead=args.overhead,
        budget=None if args.tokens is None else Budget(args.tokens, args.mfu),
        gpus_per_node=args.gpus_per_node,
        timing=_timing(args),
        adapter=_adapter(args),
        tiers=Tiers(args.offload_to, args.host_memory, args.nvme),
    )


@dataclass(frozen=True)
class Outcome:
    """What one command line did: its exit status, what it printed, and what it computed.

    ``result`` is the :class:`~trainmath.runs.estimates.Estimate` or the
    :class:`~trainmath.planner.candidates.Plan` (None on bad input), ``problems`` the
    :class:`~trainmath.problems.Problem` s of a refused run, so a caller can place each message
    beside the fields it names.
    """

    argv: tuple[str, ...]
    status: int
    stdout: str
    stderr: str
    result: Estimate | Plan | PostTrainingEstimate | None = None
    args: argparse.Namespace | None = None
    problems: tuple[Problem, ...] = ()
    #: with ``estimate --suggest``: what to change, or the room to spare
    #: (:class:`~trainmath.planner.suggest.Suggestions`)
    suggestions: Suggestions | None = None


def execute(argv: Sequence[str]) -> Outcome:
    """Parse ``argv``, compute once, and render as the command prints it (JSON with ``--json``);
    bad input gives status 2 and one line on stderr naming the bad value and what is accepted."""
    args = suggestions = None
    try:
        args = build_parser().parse_args(list(argv))
        if args.command == "plan":
            result = _plan(args)
            out = plan_json(result) if args.json else render_plan(result, args.top, args.explain)
        elif args.command == "check":
            result = _check(args)
            out = check_json(result) if args.json else render_check(result)
        elif (post := _post_training(args)) is not None:
            result = post_training_estimate(to_run(args), post)
            out = post_training_json(result) if args.json else render_post_training(result)
        elif args.suggest:
            from ..planner.suggest import suggest  # only here: the command starts faster
            suggestions = suggest(to_run(args))
            result = suggestions.estimate
            out = (estimate_json(result, suggestions) if args.json
                   else render(result, suggestions))
        else:
            result = estimate(to_run(args))
            out = estimate_json(result) if args.json else render(result)
    except (UsageError, ValueError, argparse.ArgumentTypeError) as exc:
        problems = exc.problems if isinstance(exc, Invalid) else ()
        return Outcome(argv=tuple(argv), status=2, stdout="", stderr=f"{PROG}: error: {exc}\n",
                       args=args, problems=problems)
    return Outcome(argv=tuple(argv), status=0, stdout=out + "\n", stderr="", result=result,
                   args=args, suggestions=suggestions)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    outcome = execute(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.status


# -- trainmath plan ------------------------------------------------------------------------------
def _text(value: str | None, what: str) -> str | None:
    """A check's input: the text itself, standard input for -, else the file it names."""
    if value is None:
        return None
    if value == "-":
        return sys.stdin.read()
    if "\n" in value or len(value) > 255 or not Path(value).exists():
        if "\n" not in value and len(value) <= 255 and ("/" in value or value.endswith((".txt", ".log"))):
            raise UsageError(f"--{what}: no file {value!r}; accepted: a file, - for standard input, "
                             "or the text itself")
        return value
    return Path(value).read_text(encoding="utf-8", errors="replace")


def _check(args: argparse.Namespace) -> Diagnosis:
    """The :class:`~trainmath.checks.diagnosis.Diagnosis` the parsed flags ask for."""
    if (args.measured is None) != (args.counter is None):
        given, missing = ("--measured", "--counter") if args.counter is None else ("--counter",
                                                                                    "--measured")
        raise UsageError(f"{given} needs {missing} as well; accepted: --measured SIZE --counter "
                         "allocated|reserved|process")
    oom_text, log_text = _text(args.oom, "oom"), _text(args.log, "log")
    oom = None if oom_text is None else read_oom(oom_text)
    readings = () if log_text is None else read_log(log_text)
    measured = () if args.measured is None else ((args.counter, args.measured),)
    return diagnose(estimate(to_run(args)), oom=oom, readings=readings, measured=measured)


def _routing(args: argparse.Namespace) -> Routing:
    """A mixture's routing as the flags give it."""
    return Routing(args.capacity_factor, args.pad_to_capacity, args.expert_load)


def _overlap(args: argparse.Namespace) -> Overlap:
    """What the flags say the framework overlaps."""
    return Overlap(gradients=not args.no_overlap, parameters=not args.no_overlap,
                   tensor=args.tp_overlap)


def _timing(args: argparse.Namespace) -> Timing:
    """The step-time model's settings the estimate flags give."""
    return Timing(overlap=_overlap(args), kernel=args.attention_kernel, sustained=args.sustained,
                  nvlink=args.nvlink, network=args.network)


def _plan(args: argparse.Namespace) -> Plan:
    """The :class:`~trainmath.planner.candidates.Plan` the parsed flags ask for."""
    model = _model(args)
    return plan(
        model, gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, global_batch=args.global_batch,
        node_gpus=args.gpus_per_node, recipe=args.recipe, implementation=args.implementation,
        optimizer=args.optimizer, nvlink=args.nvlink, network=args.network,
        overlap=_overlap(args), kernel=args.attention_kernel, sustained=args.sustained,
        tp_across_nodes=args.tp_across_nodes, cp_across_nodes=args.cp_across_nodes,
        layout=args.layout,
        zero_stages=None if args.zero is None else (args.zero,),
        recomputes=None if args.recompute is None else (args.recompute,),
        recompute_policy=args.recompute_policy, compiled=args.compile,
        capacity_factor=args.capacity_factor, pad_to_capacity=args.pad_to_capacity,
        expert_load=args.expert_load,
        schedules=None if args.schedule is None else (args.schedule,),
        cp_kinds=None if args.cp_kind is None else (args.cp_kind,),
        loss=args.loss, loss_chunks=args.loss_chunks,
        activation_offload=args.activation_offload)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
