"""The levers of a run: the ways :func:`trainmath.planner.suggest.suggest` can change a run
that does not fit, each a :class:`Lever` of :data:`LEVERS` whose settings are :class:`Change` s
from the smallest to the largest, memory falling along them.

A :class:`Change` names the flags of ``trainmath estimate`` it stands for and the fields of the
:class:`~trainmath.runs.description.Run` it sets; :meth:`Change.apply` makes the changed run,
which checks itself with the run's rules (:mod:`trainmath.runs.rules`), so a setting a rule
refuses is never suggested. The levers: the kernels (flash attention, a fused SwiGLU), sequence
parallelism, recomputation (selective and full, Korthikanti et al. 2022; op-level with
torchtitan's policy between them), the ZeRO stage
(Rajbhandari et al. 2020, §5.1–5.3; stage 3 is FSDP's full sharding), offload of the
optimizer (ZeRO-Offload, Ren et al. 2021) or of every sharded state (ZeRO-Infinity,
Rajbhandari et al. 2021; FSDP2's ``CPUOffloadPolicy``), more GPUs by dp, tp (within a node, with
sequence parallelism), cp (ring attention, with flash attention) or pp, a smaller micro-batch
that accumulates to the same batch, a shorter sequence, and for a LoRA or QLoRA run 8-bit Adam
states (Dettmers et al. 2022), the adapter in bf16 and a 4-bit base (QLoRA, Dettmers et al.
2023).

>>> from trainmath.runs.description import run
>>> [c.flags for c in recompute_settings(run("llama-3-8b", seq_len=4096))]
[(('--recompute', 'selective'),), (('--recompute', 'op'),), (('--recompute', 'full'),)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from ..memory.kernels import IMPLEMENTATIONS, implementation as _implementation
from ..memory.recipes import recipe as _recipe
from ..runs.description import Run

#: Tokens a suggested sequence length is a multiple of (with the layout's own divisors:
#: :func:`sequence_step`).
SEQUENCE_STEP = 128
#: The largest micro-batch a headroom search tries (without a global batch to bound it).
MAX_MICRO_BATCH = 4096
#: The most dp grows by (× 2, × 4, ... × this).
MAX_FACTOR = 64
#: GPUs of a node: tensor parallelism grows within one, as the planner's default.
NODE_GPUS = 8


# -- what a change is --------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    """One setting of one lever: ``flags`` as ``trainmath estimate`` takes them
    (``(("--recompute", "full"),)``; a switch has the value ""), ``words`` what it does, and
    the run's fields it sets (``training``, ``layout``, ``batch``, ``adapter``: pairs of a
    field's name and its value)."""

    lever: str
    flags: tuple[tuple[str, str], ...]
    words: str
    training: tuple[tuple[str, object], ...] = ()
    layout: tuple[tuple[str, object], ...] = ()
    batch: tuple[tuple[str, object], ...] = ()
    adapter: tuple[tuple[str, object], ...] = ()

    def apply(self, run: Run) -> Run:
        """``run`` with this change, checked as any run is (a ValueError if a rule refuses)."""
        parts = {}
        for name, fields in (("training", self.training), ("layout", self.layout),
                             ("batch", self.batch), ("adapter", self.adapter)):
            if fields:
                parts[name] = replace(getattr(run, name), **dict(fields))
        return replace(run, **parts)


@dataclass(frozen=True)
class Lever:
    """A way to change a run: ``settings(run)`` gives its changes, from the smallest to the
    largest, memory falling along them; ``keeps`` says whether it trains the same thing each
    step (same model, tokens, batch and optimizer)."""

    name: str
    keeps: bool
    settings: Callable[[Run], Sequence[Change]]


# -- the levers --------------------------------------------------------------------------------
def recompute_settings(run: Run) -> list[Change]:
    """Recomputation beyond the run's, memory falling: selective, op-level (torchtitan's
    policy, where the run's kernels allow it), then full."""
    order = ("none", "selective", "op", "full")
    now = order.index(run.training.recompute)
    words = {"selective": "recompute attention's core in the backward (Korthikanti et al. 2022)",
             "op": "save the matmuls' outputs torchtitan's policy names, recompute the rest",
             "full": "keep only each layer's input and rerun its forward in the backward"}
    return [Change("recompute", (("--recompute", k),), words[k], training=(("recompute", k),))
            for k in order[now + 1:]]


