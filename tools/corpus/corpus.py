#!/usr/bin/env python3
"""A corpus of ``trainmath estimate`` and ``trainmath plan`` invocations, run at two commits and diffed.

This is not a test: it has no expected values. Its expected output is *the other commit's
output*. It exists to show that a refactor of the library (modules moved, rules deduplicated,
renderers unified, the argument parser rebuilt) changes no byte the command prints, no exit
status and no error message, except where a difference is meant (tagged, and allowed with
``--allow TAG``).

Commands (standard library only; see tools/corpus/README.md)::

    corpus.py list [--tag TAG]                   # the invocations, and counts
    corpus.py run --src DIR --out OUTDIR [-j N]  # run each one from DIR, one JSON file per id
    corpus.py compare REV [REV...] [--workdir DIR...] [--allow TAG...]
    corpus.py diff OUT_A OUT_B [--allow TAG...]  # two earlier ``run`` outputs

The corpus below is always taken from *this* file, never from the revision being run, so
every revision runs exactly the same invocations.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# -- the corpus ---------------------------------------------------------------------------------
#
# Tags (besides the subcommand, added to every case):
#   bad         invalid input: the command should exit 2 with one line on stderr
#   help        --help output
#   json        --json output
#   fp8-plan    a plan with --recipe fp8-te (expected to change in the rebuild)
#   plan-gpu-alias  plan --gpu a100-80gb: an error at bb2c716 (plan accepts fewer GPU names
#               than estimate), expected to become an answer after the rebuild
#   odd         an exit status that looks wrong at bb2c716 (no expectation is checked)
#   rule-words  bad input whose message the rebuild words once, in the rule (issue 19: "no rule's
#               text is written twice"): the command had worded these rules again with its flags,
#               and the planner its own way; both now print the library's one message
#   peak-precision  a plan whose recipe's tensor-core precision the rebuild decides once: fp16
#               says "fp16" where it said "bf16" (the same dense peak), fp32 is refused (no
#               tensor-core peak to time it at) instead of being timed at the bf16 one
#   moe, lora, qlora, offload, time, pipeline, config, params, shape: what the case exercises


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    tags: tuple[str, ...]

    @property
    def command(self) -> str:
        return shlex.join(["trainmath", *self.argv])


#: The config.json files the corpus reads; each must exist at every revision compared
#: (all of them exist at bb2c716).
CONFIGS = {
    "llama3": "tests/data/hf-configs/Meta-Llama-3-8B.json",
    "mistral": "tests/data/hf-configs/Mistral-7B-v0.1.json",
    "mixtral": "tests/data/hf-configs/Mixtral-8x7B-v0.1.json",
    "qwen2": "tests/data/hf-configs/Qwen2-7B.json",
    "gemma": "tests/data/hf-configs/gemma-7b.json",
    "gpt2": "tests/data/hf-configs/gpt2.json",
    "pythia": "tests/data/hf-configs/pythia-160m.json",
}
#: Files read as bad configs: JSON without a model_type, and a file that is not JSON.
NOT_CONFIGS = {"no-model-type": "tests/browser/package.json", "not-json": "README.md"}
#: Paths that must not exist at any revision (a config that cannot be read).
MISSING = ("tests/data/hf-configs/no-such-config.json",)
DATA_FILES = (*CONFIGS.values(), *NOT_CONFIGS.values())

#: The presets at bb2c716 and a sequence length each was trained at (within its positions).
PRESETS = {
    "llama-2-7b": 4096, "llama-2-70b": 4096, "llama-3-8b": 8192, "llama-3-70b": 8192,
    "mistral-7b": 4096, "gpt3-175b": 2048, "llama-3-405b": 8192,
    "megatron-gpt-1.7b": 2048, "megatron-gpt-3.6b": 2048, "megatron-gpt-7.5b": 2048,
    "megatron-gpt-18.4b": 2048, "megatron-gpt-39.1b": 2048, "megatron-gpt-76.1b": 2048,
    "megatron-gpt-145.6b": 2048, "megatron-gpt-310.1b": 2048, "megatron-gpt-529.6b": 2048,
    "megatron-gpt-1t": 2048, "megatron-gpt-22b": 2048, "megatron-gpt-175b": 2048,
    "mixtral-8x7b": 4096,
}
#: A layout each preset can run (tp divides heads, kv_heads and ffn; pp divides the layers).
PRESET_LAYOUTS = {
    "llama-2-7b": ("--dp", "8", "--tp", "1"),
    "llama-2-70b": ("--dp", "8", "--tp", "8", "--pp", "4"),
    "llama-3-8b": ("--dp", "4", "--tp", "2", "--sequence-parallel"),
    "llama-3-70b": ("--dp", "8", "--tp", "8", "--pp", "4"),
    "mistral-7b": ("--dp", "8", "--tp", "2"),
    "gpt3-175b": ("--dp", "8", "--tp", "8", "--pp", "16"),
    "llama-3-405b": ("--dp", "64", "--tp", "8", "--pp", "14"),  # 126 layers: not pp 16
    "megatron-gpt-1.7b": ("--dp", "32",),
    "megatron-gpt-3.6b": ("--dp", "32", "--tp", "2"),
    "megatron-gpt-7.5b": ("--dp", "32", "--tp", "4"),
    "megatron-gpt-18.4b": ("--dp", "32", "--tp", "8"),
    "megatron-gpt-39.1b": ("--dp", "32", "--tp", "8", "--pp", "2"),
    "megatron-gpt-76.1b": ("--dp", "32", "--tp", "8", "--pp", "4"),
    "megatron-gpt-145.6b": ("--dp", "24", "--tp", "8", "--pp", "8"),
    "megatron-gpt-310.1b": ("--dp", "15", "--tp", "8", "--pp", "16"),
    "megatron-gpt-529.6b": ("--dp", "9", "--tp", "8", "--pp", "35"),
    "megatron-gpt-1t": ("--dp", "6", "--tp", "8", "--pp", "64"),
    "megatron-gpt-22b": ("--tp", "8",),
    "megatron-gpt-175b": ("--tp", "8", "--pp", "8"),
    "mixtral-8x7b": ("--dp", "8", "--ep", "8"),
}
RECIPES = ("fp32", "fp16-mixed", "bf16-mixed", "bf16", "megatron", "deepspeed", "bf16-master",
           "bf16-master-free", "amp", "fsdp2", "fp8-te", "zero-paper")
OPTIMIZERS = ("adam", "adamw", "sgd", "sgd-momentum", "adam-8bit")
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")
IMPLEMENTATIONS = ("megatron-te", "megatron-eager", "hf-sdpa", "hf-eager")
GPUS = ("a100-sxm", "h100-sxm", "h200", "b200", "a100-80gb")  # the last an alias


def _build() -> list[Case]:
    cases: list[Case] = []

    def add(sub: str, name: str, *argv: str, tags: tuple[str, ...] = ()) -> None:
        tags = (sub, *tags)
        if "--json" in argv:
            tags += ("json",)
        cases.append(Case(f"{sub}-{name}", (sub, *argv), tuple(dict.fromkeys(tags))))

    def est(name, *argv, tags=()):
        add("estimate", name, *argv, tags=tags)

    def bad(name, *argv, tags=()):
        add("estimate", "bad-" + name, *argv, tags=("bad", *tags))

    def plan(name, *argv, tags=()):
        add("plan", name, *argv, tags=tags)

    def plan_bad(name, *argv, tags=()):
        add("plan", "bad-" + name, *argv, tags=("bad", *tags))

    # --- help and the top-level parser ---------------------------------------------------------
    est("help", "--help", tags=("help",))
    est("help-short", "-h", tags=("help",))
    add("plan", "help", "--help", tags=("help",))
    cases.append(Case("top-no-subcommand", (), ("top", "bad")))
    cases.append(Case("top-unknown-subcommand", ("train", "--model", "llama-3-8b"), ("top", "bad")))
    cases.append(Case("top-help", ("--help",), ("top", "help")))

    # --- every preset: model states; activations (JSON); a layout it was run with --------------
    for p, s in PRESETS.items():
        est(p, "--model", p)
        est(f"{p}-s{s}-json", "--model", p, "--seq-len", str(s), "--json")
        est(f"{p}-layout-h100", "--model", p, "--seq-len", str(s), *PRESET_LAYOUTS[p],
            "--recompute", "selective" if p != "mixtral-8x7b" else "full", "--gpu", "h100-sxm",
            tags=("pipeline",) if "--pp" in PRESET_LAYOUTS[p] else ())

    # --- recipes (every name, the alias, the old flag name) -----------------------------------
    for r in RECIPES:
        est(f"llama-2-7b-recipe-{r}", "--model", "llama-2-7b", "--seq-len", "4096", "--recipe", r,
            "--dp", "8", *(("--zero", "1") if r not in ("fsdp2",) else ()))
        est(f"llama-3-8b-recipe-{r}-json", "--model", "llama-3-8b", "--recipe", r, "--json")
    est("llama-2-7b-precision-bf16", "--model", "llama-2-7b", "--precision", "bf16")
    est("llama-2-7b-precision-zero-paper-json", "--model", "llama-2-7b", "--precision",
        "zero-paper", "--json")
    est("gpt3-175b-recipe-megatron-gb", "--model", "gpt3-175b", "--recipe", "megatron",
        "--seq-len", "2048", "--tp", "8", "--pp", "8", "--dp", "16", "--global-batch", "1536",
        "--gpu", "a100-sxm", tags=("pipeline",))
    est("llama-3-70b-fp8-te-h100-peak", "--model", "llama-3-70b", "--recipe", "fp8-te",
        "--seq-len", "8192", "--tp", "8", "--pp", "4", "--dp", "16", "--global-batch", "512",
        "--gpu", "h100-sxm", tags=("pipeline",))

    # --- optimizers and their implementations ------------------------------------------------
    for o in OPTIMIZERS:
        est(f"llama-3-8b-opt-{o}", "--model", "llama-3-8b", "--seq-len", "4096", "--optimizer", o)
        est(f"llama-3-8b-opt-{o}-zero2-json", "--model", "llama-3-8b", "--optimizer", o,
            "--zero", "2", "--dp", "8", "--json")
    for i in OPTIMIZER_IMPLS:
        est(f"llama-3-8b-impl-{i}", "--model", "llama-3-8b", "--seq-len", "8192",
            "--optimizer-impl", i, "--gpu", "h100-sxm")
        est(f"llama-3-8b-impl-{i}-sgd-json", "--model", "llama-3-8b", "--optimizer", "sgd",
            "--optimizer-impl", i, "--json")

    # --- ZeRO stages ------------------------------------------------------------------------
    for z in ("0", "1", "2", "3"):
        est(f"llama-3-8b-zero{z}", "--model", "llama-3-8b", "--seq-len", "8192", "--dp", "8",
            "--zero", z, "--gpu", "h100-sxm")
        est(f"llama-3-8b-zero{z}-json", "--model", "llama-3-8b", "--dp", "64", "--zero", z,
            "--json")
        est(f"params-7b-zero{z}", "--params", "7B", "--dp", "64", "--zero", z, tags=("params",))
    for z in ("1", "2", "3"):
        est(f"llama-2-70b-deepspeed-zero{z}", "--model", "llama-2-70b", "--recipe", "deepspeed",
            "--zero", z, "--dp", "32", "--seq-len", "4096", "--gpu", "a100-sxm")
    est("llama-2-70b-fsdp2-zero3-h200", "--model", "llama-2-70b", "--recipe", "fsdp2", "--dp",
        "64", "--seq-len", "4096", "--gpu", "h200", "--overhead", "3GiB")
    est("llama-3-8b-fsdp2-hf-sdpa-json", "--model", "llama-3-8b", "--recipe", "fsdp2", "--dp",
        "8", "--seq-len", "8192", "--implementation", "hf-sdpa", "--recompute", "full", "--json")

    # --- activations: recompute, kernels, attention, mlp kernel ------------------------------
    for rc in ("none", "selective", "full"):
        est(f"gpt3-175b-recompute-{rc}", "--model", "gpt3-175b", "--seq-len", "2048", "--tp",
            "8", "--pp", "8", "--sequence-parallel", "--recompute", rc, tags=("pipeline",))
        est(f"llama-3-8b-recompute-{rc}-json", "--model", "llama-3-8b", "--seq-len", "8192",
            "--recompute", rc, "--micro-batch", "2", "--json")
    for impl in IMPLEMENTATIONS:
        est(f"llama-3-8b-kernels-{impl}", "--model", "llama-3-8b", "--seq-len", "4096",
            "--implementation", impl)
        est(f"mistral-7b-kernels-{impl}-full-json", "--model", "mistral-7b", "--seq-len",
            "8192", "--implementation", impl, "--recompute", "full", "--json")
    for att in ("eager", "flash"):
        est(f"llama-2-7b-attention-{att}", "--model", "llama-2-7b", "--seq-len", "4096",
            "--attention", att)
        est(f"custom-attention-{att}-json", "--layers", "24", "--hidden", "2048", "--heads",
            "16", "--ffn", "5632", "--vocab", "32000", "--seq-len", "2048", "--attention", att,
            "--json", tags=("shape",))
    est("llama-3-8b-hf-eager-attention-eager", "--model", "llama-3-8b", "--seq-len", "2048",
        "--implementation", "hf-eager", "--attention", "eager")
    for k in ("eager", "fused"):
        est(f"llama-3-8b-mlp-kernel-{k}", "--model", "llama-3-8b", "--seq-len", "8192",
            "--mlp-kernel", k, "--tp", "4", "--sequence-parallel")
    est("gpt3-175b-mlp-kernel-fused-json", "--model", "gpt3-175b", "--seq-len", "2048",
        "--mlp-kernel", "fused", "--tp", "8", "--json")
    est("llama-3-8b-micro-batch-4", "--model", "llama-3-8b", "--seq-len", "8192",
        "--micro-batch", "4", "--recompute", "full")

    # --- GPUs and memory ---------------------------------------------------------------------
    for g in GPUS:
        est(f"llama-3-8b-gpu-{g}", "--model", "llama-3-8b", "--seq-len", "8192", "--dp", "8",
            "--zero", "3", "--gpu", g)
        est(f"llama-3-70b-gpu-{g}-json", "--model", "llama-3-70b", "--seq-len", "8192", "--tp",
            "8", "--pp", "4", "--dp", "4", "--gpu", g, "--json", tags=("pipeline",))
    est("llama-3-8b-gpu-memory-80gb", "--model", "llama-3-8b", "--seq-len", "8192",
        "--gpu-memory", "80GB")
    est("llama-3-8b-gpu-memory-141gib", "--model", "llama-3-8b", "--seq-len", "8192",
        "--gpu-memory", "141 GiB")
    est("llama-3-8b-gpu-and-memory", "--model", "llama-3-8b", "--seq-len", "8192", "--gpu",
        "h100-sxm", "--gpu-memory", "94GB")
    est("llama-3-8b-gpu-memory-mib-json", "--model", "llama-3-8b", "--seq-len", "8192",
        "--gpu-memory", "81559MiB", "--json")
    est("params-7b-gpu-memory-24gb", "--params", "7e9", "--gpu-memory", "24GB",
        tags=("params",))

    # --- overhead ---------------------------------------------------------------------------
    for o in ("2GiB", "1.5GB", "512MiB"):
        est(f"llama-3-8b-overhead-{o.lower()}", "--model", "llama-3-8b", "--seq-len", "8192",
            "--gpu", "h100-sxm", "--overhead", o)
    est("llama-3-8b-overhead-no-gpu-json", "--model", "llama-3-8b", "--overhead", "4GB", "--json")

    # --- --config (every config in tests/data), with shape flags on top ---------------------
    for name, path in CONFIGS.items():
        est(f"config-{name}", "--config", path, tags=("config",))
        est(f"config-{name}-s1024-json", "--config", path, "--seq-len", "1024", "--json",
            tags=("config",))
    est("config-llama3-modified-layers", "--config", CONFIGS["llama3"], "--layers", "16",
        "--seq-len", "8192", tags=("config",))
    est("config-mixtral-ep-json", "--config", CONFIGS["mixtral"], "--dp", "8", "--ep", "4",
        "--seq-len", "4096", "--json", tags=("config", "moe"))
    est("config-qwen2-tp4", "--config", CONFIGS["qwen2"], "--seq-len", "4096", "--tp", "4",
        "--dp", "2", "--gpu", "h100-sxm", tags=("config",))
    est("config-gemma-tied-geglu-tp4", "--config", CONFIGS["gemma"], "--seq-len", "4096",
        "--tp", "4", "--sequence-parallel", tags=("config",))

    # --- --params with suffixes and separators ----------------------------------------------
    for label, n in (("7e9", "7e9"), ("7b-upper", "7B"), ("7b-lower", "7b"), ("digits", "6738415616"),
                     ("commas", "6,738,415,616"), ("underscores", "70_000_000_000"),
                     ("1.5t", "1.5T"), ("350m", "350M"), ("125k", "125K"), ("1e12", "1e12")):
        est(f"params-{label}", "--params", n, tags=("params",))
    est("params-70b-dp64-zero3-json", "--params", "70B", "--dp", "64", "--zero", "3", "--json",
        tags=("params",))
    est("params-7b-seq-len", "--params", "7B", "--seq-len", "4096", tags=("params",))
    est("params-7b-adam-8bit-fp32-json", "--params", "7B", "--recipe", "fp32", "--optimizer",
        "adam-8bit", "--json", tags=("params",))
    est("params-7b-cp2", "--params", "7B", "--cp", "2", "--dp", "4", tags=("params",))
    est("params-13b-time", "--params", "13B", "--dp", "64", "--gpu", "a100-sxm", "--tokens",
        "1T", "--mfu", "0.45", tags=("params", "time"))

    # --- custom shapes ----------------------------------------------------------------------
    shape = ("--layers", "24", "--hidden", "2048", "--heads", "16", "--ffn", "8192", "--vocab",
             "50304")
    est("shape-gpt-like", *shape, "--mlp", "gelu", "--norm", "layernorm", "--seq-len", "2048",
        tags=("shape",))
    est("shape-gpt-like-dropout-tied-json", *shape, "--mlp", "gelu", "--norm", "layernorm",
        "--dropout", "--tied-embeddings", "--seq-len", "2048", "--json", tags=("shape",))
    est("shape-swiglu-gqa", "--layers", "32", "--hidden", "4096", "--heads", "32",
        "--kv-heads", "8", "--ffn", "14336", "--vocab", "128256", "--seq-len", "8192",
        tags=("shape",))
    est("shape-geglu-no-dropout", *shape, "--mlp", "geglu", "--no-dropout", "--seq-len",
        "2048", tags=("shape",))
    est("shape-states-only", *shape, tags=("shape",))
    est("shape-swiglu-rmsnorm-explicit-json", *shape, "--mlp", "swiglu", "--norm", "rmsnorm",
        "--kv-heads", "4", "--seq-len", "2048", "--json", tags=("shape",))
    # argparse's abbreviations, which a new parser might not keep: --seq for --seq-len, ...
    est("repeated-flag-last-wins", "--model", "llama-2-7b", "--model", "llama-3-8b",
        "--seq-len=4096", "--json")
    est("abbreviated-flags", "--mod", "llama-3-8b", "--seq-l", "4096", "--recomp", "full",
        "--gpu-mem", "80GB")
    est("shape-pp4-interleave2-json", *shape, "--seq-len", "2048", "--pp", "4",
        "--interleave", "2", "--dp", "2", "--global-batch", "64", "--json",
        tags=("shape", "pipeline"))
    est("llama-3-8b-heads-changed", "--model", "llama-3-8b", "--kv-heads", "32",
        "--seq-len", "8192", tags=("shape",))
    est("llama-2-7b-gelu-layernorm", "--model", "llama-2-7b", "--mlp", "gelu", "--ffn",
        "16384", "--norm", "layernorm", "--seq-len", "4096", tags=("shape",))
    est("gpt3-175b-no-dropout", "--model", "gpt3-175b", "--no-dropout", "--seq-len", "2048",
        "--tp", "8", tags=("shape",))
    est("llama-3-8b-tied-vocab", "--model", "llama-3-8b", "--tied-embeddings", "--vocab",
        "32000", tags=("shape",))

    # --- pipelines: --pp, --interleave, --global-batch, --gpus ------------------------------
    est("llama-3-70b-pp8-v2-gb", "--model", "llama-3-70b", "--seq-len", "8192", "--tp", "8",
        "--pp", "8", "--interleave", "5", "--dp", "4", "--global-batch", "256",
        "--gpus", "256", "--gpu", "h100-sxm", tags=("pipeline",))
    est("llama-3-405b-pp18-json", "--model", "llama-3-405b", "--seq-len", "8192", "--tp", "8",
        "--pp", "18", "--dp", "64", "--global-batch", "2048", "--gpus", "9216",
        "--sequence-parallel", "--gpu", "h100-sxm", "--json", tags=("pipeline",))
    est("gpt3-175b-pp8-v3", "--model", "gpt3-175b", "--seq-len", "2048", "--tp", "8", "--pp",
        "8", "--interleave", "3", "--dp", "8", "--global-batch", "512", "--micro-batch", "2",
        tags=("pipeline",))
    est("megatron-gpt-1t-paper", "--model", "megatron-gpt-1t", "--seq-len", "2048", "--tp",
        "8", "--pp", "64", "--dp", "6", "--global-batch", "3072", "--interleave", "2",
        "--recompute", "full", "--gpu", "a100-sxm", tags=("pipeline",))
    est("llama-3-8b-gb-no-pp", "--model", "llama-3-8b", "--seq-len", "8192", "--dp", "8",
        "--global-batch", "64")
    est("llama-3-8b-gpus-match", "--model", "llama-3-8b", "--dp", "2", "--tp", "2", "--pp",
        "2", "--cp", "2", "--gpus", "16", "--seq-len", "8192", tags=("pipeline",))
    est("llama-3-405b-cp16-128k", "--model", "llama-3-405b", "--seq-len", "131072", "--tp",
        "8", "--pp", "14", "--cp", "16", "--dp", "8", "--sequence-parallel",
        "--global-batch", "128", "--gpu", "h100-sxm", tags=("pipeline",))
    est("llama-3-8b-cp4-flash", "--model", "llama-3-8b", "--seq-len", "8192", "--cp", "4",
        "--attention", "flash")

    # --- mixture of experts -----------------------------------------------------------------
    for ep in ("1", "2", "4", "8"):
        est(f"mixtral-8x7b-ep{ep}", "--model", "mixtral-8x7b", "--dp", "8", "--ep", ep,
            "--seq-len", "4096", "--gpu", "h100-sxm", tags=("moe",))
    est("mixtral-8x7b-ep8-tp2-json", "--model", "mixtral-8x7b", "--dp", "8", "--ep", "8",
        "--tp", "2", "--sequence-parallel", "--seq-len", "4096", "--zero", "1", "--json",
        tags=("moe",))
    est("mixtral-8x7b-pp4-ep2", "--model", "mixtral-8x7b", "--dp", "4", "--ep", "2", "--pp",
        "4", "--global-batch", "64", "--seq-len", "4096", tags=("moe", "pipeline"))
    moe = ("--layers", "16", "--hidden", "2048", "--heads", "16", "--ffn", "8192", "--vocab",
           "32000", "--experts", "64", "--experts-per-token", "6")
    est("shape-moe-shared-experts", *moe, "--shared-experts", "2", "--expert-ffn", "1408",
        "--seq-len", "4096", "--dp", "16", "--ep", "16", tags=("moe", "shape"))
    est("shape-moe-shared-experts-json", *moe, "--shared-experts", "2", "--expert-ffn", "1408",
        "--seq-len", "4096", "--dp", "8", "--ep", "8", "--json", tags=("moe", "shape"))
    est("shape-moe-top1", "--layers", "12", "--hidden", "768", "--heads", "12", "--ffn", "3072",
        "--vocab", "50257", "--experts", "8", "--experts-per-token", "1", "--seq-len", "1024",
        tags=("moe", "shape"))
    est("llama-3-8b-made-moe", "--model", "llama-3-8b", "--experts", "8",
        "--experts-per-token", "2", "--seq-len", "8192", "--dp", "8", "--ep", "8",
        tags=("moe", "shape"))
    est("mixtral-8x7b-time", "--model", "mixtral-8x7b", "--dp", "64", "--ep", "8",
        "--seq-len", "4096", "--gpu", "h100-sxm", "--tokens", "2T", "--mfu", "35%",
        tags=("moe", "time"))
    est("mixtral-8x7b-hf-sdpa-full", "--model", "mixtral-8x7b", "--seq-len", "4096",
        "--implementation", "hf-sdpa", "--recompute", "full", tags=("moe",))

    # --- LoRA and QLoRA ---------------------------------------------------------------------
    est("llama-3-8b-lora", "--model", "llama-3-8b", "--finetune", "lora", "--seq-len", "2048",
        "--gpu", "a100-80gb", tags=("lora",))
    est("llama-3-8b-lora-json", "--model", "llama-3-8b", "--finetune", "lora", "--seq-len",
        "2048", "--json", tags=("lora",))
    est("llama-2-7b-lora-rank64-all", "--model", "llama-2-7b", "--finetune", "lora",
        "--lora-rank", "64", "--lora-targets", "all", "--seq-len", "4096", tags=("lora",))
    est("llama-2-7b-lora-targets-mlp-dropout", "--model", "llama-2-7b", "--finetune", "lora",
        "--lora-targets", "gate,up,down", "--lora-dropout", "0.05", "--seq-len", "4096",
        tags=("lora",))
    est("llama-2-7b-lora-hf-names", "--model", "llama-2-7b", "--finetune", "lora",
        "--lora-targets", "q_proj,v_proj", "--seq-len", "4096", tags=("lora",))
    est("llama-2-7b-lora-bf16-recompute-full", "--model", "llama-2-7b", "--finetune", "lora",
        "--recipe", "bf16", "--recompute", "full", "--seq-len", "4096", "--micro-batch", "4",
        tags=("lora",))
    est("llama-2-7b-lora-dp8-hf-eager", "--model", "llama-2-7b", "--finetune", "lora", "--dp",
        "8", "--implementation", "hf-eager", "--seq-len", "4096", tags=("lora",))
    est("llama-2-7b-lora-states-only", "--model", "llama-2-7b", "--finetune", "lora",
        tags=("lora",))
    est("llama-3-70b-qlora", "--model", "llama-3-70b", "--finetune", "qlora", "--seq-len",
        "2048", "--gpu", "a100-sxm", tags=("qlora",))
    est("llama-3-70b-qlora-no-double-quant-json", "--model", "llama-3-70b", "--finetune",
        "qlora", "--no-double-quant", "--lora-rank", "64", "--lora-targets", "all",
        "--seq-len", "2048", "--json", tags=("qlora",))
    est("mistral-7b-qlora-bf16-mixed", "--model", "mistral-7b", "--finetune", "qlora",
        "--recipe", "bf16-mixed", "--lora-dropout", "0.1", "--seq-len", "4096",
        "--attention", "eager", tags=("qlora",))
    est("llama-3-8b-finetune-full-explicit", "--model", "llama-3-8b", "--finetune", "full",
        "--seq-len", "2048")

    # --- offload ----------------------------------------------------------------------------
    est("llama-3-8b-offload-none", "--model", "llama-3-8b", "--offload", "none", "--dp", "8",
        "--zero", "2", tags=("offload",))
    est("llama-3-8b-offload-optimizer-zero2", "--model", "llama-3-8b", "--offload", "optimizer",
        "--dp", "8", "--zero", "2", "--seq-len", "8192", "--gpu", "h100-sxm",
        tags=("offload",))
    est("llama-3-70b-offload-optimizer-zero3-node", "--model", "llama-3-70b", "--offload",
        "optimizer", "--dp", "16", "--zero", "3", "--gpus-per-node", "8", "--json",
        tags=("offload",))
    est("llama-3-70b-offload-params-zero3", "--model", "llama-3-70b", "--offload", "params",
        "--dp", "32", "--zero", "3", "--seq-len", "8192", "--gpus-per-node", "4",
        "--gpu", "h200", tags=("offload",))
    est("llama-3-70b-fsdp2-offload-params-json", "--model", "llama-3-70b", "--recipe", "fsdp2",
        "--offload", "params", "--dp", "8", "--seq-len", "4096", "--json", tags=("offload",))
    est("params-70b-offload-optimizer-node2", "--params", "70B", "--offload", "optimizer",
        "--zero", "2", "--dp", "2", "--gpus-per-node", "8", tags=("offload", "params"))
    est("llama-3-8b-gpus-per-node-no-offload", "--model", "llama-3-8b", "--gpus-per-node", "4")

    # --- time to train: --tokens, --mfu -----------------------------------------------------
    est("llama-3-405b-time-15t", "--model", "llama-3-405b", "--seq-len", "8192", "--tp", "8",
        "--pp", "14", "--dp", "128", "--gpu", "h100-sxm", "--tokens", "15T", "--mfu", "0.4",
        tags=("time", "pipeline"))
    est("llama-3-8b-time-percent-json", "--model", "llama-3-8b", "--dp", "64", "--gpu",
        "h100-sxm", "--tokens", "15,000,000,000,000", "--mfu", "40%", "--json", tags=("time",))
    est("llama-3-8b-time-fp8-te", "--model", "llama-3-8b", "--recipe", "fp8-te", "--dp", "64",
        "--gpu", "h100-sxm", "--tokens", "2e12", "--mfu", "0.3", tags=("time",))
    est("llama-3-8b-time-fp16-a100-80gb", "--model", "llama-3-8b", "--recipe", "fp16-mixed",
        "--dp", "8", "--gpu", "a100-80gb", "--tokens", "300B", "--mfu", "1", tags=("time",))
    est("gpt3-175b-time-b200", "--model", "gpt3-175b", "--seq-len", "2048", "--tp", "8",
        "--pp", "8", "--dp", "16", "--gpu", "b200", "--tokens", "300B", "--mfu", "0.5",
        tags=("time", "pipeline"))

    # --- bad inputs: argument types ---------------------------------------------------------
    bad("unknown-preset", "--model", "llama-4-8b")
    bad("unknown-recipe", "--model", "llama-3-8b", "--recipe", "fp4")
    bad("unknown-precision", "--model", "llama-3-8b", "--precision", "tf32")
    bad("unknown-optimizer", "--model", "llama-3-8b", "--optimizer", "lion")
    bad("unknown-optimizer-impl", "--model", "llama-3-8b", "--optimizer-impl", "apex")
    bad("zero-4", "--model", "llama-3-8b", "--zero", "4")
    bad("zero-word", "--model", "llama-3-8b", "--zero", "three")
    bad("unknown-recompute", "--model", "llama-3-8b", "--recompute", "partial")
    bad("unknown-implementation", "--model", "llama-3-8b", "--implementation", "deepspeed")
    bad("unknown-attention", "--model", "llama-3-8b", "--attention", "sdpa")
    bad("unknown-mlp-kernel", "--model", "llama-3-8b", "--mlp-kernel", "triton")
    bad("unknown-gpu", "--model", "llama-3-8b", "--gpu", "h100-pcie")
    bad("unknown-offload", "--model", "llama-3-8b", "--offload", "gradients")
    bad("unknown-finetune", "--model", "llama-3-8b", "--finetune", "dora")
    bad("unknown-mlp", "--model", "llama-3-8b", "--mlp", "relu")
    bad("unknown-norm", "--model", "llama-3-8b", "--norm", "batchnorm")
    bad("dp-zero", "--model", "llama-3-8b", "--dp", "0")
    bad("tp-negative", "--model", "llama-3-8b", "--tp", "-2")
    bad("layers-word", "--layers", "many", "--hidden", "4096", "--heads", "32", "--ffn",
        "11008", "--vocab", "32000")
    bad("seq-len-fraction", "--model", "llama-3-8b", "--seq-len", "1.5")
    bad("micro-batch-zero", "--model", "llama-3-8b", "--micro-batch", "0")
    bad("gpu-memory-no-unit", "--model", "llama-3-8b", "--gpu-memory", "80")
    bad("gpu-memory-bad-unit", "--model", "llama-3-8b", "--gpu-memory", "80XB")
    bad("gpu-memory-zero", "--model", "llama-3-8b", "--gpu-memory", "0GB")
    bad("overhead-negative", "--model", "llama-3-8b", "--overhead", "-2GB")  # argparse: a flag?
    bad("overhead-negative-equals", "--model", "llama-3-8b", "--overhead=-2GB")
    bad("gpu-memory-negative-equals", "--model", "llama-3-8b", "--gpu-memory=-80GB")
    bad("params-fraction", "--params", "7.5")
    bad("params-zero", "--params", "0", tags=("params",))
    bad("params-word", "--params", "seven", tags=("params",))
    bad("params-bad-suffix", "--params", "7X", tags=("params",))
    bad("tokens-zero", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "0", "--mfu",
        "0.4", tags=("time",))
    bad("tokens-word", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "lots",
        "--mfu", "0.4", tags=("time",))
    bad("mfu-zero", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "1T", "--mfu",
        "0", tags=("time",))
    bad("mfu-above-one", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "1T",
        "--mfu", "1.5", tags=("time",))
    bad("mfu-percent-above", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "1T",
        "--mfu", "140%", tags=("time",))
    bad("mfu-word", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "1T", "--mfu",
        "high", tags=("time",))
    bad("lora-dropout-one", "--model", "llama-3-8b", "--finetune", "lora", "--lora-dropout",
        "1", tags=("lora",))
    bad("lora-rank-zero", "--model", "llama-3-8b", "--finetune", "lora", "--lora-rank", "0",
        tags=("lora",))
    bad("lora-targets-unknown", "--model", "llama-3-8b", "--finetune", "lora",
        "--lora-targets", "q,w", tags=("lora",))
    bad("lora-targets-empty", "--model", "llama-3-8b", "--finetune", "lora", "--lora-targets",
        ",", tags=("lora",))
    bad("unknown-flag", "--model", "llama-3-8b", "--bogus")
    bad("flag-missing-value", "--model")
    bad("positional-argument", "llama-3-8b")
    bad("ambiguous-abbreviation", "--model", "llama-3-8b", "--gp", "h100-sxm")
    bad("ambiguous-abbreviation-seq", "--model", "llama-3-8b", "--seq", "4096")
    bad("repeated-flag-last-wins-bad", "--model", "llama-3-8b", "--model", "nope")
    bad("experts-zero", "--model", "mixtral-8x7b", "--experts", "0", tags=("moe",))
    bad("gpus-per-node-zero", "--model", "llama-3-8b", "--gpus-per-node", "0")
    bad("interleave-zero", "--model", "llama-3-8b", "--interleave", "0")

    # --- bad inputs: models -----------------------------------------------------------------
    bad("no-model")
    bad("no-model-only-training", "--dp", "8", "--zero", "3")
    bad("partial-shape", "--layers", "32", "--hidden", "4096", "--heads", "32", tags=("shape",))
    bad("partial-shape-no-vocab", "--layers", "32", "--hidden", "4096", "--heads", "32",
        "--ffn", "11008", tags=("shape",))
    bad("config-and-model", "--config", CONFIGS["llama3"], "--model", "llama-3-8b",
        tags=("config",))
    bad("config-and-params", "--config", CONFIGS["llama3"], "--params", "8B", tags=("config",))
    bad("params-and-model", "--params", "7B", "--model", "llama-2-7b", tags=("params",))
    bad("params-and-layers", "--params", "7B", "--layers", "32", tags=("params",))
    bad("params-and-experts", "--params", "7B", "--experts", "8", tags=("params",))
    bad("config-missing-file", "--config", MISSING[0], tags=("config",))
    bad("config-directory", "--config", "tests/data/hf-configs", tags=("config",))
    bad("config-not-json", "--config", NOT_CONFIGS["not-json"], tags=("config",))
    bad("config-no-model-type", "--config", NOT_CONFIGS["no-model-type"], tags=("config",))
    bad("hidden-not-divisible-by-heads", "--layers", "24", "--hidden", "2000", "--heads", "24",
        "--ffn", "8192", "--vocab", "32000", tags=("shape",))
    bad("heads-not-divisible-by-kv-heads", "--model", "llama-3-8b", "--kv-heads", "5",
        tags=("shape",))
    bad("experts-per-token-above-experts", "--model", "mixtral-8x7b", "--experts-per-token",
        "9", tags=("moe",))
    bad("experts-without-top-k", "--model", "llama-3-8b", "--experts", "8", tags=("moe",))
    bad("top-k-without-experts", "--model", "llama-3-8b", "--experts-per-token", "2",
        tags=("moe",))
    bad("shared-experts-without-experts", "--model", "llama-3-8b", "--shared-experts", "1",
        tags=("moe",))
    bad("expert-ffn-without-experts", "--model", "llama-3-8b", "--expert-ffn", "1024",
        tags=("moe",))
    bad("bias-with-experts", "--model", "gpt3-175b", "--experts", "8", "--experts-per-token",
        "2", tags=("moe",))

    # --- bad inputs: flags that contradict each other ---------------------------------------
    bad("tokens-without-mfu", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--tokens", "15T",
        tags=("time",))
    bad("mfu-without-tokens", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--mfu", "0.4",
        tags=("time",))
    bad("tokens-without-gpu", "--model", "llama-3-8b", "--tokens", "15T", "--mfu", "0.4",
        tags=("time",))
    bad("tokens-with-gpu-memory-only", "--model", "llama-3-8b", "--gpu-memory", "80GB",
        "--tokens", "15T", "--mfu", "0.4", tags=("time",))
    bad("time-fp32-no-peak", "--model", "llama-3-8b", "--recipe", "fp32", "--gpu", "h100-sxm",
        "--tokens", "1T", "--mfu", "0.4", tags=("time",))
    bad("time-fp8-on-a100", "--model", "llama-3-8b", "--recipe", "fp8-te", "--gpu",
        "a100-sxm", "--tokens", "1T", "--mfu", "0.4", tags=("time",))
    bad("gpus-mismatch", "--model", "llama-3-8b", "--dp", "8", "--tp", "2", "--gpus", "8")
    bad("attention-contradicts-implementation", "--model", "llama-3-8b", "--implementation",
        "megatron-te", "--attention", "eager")
    bad("hf-sdpa-attention-eager", "--model", "llama-3-8b", "--implementation", "hf-sdpa",
        "--attention", "eager")
    bad("deepspeed-zero0", "--model", "llama-3-8b", "--recipe", "deepspeed", "--zero", "0")
    bad("fsdp2-zero2", "--model", "llama-3-8b", "--recipe", "fsdp2", "--zero", "2")
    bad("lora-rank-without-finetune", "--model", "llama-3-8b", "--lora-rank", "8",
        tags=("lora",))
    bad("lora-targets-with-full", "--model", "llama-3-8b", "--finetune", "full",
        "--lora-targets", "q,v", tags=("lora",))
    bad("no-double-quant-without-finetune", "--model", "llama-3-8b", "--no-double-quant",
        tags=("qlora",))
    bad("no-double-quant-with-lora", "--model", "llama-3-8b", "--finetune", "lora",
        "--no-double-quant", tags=("qlora",))
    bad("lora-with-params", "--params", "7B", "--finetune", "lora", tags=("lora", "params"))
    bad("lora-with-tp", "--model", "llama-3-8b", "--finetune", "lora", "--tp", "2",
        tags=("lora",))
    bad("lora-with-pp-and-cp", "--model", "llama-3-8b", "--finetune", "lora", "--pp", "2",
        "--cp", "2", tags=("lora",))
    bad("lora-with-zero3", "--model", "llama-3-8b", "--finetune", "lora", "--zero", "3",
        "--dp", "8", tags=("lora",))
    bad("lora-with-offload", "--model", "llama-3-8b", "--finetune", "lora", "--offload",
        "optimizer", tags=("lora",))
    bad("lora-with-tokens", "--model", "llama-3-8b", "--finetune", "lora", "--gpu",
        "h100-sxm", "--tokens", "1B", "--mfu", "0.4", tags=("lora",))
    bad("lora-with-recipe-megatron", "--model", "llama-3-8b", "--finetune", "lora",
        "--recipe", "megatron", tags=("lora",))
    bad("lora-on-gelu-model", "--model", "gpt3-175b", "--finetune", "lora", tags=("lora",))
    bad("lora-on-gemma-config", "--config", CONFIGS["gemma"], "--finetune", "lora",
        "--seq-len", "2048", tags=("lora", "config"))
    bad("qlora-on-pythia-config", "--config", CONFIGS["pythia"], "--finetune", "qlora",
        tags=("qlora", "config"))
    bad("offload-with-megatron", "--model", "llama-3-8b", "--recipe", "megatron", "--offload",
        "optimizer", "--zero", "2", tags=("offload",))
    bad("offload-optimizer-with-fsdp2", "--model", "llama-3-8b", "--recipe", "fsdp2",
        "--offload", "optimizer", tags=("offload",))
    bad("offload-optimizer-zero1", "--model", "llama-3-8b", "--offload", "optimizer", "--zero",
        "1", tags=("offload",))
    bad("offload-optimizer-default-zero", "--model", "llama-3-8b", "--offload", "optimizer",
        tags=("offload",))
    bad("offload-params-zero2", "--model", "llama-3-8b", "--offload", "params", "--zero", "2",
        tags=("offload",))

    # --- bad inputs: layouts the model cannot run -------------------------------------------
    bad("heads-not-divisible-by-tp", "--model", "llama-3-8b", "--tp", "3")
    bad("kv-heads-not-divisible-by-tp", "--model", "llama-3-8b", "--tp", "16")
    bad("ffn-not-divisible-by-tp", "--layers", "8", "--hidden", "1024", "--heads", "16",
        "--ffn", "1000", "--vocab", "32000", "--tp", "16", tags=("shape",))
    bad("layers-not-divisible-by-pp", "--model", "llama-3-8b", "--pp", "3")
    bad("llama-3-405b-published-pp16", "--model", "llama-3-405b", "--seq-len", "8192", "--tp",
        "8", "--pp", "16", "--dp", "64", "--global-batch", "2048", tags=("pipeline",))
    bad("interleave-without-pp", "--model", "llama-3-8b", "--interleave", "2",
        tags=("pipeline",))
    bad("layers-not-divisible-by-pp-v", "--model", "llama-3-8b", "--pp", "4", "--interleave",
        "3", tags=("pipeline",))
    bad("global-batch-not-divisible", "--model", "llama-3-8b", "--dp", "8", "--micro-batch",
        "2", "--global-batch", "100", tags=("pipeline",))
    bad("seq-not-divisible-by-2cp", "--model", "llama-3-8b", "--cp", "4", "--seq-len", "4100",
        "--attention", "flash")
    bad("seq-not-divisible-by-tp-sp", "--model", "llama-3-8b", "--tp", "8",
        "--sequence-parallel", "--seq-len", "4100")
    bad("several-layout-rules", "--model", "llama-3-8b", "--tp", "3", "--pp", "5", "--dp", "4",
        "--global-batch", "6", "--seq-len", "4096")
    bad("seq-longer-than-max-positions", "--model", "llama-2-7b", "--seq-len", "8192")
    bad("seq-longer-than-learned-positions", "--model", "gpt3-175b", "--seq-len", "4096")
    bad("seq-longer-than-config-positions", "--config", CONFIGS["gpt2"], "--seq-len", "2048",
        tags=("config",))
    bad("cp-with-eager-attention", "--model", "llama-3-8b", "--cp", "2", "--seq-len", "8192",
        "--implementation", "megatron-eager")
    bad("cp-default-eager-custom-shape", *shape, "--cp", "2", "--seq-len", "2048",
        tags=("shape",))
    bad("fsdp2-with-pp", "--model", "llama-3-8b", "--recipe", "fsdp2", "--pp", "2", "--dp",
        "4", "--seq-len", "8192", tags=("pipeline",))
    bad("fsdp2-with-ep", "--model", "mixtral-8x7b", "--recipe", "fsdp2", "--dp", "8", "--ep",
        "2", tags=("moe",))
    bad("ep-not-dividing-dp", "--model", "mixtral-8x7b", "--dp", "6", "--ep", "4",
        tags=("moe",))
    bad("ep-with-dense-model", "--model", "llama-3-8b", "--dp", "8", "--ep", "2",
        tags=("moe",))
    bad("experts-not-divisible-by-ep", "--model", "mixtral-8x7b", "--dp", "16", "--ep", "16",
        tags=("moe",))
    bad("expert-ffn-not-divisible-by-tp", *moe, "--expert-ffn", "1000", "--tp", "16",
        tags=("moe",))
    bad("hf-kernels-with-tp", "--model", "llama-3-8b", "--implementation", "hf-sdpa", "--tp",
        "2", "--seq-len", "4096")
    bad("hf-kernels-selective", "--model", "llama-3-8b", "--implementation", "hf-eager",
        "--recompute", "selective", "--seq-len", "4096")
    bad("hf-kernels-fused-mlp", "--model", "llama-3-8b", "--implementation", "hf-sdpa",
        "--mlp-kernel", "fused", "--seq-len", "4096")
    bad("hf-kernels-gpt-shape", "--model", "gpt3-175b", "--implementation", "hf-sdpa",
        "--seq-len", "2048")
    bad("hf-kernels-shared-experts", *moe, "--shared-experts", "2", "--implementation",
        "hf-sdpa", tags=("moe",))
    bad("params-with-tp", "--params", "7B", "--tp", "2", tags=("params",))
    bad("params-with-pp", "--params", "7B", "--pp", "4", "--dp", "2", tags=("params",))
    bad("params-with-tp-and-pp", "--params", "7B", "--tp", "2", "--pp", "2", tags=("params",))
    bad("params-with-global-batch", "--params", "7B", "--global-batch", "64",
        tags=("params",))
    bad("params-with-interleave", "--params", "7B", "--interleave", "2", tags=("params",))
    bad("params-with-ep", "--params", "7B", "--dp", "8", "--ep", "2", tags=("params",))

    # --- plan: presets on GPU kinds and counts ----------------------------------------------
    def pl(name, model, gpu, gpus, s, gb, *extra, tags=()):
        plan(name, "--model", model, "--gpu", gpu, "--gpus", str(gpus), "--seq-len", str(s),
             "--global-batch", str(gb), *extra, tags=tags)

    pl("llama-3-8b-h100-8", "llama-3-8b", "h100-sxm", 8, 8192, 64)
    pl("llama-3-8b-h100-8-json", "llama-3-8b", "h100-sxm", 8, 8192, 64, "--json")
    pl("llama-3-8b-a100-16", "llama-3-8b", "a100-sxm", 16, 8192, 128)
    pl("llama-3-8b-h200-8-top3", "llama-3-8b", "h200", 8, 8192, 64, "--top", "3")
    pl("llama-3-8b-b200-32", "llama-3-8b", "b200", 32, 8192, 256)
    pl("llama-2-7b-a100-64", "llama-2-7b", "a100-sxm", 64, 4096, 512)
    pl("llama-2-70b-a100-256", "llama-2-70b", "a100-sxm", 256, 4096, 1024)
    pl("llama-3-70b-h100-64", "llama-3-70b", "h100-sxm", 64, 8192, 256)
    pl("llama-3-70b-h100-512", "llama-3-70b", "h100-sxm", 512, 8192, 512)
    pl("llama-3-70b-h200-128-explain", "llama-3-70b", "h200", 128, 8192, 512, "--explain")
    pl("mistral-7b-h100-16", "mistral-7b", "h100-sxm", 16, 4096, 256)
    pl("gpt3-175b-a100-1024", "gpt3-175b", "a100-sxm", 1024, 2048, 1536)
    pl("gpt3-175b-h100-512-json", "gpt3-175b", "h100-sxm", 512, 2048, 1536, "--json")
    pl("llama-3-405b-h100-8192", "llama-3-405b", "h100-sxm", 8192, 8192, 2048)
    pl("llama-3-405b-h100-8192-layout", "llama-3-405b", "h100-sxm", 8192, 8192, 2048,
       "--layout", "dp=512,tp=8,pp=2")
    pl("llama-3-405b-h100-1024-128k", "llama-3-405b", "h100-sxm", 1024, 131072, 64,
       "--cp-across-nodes", "--top", "5")
    megatron = (("1.7b", 32, 512, "dp=32,tp=1"), ("3.6b", 64, 512, "dp=32,tp=2"),
                ("7.5b", 128, 512, "dp=32,tp=4"), ("18.4b", 256, 1024, "dp=32,tp=8"),
                ("39.1b", 512, 1536, "dp=32,tp=8,pp=2"), ("76.1b", 1024, 1792, "dp=32,tp=8,pp=4"),
                ("145.6b", 1536, 2304, "dp=24,tp=8,pp=8"),
                ("310.1b", 1920, 2160, "dp=15,tp=8,pp=16"),
                ("529.6b", 2520, 2520, "dp=9,tp=8,pp=35"), ("1t", 3072, 3072, "dp=6,tp=8,pp=64"),
                ("22b", 8, 4, "tp=8"), ("175b", 64, 64, "tp=8,pp=8"))
    for size, n, gb, layout in megatron:
        pl(f"megatron-gpt-{size}-a100-{n}-layout", f"megatron-gpt-{size}", "a100-sxm", n, 2048,
           gb, "--layout", layout, "--top", "5")
    pl("mixtral-8x7b-h100-64", "mixtral-8x7b", "h100-sxm", 64, 4096, 256, tags=("moe",))
    pl("mixtral-8x7b-h100-16-json", "mixtral-8x7b", "h100-sxm", 16, 4096, 128, "--json",
       tags=("moe",))
    pl("mixtral-8x7b-h200-32-layout-ep", "mixtral-8x7b", "h200", 32, 4096, 256, "--layout",
       "dp=32,ep=8", tags=("moe",))
    pl("mixtral-8x7b-h100-64-explain", "mixtral-8x7b", "h100-sxm", 64, 4096, 256, "--explain",
       "--top", "4", tags=("moe",))

    # --- plan: layouts, explanations, assumptions -------------------------------------------
    base = ("llama-3-8b", "h100-sxm", 8, 8192, 64)
    pl("llama-3-8b-layout-dp8", *base, "--layout", "dp=8")
    pl("llama-3-8b-layout-tp8-selective", *base, "--layout", "tp=8,recompute=selective")
    pl("llama-3-8b-layout-pp4-v2", *base, "--layout", "dp=2,pp=4,v=2")
    pl("llama-3-8b-layout-zero0-no-fit", *base, "--layout", "dp=8,zero=0")
    pl("llama-3-8b-layout-b2-json", *base, "--layout", "dp=4,cp=2,b=2", "--json")
    pl("llama-3-8b-layout-pp2-zero2", *base, "--layout", "dp=4,pp=2,zero=2")
    pl("llama-3-8b-explain-top5", *base, "--explain", "--top", "5")
    pl("llama-3-8b-top-1", *base, "--top", "1")
    pl("llama-3-8b-top-50", *base, "--top", "50")
    # the step-time model's settings (issue 20 replaced --achievable, --overlap-* and --latency)
    pl("llama-3-8b-tp-overlap", *base, "--tp-overlap")
    pl("llama-3-70b-tp-overlap-json", "llama-3-70b", "h100-sxm", 64, 8192, 256, "--tp-overlap",
       "--json")
    pl("llama-3-8b-no-overlap", *base, "--no-overlap")
    pl("llama-3-70b-kernel-fa2", "llama-3-70b", "h100-sxm", 64, 8192, 256, "--attention-kernel",
       "fa2")
    pl("llama-3-8b-sustained-0.45", *base, "--sustained", "0.45")
    pl("llama-3-8b-sustained-1", *base, "--sustained", "1")
    pl("llama-3-70b-nvlink-network", "llama-3-70b", "h100-sxm", 64, 8192, 256, "--nvlink",
       "900", "--network", "25")
    pl("llama-3-70b-tp-across-nodes", "llama-3-70b", "a100-sxm", 64, 4096, 128,
       "--tp-across-nodes", "--top", "5")
    pl("llama-3-8b-cp-across-nodes", "llama-3-8b", "h100-sxm", 32, 8192, 16,
       "--cp-across-nodes", "--top", "5")
    pl("llama-3-8b-gpus-per-node-4", "llama-3-8b", "a100-sxm", 16, 8192, 64,
       "--gpus-per-node", "4")
    for r in RECIPES:
        if r != "fp8-te":  # below, tagged
            pl(f"llama-3-8b-recipe-{r}", *base, "--recipe", r)
    pl("gpt3-175b-recipe-megatron", "gpt3-175b", "a100-sxm", 256, 2048, 512, "--recipe",
       "megatron", "--top", "5")
    pl("llama-3-8b-implementation-megatron-eager", *base, "--implementation", "megatron-eager")
    # exits 2 at bb2c716: the cp = 2 grids end the plan instead of being dropped ("odd")
    pl("llama-3-8b-implementation-hf-sdpa", *base, "--implementation", "hf-sdpa",
       tags=("odd",))
    pl("llama-2-7b-implementation-hf-eager-1gpu", "llama-2-7b", "h200", 1, 4096, 8,
       "--implementation", "hf-eager", tags=("odd",))  # selective recompute ends it
    for o in OPTIMIZERS:
        if o != "adam-8bit":
            pl(f"llama-3-8b-optimizer-{o}", *base, "--optimizer", o)
    pl("llama-3-8b-implementation-megatron-te", *base, "--implementation", "megatron-te")
    pl("llama-3-8b-optimizer-adam-8bit-json", *base, "--optimizer", "adam-8bit", "--json")
    plan("config-llama3-h100-8", "--config", CONFIGS["llama3"], "--gpu", "h100-sxm", "--gpus",
         "8", "--seq-len", "8192", "--global-batch", "64", tags=("config",))
    plan("config-qwen2-h100-16", "--config", CONFIGS["qwen2"], "--gpu", "h100-sxm", "--gpus",
         "16", "--seq-len", "4096", "--global-batch", "128", tags=("config",))
    plan("config-mixtral-h100-32-json", "--config", CONFIGS["mixtral"], "--gpu", "h100-sxm",
         "--gpus", "32", "--seq-len", "4096", "--global-batch", "128", "--json",
         tags=("config", "moe"))
    plan("shape-custom-a100-16", *shape, "--gpu", "a100-sxm", "--gpus", "16", "--seq-len",
         "2048", "--global-batch", "256", tags=("shape",))
    plan("shape-moe-h100-32", *moe, "--shared-experts", "2", "--expert-ffn", "1408", "--gpu",
         "h100-sxm", "--gpus", "32", "--seq-len", "4096", "--global-batch", "256",
         tags=("shape", "moe"))
    plan("shape-gpt-like-a100-16", *shape, "--mlp", "gelu", "--norm", "layernorm",
         "--dropout", "--tied-embeddings", "--gpu", "a100-sxm", "--gpus", "16", "--seq-len",
         "2048", "--global-batch", "256", tags=("shape",))
    plan("shape-geglu-gqa-h100-8", *shape, "--mlp", "geglu", "--kv-heads", "4",
         "--no-dropout", "--norm", "rmsnorm", "--gpu", "h100-sxm", "--gpus", "8", "--seq-len",
         "4096", "--global-batch", "64", tags=("shape",))
    plan("gpt3-175b-swiglu-no-dropout", "--model", "gpt3-175b", "--mlp", "swiglu",
         "--no-dropout", "--gpu", "h100-sxm", "--gpus", "256", "--seq-len", "2048",
         "--global-batch", "512", "--top", "3", tags=("shape",))
    plan("abbreviated-flags", "--mod", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8",
         "--seq", "8192", "--global", "64", "--top", "2")
    plan("llama-3-8b-modified-layers", "--model", "llama-3-8b", "--layers", "24", "--gpu",
         "h100-sxm", "--gpus", "8", "--seq-len", "8192", "--global-batch", "64",
         tags=("shape",))

    # --- plan: fp8-te (tagged: expected to change in the rebuild) ---------------------------
    fp8 = ("fp8-plan",)
    pl("llama-3-8b-h100-8-fp8-te", *base, "--recipe", "fp8-te", tags=fp8)
    pl("llama-3-8b-h100-8-fp8-te-json", *base, "--recipe", "fp8-te", "--json", tags=fp8)
    pl("llama-3-70b-h100-512-fp8-te", "llama-3-70b", "h100-sxm", 512, 8192, 512, "--recipe",
       "fp8-te", tags=fp8)
    pl("llama-3-70b-h100-512-fp8-te-layout", "llama-3-70b", "h100-sxm", 512, 8192, 512,
       "--recipe", "fp8-te", "--layout", "dp=16,tp=8,pp=4", "--explain", tags=fp8)
    pl("llama-3-405b-h100-8192-fp8-te", "llama-3-405b", "h100-sxm", 8192, 8192, 2048,
       "--recipe", "fp8-te", tags=fp8)  # exit 2 at bb2c716: nothing fits
    pl("mixtral-8x7b-h200-64-fp8-te", "mixtral-8x7b", "h200", 64, 4096, 256, "--recipe",
       "fp8-te", "--explain", tags=fp8 + ("moe",))
    pl("llama-3-8b-b200-32-fp8-te", "llama-3-8b", "b200", 32, 8192, 256, "--recipe", "fp8-te",
       tags=fp8)
    pl("llama-3-8b-a100-8-fp8-te", "llama-3-8b", "a100-sxm", 8, 8192, 64, "--recipe", "fp8-te",
       tags=fp8)

    # --- plan: the GPU alias estimate accepts (an error at bb2c716, meant to become an answer)
    pl("llama-3-8b-a100-80gb-alias", "llama-3-8b", "a100-80gb", 8, 8192, 64,
       tags=("plan-gpu-alias",))

    # --- plan: bad inputs -------------------------------------------------------------------
    req = {"--model": "llama-3-8b", "--gpu": "h100-sxm", "--gpus": "8", "--seq-len": "8192",
           "--global-batch": "64"}

    def without(flag):
        return [x for k, v in req.items() if k != flag for x in (k, v)]

    for flag in ("--gpu", "--gpus", "--seq-len", "--global-batch"):
        plan_bad(f"missing-{flag[2:]}", *without(flag))
    plan_bad("missing-everything")
    plan_bad("no-model", *without("--model"))
    full = [x for kv in req.items() for x in kv]
    plan_bad("unknown-gpu", *without("--gpu"), "--gpu", "v100")
    plan_bad("unknown-preset", *without("--model"), "--model", "gpt-5")
    plan_bad("unknown-recipe", *full, "--recipe", "int8")
    plan_bad("unknown-implementation", *full, "--implementation", "xformers")
    plan_bad("unknown-optimizer", *full, "--optimizer", "adagrad")
    plan_bad("params-only", "--params", "8B", *without("--model"), tags=("params",))
    plan_bad("gpus-zero", *without("--gpus"), "--gpus", "0")
    plan_bad("global-batch-word", *without("--global-batch"), "--global-batch", "big")
    plan_bad("sustained-above-one", *full, "--sustained", "1.5")
    plan_bad("sustained-zero", *full, "--sustained", "0")
    plan_bad("sustained-word", *full, "--sustained", "most")
    plan_bad("unknown-kernel", *full, "--attention-kernel", "fa9")
    plan_bad("nvlink-zero", *full, "--nvlink", "0")
    plan_bad("network-negative", *full, "--network", "-50")
    plan_bad("overlap-dp-above-one", *full, "--overlap-dp", "2")
    plan_bad("overlap-cp-negative", *full, "--overlap-cp", "-0.1")
    plan_bad("top-zero", *full, "--top", "0")
    plan_bad("gpus-per-node-zero", *full, "--gpus-per-node", "0")
    plan_bad("layout-not-key-value", *full, "--layout", "dp")
    plan_bad("layout-unknown-key", *full, "--layout", "dp=8,sp=2")
    plan_bad("layout-bad-number", *full, "--layout", "dp=eight")
    plan_bad("layout-b-zero", *full, "--layout", "dp=8,b=0")
    plan_bad("layout-wrong-gpu-count", *full, "--layout", "dp=4")
    plan_bad("layout-empty", *full, "--layout", "")
    plan_bad("layout-every-key-zero-9", *full, "--layout", "dp=8,tp=1,cp=1,pp=1,ep=1,v=1,"
             "zero=9")
    plan_bad("layout-invalid-grid", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus",
             "24", "--seq-len", "8192", "--global-batch", "48", "--layout", "dp=8,tp=3")
    plan_bad("layout-tp-spans-nodes", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--gpus",
             "32", "--seq-len", "8192", "--global-batch", "64", "--layout", "dp=2,tp=16")
    plan_bad("layout-interleave-without-pp", *full, "--layout", "dp=8,v=2")
    plan_bad("layout-ep-dense", *full, "--layout", "dp=8,ep=2", tags=("moe",))
    plan_bad("layout-unknown-recompute", *full, "--layout", "dp=8,recompute=some")
    plan_bad("layout-zero-5", *full, "--layout", "dp=8,zero=5")
    plan_bad("layout-batch-not-divisible", *full, "--layout", "dp=8,b=3")
    plan_bad("layout-fsdp2-pp", *full, "--recipe", "fsdp2", "--layout", "dp=4,pp=2")
    plan_bad("layout-deepspeed-zero0", *full, "--recipe", "deepspeed", "--layout",
             "dp=8,zero=0")
    plan_bad("layout-llama-3-405b-published-pp16", "--model", "llama-3-405b", "--gpu",
             "h100-sxm", "--gpus", "8192", "--seq-len", "8192", "--global-batch", "2048",
             "--layout", "dp=64,tp=8,pp=16")
    plan_bad("seq-longer-than-max-positions", *without("--model"), "--model", "llama-2-7b")
    plan_bad("nothing-fits", "--model", "llama-3-405b", "--gpu", "a100-sxm", "--gpus", "8",
             "--seq-len", "8192", "--global-batch", "8")
    plan_bad("no-valid-split", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "7",
             "--seq-len", "8192", "--global-batch", "64")
    plan_bad("estimate-only-flag-dp", *full, "--dp", "8")
    plan_bad("estimate-only-flag-precision", *full, "--precision", "bf16")
    plan_bad("estimate-only-flag-finetune", *full, "--finetune", "lora", tags=("lora",))
    plan_bad("config-missing-file", "--config", MISSING[0], *without("--model"),
             tags=("config",))
    plan_bad("partial-shape", "--layers", "32", "--hidden", "4096", *without("--model"),
             tags=("shape",))
    plan_bad("hf-kernels-gpt-shape", "--model", "gpt3-175b", "--gpu", "a100-sxm", "--gpus",
             "64", "--seq-len", "2048", "--global-batch", "64", "--implementation", "hf-sdpa")
    return cases


def _selected(tags: list[str]) -> list[Case]:
    """The cases with every tag in ``tags`` (all of them when none is given)."""
    cases = [c for c in corpus() if all(t in c.tags for t in tags)]
    if not cases:
        raise SystemExit(f"corpus: no case has the tags {', '.join(tags)}")
    return cases


def corpus() -> list[Case]:
    """The corpus, checked: ids unique and readable."""
    cases = _tagged(_build())
    seen: set[str] = set()
    for c in cases:
        if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", c.id):
            raise SystemExit(f"corpus: id {c.id!r} is not lower-case letters, digits, . + -")
        if c.id in seen:
            raise SystemExit(f"corpus: id {c.id!r} appears twice")
        seen.add(c.id)
    return cases


# -- running ------------------------------------------------------------------------------------
def _env(src: Path, pycache: Path) -> dict[str, str]:
    """The invocations' environment: the caller's, less every PYTHON* setting, with the source
    tree on PYTHONPATH, bytecode kept out of the tree, and help text at a fixed width."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON") and k not in ("FORCE_COLOR", "CLICOLOR_FORCE")}
    env.update(PYTHONPATH=str(src), PYTHONPYCACHEPREFIX=str(pycache), PYTHONIOENCODING="utf-8",
               PYTHONUTF8="1", COLUMNS="80", LINES="24", NO_COLOR="1", TERM="dumb",
               LC_ALL="C.UTF-8")
    return env


