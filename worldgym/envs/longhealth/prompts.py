"""What an agent reads: the system prompt and a question prompt, with or without the clinical documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["CANNOT_ANSWER", "DOCUMENT_SEPARATOR", "SYSTEM_PROMPT", "build_prompt", "format_documents"]

SYSTEM_PROMPT = (
    "You answer multiple-choice questions about a patient's clinical documents (admission notes, laboratory "
    "reports, examination reports, medication records, discharge letters). Choose the one correct option and "
    "give its letter inside answer tags, for example <answer>B</answer>."
)
# Option F of tasks 2 and 3: right when the documents shown do not hold the answer.
CANNOT_ANSWER = "The question cannot be answered from the provided documents"
DOCUMENT_SEPARATOR = "\n\n-------- next document --------\n\n"
_REPLY = "Reply with the letter of the correct option inside answer tags, for example <answer>A</answer>."


def format_documents(documents: Sequence[str]) -> str:
    """The documents as one block, between begin and end markers."""
    return ("=== BEGIN DOCUMENTS ===\n\n" + DOCUMENT_SEPARATOR.join(documents)
            + "\n\n=== END DOCUMENTS ===")


def build_prompt(question: str, options: Mapping[str, str], documents: Sequence[str] | None = None) -> str:
    """The question prompt: the documents (the teacher's view; None for the student's), the question, the
    lettered options and the answer format.

    >>> print(build_prompt("Which drug?", {"A": "aspirin", "B": "heparin"}))
    Question: Which drug?
    A: aspirin
    B: heparin
    <BLANKLINE>
    Reply with the letter of the correct option inside answer tags, for example <answer>A</answer>.
    """
    lines = [f"Question: {question}", *(f"{letter}: {text}" for letter, text in options.items()), "", _REPLY]
    body = "\n".join(lines)
    return body if documents is None else f"{format_documents(documents)}\n\n{body}"
