"""``auxiliary_grad_ratio``: an auxiliary loss's gradient capped at a multiple of the policy's, on the tensors
both reach; a cap it never reaches changes nothing. ``auxiliary_projection``: the part of it that points against
the policy's gradient removed first (PCGrad). Ranks that disagree on whether the auxiliary loss has a gradient
are refused."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.grpo.auxiliary import SINGLE_PROCESS, LossShard
from worldgym.agents.grpo.learner import SingleProcess
from worldgym.agents.grpo.step import AuxiliaryGraphError
from worldgym.agents.llm.rollout import Episode
from worldgym.errors import WorldgymError


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """One torch thread (the shared fixture)."""


class FixedTextLoss:
    """An auxiliary objective on the policy's own tensors: ``weight`` x the cross-entropy of a fixed text."""

    def __init__(self, model: torch.nn.Module, token_ids: list[int], weight: float):
        self.model, self.ids, self.weight = model, torch.tensor([token_ids]), weight
        self.policy_weight = 1.0

    def begin_step(self, episodes: Sequence[Episode], step: int) -> None:
        pass

    def loss(self, rows: Sequence[int], shard: LossShard = SINGLE_PROCESS) -> tuple[torch.Tensor, dict]:
        logits = self.model(input_ids=self.ids).logits[0, :-1]
        return self.weight * torch.nn.functional.cross_entropy(logits, self.ids[0, 1:]), {}

    def end_step(self) -> dict[str, float]:
        return {}


def _step(tmp_path, reward, name: str, weight: float, **overrides
          ) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    config = GRPOConfig(prompts_per_step=2, group_size=3, max_new_tokens=12, minibatch_size=6, learning_rate=1e-2,
                        grad_clip=1e9, num_steps=1, eval_every=0, progress=False, output_dir=str(tmp_path / name),
                        **overrides)
    trainer = GRPOTrainer(config, reward_fn=reward)
    trainer.auxiliary_loss = FixedTextLoss(trainer.policy, trainer.tokenizer("Tom has 3 pens.")["input_ids"], weight)
    trainer.optimizer = torch.optim.SGD(list(trainer.trainable.values()), lr=config.learning_rate)
    metrics = trainer.train_step()
    return metrics, {name: p.detach().clone() for name, p in trainer.trainable.items()}


def test_a_cap_never_reached_changes_nothing(tmp_path, parity_reward):
    plain, plain_weights = _step(tmp_path, parity_reward, "plain", weight=1.0)
    loose, loose_weights = _step(tmp_path, parity_reward, "loose", weight=1.0, auxiliary_grad_ratio=1e9)
    assert loose["aux/grad_scale"] == 1.0 and loose["aux/grad_norm_ratio"] > 0
    assert loose["loss/total"] == pytest.approx(plain["loss/total"], rel=1e-6)
    for name, tensor in plain_weights.items():
        torch.testing.assert_close(loose_weights[name], tensor, rtol=1e-5, atol=1e-7)


def test_the_cap_scales_the_auxiliary_gradient_to_the_ratio(tmp_path, parity_reward):
    # the policy's update alone (the auxiliary loss weighted 0), and with an auxiliary loss 100x heavier
    _policy, policy_weights = _step(tmp_path, parity_reward, "policy", weight=0.0)
    start = _initial_weights(tmp_path)
    capped, capped_weights = _step(tmp_path, parity_reward, "capped", weight=100.0, auxiliary_grad_ratio=0.5)
    _uncapped, uncapped_weights = _step(tmp_path, parity_reward, "uncapped", weight=100.0)
    assert capped["aux/grad_norm_ratio"] > 0.5 and capped["aux/grad_scale"] == pytest.approx(
        0.5 / capped["aux/grad_norm_ratio"])
    lr = 1e-2  # SGD: each update is -lr * gradient
    policy_step = torch.cat([(policy_weights[n] - start[n]).flatten() for n in start]) / -lr
    capped_aux = torch.cat([(capped_weights[n] - policy_weights[n]).flatten() for n in start]) / -lr
    uncapped_aux = torch.cat([(uncapped_weights[n] - policy_weights[n]).flatten() for n in start]) / -lr
    # the auxiliary part of the capped update is the uncapped one scaled, at half the policy gradient's norm
    torch.testing.assert_close(capped_aux, capped["aux/grad_scale"] * uncapped_aux, rtol=1e-3, atol=1e-6)
    assert float(capped_aux.norm()) == pytest.approx(0.5 * float(policy_step.norm()), rel=1e-3)


