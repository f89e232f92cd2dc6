"""Plan a training run: every parallel layout that fits, ranked by predicted step time.

The reverse of :func:`trainmath.runs.estimates.estimate`: given a model, a GPU kind and count,
a sequence length and a global batch, :func:`plan` enumerates the layouts dp × tp × pp × cp
(the *grid*) with every expert split a mixture allows (ep folded over dp·cp·tp as Megatron-Core
folds it, etp = tp or 1: :func:`expert_candidates`), and for each grid the
*settings*: ZeRO stage (or FSDP, the ``fsdp2`` recipe), recomputation, micro-batch size b and
interleaving v. A grid that breaks a rule of :func:`trainmath.parallel.layout.layout_problems`
or of the run (:mod:`trainmath.runs.rules`) is dropped with that rule's words. The valid ones
are ranked by :func:`trainmath.time.step.step_time` (GEMMs, attention, memory-bound work,
exposed communication by mechanism, the pipeline's schedule) and kept if what nvidia-smi would
show for them (the step's peak, ``estimate(run).peak``, with the allocator's reserve and what
sits outside it: :func:`trainmath.memory.device.on_device`) fits the GPU's usable memory.

Within a grid the settings are timed first (arithmetic only), then checked for memory in order
of time, fastest first, until one fits: that one represents the grid in the ranking. A setting
that needs at least as much memory as one that did not fit (same v, a larger b, a lower ZeRO
stage, less recomputation) is dropped without an estimate, and a setting slower than the grid's
winner is dropped as slower; every candidate carries the reason it was kept or dropped. Settings
are pruned by rules that hold in this model: with pp > 1 a larger micro-batch only lengthens the
bubble, and it changes nothing with ZeRO-0 or 1 at pp = 1, so b > 1 is considered only for
ZeRO-2 and 3 at pp = 1, whose traffic falls as m does; ZeRO-2 and 3 are not combined with
pipelines (DeepSpeed refuses them); selective recomputation is skipped with FlashAttention,
where it saves nothing (Korthikanti et al. 2022, §5, drop only the s×s tensors that
FlashAttention never stores). Sequence parallelism is on whenever tp > 1 (Korthikanti et al.
2022, §4.2.2: less memory, the same volume in the paper's count).

>>> p = plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64)
>>> best = p.best
>>> best.layout.describe(), best.fits
('dp 8 × tp 1 × pp 1 × cp 1 = 8 GPUs', True)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..hardware import gpu as accelerator, interconnect
from ..memory.recipes import peak_precision, peak_precision_problems, recipe as _recipe
from ..memory.checkpointing import compile_problems, policy_problems, timed_recompute
from ..memory.device import on_device
from ..memory.act_offload import offloaded_activations
from ..memory.kernels import (RECOMPUTE_KINDS, activation_offload_problems,
                              context_parallel_problems, kernel_problems, loss_problems)
from ..memory.step import activations
from ..memory.training import Training
from ..model.moe import Routing, routing_problems
from ..model.presets import preset
from ..model.shape import ModelShape
from ..parallel.layout import (CP_KINDS, Batch, Layout, _head_split_problems, _hybrid_degree,
                               batch_problems, cluster_problems, expert_problems, parse_stages,
                               pipeline_split_problems, sequence_problems,
                               tensor_split_problems)
from ..parallel.schedules import OPT_IN, SCHEDULES, schedule_problems
from ..problems import Problem, check, describe
from ..runs.description import Gpu, Run
from ..runs.estimates import _peak
from ..runs.rules import MODEL_SHAPE, fsdp2_problems, positions_problems, positions_warning
from ..time.flops import flops_per_token
from ..time.network import Fabric
from ..time.step import Overlap, Timing, step_time
from ..units import Bytes, choice, positive_int
from .candidates import Candidate, Plan


def expert_candidates(model: ModelShape, dp: int, tp: int = 1, cp: int = 1
                      ) -> tuple[tuple[int, int | None], ...]:
    """The expert splits (ep, etp) to try on a grid of dp · tp · cp GPUs per pipeline stage:
    ((1, None),) for a dense model; for a mixture of experts, with etp None (= tp, Megatron-Core's
    default) and, when tp > 1, etp 1 (tensor parallelism for attention, none for the experts:
    the MoE README's advice under parallel folding), every ep that divides the experts and
    dp·cp·tp/etp (:func:`trainmath.parallel.layout.fold_problems`). ep adds no GPUs.

    >>> from trainmath.model.presets import preset
    >>> expert_candidates(preset("mixtral-8x7b"), 4, cp=2)
    ((1, None), (2, None), (4, None), (8, None))
    >>> expert_candidates(preset("llama-3-8b"), 16)
    ((1, None),)
    """
    if not model.moe:
        return ((1, None),)
    out = []
    for etp in (None, 1) if tp > 1 else (None,):
        ranks = dp * cp * tp // (tp if etp is None else etp)
        out += [(ep, etp) for ep in _divisors(ranks) if model.experts % ep == 0
                and model.expert_width % (tp if etp is None else etp) == 0]
    return tuple(out)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _grids(n: int, *, tp_max: int | None = None, tp_cp_max: int | None = None,
           pp_max: int | None = None) -> list[tuple[int, int, int, int]]:
    """Every (dp, tp, pp, cp) with dp · tp · pp · cp = n, within the bounds the search keeps:
    tp ≤ ``tp_max``, tp · cp ≤ ``tp_cp_max`` (a node, unless across nodes is allowed) and
    pp ≤ ``pp_max`` (the layers). The bounds only skip grids that their rules would drop."""
    out = []
    for tp in _divisors(n):
        if tp_max is not None and tp > tp_max:
            continue
        for cp in _divisors(n // tp):
            if tp_cp_max is not None and tp * cp > tp_cp_max:
                continue
            for pp in _divisors(n // (tp * cp)):
                if pp_max is not None and pp > pp_max:
                    continue
                out.append((n // (tp * cp * pp), tp, pp, cp))
    return out


# -- the search ----------------------------------------------------------------------------------
_RECOMPUTE_MEMORY = {"none": 0, "selective": 1, "op": 2, "full": 3}  # more recomputation, less memory


@dataclass(frozen=True)
class Search:
    """What one plan searches over, checked: the model, the GPUs and their links, the sequence
    and batch, the training setup resolved once, and the step-time model's assumptions."""

    model: ModelShape
    gpu: str
    gpus: int
    node_gpus: int
    seq_len: int
    global_batch: int
    training: Training
    device: Gpu
    fabric: Fabric
    overlap: Overlap
    kernel: str | None
    sustained: float | None
    tp_across_nodes: bool
    cp_across_nodes: bool
    max_interleave: int
    #: the ZeRO stages and recomputations the search may choose (None: every one the recipe and
    #: kernels allow)
    zero_stages: tuple[int, ...] | None = None
    recomputes: tuple[str, ...] | None = None
    #: the pipeline schedules and context-parallel kinds the search may choose (None: every
    #: one a layout allows)
    schedules: tuple[str, ...] | None = None
    cp_kinds: tuple[str, ...] | None = None

    @property
    def peak(self) -> float:
        """One GPU's dense peak FLOP/s in the recipe's precision: what MFU is measured against."""
        return accelerator(self.gpu).peak(peak_precision(_recipe(self.training.recipe))).flops

    def time(self, lay: Layout, *, zero_stage: int, recompute: str, micro_batch: int):
        """:func:`trainmath.time.step.step_time` of one layout and setting (with the training's
        loss, and the host copies of its offloaded activations)."""
        t = self.training
        rc = timed_recompute(self.model, recompute=recompute, policy=t.recompute_policy)
        moved = 0.0
        if t.activation_offload != "none":
            setting = replace(t, zero_stage=zero_stage, recompute=recompute)
            _, acts = activations(shape=self.model, layout=lay, training=setting,
                                  batch=Batch(self.seq_len, micro_batch, self.global_batch),
                                  microbatches=None, stages=[0])
            moved = float(offloaded_activations(acts[0])[1].n)
        return step_time(self.model, lay, seq_len=self.seq_len, global_batch=self.global_batch,
                         micro_batch=micro_batch, zero_stage=zero_stage, recompute=rc,
                         recipe=t.recipe, implementation=t.implementation,
                         fabric=self.fabric, overlap=self.overlap, kernel=self.kernel,
                         sustained=self.sustained, routing=t.routing, compiled=t.compiled,
                         loss=t.loss, loss_chunks=t.chunks,
                         activation_offload=t.activation_offload, offloaded=moved)


def _span_problems(s: Search, lay: Layout) -> list[Problem]:
    """tp, and tp × cp, stay inside a node unless the search allows otherwise."""
    problems = []
    if not s.tp_across_nodes and lay.tp > s.node_gpus:
        problems.append(Problem(("tp", "gpus_per_node"),
                                f"tp {lay.tp} spans nodes of {s.node_gpus} GPUs"))
    if not s.cp_across_nodes and lay.tp * lay.cp > s.node_gpus:
        problems.append(Problem(("tp", "cp", "gpus_per_node"),
                                f"tp × cp = {lay.tp * lay.cp} spans nodes of {s.node_gpus} GPUs"))
    return problems


def _grid_problems(s: Search, lay: Layout) -> list[Problem]:
    """Every rule one grid breaks: the layout's and the run's own rules, and the search's."""
    model, t = s.model, s.training
    return [*tensor_split_problems(model, lay.tp), *expert_problems(model, lay),
            *pipeline_split_problems(model, lay.pp, lay.v, lay.stages),
            *batch_problems(s.global_batch, lay.dp, 1), *sequence_problems(s.seq_len, lay),
            *context_parallel_problems(lay.cp, t.attention), *_span_problems(s, lay),
            *fsdp2_problems(t.recipe, lay),
            *kernel_problems(model, t.implementation, tp=lay.tp, cp=lay.cp,
                             sequence_parallel=lay.sequence_parallel),
            *loss_problems(t.loss, t.loss_chunks, tp=lay.tp, seq_len=s.seq_len),
            *activation_offload_problems(t.activation_offload, pp=lay.pp)]


def _settings(s: Search, lay: Layout) -> tuple[list[tuple[int, int, str, int]], list[tuple[tuple, str]]]:
    """(v, zero, recompute, b) to time for one grid, and those pruned by rule with the rule."""
    dp, pp = lay.dp, lay.pp
    stages = _recipe(s.training.recipe).stages
    flash = s.training.attention == "flash"
    per_replica = s.global_batch // dp
    vs = [1] if pp == 1 else [v for v in range(1, s.max_interleave + 1) if pp * v <= s.model.layers]
    if s.zero_stages is not None:
        stages = tuple(z for z in stages if z in s.zero_stages)
    zeros = [z for z in stages if pp == 1 or z <= 1]
    recomputes = ["none", "full"] if flash else ["none", "selective", "full"]
    if s.recomputes is not None:
        recomputes = [rc for rc in recomputes if rc in s.recomputes] or list(s.recomputes)
    t = s.training

    def rules(rc: str) -> list[Problem]:
        return [*kernel_problems(s.model, t.implementation, recompute=rc),
                *policy_problems(s.model, recompute=rc, policy=t.recompute_policy,
                                 implementation=t.implementation, tp=lay.tp, cp=lay.cp,
                                 sequence_parallel=lay.sequence_parallel),
                *compile_problems(s.model, compiled=t.compiled, recompute=rc,
                                  implementation=t.implementation, tp=lay.tp)]
    refused = [rc for rc in recomputes if rules(rc)]
    recomputes = [rc for rc in recomputes if rc not in refused]
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
    if flash:
        pruned.append(((None, None, "selective", None), "selective recomputation saves nothing "
                                                       "with flash attention"))
    for rc in refused:
        pruned.append(((None, None, rc, None), describe(rules(rc))))
    return keep, pruned


def _parse_layout(text: str) -> dict[str, int]:
    """``"dp=16,tp=8,pp=4"`` (also v, zero, recompute, b) as a dict of the given keys."""
    allowed = ("dp", "tp", "pp", "cp", "ep", "etp", "v", "zero", "b", "recompute", "stages")
    out: dict = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ValueError(f"layout part {part!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(allowed)}; e.g. dp=16,tp=8,pp=4")
        if key == "recompute":
            out[key] = value.strip()
        elif key == "stages":
            out[key] = parse_stages(value)
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
    nvlink: float | None = None,
    network: float | None = None,
    overlap: Overlap = Overlap(),
    kernel: str | None = None,
    sustained: float | None = None,
    tp_across_nodes: bool = False,
    cp_across_nodes: bool = False,
    max_interleave: int = 8,
    layout: str | dict | None = None,
    zero_stages: tuple[int, ...] | None = None,
    recomputes: tuple[str, ...] | None = None,
    capacity_factor: float | None = None,
    pad_to_capacity: bool = False,
    expert_load: str = "balanced",
    schedules: tuple[str, ...] | None = None,
    cp_kinds: tuple[str, ...] | None = None,
    recompute_policy: str | None = None,
    compiled: bool = False,
    loss: str = "standard",
    loss_chunks: int | None = None,
    activation_offload: str = "none",
) -> Plan:
    """Every layout of ``gpus`` GPUs of kind ``gpu`` for ``model``, ranked (module docstring).

    ``node_gpus``, ``nvlink`` and ``network`` (bytes/s per GPU, each way) default to
    :data:`~trainmath.hardware.INTERCONNECTS`; ``recipe`` and ``implementation`` to what the
    model is commonly trained with (:class:`~trainmath.runs.description.Run`). The step-time
    model's settings, ``overlap`` (:class:`~trainmath.time.step.Overlap`), ``kernel`` (the flash
    kernel) and ``sustained`` (the share of the benchmarks' tensor-core rates), default to the
    implementation's kernel and :func:`trainmath.time.calibration.sustained`. tp and tp × cp stay
    within a node unless ``tp_across_nodes`` / ``cp_across_nodes``. ``zero_stages`` and
    ``recomputes`` restrict the settings searched, and ``schedules`` and ``cp_kinds`` the
    pipeline schedules and context-parallel kinds (default: each a layout allows). A mixture's ``capacity_factor``,
    ``pad_to_capacity`` and ``expert_load`` (:class:`trainmath.model.moe.Routing`) set what its
    experts' rows are timed and judged for: fitting is judged at the expert load given
    (balanced unless it says otherwise), and the plan says which. ``recompute_policy`` (an
    op-level policy, :mod:`trainmath.memory.checkpointing`) searches ``recompute="op"`` with it;
    ``compiled`` times and counts the layers under ``torch.compile``; ``loss``, ``loss_chunks``
    and ``activation_offload`` are the training's (:class:`~trainmath.memory.training.Training`).
    ``layout`` ("dp=16,tp=8,pp=4", optionally
    with v, zero, recompute, b and stages=7/8*14/7) is scored and placed in the ranking as
    :attr:`~trainmath.planner.candidates.Plan.user`. A ValueError says what would work when
    nothing does.

    A plan is immutable and depends only on these arguments: it is memoised on them (the
    published-run checks of the tests and of the how-to page share one computation).
    """
    asked = dict(model=model, gpu=gpu, gpus=gpus, seq_len=seq_len, global_batch=global_batch,
                 node_gpus=node_gpus, recipe=recipe, implementation=implementation,
                 optimizer=optimizer, gpu_memory=gpu_memory, nvlink=nvlink,
                 network=network, overlap=overlap, kernel=kernel, sustained=sustained,
                 tp_across_nodes=tp_across_nodes, cp_across_nodes=cp_across_nodes,
                 max_interleave=max_interleave,
                 layout=tuple(layout.items()) if isinstance(layout, dict) else layout,
                 zero_stages=None if zero_stages is None else tuple(zero_stages),
                 recomputes=None if recomputes is None else tuple(recomputes),
                 capacity_factor=capacity_factor, pad_to_capacity=pad_to_capacity,
                 expert_load=expert_load,
                 schedules=None if schedules is None else tuple(schedules),
                 cp_kinds=None if cp_kinds is None else tuple(cp_kinds),
                 recompute_policy=recompute_policy, compiled=compiled,
                 loss=loss, loss_chunks=loss_chunks, activation_offload=activation_offload)
    key = tuple(asked.items())
    try:
        hash(key)
    except TypeError:  # an unhashable argument: no memo, the checks below say what is wrong
        return _plan(**asked)
    return _memo(key)


