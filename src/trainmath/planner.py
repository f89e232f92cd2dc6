"""Plan a training run: every parallel layout that fits, ranked by predicted step time.

The reverse of :func:`trainmath.runs.estimate`: given a model, a GPU kind and count, a sequence
length and a global batch, :func:`plan` enumerates the layouts dp × tp × pp × cp (the *grid*),
and for each grid the *settings*: ZeRO stage (or FSDP, the ``fsdp2`` recipe), recomputation,
micro-batch size b and interleaving v. It keeps the valid ones whose step peak
(``estimate(run).peak``, :mod:`trainmath.peak`) fits the GPU's usable memory, and ranks them by
a predicted step time (:func:`step_time`):

- **compute**: the hardware FLOPs of the step (:func:`trainmath.compute.flops_per_token`,
  recomputation included) over ``achievable`` × the GPU's dense peak
  (:func:`trainmath.compute.peak_flops`); ``achievable`` is an assumption, stated in every
  output (:data:`ACHIEVABLE`);
- **pipeline bubble**: (pp-1)/(m·v) of the time of the micro-batches
  (:func:`trainmath.parallelism.bubble_fraction`; Narayanan et al. 2021, §2.2);
- **communication**: the bytes each device sends per step
  (:func:`trainmath.parallelism.communication`: tensor-parallel all-reduces, data-parallel
  reduce-scatters and all-gathers by ZeRO stage, ZeRO-3's gathers, pipeline point-to-point,
  context-parallel K/V rings; ring factors from :mod:`trainmath.collectives`) over the link they
  travel on: NVLink inside a node, the network across nodes (:data:`INTERCONNECTS`, from each
  GPU's DGX/HGX system), in Megatron-Core's rank order (tp innermost, then cp, dp, pp);
- **overlap**: each kind of traffic hides under the compute by its share in :class:`Overlap`
  (defaults: data-parallel and context-parallel traffic overlapped, tensor- and
  pipeline-parallel traffic exposed); what does not hide adds to the step.

Within a grid the settings are timed first (arithmetic only), then checked for memory in order
of time, fastest first, until one fits: that one represents the grid in the ranking. A setting
that needs at least as much memory as one that did not fit (same v, a larger b, a lower ZeRO
stage, less recomputation) is dropped without an estimate, and a setting slower than the grid's
winner is dropped as slower; every candidate carries the reason it was kept or dropped
(:meth:`Plan.to_dict`). Settings are pruned by rules that hold in this model: with pp > 1 a
larger micro-batch only lengthens the bubble, and it changes nothing with ZeRO-0 or 1 at pp = 1,
so b > 1 is considered only for ZeRO-2 and 3 at pp = 1, whose traffic falls as m does;
ZeRO-2 and 3 are not combined with pipelines (DeepSpeed refuses them); selective recomputation
is skipped with FlashAttention, where it saves nothing (Korthikanti et al. 2022, §5, drop only
the s×s tensors that FlashAttention never stores). Sequence parallelism is on whenever tp > 1
(Korthikanti et al. 2022, §4.2.2: less memory, the same volume in the paper's count).

Mixture of experts: an expert-parallel degree slots in through :func:`ep_candidates` (1 for a
dense model, the only kind :class:`~trainmath.models.ModelShape` describes today).

>>> p = plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64)
>>> best = p.best
>>> best.layout.describe(), best.zero_stage, best.fits
('dp 8 × tp 1 × pp 1 × cp 1 = 8 GPUs', 3, True)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache

from .compute import GPUS, TERA, flops_per_token, gpu as accelerator
from .memory import recipe as _recipe
from .models import ModelShape, preset
from .parallelism import Layout, _bubble, communication
from .runs import Batch, Gpu, Run, Training, estimate
from .units import GB, Bytes, choice, positive_int

#: The default share of a GPU's dense peak that the step's matrix multiplications sustain: an
#: assumption, not a measurement. The largest runs of Korthikanti et al. 2022 (Table 5) reach
#: 57% HFU with the bubble and all communication included; 0.6 leaves those out.
ACHIEVABLE = 0.6


@dataclass(frozen=True)
class Interconnect:
    """How one GPU of a kind talks to the others: GPUs per node, and bytes per second each way
    over NVLink (inside a node) and over the network (to other nodes), per GPU."""

    gpu: str
    node_gpus: int
    #: bytes/s one GPU sends over NVLink (half the bidirectional figure NVIDIA prints)
    nvlink: float
    #: bytes/s one GPU sends to other nodes: its share of the node's network adapters
    network: float
    source: str


#: Per GPU kind (keys of :data:`trainmath.compute.GPUS`): the node that NVIDIA's DGX/HGX system
#: of that GPU builds, which the planner assumes unless told otherwise.
#:
#: :meta hide-value:
INTERCONNECTS: dict[str, Interconnect] = {
    i.gpu: i
    for i in (
        Interconnect("a100-sxm", 8, 300 * GB, 25 * GB,
                     "NVIDIA DGX A100 datasheet: 8 A100s, NVLink 600 GB/s per GPU (both directions "
                     "together), eight 200 Gb/s HDR InfiniBand adapters for the compute network "
                     "(one per GPU: 25 GB/s each way)"),
        Interconnect("h100-sxm", 8, 450 * GB, 50 * GB,
                     "NVIDIA DGX H100 datasheet: 8 H100 SXMs, fourth-generation NVLink 900 GB/s per "
                     "GPU (both directions), eight 400 Gb/s ConnectX-7 adapters (50 GB/s each way "
                     "per GPU); Dubey et al. 2024 §3.3.1: Llama 3's 400 Gbps per GPU"),
        Interconnect("h200", 8, 450 * GB, 50 * GB,
                     "NVIDIA DGX H200 datasheet: 8 H200s, NVLink 900 GB/s per GPU (both "
                     "directions), eight 400 Gb/s ConnectX-7 adapters"),
        Interconnect("b200", 8, 900 * GB, 50 * GB,
                     "NVIDIA DGX B200 datasheet: 8 B200s, fifth-generation NVLink 1.8 TB/s per GPU "
                     "(both directions), eight 400 Gb/s ConnectX-7 adapters"),
    )
}


def interconnect(key: str) -> Interconnect:
    """The default node and links for GPU kind ``key`` (one of :data:`INTERCONNECTS`)."""
    return INTERCONNECTS[choice("GPU", key, INTERCONNECTS)]


@dataclass(frozen=True)
class Overlap:
    """The share of each kind of traffic that hides under the step's compute (0 to 1).

    Defaults: Megatron-LM overlaps the data-parallel gradient reduce-scatter with the backward
    pass and the parameter all-gather with the forward (``--overlap-grad-reduce``,
    ``--overlap-param-gather``), and ring attention passes K and V while it computes (Liu et al.
    2023, §3): 1. Tensor-parallel all-reduces sit between a layer's matrix multiplications and
    pipeline sends between stages: 0. Overlapped traffic still costs the time by which it
    exceeds the compute it hides under.
    """

    dp: float = 1.0
    tp: float = 0.0
    pp: float = 0.0
    cp: float = 0.0

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"overlap {name} must be a fraction from 0 to 1, got {value!r}")


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds of one optimizer step, by what takes them.

    ``compute`` is the hardware FLOPs at the achievable rate; ``bubble`` the pipeline's idle
    time; ``tp``, ``cp``, ``pp`` and ``dp`` the part of each kind of traffic that the compute
    does not hide. ``recompute`` is the part of ``compute`` spent rerunning the forward.
    """

    compute: float
    recompute: float
    bubble: float
    tp: float
    cp: float
    pp: float
    dp: float

    @property
    def total(self) -> float:
        """Seconds per step: every part together."""
        return self.compute + self.bubble + self.tp + self.cp + self.pp + self.dp

    def overheads(self) -> dict[str, float]:
        """Seconds beyond the model's own FLOPs, by cause."""
        return {"recompute": self.recompute, "bubble": self.bubble, "tp comm": self.tp,
                "cp comm": self.cp, "pp comm": self.pp, "dp comm": self.dp}

    @property
    def limit(self) -> str:
        """What costs the most beyond the model's own FLOPs: ``"bubble 9%"``, or ``"compute"``."""
        name, seconds = max(self.overheads().items(), key=lambda kv: kv[1])
        if seconds <= 0.01 * self.total:
            return "compute"
        return f"{name} {seconds / self.total:.0%}"


