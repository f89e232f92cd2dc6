"""docs/_data/measurements.json against a fresh measurement, and the measurements against the world.

1. Every recorded configuration is measured again and must equal the file to the byte, with
   the same shape and settings: the data cannot go stale silently. By default all of them
   (a few minutes on two cores); ``TRAINMATH_FULL=0`` re-measures only the quick subset marked
   in validate/measure/configs.py. After a deliberate change, rewrite the file with
   ``python -m validate.measure`` (or ``--only REGEX``) and commit it.
2. The method: fake tensors give the same bytes as real ones (tiny shapes, every
   implementation and recipe); scoped per-layer counts equal the difference between L + 1 and
   L layers; the step peak agrees with PyTorch's own MemTracker.
3. Figures from outside this code: published parameter counts, the 16 bytes per parameter of
   the ZeRO paper, Megatron-LM's 18, Korthikanti et al.'s sbh(34 + 5as/h).
"""

from __future__ import annotations

import json
import math
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from validate.measure import configs, shapes  # noqa: E402
from validate.measure.saved import measure_saved  # noqa: E402
from validate.measure.step import RECIPES, measure_step  # noqa: E402

FULL = os.environ.get("TRAINMATH_FULL", "1") != "0"
ALL = configs.configurations()
CHOSEN = [c for c in ALL if FULL or c.fast]
HOW = "rewrite it with `.venv/bin/python -m validate.measure` (or --only REGEX) and commit it"


@pytest.fixture(scope="module")
def recorded() -> dict:
    assert configs.OUTPUT.exists(), f"{configs.OUTPUT} is missing; {HOW}"
    return json.loads(configs.OUTPUT.read_text())


def _by_id(recorded: dict) -> dict[str, dict]:
    return {c["id"]: c for c in recorded["configurations"]}


# --- 1. the file is what PyTorch measures now --------------------------------------------------

def test_file_lists_every_configuration_once(recorded):
    assert recorded["schema"] == configs.SCHEMA
    assert [c["id"] for c in recorded["configurations"]] == [c.id for c in ALL], HOW


def test_file_was_measured_with_the_pinned_versions(recorded):
    import transformers
    assert recorded["versions"]["torch"] == torch.__version__, HOW
    assert recorded["versions"]["transformers"] == transformers.__version__, HOW
    assert configs.normalise(configs.methods()) == recorded["methods"], HOW


@pytest.mark.parametrize("config", CHOSEN, ids=[c.id for c in CHOSEN])
def test_recorded_measurement_is_current(recorded, config):
    entry = _by_id(recorded)[config.id]
    assert {k: v for k, v in entry.items() if k != "measured"} == configs.normalise(
        config.describe()), f"{config.id}: settings differ from the file; {HOW}"
    fresh = configs.normalise(config.measure())
    assert fresh == entry["measured"], f"{config.id}: measured now differs from the file; {HOW}"


def test_recorded_schedules_are_current(recorded):
    """PyTorch's pipeline schedules run again give the recorded counts and idle times."""
    from validate.measure import pipeline
    assert recorded["schedules"] == configs.normalise(pipeline.records()), HOW


def test_schedules_exist_in_the_pinned_torch():
    """Every schedule the library names is a class of torch.distributed.pipelining here."""
    from torch.distributed.pipelining import schedules as S
    from validate.measure import pipeline
    for _, name, *_ in pipeline.CASES:
        assert S.get_schedule_class(name).__name__ == f"Schedule{name}"


def test_schema_documents_every_measured_field(recorded):
    from validate import measure
    doc = measure.__doc__
    for entry in recorded["configurations"]:
        for key, value in entry["measured"].items():
            assert key in doc, f"measured field {key!r} is not in the schema"
            if isinstance(value, dict) and key != "alive_after_step":
                for sub in value:
                    if key in ("states", "peak", "first_step_peak"):
                        assert sub in doc, f"{key}.{sub} is not in the schema"


def test_report_renders_every_configuration(recorded):
    from validate.measure import report
    text = report.render(recorded)
    assert text.count("\n| ") >= len(recorded["configurations"])


