"""Post-training's trainer side at full size: one DPO step with a frozen reference model, and
the log-prob pass of GRPO/PPO, under FakeTensorMode.

**DPO** (kind ``dpo-step``), as TRL's ``DPOTrainer`` runs it (huggingface/trl):

- v0.28.0, ``trl/trainer/dpo_trainer.py``: ``get_batch_loss_metrics`` calls
  ``concatenated_forward(model, batch)`` (chosen and rejected concatenated by
  ``concatenated_inputs`` into 2b sequences, ONE forward, then ``selective_log_softmax`` of the
  logits against the next tokens, summed per sequence), *then* ``compute_ref_log_probs(batch)``:
  the same concatenated forward of the reference model under ``torch.no_grad()``; then
  ``dpo_loss``: ``-F.logsigmoid(beta * ((pc - rc) - (pr - rr)))``;
- the newest snapshot read (commit f2cd57710ae3, after v1.9.0), ``DPOTrainer._compute_loss``:
  the same order (the policy's ``outputs = model(**model_kwargs)`` on the 2b sequences, its
  per-token log-probs, then ``ref_outputs = self.ref_model(...)`` under ``torch.no_grad()``),
  with both ``outputs`` and ``ref_outputs`` (their logits) held as locals until the loss is
  returned; ``concatenated_forward`` is gone (the collator concatenates). This module follows
  that code: policy forward, policy log-probs, reference forward and log-probs (the policy's
  logits and saved activations alive meanwhile), loss, backward, the recipe's optimizer step
  (``step._one_step``). ``order="reference-first"`` runs the reference pass before the policy
  forward instead (what the policy's activations then do not sit under).
- With ``precompute_ref_log_probs=True`` TRL runs the reference over the dataset beforehand
  (``_precompute_ref_logps``) and drops the reference model from the step: not this record.

The policy is a step recipe of :mod:`.step` (its states after the second step are recorded as
``step.measure_step`` records them); the reference is the same architecture in bf16,
``eval()``, ``requires_grad_(False)``. Each sequence is ``s`` tokens, all of them completion
tokens (TRL's ``completion_mask`` all ones: the masking ops run, no token is masked); no
padding, no attention mask (one sequence per row).

**The log-prob pass** (kind ``logprob-pass``) of GRPO and PPO: TRL's
``GRPOTrainer._get_per_token_logps_and_entropies`` (``trl/trainer/grpo_trainer.py``, same
commit; ``_get_per_token_logps`` in v0.19.1) and verl's ``DataParallelPPOActor.compute_log_prob``
(``verl/workers/actor/dp_actor.py``, ``_forward_micro_batch``): under ``torch.no_grad()``, a
forward of a micro-batch of ``b`` sequences of ``s`` tokens, ``logits[:, :-1, :]``,
``logits.div_(temperature)``, ``selective_log_softmax`` (``trl/trainer/utils.py``) against the
next tokens; first through the policy, then through the reference. The policy's training
states are resident as after a step and ``zero_grad(set_to_none=True)`` (transformers'
Trainer zeroes the gradients after each optimizer step, before the next generation): its
parameters, fp32 master weights (where the recipe has them) and AdamW's moments, no gradients;
the states come from one real training step (``step._one_step``) on 8 tokens before the pass
(the states do not depend on the length). ``logits="fp32"`` upcasts the logits as
transformers' LlamaForCausalLM did before 4.45 (``logits = logits.float()`` inside forward, the
16-bit logits dropped at once) and OpenRLHF does; ``"bf16"`` keeps them 16-bit as TRL's newest
GRPO does (no upcast) and ``selective_log_softmax`` takes its row-by-row ``log_softmax`` path.
"""

from __future__ import annotations

import contextlib

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import step
from .models import Reference, _eager_mask_decisions, build, spec_of, vocab_of
from .tracking import AllocationTracker, distinct_bytes, dtype_name, local

F = torch.nn.functional

#: DPO's beta (TRL's DPOConfig default).
BETA = 0.1
ORDERS = ("trl", "reference-first")
#: Recipes of the log-prob pass: those whose states are set up here (no Megatron buffer, no FSDP).
LOGPROB_RECIPES = ("zero-bf16", "zero-fp16", "bf16-master-naive", "bf16-master-free-grads",
                   "autocast-fp32")
LOGITS = {"fp32": torch.float32, "bf16": None}

