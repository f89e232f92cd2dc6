"""The configurations measured, each with a stable id, and the document they make."""

from __future__ import annotations

import datetime
import functools
import json
import platform
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import (checkpointing, context, finetune, hfconfigs, pipeline, post_training, saved,
               shapes, step, techniques, tensor_parallel)

SCHEMA = "trainmath-measurements/1"
OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "_data" / "measurements.json"

MODELS = tuple(name for name in shapes.SHAPES if name not in shapes.MOE)
HF_MODELS = tuple(name for name, s in shapes.SHAPES.items() if s["family"] in ("llama", "mistral"))
LENGTHS = (2048, 4096)
FINETUNE = ((16, ("q", "v")), (64, ("q", "k", "v", "o", "gate", "up", "down")))
MASTER_RECIPES = ("zero-bf16", "megatron-bf16", "bf16-master-naive", "bf16-master-free-grads")
#: Today's families, from their config.json (hfconfigs): saved at both lengths with each
#: attention transformers supports for them, and a zero-bf16 step. The quick subset holds the
#: cheapest that cover multi-head latent attention, routed experts and attention sinks (about
#: 3 s each; the DeepSeek-V3 step about 6 s). DeepSeek-V3's step runs eager attention: SDPA
#: takes a CPU-only fallback for its unequal head dims (hfconfigs).
CONFIG_MODELS = tuple(hfconfigs.CONFIG_FILES)
CONFIG_FAST = ("saved/deepseek-v3/hf-sdpa/bf16/s2048-b1", "saved/gpt-oss-20b/hf-eager/bf16/s2048-b1",
               "step/deepseek-v3/hf-eager/zero-bf16/s2048-b1")


#: Kinds of a whole step with a memory technique of issue 24 (techniques.py): a chunked loss,
#: activations offloaded to host memory.
TECHNIQUES = ("chunked-loss-step", "act-offload-step")
#: Kinds of one rank of a context-parallel group (context.py): its saved tensors, a whole step.
CONTEXT_PARALLEL = ("cp-saved", "cp-step")
#: Kinds of post-training's trainer side (post_training.py): one DPO step with a frozen
#: reference model, the no-grad log-prob pass of GRPO/PPO through the policy and the reference.
POST_TRAINING = ("dpo-step", "logprob-pass")