def _zero(run: Run) -> list[Change]:
    t = run.training
    words = {1: "shard the optimizer states over the dp ranks", 2: "shard the gradients too",
             3: "shard the weights too (FSDP's full sharding)"}
    return [Change("zero", (("--zero", str(z)),), f"ZeRO stage {z}: {words[z]}",
                   training=(("zero_stage", z),))
            for z in _recipe(t.recipe).stages if z > t.zero_stage]


def _offload(run: Run) -> list[Change]:
    t = run.training
    out = []
    for what, stage, words in (("optimizer", 2, "master weights, optimizer states and gradient "
                                                "partitions in CPU memory (ZeRO-Offload)"),
                               ("params", 3, "every sharded state in CPU memory (ZeRO-Infinity, "
                                             "FSDP2's CPUOffloadPolicy)")):
        if t.offload != "none":
            break
        z = max(stage, t.zero_stage)
        flags = (("--offload", what),) + ((("--zero", str(z)),) if z != t.zero_stage else ())
        out.append(Change("offload", flags, words,
                          training=(("offload", what), ("zero_stage", z))))
    return out


def _doubling(name: str, flag: str, words: str, now: int, top: int) -> list[Change]:
    out, k = [], now * 2
    while k <= top:
        out.append(Change(name, ((flag, str(k)),), words.format(k=k),
                          layout=((name, k),)))
        k *= 2
    return out


def _dp(run: Run) -> list[Change]:
    return _doubling("dp", "--dp", "{k} data-parallel replicas", run.layout.dp,
                     run.layout.dp * MAX_FACTOR)


def _tp(run: Run) -> list[Change]:
    lay = run.layout
    if run.shape is None or _implementation(run.training.implementation).family != "megatron":
        return []
    out = []
    for c in _doubling("tp", "--tp", "split each layer's matrices {k} ways", lay.tp, NODE_GPUS):
        if not lay.sequence_parallel:  # sequence parallelism with tp, as the planner runs it
            c = replace(c, flags=(*c.flags, ("--sequence-parallel", "")),
                        layout=(*c.layout, ("sequence_parallel", True)),
                        words=c.words + ", with sequence parallelism")
        out.append(c)
    return out


def _pp(run: Run) -> list[Change]:
    if run.shape is None or run.layout.stages:
        return []
    return _doubling("pp", "--pp", "{k} pipeline stages", run.layout.pp, run.shape.layers)


def _cp(run: Run) -> list[Change]:
    if run.shape is None or run.batch.seq_len is None or run.training.attention != "flash":
        return []
    return _doubling("cp", "--cp", "split each sequence over {k} GPUs (ring attention)",
                     run.layout.cp, NODE_GPUS)


def sequence_step(run: Run) -> int:
    """The step of a suggested sequence length: a multiple of :data:`SEQUENCE_STEP` that the
    layout's rules accept (2·cp with context parallelism, tp·cp with sequence parallelism:
    :func:`trainmath.parallel.layout.sequence_problems`)."""
    lay, step = run.layout, SEQUENCE_STEP
    if lay.cp > 1:
        step = math.lcm(step, 2 * lay.cp)
    if lay.sequence_parallel:
        step = math.lcm(step, lay.tp * lay.cp)
    return step


def seq_change(s: int) -> Change:
    """Sequences of ``s`` tokens (``--seq-len s``)."""
    return Change("seq", (("--seq-len", str(s)),), f"sequences of {s:,} tokens",
                  batch=(("seq_len", s),))


