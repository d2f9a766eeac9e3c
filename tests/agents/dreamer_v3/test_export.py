"""Dreamer v3 policy export: the safetensors folder rebuilds a policy that acts as the trained one does."""

from __future__ import annotations

import re

import pytest
import torch

from worldgym.agents.dreamer_v3.engine.cpu import CPUEngine
from worldgym.agents.dreamer_v3.export import load_policy
from worldgym.agents.dreamer_v3.policy import DreamerPolicy
from worldgym.errors import CheckpointError
from worldgym.export import export


def test_the_exported_policy_acts_as_the_trained_one(tmp_path, make_config):
    engine = CPUEngine(make_config(tmp_path, num_steps=40, save_total_limit=1, checkpoint_every=10))
    engine.run(progress=False)
    run_dir = tmp_path / "run"
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-20"]  # 40 steps / 2 envs
    out = export(run_dir, tmp_path / "export")
    exported = load_policy(out)
    trained = DreamerPolicy(engine.core.learner, 1).eval()
    assert exported.state_dict().keys() == trained.state_dict().keys()
    assert all(torch.equal(exported.state_dict()[k], v) for k, v in trained.state_dict().items())
    obs = torch.randn(3, 1, 4)
    generators = [torch.Generator().manual_seed(0) for _ in range(2)]  # the latent state is sampled
    for step in range(3):
        first = torch.tensor([float(step == 0)])
        assert torch.equal(exported.act(obs[step], first, generators[0], greedy=True),
                           trained.act(obs[step], first, generators[1], greedy=True))


def test_a_policy_export_is_not_a_training_checkpoint(tmp_path, make_config):
    engine = CPUEngine(make_config(tmp_path, num_steps=20))
    engine.run(progress=False)
    with pytest.raises(CheckpointError, match=re.escape("missing ['policy.safetensors', 'policy.json']")):
        load_policy(next((tmp_path / "run").glob("checkpoint-*")))


def test_report_to_tensorboard_gets_every_metric(tmp_path, make_config, logged_to_tensorboard):
    CPUEngine(make_config(tmp_path, num_steps=80, report_to="tensorboard")).run(progress=False)
    logged_to_tensorboard(tmp_path / "run")
