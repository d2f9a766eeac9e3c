"""LongHealthQA-v0: the Gymnasium contract, seeding, the three tasks, the two document views, splits, grading,
loading a user's file, and vector envs."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import worldgym  # noqa: F401  (registers LongHealthQA-v0)
from worldgym.envs.longhealth import (
    CANNOT_ANSWER,
    SYSTEM_PROMPTS,
    LongHealthQAEnv,
    generate_panel,
    parse_longhealth,
    write_panel,
)

PANEL = generate_panel(5, seed=2)
PATIENTS = {p.patient_id: p for p in parse_longhealth(PANEL)}


def make(**kwargs) -> LongHealthQAEnv:
    return gym.make("LongHealthQA-v0", panel=PANEL, **kwargs).unwrapped


@pytest.mark.parametrize("task", [1, 2, 3])
@pytest.mark.parametrize("documents", ["full", "none"])
def test_check_env(task, documents):
    check_env(make(task=task, documents=documents, num_distractors=4), skip_render_check=True)


@pytest.mark.parametrize("task", [1, 2])
def test_the_text_answer_format_asks_for_the_options_text_and_grades_it(task):
    env, letters = make(task=task, answer_format="text"), make(task=task)
    check_env(env, skip_render_check=True)
    observation, info = env.reset(seed=3)
    letter_observation, letter_info = letters.reset(seed=3)
    assert (info["answer_format"], letter_info["answer_format"]) == ("text", "letter")
    assert info["system_prompt"] == SYSTEM_PROMPTS["text"] != letter_info["system_prompt"]
    assert observation.endswith("Reply with the text of the correct option, copied exactly, inside answer tags.")
    assert observation.rsplit("\n", 1)[0] == letter_observation.rsplit("\n", 1)[0]  # only the last line differs
    assert env.observation_space.contains(observation)
    wrong = next(text for letter, text in info["options"].items() if letter != info["answer"])
    assert env.step(f"<answer>{info['answer_text']}</answer>")[1:3] == (1.0, True)
    env.reset(seed=3)
    assert env.step(f"<answer>{wrong}</answer>")[1] == 0.0
    env.reset(seed=3)
    assert env.step(f"<answer>{info['answer']}</answer>")[1] == 1.0  # a letter is still read


def test_the_same_seed_gives_the_same_episode_and_seeds_cover_the_questions():
    env = make(task=2)
    first = env.reset(seed=11)
    again = env.reset(seed=11)
    assert first[0] == again[0] and first[1] == again[1]
    infos = [env.reset(seed=s)[1] for s in range(200)]
    picked = {(info["patient_id"], info["question_no"]) for info in infos}
    assert len(picked) > 60  # of 100 questions
    _, info = env.reset(options={"index": 7})
    assert (info["patient_id"], info["question_no"]) == ("patient_01", 8)


def test_task_1_shows_the_patients_documents_and_the_student_view_shows_none():
    full, none = make(), make(documents="none")
    observation, info = full.reset(seed=4)
    student, student_info = none.reset(seed=4)
    patient = PATIENTS[info["patient_id"]]
    question = patient.question(info["question_no"])
    assert info["documents"] == list(patient.texts.values())
    assert info["document_ids"] == [f"{patient.patient_id}/{t}" for t in patient.texts]
    assert list(info["options"]) == ["A", "B", "C", "D", "E"]
    assert info["answer"] == question.correct_letter and info["answer_text"] == question.correct
    assert all(text in observation for text in patient.texts.values())
    assert student_info == info  # the same question; info always carries the documents for a teacher
    assert not any(text in student for text in patient.texts.values())
    assert student.startswith(f"Question: {question.question}\nA: {question.options[0]}")
    assert observation.endswith(student)
    assert info["question_type"] in ("extraction", "negation", "ordering") and info["task"] == 1
    _, shuffled = make(shuffle_documents=True).reset(seed=4)
    assert shuffled["documents"] != info["documents"]
    assert sorted(shuffled["documents"]) == sorted(info["documents"])


def test_task_2_adds_other_patients_documents_and_option_f():
    env = make(task=2, num_distractors=6)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        patient = PATIENTS[info["patient_id"]]
        question = patient.question(info["question_no"])
        own = [d for d in info["document_ids"] if d.startswith(patient.patient_id + "/")]
        assert sorted(own) == sorted(f"{patient.patient_id}/{t}" for t in question.answer_location)
        assert len(info["document_ids"]) - len(own) == 6
        assert info["options"]["F"] == CANNOT_ANSWER and info["answer"] == question.correct_letter


def test_task_2_shows_all_the_patients_documents_when_no_answer_location_is_given():
    panel = generate_panel(3, seed=2)
    panel["patient_01"]["questions"][0]["answer_location"] = {}
    _, info = gym.make("LongHealthQA-v0", panel=panel, task=2, num_distractors=2).reset(options={"index": 0})
    own = sorted(d for d in info["document_ids"] if d.startswith("patient_01/"))
    assert own == sorted(f"patient_01/{t}" for t in panel["patient_01"]["texts"]) and len(info["documents"]) == 11


def test_task_3_withholds_the_answers_documents_so_f_is_right():
    env = make(task=3, num_distractors=6)
    for seed in range(20):
        observation, info = env.reset(seed=seed)
        assert info["answer"] == "F" and info["answer_text"] == CANNOT_ANSWER
        assert len(info["documents"]) == 6
        assert not any(d.startswith(info["patient_id"] + "/") for d in info["document_ids"])
        assert "F: " + CANNOT_ANSWER in observation


@pytest.mark.parametrize("reply, reward, parse", [
    ("<answer>{right}</answer>", 1.0, "tag"),
    ("<answer>{wrong}</answer>", 0.0, "tag"),
    ("The correct answer is {right}.", 1.0, "letter"),
    ("no idea", 0.0, "none"),
])
def test_step_grades_the_reply_and_ends_the_episode(reply, reward, parse):
    env = make(render_mode="ansi")
    _, info = env.reset(seed=5)
    wrong = next(letter for letter in "ABCDE" if letter != info["answer"])
    action = reply.format(right=info["answer"], wrong=wrong)
    observation, got, terminated, truncated, step_info = env.step(action)
    assert (got, terminated, truncated, step_info["parse"]) == (reward, True, False, parse)
    assert step_info["success"] is (reward == 1.0) and step_info["answer"] == info["answer"]
    assert ("errors" in step_info) is (parse == "none")
    assert observation == ("Correct." if reward else "Incorrect.") and info["question"] in env.render()
    with pytest.raises(gym.error.ResetNeeded):
        env.step("<answer>A</answer>")


def test_a_non_string_action_is_an_invalid_answer():
    env = make()
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step(["A"])
    assert (reward, terminated, info["success"], info["predicted"]) == (0.0, True, False, None)
    assert info["errors"] == ["expected the answer as a string, got list"]
    assert env.observation_space.contains(observation)


def test_patient_splits_hold_out_patients_and_question_splits_hold_out_questions():
    by_patient = {s: make(split=s).items for s in ("train", "validation", "test")}
    patient_sets = {s: {p.patient_id for p, _ in items} for s, items in by_patient.items()}
    assert [len(patient_sets[s]) for s in ("train", "validation", "test")] == [3, 1, 1]
    assert set.union(*patient_sets.values()) == set(PATIENTS)
    by_question = {s: make(split=s, split_by="question").items for s in ("train", "validation", "test")}
    keys = {s: {(p.patient_id, q.number) for p, q in items} for s, items in by_question.items()}
    assert [len(keys[s]) for s in ("train", "validation", "test")] == [60, 20, 20]
    assert not keys["train"] & keys["test"] and not keys["validation"] & keys["test"]
    assert all({p for p, _ in keys[s]} == set(PATIENTS) for s in keys)
    held_out = {(p.patient_id, q.number) for p, q in make(split="held_out", split_by="question").items}
    assert held_out == keys["validation"] | keys["test"]  # every question that is not for training
    assert make(split="test", split_seed=1).items != by_patient["test"]


def test_a_users_file_and_a_patient_filter(tmp_path):
    path = write_panel(tmp_path / "lh.json", num_patients=3, seed=9)
    env = gym.make("LongHealthQA-v0", data_path=path, patient_ids=["patient_02"], task=2).unwrapped
    assert {p.patient_id for p, _ in env.items} == {"patient_02"} and len(env.patients) == 3
    _, info = env.reset(seed=0)
    assert info["patient_id"] == "patient_02"
    assert any(not d.startswith("patient_02/") for d in info["document_ids"])  # distractors from the others


@pytest.mark.parametrize("kwargs, message", [
    ({"task": 4}, "task=4 is invalid: use 1, 2 or 3"),
    ({"task": True}, "task=True is invalid: use 1, 2 or 3"),
    ({"documents": "some"}, "documents='some' is invalid: use 'none'"),
    ({"num_distractors": 0, "task": 3}, "num_distractors=0 is invalid: use an integer >= 1"),
    ({"split": "dev"}, "split='dev' is invalid: use one of"),
    ({"split_by": "document"}, "split_by='document' is invalid: use one of"),
    ({"patient_ids": ["patient_99"]}, r"patient_ids=\['patient_99'\] is invalid: \['patient_99'\] are not in"),
    ({"data_path": "x.json", "panel": {}}, "not both"),
    ({"panel": generate_panel(2, 0), "split": "test"}, "split='test' is invalid: it holds no questions"),
    ({"panel": generate_panel(1, 0), "task": 2}, "has only 1 patient"),
    ({"render_mode": "human"}, r"render_mode='human' is invalid: use one of \[None, 'ansi'\]"),
    ({"answer_format": "number"}, r"answer_format='number' is invalid: use one of \['letter', 'text'\]"),
])
def test_bad_arguments_are_rejected(kwargs, message):
    kwargs.setdefault("panel", PANEL)
    with pytest.raises(ValueError, match=message):
        LongHealthQAEnv(**kwargs)


@pytest.mark.parametrize("index", [100, -1, "3", True])
def test_a_bad_question_index_is_rejected(index):
    with pytest.raises(ValueError, match=r"options\['index'\] must be an integer in \[0, 100\)"):
        make().reset(options={"index": index})


def test_sync_vector_env_runs_episodes():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("LongHealthQA-v0", panel=PANEL, task=2)] * 3)
    try:
        observations, infos = envs.reset(seed=[1, 2, 3])
        assert all(isinstance(o, str) and "Question:" in o for o in observations)
        replies = (f"<answer>{infos['answer'][0]}</answer>", "<answer>F</answer>", "nothing")
        _, rewards, terminated, _, step_infos = envs.step(replies)
        assert rewards[0] == 1.0 and rewards[2] == 0.0 and terminated.all()
        assert list(step_infos["parse"]) == ["tag", "tag", "none"]
        assert step_infos["success"][1] == (infos["answer"][1] == "F")
    finally:
        envs.close()


def test_question_accessors_follow_the_index_option():
    env = LongHealthQAEnv(panel=PANEL, split="train")
    pairs = env.questions()
    assert len(pairs) == env.num_questions > 0
    patient, question = pairs[1]
    prompt, info = env.reset(seed=0, options={"index": 1})
    assert info["patient_id"] == patient.patient_id and question.question in prompt
    pairs.clear()  # a copy: the env's own list is untouched
    assert env.num_questions > 0