def _shorter(run: Run) -> list[Change]:
    s = run.batch.seq_len
    if run.shape is None or s is None:
        return []
    step = sequence_step(run)
    return [seq_change(k * step) for k in range((s - 1) // step, 0, -1)]


def micro_sizes(run: Run, below: bool) -> list[int]:
    """Micro-batch sizes that keep the batch: the divisors of the global batch's share of a dp
    rank with one, else (``below``) the divisors of the micro-batch, which accumulation keeps,
    or (above it) every size."""
    b = run.batch
    if b.global_batch is not None:
        if b.global_batch % run.layout.dp:
            return []
        per = b.global_batch // run.layout.dp
        return [k for k in range(1, per + 1) if per % k == 0]
    if below:
        return [k for k in range(1, b.micro_batch) if b.micro_batch % k == 0]
    return list(range(b.micro_batch + 1, MAX_MICRO_BATCH + 1))


def micro_change(run: Run, k: int) -> Change:
    """Micro-batches of ``k`` sequences (``--micro-batch k``), with the accumulation that keeps
    the batch in its words."""
    b = run.batch
    if b.global_batch is not None:
        words = f"micro-batches of {k}, {b.global_batch // (run.layout.dp * k)} a step per replica"
    elif k < b.micro_batch:
        words = f"micro-batches of {k}, {b.micro_batch // k} accumulated a step to keep the batch"
    else:
        words = f"micro-batches of {k}"
    return Change("micro-batch", (("--micro-batch", str(k)),), words, batch=(("micro_batch", k),))


def _smaller(run: Run) -> list[Change]:
    if run.shape is None or run.batch.seq_len is None:
        return []
    b = run.batch.micro_batch
    return [micro_change(run, k) for k in reversed(micro_sizes(run, True)) if k < b]


def _kernels(run: Run) -> list[Change]:
    t = run.training
    if run.shape is None or run.batch.seq_len is None:
        return []
    out = []
    if t.attention == "eager":
        family = _implementation(t.implementation).family
        (flash,) = [i.name for i in IMPLEMENTATIONS.values()
                    if i.family == family and i.attention == "flash"]
        out.append(Change("kernels", (("--implementation", flash),), "flash attention (no s×s "
                          "scores stored)", training=(("implementation", flash),
                                                      ("attention", "flash"))))
    return out


def _mlp_kernel(run: Run) -> list[Change]:
    if run.shape is None or run.batch.seq_len is None or run.training.mlp_kernel != "eager" \
            or run.shape.mlp != "swiglu":
        return []
    return [Change("mlp-kernel", (("--mlp-kernel", "fused"),), "a fused SwiGLU (three ffn-wide "
                   "tensors saved, not four)", training=(("mlp_kernel", "fused"),))]


def _sequence_parallel(run: Run) -> list[Change]:
    if run.layout.tp == 1 or run.layout.sequence_parallel:
        return []
    return [Change("sequence-parallel", (("--sequence-parallel", ""),), "sequence parallelism: "
                   "norms and dropouts split over the tp ranks (Korthikanti et al. 2022, §4.2.2)",
                   layout=(("sequence_parallel", True),))]


def _optimizer_8bit(run: Run) -> list[Change]:
    if run.adapter is None or run.training.optimizer not in ("adam", "adamw"):
        return []
    return [Change("optimizer", (("--optimizer", "adam-8bit"),), "8-bit Adam states for the "
                   "adapter (Dettmers et al. 2022)", training=(("optimizer", "adam-8bit"),))]


def _adapter_recipe(run: Run) -> list[Change]:
    if run.adapter is None or run.training.recipe == "bf16":
        return []
    return [Change("adapter-recipe", (("--recipe", "bf16"),), "the adapter's weights, gradients "
                   "and states in bf16", training=(("recipe", "bf16"),))]


def _quantized_base(run: Run) -> list[Change]:
    if run.adapter is None or run.adapter.quantized:
        return []
    return [Change("qlora", (("--finetune", "qlora"),), "the frozen base in 4-bit NF4 (QLoRA)",
                   adapter=(("method", "qlora"),))]


#: Every lever, in the order the ranking falls back on (module docstring); one entry adds one.
#:
#: :meta hide-value:
LEVERS: tuple[Lever, ...] = (
    Lever("kernels", True, _kernels),
    Lever("mlp-kernel", True, _mlp_kernel),
    Lever("sequence-parallel", True, _sequence_parallel),
    Lever("recompute", True, recompute_settings),
    Lever("zero", True, _zero),
    Lever("offload", True, _offload),
    Lever("dp", True, _dp),
    Lever("tp", True, _tp),
    Lever("cp", True, _cp),
    Lever("pp", True, _pp),
    Lever("micro-batch", True, _smaller),
    Lever("seq", False, _shorter),
    Lever("optimizer", False, _optimizer_8bit),
    Lever("adapter-recipe", False, _adapter_recipe),
    Lever("qlora", False, _quantized_base),
)