def _text(b: bytes) -> tuple[list[str], bool]:
    """Output as lines (ends kept: joined, they are the bytes), and whether it was UTF-8."""
    try:
        return b.decode("utf-8").splitlines(keepends=True), True
    except UnicodeDecodeError:
        return b.decode("utf-8", "backslashreplace").splitlines(keepends=True), False


def _run_one(case: Case, cwd: Path, env: dict[str, str], timeout: float) -> tuple[dict, float]:
    start = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "trainmath", *case.argv], cwd=cwd, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        code: int | str = p.returncode
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        code = f"timeout after {timeout:g} s"
        out, err = exc.stdout or b"", exc.stderr or b""
    took = time.monotonic() - start
    record = {"id": case.id, "tags": list(case.tags), "argv": ["trainmath", *case.argv],
              "exit": code}
    for name, data in (("stdout", out), ("stderr", err)):
        lines, utf8 = _text(data)
        record[f"{name}_sha256"] = hashlib.sha256(data).hexdigest()
        record[f"{name}_bytes"] = len(data)
        if not utf8:
            record[f"{name}_not_utf8"] = True
        record[name] = lines
    return record, took


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def run_corpus(src: Path, out: Path, *, cwd: Path | None = None, jobs: int = 2,
               timeout: float = 120.0, cases: list[Case] | None = None, label: str = "",
               quiet: bool = False) -> dict:
    """Run every case from the source tree ``src`` into ``out``/cases/<id>.json; return the
    manifest (also written to ``out``/manifest.json, with timings: not for diffing)."""
    src = src.resolve()
    cwd = (cwd or src.parent).resolve()
    cases = corpus() if cases is None else cases
    if not (src / "trainmath" / "__init__.py").is_file():
        raise SystemExit(f"corpus: {src} has no trainmath package (give the src directory)")
    for rel in DATA_FILES:
        if not (cwd / rel).is_file():
            raise SystemExit(f"corpus: {cwd} lacks {rel}, which the corpus reads")
    for rel in MISSING:
        if (cwd / rel).exists():
            raise SystemExit(f"corpus: {cwd / rel} exists; the corpus needs it missing")
    case_dir = out / "cases"
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="trainmath-corpus-pycache-") as pycache:
        env = _env(src, Path(pycache))
        probe = subprocess.run([sys.executable, "-c", "import trainmath; print(trainmath.__file__)"],
                               cwd=cwd, env=env, capture_output=True, text=True)
        imported = probe.stdout.strip()
        if probe.returncode or not Path(imported).resolve().is_relative_to(src):
            raise SystemExit(f"corpus: from {cwd} with PYTHONPATH={src}, trainmath is "
                             f"{imported or probe.stderr.strip()!r}, not the one in {src}")
        started = time.monotonic()
        timings: dict[str, float] = {}
        counts: dict[str, int] = {}
        lock = threading.Lock()
        done = [0]

        def work(case: Case) -> None:
            record, took = _run_one(case, cwd, env, timeout)
            _write_json(case_dir / f"{case.id}.json", record)
            with lock:
                timings[case.id] = round(took, 3)
                key = str(record["exit"])
                counts[key] = counts.get(key, 0) + 1
                done[0] += 1
                if not quiet and sys.stderr.isatty():
                    print(f"\r{label}{done[0]}/{len(cases)}", end="", file=sys.stderr, flush=True)

        # the slowest first (plans of many GPUs), so two workers end together
        order = sorted(cases, key=lambda c: c.argv[:1] != ("plan",))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(work, order))
        wall = time.monotonic() - started
    if not quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    unexpected = _unexpected(case_dir, cases)
    manifest = {
        "src": str(src), "cwd": str(cwd), "trainmath": imported, "python": sys.version,
        "executable": sys.executable, "revision": _describe(cwd), "jobs": jobs,
        "timeout_s": timeout, "invocations": len(cases), "wall_s": round(wall, 2),
        "exit_counts": dict(sorted(counts.items())), "unexpected": unexpected,
        "slowest": sorted(timings.items(), key=lambda kv: -kv[1])[:10],
        "seconds": dict(sorted(timings.items())),
    }
    _write_json(out / "manifest.json", manifest)
    if not quiet:
        exits = ", ".join(f"exit {k}: {v}" for k, v in manifest["exit_counts"].items())
        print(f"{label}ran {len(cases)} invocations from {src} in {wall:.1f} s ({exits})")
        for line in unexpected:
            print(f"{label}  note: {line}")
    return manifest