METHOD = (
    "dpo-step: validate/measure/post_training.py, TRL's DPOTrainer (v0.28.0 "
    "get_batch_loss_metrics: concatenated_forward of the policy, then compute_ref_log_probs; "
    "commit f2cd57710ae3 _compute_loss, the same order, both models' outputs held until the "
    "loss returns): 2b sequences (b chosen, b rejected) of s tokens in one forward of the "
    "policy, selective_log_softmax (trl/trainer/utils.py) of logits[:, :-1] against the next "
    "tokens summed per sequence, the same through a bf16 reference model (eval, "
    "requires_grad False) under torch.no_grad(), loss -logsigmoid(0.1((pc-rc)-(pr-rr))).mean(), "
    "backward, the recipe's optimizer step (as kind 'step'); two steps, the second recorded. "
    "Phases: forward (the policy and the loss), reference forward, backward, optimizer step. "
    "logprob-pass: TRL's GRPOTrainer._get_per_token_logps_and_entropies and verl's "
    "compute_log_prob: under torch.no_grad() a micro-batch of b sequences of s tokens through "
    "the policy, then the reference, logits upcast to fp32 inside the forward (or kept bf16), "
    "logits[:, :-1].div_(temperature), selective_log_softmax; the policy's states resident as "
    "after an optimizer step and zero_grad (parameters, masters, moments; no gradients). "
    "Peaks and categories as for kind 'step' ('reference weights': the reference model's)."
)


class PhaseTracker(AllocationTracker):
    """An :class:`AllocationTracker` that also keeps the live set at the peak of each phase in
    ``phases`` (the same lazy copy as the step's peak: just before the first free after it)."""

    def __init__(self, vocab: int | None = None, phases: tuple[str, ...] = ()) -> None:
        super().__init__(vocab=vocab)
        self.phases = phases
        self.phase_live: dict[str, list] = {}
        self.phase_op: dict[str, str] = {}
        self._phase_pending: str | None = None

    def _check_peak(self, op: str) -> None:
        if self.phase in self.phases and self.current > self.phase_peaks.get(self.phase, -1):
            self._phase_pending = self.phase
            self.phase_op[self.phase] = op
        super()._check_peak(op)

    def _settle(self) -> None:
        if self._phase_pending is not None:
            self.phase_live[self._phase_pending] = [(i, i.nbytes) for i in self.live.values()]
            self._phase_pending = None
        super()._settle()

    def set_phase(self, phase: str) -> None:
        self._settle()  # nothing was freed since the pending peaks: the live set is theirs
        super().set_phase(phase)

    def reset_peak(self) -> None:
        self._settle()
        self.phase_live, self.phase_op = {}, {}
        super().reset_peak()

    def phase_record(self, phase: str) -> dict:
        """{bytes, op, alive, largest} at the peak of ``phase``."""
        self._settle()
        entries = self.phase_live[phase]
        top = sorted(entries, key=lambda e: -e[1])[:8]
        return {"bytes": self.phase_peaks[phase], "op": self.phase_op[phase],
                "alive": self.by_category(entries),
                "largest": [[i.category(), i.op, i.dtype, list(i.shape), n, i.phase]
                            for i, n in top]}


def logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.logsumexp`` spelled out as ATen computes it (aten/src/ATen/native/ReduceOps.cpp,
    ``logsumexp_out_impl``: ``amax``, then ``sum_out(result, (self - maxes).exp_(), dims)``,
    ``log_().add_(maxes)``), so that its one temporary the size of ``x`` is seen: as a single
    op its allocations happen inside the kernel, out of a dispatch mode's sight."""
    maxes = torch.amax(x, dim, keepdim=True)
    maxes_squeezed = maxes.squeeze(dim)
    maxes_squeezed.masked_fill_(maxes_squeezed.abs() == float("inf"), 0)
    result = torch.sum((x - maxes).exp_(), dim)
    return result.log_().add_(maxes_squeezed)


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """TRL's ``selective_log_softmax`` (trl/trainer/utils.py, commit f2cd57710ae3), for an index
    of shape ``logits.shape[:-1]``: fp32 logits take the gathered logit minus a row-by-row
    ``logsumexp`` (:func:`logsumexp`); 16-bit logits a row-by-row ``log_softmax`` and gather."""
    index = index.unsqueeze(-1)
    if logits.dtype in (torch.float32, torch.float64):
        selected = torch.gather(logits, dim=-1, index=index)
        logsumexp_values = torch.stack([logsumexp(lg, dim=-1) for lg in logits])
        out = selected - logsumexp_values.unsqueeze(-1)
    else:
        rows = []
        for row_logits, row_labels in zip(logits, index, strict=True):
            row_logps = F.log_softmax(row_logits, dim=-1)
            rows.append(row_logps.gather(dim=-1, index=row_labels))
        out = torch.stack(rows)
    return out.squeeze(-1)


