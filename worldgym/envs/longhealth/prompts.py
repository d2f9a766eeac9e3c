"""What an agent reads: the system prompt and a question prompt, with or without the clinical documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

__all__ = [
    "ANSWER_FORMATS", "CANNOT_ANSWER", "DOCUMENT_SEPARATOR", "SYSTEM_PROMPT", "SYSTEM_PROMPTS", "AnswerFormat",
    "build_prompt", "format_documents",
]

# How an agent is asked to answer: the option's letter (LongHealth's own prompt), or the option's text copied
# out, which turns an extraction question into finding the fact in the documents and copying it (a small model's
# strength) instead of also mapping it back to a letter. Both are graded by the same parser.
AnswerFormat = Literal["letter", "text"]
ANSWER_FORMATS: tuple[str, ...] = ("letter", "text")
_TASK = ("You answer multiple-choice questions about a patient's clinical documents (admission notes, laboratory "
         "reports, examination reports, medication records, discharge letters). ")
SYSTEM_PROMPTS: dict[str, str] = {
    "letter": _TASK + "Choose the one correct option and give its letter inside answer tags, for example "
                      "<answer>B</answer>.",
    "text": _TASK + "Choose the one correct option and copy its text exactly inside answer tags, for example "
                    "<answer>5 mg once daily</answer>.",
}
SYSTEM_PROMPT = SYSTEM_PROMPTS["letter"]
# Option F of tasks 2 and 3: right when the documents shown do not hold the answer.
CANNOT_ANSWER = "The question cannot be answered from the provided documents"
DOCUMENT_SEPARATOR = "\n\n-------- next document --------\n\n"
_REPLIES = {
    "letter": "Reply with the letter of the correct option inside answer tags, for example <answer>A</answer>.",
    "text": "Reply with the text of the correct option, copied exactly, inside answer tags.",
}


def format_documents(documents: Sequence[str]) -> str:
    """The documents as one block, between begin and end markers."""
    return ("=== BEGIN DOCUMENTS ===\n\n" + DOCUMENT_SEPARATOR.join(documents)
            + "\n\n=== END DOCUMENTS ===")


def build_prompt(question: str, options: Mapping[str, str], documents: Sequence[str] | None = None,
                 answer_format: AnswerFormat = "letter") -> str:
    """The question prompt: the documents (the teacher's view; None for the student's), the question, the
    lettered options and the answer format (the option's letter or its text).

    >>> print(build_prompt("Which drug?", {"A": "aspirin", "B": "heparin"}))
    Question: Which drug?
    A: aspirin
    B: heparin
    <BLANKLINE>
    Reply with the letter of the correct option inside answer tags, for example <answer>A</answer>.
    """
    lines = [f"Question: {question}", *(f"{letter}: {text}" for letter, text in options.items()), "",
             _REPLIES[answer_format]]
    body = "\n".join(lines)
    return body if documents is None else f"{format_documents(documents)}\n\n{body}"
