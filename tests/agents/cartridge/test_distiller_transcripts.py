"""The cartridge distiller's transcripts: every evaluation's held-out questions with the three greedy answers,
sampled training answers with log_episodes="all", and ``worldgym runs show`` on them."""

from __future__ import annotations

import numpy as np
import pytest

from worldgym.__main__ import main
from worldgym.transcripts import TRAIN_EPISODES_PER_STEP, read_transcript, transcript_steps

from .conftest import make_trainer

VIEWS = ["no documents", "documents", "cartridge"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, tokenizer):
    """A two-step run that evaluates at steps 0 and 2 (the default log_episodes="validation")."""
    trainer = make_trainer(tmp_path_factory.mktemp("cartridge"), tokenizer, num_steps=2)
    history = trainer.train()
    trainer.close()
    return trainer.output_dir, history


def test_every_evaluation_writes_each_held_out_question_with_its_three_answers(run):
    run_dir, history = run
    assert transcript_steps(run_dir) == [0, 2] and transcript_steps(run_dir, training=True) == []
    for row in (r for r in history if "eval/questions" in r):
        records = read_transcript(run_dir, row["step"])
        assert len(records) == row["eval/questions"] and [r["episode"] for r in records] == list(range(len(records)))
        for record in records:
            prompt, *answers = record["messages"]
            assert record["question"] in prompt["content"] and record["correct"] in "ABCDE"
            assert [a["view"] for a in answers] == VIEWS and all(a["role"] == "assistant" for a in answers)
            assert all(set(a) >= {"content", "choice", "parse", "success", "reward"} for a in answers)
            assert all(a["success"] == (a["choice"] == record["correct"]) for a in answers)
            assert record["success"] == answers[-1]["success"] and record["reward"] == answers[-1]["reward"]
        for view, metric in zip(VIEWS, ("eval/accuracy_none", "eval/accuracy_teacher", "eval/accuracy_cartridge")):
            accuracy = np.mean([r["messages"][1 + VIEWS.index(view)]["success"] for r in records])
            assert accuracy == pytest.approx(row[metric])


def test_runs_show_prints_the_answers_and_keeps_the_failed_questions(run, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    run_dir, _ = run
    records = read_transcript(run_dir, 2)
    failed = [r["episode"] for r in records if not r["success"]]
    main(["runs", "show", str(run_dir)])
    out = capsys.readouterr().out
    assert f"step 2: {len(records)} shown" in out and "assistant (cartridge)" in out
    assert "assistant (no documents)" in out and f"correct answer {records[0]['correct']}" in out
    main(["runs", "show", str(run_dir), "--failed"])
    out = capsys.readouterr().out
    assert f"step 2: {len(failed)} shown" in out
    assert all((f"episode {r['episode']} " in out) == (r["episode"] in failed) for r in records)


@pytest.mark.parametrize("log_episodes", ["none", "all"])
def test_log_episodes_writes_none_or_also_a_bounded_sample_of_training_answers(tmp_path, tokenizer, log_episodes):
    # 2 questions x 3 samples: more answers per step than a training transcript keeps
    trainer = make_trainer(tmp_path, tokenizer, num_steps=2, samples_per_question=3, log_episodes=log_episodes)
    trainer.train()
    if log_episodes == "none":
        assert not (trainer.output_dir / "episodes").exists()
        return
    assert transcript_steps(trainer.output_dir) == [0, 2]
    assert transcript_steps(trainer.output_dir, training=True) == [1, 2]
    for step in (1, 2):
        records = read_transcript(trainer.output_dir, step, training=True)
        assert len(records) == TRAIN_EPISODES_PER_STEP < 2 * 3
        assert all(r["messages"][0]["role"] == "prompt" and r["messages"][1]["role"] == "assistant" for r in records)