@lru_cache(maxsize=64, typed=True)  # typed: 1, 1.0 and True are different inputs
def _memo(key: tuple) -> Plan:
    return _plan(**dict(key))


def _search(*, model, gpu, gpus, seq_len, global_batch, node_gpus, recipe, implementation,
            optimizer, gpu_memory, nvlink, network, overlap, kernel, sustained, tp_across_nodes,
            cp_across_nodes, max_interleave, zero_stages=None, recomputes=None,
            capacity_factor=None, pad_to_capacity=False,
            expert_load="balanced", schedules=None, cp_kinds=None, recompute_policy=None,
            compiled=False, loss="standard", loss_chunks=None,
            activation_offload="none") -> tuple[Search, tuple[str, ...]]:
    """The plan's inputs checked, as a :class:`Search`, and what the training setup assumed."""
    if isinstance(model, str):
        model = preset(model)
    if not isinstance(model, ModelShape):
        raise ValueError("plan needs a model shape: it splits the layers over tp and pp; "
                         f"accepted: {MODEL_SHAPE}; got {model!r}")
    key = accelerator(gpu).key  # aliases as every entry point accepts them
    n = positive_int("gpus", gpus)
    s = positive_int("seq_len (s)", seq_len)
    B = positive_int("global_batch (sequences per step)", global_batch)
    net = interconnect(key)
    node = net.node_gpus if node_gpus is None else positive_int("node_gpus", node_gpus)
    nvlink = net.nvlink if nvlink is None else _rate("nvlink", nvlink)
    network = net.network if network is None else _rate("network", network)
    Timing(overlap=overlap, kernel=kernel, sustained=sustained)  # the time model's own checks
    max_v = positive_int("max_interleave", max_interleave)
    check(positions_problems(model, s))
    device = Gpu(gpu_memory, key)
    # the training setup, resolved once (the Run fills what is None from the model's defaults)
    routing = Routing(capacity_factor, pad_to_capacity, expert_load)
    check(routing_problems(model, routing))
    if recompute_policy is not None:  # a policy: op-level checkpointing is what is searched
        if recomputes not in (None, ("op",)):
            raise ValueError(f"recompute policy {recompute_policy!r} with recomputes "
                             f"{recomputes!r}; accepted: recompute op, or no policy")
        recomputes = ("op",)
    probe = Run(model, Training(recipe=recipe, implementation=implementation, optimizer=optimizer,
                                routing=routing, recompute_policy=recompute_policy,
                                recompute="op" if recompute_policy else "none",
                                compiled=compiled, loss=loss, loss_chunks=loss_chunks,
                                activation_offload=activation_offload), gpu=device)
    t0 = probe.training
    r = _recipe(t0.recipe)
    check(peak_precision_problems(r) or accelerator(key).peak_problems(peak_precision(r)))
    fabric = Fabric(key, node, float(nvlink), float(network))
    return Search(model=model, gpu=key, gpus=n, node_gpus=node, seq_len=s, global_batch=B,
                  training=t0, device=device, fabric=fabric, overlap=overlap, kernel=kernel,
                  sustained=None if sustained is None else float(sustained),
                  tp_across_nodes=tp_across_nodes, cp_across_nodes=cp_across_nodes,
                  max_interleave=max_v, zero_stages=_stages_asked(zero_stages, t0.recipe),
                  recomputes=_recomputes_asked(recomputes),
                  schedules=None if schedules is None else tuple(
                      _named("schedule", x, SCHEDULES) for x in schedules),
                  cp_kinds=None if cp_kinds is None else tuple(
                      _named("cp_kind", x, CP_KINDS) for x in cp_kinds)), probe.assumed


