"""The ``trainmath`` command: the site's arithmetic at a terminal, with JSON for scripts.

``trainmath estimate`` gives the memory one device needs to train a model: weights, gradients,
master weights, optimizer states and activations, for the fullest pipeline stage. It only
parses and renders: the flags become a :class:`trainmath.runs.description.Run` (:func:`to_run`), the
library's :func:`trainmath.runs.estimates.estimate` does the arithmetic, and :func:`~trainmath.report.text.render` (or
``Estimate.to_json``) prints it. Every invalid input exits with status 2 and one line on
stderr that names the bad value and what is accepted.
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from typing import Sequence

from ..hardware import GPUS, GPU_ALIASES
from ..memory.finetune import Adapter, DEFAULT_TARGETS, METHODS, TARGETS, parse_targets
from ..memory.kernels import ATTENTION_KINDS, IMPLEMENTATIONS, MLP_KERNELS, RECOMPUTE_KINDS
from ..memory.recipes import OPTIMIZERS, OPTIMIZER_IMPLS, RECIPES, RECIPE_ALIASES
from ..memory.sharding import OFFLOAD_ALIASES, STAGES
from ..memory.training import Training
from ..model.hfconfig import FAMILIES, load_config
from ..model.presets import PRESETS, preset
from ..model.shape import MLP_KINDS, ModelShape, NORM_KINDS, modified, shape
from ..parallel.layout import Batch, Layout
from ..report.text import render, render_plan
from ..runs.description import Budget, Gpu, Run, ShapeNeeded
from ..runs.estimates import estimate
from ..units import Bytes, parse_bytes


#: The command's name, as usage and error messages print it.
PROG = "trainmath"
_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_SHAPE_FLAGS = ("layers", "hidden", "heads", "ffn", "vocab")
_MOE_FLAGS = ("experts", "experts_per_token", "shared_experts", "expert_ffn")


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        raise UsageError(message)


# -- argument types ----------------------------------------------------------------------------
def parse_count(text: str) -> int:
    """A parameter count: ``7e9``, ``7B``, ``6738415616``, ``6,738,415,616`` or ``1.5T``."""
    raw = text.strip().replace(",", "").replace("_", "")
    scale = 1
    if raw[-1:].upper() in _SUFFIXES:
        scale, raw = _SUFFIXES[raw[-1].upper()], raw[:-1]
    try:
        value = Fraction(raw) * scale
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None or value <= 0 or value.denominator != 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive whole number of parameters; accepted: e.g. 7e9, 7B, "
            "6738415616"
        )
    return int(value)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _memory(text: str) -> Bytes:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_tokens(text: str) -> int:
    """A token count: ``15T``, ``2e12``, ``300B`` or ``300,000,000,000``."""
    try:
        return parse_count(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive whole number of tokens; accepted: e.g. 15T, 2e12, 300B"
        ) from None


def parse_mfu(text: str) -> float:
    """An MFU: a fraction in (0, 1] such as ``0.4``, or a percentage such as ``40%``."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an MFU; accepted: a fraction in (0, 1] such as 0.4, or 40%")
    return value


#: The command's names for :data:`trainmath.memory.sharding.OFFLOADS`.
OFFLOAD_FLAGS = ("none", "optimizer", *OFFLOAD_ALIASES)


