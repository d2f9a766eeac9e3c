"""Mixed precision (``dtype="bfloat16"``): float32 weights and losses, bf16 forward passes, reproducible runs
and checkpoints that resume in either precision."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from worldgym.agents.dreamer_v3.config import DreamerConfig, LossConfig, ReplayConfig, model_size
from worldgym.agents.dreamer_v3.engine.async_engine import AsyncEngine
from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.agents.dreamer_v3.learner import DreamerLearner
from worldgym.agents.dreamer_v3.model import RSSMState
from worldgym.agents.dreamer_v3.policy import DreamerPolicy

T, B = 8, 4


def _learner(dtype: str) -> DreamerLearner:
    cfg = DreamerConfig(
        dtype=dtype,
        model=model_size("tiny"),
        loss=LossConfig(horizon=4),
        replay=ReplayConfig(capacity=64, seq_len=T, batch_size=B, min_ready_steps=T, safety_margin=T),
    )
    torch.manual_seed(0)
    return DreamerLearner(cfg, (4,), action_dim=2)


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    is_first = torch.zeros(T, B)
    is_first[5, 1] = 1
    return {
        "obs": torch.randn(T, B, 4, generator=gen),
        "action": torch.randint(2, (T, B), generator=gen),
        "reward": torch.randn(T, B, generator=gen),
        "is_first": is_first,
        "cont": torch.ones(T, B),
        "episode_id": torch.zeros(T, B, dtype=torch.int64),
    }


def _train(dtype: str, steps: int = 3) -> tuple[DreamerLearner, list[dict[str, float]]]:
    learner, data, gen = _learner(dtype), _batch(), torch.Generator().manual_seed(0)
    history = [{k: float(v) for k, v in learner.train_step(data, gen).items()} for _ in range(steps)]
    return learner, history


def test_bad_dtype_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match=re.escape("dtype='fp16' is invalid: use one of ['auto', 'float32'")):
        DreamerConfig(dtype="fp16")  # type: ignore[arg-type]


def test_dtype_resolves_and_round_trips():
    assert DreamerConfig().dtype == "float32" and DreamerConfig().compute_dtype == torch.float32
    assert DreamerConfig(dtype="bfloat16").compute_dtype == torch.bfloat16
    assert DreamerConfig(dtype="auto").compute_dtype in (torch.float32, torch.bfloat16)
    cfg = DreamerConfig(model=model_size("tiny"), dtype="bfloat16")
    assert DreamerConfig.from_dict(cfg.to_dict()) == cfg


def test_bf16_trains_with_finite_losses_close_to_float32():
    (learner, bf16), (_, fp32) = _train("bfloat16"), _train("float32")
    assert all(p.dtype == torch.float32 for p in learner.parameters())
    for optimizer in learner.optimizers.values():
        moments = [t for state in optimizer.state.values() for t in state.values() if t.is_floating_point()]
        assert moments and all(t.dtype == torch.float32 for t in moments)
    for step_bf16, step_fp32 in zip(bf16, fp32, strict=True):
        assert all(torch.isfinite(torch.tensor(v)) for v in step_bf16.values())
        for key in ("loss/world_total", "loss/world_reward_loss", "loss/world_kl", "loss/critic"):
            assert step_bf16[key] == pytest.approx(step_fp32[key], rel=0.05, abs=0.02), key
    assert bf16 != fp32  # the forward passes really ran in bf16


def test_bf16_runs_the_networks_in_bf16_and_losses_in_float32():
    learner, seen = _learner("bfloat16"), {}

    def record(name):
        def hook(module, inputs, output) -> None:
            seen.setdefault(name, output.dtype)

        return hook

    learner.world_model.encoder.register_forward_hook(record("encoder"))
    learner.world_model.rssm.gru.linear.register_forward_hook(record("gru_matmul"))
    learner.actor.net[-1].register_forward_hook(record("actor_layer"))
    learner.critic.net[-1].register_forward_hook(record("critic_layer"))
    metrics = learner.train_step(_batch(), torch.Generator().manual_seed(0))
    assert seen == dict.fromkeys(("encoder", "gru_matmul", "actor_layer", "critic_layer"), torch.bfloat16)
    assert {v.dtype for v in metrics.values()} == {torch.float32}
    h = torch.zeros(3, 32)
    with learner.autocast():
        logits = learner.actor(RSSMState(h, torch.zeros(3, 4, 4)).features())
        state = learner.world_model.rssm.initial_state(3)
    assert logits.dtype == state.h.dtype == state.z.dtype == torch.float32


def test_same_seed_bf16_gives_identical_metrics():
    assert _train("bfloat16")[1] == _train("bfloat16")[1]


def test_policy_acts_under_bf16():
    learner = _learner("bfloat16")
    policy = DreamerPolicy(learner, num_envs=B)
    seen = []
    policy.actor.net[0].register_forward_hook(lambda module, inputs, output: seen.append(output.dtype) and None)
    gen = torch.Generator().manual_seed(0)
    actions = policy.act(torch.randn(B, 4), torch.ones(B, dtype=torch.bool), gen)
    assert seen == [torch.bfloat16] and actions.shape == (B,)
    assert policy.state.h.dtype == policy.state.z.dtype == policy.prev_action.dtype == torch.float32


def test_bf16_engine_run_is_deterministic_and_records_its_dtype(tmp_path, make_config):
    rows = []
    for name in ("a", "b"):
        engine = CPUEngine(make_config(tmp_path / name, dtype="bfloat16", num_steps=80))
        record = engine.run(progress=False)
        rows.append({k: v for k, v in record.items() if not k.startswith("time/")})
        state = json.loads((engine.core.run_dir / "checkpoint-40" / "state.json").read_text())
        assert state["config"]["dtype"] == "bfloat16" and state["resolved_dtype"] == "bfloat16"
    assert rows[0]["gradient_steps"] > 0 and rows[0] == rows[1]


@pytest.mark.parametrize(("saved", "resumed"), [("float32", "bfloat16"), ("bfloat16", "float32")])
def test_checkpoint_resumes_in_the_other_precision(tmp_path, make_config, saved, resumed):
    first = CPUEngine(make_config(tmp_path / "first", dtype=saved, num_steps=40))
    first.run(progress=False)
    path = first.core.save(tmp_path / "ckpt")
    weights = {k: v.clone() for k, v in first.core.learner.state_dict().items()}
    second = CPUEngine(make_config(tmp_path / "second", dtype=resumed, num_steps=80))
    second.core.resume(path)
    loaded = second.core.learner.state_dict()
    assert all(torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in weights.items())
    assert second.core.learner.dtype == getattr(torch, resumed)
    record = second.run(progress=False)
    assert record["gradient_steps"] > first.core.learner.gradient_steps
    assert all(torch.isfinite(torch.tensor(v)) for k, v in record.items() if k.startswith("loss/"))


def test_async_engine_in_bf16_matches_the_reference_async_order(tmp_path, make_config):
    """Autocast is per thread: the actor and learner threads each run their forward passes in bf16. (bf16
    matmul kernels may sum in another order on another thread, so the weights agree closely, not bitwise.)"""
    configs = [make_config(tmp_path / name, dtype="bfloat16", num_steps=80) for name in ("cpu", "async")]
    configs = [dataclasses.replace(c, replay=dataclasses.replace(c.replay, capacity=256)) for c in configs]
    reference = CPUEngine(configs[0], pipeline_lag=1)
    expected = reference.run(progress=False)
    engine = AsyncEngine(configs[1])
    final = engine.run(progress=False)
    assert final["gradient_steps"] == expected["gradient_steps"] > 0
    for key, value in reference.core.learner.state_dict().items():
        torch.testing.assert_close(engine.core.learner.state_dict()[key], value, rtol=1e-3, atol=1e-4)
    assert final["replay/committed_t"] == expected["replay/committed_t"]
    actions = [engine.core.replay.storage["action"], reference.core.replay.storage["action"]]
    assert torch.equal(*actions)  # the actor thread acted as the reference did