#: Cases whose output the rebuild of issue 19 changes on purpose, beyond the fp8-te plans, and why
#: (the tags above).
CHANGED_ON_PURPOSE = {
    "rule-words": (
        "estimate-bad-gpus-mismatch", "estimate-bad-lora-with-params",
        "estimate-bad-mfu-without-tokens", "estimate-bad-params-with-ep",
        "estimate-bad-params-with-global-batch", "estimate-bad-params-with-interleave",
        "estimate-bad-params-with-pp", "estimate-bad-params-with-tp",
        "estimate-bad-params-with-tp-and-pp", "estimate-bad-tokens-with-gpu-memory-only",
        "estimate-bad-tokens-without-gpu", "estimate-bad-tokens-without-mfu",
        "plan-bad-layout-batch-not-divisible", "plan-bad-layout-ep-dense",
        "plan-bad-layout-fsdp2-pp", "plan-bad-layout-invalid-grid", "plan-bad-no-valid-split",
        "plan-bad-params-only", "plan-bad-seq-longer-than-max-positions",
        "plan-gpt3-175b-h100-512-json"),
    "plan-gpu-alias": ("plan-help", "plan-bad-unknown-gpu"),
    "peak-precision": ("plan-llama-3-8b-recipe-fp16-mixed", "plan-llama-3-8b-recipe-fp32"),
}


