"""Training compute and how to judge a run: FLOPs, peak FLOP/s, MFU, HFU, time to train.

- **Training FLOPs** ≈ 6ND for N parameters and D tokens: 2N per token forward, 4N backward
  (Kaplan et al. 2020, *Scaling Laws for Neural Language Models*, §2.1, Table 1).
- **Model FLOPs per token** 6N + 12·L·H·Q·T (Chowdhery et al. 2022, *PaLM*, Appendix B): L
  layers, H·Q the attention width (heads × head size: h for most models, not for PaLM), T the
  sequence length. The attention term counts QKᵀ and attention-over-V at full s×s; causal
  kernels skip about half of it, but MFU, by convention, still counts it. :func:`matmul_params`
  gives the N of a :class:`~trainmath.model.shape.ModelShape` that this counts: the weight matrices of
  the layers and the LM head, not the embedding lookup, norms or biases (for a GPT shape that
  makes 6N + 12Lhs equal Korthikanti et al. 2022's 72Bslh²(1 + s/(6h) + V/(12lh)) per token).
- **Hardware FLOPs** add what recomputation reruns (:func:`flops_per_token`): full
  recomputation reruns every layer's forward, 8N_layers + 16Lhs + 6Vh per token (Narayanan et al.
  2021, eq. 3: 96Bslh²(1 + s/(6h) + V/(16lh))); selective recomputation is Korthikanti et al.
  2022's 72Bslh²(1 + s/(3h) + V/(12lh)), i.e. the attention term doubles to 24Lhs. Sources
  differ here: rerunning only the forward QKᵀ and attention-over-V would add 4Lhs, not 12Lhs;
  the paper's formula is kept because it reproduces its own HFU/MFU pairs (tests/test_compute.py).
- **MFU** = achieved model FLOP/s ÷ (GPUs × peak); **HFU** uses hardware FLOPs (Chowdhery et al.
  2022, §4.1 and Appendix B; Korthikanti et al. 2022, §6). The denominator is always a
  :class:`~trainmath.hardware.Peak`: one GPU's dense (no 2:4 sparsity) tensor-core peak in one precision, named in
  every :class:`Utilization` via :meth:`Utilization.describe`.

The peaks come from :mod:`trainmath.hardware`.

Main entry points: :func:`training_flops`; :func:`model_flops_per_token`, :func:`matmul_params`,
:func:`flops_per_token` -> :class:`FlopsPerToken` (``.model``, ``.hardware``); :func:`mfu`,
:func:`hfu` -> :class:`Utilization` (``.fraction``, ``.describe()``); :func:`tokens_per_second`,
:func:`time_to_train` (seconds), :func:`scaling_efficiency`; :data:`PUBLISHED_RUNS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..hardware import Peak, TERA
from ..memory.kernels import RECOMPUTE_KINDS
from ..model.shape import ModelShape, layer_kinds
from ..units import choice, positive_int


#: FLOPs per parameter per trained token: 2 in the forward pass and 4 in the backward, the 6
#: of 6N and 6ND (Kaplan et al. 2020, §2.1).
PARAM_FLOPS_PER_TOKEN = 6
#: FLOPs per token, per layer, per unit of attention width and of sequence length for QKᵀ and
#: attention over V, forward and backward: the 12 of PaLM's 12·L·H·Q·T (Chowdhery et al. 2022,
#: Appendix B).
ATTENTION_FLOPS_COEFFICIENT = 12


# -- FLOPs ------------------------------------------------------------------------------------
def training_flops(params: int, tokens: int) -> int:
    """6ND: FLOPs to train ``params`` parameters on ``tokens`` tokens (Kaplan et al. 2020, §2.1).

    Kaplan's N excludes embeddings; the attention term (12·L·h·s per token) is left out.

    >>> training_flops(174_600_000_000, 300_000_000_000)   # GPT-3: 3.14e23 (Brown et al. Table D.1)
    314280000000000000000000
    """
    n = positive_int("params (N)", params)
    return PARAM_FLOPS_PER_TOKEN * n * positive_int("tokens (D)", tokens)


def model_flops_per_token(params: int, layers: int, seq_len: int, attention_width: int) -> int:
    """6N + 12·L·H·Q·T, PaLM's model FLOPs per token (Chowdhery et al. 2022, Appendix B).

    ``attention_width`` is H·Q (heads × head size); ``seq_len`` is T.
    """
    n = positive_int("params (N)", params)
    L = positive_int("layers (L)", layers)
    T = positive_int("seq_len (T)", seq_len)
    hq = positive_int("attention_width (H·Q)", attention_width)
    return PARAM_FLOPS_PER_TOKEN * n + ATTENTION_FLOPS_COEFFICIENT * L * hq * T


def matmul_params(model: ModelShape) -> int:
    """Parameters that multiply activations: the layers' weight matrices plus the LM head (V·h).

    The embedding lookup, norms and biases are excluded (they cost no matrix multiplies); a tied
    embedding still counts once, as the LM head. This is the N of PaLM's 6N (Chowdhery et al.
    2022, Appendix B) that makes 6N + 12Lhs equal Korthikanti et al. 2022's model FLOPs for a
    GPT shape.

    A mixture of experts counts the router and only the k experts each token goes through:
    compute per token follows the active parameters, not the total (Fedus et al. 2022, Switch
    Transformers, §2: the parameter count grows "while keeping the computational cost
    constant"; :mod:`trainmath.model.moe`); its dense layers count their own MLP. A
    multi-token prediction module (DeepSeek-V3 §2.2) runs one more layer, its 2h × h projection
    and the LM head again for every token.
    """
    h = model.hidden
    per_kind = {k: _layer_matmuls(model, k.moe) for k in set(layer_kinds(model))}
    layers = sum(per_kind[k] for k in layer_kinds(model))
    mtp = model.mtp_layers * (per_kind[layer_kinds(model)[-1]] + 2 * h * h + model.vocab * h)
    return layers + model.vocab * h + mtp


def _layer_matmuls(m: ModelShape, moe: bool) -> int:
    """One layer's weight matrices a token goes through (:func:`matmul_params`)."""
    h, a, d = m.hidden, m.heads, m.head_dim
    if m.latent:
        rank, rope = m.kv_rank, m.rotary_dim
        q = (h * m.q_rank + m.q_rank * a * d) if m.q_rank else h * a * d
        attention = q + h * (rank + rope) + rank * a * (d - rope + m.v_head_dim) + m.o_dim * h
    else:
        attention = h * m.q_dim + h * m.kv_dim + h * m.v_dim + m.o_dim * h
    matrices = 2 if m.mlp == "gelu" else 3
    if not moe:
        return attention + matrices * h * m.ffn
    return (attention + h * m.experts
            + (m.experts_per_token + m.shared_experts) * matrices * h * m.expert_width)


def attention_units(model: ModelShape, seq_len: int) -> int:
    """Σ over the layers (and any prediction modules) of a·(d_qk + d_v) × the keys each token
    attends to: twice the L·H·Q·T of PaLM's 12·L·H·Q·T (Chowdhery et al. 2022, Appendix B), each
    layer with its own span, the whole sequence for a global layer and at most the window or
    chunk for a local one (Beltagy et al. 2020, Longformer, §3.1: a window of w costs O(n·w)).
    Latent attention's queries and keys are head_dim wide and its values v_head_dim
    (DeepSeek-V2 §2.1.2), so QKᵀ and attention over V count each at its own width."""
    per_head = model.heads * (model.head_dim + model.v_head_dim)
    spans = [min(seq_len, model.local_span) if k.local else seq_len for k in layer_kinds(model)]
    return per_head * (sum(spans) + seq_len * model.mtp_layers)


@dataclass(frozen=True)
class FlopsPerToken:
    """Model FLOPs (what the model needs) and hardware FLOPs (what the GPUs run) per token."""

    model: int
    hardware: int
    recompute: str

    @property
    def recompute_overhead(self) -> Fraction:
        """Hardware over model FLOPs, minus one: the share of extra work recomputation adds."""
        return Fraction(self.hardware, self.model) - 1


def flops_per_token(model: ModelShape, seq_len: int, recompute: str = "none",
                    policy: str | None = None) -> FlopsPerToken:
    """Model and hardware FLOPs per trained token for ``model`` at sequence length ``seq_len``.

    model = 6N + 12·L·(a·d_head)·s with N = :func:`matmul_params` (PaLM Appendix B), the
    attention term each layer's own (:func:`attention_units`).
    hardware:

    - ``"none"``: = model;
    - ``"selective"``: + 12·L·(a·d_head)·s, Korthikanti et al. 2022's hardware-FLOPs formula
      72Bslh²(1 + s/(3h) + V/(12lh)) (the one behind its MFU/HFU table; a count of one extra
      forward of QKᵀ and attention-over-V alone would be 4·L·(a·d_head)·s);
    - ``"full"``: + 2·N_layers + 4·L·(a·d_head)·s, one more forward of every layer (the LM head
      is not recomputed): Narayanan et al. 2021, eq. 3, 96Bslh²(1 + s/(6h) + V/(16lh));
    - ``"op"``: + 2 FLOPs per parameter of each projection the op-level ``policy`` reruns
      (:func:`trainmath.memory.checkpointing.recomputed_ops`; None: torchtitan's), and
      4·L·(a·d_head)·s when it reruns the attention kernel.

    FlashAttention's own recomputation of QKᵀ in its backward is not counted.
    """
    s = positive_int("seq_len (s)", seq_len)
    recompute = choice("recompute", recompute, RECOMPUTE_KINDS)
    n = matmul_params(model)
    units = attention_units(model, s)  # 2·L·(a·d_head)·s for a uniform model
    base = PARAM_FLOPS_PER_TOKEN * n + ATTENTION_FLOPS_COEFFICIENT * units // 2
    if recompute == "none":
        extra = 0
    elif recompute == "selective":
        extra = 6 * units
    elif recompute == "op":
        from ..memory.checkpointing import op_params, recomputed_ops
        ops = recomputed_ops(model, policy or "torchtitan")
        extra = 2 * model.layers * sum(op_params(model, op) for op in ops)
        extra += 2 * units if "attention" in ops else 0
    else:
        layer_matmuls = n - (1 + model.mtp_layers) * model.vocab * model.hidden
        extra = 2 * layer_matmuls + 2 * units
    return FlopsPerToken(model=base, hardware=base + extra, recompute=recompute)


# -- judging a run ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Utilization:
    """MFU or HFU: achieved FLOP/s per GPU over the peak it is measured against."""

    kind: str
    fraction: float
    #: FLOP/s achieved per GPU
    achieved: float
    peak: Peak

    def describe(self) -> str:
        """``"MFU 40.0% of the dense bf16 peak of one H100 SXM, 989.4 TFLOP/s"``."""
        return f"{self.kind} {self.fraction:.1%} of the {self.peak.describe()}"


def _utilization(kind: str, tokens_per_second: float, flops: int, gpus: int, peak: Peak) -> Utilization:
    if not isinstance(peak, Peak):
        raise ValueError(f"peak must be a Peak (see peak_flops), got {peak!r}")
    if isinstance(tokens_per_second, bool) or not tokens_per_second > 0:
        raise ValueError(f"tokens_per_second must be a positive number, got {tokens_per_second!r}")
    n = positive_int("gpus", gpus)
    achieved = float(tokens_per_second) * flops / n
    fraction = achieved / peak.flops
    if fraction > 1:
        raise ValueError(
            f"{tokens_per_second} tokens/s on {n} GPUs is {achieved / TERA:,.1f} TFLOP/s per GPU, "
            f"{fraction:.0%} of the {peak.describe()}: above the peak; check the throughput, "
            f"the GPU count and the precision"
        )
    return Utilization(kind, fraction, achieved, peak)


def mfu(tokens_per_second: float, flops: FlopsPerToken | int, gpus: int, peak: Peak) -> Utilization:
    """Model FLOPs utilization: tokens/s × model FLOPs per token ÷ (gpus × ``peak.flops``).

    The denominator is ``peak``, the dense peak of one GPU in one precision (e.g.
    ``peak_flops("h100-sxm", "bf16")``); the result names it in ``describe()``. Chowdhery et al.
    2022, §4.1 and Appendix B.
    """
    per_token = flops.model if isinstance(flops, FlopsPerToken) else positive_int("flops", flops)
    return _utilization("MFU", tokens_per_second, per_token, gpus, peak)


def hfu(tokens_per_second: float, flops: FlopsPerToken, gpus: int, peak: Peak) -> Utilization:
    """Hardware FLOPs utilization: as :func:`mfu` with the hardware FLOPs (recomputation counted).

    The denominator is ``peak``, the dense peak of one GPU in one precision. Chowdhery et al.
    2022, Appendix B; Korthikanti et al. 2022, §6.
    """
    if not isinstance(flops, FlopsPerToken):
        raise ValueError(f"hfu needs a FlopsPerToken (see flops_per_token), got {flops!r}")
    return _utilization("HFU", tokens_per_second, flops.hardware, gpus, peak)


def tokens_per_second(mfu_fraction: float, flops: FlopsPerToken | int, gpus: int, peak: Peak) -> float:
    """The throughput a given MFU means: mfu × gpus × ``peak.flops`` ÷ model FLOPs per token.

    :func:`mfu`'s definition (Chowdhery et al. 2022, Appendix B) solved for tokens per second.
    """
    per_token = flops.model if isinstance(flops, FlopsPerToken) else positive_int("flops", flops)
    if isinstance(mfu_fraction, bool) or not 0 < mfu_fraction <= 1:
        raise ValueError(f"mfu must be a fraction in (0, 1], got {mfu_fraction!r}")
    return mfu_fraction * positive_int("gpus", gpus) * peak.flops / per_token


def time_to_train(
    tokens: int, flops: FlopsPerToken | int, gpus: int, peak: Peak, mfu_fraction: float
) -> float:
    """Seconds to train on ``tokens`` tokens at ``mfu_fraction`` of ``gpus`` × ``peak.flops``.

    = tokens × model FLOPs per token ÷ (mfu × gpus × peak): the denominator is the dense peak
    ``peak`` names, the same one the MFU was measured against. Narayanan et al. 2021 estimate
    training time the same way, with their own FLOPs per token in place of the model FLOPs.
    """
    d = positive_int("tokens", tokens)
    return d / tokens_per_second(mfu_fraction, flops, gpus, peak)


def scaling_efficiency(
    base_tokens_per_second: float, base_gpus: int, tokens_per_second: float, gpus: int
) -> float:
    """Throughput per GPU at ``gpus`` over throughput per GPU at ``base_gpus`` (weak scaling).

    1.0 is perfect linear scaling; the same number as MFU at scale ÷ MFU at the base. A
    definition, not a paper's formula.
    """
    checks = (("base_tokens_per_second", base_tokens_per_second), ("tokens_per_second", tokens_per_second))
    for name, value in checks:
        if isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    n0 = positive_int("base_gpus", base_gpus)
    n = positive_int("gpus", gpus)
    return (tokens_per_second / n) / (base_tokens_per_second / n0)


# -- published results, for calibration -------------------------------------------------------
@dataclass(frozen=True)
class PublishedRun:
    """A reported MFU (and HFU, where given) with what it was measured on."""

    name: str
    hardware: str
    gpus: int
    mfu: float
    hfu: float | None
    source: str


#: Reported MFU (and HFU) of published runs, each with its source, to calibrate against.
#:
#: :meta hide-value:
PUBLISHED_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun("PaLM 540B", "TPU v4", 6144, 0.462, 0.578,
                 "Chowdhery et al. 2022, PaLM, §4.1 and Table 3 (238.3K tokens/s)"),
    PublishedRun("GPT 22B", "A100", 8, 0.415, 0.437,
                 "Korthikanti et al. 2022, Table 5 (selective recomputation + sequence parallelism)"),
    PublishedRun("GPT 175B", "A100", 64, 0.514, 0.528,
                 "Korthikanti et al. 2022, Table 5 (selective recomputation + sequence parallelism)"),
    PublishedRun("GPT 530B", "A100", 280, 0.560, 0.570,
                 "Korthikanti et al. 2022, Table 5 (selective recomputation + sequence parallelism)"),
    PublishedRun("GPT 1T", "A100", 512, 0.563, 0.570,
                 "Korthikanti et al. 2022, Table 5 (selective recomputation + sequence parallelism)"),
)
