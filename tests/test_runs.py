"""trainmath.runs.estimates: one run, checked once, estimated per device.

Expected values come from the papers (ZeRO §3.1 and §5.1–5.3, Korthikanti et al. 2022 §4,
Narayanan et al. 2021 §2.2) and published configs, worked out here, not read back from the code.
"""

import contextlib
import dataclasses
import importlib
import io
import json
import pickle
from fractions import Fraction

import pytest

import measured_device

from trainmath.report.data import estimate_dict, estimate_json
from trainmath import Estimate, Run, estimate, run
from trainmath.cli.command import main
from trainmath.parallel.layout import Batch
from trainmath.runs.description import Gpu, ShapeNeeded
from trainmath.memory.training import Training
from trainmath.model.shape import modified
from trainmath.model.presets import preset
from trainmath.parallel.layout import Layout
from trainmath.units import GB, Bytes, parse_bytes

PSI, N_D = 7_500_000_000, 64  # ZeRO §5.1–5.3 and Figure 1: Ψ = 7.5B on 64 GPUs, K = 12


def gpt_from_llama_2_7b():
    """Llama-2-7B's L, h, a, V (config.json; Touvron et al. 2023a, LLaMA, Table 2) with a GPT layer: eq. 1 holds."""
    return modified(preset("llama-2-7b"), mlp="gelu", ffn=4 * 4096, norm="layernorm", dropout=True)


# -- model states: ZeRO ------------------------------------------------------------------------
def test_sixteen_bytes_per_parameter():
    """ZeRO §3.1: mixed-precision Adam keeps 2Ψ + 2Ψ + 12Ψ = 16Ψ bytes."""
    e = estimate(run(7_000_000_000))
    assert e.total == Bytes(16 * 7_000_000_000)
    assert e.parts() == {"weights": Bytes(14 * GB), "gradients": Bytes(14 * GB),
                         "master weights": Bytes(28 * GB), "optimizer states": Bytes(56 * GB),
                         "activations": None}
    assert e.activations is None and e.layer is None and e.pipeline_stage == 0


@pytest.mark.parametrize(
    ("stage", "per_param"),
    # ZeRO §5.1–5.3: (2 + 2 + K)Ψ, (2 + 2 + K/N_d)Ψ, (2 + (2 + K)/N_d)Ψ, (2 + 2 + K)Ψ/N_d
    [(0, Fraction(16)), (1, 4 + Fraction(12, N_D)), (2, 2 + Fraction(14, N_D)), (3, Fraction(16, N_D))],
)
def test_zero_stages_of_the_papers_example(stage, per_param):
    e = estimate(run(PSI, dp=N_D, zero_stage=stage))
    assert e.total == Bytes(per_param * PSI)


def test_zero_paper_figure_1_rounded():
    """Figure 1 prints 120 GB, 31.4 GB, 16.6 GB and 1.9 GB."""
    shown = [estimate(run(PSI, dp=N_D, zero_stage=z)).total.format("GB", 1) for z in range(4)]
    assert shown == ["120.0 GB", "31.4 GB", "16.6 GB", "1.9 GB"]


def test_context_parallel_ranks_shard_with_the_data_parallel_ones():
    """Megatron-Core shards the optimizer over dp·cp ranks: dp 32 × cp 2 = the paper's N_d 64."""
    assert estimate(run(PSI, dp=32, cp=2, zero_stage=1)).total == Bytes((4 + Fraction(12, 64)) * PSI)


# -- activations: Korthikanti et al. 2022 --------------------------------------------------------
def test_one_gpt_layer_is_eq_1():
    """§4.1, eq. 1: sbh(34 + 5as/h), for s = 2048, b = 2, h = 4096, a = 32."""
    s, b, h, a = 2048, 2, 4096, 32
    e = estimate(run(gpt_from_llama_2_7b(), seq_len=s, micro_batch=b))
    assert e.layer.korthikanti == Bytes(s * b * h * (34 + Fraction(5 * a * s, h)))
    # all 32 layers, plus the embedding, the output layer and the norm statistics
    assert e.activations > e.layer.korthikanti * 32


@pytest.mark.parametrize(
    ("kwargs", "per_sbh"),
    # Table 2 with tp = 8 (the paper's t): sequence parallel divides all of eq. 1 by tp;
    # with selective recomputation as well, 34/tp
    [(dict(sequence_parallel=True), (34 + Fraction(5 * 32 * 2048, 4096)) / 8),
     (dict(sequence_parallel=True, recompute="selective"), Fraction(34, 8)),
     (dict(recompute="full"), Fraction(2))],
)
def test_table_2_rows(kwargs, per_sbh):
    s, h = 2048, 4096
    e = estimate(run(gpt_from_llama_2_7b(), seq_len=s, tp=8, **kwargs))
    assert e.layer.korthikanti == Bytes(s * h * per_sbh)