def ep_candidates(model: ModelShape, gpus: int) -> tuple[int, ...]:
    """Expert-parallel degrees to try: (1,) for a dense model.

    The hook where a mixture-of-experts shape lists the divisors of its expert count; the
    planner multiplies the grid by each (none today).
    """
    return (1,)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _grids(n: int) -> list[tuple[int, int, int, int]]:
    """Every (dp, tp, pp, cp) with dp · tp · pp · cp = n (an ep degree divides n first)."""
    return [(n // (tp * cp * pp), tp, pp, cp) for tp in _divisors(n) for cp in _divisors(n // tp)
            for pp in _divisors(n // (tp * cp))]


@dataclass(frozen=True)
class Candidate:
    """One layout and setting the planner considered, and what became of it.

    ``status`` is ``"kept"`` (valid, fits, the fastest setting of its grid), or ``"dropped"``;
    ``reason`` says why in words. ``time`` is None for a layout that is not valid, ``peak``
    None when the memory was not estimated (the reason says what made that unnecessary).
    """

    layout: Layout
    zero_stage: int | None
    recompute: str | None
    micro_batch: int | None
    status: str
    reason: str
    time: StepTime | None = None
    peak: Bytes | None = None
    mfu: float | None = None
    tokens_per_second: float | None = None
    rank: int | None = None

    @property
    def grid(self) -> tuple[int, int, int, int]:
        """(dp, tp, pp, cp)."""
        lay = self.layout
        return lay.dp, lay.tp, lay.pp, lay.cp

    @property
    def fits(self) -> bool:
        """Whether it was kept: valid and within the usable memory."""
        return self.status == "kept"

    def describe(self) -> str:
        """``"dp 16 × tp 8 × pp 4 × cp 1, v 5, ZeRO-1, recompute none, b 1"``."""
        lay = self.layout
        text = f"dp {lay.dp} × tp {lay.tp} × pp {lay.pp} × cp {lay.cp}"
        if self.zero_stage is None:
            return text
        if lay.v > 1:
            text += f", v {lay.v}"
        return text + f", ZeRO-{self.zero_stage}, recompute {self.recompute}, b {self.micro_batch}"

    def to_dict(self) -> dict:
        """This candidate as the JSON of ``trainmath plan --json`` lists it."""
        lay, t = self.layout, self.time
        return {
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": 1, "v": lay.v,
            "sequence_parallel": lay.sequence_parallel, "zero": self.zero_stage,
            "recompute": self.recompute, "micro_batch": self.micro_batch,
            "status": self.status, "reason": self.reason, "rank": self.rank,
            "peak_bytes": None if self.peak is None else math.ceil(self.peak.n),
            "step_seconds": None if t is None else t.total,
            "time": None if t is None else {
                "compute": t.compute, "recompute": t.recompute, "bubble": t.bubble,
                "tp": t.tp, "cp": t.cp, "pp": t.pp, "dp": t.dp},
            "mfu": self.mfu, "tokens_per_second": self.tokens_per_second,
            "limit": None if t is None else t.limit,
        }


@dataclass(frozen=True)
class Plan:
    """What :func:`plan` found: the inputs, the ranking and every candidate considered."""

    model: ModelShape
    gpu: str
    gpus: int
    node_gpus: int
    seq_len: int
    global_batch: int
    training: Training
    memory: Bytes
    achievable: float
    nvlink: float
    network: float
    overlap: Overlap
    #: the fastest fitting setting of each grid, fastest first (rank 1 first)
    ranking: tuple[Candidate, ...]
    #: every candidate, in the order considered
    candidates: tuple[Candidate, ...]
    #: the layout given with ``layout=``, scored and placed in the ranking (None if not given)
    user: Candidate | None = None
    assumed: tuple[str, ...] = field(default=())

    @property
    def best(self) -> Candidate:
        """The fastest layout that fits."""
        return self.ranking[0]

    @property
    def tokens_per_step(self) -> int:
        """Global batch × sequence length."""
        return self.global_batch * self.seq_len

    def rank_of(self, dp: int, tp: int, pp: int, cp: int = 1) -> int | None:
        """The rank (1 = fastest) of the grid dp × tp × pp × cp, or None if no setting fits."""
        for c in self.ranking:
            if c.grid == (dp, tp, pp, cp):
                return c.rank
        return None

    def explain(self, top: int = 10) -> list[str]:
        """For the best layout, why each other layout of the first ``top`` lost, one line each."""
        best = self.best
        lines = [f"best: {best.describe()}: {best.time.total:.2f} s per step, "
                 f"{best.peak.format('GB', 1)} peak, limited by {best.time.limit}"]
        b = best.time
        for c in self.ranking[1:top]:
            t = c.time
            diffs = {
                "compute (recomputation)": t.compute - b.compute, "bubble": t.bubble - b.bubble,
                "tp comm": t.tp - b.tp, "cp comm": t.cp - b.cp, "pp comm": t.pp - b.pp,
                "dp comm": t.dp - b.dp,
            }
            worst = sorted(((v, k) for k, v in diffs.items() if v > 0), reverse=True)[:2]
            why = " and ".join(f"{k} +{v:.2f} s" for v, k in worst) or "equal time, more memory"
            lines.append(f"#{c.rank} {c.describe()}: {t.total - b.total:+.2f} s per step: {why}")
        return lines

    def to_dict(self) -> dict:
        """The plan as ``trainmath plan --json`` prints it: inputs, ranking, every candidate."""
        return {
            "inputs": {
                "model": self.model.name, "gpu": self.gpu, "gpus": self.gpus,
                "node_gpus": self.node_gpus, "seq_len": self.seq_len,
                "global_batch": self.global_batch, "recipe": self.training.recipe,
                "implementation": self.training.implementation,
                "optimizer": self.training.optimizer,
                "usable_memory_bytes": math.ceil(self.memory.n),
                "achievable": self.achievable, "nvlink_bytes_per_s": self.nvlink,
                "network_bytes_per_s": self.network,
                "overlap": {"dp": self.overlap.dp, "tp": self.overlap.tp,
                            "pp": self.overlap.pp, "cp": self.overlap.cp},
            },
            "ranking": [c.to_dict() for c in self.ranking],
            "user_layout": None if self.user is None else self.user.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
        }

    def to_json(self) -> str:
        """:meth:`to_dict`, indented by two spaces."""
        return json.dumps(self.to_dict(), indent=2)


# -- the search ----------------------------------------------------------------------------------
_RECOMPUTE_MEMORY = {"none": 0, "selective": 1, "full": 2}  # more recomputation, less memory


def _grid_problems(model: ModelShape, dp: int, tp: int, pp: int, cp: int, s: int, B: int,
                   node: int, tp_across: bool, cp_across: bool, attention: str) -> list[str]:
    """Why the grid cannot run the model, in words (an empty list when it can)."""
    problems = []
    for name, value in (("heads", model.heads), ("kv_heads", model.kv_heads), ("ffn", model.ffn)):
        if value % tp:
            problems.append(f"{name} {value} is not divisible by tp {tp}")
    if model.layers % pp:
        problems.append(f"layers {model.layers} is not divisible by pp {pp}")
    if B % dp:
        problems.append(f"global batch {B} is not divisible by dp {dp}")
    if cp > 1:
        if attention != "flash":
            problems.append("context parallelism needs flash attention")
        if s % (2 * cp):
            problems.append(f"seq_len {s} is not divisible by 2 × cp = {2 * cp}")
    if tp > 1 and s % (tp * cp):
        problems.append(f"seq_len {s} is not divisible by tp × cp = {tp * cp} (sequence parallel)")
    if not tp_across and tp > node:
        problems.append(f"tp {tp} spans nodes of {node} GPUs")
    if not cp_across and tp * cp > node:
        problems.append(f"tp × cp = {tp * cp} spans nodes of {node} GPUs")
    return problems


def _settings(model: ModelShape, lay: Layout, B: int, stages: tuple[int, ...], attention: str,
              max_v: int, fsdp: bool) -> tuple[list[tuple[int, int, str, int]], list[tuple[tuple, str]]]:
    """(v, zero, recompute, b) to time for one grid, and those pruned by rule with the rule."""
    dp, pp = lay.dp, lay.pp
    per_replica = B // dp
    vs = [1] if pp == 1 else [v for v in _divisors(model.layers // pp) if v <= max_v]
    zeros = [z for z in stages if pp == 1 or z <= 1]
    recomputes = ["none", "full"] if attention == "flash" else ["none", "selective", "full"]
    keep, pruned = [], []
    for v in vs:
        for z in (stages if pp == 1 else sorted(set(stages))):
            for rc in recomputes:
                if z not in zeros:
                    pruned.append(((v, z, rc, 1), "ZeRO-2 and 3 are not combined with pipeline "
                                                  "parallelism (DeepSpeed refuses them)"))
                    continue
                bs = [b for b in _divisors(per_replica) if b <= 16] if (pp == 1 and z >= 2) else [1]
                for b in bs:
                    keep.append((v, z, rc, b))
    if attention == "flash":
        pruned.append(((None, None, "selective", None), "selective recomputation saves nothing "
                                                       "with flash attention"))
    return keep, pruned


@lru_cache(maxsize=4096)
def _traffic(model: ModelShape, lay: Layout, s: int, b: int, B: int, z: int, recipe_name: str,
             rc: str) -> tuple[Bytes, Bytes, Bytes, Bytes]:
    r = _recipe(recipe_name)
    c = communication(model, lay, seq_len=s, micro_batch=b, global_batch=B, zero_stage=z,
                      precision=recipe_name, activation_bytes=r.compute,
                      grad_bytes=r.reduce_bytes or r.gradients, recompute=rc)
    return c.data_parallel, c.tensor_parallel, c.pipeline_parallel, c.context_parallel


def _exposed(seconds: float, overlap: float, window: float) -> float:
    """The part of ``seconds`` of traffic that the compute does not hide."""
    return seconds - min(overlap * seconds, window)


def step_time(model: ModelShape, lay: Layout, *, seq_len: int, global_batch: int,
              micro_batch: int, zero_stage: int, recompute: str, recipe: str, gpu: str,
              node_gpus: int, achievable: float, nvlink: float, network: float,
              overlap: Overlap) -> StepTime:
    """Predicted seconds per optimizer step of one layout (see the module docstring).

    compute = B·s × hardware FLOPs per token / (gpus × achievable × peak); the micro-batches'
    time (compute, exposed tensor-, context- and pipeline-parallel traffic) is stretched by the
    bubble (pp-1)/(m·v), and the exposed data-parallel traffic comes once per step. A group
    stays on NVLink while it fits in a node in Megatron-Core's rank order (tp, cp, dp, pp).
    """
    s, B, b = seq_len, global_batch, micro_batch
    peak = accelerator(gpu).peak("fp8" if recipe == "fp8" else "bf16").flops
    f = flops_per_token(model, s, recompute)
    rate = lay.gpus * achievable * peak
    compute = B * s * f.hardware / rate
    extra = B * s * (f.hardware - f.model) / rate
    dp_b, tp_b, pp_b, cp_b = _traffic(model, lay, s, b, B, zero_stage, recipe, recompute)

    def link(span: int) -> float:
        return nvlink if span <= node_gpus else network

    tp_t = _exposed(tp_b.n / link(lay.tp), overlap.tp, compute)
    cp_t = _exposed(cp_b.n / link(lay.tp * lay.cp), overlap.cp, compute)
    pp_t = _exposed(pp_b.n / link(lay.gpus), overlap.pp, compute)
    dp_t = _exposed(dp_b.n / link(lay.tp * lay.cp * lay.dp), overlap.dp, compute)
    m = B // (lay.dp * b)
    bubble = float(_bubble(lay.pp, m, lay.v)) * (compute + tp_t + cp_t + pp_t)
    return StepTime(compute, extra, bubble, float(tp_t), float(cp_t), float(pp_t), float(dp_t))


def _parse_layout(text: str) -> dict[str, int]:
    """``"dp=16,tp=8,pp=4"`` (also v, zero, recompute, b) as a dict of the given keys."""
    allowed = ("dp", "tp", "pp", "cp", "v", "zero", "b", "recompute")
    out: dict = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ValueError(f"layout part {part!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(allowed)}; e.g. dp=16,tp=8,pp=4")
        if key == "recompute":
            out[key] = value.strip()
        else:
            try:
                out[key] = positive_int(key, int(value)) if key != "zero" else int(value)
            except ValueError:
                raise ValueError(f"layout {key}={value!r}: accepted a positive whole number") from None
    return out


def plan(
    model: ModelShape | str,
    *,
    gpu: str,
    gpus: int,
    seq_len: int,
    global_batch: int,
    node_gpus: int | None = None,
    recipe: str | None = None,
    implementation: str | None = None,
    optimizer: str = "adamw",
    gpu_memory: Bytes | None = None,
    achievable: float = ACHIEVABLE,
    nvlink: float | None = None,
    network: float | None = None,
    overlap: Overlap = Overlap(),
    tp_across_nodes: bool = False,
    cp_across_nodes: bool = False,
    max_interleave: int = 8,
    layout: str | dict | None = None,
) -> Plan:
    """Every layout of ``gpus`` GPUs of kind ``gpu`` for ``model``, ranked (module docstring).

    ``node_gpus``, ``nvlink`` and ``network`` (bytes/s per GPU, each way) default to
    :data:`INTERCONNECTS`; ``achievable`` to :data:`ACHIEVABLE`; ``recipe`` and
    ``implementation`` to what the model is commonly trained with (:class:`~trainmath.runs.Run`).
    tp and tp × cp stay within a node unless ``tp_across_nodes`` / ``cp_across_nodes``.
    ``layout`` ("dp=16,tp=8,pp=4", optionally with v, zero, recompute, b) is scored and placed in
    the ranking as :attr:`Plan.user`. A ValueError says what would work when nothing does.
    """
    if isinstance(model, str):
        model = preset(model)
    if not isinstance(model, ModelShape):
        raise ValueError(f"plan needs a model shape (a ModelShape or a preset name), got {model!r}")
    gpu = choice("GPU", gpu, GPUS)
    n = positive_int("gpus", gpus)
    s = positive_int("seq_len (s)", seq_len)
    B = positive_int("global_batch (sequences per step)", global_batch)
    net = interconnect(gpu)
    node = net.node_gpus if node_gpus is None else positive_int("node_gpus", node_gpus)
    nvlink = net.nvlink if nvlink is None else _rate("nvlink", nvlink)
    network = net.network if network is None else _rate("network", network)
    if isinstance(achievable, bool) or not isinstance(achievable, (int, float)) \
            or not 0 < achievable <= 1:
        raise ValueError(f"achievable must be a fraction in (0, 1], got {achievable!r}")
    if not isinstance(overlap, Overlap):
        raise ValueError(f"overlap must be an Overlap, got {overlap!r}")
    max_v = positive_int("max_interleave", max_interleave)
    if model.max_positions and s > model.max_positions:
        raise ValueError(f"seq_len {s} is longer than the {model.max_positions} positions "
                         f"{model.name} was trained for; accepted: at most {model.max_positions}")
    device = Gpu(gpu_memory, gpu)
    # the training setup, resolved once (the Run fills what is None from the model's defaults)
    probe = Run(model, Training(recipe=recipe, implementation=implementation, optimizer=optimizer),
                gpu=device)
    t0 = probe.training
    r = _recipe(t0.recipe)
    fsdp = r.name == "fsdp2"
    stages = r.stages
    attention = t0.attention
    wanted = None if layout is None else (_parse_layout(layout) if isinstance(layout, str)
                                          else dict(layout))

    candidates: list[Candidate] = []
    winners: list[Candidate] = []
    grids = [g for ep in ep_candidates(model, n) for g in _grids(n // ep)]
    for dp, tp, pp, cp in grids:
        lay = Layout(dp, tp, pp, cp, 1, tp > 1)
        problems = _grid_problems(model, dp, tp, pp, cp, s, B, node, tp_across_nodes,
                                  cp_across_nodes, attention)
        if fsdp and pp > 1:
            problems.append("recipe fsdp2 with pp > 1 is not modelled")
        if problems:
            candidates.append(Candidate(lay, None, None, None, "dropped",
                                        "invalid: " + "; ".join(problems)))
            continue
        winner = _search_grid(model, lay, s, B, stages, attention, max_v, fsdp, t0, device, gpu,
                              node, achievable, nvlink, network, overlap, candidates)
        if winner is not None:
            winners.append(winner)
    winners.sort(key=_rank_key)
    ranking = tuple(replace(c, rank=i + 1) for i, c in enumerate(winners))
    ranked = {id(c): rc for c, rc in zip(winners, ranking)}
    candidates = [ranked.get(id(c), c) for c in candidates]
    user = None
    if wanted is not None:
        user = _score_user(model, wanted, s, B, stages, attention, fsdp, t0, device, gpu, node,
                           achievable, nvlink, network, overlap, n, ranking, tp_across_nodes,
                           cp_across_nodes)
    if not ranking:
        raise ValueError(_nothing_fits(model, n, s, B, gpu, device, candidates, node, attention))
    return Plan(model, gpu, n, node, s, B, t0, device.memory, float(achievable), float(nvlink),
                float(network), overlap, ranking, tuple(candidates), user, probe.assumed)


def _rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of bytes per second, got {value!r}")
    return float(value)


def _rank_key(c: Candidate):
    return (c.time.total, c.peak.n)


def _search_grid(model, lay, s, B, stages, attention, max_v, fsdp, t0, device, gpu, node,
                 achievable, nvlink, network, overlap, out: list[Candidate]) -> Candidate | None:
    """Time every setting of one grid, then check memory fastest first until one fits."""
    settings, pruned = _settings(model, lay, B, stages, attention, max_v, fsdp)
    for (v, z, rc, b), why in pruned:
        out.append(Candidate(replace(lay, v=v or 1), z, rc, b, "dropped", why))
    timed = []
    for v, z, rc, b in settings:
        lv = replace(lay, v=v)
        t = step_time(model, lv, seq_len=s, global_batch=B, micro_batch=b, zero_stage=z,
                      recompute=rc, recipe=t0.recipe, gpu=gpu, node_gpus=node,
                      achievable=achievable, nvlink=nvlink, network=network, overlap=overlap)
        # ties: less memory first (higher ZeRO stage, more recomputation, smaller b)
        timed.append((t.total, -z, -_RECOMPUTE_MEMORY[rc], b, v, lv, z, rc, t))
    timed.sort(key=lambda x: x[:5])
    failed: list[tuple[int, int, str, int]] = []
    winner = None
    for total, _, _, b, v, lv, z, rc, t in timed:
        if winner is not None:
            out.append(Candidate(lv, z, rc, b, "dropped",
                                 f"slower than {winner.describe()}, which fits", t))
            continue
        implied = next((f for f in failed if f[0] == v and z <= f[1]
                        and _RECOMPUTE_MEMORY[rc] <= _RECOMPUTE_MEMORY[f[2]] and b >= f[3]), None)
        if implied is not None:
            fv, fz, frc, fb = implied
            out.append(Candidate(lv, z, rc, b, "dropped",
                                 f"does not fit: needs at least the memory of ZeRO-{fz}, "
                                 f"recompute {frc}, b {fb}, which does not fit", t))
            continue
        e = _estimate(model, lv, s, b, B, z, rc, t0, device)
        peak = e.peak.bytes
        if peak > device.memory:
            failed.append((v, z, rc, b))
            out.append(Candidate(lv, z, rc, b, "dropped",
                                 f"does not fit: peak {peak.format('GB', 1)} > "
                                 f"{device.memory.format('GB', 1)} usable", t, peak))
            continue
        winner = _scored(model, lv, z, rc, b, t, peak, s, B, gpu, "kept",
                         "fits; the fastest setting of this layout")
        out.append(winner)
    return winner


def _scored(model, lay, z, rc, b, t, peak, s, B, gpu, status, reason) -> Candidate:
    f = flops_per_token(model, s)
    tps = B * s / t.total
    mfu = tps * f.model / (lay.gpus * accelerator(gpu).dense_16bit)
    return Candidate(lay, z, rc, b, status, reason, t, peak, mfu, tps)


@lru_cache(maxsize=8192)
def _estimate(model, lay, s, b, B, z, rc, t0, device):
    training = replace(t0, zero_stage=z, recompute=rc)
    return estimate(Run(model, training, lay, Batch(s, b, B), device))


def _score_user(model, wanted, s, B, stages, attention, fsdp, t0, device, gpu, node, achievable,
                nvlink, network, overlap, n, ranking, tp_across, cp_across) -> Candidate:
    """The user's layout, with its fastest fitting setting unless the setting is given."""
    dp, tp = wanted.get("dp", 1), wanted.get("tp", 1)
    pp, cp = wanted.get("pp", 1), wanted.get("cp", 1)
    lay = Layout(dp, tp, pp, cp, wanted.get("v", 1), tp > 1)
    if lay.gpus != n:
        raise ValueError(f"layout {lay.describe()} does not use the {n} GPUs planned for; "
                         f"accepted: dp × tp × pp × cp = {n}")
    problems = _grid_problems(model, dp, tp, pp, cp, s, B, node, tp_across, cp_across, attention)
    if problems:
        raise ValueError(f"layout {lay.describe()} cannot run {model.name}: " + "; ".join(problems))
    given = [k for k in ("v", "zero", "recompute", "b") if k in wanted]
    if not given:
        for c in ranking:
            if c.grid == (dp, tp, pp, cp):
                return replace(c, reason=f"your layout: rank {c.rank} of {len(ranking)}")
    zs = [wanted["zero"]] if "zero" in wanted else list(stages)
    rcs = [wanted["recompute"]] if "recompute" in wanted else ["none", "selective", "full"]
    bs = [wanted["b"]] if "b" in wanted else [1]
    vs = [lay.v] if "v" in wanted else [1]
    best = None
    for v in vs:
        for z in zs:
            for rc in rcs:
                for b in bs:
                    lv = replace(lay, v=v)
                    t = step_time(model, lv, seq_len=s, global_batch=B, micro_batch=b,
                                  zero_stage=z, recompute=rc, recipe=t0.recipe, gpu=gpu,
                                  node_gpus=node, achievable=achievable, nvlink=nvlink,
                                  network=network, overlap=overlap)
                    peak = _estimate(model, lv, s, b, B, z, rc, t0, device).peak.bytes
                    if best is None or (peak <= device.memory, -t.total) > best[0]:
                        best = ((peak <= device.memory, -t.total), lv, z, rc, b, t, peak)
    _, lv, z, rc, b, t, peak = best
    fits = peak <= device.memory
    place = 1 + sum(1 for c in ranking if c.time.total < t.total and c.grid != (dp, tp, pp, cp))
    reason = (f"your layout: fits, would rank {place} of {len(ranking)}" if fits else
              f"your layout: does not fit, peak {peak.format('GB', 1)} > "
              f"{device.memory.format('GB', 1)} usable")
    return _scored(model, lv, z, rc, b, t, peak, s, B, gpu, "kept" if fits else "dropped",
                   reason) if fits else Candidate(lv, z, rc, b, "dropped", reason, t, peak)


def _nothing_fits(model, n, s, B, gpu, device, candidates, node, attention) -> str:
    """The message when no layout is left: what would work."""
    valid = [c for c in candidates if not c.reason.startswith("invalid")]
    if not valid:
        def runnable(g: int) -> bool:
            return any(not _grid_problems(model, d, t, p, c, s, B, node, False, False, attention)
                       for d, t, p, c in _grids(g))
        below = next((g for g in range(n - 1, 0, -1) if runnable(g)), None)
        above = next((g for g in range(n + 1, 4 * n + 1) if runnable(g)), None)
        near = " or ".join(str(g) for g in (below, above) if g is not None)
        return (f"no layout of {n} GPUs can run {model.name} with global batch {B} and seq_len "
                f"{s}: every split breaks a rule (e.g. {candidates[0].reason[9:]}); a layout "
                f"needs dp to divide the batch, tp the heads ({model.heads}) and kv_heads "
                f"({model.kv_heads}), pp the layers ({model.layers}); accepted: "
                + (f"{near} GPUs" if near else "another GPU count or global batch"))
    smallest = min((c for c in valid if c.peak is not None), key=lambda c: c.peak.n, default=None)
    hint = "" if smallest is None else (f"; the smallest peak found is "
                                        f"{smallest.peak.format('GB', 1)} ({smallest.describe()})")
    return (f"no layout of {n} {gpu} GPUs fits {model.name} in {device.memory.format('GB', 1)} "
            f"per GPU at seq_len {s}{hint}; accepted: more GPUs, a shorter sequence, "
            "a GPU with more memory, or tp/cp across nodes")
