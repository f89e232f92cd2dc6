"""The memory diagrams (trainmath.report.diagrams.memory): their examples run, every number they
draw is the library's, and bad input gets a clear error."""

from __future__ import annotations

import doctest
import importlib

import pytest
from mystclaims.figures import problems

from trainmath.memory.activations import layer_activations
from trainmath.memory.recipes import bytes_per_param, training_state
from trainmath.model.presets import preset
from trainmath.report.diagrams import memory
from trainmath.report.running_example import example_estimate
from trainmath.units import GB, Bytes


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("trainmath.report.diagrams.memory"))
    assert result.attempted >= 8 and result.failed == 0


def test_the_bytes_per_parameter_add_up_to_the_recipe():
    d = memory.bytes_per_parameter(bytes_per_param("bf16-mixed", "adamw"))
    assert not problems(d)
    assert [lab.value for lab in d.numbers if lab.text in ("2", "4")] == [2, 2, 4, 4, 4]
    with pytest.raises(ValueError, match="optimizer_states"):
        memory.bytes_per_parameter(bytes_per_param("bf16-mixed", "adamw"), optimizer_states=3)


def test_the_running_example_needs_fourteen_gpus_for_its_state():
    e = example_estimate()
    usable = Bytes(85_520_809_984)
    d = memory.state_against_gpu(training_state(e.params), usable, model="Llama-3-70B",
                                 gpu="H100")
    assert not problems(d)
    assert d.numbers[-1].text == "at least 14 GPUs"


def test_the_step_marks_the_estimates_peak():
    e = example_estimate()
    d = memory.step_memory(e.peak)
    assert not problems(d)
    assert d.numbers[-1].value == e.peak.bytes


def test_a_layer_with_eager_attention_shows_its_square_term():
    m = preset("llama-2-7b")
    d = memory.layer_saved(layer_activations(m, 8192, 1, attention="flash"),
                           layer_activations(m, 8192, 1, attention="eager"))
    assert not problems(d)
    assert any("s×s" in lab.text and lab.value.format("GB", 2) == "4.29 GB" for lab in d.numbers)


def test_bars_and_recipes_check_their_labels():
    d = memory.bars([("a", [("x", Bytes(2 * GB))])], title="One bar", alt_intro="One amount.")
    assert not problems(d)
    d = memory.recipes_overview([("bf16, AdamW", bytes_per_param("bf16", "adamw"))])
    assert [lab.text for lab in d.numbers] == ["8"]
