"""A griffe extension for the API pages: ``>>>`` examples written in a docstring's body become code blocks.

Docstrings here carry runnable examples outside a Google ``Examples:`` section; Markdown would read their
``>>>`` as nested quotes and their output lines as text. Each run of lines that opens with ``>>>`` at the
docstring's own indentation, up to the next blank line, is fenced as a ``pycon`` block. Only the rendered page
changes: the docstrings (and the doctests that run them) are untouched.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_examples(text: str) -> str:
    """``text`` with each unindented ``>>>`` run (to the next blank line) inside a ``pycon`` fence."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if not inside and line.startswith(">>>"):
            out.append("```pycon")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fences the body examples of every object's docstring as it is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_examples(obj.docstring.value)
