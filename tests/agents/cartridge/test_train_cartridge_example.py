"""Smoke-run examples/train_cartridge.py (tiny teacher warm-up + distillation + files), then resume it."""

import json

import pytest


@pytest.fixture
def example(load_example):
    return load_example("train_cartridge")


def test_example_runs_end_to_end_and_resumes(example, tmp_path, capsys):
    out = tmp_path / "run"
    results = example.main([
        "tiny", "--distill.env-kwargs.num-patients", "5", "--distill.warmup-episodes", "4",
        "--distill.warmup-epochs", "1", "--distill.warm-start-dir", str(tmp_path / "warm_starts"),
        "--distill.num-steps", "2", "--distill.eval-every", "1", "--distill.questions-per-step", "1",
        "--distill.samples-per-question", "1", "--distill.max-new-tokens", "4", "--distill.num-tokens", "8",
        "--distill.checkpoint-every", "1", "--distill.output-dir", str(out), "--distill.no-progress",
        "--threads", "1",
    ])
    assert results["steps"] == [0, 1, 2] and len(results["kl_cartridge"]) == len(results["kl_none"]) == 3
    assert results["kl_drop"] == pytest.approx(1 - results["kl_cartridge"][-1] / results["kl_cartridge"][0])
    assert results["memory_ratio"] > 10 and results["tokens_per_s_ratio"] > 0
    assert set(results["final_accuracy"]) == {"none", "cartridge", "teacher"}
    assert json.loads((out / "results.json").read_text())["patient_id"] == results["patient_id"]
    assert json.loads((out / "config.json").read_text())["preset"] == "tiny"
    assert (out / "curves.png").stat().st_size > 0 and (out / "cartridge" / "cartridge.json").is_file()
    assert "python examples/train_cartridge.py tiny --distill.env-kwargs.num-patients 5" in results["command"]

    resumed = example.main(["--resume", str(out), "--distill.num-steps", "3"])
    assert f"resumed from {out / 'checkpoint-last'} at step 2" in capsys.readouterr().out
    assert resumed["steps"] == [0, 1, 2, 3] and resumed["kl_cartridge"][:3] == results["kl_cartridge"]
    assert resumed["config"]["num_tokens"] == 8 and resumed["patient_id"] == results["patient_id"]


def test_data_path_reads_a_longhealth_file(example):
    from worldgym.cli import parse_run

    run = parse_run(example.PRESETS, ["tiny", "--data-path", "benchmark_v5.json"]).run
    assert run.resolved().env_kwargs == {"num_patients": 20, "data_path": "benchmark_v5.json"}
    assert parse_run(example.PRESETS, ["smollm2"]).run.resolved().model == "smollm2-135m"


def test_the_warmup_panel_is_set_on_the_command_line(example):
    from worldgym.cli import parse_run

    argv = ["smollm2", "--distill.warmup-env-kwargs", "num_patients", "60", "panel_seed", "1"]
    assert parse_run(example.PRESETS, argv).run.resolved().warmup_env_kwargs == {"num_patients": 60, "panel_seed": 1}


@pytest.mark.parametrize("cartridge, expected", [(0.6, 0.5), (0.2, 0.0)])
def test_recovery_is_the_share_of_the_documents_gain(example, cartridge, expected):
    assert example.recovery({"none": 0.2, "cartridge": cartridge, "teacher": 1.0}) == pytest.approx(expected)
    assert example.recovery({"none": 0.4, "cartridge": cartridge, "teacher": 0.4}) is None  # nothing to recover