@pytest.mark.parametrize("weight", [100.0, -100.0])  # this text's gradient happens to agree with the policy's
def test_the_projection_removes_only_the_part_against_the_policy_gradient(tmp_path, parity_reward, weight):
    _policy, policy_weights = _step(tmp_path, parity_reward, "policy", weight=0.0)
    start = _initial_weights(tmp_path)
    projected, projected_weights = _step(tmp_path, parity_reward, "projected", weight=weight,
                                         auxiliary_projection=True)
    _plain, plain_weights = _step(tmp_path, parity_reward, "plain", weight=weight)
    lr = 1e-2  # SGD: each update is -lr * gradient
    policy_step = torch.cat([(policy_weights[n] - start[n]).flatten() for n in start]) / -lr
    plain_aux = torch.cat([(plain_weights[n] - policy_weights[n]).flatten() for n in start]) / -lr
    projected_aux = torch.cat([(projected_weights[n] - policy_weights[n]).flatten() for n in start]) / -lr
    cosine = float(plain_aux @ policy_step / (plain_aux.norm() * policy_step.norm()))
    assert projected["aux/grad_cosine"] == pytest.approx(cosine, abs=1e-3) and projected["aux/grad_scale"] == 1.0
    assert (cosine > 0) == (weight > 0)  # both cases: left alone, and projected
    expected = plain_aux - min(0.0, float(plain_aux @ policy_step)) / float(policy_step @ policy_step) * policy_step
    torch.testing.assert_close(projected_aux, expected, rtol=1e-3, atol=1e-5)
    assert float(projected_aux @ policy_step) >= -1e-3 * float(projected_aux.norm() * policy_step.norm())


def _initial_weights(tmp_path) -> dict[str, torch.Tensor]:
    config = GRPOConfig(prompts_per_step=2, group_size=3, max_new_tokens=12, minibatch_size=6, num_steps=1,
                        eval_every=0, progress=False, output_dir=str(tmp_path / "init"))
    return {name: p.detach().clone() for name, p in GRPOTrainer(config).trainable.items()}


def test_the_cap_must_be_positive_and_works_with_every_learner():
    with pytest.raises(ValueError, match="auxiliary_grad_ratio=0 is invalid"):
        GRPOConfig(auxiliary_grad_ratio=0)
    for learner in ("ddp", "fsdp"):  # their norms and dot products are summed over the ranks
        config = GRPOConfig(auxiliary_grad_ratio=0.5, auxiliary_projection=True, learner=learner,
                            share_prompt_prefix=False)
        assert (config.auxiliary_grad_ratio, config.auxiliary_projection) == (0.5, True)


class _RankZeroOfTwo(SingleProcess):
    """Rank 0 of two whose peer adds nothing to any sum: as if the peer's auxiliary loss had no graph."""

    world_size = 2

    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        return list(rows.tensor_split(self.world_size))


def test_ranks_that_disagree_on_the_auxiliary_graph_are_refused_not_left_waiting(tmp_path, parity_reward):
    config = GRPOConfig(prompts_per_step=2, group_size=3, max_new_tokens=12, minibatch_size=6, num_steps=1,
                        eval_every=0, progress=False, output_dir=str(tmp_path), auxiliary_grad_ratio=0.5)
    trainer = GRPOTrainer(config, reward_fn=parity_reward)
    trainer.auxiliary_loss = FixedTextLoss(trainer.policy, trainer.tokenizer("Tom has 3 pens.")["input_ids"], 1.0)
    prepared = trainer.prepare(trainer.collect_batch()[0])
    with pytest.raises(AuxiliaryGraphError, match=re.escape("differentiable on 1 of 2 ranks")) as raised:
        trainer.update(prepared, learner=_RankZeroOfTwo())
    assert isinstance(raised.value, WorldgymError) and isinstance(raised.value, RuntimeError)
