"""python -m validate.gpu OUT.json [--only REGEX]: the same steps on a real CUDA GPU.

Run on a machine with one NVIDIA GPU and PyTorch built for CUDA (not part of ``make validate``,
which is CPU only). It records two things in OUT.json:

1. **What a process holds on the GPU beyond its tensors**, read with NVML (what ``nvidia-smi``
   reports) against PyTorch's own accounting, stage by stage: the CUDA context, cuBLAS's first
   matrix product, a flash-attention forward and backward, an NCCL communicator (one rank: the
   smallest NCCL gets), so the page can put a measured figure beside the sourced ones.
2. **Real training steps** of configurations recorded in ``docs/_data/measurements.json``
   (measured there under FakeTensorMode on the CPU), run here with real tensors on the GPU by
   the same code (:func:`validate.measure.step.measure_step` with ``device="cuda"``):
   ``torch.cuda.max_memory_allocated()`` over the second step (the allocator's view: its
   512-byte rounding and kernel workspaces included) and ``max_memory_reserved()`` (the
   segments it holds, fragmentation included), beside the live-tensor peak the same tracker
   sees on the GPU and the fake-tensor figure recorded on the CPU.

The file is written after every configuration, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import torch

from .measure import configs
from .measure.finetune import measure_lora
from .measure.step import measure_step

RECORDED = configs.OUTPUT
# In this order (cheapest first): everything that fits one 141 GB H200 in the recorded set.
CHOSEN = (
    r"^step/gpt3-xl/reference-sdpa/(?!fsdp2)",
    r"^step/llama-2-7b/reference-sdpa/(?!fsdp2)",
    r"^step/llama-2-7b/hf-sdpa/(?!fsdp2)",
    r"^step/mistral-7b/reference-sdpa/(autocast-fp32|megatron-bf16|bf16-master-free-grads)/",
    r"^finetune/",
)


def _nvml_used() -> int | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0")
                                                        .split(",")[0] or 0))
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # no NVML: the stage still records PyTorch's figures
        return None


def _stage(name: str, baseline: int | None, out: list) -> None:
    torch.cuda.synchronize()
    used = _nvml_used()
    free, total = torch.cuda.mem_get_info()
    row = {
        "stage": name,
        "nvml_used_by_process": None if used is None or baseline is None else used - baseline,
        "cuda_used_on_device": total - free,
        "torch_allocated": torch.cuda.memory_allocated(),
        "torch_reserved": torch.cuda.memory_reserved(),
    }
    if row["nvml_used_by_process"] is not None:
        row["outside_torch_allocator"] = row["nvml_used_by_process"] - row["torch_reserved"]
    out.append(row)
    print(f"  {name:<40} used by process {row['nvml_used_by_process']}, reserved "
          f"{row['torch_reserved']}, outside the allocator {row.get('outside_torch_allocator')}",
          flush=True)


def overhead() -> list[dict]:
    """The stages of a process's GPU memory, before any training state exists."""
    import torch.distributed as dist
    import torch.nn.functional as F

    baseline = _nvml_used()  # before this process makes a CUDA context
    rows: list[dict] = []
    torch.empty(1, device="cuda")
    _stage("CUDA context, one tensor", baseline, rows)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    _stage("after a bf16 matrix product (cuBLAS)", baseline, rows)
    q = torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    _stage("after flash attention fwd+bwd", baseline, rows)
    del a, q
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        _stage("after an NCCL all-reduce (1 rank)", baseline, rows)
        dist.destroy_process_group()
    except Exception as e:  # record why, keep going
        rows.append({"stage": "NCCL", "error": repr(e)})
    gc.collect()
    torch.cuda.empty_cache()
    _stage("after empty_cache", baseline, rows)
    return rows


class _CudaPeak:
    """An observer for measure_step: the allocator's peaks over the second step."""

    def __init__(self) -> None:
        self.allocated = self.reserved = self.start_allocated = None

    def __call__(self, net, opt):
        return self

    def __enter__(self):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self.start_allocated = torch.cuda.memory_allocated()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize()
        self.allocated = torch.cuda.max_memory_allocated()
        self.reserved = torch.cuda.max_memory_reserved()
        return False