@dataclass(frozen=True)
class Config:
    kind: str  # "saved" or "step"
    model: str
    implementation: str
    s: int
    b: int = 1
    precision: str = ""  # saved: "bf16" or "autocast-bf16"
    recipe: str = ""  # step: one of step.RECIPES
    foreach: bool = False
    dp: int = 1
    rank: int = 0
    fast: bool = field(default=False, compare=False)  # in the quick subset the tests always run
    rank_r: int = 0  # finetune: the LoRA rank r
    targets: tuple[str, ...] = ()  # finetune: the matrices LoRA targets (q, k, v, o, gate, up, down)
    policy: str = ""  # op-sac-*: the checkpointing policy (checkpointing.POLICIES)
    loss: str = "standard"  # TECHNIQUES: "standard" or "chunked" (techniques.py)
    chunks: int = 0  # TECHNIQUES with loss "chunked": the chunk count
    cp: int = 1  # CONTEXT_PARALLEL: the context-parallel size (context.py)
    cp_kind: str = ""  # CONTEXT_PARALLEL: trainmath's --cp-kind (context.CP_KINDS)
    tp: int = 1  # op-sac-tp-saved: the tensor-parallel ranks (tensor_parallel.py), rank 0 measured
    order: str = "trl"  # dpo-step: post_training.ORDERS (TRL's: the policy, then the reference)
    logits: str = ""  # logprob-pass: the logits' dtype, "fp32" (upcast) or "bf16"

    @property
    def id(self) -> str:
        parts = [self.kind, self.model, self.implementation]
        if self.kind == "finetune":
            parts.append(f"lora-r{self.rank_r}-{'+'.join(self.targets)}")
        elif self.kind in TECHNIQUES:
            parts += [self.recipe, "standard" if self.loss == "standard" else f"chunked{self.chunks}"]
        else:
            parts.append(self.precision if self.kind.endswith("saved") else self.recipe)
        if self.policy:
            parts.append(self.policy)
        if self.kind == "dpo-step" and self.order != "trl":
            parts.append(self.order)
        if self.kind == "logprob-pass":
            parts.append(f"logits-{self.logits}")
        if self.kind in CONTEXT_PARALLEL:
            parts.append(f"{self.cp_kind}-cp{self.cp}-rank{self.rank}")
        if self.foreach:
            parts.append("foreach")
        if self.dp > 1:
            parts.append(f"dp{self.dp}-rank{self.rank}")
        if self.tp > 1:
            parts.append(f"tp{self.tp}-rank{self.rank}")
        parts.append(f"s{self.s}-b{self.b}")
        return "/".join(parts)

    def measure(self) -> dict:
        if self.kind == "dpo-step":
            return post_training.measure_dpo_step(self.model, self.implementation, self.recipe,
                                                  self.s, self.b, order=self.order,
                                                  foreach=self.foreach)
        if self.kind == "logprob-pass":
            return post_training.measure_logprob_pass(self.model, self.implementation,
                                                      self.recipe, self.s, self.b,
                                                      logits=self.logits)
        if self.kind in TECHNIQUES:
            return techniques.measure_technique(self.model, self.implementation, self.recipe,
                                                self.s, self.b, loss=self.loss,
                                                chunks=self.chunks or techniques.DEFAULT_CHUNKS,
                                                offload=self.kind == "act-offload-step")
        if self.kind == "finetune":
            return finetune.measure_lora(self.model, self.rank_r, self.targets, self.s, self.b,
                                         foreach=self.foreach)
        if self.kind == "cp-step":
            return context.measure_cp_step(self.model, self.s, self.cp, self.b, recipe=self.recipe,
                                           kind=self.cp_kind, rank=self.rank)
        if self.kind == "cp-saved":
            return context.measure_cp_saved(self.model, self.s, self.cp, self.b, kind=self.cp_kind,
                                            rank=self.rank, precision=self.precision)
        if self.kind == "saved":
            return saved.measure_saved(self.model, self.implementation, self.s, self.b,
                                       self.precision)
        if self.kind == "op-sac-saved":
            return checkpointing.measure_op_sac(self.model, self.s, self.b, self.policy)
        if self.kind == "op-sac-tp-saved":
            return tensor_parallel.measure_op_sac_tp(self.model, self.s, self.tp, self.b,
                                                     self.policy)
        if self.kind == "compile-saved":
            return checkpointing.measure_compiled(self.model, self.s, self.b)
        if self.kind == "compile-op-saved":
            return checkpointing.measure_compiled_op(self.model, self.s, self.b, self.policy)
        if self.kind in ("op-sac-step", "compile-step"):
            prepare = (functools.partial(checkpointing.compile_layers, s=self.s, b=self.b)
                       if self.kind == "compile-step" else
                       functools.partial(checkpointing.wrap_layers, policy=self.policy))
            return step.measure_step(self.model, self.implementation, self.recipe, self.s,
                                     self.b, foreach=self.foreach, dp=self.dp, rank=self.rank,
                                     prepare=prepare)
        return step.measure_step(self.model, self.implementation, self.recipe, self.s, self.b,
                                 foreach=self.foreach, dp=self.dp, rank=self.rank)

    def describe(self) -> dict:
        if self.model in hfconfigs.CONFIG_FILES:  # today's families, from their config.json
            cf = hfconfigs.CONFIG_FILES[self.model]
            out = {"id": self.id, "kind": self.kind, "model": self.model,
                   "config": cf.describe(), "family": cf.family,
                   "implementation": self.implementation, "s": self.s, "b": self.b,
                   "notes": cf.notes_for(self.implementation.partition("-")[2])}
            why = cf.not_compared.get(self.implementation.partition("-")[2])
            if why:
                out["not_compared"] = why
        else:
            out = {"id": self.id, "kind": self.kind, "model": self.model,
                   "shape": shapes.for_length(self.model, self.s),
                   "implementation": self.implementation, "s": self.s, "b": self.b}
        if self.kind == "finetune":
            out |= {"adapter": {"method": "lora", "r": self.rank_r, "targets": list(self.targets),
                                "dropout": 0.0, "dtype": "fp32"},
                    "dtype": {"parameters": "bf16", "compute": "bf16"},
                    "optimizer": {"name": "torch.optim.AdamW", "foreach": self.foreach}}
        elif self.kind.endswith("saved"):
            param_dtype, autocast = saved.PRECISIONS[self.precision]
            out |= {"precision": self.precision,
                    "dtype": {"parameters": _dt(param_dtype), "compute": _dt(autocast or param_dtype)}}
        else:
            if self.kind in TECHNIQUES:
                out |= {"loss": {"kind": self.loss, "chunks": self.chunks or None},
                        "offload_activations": self.kind == "act-offload-step"}
            param_dtype, autocast = step._recipe_dtypes(self.recipe)
            compute = "bf16" if self.recipe == "fsdp2-bf16" else _dt(autocast or param_dtype)
            out |= {"recipe": self.recipe,
                    "dtype": {"parameters": _dt(param_dtype), "compute": compute},
                    "optimizer": {"name": "torch.optim.AdamW", "foreach": self.foreach},
                    "dp": self.dp, "rank": self.rank}
        if self.kind == "dpo-step":
            out["dpo"] = {"pairs": self.b, "sequences": 2 * self.b, "beta": post_training.BETA,
                          "loss": "sigmoid", "order": self.order,
                          "reference": {"dtype": "bf16", "requires_grad": False,
                                        "mode": "eval"}}
        if self.kind == "logprob-pass":
            out["logprob"] = {"logits_dtype": self.logits, "temperature": 1.0,
                              "passes": ["policy", "reference"],
                              "policy_resident": "parameters, master weights, optimizer "
                                                 "states (after a step and zero_grad)",
                              "reference": {"dtype": "bf16", "requires_grad": False,
                                            "mode": "eval"}}
        if self.kind.startswith(("op-sac", "compile-op")):
            out["policy"] = self.policy
        if self.kind in CONTEXT_PARALLEL:
            out["context_parallel"] = {"kind": self.cp_kind, "cp": self.cp, "rank": self.rank,
                                       "implementation": context.IMPLEMENTATIONS[self.cp_kind]}
        if self.kind == "op-sac-tp-saved":
            out |= {"tp": self.tp, "rank": self.rank, "sequence_parallel": True,
                    "tp_plan": "torchtitan"}
        return out