def _tagged(cases: list[Case]) -> list[Case]:
    """The cases with the tags of :data:`CHANGED_ON_PURPOSE` added."""
    extra: dict[str, list[str]] = {}
    for tag, ids in CHANGED_ON_PURPOSE.items():
        for i in ids:
            extra.setdefault(i, []).append(tag)
    known = {c.id for c in cases}
    missing = sorted(set(extra) - known)
    if missing:
        raise SystemExit(f"corpus: CHANGED_ON_PURPOSE names cases that do not exist: {missing}")
    return [Case(c.id, c.argv, tuple(dict.fromkeys((*c.tags, *extra.get(c.id, ())))))
            for c in cases]


def _unexpected(case_dir: Path, cases: list[Case]) -> list[str]:
    """Cases whose exit status is not what their tags suggest (information, not a failure)."""
    notes = []
    for c in cases:
        code = json.loads((case_dir / f"{c.id}.json").read_text(encoding="utf-8"))["exit"]
        if {"odd", "plan-gpu-alias", "fp8-plan", "rule-words", "peak-precision"} & set(c.tags):
            continue  # no expectation: questionable now, or meant to change
        want = 2 if "bad" in c.tags else 0
        if code != want:
            notes.append(f"{c.id}: exit {code} (tags {', '.join(c.tags)})")
    return notes


