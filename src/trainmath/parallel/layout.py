"""The layout of a run over GPUs, dp × tp × pp × cp (ep, v), the batch it splits, and the
rules a layout must keep with a model, each written once.

A layout places ``dp · tp · pp · cp`` GPUs on a grid (Megatron-LM's order; Narayanan et al.
2021, *Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM*, §2).
These names, with ``v`` for the model chunks per pipeline device and ``ep`` for expert
parallelism, are the library's one vocabulary for parallel sizes; the papers write t for tp
and p for pp.

- **tensor parallel** (``tp``, Shoeybi et al. 2019, *Megatron-LM*, §3): each layer's weight
  matrices are split tp ways, so heads, key-value heads and the MLP width must divide by tp.
- **pipeline parallel** (``pp``, Narayanan et al. 2021, §2.2): the layers split into pp stages,
  with v chunks each when interleaved (§2.2.2); evenly when they divide, else as
  :func:`stage_split` trims them, or as an explicit per-chunk list (``stages``: Meta's Llama 3
  405B runs 126 layers over 16 stages with one fewer on the first and the last, Dubey et al.
  2024 §3.3.2; torchtitan and Megatron-Core take such lists).
- **context parallel** (``cp``, Megatron-Core; Liu et al. 2023, *Ring Attention*): every
  activation split along the sequence, in 2·cp chunks to balance causal attention.
- **data parallel** (``dp``), with ZeRO over the **dp · cp** ranks that hold the same weights
  (Megatron-Core's ``intra_dp_cp_group``).
- **expert parallel** (``ep``, a mixture of experts only; Lepikhin et al. 2021, *GShard*;
  Megatron-Core MoE): routed experts split ep ways, each expert split ``etp`` ways (expert
  tensor parallelism, tp unless given), on a grid of their own, etp × ep × edp × pp, folded
  over the dense one (Megatron-Core's *MoE parallel folding*, ``initialize_model_parallel`` in
  ``megatron/core/parallel_state.py``): the GPUs must divide by etp·ep·pp as they divide by
  tp·cp·pp, so ep·etp divides dp·cp·tp, not necessarily dp; the expert data-parallel size
  edp = dp·cp·tp/(etp·ep) is what the experts' ZeRO states are sharded over.

:func:`layout_problems` lists every rule a layout breaks for a model (each a
:class:`~trainmath.problems.Problem` naming its fields); :func:`validate` raises them at once;
the run and the planner use the same rules. :class:`Batch` is the sequence length, the
micro-batch and the global batch; :func:`microbatches` is Megatron-LM's m.

>>> from trainmath.model.presets import preset
>>> [p.message for p in layout_problems(preset("llama-3-8b"), Layout(tp=3))][:1]
['heads 32 is not divisible by tp 3']
"""

from __future__ import annotations

from functools import lru_cache
from dataclasses import dataclass

from ..model.shape import ModelShape
from ..problems import Problem, check
from ..units import positive_int
from .schedules import SCHEDULES, TWO_WAY, V_SCHEDULES, schedule_problems

#: How context parallelism splits attention, by the name the command takes: ``ring`` passes
#: K and V around the cp ranks (Liu et al. 2023, *Ring Attention*; Megatron-Core's "p2p");
#: ``ulysses`` moves Q, K, V and the output with all-to-alls so each rank runs attention over
#: the whole sequence for heads/cp heads (Jacobs et al. 2023, *DeepSpeed Ulysses*);
#: ``hybrid`` is both (Fang and Zhao 2024, USP; yunchang's ``set_seq_parallel_pg``): Ulysses
#: over the largest degree that divides cp and the heads, ring over the rest.
CP_KINDS = {
    "ring": "ring attention: K and V passed around the cp ranks",
    "ulysses": "DeepSpeed-Ulysses: all-to-alls split the heads over the cp ranks",
    "hybrid": "USP: Ulysses over the heads a degree can split, ring over the rest",
}


