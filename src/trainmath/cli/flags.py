"""The command's flags, declared once, as data: the argparse parsers and the calculator's form
are both made from :data:`FLAGS`.

A :class:`Flag` names its options, the subcommands that take it, the group it is shown in, its
help, how its text becomes a value (an argument type, or a list of accepted words) and its
default. :func:`build_parser` makes the ``trainmath`` parser from the table, group by group in
the table's order; :mod:`trainmath.cli.calculator` makes the page's form from the same entries.
A new flag is one entry here, and appears in ``--help``, the parser and the page.

Names a flag accepts come from the library's own tables (presets, recipes and their aliases,
GPUs and their aliases, ...), so every subcommand accepts the same names.

>>> [f.names[0] for f in flags_of("plan")][-4:]
['--top', '--layout', '--explain', '--json']
>>> flag("estimate", "--gpu").choices == flag("plan", "--gpu").choices
True
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

from ..checks.loglines import COUNTERS
from ..hardware import GPU_ALIASES, GPUS
from ..memory.finetune import METHODS, NORM_DTYPES, TARGETS, parse_targets
from ..memory.finetune_presets import ADAPTER_PRESETS
from ..memory.checkpointing import LAYER_OPS, parse_policy
from ..memory.kernels import (ACTIVATION_OFFLOADS, ATTENTION_KINDS, DEFAULT_LOSS_CHUNKS,
                              IMPLEMENTATIONS, LOSS_KINDS, MLP_KERNELS, RECOMPUTE_KINDS)
from ..memory.recipes import OPTIMIZER_IMPLS, OPTIMIZERS, RECIPE_ALIASES, RECIPES
from ..memory.offload import OFFLOAD_DEVICES
from ..memory.post_training import ALGORITHMS, LOGIT_DTYPES, PLACEMENTS, REFERENCES
from ..memory.rollout import ENGINE_WEIGHTS, KV_DTYPES, SLEEP_LEVELS
from ..memory.sharding import OFFLOAD_ALIASES, STAGES
from ..model.hfconfig import COMPOSITE, FAMILIES
from ..model.moe import EXPERT_LOADS
from ..model.presets import PRESETS
from ..model.shape import MLP_KINDS, NORM_KINDS
from ..parallel.layout import CP_KINDS, parse_stages
from ..parallel.schedules import SCHEDULES
from ..time.attention import FLASH_KERNELS
from ..time.calibration import SUSTAINED
from ..units import Bytes, parse_bytes, unknown

#: The command's name, as usage and error messages print it.
PROG = "trainmath"
_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block
        raise UsageError(message)


# -- argument types: a flag's text as a value, or a message naming what is accepted --------------
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


def parse_positive(text: str) -> int:
    """A positive whole number: ``8``."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def parse_memory(text: str) -> Bytes:
    """An amount of memory: ``80GB``, ``141 GiB`` (:func:`trainmath.units.parse_bytes`)."""
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


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """LoRA targets, ``q,v`` or ``all`` (:func:`trainmath.memory.finetune.parse_targets`)."""
    try:
        return parse_targets(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_probability(text: str) -> float:
    """A dropout probability: a number from 0 up to (not including) 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a dropout probability; accepted: a "
                                         "number from 0 up to (not including) 1, e.g. 0.05")
    return value


def parse_fraction(text: str) -> float:
    """A fraction from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction from 0 to 1")
    return value


def parse_capacity_factor(text: str) -> float:
    """A capacity factor: a number above 0, such as ``1.25``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a capacity factor; accepted: a number "
                                         "above 0, such as 1.0 or 1.25")
    return value


def parse_stage_layers(text: str) -> tuple[int, ...]:
    """``7/8*14/7``: layers per pipeline stage (:func:`trainmath.parallel.layout.parse_stages`)."""
    try:
        return parse_stages(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_rate(text: str) -> float:
    """A bandwidth in GB/s (10^9 bytes per second, each way), as bytes per second."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of GB/s")
    return value * 10**9