def _plan(*, layout, **asked) -> Plan:
    """:func:`plan`, not memoised."""
    s, assumed = _search(**asked)
    wanted = None if layout is None else (_parse_layout(layout) if isinstance(layout, str)
                                          else dict(layout))
    candidates: list[Candidate] = []
    winners: list[Candidate] = []
    bounds = dict(tp_max=None if s.tp_across_nodes else s.node_gpus,
                  tp_cp_max=None if s.cp_across_nodes else s.node_gpus, pp_max=s.model.layers)
    grids = [(g, e) for g in _grids(s.gpus, **bounds)
             for e in expert_candidates(s.model, g[0], g[1], g[3])]
    for (dp, tp, pp, cp), (ep, etp) in grids:
        lay = Layout(dp=dp, tp=tp, pp=pp, cp=cp, sequence_parallel=tp > 1, ep=ep, etp=etp)
        problems = _grid_problems(s, lay)
        if problems:
            candidates.append(_dropped(lay, "invalid: " + describe(problems)))
            continue
        winner = _search_grid(s, lay, candidates)
        if winner is not None:
            winners.append(winner)
    winners.sort(key=_rank_key)
    ranking = tuple(replace(c, rank=i + 1) for i, c in enumerate(winners))
    ranked = {id(c): rc for c, rc in zip(winners, ranking)}
    candidates = [ranked.get(id(c), c) for c in candidates]
    user = None if wanted is None else _score_user(s, wanted, ranking)
    if not ranking:
        raise ValueError(_nothing_fits(s, candidates))
    return Plan(model=s.model, gpu=s.gpu, gpus=s.gpus, node_gpus=s.node_gpus, seq_len=s.seq_len,
                global_batch=s.global_batch, training=s.training, memory=s.device.memory,
                fabric=s.fabric, overlap=s.overlap, kernel=s.kernel, sustained=s.sustained,
                ranking=ranking, candidates=tuple(candidates), user=user, assumed=assumed,
                warnings=tuple(w for w in [positions_warning(s.model, s.seq_len)] if w)
                + tuple(p.message for p in cluster_problems(s.gpus, ("gpus",))))


