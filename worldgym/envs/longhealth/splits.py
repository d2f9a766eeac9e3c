"""Train / validation / test splits of a LongHealth panel, by patient (held-out patients) or by question.

LongHealth itself has no splits (it is 400 evaluation questions). Both splits here are deterministic functions
of the patient ids, question numbers and ``seed``, so the real file and the synthetic panel split alike:

* ``by="patient"``: the patients (sorted by id) are shuffled with ``seed``; 20% (rounded) are test, the next
  20% validation, the rest train. All questions of a patient share its split: test patients are never seen in
  training (20 patients -> 12 / 4 / 4).
* ``by="question"``: every patient's questions are shuffled (with ``seed`` and the patient id) and cut 60 /
  20 / 20 the same way, so every patient appears in every split (20 questions -> 12 / 4 / 4 per patient): for
  agents that study a patient's documents (a cartridge) and are tested on unseen questions about the same
  patient.

``"held_out"`` is the validation and test splits together (40%): every question that is not for training, for
an agent that selects nothing on validation and wants the most questions to measure on (a cartridge).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Literal, TypeVar

import numpy as np

from worldgym.config import check_choice
from worldgym.envs.longhealth.schema import Patient, Question

__all__ = ["SPLITS", "SPLIT_BY", "Split", "SplitBy", "split_questions"]

Split = Literal["all", "train", "validation", "test", "held_out"]
SplitBy = Literal["patient", "question"]
SPLITS: tuple[str, ...] = ("all", "train", "validation", "test", "held_out")
SPLIT_BY: tuple[str, ...] = ("patient", "question")
_HELD_OUT = 0.2  # share of the test split, and of the validation split

T = TypeVar("T")


def split_questions(patients: Sequence[Patient], split: Split = "all", by: SplitBy = "patient",
                    seed: int = 0) -> list[tuple[Patient, Question]]:
    """The (patient, question) pairs of ``split``, in file order.

    >>> from worldgym.envs.longhealth.loader import parse_longhealth
    >>> from worldgym.envs.longhealth.synthetic import generate_panel
    >>> patients = parse_longhealth(generate_panel(5, seed=0))
    >>> [len(split_questions(patients, s)) for s in ("train", "validation", "test")]
    [60, 20, 20]
    >>> [len(split_questions(patients, s, by="question")) for s in ("train", "validation", "test", "held_out")]
    [60, 20, 20, 40]
    """
    check_choice("split", split, SPLITS)
    check_choice("split_by", by, SPLIT_BY)
    if split == "all":
        return [(patient, question) for patient in patients for question in patient.questions]
    if by == "patient":
        ids = _part(sorted(p.patient_id for p in patients), split, np.random.default_rng(seed))
        return [(patient, question) for patient in patients if patient.patient_id in ids
                for question in patient.questions]
    pairs = []
    for patient in patients:
        rng = np.random.default_rng([seed, zlib.crc32(patient.patient_id.encode())])
        chosen = {id(q) for q in _part(list(patient.questions), split, rng)}
        pairs += [(patient, question) for question in patient.questions if id(question) in chosen]
    return pairs


def _part(items: list[T], split: str, rng: np.random.Generator) -> list[T]:
    """``split``'s share of ``items`` after a shuffle: test first, then validation, the rest train."""
    shuffled = [items[int(i)] for i in rng.permutation(len(items))]
    held = round(len(items) * _HELD_OUT)
    bounds = {"test": (0, held), "validation": (held, 2 * held), "held_out": (0, 2 * held),
              "train": (2 * held, len(items))}[split]
    return shuffled[bounds[0]:bounds[1]]
