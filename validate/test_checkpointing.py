"""Op-level selective checkpointing and torch.compile's partition: the method of
validate/measure/checkpointing.py checked on small shapes, with real tensors beside fake ones.

1. Fake tensors give the bytes real tensors give: one layer and the whole model under
   torchtitan's policy and under compile, and a whole step's peak.
2. torchtitan's policy decides, op by op, as its code says (``SelectiveAC._wrap_block`` at
   b5bcd76c66d0): the 1st, 3rd, 5th and 7th matmul saved, the attention kernel saved, the
   count starting again in every layer.
3. A policy that saves nothing keeps what full recomputation keeps: the layer's input.
4. The split AOTAutograd's min-cut partitioner makes is the one Inductor makes (its
   ``compile_fx`` calls the same partitioner after its own graph passes).
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

from validate.measure import checkpointing, shapes  # noqa: E402
from validate.measure.models import Layer  # noqa: E402
from validate.measure.step import measure_step  # noqa: E402

SMALL = dict(shapes.SHAPES["llama-3-8b"], layers=3, hidden=256, heads=4, kv_heads=2, ffn=704,
             vocab=1000)


@pytest.mark.parametrize("policy", checkpointing.POLICIES)
def test_op_sac_fake_equals_real(policy, monkeypatch):
    from torch._subclasses import fake_tensor

    fake = checkpointing.measure_op_sac(SMALL, 96, 2, policy)
    monkeypatch.setattr(fake_tensor, "FakeTensorMode", _NoFake)
    monkeypatch.setattr(checkpointing, "FakeTensorMode", _NoFake)
    real = checkpointing.measure_op_sac(SMALL, 96, 2, policy)
    assert fake["per_layer"] == real["per_layer"] and fake["total"] == real["total"]


class _NoFake:
    """A stand-in for FakeTensorMode that runs on real tensors."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("policy", checkpointing.POLICIES)
def test_compile_op_fake_equals_real(policy, monkeypatch):
    """torch.compile over op-level checkpointing: the bytes its forward saves, on fake tensors
    and on real ones."""
    from validate.measure import saved

    fake = checkpointing.measure_compiled_op(SMALL, 96, 2, policy)
    measure = saved.measure_saved
    monkeypatch.setattr(saved, "measure_saved", functools.partial(measure, fake=False))
    real = checkpointing.measure_compiled_op(SMALL, 96, 2, policy)
    assert fake["per_layer"] == real["per_layer"] and fake["total"] == real["total"]


def test_compile_op_drops_what_the_backward_does_not_read():
    """Compiled, torchtitan's policy keeps the layer input, q, v, the attention kernel's output
    and log-sum-exp, and gate; eager checkpointing also caches down's output (b·s·h values),
    which only the residual sum reads."""
    h, s, b = SMALL["hidden"], 96, 2
    eager = checkpointing.measure_op_sac(SMALL, s, b, "torchtitan")
    compiled = checkpointing.measure_compiled_op(SMALL, s, b, "torchtitan")
    q, kv, f = h, SMALL["kv_heads"] * h // SMALL["heads"], SMALL["ffn"]
    per_layer = 2 * b * s * (h + q + kv + q + f) + 4 * b * s * SMALL["heads"]
    assert compiled["per_layer"] == [per_layer] * SMALL["layers"]
    layer = eager["layer_shown"]
    assert eager["per_layer"][layer] - compiled["per_layer"][layer] == 2 * b * s * h


def test_compile_fake_equals_real(monkeypatch):
    from validate.measure import saved

    fake = checkpointing.measure_compiled(SMALL, 96, 2)
    measure = saved.measure_saved
    monkeypatch.setattr(saved, "measure_saved", functools.partial(measure, fake=False))
    real = checkpointing.measure_compiled(SMALL, 96, 2)
    assert fake["per_layer"] == real["per_layer"] and fake["total"] == real["total"]


@pytest.mark.parametrize("kind", ["op-sac", "compile"])
def test_step_peak_fake_equals_real(kind):
    prepare = (functools.partial(checkpointing.compile_layers, s=96, b=2) if kind == "compile"
               else functools.partial(checkpointing.wrap_layers, policy="torchtitan"))
    peaks = [measure_step(SMALL, "reference-sdpa", "zero-bf16", 96, 2, fake=fake,
                          prepare=prepare)["peak"] for fake in (True, False)]
    assert peaks[0]["bytes"] == peaks[1]["bytes"] and peaks[0]["phase"] == peaks[1]["phase"]


def test_torchtitan_policy_decides_as_its_code_says(monkeypatch):
    from torch.utils.checkpoint import CheckpointPolicy

    decisions = []
    make = checkpointing.torchtitan_policy

    def logged():
        policy = make()

        def wrapped(ctx, func, *args, **kwargs):
            out = policy(ctx, func, *args, **kwargs)
            if not ctx.is_recompute and ("mm" in str(func) or "attention" in str(func)):
                decisions.append((str(func).split(".")[1], out == CheckpointPolicy.MUST_SAVE))
            return out
        return wrapped

    monkeypatch.setattr(checkpointing, "torchtitan_policy", logged)
    checkpointing.measure_op_sac(SMALL, 32, 1, "torchtitan", layers=2)
    # q, k, v, SDPA, o, gate, up, down in each of the two layers
    one = [("mm", True), ("mm", False), ("mm", True),
           ("_scaled_dot_product_flash_attention_for_cpu", True), ("mm", False), ("mm", True),
           ("mm", False), ("mm", True)]
    assert decisions == one * 2