def one_of(what: str, accepted: Sequence, convert: Callable = str) -> Callable:
    """An argument type that accepts one of ``accepted`` and names the rest when it refuses."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value not in accepted:
            raise argparse.ArgumentTypeError(unknown(what, text, accepted))
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


# -- the table ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Flag:
    """One flag of one or more subcommands.

    ``names`` are its options (the first is its name; ``--recipe`` also answers to
    ``--precision``). ``kind`` is "value" (takes a value), "on" (a switch that is off unless
    given), "off" (``--no-double-quant``: stores False) or "both" (``--dropout`` /
    ``--no-dropout``). A value is parsed by ``parse`` or, with ``choices``, must be one of them
    (``what`` names them in the refusal; ``convert`` turns the text first, as ``int`` for the
    ZeRO stage). ``group`` is a key of :data:`GROUPS`, "" for the subcommand's own options.
    """

    names: tuple[str, ...]
    commands: tuple[str, ...]
    group: str
    help: str = ""
    kind: str = "value"
    parse: Callable | None = None
    choices: tuple = ()
    what: str = ""
    convert: Callable = str
    default: object = None
    metavar: str | None = None
    required: bool = False
    dest: str | None = None

    @property
    def name(self) -> str:
        """The flag without its dashes: ``seq-len``; the calculator's field name."""
        return self.names[0][2:]

    @property
    def key(self) -> str:
        """Where argparse stores the value: ``seq_len`` (or ``dest``)."""
        return self.dest or self.name.replace("-", "_")

    def value_type(self) -> Callable | None:
        """The argument type argparse calls on the text."""
        if self.choices:
            return one_of(self.what, self.choices, self.convert)
        return self.parse


#: The subcommands: (help in the command's list, description at the top of its --help).
COMMANDS: dict[str, tuple[str, str]] = {
    "estimate": ("memory per device for a model, precision, optimizer and layout",
                 "Memory one device needs to train a model: model states and activations."),
    "plan": ("every parallel layout that fits, ranked by predicted step time",
             "Rank the layouts dp × tp × pp × cp (with ZeRO stage, recomputation, micro-batch and "
             "interleaving) of a model on GPUs by predicted step time."),
    "check": ("a real run's memory against the estimate: measured, predicted, why they differ",
              "Hold what a run showed (an out-of-memory message, a framework's memory log line, "
              "or a reading of allocated, reserved or nvidia-smi memory) against the estimate of "
              "the same run: predicted against measured, the rest, and its likely causes."),
}

#: Each subcommand's groups of flags, in the order --help and the form show them: (key, title).
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "estimate": (("model", "model (a preset, a parameter count, or a shape)"),
                 ("training", "training"),
                 ("extras", "what the formulas leave out, offload, and time"),
                 ("time", "the step-time model (with --global-batch and --gpu; stated in the "
                          "output)"),
                 ("finetune", "fine-tuning (LoRA, QLoRA)"),
                 ("posttraining", "post-training (DPO, PPO, GRPO) and its rollout engine (vLLM)"),
                 ("output", "output")),
    "check": (("measured", "what the run showed"),
              ("model", "model (a preset, a parameter count, or a shape)"),
              ("training", "training"),
              ("extras", "what the formulas leave out, offload, and time"),
              ("time", "the step-time model (stated in the output)"),
              ("finetune", "fine-tuning (LoRA, QLoRA)")),
    "plan": (("model", "model (a preset, or a shape)"), ("run", "the run"),
             ("assumptions", "assumptions (stated in the output)"), ("output", "output")),
}

_BOTH = ("estimate", "plan", "check")  # the model flags
_EST = ("estimate", "check")  # check describes the run with estimate's flags
_CHECK = ("check",)
_POST = ("estimate",)  # post-training: estimate only
_PLAN = ("plan",)
_RECIPES = (*RECIPES, *RECIPE_ALIASES)
_GPUS = (*GPUS, *GPU_ALIASES)


def _time_flags(commands, group) -> list[Flag]:
    """The step-time model's settings, for estimate and plan alike (:class:`~trainmath.time.step.Timing`)."""
    return [
        Flag(("--sustained",), commands, group, "share of the GEMM and attention benchmarks' "
             "rates a training run sustains, 0.7 or 70% (default: calibrated on published runs: "
             + ", ".join(f"{k} {v:.0%}" for k, v in SUSTAINED.items()) + ")",
             parse=parse_fraction, metavar="F"),
        Flag(("--attention-kernel",), commands, group, "the flash kernel timed, one of: "
             + ", ".join(FLASH_KERNELS) + " (default: cudnn for megatron-te on Hopper and later, "
             "else fa2)", choices=FLASH_KERNELS, what="attention kernel", metavar="KERNEL"),
        Flag(("--tp-overlap",), commands, group, "tensor-parallel collectives overlap their GEMMs "
             "(Transformer Engine's --tp-comm-overlap)", kind="on", default=False),
        Flag(("--no-overlap",), commands, group, "gradient reduction and weight gathers wait for "
             "compute (no bucketed overlap, no prefetch)", kind="on", default=False),
        Flag(("--nvlink",), commands, group, "GB/s each GPU sends inside a node (default: the "
             "GPU's NVLink, one way)", parse=parse_rate, metavar="GB/s"),
        Flag(("--network",), commands, group, "GB/s each GPU sends across nodes (default: its DGX "
             "network adapter)", parse=parse_rate, metavar="GB/s"),
    ]


