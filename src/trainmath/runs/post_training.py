"""Post-training's memory per device, phase by phase: DPO, PPO and GRPO, colocated or split.

A post-training step is not one pass. With a rollout engine (PPO, GRPO) it **generates** (the
engine writes completions into its KV cache), computes **log-probs** (no-grad forwards of the
policy, the frozen reference and, in PPO, the reward and value models), then **trains** the
policy (and, in PPO, the critic). DPO generates nothing: it reads the reference's log-probs of a
chosen and a rejected answer (Rafailov et al. 2023, Eq. 7) and trains on both at once (TRL's
``DPOTrainer.concatenated_forward``: 2b sequences per micro-batch of b examples). What each
phase holds:

====================  ===========================================================================
generation            the trained models' states (unless offloaded, as verl's ``param_offload``
                      and ``optimizer_offload`` do), the frozen models, and the engine awake: the
                      share of the GPU vLLM reserves, ``gpu_memory_utilization`` × its total
                      (:mod:`trainmath.memory.rollout`)
log-probs             the same models, the engine asleep (its sleep level) or still awake, and
                      the largest no-grad pass (:func:`trainmath.memory.post_training.logprob_pass`)
training              the policy's training step at its peak (:func:`trainmath.runs.estimates.estimate`),
                      beside the frozen models, the critic's states and the engine's residue
critic training       (PPO) the critic's step at its peak, beside the rest
====================  ===========================================================================

**Colocated** (TRL's ``vllm_mode="colocate"``, verl's hybrid engine): the engine shares the
trainer's GPUs and every phase is on the same device. **Split** (TRL's server mode, OpenRLHF's
``--vllm_num_engines``): the engine has GPUs of its own and the trainer's phases hold no engine.
Frozen models are kept in 16-bit and sharded like the policy's weights (over the ZeRO-3/FSDP
group; a whole copy otherwise). With an adapter, the reference is the base with the adapter
switched off (peft's ``disable_adapter``, as TRL and verl do): no second copy.

>>> from trainmath.runs.description import run
>>> e = post_training_estimate(run("llama-3-8b", dp=8, zero_stage=3, gpu="h100-sxm",
...                                  recompute="full"), PostTraining("dpo", prompt_len=512,
...                                                                 response_len=512))
>>> [p.name for p in e.phases], e.peak().name
(['reference log-probs', 'training'], 'training')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from ..derivations import Derivation, bytes_text
from ..memory.post_training import (ALGORITHMS, LOGIT_DTYPES, PLACEMENTS, REFERENCES, critic_params,
                                     frozen_weights, logprob_pass)
from ..memory.peak import Moment, StepPeak
from ..memory.rollout import Engine, EngineMemory, engine_memory
from ..memory.recipes import recipe
from ..model.shape import modified, param_count
from ..parallel.layout import Batch
from ..problems import Invalid, Problem, check
from ..units import Bytes, positive_int
from .description import Run
from .estimates import Estimate, estimate

#: The phases, in the order a step runs them.
PHASES = ("generation", "reference log-probs", "log-probs", "training", "critic training")


@dataclass(frozen=True)
class PostTraining:
    """One post-training setup (module docstring); the policy's own training is the
    :class:`~trainmath.runs.description.Run`.

    ``prompts`` is how many prompts one engine generates for at once, each ``group_size`` times
    (GRPO; default 8, TRL's ``num_generations``); ``logprob_micro_batch`` the sequences of one
    log-prob pass (default: the run's micro-batch); ``rollout_gpus`` the engine's GPUs when split
    (default: its tp). ``reward_model`` defaults to True for PPO and False otherwise (rule-based
    rewards, as GRPO recipes use).
    """

    algorithm: str
    placement: str = "colocated"
    engine: Engine = Engine()
    prompt_len: int = 512
    response_len: int = 1024
    prompts: int = 1
    group_size: int | None = None
    reference: str | None = None
    reward_model: bool | None = None
    offload_reference: bool = False
    offload_policy: bool = False
    logprob_micro_batch: int | None = None
    rollout_gpus: int | None = None
    #: how the log-prob passes hold their logits (:data:`~trainmath.memory.post_training.LOGIT_DTYPES`)
    logprob_dtype: str = "fp32"

    def __post_init__(self) -> None:
        problems = []
        if self.algorithm not in ALGORITHMS:
            problems.append(Problem(("algorithm",), f"unknown post-training algorithm "
                                    f"{self.algorithm!r}; accepted: {', '.join(ALGORITHMS)}"))
        if self.placement not in PLACEMENTS:
            problems.append(Problem(("placement",), f"unknown placement {self.placement!r}; "
                                    f"accepted: {', '.join(PLACEMENTS)}"))
        if not isinstance(self.engine, Engine):
            problems.append(Problem(("engine",), f"engine must be an Engine, got {self.engine!r}"))
        for name in ("prompt_len", "response_len", "prompts"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        for name in ("group_size", "logprob_micro_batch", "rollout_gpus"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.logprob_dtype not in LOGIT_DTYPES:
            problems.append(Problem(("logprob_dtype",), f"unknown log-prob dtype "
                                    f"{self.logprob_dtype!r}; accepted: {', '.join(LOGIT_DTYPES)}"))
        if self.reference is not None and self.reference not in REFERENCES:
            problems.append(Problem(("reference",), f"unknown reference {self.reference!r}; "
                                    f"accepted: {', '.join(REFERENCES)}"))
        check(problems)
        dpo = self.algorithm == "dpo"
        if self.group_size is not None and self.algorithm != "grpo":
            problems.append(Problem(("group_size",), f"group_size {self.group_size} is GRPO's "
                                    f"(completions per prompt); {self.algorithm} takes none"))
        if self.reference == "precomputed" and not dpo:
            problems.append(Problem(("reference",), "reference 'precomputed' is DPO's "
                                    "precompute_ref_log_probs; a rollout's log-probs are of new "
                                    "completions: accepted for ppo and grpo: model, none, adapter"))
        if dpo and self.placement == "split":
            problems.append(Problem(("placement",), "dpo generates nothing, so it has no engine "
                                    "to place: accepted: colocated (the default)"))
        if self.rollout_gpus is not None and self.placement != "split":
            problems.append(Problem(("rollout_gpus",), f"rollout_gpus {self.rollout_gpus} needs "
                                    "placement 'split' (colocated engines use the trainer's GPUs)"))
        if self.reward_model and dpo:
            problems.append(Problem(("reward_model",), "dpo uses no reward model (its loss "
                                    "compares the chosen and rejected answers)"))
        if self.offload_policy and dpo:
            problems.append(Problem(("offload_policy",), "offload_policy moves the states out "
                                    "during generation, and dpo does not generate"))
        check(problems)

    @property
    def seq_len(self) -> int:
        """Tokens of one sequence the trainer sees: prompt and response."""
        return self.prompt_len + self.response_len

    @property
    def engine_len(self) -> int:
        """The engine's max_model_len as applied: as given, else prompt and response (as TRL and
        verl set it)."""
        return self.engine.max_model_len or self.seq_len

    @property
    def generations(self) -> int:
        """Completions per prompt: ``group_size`` for GRPO (default 8), 1 otherwise."""
        if self.algorithm != "grpo":
            return 1
        return 8 if self.group_size is None else self.group_size

    def reference_for(self, run: Run) -> str:
        """The reference as given, else the base with its adapter off for an adapter run, else a
        loaded copy."""
        if self.reference is not None:
            return self.reference
        return "adapter" if run.adapter is not None else "model"

    def has_reward_model(self) -> bool:
        """Whether a reward model is loaded: as given, else for PPO only."""
        return self.algorithm == "ppo" if self.reward_model is None else self.reward_model


@dataclass(frozen=True)
class Phase(Moment):
    """What one phase holds on one device of ``gpus`` ("trainer" or "rollout"), part by part: a
    :class:`~trainmath.memory.peak.Moment` of the post-training step, named by its phase."""

    gpus: str = "trainer"

    @property
    def name(self) -> str:
        """The phase: one of :data:`PHASES`."""
        return self.phase


@dataclass(frozen=True)
class PostTrainingEstimate:
    """Memory per device of each phase of a post-training step (module docstring)."""

    run: Run
    post: PostTraining
    #: the policy's training step, as :func:`~trainmath.runs.estimates.estimate` gives it (DPO: 2b
    #: sequences per micro-batch)
    policy: Estimate
    #: PPO's critic's training step (the policy's shape, a value head for the output layer)
    critic: Estimate | None
    #: the rollout engine on one of its GPUs (None for DPO)
    engine: EngineMemory | None
    phases: tuple[Phase, ...]
    #: the reference as loaded: one of :data:`~trainmath.memory.post_training.REFERENCES`
    reference: str
    #: sequences one engine generates at once, and the KV-cache tokens they need
    rollout_sequences: int = 0
    kv_tokens_needed: int = 0
    derivations: tuple[Derivation, ...] = ()

    def phase(self, name: str, gpus: str = "trainer") -> Phase:
        """The phase called ``name`` on ``gpus``."""
        for p in self.phases:
            if p.name == name and p.gpus == gpus:
                return p
        raise ValueError(f"no phase {name!r} on the {gpus} GPUs; this run has: "
                         + ", ".join(f"{p.name} ({p.gpus})" for p in self.phases))

    def peak(self, gpus: str = "trainer") -> Phase:
        """The phase that holds the most on ``gpus`` (ties: the earliest)."""
        mine = [p for p in self.phases if p.gpus == gpus]
        if not mine:
            raise ValueError(f"no phase on the {gpus} GPUs; accepted: "
                             + ", ".join(sorted({p.gpus for p in self.phases})))
        return StepPeak(tuple(mine)).peak

    @property
    def engine_len(self) -> int:
        """The engine's max_model_len as applied (:attr:`PostTraining.engine_len`)."""
        return self.post.engine_len

    @property
    def kv_holds(self) -> int | None:
        """Sequences of the rollout the engine's KV cache holds at once (None without one)."""
        if self.engine is None:
            return None
        per = self.kv_tokens_needed // self.rollout_sequences
        return min(self.rollout_sequences, self.engine.kv.tokens // per)

    def fits(self, gpus: str = "trainer") -> bool | None:
        """Whether the largest phase on ``gpus``, with the run's overhead, fits one GPU's memory
        (None without a GPU)."""
        if self.run.gpu is None:
            return None
        return self.peak(gpus).total + self.run.overhead <= self.run.gpu.memory

    @property
    def groups(self) -> tuple[str, ...]:
        """The GPU groups the phases are on: trainer, and rollout when split."""
        return tuple(dict.fromkeys(p.gpus for p in self.phases))


def post_training_problems(run: Run, post: PostTraining) -> list[Problem]:
    """How ``post`` does not fit ``run``, each naming the fields and what is accepted."""
    found = []
    if run.shape is None:
        found.append(Problem(("model",), "post-training needs a model shape (a preset, a config "
                             "or the shape flags): the log-prob passes and the KV cache depend on "
                             "it, not only on the parameter count"))
        return found
    if run.batch.seq_len is not None and run.batch.seq_len != post.seq_len:
        found.append(Problem(("seq_len", "prompt_len", "response_len"),
                             f"seq_len {run.batch.seq_len} differs from prompt_len + response_len "
                             f"= {post.seq_len}: give one (the trainer's sequences are the prompt "
                             "and its response)"))
    if post.algorithm != "dpo" and run.gpu is None:
        found.append(Problem(("gpu",), f"{post.algorithm}'s rollout engine reserves a share of "
                             "the GPU's total memory (gpu_memory_utilization): give a GPU kind or "
                             "its memory"))
    reference = post.reference_for(run)
    if reference == "adapter" and run.adapter is None:
        found.append(Problem(("reference",), "reference 'adapter' (the base with the adapter "
                             "off) needs a LoRA or QLoRA run; accepted without one: model, none"
                             + (", precomputed" if post.algorithm == "dpo" else "")))
    if post.algorithm != "dpo" and post.placement == "colocated" and \
            run.layout.gpus % post.engine.tp:
        found.append(Problem(("rollout_tp",), f"a colocated engine's tp {post.engine.tp} must "
                             f"divide the trainer's {run.layout.gpus} GPUs"))
    if post.rollout_gpus is not None and post.rollout_gpus % post.engine.tp:
        found.append(Problem(("rollout_gpus", "rollout_tp"), f"rollout_gpus {post.rollout_gpus} "
                             f"must be a multiple of the engine's tp {post.engine.tp}"))
    return found


def post_training_estimate(run: Run, post: PostTraining) -> PostTrainingEstimate:
    """Each phase of ``post`` on the trainer's GPUs (and the engine's, when split), for the
    policy trained as ``run`` (module docstring). Raises :class:`~trainmath.problems.Invalid`
    naming every problem of the pair."""
    if not isinstance(post, PostTraining):
        raise ValueError(f"post must be a PostTraining, got {post!r}")
    check(post_training_problems(run, post))
    dpo = post.algorithm == "dpo"
    b = run.batch.micro_batch
    trained = replace(run, batch=Batch(post.seq_len, 2 * b if dpo else b, run.batch.global_batch))
    policy = estimate(trained)
    shape, lay, t = trained.shape, trained.layout, trained.training
    reference = post.reference_for(run)
    shards = lay.zero_group if t.zero_stage == 3 else 1
    on_device = Fraction(policy.device.params)  # the policy's parameters on this device (tp, pp)
    whole = trained.params  # frozen models are the policy's size

    def states(e: Estimate) -> Bytes:
        """What a trained model keeps between its steps: zero_grad(set_to_none=True), PyTorch's
        default since 2.0, frees the gradients; Megatron's contiguous gradient buffer stays."""
        d = e.device
        grads = d.gradients if e.training.recipe == "megatron" else Bytes(0)
        return d.weights + grads + d.master_weights + d.optimizer_states

    ref = frozen_weights(on_device, shards=shards) if reference == "model" else Bytes(0)
    reward = (frozen_weights(on_device * critic_params(whole, shape) / whole, shards=shards)
              if post.has_reward_model() else Bytes(0))
    critic = None
    if post.algorithm == "ppo":
        critic = estimate(replace(trained, model=modified(shape, tied_embeddings=True)))
    policy_states = states(policy)
    critic_states = Bytes(0) if critic is None else states(critic)
    frozen = (("reference weights", ref), ("reward model weights", reward))

    engine = None
    sequences = needed = 0
    if not dpo:
        eng = replace(post.engine, max_model_len=post.engine_len)
        engine = engine_memory(shape, eng, gpu_total=run.gpu.memory)
        sequences = min(post.prompts * post.generations, eng.max_num_seqs)
        per_seq = -(-post.seq_len // eng.block_size) * eng.block_size
        needed = sequences * per_seq
    colocated = engine is not None and post.placement == "colocated"
    residue = (("rollout engine, asleep" if engine.sleep_level else "rollout engine, awake",
                engine.idle()),) if colocated else ()

    phases = []
    if engine is not None:
        moved = post.offload_policy
        held = (("policy states", Bytes(0) if moved else policy_states),
                ("reference weights", Bytes(0) if post.offload_reference else ref),
                ("reward model weights", reward),
                ("critic states", Bytes(0) if moved else critic_states))
        awake = (("rollout engine, awake", engine.awake()),)
        if colocated:
            phases.append(Phase("generation", "the engine generates the rollout",
                                (*held, *awake)))
        else:
            phases.append(Phase("generation", "the engine on its own GPUs", awake,
                                gpus="rollout"))
    passes = _passes(trained, post, reference, dpo)
    largest = max(passes, key=lambda p: p[1].n)
    if dpo and reference == "precomputed":
        phases.append(Phase("reference log-probs", "before training: the policy at "
                            "step 0 reads the dataset once (no optimizer states yet)",
                            (("policy weights", policy.device.weights), largest)))
    elif dpo:
        phases.append(Phase("reference log-probs", "the reference reads the chosen "
                            "and rejected answers, no gradients",
                            (("policy states", policy_states), *frozen, largest)))
    else:  # verl's offload loads only the parameters back for a log-prob pass
        loaded = policy.device.weights + policy.device.master_weights
        critic_loaded = (Bytes(0) if critic is None else
                         critic.device.weights + critic.device.master_weights)
        phases.append(Phase("log-probs", "no-grad passes of "
                            + ", ".join(name for name, _ in passes) + "; the largest counted"
                            + ("; the trained models' parameters loaded back, their gradients "
                               "and optimizer states still offloaded" if post.offload_policy else ""),
                            (("policy parameters" if post.offload_policy else "policy states",
                              loaded if post.offload_policy else policy_states), *frozen,
                             ("critic parameters" if post.offload_policy else "critic states",
                              critic_loaded if post.offload_policy else critic_states),
                             *residue, largest)))
    ref_in_training = Bytes(0) if post.offload_reference or reference == "precomputed" else ref
    step, when = policy.peak.bytes, f"the policy's step at its peak ({policy.peak.phase})"
    if dpo:
        step, when = _dpo_step(policy, post, largest[1] if reference in ("model", "adapter")
                               else Bytes(0))
    phases.append(Phase("training", when,
                        (("policy step", step), ("reference weights", ref_in_training),
                         ("reward model weights", reward), ("critic states", critic_states),
                         *residue)))
    if critic is not None:
        phases.append(Phase("critic training", f"the critic's step at its peak "
                            f"({critic.peak.phase})",
                            (("critic step", _without_logits(critic)), ("policy states", policy_states),
                             ("reference weights", ref_in_training), ("reward model weights", reward),
                             *residue)))
    est = PostTrainingEstimate(run=trained, post=post, policy=policy, critic=critic,
                               engine=engine, phases=tuple(phases), reference=reference,
                               rollout_sequences=sequences, kv_tokens_needed=needed)
    return replace(est, derivations=_derivations(est))


def _passes(run: Run, post: PostTraining, reference: str, dpo: bool):
    """The no-grad passes of the log-prob phase, each with its working set."""
    shape, lay = run.shape, run.layout
    # DPO: chosen and rejected concatenated (the run's micro-batch is already 2b sequences)
    if post.logprob_micro_batch is not None:
        seqs = 2 * post.logprob_micro_batch if dpo else post.logprob_micro_batch
    else:
        seqs = run.batch.micro_batch
    found = []
    lp = logprob_pass(shape, seq_len=post.seq_len, micro_batch=seqs, tp=lay.tp,
                      dtype=post.logprob_dtype).total
    if dpo:
        found.append(("reference log-prob pass", lp))
        return found
    if recipe(run.training.recipe).autocast:  # autocast's cache: a bf16 copy of every matrix
        found.append(("policy log-prob pass", lp + autocast_copies(shape, lay.tp)))
    else:
        found.append(("policy log-prob pass", lp))
    if reference != "none":
        found.append(("reference log-prob pass", lp))
    head = logprob_pass(shape, seq_len=post.seq_len, micro_batch=seqs, tp=lay.tp,
                        logits=False).total
    if post.has_reward_model():
        found.append(("reward pass", head))
    if post.algorithm == "ppo":
        found.append(("value pass", head))
    return found


def _dpo_step(policy: Estimate, post: PostTraining, reference_pass: Bytes) -> tuple[Bytes, str]:
    """DPO's training step at its peak, in TRL's order (``DPOTrainer``: the policy's forward over
    the 2b concatenated sequences, then the reference's, then the loss, backward and step).

    DPO's loss is no cross-entropy: the policy keeps its 16-bit logits and saves a 16-bit
    log-softmax of 2b·(s−1) rows for backward (TRL's ``selective_log_softmax``), where the
    standard loss keeps an fp32 copy and saves an fp32 log-softmax; the reference's pass then
    runs beside the policy's activations. Measured under fake tensors
    (validate/measure/post_training.py); the backward moment, never the measured peak, is
    counted with two 16-bit tensors over the vocabulary in place of the loss's two fp32 ones."""
    t, shape = policy.training, policy.run.shape
    if t.loss != "standard" or policy.layer is None:
        return policy.peak.bytes, f"the policy's step at its peak ({policy.peak.phase})"
    tp = policy.run.layout.tp
    seqs, s = policy.run.batch.micro_batch, post.seq_len
    values = Fraction(seqs * s * shape.vocab, tp)
    ce_saved = Bytes(values * 4)  # the fp32 log-softmax the standard loss saves
    rows = Bytes(Fraction(seqs * (s - 1) * shape.vocab * 2, tp))  # DPO's bf16 log-softmax
    logits16 = Bytes(values * 2)
    best, when = Bytes(0), ""
    for m in policy.peak.moments:
        parts = dict(m.parts)
        if m.phase == "forward":
            total = m.total - parts["logits"] - ce_saved + rows + logits16 + reference_pass
            words = ("the reference's forward after the policy's, beside its activations and "
                     "16-bit logits (TRL's order)" if reference_pass.n else
                     "the policy's forward: its activations and 16-bit logits")
        elif m.phase == "backward" and "logits" in parts:
            total = m.total - parts["logits"] - ce_saved + rows + logits16 * 2
            words = "the loss's gradient: two 16-bit tensors over the vocabulary"
        else:
            total, words = m.total, m.when
        if total > best:
            best, when = total, f"{words} ({m.phase})"
    return best, when


def autocast_copies(shape, tp: int = 1) -> Bytes:
    """The bf16 copies ``torch.autocast`` caches of every matrix a forward multiplies, even under
    no_grad: 2 bytes per weight of the linear layers and the output head (not the embedding or
    the norms, which it does not cast), over ``tp``. Measured under fake tensors
    (validate/measure/post_training.py: 15,009,316,864 B for Llama 3 8B)."""
    embedding = shape.vocab * shape.hidden
    head = embedding if shape.tied_embeddings else 0
    norms = (2 * shape.layers + 1) * shape.hidden
    return Bytes(Fraction(2 * (param_count(shape) - embedding + head - norms), tp))


def _without_logits(e: Estimate) -> Bytes:
    """The critic's step peak without the output layer's logits: its value head writes one
    number per token, not V."""
    return max((sum((b for k, b in m.parts if k != "logits"), Bytes(0)) for m in e.peak.moments),
               key=lambda b: b.n)


#: Where each phase's parts come from.
_SOURCES = {
    "generation": "the engine's share, gpu_memory_utilization × the GPU's total, and its CUDA "
                  "graphs (vLLM's gpu_worker.py, trainmath.memory.rollout), beside what the "
                  "trainer keeps resident (verl's offload, TRL's colocate mode)",
    "reference log-probs": "TRL's DPOTrainer (compute_ref_log_probs, selective_log_softmax); "
                           "checked against fake-tensor measurements",
    "log-probs": "TRL's GRPOTrainer and verl's compute_log_prob: no-grad passes, the logits in "
                 "fp32 or bf16; checked against fake-tensor measurements",
    "training": "the policy's step (trainmath.runs.estimates; DPO in TRL's order), beside the "
                "frozen models and the engine's residue",
    "critic training": "the critic's step (the policy's shape with a value head, OpenRLHF's "
                       "and verl's critics), beside the rest",
}


def _derivations(e: PostTrainingEstimate) -> tuple[Derivation, ...]:
    """Each phase's arithmetic: what it holds, added up."""
    out = []
    for p in e.phases:
        alive = p.as_dict()
        total = sum((v.n for v in alive.values()), Fraction(0))
        out.append(Derivation(
            f"{p.name} ({p.gpus} GPUs)", " + ".join(alive) or "0",
            tuple((k, bytes_text(v.n)) for k, v in alive.items()),
            " + ".join(bytes_text(v.n) for v in alive.values()) + f" = {bytes_text(total)}",
            p.total, Bytes(total), _SOURCES[p.name], "posttraining", p.when))
    return tuple(out)


__all__ = ["ALGORITHMS", "PLACEMENTS", "REFERENCES", "PHASES", "PostTraining", "Phase",
           "PostTrainingEstimate", "post_training_estimate", "post_training_problems", "Invalid"]
