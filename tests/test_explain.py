"""trainmath.report.terms: each figure's formula gives the estimate's figure, on published examples."""

import re
from fractions import Fraction
from pathlib import Path

import pytest

from trainmath.report.terms import LINKS, explain
from trainmath.runs.estimates import estimate
from trainmath.runs.description import run
from trainmath.units import GB

RUNS = {
    "count only": dict(model=7_000_000_000),
    "llama-3-8b zero-3 h100": dict(model="llama-3-8b", seq_len=8192, dp=8, zero_stage=3,
                                   gpu="h100-sxm"),
    "70b pipeline interleaved": dict(model="llama-3-70b", seq_len=4096, dp=4, tp=8, pp=4, v=5,
                                     sequence_parallel=True, global_batch=64, zero_stage=1,
                                     recipe="megatron", gpu="h100-sxm"),
    "fsdp2": dict(model="llama-3-8b", seq_len=4096, dp=8, recipe="fsdp2"),
    "fsdp2 uneven": dict(model="llama-2-7b", seq_len=2048, dp=3, recipe="fsdp2"),
    "pp 2": dict(model="llama-2-7b", seq_len=4096, pp=2),
    "too small": dict(model="llama-3-8b", seq_len=8192, gpu_memory="24GB"),
    "offload optimizer, overhead": dict(model="llama-3-8b", seq_len=4096, dp=8, zero_stage=2,
                                        offload="optimizer", gpu="h100-sxm", overhead="3GB"),
    "offload parameters": dict(model="llama-3-8b", seq_len=4096, dp=8, zero_stage=3,
                               offload="parameters", gpus_per_node=8),
    "fsdp2 offload": dict(model="llama-3-8b", seq_len=4096, dp=8, recipe="fsdp2",
                          offload="parameters"),
    "offload with tp and pp": dict(model="llama-3-70b", seq_len=4096, dp=8, tp=4, pp=2,
                                   zero_stage=3, offload="parameters"),
    "time": dict(model="llama-3-8b", seq_len=4096, dp=8, gpu="h100-sxm", tokens=15 * 10**12,
                 mfu=0.4),
}
#: Runs whose model states are not one ZeRO formula over one group: an adapter (the frozen base
#: and the adapter's own states), routed experts (their own ZeRO group). Each still has its
#: formula, and the formula gives the figure.
OWN_FORMULAS = {
    "lora": ["estimate", "--model", "llama-3-8b", "--finetune", "lora", "--seq-len", "4096"],
    "qlora": ["estimate", "--model", "llama-3-8b", "--finetune", "qlora", "--lora-targets", "all"],
    "mixtral ep": ["estimate", "--config", "tests/data/hf-configs/Mixtral-8x7B-v0.1.json",
                   "--dp", "8", "--ep", "8", "--zero", "1"],
    "mixtral ep offload": ["estimate", "--config", "tests/data/hf-configs/Mixtral-8x7B-v0.1.json",
                           "--dp", "8", "--ep", "4", "--zero", "3", "--offload", "params",
                           "--seq-len", "4096"],
}


def _estimate(kw):
    kw = dict(kw)
    return estimate(run(kw.pop("model"), **kw))


@pytest.mark.parametrize("name", RUNS)
def test_every_figure_has_its_arithmetic_and_the_formula_gives_it(name):
    est = _estimate(RUNS[name])
    terms = {t.name: t for t in explain(est)}
    kinds = ["weights", "gradients", "master weights", "optimizer states"]
    offload = est.training.offload != "none"
    expected = kinds + (["activations"] if est.activations is not None else []) + (
        ["host memory"] if offload else []) + ["total", "peak of a step", "process memory"] + (
        ["fits"] if est.fits is not None else []) + (["step time"] if est.step else []) + (
        ["time to train"] if est.time else [])
    assert list(terms) == expected
    for label, amount in est.parts().items():
        if amount is not None:
            assert terms[label].value == amount
    if offload:
        assert terms["host memory"].value == est.host
        moved = [k for k in kinds if "host memory" in terms[k].arithmetic]
        assert moved and all(terms[k].value.n == 0 for k in moved)
    assert terms["total"].value == est.total
    assert terms["peak of a step"].value == est.peak.bytes
    for t in terms.values():
        assert t.link.split("#")[0].removesuffix(".html") in (  # pages of this site
            "memory-math", "zero-fsdp", "distributed-training", "how-we-know", "cli",
            "fine-tuning", "mixture-of-experts")
        padded = t.name in kinds and "FSDP2 pads" in t.note
        if t.formula_value is not None and not padded:
            assert t.formula_value == t.value, t
        if padded:  # only FSDP2's padding makes the exact shard differ from the formula
            assert name.startswith("fsdp2") and t.value > t.formula_value


