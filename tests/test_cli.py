"""The trainmath command: figures, JSON and the errors it must refuse with."""

import json
import subprocess
import sys
import time

import pytest

from trainmath.cli import main, parse_count
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
    the step adds nothing, so the peak is the 112 GB of states: 26.48 GB over."""
    argv = ("--params", "7B", "--recipe", "amp", "--optimizer-impl", "fused", "--gpu", "h100-sxm")
    status, out, _ = run(capsys, "estimate", *argv)
    assert status == 0
    assert ("fits in one H100 SXM (81,559 MiB = 85.52 GB, as nvidia-smi reports it): no, "
            "26.48 GB over at the peak") in out
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
    assert "fits in 80 GB: no, 60.00 GB over at the peak" in out


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
        (["--params", "7e9", "--precision", "fp8"], "argument --recipe/--precision: unknown recipe 'fp8'; accepted: fp32, fp16-mixed, bf16-mixed, bf16, megatron, deepspeed, bf16-master, bf16-master-free, amp, fsdp2, zero-paper"),
        (["--params", "7e9", "--optimizer", "lion"], "argument --optimizer: unknown optimizer 'lion'; accepted: adam, adamw, sgd, sgd-momentum, adam-8bit"),
        (["--params", "7e9", "--zero", "4"], "argument --zero: unknown ZeRO stage '4'; accepted: 0, 1, 2, 3"),
        (["--params", "7e9", "--zero", "one"], "argument --zero: unknown ZeRO stage 'one'; accepted: 0, 1, 2, 3"),
        (["--params", "7e9", "--dp", "0"], "argument --dp: '0' is not a positive whole number"),
        (["--params", "7e9", "--dp", "x"], "argument --dp: 'x' is not a positive whole number"),
        (["--layers", "-2", "--hidden", "8", "--heads", "2", "--ffn", "8", "--vocab", "8"],
         "argument --layers: '-2' is not a positive whole number"),
        (["--model", "llama-2-7b", "--tp", "3"], "heads 32 is not divisible by tp 3"),
        (["--model", "llama-2-7b", "--pp", "5"], "layers 32 is not divisible by pp 5"),
        (["--params", "7e9", "--tp", "2"], "--tp 2 needs a model shape"),
        (["--params", "7e9", "--tp", "2", "--pp", "2"], "--tp 2 and --pp 2 need a model shape"),
        (["--params", "7e9", "--interleave", "2"], "--global-batch and --interleave need a model shape"),
        (["--model", "llama-3-70b", "--pp", "4", "--interleave", "3"], "not divisible by"),
        (["--model", "llama-2-7b", "--dp", "3", "--global-batch", "16"],
         "global batch 16 is not divisible by dp × micro-batch = 3 × 1 = 3"),
        (["--params", "7e9", "--dp", "4", "--gpus", "8"],
         "--gpus 8 does not match dp × tp × pp × cp = 4 × 1 × 1 × 1 = 4"),
        (["--params", "7e9", "--model", "llama-2-7b"], "--params 7000000000 cannot be combined with --model"),
        (["--layers", "32"], "a shape needs --hidden --heads --ffn --vocab as well"),
        ([], "no model given; accepted: --model PRESET, --config PATH, --params N, or a shape"),
        (["--params", "7e9", "--gpu-memory", "80"], "cannot read '80' as an amount of memory"),
        (["--params", "7e9", "--gpu-memory", "80 GiGs"], "unknown byte unit 'GiGs'"),
        (["--params", "7e9", "--gpu", "v100"], "argument --gpu: unknown GPU 'v100'; accepted: a100-sxm, h100-sxm, h200, b200"),
        (["--params", "7e9", "--gpu", "h100-sxm", "--gpu-memory", "80GB"],
         "--gpu h100-sxm and --gpu-memory 80 GB cannot be combined"),
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
    """The figure in the closing note: best of three runs, interpreter start-up included."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "trainmath", "estimate", "--model",
                               "llama-3-70b", "--tp", "8", "--pp", "4", "--dp", "16",
                               "--seq-len", "8192", "--json"], capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
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
    assert set(d["peak"]) == {"bytes", "phase", "moment", "pipeline_stage", "parts"}


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
                 "bf16-master-free, amp, fsdp2, zero-paper", "megatron-te, megatron-eager, hf-sdpa, "
                 "hf-eager", "fused, foreach, for-loop"):
        assert text in out, text
