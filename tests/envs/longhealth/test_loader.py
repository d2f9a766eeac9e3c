"""The LongHealth JSON loader: round trip on the synthetic panel, the real file's conventions, and a typed
error naming patient, question and field for every kind of malformed record."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from worldgym.envs.longhealth import (
    OPTION_LETTERS,
    generate_panel,
    load_longhealth,
    parse_longhealth,
    patients_to_json,
    write_panel,
)
from worldgym.errors import DatasetError

PANEL = generate_panel(3, seed=1)


def test_synthetic_panel_round_trips_through_the_file(tmp_path):
    path = write_panel(tmp_path / "panel.json", num_patients=3, seed=1)
    patients = load_longhealth(path)
    assert [p.patient_id for p in patients] == ["patient_01", "patient_02", "patient_03"]
    assert patients_to_json(patients) == PANEL == json.loads(path.read_text(encoding="utf-8"))
    for patient in patients:
        assert len(patient.texts) == 9 and len(patient.questions) == 20
        for question in patient.questions:
            assert question.correct_text == question.correct
            assert question.correct_letter in OPTION_LETTERS and question.kind in ("extraction", "negation",
                                                                                   "ordering")
            assert set(question.answer_location) <= set(patient.texts)


def test_the_real_files_conventions_are_read():
    """LongHealth's ``correct`` is the option text; its scorer also accepts an option that contains it. ``No``
    may be a string, ``answer_location`` null, and unknown keys are ignored."""
    data = copy.deepcopy(PANEL)
    rows = data["patient_01"]["questions"]
    rows[0].update({"answer_a": "insulin glargine 10 IU", "answer_b": "heparin",
                    "correct": "Insulin glargine"})
    rows[1]["correct"] = rows[1]["correct"].upper() + "."
    rows[2]["answer_location"] = None
    rows[3]["No"] = "4b"
    rows[4]["comment"] = "reviewed"
    data["patient_01"]["extra"] = 1
    patient = parse_longhealth(data)[0]
    assert patient.questions[0].correct_letter == "A"
    assert patient.questions[1].correct_text == PANEL["patient_01"]["questions"][1]["correct"]
    assert patient.questions[2].answer_location == {}
    assert patient.question("4b") is patient.questions[3]


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A damage: set ``path`` (keys joined by '/'; list indexes as numbers) to ``value``; None deletes it."""
    def damage(data: dict) -> None:
        *parents, last = [int(k) if k.isdigit() else k for k in path.split("/")]
        node = data
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return damage


def _duplicate_options(data: dict) -> None:
    row = data["patient_02"]["questions"][5]
    row["answer_b"] = row["answer_a"]
    row["correct"] = row["answer_a"]


def _swap_in_unknown_text(data: dict) -> None:
    row = data["patient_01"]["questions"][0]
    row["answer_location"] = {"text_99": {"start": [0.1], "end": [0.2]}}


P1, P2 = "patient 'patient_01'", "patient 'patient_02'"
MALFORMED = [
    (_set("patient_01/name", None), [P1, "field 'name'", "missing"]),
    (_set("patient_02/birthday", 19600101), [P2, "field 'birthday'", "int"]),
    (_set("patient_01/texts", {}), [P1, "field 'texts'"]),
    (_set("patient_01/texts/text_3", ""), [P1, "field 'texts.text_3'"]),
    (_set("patient_01/questions", {"No": 1}), [P1, "field 'questions'", "list"]),
    (_set("patient_01/questions/4", "what?"), [P1, "questions[4]", "object"]),
    (_set("patient_02/questions/2/answer_c", 7), [P2, "question No 3 (questions[2])", "field 'answer_c'"]),
    (_set("patient_02/questions/2/question", None), [P2, "question No 3", "field 'question'"]),
    (_set("patient_01/questions/6/No", True), [P1, "questions[6]", "field 'No'"]),
    (_set("patient_01/questions/6/No", 1), [P1, "question No 1 (questions[6])", "field 'No'", "repeats"]),
    (_set("patient_01/questions/9/correct", "a drug nobody listed"), [P1, "question No 10", "field 'correct'",
                                                                      "none of the options"]),
    (_set("patient_01/questions/9/correct", None), [P1, "question No 10", "field 'correct'"]),
    (_duplicate_options, [P2, "question No 6", "field 'correct'", "several options (A, B)"]),
    (_swap_in_unknown_text, [P1, "question No 1", "field 'answer_location.text_99'", "names no document"]),
    (_set("patient_01/questions/0/answer_location", ["text_0"]),
     [P1, "question No 1", "field 'answer_location'"]),
    (_set("patient_01/questions/0/answer_location/text_0", {"start": [0.1, 0.2], "end": [0.3]}),
     [P1, "question No 1", "field 'answer_location.text_0'", "2 entries"]),
    (_set("patient_01/questions/0/answer_location/text_0", {"start": ["0.1"], "end": [0.3]}),
     [P1, "question No 1", "field 'answer_location.text_0.start'", "list of numbers"]),
    (_set("patient_01/questions/0/type", 3), [P1, "question No 1", "field 'type'"]),
    (_set("patient_03", ["not", "an", "object"]), ["patient 'patient_03'", "must be an object"]),
]


