"""Smoke-run examples/train_grpo.py (SFT warm start + GRPO + curve files) with tiny settings on both envs."""

import dataclasses
import json

import pytest

SMALL_RUN = ["--grpo.num-steps", "2", "--grpo.prompts-per-step", "2", "--grpo.group-size", "2",
             "--grpo.minibatch-size", "4", "--grpo.eval-every", "2", "--grpo.eval-episodes", "2",
             "--grpo.max-turns", "2", "--grpo.max-new-tokens", "16", "--grpo.no-progress"]


@pytest.fixture
def example(load_example):
    return load_example("train_grpo")


@pytest.mark.parametrize("preset", ["math-qa", "csr-tiny"])
def test_example_runs_end_to_end_and_resumes(example, tmp_path, preset):
    out = tmp_path / "run"
    warm = ["--expert.episodes", "16", "--expert.epochs", "1"] if preset == "math-qa" else [
        "--warm-start.episodes-per-difficulty", "4", "--warm-start.epochs", "1", "--warm-start-dir",
        str(tmp_path / "warm_starts")]
    curve = example.main([preset, *SMALL_RUN, *warm, "--grpo.output-dir", str(out)])
    assert [step for step, _ in curve["eval_success"]] == [0, 2]
    assert (out / "curve.png").stat().st_size > 0 and (out / "checkpoint-last" / "manifest.json").is_file()
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["preset"] == preset and recorded["grpo"]["num_steps"] == 2
    from worldgym.cli import load_run_config, parse_run

    ran = parse_run(example.PRESETS, [preset, *SMALL_RUN, *warm, "--grpo.output-dir", str(out)])
    assert load_run_config(out, example.PRESETS) == dataclasses.replace(ran, resume=True)  # every field round-trips
    # --resume reads the recorded settings back; a flag still overrides them (two more steps)
    resumed = example.main(["--resume", str(out), "--grpo.num-steps", "3"])
    assert [step for step, _ in resumed["rollout_reward"]] == [1, 2, 3]  # step 3 continued the run, none repeated
    assert json.loads((out / "config.json").read_text())["grpo"]["num_steps"] == 3


def test_a_config_file_and_flags_override_the_preset(example, tmp_path):
    from worldgym.cli import parse_run

    file = tmp_path / "run.yaml"
    file.write_text("preset: csr-smollm2\ngrpo:\n  num_steps: 7\n  lora_target_modules: [q_proj]\nshaping: progress\n")
    parsed = parse_run(example.PRESETS, ["--config", str(file), "--grpo.seed", "3"])
    assert parsed.preset == "csr-smollm2" and parsed.run.shaping == "progress"
    assert (parsed.run.grpo.num_steps, parsed.run.grpo.seed, parsed.run.grpo.lora_target_modules) == (7, 3, ("q_proj",))
    assert parsed.run.grpo.learning_rate == example.PRESETS["csr-smollm2"][1].grpo.learning_rate
    assert parse_run(example.PRESETS, ["csr-tiny", "--difficulty", "3"]).run.resolved_grpo().env_kwargs == {
        "split": "train", "difficulty": 3}
    file.write_text("grpo:\n  num_stepz: 7\n")
    with pytest.raises(ValueError, match=r"grpo: unknown field\(s\) \['num_stepz'\] for GRPOConfig"):
        parse_run(example.PRESETS, ["--config", str(file)])
    with pytest.raises(ValueError, match="unknown preset 'csr-huge'"):
        parse_run(example.PRESETS, ["csr-huge"])
    file.write_text("grpo:\n  group_size: 1\n")
    with pytest.raises(ValueError, match="group_size=1 is invalid"):
        parse_run(example.PRESETS, ["--config", str(file)])
