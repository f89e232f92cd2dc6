"""How long a page takes to read: its main line, outside code, asides and worked answers.

The main line is a page's prose as read (a claim's text, not its expression), outside code
cells, dropdowns whose title starts "Going deeper" (asides that audit rather than teach) and
dropdowns whose title starts "Worked answer" (answers hidden until asked); other dropdowns and
admonitions are read with it. :func:`minutes` reads it at :data:`WORDS_PER_MINUTE`.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Reading speed
WORDS_PER_MINUTE = 200

_FENCE = re.compile(r"^(`{3,}|:{3,})(\{[\w-]+\})?\s*(.*)$")


def _blocks(text: str):
    """(kind, title, body) of each top-level fenced block and ("prose", "", text) between."""
    lines, i, out, prose = text.splitlines(), 0, [], []
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m.group(2) and m.group(1).startswith(":"):
            prose.append(lines[i])
            i += 1
            continue
        fence, kind, title = m.group(1), (m.group(2) or "{code}")[1:-1], m.group(3)
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != fence:
            j += 1
        if prose:
            out.append(("prose", "", "\n".join(prose)))
            prose = []
        out.append((kind, title, "\n".join(lines[i + 1:j])))
        i = j + 1
    if prose:
        out.append(("prose", "", "\n".join(prose)))
    return out


def _plain(markdown: str) -> str:
    """Prose as read: a claim's or role's text, not its expression or markup."""
    text = re.sub(r"\{[\w:-]+\}`([^`<]*?)(?:\s*<[^`]*>)?`", r"\1", markdown)
    text = re.sub(r"^\(.*\)=$|^:[\w-]+:.*$|<[^>]+>", " ", text, flags=re.M)
    return text


def main_line(text: str) -> str:
    """The page's main line: prose outside code, "Going deeper" asides and worked answers (a
    dropdown nested in a block is read with it unless it is one of those)."""
    kept = []
    for kind, title, body in _blocks(text):
        if kind == "prose":
            kept.append(_plain(body))
        elif kind == "dropdown" and re.match(r"(Going deeper|Worked answer)", title):
            continue
        elif kind in ("dropdown", "admonition", "note", "tip", "important", "warning",
                      "grid", "grid-item-card", "tab-set", "tab-item"):
            kept.append(_plain(title) + "\n" + main_line(body))
    return "\n".join(kept)


def page_path(page: str) -> Path:
    """``page``'s markdown file, from the repository root or from docs/ (where the build runs)."""
    for path in (Path("docs") / f"{page}.md", Path(f"{page}.md")):
        if path.exists():
            return path
    raise ValueError(f"no page {page!r}: neither docs/{page}.md nor {page}.md exists here")


def words(page: str) -> int:
    """Words in ``page``'s main line (:func:`main_line`)."""
    text = page_path(page).read_text(encoding="utf-8")
    return len(re.findall(r"[\w’'-]+", main_line(text)))


def minutes(page: str) -> float:
    """Minutes to read ``page``'s main line at :data:`WORDS_PER_MINUTE`."""
    return words(page) / WORDS_PER_MINUTE