def _record(doc: dict, key: str, out_path: Path, row: dict, measure) -> None:
    """Measure one configuration (``measure(peak)`` runs it with the observer ``peak`` and
    returns its own fields), add the allocator's peaks to ``row``, append it to ``doc[key]``,
    write the file at once (a run cut short keeps what it measured) and print a line. Running
    out of memory is recorded as ``out_of_memory``, any other failure as ``error``."""
    peak = _CudaPeak()
    start = time.perf_counter()
    try:
        row |= measure(peak)
        row |= {"cuda_max_allocated": peak.allocated, "cuda_max_reserved": peak.reserved,
                "allocated_at_step_start": peak.start_allocated}
    except torch.cuda.OutOfMemoryError as e:
        row["out_of_memory"] = str(e).splitlines()[0]
    except Exception as e:  # record why, keep going
        row["error"] = repr(e)[:500]
    row["seconds"] = round(time.perf_counter() - start, 1)
    doc[key].append(row)
    gc.collect()
    torch.cuda.empty_cache()
    out_path.write_text(json.dumps(doc, indent=1) + "\n")
    alloc, pred = row.get("cuda_max_allocated"), row.get("predicted_peak")
    ratio = f"{alloc / pred:.4f}" if alloc and pred else "-"
    print(f"  {row['id']:<62} max_allocated {alloc} predicted {pred} ratio {ratio} "
          f"({row['seconds']} s){' OOM' if 'out_of_memory' in row else ''} "
          f"{row.get('error', '')}", flush=True)


def steps(only: str | None, out_path: Path, doc: dict) -> None:
    recorded = {c["id"]: c for c in json.loads(RECORDED.read_text())["configurations"]}
    from trainmath.checks.measured import estimate_of

    todo = []
    for pattern in ([only] if only else CHOSEN):
        todo += [c for c in configs.configurations() if re.search(pattern, c.id) and c not in todo]
    for c in todo:
        row = {"id": c.id}
        rec = recorded.get(c.id)
        if rec:
            row["fake_peak_on_cpu"] = rec["measured"]["peak"]["bytes"]
            row["fake_phase_on_cpu"] = rec["measured"]["peak"]["phase"]
            est = estimate_of(rec)
            row["predicted_peak"] = -(-est.peak.bytes.n // 1) if est.peak else None

        def measure(peak, c=c):
            if c.kind == "finetune":
                m = measure_lora(c.model, c.rank_r, c.targets, c.s, c.b, foreach=c.foreach,
                                 fake=False, observer=peak, device="cuda")
            else:
                m = measure_step(c.model, c.implementation, c.recipe, c.s, c.b,
                                 foreach=c.foreach, fake=False, observer=peak, device="cuda")
            return {"tracker_peak_on_gpu": m["peak"]["bytes"], "phase_on_gpu": m["peak"]["phase"]}
        _record(doc, "steps", out_path, row, measure)


QLORA = (("llama-2-7b", 16, ("q", "v"), 2048), ("llama-2-7b", 64, ("q", "k", "v", "o", "gate", "up",
                                                                  "down"), 2048))


def measure_qlora(model: str, rank: int, targets: tuple[str, ...], s: int, b: int = 1,
                  observer=None, device: str = "cuda", layers: int | None = None) -> dict:
    """QLoRA as Dettmers et al. 2023 train it, on the GPU: every Linear of the decoder layers
    replaced by bitsandbytes' ``Linear4bit`` (NF4, blocks of 64, Double Quantization, bf16
    compute), its weight quantized from the bf16 one; the embedding, norms and LM head stay
    bf16 (transformers' ``get_keys_to_not_convert`` keeps the head); peft's LoRA with fp32
    adapters on the targets; torch.optim.AdamW over the adapters, two steps."""
    import bitsandbytes as bnb
    from torch import nn

    from .measure import shapes
    from .measure.finetune import lora_model
    from .measure.models import build, decoder_layers, loss_of

    shape = shapes.for_length(model, s)
    with torch.device(device):
        torch.manual_seed(0)
        base = build("hf-sdpa", shape, torch.bfloat16, layers)
        for layer in decoder_layers(base):
            for parent in list(layer.modules()):
                for name, child in list(parent.named_children()):
                    if type(child) is nn.Linear:
                        q = bnb.nn.Linear4bit(child.in_features, child.out_features,
                                              bias=child.bias is not None,
                                              compute_dtype=torch.bfloat16,
                                              compress_statistics=True, quant_type="nf4",
                                              device="meta")
                        q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False,
                                                     quant_type="nf4",
                                                     compress_statistics=True).to(device)
                        setattr(parent, name, q)
                        del child
        if device == "cuda":
            torch.cuda.empty_cache()
        net = lora_model(base, rank, targets)
        inner = net.base_model.model
        trainable = [p for p in net.parameters() if p.requires_grad]
        tokens = torch.randint(0, shape["vocab"], (b, s))
        labels = torch.randint(0, shape["vocab"], (b, s))
        opt = torch.optim.AdamW(trainable, lr=1e-4, foreach=False)
        states_before = torch.cuda.memory_allocated() if device == "cuda" else None
        for step in (1, 2):
            watching = observer(net, opt) if (observer and step == 2) else None
            for p in trainable:
                p.grad = None
            if watching:
                watching.__enter__()
            loss = loss_of(inner, tokens, labels)
            loss.backward()
            del loss
            opt.step()
            if watching:
                watching.__exit__(None, None, None)
        frozen = [p for p in net.parameters() if not p.requires_grad]
        quant_states = [m.weight.quant_state for m in net.modules()
                        if isinstance(m, bnb.nn.Linear4bit)]
        def nbytes(t):
            return t.numel() * t.element_size()
        constants = sum(nbytes(qs.absmax) + nbytes(qs.state2.absmax) + nbytes(qs.offset)
                        for qs in quant_states if qs.nested)
        out = {
            "frozen_bytes": sum(nbytes(p) for p in frozen),
            "quant_constants_bytes": constants,
            "trainable_count": sum(p.numel() for p in trainable),
            "allocated_before_steps": states_before,
            "allocated_after_steps": torch.cuda.memory_allocated() if device == "cuda" else None,
            "linear4bit_layers": len(quant_states),
        }
    return out


