"""CPU reference engine: determinism, schedule, async order, JSONL metrics, checkpoint/resume, fail-fast."""

import itertools
import json
import re
import shutil

import gymnasium as gym
import pytest
import torch

from worldgym.agents.dreamer_v3 import evaluate_learner
from worldgym.agents.dreamer_v3.checkpoint import CheckpointError
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.agents.dreamer_v3.metrics import TrainingFailure
from worldgym.agents.dreamer_v3.scheduler import TrainSchedule
from worldgym.checkpointing import latest_checkpoint

REQUIRED_KEYS = {
    "time/actor_ms",
    "time/learner_ms",
    "time/overlap_efficiency",
    "replay/ratio_actual",
    "replay/fill",
    "replay/committed_t",
    "replay/sampled_t_min",
    "replay/sampled_t_max",
    "policy/actor_version",
    "policy/learner_version",
    "loss/world_total",
    "loss/actor",
    "loss/critic",
    "episode/return_mean",
}


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def untimed(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, make_config):
    """One tiny CartPole run (80 iterations x 2 envs) with a checkpoint halfway."""
    tmp = tmp_path_factory.mktemp("reference")
    cfg = make_config(tmp, checkpoint_every=80)
    engine = CPUEngine(cfg)
    before = {k: v.clone() for k, v in engine.core.learner.state_dict().items()}
    final = engine.run(progress=False)
    return cfg, engine, before, final


def test_run_trains_and_logs(reference_run):
    cfg, engine, before, final = reference_run
    records = read_jsonl(engine.core.run_dir / "metrics.jsonl")
    assert len(records) == 4 and REQUIRED_KEYS <= set(records[-1])
    schedule = TrainSchedule(0.1, 20, 2, cfg.replay.seq_len, cfg.num_envs)
    assert final["gradient_steps"] == sum(schedule.plan(i).gradient_steps for i in range(1, 81))
    assert abs(final["replay/ratio_actual"] - 0.1) < 0.02
    learner = engine.core.learner
    changed = [k for k, v in learner.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith("world_model.") for k in changed)
    assert any(k.startswith("actor.") for k in changed) and any(k.startswith("critic.") for k in changed)
    assert final["policy/actor_version"] == final["policy/learner_version"] > 0
    assert final["replay/sampled_t_max"] < final["replay/committed_t"]


def test_every_finished_episode_is_logged_with_its_end_step(reference_run):
    _cfg, engine, _, final = reference_run
    episodes = read_jsonl(engine.core.run_dir / "episodes.jsonl")
    assert len(episodes) == final["episode/count"] > 0
    steps = [e["policy_step"] for e in episodes]
    assert steps == sorted(steps) and steps[-1] <= final["policy_step"]
    assert all(e["return"] == e["length"] for e in episodes)  # CartPole: +1 per step
    recent = engine.core.counters.recent_returns[-10:]
    assert [e["return"] for e in episodes[-len(recent) :]] == recent


def test_stop_when_ends_the_run_with_a_checkpoint(tmp_path, make_config):
    engine = CPUEngine(make_config(tmp_path, checkpoint_every=0))
    record = engine.run(progress=False, stop_when=lambda r: r["policy_step"] >= 80)
    assert record["policy_step"] == 80 < engine.core.total_iters * engine.core.cfg.num_envs
    assert latest_checkpoint(engine.core.run_dir).name == "checkpoint-40"


def test_same_seed_same_run(reference_run, tmp_path, make_config):
    _cfg, engine, _, _ = reference_run
    again = CPUEngine(make_config(tmp_path, checkpoint_every=80))
    again.run(progress=False)
    first = untimed(read_jsonl(engine.core.run_dir / "metrics.jsonl"))
    second = untimed(read_jsonl(again.core.run_dir / "metrics.jsonl"))
    assert first == second
    for key, value in engine.core.learner.state_dict().items():
        assert torch.equal(value, again.core.learner.state_dict()[key]), key


def test_resume_continues_the_replay_ratio(reference_run, tmp_path, make_config):
    _cfg, engine, _, final = reference_run
    halfway = engine.core.run_dir / "checkpoint-40"
    resumed = CPUEngine(make_config(tmp_path, checkpoint_every=80))
    resumed.core.resume(halfway)
    assert resumed.core.replay.committed_t == 40
    assert resumed.core.schedule.ratio.state_dict()["_prev"] is not None
    record = resumed.run(progress=False)
    assert record["gradient_steps"] == final["gradient_steps"]
    assert record["replay/committed_t"] == final["replay/committed_t"]
    assert latest_checkpoint(resumed.core.run_dir).name == "checkpoint-80"