def _stages_asked(zero_stages, recipe_name: str) -> tuple[int, ...] | None:
    """The ZeRO stages asked for, each one the recipe offers."""
    if zero_stages is None:
        return None
    offered = _recipe(recipe_name).stages
    for z in zero_stages:
        if z not in offered:
            raise ValueError(f"zero {z!r} is not a stage recipe {recipe_name!r} offers; accepted: "
                             + ", ".join(map(str, offered)))
    return tuple(zero_stages)


def _recomputes_asked(recomputes) -> tuple[str, ...] | None:
    """The recomputations asked for, each one of the library's kinds."""
    if recomputes is None:
        return None
    return tuple(choice("recompute", rc, RECOMPUTE_KINDS) for rc in recomputes)


def _named(what: str, value: str, accepted) -> str:
    if value not in accepted:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(accepted)}")
    return value


def _rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of bytes per second, got {value!r}")
    return float(value)


def _rank_key(c: Candidate):
    return (c.time.total, c.peak.n)


def _search_grid(s: Search, lay: Layout, out: list[Candidate]) -> Candidate | None:
    """Time every setting of one grid, then check memory fastest first until one fits."""
    settings, pruned = _settings(s, lay)
    for (v, z, rc, b), why in pruned:
        out.append(_dropped(replace(lay, v=v or 1), why, zero_stage=z, recompute=rc,
                            micro_batch=b))
    timed = []
    variants: dict[tuple[int, int], list[Layout]] = {}  # the same for each ZeRO stage, recompute
    for v, z, rc, b in settings:
        if (v, b) not in variants:
            variants[v, b] = _variants(s, replace(lay, v=v), b)
        for lv in variants[v, b]:
            t = s.time(lv, zero_stage=z, recompute=rc, micro_batch=b)
            # ties: less memory first (higher ZeRO stage, more recomputation, smaller b)
            timed.append((t.total, -z, -_RECOMPUTE_MEMORY[rc], b, v, lv, z, rc, t))
    timed.sort(key=lambda x: x[:5])
    failed: list[tuple[int, int, str, int]] = []
    winner = None
    memory = s.device.memory
    for total, _, _, b, v, lv, z, rc, t in timed:
        if winner is not None:
            out.append(_dropped(lv, f"slower than {winner.describe()}, which fits", zero_stage=z,
                                recompute=rc, micro_batch=b, time=t))
            continue
        implied = next((f for f in failed if f[0] == (v, lv.schedule) and z <= f[1]
                        and _RECOMPUTE_MEMORY[rc] <= _RECOMPUTE_MEMORY[f[2]] and b >= f[3]), None)
        if implied is not None:
            fv, fz, frc, fb = implied
            out.append(_dropped(lv, f"does not fit: needs at least the memory of ZeRO-{fz}, "
                                    f"recompute {frc}, b {fb}, which does not fit", zero_stage=z,
                                recompute=rc, micro_batch=b, time=t))
            continue
        # the cp kinds hold the same bytes (Ulysses' heads over the whole sequence are the
        # ring's sequence over all heads): one estimate for them all
        peak = _estimate(s, replace(lv, cp_kind="ring"), micro_batch=b, zero_stage=z,
                         recompute=rc).bytes
        process = _process(s, lv, peak)
        if process > memory:
            failed.append(((v, lv.schedule), z, rc, b))
            out.append(_dropped(lv, f"does not fit: {process.format('GB', 1)} as nvidia-smi "
                                    f"shows it (peak {peak.format('GB', 1)}) > "
                                    f"{memory.format('GB', 1)} usable", zero_stage=z, recompute=rc,
                                micro_batch=b, time=t, peak=peak, process=process))
            continue
        winner = _scored(s, lv, zero_stage=z, recompute=rc, micro_batch=b, time=t, peak=peak,
                         process=process, reason="fits; the fastest setting of this layout")
        out.append(winner)
    return winner


