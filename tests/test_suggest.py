"""What to change when a run does not fit (``trainmath estimate --suggest``,
:mod:`trainmath.planner.suggest`).

Expected values come from outside the code: the issue that asked for it (issue 25: the QLoRA run
of Llama-2-70B at s 4096 does not fit an 80GB card, and ``--recompute full`` makes it fit at
43.83 GB), the ZeRO paper's Figure 1 (7.5B parameters over 64 GPUs: 120, 31.4, 16.6 and 1.9 GB
per GPU), hand arithmetic stated in each test, and the command itself: every suggestion's flags,
added to the command line, must give what the suggestion says, through the parser, a new
:class:`~trainmath.runs.description.Run` and a new estimate.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from trainmath.cli.calculator import calculate
from trainmath.cli.command import execute
from trainmath.memory.finetune import Adapter
from trainmath.planner.levers import LEVERS, SEQUENCE_STEP
from trainmath.planner.suggest import ORDER, suggest
from trainmath.problems import Invalid
from trainmath.runs.description import run
from trainmath.units import GB

QLORA_70B = ["estimate", "--model", "llama-2-70b", "--finetune", "qlora", "--seq-len", "4096",
             "--gpu", "a100-80gb"]
#: Llama-3-70B on 64 H100s, plain data parallelism: neither ZeRO nor recomputation fits alone
PAIRS_70B = ["estimate", "--model", "llama-3-70b", "--seq-len", "4096", "--dp", "64",
             "--global-batch", "512", "--gpu", "h100-sxm"]
FITS_8B = ["estimate", "--model", "llama-3-8b", "--seq-len", "8192", "--dp", "8", "--zero", "3",
           "--global-batch", "64", "--gpu", "h100-sxm"]


def _json(argv):
    out = execute([*argv, "--json"])
    assert out.status == 0, out.stderr
    return json.loads(out.stdout)


def _suggested(argv):
    return _json([*argv, "--suggest"])["suggestions"]


def test_the_issues_qlora_run_lists_recompute_full_at_43_83_gb():
    """Issue 25: "A QLoRA run of Llama-2-70B at s 4096 says ... no, 64.10 GB over ... and nothing
    about --recompute full, which makes it fit at 43.83 GB" (the step's peak; the fit is judged
    today by what nvidia-smi shows, so the run is further over than the issue's figure)."""
    s = _suggested(QLORA_70B)
    assert s["fits"] is False
    full = next(c for c in s["changes"] if c["flags"] == "--recompute full")
    assert round(full["peak"] / GB, 2) == 43.83
    assert full["fits"] is True
    text = execute([*QLORA_70B, "--suggest"]).stdout
    assert "--recompute full" in text and "peak 43.83 GB" in text


def test_each_suggestion_is_what_the_command_gives_for_its_flags():
    """The flags a suggestion prints, added to the command line, give its peak, its memory and
    a fit: an independent path through the parser, a new run and a new estimate."""
    for argv in (QLORA_70B, PAIRS_70B):
        for c in _suggested(argv)["changes"]:
            alone = _json([*argv, *shlex.split(c["flags"])])
            assert alone["peak"]["bytes"] == c["peak"], c["flags"]
            assert alone["needed"] == c["needed"], c["flags"]
            assert alone["fits"] is True, c["flags"]


def test_a_single_lever_is_at_its_smallest_setting():
    """One step less of the lever does not fit: the sequence one step of 128 tokens longer, the
    recomputation one kind lighter (selective is refused with Hugging Face's kernels, so none)."""
    s = _suggested(QLORA_70B)
    seq = next(c for c in s["changes"] if c["levers"] == ["seq"])
    longer = int(seq["flags"].split()[-1]) + SEQUENCE_STEP
    assert _json([*QLORA_70B[:-4], "--seq-len", str(longer), *QLORA_70B[-2:]])["fits"] is False
    assert _json(QLORA_70B)["fits"] is False  # recompute none: the run as given


def test_an_adapter_run_gets_no_lever_its_rules_refuse():
    """ZeRO, offload and more GPUs are not modelled with an adapter (the run's rules refuse
    ZeRO and offload; dp replicas hold the whole model), so none is suggested."""
    levers = {lv for c in _suggested(QLORA_70B)["changes"] for lv in c["levers"]}
    assert not levers & {"zero", "offload", "dp", "tp", "pp", "cp"}


def test_zero_paper_figure_1_the_smallest_stage_for_a_32_gb_gpu():
    """ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, 64 GPUs, 16 bytes a parameter:
    120 GB per GPU plain, 31.4 GB at stage 1, 16.6 GB at stage 2. Stage 1 leaves 0.6 GB of a
    V100's 32 GB for the step's fp32 gradient copy (4 bytes × 7.5B / 64 = 0.47 GB) and the CUDA
    context (about 0.5 GB): too little, so stage 2 is the smallest ZeRO change."""
    argv = ["estimate", "--params", "7.5B", "--dp", "64", "--gpu-memory", "32GB"]
    assert round(_json(argv)["per_device"]["total"] / GB) == 120
    zero = [c for c in _suggested(argv)["changes"] if c["levers"] == ["zero"]]
    assert [c["flags"] for c in zero] == ["--zero 2"]
    assert round(_json([*argv, "--zero", "2"])["per_device"]["total"] / GB, 1) == 16.6
    assert round(_json([*argv, "--zero", "1"])["per_device"]["total"] / GB, 1) == 31.4


