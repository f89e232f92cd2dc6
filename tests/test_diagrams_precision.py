"""trainmath.report.diagrams.precision: the mixed-precision page's pictures carry the library's
numbers (format facts from finfo, bytes per parameter from the recipes), each checked."""

from __future__ import annotations

import doctest
import importlib

import pytest
from mystclaims.figures import checked

from trainmath.memory.recipes import bytes_per_param
from trainmath.precision import FORMATS, float_format, round_to
from trainmath.report.diagrams import precision as drawn


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("trainmath.report.diagrams.precision"))
    assert result.attempted >= 5 and result.failed == 0


def test_every_diagram_passes_its_own_check():
    formats = list(FORMATS.values())
    recipes = {name: bytes_per_param(name) for name in ("fp32", "bf16-mixed", "bf16", "fp8-te")}
    for d in (drawn.bit_layouts(formats), drawn.format_ranges(formats, gradients=(1e-12, 0.1)),
              drawn.loss_scaling(float_format("fp16"), 1e-8, 2**16),
              drawn.mixed_precision_step(bytes_per_param("bf16-mixed")),
              drawn.recipe_bytes(recipes)):
        assert checked(d) is d and d.numbers and d.alt


def test_the_bit_boxes_are_the_formats_bits():
    d = drawn.bit_layouts([float_format("fp8-e4m3"), float_format("bf16")])
    assert [lab.value for lab in d.numbers] == [4, 3, 8, 8, 7, 16]


def test_loss_scaling_draws_a_gradient_fp16_loses_and_its_scaled_copy():
    fp16 = float_format("fp16")
    d = drawn.loss_scaling(fp16, 1e-8, 2**16)
    g, scale, scaled = (lab.value for lab in d.numbers[:3])
    assert round_to(g, "fp16") == 0 and round_to(scaled, "fp16") >= fp16.smallest_normal
    assert scaled == g * scale


def test_the_bars_add_up_to_the_recipes_totals():
    recipes = {name: bytes_per_param(name) for name in ("fp32", "bf16", "fp8-te")}
    totals = [lab.value.n for lab in drawn.recipe_bytes(recipes).numbers
              if lab.text.endswith("bytes")]
    assert totals == [r.total for r in recipes.values()] == [16, 8, 18]


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="at least one format"):
        drawn.bit_layouts([])
    with pytest.raises(ValueError, match=r"give \(smallest, largest\)"):
        drawn.format_ranges([float_format("fp16")], gradients=(1e-2, 1e-9))
    with pytest.raises(ValueError, match="must be positive"):
        drawn.loss_scaling(float_format("fp16"), -1e-8, 2**16)
    with pytest.raises(ValueError, match="keeps none"):
        drawn.mixed_precision_step(bytes_per_param("bf16"))
    with pytest.raises(ValueError, match="at least one recipe"):
        drawn.recipe_bytes({})


def test_the_running_example_peaks_are_the_estimates():
    from trainmath.report.running_example import example_estimate
    from trainmath.units import Bytes

    runs = {name: example_estimate(recipe=name) for name in ("bf16-mixed", "fp32")}
    d = drawn.peak_memory({name: e.peak.peak for name, e in runs.items()},
                          runs["fp32"].run.gpu.memory, "H100")
    assert checked(d) is d
    totals = [lab.value for lab in d.numbers][:2]
    assert totals == [e.on_device.allocated for e in runs.values()]
    with pytest.raises(ValueError, match="more than 0 bytes"):
        drawn.peak_memory({"fp32": runs["fp32"].peak.peak}, Bytes(0), "H100")
    with pytest.raises(ValueError, match="at least one recipe"):
        drawn.peak_memory({}, Bytes(1), "H100")
