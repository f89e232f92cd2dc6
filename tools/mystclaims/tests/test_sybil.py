"""The sybil parsers, through sybil's own test helper."""

import pytest
from sybil import Sybil
from sybil.example import SybilFailure
from sybil.testing import check_parser

from mystclaims.sybil import claim_parser, console_parser, lint_parser


def test_a_claim_that_holds_passes():
    check_parser(claim_parser(), "It is {claim}`42 <6 * 7>`.\n")


def test_a_claim_that_fails_names_line_column_stated_and_computed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("First {claim}`42 <6 * 7>`, then {claim}`43 <6 * 7>`.\n")
    first, second = Sybil(parsers=[claim_parser()], pattern="*.md").parse(page).examples()
    first.evaluate()
    with pytest.raises(SybilFailure, match=r"page.md:1:33: stated '43', computed 42 from `6 \* 7`"):
        second.evaluate()


def test_the_lint_flags_a_bare_number_with_its_line():
    with pytest.raises(SybilFailure, match=r":2: unchecked number '300' in: 'A sentence says 300 GPUs.'"):
        check_parser(lint_parser(), "Fine fp16 line.\nA sentence says 300 GPUs.\n")
    with pytest.raises(AssertionError, match="Expected exactly one example"):
        check_parser(lint_parser(names={"1F1B"}), "Schedule 1F1B.\n")


def test_the_lint_takes_the_site_s_rules():
    from mystclaims.scanner import Lint

    strict = Lint(citation_years=False, source_links=(r"arxiv\.org",))
    with pytest.raises(SybilFailure, match=r":1: citation year '2022' typed in"):
        check_parser(lint_parser(lint=strict), "As Korthikanti et al. 2022 show.\n")
    with pytest.raises(SybilFailure, match=r":1: link to a source 'https://arxiv.org/abs/1' typed"):
        check_parser(lint_parser(lint=strict), "See [it](https://arxiv.org/abs/1).\n")
    with pytest.raises(SybilFailure, match=r":1: number in words 'two' in"):
        check_parser(lint_parser(), "We use two GPUs.\n")


def fake_command(argv):
    if argv == ["--fail"]:
        print("prog: error: --fail is not accepted")
        return 2
    print("hello", *argv)
    return 0


def test_console_examples_run_in_process():
    check_parser(console_parser({"prog": fake_command}), "```console\n$ prog world\nhello world\n```\n")
    check_parser(console_parser({"prog": fake_command}),
                 "```console\n$ prog --fail\nprog: error: --fail is not accepted\n```\n")
    with pytest.raises(SybilFailure, match="printed:\nhello there\n--- but the page shows"):
        check_parser(console_parser({"prog": fake_command}),
                     "```console\n$ prog there\nhello world\n```\n")
