"""Smoke-run examples/train_dual_lora.py (warm start + two adapters + DAPO with the world model + files)."""

import json


def test_example_runs_end_to_end(tmp_path, load_example):
    example = load_example("train_dual_lora")
    out = tmp_path / "run"
    results = example.main([
        "tiny", "--agent.num-steps", "2", "--agent.eval-every", "1", "--agent.eval-episodes", "2",
        "--agent.max-turns", "3", "--agent.prompts-per-step", "2", "--agent.group-size", "2",
        "--agent.minibatch-size", "4", "--agent.max-new-tokens", "48", "--agent.iwm-steps", "1",
        "--warm-start.episodes-per-difficulty", "4", "--warm-start.epochs", "1",
        "--warm-start-dir", str(tmp_path / "warm_starts"), "--agent.output-dir", str(out), "--agent.no-progress",
    ])
    assert [step for step, _ in results["success"]] == [0, 1, 2]
    assert json.loads((out / "results.json").read_text())["config"]["transfer"] == "separate"
    assert json.loads((out / "config.json").read_text())["preset"] == "tiny"
    assert (out / "curves.png").stat().st_size > 0 and (out / "checkpoint-last" / "manifest.json").is_file()
    assert "python examples/train_dual_lora.py tiny --agent.num-steps 2" in results["command"]


def test_the_demo_runs_the_best_measured_mode(load_example):
    from worldgym.cli import parse_run

    agent = parse_run(load_example("train_dual_lora").PRESETS, ["demo"]).run.resolved_agent()
    assert (agent.transfer, agent.clip_per_adapter, agent.auxiliary_grad_ratio, agent.wm_coef) == (
        "separate", True, None, 0.5)  # the benchmark's separate-own-clip
    assert (agent.num_steps, agent.eval_every, agent.eval_episodes, agent.seed) == (16, 4, 64, 0)


def test_the_shipped_warm_start_is_the_tiny_presets_and_loads(tmp_path):
    from worldgym.agents.dual_lora.presets import warm_start_config
    from worldgym.agents.dual_lora.world_model import wm_token_ids
    from worldgym.agents.llm.warm_start import PACKAGED_WARM_STARTS, load_or_train_warm_start

    config = warm_start_config("tiny")
    assert (PACKAGED_WARM_STARTS / config.key() / "warm_start.json").is_file()  # `make demo` trains no SFT
    ws = load_or_train_warm_start(config, cache_dir=tmp_path / "empty")
    assert ws.path.parent == PACKAGED_WARM_STARTS and not (tmp_path / "empty").exists()
    assert len(set(wm_token_ids(ws.tokenizer))) == 3
