"""Published training throughput, held against the step-time model.

``docs/_data/throughput.json`` records measurements of real runs as their sources print them:
papers' tables (Narayanan et al. 2021, Korthikanti et al. 2022, the Llama 3 report, BLOOM,
MT-NLG) and frameworks' benchmark tables (Megatron-LM, NeMo, llm-foundry, torchtitan), each
with its model, GPUs, layout, batch and what the source leaves unstated. This module turns each
row into the library's vocabulary (:func:`runs`), predicts its step with
:func:`trainmath.time.step.step_time`, and compares throughput (:func:`compare`).

**Throughput, not utilisation.** Sources count FLOPs differently (recomputation in or out,
causal attention halved or not, embeddings in N or not), so a published MFU or TFLOP/s is turned
back into tokens per second per GPU with the source's own count (:data:`FLOP_COUNTS`) before it
is compared; a published step time or tokens/s is used as printed.

**What a row leaves unstated** is filled by a stated rule per framework (``_defaults``),
recorded in each :class:`PublishedRun`'s ``assumed``, so a reader sees which prediction rests
on which assumption. The file is data read by the caller: this module does no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model.presets import preset
from ..model.shape import ModelShape, param_count, shape as make_shape
from ..parallel.layout import Layout
from ..time.flops import flops_per_token
from ..time.network import Fabric
from ..time.calibration import DEPLOYMENT, SUSTAINED
from ..time.step import Overlap, StepTime, step_time

_ZERO3 = ("DeepSpeed ZeRO-3 of 2021 without model parallelism: the measured step time does not "
          "fall as GPUs are added at a fixed batch (a per-step cost that grows with the ranks), "
          "which a prefetched ring at the network's rate does not reproduce")
_TRITON = ("llm-foundry's attention kernel is not stated (its benchmark script defaults to its "
           "Triton flash attention): timed at FlashAttention-2's published rates, these "
           "attention-bound runs were measured slower")
#: The published runs the model does not reproduce within :data:`TOLERANCE`, and why: each
#: one's measurement contradicts an assumption named here.
NOT_REPRODUCED = {
    "narayanan2021-t2-zero3-175b-384": _ZERO3, "narayanan2021-t2-zero3-175b-768": _ZERO3,
    "narayanan2021-t2-zero3-175b-1536": _ZERO3, "narayanan2021-t2-zero3-530b-640": _ZERO3,
    "narayanan2021-t2-zero3-530b-1120": _ZERO3, "narayanan2021-t2-zero3-530b-2240": _ZERO3,
    "llmfoundry-h100-bf16-mpt-1b-s32768-8gpu": _TRITON,
    "llmfoundry-h100-bf16-mpt-1b-s65536-8gpu": _TRITON,
    "llmfoundry-h100-fp8-mpt-1b-s8192-8gpu": _TRITON,
    "llmfoundry-h100-fp8-mpt-1b-s32768-8gpu": _TRITON,
}


#: Relative tolerance of every published run: abs(predicted / measured − 1) at most this.
TOLERANCE = 0.25


@dataclass(frozen=True)
class PublishedRun:
    """One published measurement in the library's vocabulary, and what was assumed for it."""

    id: str
    team: str
    source: str
    confidence: str
    model: ModelShape
    gpu: str
    layout: Layout
    node_gpus: int
    seq_len: int
    micro_batch: int
    global_batch: int
    zero_stage: int
    recipe: str
    implementation: str
    recompute: str
    precision: str
    overlap: Overlap
    compiled: bool
    #: the flash kernel: FlashAttention-2 (PyTorch SDPA's) outside Megatron; None: the
    #: implementation's own (cuDNN through Transformer Engine on Hopper)
    kernel: str | None
    #: measured tokens per second per GPU, and how it was read from the source
    measured: float
    measured_from: str
    #: the fields the source does not state, with the value used for each
    assumed: tuple[str, ...]
    #: "calibration" (the calibrated parameters were fitted on it) or "held-out"
    part: str
    #: the GPU as deployed, a key of :data:`trainmath.time.calibration.SUSTAINED`
    deployment: str = "h100"

    @property
    def gpus(self) -> int:
        """GPUs of the run."""
        return self.layout.gpus