def test_two_levers_where_neither_fits_alone():
    """Llama-3-70B (70.6B parameters) over dp 64 at s 4096 on an H100 (85.5 GB usable). ZeRO-3
    alone: 16 × 70.6B / 64 = 17.6 GB of states, but about 80 layers × 34·s·h = 80 × 34 × 4096 ×
    8192 bytes = 91 GB of activations (Korthikanti et al. 2022, eq. 2 with flash attention's
    5as/h term gone). Full recomputation alone: 16 × 70.6B = 1.13 TB of states. Together: 17.6
    GB + 80 layer inputs of s·h·2 bytes = 5.4 GB. The pair is listed, neither lever alone; its
    recomputation is the smallest that fits with ZeRO-3, torchtitan's op-level policy, which
    saves its matmuls' outputs besides the inputs (more than full recomputation keeps)."""
    s = _suggested(PAIRS_70B)
    flags = [c["flags"] for c in s["changes"]]
    assert "--recompute op --zero 3" in flags
    assert not {"--recompute op", "--recompute full", "--zero 3"} & set(flags)
    pair = s["changes"][flags.index("--recompute op --zero 3")]
    full = _json([*PAIRS_70B, "--recompute", "full", "--zero", "3"])["peak"]["bytes"]
    assert 17.6 < full / GB < 17.6 + 5.4 + 20  # states, inputs, a layer's transients
    assert full < pair["peak"] < 85.5 * GB


def test_the_ranking_follows_its_rule():
    """Same training first; within it, timed by GPU time per token, then untimed by GPUs and
    the lever order."""
    for argv in (PAIRS_70B, QLORA_70B):
        changes = suggest_of(argv).changes
        keys = [(not c.keeps, c.cost is None, c.cost or 0.0, c.gpus,
                 max(ORDER[x.lever] for x in c.changes)) for c in changes]
        assert keys == sorted(keys)
    timed = [c for c in suggest_of(PAIRS_70B).changes if c.cost is not None]
    assert timed and all(c.step_seconds > 0 for c in timed)
    # offload is not timed, and says so
    off = [c for c in suggest_of(PAIRS_70B).changes if any(x.lever == "offload" for x in c.changes)]
    assert off and all(c.cost is None and "offload" in c.untimed for c in off)


def suggest_of(argv):
    out = execute([*argv, "--suggest"])
    assert out.status == 0, out.stderr
    return out.suggestions


def test_a_run_that_fits_says_its_room_and_what_it_buys():
    """The longest sequence that fits does, one step longer does not; the micro-batch likewise
    among those the global batch allows (64 over dp 8: 1, 2, 4, 8)."""
    s = _suggested(FITS_8B)
    assert s["fits"] is True and s["changes"] == []
    room = s["headroom"]
    given = _json(FITS_8B)  # the same figure, to the byte the JSON's rounding up can move
    assert abs(room["spare"] - (given["inputs"]["gpu_memory"] - given["needed"])) <= 1
    seq = room["longest_seq_len"]
    assert seq % SEQUENCE_STEP == 0 and seq >= 8192
    at = FITS_8B.index("--seq-len") + 1
    longer = [*FITS_8B[:at], str(seq), *FITS_8B[at + 1:]]
    assert _json(longer)["fits"] is True
    longer[at] = str(seq + SEQUENCE_STEP)
    assert _json(longer)["fits"] is False
    b = room["largest_micro_batch"]
    assert b in (1, 2, 4, 8) and room["micro_batch_bound"] == 8
    if b < 8:
        assert _json([*FITS_8B, "--micro-batch", str(2 * b)])["fits"] is False
    assert "room: " in execute([*FITS_8B, "--suggest"]).stdout


def test_suggest_needs_a_gpu():
    out = execute(["estimate", "--model", "llama-3-8b", "--seq-len", "4096", "--suggest"])
    assert out.status == 2
    assert "suggest needs a GPU" in out.stderr and "gpu" in out.stderr
    with pytest.raises(Invalid):
        suggest(run("llama-3-8b", seq_len=4096))


def test_fast_enough_for_a_browser():
    """The 70B QLoRA case and the 70B pairs case, each well under a second of CPU time (the
    calculator runs it in Pyodide, several times slower than CPython)."""
    for r in (run("llama-2-70b", seq_len=4096, adapter=Adapter("qlora"), gpu="a100-80gb"),
              run("llama-3-70b", seq_len=4096, dp=64, global_batch=512, gpu="h100-sxm")):
        start = time.process_time()
        s = suggest(r)
        assert time.process_time() - start < 0.5
        assert s.estimates < 200


def test_every_lever_has_settings_somewhere():
    """Each lever of the table offers a setting for some run (none is dead)."""
    runs = [run("llama-3-8b", seq_len=4096, micro_batch=4, global_batch=64, dp=2, tp=2,
                attention="eager", gpu="h100-sxm"),
            run("llama-2-7b", seq_len=2048, adapter=Adapter("lora"), gpu="a100-40gb")]
    for lever in LEVERS:
        assert any(lever.settings(r) for r in runs), lever.name


def test_the_calculator_shows_what_to_change():
    page = json.loads(calculate("estimate", json.dumps(
        [["model", "llama-2-70b"], ["finetune", "qlora"], ["seq-len", "4096"],
         ["gpu", "a100-80gb"], ["suggest", "on"]])))
    assert page["status"] == 0
    assert "What to change" in page["html"] and "--recompute full" in page["html"]
    assert json.loads(page["stdout"])["suggestions"]["changes"][0]["flags"] == "--recompute full"


def test_the_page_says_the_room_of_a_run_that_fits():
    page = json.loads(calculate("estimate", json.dumps(
        [["model", "llama-3-8b"], ["seq-len", "8192"], ["dp", "8"], ["zero", "3"],
         ["global-batch", "64"], ["gpu", "h100-sxm"], ["suggest", "on"]])))
    room = json.loads(page["stdout"])["suggestions"]["headroom"]
    assert "Room to spare" in page["html"]
    assert f"the longest sequence that fits is {room['longest_seq_len']:,} tokens" in page["html"]
