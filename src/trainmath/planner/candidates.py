"""What the planner found: every layout and setting it considered (:class:`Candidate`, with
the reason it was kept or dropped), and the ranking of those that fit (:class:`Plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory.recipes import peak_precision, recipe
from ..memory.training import Training
from ..model.shape import ModelShape
from ..parallel.layout import Layout
from ..time.network import Fabric
from ..time.calibration import sustained as calibrated
from ..time.step import Overlap, StepTime, attention_kernel
from ..units import Bytes


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
    #: what nvidia-smi would show for the process (typical): what fitting is judged by
    process: Bytes | None = None

    @property
    def grid(self) -> tuple[int, int, int, int]:
        """(dp, tp, pp, cp); the expert-parallel size ``layout.ep`` is a setting within it."""
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
        if lay.ep > 1 or lay.expert_tp != lay.tp:
            text += f" (ep {lay.ep}" + (f", etp {lay.expert_tp})" if lay.expert_tp != lay.tp
                                        else ")")
        if self.zero_stage is None:
            return text
        if lay.v > 1:
            text += f", v {lay.v}"
        return text + f", ZeRO-{self.zero_stage}, recompute {self.recompute}, b {self.micro_batch}"


@dataclass(frozen=True)
class Plan:
    """What :func:`~trainmath.planner.search.plan` found: the inputs, the ranking and every candidate considered."""

    model: ModelShape
    gpu: str
    gpus: int
    node_gpus: int
    seq_len: int
    global_batch: int
    training: Training
    memory: Bytes
    #: the links timed: GPUs per node, NVLink and network bytes/s per GPU
    fabric: Fabric
    overlap: Overlap
    #: the flash kernel asked for (None: the implementation's own on this GPU)
    kernel: str | None
    #: the GEMMs' sustained share asked for (None: the calibrated one)
    sustained: float | None
    #: the fastest fitting setting of each grid, fastest first (rank 1 first)
    ranking: tuple[Candidate, ...]
    #: every candidate, in the order considered
    candidates: tuple[Candidate, ...]
    #: the layout given with ``layout=``, scored and placed in the ranking (None if not given)
    user: Candidate | None = None
    assumed: tuple[str, ...] = field(default=())
    #: what is accepted but worth saying (a sequence past a rotary model's trained positions)
    warnings: tuple[str, ...] = field(default=())

    @property
    def precision(self) -> str:
        """The tensor-core precision the step is timed at and MFU is measured against: the
        recipe's (:func:`trainmath.memory.recipes.peak_precision`)."""
        return peak_precision(recipe(self.training.recipe))

    @property
    def share(self) -> float:
        """The sustained share of the benchmarks' tensor-core rates the times use."""
        return calibrated(self.gpu) if self.sustained is None else self.sustained

    @property
    def kernel_used(self) -> str:
        """The attention kernel the times use."""
        return attention_kernel(self.training.implementation, self.gpu, self.kernel)

    @property
    def expert_load(self) -> str:
        """The expert load fitting was judged at (:data:`trainmath.model.moe.EXPERT_LOADS`)."""
        return self.training.routing.load

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
