"""GRPO with its rollouts on Ray workers: the same first update as in process, whole groups over 2 workers,
adapter-only weight sync, a killed worker's share re-run once, async rollouts with lag 1, stale rounds
refused, resume, and no worker process left behind."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.llm.engines import SamplingParams
from worldgym.agents.llm.rollout import Episode

ray = pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from ddp_worker import token_parity


@pytest.fixture(scope="module")
def ray_cluster():
    """A 2-CPU local Ray instance for the module, shut down after it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread, ray_cluster):
    """One torch thread, like the workers (Ray gives a 1-CPU actor one thread): same float reductions."""


def _trainer(tmp_path, name: str, **overrides) -> GRPOTrainer:
    settings = dict(num_steps=3, prompts_per_step=2, group_size=2, max_new_tokens=8, minibatch_size=4,
                    learning_rate=1e-2, eval_every=0, progress=False, output_dir=str(tmp_path / name))
    return GRPOTrainer(GRPOConfig(**{**settings, **overrides}), reward_fn=token_parity)


def _tokens(episodes: list[Episode]) -> list[list[int]]:
    return [episode.token_ids for episode in episodes]


def test_one_ray_worker_gives_the_in_process_first_update(tmp_path):
    local = _trainer(tmp_path, "local")
    remote = _trainer(tmp_path, "ray", runtime="ray")
    try:
        before = {name: tensor.clone() for name, tensor in local.trainable.items()}
        local_metrics, remote_metrics = local.train_step(), remote.train_step()
        assert local_metrics["loss/grad_norm"] > 0  # a real update, not zero advantages
        for key in ("rollout/model_tokens", "rollout/reward_mean", "loss/policy", "loss/grad_norm"):
            assert remote_metrics[key] == pytest.approx(local_metrics[key], rel=1e-5), key
        assert any(not torch.equal(tensor, before[name]) for name, tensor in local.trainable.items())
        for name, tensor in local.trainable.items():
            torch.testing.assert_close(remote.trainable[name], tensor, rtol=1e-5, atol=1e-7)
        assert remote_metrics["rollout/policy_lag_max"] == 0 and remote_metrics["rollout/worker_restarts"] == 0
    finally:
        remote.close()


def test_worker_loads_the_adapter_only_and_samples_what_the_learner_would(tmp_path):
    trainer = _trainer(tmp_path, "sync", runtime="ray")
    try:
        trainer.train_step()  # version 1 is synced to the worker as LoRA tensors only
        weights = ray.get(trainer.rollouts._weights[0])
        assert weights and all("lora_" in name for name in weights)
        assert set(weights) == set(trainer.trainable)
        params = SamplingParams(1.0, 1.0, 8, seed=5)
        remote = trainer.rollouts.gather(trainer.rollouts.submit([11, 12], 2, params))
        local = trainer.collector.collect([11, 12], 2, params)
        assert _tokens(remote.episodes) == _tokens(local)
        assert {episode.policy_version for episode in remote.episodes} == {1}
        assert remote.weight_load_seconds > 0
    finally:
        trainer.close()


def test_two_workers_keep_groups_whole_and_a_killed_worker_loses_no_episode(tmp_path):
    trainer = _trainer(tmp_path, "two", runtime="ray", num_rollout_workers=2)
    pool = trainer.rollouts
    try:
        assert trainer.train_step()["rollout/episodes_sampled"] == 4  # the workers now hold version 1
        params = SamplingParams(1.0, 1.0, 8, seed=3)
        seeds = [21, 22, 23]
        healthy = pool.gather(pool.submit(seeds, 2, params, first_group_id=4))
        assert [(e.group_id, e.env_seed) for e in healthy.episodes] == [
            (4, 21), (4, 21), (5, 22), (5, 22), (6, 23), (6, 23)]
        old_pid = pool._pids[1]
        request = pool.submit(seeds, 2, params, first_group_id=4)
        pool.kill_worker(1)
        recovered = pool.gather(request)
        assert recovered.worker_restarts == 1 and pool._pids[1] != old_pid
        # the new process reloaded version 1 and re-ran its share once: nothing lost, nothing doubled
        assert _tokens(recovered.episodes) == _tokens(healthy.episodes)
        assert {e.policy_version for e in recovered.episodes} == {1}
    finally:
        trainer.close()