# --- 2. the method -------------------------------------------------------------------------------

def _tiny(name: str, **changes) -> dict:
    base = dict(shapes.SHAPES[name], layers=2, hidden=64, heads=4, vocab=101)
    if base["family"] == "gpt":
        base |= dict(kv_heads=4, ffn=256, positions=16)
    else:
        base |= dict(kv_heads=2, ffn=96)
    return base | changes


TINY = {
    "llama": _tiny("llama-3-8b"),
    "mistral": _tiny("mistral-7b", sliding_window=16),  # the window covers s: a real mask
    "gpt": _tiny("gpt3-xl"),
}
SAVED_CASES = [(family, impl, precision)
               for family in TINY
               for impl in ("reference-sdpa", "reference-eager", "hf-sdpa", "hf-eager")
               if family != "gpt" or impl.startswith("reference")
               for precision in ("bf16", "autocast-bf16")]


@pytest.mark.parametrize(("family", "impl", "precision"), SAVED_CASES)
def test_fake_tensors_save_what_real_tensors_save(family, impl, precision):
    """The same forward and backward, on fake and on real tensors, at a tiny size."""
    fake = measure_saved(TINY[family], impl, 16, precision=precision, backward=True)
    real = measure_saved(TINY[family], impl, 16, precision=precision, backward=True, fake=False)
    assert fake == real


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("family", ["llama", "gpt"])
def test_fake_tensors_track_what_real_tensors_allocate(family, recipe, foreach):
    """States, the peak and what is alive at it: the same on fake and on real tensors."""
    kwargs = {"dp": 4, "rank": 1} if recipe == "fsdp2-bf16" else {}
    fake = measure_step(TINY[family], "reference-sdpa", recipe, 16, foreach=foreach, **kwargs)
    real = measure_step(TINY[family], "reference-sdpa", recipe, 16, foreach=foreach, fake=False,
                        **kwargs)
    assert fake == real


@pytest.mark.parametrize("impl", ["reference-sdpa", "reference-eager", "hf-sdpa", "hf-eager"])
@pytest.mark.parametrize("precision", ["bf16", "autocast-bf16"])
def test_per_layer_bytes_are_the_difference_of_one_more_layer(impl, precision):
    """Full width (Llama-2-7B's layer), s = 2048: hooks scoped to a layer vs L + 1 minus L."""
    two = measure_saved("llama-2-7b", impl, 2048, precision=precision, layers=2)
    three = measure_saved("llama-2-7b", impl, 2048, precision=precision, layers=3)
    assert three["total"] - two["total"] == two["per_layer"][1] == three["per_layer"][2]