def logits_of(net: torch.nn.Module, tokens: torch.Tensor, upcast: torch.dtype | None = None):
    """The model's logits for ``tokens`` (transformers' ``model(input_ids=..., use_cache=False)
    .logits``; the reference model's LM head over its final norm), cast to ``upcast`` at once
    if given (the 16-bit logits are then dropped)."""
    if isinstance(net, Reference):
        logits = F.linear(net.hidden_states(tokens), net.head_weight())
    else:
        with _eager_mask_decisions():
            logits = net(input_ids=tokens, use_cache=False).logits
    return logits if upcast is None else logits.to(upcast)


def _sequence_logps(logits, tokens, completion_mask):
    """DPOTrainer._compute_loss: per-token log-probs of the next tokens, masked, summed."""
    shift_logits = logits[..., :-1, :]
    shift_labels = tokens[..., 1:]
    shift_mask = completion_mask[..., 1:]
    per_token = selective_log_softmax(shift_logits, shift_labels)
    per_token[shift_mask == 0] = 0.0
    return per_token.sum(dim=1)


def dpo_loss_fn(reference: torch.nn.Module, order: str = "trl", beta: float = BETA):
    """A ``loss_fn`` for :func:`.step.measure_step`: the DPO loss of the 2b concatenated
    sequences ``tokens`` (chosen first, then rejected), with ``reference``'s log-probs."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}; accepted: {', '.join(ORDERS)}")

    def reference_pass(tokens, mask, tracker):
        tracker.tag(reference.parameters(), "reference weights")
        tracker.tag(reference.buffers(), "reference weights")
        tracker.set_phase("reference forward")
        with torch.no_grad():
            ref_logits = logits_of(reference, tokens)
            ref_logps = _sequence_logps(ref_logits, tokens, mask)
        tracker.set_phase("forward")
        return ref_logits, ref_logps

    def loss(net, tokens, targets, tracker):
        mask = torch.ones_like(tokens)  # TRL's completion_mask: every token a completion token
        if order == "reference-first":
            ref_logits, ref_logps = reference_pass(tokens, mask, tracker)
        logits = logits_of(net, tokens)  # held until the loss returns, as outputs in TRL
        logps = _sequence_logps(logits, tokens, mask)
        if order == "trl":
            ref_logits, ref_logps = reference_pass(tokens, mask, tracker)
        chosen, rejected = logps.chunk(2, dim=0)
        ref_chosen, ref_rejected = ref_logps.chunk(2, dim=0)
        delta = (chosen - ref_chosen) - (rejected - ref_rejected)
        return -F.logsigmoid(beta * delta).mean()

    return loss


def measure_dpo_step(model: str | dict, implementation: str, recipe: str, s: int, b: int = 1, *,
                     order: str = "trl", foreach: bool = False, layers: int | None = None,
                     fake: bool = True) -> dict:
    """Two DPO steps of ``b`` pairs (2b sequences of ``s`` tokens) with a frozen bf16 reference
    model; the step's record (:func:`.step.measure_step`, the second step) plus ``reference``
    (its parameters and their bytes), ``reference_pass`` (the peak of the reference forward,
    what was alive then) and ``sequences``."""
    holder: dict = {}

    def prepare(net):  # inside the fake mode, before the tracker: the reference's weights exist
        ref = build(implementation, spec_of(model, s), torch.bfloat16, layers)
        ref.eval()
        ref.requires_grad_(False)
        holder["ref"] = ref

    trackers = []

    def make_tracker(vocab):
        trackers.append(PhaseTracker(vocab=vocab, phases=("reference forward",)))
        return trackers[-1]

    def loss_fn(net, tokens, targets, tracker):
        return holder.setdefault("loss", dpo_loss_fn(holder["ref"], order))(net, tokens, targets,
                                                                           tracker)

    out = step.measure_step(model, implementation, recipe, s, 2 * b, foreach=foreach,
                            layers=layers, fake=fake, prepare=prepare, loss_fn=loss_fn,
                            tracker_class=make_tracker)
    ref = holder["ref"]
    (tracker,) = trackers
    out["sequences"] = 2 * b
    out["reference"] = {"parameters_count": sum(p.numel() for p in ref.parameters()),
                        "weights": distinct_bytes(ref.parameters()),
                        "buffers": distinct_bytes(ref.buffers()),
                        "dtype": sorted({dtype_name(p.dtype) for p in ref.parameters()})}
    out["reference_pass"] = tracker.phase_record("reference forward")
    return out


def measure_logprob_pass(model: str | dict, implementation: str, recipe: str, s: int,
                         b: int = 1, *, logits: str = "fp32", temperature: float = 1.0,
                         layers: int | None = None, fake: bool = True) -> dict:
    """The no-grad log-prob pass of one micro-batch of ``b`` sequences of ``s`` tokens through
    the policy (its states resident after a step and zero_grad), then the bf16 reference."""
    if recipe not in LOGPROB_RECIPES:
        raise ValueError(f"recipe {recipe!r}; accepted: {', '.join(LOGPROB_RECIPES)}")
    if logits not in LOGITS:
        raise ValueError(f"logits {logits!r}; accepted: {', '.join(LOGITS)}")
    spec = spec_of(model, s)
    param_dtype, autocast = step._recipe_dtypes(recipe)
    phases = ("policy log-probs", "reference log-probs")
    fake_mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with fake_mode:
        torch.manual_seed(0)
        net = build(implementation, spec, param_dtype, layers)
        ref = build(implementation, spec, torch.bfloat16, layers)
        ref.eval()
        ref.requires_grad_(False)
        params = list(net.parameters())
        vocab = vocab_of(spec)
        tracker = PhaseTracker(vocab=vocab, phases=phases)
        with tracker:
            tracker.tag(params, "parameters")
            tracker.tag(net.buffers(), "parameters")
            tracker.tag(ref.parameters(), "reference weights")
            tracker.tag(ref.buffers(), "reference weights")
            master = ([p.detach().float() for p in params] if recipe != "autocast-fp32"
                      else None)
            tracker.tag(master or (), "master weights")
            opt = torch.optim.AdamW(master or params, lr=1e-4, foreach=False)
            warm = torch.randint(0, vocab, (1, 8))
            step._one_step(net, recipe, params, master, opt, warm, warm, autocast, tracker)
            del warm
            tracker.set_phase("zero_grad")
            for p in params:
                p.grad = None
            for m in master or ():
                m.grad = None
            net.eval()
            tokens = torch.randint(0, vocab, (b, s))
            states = step._states(params, master, opt)
            resident = tracker.current
            resident_alive = tracker.now()
            tracker.reset_peak()
            made = {}
            for phase, m in zip(phases, (net, ref)):
                tracker.set_phase(phase)
                cast = (torch.autocast("cpu", dtype=autocast) if autocast
                        else contextlib.nullcontext())
                with torch.no_grad(), cast:
                    lg = logits_of(m, tokens, LOGITS[logits])
                    made[phase] = (local(lg).untyped_storage().nbytes(), dtype_name(lg.dtype))
                    lg = lg[:, :-1, :]
                    lg.div_(temperature)
                    made[phase + " result"] = selective_log_softmax(lg, tokens[:, 1:])
                    del lg
            tracker.set_phase("after")
            logits_bytes, logits_dtype = made[phases[0]]
            result = {
                "parameters_count": sum(p.numel() for p in params),
                "states": states,
                "reference": {"parameters_count": sum(p.numel() for p in ref.parameters()),
                              "weights": distinct_bytes(ref.parameters()),
                              "buffers": distinct_bytes(ref.buffers()),
                              "dtype": sorted({dtype_name(p.dtype) for p in ref.parameters()})},
                "resident": {"bytes": resident, "alive": resident_alive},
                "logits": {"bytes": logits_bytes, "dtype": logits_dtype},
                "peak": {"bytes": tracker.peak, "phase": tracker.peak_phase,
                         "op": tracker.peak_op, "alive": tracker.peak_breakdown(),
                         "largest": tracker.peak_largest()},
                "parts": {"resident": resident, "logits": logits_bytes,
                          "working": tracker.peak - resident - logits_bytes},
                "phase_peaks": dict(tracker.phase_peaks),
                "passes": {phase: tracker.phase_record(phase) for phase in phases},
            }
    return result