def test_first_pipeline_stage_holds_all_layers_worth():
    """§4.2.3, eq. 5: the first of pp stages holds pp micro-batches of L/pp layers (1F1B), and
    interleaving with v chunks multiplies that by 1 + (pp-1)/(pp·v)."""
    m, s = gpt_from_llama_2_7b(), 2048
    one_layer = estimate(run(m, seq_len=s)).layer.total
    plain = estimate(run(m, seq_len=s, pp=4, global_batch=16))
    assert plain.pipeline_stage == 0
    first, first_saved = plain.stages[0], plain.saved[0]
    assert first.activations > one_layer * 32  # 32 layers' worth, plus the embedding
    inter = estimate(run(m, seq_len=s, pp=4, v=2, global_batch=16))
    extra = inter.stages[0].activations - first.activations
    tables = inter.saved[0].shared - first_saved.shared  # rotary tables: one pair per chunk forward
    assert extra == one_layer * 32 * Fraction(3, 8) + tables  # (pp-1)/(pp·v) = 3/8


def test_bubble_narayanan():
    """§2.2: (pp-1)/(m·v) with m = B/(dp·b): 1024 / 16 = 64 micro-batches, pp = 4, v = 5."""
    e = estimate(run("llama-3-70b", dp=16, tp=8, pp=4, v=5, sequence_parallel=True,
                     seq_len=8192, global_batch=1024, attention="flash"))
    assert e.microbatches == 64
    assert e.bubble == Fraction(3, 64 * 5)


def test_flash_attention_needs_no_scores():
    """FlashAttention keeps no s×s tensor: doubling s exactly doubles a Llama layer (Dao et al. 2022)."""
    short, long = (estimate(run("llama-3-8b", seq_len=s, attention="flash")).layer.total
                   for s in (4096, 8192))
    assert long == short * 2


def test_fp32_keeps_activations_in_4_bytes():
    """The compute format sets the activations' bytes: Llama's layer has no 1-byte masks."""
    half, full = (estimate(run("llama-3-8b", seq_len=4096, attention="eager", recipe=p)).layer
                  for p in ("bf16-mixed", "fp32"))
    assert full.korthikanti == half.korthikanti * 2


# -- the whole run --------------------------------------------------------------------------------
def test_llama_3_70b_params_and_fit():
    """Dubey et al. 2024, Table 3 / config.json: 70,553,706,496 parameters."""
    e = estimate(run("llama-3-70b", dp=16, tp=8, pp=4, v=5, sequence_parallel=True, zero_stage=1,
                     seq_len=8192, global_batch=1024, attention="flash", gpu_memory="80GB"))
    assert e.params == 70_553_706_496
    assert e.gpus == 512
    assert e.fits is (e.total <= parse_bytes("80GB"))
    assert e.device == max(e.stages, key=lambda d: (d.total, -d.stage))


def test_fits_against_the_gpu():
    """16Ψ = 112 GB for 7B after the step, 140 GB at it (the step's fp32 gradient copies): as
    nvidia-smi would show it, over an 80 GB GPU and a 141 GB one, under 160 GB."""
    assert estimate(run(7_000_000_000, gpu_memory="80GB")).fits is False
    assert estimate(run(7_000_000_000, gpu_memory="141GB")).fits is False
    assert measured_device.process(140 * 10**9) < 160 * 10**9
    assert estimate(run(7_000_000_000, gpu_memory="160GB")).fits is True
    assert estimate(run(7_000_000_000)).fits is None


def test_a_gpu_kind_fits_against_what_nvidia_smi_reports():
    """An H100 "80GB" reports 81,559 MiB (nvidia-smi): 112 GB of state still does not fit one,
    and a run whose process would show 80.3 GB, over the label read as 80 × 10^9 bytes, does.
    PyTorch AMP keeps 16 bytes per parameter (4 + 4 + 8) and a fused AdamW adds nothing at the
    step: the peak is the states."""
    h100 = Gpu(kind="h100-sxm")
    assert h100.memory.n == 81_559 * 2**20 and h100.name == "H100 SXM"
    amp = dict(recipe="amp", optimizer_impl="fused")
    assert estimate(run(7_000_000_000, gpu="h100-sxm", **amp)).fits is False
    assert 80 * 10**9 < measured_device.process(76 * 10**9) < 81_559 * 2**20
    assert estimate(run(4_750_000_000, gpu="h100-sxm", **amp)).fits is True  # 76 GB
    assert estimate(run(4_750_000_000, gpu_memory="80GB", **amp)).fits is False
    d = estimate_dict(estimate(run(7_000_000_000, gpu="h200")))["inputs"]
    assert (d["gpu"], d["gpu_memory"]) == ("h200", 143_771 * 2**20)