def test_resume_in_the_same_run_dir_does_not_duplicate_log_lines(reference_run, tmp_path, make_config):
    _cfg, engine, _, _ = reference_run
    run_dir = tmp_path / "run"
    shutil.copytree(engine.core.run_dir, run_dir)
    with (run_dir / "metrics.jsonl").open("a") as log:
        log.write('{"policy_step": 99')  # a line torn by a crash
    resumed = CPUEngine(make_config(tmp_path, checkpoint_every=80, output_dir=str(run_dir)))
    resumed.core.resume(run_dir / "checkpoint-40")
    resumed.run(progress=False)
    steps = [r["policy_step"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == [r["policy_step"] for r in read_jsonl(engine.core.run_dir / "metrics.jsonl")]
    # episodes: the lines up to the checkpoint stay, later ones come from the resumed run only (the resumed
    # run restarts its envs, so its episodes after the checkpoint differ from the first run's)
    episodes = read_jsonl(run_dir / "episodes.jsonl")
    before = [e for e in read_jsonl(engine.core.run_dir / "episodes.jsonl") if e["policy_step"] <= 80]
    assert episodes[: len(before)] == before
    assert all(a["policy_step"] < b["policy_step"] for a, b in itertools.pairwise(episodes))


def test_resume_rejects_bad_checkpoints(reference_run, tmp_path, make_config):
    _cfg, engine, _, _ = reference_run
    halfway = engine.core.run_dir / "checkpoint-40"
    other = CPUEngine(make_config(tmp_path, num_envs=1))
    with pytest.raises(CheckpointError, match="replay field 'obs'"):
        other.core.resume(halfway)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "state.json").write_text("{}")
    with pytest.raises(CheckpointError, match=re.escape("is incomplete: missing ['model.safetensors'")):
        CPUEngine(make_config(tmp_path)).core.resume(broken)


def test_async_order_trains_on_the_previous_window(tmp_path, make_config):
    cfg = make_config(tmp_path, num_steps=120)
    engine = CPUEngine(cfg, pipeline_lag=1)
    final = engine.run(progress=False)
    records = read_jsonl(engine.core.run_dir / "metrics.jsonl")
    window = cfg.schedule.rollout_window
    for record in records[:-1]:
        if record["replay/sampled_t_max"] is not None:
            assert record["replay/sampled_t_max"] < record["replay/committed_t"] - window
    serial = CPUEngine(make_config(tmp_path / "serial", num_steps=120)).run(progress=False)
    assert final["gradient_steps"] == serial["gradient_steps"]


def test_non_finite_loss_writes_a_failure_bundle(tmp_path, monkeypatch, make_config):
    engine = CPUEngine(make_config(tmp_path, num_steps=80))
    original = engine.core.learner.train_step

    def poisoned(batch, generator):
        metrics = original(batch, generator)
        metrics["loss/world_total"] = torch.tensor(float("nan"))
        return metrics

    monkeypatch.setattr(engine.core.learner, "train_step", poisoned)
    with pytest.raises(TrainingFailure, match="non-finite metrics") as info:
        engine.run(progress=False)
    reason = json.loads((info.value.bundle / "reason.json").read_text())
    assert "loss/world_total" in reason["reason"]


def test_engine_validates_its_inputs(tmp_path, make_config):
    with pytest.raises(ValueError, match="pipeline_lag=2 is invalid"):
        CPUEngine(make_config(tmp_path), pipeline_lag=2)
    with pytest.raises(ValueError, match="obs_kind='pixels' needs packed uint8 observations"):
        CPUEngine(make_config(tmp_path, obs_kind="pixels"))


def test_engine_leaves_the_global_rng_alone(tmp_path, make_config):
    state = torch.get_rng_state()
    CPUEngine(make_config(tmp_path))
    assert torch.equal(torch.get_rng_state(), state)


def test_evaluate_plays_whole_episodes(reference_run):
    _, engine, _, _ = reference_run
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    first = evaluate_learner(engine.core.learner, env, episodes=3, seed=5)
    again = evaluate_learner(engine.core.learner, env, episodes=3, seed=5)
    assert first == again and first["eval/episodes"] == 3.0
    assert 8 <= first["eval/length_mean"] <= 500 and first["eval/return_mean"] == first["eval/length_mean"]
    with pytest.raises(ValueError, match="episodes=0 is invalid"):
        evaluate_learner(engine.core.learner, env, episodes=0)
