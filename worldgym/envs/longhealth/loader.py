"""Read a LongHealth benchmark JSON (the user's file, or the synthetic panel) into typed ``Patient`` records.

The format (``benchmark_v5.json`` of the LongHealth benchmark, Adams et al. 2024)::

    {"patient_01": {"name": str, "birthday": str, "diagnosis": str,
                    "texts": {"text_0": str, ...},
                    "questions": [{"No": int, "question": str, "answer_a": str, ..., "answer_e": str,
                                   "correct": str,  # the right option's text
                                   "answer_location": {"text_0": {"start": [float], "end": [float]}}}]}}

Every malformed record raises :class:`worldgym.errors.DatasetError` naming the file, the patient, the question
and the field: besides wrong types and missing fields, a repeated patient id (or any key repeated within one
object), an empty patient id, a lone surrogate (``"\\ud800"``: not Unicode text) in any text, an integer of
more than :data:`worldgym.spaces.MAX_INT_DIGITS` digits and nesting deeper than ``MAX_DEPTH`` levels. Unknown
keys are ignored, except a question's optional ``"type"`` (the synthetic panel's question type).
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worldgym.envs.longhealth.json_text import HugeInt, deep_nesting_path, loads_checked
from worldgym.envs.longhealth.schema import OPTION_KEYS, OPTION_LETTERS, AnswerLocation, Patient, Question
from worldgym.errors import DatasetError
from worldgym.spaces import MAX_INT_DIGITS

__all__ = ["MAX_DEPTH", "load_longhealth", "parse_longhealth", "patients_to_json"]

# A LongHealth file nests 5 levels (patients, patient, questions, question, answer_location spans); deeper
# nesting is reported at the first place it exceeds this many levels.
MAX_DEPTH = 32
_PATIENT_FIELDS = ("name", "birthday", "diagnosis")
_SPACES = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_REPR = reprlib.Repr()  # bounded reprs: deep or huge values from a file are described in a few characters
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 3, 57, 57, 4, 4


def load_longhealth(path: str | Path) -> list[Patient]:
    """The patients of a LongHealth JSON file, in file order.

    Raises:
        FileNotFoundError: the file does not exist.
        DatasetError: the file is not JSON, or a record is malformed (the message names patient, question and
            field).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LongHealth file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = loads_checked(text)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})"
                           ) from None
    except UnicodeDecodeError as error:
        raise DatasetError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except RecursionError:
        raise DatasetError(_too_deep(str(path), deep_nesting_path(text, MAX_DEPTH))) from None
    return parse_longhealth(data, source=str(path))


def _too_deep(source: str, at: list[str | int] | None) -> str:
    """The message for JSON nested more than ``MAX_DEPTH`` levels, naming the patient and field there."""
    reason = f"nested more than {MAX_DEPTH} levels deep (a LongHealth file nests 5)"
    if not at or not isinstance(at[0], str):
        return f"{source}: {reason}, at the top level"
    keys = at[1:5]
    while keys and not isinstance(keys[-1], str):
        keys.pop()
    field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")
    return f"{source}: patient {at[0]!r}" + (f", field {field!r}" if field else "") + f": {reason}"


def parse_longhealth(data: Any, source: str = "LongHealth data") -> list[Patient]:
    """The patients of already-parsed LongHealth JSON (``source`` names it in error messages).

    >>> data = {"patient_01": {"name": "Ada Vale", "birthday": "1960-01-01", "diagnosis": "gout",
    ...     "texts": {"text_0": "Gout of the left toe."},
    ...     "questions": [{"No": 1, "question": "Which joint?", "answer_a": "left toe", "answer_b": "knee",
    ...                    "answer_c": "hip", "answer_d": "wrist", "answer_e": "elbow", "correct": "left toe",
    ...                    "answer_location": {"text_0": {"start": [0.0], "end": [0.5]}}}]}}
    >>> patient = parse_longhealth(data)[0]
    >>> patient.questions[0].correct_letter, patient.to_json() == data["patient_01"]
    ('A', True)
    """
    if not isinstance(data, Mapping):
        raise DatasetError(f"{source}: the top level must be an object of patient id -> patient, "
                           f"got {type(data).__name__}")
    if not data:
        raise DatasetError(f"{source}: holds no patients")
    for pid in getattr(data, "duplicates", ()):
        raise DatasetError(f"{source}: patient id {pid!r} appears more than once (each patient needs its own id; "
                           "a JSON reader would keep only the last)")
    return [_patient(str(pid), record, source) for pid, record in data.items()]


def patients_to_json(patients: list[Patient]) -> dict[str, Any]:
    """Patients back in the LongHealth format (what :func:`parse_longhealth` reads)."""
    return {patient.patient_id: patient.to_json() for patient in patients}


def _patient(patient_id: str, record: Any, source: str) -> Patient:
    if not patient_id.strip():
        raise DatasetError(f"{source}: patient id {patient_id!r} is empty: give every patient a non-empty id")
    _check_text(patient_id, f"{source}: patient id {patient_id!r}", "id")
    where = f"{source}: patient {patient_id!r}"
    if not isinstance(record, Mapping):
        raise DatasetError(f"{where}: must be an object, got {_describe(record)}")
    _check_unique(record, where, "")
    values = {key: _string(record, key, where) for key in _PATIENT_FIELDS}
    texts = record.get("texts")
    if not isinstance(texts, Mapping) or not texts:
        raise DatasetError(f"{where}, field 'texts': must be a non-empty object of text id -> document text, "
                           f"got {_describe(texts)}")
    _check_unique(texts, where, "texts.")
    for text_id, text in texts.items():
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}, field 'texts.{text_id}': must be non-empty text, "
                               f"got {_describe(text)}")
        _check_text(text_id, f"{where}, text id {text_id!r}", "id")
        _check_text(text, where, f"texts.{text_id}")
    rows = record.get("questions")
    if not isinstance(rows, list):
        raise DatasetError(f"{where}, field 'questions': must be a list, got {_describe(rows)}")
    questions = tuple(_question(row, i, where, texts) for i, row in enumerate(rows))
    seen: dict[Any, int] = {}
    for i, question in enumerate(questions):
        if question.number in seen:
            raise DatasetError(f"{where}, question No {question.number!r} (questions[{i}]), field 'No': "
                               f"repeats questions[{seen[question.number]}]'s number")
        seen[question.number] = i
    return Patient(patient_id, values["name"], values["birthday"], values["diagnosis"], dict(texts),
                   questions)