def _one_of(what: str, accepted: Sequence, convert=str):
    """An argument type that accepts one of ``accepted`` and names the rest when it refuses."""
    names = ", ".join(str(a) for a in accepted)

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value not in accepted:
            raise argparse.ArgumentTypeError(f"unknown {what} {text!r}; accepted: {names}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    parse.accepted = tuple(str(a) for a in accepted)  # the calculator page's choices
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The ``trainmath`` argument parser: the ``estimate`` subcommand and its flags."""
    parser = _Parser(prog=PROG, description="The arithmetic of large-model training, checked.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    est = sub.add_parser(
        "estimate", help="memory per device for a model, precision, optimizer and layout",
        description="Memory one device needs to train a model: model states and activations.",
    )
    model = est.add_argument_group("model (a preset, a parameter count, or a shape)")
    model.add_argument("--model", metavar="PRESET", type=_one_of("model preset", list(PRESETS)),
                       help="one of: " + ", ".join(PRESETS))
    model.add_argument("--config", metavar="PATH",
                       help="a Hugging Face config.json (families: " + ", ".join(FAMILIES)
                       + "); the model is named by PATH")
    model.add_argument("--params", type=parse_count, metavar="N",
                       help="parameter count (7e9, 7B, 6738415616); model states only")
    model.add_argument("--layers", type=_positive, help="transformer layers L")
    model.add_argument("--hidden", type=_positive, help="hidden size h")
    model.add_argument("--heads", type=_positive, help="attention heads a")
    model.add_argument("--kv-heads", type=_positive, help="key-value heads (GQA); default: heads")
    model.add_argument("--ffn", type=_positive, help="MLP width")
    model.add_argument("--vocab", type=_positive, help="vocabulary size V")
    model.add_argument("--mlp", type=_one_of("mlp", MLP_KINDS), help="gelu or swiglu")
    model.add_argument("--norm", type=_one_of("norm", NORM_KINDS),
                       help="layernorm or rmsnorm")
    model.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=None,
                       help="dropout after attention and MLP (saves masks)")
    model.add_argument("--tied-embeddings", action="store_true", default=None,
                       help="the LM head shares the embedding matrix")
    model.add_argument("--experts", type=_positive, help="routed experts per layer (mixture of "
                       "experts); default: dense")
    model.add_argument("--experts-per-token", type=_positive, metavar="K",
                       help="experts each token is routed to (top-k)")
    model.add_argument("--shared-experts", type=_positive, metavar="N",
                       help="experts every token goes through besides the routed ones")
    model.add_argument("--expert-ffn", type=_positive, metavar="WIDTH",
                       help="MLP width of one expert; default: --ffn")

    train = est.add_argument_group("training")
    recipe_names = [*RECIPES, *RECIPE_ALIASES]
    train.add_argument("--recipe", "--precision", dest="recipe", metavar="NAME",
                       type=_one_of("recipe", recipe_names),
                       help="how the model states are kept, one of: " + ", ".join(recipe_names)
                       + " (zero-paper is bf16-mixed); default: what the preset is trained with, "
                       "else bf16-mixed. --precision is its older name")
    train.add_argument("--optimizer", default="adamw",
                       type=_one_of("optimizer", list(OPTIMIZERS)),
                       help="one of: " + ", ".join(OPTIMIZERS) + " (default adamw)")
    train.add_argument("--optimizer-impl", metavar="IMPL",
                       type=_one_of("optimizer implementation", OPTIMIZER_IMPLS),
                       help="how the optimizer step runs: " + ", ".join(OPTIMIZER_IMPLS)
                       + " (its temporaries at the step); default: the recipe's")
    train.add_argument("--zero", type=_one_of("ZeRO stage", STAGES, int),
                       help="ZeRO stage 0, 1, 2 or 3 (0: plain data parallelism); default: the "
                       "recipe's (fsdp2: 3, deepspeed: 2, else 0)")
    for name, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("cp", "context")):
        train.add_argument(f"--{name}", type=_positive, default=1, help=f"{what}-parallel size")
    train.add_argument("--ep", type=_positive, default=1,
                       help="expert-parallel size, within dp (a mixture of experts)")
    train.add_argument("--interleave", type=_positive, default=1, metavar="V",
                       help="model chunks per pipeline device (interleaved 1F1B)")
    train.add_argument("--gpus", type=_positive, help="check that dp·tp·pp·cp equals this")
    train.add_argument("--sequence-parallel", action="store_true")
    train.add_argument("--seq-len", type=_positive, help="sequence length s (for activations)")
    train.add_argument("--micro-batch", type=_positive, default=1, help="micro-batch size b")
    train.add_argument("--global-batch", type=_positive, metavar="B",
                       help="sequences per step: gives the micro-batches m and the bubble")
    train.add_argument("--recompute", default="none",
                       type=_one_of("recompute", RECOMPUTE_KINDS),
                       help="none, selective or full")
    train.add_argument("--implementation", metavar="NAME",
                       type=_one_of("implementation", list(IMPLEMENTATIONS)),
                       help="the kernels whose saved tensors are counted, one of: "
                       + ", ".join(IMPLEMENTATIONS) + "; default: what the preset is "
                       "trained with, else megatron-eager")
    train.add_argument("--attention", type=_one_of("attention", ATTENTION_KINDS),
                       help="eager (stores the s×s scores) or flash: the implementation of the "
                       "same kernel family with that attention")
    train.add_argument("--mlp-kernel", default="eager",
                       type=_one_of("mlp kernel", MLP_KERNELS),
                       help="eager (SwiGLU saves four ffn-wide tensors) or fused (three)")
    gpu_names = [*GPUS, *GPU_ALIASES]
    train.add_argument("--gpu", type=_one_of("GPU", gpu_names), metavar="NAME",
                       help="one of: " + ", ".join(gpu_names) + ": say whether it fits in "
                       "the memory nvidia-smi reports for it (its peak FLOP/s for --tokens)")
    train.add_argument("--gpu-memory", type=_memory, metavar="SIZE",
                       help="memory of one device, e.g. 80GB or 141GiB: say whether it fits "
                       "(an \"80GB\" card holds more than 80GB: see --gpu); with --gpu it "
                       "overrides that GPU's memory")
    plan = est.add_argument_group("what the formulas leave out, offload, and time")
    plan.add_argument("--overhead", type=_memory, metavar="SIZE", default=Bytes(0),
                      help="memory no formula counts (CUDA context, cuBLAS/cuDNN workspaces, NCCL "
                      "buffers, allocator fragmentation), added to the step's peak for the fit, "
                      "e.g. 2GiB; default 0 (not counted): the Command line page gives typical "
                      "figures")
    plan.add_argument("--offload", metavar="WHAT", default="none",
                      type=_one_of("offload", OFFLOAD_FLAGS),
                      help="none; optimizer (ZeRO-Offload: master weights, optimizer states and "
                      "gradient partitions in CPU memory, ZeRO stage 2 or 3); params (ZeRO-Infinity "
                      "or FSDP2 CPUOffloadPolicy: every sharded state, ZeRO stage 3). Default none")
    plan.add_argument("--gpus-per-node", type=_positive, metavar="N",
                      help="GPUs on one node: the CPU memory offload needs per node")
    plan.add_argument("--tokens", type=parse_tokens, metavar="N",
                      help="tokens to train on (15T, 2e12): FLOPs per token, time and GPU-hours "
                      "on the run's GPUs; needs --mfu and --gpu")
    plan.add_argument("--mfu", type=parse_mfu, metavar="F",
                      help="model FLOPs utilization assumed, 0.4 or 40%%, of the GPU's dense peak "
                      "in the recipe's precision; no default: say it (published runs: about 0.4 "
                      "to 0.56)")
    tune = est.add_argument_group("fine-tuning (LoRA, QLoRA)")
    tune.add_argument("--finetune", default="full", metavar="METHOD",
                      type=_one_of("fine-tuning method", METHODS),
                      help="full (every parameter trained, the default), lora (a low-rank adapter on "
                      "the frozen 16-bit model, Hu et al. 2021) or qlora (on a 4-bit NF4 model, "
                      "Dettmers et al. 2023); the adapter's weights follow --recipe (default fp32, "
                      "as peft keeps them)")
    tune.add_argument("--lora-rank", type=_positive, metavar="R",
                      help="the adapter's rank r (default 16)")
    tune.add_argument("--lora-targets", type=_targets, metavar="LIST",
                      help="matrices with an adapter, comma-separated from " + ",".join(TARGETS)
                      + ", or all (default q,v, peft's for Llama)")
    tune.add_argument("--lora-dropout", type=_probability, metavar="P",
                      help="peft's lora_dropout (default 0): above 0 each adapter saves a mask and "
                      "its own input")
    tune.add_argument("--no-double-quant", dest="double_quant", action="store_false", default=None,
                      help="qlora: fp32 block constants (0.5 bits per weight) instead of Double "
                      "Quantization's 8-bit ones (0.127 bits)")
    est.add_argument("--json", action="store_true", help="one JSON object on stdout")
    _add_plan_parser(sub, model)
    return parser


def _targets(text: str) -> tuple[str, ...]:
    try:
        return parse_targets(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a dropout probability; accepted: a "
                                         "number from 0 up to (not including) 1, e.g. 0.05")
    return value


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
    lay = Layout(args.dp, args.tp, args.pp, args.cp, args.interleave, args.sequence_parallel,
                 args.ep)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
        if args.command == "plan":
            return _plan_main(args)
        result = estimate(to_run(args))
    except (UsageError, ValueError, argparse.ArgumentTypeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(result.to_json() if args.json else render(result))
    return 0


# -- trainmath plan ------------------------------------------------------------------------------
def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction from 0 to 1")
    return value


def _rate(text: str) -> float:
    """A bandwidth in GB/s (10^9 bytes per second, each way), as bytes per second."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of GB/s")
    return value * 10**9


