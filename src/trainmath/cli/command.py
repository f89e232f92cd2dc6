"""The ``trainmath`` command: the site's arithmetic at a terminal, with JSON for scripts.

``trainmath estimate`` gives the memory one device needs to train a model: weights, gradients,
master weights, optimizer states and activations, for the fullest pipeline stage. It only
parses and renders: the flags become a :class:`trainmath.runs.description.Run` (:func:`to_run`), the
library's :func:`trainmath.runs.estimates.estimate` does the arithmetic once, and the reports
print it (:func:`~trainmath.report.text.render`, or :func:`~trainmath.report.data.estimate_json`
with ``--json``); ``trainmath plan`` likewise with :func:`trainmath.planner.search.plan`. The
flags are the table of :mod:`trainmath.cli.flags`. :func:`execute` returns what a command line
printed and computed (the calculator page calls it); every invalid input exits with status 2
and one line on stderr that names the bad value and what is accepted.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Sequence

from ..hardware import GPUS, GPU_ALIASES
from ..memory.finetune import Adapter, DEFAULT_TARGETS
from ..memory.training import Training
from ..model.hfconfig import load_config
from ..model.presets import preset
from ..model.shape import ModelShape, modified, shape
from ..parallel.layout import Batch, Layout
from ..planner.candidates import Plan
from ..planner.search import plan
from ..problems import Invalid, Problem
from ..report.data import estimate_json, plan_json
from ..report.text import render, render_plan
from ..runs.description import Budget, Gpu, Run, ShapeNeeded
from ..runs.estimates import Estimate, estimate
from ..time.step import ACHIEVABLE, NCCL_RING, Overlap
from .flags import PROG, UsageError, build_parser


_SHAPE_FLAGS = ("layers", "hidden", "heads", "ffn", "vocab")
_MOE_FLAGS = ("experts", "experts_per_token", "shared_experts", "expert_ffn")


def _adapter(args: argparse.Namespace) -> Adapter | None:
    """The adapter the fine-tuning flags describe, or None for full fine-tuning."""
    given = {f"--{k.replace('_', '-')}": v for k, v in (
        ("lora_rank", args.lora_rank), ("lora_targets", args.lora_targets),
        ("lora_dropout", args.lora_dropout)) if v is not None}
    if args.double_quant is not None:
        given["--no-double-quant"] = True
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
        True if args.double_quant is None else args.double_quant)


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
    model = _model(args)
    lay = Layout(dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, v=args.interleave,
                 sequence_parallel=args.sequence_parallel, ep=args.ep)
    if (args.tokens is None) != (args.mfu is None):
        given, missing = ("--tokens", "--mfu F") if args.mfu is None else ("--mfu", "--tokens N")
        raise UsageError(f"{given} needs {missing} as well: a time to train needs the tokens and "
                         "the MFU assumed (e.g. --tokens 15T --mfu 0.4)")
    if args.tokens is not None and args.gpu is None:
        raise UsageError("--tokens needs --gpu NAME for the GPU's peak FLOP/s; accepted: "
                         + ", ".join([*GPUS, *GPU_ALIASES]))
    if args.gpus is not None and args.gpus != lay.gpus:
        raise UsageError(f"--gpus {args.gpus} does not match dp × tp × pp × cp = {args.dp} × "
                         f"{args.tp} × {args.pp} × {args.cp} = {lay.gpus}")
    adapter = _adapter(args)
    if adapter is not None and not isinstance(model, ModelShape):
        raise UsageError(f"--finetune {args.finetune} needs a model shape (--model or "
                         "--layers/--hidden/...): the adapter's size depends on the matrices")
    try:
        return Run(
            model=model,
            training=Training(recipe=args.recipe, optimizer=args.optimizer,
                              zero_stage=args.zero, recompute=args.recompute,
                              implementation=args.implementation, mlp_kernel=args.mlp_kernel,
                              attention=args.attention, optimizer_impl=args.optimizer_impl,
                              offload=args.offload),
            layout=lay,
            batch=Batch(args.seq_len, args.micro_batch, args.global_batch),
            gpu=None if args.gpu is None and args.gpu_memory is None else Gpu(args.gpu_memory, args.gpu),
            overhead=args.overhead,
            budget=None if args.tokens is None else Budget(args.tokens, args.mfu),
            gpus_per_node=args.gpus_per_node,
            adapter=adapter,
        )
    except ShapeNeeded as exc:  # the same rule, worded with the flags that broke it
        if "global_batch" in exc.fields or "v" in exc.fields:
            raise UsageError("--global-batch and --interleave need a model shape (--model or "
                             "--layers/--hidden/...)") from None
        if "ep" in exc.fields:
            raise UsageError(f"--ep {lay.ep} needs a mixture-of-experts shape (--model, --config "
                             "or --layers/--hidden/... with --experts)") from None
        split = " and ".join(f"--{k} {getattr(lay, k)}" for k in exc.fields)
        verb = "need" if len(exc.fields) > 1 else "needs"
        raise UsageError(f"{split} {verb} a model shape (--model or --layers/--hidden/...): "
                         "with --params alone the split over those ranks is unknown") from None


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
    result: Estimate | Plan | None = None
    args: argparse.Namespace | None = None
    problems: tuple[Problem, ...] = ()


def execute(argv: Sequence[str]) -> Outcome:
    """Parse ``argv``, compute once, and render as the command prints it (JSON with ``--json``);
    bad input gives status 2 and one line on stderr naming the bad value and what is accepted."""
    args = None
    try:
        args = build_parser().parse_args(list(argv))
        if args.command == "plan":
            result = _plan(args)
            out = plan_json(result) if args.json else render_plan(result, args.top, args.explain)
        else:
            result = estimate(to_run(args))
            out = estimate_json(result) if args.json else render(result)
    except (UsageError, ValueError, argparse.ArgumentTypeError) as exc:
        problems = exc.problems if isinstance(exc, Invalid) else ()
        return Outcome(argv=tuple(argv), status=2, stdout="", stderr=f"{PROG}: error: {exc}\n",
                       args=args, problems=problems)
    return Outcome(argv=tuple(argv), status=0, stdout=out + "\n", stderr="", result=result,
                   args=args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    outcome = execute(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return outcome.status


# -- trainmath plan ------------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> Plan:
    """The :class:`~trainmath.planner.candidates.Plan` the parsed flags ask for."""
    model = _model(args)
    if not isinstance(model, ModelShape):
        raise UsageError("plan needs a model shape (--model or --layers/--hidden/...): "
                         "--params alone cannot be split over tp or pp")
    base = Overlap()
    overlap = Overlap(*(getattr(args, f"overlap_{k}") if getattr(args, f"overlap_{k}")
                        is not None else getattr(base, k) for k in ("dp", "tp", "pp", "cp")))
    return plan(
        model, gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, global_batch=args.global_batch,
        node_gpus=args.gpus_per_node, recipe=args.recipe, implementation=args.implementation,
        optimizer=args.optimizer,
        achievable=ACHIEVABLE if args.achievable is None else args.achievable,
        nvlink=args.nvlink, network=args.network, overlap=overlap,
        tp_across_nodes=args.tp_across_nodes, cp_across_nodes=args.cp_across_nodes,
        layout=args.layout, latency=NCCL_RING if args.latency else None)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
