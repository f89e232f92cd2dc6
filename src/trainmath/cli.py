"""The ``trainmath`` command: the site's arithmetic at a terminal, with JSON for scripts.

``trainmath estimate`` gives the memory one device needs to train a model: weights, gradients,
master weights, optimizer states (ZeRO §5.1 over the dp·cp ranks, split by tensor and pipeline
parallelism as :mod:`trainmath.parallelism` does) and activations (:mod:`trainmath.activations`,
tensor by tensor, for the fullest pipeline stage). Every invalid input exits with status 2 and
one line on stderr that names the bad value and what is accepted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from fractions import Fraction
from typing import Sequence

from . import activations, memory, models, parallelism, sharding
from .units import Bytes, parse_bytes

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
    return parse


def build_parser() -> argparse.ArgumentParser:
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
    train.add_argument("--precision", default="bf16-mixed",
                       type=_one_of("precision", list(memory.RECIPES)),
                       help="one of: " + ", ".join(memory.RECIPES) + " (default bf16-mixed)")
    train.add_argument("--optimizer", default="adamw",
                       type=_one_of("optimizer", list(memory.OPTIMIZERS)),
                       help="one of: " + ", ".join(memory.OPTIMIZERS) + " (default adamw)")
    train.add_argument("--zero", default=0, type=_one_of("ZeRO stage", sharding.STAGES, int),
                       help="ZeRO stage 0, 1, 2 or 3 (0: plain data parallelism)")
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
    train.add_argument("--attention", default="eager",
                       type=_one_of("attention", activations.ATTENTION_KINDS),
                       help="eager (stores the s×s scores) or flash")
    train.add_argument("--gpu-memory", type=_memory, metavar="SIZE",
                       help="memory of one device, e.g. 80GB or 141GiB: say whether it fits")
    est.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser


# -- the estimate -------------------------------------------------------------------------------
def _shape(args: argparse.Namespace) -> models.ModelShape | None:
    given = {f: getattr(args, f) for f in (*_SHAPE_FLAGS, "kv_heads", "mlp", "norm", "dropout",
                                           "tied_embeddings") if getattr(args, f) is not None}
    if args.params is not None:
        if args.model or given:
            extra = "--model" if args.model else "--" + next(iter(given)).replace("_", "-")
            raise UsageError(f"--params {args.params} cannot be combined with {extra}: give a "
                             "parameter count or a model (preset or shape), not both")
        return None
    if args.model:
        base = models.preset(args.model)
        if not given:
            return base
        fields = {k: v for k, v in vars(base).items() if k not in ("name", "source")}
        if "heads" in given and "kv_heads" not in given and base.kv_heads == base.heads:
            fields["kv_heads"] = None  # a multi-head preset stays multi-head
        return models.shape(f"{base.name} (modified)", **{**fields, **given})
    missing = [f"--{f}" for f in _SHAPE_FLAGS if f not in given]
    if len(missing) == len(_SHAPE_FLAGS):
        raise UsageError("no model given; accepted: --model PRESET, --params N, or a shape "
                         "(--layers --hidden --heads --ffn --vocab)")
    if missing:
        raise UsageError(f"a shape needs {' '.join(missing)} as well (or start from --model)")
    return models.shape("custom", **given)


def estimate(args: argparse.Namespace) -> dict:
    """The estimate as a JSON-ready dict: sizes are whole bytes per device."""
    model = _shape(args)
    lay = parallelism.layout(args.dp, args.tp, args.pp, args.cp, v=args.interleave,
                             sequence_parallel=args.sequence_parallel)
    if args.gpus is not None and args.gpus != lay.gpus:
        raise UsageError(f"--gpus {args.gpus} does not match dp × tp × pp × cp = {args.dp} × "
                         f"{args.tp} × {args.pp} × {args.cp} = {lay.gpus}")
    per_layer = korthikanti = m = bubble = None
    stage = 0
    if model is None:
        if args.global_batch is not None or lay.v > 1:
            raise UsageError("--global-batch and --interleave need a model shape (--model or "
                             "--layers/--hidden/...)")
        split = " and ".join(f"--{k} {getattr(lay, k)}" for k in ("tp", "pp") if getattr(lay, k) > 1)
        if split:
            verb = "need" if " and " in split else "needs"
            raise UsageError(f"{split} {verb} a model shape (--model or --layers/--hidden/...): "
                             "with --params alone the split over those ranks is unknown")
        params = args.params
        states = sharding.zero_states(params, lay.zero_group, args.zero, args.precision,
                                      args.optimizer)
        device = dict(weights=states.weights, gradients=states.gradients,
                      master_weights=states.master_weights,
                      optimizer_states=states.optimizer_states, activations=None)
    else:
        params = models.param_count(model)
        batch = {} if args.global_batch is None else dict(global_batch=args.global_batch,
                                                           micro_batch=args.micro_batch)
        parallelism.validate(model, lay, seq_len=args.seq_len, **batch)
        if args.global_batch is not None:
            m = parallelism.microbatches(args.global_batch, lay.dp, args.micro_batch)
            bubble = parallelism.bubble_fraction(lay.pp, m, lay.v)
        acts = None
        value_bytes = 4 if args.precision == "fp32" else 2
        if args.seq_len is not None:
            common = dict(tp=lay.tp, sequence_parallel=lay.sequence_parallel, cp=lay.cp,
                          recompute=args.recompute, attention=args.attention,
                          value_bytes=value_bytes)
            layer = activations.layer_activations(model, args.seq_len, args.micro_batch, **common)
            per_layer, korthikanti = layer.total, layer.korthikanti
            acts = [activations.stage_activations(model, args.seq_len, args.micro_batch,
                                                  pp=lay.pp, v=lay.v, microbatches=m,
                                                  stage=i, **common).total
                    for i in range(lay.pp)]
        stages = parallelism.device_memory(model, lay, zero_stage=args.zero,
                                           precision=args.precision,
                                           optimizer_name=args.optimizer, activations=acts)
        fullest = parallelism.fullest(stages)
        stage = fullest.stage
        device = dict(weights=fullest.weights, gradients=fullest.gradients,
                      master_weights=fullest.master_weights,
                      optimizer_states=fullest.optimizer_states,
                      activations=fullest.activations if acts is not None else None)
    total = sum((v for v in device.values() if v is not None), Bytes(0))
    as_int = {k: (None if v is None else _whole(v)) for k, v in device.items()}
    result = {
        "params": params,
        "per_device": {**as_int, "total": _whole(total)},
        "activations_per_layer": None if korthikanti is None else _whole(korthikanti),
        "activations_per_layer_with_norm_statistics": None if per_layer is None else _whole(per_layer),
        "pipeline_stage": stage,
        "microbatches": m,
        "pipeline_bubble": None if bubble is None else float(bubble),
        "gpus": lay.gpus,
        "fits": None if args.gpu_memory is None else total <= args.gpu_memory,
        "inputs": {
            "model": None if model is None else model.name,
            "shape": None if model is None else _shape_dict(model),
            "precision": args.precision, "optimizer": args.optimizer, "zero": args.zero,
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp,
            "sequence_parallel": lay.sequence_parallel, "seq_len": args.seq_len,
            "micro_batch": args.micro_batch, "global_batch": args.global_batch,
            "interleave": lay.v, "recompute": args.recompute,
            "attention": args.attention,
            "gpu_memory": None if args.gpu_memory is None else _whole(args.gpu_memory),
        },
    }
    return result


def _whole(b: Bytes) -> int:
    """Whole bytes: a shard of an uneven division rounds up (that rank holds the extra byte)."""
    return math.ceil(b.n)


def _shape_dict(m: models.ModelShape) -> dict:
    return {k: v for k, v in vars(m).items() if k not in ("name", "source")}


# -- output ---------------------------------------------------------------------------------------
_LABELS = {"weights": "weights", "gradients": "gradients", "master_weights": "master weights",
           "optimizer_states": "optimizer states", "activations": "activations", "total": "total"}


def render(result: dict) -> str:
    """The readable table: per device, GB with GiB beside, what fits, and the sources."""
    inp = result["inputs"]
    name = inp["model"] or "--params"
    lines = [f"{name}: {result['params']:,} parameters, {inp['precision']}, {inp['optimizer']}, "
             f"ZeRO stage {inp['zero']}"]
    gpus = f"{result['gpus']} GPU" + ("s" if result["gpus"] > 1 else "")
    layout = (f"layout: dp {inp['dp']} × tp {inp['tp']} × pp {inp['pp']} × cp {inp['cp']} = "
              f"{gpus}" + (", sequence parallel" if inp["sequence_parallel"] else "")
              + (f", {inp['interleave']} chunks per pipeline device" if inp["interleave"] > 1 else ""))
    lines.append(layout)
    if inp["seq_len"] is not None and inp["shape"] is not None:
        lines.append(f"activations: s = {inp['seq_len']}, b = {inp['micro_batch']}, recompute "
                     f"{inp['recompute']}, {inp['attention']} attention")
    if result["microbatches"] is not None:
        lines.append(f"pipeline: m = {result['microbatches']} micro-batches per step, bubble "
                     f"{result['pipeline_bubble']:.2%} of the ideal step (Narayanan et al. 2021)")
    where = f" (pipeline stage {result['pipeline_stage']}, the fullest)" if inp["pp"] > 1 else ""
    lines.append(f"per device{where}:")
    for key, label in _LABELS.items():
        n = result["per_device"][key]
        if n is None:
            why = "needs a model shape" if inp["shape"] is None else "needs --seq-len"
            lines.append(f"  {label:<17}{'not counted':>12}   ({why})")
            continue
        lines.append(f"  {label:<17}{Bytes(n).format('GB', 2):>12}  {Bytes(n).format('GiB', 2):>12}")
    if inp["zero"] == 3:
        lines.append("  (ZeRO-3 also gathers the full weights of one layer at a time, and prefetches")
        lines.append("   the next: not counted here; see the ZeRO and FSDP page)")
    if result["activations_per_layer"] is not None:
        layer = Bytes(result["activations_per_layer"])
        lines.append(f"  one layer keeps {layer.format('GB', 3)} for backward (Korthikanti et al. "
                     "2022 count)")
        if inp["pp"] == 1:
            layers = inp["shape"]["layers"]
            lines.append(f"  all {layers} layers keep {(layer * layers).format('GB', 2)}; the "
                         "embedding, the loss and norm statistics make up the rest")
    if result["fits"] is not None:
        capacity = Bytes(inp["gpu_memory"])
        total = Bytes(result["per_device"]["total"])
        if result["fits"]:
            lines.append(f"fits in {capacity}: yes, {(capacity - total).format('GB', 2)} to spare")
        else:
            lines.append(f"fits in {capacity}: no, {(total - capacity).format('GB', 2)} over")
    lines.append("sources: model states, Rajbhandari et al. 2020 (ZeRO) §5.1; activations,")
    lines.append("  Korthikanti et al. 2022 §4, tensor by tensor. GB = 10^9 bytes, GiB = 2^30 bytes")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status (0, or 2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
        result = estimate(args)
    except (UsageError, ValueError, argparse.ArgumentTypeError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render(result))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