@pytest.mark.parametrize("damage, parts", MALFORMED)
def test_malformed_records_name_patient_question_and_field(damage, parts):
    data = copy.deepcopy(PANEL)
    damage(data)
    with pytest.raises(DatasetError) as error:
        parse_longhealth(data, source="bench.json")
    message = str(error.value)
    assert message.startswith("bench.json: ")
    for part in parts:
        assert part in message, message


def test_dataset_error_is_a_value_error_and_whole_files_are_checked(tmp_path):
    assert issubclass(DatasetError, ValueError)
    with pytest.raises(FileNotFoundError, match="LongHealth file not found"):
        load_longhealth(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"patient_01": {"name": ', encoding="utf-8")
    with pytest.raises(DatasetError, match=re.escape(f"{broken}: not valid JSON (line 1")):
        load_longhealth(broken)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DatasetError, match="not UTF-8"):
        load_longhealth(binary)
    for data, message in (([], "top level must be an object"), ({}, "holds no patients")):
        with pytest.raises(DatasetError, match=message):
            parse_longhealth(data)


def _write(tmp_path, text: str):
    path = tmp_path / "benchmark.json"
    path.write_text(text, encoding="utf-8")
    return path


def _panel_text(**replace_first_question: str) -> str:
    """The synthetic panel as JSON text, with raw JSON text substituted for fields of patient_01's first
    question (so the file can hold what no Python value would serialize to)."""
    data = copy.deepcopy(PANEL)
    row = data["patient_01"]["questions"][0]
    for key in replace_first_question:
        row[key] = f"@@{key}@@"
    text = json.dumps(data)
    for key, raw in replace_first_question.items():
        text = text.replace(json.dumps(f"@@{key}@@"), raw)
    return text


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 100_000, "nested more than 32 levels deep (a LongHealth file nests 5), at the top level"),
    (_panel_text(answer_a="[" * 100_000 + "]" * 100_000),
     "patient 'patient_01', field 'questions[0].answer_a': nested more than 32 levels deep"),
    (_panel_text(No="1" + "0" * 99_999),
     ("patient 'patient_01', questions[0], field 'No': must be an integer or a string, got an integer of 100000 "
     "digits")),
    (_panel_text(question='"a lone \\ud800 surrogate"'),
     ("patient 'patient_01', question No 1 (questions[0]), field 'question': lone surrogate '\\ud800' at "
     "character 7")),
    (_panel_text(answer_location='{"text_0": {"start": [1' + "0" * 5000 + '], "end": [0.5]}}'),
     "field 'answer_location.text_0.start': must be a list of numbers, got list [<an integer of 5001 digits>]"),
])
def test_hostile_files_raise_a_dataset_error_naming_file_patient_and_field(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(DatasetError) as raised:
        load_longhealth(path)
    assert str(raised.value).startswith(f"{path}: ") and message in str(raised.value)


def test_repeated_empty_or_surrogate_ids_are_refused(tmp_path):
    first = json.dumps(PANEL["patient_01"])
    with pytest.raises(DatasetError, match="patient id 'patient_01' appears more than once"):
        load_longhealth(_write(tmp_path, f'{{"patient_01": {first}, "patient_01": {first}}}'))  # the last won
    with pytest.raises(DatasetError, match="patient id '' is empty"):
        load_longhealth(_write(tmp_path, f'{{"": {first}}}'))
    with pytest.raises(DatasetError, match="patient id '  ' is empty"):
        parse_longhealth({"  ": PANEL["patient_01"]})
    with pytest.raises(DatasetError, match=r"patient id '\\udc00', field 'id': lone surrogate"):
        load_longhealth(_write(tmp_path, f'{{"\\udc00": {first}}}'))
    doubled = _panel_text().replace('"texts": {', '"texts": {"text_0": "a first copy", ', 1)
    with pytest.raises(DatasetError, match="patient 'patient_01', field 'texts.text_0': appears more than once"):
        load_longhealth(_write(tmp_path, doubled))
    name_twice = json.dumps(PANEL).replace('"name": ', '"name": "X", "name": ', 1)
    with pytest.raises(DatasetError, match="patient 'patient_01', field 'name': appears more than once"):
        load_longhealth(_write(tmp_path, name_twice))


def test_hostile_files_are_dataset_errors_naming_the_file(tmp_path):
    for text in ("[" * 100_000, _panel_text(No="1" * 100_000)):
        path = _write(tmp_path, text)
        with pytest.raises(DatasetError, match=str(path)):
            load_longhealth(path)


def test_unicode_text_reaches_the_agent_unchanged(tmp_path):
    import gymnasium as gym

    import worldgym  # noqa: F401  (registers LongHealthQA-v0)

    data = copy.deepcopy(PANEL)
    data["patient_01"]["texts"]["text_0"] = "Patientin Zoë Müller, 72 J.: Hämoglobin 9,8 g/dl ↓; Dosis ½ Tablette"
    data["patient_01"]["questions"][0]["question"] = "Welche Dosis erhielt Zoë Müller? (½ oder ¾)"
    path = _write(tmp_path, json.dumps(data, ensure_ascii=False))
    env = gym.make("LongHealthQA-v0", data_path=str(path))
    index = next(i for i, (p, q) in enumerate(env.unwrapped.items) if p.patient_id == "patient_01" and q.number ==
                 data["patient_01"]["questions"][0]["No"])
    observation, _ = env.reset(options={"index": index})
    assert data["patient_01"]["texts"]["text_0"] in observation and observation in env.observation_space
    assert data["patient_01"]["questions"][0]["question"] in observation