def _dt(dtype) -> str:
    from .tracking import dtype_name
    return dtype_name(dtype)


def configurations() -> list[Config]:
    out: list[Config] = []
    # 2. bytes saved for backward
    for model in MODELS:
        for s in LENGTHS:
            for impl in ("reference-sdpa", "reference-eager"):
                for precision in ("bf16", "autocast-bf16"):
                    fast = model in ("llama-2-7b", "gpt3-xl") and s == 2048
                    out.append(Config("saved", model, impl, s, precision=precision, fast=fast))
    for model in HF_MODELS:
        for s in LENGTHS:
            for impl in ("hf-sdpa", "hf-eager"):
                for precision in ("bf16", "autocast-bf16"):
                    fast = model == "llama-2-7b" and s == 2048
                    out.append(Config("saved", model, impl, s, precision=precision, fast=fast))
    for model in shapes.MOE:  # Mixtral: transformers' MixtralForCausalLM, grouped_mm experts
        for s in LENGTHS:
            for impl in ("hf-sdpa", "hf-eager"):
                out.append(Config("saved", model, impl, s, precision="bf16"))
    # 1 and 3. a whole training step: states after it, and its peak
    for model in MODELS:
        fast = model == "llama-2-7b"
        for recipe in MASTER_RECIPES:
            out.append(Config("step", model, "reference-sdpa", 2048, recipe=recipe, fast=fast))
        for foreach in (False, True):
            out.append(Config("step", model, "reference-sdpa", 2048, recipe="autocast-fp32",
                              foreach=foreach, fast=fast))
        if model == "llama-2-7b":
            out.append(Config("step", model, "reference-sdpa", 2048, recipe="zero-fp16"))
            for recipe in MASTER_RECIPES:
                out.append(Config("step", model, "hf-sdpa", 2048, recipe=recipe))
            for foreach in (False, True):
                out.append(Config("step", model, "hf-sdpa", 2048, recipe="autocast-fp32",
                                  foreach=foreach))
        for dp in (8, 64):
            out.append(Config("step", model, "reference-sdpa", 2048, recipe="fsdp2-bf16", dp=dp,
                              fast=model == "llama-3-8b" and dp == 64))
    out.append(Config("step", "llama-3-8b", "reference-sdpa", 2048, recipe="fsdp2-bf16", dp=64,
                      rank=63))
    # 4. LoRA with peft on Hugging Face's Llama: peft's default targets, every linear layer
    for r, targets in FINETUNE:
        for s in LENGTHS:
            out.append(Config("finetune", "llama-2-7b", "hf-sdpa", s, rank_r=r, targets=targets,
                              fast=s == 2048 and targets == ("q", "v")))
    out.append(Config("finetune", "llama-3-8b", "hf-sdpa", 2048, rank_r=16,
                      targets=finetune.ALL_LINEAR))
    out.append(Config("finetune", "llama-2-7b", "hf-sdpa", 2048, rank_r=16,
                      targets=finetune.ALL_LINEAR, foreach=True))
    for dp in (8, 64):
        out.append(Config("step", "llama-3-8b", "hf-sdpa", 2048, recipe="fsdp2-bf16", dp=dp))
    # 5. today's families, as transformers builds them from their published config.json
    for model in CONFIG_MODELS:
        attentions = hfconfigs.CONFIG_FILES[model].attentions
        todo = [Config("saved", model, f"hf-{attention}", s, precision="bf16")
                for s in LENGTHS for attention in attentions]
        todo.append(Config("step", model, f"hf-{attentions[0]}", 2048, recipe="zero-bf16"))
        out += [replace(c, fast=c.id in CONFIG_FAST) for c in todo]
    # 6. op-level selective checkpointing and torch.compile's partitioner (checkpointing.py): the
    # bytes kept for backward, and a step's peak in torchtitan's layout (FSDP2 on 8 GPUs)
    for model, s, policy in (("llama-3-8b", 8192, "torchtitan"), ("llama-3-8b", 8192, "attention"),
                             ("llama-2-7b", 4096, "torchtitan"), ("gpt3-xl", 2048, "torchtitan")):
        out.append(Config("op-sac-saved", model, "reference-sdpa", s, precision="bf16",
                          policy=policy, fast=model == "gpt3-xl"))
    out.append(Config("op-sac-step", "llama-3-8b", "reference-sdpa", 8192, recipe="fsdp2-bf16",
                      dp=8, policy="torchtitan"))
    out.append(Config("op-sac-step", "llama-2-7b", "reference-sdpa", 4096, recipe="zero-bf16",
                      policy="torchtitan"))
    # one layer on one rank of torchtitan's tensor- and sequence-parallel plan (tensor_parallel.py)
    for tp in (2, 4, 8):
        out.append(Config("op-sac-tp-saved", "llama-3-8b", "reference-sdpa", 8192,
                          precision="bf16", policy="torchtitan", tp=tp, fast=tp == 2))
    for model, s in (("llama-3-8b", 8192), ("llama-2-7b", 4096)):
        out.append(Config("compile-saved", model, "reference-sdpa", s, precision="bf16"))
    out.append(Config("compile-step", "llama-3-8b", "reference-sdpa", 8192, recipe="fsdp2-bf16",
                      dp=8))
    # torch.compile over op-level checkpointing, as torchtitan runs both (apply_ac, then
    # apply_compile)
    for policy in ("torchtitan", "attention"):
        out.append(Config("compile-op-saved", "llama-3-8b", "reference-sdpa", 8192,
                          precision="bf16", policy=policy))
    # 7. issue 24's techniques: a chunked loss (torchtune's LinearCrossEntropyLoss) and
    # activations offloaded to host memory, in the run issue 24 names (Llama-3-8B at s 8192)
    for loss, chunks in (("standard", 0), ("chunked", 8), ("chunked", 16)):
        out.append(Config("chunked-loss-step", "llama-3-8b", "reference-sdpa", 8192,
                          recipe="zero-bf16", loss=loss, chunks=chunks))
    out.append(Config("chunked-loss-step", "llama-2-7b", "reference-sdpa", 4096,
                      recipe="zero-bf16", loss="chunked", chunks=8))
    for loss, chunks in (("standard", 0), ("chunked", 8)):
        out.append(Config("act-offload-step", "llama-3-8b", "reference-sdpa", 8192,
                          recipe="zero-bf16", loss=loss, chunks=chunks))
    # 8. context parallelism: DeepSpeed-Ulysses' DistributedAttention, one rank of cp
    for cp in (2, 4, 8):
        out.append(Config("cp-saved", "llama-3-8b", "reference-sdpa", 8192, precision="bf16",
                          cp=cp, cp_kind="ulysses", fast=cp == 8))
        out.append(Config("cp-step", "llama-3-8b", "reference-sdpa", 8192, recipe="zero-bf16",
                          cp=cp, cp_kind="ulysses"))
    # 9. post-training's trainer side (post_training.py): a DPO step as TRL's DPOTrainer runs
    # it, a frozen bf16 reference resident; the log-prob pass of GRPO/PPO. Hugging Face's
    # Llama-3-8B, as TRL trains it; GPT-3 XL on the reference model is the quick record.
    for order in post_training.ORDERS:
        for s in (1024, 2048):
            for b in (1, 2):
                out.append(Config("dpo-step", "llama-3-8b", "hf-sdpa", s, b, recipe="zero-bf16",
                                  order=order))
    out.append(Config("dpo-step", "llama-3-8b", "hf-sdpa", 2048, 2, recipe="autocast-fp32"))
    out.append(Config("dpo-step", "gpt3-xl", "reference-sdpa", 1024, 1, recipe="zero-bf16",
                      fast=True))
    for b in (1, 4):
        out.append(Config("logprob-pass", "llama-3-8b", "hf-sdpa", 2048, b, recipe="zero-bf16",
                          logits="fp32"))
    out.append(Config("logprob-pass", "llama-3-8b", "hf-sdpa", 2048, 4, recipe="zero-bf16",
                      logits="bf16"))
    out.append(Config("logprob-pass", "llama-3-8b", "hf-sdpa", 2048, 4, recipe="autocast-fp32",
                      logits="fp32"))
    out.append(Config("logprob-pass", "gpt3-xl", "reference-sdpa", 1024, 1, recipe="zero-bf16",
                      logits="fp32", fast=True))
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), "configuration ids must be unique"
    return out