def _question(row: Any, index: int, where: str, texts: Mapping[str, str]) -> Question:
    if not isinstance(row, Mapping):
        raise DatasetError(f"{where}, questions[{index}]: must be an object, got {_describe(row)}")
    _check_unique(row, f"{where}, questions[{index}]", "")
    number = row.get("No")
    if isinstance(number, bool) or not isinstance(number, (int, str)):
        raise DatasetError(f"{where}, questions[{index}], field 'No': must be an integer or a string, "
                           f"got {_describe(number)}")
    if isinstance(number, str):
        _check_text(number, f"{where}, questions[{index}]", "No")
    at = f"{where}, question No {_REPR.repr(number)} (questions[{index}])"
    text = _string(row, "question", at)
    options = tuple(_string(row, key, at) for key in OPTION_KEYS)
    correct = row.get("correct")
    if not isinstance(correct, str) or not correct.strip():
        raise DatasetError(f"{at}, field 'correct': must be the right option's text, "
                           f"got {_describe(correct)}")
    _check_text(correct, at, "correct")
    kind = row.get("type")
    if kind is not None and not isinstance(kind, str):
        raise DatasetError(f"{at}, field 'type': must be a string when present, got {_describe(kind)}")
    if kind is not None:
        _check_text(kind, at, "type")
    index = _correct_index(correct, options, at)
    locations = _locations(row.get("answer_location"), at, texts)
    return Question(number, text, options, correct, index, locations, kind)  # type: ignore[arg-type]


def _correct_index(correct: str, options: tuple[str, ...], at: str) -> int:
    """The option ``correct`` names: its exact text (ignoring case and spacing), else the one option
    containing it (LongHealth's own scorer matches by containment), else a bare letter A-E."""
    wanted = _normal(correct)
    for rule in (lambda option: _normal(option) == wanted, lambda option: wanted in _normal(option)):
        matches = [i for i, option in enumerate(options) if rule(option)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            letters = ", ".join(OPTION_LETTERS[i] for i in matches)
            raise DatasetError(f"{at}, field 'correct': {correct!r} matches several options ({letters})")
    if correct.strip().upper() in OPTION_LETTERS:
        return OPTION_LETTERS.index(correct.strip().upper())
    raise DatasetError(f"{at}, field 'correct': {correct!r} is none of the options answer_a..answer_e")


def _locations(value: Any, at: str, texts: Mapping[str, str]) -> dict[str, AnswerLocation]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DatasetError(f"{at}, field 'answer_location': must be an object of text id -> "
                           f"{{'start': [...], 'end': [...]}}, got {_describe(value)}")
    _check_unique(value, at, "answer_location.")
    locations = {}
    for text_id, spans in value.items():
        field = f"answer_location.{text_id}"
        if text_id not in texts:
            raise DatasetError(f"{at}, field '{field}': names no document of this patient "
                               f"(its texts: {', '.join(texts)})")
        if not isinstance(spans, Mapping):
            raise DatasetError(f"{at}, field '{field}': must be an object with 'start' and 'end' lists, "
                               f"got {_describe(spans)}")
        start, end = (_fractions(spans.get(key), f"{field}.{key}", at) for key in ("start", "end"))
        if len(start) != len(end):
            raise DatasetError(f"{at}, field '{field}': 'start' has {len(start)} entries but 'end' "
                               f"{len(end)}")
        locations[text_id] = AnswerLocation(start, end)
    return locations


def _fractions(value: Any, field: str, at: str) -> tuple[float, ...]:
    ok = isinstance(value, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value)
    if not ok:
        raise DatasetError(f"{at}, field '{field}': must be a list of numbers, got {_describe(value)}")
    return tuple(value)


def _string(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        missing = "missing" if key not in record else f"got {_describe(value)}"
        raise DatasetError(f"{where}, field '{key}': must be non-empty text ({missing})")
    _check_text(value, where, key)
    return value


def _check_text(text: str, where: str, field: str) -> None:
    """Refuse a lone surrogate (a half of a UTF-16 pair: not Unicode text, and no encoder accepts it)."""
    surrogate = _SURROGATE.search(text)
    if surrogate:
        raise DatasetError(f"{where}, field '{field}': lone surrogate {surrogate.group()!r} at character "
                           f"{surrogate.start()} (not Unicode text; the file's text must be valid UTF-8)")


def _check_unique(record: Mapping[str, Any], where: str, prefix: str) -> None:
    """Refuse an object whose JSON text repeats a key (a plain JSON reader would keep only the last)."""
    for key in getattr(record, "duplicates", ()):
        raise DatasetError(f"{where}, field '{prefix}{key}': appears more than once in the same object")


def _normal(text: str) -> str:
    return _SPACES.sub(" ", text).strip().rstrip(".").casefold()


def _describe(value: Any) -> str:
    """A short description of a value: its type and a bounded repr (safe for deep or huge values)."""
    if isinstance(value, HugeInt):
        return f"an integer of {value.digits} digits (more than {MAX_INT_DIGITS})"
    text = _REPR.repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