def _technique_flags(commands, group) -> list[Flag]:
    """The loss and activation offloading (:mod:`trainmath.memory.loss`,
    :mod:`trainmath.memory.act_offload`), for estimate and plan alike."""
    return [
        Flag(("--loss",), commands, group, "the loss over the vocabulary: standard "
             "(F.cross_entropy of the fp32 logits), chunked (torchtune's LinearCrossEntropyLoss: "
             "--loss-chunks pieces, one backward) or fused (Liger's fused linear cross entropy, "
             "its own chunks; CUDA only); default standard", choices=LOSS_KINDS, what="loss",
             default="standard"),
        Flag(("--loss-chunks",), commands, group, "chunks of a chunked loss (default "
             f"{DEFAULT_LOSS_CHUNKS}, torchtune's num_output_chunks)", parse=parse_positive,
             metavar="N"),
        Flag(("--activation-offload",), commands, group, "none; sync (every saved tensor but the "
             "output head's to CPU memory, on the compute stream: save_on_cpu, transformers' "
             "offload); overlap (on a side stream: torchtune's and TRL's OffloadActivations). "
             "Default none", choices=ACTIVATION_OFFLOADS, what="activation offload",
             default="none", metavar="HOW"),
    ]


def _routing_flags(commands, group) -> list[Flag]:
    """A mixture's routing (:class:`trainmath.model.moe.Routing`), for estimate and plan alike."""
    return [
        Flag(("--capacity-factor",), commands, group, "each expert takes at most C times its "
             "balanced share of a router's token copies, the rest dropped (Megatron-Core's "
             "--moe-expert-capacity-factor); default: dropless", parse=parse_capacity_factor,
             metavar="C"),
        Flag(("--pad-to-capacity",), commands, group, "pad every expert to its capacity, so the "
             "buffers have that size whatever the router does (--moe-pad-expert-input-to-"
             "capacity; needs --capacity-factor)", kind="on", default=False),
        Flag(("--expert-load",), commands, group, "the load counted on a device's experts: "
             "balanced (every expert its share), measured (the most loaded expert's share in "
             "published runs) or worst (every token copy of the ep group, or the capacity); "
             "default balanced. The output states all three", choices=EXPERT_LOADS,
             what="expert load", default="balanced", metavar="LOAD"),
    ]


_POLICY_HELP = ("with --recompute op: torchtitan (its SelectiveAC: matmul and attention outputs "
                "saved, every second matmul recomputed; the default) or the ops whose outputs are "
                "saved, comma-separated from " + ",".join(LAYER_OPS))
_COMPILE_HELP = ("the layers run under torch.compile: its min-cut partitioner decides what is "
                 "saved for backward (recompute none, full, or op: the policy's tags kept)")


def parse_recompute_policy(text: str) -> str:
    """An op-level policy: ``torchtitan`` or ``q,v,attention`` (:func:`trainmath.memory.checkpointing.parse_policy`)."""
    try:
        return parse_policy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_flags(commands, group, specs):
    return [Flag((f"--{name}",), commands, group, help, parse=parse_positive, default=default,
                 metavar=metavar) for name, help, default, metavar in specs]