def versions() -> dict:
    import torch
    import transformers
    import deepspeed
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "deepspeed": deepspeed.__version__}


def methods() -> dict:
    from . import models
    return {
        "saved": saved.METHOD,
        "op_sac": checkpointing.METHOD,
        "op_sac_tp": tensor_parallel.METHOD,
        "compile": checkpointing.METHOD_COMPILE,
        "compile_op": checkpointing.METHOD_COMPILE_OP,
        "finetune": finetune.METHOD,
        "techniques": techniques.METHOD,
        "context_parallel": context.METHOD,
        "post_training": post_training.METHOD,
        "states": step.METHOD_STATES,
        "peak": step.METHOD_PEAK,
        "implementations": {
            "reference-sdpa": "validate/measure/models.py Reference with "
                              "F.scaled_dot_product_attention (CPU flash kernel)",
            "reference-eager": "validate/measure/models.py Reference with softmax(QKᵀ/√d + mask)V",
            "hf-sdpa": "transformers LlamaForCausalLM / MistralForCausalLM / MixtralForCausalLM "
                       "(its default grouped_mm experts), attn_implementation='sdpa'; for a "
                       "record with a config: AutoModelForCausalLM.from_config of that "
                       "config.json (measured.runs: the class, attention and experts it ran)",
            "hf-eager": "transformers LlamaForCausalLM / MistralForCausalLM / MixtralForCausalLM "
                        "(its default grouped_mm experts), attn_implementation='eager'; for a "
                        "record with a config: AutoModelForCausalLM.from_config of that "
                        "config.json (measured.runs: the class, attention and experts it ran)",
            "config": " ".join(hfconfigs.__doc__.split()),
            "about": " ".join(models.__doc__.split()),
        },
        "precisions": {
            "bf16": "bf16 parameters, no autocast",
            "autocast-bf16": "fp32 parameters, forward under torch.autocast('cpu', torch.bfloat16)",
        },
        "recipes": " ".join(step.__doc__.split()),
        "schedules": pipeline.METHOD,
    }