def test_the_mlp_kernel_reaches_the_estimate():
    """A fused SwiGLU saves one ffn-wide tensor fewer per layer (Megatron-LM's SwiGLUFunction):
    2·s·ffn bytes × 32 layers less for Llama-3-8B on one GPU."""
    eager = estimate(run("llama-3-8b", seq_len=4096, attention="flash"))
    fused = estimate(run("llama-3-8b", seq_len=4096, attention="flash", mlp_kernel="fused"))
    assert eager.activations - fused.activations == Bytes(2 * 4096 * 14336 * 32)
    assert estimate_dict(fused)["inputs"]["mlp_kernel"] == "fused"


def test_run_from_parts_equals_run_from_keywords():
    parts = Run(preset("llama-2-7b"), Training(zero_stage=1, attention="flash"), Layout(dp=8),
                Batch(seq_len=4096), Gpu(parse_bytes("80GB")))
    flat = run("llama-2-7b", zero_stage=1, attention="flash", dp=8, seq_len=4096, gpu_memory="80GB")
    assert parts == flat
    assert estimate(parts) == estimate(flat)


def test_everything_is_frozen():
    e = estimate(run(7_000_000_000))
    for obj, field in ((e, "bubble"), (e.run, "gpu"), (e.run.training, "zero_stage"),
                       (e.run.batch, "seq_len"), (e.run.layout, "dp")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, None)


