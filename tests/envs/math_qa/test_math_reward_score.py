"""``MathRewardModel.score(prompt, response, label)``: the GRPO design's call, the same grade as ``__call__``."""

import pytest

from worldgym.envs.math_qa import MathRewardModel, generate_problems


@pytest.mark.parametrize(
    ("response", "label", "expected"),
    [
        ("48 + 24 = 72\n#### 72", "72", 1.0),
        ("the answer is 2.5", 2.5, 1.0),
        ("#### 1,234", "1234", 1.0),
        ("#### 41", "42", 0.0),
        ("no number at all", "42", 0.0),
        ("Answer: 7.01", 7, 0.0),
    ],
)
def test_score_grades_the_response_against_the_label(response, label, expected):
    grader = MathRewardModel()
    assert grader.score("What is it?", response, label) == expected == grader(response, label)


def test_score_agrees_with_call_on_generated_problems_and_ignores_the_prompt():
    grader = MathRewardModel(tolerance=0.5)
    problems = generate_problems(30, "train", seed=1)
    for problem, other in zip(problems, problems[1:] + problems[:1]):
        for response in (problem.solution, other.solution):
            expected = grader(response, problem.answer)
            assert grader.score(problem.question, response, problem.answer) == expected
            assert grader.score("", response, label=problem.answer) == expected