def _variants(s: Search, lay: Layout, micro_batch: int) -> list[Layout]:
    """``lay`` under each pipeline schedule and context-parallel kind the search may choose
    and the layout allows: a schedule whose :func:`~trainmath.parallel.schedules.schedule_problems`
    find nothing for its m micro-batches (ZB-H1 interleaved only when asked for: it idles as
    ZB-V does, with v chunks' memory), a kind whose
    :func:`~trainmath.parallel.layout.context_split_problems` find nothing (the hybrid only
    where it is neither pure ring nor pure Ulysses). The schedules of
    :data:`~trainmath.parallel.schedules.OPT_IN` (ZB-H2) only when asked for."""
    m = s.global_batch // (lay.dp * micro_batch)
    schedules = ["1f1b"] if lay.pp == 1 else [
        sch for sch in SCHEDULES if not schedule_problems(sch, lay.pp, lay.v, m)
        and (sch != "zb-h1" or lay.v == 1 or s.schedules is not None)
        and (sch not in OPT_IN or s.schedules is not None)]
    kinds = ["ring"]
    if lay.cp > 1:
        hybrid = _hybrid_degree(s.model.heads // lay.tp, max(s.model.kv_heads // lay.tp, 1),
                                lay.cp)
        if not _head_split_problems(s.model, lay.tp, lay.cp):
            kinds.append("ulysses")
        if 1 < hybrid < lay.cp:
            kinds.append("hybrid")
    if s.schedules is not None:
        schedules = [sch for sch in schedules if sch in s.schedules]
    if s.cp_kinds is not None:
        kinds = [k for k in kinds if k in s.cp_kinds]
    if schedules == ["1f1b"] and kinds == ["ring"]:
        return [lay]
    return [replace(lay, schedule=sch, cp_kind=k) for sch in schedules for k in kinds]


