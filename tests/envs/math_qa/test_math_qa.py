"""MathQA-v1: generator, splits, grader, GSM8K loader and the Gymnasium env contract."""

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import worldgym  # noqa: F401  (registers MathQA-v1)
from worldgym.envs.math_qa import (
    MathRewardModel,
    extract_answer,
    generate_problems,
    load_gsm8k,
    normalize_number,
)
from worldgym.envs.math_qa.problems import TEMPLATES


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("Natalia sold 48/2 = 24 clips in May.\n48 + 24 = 72\n#### 72", "72"),  # GSM8K's own answer format
        ("Let me think... the answer is 42.", "42"),
        ("Answer: 42", "42"),
        ("I counted 3 then 5 then 8", "8"),
        ("#### 1,234", "1234"),
        ("The total is $18.00", "18"),
        ("the answer is 2.5", "2.5"),
        ("#### -7", "-7"),
        ("\\boxed{12}", "12"),
        ("first 10, #### 5 and later 99", "5"),
    ],
)
def test_reward_accepts_seed_formats(completion, expected):
    assert MathRewardModel()(completion, expected) == 1.0


@pytest.mark.parametrize("completion", ["#### 41", "no number at all", "", "the answer is 4.2"])
def test_reward_rejects_wrong_or_missing_answers(completion):
    assert MathRewardModel()(completion, "42") == 0.0


def test_normalize_and_extract():
    assert normalize_number("$1,200.") == 1200.0
    assert normalize_number("abc") is None
    assert extract_answer("Answer: 7 apples") == "7"
    assert MathRewardModel().batch(["#### 3", "#### 4"], [3, 3]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        MathRewardModel().batch(["a", "b"], [1])


@pytest.mark.parametrize("difficulty", sorted(TEMPLATES))
def test_generated_solutions_compute_their_answers(difficulty):
    grader = MathRewardModel()
    for problem in generate_problems(100, "train", difficulty, seed=3):
        assert problem.difficulty == difficulty
        assert grader(problem.solution, problem.answer) == 1.0
        for step in problem.solution.splitlines()[:-1]:  # every worked step is true arithmetic
            left, right = step.split(" = ")
            assert eval(left) == float(right)


def test_splits_are_disjoint_and_seeded():
    train = {p.question for p in generate_problems(500, "train", [1, 2], seed=0)}
    test = {p.question for p in generate_problems(100, "test", [1, 2], seed=0)}
    assert not train & test
    assert generate_problems(20, seed=5) == generate_problems(20, seed=5)
    assert generate_problems(20, seed=5) != generate_problems(20, seed=6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_problems": 0}, "num_problems=0 is invalid: use an integer >= 1"),
        ({"difficulty": 7}, "difficulty=7 is invalid: use one of"),
        ({"split": "val"}, "split='val' is invalid: use one of"),
        ({"num_problems": 10**5, "difficulty": 1}, "distinct train problems"),
    ],
)
def test_generator_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_problems(**{"num_problems": 5, **kwargs})


def test_env_contract_and_reward():
    env = gym.make("MathQA-v1", num_problems=50)
    check_env(env.unwrapped, skip_render_check=True)
    question, info = env.reset(seed=0)
    assert "####" in info["system_prompt"] and isinstance(question, str)
    problem = env.unwrapped.problems[info["index"]]
    _obs, reward, terminated, truncated, step_info = env.step(f"work...\n#### {problem.answer_text}")
    assert (reward, terminated, truncated, step_info["success"]) == (1.0, True, False, True)
    env.reset(seed=0)
    assert env.step("I don't know")[1] == 0.0
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step("again")


def test_env_reset_is_seeded_and_index_option():
    env = gym.make("MathQA-v1", num_problems=50)
    assert env.reset(seed=4)[0] == env.reset(seed=4)[0]
    assert env.reset(options={"index": 3})[1]["index"] == 3
    with pytest.raises(ValueError, match="options\\['index'\\]"):
        env.reset(options={"index": 50})