def test_async_rollouts_are_one_update_old_and_stale_rounds_are_refused(tmp_path):
    trainer = _trainer(tmp_path, "async", runtime="ray", async_rollouts=True, max_policy_lag=1)
    try:
        first, second = trainer.train_step(), trainer.train_step()
        assert first["rollout/policy_lag_max"] == 0  # nothing was pending before the first step
        assert second["rollout/policy_lag_max"] == 1 and second["rollout/policy_lag_mean"] == 1
        # the third step's round is pending with version 2's weights; two more updates make it 2 behind
        assert trainer._pending is not None
        trainer.step += 2
        trainer._sync_weights()
        trainer.config.num_steps = 10
        third = trainer.train_step()
        assert third["rollout/stale_rounds_refused"] == 1 and third["rollout/policy_lag_max"] == 0
    finally:
        trainer.close()


def test_async_run_resumes_with_its_pending_tasks(tmp_path):
    trainer = _trainer(tmp_path, "resume", runtime="ray", async_rollouts=True)
    try:
        trainer.train_step()
        pending = trainer._pending.seeds
        path = trainer.save(tmp_path / "resume" / "checkpoint-1")
    finally:
        trainer.close()
    resumed = _trainer(tmp_path, "resume", runtime="ray", async_rollouts=True)
    try:
        resumed.load(path)
        assert resumed._pending.seeds == pending
        trained_seeds: list[int] = []
        prepare = resumed.prepare
        resumed.prepare = lambda episodes: trained_seeds.extend(e.env_seed for e in episodes) or prepare(episodes)
        metrics = resumed.train_step()
        assert metrics["step"] == 2 and metrics["rollout/policy_lag_max"] == 0  # regenerated by loaded weights
        assert sorted(set(trained_seeds)) == sorted(pending)
    finally:
        resumed.close()


def test_close_leaves_no_worker_process(tmp_path):
    trainer = _trainer(tmp_path, "close", runtime="ray", num_rollout_workers=2)
    pids = list(trainer.rollouts._pids)
    trainer.close()
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = {pid: _command(pid) for pid in pids if _alive(pid)}
    assert not alive, f"worker processes still running 60 s after close(): {alive}"


def test_async_rollouts_need_ray_and_a_lag_bound():
    with pytest.raises(ValueError, match="async_rollouts=True is invalid: use runtime='ray'"):
        GRPOConfig(async_rollouts=True)
    with pytest.raises(ValueError, match="max_policy_lag=0 is invalid: use >= 1 with async_rollouts"):
        GRPOConfig(runtime="ray", async_rollouts=True, max_policy_lag=0)
    with pytest.raises(ValueError, match="runtime"):
        GRPOConfig(runtime="slurm")


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except FileNotFoundError:
        return "(gone)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_dual_lora_agent_runs_its_rollouts_on_ray_too(tmp_path):
    from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer

    settings = dict(num_steps=2, prompts_per_step=2, group_size=2, max_new_tokens=16, max_turns=2, eval_every=0,
                    progress=False, minibatch_size=4)
    local = DualLoRATrainer(DualLoRAConfig(output_dir=str(tmp_path / "local"), **settings))
    remote = DualLoRATrainer(DualLoRAConfig(output_dir=str(tmp_path / "ray"), runtime="ray", **settings))
    try:
        params = SamplingParams(1.0, 1.0, 16, seed=9)
        expected = local.rollouts.gather(local.rollouts.submit([31, 32], 2, params)).episodes
        got = remote.rollouts.gather(remote.rollouts.submit([31, 32], 2, params)).episodes
        assert _tokens(got) == _tokens(expected)
        assert remote.train_step()["rollout/episodes_sampled"] == 4
    finally:
        remote.close()
