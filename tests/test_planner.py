"""trainmath.planner.search: the ranking, its reasons and its speed. The published runs'
layouts against the ranking are in tests/test_published_runs.py."""

import json
import time

import pytest

from trainmath.parallel import placement
from trainmath.planner import search as planner
from trainmath.time import step as steptime
from trainmath.cli.command import main
from trainmath.hardware import GPUS
from trainmath.model.presets import megatron_param_count, preset
from trainmath.model.shape import param_count
from trainmath.hardware import INTERCONNECTS
from trainmath.planner.search import plan
from trainmath.report.data import candidate_dict, plan_dict
from trainmath.report.text import plan_reasons
from trainmath.runs.estimates import estimate
from trainmath.runs.description import run

GB = 10**9


# -- the model presets the published runs need ----------------------------------------------------
def test_llama_3_405b_preset():
    """Dubey et al. 2024 Table 3: 126 layers, h 16384, FFN 53248, 128 heads, 8 KV heads;
    meta-llama/Llama-3.1-405B on Hugging Face: 405,853,388,800 parameters (its
    model.safetensors.index.json: 811,706,777,600 bytes of bf16)."""
    m = preset("llama-3-405b")
    assert (m.layers, m.hidden, m.ffn, m.heads, m.kv_heads) == (126, 16384, 53248, 128, 8)
    assert param_count(m) == 405_853_388_800 == 811_706_777_600 // 2


@pytest.mark.parametrize(("name", "billions"), [
    ("1.7b", "1.7"), ("3.6b", "3.6"), ("7.5b", "7.5"), ("18.4b", "18.4"), ("39.1b", "39.1"),
    ("76.1b", "76.1"), ("145.6b", "145.6"), ("310.1b", "310.1"), ("529.6b", "529.6"),
    ("1t", "1008.0")])
def test_narayanan_table_1_parameter_counts(name, billions):
    """Narayanan et al. 2021 Table 1 prints each model's parameters (billions, one decimal),
    computed with their §5.1 formula."""
    m = preset(f"megatron-gpt-{name}")
    assert f"{megatron_param_count(m) / 1e9:.1f}" == billions


@pytest.mark.parametrize(("name", "billions"), [("22b", 22), ("175b", 175), ("529.6b", 530),
                                                ("1t", 1000)])
def test_korthikanti_table_3_model_sizes(name, billions):
    """Korthikanti et al. 2022 Table 3 names the models 22B, 175B, 530B and 1T."""
    assert megatron_param_count(preset(f"megatron-gpt-{name}")) / 1e9 == pytest.approx(billions, rel=0.01)


# -- the interconnect table -----------------------------------------------------------------------
def test_every_gpu_kind_has_a_node():
    """NVLink per GPU, both directions: A100 600 GB/s, H100/H200 900 GB/s, H800 400 GB/s, B200
    1.8 TB/s (NVIDIA datasheets); network: one 200 Gb/s HDR adapter per A100 in a DGX A100, one
    400 Gb/s ConnectX-7 per GPU in DGX H100, H200 and B200 (the H800's taken as the same)."""
    assert set(INTERCONNECTS) == set(GPUS)
    both_ways = {k: 2 * i.nvlink for k, i in INTERCONNECTS.items()}
    assert both_ways == {"a100-sxm": 600 * GB, "a100-40gb": 600 * GB, "h100-sxm": 900 * GB,
                         "h800": 400 * GB, "h200": 900 * GB, "b200": 1800 * GB}
    gbit = {k: i.network * 8 / 1e9 for k, i in INTERCONNECTS.items()}
    assert gbit == {"a100-sxm": 200, "a100-40gb": 200, "h100-sxm": 400, "h800": 400, "h200": 400,
                    "b200": 400}
    assert all(i.node_gpus == 8 and i.source.startswith("NVIDIA DGX" if k != "h800" else
                                                        "NVIDIA H800 datasheet")
               for k, i in INTERCONNECTS.items())


# -- a plan ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def p70():
    return plan("llama-3-70b", gpu="h100-sxm", gpus=512, seq_len=8192, global_batch=1024,
                layout="dp=16,tp=8,pp=4")


def test_plan_is_fast():
    """The issue's bar: Llama-3-70B on 512 H100s in under a second on one core (CPU time of
    this process), with every cache emptied first, the plan's own memo included; the best of
    three, as other processes on the same cores inflate one try's CPU time too (caches, clocks)."""
    best = float("inf")
    for _ in range(3):
        planner._memo.cache_clear()
        planner._estimate.cache_clear()
        steptime._step_time.cache_clear()
        steptime._stage_times.cache_clear()
        steptime._core.cache_clear()
        steptime._cp_layer.cache_clear()
        placement._stage_params.cache_clear()
        start = time.process_time()
        plan("llama-3-70b", gpu="h100-sxm", gpus=512, seq_len=8192, global_batch=1024)
        best = min(best, time.process_time() - start)
    assert best < 1, f"plan took {best:.2f} s of CPU time"