def test_gsm8k_loader_jsonl_parquet_and_errors(tmp_path):
    rows = [
        {"question": "Ann has 2 cats and gets 3 more. How many?", "answer": "2 + 3 = 5\n#### 5"},
        {"question": "Big sum?", "answer": "It is #### 1,000"},
    ]
    jsonl = tmp_path / "gsm8k.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    problems = load_gsm8k(jsonl)
    assert [p.answer for p in problems] == [5.0, 1000.0]
    env = gym.make("MathQA-v1", dataset_path=str(jsonl))
    env.reset(options={"index": 1})
    assert env.step("the answer is 1000")[1] == 1.0
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "gsm8k.parquet")
    assert load_gsm8k(tmp_path / "gsm8k.parquet") == [
        p.__class__(p.question, p.solution, p.answer, p.difficulty, "gsm8k.parquet") for p in problems
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    with pytest.raises(ValueError, match="row 1 answer has no final"):
        load_gsm8k(bad)
    with pytest.raises(FileNotFoundError):
        load_gsm8k(tmp_path / "missing.jsonl")


GSM8K_UNICODE = [  # characters GSM8K's own test file holds outside printable ASCII
    "Janet’s ducks lay 16 eggs per day. She sells them for $2 each. How much does she make?",
    "A shirt costs €12 and a hat £8 and a pin 50¢. What is the total in euros?",
    "José and Zoë share a piñata: José gets ¾ of the 24 sweets. How many does Zoë get?",
    "A cube has a volume of 2³\u00a0cm³.\u2028What is its side?",  # non-breaking space; U+2028 line separator
    "小明有 3 个苹果。 How many apples? Ответ 🙂",
]


@pytest.mark.parametrize("ensure_ascii", [False, True])  # raw UTF-8 characters, or \\u escapes
def test_gsm8k_questions_reach_the_agent_byte_for_byte(tmp_path, ensure_ascii):
    path = tmp_path / "test.jsonl"
    lines = [json.dumps({"question": q, "answer": f"work\n#### {i}"}, ensure_ascii=ensure_ascii)
             for i, q in enumerate(GSM8K_UNICODE)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = gym.make("MathQA-v1", dataset_path=str(path))
    for index, question in enumerate(GSM8K_UNICODE):
        observation, info = env.reset(options={"index": index})
        assert observation.encode("utf-8") == question.encode("utf-8") and observation in env.observation_space
        assert "observation_changes" not in info
        assert env.step(f"Ответ: #### {index}")[1] == 1.0  # Unicode answers are graded too


def test_math_qa_reports_the_one_change_it_makes_to_a_question(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"question": "é" * 100 + "?", "answer": "#### 1"}) + "\n", encoding="utf-8")
    env = gym.make("MathQA-v1", dataset_path=str(path), max_question_chars=40)
    observation, info = env.reset(options={"index": 0})
    assert len(observation) == 40 and observation.startswith("é" * 20) and observation.endswith("...[truncated]")
    assert info["observation_changes"] == {"truncated_from": 101}


def test_gsm8k_loader_refuses_lone_surrogates_and_bool_indices(tmp_path):
    from worldgym.errors import DatasetError

    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "ok", "answer": "#### 1"}\n{"question": "a\\ud800", "answer": "#### 1"}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl: row 2, field 'question': lone surrogate '\\ud800'"):
        load_gsm8k(path)
    env = gym.make("MathQA-v1", num_problems=5)
    with pytest.raises(TypeError, match=r"options\['index'\] must be an integer, got bool True"):
        env.reset(options={"index": True})


def test_problem_accessor_names_the_problem_a_reset_asks():
    env = gym.make("MathQA-v1", num_problems=20)
    question, info = env.reset(seed=3)
    problem = env.unwrapped.problem(info["index"])
    assert env.unwrapped.num_problems == 20 and problem.question == question
    assert "####" in problem.solution and problem.solution.rsplit("####", 1)[1].strip()