def document(results: dict[str, dict], configs: list[Config]) -> dict:
    return {
        "schema": SCHEMA,
        "about": "Bytes measured with real PyTorch and Hugging Face code at full size under "
                 "FakeTensorMode, by validate/measure (python -m validate.measure); the schema "
                 "is documented in validate/measure/__init__.py.",
        "date": datetime.date.today().isoformat(),
        "versions": versions(),
        "methods": methods(),
        "configurations": [c.describe() | {"measured": results[c.id]} for c in configs],
        "schedules": normalise(pipeline.records()),
    }


def normalise(obj):
    """What ``obj`` reads back as from JSON (tuples become lists)."""
    return json.loads(json.dumps(obj))


def dumps(doc: dict) -> str:
    """JSON with one key per line, but every list of plain values on one line."""
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    flat = re.compile(r"\[\s*([^\[\]{}]*?)\s*\]", re.DOTALL)
    def one_line(m):
        if "\n" not in m[0]:
            return m[0]
        return "[" + ", ".join(p.strip() for p in m[1].split(",\n")) + "]" if m[1] else "[]"

    out = flat.sub(one_line, text) + "\n"
    assert json.loads(out) == doc, "the compact layout changed the data"
    return out


def measure_all(configs: list[Config], log=None) -> dict[str, dict]:
    results = {}
    for c in configs:
        start = time.perf_counter()
        results[c.id] = normalise(c.measure())
        if log:
            log(f"{time.perf_counter() - start:5.1f} s  {c.id}")
    return results
