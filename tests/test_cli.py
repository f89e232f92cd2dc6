"""The trainmath command: figures, JSON and the errors it must refuse with."""

import json
import os
import resource
import subprocess
import sys

import pytest

import measured_device

from trainmath.cli.command import main
from trainmath.cli.flags import parse_count
from trainmath.units import GB


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def estimate_json(capsys, *argv):
    status, out, err = run(capsys, "estimate", *argv, "--json")
    assert status == 0, err
    return json.loads(out)


def test_params_alone_gives_the_memory_math_split(capsys):
    d = estimate_json(capsys, "--params", "7e9")
    assert d["params"] == 7 * 10**9
    assert d["per_device"] == {
        "weights": 14 * GB, "gradients": 14 * GB, "master_weights": 28 * GB,
        "optimizer_states": 56 * GB, "activations": None, "total": 112 * GB,
    }
    assert d["activations_per_layer"] is None


@pytest.mark.parametrize(
    ("stage", "total"),
    # ZeRO paper, Figure 1: 7.5B parameters, N_d = 64, K = 12
    [("0", 120 * GB), ("1", 30 * GB + 90 * GB // 64), ("2", 15 * GB + 105 * GB // 64),
     ("3", 120 * GB // 64)],
)
def test_params_with_zero_follow_the_paper(capsys, stage, total):
    d = estimate_json(capsys, "--params", "7.5B", "--dp", "64", "--zero", stage)
    assert d["per_device"]["total"] == total


def test_gpt_shape_matches_korthikanti_eq1(capsys):
    s, b, h, a, L = 2048, 2, 4096, 32, 32
    d = estimate_json(capsys, "--model", "llama-2-7b", "--mlp", "gelu", "--ffn", str(4 * h),
                      "--norm", "layernorm", "--dropout", "--seq-len", str(s),
                      "--micro-batch", str(b))
    assert d["activations_per_layer"] == s * b * h * 34 + 5 * a * s * s * b


def test_tensor_and_sequence_parallel_divide_the_layer(capsys):
    """Korthikanti et al. 2022, Table 2: TP + SP keeps sbh(34 + 5as/h)/t."""
    s, b, h, a, t = 2048, 1, 4096, 32, 4
    d = estimate_json(capsys, "--model", "llama-2-7b", "--mlp", "gelu", "--ffn", str(4 * h),
                      "--norm", "layernorm", "--dropout", "--seq-len", str(s), "--tp", str(t),
                      "--sequence-parallel")
    assert d["activations_per_layer"] * t == s * b * h * 34 + 5 * a * s * s * b


def test_preset_with_activations_and_fit(capsys):
    d = estimate_json(capsys, "--model", "llama-2-7b", "--seq-len", "4096", "--attention",
                      "flash", "--zero", "3", "--dp", "8", "--gpu-memory", "80GB")
    assert d["params"] == 6_738_415_616
    per = d["per_device"]
    assert per["total"] == sum(per[k] for k in per if k != "total")
    assert per["weights"] == -(-2 * 6_738_415_616 // 8)
    assert d["fits"] is True
    assert d["inputs"]["gpu_memory"] == 80 * GB


def test_a_gpu_kind_is_checked_against_what_nvidia_smi_reports(capsys):
    """H100 SXM: nvidia-smi reports 81,559 MiB, 85.52 × 10^9 bytes. PyTorch AMP keeps 4 + 4 + 8
    bytes per parameter (fp32 weights and gradients, Adam's fp32 m and v); with a fused AdamW
    the step adds nothing, so the peak is the 112 GB of states, and nvidia-smi would show them
    with the allocator's reserve and the CUDA context: over, by the process's memory."""
    argv = ("--params", "7B", "--recipe", "amp", "--optimizer-impl", "fused", "--gpu", "h100-sxm")
    status, out, _ = run(capsys, "estimate", *argv)
    assert status == 0
    d = estimate_json(capsys, *argv)
    over = (d["on_device"]["process"] - 81_559 * 2**20) / 1e9
    assert d["peak"]["bytes"] == 112 * 10**9 and over > 112 - 85.52
    assert ("fits in one H100 SXM (81,559 MiB = 85.52 GB, as nvidia-smi reports it): no, "
            f"{over:.2f} GB over at the process's memory, as nvidia-smi shows it") in out
    d = estimate_json(capsys, *argv)
    assert (d["inputs"]["gpu"], d["inputs"]["gpu_memory"]) == ("h100-sxm", 81_559 * 2**20)


def test_the_sources_line_cites_zero_per_stage_sections(capsys):
    """ZeRO's per-stage formulas are §5.1 (P_os), §5.2 (P_g) and §5.3 (P_p), not §5.1 alone."""
    status, out, _ = run(capsys, "estimate", "--params", "7B", "--zero", "3", "--dp", "8")
    assert status == 0
    assert "Rajbhandari et al. 2020 (ZeRO) §5.1–5.3 and" in out


def test_readable_table(capsys):
    """bf16-mixed: ZeRO §3.1's 2 + 2 + 4 + 8 = 16 bytes after the step, 112 GB; at the step
    every 16-bit gradient also has an fp32 copy for the fp32 masters, 4 bytes more: 140 GB."""
    status, out, _ = run(capsys, "estimate", "--params", "7B", "--gpu-memory", "80GB")
    assert status == 0
    assert "  total               112.00 GB    104.31 GiB" in out
    assert "  peak of a step      140.00 GB    130.39 GiB   (optimizer step)" in out
    process = estimate_json(capsys, "--params", "7B", "--gpu-memory", "80GB")["on_device"]["process"]
    assert process == pytest.approx(measured_device.process(140 * 10**9), rel=1e-4)  # the H200's
    assert f"fits in 80 GB: no, {(process - 80 * 10**9) / 1e9:.2f} GB over at the process's memory" in out


@pytest.mark.parametrize("text", ["7e9", "7B", "7b", "7000000000", "7,000,000,000", "0.007T"])
def test_parse_count(text):
    assert parse_count(text) == 7_000_000_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--params", "-5"], "argument --params: '-5' is not a positive whole number of parameters"),
        (["--params", "0"], "'0' is not a positive whole number of parameters"),
        (["--params", "seven"], "'seven' is not a positive whole number of parameters"),
        (["--params", "7.5"], "'7.5' is not a positive whole number of parameters"),
        (["--model", "llama-9"], "argument --model: unknown model preset 'llama-9'; accepted: llama-2-7b, "),
        (["--params", "7e9", "--precision", "fp8"], "argument --recipe/--precision: unknown recipe 'fp8'; accepted: fp32, fp16-mixed, bf16-mixed, bf16, megatron, deepspeed, bf16-master, bf16-master-free, amp, fsdp2, fp8-te, zero-paper"),
        (["--params", "7e9", "--optimizer", "lion"], "argument --optimizer: unknown optimizer 'lion'; accepted: adam, adamw, sgd, sgd-momentum, adam-8bit"),
        (["--params", "7e9", "--zero", "4"], "argument --zero: unknown ZeRO stage '4'; accepted: 0, 1, 2, 3"),
        (["--params", "7e9", "--zero", "one"], "argument --zero: unknown ZeRO stage 'one'; accepted: 0, 1, 2, 3"),
        (["--params", "7e9", "--dp", "0"], "argument --dp: '0' is not a positive whole number"),
        (["--params", "7e9", "--dp", "x"], "argument --dp: 'x' is not a positive whole number"),
        (["--layers", "-2", "--hidden", "8", "--heads", "2", "--ffn", "8", "--vocab", "8"],
         "argument --layers: '-2' is not a positive whole number"),
        (["--model", "llama-2-7b", "--tp", "3"], "heads 32 is not divisible by tp 3"),
        (["--model", "llama-2-7b", "--pp", "40"], "layers 32 cannot fill pp 40 stages; accepted: pp at most 32"),
        (["--model", "llama-2-7b", "--pp", "4", "--stage-layers", "8/8/8/9"], "stages 8 × 3, 9 add up to 33 layers; accepted: 32"),
        (["--params", "7e9", "--tp", "2"], "tp 2 needs a model shape, not a parameter count alone"),
        (["--params", "7e9", "--tp", "2", "--pp", "2"], "tp 2 and pp 2 need a model shape"),
        (["--params", "7e9", "--interleave", "2"], "error: v 2 needs a model shape"),
        (["--model", "llama-3-70b", "--pp", "4", "--interleave", "30"],
         "layers 80 cannot fill pp × v = 4 × 30 = 120 model chunks"),
        (["--model", "llama-2-7b", "--dp", "3", "--global-batch", "16"],
         "global batch 16 is not divisible by dp × micro-batch = 3 × 1 = 3"),
        (["--params", "7e9", "--dp", "4", "--gpus", "8"],
         "gpus 8 ≠ dp × tp × pp × cp = 4 × 1 × 1 × 1 = 4"),
        (["--params", "7e9", "--model", "llama-2-7b"], "--params 7000000000 cannot be combined with --model"),
        (["--layers", "32"], "a shape needs --hidden --heads --ffn --vocab as well"),
        ([], "no model given; accepted: --model PRESET, --config PATH, --params N, or a shape"),
        (["--params", "7e9", "--gpu-memory", "80"], "cannot read '80' as an amount of memory"),
        (["--params", "7e9", "--gpu-memory", "80 GiGs"], "unknown byte unit 'GiGs'"),
        (["--params", "7e9", "--gpu", "v100"], "argument --gpu: unknown GPU 'v100'; accepted: a100-sxm, a100-40gb, h100-sxm, h800, h200, b200, a100-80gb"),
        (["--params", "7e9", "--offload", "cpu"],
         "argument --offload: unknown offload 'cpu'; accepted: none, optimizer, params"),
        (["--params", "7e9", "--offload", "optimizer", "--zero", "1"],
         "offload 'optimizer' needs ZeRO stage 2 or 3 (ZeRO-Offload builds on ZeRO-2), got stage 1"),
        (["--params", "7e9", "--offload", "params", "--zero", "2"],
         "offload 'parameters' (params) needs ZeRO stage 3 (sharded parameters), got stage 2"),
        (["--params", "7e9", "--offload", "optimizer", "--recipe", "fsdp2"],
         "offload 'optimizer' with recipe 'fsdp2': FSDP2 has no optimizer-only offload"),
        (["--params", "7e9", "--offload", "optimizer", "--recipe", "megatron", "--zero", "2"],
         "offload 'optimizer' with recipe 'megatron' (Megatron-LM's persistent fp32 gradient buffer) is not modelled"),
        (["--params", "7e9", "--overhead", "2"], "argument --overhead: cannot read '2' as an amount"),
        (["--params", "7e9", "--overhead", "lots"], "argument --overhead: cannot read 'lots'"),
        (["--params", "7e9", "--gpus-per-node", "0"],
         "argument --gpus-per-node: '0' is not a positive whole number"),
        (["--params", "7e9", "--tokens", "lots"],
         "argument --tokens: 'lots' is not a positive whole number of tokens; accepted: e.g. 15T"),
        (["--params", "7e9", "--mfu", "1.5"],
         "argument --mfu: '1.5' is not an MFU; accepted: a fraction in (0, 1] such as 0.4, or 40%"),
        (["--params", "7e9", "--mfu", "0"], "argument --mfu: '0' is not an MFU"),
        (["--params", "7e9", "--tokens", "1T", "--gpu", "h100-sxm"],
         "tokens without mfu asks for the step time to be predicted, which needs a model shape, seq_len, global_batch"),
        (["--params", "7e9", "--mfu", "0.4", "--gpu", "h100-sxm"], "mfu needs tokens as well"),
        (["--params", "7e9", "--tokens", "1T", "--mfu", "0.4"],
         "a time to train needs a GPU kind for its peak FLOP/s; accepted: gpu one of a100-sxm, "
         "a100-40gb, h100-sxm, h800, h200, b200, a100-80gb"),
        (["--params", "7e9", "--tokens", "1T", "--mfu", "0.4", "--gpu", "h100-sxm", "--recipe", "fp32"],
         "recipe 'fp32' computes in fp32, which the GPU table has no peak for"),
        (["--params", "7e9", "--recompute", "some"], "argument --recompute: unknown recompute 'some'; accepted: none, selective, full"),
        (["--params", "7e9", "--bogus"], "unrecognized arguments: --bogus"),
        (["--model", "llama-2-7b", "--mlp", "relu"], "argument --mlp: unknown mlp 'relu'; accepted: gelu, swiglu"),
        (["--model", "llama-2-7b", "--attention", "sdpa"], "unknown attention 'sdpa'; accepted: eager, flash"),
        (["--model", "llama-2-7b", "--mlp-kernel", "triton"], "unknown mlp kernel 'triton'; accepted: eager, fused"),
        (["--params", "7e9", "--dp"], "argument --dp: expected one argument"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    status, out, err = run(capsys, "estimate", *argv)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("trainmath: error: "), err
    assert message in err


def test_command_is_fast_and_runs_as_a_module():
    """The figure in the closing note: best of three runs, interpreter start-up included, in
    CPU time (user + system) of the command's process, which other tests running beside it on
    the same cores do not inflate as they inflate the wall clock. Python may write its
    bytecode, as it does for anyone who runs the command (PYTHONDONTWRITEBYTECODE would charge
    every run the compiling of every module, 0.2 s more)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-m", "trainmath", "estimate", "--model",
                               "llama-3-70b", "--tp", "8", "--pp", "4", "--dp", "16",
                               "--seq-len", "8192", "--json"], capture_output=True, text=True,
                              env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["params"] == 70_553_706_496
    assert best < 0.3, f"trainmath estimate took {best:.3f} s"


# -- recipes, implementations and the peak ---------------------------------------------------
def test_recipe_and_implementation_reach_the_json(capsys):
    d = estimate_json(capsys, "--model", "llama-2-7b", "--seq-len", "2048", "--recipe", "megatron",
                      "--implementation", "hf-eager", "--optimizer-impl", "for-loop")
    assert (d["inputs"]["recipe"], d["inputs"]["implementation"], d["inputs"]["optimizer_impl"]) \
        == ("megatron", "hf-eager", "for-loop")
    assert d["inputs"]["attention"] == "eager" and d["inputs"]["assumed"] == []
    # Megatron-LM's 18 bytes: bf16 weights, fp32 main_grad, fp32 master, Adam
    assert d["per_device"]["gradients"] == 4 * 6_738_415_616
    # measured in PyTorch, Hugging Face LlamaForCausalLM, eager attention, s 2048: 38,314,483,724
    # bytes saved for backward (docs/_data/measurements.json)
    assert d["per_device"]["activations"] == 38_314_483_724
    assert set(d["peak"]) == {"bytes", "phase", "moment", "pipeline_stage", "parts", "gathered"}


def test_the_precision_flag_is_the_recipe_flag(capsys):
    assert estimate_json(capsys, "--params", "7e9", "--precision", "fp32") == \
        estimate_json(capsys, "--params", "7e9", "--recipe", "fp32")
    zp = estimate_json(capsys, "--params", "7e9", "--recipe", "zero-paper")
    assert zp["inputs"]["recipe"] == "bf16-mixed" and zp["per_device"]["total"] == 112 * GB


def test_the_output_says_what_it_assumed(capsys):
    status, out, _ = run(capsys, "estimate", "--model", "llama-3-8b", "--seq-len", "8192")
    assert status == 0
    assert ("assumed (as llama-3-8b is commonly trained): recipe bf16-mixed, kernels megatron-te, "
            "the recipe's fused optimizer step") in out
    assert "megatron-te kernels (flash attention)" in out


def test_help_names_the_new_flags(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--recipe NAME, --precision NAME", "--implementation NAME", "--optimizer-impl IMPL",
                 "bf16-master-free, amp, fsdp2, fp8-te, zero-paper", "megatron-te, megatron-eager, hf-sdpa, "
                 "hf-eager", "fused, foreach, for-loop"):
        assert text in out, text


# -- what the command adds to the memory: GPUs, ZeRO-3 units, overhead, offload, time ------------
# Llama-3-8B's config.json: hidden 4096, 32 layers, 8 KV heads of 128, intermediate 14336,
# vocabulary 128256, untied: one decoder layer holds 2·4096² (q, o) + 2·4096·1024 (k, v) +
# 3·4096·14336 (MLP) + 2·4096 (norms) parameters, the LM head 128256·4096.
LLAMA3_8B_LAYER = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
LLAMA3_8B_HEAD = 128256 * 4096
README_RUN = ("--model", "llama-3-8b", "--seq-len", "8192", "--dp", "8", "--zero", "3")


@pytest.mark.parametrize(("name", "mib"), [("a100-80gb", 81_920), ("a100-sxm", 81_920),
                                           ("h100-sxm", 81_559), ("h200", 143_771),
                                           ("b200", 183_359)])
def test_gpu_names_take_the_memory_nvidia_smi_reports(capsys, name, mib):
    """memory.total as nvidia-smi prints it for each GPU (public nvidia-smi outputs)."""
    d = estimate_json(capsys, "--params", "7e9", "--gpu", name)
    assert d["inputs"]["gpu_memory"] == mib * 2**20
    assert d["inputs"]["gpu"] == ("a100-sxm" if name == "a100-80gb" else name)


def test_gpu_memory_overrides_the_gpu_s_memory(capsys):
    status, out, _ = run(capsys, "estimate", "--params", "7e9", "--gpu", "h100-sxm",
                         "--gpu-memory", "80GB")
    assert status == 0
    process = estimate_json(capsys, "--params", "7e9", "--gpu", "h100-sxm", "--gpu-memory",
                            "80GB")["on_device"]["process"]
    assert (f"fits in one H100 SXM with 80 GB (--gpu-memory): no, "
            f"{(process - 80 * 10**9) / 1e9:.2f} GB over at the process's memory") in out
    d = estimate_json(capsys, "--params", "7e9", "--gpu", "h100-sxm", "--gpu-memory", "80GB")
    assert (d["inputs"]["gpu"], d["inputs"]["gpu_memory"]) == ("h100-sxm", 80 * GB)


def test_zero3_on_an_h100_fits_with_its_gathered_units_shown(capsys):
    """The issue's done-when: ZeRO-3 counts its gathered units, and --gpu h100-sxm answers with
    the 81,559 MiB nvidia-smi reports. The peak is at the loss's gradient: one layer unit (the
    next, prefetched) and the LM head gathered, both in bf16."""
    status, out, _ = run(capsys, "estimate", *README_RUN, "--gpu", "h100-sxm")
    assert status == 0
    assert "fits in one H100 SXM (81,559 MiB = 85.52 GB, as nvidia-smi reports it): yes" in out
    assert "  gathered units        1.49 GB      1.38 GiB   (in the peak: 1 layer unit + the LM head)" in out
    assert "  ZeRO-3 units: a decoder layer, 0.44 GB; the LM head, 1.05 GB" in out
    assert "the layer computing + 1 prefetched = 2 layer units unsharded" in out
    g = estimate_json(capsys, *README_RUN)["peak"]["gathered"]
    assert g == {"unit_bytes": 2 * LLAMA3_8B_LAYER, "prefetch": 1, "units_at_peak": 1,
                 "root_bytes": 2 * LLAMA3_8B_HEAD,
                 "bytes_at_peak": 2 * (LLAMA3_8B_LAYER + LLAMA3_8B_HEAD)}


def test_fsdp2_holds_its_root_unit(capsys):
    """FSDP2's root (embedding, final norm, LM head: 2·128256·4096 + 4096 parameters) stays
    unsharded from the forward to the end of the backward, in bf16."""
    d = estimate_json(capsys, *README_RUN, "--recipe", "fsdp2")
    g = d["peak"]["gathered"]
    assert g["root_bytes"] == 2 * (2 * LLAMA3_8B_HEAD + 4096)
    assert g["unit_bytes"] == 2 * LLAMA3_8B_LAYER  # 218,112,000 parameters: divisible by 8 ranks
    assert g["bytes_at_peak"] == g["root_bytes"] + g["units_at_peak"] * g["unit_bytes"]


def test_zero3_without_a_shape_says_the_units_are_not_counted(capsys):
    status, out, _ = run(capsys, "estimate", "--params", "7e9", "--dp", "8", "--zero", "3")
    assert "  gathered units    not counted   (needs a model shape: a unit is a layer)" in out


def test_overhead_is_added_to_the_peak_for_the_fit(capsys):
    """PyTorch AMP with a fused AdamW: 16 bytes per parameter at the peak (torch.amp docs), 72 GB
    for 4.5B parameters: as nvidia-smi would show it (the allocator's reserve, the context) it
    fits the 85.52 GB an H100 reports, and not with 10 GB of overhead on top."""
    argv = ("--params", "4.5B", "--recipe", "amp", "--optimizer-impl", "fused", "--gpu", "h100-sxm")
    d = estimate_json(capsys, *argv)
    process = measured_device.process(72 * 10**9)
    assert d["fits"] is True and d["on_device"]["process"] == pytest.approx(process, rel=1e-4)
    process = d["on_device"]["process"]
    d = estimate_json(capsys, *argv, "--overhead", "10GB")
    assert (d["overhead"], d["fits"]) == (10 * GB, False)
    assert d["needed"] == process + 10 * GB
    assert d["inputs"]["overhead"] == 10 * GB
    status, out, _ = run(capsys, "estimate", *argv, "--overhead", "10GB")
    assert "  overhead             10.00 GB      9.31 GiB   (--overhead: what no part above counts)" in out
    assert f"no, {(process + 10 * GB - 81_559 * 2**20) / 1e9:.2f} GB over at the process's memory" in out


def test_offload_optimizer_moves_the_states_to_the_cpu(capsys):
    """ZeRO-Offload (Ren et al. 2021, §3-4): the GPU keeps the 2Ψ bytes of fp16 parameters; the
    CPU holds the fp32 master weights, Adam's m and v and the gradient partition, which DeepSpeed
    keeps in fp32 (stage_1_and_2.py): 16Ψ bytes, over 8 ranks 2Ψ each, 16Ψ per node of 8."""
    psi = 7 * 10**9
    d = estimate_json(capsys, "--params", "7e9", "--dp", "8", "--zero", "2", "--offload",
                      "optimizer", "--gpus-per-node", "8")
    assert d["per_device"] == {"weights": 2 * psi, "gradients": 0, "master_weights": 0,
                               "optimizer_states": 0, "activations": None, "total": 2 * psi}
    assert (d["host"]["per_device"], d["host"]["per_node"]) == (2 * psi, 16 * psi)
    assert d["host"]["offload_to"] == "cpu" and d["host"]["decided_by"] is None  # no GPU, no host
    assert d["host"]["activations"] == 0
    assert d["peak"]["bytes"] == 2 * psi  # the step runs on the CPU
    assert d["needed"] == d["on_device"]["process"] > 2 * psi  # as nvidia-smi would show it
    assert (d["inputs"]["offload"], d["inputs"]["gpus_per_node"]) == ("optimizer", 8)
    status, out, _ = run(capsys, "estimate", "--params", "7e9", "--dp", "8", "--zero", "2",
                         "--offload", "optimizer", "--gpus-per-node", "8")
    assert "CPU memory (--offload optimizer: master weights, optimizer states, gradient partition):" in out
    assert "  per node            112.00 GB    104.31 GiB   (8 GPUs)" in out


def test_offload_params_leaves_only_the_gathered_units(capsys):
    """ZeRO-Infinity's offload_param: every sharded state in CPU memory, 18 bytes per parameter
    over the ranks (bf16 shard, fp32 gradient partition, master weights and Adam: DeepSpeed's
    estimate_zero3_model_states_mem_needs); the GPU holds what is gathered and the activations."""
    d = estimate_json(capsys, *README_RUN, "--offload", "params")
    per = d["per_device"]
    assert (per["weights"], per["gradients"], per["master_weights"], per["optimizer_states"]) == (0, 0, 0, 0)
    assert d["host"]["per_device"] == 8_030_261_248 * 18 // 8
    assert d["peak"]["parts"]["gathered_parameters"] == d["peak"]["gathered"]["bytes_at_peak"]
    assert "parameters" not in d["peak"]["parts"]


def test_time_to_train_gpt3(capsys):
    """GPT-3: 174.6B parameters on 300B tokens, 6ND = 3.14e23 FLOPs (Brown et al. 2020, Table
    D.1); at 50% of 1,024 A100s' 312 TFLOP/s dense bf16 (A100 datasheet): 3.14e23 / (0.5 × 1024 ×
    312e12) seconds."""
    d = estimate_json(capsys, "--params", "174.6B", "--dp", "1024", "--gpu", "a100-80gb",
                      "--tokens", "300B", "--mfu", "50%")
    t = d["time"]
    flops = 6 * 174_600_000_000 * 300_000_000_000
    assert (t["flops_per_token"], t["total_flops"]) == (6 * 174_600_000_000, flops)
    # times and rates are printed to 6 significant digits (trainmath.report.data._sig): ±5e-6
    assert t["seconds"] == pytest.approx(flops / (0.5 * 1024 * 312e12), rel=5e-6)
    assert t["gpu_hours"] == pytest.approx(t["seconds"] * 1024 / 3600, rel=5e-6)
    assert (d["inputs"]["tokens"], d["inputs"]["mfu"]) == (300 * 10**9, 0.5)
    status, out, _ = run(capsys, "estimate", "--params", "174.6B", "--dp", "1024", "--gpu",
                         "a100-80gb", "--tokens", "300B", "--mfu", "0.5")
    assert ("time: 300,000,000,000 tokens at MFU 50.0% (assumed) of the dense bf16 peak of one "
            "A100 SXM 80GB, 312.0 TFLOP/s, 1,024 GPUs") in out


def test_time_with_a_shape_counts_the_attention_term(capsys):
    """PaLM's 6N + 12·L·h·s (Appendix B) for Llama-3-8B at s = 8192: N the matmul weights, all
    but the 128256·4096 embedding and the 65 RMSNorm vectors of 4096."""
    d = estimate_json(capsys, *README_RUN, "--gpu", "h100-sxm", "--tokens", "15T", "--mfu", "0.4")
    n = 8_030_261_248 - LLAMA3_8B_HEAD - 65 * 4096
    assert d["time"]["flops_per_token"] == 6 * n + 12 * 32 * 4096 * 8192
    assert d["time"]["peak_flops_per_gpu"] == 989.4e12  # H100 SXM5 whitepaper, dense bf16


def test_help_names_the_plan_flags(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--overhead SIZE", "default 0 (not counted)", "--offload WHAT",
                 "--gpus-per-node N", "--tokens N", "--mfu F", "a100-80gb", "--gpu NAME"):
        assert text in out, text


def test_fp8_training_keeps_megatron_s_states_and_runs_at_the_fp8_peak(capsys):
    """Transformer Engine's fp8 under Megatron-LM: bf16 parameters, fp32 main_grad, fp32 master
    weights and Adam, 2 + 4 + 4 + 8 = 18 bytes per parameter (Megatron-LM's
    dist_optimizer.md); the time is measured against the H100 SXM5's dense fp8 peak, 1,978.9
    TFLOP/s (H100 whitepaper). The A100 has no fp8 tensor cores."""
    d = estimate_json(capsys, "--params", "7e9", "--recipe", "fp8-te", "--gpu", "h100-sxm",
                      "--tokens", "1T", "--mfu", "0.3")
    assert d["per_device"]["total"] == 18 * 7 * 10**9
    assert d["time"]["peak_flops_per_gpu"] == 1978.9e12
    status, _, err = run(capsys, "estimate", "--params", "7e9", "--recipe", "fp8-te", "--gpu",
                         "a100-80gb", "--tokens", "1T", "--mfu", "0.3")
    assert status == 2 and "A100 SXM 80GB has no fp8 tensor cores" in err
