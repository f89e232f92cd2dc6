"""The ``trainmath`` command: the site's arithmetic at a terminal, with JSON for scripts.

``trainmath estimate`` gives the memory one device needs to train a model: weights, gradients,
master weights, optimizer states and activations, for the fullest pipeline stage. It only
parses and renders: the flags become a :class:`trainmath.runs.Run` (:func:`to_run`), the
library's :func:`trainmath.runs.estimate` does the arithmetic, and :func:`render` (or
``Estimate.to_json``) prints it. Every invalid input exits with status 2 and one line on
stderr that names the bad value and what is accepted.
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from typing import Sequence

from . import activations, compute, memory, models, sharding
from .runs import Batch, Estimate, Gpu, Run, ShapeNeeded, Training, estimate
from .parallelism import Layout
from .units import Bytes, parse_bytes

#: The command's name, as usage and error messages print it.
PROG = "trainmath"
_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_SHAPE_FLAGS = ("layers", "hidden", "heads", "ffn", "vocab")


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
    model.add_argument("--model", metavar="PRESET", type=_one_of("model preset", list(models.PRESETS)),
                       help="one of: " + ", ".join(models.PRESETS))
    model.add_argument("--params", type=parse_count, metavar="N",
                       help="parameter count (7e9, 7B, 6738415616); model states only")
    model.add_argument("--layers", type=_positive, help="transformer layers L")
    model.add_argument("--hidden", type=_positive, help="hidden size h")
    model.add_argument("--heads", type=_positive, help="attention heads a")
    model.add_argument("--kv-heads", type=_positive, help="key-value heads (GQA); default: heads")
    model.add_argument("--ffn", type=_positive, help="MLP width")
    model.add_argument("--vocab", type=_positive, help="vocabulary size V")
    model.add_argument("--mlp", type=_one_of("mlp", models.MLP_KINDS), help="gelu or swiglu")
    model.add_argument("--norm", type=_one_of("norm", models.NORM_KINDS),
                       help="layernorm or rmsnorm")
    model.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=None,
                       help="dropout after attention and MLP (saves masks)")
    model.add_argument("--tied-embeddings", action="store_true", default=None,
                       help="the LM head shares the embedding matrix")

    train = est.add_argument_group("training")
    recipe_names = [*memory.RECIPES, *memory.RECIPE_ALIASES]
    train.add_argument("--recipe", "--precision", dest="recipe", metavar="NAME",
                       type=_one_of("recipe", recipe_names),
                       help="how the model states are kept, one of: " + ", ".join(recipe_names)
                       + " (zero-paper is bf16-mixed); default: what the preset is trained with, "
                       "else bf16-mixed. --precision is its older name")
    train.add_argument("--optimizer", default="adamw",
                       type=_one_of("optimizer", list(memory.OPTIMIZERS)),
                       help="one of: " + ", ".join(memory.OPTIMIZERS) + " (default adamw)")
    train.add_argument("--optimizer-impl", metavar="IMPL",
                       type=_one_of("optimizer implementation", memory.OPTIMIZER_IMPLS),
                       help="how the optimizer step runs: " + ", ".join(memory.OPTIMIZER_IMPLS)
                       + " (its temporaries at the step); default: the recipe's")
    train.add_argument("--zero", type=_one_of("ZeRO stage", sharding.STAGES, int),
                       help="ZeRO stage 0, 1, 2 or 3 (0: plain data parallelism); default: the "
                       "recipe's (fsdp2: 3, deepspeed: 2, else 0)")
    for name, what in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("cp", "context")):
        train.add_argument(f"--{name}", type=_positive, default=1, help=f"{what}-parallel size")
    train.add_argument("--interleave", type=_positive, default=1, metavar="V",
                       help="model chunks per pipeline device (interleaved 1F1B)")
    train.add_argument("--gpus", type=_positive, help="check that dp·tp·pp·cp equals this")
    train.add_argument("--sequence-parallel", action="store_true")
    train.add_argument("--seq-len", type=_positive, help="sequence length s (for activations)")
    train.add_argument("--micro-batch", type=_positive, default=1, help="micro-batch size b")
    train.add_argument("--global-batch", type=_positive, metavar="B",
                       help="sequences per step: gives the micro-batches m and the bubble")
    train.add_argument("--recompute", default="none",
                       type=_one_of("recompute", activations.RECOMPUTE_KINDS),
                       help="none, selective or full")
    train.add_argument("--implementation", metavar="NAME",
                       type=_one_of("implementation", list(activations.IMPLEMENTATIONS)),
                       help="the kernels whose saved tensors are counted, one of: "
                       + ", ".join(activations.IMPLEMENTATIONS) + "; default: what the preset is "
                       "trained with, else megatron-eager")
    train.add_argument("--attention", type=_one_of("attention", activations.ATTENTION_KINDS),
                       help="eager (stores the s×s scores) or flash: the implementation of the "
                       "same kernel family with that attention")
    train.add_argument("--mlp-kernel", default="eager",
                       type=_one_of("mlp kernel", activations.MLP_KERNELS),
                       help="eager (SwiGLU saves four ffn-wide tensors) or fused (three)")
    train.add_argument("--gpu", type=_one_of("GPU", list(compute.GPUS)), metavar="KIND",
                       help="one of: " + ", ".join(compute.GPUS) + ": say whether it fits in "
                       "the memory nvidia-smi reports for it")
    train.add_argument("--gpu-memory", type=_memory, metavar="SIZE",
                       help="memory of one device, e.g. 80GB or 141GiB: say whether it fits "
                       "(an \"80GB\" card holds more than 80GB: see --gpu)")
    est.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser


# -- from flags to a run ------------------------------------------------------------------------
def _model(args: argparse.Namespace) -> models.ModelShape | int:
    """The model the flags name: a parameter count, a preset (changed by shape flags) or a shape."""
    given = {f: getattr(args, f) for f in (*_SHAPE_FLAGS, "kv_heads", "mlp", "norm", "dropout",
                                           "tied_embeddings") if getattr(args, f) is not None}
    if args.params is not None:
        if args.model or given:
            extra = "--model" if args.model else "--" + next(iter(given)).replace("_", "-")
            raise UsageError(f"--params {args.params} cannot be combined with {extra}: give a "
                             "parameter count or a model (preset or shape), not both")
        return args.params
    if args.model:
        return models.modified(models.preset(args.model), **given)
    missing = [f"--{f}" for f in _SHAPE_FLAGS if f not in given]
    if len(missing) == len(_SHAPE_FLAGS):
        raise UsageError("no model given; accepted: --model PRESET, --params N, or a shape "
                         "(--layers --hidden --heads --ffn --vocab)")
    if missing:
        raise UsageError(f"a shape needs {' '.join(missing)} as well (or start from --model)")
    return models.shape("custom", **given)


def to_run(args: argparse.Namespace) -> Run:
    """The :class:`~trainmath.runs.Run` the parsed flags describe; the library checks it."""
    model = _model(args)
    lay = Layout(args.dp, args.tp, args.pp, args.cp, args.interleave, args.sequence_parallel)
    if args.gpu is not None and args.gpu_memory is not None:
        raise UsageError(f"--gpu {args.gpu} and --gpu-memory {args.gpu_memory} cannot be combined: "
                         "give a GPU kind or an amount of memory, not both")
    if args.gpus is not None and args.gpus != lay.gpus:
        raise UsageError(f"--gpus {args.gpus} does not match dp × tp × pp × cp = {args.dp} × "
                         f"{args.tp} × {args.pp} × {args.cp} = {lay.gpus}")
    try:
        return Run(
            model=model,
            training=Training(recipe=args.recipe, optimizer=args.optimizer,
                              zero_stage=args.zero, recompute=args.recompute,
                              implementation=args.implementation, mlp_kernel=args.mlp_kernel,
                              attention=args.attention, optimizer_impl=args.optimizer_impl),
            layout=lay,
            batch=Batch(args.seq_len, args.micro_batch, args.global_batch),
            gpu=None if args.gpu is None and args.gpu_memory is None else Gpu(args.gpu_memory, args.gpu),
        )
    except ShapeNeeded as exc:  # the same rule, worded with the flags that broke it
        if "global_batch" in exc.fields or "v" in exc.fields:
            raise UsageError("--global-batch and --interleave need a model shape (--model or "
                             "--layers/--hidden/...)") from None
        split = " and ".join(f"--{k} {getattr(lay, k)}" for k in exc.fields)
        verb = "need" if len(exc.fields) > 1 else "needs"
        raise UsageError(f"{split} {verb} a model shape (--model or --layers/--hidden/...): "
                         "with --params alone the split over those ranks is unknown") from None


# -- output ---------------------------------------------------------------------------------------
def render(est: Estimate) -> str:
    """The readable table: per device, GB with GiB beside, the step's peak, what fits, sources."""
    r, lay, t, batch, shape = est.run, est.run.layout, est.run.training, est.run.batch, est.run.shape
    name = "--params" if shape is None else shape.name
    lines = [f"{name}: {est.params:,} parameters, recipe {t.recipe}, {t.optimizer} "
             f"({t.optimizer_impl} step), ZeRO stage {t.zero_stage}"]
    if r.assumed:
        given = {"recipe": f"recipe {t.recipe}", "implementation": f"kernels {t.implementation}",
                 "optimizer_impl": f"the recipe's {t.optimizer_impl} optimizer step"}
        preset_defaults = shape is not None and shape.name in models.TRAINING_DEFAULTS \
            and models.trained_with(shape) is models.TRAINING_DEFAULTS[shape.name]
        how = (f"as {shape.name} is commonly trained" if preset_defaults
               else "not a preset" if shape is not None else "no shape")
        lines.append(f"assumed ({how}): " + ", ".join(given[a] for a in r.assumed))
    lines.append(f"layout: {lay.describe()}")
    if batch.seq_len is not None and shape is not None:
        kernel = "" if t.mlp_kernel == "eager" else f", {t.mlp_kernel} MLP"
        cast = ", autocast" if memory.recipe(t.recipe).autocast else ""
        lines.append(f"activations: s = {batch.seq_len}, b = {batch.micro_batch}, recompute "
                     f"{t.recompute}, {t.implementation} kernels ({t.attention} attention"
                     f"{kernel}{cast})")
    if est.microbatches is not None:
        lines.append(f"pipeline: m = {est.microbatches} micro-batches per step, bubble "
                     f"{float(est.bubble):.2%} of the ideal step (Narayanan et al. 2021)")
    where = f" (pipeline stage {est.pipeline_stage}, the fullest)" if lay.pp > 1 else ""
    lines.append(f"per device{where}:")

    def row(label: str, amount: Bytes) -> str:
        whole = Bytes(math.ceil(amount.n))  # the whole bytes --json reports
        return f"  {label:<17}{whole.format('GB', 2):>12}  {whole.format('GiB', 2):>12}"

    for label, amount in [*est.parts().items(), ("total", est.total)]:
        if amount is None:
            why = "needs a model shape" if shape is None else "needs --seq-len"
            lines.append(f"  {label:<17}{'not counted':>12}   ({why})")
            continue
        lines.append(row(label, amount))
    if est.layer is not None:
        layer = Bytes(math.ceil(est.layer.korthikanti.n))
        lines.append(f"  one layer keeps {layer.format('GB', 3)} for backward (Korthikanti et al. "
                     "2022 count)")
        if lay.pp == 1:
            lines.append(f"  all {shape.layers} layers keep {(layer * shape.layers).format('GB', 2)}; "
                         "the embedding, the loss and norm statistics make up the rest")
    top = est.peak.peak
    stage = f" on stage {est.peak_stage}" if lay.pp > 1 else ""
    lines.append(row("peak of a step", top.total) + f"   ({top.phase}{stage})")
    lines.append(f"  at {top.when}")
    if r.gpu is not None:
        capacity = Bytes(math.ceil(r.gpu.memory.n))
        peak = Bytes(math.ceil(top.total.n))
        where = str(capacity)
        if r.gpu.kind is not None:  # its usable memory: whole MiB, as nvidia-smi reports it
            where = (f"one {r.gpu.name} ({capacity.format('MiB', 0)} = "
                     f"{capacity.format('GB', 2)}, as nvidia-smi reports it)")
        if est.fits:
            lines.append(f"fits in {where}: yes, {(capacity - peak).format('GB', 2)} to spare "
                         "at the peak")
        else:
            lines.append(f"fits in {where}: no, {(peak - capacity).format('GB', 2)} over at the "
                         "peak")
    lines.append("sources: model states, Rajbhandari et al. 2020 (ZeRO) §5.1–5.3 and the recipe's")
    lines.append("  framework; activations, Korthikanti et al. 2022 §4, tensor by tensor; the peak,")
    lines.append("  trainmath.peak; all checked against PyTorch (the How we know page).")
    lines.append("  GB = 10^9 bytes, GiB = 2^30 bytes")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
        result = estimate(to_run(args))
    except (UsageError, ValueError, argparse.ArgumentTypeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(result.to_json() if args.json else render(result))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