def _process(s: Search, lay: Layout, peak: Bytes) -> Bytes:
    """What nvidia-smi shows for a rank whose tensors peak at ``peak`` (typical:
    :func:`trainmath.memory.device.on_device`): what fitting is judged by."""
    return on_device(peak, gpu=s.gpu, layout=lay, node_gpus=s.node_gpus).process.typical


def _dropped(lay: Layout, reason: str, **setting) -> Candidate:
    """A candidate dropped for ``reason``; ``setting``: its zero_stage, recompute, micro_batch,
    and the time and peak when they were computed."""
    return Candidate(layout=lay, zero_stage=setting.pop("zero_stage", None),
                     recompute=setting.pop("recompute", None),
                     micro_batch=setting.pop("micro_batch", None), status="dropped",
                     reason=reason, **setting)


def _scored(s: Search, lay: Layout, *, zero_stage: int, recompute: str, micro_batch: int,
            time, peak: Bytes, reason: str, process: Bytes | None = None) -> Candidate:
    """A candidate kept, with its throughput and MFU (model FLOPs over the recipe's peak)."""
    f = flops_per_token(s.model, s.seq_len)
    tps = s.global_batch * s.seq_len / time.total
    mfu = tps * f.model / (lay.gpus * s.peak)
    return Candidate(layout=lay, zero_stage=zero_stage, recompute=recompute,
                     micro_batch=micro_batch, status="kept", reason=reason, time=time, peak=peak,
                     mfu=mfu, tokens_per_second=tps,
                     process=_process(s, lay, peak) if process is None else process)


