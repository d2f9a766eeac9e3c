"""Z-token PPO policy export: the policy alone, loadable by the checkpoint's own loader, same weights."""

from __future__ import annotations

import torch

from worldgym.agents.ztoken_ppo import ZTokenPPOConfig, ZTokenPPOTrainer
from worldgym.agents.ztoken_ppo.checkpoint import load_policy
from worldgym.export import export


def test_the_export_holds_the_trained_policy_and_no_training_state(tmp_path, env_kwargs, tiny_model):
    config = ZTokenPPOConfig(model=tiny_model, env_kwargs=env_kwargs, num_envs=4, episodes_per_rollout=8,
                             num_steps=1, update_epochs=1, num_minibatches=2, eval_episodes=0, progress=False,
                             output_dir=str(tmp_path / "run"))
    trainer = ZTokenPPOTrainer(config)
    trainer.train()
    out = export(tmp_path / "run", tmp_path / "export", checkpoint="last")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "policy.json", "policy.safetensors"]
    policy, _, num_z_tokens = load_policy(out)
    assert num_z_tokens == env_kwargs["num_z_tokens"]
    trained = trainer.policy.state_dict()
    assert all(torch.equal(policy.state_dict()[k], v) for k, v in trained.items())


def test_report_to_tensorboard_gets_every_metric(tmp_path, env_kwargs, tiny_model, logged_to_tensorboard):
    config = ZTokenPPOConfig(model=tiny_model, env_kwargs=env_kwargs, num_envs=4, episodes_per_rollout=8,
                             num_steps=2, update_epochs=1, num_minibatches=2, eval_episodes=4, eval_every=1,
                             progress=False, report_to="tensorboard", output_dir=str(tmp_path / "run"))
    trainer = ZTokenPPOTrainer(config)
    trainer.train()
    trainer.close()
    logged_to_tensorboard(tmp_path / "run")
