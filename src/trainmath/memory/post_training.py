"""What post-training keeps on a trainer's GPU besides the policy: frozen models and log-prob passes.

A post-training step holds several models at once (Ouyang et al. 2022, *Training language models
to follow instructions with human feedback*, §3.5: a policy, a frozen reference for the KL
penalty, a reward model and a value function). DPO (Rafailov et al. 2023, Eq. 7) keeps only the
policy and the reference; GRPO (Shao et al. 2024, *DeepSeekMath*, §4.1) drops the value
function and compares a group of completions per prompt. A frozen model holds its weights and
nothing else: no gradients, no optimizer states, no activations kept for backward.

Two passes run without gradients and hold more than their weights while they run:

- the **log-prob pass** over a micro-batch of b sequences of s tokens: the output layer's
  16-bit logits, b·s·V values, and either their fp32 copy for the log-softmax (older
  transformers' ``logits.float()``, OpenRLHF) or, with today's transformers, which leave the
  logits in bf16, TRL's ``selective_log_softmax`` (``trl/trainer/utils.py``), which takes the
  log-softmax one sequence at a time (:data:`LOGIT_DTYPES`); and the hidden states of the
  layer running. Both were measured under fake tensors (validate/measure/post_training.py);
- the **reward or value pass**, whose head writes one number per token: only the hidden states.

>>> print(frozen_weights(8_030_261_248))   # Llama 3 8B's reference in bf16
16.1 GB
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..model.shape import ModelShape
from ..units import Bytes, positive_int

#: The algorithms, with the models each step holds.
ALGORITHMS = {
    "dpo": "policy and reference; a chosen and a rejected answer per example (Rafailov et al. 2023)",
    "ppo": "policy, reference, reward model and critic (Ouyang et al. 2022, §3.5)",
    "grpo": "policy and reference, a group of completions per prompt, no critic "
            "(Shao et al. 2024, §4.1)",
}
#: Where the rollout engine runs.
PLACEMENTS = {
    "colocated": "the engine on the trainer's GPUs, beside the trainer in every phase",
    "split": "the engine on GPUs of its own",
}
#: The reference model: a loaded copy; none (TRL's GRPO with beta 0); precomputed before training
#: (DPO's ``precompute_ref_log_probs``); the base with the adapter off (LoRA, QLoRA).
REFERENCES = ("model", "none", "precomputed", "adapter")
#: Bytes of one weight of a frozen model kept in 16-bit (bf16 or fp16), as TRL, verl and OpenRLHF
#: load the reference and reward models (``torch_dtype=torch.bfloat16``).
FROZEN_BYTES = 2


def frozen_weights(params: int | Fraction, *, shards: int = 1, value_bytes: int = FROZEN_BYTES) -> Bytes:
    """A frozen model's weights on one device: ``params`` × ``value_bytes`` over ``shards`` (the
    ZeRO-3/FSDP group that shards it, 1 when every device holds a whole copy)."""
    shards = positive_int("shards", shards)
    value_bytes = positive_int("value_bytes", value_bytes)
    return Bytes(Fraction(params) * value_bytes / shards)


#: How a log-prob pass holds its logits: "fp32" upcasts them for the log-softmax (older
#: transformers' ``logits.float()``, OpenRLHF), "bf16" keeps the head's 16-bit logits and takes
#: the log-softmax one sequence at a time (TRL's ``selective_log_softmax`` on bf16 logits).
LOGIT_DTYPES = ("fp32", "bf16")


@dataclass(frozen=True)
class LogProbPass:
    """The memory one no-grad log-prob pass adds to the weights already resident, on one device."""

    #: the output layer's 16-bit logits, b·s·V/tp × 2 bytes
    logits: Bytes
    #: fp32: their fp32 copy, b·s·V/tp × 4 bytes; bf16: two rows of one sequence's log-softmax,
    #: 2·s·V/tp × 2 bytes
    upcast: Bytes
    #: the hidden states of the layer running: input and output, b·s·h × 2 × 2 bytes
    hidden: Bytes

    @property
    def total(self) -> Bytes:
        """Everything the pass holds at its peak, past the weights."""
        return self.logits + self.upcast + self.hidden


def logprob_pass(model: ModelShape, *, seq_len: int, micro_batch: int, tp: int = 1,
                 logits: bool = True, dtype: str = "fp32") -> LogProbPass:
    """The working set of a no-grad forward over ``micro_batch`` sequences of ``seq_len``
    tokens (module docstring), its log-softmax in ``dtype`` (:data:`LOGIT_DTYPES`): with
    ``logits`` False (a reward or value head) only the hidden states. The vocabulary is split
    over ``tp`` ranks as Megatron's vocab-parallel head does. Checked against fake-tensor
    measurements of TRL's ``selective_log_softmax`` (validate/measure/post_training.py)."""
    s = positive_int("seq_len (s)", seq_len)
    b = positive_int("micro_batch (b)", micro_batch)
    tp = positive_int("tp", tp)
    if dtype not in LOGIT_DTYPES:
        raise ValueError(f"unknown log-prob dtype {dtype!r}; accepted: {', '.join(LOGIT_DTYPES)}")
    tokens = s * b
    values = Fraction(tokens * model.vocab, tp) if logits else Fraction(0)
    if dtype == "fp32":
        extra = values * 4
    else:  # one sequence's log_softmax and its gathered copy, in bf16
        extra = Fraction(2 * s * model.vocab * 2, tp) if logits else Fraction(0)
    return LogProbPass(logits=Bytes(values * 2), upcast=Bytes(extra),
                       hidden=Bytes(tokens * model.hidden * 2 * 2))


def critic_params(params: int, model: ModelShape) -> int:
    """A value model's parameters: the policy's, with the output layer (V·h) replaced by a value
    head of one output (h weights; OpenRLHF's ``value_head = nn.Linear(h, 1, bias=False)`` in
    ``openrlhf/models/model.py``, verl's critic likewise). A tied output layer is the embedding,
    which the critic keeps: then only the head's h weights are added."""
    head = 0 if model.tied_embeddings else model.vocab * model.hidden
    return params - head + model.hidden