def test_saving_nothing_keeps_the_layer_input(monkeypatch):
    from torch.utils.checkpoint import CheckpointPolicy

    monkeypatch.setattr(checkpointing, "attention_policy",
                        lambda: lambda ctx, func, *a, **k: CheckpointPolicy.PREFER_RECOMPUTE)
    got = checkpointing.measure_op_sac(SMALL, 96, 2, "attention")
    assert got["per_layer"] == [2 * 96 * 2 * SMALL["hidden"]] * SMALL["layers"]


def _saved_bytes(run) -> int:
    """Bytes of the distinct storages a small layer's compiled forward saves for backward
    (``saved_tensors_hooks`` see what the compiled function saves), weights and rotary tables
    apart."""
    torch.manual_seed(0)
    layer = Layer(SMALL, "sdpa", torch.bfloat16)
    x = torch.randn(1, 96, SMALL["hidden"], dtype=torch.bfloat16, requires_grad=True)
    cos, sin = (torch.randn(96, SMALL["hidden"] // SMALL["heads"], dtype=torch.bfloat16)
                for _ in range(2))
    skip = {t.untyped_storage().data_ptr() for t in (*layer.parameters(), cos, sin)}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t
    out = run(layer, x, cos, sin, pack)
    out.sum().backward()
    return sum(seen.values())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, which Inductor imports
def test_the_partition_is_inductors():
    """Inductor on the CPU compiles C++ (a minute or two, once); what its compiled layer saves is,
    byte for byte, what AOTAutograd's min-cut partitioner alone saves."""

    def inductor(layer, x, cos, sin, pack):
        torch._dynamo.reset()
        f = torch.compile(lambda x, cos, sin: layer(x, (cos, sin), None), backend="inductor")
        f(x, cos, sin).sum().backward()  # compiled once, outside the count
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return f(x, cos, sin)

    def min_cut(layer, x, cos, sin, pack):
        traced = checkpointing._traced(layer)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return traced(*layer.parameters(), x, cos, sin)

    ours = _saved_bytes(min_cut)
    h, kv, f = SMALL["hidden"], SMALL["kv_heads"] * 64, SMALL["ffn"]
    assert ours == 96 * (12 * h + 4 * kv + 6 * f + 4 * SMALL["heads"] + 8)  # the findings' count
    assert _saved_bytes(inductor) == ours


# --- tensor parallelism: torchtitan's plan on a fake process group (tensor_parallel.py) --------

@pytest.mark.parametrize("tp", [2, 4])
def test_op_sac_under_tensor_parallelism_fake_equals_real(tp):
    from validate.measure import tensor_parallel

    shape = dict(SMALL, heads=8, kv_heads=4)  # the KV heads split over 4 ranks too
    fake = tensor_parallel.measure_op_sac_tp(shape, 96, tp, 2)
    real = tensor_parallel.measure_op_sac_tp(shape, 96, tp, 2, fake=False)
    assert fake == real


def test_under_tensor_parallelism_the_policy_counts_the_mm_calls_as_on_one_rank(monkeypatch):
    """The policy sees each linear's ``aten.mm`` once, on DTensor arguments (a dispatch mode
    runs before the tensor subclass), and decides as on one rank; the all-gathers it leaves to
    recompute, the reduce-scatters it saves."""
    from torch.distributed.tensor import DTensor
    from torch.utils.checkpoint import CheckpointPolicy

    from validate.measure import tensor_parallel

    decisions = []
    make = checkpointing.torchtitan_policy

    def logged():
        policy = make()

        def wrapped(ctx, func, *args, **kwargs):
            out = policy(ctx, func, *args, **kwargs)
            name = str(func).split(".")[1]
            if "mm" in name or "attention" in name or name.endswith(("gather_into_tensor",
                                                                     "scatter_tensor")):
                decisions.append((name, out == CheckpointPolicy.MUST_SAVE,
                                  isinstance(args[0], DTensor)))
            return out
        return wrapped

    monkeypatch.setattr(checkpointing, "torchtitan_policy", logged)
    tensor_parallel.measure_op_sac_tp(SMALL, 32, 2)
    gather, scatter = ("all_gather_into_tensor", False, False), ("reduce_scatter_tensor", True, False)
    assert decisions == [
        gather, ("mm", True, True), ("mm", False, True), ("mm", True, True),
        ("_scaled_dot_product_flash_attention_for_cpu", True, False), ("mm", False, True), scatter,
        gather, ("mm", True, True), ("mm", False, True), ("mm", True, True), scatter]
