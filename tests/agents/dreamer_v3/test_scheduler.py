"""Ratio and TrainSchedule against recorded sheeprl 0.8.4 outputs (and live sheeprl when importable)."""

import json
import re
from pathlib import Path

import pytest

from worldgym.agents.dreamer_v3.scheduler import Ratio, TrainSchedule

# Read at import time: the recorded cases parametrize the tests
RECORDED = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "dreamer_v3" / "ratio.json").read_text()
)


def _run_ours(case: dict) -> tuple[list[int], dict, list[int]]:
    ratio = Ratio(case["ratio"])
    outputs = [ratio(s) for s in case["steps"]]
    saved = Ratio(case["ratio"])
    for s in case["steps"][:10]:
        saved(s)
    state = saved.state_dict()
    resumed = Ratio(0.123).load_state_dict(state)
    resumed.realign(case["steps"][9])
    return outputs, state, [resumed(s) for s in case["steps"][10:]]


@pytest.mark.parametrize("case", RECORDED["cases"], ids=lambda c: f"ratio={c['ratio']:.3g}")
def test_ratio_matches_recorded_sheeprl(case):
    outputs, state, resumed = _run_ours(case)
    assert outputs == case["outputs"]
    assert state == case["state_after_10"]
    assert resumed == case["resumed_outputs"]
    # Resuming continues the ratio: the outputs after the save equal the uninterrupted ones
    assert resumed == case["outputs"][10:]


@pytest.mark.parametrize(
    "sched", RECORDED["schedules"], ids=lambda s: f"envs{s['num_envs']}-ls{s['learning_starts']}"
)
def test_train_schedule_matches_recorded_off_policy_schedule(sched):
    schedule = TrainSchedule(
        sched["replay_ratio"],
        sched["learning_starts"],
        sched["pretrain_steps"],
        sched["seq_len"],
        sched["num_envs"],
    )
    assert schedule.train_starts == sched["train_starts"]
    plans = [schedule.plan(i) for i in range(1, len(sched["plans"]) + 1)]
    assert [[p.random_actions, p.gradient_steps] for p in plans] == sched["plans"]


def test_schedule_resume_keeps_the_ratio():
    straight = TrainSchedule(0.3, 8, 2, 4, 2)
    expected = [straight.plan(i).gradient_steps for i in range(1, 41)]
    first = TrainSchedule(0.3, 8, 2, 4, 2)
    head = [first.plan(i).gradient_steps for i in range(1, 21)]
    resumed = TrainSchedule(0.3, 8, 2, 4, 2)
    resumed.load_state_dict(first.state_dict(), last_iter=20)
    tail = [resumed.plan(i).gradient_steps for i in range(21, 41)]
    assert head + tail == expected


def test_ratio_rejects_bad_input():
    with pytest.raises(ValueError, match=re.escape("ratio=-0.5 is invalid: use a value >= 0")):
        Ratio(-0.5)
    with pytest.raises(ValueError, match="need keys '_ratio' and '_prev'"):
        Ratio(1.0).load_state_dict({"ratio": 1.0})
    with pytest.raises(ValueError, match="pretrain_steps=-1 is invalid"):
        TrainSchedule(1.0, 0, -1, 4, 1)


def test_ratio_matches_live_sheeprl():
    sheeprl_utils = pytest.importorskip("sheeprl.utils.utils")
    for case in RECORDED["cases"]:
        theirs = sheeprl_utils.Ratio(case["ratio"])
        ours = Ratio(case["ratio"])
        assert [ours(s) for s in case["steps"]] == [theirs(s) for s in case["steps"]]
        assert ours.state_dict() == theirs.state_dict()