def test_the_command_prints_the_library_estimate():
    """One function behind both: ``--json`` is exactly ``estimate_json(estimate)``."""
    argv = ["estimate", "--model", "llama-3-70b", "--dp", "16", "--tp", "8", "--pp", "4",
            "--interleave", "5", "--sequence-parallel", "--zero", "1", "--seq-len", "8192",
            "--global-batch", "1024", "--attention", "flash", "--gpu-memory", "80GB", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    e = estimate(run("llama-3-70b", dp=16, tp=8, pp=4, v=5, sequence_parallel=True, zero_stage=1,
                     seq_len=8192, global_batch=1024, attention="flash", gpu_memory="80GB"))
    assert out.getvalue() == estimate_json(e) + "\n"
    d = json.loads(out.getvalue())
    assert list(d) == ["params", "active_params", "per_device", "peak", "activations_per_layer",
                       "activations_per_layer_with_norm_statistics", "pipeline_stage",
                       "microbatches", "pipeline_bubble", "in_flight", "gpus", "fits",
                       "overhead", "needed",
                       "host", "on_device", "step", "time", "finetune", "experts",
                       "checkpointing", "inputs"]
    assert d["per_device"]["total"] >= e.total.n  # whole bytes, rounded up
    assert d["inputs"]["interleave"] == 5 and d["inputs"]["zero"] == 1
    # Megatron-LM's warm-up, 2(pp - i - 1) + (v - 1)pp + 1 chunks of 1/v: 23/5 on stage 0
    assert d["in_flight"] == [4.6, 4.2, 3.8, 3.4]
    assert d["inputs"]["schedule"] == "1f1b" and d["inputs"]["cp_kind"] == "ring"


def test_to_dict_rounds_an_uneven_shard_up():
    """7 parameters × 16 bytes over 3 ranks: 37⅓ bytes, reported as 38 (that rank holds more)."""
    e = estimate(run(7, dp=3, zero_stage=3))
    assert e.total == Bytes(Fraction(112, 3))
    assert estimate_dict(e)["per_device"]["total"] == 38


# -- bad input: one ValueError naming the value and what is accepted ---------------------------------
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: run("llama-9"), "unknown model preset 'llama-9'; accepted: llama-2-7b, "),
        (lambda: run(0), r"model \(a ModelShape or a parameter count\) must be a positive whole "
                         "number, got 0"),
        (lambda: run(7.5e9 + 0.5), "must be a positive whole number, got 7500000000.5"),
        (lambda: run(7e9, recipe="fp8"), "unknown recipe 'fp8'; accepted: fp32, fp16-mixed, "
                                         "bf16-mixed, bf16, megatron, deepspeed"),
        (lambda: run(7e9, optimizer="lion"), "unknown optimizer 'lion'; accepted: adam, adamw, "),
        (lambda: run(7e9, zero_stage=4), "unknown ZeRO stage 4; accepted: 0, 1, 2, 3"),
        (lambda: run(7e9, recompute="some"), "unknown recompute 'some'; accepted: none, selective, full"),
        (lambda: run(7e9, attention="sdpa"), "unknown attention 'sdpa'; accepted: eager, flash"),
        (lambda: run(7e9, mlp_kernel="triton"), "unknown mlp_kernel 'triton'; accepted: eager, fused"),
        (lambda: run(7e9, dp=0), r"dp \(data-parallel size\) must be a positive whole number, got 0"),
        (lambda: run(7e9, seq_len=-1), r"seq_len \(s\) must be a positive whole number, got -1"),
        (lambda: run(7e9, micro_batch=1.5), r"micro_batch \(b\) must be a positive whole number, got 1.5"),
        (lambda: run(7e9, gpu_memory="80"), "cannot read '80' as an amount of memory"),
        (lambda: Gpu(80), r"gpu memory must be a positive Bytes, e.g. parse_bytes\('80GB'\), got 80"),
        (lambda: Gpu(), "a Gpu needs a kind .accepted: a100-sxm, a100-40gb, h100-sxm, h800, h200, b200. or a memory"),
        (lambda: run(7e9, gpu="v100"), "unknown GPU 'v100'; accepted: a100-sxm, a100-40gb, h100-sxm, h800, h200, b200, a100-80gb"),
        (lambda: run(7e9, offload="cpu"),
         "unknown offload 'cpu'; accepted: none, optimizer, parameters"),
        (lambda: run(7e9, offload="parameters", zero_stage=1), "needs ZeRO stage 3"),
        (lambda: run(7e9, overhead="-1 GB"), "cannot read '-1 GB' as an amount of memory"),
        (lambda: Run(7_000_000_000, overhead=5), r"overhead must be a Bytes of 0 or more, e.g. "
                                                  r"parse_bytes\('2GiB'\), got 5"),
        (lambda: run(7e9, tokens=10**12), "tokens without mfu asks for the step time to be predicted, which needs a model shape"),
        (lambda: run(7e9, mfu=0.4), "mfu needs tokens as well"),
        (lambda: run(7e9, mfu=0.4, gpu="h100-sxm"), "mfu needs tokens as well"),
        (lambda: run(7e9, tokens=10**12, mfu=1.2, gpu="h100-sxm"),
         r"mfu must be a fraction in \(0, 1\], such as 0.4, got 1.2"),
        (lambda: run(7e9, tokens=0, mfu=0.4, gpu="h100-sxm"),
         "tokens must be a positive whole number, got 0"),
        (lambda: run(7e9, tokens=10**12, mfu=0.4, gpu_memory="80GB"),
         "a time to train needs a GPU kind for its peak FLOP/s"),
        (lambda: run(7e9, gpus_per_node=0), "gpus_per_node must be a positive whole number, got 0"),
        (lambda: Run(7_000_000_000, training="adamw"), "training must be a Training, got 'adamw'"),
        (lambda: run("llama-3-70b", tp=3),
         r"invalid layout \(dp 1 × tp 3 × pp 1 × cp 1 = 3 GPUs\) for llama-3-70b: heads 64 is not "
         "divisible by tp 3; kv_heads 8 is not divisible by tp 3; ffn 28672 is not divisible by tp 3"),
        (lambda: run("llama-2-7b", dp=3, global_batch=16),
         "global batch 16 is not divisible by dp × micro-batch = 3 × 1 = 3"),
        (lambda: run("llama-3-70b", pp=4, stages=(20, 20, 20, 21)), "stages 20 × 3, 21 add up to 81 layers; accepted: 80"),
        (lambda: run("llama-3-70b", pp=4, v=2, stages=(20, 20, 20, 20)), "stages lists 4 chunks; accepted: pp × v = 4 × 2 = 8"),
        (lambda: run("llama-3-70b", cp=2, seq_len=8192, attention="eager"),
         r"context parallelism \(cp = 2\) is modelled with attention='flash' only"),
    ],
)
def test_bad_runs_name_the_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("kwargs", "fields", "message"),
    [
        (dict(tp=8), ("tp",), "^tp 8 needs a model shape, not a parameter count alone"),
        (dict(tp=2, pp=4), ("tp", "pp"), "^tp 2 and pp 4 need a model shape"),
        (dict(global_batch=16, v=2), ("global_batch", "v"), "^global_batch 16 and v 2 need"),
    ],
)
def test_a_parameter_count_alone_cannot_be_split(kwargs, fields, message):
    with pytest.raises(ShapeNeeded, match=message) as info:
        run(7_000_000_000, **kwargs)
    assert info.value.fields == fields
    assert isinstance(info.value, ValueError)
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.fields, str(again)) == (fields, str(info.value))