@pytest.mark.parametrize("impl", ["reference-sdpa", "hf-sdpa"])
def test_step_peak_agrees_with_pytorch_memtracker(impl):
    """torch.distributed._tools.mem_tracker.MemTracker over the second step, at full width.

    MemTracker registers storages as ops return them, and so never sees the token ids made
    before it started; they are saved for backward (the embedding's gradient scatters by
    them) and this tracker counts them: the one difference allowed, 8 bytes a token.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    seen = {}

    def observe(net, opt):
        seen["mt"] = MemTracker()
        seen["mt"].track_external(net, opt)
        return seen["mt"]

    s = 2048
    ours = measure_step("llama-2-7b", impl, "autocast-fp32", s, foreach=True, layers=2,
                        observer=observe)
    (theirs,) = seen["mt"].get_tracker_snapshot("peak").values()
    assert ours["peak"]["bytes"] - theirs["Total"] == 8 * s


# --- 3. figures from outside this code -----------------------------------------------------------

PUBLISHED_PARAMETERS = {
    # Hugging Face model cards / safetensors metadata of the released checkpoints
    "llama-2-7b": 6_738_415_616,   # meta-llama/Llama-2-7b-hf
    "llama-3-8b": 8_030_261_248,   # meta-llama/Meta-Llama-3-8B
    "mistral-7b": 7_241_732_096,   # mistralai/Mistral-7B-v0.1
}
ROUNDED_PARAMETERS = {
    "gpt3-xl": (1.3e9, 0.1e9),           # Brown et al. 2020, Table 2.1: "1.3B"
    "korthikanti-22b": (22e9, 1e9),      # Korthikanti et al. 2022, Table 3: "22B"
}


def _steps(recorded, **match):
    return [c for c in recorded["configurations"] if c["kind"] == "step"
            and all(c[k] == v for k, v in match.items())]


@pytest.mark.parametrize("model", list(PUBLISHED_PARAMETERS) + list(ROUNDED_PARAMETERS))
def test_parameter_counts_are_the_published_ones(recorded, model):
    counts = {c["measured"]["parameters_count"] for c in _steps(recorded, model=model)}
    assert counts == {shapes.param_count(shapes.SHAPES[model])}
    (n,) = counts
    if model in PUBLISHED_PARAMETERS:
        assert n == PUBLISHED_PARAMETERS[model]
    else:
        value, step = ROUNDED_PARAMETERS[model]
        assert round(n / step) * step == pytest.approx(value)


# bytes per parameter: params / grads / fp32 masters / optimizer states
BYTES_PER_PARAMETER = {
    # Rajbhandari et al. 2020 (ZeRO) §3.1: 2Ψ + 2Ψ + KΨ with K = 12 (master, m, v): 16Ψ
    "zero-bf16": (2, 2, 4, 8),
    "zero-fp16": (2, 2, 4, 8),
    # Megatron-LM, docs/source/api-guide/dist_optimizer.md: bf16 params with fp32 grads,
    # 6 bytes + 12 for the fp32 master and Adam: 18 bytes per parameter (not distributed)
    "megatron-bf16": (2, 4, 4, 8),
    # Micikevicius et al. 2018 and naive code: bf16 grads kept beside the masters' fp32 grads
    "bf16-master-naive": (2, 2 + 4, 4, 8),
    "bf16-master-free-grads": (2, 4, 4, 8),
    # autocast keeps fp32 parameters: their own master, fp32 grads (PyTorch AMP docs)
    "autocast-fp32": (4, 4, 0, 8),
}


@pytest.mark.parametrize("recipe", list(BYTES_PER_PARAMETER))
def test_states_are_the_papers_bytes_per_parameter(recorded, recipe):
    p, g, m, o = BYTES_PER_PARAMETER[recipe]
    chosen = _steps(recorded, recipe=recipe)
    assert chosen
    for c in chosen:
        n, st = c["measured"]["parameters_count"], c["measured"]["states"]
        got = (st["parameters"], st["gradients"], st["master_weights"], st["optimizer_states"])
        assert got == (p * n, g * n, m * n, o * n), c["id"]
        assert st["total"] == (p + g + m + o) * n


def test_fsdp2_rank_holds_a_dp_th_of_16_bytes_per_parameter(recorded):
    """ZeRO-3 / FSDP2 with fp32 sharded parameters: 16Ψ/dp per rank, up to the padding of
    each tensor's dim-0 shards (fewer than dp rows of padding per tensor)."""
    chosen = _steps(recorded, recipe="fsdp2-bf16")
    assert {c["dp"] for c in chosen} == {8, 64}
    for c in chosen:
        n, dp, st = c["measured"]["parameters_count"], c["dp"], c["measured"]["states"]
        assert st["parameters"] * 4 == st["optimizer_states"] * 2 == st["gradients"] * 4, c["id"]
        assert st["total"] * dp >= 16 * n, c["id"]
        widest = max(c["shape"]["hidden"], c["shape"]["ffn"])
        tensors = st["step_counters"]["count"]
        assert st["total"] - math.ceil(16 * n / dp) <= 16 * tensors * widest, c["id"]


def test_adamw_step_counters_are_one_fp32_scalar_per_tensor(recorded):
    for c in _steps(recorded):
        sc = c["measured"]["states"]["step_counters"]
        assert sc["dtype"] == ["fp32"] and sc["bytes"] == 4 * sc["count"] > 0, c["id"]