def test_zero_paper_figure_1():
    """Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N_d = 64, K = 12: per device 120 GB with
    plain data parallelism, 31.4 GB with P_os, 16.6 GB with P_os+g, 1.9 GB with P_os+g+p."""
    paper = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, gb in paper.items():
        terms = {t.name: t for t in explain(_estimate(dict(model=7_500_000_000, dp=64,
                                                            zero_stage=stage)))}
        assert round(terms["total"].formula_value.n / GB, 1) == gb
    weights = explain(_estimate(dict(model=7_500_000_000, dp=64, zero_stage=3)))[0]
    assert weights.formula == "P × w ÷ n"  # 2Ψ/N_d: the paper's 16-bit parameters, sharded
    assert weights.formula_value.n == Fraction(2 * 7_500_000_000, 64)


def test_fits_says_which_way():
    small = {t.name: t for t in explain(_estimate(RUNS["too small"]))}
    assert small["fits"].arithmetic.endswith("does not fit") and " > " in small["fits"].arithmetic
    big = {t.name: t for t in explain(_estimate(RUNS["llama-3-8b zero-3 h100"]))}
    assert big["fits"].arithmetic.endswith(": fits") and " ≤ " in big["fits"].arithmetic


def test_links_name_headings_the_pages_have():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    for link in LINKS.values():
        page, _, anchor = link.partition("#")
        text = (docs / page.replace(".html", ".md")).read_text(encoding="utf-8")
        if not anchor:
            continue
        headings = {"-".join(re.sub(r"[^\w\s-]", "", line.lstrip("#").strip().lower()).split())
                    for line in text.splitlines() if line.startswith("#")}
        assert anchor in headings, link


@pytest.mark.parametrize("name", OWN_FORMULAS)
def test_a_run_beyond_one_zero_formula_has_its_own_formulas(name):
    """No term is hidden: every figure's formula gives it (the terms are what the estimate
    recorded as it computed each figure)."""
    from trainmath.cli import command as cli

    root = Path(__file__).resolve().parents[1]
    argv = [a if not a.startswith("tests/") else str(root / a) for a in OWN_FORMULAS[name]]
    est = estimate(cli.to_run(cli.build_parser().parse_args(argv)))
    terms = {t.name: t for t in explain(est)}
    for t in terms.values():
        assert t.formula and t.arithmetic and t.inputs or t.name == "total", t
        assert t.formula_value == t.value, t
    kinds = ["weights", "gradients", "master weights", "optimizer states"]
    assert {k: terms[k].value for k in kinds} == {k: v for k, v in est.parts().items() if k in kinds}
    if "--finetune" in argv:
        assert "Pₐ" in terms["gradients"].formula and terms["weights"].link == LINKS["finetune"]
    else:
        assert "Pₑ" in terms["optimizer states"].formula and "nₑ" in terms["optimizer states"].formula
    assert terms["total"].value == est.total


def test_the_arithmetic_is_recorded_where_it_is_computed():
    """explain computes nothing: each term is a derivation of the estimate, with its link."""
    est = _estimate(RUNS["offload optimizer, overhead"])
    assert [t.name for t in explain(est)] == [d.name for d in est.derivations]
    assert all(t.value == d.value and t.arithmetic == d.arithmetic
               for t, d in zip(explain(est), est.derivations))
    source = (Path(__file__).resolve().parents[1] / "src/trainmath/report/terms.py").read_text()
    assert "not written out" not in source and "Fraction" not in source
