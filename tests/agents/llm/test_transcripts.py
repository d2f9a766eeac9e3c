"""GRPO transcripts: every validation's episodes, sampled training episodes with log_episodes="all", none with
"none"; each record holds the chat, the parsed tool calls, rewards and success."""

import pytest

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.models import build_tiny_model
from worldgym.envs.math_qa import MathQAEnv
from worldgym.errors import ConfigError
from worldgym.jsonl import read_jsonl
from worldgym.transcripts import TRAIN_EPISODES_PER_STEP, read_transcript, transcript_steps


def _train(tmp_path, tokenizer, log_episodes: str, report_to: str = "none") -> GRPOTrainer:
    config = GRPOConfig(num_steps=2, prompts_per_step=2, group_size=4, max_new_tokens=8, max_turns=2, eval_every=2,
                        eval_episodes=3, progress=False, output_dir=str(tmp_path / "run"), log_episodes=log_episodes,
                        report_to=report_to)
    trainer = GRPOTrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer,
                          make_env=lambda: MathQAEnv(num_problems=30),
                          make_eval_env=lambda: MathQAEnv("test", num_problems=8))
    trainer.train()
    return trainer


def test_every_validation_and_sampled_training_steps_write_transcripts(tmp_path, tokenizer):
    trainer = _train(tmp_path, tokenizer, "all")
    run = tmp_path / "run"
    assert transcript_steps(run) == [0, 2] and transcript_steps(run, training=True) == [1, 2]
    records = read_transcript(run, 2)
    assert [r["episode"] for r in records] == [0, 1, 2]
    evaluation = next(row for row in read_jsonl(run / "metrics.jsonl") if row["step"] == 2)
    assert sum(r["success"] for r in records) / 3 == pytest.approx(evaluation["eval/success_rate"])
    first = records[0]
    assert first["messages"][0]["role"] == "prompt" and first["messages"][0]["content"]
    replies = [m for m in first["messages"] if m["role"] == "assistant"]
    answers = [m for m in first["messages"] if m["role"] == "tool"]
    assert len(replies) == len(answers) == first["num_turns"] == len(first["response_types"]) >= 1
    assert all("tool_call" in m for m in replies) and sum(m["reward"] for m in answers) == pytest.approx(
        first["reward"])
    assert len(read_transcript(run, 1, training=True)) == TRAIN_EPISODES_PER_STEP
    assert all(row["time/transcripts_s"] >= 0 for row in read_jsonl(run / "metrics.jsonl"))  # each step wrote
    trainer.close()


def test_no_transcripts_with_log_episodes_none(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setattr(GRPOTrainer, "transcript_records", lambda self, episodes: pytest.fail("records built"))
    _train(tmp_path, tokenizer, "none")
    assert not (tmp_path / "run" / "episodes").exists()
    assert not any("time/transcripts_s" in row for row in read_jsonl(tmp_path / "run" / "metrics.jsonl"))


def test_an_unknown_log_episodes_is_refused():
    with pytest.raises(ConfigError, match="log_episodes='some' is invalid: use one of"):
        GRPOConfig(log_episodes="some")


def test_report_to_tensorboard_gets_every_metric_of_metrics_jsonl_and_the_episode_tables(tmp_path, tokenizer):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _train(tmp_path, tokenizer, "validation", report_to="tensorboard").close()
    run = tmp_path / "run"
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0, "scalars": 0})
    events.Reload()
    rows = read_jsonl(run / "metrics.jsonl")
    expected = {(key, row["step"]) for row in rows for key, value in row.items()
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}
    logged = {(tag, event.step) for tag in events.Tags()["scalars"] for event in events.Scalars(tag)}
    assert logged == expected
    assert [event.step for event in events.Tensors("episodes/text_summary")] == [0, 2]
