"""The echo loss: the env's tool results learned in the rollout's own sequence, from the policy's forward."""

from __future__ import annotations

import pytest
import torch

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.grpo.echo import ECHO_SUMS, EchoTargets, echo_means, echo_turns
from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.rollout import Episode, Turn

from .conftest import PhoningEngine, make_csr_env


def _config(tmp_path, **overrides):
    settings = dict(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, max_turns=3,
                    num_steps=1, prompts_per_step=2, group_size=2, max_new_tokens=24, eval_every=0,
                    progress=False, output_dir=str(tmp_path / "run"), seed=3)
    return GRPOConfig(**{**settings, **overrides})


def test_echo_turns_skip_errors_imagined_and_other_tools():
    turns = [Turn("a", "ok", 0.0, "stop", {"tool": "make_phone_call"}, content_span=(5, 9)),
             Turn("b", "err", 0.0, "stop", {"tool": "make_phone_call", "response_type": "invalid_call"},
                  content_span=(12, 14)),
             Turn("c", "x", 0.0, "stop", {"tool": "search_company"}, content_span=(16, 20)),
             Turn("d", "y", 0.0, "stop", {"tool": "make_phone_call", "imagined": True}, content_span=(22, 25)),
             Turn("e", "", 0.0, "stop", {"tool": "make_phone_call"})]
    episode = Episode(list(range(30)), [0] * 30, [0.0] * 30, 2, 0, 0, turns=turns)
    assert [t.action for t in echo_turns(episode, ("make_phone_call",))] == ["a"]
    assert [t.action for t in echo_turns(episode)] == ["a", "c"]
    segments = EchoTargets.from_episodes([episode, episode]).segments([1, 0], width=30)
    assert segments[0, 4:8].tolist() == [0] * 4 and segments[0, 15:19].tolist() == [1] * 4
    assert segments[1, 4:8].tolist() == [2] * 4 and int((segments >= 0).sum()) == 16


def _trainer(config, tokenizer):
    return GRPOTrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer,
                       make_env=make_csr_env, make_engine=lambda policy: PhoningEngine(tokenizer))


def test_echo_off_is_plain_dapo_and_on_changes_the_update(tmp_path, csr_tokenizer):
    plain = _trainer(_config(tmp_path / "a"), csr_tokenizer)
    episodes, _ = plain.collect_batch()
    prepared = plain.prepare(episodes)
    assert plain.echo_targets is None
    rows = torch.arange(len(episodes))
    without = plain.minibatch_loss(prepared.batch, prepared.advantages, rows)
    assert without.echo is None and not set(ECHO_SUMS) & set(without.metrics)

    echo = _trainer(_config(tmp_path / "b", echo_coef=0.1), csr_tokenizer)
    echo.policy.load_state_dict(plain.policy.state_dict())
    prepared = echo.prepare(episodes)
    assert echo.echo_targets.count(rows) == sum(len(echo_turns(e)) for e in episodes) > 0
    # the targets are the tool results' own text: decoded, each is its observation
    for episode in episodes:
        for turn in echo_turns(episode):
            assert csr_tokenizer.decode(episode.token_ids[slice(*turn.content_span)]).strip() == \
                turn.observation.strip()
    terms = echo.minibatch_loss(prepared.batch, prepared.advantages, rows)
    # the policy's terms are the same numbers whether or not the same forward also scores the observations
    torch.testing.assert_close(terms.policy.loss, without.policy.loss)
    torch.testing.assert_close(terms.entropy, without.entropy)
    means = echo_means(terms.metrics)
    assert terms.echo.item() == pytest.approx(0.1 * means["loss/echo"], rel=1e-5)
    assert means["echo/observations"] == echo.echo_targets.count(rows)
    # halves of the minibatch, each normalised by the whole minibatch's observations, add up to the whole
    halves = [echo.minibatch_loss(prepared.batch, prepared.advantages, part, minibatch_rows=rows).echo
              for part in rows.split(2)]
    torch.testing.assert_close(sum(halves), terms.echo)
    metrics = echo.update(prepared)
    assert metrics["loss/echo"] > 0 and 0 <= metrics["echo/token_accuracy"] <= 1


def test_echo_metrics_of_a_minibatch_do_not_depend_on_its_microbatches(tmp_path, csr_tokenizer):
    """Observation means over the whole minibatch, not the parts' means weighted by their action tokens."""
    whole = _trainer(_config(tmp_path / "a", echo_coef=0.1, minibatch_size=4), csr_tokenizer)
    episodes, _ = whole.collect_batch()
    metrics = {}
    for name, microbatch_size in (("whole", 0), ("micro", 1)):
        trainer = _trainer(_config(tmp_path / name, echo_coef=0.1, minibatch_size=4,
                                   microbatch_size=microbatch_size), csr_tokenizer)
        trainer.policy.load_state_dict(whole.policy.state_dict())
        metrics[name] = trainer.update(trainer.prepare(episodes))
    assert metrics["whole"]["echo/observations"] == sum(len(echo_turns(e)) for e in episodes) > 0
    for key in ("loss/echo", "echo/token_accuracy", "echo/observations"):
        assert metrics["micro"][key] == pytest.approx(metrics["whole"][key], rel=1e-5), key


def test_echo_config_is_checked(tmp_path):
    with pytest.raises(ValueError, match="echo_coef"):
        _config(tmp_path, echo_coef=-1.0)
    with pytest.raises(ValueError, match="echo_tools"):
        _config(tmp_path, echo_tools="make_phone_call")


def test_dual_lora_echo_mode_trains_one_adapter_and_reports_the_world_model(tmp_path, csr_tokenizer):
    from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer

    config = DualLoRAConfig(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1},
                            eval_env_kwargs={"split": "validation"}, max_turns=3, num_steps=1, prompts_per_step=2,
                            group_size=2, max_new_tokens=40, eval_every=1, eval_episodes=2, progress=False,
                            transfer="echo", output_dir=str(tmp_path / "run"))
    assert config.adapter_names == ("policy",) and config.echo_weight == 0.1
    assert DualLoRAConfig(transfer="separate").echo_weight == 0.0
    trainer = DualLoRATrainer(config, model=build_tiny_model(csr_tokenizer, seed=0), tokenizer=csr_tokenizer,
                              make_env=make_csr_env, make_engine=lambda policy: PhoningEngine(csr_tokenizer))
    assert trainer.auxiliary_loss is None
    before = {n: p.detach().clone() for n, p in trainer.trainable.items()}
    (metrics,) = trainer.train()
    assert metrics["echo/observations"] > 0 and "loss/world_model" not in metrics
    assert any(not torch.equal(before[n], p) for n, p in trainer.trainable.items())
    assert metrics["eval/wm_calls"] > 0 and 0 <= metrics["eval/wm_token_accuracy"] <= 1
    assert "eval/wm_invalid_number/exact_match" in metrics