# -- the sources' own FLOP counts, per token ------------------------------------------------------
def _eq3(m: ModelShape, s: int) -> float:
    """Narayanan et al. 2021, Eq. 3 over B·s: 96·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    l, h, V = m.layers, m.hidden, m.vocab
    return 96 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def _korthikanti(m: ModelShape, s: int) -> float:
    """Korthikanti et al. 2022, model FLOPs per token: 72·l·h²·(1 + s/(6h) + V/(12·h·l))."""
    l, h, V = m.layers, m.hidden, m.vocab
    return 72 * l * h * h * (1 + s / (6 * h) + V / (12 * h * l))


def _mcore(m: ModelShape, s: int) -> float:
    """Megatron-LM's ``num_floating_point_operations`` (2024) per token."""
    L, h, a = m.layers, m.hidden, m.heads
    q = m.q_dim / h
    gated = 1.5 if m.mlp == "swiglu" else 1.0
    return 12 * L * h * h * ((1 + m.kv_heads / a + s / h) * q + m.ffn / h * gated
                             + m.vocab / (2 * L * h))


def _llmfoundry(m: ModelShape, s: int) -> float:
    """llm-foundry's MFU count per token: 3·(2N + 4·L·d·s), N every parameter."""
    return 3 * (2 * param_count(m) + 4 * m.layers * m.hidden * s)


def _nemo(m: ModelShape, s: int, causal: bool) -> float:
    """NeMo's count per token: L·h²·(12 + 12g/a + 18 or 12·ffn/h + 12s/h (× ½ causal) + 6V/(L·h))."""
    L, h = m.layers, m.hidden
    mlp = (18 if m.mlp == "swiglu" else 12) * m.ffn / h
    attention = 12 * s / h * (0.5 if causal else 1.0)
    return L * h * h * (12 + 12 * m.kv_heads / m.heads + mlp + attention + 6 * m.vocab / (L * h))


def _palm(m: ModelShape, s: int) -> float:
    """Chowdhery et al. 2022, Appendix B, with this library's N: 6N + 12·L·h·q·s."""
    return flops_per_token(m, s).model


#: FLOPs per token by the names of ``throughput.json``'s ``flop_counts``.
FLOP_COUNTS = {
    "megatron-eq3-hw": _eq3, "bloom-eq3": _eq3, "korthikanti-model": _korthikanti,
    "mcore-2024": _mcore, "llmfoundry": _llmfoundry,
    "nemo-2407-noncausal": lambda m, s: _nemo(m, s, False),
    "nemo-causal": lambda m, s: _nemo(m, s, True),
    "llama3-mfu-unstated": _palm,
}
#: The peak each MFU-publishing source divides by, TFLOP/s, by the row's precision.
_PEAKS = {"mcore-2024": 989.5, "llmfoundry": 989.5, "llama3-mfu-unstated": 989,
          "korthikanti-model": 312, "megatron-eq3-hw": 312}


def _measured(row: dict, m: ModelShape) -> tuple[float, str]:
    """Tokens per second per GPU from what the row prints, and how."""
    got = row["measured"]
    n, s, B = row["gpus"], row["seq_len"], row["global_batch"]
    if got.get("step_s") and B:
        return B * s / got["step_s"] / n, f"step time {got['step_s']} s"
    if got.get("tokens_per_s_per_gpu"):
        return float(got["tokens_per_s_per_gpu"]), "tokens/s per GPU as printed"
    if got.get("tokens_per_s"):
        return got["tokens_per_s"] / n, "tokens/s as printed"
    count = FLOP_COUNTS[row["flops"]]
    if got.get("tflops_per_gpu"):
        return got["tflops_per_gpu"] * 1e12 / count(m, s), (
            f"{got['tflops_per_gpu']} TFLOP/s per GPU over the source's count ({row['flops']})")
    if got.get("mfu"):
        peak = _PEAKS[row["flops"]] * (2 if row.get("precision") == "fp8" else 1)
        return got["mfu"] * peak * 1e12 / count(m, s), (
            f"MFU {got['mfu']} × {peak} TFLOP/s over the source's count ({row['flops']})")
    raise ValueError(f"run {row['id']}: no step time, tokens/s, TFLOP/s or MFU to compare")


