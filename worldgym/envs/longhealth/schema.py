"""Typed records of a LongHealth panel: patients, their documents, and five-option questions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OPTION_KEYS", "OPTION_LETTERS", "AnswerLocation", "Patient", "Question"]

OPTION_LETTERS = ("A", "B", "C", "D", "E")
OPTION_KEYS = tuple(f"answer_{letter.lower()}" for letter in OPTION_LETTERS)


@dataclass(frozen=True)
class AnswerLocation:
    """Where a question's answer sits in one document: spans as fractions of the document's length.

    LongHealth writes ``{"start": [...], "end": [...]}``: span ``i`` runs from ``start[i]`` to ``end[i]``,
    each a fraction (0-1) of the document's length; the synthetic panel uses character offsets divided by the
    length.
    """

    start: tuple[float, ...]
    end: tuple[float, ...]

    def to_json(self) -> dict[str, list[float]]:
        """The location as LongHealth writes it."""
        return {"start": list(self.start), "end": list(self.end)}


@dataclass(frozen=True)
class Question:
    """One multiple-choice question about a patient.

    Attributes:
        number: the question's ``No`` in the file (unique within its patient).
        question: the question text.
        options: the five option texts, A to E (``answer_a`` .. ``answer_e``).
        correct: the ``correct`` field as the file holds it (LongHealth: the right option's text).
        correct_index: which option is right (0-4), resolved from ``correct`` by the loader.
        answer_location: text id -> where the answer is written in that document (may be empty).
        kind: the question type when the file records one (the synthetic panel writes ``"type"``: extraction,
            negation or ordering); None for the real LongHealth file, which does not.
    """

    number: int | str
    question: str
    options: tuple[str, str, str, str, str]
    correct: str
    correct_index: int
    answer_location: Mapping[str, AnswerLocation] = field(default_factory=dict)
    kind: str | None = None

    @property
    def correct_letter(self) -> str:
        """The right option's letter, ``"A"`` to ``"E"``."""
        return OPTION_LETTERS[self.correct_index]

    @property
    def correct_text(self) -> str:
        """The right option's text."""
        return self.options[self.correct_index]

    def to_json(self) -> dict[str, Any]:
        """The question as LongHealth writes it (plus ``"type"`` when :attr:`kind` is set)."""
        row: dict[str, Any] = {"No": self.number, "question": self.question}
        row.update(zip(OPTION_KEYS, self.options))
        row["correct"] = self.correct
        row["answer_location"] = {text_id: loc.to_json() for text_id, loc in self.answer_location.items()}
        if self.kind is not None:
            row["type"] = self.kind
        return row


@dataclass(frozen=True)
class Patient:
    """A fictional patient: identity, clinical documents (text id -> text, in file order) and questions."""

    patient_id: str
    name: str
    birthday: str
    diagnosis: str
    texts: Mapping[str, str]
    questions: tuple[Question, ...]

    def question(self, number: int | str) -> Question:
        """The question whose ``No`` is ``number``."""
        for question in self.questions:
            if question.number == number:
                return question
        raise KeyError(f"{self.patient_id} has no question No {number!r}")

    def to_json(self) -> dict[str, Any]:
        """The patient as LongHealth writes it (the value under its id)."""
        return {
            "name": self.name,
            "birthday": self.birthday,
            "diagnosis": self.diagnosis,
            "texts": dict(self.texts),
            "questions": [question.to_json() for question in self.questions],
        }
