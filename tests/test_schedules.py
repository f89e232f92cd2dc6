"""Pipeline schedules beyond 1F1B and context parallelism by kind, against their sources.

Expected values are the sources' own: Qi et al. 2024 (ZB-H1: the first stage's memory equals
1F1B's, a third of its bubble when F = B = W), the zero-bubble authors' README (ZB-V: 1F1B's
memory), deepseek-ai/DualPipe's README (DualPipeV: "PP + 1" chunks of activations, its PP being
the 2·pp chunks), PyTorch's refusals (ScheduleDualPipeV: at least as many micro-batches as
stages), DeepSpeed's (Ulysses: heads divisible by the sequence-parallel size) and the DeepSpeed
Ulysses blog's volume (4Nh/P per link per layer for multi-head attention, forward). What PyTorch's
own orders hold and idle is checked in tests/test_measured.py against validate/measure/pipeline.py.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainmath.cli.command import main
from trainmath.model.presets import preset
from trainmath.model.shape import shape
from trainmath.parallel.layout import Layout, layout_problems, ulysses_degree
from trainmath.parallel.schedules import (bubble_fraction, bubble_idle, in_flight,
                                          schedule_problems)
from trainmath.planner.search import plan
from trainmath.runs.description import run
from trainmath.runs.estimates import estimate
from trainmath.time.communication import context_parallel_bytes


def test_zero_bubble_holds_what_its_sources_say():
    pp = 8
    assert in_flight(pp, schedule="zb-h1", microbatches=32) == in_flight(pp)  # first stage: 1F1B's
    assert in_flight(pp, v=2, schedule="zb-v", microbatches=32) == in_flight(pp)  # "1x"
    chunks = 2 * pp  # DualPipe's PP stages: the V's 2·pp chunks, each half a device
    assert in_flight(pp, v=2, schedule="dualpipev", microbatches=32) * 2 == chunks + 1


def test_zb_h1_idles_a_third_of_1f1b_when_the_passes_take_alike():
    one = bubble_idle("1f1b", 4, 1, forward=1, backward_input=1, backward_weight=1)
    zb = bubble_idle("zb-h1", 4, 1, forward=1, backward_input=1, backward_weight=1)
    assert Fraction(zb / one).limit_denominator() == Fraction(1, 3)
    assert bubble_fraction(4, 32, schedule="zb-h1") == bubble_fraction(4, 32) / 3


def test_what_each_schedule_needs_is_refused_by_name():
    (v,) = schedule_problems("zb-v", 4, 1, 16)
    assert v.fields == ("schedule", "v") and "v = 2" in v.message
    (m,) = schedule_problems("dualpipev", 4, 2, 6)
    assert "2 × pp = 8" in m.message and "m = 6" in m.message
    assert schedule_problems("zb-h1", 1, 1, 8)[0].fields == ("schedule", "pp")
    assert "multiple of 4" in schedule_problems("zb-h1", 4, 2, 6)[0].message
    assert not schedule_problems("1f1b", 4, 1, 1)
    with pytest.raises(ValueError, match="schedule 'gpipe' is not one of"):
        Layout(pp=4, schedule="gpipe")


def test_the_v_schedules_put_the_last_chunk_on_the_first_device():
    lay = Layout(pp=4, v=2, schedule="zb-v")
    assert lay.last_device == 0 and lay.device_layer_indices(16)[0] == (0, 1, 14, 15)
    e = estimate(run("llama-3-8b", pp=4, v=2, schedule="zb-v", seq_len=4096, global_batch=32))
    assert e.stages[0].activations == max(d.activations for d in e.stages)  # the head's tensors


def test_ulysses_refuses_a_cp_that_does_not_divide_the_heads_naming_the_rule():
    llama = preset("llama-3-8b")  # 32 heads, 8 KV heads
    (p,) = layout_problems(llama, Layout(cp=3, cp_kind="ulysses"))
    assert p.fields[:2] == ("cp", "cp_kind")
    assert "whole heads, as many on every GPU" in p.message and "32" in p.message
    assert "uneven_heads_all2all" in p.message  # what DeepSpeed 0.19.8 does instead
    odd = shape("odd", layers=2, hidden=3072, heads=24, kv_heads=8, ffn=8192, vocab=1000)
    (kv,) = layout_problems(odd, Layout(cp=6, cp_kind="ulysses"))  # 24 heads split, 8 KV not
    assert kv.fields[2] == "kv_heads" and "UlyssesSPAttentionHF" in kv.message
    (kvh,) = layout_problems(preset("llama-3-70b"), Layout(tp=8, cp=16, cp_kind="ulysses"))
    assert "heads / tp = 64 / 8 = 8" in kvh.message
    assert not layout_problems(llama, Layout(cp=16, cp_kind="ulysses"))  # KV heads replicated
    assert not layout_problems(llama, Layout(cp=3))  # the ring splits the sequence only


def test_the_command_refuses_it_too(capsys):
    assert main(["estimate", "--model", "llama-3-8b", "--cp", "3", "--cp-kind", "ulysses",
                 "--seq-len", "6144"]) == 2
    assert "Ulysses context parallelism splits" in capsys.readouterr().err


def test_the_hybrid_takes_ulysses_up_to_the_kv_heads_and_the_ring_for_the_rest():
    llama = preset("llama-3-8b")
    assert ulysses_degree(llama, Layout(cp=16, cp_kind="hybrid")) == 8
    assert ulysses_degree(llama, Layout(cp=16, cp_kind="ulysses")) == 16
    assert ulysses_degree(llama, Layout(cp=16)) == 1


def test_ulysses_sends_four_nh_over_p_per_layer_for_multi_head_attention():
    m, s, cp = preset("llama-2-7b"), 32768, 8  # 32 heads = 32 KV heads, h = 4096
    c = context_parallel_bytes(m, Layout(cp=cp, cp_kind="ulysses"), seq_len=s)
    per_link = Fraction(4 * s * m.hidden, cp) * 2  # bf16 bytes, DeepSpeed's blog
    assert c.all_to_all == per_link * Fraction(cp - 1, cp) and c.ring == 0
    ring = context_parallel_bytes(m, Layout(cp=cp), seq_len=s)
    assert ring.all_to_all == 0 and ring.ring == Fraction(cp - 1, cp) * 2 * s * m.kv_dim * 2


def test_ulysses_costs_time_the_ring_hides():
    kw = dict(cp=8, seq_len=65536, global_batch=8, gpu="h100-sxm")
    ring = estimate(run("llama-3-8b", **kw)).step.time
    uly = estimate(run("llama-3-8b", cp_kind="ulysses", **kw)).step.time
    assert ring.cp == 0 < uly.cp and uly.total > ring.total


def test_the_planner_searches_the_schedules_and_can_be_held_to_one():
    p = plan("llama-3-8b", gpu="h100-sxm", gpus=16, seq_len=4096, global_batch=64,
             schedules=("zb-v",))
    assert {c.layout.schedule for c in p.ranking if c.layout.pp > 1} <= {"zb-v"}
    every = plan("llama-3-8b", gpu="h100-sxm", gpus=16, seq_len=4096, global_batch=64)
    assert {"1f1b", "zb-h1", "zb-v", "dualpipev"} <= {c.layout.schedule for c in every.candidates}


# -- ZB-H2: Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR 2024), §2.2 and its table of
# the handcrafted schedules: 1F1B (p − 1)(T_F + T_B + T_W), pM_B; ZB-H1 (p − 1)(T_F + T_B − T_W),
# pM_B; ZB-H2 (p − 1)(T_F + T_B − 2T_W), (2p − 1)M_B. PyTorch 2.13 does not ship ZB-H2: what
# an order generated from the paper's description holds and idles, run by the executor of
# PyTorch's orders, is checked in tests/test_measured.py (docs/_data/measurements.json).
def test_zb_h2_holds_two_p_minus_one_micro_batches_as_the_paper_says():
    for p in (2, 4, 8):
        assert in_flight(p, schedule="zb-h2", microbatches=4 * p) == 2 * p - 1  # (2p − 1)M_B
        assert in_flight(p, schedule="zb-h2", microbatches=4 * p, stage=p - 1) == 2 * p - 1


@pytest.mark.parametrize("p,tf,tb,tw", [(4, 1, 2, 1), (8, 2, 3, 1), (4, 2, 2, 1), (16, 3, 4, 2)])
def test_the_zero_bubble_table_where_b_is_at_least_two_w_minus_nothing(p, tf, tb, tw):
    """Where T_F + T_B − 2T_W ≥ T_F (T_B ≥ 2T_W) the table's bubbles are the library's, and
    ZB-H2's is ZB-H1's less (p − 1)T_W."""
    kw = dict(forward=tf, backward_input=tb, backward_weight=tw)
    assert bubble_idle("1f1b", p, 1, **kw) == (p - 1) * (tf + tb + tw)
    assert bubble_idle("zb-h1", p, 1, **kw) == (p - 1) * (tf + tb - tw)
    assert bubble_idle("zb-h2", p, 1, **kw) == (p - 1) * (tf + tb - 2 * tw)


def test_zb_h2_with_equal_passes_idles_only_the_slant_of_its_parallelogram():
    """T_F = T_B = T_W: the table's ZB-H2 bubble is zero (the authors' README: "Bubble Rate 0"
    for ZB2P); a step whose optimizer waits for every stage still waits (p − 1)T_F, the
    parallelogram's slant, which the paper's post-validation (§4) takes off."""
    p, t = 8, 1
    assert (p - 1) * (t + t - 2 * t) == 0
    assert bubble_idle("zb-h2", p, 1, forward=t, backward_input=t, backward_weight=t) == (p - 1) * t


def test_zb_h2_needs_one_chunk_and_two_p_minus_one_micro_batches():
    (v,) = schedule_problems("zb-h2", 4, 2, 16)
    assert v.fields == ("schedule", "v") and "v = 1" in v.message
    (m,) = schedule_problems("zb-h2", 4, 1, 6)
    assert "2 × pp − 1 = 7" in m.message and "m = 6" in m.message
    assert not schedule_problems("zb-h2", 4, 1, 7)
    with pytest.raises(ValueError, match="2 × pp − 1 = 7"):
        in_flight(4, schedule="zb-h2", microbatches=6)


def test_the_command_estimates_zb_h2_in_text_and_json(capsys):
    import json
    args = ["estimate", "--model", "llama-3-8b", "--pp", "4", "--seq-len", "4096",
            "--global-batch", "32", "--schedule", "zb-h2"]
    assert main(args) == 0
    assert "zb-h2, Qi et al. 2024" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["schedule"] == "zb-h2" and out["in_flight"][1] == 2 * 4 - 1
    assert main(args[:-1] + ["zb-h2", "--interleave", "2"]) == 2
    assert "schedule zb-h2 places one model chunk" in capsys.readouterr().err
    assert main(["estimate", "--model", "llama-3-8b", "--pp", "4", "--seq-len", "4096",
                 "--global-batch", "6", "--schedule", "zb-h2"]) == 2
    assert "2 × pp − 1 = 7" in capsys.readouterr().err


def test_zb_h2_costs_memory_and_saves_bubble_against_zb_h1():
    kw = dict(pp=4, seq_len=4096, global_batch=32, gpu="h100-sxm")
    h1 = estimate(run("llama-3-8b", schedule="zb-h1", **kw))
    h2 = estimate(run("llama-3-8b", schedule="zb-h2", **kw))
    assert h2.step.time.bubble < h1.step.time.bubble
    assert h2.stages[1].activations > h1.stages[1].activations


def test_the_planner_takes_zb_h2_only_when_asked():
    every = plan("llama-3-8b", gpu="h100-sxm", gpus=16, seq_len=4096, global_batch=64)
    assert "zb-h2" not in {c.layout.schedule for c in every.candidates}
    asked = plan("llama-3-8b", gpu="h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                 schedules=("zb-h2",))
    assert {c.layout.schedule for c in asked.ranking if c.layout.pp > 1} <= {"zb-h2"}


# -- DualPipe: DeepSeek-AI 2024 (the DeepSeek-V3 report) §3.2.1 and Table 2, and
# deepseek-ai/DualPipe's README table: bubble (PP/2 − 1)(F&B + B − 3W), parameters 2×,
# activations PP + 1 (of one stage's micro-batch), PP the ranks; its F, B, W one stage's, its B
# the whole backward. PyTorch 2.13 does not ship it.
def test_dualpipe_holds_pp_plus_one_stage_micro_batches():
    for pp in (2, 4, 8, 16):
        # in units of the device's layers, two stages: PP + 1 stages' worth is (PP + 1)/2
        assert in_flight(pp, schedule="dualpipe", microbatches=2 * pp) * 2 == pp + 1


@pytest.mark.parametrize("pp,f,b,w", [(4, 1, 1, 1), (8, 1, 2, 1), (8, 2, 3, 1), (16, 3, 4, 2)])
def test_dualpipe_idles_the_readme_formula(pp, f, b, w):
    """The README's (PP/2 − 1)(F&B + B − 3W) per stage, F&B = F + B (no credit for the
    overlap), B the whole backward b + w; the library takes the device's times, two stages'."""
    readme = (pp // 2 - 1) * ((f + (b + w)) + (b + w) - 3 * w)
    assert bubble_idle("dualpipe", pp, 1, forward=2 * f, backward_input=2 * b,
                       backward_weight=2 * w) == readme


def test_dualpipes_order_idles_no_more_than_the_readme_says():
    """The order built from DualPipe.step's phase counts (validate/measure/pipeline.py, its
    records in docs/_data/measurements.json), each F&B run one pass after the other, idles at
    most the README's figure: the library's idle is an upper bound there, not the order's."""
    import json
    from pathlib import Path
    doc = json.loads((Path(__file__).resolve().parents[1] / "docs" / "_data"
                      / "measurements.json").read_text(encoding="utf-8"))
    records = [r for r in doc["schedules"] if r["schedule"] == "dualpipe"]
    assert records
    for r in records:
        for t in r["measured"]["idle"]:
            readme = (r["pp"] // 2 - 1) * (t["f"] + 2 * (t["b"] + t["w"]) - 3 * t["w"])
            assert t["units"] <= readme


def test_dualpipe_doubles_each_devices_parameters():
    """DeepSeek-V3 Table 2: "Parameter 2×": device i holds stages i and pp − 1 − i."""
    kw = dict(pp=4, seq_len=4096, global_batch=32, gpu="h100-sxm")
    one = estimate(run("llama-3-8b", **kw)).stages
    two = estimate(run("llama-3-8b", schedule="dualpipe", **kw)).stages
    for i in range(4):
        assert two[i].params == one[i].params + one[3 - i].params
    lay = Layout(pp=4, schedule="dualpipe")
    assert lay.device_layer_indices(16)[0] == (0, 1, 2, 3, 12, 13, 14, 15)
    assert lay.holds_first(3) and lay.holds_last(0) and not lay.holds_first(1)


def test_dualpipe_sums_each_stages_gradients_between_its_two_devices():
    """examples/example_dualpipe.py sums a stage's two gradients (p0.grad += the twin's): with
    no data parallelism, DualPipe's step still reduces, 1F1B's does not."""
    kw = dict(pp=4, seq_len=4096, global_batch=32, gpu="h100-sxm")
    assert estimate(run("llama-3-8b", **kw)).step.time.dp == 0
    assert estimate(run("llama-3-8b", schedule="dualpipe", **kw)).step.time.dp > 0


def test_dualpipe_needs_what_dualpipe_step_asserts():
    """``assert num_ranks % 2 == 0`` and ``num_chunks % 2 == 0 and num_chunks >= num_ranks * 2``."""
    assert "pp must be even" in schedule_problems("dualpipe", 3, 1, 12)[0].message
    assert "m must be even" in schedule_problems("dualpipe", 4, 1, 9)[0].message
    (m,) = schedule_problems("dualpipe", 4, 1, 6)
    assert "2 × pp = 8" in m.message
    assert schedule_problems("dualpipe", 4, 2, 8)[0].fields == ("schedule", "v")
    assert not schedule_problems("dualpipe", 4, 1, 8)


def test_the_command_estimates_dualpipe_in_text_and_json(capsys):
    import json
    args = ["estimate", "--model", "llama-3-8b", "--pp", "4", "--seq-len", "4096",
            "--global-batch", "32", "--schedule", "dualpipe"]
    assert main(args) == 0
    assert "dualpipe, DeepSeek-AI 2024" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["schedule"] == "dualpipe" and out["in_flight"][0] * 2 == 4 + 1
    assert main(args[:4] + ["3"] + args[5:]) == 2
    assert "pp must be even" in capsys.readouterr().err
    assert main(args[:8] + ["31"] + args[9:]) == 2  # m = 31 with dp 1 and b 1
    assert "m must be even" in capsys.readouterr().err
    assert main(args + ["--interleave", "2"]) == 2
    assert "schedule dualpipe places one model chunk" in capsys.readouterr().err


def test_the_planner_takes_dualpipe_only_when_asked():
    every = plan("llama-3-8b", gpu="h100-sxm", gpus=16, seq_len=4096, global_batch=64)
    assert "dualpipe" not in {c.layout.schedule for c in every.candidates}
    asked = plan("llama-3-8b", gpu="h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                 schedules=("dualpipe",))
    assert {c.layout.schedule for c in asked.ranking if c.layout.pp > 1} <= {"dualpipe"}