#: Every flag of every subcommand, in the order each subcommand shows them.
#:
#: :meta hide-value:
FLAGS: tuple[Flag, ...] = (
    # the model, shared by estimate and plan
    Flag(("--model",), _BOTH, "model", "one of: " + ", ".join(PRESETS), choices=tuple(PRESETS),
         what="model preset", metavar="PRESET"),
    Flag(("--config",), _BOTH, "model", "a Hugging Face config.json (families: "
         + ", ".join((*FAMILIES, *COMPOSITE)) + "); the model is named by PATH", metavar="PATH"),
    Flag(("--params",), _BOTH, "model", "parameter count (7e9, 7B, 6738415616); model states only",
         parse=parse_count, metavar="N"),
    *_positive_flags(_BOTH, "model", (("layers", "transformer layers L", None, None),
                                      ("hidden", "hidden size h", None, None),
                                      ("heads", "attention heads a", None, None),
                                      ("kv-heads", "key-value heads (GQA); default: heads", None, None),
                                      ("ffn", "MLP width", None, None),
                                      ("vocab", "vocabulary size V", None, None))),
    Flag(("--mlp",), _BOTH, "model", "gelu or swiglu", choices=MLP_KINDS, what="mlp"),
    Flag(("--norm",), _BOTH, "model", "layernorm or rmsnorm", choices=NORM_KINDS, what="norm"),
    Flag(("--dropout",), _BOTH, "model", "dropout after attention and MLP (saves masks)", kind="both"),
    Flag(("--tied-embeddings",), _BOTH, "model", "the LM head shares the embedding matrix", kind="on"),
    *_positive_flags(_BOTH, "model", (
        ("experts", "routed experts per layer (mixture of experts); default: dense", None, None),
        ("experts-per-token", "experts each token is routed to (top-k)", None, "K"),
        ("shared-experts", "experts every token goes through besides the routed ones", None, "N"),
        ("expert-ffn", "MLP width of one expert; default: --ffn", None, "WIDTH"))),
    # estimate: training
    Flag(("--recipe", "--precision"), _EST, "training", "how the model states are kept, one of: "
         + ", ".join(_RECIPES) + " (zero-paper is bf16-mixed); default: what the preset is "
         "trained with, else bf16-mixed. --precision is its older name", choices=_RECIPES,
         what="recipe", metavar="NAME"),
    Flag(("--optimizer",), _EST, "training", "one of: " + ", ".join(OPTIMIZERS) + " (default adamw)",
         choices=tuple(OPTIMIZERS), what="optimizer", default="adamw"),
    Flag(("--optimizer-impl",), _EST, "training", "how the optimizer step runs: "
         + ", ".join(OPTIMIZER_IMPLS) + " (its temporaries at the step); default: the recipe's",
         choices=OPTIMIZER_IMPLS, what="optimizer implementation", metavar="IMPL"),
    Flag(("--zero",), _EST, "training", "ZeRO stage 0, 1, 2 or 3 (0: plain data parallelism); "
         "default: the recipe's (fsdp2: 3, deepspeed: 2, else 0)", choices=STAGES,
         what="ZeRO stage", convert=int),
    *_positive_flags(_EST, "training", (("dp", "data-parallel size", 1, None),
                                        ("tp", "tensor-parallel size", 1, None),
                                        ("pp", "pipeline-parallel size", 1, None),
                                        ("cp", "context-parallel size", 1, None),
                                        ("ep", "expert-parallel size (a mixture of experts): "
                                               "etp·ep must divide dp·cp·tp, as Megatron-Core "
                                               "folds the experts over the GPUs", 1, None),
                                        ("etp", "expert-tensor-parallel size: each expert split "
                                                "etp ways (default: tp, as Megatron-Core)", None, None),
                                        ("interleave", "model chunks per pipeline device (interleaved 1F1B)", 1, "V"),
                                        ("gpus", "check that dp·tp·pp·cp equals this", None, None))),
    Flag(("--sequence-parallel",), _EST, "training", kind="on", default=False),
    Flag(("--schedule",), _EST, "training", "the pipeline schedule, as torch.distributed."
         "pipelining names it: " + "; ".join(f"{k}: {v}" for k, v in SCHEDULES.items())
         + " (default 1f1b)", choices=tuple(SCHEDULES), what="schedule", default="1f1b"),
    Flag(("--cp-kind",), _EST, "training", "how context parallelism splits attention: "
         + "; ".join(f"{k}: {v}" for k, v in CP_KINDS.items()) + " (default ring)",
         choices=tuple(CP_KINDS), what="context-parallel kind", default="ring"),
    *_routing_flags(_EST, "training"),
    Flag(("--stage-layers",), _EST, "training", "layers of each pipeline stage (of each model "
         "chunk with --interleave), e.g. 7/8*14/7 for Llama 3 405B on pp 16; default: even, or "
         "one fewer on the first and last stages when the layers do not divide",
         parse=parse_stage_layers, metavar="LIST"),
    *_positive_flags(_EST, "training", (
        ("seq-len", "sequence length s (for activations)", None, None),
        ("micro-batch", "micro-batch size b", 1, None),
        ("global-batch", "sequences per step: gives the micro-batches m and the bubble", None, "B"))),
    Flag(("--recompute",), _EST, "training", "none, selective, full, or op (op-level selective "
         "checkpointing: --recompute-policy names the ops whose outputs are saved)",
         choices=RECOMPUTE_KINDS, what="recompute", default="none"),
    Flag(("--recompute-policy",), _EST, "training", _POLICY_HELP, parse=parse_recompute_policy,
         metavar="POLICY"),
    Flag(("--compile",), _EST, "training", _COMPILE_HELP, kind="on", default=False),
    Flag(("--implementation",), _EST, "training", "the kernels whose saved tensors are counted, one "
         "of: " + ", ".join(IMPLEMENTATIONS) + "; default: what the preset is trained with, else "
         "megatron-eager", choices=tuple(IMPLEMENTATIONS), what="implementation", metavar="NAME"),
    Flag(("--attention",), _EST, "training", "eager (stores the s×s scores) or flash: the "
         "implementation of the same kernel family with that attention", choices=ATTENTION_KINDS,
         what="attention"),
    Flag(("--mlp-kernel",), _EST, "training", "eager (SwiGLU saves four ffn-wide tensors) or fused "
         "(three)", choices=MLP_KERNELS, what="mlp kernel", default="eager"),
    *_technique_flags(_EST, "training"),
    Flag(("--gpu",), _EST, "training", "one of: " + ", ".join(_GPUS) + ": say whether it fits in the "
         "memory nvidia-smi reports for it (its peak FLOP/s for --tokens)", choices=_GPUS,
         what="GPU", metavar="NAME"),
    Flag(("--gpu-memory",), _EST, "training", "memory of one device, e.g. 80GB or 141GiB: say "
         "whether it fits (an \"80GB\" card holds more than 80GB: see --gpu); with --gpu it "
         "overrides that GPU's memory", parse=parse_memory, metavar="SIZE"),
    # estimate: what the formulas leave out, offload, and time
    Flag(("--overhead",), _EST, "extras", "memory no formula counts (CUDA context, cuBLAS/cuDNN "
         "workspaces, NCCL buffers, allocator fragmentation), added to the step's peak for the "
         "fit, e.g. 2GiB; default 0 (not counted): the Command line page gives typical figures",
         parse=parse_memory, default=Bytes(0), metavar="SIZE"),
    Flag(("--offload",), _EST, "extras", "none; optimizer (ZeRO-Offload: master weights, optimizer "
         "states and gradient partitions in CPU memory, ZeRO stage 2 or 3); params (ZeRO-Infinity "
         "or FSDP2 CPUOffloadPolicy: every sharded state, ZeRO stage 3). Default none",
         choices=("none", "optimizer", *OFFLOAD_ALIASES), what="offload", default="none",
         metavar="WHAT"),
    Flag(("--gpus-per-node",), _EST, "extras", "GPUs on one node: the CPU memory offload needs per "
         "node", parse=parse_positive, metavar="N"),
    Flag(("--offload-to",), _EST, "extras", "cpu or nvme: where the offloaded states go, "
         "DeepSpeed's offload device (nvme: ZeRO-Infinity, ZeRO stage 3; CPU memory then holds "
         "the pinned swap buffers). Default cpu", choices=OFFLOAD_DEVICES, what="offload device",
         default="cpu", metavar="TIER"),
    Flag(("--host-memory",), _EST, "extras", "CPU memory of one node, e.g. 1.5TB: the verdict "
         "checks that it holds what offload puts there (needs --gpus-per-node)",
         parse=parse_memory, metavar="SIZE"),
    Flag(("--nvme",), _EST, "extras", "NVMe capacity of one node, e.g. 30TB: the verdict checks "
         "that it holds what --offload-to nvme puts there (needs --gpus-per-node)",
         parse=parse_memory, metavar="SIZE"),
    Flag(("--tokens",), _EST, "extras", "tokens to train on (15T, 2e12): FLOPs per token, time and "
         "GPU-hours on the run's GPUs; needs --gpu, and --mfu or the predicted step (a shape, "
         "--seq-len, --global-batch)", parse=parse_tokens, metavar="N"),
    Flag(("--mfu",), _EST, "extras", "model FLOPs utilization assumed, 0.4 or 40%, of the GPU's "
         "dense peak in the recipe's precision, instead of the predicted one", parse=parse_mfu,
         metavar="F"),
    # estimate: the step-time model
    *_time_flags(_EST, "time"),
    # estimate: fine-tuning
    Flag(("--finetune",), _EST, "finetune", "full (every parameter trained, the default), lora (a "
         "low-rank adapter on the frozen 16-bit model, Hu et al. 2021) or qlora (on a 4-bit NF4 "
         "model, Dettmers et al. 2023); the adapter's weights follow --recipe (default fp32, as "
         "peft keeps them)", choices=METHODS, what="fine-tuning method", default="full",
         metavar="METHOD"),
    Flag(("--lora-rank",), _EST, "finetune", "the adapter's rank r (default 16)",
         parse=parse_positive, metavar="R"),
    Flag(("--lora-targets",), _EST, "finetune", "matrices with an adapter, comma-separated from "
         + ",".join(TARGETS) + ", or all (default q,v, peft's for Llama)", parse=parse_lora_targets,
         metavar="LIST"),
    Flag(("--lora-dropout",), _EST, "finetune", "peft's lora_dropout (default 0): above 0 each "
         "adapter saves a mask and its own input", parse=parse_probability, metavar="P"),
    Flag(("--adapter-recipe",), _EST, "finetune", "an adapter recipe as its authors' code runs it, "
         "one of: " + ", ".join(ADAPTER_PRESETS) + " (qlora: QLoRA's qlora.py and Guanaco scripts; "
         "peft: peft's and transformers' defaults; torchtune, axolotl: their Llama-3 configs): "
         "the rank, targets, dropout, adapter format, norms, optimizer, checkpointing, micro-batch "
         "and sequence length it sets; a flag given (at other than its default) wins",
         choices=tuple(ADAPTER_PRESETS), what="adapter recipe", metavar="NAME"),
    Flag(("--norm-dtype",), _EST, "finetune", "the frozen norms' format: 16-bit (the model's, "
         "the default) or fp32 (as qlora.py keeps them)", choices=NORM_DTYPES,
         what="format of the norms' weights", metavar="DTYPE"),
    Flag(("--no-double-quant",), _EST, "finetune", "qlora: fp32 block constants (0.5 bits per "
         "weight) instead of Double Quantization's 8-bit ones (0.127 bits)", kind="off",
         dest="double_quant"),
    # estimate: post-training
    Flag(("--post-training",), _POST, "posttraining", "dpo, ppo or grpo: the memory of each phase "
         "of a post-training step (generation, log-probs, training), per device; the model, "
         "training and layout flags describe the policy. " + "; ".join(
             f"{k}: {v}" for k, v in ALGORITHMS.items()), choices=tuple(ALGORITHMS),
         what="post-training algorithm", metavar="ALGO"),
    Flag(("--placement",), _POST, "posttraining", "where the rollout engine runs: "
         + "; ".join(f"{k}: {v}" for k, v in PLACEMENTS.items()) + " (default colocated)",
         choices=tuple(PLACEMENTS), what="placement", default="colocated"),
    *_positive_flags(_POST, "posttraining", (
        ("prompt-len", "tokens of a prompt (default 512): the trainer's sequences are prompt and "
                       "response (--seq-len, if given, must equal their sum)", 512, "N"),
        ("response-len", "tokens of a response (default 1024)", 1024, "N"),
        ("prompts", "prompts one engine generates for at once (default 1)", 1, "N"),
        ("group-size", "grpo: completions per prompt (default 8, TRL's num_generations)", None, "G"),
        ("logprob-micro-batch", "sequences of one no-grad log-prob pass (default: --micro-batch; "
                                "dpo: examples, two sequences each)", None, "B"),
        ("rollout-gpus", "split: the engine's GPUs (default: --rollout-tp)", None, "N"))),
    Flag(("--logprob-dtype",), _POST, "posttraining", "how a log-prob pass holds its logits: "
         "fp32 (upcast for the log-softmax: older transformers, OpenRLHF; the default) or bf16 "
         "(the head's logits, one sequence's log-softmax at a time: TRL's selective_log_softmax "
         "with today's transformers)", choices=LOGIT_DTYPES, what="log-prob dtype",
         default="fp32"),
    Flag(("--reference",), _POST, "posttraining", "the frozen reference: model (a copy in "
         "16-bit, the default), none (no KL term, TRL's GRPO default beta 0), precomputed (dpo's "
         "precompute_ref_log_probs: not loaded) or adapter (the base with the adapter off, the "
         "default with --finetune lora or qlora)", choices=REFERENCES, what="reference"),
    Flag(("--reward-model",), _POST, "posttraining", "a frozen reward model of the policy's "
         "shape is loaded (default: for ppo only; grpo recipes use rule-based rewards)",
         kind="both"),
    Flag(("--offload-reference",), _POST, "posttraining", "the reference waits in CPU memory "
         "outside its log-prob pass (verl's ref.fsdp_config.param_offload)", kind="on",
         default=False),
    Flag(("--offload-policy",), _POST, "posttraining", "the trained models' states wait in CPU "
         "memory during generation and only their parameters come back for the log-prob pass "
         "(verl's actor param_offload and optimizer_offload)", kind="on", default=False),
    *_positive_flags(_POST, "posttraining", (
        ("rollout-tp", "the engine's tensor-parallel size (default 1)", 1, "N"),)),
    Flag(("--gpu-memory-utilization",), _POST, "posttraining", "vLLM's share of each GPU's total "
         "memory for weights, activations and the KV cache (default 0.9)",
         parse=parse_fraction, default=0.9, metavar="F"),
    Flag(("--rollout-weights",), _POST, "posttraining", "the engine's weights: "
         + ", ".join(ENGINE_WEIGHTS) + " (default bf16)", choices=ENGINE_WEIGHTS,
         what="engine weights", default="bf16", metavar="FORMAT"),
    Flag(("--kv-cache-dtype",), _POST, "posttraining", "auto (the model's 16-bit dtype, the "
         "default) or fp8", choices=KV_DTYPES, what="KV cache dtype", default="auto"),
    *_positive_flags(_POST, "posttraining", (
        ("block-size", "tokens per KV-cache block (default 16)", 16, "N"),
        ("max-model-len", "the engine's longest sequence (default: prompt + response)", None, "N"),
        ("max-num-seqs", "sequences the engine runs at once (default 256)", 256, "N"),
        ("max-num-batched-tokens", "tokens of the engine's profiling forward (default: "
                                   "vLLM's for the GPU)", None, "N"))),
    Flag(("--enforce-eager",), _POST, "posttraining", "no CUDA graphs (vLLM's enforce_eager)",
         kind="on", default=False),
    Flag(("--sleep-level",), _POST, "posttraining", "vLLM's sleep mode between generations: 0 "
         "(off, the default: the engine keeps its memory), 1 (weights to CPU memory, the KV cache "
         "freed) or 2 (both freed)", choices=SLEEP_LEVELS, what="sleep level", convert=int,
         default=0),
    Flag(("--suggest",), ("estimate",), "output", "what to change: when the run does not fit, "
         "the smallest change of each lever that makes it fit (recompute, ZeRO stage, offload, "
         "more GPUs, a shorter sequence, a smaller micro-batch, kernels; two levers together "
         "where no single one fits), each with its memory and its step-time cost, ranked; when "
         "it fits, the memory to spare and the longest sequence and largest micro-batch that "
         "still fit. Needs --gpu or --gpu-memory", kind="on", default=False),
    Flag(("--json",), _EST, "", "one JSON object on stdout", kind="on", default=False),
    # check: what the run showed
    Flag(("--oom",), _CHECK, "measured", "PyTorch's out-of-memory message: a file, - for standard "
         "input, or the message itself ([rankN]: prefixes, tracebacks and wrapped lines are fine)",
         metavar="FILE"),
    Flag(("--log",), _CHECK, "measured", "a framework's memory log line (Megatron-LM, "
         "Megatron-Bridge, torchtitan, DeepSpeed, torchtune, verl, nvidia-smi): a file, -, or the "
         "line itself", metavar="FILE"),
    Flag(("--measured",), _CHECK, "measured", "a reading, e.g. 71.2GiB, of the counter --counter "
         "names", parse=parse_memory, metavar="SIZE"),
    Flag(("--counter",), _CHECK, "measured", "what --measured is: allocated "
         "(torch.cuda.max_memory_allocated), reserved (max_memory_reserved) or process "
         "(nvidia-smi's figure for the process)", choices=COUNTERS, what="counter"),
    # plan: the run
    Flag(("--gpu",), _PLAN, "run", "one of: " + ", ".join(_GPUS), choices=_GPUS, what="GPU",
         metavar="KIND", required=True),
    Flag(("--gpus",), _PLAN, "run", "GPUs in all", parse=parse_positive, required=True),
    Flag(("--gpus-per-node",), _PLAN, "run", "GPUs per node (default: the GPU's DGX/HGX node, 8)",
         parse=parse_positive, metavar="N"),
    Flag(("--seq-len",), _PLAN, "run", "sequence length s", parse=parse_positive, required=True),
    Flag(("--global-batch",), _PLAN, "run", "sequences per optimizer step", parse=parse_positive,
         metavar="B", required=True),
    Flag(("--recipe",), _PLAN, "run", "one of: " + ", ".join(_RECIPES) + "; default: the model's",
         choices=_RECIPES, what="recipe", metavar="NAME"),
    Flag(("--implementation",), _PLAN, "run", "one of: " + ", ".join(IMPLEMENTATIONS)
         + "; default: the model's", choices=tuple(IMPLEMENTATIONS), what="implementation",
         metavar="NAME"),
    Flag(("--optimizer",), _PLAN, "run", choices=tuple(OPTIMIZERS), what="optimizer",
         default="adamw"),
    Flag(("--zero",), _PLAN, "run", "search only this ZeRO stage (default: every stage the recipe "
         "offers)", choices=STAGES, what="ZeRO stage", convert=int),
    Flag(("--recompute",), _PLAN, "run", "search only this recomputation, none, selective, full "
         "or op (default: each the kernels allow, op only when asked)", choices=RECOMPUTE_KINDS,
         what="recompute"),
    Flag(("--recompute-policy",), _PLAN, "run", _POLICY_HELP + "; searches recompute op only",
         parse=parse_recompute_policy, metavar="POLICY"),
    Flag(("--compile",), _PLAN, "run", _COMPILE_HELP, kind="on", default=False),
    Flag(("--schedule",), _PLAN, "run", "search only this pipeline schedule, one of "
         + ", ".join(SCHEDULES) + " (default: each a layout's micro-batches allow)",
         choices=tuple(SCHEDULES), what="schedule"),
    Flag(("--cp-kind",), _PLAN, "run", "search only this context-parallel kind, one of "
         + ", ".join(CP_KINDS) + " (default: each the heads allow)", choices=tuple(CP_KINDS),
         what="context-parallel kind"),
    *_routing_flags(_PLAN, "run"),
    *_technique_flags(_PLAN, "run"),
    # plan: the step-time model's assumptions
    *_time_flags(_PLAN, "assumptions"),
    Flag(("--tp-across-nodes",), _PLAN, "assumptions", "allow tp beyond one node", kind="on",
         default=False),
    Flag(("--cp-across-nodes",), _PLAN, "assumptions", "allow tp × cp beyond one node", kind="on",
         default=False),
    # plan: output
    Flag(("--top",), _PLAN, "output", "rows of the table (default 10)", parse=parse_positive,
         default=10),
    Flag(("--layout",), _PLAN, "output", "score your layout, e.g. dp=16,tp=8,pp=4 (also ep, etp, "
         "v, zero, recompute, b, and stages=7/8*14/7)", metavar="SPEC"),
    Flag(("--explain",), _PLAN, "output", "why each runner-up lost to the best", kind="on",
         default=False),
    Flag(("--json",), _PLAN, "output", "one JSON object: every layout considered", kind="on",
         default=False),
)


