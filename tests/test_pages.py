"""The drift check itself, on this site's pages: a changed digit must fail, with its place."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mystclaims import check, parse_statement, run_page, scan
from mystclaims.language import NUMBER_WORDS, latex_to_text

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_equality_claim_fails_when_its_number_drifts(path):
    """Change the last digit of any stated number and its claim must fail."""
    for result in run_page(scan(path.read_text()), {"__name__": "page"}, str(path)):
        assert result.ok, result.message(str(path))
        claim = result.claim
        if parse_statement(claim.text).qualifier != "=":
            continue
        plain = latex_to_text(claim.text)
        digits = list(re.finditer(r"\d", plain))
        if digits:
            m = digits[-1]
            drifted = plain[: m.start()] + str((int(m.group()) + 1) % 10) + plain[m.end():]
        else:  # a number in words: state another word, one that means another number
            word = re.search(r"[A-Za-z]+", plain)
            value = NUMBER_WORDS[word.group().lower()]
            other = next(w for w, v in NUMBER_WORDS.items() if v != value)
            drifted = plain[: word.start()] + other + plain[word.end():]
        assert check(parse_statement(drifted), result.value, claim.tolerance) is not None, (
            f"{path.name}:{claim.line}: {claim.text!r} still holds as {drifted!r}"
        )


def test_drift_fails_make_test_with_file_line_stated_and_computed(tmp_path):
    """End to end: the failure a contributor sees names the file, line, text, value, expression."""
    page = (ROOT / "docs" / "memory-math.md").read_text()
    assert "{claim}`56 GB <state.optimizer_states>`" in page
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copytree(ROOT / "docs" / "_data", docs / "_data")  # the data files pages read
    (docs / "page.md").write_text(
        page.replace("{claim}`56 GB <state.optimizer_states>`", "{claim}`57 GB <state.optimizer_states>`")
        + "\nA new sentence says 300 GPUs.\n"
    )
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "docs/page.md"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1, run.stdout
    line = page[: page.index("{claim}`56 GB")].count("\n") + 1
    column = page.split("\n")[line - 1].index("{claim}`56 GB") + 1
    assert (f"docs/page.md:{line}:{column}: stated '57 GB', computed 56,000,000,000 bytes = "
            "56 GB = 52.1541 GiB from `state.optimizer_states`" in run.stdout), run.stdout
    assert "unchecked number '300' in: 'A new sentence says 300 GPUs.'" in run.stdout
    assert "2 failed" in run.stdout


#: What the pages mark as not a number: names only. A formula's coefficient is a claim tied to
#: the constant or function that uses it (CONTRIBUTING.md), so a changed coefficient fails.
NAMES_NOT_NUMBERS = {"GPT-3 175B", "2:4", "Llama 3 405B", "Llama 3 70B",
                     "8x7B",  # Mixtral-8x7B's name, not 56B
                     # QLoRA's names (Dettmers et al. 2023): the 4-bit NormalFloat data type,
                     # and Double Quantization, a method, not a doubling
                     "4-bit", "double quantization", "Double quantization",
                     "Llama 3.1 8B",
                     # releases: PyTorch 1.13 (lazy module loading) and 2.1 (the OOM message's
                     # wording), CUDA 11.2 (the transformers docs' V100 run)
                     "1.13", "2.1", "11.2"}


def test_only_names_are_marked_as_not_numbers():
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        marked = re.findall(r"\{nonclaim\}`([^`]*)`", text) + re.findall(r"\\nonclaim\{([^}]*)\}", text)
        unknown = set(marked) - NAMES_NOT_NUMBERS
        assert not unknown, (f"{path.name}: {sorted(unknown)} marked as not numbers; tie a "
                             "coefficient to the library with a claim, or add a true name here")