@dataclass(frozen=True)
class Batch:
    """Sequence length s (None: activations are not counted), micro-batch b, sequences per step."""

    seq_len: int | None = None
    micro_batch: int = 1
    #: sequences per optimizer step over all replicas; None: no micro-batch count, no bubble
    global_batch: int | None = None

    def __post_init__(self) -> None:
        if self.seq_len is not None:
            object.__setattr__(self, "seq_len", positive_int("seq_len (s)", self.seq_len))
        object.__setattr__(self, "micro_batch", positive_int("micro_batch (b)", self.micro_batch))
        if self.global_batch is not None:
            object.__setattr__(self, "global_batch",
                               positive_int("global_batch (sequences per step)", self.global_batch))


# -- layouts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A parallel layout: ``dp × tp × pp × cp`` GPUs, ``v`` model chunks per pipeline device.

    ``sequence_parallel`` is Korthikanti et al. 2022's sequence parallelism inside the tensor
    group (it changes activations and the shape of the TP traffic, not the weights). Every
    degree is checked to be a positive whole number when the layout is made.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    v: int = 1
    sequence_parallel: bool = False
    #: expert-parallel size: a mixture of experts' routed experts split over ep GPUs of the
    #: dp·cp·tp that share a pipeline stage (it adds no GPUs; :func:`expert_problems`)
    ep: int = 1
    #: layers of each model chunk in schedule order, pp·v entries (chunk c on pipeline device
    #: c mod pp); empty: :func:`stage_split`'s default
    stages: tuple = ()
    #: expert-tensor-parallel size: each routed expert split etp ways (Megatron-Core's
    #: ``--expert-tensor-parallel-size``); None: tp, as Megatron-Core defaults it
    etp: int | None = None
    #: the pipeline schedule, one of :data:`~trainmath.parallel.schedules.SCHEDULES`
    schedule: str = "1f1b"
    #: how context parallelism splits attention, one of :data:`CP_KINDS`
    cp_kind: str = "ring"

    def __post_init__(self) -> None:
        for name, what in (("dp", "data-parallel size"), ("tp", "tensor-parallel size"),
                           ("pp", "pipeline-parallel size"), ("cp", "context-parallel size"),
                           ("v", "model chunks per pipeline device"),
                           ("ep", "expert-parallel size")):
            object.__setattr__(self, name, positive_int(f"{name} ({what})", getattr(self, name)))
        if self.etp is not None:
            object.__setattr__(self, "etp", positive_int("etp (expert-tensor-parallel size)",
                                                         self.etp))
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r} is not one of {', '.join(SCHEDULES)}")
        if self.cp_kind not in CP_KINDS:
            raise ValueError(f"cp_kind {self.cp_kind!r} is not one of {', '.join(CP_KINDS)}")
        stages = tuple(self.stages)
        object.__setattr__(self, "stages", tuple(_layer_count(n) for n in stages))
        if stages and len(stages) != self.pp * self.v:
            raise ValueError(f"stages lists {len(stages)} chunks; accepted: pp × v = "
                             f"{self.pp} × {self.v} = {self.pp * self.v} layer counts")

    def chunk_layers(self, layers: int) -> tuple[int, ...]:
        """Layers of each of the pp·v model chunks: :attr:`stages`, or :func:`stage_split`'s."""
        return self.stages or stage_split(layers, self.pp, self.v)

    def device_layers(self, layers: int) -> tuple[int, ...]:
        """Layers on one device of each pipeline stage: its v chunks together."""
        return tuple(len(ix) for ix in self.device_layer_indices(layers))

    def device_layer_indices(self, layers: int) -> tuple[tuple[int, ...], ...]:
        """The layers (by index, 0 first) on one device of each pipeline stage: chunk c holds
        the c-th run of :meth:`chunk_layers`, and device i the chunks i, i + pp, i + 2pp, …
        (Narayanan et al. 2021, §2.2.1: interleaved stages); under a V schedule
        (:data:`~trainmath.parallel.schedules.V_SCHEDULES`) the chunks i and 2·pp − 1 − i, as
        PyTorch's ScheduleZBVZeroBubble and ScheduleDualPipeV place them; under DualPipe the
        stages i and pp − 1 − i (deepseek-ai/DualPipe, ``examples/example_dualpipe.py``), each
        device two stages' layers."""
        return _layer_indices(self.chunk_layers(layers), self.pp,
                              self.schedule in V_SCHEDULES or self.schedule in TWO_WAY)

    @property
    def last_device(self) -> int:
        """The pipeline device of the last chunk (the LM head and the loss): pp − 1, or 0 under
        a V schedule, whose last chunk comes back to the first device."""
        return 0 if self.schedule in V_SCHEDULES else self.pp - 1

    def holds_first(self, device: int) -> bool:
        """Whether pipeline device ``device`` holds the first stage (the embedding): device 0,
        and under DualPipe device pp − 1 too, which runs stage 0 for the micro-batches that
        enter there (deepseek-ai/DualPipe, ``examples/example_dualpipe.py``: rank r holds
        stages r and pp − 1 − r)."""
        return device == 0 or (self.schedule in TWO_WAY and device == self.pp - 1)

    def holds_last(self, device: int) -> bool:
        """Whether pipeline device ``device`` holds the last stage (the LM head and the loss):
        :attr:`last_device`, and under DualPipe device 0 too."""
        return device == self.last_device or (self.schedule in TWO_WAY and device == 0)

    @property
    def gpus(self) -> int:
        """GPUs the layout needs: dp · tp · pp · cp."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def zero_group(self) -> int:
        """Ranks that share (and shard) the same weights: dp · cp."""
        return self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """The expert-tensor-parallel size: :attr:`etp`, or tp when not given."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_zero_group(self) -> int:
        """The expert data-parallel size edp: ranks that hold the same experts and shard their
        states, dp·cp·tp / (etp·ep) (Megatron-Core's ``expert_data_parallel_size`` = world /
        (etp·ep·pp)); valid once :func:`fold_problems` finds nothing."""
        return self.dp * self.cp * self.tp // (self.expert_tp * self.ep)

    def describe(self) -> str:
        """``"dp 16 × tp 8 × pp 4 × cp 1 = 512 GPUs"`` (plus SP and interleaving when on)."""
        gpus = f"{self.gpus} GPU" + ("s" if self.gpus > 1 else "")
        text = f"dp {self.dp} × tp {self.tp} × pp {self.pp} × cp {self.cp} = {gpus}"
        if self.sequence_parallel:
            text += ", sequence parallel"
        if self.v > 1:
            text += f", {self.v} chunks per pipeline device"
        if self.ep > 1 or self.expert_tp != self.tp:
            text += f", experts ep {self.ep} × etp {self.expert_tp}"
            if not fold_problems(self):
                text += f" × edp {self.expert_zero_group}"
        if self.stages:
            text += ", stages of " + describe_stages(self.stages) + " layers"
        if self.schedule != "1f1b":
            text += f", schedule {self.schedule}"
        if self.cp > 1 and self.cp_kind != "ring":
            text += f", cp {self.cp_kind}"
        return text


