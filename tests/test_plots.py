"""The site's figures: SVG that follows the theme, with alt text from the data (trainmath.report.plots)."""

import re

import pytest

plots = pytest.importorskip("trainmath.report.plots")
from trainmath.memory.recipes import training_state  # noqa: E402
from trainmath.units import GB, Bytes  # noqa: E402


@pytest.fixture(scope="module")
def bar():
    return plots.stacked_bar(training_state(7_000_000_000).parts(), title="7B state",
                             limit=("one H100, usable", Bytes(85_520_000_000)))


def test_the_alt_text_states_the_numbers(bar):
    assert bar.alt == ("Stacked bar: weights 14 GB, gradients 14 GB, master weights 28 GB, "
                       "optimizer states 56 GB; total 112 GB, against one H100, usable: 85.5 GB.")


def test_the_svg_is_inline_accessible_and_theme_aware(bar):
    svg = bar.svg()
    assert svg.startswith("<svg ") and "<?xml" not in svg and "<!DOCTYPE" not in svg
    assert 'role="img"' in svg and "<title id=" in svg and bar.alt in svg
    assert not re.search(r"#01f0[0-9a-f]{2}", svg)  # every stand-in colour became CSS
    assert "currentColor" in svg and "var(--tm-fig-blue" in svg
    assert "<metadata>" not in svg and 'id="figure_1"' not in svg
    assert not re.search(r"<style[^>]*>\s*\*", svg)  # nothing that styles the whole page
    assert 'width="' not in svg.split(">", 1)[0]  # scales to its column


def test_theme_css_gives_every_colour_both_themes():
    css = plots.theme_css()
    for name, (light, dark) in plots.PALETTE.items():
        var = f"--tm-fig-{name.replace(' ', '-')}"
        assert f"{var}: {light};" in css and f"{var}: {dark};" in css
    assert 'body[data-theme="dark"]' in css and "prefers-color-scheme: dark" in css


def test_a_line_chart_describes_each_series():
    chart = plots.line_chart([1, 2, 4], {"ZeRO-3": [Bytes(112 * GB), Bytes(56 * GB),
                                                    Bytes(28 * GB)]},
                             title="t", xlabel="ranks", ylabel="GB per GPU", logx=True,
                             hline=("one GPU", Bytes(80 * GB)))
    assert chart.alt == ("Line chart of GB per GPU against ranks: ZeRO-3 from 112 GB at 1 to "
                         "28 GB at 4. A dashed line marks one GPU: 80 GB.")


def test_colours_are_named():
    with pytest.raises(ValueError, match="unknown colour 'teal'"):
        plots.color("teal")
    with pytest.raises(ValueError, match="alt text"):
        plots.chart(None, " ")


def test_stacked_bars_draw_one_bar_per_row_and_say_each_total():
    from trainmath.units import Bytes
    rows = {"full": {"weights": Bytes(14 * 10**9), "gradients": Bytes(14 * 10**9)},
            "lora": {"weights": Bytes(14 * 10**9), "activations": Bytes(11 * 10**9)}}
    c = plots.stacked_bars(rows, title="two setups", limit=("a GPU", Bytes(80 * 10**9)),
                           colors={"weights": "blue", "gradients": "light blue",
                                   "activations": "green"})
    assert c.alt == ("Stacked bars: full: weights 14 GB, gradients 14 GB; total 28 GB. "
                     "lora: weights 14 GB, activations 11 GB; total 25 GB. Against a GPU: 80 GB.")
    assert "var(--tm-fig-green" in c.svg()
    assert "a GPU: 80 GB" in c.svg()  # the limit is named where a reader sees it