def _describe(path: Path) -> str | None:
    """The commit checked out at ``path`` (if it is the top of a git checkout), and whether
    tracked files are changed."""
    top = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True)
    if top.returncode or Path(top.stdout.strip()).resolve() != path.resolve():
        return None
    p = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                       text=True)
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return p.stdout.strip() + (" (uncommitted changes)" if dirty else "")


# -- diffing ------------------------------------------------------------------------------------
def _load(out: Path) -> dict[str, dict]:
    case_dir = out / "cases"
    if not case_dir.is_dir():
        raise SystemExit(f"corpus: {out} has no cases/ (the output of `corpus.py run`)")
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(case_dir.glob("*.json"))}


def _streams_differ(a: dict, b: dict) -> list[str]:
    what = ["argv"] if a["argv"] != b["argv"] else []  # outputs of two different corpora
    if a["exit"] != b["exit"]:
        what.append("exit")
    for s in ("stdout", "stderr"):
        if a[f"{s}_sha256"] != b[f"{s}_sha256"]:
            what.append(s)
    return what


def _udiff(a: list[str], b: list[str], name_a: str, name_b: str, limit: int) -> list[str]:
    if len(a) + len(b) > 40000:  # difflib is slow on long, much-changed JSON: compare in a
        a, b = a[:20000], b[:20000]  # prefix, and say so
        clipped = ["  (only the first 20,000 lines of each compared)"]
    else:
        clipped = []
    lines = [ln.rstrip("\n") for ln in difflib.unified_diff(a, b, name_a, name_b, n=2)]
    if not lines and a != b:  # only a line ending differs, which unified_diff can hide
        lines = ["  (they differ only in line endings or a final newline)"]
    head, body = lines[:2], lines[2:]  # the ---/+++ lines do not count
    more = len(body) - limit
    lines = head + body[:limit] + ([f"  ... {more} more diff lines"] if more > 0 else [])
    return clipped + ["    " + ln for ln in lines]