def test_every_candidate_has_a_reason(p70):
    grids = {c.grid for c in p70.candidates}
    # every factorisation with tp and tp × cp in a node and pp at most the layers
    assert len(grids) == len(planner._grids(512, tp_max=8, tp_cp_max=8, pp_max=80))
    assert {c.status for c in p70.candidates} == {"kept", "dropped"}
    kept = [c for c in p70.candidates if c.status == "kept"]
    assert len(kept) == len(p70.ranking) and len({c.grid for c in kept}) == len(kept)
    for c in p70.candidates:
        assert c.reason
        if c.status == "kept":
            assert c.peak <= p70.memory and c.rank is not None
        if c.reason.startswith("does not fit: peak"):
            assert c.peak > p70.memory
    assert [c.rank for c in p70.ranking] == list(range(1, len(p70.ranking) + 1))
    times = [c.time.total for c in p70.ranking]
    assert times == sorted(times)
    d = plan_dict(p70)
    assert len(d["candidates"]) == len(p70.candidates)
    assert d["ranking"][0]["rank"] == 1 and d["user_layout"]["dp"] == 16


def test_kept_memory_is_the_estimate(p70):
    """The peak in the table is trainmath estimate's, for the same run."""
    best = p70.best
    lay = best.layout
    e = estimate(run("llama-3-70b", dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, v=lay.v,
                     sequence_parallel=lay.sequence_parallel, zero_stage=best.zero_stage,
                     recompute=best.recompute, micro_batch=best.micro_batch, seq_len=8192,
                     global_batch=1024, gpu="h100-sxm"))
    assert e.peak.bytes == best.peak and e.fits


def test_user_layout_is_placed(p70):
    u = p70.user
    assert u.grid == (16, 8, 4, 1) and u.rank == p70.rank_of(16, 8, 4)
    assert u.reason == f"your layout: rank {u.rank} of {len(p70.ranking)}"
    lines = plan_reasons(p70, 3)
    assert lines[0].startswith("best: ") and len(lines) == 3


def test_bad_input_says_what_would_work():
    with pytest.raises(ValueError, match=r"no layout of 81 GPUs can run llama-3-70b .*accepted: 80 or 82 GPUs"):
        plan("llama-3-70b", gpu="h100-sxm", gpus=81, seq_len=8192, global_batch=64)
    with pytest.raises(ValueError, match=r"no layout of 7 h100-sxm GPUs fits llama-3-70b .*accepted: more GPUs"):
        plan("llama-3-70b", gpu="h100-sxm", gpus=7, seq_len=8192, global_batch=64)
    with pytest.raises(ValueError, match=r"no layout of 8 h100-sxm GPUs fits llama-3-405b .*accepted: more GPUs"):
        plan("llama-3-405b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64)
    with pytest.raises(ValueError, match=r"sustained must be a share in \(0, 1\], such as 0.7, got 0"):
        plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64, sustained=0)
    with pytest.raises(ValueError, match="unknown attention kernel 'fa9'"):
        plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64, kernel="fa9")
    with pytest.raises(ValueError, match="layout part 'dq=2' is not KEY=VALUE"):
        plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64, layout="dq=2")
    with pytest.raises(ValueError, match="does not use the 8 GPUs planned for"):
        plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64, layout="dp=4")
    with pytest.raises(ValueError, match="overlap must be an Overlap, got 0.5"):
        plan("llama-3-8b", gpu="h100-sxm", gpus=8, seq_len=8192, global_batch=64, overlap=0.5)


def test_cli(capsys):
    argv = ["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--seq-len",
            "8192", "--global-batch", "64"]
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["inputs"]["gpus"] == 8 and all("reason" in c for c in d["candidates"])
    assert main(argv[:-2] + ["--global-batch", "64", "--gpus", "1"]) == 2
    assert "accepted:" in capsys.readouterr().err
    assert main(["plan", "--params", "7e9", *argv[3:]]) == 2
    assert "plan needs a model shape" in capsys.readouterr().err


# -- mixture of experts: expert parallelism within the data-parallel group --------------------------
def test_mixture_of_experts_plans_expert_parallelism():
    """Mixtral-8x7B (8 experts, Jiang et al. 2024) on 64 H100s: ep is tried wherever etp·ep
    divides dp·cp·tp (Megatron-Core's parallel folding: world % (etp·ep·pp) == 0) and ep the
    expert count, with etp = tp or 1; it adds no GPUs, and its all-to-all is timed."""
    m = preset("mixtral-8x7b")
    p = plan(m, gpu="h100-sxm", gpus=64, seq_len=4096, global_batch=256)
    tried = {c.layout.ep for c in p.candidates}
    assert tried == {1, 2, 4, 8}
    for c in p.candidates:
        lay = c.layout
        assert (lay.dp * lay.cp * lay.tp) % (lay.expert_tp * lay.ep) == 0 and m.experts % lay.ep == 0
        assert lay.expert_tp in (lay.tp, 1)
        assert lay.dp * lay.tp * lay.pp * lay.cp == 64
    # folded: ep 8 where dp is smaller than ep, over dp·cp (cp 8 × ep 8 on 8 GPUs per stage)
    assert any(c.layout.dp < c.layout.ep for c in p.candidates if c.status == "kept")
    expert_parallel = [c for c in p.ranking if c.layout.ep > 1]
    assert expert_parallel and all(c.time.ep > 0 for c in expert_parallel)
    assert all(c.time.ep == 0 for c in p.ranking if c.layout.ep == 1)
    row = candidate_dict(p.ranking[0])
    assert row["ep"] == p.ranking[0].layout.ep and "ep_comm" in row["time"]


def test_dense_models_plan_no_expert_parallelism():
    assert {c.layout.ep for c in plan(preset("llama-3-8b"), gpu="h100-sxm", gpus=16, seq_len=4096,
                                      global_batch=64).candidates} == {1}