# -- the rows in the library's vocabulary --------------------------------------------------------
def _model(row: dict) -> ModelShape:
    spec = row["model"]
    if spec.get("preset"):
        return preset(spec["preset"])
    sh = dict(spec["shape"])
    return make_shape(spec["name"], **sh)


def _defaults(row: dict) -> tuple[dict, list[str]]:
    """The settings of a row, with a stated rule for each one it leaves unstated."""
    fw = row["framework"]
    assumed: list[str] = []
    out: dict = {}
    megatron = fw.startswith(("Megatron", "NeMo 24", "Megatron-Bridge", "Megatron-DeepSpeed"))

    def fill(key: str, value, why: str):
        if row.get(key) is None:
            out[key] = value
            assumed.append(f"{key} {value}: {why}")
        else:
            out[key] = row[key]

    fill("precision", "bf16", "16-bit mixed precision (fp16 and bf16 time alike on an A100)")
    fill("recompute", "full" if fw.startswith(("Megatron-LM 2021", "DeepSpeed", "Megatron-LM +"))
         else "none", "Megatron-LM 2021's runs checkpoint every layer (--checkpoint-activations); "
         "later Megatron-Core and NeMo benchmarks run without")
    fill("attention", "eager" if fw.startswith(("Megatron-LM 2021", "Megatron-LM 2022",
                                                "DeepSpeed", "Megatron-LM +")) else "flash",
         "before FlashAttention (2022) Megatron-LM's softmax attention; flash after")
    fill("micro_batch", 1, "the frameworks' usual micro-batch of 1 sequence for large models")
    fill("compile", False, "no torch.compile unless the source says so")
    lay = row["layout"]
    out["v"] = lay.get("v") or 1
    if lay.get("v") is None:
        if fw.startswith("Meta internal"):
            out["v"] = 8
            assumed.append("v 8: one layer a model chunk, as Dubey et al. 2024 §3.3.2 describe "
                           "the first and last chunks (only the embedding, only the output)")
        elif "interleaved" in row["id"]:
            out["v"] = 2
            assumed.append("v 2: two stages a rank, the smallest interleaving")
        else:
            assumed.append("v 1: interleaving not stated")
    out["sequence_parallel"] = lay.get("sequence_parallel")
    if out["sequence_parallel"] is None:
        out["sequence_parallel"] = lay["tp"] > 1 and not fw.startswith("Megatron-LM 2021")
        assumed.append(f"sequence parallel {out['sequence_parallel']}: on with tp > 1 since "
                       "Korthikanti et al. 2022")
    sharding = row.get("sharding")
    if sharding is None:
        sharding = "zero-1" if fw.startswith(("NeMo", "Megatron-Bridge")) else (
            "ddp-local (no overlap)" if fw.startswith(("Megatron-LM 2021", "Megatron-LM 2022"))
            else "ddp")
        assumed.append(f"sharding {sharding}: the framework's default of its time")
    if sharding == "zero-2" and fw.startswith("Meta internal"):
        sharding = "zero-1"
        assumed.append("gradients reduce-scattered once a step, not every micro-batch: Llama 3 "
                       "accumulates them over its pipeline's micro-batches (timed as ZeRO-1)")
    out["sharding"] = sharding
    out["megatron"] = megatron
    return out, assumed


_SHARDING = {  # sharding -> (ZeRO stage, gradients overlapped, weight gathers overlapped)
    "ddp": (0, True, True), "ddp-local (no overlap)": (0, False, False),
    "zero-1": (1, True, True), "zero-2": (2, True, True), "zero-3": (3, True, True),
    "fsdp2": (3, True, True), "fsdp-full-shard": (3, True, True),
    "fsdp-shard-grad-op": (2, True, True),
}


def runs(data: dict, calibration: frozenset[str] = frozenset()) -> tuple[PublishedRun, ...]:
    """Every checkable row of ``throughput.json``'s content ``data`` as a :class:`PublishedRun`
    (:func:`unchecked` lists the others and why); rows whose id is in ``calibration`` are
    marked as the calibration part."""
    return _runs(data, calibration)[0]