def flags_of(command: str) -> list[Flag]:
    """The flags of ``command``, in the order its --help lists them."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; accepted: {', '.join(COMMANDS)}")
    return [f for f in FLAGS if command in f.commands]


def flag(command: str, name: str) -> Flag:
    """The flag of ``command`` called ``name`` (``"--seq-len"``)."""
    for f in flags_of(command):
        if name in f.names:
            return f
    raise ValueError(f"unknown flag {name!r} of {command!r}; accepted: "
                     + ", ".join(f.names[0] for f in flags_of(command)))


def _add(target, f: Flag) -> None:
    """Add ``f`` to an argparse parser or group."""
    kw: dict = {"help": f.help.replace("%", "%%") or None}  # argparse %-formats its help
    if f.dest:
        kw["dest"] = f.dest
    if f.kind == "on":
        target.add_argument(*f.names, action="store_true", default=f.default, **kw)
    elif f.kind == "off":
        target.add_argument(*f.names, action="store_false", default=None, **kw)
    elif f.kind == "both":
        target.add_argument(*f.names, action=argparse.BooleanOptionalAction, default=None, **kw)
    else:
        target.add_argument(*f.names, type=f.value_type(), default=f.default, metavar=f.metavar,
                            required=f.required, **kw)


def build_parser() -> argparse.ArgumentParser:
    """The ``trainmath`` argument parser, made from :data:`FLAGS`: a subcommand per entry of
    :data:`COMMANDS`, its groups in the order of :data:`GROUPS`."""
    parser = _Parser(prog=PROG, description="The arithmetic of large-model training, checked.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command, (help_text, description) in COMMANDS.items():
        p = sub.add_parser(command, help=help_text, description=description)
        groups = {key: p.add_argument_group(title) for key, title in GROUPS[command]}
        for f in flags_of(command):
            _add(groups[f.group] if f.group else p, f)
    return parser
