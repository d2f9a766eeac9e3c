"""``benchmarks/llm_precision.py`` and ``csr_rollout_speed.py --compare dtype`` end to end in ``--quick`` mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> None:
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    assert done.returncode == 0, done.stderr[-4000:]


def test_learner_and_dapo_step_share_one_results_file(tmp_path: Path) -> None:
    script = str(REPO / "benchmarks" / "llm_precision.py")
    _run(script, "learner", "--quick", "--results-dir", str(tmp_path))
    _run(script, "dapo-step", "--quick", "--dtypes", "float32", "bfloat16", "--results-dir", str(tmp_path))
    data = json.loads((tmp_path / "llm_precision.json").read_text())
    learner = data["learner"]
    assert set(learner["figures"]) == {"float32", "bfloat16"} and learner["bf16_speedup"] > 0
    assert learner["loss_gap"] < 1e-2  # the same batch, two precisions
    # named "dapo_step", with "+threads=N" where torch runs on fewer threads than the cores (OMP_NUM_THREADS)
    [name] = [key for key in data if key.startswith("dapo_step")]
    steps = data[name]["figures"]
    assert set(steps) == {"float32", "bfloat16"}
    assert all(row["time/step_s"] > 0 for row in steps.values())


def test_rollout_speed_compares_the_two_precisions(tmp_path: Path) -> None:
    _run(str(REPO / "benchmarks" / "csr_rollout_speed.py"), "--quick", "--compare", "dtype",
         "--results-dir", str(tmp_path))
    runs = json.loads((tmp_path / "csr_rollout_speed_dtype.json").read_text())["runs"]
    assert [run["dtype"] for run in runs] == ["float32", "bfloat16"]
    assert all(0 <= run["diverging_episodes"] <= run["episodes"] for run in runs)


def test_a_dapo_step_key_names_the_changed_settings_and_fewer_threads_than_cores() -> None:
    from benchmarks.llm_precision import parse_args, settings_suffix

    cores = os.cpu_count()
    preset = parse_args(["dapo-step", "--threads", str(cores)])
    assert settings_suffix(preset) == ""
    changed = parse_args(["dapo-step", "--threads", str(cores + 1), "--checkpointing-min-tokens", "4096",
                          "--decode-attention", "native-decode"])
    assert settings_suffix(changed) == (f"+checkpointing_min_tokens=4096+decode_attention=native-decode"
                                        f"+threads={cores + 1}")