def report(sides: list[tuple[str, Path]], allow: set[str], limit: int,
           show_allowed: bool = True) -> int:
    """Diff each side against the first; print the summary and each difference. Return 0 when
    every difference is in a case with an allowed tag, else 1."""
    (ref_label, ref_out), *others = sides
    ref = _load(ref_out)
    status = 0
    for label, out in others:
        other = _load(out)
        ids = sorted(set(ref) | set(other))
        same, allowed, refused = [], [], []
        for i in ids:
            a, b = ref.get(i), other.get(i)
            if a is None or b is None:
                refused.append((i, a or b, None))
                continue
            what = _streams_differ(a, b)
            if not what:
                same.append(i)
            elif allow & set(a["tags"]) or allow & set(b["tags"]):
                allowed.append((i, a, b, what))
            else:
                refused.append((i, a, b, what))
        print(f"A = {ref_label}")
        print(f"B = {label}")
        print(f"{len(ids)} invocations: {len(same)} identical, {len(allowed) + len(refused)} "
              f"differ ({len(allowed)} allowed by --allow {', '.join(sorted(allow)) or '-'}; "
              f"{len(refused)} not allowed)")
        groups = [("NOT ALLOWED", refused)] + ([("allowed", allowed)] if show_allowed else [])
        for heading, items in groups:
            for item in items:
                i, a, b = item[0], item[1], item[2]
                print()
                if b is None:
                    where = "B" if i in ref else "A"
                    print(f"=== {i} [{', '.join(a['tags'])}] ({heading}): missing from {where}")
                    continue
                what = item[3]
                print(f"=== {i} [{', '.join(a['tags'])}] ({heading}): {', '.join(what)} differ")
                print(f"    $ {shlex.join(a['argv'])}")
                if "argv" in what:
                    print(f"  argv: B ran $ {shlex.join(b['argv'])} (the corpus changed)")
                if "exit" in what:
                    print(f"  exit: A {a['exit']}, B {b['exit']}")
                for s in ("stdout", "stderr"):
                    if s in what:
                        print(f"  {s}: A {a[s + '_bytes']} bytes, B {b[s + '_bytes']} bytes")
                        for ln in _udiff(a[s], b[s], f"A/{s}", f"B/{s}", limit):
                            print(ln)
        if allowed and not show_allowed:
            print("\nallowed differences: " + ", ".join(i for i, *_ in allowed))
        print(f"\nsummary: {len(ids)} invocations, {len(same)} identical, "
              f"{len(allowed) + len(refused)} differ ({len(allowed)} allowed, "
              f"{len(refused)} not allowed)")
        if refused:
            status = 1
    return status


