"""trainmath.report.diagrams and mystclaims.figures: a concept diagram's numbers are checked
like the prose's, and text that states a number must say what it was computed from."""

from __future__ import annotations

import pytest
from mystclaims.figures import FigureError, checked

from trainmath.report.diagrams import Diagram, Label, has_number
from trainmath.report.running_example import GPUS, LAYOUT, example_run
from trainmath.units import Bytes


def test_a_label_that_drifts_fails_naming_the_figure_and_both_numbers():
    d = Diagram("Where the bytes go", alt="Weights 2.0 GB.")
    d.box(0, 0, 100, 30, "blue", Label("weights 2.0 GB", Bytes(2_600_000_000), claim="2.0 GB"))
    with pytest.raises(FigureError, match=r"'Where the bytes go': label 'weights 2.0 GB' states "
                                          r"'2.0 GB': computed 2.6 GB"):
        checked(d)
    ok = Diagram("Where the bytes go", alt="Weights 2.6 GB.")
    ok.box(0, 0, 100, 30, "blue", Label("weights 2.6 GB", Bytes(2_600_000_000), claim="2.6 GB"))
    assert checked(ok) is ok


def test_a_number_needs_its_value_and_names_are_not_numbers():
    with pytest.raises(ValueError, match="has a number but no value"):
        Label("8 GPUs")
    with pytest.raises(ValueError, match="states a number"):
        Diagram("ZeRO-3 on 8 GPUs", alt="x")
    assert not has_number("ZeRO-3 on an H100 in bf16, 1F1B") and has_number("GPU 3")
    Label("GPU 3", name=True)
    with pytest.raises(ValueError, match="needs alt text"):
        Diagram("Empty", alt=" ")
    with pytest.raises(ValueError, match="unknown fill 'pink'"):
        Diagram("A box", alt="a box").rect(0, 0, 1, 1, "pink")


def test_the_svg_follows_the_theme_and_is_an_image_with_its_alt_text():
    d = Diagram("A box", width=100, height=20, alt="One box of 16 bytes.")
    d.box(0, 0, 100, 20, "orange", Label("16 bytes", Bytes(16)))
    svg = d.svg()
    assert 'role="img"' in svg and "<title" in svg and "One box of 16 bytes." in svg
    assert "var(--tm-fig-orange" in svg and 'fill="currentColor"' in svg
    assert d._repr_html_().startswith('<figure class="tm-figure tm-explain">')


def test_the_running_example_is_the_layout_the_pages_state():
    r = example_run()
    assert r.layout.gpus == GPUS == LAYOUT["dp"] * LAYOUT["tp"] * LAYOUT["pp"]
    assert r.shape.name == "llama-3-70b"
