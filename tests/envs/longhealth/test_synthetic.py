"""The synthetic panel: seeded and prefix-stable, answers backed by their located evidence, wrong options from
the same category, and documents of 1-4k tokens per patient (long enough for a cartridge to compress)."""

from __future__ import annotations

from collections import Counter

import pytest

from worldgym.agents.llm.tokenizer import train_chat_tokenizer
from worldgym.envs.longhealth import generate_panel, parse_longhealth
from worldgym.envs.longhealth.catalog import ALLERGIES, COMORBIDITIES, DRUGS, PROCEDURES

PANEL = generate_panel(6, seed=3)
PATIENTS = parse_longhealth(PANEL)


def test_generation_is_seeded_and_a_larger_panel_extends_a_smaller_one():
    assert generate_panel(2, seed=3) == {pid: PANEL[pid] for pid in ("patient_01", "patient_02")}
    assert generate_panel(2, seed=4) != generate_panel(2, seed=3)
    assert len({p.name for p in PATIENTS}) == len({p.name.split()[-1] for p in PATIENTS}) == 6


@pytest.mark.parametrize("kwargs, message", [
    ({"num_patients": 0}, "num_patients=0 is invalid: use an integer in"),
    ({"num_patients": True}, "num_patients=True is invalid: use an integer in"),
    ({"questions_per_patient": 26}, "questions_per_patient=26 is invalid: use an integer in"),
    ({"seed": -1}, "seed=-1 is invalid: use an integer >= 0"),
])
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_panel(**kwargs)


def test_questions_mix_the_three_types_with_distinct_options_and_balanced_letters():
    kinds, letters = Counter(), Counter()
    for patient in PATIENTS:
        assert [q.number for q in patient.questions] == list(range(1, 21))
        assert len({q.question for q in patient.questions}) == 20
        kinds.update(q.kind for q in patient.questions)
        for question in patient.questions:
            assert len(set(question.options)) == 5
            letters[question.correct_letter] += 1
        assert Counter(q.kind for q in patient.questions)["negation"] >= 3
    assert kinds["extraction"] > kinds["negation"] > 0 and kinds["ordering"] > 0
    assert min(letters.values()) >= 10  # 120 questions: every letter is right about a fifth of the time


def _located(patient, question) -> str:
    """The text of every span the question's answer_location names (a couple of characters of slack for the
    rounding of the fractions)."""
    pieces = []
    for text_id, location in question.answer_location.items():
        text = patient.texts[text_id]
        for start, end in zip(location.start, location.end):
            assert 0 <= start < end <= 1
            pieces.append(text[max(0, int(start * len(text)) - 2): int(end * len(text)) + 2])
    return "\n".join(pieces).lower()


def test_extraction_answers_are_written_where_answer_location_points():
    for patient in PATIENTS:
        for question in patient.questions:
            located = _located(patient, question)
            if question.kind == "extraction":
                assert question.correct.lower() in located, (question.question, question.correct)
            elif question.kind == "negation":  # the four listed options are the evidence
                assert all(o.lower() in located for o in question.options if o != question.correct)


def test_negation_answers_appear_in_no_document_unless_the_question_is_about_the_discharge():
    for patient in PATIENTS:
        everything = "\n".join(patient.texts.values()).lower()
        letter = list(patient.texts.values())[-1].lower()
        for question in patient.questions:
            if question.kind != "negation":
                continue
            if "discharge medication" in question.question:  # a drug given in hospital, then stopped
                assert question.correct.lower() in everything
                assert f"- {question.correct.lower()} " not in letter
            else:
                assert question.correct.lower() not in everything


def test_wrong_options_come_from_the_answers_category():
    drugs = set(DRUGS) | {c.drug for c in COMORBIDITIES.values()}
    for patient in PATIENTS:
        for question in patient.questions:
            if "drug" in question.question:
                assert set(question.options) <= drugs
            if "allergy" in question.question:
                assert set(question.options) <= set(ALLERGIES)
            if question.correct in PROCEDURES:
                assert all(o in PROCEDURES for o in question.options)
            for procedure in PROCEDURES.values():
                if question.correct in procedure.findings:
                    assert set(question.options) <= set(procedure.findings)


def test_documents_hold_1k_to_4k_tokens_per_patient():
    """With a small BPE trained on the panel's own text (as for the tiny CPU models), a patient's documents
    are long enough that a cartridge of a few hundred tokens is a real compression, and short enough for
    CPU."""
    texts = [text for patient in PATIENTS for text in patient.texts.values()]
    for vocab_size in (2000, 4000):
        tokenizer = train_chat_tokenizer(texts, vocab_size=vocab_size)
        lengths = [len(tokenizer("\n\n".join(p.texts.values()))["input_ids"]) for p in PATIENTS]
        assert all(1000 <= n <= 4000 for n in lengths), lengths