def _layer_count(n: object) -> int:
    """A chunk's layers: a whole number ≥ 0 (a chunk may hold only the embedding or the head)."""
    if n == 0 and not isinstance(n, bool):
        return 0
    return positive_int("stage layers", n)


@lru_cache(maxsize=4096)
def _layer_indices(chunks: tuple[int, ...], pp: int, vee: bool = False
                   ) -> tuple[tuple[int, ...], ...]:
    starts = [sum(chunks[:c]) for c in range(len(chunks))]
    n = len(chunks)
    held = [((i, n - 1 - i) if vee else tuple(range(i, n, pp))) for i in range(pp)]
    return tuple(tuple(j for c in held[i] for j in range(starts[c], starts[c] + chunks[c]))
                 for i in range(pp))


def stage_split(layers: int, pp: int, v: int = 1) -> tuple[int, ...]:
    """Layers of each of the pp·v model chunks: L/(pp·v) each when that is whole, else ⌈L/(pp·v)⌉
    with one taken off the first chunk, then the last, then the second, the second-to-last …
    until they add up: the first stage also holds the embedding and the last the LM head and
    loss, which is why Meta trims those (Dubey et al. 2024, §3.3.2: Llama 3 405B, 126 layers on
    16 stages, 7, 8 × 14, 7; with one layer a chunk, v = 8, the first chunk holds only the
    embedding and the last only the LM head, as the paper says).

    >>> stage_split(126, 16)
    (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
    """
    n = pp * v
    base = -(-layers // n)
    split = [base] * n
    order = [i for pair in zip(range(n), range(n - 1, -1, -1)) for i in pair]
    for i in order[: base * n - layers]:
        split[i] -= 1
    return tuple(split)


def describe_stages(stages: tuple[int, ...]) -> str:
    """``"7, 8 × 14, 7"``: a per-chunk list with runs written as repeats."""
    parts: list[str] = []
    i = 0
    while i < len(stages):
        j = i
        while j < len(stages) and stages[j] == stages[i]:
            j += 1
        parts.append(f"{stages[i]} × {j - i}" if j - i > 2 else ", ".join([str(stages[i])] * (j - i)))
        i = j
    return ", ".join(parts)


def parse_stages(text: str) -> tuple[int, ...]:
    """``"7/8*14/7"`` (or commas for slashes) as a per-chunk list of layers; ``N*K`` repeats N
    K times. A ValueError names the part that is not a layer count."""
    out: list[int] = []
    for part in (p.strip() for p in text.replace(",", "/").split("/")):
        count, star, times = part.partition("*")
        try:
            n, k = int(count), (int(times) if star else 1)
        except ValueError:
            raise ValueError(f"stage layers {part!r} is not a whole number or N*K; accepted: "
                             "e.g. 7/8*14/7 (7, then 8 fourteen times, then 7)") from None
        out += [_layer_count(n)] * positive_int("stage repeat", k)
    return tuple(out)


def layout(
    dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1, *, v: int = 1,
    sequence_parallel: bool = False, ep: int = 1, stages: tuple[int, ...] = (),
    etp: int | None = None, schedule: str = "1f1b", cp_kind: str = "ring",
) -> Layout:
    """A :class:`Layout` with every degree checked to be a positive whole number.

    >>> layout(dp=16, tp=8, pp=4).gpus
    512
    """
    return Layout(dp=dp, tp=tp, pp=pp, cp=cp, v=v, sequence_parallel=sequence_parallel, ep=ep,
                  stages=stages, etp=etp, schedule=schedule, cp_kind=cp_kind)


def microbatches(global_batch: int, dp: int, micro_batch: int) -> int:
    """m, the micro-batches each pipeline runs per step: B / (dp · b), which must be whole.

    Megatron-LM's count (its README: global batch size / (data-parallel size × micro-batch
    size)), the m of Narayanan et al. 2021.

    >>> microbatches(512, dp=16, micro_batch=1)
    32
    """
    B = positive_int("global_batch (sequences per step)", global_batch)
    d = positive_int("dp", dp)
    b = positive_int("micro_batch (b)", micro_batch)
    check(batch_problems(B, d, b))
    return _microbatches(B, d, b)


def _microbatches(global_batch: int, dp: int, micro_batch: int) -> int:
    """:func:`microbatches` on checked inputs."""
    return global_batch // (dp * micro_batch)


# -- the rules a layout keeps with a model and a batch, each written once ------------------------
def tensor_split_problems(model: ModelShape, tp: int) -> list[Problem]:
    """Heads, key-value heads and the MLP width must divide by tp: Megatron splits heads and
    query groups whole, and the MLP by columns (Shoeybi et al. 2019, §3)."""
    return [Problem((name, "tp"), f"{name} {value} is not divisible by tp {tp}")
            for name, value in (("heads", model.heads), ("kv_heads", model.kv_heads),
                                ("ffn", model.ffn)) if value % tp]


def pipeline_split_problems(model: ModelShape, pp: int, v: int = 1,
                            stages: tuple[int, ...] = ()) -> list[Problem]:
    """Every pipeline device needs a layer: L ≥ pp; interleaved, every chunk holds a layer,
    except that the first may hold only the embedding and the last only the LM head (Dubey et
    al. 2024 §3.3.2), so pp·v ≤ L + 2; an explicit split must add up to L; and interleaving
    needs pp ≥ 2 (Narayanan et al. 2021, §2.2.2). Layers that do not divide by pp·v are split
    by :func:`stage_split`, not refused."""
    problems = []
    if stages and sum(stages) != model.layers:
        problems.append(Problem(("stages", "layers"), f"stages {describe_stages(stages)} add up "
                                f"to {sum(stages)} layers; accepted: {model.layers}, the layers "
                                f"of {model.name}"))
    elif stages and not all(sum(stages[i::pp]) for i in range(pp)):
        problems.append(Problem(("stages", "pp"), f"stages {describe_stages(stages)} leave a "
                                "pipeline device without a layer; accepted: at least one layer "
                                "on each of the pp devices"))
    elif not stages and model.layers < pp:
        problems.append(Problem(("layers", "pp"), f"layers {model.layers} cannot fill pp {pp} "
                                f"stages; accepted: pp at most {model.layers}"))
    elif not stages and v > 1 and pp * v > model.layers + 2:
        problems.append(Problem(("layers", "pp", "v"), f"layers {model.layers} cannot fill pp × v "
                                f"= {pp} × {v} = {pp * v} model chunks; accepted: pp × v at most "
                                f"{model.layers + 2} (a chunk for each layer, and one each for "
                                "the embedding and the LM head)"))
    if v > 1 and pp < 2:
        problems.append(Problem(("v", "pp"), f"interleaving (v = {v}) needs pp ≥ 2, got pp {pp}"))
    return problems


def ulysses_degree(model: ModelShape, lay: Layout) -> int:
    """The degree Ulysses splits the heads over: cp under ``ulysses``, 1 under ``ring``, and
    under ``hybrid`` the largest divisor u of cp that divides both heads/tp and kv_heads/tp,
    so no KV head is replicated (yunchang's ``sp_ulysses_degree``; its README: Ulysses "cannot
    exceed the number of heads", hence GQA's KV heads bound it); the rest, cp/u, is the
    ring's."""
    if lay.cp_kind == "ring" or lay.cp == 1:
        return 1
    if lay.cp_kind == "ulysses":
        return lay.cp
    return _hybrid_degree(model.heads // lay.tp, max(model.kv_heads // lay.tp, 1), lay.cp)


@lru_cache(maxsize=1024)
def _hybrid_degree(heads: int, kv: int, cp: int) -> int:
    return max(u for u in range(1, cp + 1) if cp % u == 0 and heads % u == 0 and kv % u == 0)


def _head_split_problems(model: ModelShape, tp: int, u: int) -> list[Problem]:
    heads, kv = model.heads // tp, max(model.kv_heads // tp, 1)
    problems = []
    if heads % u:
        problems.append(Problem(("cp", "cp_kind", "heads", "tp"), f"Ulysses context parallelism splits each "
                                f"tensor-parallel rank's heads over cp: heads / tp = "
                                f"{model.heads} / {tp} = {heads} is not divisible by cp {u} "
                                "(whole heads, as many on every GPU, as trainmath counts them; "
                                "DeepSpeed's uneven_heads_all2all would give some GPUs more); "
                                "accepted: cp a divisor of "
                                f"{heads}, or --cp-kind ring or hybrid"))
    elif kv % u and u % kv:
        problems.append(Problem(("cp", "cp_kind", "kv_heads", "tp"), f"Ulysses context parallelism splits "
                                f"or replicates the key-value heads: kv_heads / tp = "
                                f"{model.kv_heads} / {tp} = {kv} and cp {u} divide neither one "
                                "the other (DeepSpeed's UlyssesSPAttentionHF: the KV head count "
                                "must divide by the SP size or vice versa); accepted: cp a "
                                f"divisor or a multiple of {kv}, or --cp-kind ring or hybrid"))
    return problems


def context_split_problems(model: ModelShape, lay: Layout) -> list[Problem]:
    """Ulysses runs each rank's attention over the whole sequence for a cp-th of the heads, so
    the heads on each tensor-parallel rank, heads/tp, must divide by cp (DeepSpeed's
    ``DistributedAttention`` and ``UlyssesSPAttentionHF`` raise otherwise; yunchang's
    all-to-all reshapes by ``hc // seq_world_size``), and the key-value heads, kv_heads/tp,
    must divide by cp or cp by them (DeepSpeed's ``UlyssesSPAttentionHF`` then replicates each
    KV head cp/(kv_heads/tp) times). Ring attention splits the sequence only, and the
    hybrid picks a Ulysses degree that divides (:func:`ulysses_degree`), so they have no such
    rule.

    >>> from trainmath.model.presets import preset
    >>> [p.message.split(" (")[0] for p in context_split_problems(
    ...     preset("llama-3-8b"), Layout(cp=3, cp_kind="ulysses"))]
    ["Ulysses context parallelism splits each tensor-parallel rank's heads over cp: heads / tp = 32 / 1 = 32 is not divisible by cp 3"]
    """
    if lay.cp_kind != "ulysses" or lay.cp == 1:
        return []
    return _head_split_problems(model, lay.tp, lay.cp)


def fold_problems(lay: Layout) -> list[Problem]:
    """The experts' grid etp × ep × edp × pp must fill the GPUs as the dense one tp × cp × dp ×
    pp does: Megatron-Core's ``initialize_model_parallel`` raises unless the world size divides
    by etp·ep·pp (``megatron/core/parallel_state.py``, core_v0.15.0), so etp·ep must divide
    dp·cp·tp. ep need not divide dp: it folds over dp and cp (and tp, when etp is smaller)."""
    group, ranks = lay.expert_tp * lay.ep, lay.dp * lay.cp * lay.tp
    if ranks % group:
        fields = ("ep",) if lay.etp is None else ("ep", "etp")
        return [Problem((*fields, "dp", "cp", "tp"), f"etp × ep = {lay.expert_tp} × {lay.ep} = "
                        f"{group} does not divide the dp × cp × tp = {lay.dp} × {lay.cp} × "
                        f"{lay.tp} = {ranks} GPUs of a pipeline stage (Megatron-Core folds the "
                        "experts' etp × ep × edp grid over them); accepted: etp × ep a divisor "
                        f"of {ranks}")]
    return []


def expert_problems(model: ModelShape, lay: Layout) -> list[Problem]:
    """What expert parallelism cannot split: ep or etp with a dense model, experts that ep does
    not divide, an expert width that etp does not divide, and an experts' grid that does not
    fold over the GPUs (:func:`fold_problems`; Megatron-Core MoE)."""
    problems = []
    if not model.moe:
        if lay.ep > 1:
            problems.append(Problem(("ep",), f"ep {lay.ep} needs a mixture of experts, and "
                                    f"{model.name} is dense (accepted: ep 1)"))
        if lay.expert_tp != lay.tp:
            problems.append(Problem(("etp",), f"etp {lay.etp} needs a mixture of experts, and "
                                    f"{model.name} is dense (accepted: no etp)"))
        return problems
    if model.experts % lay.ep:
        problems.append(Problem(("experts", "ep"),
                                f"experts {model.experts} is not divisible by ep {lay.ep}"))
    etp = lay.expert_tp
    if model.expert_width % etp:
        name = "tp" if lay.etp is None else "etp"
        problems.append(Problem(("expert_ffn", name), f"expert ffn {model.expert_width} is "
                                f"not divisible by {name} {etp}"))
    return problems + fold_problems(lay)


def batch_problems(global_batch: int, dp: int, micro_batch: int) -> list[Problem]:
    """The global batch must split into whole micro-batches over the dp replicas: a multiple of
    dp · b (Megatron-LM's m = B / (dp · b))."""
    if global_batch % (dp * micro_batch):
        return [Problem(("global_batch", "dp", "micro_batch"),
                        f"global batch {global_batch} is not divisible by dp × micro-batch = "
                        f"{dp} × {micro_batch} = {dp * micro_batch}")]
    return []


def sequence_problems(seq_len: int, lay: Layout) -> list[Problem]:
    """With cp > 1 the sequence must divide by 2·cp (Megatron-Core and Transformer Engine split it
    into 2·cp chunks to balance causal attention); with sequence parallelism, by tp·cp."""
    problems = []
    if lay.cp > 1 and seq_len % (2 * lay.cp):
        problems.append(Problem(("seq_len", "cp"),
                                f"seq_len {seq_len} is not divisible by 2 × cp = {2 * lay.cp}"))
    if lay.sequence_parallel and seq_len % (lay.tp * lay.cp):
        problems.append(Problem(("seq_len", "tp", "cp"), f"seq_len {seq_len} is not divisible by "
                                f"tp × cp = {lay.tp} × {lay.cp} = {lay.tp * lay.cp}"))
    return problems


#: The most GPUs of a published training run: Llama 3 405B on up to 16K H100s (Dubey et al.
#: 2024, §3.3). :func:`cluster_problems` warns a hundred times beyond it.
LARGEST_TRAINING_GPUS = 16_384
#: How far past the largest published run a GPU count may go before it is called implausible.
IMPLAUSIBLE_GPU_FACTOR = 100


def cluster_problems(gpus: int, fields: tuple[str, ...] = ("gpus", "dp", "tp", "pp", "cp")
                     ) -> list[Problem]:
    """A run on a hundred times more GPUs than any published one (:data:`LARGEST_TRAINING_GPUS`)
    is computed, with this warning: more likely a typo (dp 10^9) than a cluster.

    >>> cluster_problems(16_384), len(cluster_problems(10**9))
    ([], 1)
    """
    limit = IMPLAUSIBLE_GPU_FACTOR * LARGEST_TRAINING_GPUS
    if gpus > limit:
        return [Problem(fields, f"{gpus:,} GPUs is over a hundred times the largest published "
                        f"training run ({LARGEST_TRAINING_GPUS:,}, Llama 3 405B): check the "
                        "count")]
    return []


def gpus_problems(gpus: int, lay: Layout) -> list[Problem]:
    """A GPU count given beside a layout must be dp · tp · pp · cp."""
    g = positive_int("gpus", gpus)
    if g != lay.gpus:
        return [Problem(("gpus", "dp", "tp", "pp", "cp"), f"gpus {g} ≠ dp × tp × pp × cp = "
                        f"{lay.dp} × {lay.tp} × {lay.pp} × {lay.cp} = {lay.gpus}")]
    return []


def layout_problems(
    model: ModelShape,
    lay: Layout,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    micro_batch: int | None = None,
    seq_len: int | None = None,
) -> list[Problem]:
    """Every rule ``lay`` breaks for ``model`` (and the batch, sequence and GPU count when
    given), under one heading that names the layout: :func:`tensor_split_problems`,
    :func:`expert_problems`, :func:`pipeline_split_problems`, :func:`context_split_problems`,
    GPUs = dp·tp·pp·cp, :func:`batch_problems`, the schedule's
    (:func:`~trainmath.parallel.schedules.schedule_problems`), :func:`sequence_problems`."""
    problems = [*tensor_split_problems(model, lay.tp), *expert_problems(model, lay),
                *pipeline_split_problems(model, lay.pp, lay.v, lay.stages),
                *context_split_problems(model, lay)]
    if gpus is not None:
        problems += gpus_problems(gpus, lay)
    m = None
    if global_batch is not None or micro_batch is not None:
        if global_batch is None or micro_batch is None:
            raise ValueError("give both global_batch and micro_batch, or neither")
        batch = batch_problems(positive_int("global_batch (sequences per step)", global_batch),
                               lay.dp, positive_int("micro_batch (b)", micro_batch))
        problems += batch
        if not batch:
            m = _microbatches(global_batch, lay.dp, micro_batch)
    problems += schedule_problems(lay.schedule, lay.pp, lay.v, m)
    if seq_len is not None:
        problems += sequence_problems(positive_int("seq_len (s)", seq_len), lay)
    heading = f"invalid layout ({lay.describe()}) for {model.name}"
    return [p.under(heading) for p in problems]


def validate(
    model: ModelShape,
    lay: Layout,
    *,
    gpus: int | None = None,
    global_batch: int | None = None,
    micro_batch: int | None = None,
    seq_len: int | None = None,
) -> Layout:
    """``lay`` if it can run ``model``; else one :class:`~trainmath.problems.Invalid` (a
    ValueError) listing every rule of :func:`layout_problems` it breaks, each message naming
    the numbers."""
    check(layout_problems(model, lay, gpus=gpus, global_batch=global_batch,
                          micro_batch=micro_batch, seq_len=seq_len))
    return lay
