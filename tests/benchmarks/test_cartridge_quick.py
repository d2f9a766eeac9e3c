"""``benchmarks/cartridge_on_vs_offline.py --quick``: three runs (on-policy and offline with text init, on-policy
with random init), the teacher's accuracy and the report, into ``tmp_path``; part and report JSON hold the budget, figures and goals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.cartridge_on_vs_offline import reads_documents, recovery
from benchmarks.common import absolute_paths

REPO = Path(__file__).resolve().parents[2]
STAGES = (("run", "--mode", "on_policy"), ("run", "--mode", "offline", "--seed", "1"),
          ("run", "--mode", "on_policy", "--init", "random"), ("teacher",), ("teacher", "--answer-format", "text"),
          ("report",))


def load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert absolute_paths(data) == []
    return data


def test_runs_and_report(tmp_path: Path) -> None:
    argvs = [[*stage, "--quick", "--results-dir", str(tmp_path)] for stage in STAGES]
    code = f"from benchmarks.cartridge_on_vs_offline import main\nfor argv in {argvs!r}:\n    main(argv)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"

    names = {p.name for p in (tmp_path / "cartridge").glob("*.json")}
    assert names == {"tiny-on_policy-text-s0.json", "tiny-offline-text-s1.json", "tiny-on_policy-random-s0.json"}
    part = load(tmp_path / "cartridge" / "tiny-offline-text-s1.json")
    assert part["config"]["output_dir"] == "tiny-offline-text-s1"  # no tmp path
    assert part["command"].endswith("--mode offline --init text --seed 1 --steps 2 --questions-per-step 1 "
                                    "--samples-per-question 1 --eval-every 1 --offline-steps 1 --max-new-tokens 4 "
                                    "--num-tokens 8 --learning-rate 0.02 --quick")
    assert [row["step"] for row in part["evals"]] == [0, 1, 2] and len(part["step_seconds"]) == 2
    assert part["config"]["mode"] == "offline" and part["config"]["patient_id"] == part["patient_id"]

    data = load(tmp_path / "cartridge_on_vs_offline.json")
    tiny = data["models"]["tiny"]
    assert data["quick"] is True and set(tiny["runs"]) == {"on_policy/text", "offline/text", "on_policy/random"}
    assert tiny["same_budget"] is True and tiny["budget"]["num_steps"] == 2 and tiny["accuracy_meaningful"] is False
    assert len(tiny["patients"]) == 1  # every run distils the same held-out patient
    offline = tiny["runs"]["offline/text"]
    first, last = part["evals"][0], part["evals"][-1]
    assert offline["seeds"] == [1]
    assert offline["kl_drop"] == [pytest.approx(1 - last["kl_cartridge"] / first["kl_cartridge"])]
    assert offline["memory_ratio"] == pytest.approx(last["documents_kv_bytes"] / last["cartridge_bytes"])
    assert offline["memory_ratio"] > 10
    teacher = data["teachers"]["tiny"]
    assert set(teacher["accuracy"]) == {"held_out_documents", "held_out_none", "train_documents"}
    assert all(0 <= a <= 1 for a in teacher["accuracy"].values()) and teacher["questions"]["held_out_none"] == 2
    text = load(tmp_path / "cartridge_teacher" / "tiny-text.json")  # a teacher asked for the option's text
    assert text["command"].endswith("--max-new-tokens 4 --answer-format text --quick")
    assert data["teachers"]["tiny-text"]["accuracy"] == text["accuracy"]
    goals = tiny["goal_status"]
    assert goals["memory_ratio>=10"]["status"] == "met"
    assert goals["recovery>=70%"]["status"] == "not measurable: the teacher does not read"
    assert goals["kl_drop>=50%"]["status"] in ("met", "NOT met")
    assert (tmp_path / "cartridge_on_vs_offline.png").stat().st_size > 0


def test_recovery_is_none_when_the_teacher_adds_nothing() -> None:
    assert recovery(0.2, 0.6, 1.0) == pytest.approx(0.5)
    assert recovery(0.4, 0.6, 0.4) is None and recovery(0.4, 0.6, 0.3) is None


def test_accuracy_counts_only_where_the_teacher_reads() -> None:
    def row(none: float, teacher: float) -> dict[str, Any]:
        return {"accuracy": {"none": [none], "teacher": [teacher]}, "held_out_questions": 8}

    assert reads_documents([row(0.125, 0.75)], "smollm2-135m") == (True, None)
    # at chance with the documents (SmolLM2-135M zero-shot: 0 of 8), or no better than without them
    for rows in ([row(0.125, 0.0)], [row(0.0, 0.25)], [row(0.5, 0.625)]):
        meaningful, note = reads_documents(rows, "smollm2-135m")
        assert not meaningful and note.startswith("the teacher does not read: greedy held-out accuracy")
    # the teacher stage's figures (more questions) decide when there are some
    measured = {"accuracy": {"held_out_documents": 0.6, "held_out_none": 0.2}, "questions": {"held_out_documents": 64}}
    assert reads_documents([row(0.125, 0.0)], "smollm2-135m", measured) == (True, None)
    meaningful, note = reads_documents([row(0.125, 0.75)], "smollm2-135m", {**measured, "accuracy": {
        "held_out_documents": 0.3, "held_out_none": 0.2}})
    assert not meaningful and "(64 questions" in note
