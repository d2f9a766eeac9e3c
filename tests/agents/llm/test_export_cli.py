"""``worldgym export``: a run's policy by checkpoint name, and clear errors for a wrong run or checkpoint."""

import json

import pytest

from worldgym.__main__ import main
from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.models import build_tiny_model
from worldgym.envs.math_qa import MathQAEnv
from worldgym.jsonl import read_jsonl
from worldgym.run_folder import read_results


@pytest.fixture
def run_dir(tmp_path, tokenizer):
    """A two-step GRPO run with a checkpoint per step (one kept) and a validation per step."""
    config = GRPOConfig(num_steps=2, prompts_per_step=2, group_size=2, max_new_tokens=8, eval_every=1,
                        eval_episodes=2, checkpoint_every=1, save_total_limit=1, progress=False,
                        output_dir=str(tmp_path / "run"))
    GRPOTrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer,
                make_env=lambda: MathQAEnv(num_problems=30), make_eval_env=lambda: MathQAEnv("test", num_problems=8)
                ).train()
    return tmp_path / "run"


def test_export_writes_a_peft_folder_for_a_step_last_or_best(run_dir, tmp_path, capsys):
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-best",
                                                                  "checkpoint-last"]
    best = read_results(run_dir)["best_checkpoint"]
    evaluations = [row for row in read_jsonl(run_dir / "metrics.jsonl") if "eval/success_rate" in row]
    assert best["value"] == max(row["eval/success_rate"] for row in evaluations)
    for which, step in [("2", 2), ("last", 2), ("best", best["step"])]:
        main(["export", str(run_dir), "--checkpoint", which, "--to", str(tmp_path / which)])
        provenance = json.loads((tmp_path / which / "worldgym_export.json").read_text())
        assert (provenance["step"], provenance["layout"]) == (step, "peft_adapter")
        assert (tmp_path / which / "adapter_config.json").is_file()
    assert f"to {tmp_path / 'last'}" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--checkpoint", "1"], ("has no complete checkpoint-1: its checkpoints are ['checkpoint-2', 'checkpoint-best', "
                            "'checkpoint-last']")),
    (["--checkpoint", "newest"], "checkpoint='newest' is invalid: use 'best', 'last' or a step number"),
])
def test_a_wrong_checkpoint_ends_with_a_clear_message(run_dir, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(run_dir), *args, "--to", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_folder_without_a_run_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path), "--to", str(tmp_path / "out")])
    assert f"RunFolderError: {tmp_path} is not a run folder: it holds neither metrics.jsonl" in capsys.readouterr().err