def test_gpt_layer_saves_korthikanti_eq1_plus_norm_statistics(recorded):
    """Korthikanti et al. 2022 eq. 1: sbh(34 + 5as/h) for 16-bit activations and 1-byte
    dropout masks with eager attention; they leave out the two LayerNorms' fp32 mean and 1/σ
    (2 × 2 × 4 bytes per token), which the fused kernels keep."""
    chosen = [c for c in recorded["configurations"] if c["kind"] == "saved" and "shape" in c
              and c["shape"]["family"] == "gpt" and c["implementation"] == "reference-eager"
              and c["precision"] == "bf16"]
    assert len(chosen) == 4
    for c in chosen:
        s, b, h, a = c["s"], c["b"], c["shape"]["hidden"], c["shape"]["heads"]
        m = c["measured"]
        assert set(m["per_layer"]) == {s * b * h * 34 + 5 * a * s * s * b + 16 * s * b}, c["id"]


def test_reference_model_runs_the_kernels_trainmath_activations_counts(recorded):
    """The reference model is the library's kernel set: its layers save exactly what
    trainmath.memory.activations.layer_activations lists, tensor by tensor (fp32 norm statistics)."""
    from trainmath.memory.activations import layer_activations
    from trainmath.model.shape import shape as tm_shape

    for c in recorded["configurations"]:
        if c["kind"] != "saved" or not c["implementation"].startswith("reference") \
                or c["precision"] != "bf16":
            continue
        sh = c["shape"]
        model = tm_shape(sh["name"], layers=sh["layers"], hidden=sh["hidden"], heads=sh["heads"],
                         kv_heads=sh["kv_heads"], ffn=sh["ffn"], vocab=sh["vocab"], mlp=sh["mlp"],
                         norm=sh["norm"], bias=sh["bias"], tied_embeddings=sh["tied_embeddings"],
                         positions=sh["positions"], dropout=sh["dropout"])
        # GPT shapes with SDPA run without attention dropout (the CPU has no fused kernel for
        # it); the library counts nothing for FlashAttention's dropout either (seed and offset)
        attention = "flash" if c["implementation"] == "reference-sdpa" else "eager"
        predicted = layer_activations(model, c["s"], c["b"], attention=attention).total.n
        assert set(c["measured"]["per_layer"]) == {predicted}, c["id"]


def test_bubble_idle_is_what_pytorchs_orders_idle_over_a_grid():
    """trainmath's bubble_idle for ZB-H1 (one chunk and two), ZB-V and DualPipeV against
    PyTorch's own orders run pass by pass, for every pass time f ≤ b, w ≤ b from 1 to 5 units,
    pp 2 to 8 and two step lengths: the recorded three timings alone would not tell the
    papers' F + B − W forms from these."""
    import itertools

    from trainmath.parallel.schedules import bubble_idle
    from validate.measure import pipeline
    times = [t for t in itertools.product(range(1, 6), repeat=3) if t[0] <= t[1] and t[2] <= t[1]]
    wrong = []
    for cls, sch, v in (("InterleavedZeroBubble", "zb-h1", 1), ("InterleavedZeroBubble", "zb-h1", 2),
                        ("ZBVZeroBubble", "zb-v", 2), ("DualPipeV", "dualpipev", 2)):
        for pp in range(2, 9):
            for m in (2 * pp, 3 * pp):
                order = pipeline.pipeline_order(cls, pp, m, v)
                for f, b, w in times:
                    got = pipeline.idle(order, pp * v, f, b, w)
                    lib = bubble_idle(sch, pp, v, forward=v * f, backward_input=v * b,
                                      backward_weight=v * w)
                    if abs(got - lib) > 1e-9:
                        wrong.append((sch, pp, m, v, (f, b, w), got, lib))
    assert not wrong, f"{len(wrong)} differ, e.g. {wrong[:3]} (schedule, pp, m, v, f/b/w, order, library)"