def qlora(doc: dict, out_path: Path) -> None:
    from trainmath.memory.finetune import Adapter
    from trainmath.model.presets import preset
    from trainmath.runs.estimates import estimate
    from trainmath.runs.description import run

    for model, rank, targets, s in QLORA:
        row = {"id": f"qlora/{model}/hf-sdpa/r{rank}-{'+'.join(targets)}/s{s}-b1", "model": model,
               "rank": rank, "targets": list(targets), "s": s}
        est = estimate(run(preset(model), adapter=Adapter("qlora", rank, targets), recipe="fp32",
                           implementation="hf-sdpa", seq_len=s, micro_batch=1,
                           optimizer="adamw", optimizer_impl="for-loop"))
        row["predicted_peak"] = -(-est.peak.bytes.n // 1)
        row["predicted_weights"] = est.to_dict()["per_device"]["weights"]
        _record(doc, "qlora", out_path, row,
                lambda peak, a=(model, rank, targets, s): measure_qlora(*a, observer=peak))


#: a mixture of experts: Mixtral-8x7B's shape with 2 of its 32 layers (one H200 cannot hold all
#: 32 for training), transformers' MixtralForCausalLM with its grouped_mm experts
MOE = (("mixtral-8x7b", 2, "zero-bf16", 4096), ("mixtral-8x7b", 2, "megatron-bf16", 4096))


def moe(doc: dict, out_path: Path) -> None:
    for model, layers, recipe, s in MOE:
        row = {"id": f"moe/{model}-{layers}-layers/hf-sdpa/{recipe}/s{s}-b1", "model": model,
               "layers": layers, "recipe": recipe, "s": s}

        def measure(peak, a=(model, recipe, s, layers)):
            m = measure_step(a[0], "hf-sdpa", a[1], a[2], 1, layers=a[3], fake=False,
                             observer=peak, device="cuda")
            return {"tracker_peak_on_gpu": m["peak"]["bytes"], "phase_on_gpu": m["peak"]["phase"],
                    "states_total": m["states"]["total"]}
        _record(doc, "moe", out_path, row, measure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validate.gpu", description=__doc__)
    parser.add_argument("output", type=Path)
    parser.add_argument("--only", metavar="REGEX", help="these configuration ids only")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--qlora-only", action="store_true",
                        help="only the QLoRA steps (needs bitsandbytes)")
    parser.add_argument("--moe-only", action="store_true",
                        help="only the mixture-of-experts steps")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: this check runs on a GPU machine")
    props = torch.cuda.get_device_properties(0)
    doc = {"schema": "trainmath-gpu-check/1",
           "date": time.strftime("%Y-%m-%d"),
           "device": {"name": props.name, "total_memory": props.total_memory,
                      "torch": torch.__version__, "cuda": torch.version.cuda,
                      "python": platform.python_version()},
           "overhead": [], "steps": [], "qlora": [], "moe": []}
    try:
        import transformers
        doc["device"]["transformers"] = transformers.__version__
    except ImportError:
        pass
    print(f"{props.name}, {props.total_memory} bytes, torch {torch.__version__}", flush=True)
    if args.qlora_only:
        qlora(doc, args.output)
        return 0
    if args.moe_only:
        moe(doc, args.output)
        return 0
    if not args.skip_overhead:
        doc["overhead"] = overhead()
        args.output.write_text(json.dumps(doc, indent=1) + "\n")
    steps(args.only, args.output, doc)
    qlora(doc, args.output)
    moe(doc, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