@lru_cache(maxsize=8192)
def _estimate(s: Search, lay: Layout, *, micro_batch: int, zero_stage: int, recompute: str):
    """The step's peak of ``estimate(run)`` (:class:`~trainmath.memory.peak.StepPeak`) for one
    setting: only the pipeline stages that can hold the peak are built."""
    training = replace(s.training, zero_stage=zero_stage, recompute=recompute)
    return _peak(Run(s.model, training, lay, Batch(s.seq_len, micro_batch, s.global_batch),
                     s.device))


def _score_user(s: Search, wanted: dict, ranking: tuple[Candidate, ...]) -> Candidate:
    """The user's layout, with its fastest fitting setting unless the setting is given."""
    dp, tp = wanted.get("dp", 1), wanted.get("tp", 1)
    pp, cp = wanted.get("pp", 1), wanted.get("cp", 1)
    lay = Layout(dp=dp, tp=tp, pp=pp, cp=cp, v=wanted.get("v", 1), sequence_parallel=tp > 1,
                 ep=wanted.get("ep", 1), stages=wanted.get("stages", ()), etp=wanted.get("etp"))
    if lay.gpus != s.gpus:
        raise ValueError(f"layout {lay.describe()} does not use the {s.gpus} GPUs planned for; "
                         f"accepted: dp × tp × pp × cp = {s.gpus}")
    problems = _grid_problems(s, lay if lay.stages else replace(lay, v=1))
    if "b" in wanted:
        problems += batch_problems(s.global_batch, dp, wanted["b"])
    if problems:
        raise ValueError(f"layout {lay.describe()} cannot run {s.model.name}: " + describe(problems))
    given = [k for k in ("v", "zero", "recompute", "b", "stages") if k in wanted]
    if not given:
        for c in ranking:
            if c.grid == (dp, tp, pp, cp) and ("ep" not in wanted or c.layout.ep == lay.ep) \
                    and ("etp" not in wanted or c.layout.expert_tp == lay.expert_tp):
                return replace(c, reason=f"your layout: rank {c.rank} of {len(ranking)}")
    zs = [wanted["zero"]] if "zero" in wanted else list(_recipe(s.training.recipe).stages)
    rcs = [wanted["recompute"]] if "recompute" in wanted else list(s.recomputes or [
        rc for rc in ("none", "selective", "full")
        if not kernel_problems(s.model, s.training.implementation, recompute=rc)])
    bs = [wanted["b"]] if "b" in wanted else [1]
    vs = [lay.v] if "v" in wanted else [1]
    memory = s.device.memory
    best = None
    for v in vs:
        for z in zs:
            for rc in rcs:
                for b in bs:
                    lv = replace(lay, v=v) if not lay.stages else lay
                    t = s.time(lv, zero_stage=z, recompute=rc, micro_batch=b)
                    peak = _estimate(s, lv, micro_batch=b, zero_stage=z, recompute=rc).bytes
                    process = _process(s, lv, peak)
                    if best is None or (process <= memory, -t.total) > best[0]:
                        best = ((process <= memory, -t.total), lv, z, rc, b, t, peak, process)
    _, lv, z, rc, b, t, peak, process = best
    fits = process <= memory
    place = 1 + sum(1 for c in ranking if c.time.total < t.total and c.grid != (dp, tp, pp, cp))
    reason = (f"your layout: fits, would rank {place} of {len(ranking)}" if fits else
              f"your layout: does not fit, {process.format('GB', 1)} as nvidia-smi shows it "
              f"(peak {peak.format('GB', 1)}) > {memory.format('GB', 1)} usable")
    setting = dict(zero_stage=z, recompute=rc, micro_batch=b, time=t, peak=peak, process=process)
    return _scored(s, lv, reason=reason, **setting) if fits else _dropped(lv, reason, **setting)


