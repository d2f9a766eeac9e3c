"""``worldgym runs list`` / ``runs show``: a run's steps and transcripts, printed; clear errors for what is missing."""

import pytest

from worldgym.__main__ import main
from worldgym.jsonl import append_jsonl
from worldgym.run_folder import update_results
from worldgym.transcripts import read_transcript, transcript_steps, write_transcript


def _episode(index: int, success: bool) -> dict:
    return {"episode": index, "env_seed": 100 + index, "reward": float(success), "success": success,
            "num_turns": 1, "response_types": ["tool_result"],
            "messages": [{"role": "prompt", "content": "Call [Acme]."},
                         {"role": "assistant", "content": "<tool_call>...", "tool_call": {"name": "call",
                                                                                         "arguments": {"n": 1}}},
                         {"role": "tool", "content": f"answer {index}", "reward": float(success),
                          "response_type": "tool_result"}]}


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch):
    """A wide terminal, so rich neither wraps the table's headers nor the messages."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    append_jsonl(run / "metrics.jsonl", {"step": 0, "eval/success_rate": 0.5},
                 {"step": 1, "rollout/reward_mean": 0.25, "loss/policy": 0.1},
                 {"step": 2, "rollout/reward_mean": 0.5, "eval/success_rate": 0.75})
    write_transcript(run, 0, [_episode(0, True), _episode(1, False)])
    write_transcript(run, 2, [_episode(0, True), _episode(1, False), _episode(2, False)])
    write_transcript(run, 1, [_episode(0, True)], training=True)
    update_results(run, {"best_checkpoint": {"path": "checkpoint-best", "step": 2, "metric": "eval/success_rate",
                                             "value": 0.75}})
    return run


def test_transcripts_are_found_by_step_and_kind(run_dir):
    assert transcript_steps(run_dir) == [0, 2] and transcript_steps(run_dir, training=True) == [1]
    assert [r["episode"] for r in read_transcript(run_dir, 2)] == [0, 1, 2]


def test_runs_list_shows_every_step_its_metrics_and_the_best_checkpoint(run_dir, capsys):
    main(["runs", "list", str(run_dir)])
    out = capsys.readouterr().out
    assert "eval/success_rate" in out and "rollout/reward_mean" in out and "loss/policy" in out
    assert "step-2.jsonl" in out and "step-1.jsonl" not in out  # training transcripts are not validation ones
    assert "best: checkpoint-best at step 2 (eval/success_rate = 0.75)" in out


def test_runs_show_prints_the_newest_validation_or_the_failed_episodes_asked_for(run_dir, capsys):
    main(["runs", "show", str(run_dir)])
    out = capsys.readouterr().out
    assert "validation episodes of step 2: 3 shown" in out and "answer 2" in out and "[Acme]" in out
    assert '"name": "call"' in out
    main(["runs", "show", str(run_dir), "--step", "0", "--failed"])
    out = capsys.readouterr().out
    assert "step 0: 1 shown" in out and "episode 1 " in out and "episode 0 " not in out
    main(["runs", "show", str(run_dir), "--train", "--episode", "0"])
    assert "sampled training episodes of step 1: 1 shown" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--step", "1"], "has no validation transcript of step 1: it has steps [0, 2]"),
    (["--episode", "7"], "step 2 of"),
])
def test_runs_show_names_what_is_missing(run_dir, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "show", str(run_dir), *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
