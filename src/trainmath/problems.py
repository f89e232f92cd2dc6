"""How a rule reports what it finds: a :class:`Problem` per broken rule, one :class:`Invalid` for all.

A rule is one function that returns the problems it finds, each naming the fields it is about
(the library's names: ``"heads"``, ``"tp"``, ``"seq_len"``), the bad values and what is
accepted. A run collects the problems of every rule it must keep and raises once with all of
them; the planner drops a layout with the same functions; the command and the calculator place
each message beside the fields it names. Each rule's words are written once, in the rule.

>>> problems = [Problem(("heads", "tp"), "heads 32 is not divisible by tp 3", group="invalid layout"),
...             Problem(("kv_heads", "tp"), "kv_heads 8 is not divisible by tp 3", group="invalid layout")]
>>> str(Invalid(problems))
'invalid layout: heads 32 is not divisible by tp 3; kv_heads 8 is not divisible by tp 3'
>>> Invalid(problems).fields
('heads', 'tp', 'kv_heads')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable


@dataclass(frozen=True)
class Problem:
    """One broken rule: the ``fields`` it is about, and its ``message``.

    ``group`` is a heading that the problems of one check share (``"invalid layout (dp 1 × tp 3
    × pp 1 × cp 1 = 3 GPUs) for llama-3-8b"``): :func:`describe` writes it once before their
    messages.
    """

    fields: tuple[str, ...]
    message: str
    group: str = ""

    def under(self, group: str) -> Problem:
        """This problem under the heading ``group``."""
        return replace(self, group=group)


def describe(problems: Iterable[Problem]) -> str:
    """Every problem in one message: each group's heading once, then its messages, joined by "; "."""
    order: list[str | Problem] = []
    grouped: dict[str, list[str]] = {}
    for p in problems:
        if not p.group:
            order.append(p)
        elif p.group not in grouped:
            grouped[p.group] = [p.message]
            order.append(p.group)
        else:
            grouped[p.group].append(p.message)
    return "; ".join(f"{x}: {'; '.join(grouped[x])}" if isinstance(x, str) else x.message
                     for x in order)


class Invalid(ValueError):
    """Bad input: every :class:`~trainmath.problems.Problem` found, in the order the rules ran.
    A ValueError whose message is :func:`~trainmath.problems.describe` of them."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(describe(self.problems))

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the problems name, each once, in order."""
        return tuple(dict.fromkeys(f for p in self.problems for f in p.fields))

    def __reduce__(self):  # picklable, for planners that fan out over processes
        return type(self), (self.problems,)


def check(problems: Iterable[Problem]) -> None:
    """Raise :class:`Invalid` with ``problems`` if there are any."""
    found = tuple(problems)
    if found:
        raise Invalid(found)