def _add_plan_parser(sub, model_group) -> None:
    """The ``plan`` subcommand: the model flags of ``estimate`` (shared), and its own."""
    pl = sub.add_parser(
        "plan", help="every parallel layout that fits, ranked by predicted step time",
        description="Rank the layouts dp × tp × pp × cp (with ZeRO stage, recomputation, "
        "micro-batch and interleaving) of a model on GPUs by predicted step time.",
    )
    group = pl.add_argument_group("model (a preset, or a shape)")
    for action in model_group._group_actions:  # the same flags as estimate's
        group._add_action(action)
    run = pl.add_argument_group("the run")
    run.add_argument("--gpu", required=True, type=_one_of("GPU", list(GPUS)),
                     metavar="KIND", help="one of: " + ", ".join(GPUS))
    run.add_argument("--gpus", required=True, type=_positive, help="GPUs in all")
    run.add_argument("--gpus-per-node", type=_positive, metavar="N",
                     help="GPUs per node (default: the GPU's DGX/HGX node, 8)")
    run.add_argument("--seq-len", required=True, type=_positive, help="sequence length s")
    run.add_argument("--global-batch", required=True, type=_positive, metavar="B",
                     help="sequences per optimizer step")
    recipe_names = [*RECIPES, *RECIPE_ALIASES]
    run.add_argument("--recipe", metavar="NAME", type=_one_of("recipe", recipe_names),
                     help="one of: " + ", ".join(recipe_names) + "; default: the model's")
    run.add_argument("--implementation", metavar="NAME",
                     type=_one_of("implementation", list(IMPLEMENTATIONS)),
                     help="one of: " + ", ".join(IMPLEMENTATIONS) + "; default: the model's")
    run.add_argument("--optimizer", default="adamw",
                     type=_one_of("optimizer", list(OPTIMIZERS)))
    how = pl.add_argument_group("assumptions (stated in the output)")
    how.add_argument("--achievable", type=_fraction, default=None, metavar="F",
                     help="share of the dense peak the matrix multiplications sustain (default 0.6)")
    how.add_argument("--nvlink", type=_rate, metavar="GB/s",
                     help="GB/s each GPU sends inside a node (default: the GPU's NVLink, one way)")
    how.add_argument("--network", type=_rate, metavar="GB/s",
                     help="GB/s each GPU sends across nodes (default: its DGX network adapter)")
    for kind in ("dp", "tp", "pp", "cp"):
        how.add_argument(f"--overlap-{kind}", type=_fraction, metavar="F",
                         help=f"share of {kind} traffic hidden under compute")
    how.add_argument("--tp-across-nodes", action="store_true", help="allow tp beyond one node")
    how.add_argument("--cp-across-nodes", action="store_true", help="allow tp × cp beyond one node")
    how.add_argument("--latency", action="store_true",
                     help="also charge each collective's latency (NCCL's ring model)")
    out = pl.add_argument_group("output")
    out.add_argument("--top", type=_positive, default=10, help="rows of the table (default 10)")
    out.add_argument("--layout", metavar="SPEC",
                     help="score your layout, e.g. dp=16,tp=8,pp=4 (also ep, v, zero, recompute, b)")
    out.add_argument("--explain", action="store_true", help="why each runner-up lost to the best")
    out.add_argument("--json", action="store_true", help="one JSON object: every layout considered")


def _plan_main(args: argparse.Namespace) -> int:
    from ..planner import search as planner
    from ..time import step as steptime

    model = _model(args)
    if not isinstance(model, ModelShape):
        raise UsageError("plan needs a model shape (--model or --layers/--hidden/...): "
                         "--params alone cannot be split over tp or pp")
    base = steptime.Overlap()
    overlap = steptime.Overlap(*(getattr(args, f"overlap_{k}") if getattr(args, f"overlap_{k}")
                                is not None else getattr(base, k) for k in ("dp", "tp", "pp", "cp")))
    result = planner.plan(
        model, gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, global_batch=args.global_batch,
        node_gpus=args.gpus_per_node, recipe=args.recipe, implementation=args.implementation,
        optimizer=args.optimizer,
        achievable=steptime.ACHIEVABLE if args.achievable is None else args.achievable,
        nvlink=args.nvlink, network=args.network, overlap=overlap,
        tp_across_nodes=args.tp_across_nodes, cp_across_nodes=args.cp_across_nodes,
        layout=args.layout, latency=steptime.NCCL_RING if args.latency else None)
    print(result.to_json() if args.json else render_plan(result, args.top, args.explain))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