def test_docstring_examples():
    import doctest

    result = doctest.testmod(importlib.import_module("trainmath.runs.estimates"))
    assert result.attempted >= 4 and result.failed == 0
    assert isinstance(estimate(run(7_000_000_000)), Estimate)


# -- what a preset is trained with, and the peak of a step ---------------------------------------
def test_a_preset_is_estimated_with_the_kernels_it_is_trained_with():
    """Issue 10, finding 10: Llama-3-8B at 8192 tokens with FlashAttention-style kernels keeps
    48.4 GB of activations, not eager attention's 189 GB, and the run says it assumed them."""
    e = estimate(run("llama-3-8b", seq_len=8192))
    assert e.training.implementation == "megatron-te" and e.training.attention == "flash"
    assert e.run.assumed == ("recipe", "implementation", "optimizer_impl")
    assert e.activations.format("GB", 1) == "48.4 GB"
    eager = estimate(run("llama-3-8b", seq_len=8192, attention="eager"))
    assert eager.training.implementation == "megatron-eager"
    assert eager.activations.format("GB", 0) == "189 GB"
    given = run("llama-3-8b", recipe="megatron", implementation="hf-sdpa", optimizer_impl="fused")
    assert given.assumed == ()


def test_the_peak_counts_the_logits_and_fits_uses_it():
    """The loss keeps a log-softmax in fp32 (saved) and its backward two more fp32 tensors over
    the vocabulary: for Llama-3-8B at 8192 tokens, 2 × 4 × 8192 × 128,256 bytes on top of the
    states and activations (nll_loss_backward, _log_softmax_backward_data)."""
    e = estimate(run("llama-3-8b", seq_len=8192, dp=8, zero_stage=3, gpu="h100-sxm"))
    top = e.peak.peak
    assert top.phase == "backward" and "the loss's gradient" in top.when
    assert top.as_dict()["logits"] == Bytes(2 * 4 * 8192 * 128_256)
    assert e.fits is (e.peak.bytes <= e.run.gpu.memory)
    d = estimate_dict(e)
    assert d["peak"]["bytes"] == -(-e.peak.bytes.n // 1) and d["peak"]["phase"] == "backward"
    assert d["per_device"]["total"] == sum(v for k, v in d["per_device"].items() if k != "total")


def test_foreach_adamw_adds_four_bytes_per_parameter_at_the_step():
    """torch.optim.AdamW's foreach path: _foreach_sqrt of every second moment at once, 4 bytes a
    parameter (measured: the step of Llama-2-7B peaks at 20.00 bytes per parameter)."""
    e = estimate(run(7_000_000_000, recipe="amp", optimizer_impl="foreach"))
    assert e.peak.phase == "optimizer step"
    assert e.peak.bytes == Bytes(20 * 7_000_000_000)
    assert estimate(run(7_000_000_000, recipe="amp", optimizer_impl="fused")).peak.bytes == \
        Bytes(16 * 7_000_000_000)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: run("gpt3-175b", seq_len=4096),
         "seq_len 4096 is longer than the 2048 learned positions of gpt3-175b"),
        (lambda: run(7e9, recipe="fsdp2", zero_stage=1),
         "ZeRO stage 1 is not one recipe 'fsdp2' offers; accepted: 3"),
        (lambda: run(7e9, recipe="deepspeed", zero_stage=0),
         "ZeRO stage 0 is not one recipe 'deepspeed' offers; accepted: 1, 2, 3"),
        (lambda: run("llama-2-7b", implementation="hf-sdpa", tp=2),
         "implementation 'hf-sdpa': Hugging Face's Llama/Mistral kernels cannot run tp = 2"),
        (lambda: run("llama-2-7b", implementation="hf-eager", attention="flash"),
         "attention 'flash' contradicts implementation 'hf-eager'"),
        (lambda: run("mixtral-8x7b", recipe="fsdp2", dp=2, ep=2), "recipe 'fsdp2' with ep > 1"),
        (lambda: run(7e9, optimizer_impl="apex"),
         "unknown optimizer implementation 'apex'; accepted: fused, foreach, for-loop"),
    ],
)
def test_bad_training_choices_name_the_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# -- offload, overhead, time: the library behind the command's new flags -------------------------
def test_offload_matches_deepspeed_s_own_estimate():
    """DeepSpeed's estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py, with
    zero_init and before its 1.5 buffer factor): with offload_optimizer, 16 bytes per parameter
    of CPU memory per node over the nodes and 2Ψ/GPUs of 16-bit parameters left on each GPU;
    with offload_param too, 18 bytes per parameter per node over the nodes."""
    psi, nodes, per_node = 70 * 10**9, 2, 8
    kw = dict(recipe="deepspeed", dp=nodes * per_node, zero_stage=3, gpus_per_node=per_node)
    opt = estimate(run(psi, offload="optimizer", **kw))
    assert opt.host_per_node == Bytes(16 * psi // nodes)
    assert opt.device.weights == Bytes(2 * psi // (nodes * per_node))
    assert opt.device.optimizer_states == Bytes(0) and opt.device.master_weights == Bytes(0)
    par = estimate(run(psi, offload="parameters", **kw))
    assert par.host_per_node == Bytes(18 * psi // nodes)
    assert par.device.total == Bytes(0)


def test_overhead_and_a_gpu_memory_that_overrides_the_kind():
    """16Ψ = 112 GB for 7B (ZeRO §3.1) plus the optimizer step's fp32 gradient copies, 4Ψ: the
    step's peak is 140 GB; as nvidia-smi would show it, and with 2 GB of overhead, more than a
    141 GB card, less than the 150.75 GB an H200 reports."""
    e = estimate(run(7_000_000_000, gpu="h200", gpu_memory="141GB", overhead="2GB"))
    assert e.peak.bytes == Bytes(140 * 10**9)
    assert float(e.needed.n) == pytest.approx(measured_device.process(140 * 10**9) + 2e9, rel=1e-4)
    assert e.fits is False and e.run.gpu.kind == "h200"
    assert estimate(run(7_000_000_000, gpu="h200", overhead="2GB")).fits is True  # 150.75 GB
    assert Gpu(kind="a100-80gb").kind == "a100-sxm"


def test_time_to_train_uses_the_run_s_gpus_and_the_recipe_s_peak():
    """Llama-3-8B, 15T tokens (Dubey et al. 2024, §3.1), PaLM's 6N + 12·L·h·s at s = 8192 on
    H100s at 40% MFU: tokens × FLOPs per token ÷ (0.4 × GPUs × 989.4e12) seconds."""
    e = estimate(run("llama-3-8b", seq_len=8192, dp=128, zero_stage=1, gpu="h100-sxm",
                     tokens=15 * 10**12, mfu=0.4))
    n = 8_030_261_248 - 128256 * 4096 - 65 * 4096  # the matmul weights
    per_token = 6 * n + 12 * 32 * 4096 * 8192
    assert e.time.flops_per_token == per_token and e.time.gpus == 128
    assert e.time.seconds == pytest.approx(15e12 * per_token / (0.4 * 128 * 989.4e12), rel=1e-12)
    assert estimate_dict(e)["time"]["gpu_hours"] == pytest.approx(e.time.seconds * 128 / 3600)


def test_fp8_weight_cache_is_in_the_peak():
    """fp8-te (Transformer Engine): every decoder-layer matrix cached in fp8 and transposed, 2
    bytes a weight, in the step's peak. Llama-3-8B's published config: hidden 4096, 8 kv heads
    of 128, MLP 14336, 32 layers."""
    h, kv, f, L = 4096, 8 * 128, 14336, 32
    matrices = L * (2 * h * h + 2 * h * kv + 3 * h * f)
    for tp in (1, 2):
        e = estimate(run("llama-3-8b", recipe="fp8-te", seq_len=4096, dp=8 // tp, tp=tp,
                         zero_stage=1))
        parts = dict(e.peak.peak.parts)
        assert parts["fp8 weight copies"] == Bytes(2 * matrices // tp)
        assert estimate_dict(e)["peak"]["parts"]["fp8_weight_copies"] == 2 * matrices // tp
    plain = estimate(run("llama-3-8b", recipe="megatron", seq_len=4096, dp=8, zero_stage=1))
    assert "fp8 weight copies" not in dict(plain.peak.peak.parts)