def _nothing_fits(s: Search, candidates: list[Candidate]) -> str:
    """The message when no layout is left: what would work."""
    model, n, B = s.model, s.gpus, s.global_batch
    valid = [c for c in candidates if not c.reason.startswith("invalid")]
    if not valid:
        def runnable(g: int) -> bool:
            relaxed = replace(s, gpus=g, tp_across_nodes=False, cp_across_nodes=False)
            return any(not _grid_problems(relaxed, Layout(dp=d, tp=t, pp=p, cp=c,
                                                          sequence_parallel=t > 1))
                       for d, t, p, c in _grids(g))
        below = next((g for g in range(n - 1, 0, -1) if runnable(g)), None)
        above = next((g for g in range(n + 1, 4 * n + 1) if runnable(g)), None)
        near = " or ".join(str(g) for g in (below, above) if g is not None)
        return (f"no layout of {n} GPUs can run {model.name} with global batch {B} and seq_len "
                f"{s.seq_len}: every split breaks a rule (e.g. {candidates[0].reason[9:]}); a "
                f"layout needs dp to divide the batch, tp the heads ({model.heads}) and kv_heads "
                f"({model.kv_heads}), pp the layers ({model.layers}); accepted: "
                + (f"{near} GPUs" if near else "another GPU count or global batch"))
    smallest = min((c for c in valid if c.process is not None), key=lambda c: c.process.n,
                   default=None)
    hint = "" if smallest is None else (
        f"; the least found is {smallest.process.format('GB', 1)} as nvidia-smi would show it "
        f"(peak {smallest.peak.format('GB', 1)}, {smallest.describe()})")
    return (f"no layout of {n} {s.gpu} GPUs fits {model.name} in {s.device.memory.format('GB', 1)} "
            f"per GPU at seq_len {s.seq_len}{hint}; accepted: more GPUs, a shorter sequence, "
            "a GPU with more memory, or tp/cp across nodes")