def unchecked(data: dict) -> tuple[tuple[str, str], ...]:
    """(id, why) of every row that cannot be predicted from what its source states."""
    return _runs(data, frozenset())[1]


def _runs(data: dict, calibration: frozenset[str]) -> tuple[tuple[PublishedRun, ...],
                                                             tuple[tuple[str, str], ...]]:
    out, skipped = [], []
    for row in data["runs"]:
        m = _model(row)
        settings, assumed = _defaults(row)
        z, grads, params = _SHARDING[settings["sharding"]]
        if settings["sharding"] == "zero-1" and row["framework"].startswith(
                ("Megatron-DeepSpeed", "Megatron-LM + DeepSpeed")):
            grads = params = False  # DeepSpeed's pipeline engine reduces after the pipeline
        lay = row["layout"]
        stages = tuple(lay.get("stage_layers") or ())
        layout = Layout(dp=lay["dp"], tp=lay["tp"], pp=lay["pp"], cp=lay["cp"],
                        ep=lay.get("ep") or 1, v=settings["v"],
                        sequence_parallel=settings["sequence_parallel"], stages=stages)
        precision = settings["precision"]
        fsdp = settings["sharding"] in ("fsdp2", "fsdp-full-shard")  # bf16 gathers, fp32 reduce
        recipe = "fsdp2" if fsdp else ("fp8-te" if precision == "fp8" else "megatron")
        # the kernel profiles: Megatron-style for every framework here (none runs Hugging Face's
        # eager Llama code); the attention decides flash or eager
        implementation = "megatron-te" if settings["attention"] == "flash" else "megatron-eager"
        tensor = bool(settings["megatron"] and row["framework"].startswith(
            ("Megatron-Core", "NeMo 24", "Megatron-Bridge")))
        recompute = settings["recompute"]
        if row["framework"].startswith("torchtitan") and recompute.startswith(("selective", "op-")):
            recompute = "layer-selective" if "selectivelayer" in row["id"] else "op-selective"
        deployment = DEPLOYMENT[row["gpu"]]
        if row["gpu"] == "h100-sxm" and "HBM2e" in (row.get("gpu_note") or ""):
            deployment = "h100-500w"
        measured, how = _measured(row, m)
        global_batch = row["global_batch"]
        if global_batch is None:  # the bubble cannot be known: not checkable
            skipped.append((row["id"], "the global batch is not stated, so the pipeline's "
                            "micro-batches (and its bubble) are unknown"))
            continue
        out.append(PublishedRun(
            id=row["id"], team=row["team"], source=row["source"],
            confidence=row["confidence"], model=m, gpu=row["gpu"], layout=layout,
            node_gpus=row.get("gpus_per_node") or 8, seq_len=row["seq_len"],
            micro_batch=settings["micro_batch"], global_batch=global_batch, zero_stage=z,
            recipe=recipe, implementation=implementation, recompute=recompute,
            precision=precision, overlap=Overlap(gradients=grads, parameters=params,
                                                 tensor=tensor),
            compiled=bool(settings["compile"]),
            kernel=None if settings["megatron"] else "fa2",
            measured=measured, measured_from=how,
            assumed=tuple(assumed),
            part="calibration" if row["id"] in calibration else "held-out",
            deployment=deployment))
    return tuple(out), tuple(skipped)


def predict(r: PublishedRun, sustained: float | None = None) -> StepTime:
    """The model's step for a published run, at its deployment's calibrated share unless
    ``sustained`` is given."""
    if sustained is None:
        sustained = SUSTAINED[r.deployment]
    return step_time(r.model, r.layout, seq_len=r.seq_len, global_batch=r.global_batch,
                     micro_batch=r.micro_batch, zero_stage=r.zero_stage, recompute=r.recompute,
                     recipe=r.recipe, implementation=r.implementation,
                     fabric=Fabric.of(r.gpu, node_gpus=r.node_gpus), overlap=r.overlap,
                     kernel=r.kernel,
                     sustained=sustained, precision=r.precision, compiled=r.compiled)