# -- git worktrees ------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"corpus: git {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout.strip()


@contextlib.contextmanager
def _worktrees(repo: str | None, revisions: list[str]):
    """A detached git worktree of each revision in a temporary directory, as (label, path);
    removed (and pruned from the repository's list) on the way out."""
    top = Path(_git(Path(repo or Path(__file__).resolve().parent), "rev-parse", "--show-toplevel"))
    tmp = Path(tempfile.mkdtemp(prefix="trainmath-corpus-"))
    added: list[Path] = []
    try:
        trees = []
        for n, rev in enumerate(revisions):
            sha = _git(top, "rev-parse", "--verify", f"{rev}^{{commit}}")
            tree = tmp / f"tree-{n}"
            _git(top, "worktree", "add", "--detach", str(tree), sha)
            added.append(tree)
            trees.append((f"{rev} ({sha[:12]})", tree))
        yield trees
    finally:
        for tree in added:
            subprocess.run(["git", "-C", str(top), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
        if added:
            subprocess.run(["git", "-C", str(top), "worktree", "prune"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def compare(args: argparse.Namespace) -> int:
    if len(args.revisions) + len(args.workdir) < 2:
        raise SystemExit("corpus: compare needs at least two sides (revisions and --workdir)")
    keep = Path(args.keep) if args.keep else None
    with _worktrees(args.repo, args.revisions) as trees, \
            tempfile.TemporaryDirectory(prefix="trainmath-corpus-out-") as tmp:
        for what in args.workdir:
            tree = Path(what).resolve()
            state = _describe(tree)
            trees.append((f"working tree {tree}" + (f" at {state}" if state else ""), tree))
        outs: list[tuple[str, Path]] = []
        start = time.monotonic()
        for n, (label, tree) in enumerate(trees):
            out = (keep / f"side-{n}") if keep else Path(tmp) / f"out-{n}"
            run_corpus(tree / "src", out, cwd=tree, jobs=args.jobs, timeout=args.timeout,
                       cases=_selected(args.only), label=f"[{n}] ")
            outs.append((label, out))
        print(f"ran {len(trees)} sides in {time.monotonic() - start:.1f} s\n")
        return report(outs, set(args.allow), args.lines, not args.hide_allowed)


# -- coverage -----------------------------------------------------------------------------------
def coverage(src: Path) -> int:
    """The flags each subcommand's --help lists (at the source tree ``src``) that no case uses,
    and the names its help offers after "one of:" that no case gives; 1 if any."""
    src = src.resolve()
    cases = corpus()
    missing = 0
    with tempfile.TemporaryDirectory(prefix="trainmath-corpus-pycache-") as pycache:
        env = _env(src, Path(pycache))
        for sub in ("estimate", "plan"):
            p = subprocess.run([sys.executable, "-m", "trainmath", sub, "--help"], cwd=src.parent,
                               env=env, capture_output=True, text=True)
            helptext = p.stdout
            argvs = [c.argv for c in cases if c.argv[:1] == (sub,)]
            words = {w.split("=")[0] for a in argvs for w in a}
            flags = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", helptext)))
            unused = [f for f in flags if f not in words]
            values = {w for a in argvs for w in a}
            joined = re.sub(r"\s+", " ", re.sub(r"-\n\s*", "-", helptext))
            offered = {v for m in re.findall(r"one of: ([a-z0-9., -]+)", joined)
                       for v in re.split(r",\s*", m.strip(" .")) if v and " " not in v}
            names = sorted(v for v in offered if v not in values)
            print(f"{sub}: {len(flags)} flags and {len(offered)} names in --help, {len(argvs)} "
                  "cases; unused flags: "
                  f"{' '.join(unused) or 'none'}; names never given: "
                  f"{' '.join(names) or 'none'}")
            missing += len(unused) + len(names)
    return 1 if missing else 0


# -- the command --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corpus.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="print the corpus and its counts")
    ls.add_argument("--tag", action="append", default=[], help="only cases with this tag")
    ls.add_argument("--json", action="store_true", help="one JSON object per case")

    def common(p):
        p.add_argument("-j", "--jobs", type=int, default=2, help="parallel invocations (2)")
        p.add_argument("--timeout", type=float, default=120.0,
                       help="seconds per invocation (120); a timeout is recorded as the exit")
        p.add_argument("--tag", action="append", default=[], dest="only",
                       help="only the cases with this tag (repeatable: with all of them)")

    cv = sub.add_parser("coverage", help="flags and names in --help (at --src) that no case uses")
    cv.add_argument("--src", required=True, help="the src directory holding trainmath/")

    rn = sub.add_parser("run", help="run the corpus from one source tree")
    where = rn.add_mutually_exclusive_group(required=True)
    where.add_argument("--src", help="the src directory holding trainmath/")
    where.add_argument("--rev", help="a git revision: run it from a temporary worktree")
    rn.add_argument("--repo", help="the git repository of --rev (default: this script's)")
    rn.add_argument("--out", required=True, help="output directory (its cases/ is replaced)")
    rn.add_argument("--cwd", help="working directory (default: the parent of --src, the "
                    "checkout root, where tests/data/... resolve)")
    common(rn)

    def reporting(p):
        p.add_argument("--allow", action="append", default=[], metavar="TAG",
                       help="differences in cases with this tag do not fail (repeatable)")
        p.add_argument("--lines", type=int, default=60,
                       help="diff lines shown per stream and case (60)")
        p.add_argument("--hide-allowed", action="store_true",
                       help="list allowed differences by id only")

    cp = sub.add_parser("compare", help="run the corpus at git revisions and/or working trees "
                        "and diff each against the first")
    cp.add_argument("revisions", nargs="*", metavar="REV")
    cp.add_argument("--workdir", "--worktree", action="append", default=[], metavar="PATH",
                    help="a checkout as it is on disk, uncommitted changes included "
                    "(repeatable; after the revisions)")
    cp.add_argument("--repo", help="the git repository of the revisions (default: this "
                    "script's)")
    cp.add_argument("--keep", metavar="DIR", help="keep each side's output in DIR/side-N")
    common(cp)
    reporting(cp)

    df = sub.add_parser("diff", help="diff two earlier `run` outputs (the first is A)")
    df.add_argument("outs", nargs="+", metavar="OUTDIR")
    reporting(df)

    args = parser.parse_args(argv)
    if args.cmd == "list":
        cases = _selected(args.tag)
        for c in cases:
            if args.json:
                print(json.dumps({"id": c.id, "tags": list(c.tags), "argv": list(c.argv)}))
            else:
                print(f"{c.id:<58} [{', '.join(c.tags)}]\n    {c.command}")
        counts: dict[str, int] = {}
        for c in cases:
            for t in c.tags:
                counts[t] = counts.get(t, 0) + 1
        print(f"\n{len(cases)} invocations; by tag: "
              + ", ".join(f"{t} {n}" for t, n in sorted(counts.items(), key=lambda kv: -kv[1])),
              file=sys.stderr if args.json else sys.stdout)
        return 0
    if args.cmd == "coverage":
        return coverage(Path(args.src))
    if args.cmd == "run":
        if args.src:
            run_corpus(Path(args.src), Path(args.out), cwd=Path(args.cwd) if args.cwd else None,
                       jobs=args.jobs, timeout=args.timeout, cases=_selected(args.only))
            return 0
        with _worktrees(args.repo, [args.rev]) as [(_, tree)]:
            run_corpus(tree / "src", Path(args.out), cwd=tree, jobs=args.jobs,
                       timeout=args.timeout, cases=_selected(args.only))
        return 0
    if args.cmd == "compare":
        return compare(args)
    if len(args.outs) < 2:
        raise SystemExit("corpus: diff needs two or more output directories")
    return report([(str(Path(o).resolve()), Path(o)) for o in args.outs], set(args.allow),
                  args.lines, not args.hide_allowed)


if __name__ == "__main__":
    sys.exit(main())
