"""A synthetic LongHealth panel: fictional patients with clinical documents and five-option questions, in the
benchmark's own JSON format, generated deterministically from a seed.

Each patient has 9 documents (admission note, two laboratory reports, four examination reports, the
inpatient medication record, a discharge letter; about 2k tokens in all with a 3000-token BPE trained on the
panel) and 20 questions: about 60% information extraction, 20% negation ("which drug was NOT given"), 20%
ordering and temporal ("in which order were these examinations performed"). A question's four wrong options
come from the same category as its answer (other drugs, other findings of the same examination, other values
of the lab, dates the documents also show). Patient ``i`` depends only on ``seed`` and the patients before
it, so a larger panel extends a smaller one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from worldgym.config import check_field
from worldgym.envs.longhealth.questions import make_questions
from worldgym.envs.longhealth.records import iso, render_documents, sample_case

__all__ = ["MAX_PATIENTS", "MAX_QUESTIONS", "generate_panel", "write_panel"]

MAX_PATIENTS = 400  # distinct fictional names run out past ~900; the first 24 patients have distinct last names
MAX_QUESTIONS = 25  # every synthetic patient supports at least this many distinct questions


def generate_panel(num_patients: int = 10, seed: int = 0, questions_per_patient: int = 20) -> dict[str, Any]:
    """A synthetic panel as LongHealth JSON data (``patient_01`` ... ; what :func:`parse_longhealth` reads).

    Questions carry an extra ``"type"`` key (extraction, negation or ordering) that the real file lacks.

    >>> panel = generate_panel(2, seed=0)
    >>> list(panel), len(panel["patient_01"]["questions"])
    (['patient_01', 'patient_02'], 20)
    >>> panel == generate_panel(2, seed=0)
    True
    """
    for name, value, high in (("num_patients", num_patients, MAX_PATIENTS),
                              ("questions_per_patient", questions_per_patient, MAX_QUESTIONS)):
        check_field(isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high, name, value,
                    f"use an integer in [1, {high}]")
    check_field(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed", seed,
                "use an integer >= 0")
    panel: dict[str, Any] = {}
    names: set[str] = set()
    for i in range(num_patients):
        rng = np.random.default_rng([seed, i])
        patient_id = f"patient_{i + 1:02d}"
        case = sample_case(rng, patient_id, names)
        names.add(case.name)
        documents = render_documents(case, rng)
        panel[patient_id] = {
            "name": case.name,
            "birthday": iso(case.birthday),
            "diagnosis": case.condition.diagnosis,
            "texts": {f"text_{j}": doc.text for j, doc in enumerate(documents)},
            "questions": make_questions(case, documents, rng, questions_per_patient),
        }
    return panel


def write_panel(path: str | Path, num_patients: int = 10, seed: int = 0,
                questions_per_patient: int = 20) -> Path:
    """Write :func:`generate_panel`'s panel as a JSON file (what LongHealthQA-v0's ``data_path`` reads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    panel = generate_panel(num_patients, seed, questions_per_patient)
    path.write_text(json.dumps(panel, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