@dataclass(frozen=True)
class Comparison:
    """A published run's measured and predicted tokens per second per GPU."""

    run: PublishedRun
    predicted: float
    time: StepTime

    @property
    def ratio(self) -> float:
        """Predicted over measured throughput."""
        return self.predicted / self.run.measured

    @property
    def within(self) -> bool:
        """Whether the prediction is within :data:`TOLERANCE` of the measurement."""
        return abs(self.ratio - 1) <= TOLERANCE


def compare(r: PublishedRun, sustained: float | None = None) -> Comparison:
    """Predict ``r`` and set it beside what was measured."""
    t = predict(r, sustained)
    tokens = r.global_batch * r.seq_len / t.total / r.gpus
    return Comparison(r, tokens, t)


def median_error(comparisons) -> float:
    """The median of abs(predicted / measured − 1)."""
    errors = sorted(abs(c.ratio - 1) for c in comparisons)
    if not errors:
        return math.nan
    mid = len(errors) // 2
    return errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2


def calibration_part(data: dict) -> frozenset[str]:
    """The ids of the calibration part: every third checkable run of each deployment in the
    file's order (its 1st, 4th, 7th …), so every source and scale is in both parts."""
    seen: dict[str, int] = {}
    chosen = set()
    for r in runs(data):
        k = seen.get(r.deployment, 0)
        if k % 3 == 0:
            chosen.add(r.id)
        seen[r.deployment] = k + 1
    return frozenset(chosen)


#: The shares :func:`fit` tries: 0.50 to 1.00 by 0.01.
GRID = tuple(x / 100 for x in range(50, 101))


def fit(published: tuple[PublishedRun, ...], deployment: str,
        grid: tuple[float, ...] = GRID) -> float:
    """The sustained share on ``grid`` with the least median abs(predicted / measured − 1) over the
    calibration part of ``deployment``'s runs (ties: the smaller share)."""
    part = [r for r in published if r.deployment == deployment and r.part == "calibration"]
    if not part:
        raise ValueError(f"no calibration run for deployment {deployment!r}")
    return min(grid, key=lambda s: (median_error([compare(r, s) for r in part]), s))


@dataclass(frozen=True)
class LayoutRank:
    """Where a published run's layout ranks among the planner's, for the run's own model, GPUs,
    sequence, batch, recipe, kernels and overlap, with its ZeRO stage and recomputation."""

    run: PublishedRun
    #: 1 = the planner's best; None when the layout does not fit the estimate's memory
    rank: int | None
    #: layouts that fit
    of: int
    #: the planner's best, in words
    best: str
    #: the reason the planner gave the published layout
    reason: str


def layout_rank(r: PublishedRun) -> LayoutRank:
    """The planner run on ``r``'s inputs, and the rank of ``r``'s layout in it."""
    from ..planner.search import plan  # the planner is a layer above the runs it checks

    lay = r.layout
    spec = f"dp={lay.dp},tp={lay.tp},pp={lay.pp},cp={lay.cp}"
    recompute = r.recompute if r.recompute in ("none", "selective", "full") else "full"
    try:
        p = plan(r.model, gpu=r.gpu, gpus=r.gpus, seq_len=r.seq_len,
                 global_batch=r.global_batch, recipe=r.recipe, implementation=r.implementation,
                 layout=spec, node_gpus=r.node_gpus, overlap=r.overlap, kernel=r.kernel,
                 sustained=SUSTAINED[r.deployment], tp_across_nodes=lay.tp > r.node_gpus,
                 cp_across_nodes=lay.tp * lay.cp > r.node_gpus, zero_stages=(r.zero_stage,),
                 recomputes=(recompute,))
    except ValueError as exc:  # nothing fits the estimate's memory with the run's settings
        return LayoutRank(r, None, 0, "", str(exc))
    rank = p.rank_of(lay.dp, lay.tp, lay.pp, lay.cp)
    u = p.user
    if rank is None and u is not None and u.fits:  # scored with its own setting: its place
        rank = 1 + sum(c.time.total < u.time.total for c in p.ranking if c.grid != u.grid)
    return LayoutRank(r, rank, len(p.ranking), p.best.describe(), u.reason if u else "")
