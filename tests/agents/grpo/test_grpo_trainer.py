"""GRPOTrainer: params move, exact resume, KL reference, config/checkpoint errors, a learning check."""

import json
from typing import Any

import gymnasium as gym
import pytest
import torch
from gymnasium import spaces

from worldgym.agents.grpo import GRPOConfig, GRPOTrainer
from worldgym.agents.grpo.trainer import EPISODE_SUCCESS_KEY
from worldgym.agents.llm.checkpoint import CheckpointError
from worldgym.agents.llm.models import build_tiny_model
from worldgym.envs.math_qa import MathQAEnv
from worldgym.jsonl import read_jsonl


def _config(tmp_path, **overrides: Any) -> GRPOConfig:
    settings = dict(
        num_steps=2,
        prompts_per_step=2,
        group_size=4,
        max_new_tokens=8,
        eval_every=0,
        eval_episodes=4,
        progress=False,
        output_dir=str(tmp_path / "run"),
        learning_rate=1e-2,
        minibatch_size=4,
    )
    return GRPOConfig(**{**settings, **overrides})


def _trainer(tmp_path, model, tokenizer, **overrides):
    return GRPOTrainer(
        _config(tmp_path, **overrides),
        model=model,
        tokenizer=tokenizer,
        make_env=lambda: MathQAEnv(num_problems=30),
        make_eval_env=lambda: MathQAEnv("test", num_problems=8),
    )


class SevensEnv(gym.Env):
    """Reward = share of '7' characters in the reply: a task a tiny random model can learn in a few steps."""

    observation_space = spaces.Text(64)
    action_space = spaces.Text(256)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Say 7.", {}

    def step(self, action):
        return "", action.count("7") / max(len(action), 1), True, False, {}


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_training_changes_every_trainable_parameter(tmp_path, model, tokenizer, finetune):
    env = lambda: SevensEnv()
    trainer = GRPOTrainer(
        _config(tmp_path, finetune=finetune, kl_coef=0.05),
        model=model,
        tokenizer=tokenizer,
        make_env=env,
        make_eval_env=env,
    )
    before = {name: p.detach().clone() for name, p in trainer.trainable.items()}
    frozen = {
        name: p.detach().clone() for name, p in trainer.policy.named_parameters() if not p.requires_grad
    }
    history = trainer.train()
    assert len(history) == 2 and trainer.step == 2
    unchanged = [name for name, p in trainer.trainable.items() if torch.equal(p, before[name])]
    assert not unchanged
    assert all(torch.equal(p, frozen[n]) for n, p in trainer.policy.named_parameters() if n in frozen)
    assert (finetune == "lora") == all("lora_" in name for name in trainer.trainable)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert {"loss/kl", "loss/entropy", "loss/clip_fraction", "perf/train_tokens_per_s"} <= set(
        json.loads(lines[0])
    )


def test_resume_continues_the_same_run_exactly(tmp_path, tokenizer):
    def make(name: str, num_steps: int):
        model = build_tiny_model(tokenizer, seed=0)
        return _trainer(tmp_path / name, model, tokenizer, num_steps=num_steps, dynamic_sampling=True,
                        max_resample_rounds=1)

    straight = make("a", 3)
    straight.train()
    first = make("b", 2)
    first.train()
    resumed = make("c", 3)
    log = resumed.output_dir / "metrics.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4')  # logged after the checkpoint, then torn
    resumed.load(tmp_path / "b" / "run" / "checkpoint-last")
    assert [r["step"] for r in read_jsonl(log)] == [1, 2]
    assert resumed.step == 2
    resumed.train()
    for name, param in straight.trainable.items():
        assert torch.equal(param, resumed.trainable[name]), name
    assert straight.history[-1]["rollout/reward_mean"] == resumed.history[-1]["rollout/reward_mean"]


def test_resume_latest_takes_checkpoint_last_when_it_is_newer_than_the_numbered_ones(tmp_path, tokenizer):
    def make():
        return _trainer(tmp_path, build_tiny_model(tokenizer, seed=0), tokenizer, num_steps=3, checkpoint_every=2)

    assert make().resume_latest() is None  # a fresh run
    make().train()  # checkpoint-2, then checkpoint-last at step 3
    resumed = make()
    assert resumed.resume_latest().name == "checkpoint-last" and resumed.step == 3
    assert [r["step"] for r in resumed.history] == [1, 2, 3]


def test_training_in_chunks_equals_one_call(tmp_path, tokenizer):
    """train(until=k) then train(): the same weights and log as one train() (a script acts between chunks)."""
    def make(name: str):
        return _trainer(tmp_path / name, build_tiny_model(tokenizer, seed=0), tokenizer, num_steps=3,
                        eval_every=2, dynamic_sampling=True, max_resample_rounds=1)

    straight, chunked = make("a"), make("b")
    straight.train()
    evaluations = []
    evaluate = chunked.evaluate
    chunked.evaluate = lambda *a, **k: evaluations.append(chunked.step) or evaluate(*a, **k)
    assert chunked.train(until=0) == [] and chunked.step == 0  # the step-0 validation only
    chunked.train(until=2)
    assert chunked.step == 2
    chunked.train(until=10)  # never past num_steps
    assert chunked.step == 3 and evaluations == [0, 2]  # the step-0 validation is not repeated
    for name, param in straight.trainable.items():
        assert torch.equal(param, chunked.trainable[name]), name
    logged = [[{k: v for k, v in r.items() if not k.startswith("time/") and not k.startswith("perf/")}
               for r in read_jsonl(t.output_dir / "metrics.jsonl")] for t in (straight, chunked)]
    assert logged[0] == logged[1] and [r["step"] for r in logged[0]] == [0, 1, 2, 3]


def test_a_shared_step0_validation_replaces_the_computed_one(tmp_path, tokenizer):
    """log_initial_validation(row) then train(): no step-0 evaluation, and the same log as a run that made it."""
    def make(name: str):
        return _trainer(tmp_path / name, build_tiny_model(tokenizer, seed=0), tokenizer, num_steps=2, eval_every=2)

    straight, shared = make("a"), make("b")
    straight.train()
    step0 = read_jsonl(straight.output_dir / "metrics.jsonl")[0]
    successes = step0[EPISODE_SUCCESS_KEY]  # each validation episode's success, in seed order
    assert len(successes) == 4 and sum(successes) / 4 == step0["eval/success_rate"]
    evaluations = []
    evaluate = shared.evaluate
    shared.evaluate = lambda *a, **k: evaluations.append(shared.step) or evaluate(*a, **k)
    shared.log_initial_validation({k: v for k, v in step0.items() if k != "step"})
    shared.train()
    assert evaluations == [2]  # only the last step's validation was computed
    logged = [[{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))}
               for r in read_jsonl(t.output_dir / "metrics.jsonl")] for t in (straight, shared)]
    assert logged[0] == logged[1] and EPISODE_SUCCESS_KEY in logged[1][-1]
    with pytest.raises(ValueError, match="only a fresh run takes a step-0 validation"):
        shared.log_initial_validation(step0)


def test_lora_reference_is_the_base_model(tmp_path, model, tokenizer):
    trainer = _trainer(tmp_path, model, tokenizer, kl_coef=0.1)
    ids = torch.tensor([tokenizer("Tom has 3 pens.")["input_ids"]])
    with torch.no_grad():
        for p in trainer.trainable.values():  # move the adapter away from its B=0 init
            p.add_(0.05)
        ref = trainer._reference_logprobs(ids, torch.ones_like(ids), torch.ones_like(ids[:, 1:]))
        base = trainer.policy.get_base_model()
        with trainer.policy.disable_adapter():
            expected = torch.log_softmax(base(ids).logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        policy = torch.log_softmax(trainer.policy(ids).logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[
            ..., 0
        ]
    assert torch.allclose(ref, expected, atol=1e-5) and not torch.allclose(ref, policy, atol=1e-3)
    assert trainer.reference is None  # no second copy in memory


def test_validation_logs_warm_start_and_steps(tmp_path, model, tokenizer):
    trainer = _trainer(tmp_path, model, tokenizer, num_steps=2, eval_every=2)
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert "eval/success_rate" in records[0] and "eval/success_rate" in records[2]


def _sevens_trainer(tmp_path, tokenizer, make_env, **trainer_kwargs) -> GRPOTrainer:
    """Full fine-tune of a fresh tiny model for 12 small steps on a one-turn env (the learning checks)."""
    config = _config(tmp_path, num_steps=12, prompts_per_step=2, group_size=8, finetune="full",
                     learning_rate=3e-3, minibatch_size=16)
    return GRPOTrainer(config, model=build_tiny_model(tokenizer, seed=3), tokenizer=tokenizer, make_env=make_env,
                       make_eval_env=make_env, **trainer_kwargs)


def test_grpo_learns_a_dense_reward(tmp_path, tokenizer):
    trainer = _sevens_trainer(tmp_path, tokenizer, SevensEnv)
    history = trainer.train()
    rewards = [m["rollout/reward_mean"] for m in history]
    assert sum(rewards[-3:]) / 3 > 2 * sum(rewards[:3]) / 3 + 0.02


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"group_size": 1}, r"group_size=1 is invalid: use >= 2"),
        ({"loss_aggregation": "mean"}, r"loss_aggregation='mean' is invalid: use one of"),
        ({"finetune": "qlora"}, r"finetune='qlora' is invalid: use one of \['lora', 'full'\]"),
        ({"eps_high": 1.5}, r"eps_high=1.5 is invalid: use a number in \(0, 1\)"),
        ({"temperature": 0.0}, r"temperature=0.0 is invalid: use > 0"),
        ({"kl_coef": -1}, r"kl_coef=-1 is invalid: use a number >= 0"),
        ({"overlong_buffer": 100}, r"overlong_buffer=100 is invalid"),
        ({"device": "tpu"}, r"device='tpu' is invalid: use 'cpu', 'cuda' or 'cuda:N'"),
        ({"num_steps": 2.5}, r"num_steps=2.5 is invalid: use an integer >= 1"),
    ],
)
def test_config_errors_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**overrides)


def test_corrupt_or_mismatched_checkpoint_is_refused(tmp_path, model, tokenizer):
    trainer = _trainer(tmp_path, model, tokenizer, num_steps=1)
    path = trainer.save(tmp_path / "ckpt")
    full = GRPOTrainer(
        _config(tmp_path, finetune="full"),
        model=model,
        tokenizer=tokenizer,
        make_env=lambda: MathQAEnv(num_problems=5),
    )
    with pytest.raises(CheckpointError, match="does not fit this model"):
        full.load(path)
    (path / "state.json").write_text("{broken")
    with pytest.raises(CheckpointError, match="state.json is corrupt"):
        trainer.load(path)
    before = {name: p.detach().clone() for name, p in trainer.trainable.items()}
    assert all(
        torch.equal(p, before[n]) for n, p in trainer.trainable.items()
    )  # refused before touching state


def test_custom_engine_factory_gets_the_policy(tmp_path, model, tokenizer):
    from worldgym.agents.llm.engines import HFEngine, ShardedEngine

    seen = []

    def make_engine(policy):
        seen.append(policy)
        return ShardedEngine([HFEngine(policy, tokenizer.pad_token_id, [tokenizer.eos_token_id])] * 2)

    trainer = GRPOTrainer(
        _config(tmp_path, num_steps=1),
        model=model,
        tokenizer=tokenizer,
        make_env=lambda: MathQAEnv(num_problems=10),
        make_engine=make_engine,
    )
    assert seen == [trainer.policy] and trainer.collector.engine is trainer.engine
    assert len(trainer.train()) == 1


class SilentSevensEnv(SevensEnv):
    """Pays nothing: only a shaping ``reward_fn`` reading the replies can teach the '7' task."""

    def step(self, action):
        return "", 0.0, True, False, {}


def test_reward_fn_shapes_the_training_reward(tmp_path, tokenizer):
    def share_of_sevens(episode) -> float:
        reply = episode.turns[0].action
        return reply.count("7") / max(len(reply), 1)

    trainer = _sevens_trainer(tmp_path, tokenizer, SilentSevensEnv, reward_fn=share_of_sevens)
    history = trainer.train()
    shaped = [m["rollout/shaped_reward_mean"] for m in history]
    assert all(m["rollout/reward_mean"] == 0.0 for m in history)  # metrics keep the env's own reward
    assert sum(shaped[-3:]) / 3 > 2 * sum(shaped[:3]) / 3 + 0.02
    assert 0.0 <= trainer.evaluate(num_episodes=4)["eval/shaped_reward_mean"] <= 1.0


def test_episode_rewards_applies_reward_fn_before_the_overlong_penalty():
    from worldgym.agents.grpo import episode_rewards
    from worldgym.agents.llm.rollout import Episode

    episodes = [Episode([1, 2, 3], [0, 1, 1], [0.0] * 3, 1, 0, 0, reward=r) for r in (0.0, 1.0)]
    task, shaped = episode_rewards(episodes, 10, reward_fn=lambda e: e.reward + 0.5)
    assert task.tolist() == [0.0, 1.0] and shaped.tolist() == [0.5, 1.5]
    _, penalised = episode_rewards(episodes, 2, overlong_buffer=1, reward_fn=lambda e: 2.0)
    assert penalised.tolist() == [1.0, 1.0]  # 2 model tokens, 1 past the buffer start of 2 - 1: penalty -1


class NumberedSevensEnv(SevensEnv):
    """SevensEnv whose prompt names the seed: groups have prompts of their own."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return f"Pens: {seed % 1000}. Say 7.", {}


def test_sharing_the_prompt_prefix_changes_speed_not_results(tmp_path, tokenizer):
    """One step with the group's prompt run once (engine prefill and training pass) equals one step without."""
    states = []
    for share in (True, False):
        trainer = GRPOTrainer(
            _config(
                tmp_path / str(share),
                num_steps=1,
                minibatch_size=8,
                max_new_tokens=6,
                kl_coef=0.1,
                share_prompt_prefix=share,
                min_shared_prefix=4,
            ),
            model=build_tiny_model(tokenizer, seed=0),
            tokenizer=tokenizer,
            make_env=NumberedSevensEnv,
            make_eval_env=NumberedSevensEnv,
        )
        with torch.no_grad():
            for p in trainer.trainable.values():  # move the adapters off their B=0 init: policy != reference
                p.add_(0.05)
        metrics = trainer.train_step()
        states.append((metrics, {name: p.detach().clone() for name, p in trainer.trainable.items()}))
    (shared, shared_params), (plain, plain_params) = states
    assert shared["rollout/model_tokens"] == plain["rollout/model_tokens"]
    assert plain["loss/grad_norm"] > 1e-3 and plain["loss/kl"] > 1e-4  # policy and KL terms both pull
    assert shared["loss/total"] == pytest.approx(plain["loss/total"], abs=1e-5)
    for name, value in shared_params.items():
        assert torch.allclose(value, plain_params[name], atol=1e-5), name


def test_a_model_with_no_trainable_tensor_is_refused_with_the_reason(tmp_path, tokenizer):
    model = build_tiny_model(tokenizer, seed=0).requires_grad_(False)  # as peft's merge_and_unload leaves it
    with pytest.raises(ValueError, match="no trainable tensor .*requires_grad_"):
        GRPOTrainer(_config(tmp_path, finetune="full"), model=model, tokenizer=tokenizer)


@pytest.mark.parametrize("dynamic_sampling", [True, False])
def test_a_step_with_no_reward_difference_skips_the_update(tmp_path, model, tokenizer, dynamic_sampling):
    """Every sampled answer scores the same: every advantage is 0, so the update (a zero loss) is skipped and no
    weight moves, AdamW's decay included; with a KL term there is something to learn and it runs."""
    trainer = GRPOTrainer(_config(tmp_path, num_steps=1, weight_decay=0.1, dynamic_sampling=dynamic_sampling),
                          model=model, tokenizer=tokenizer, make_env=lambda: MathQAEnv(num_problems=30),
                          reward_fn=lambda episode: 0.5)
    before = {name: p.detach().clone() for name, p in trainer.trainable.items()}
    metrics = trainer.train_step()
    assert metrics["loss/skipped_update"] == 1.0 and "loss/total" not in metrics
    assert all(torch.equal(p, before[name]) for name, p in trainer.trainable.items())
    with_kl = GRPOTrainer(_config(tmp_path / "kl", num_steps=1, kl_coef=0.1), model=build_tiny_model(tokenizer, seed=0),
                          tokenizer=tokenizer, make_env=lambda: MathQAEnv(num_problems=30),
                          reward_fn=lambda episode: 0.5)
    assert "loss/skipped_update" not in with_kl.train_step()


def test_a_larger_first_round_samples_the_groups_at_once_and_keeps_one_batch(tmp_path, model, tokenizer,
                                                                            parity_reward):
    trainer = _trainer(tmp_path, model, tokenizer, num_steps=1, dynamic_sampling=True, max_resample_rounds=1,
                       first_round_prompts=4)
    trainer.reward_fn = parity_reward
    submitted: list[int] = []
    submit = trainer._submit_round
    trainer._submit_round = lambda first, prompts: submitted.append(prompts) or submit(first, prompts)
    episodes, metrics = trainer.collect_batch()
    assert submitted[0] == 4  # one round of 4 groups where two rounds of 2 would run
    assert len(episodes) <= 2 * 4  # at most prompts_per_step groups are trained
    assert metrics["rollout/episodes_sampled"] == sum(submitted) * 4
    assert len({e.group_id for e in episodes}) == len(episodes) // 4
    without = _trainer(tmp_path / "off", build_tiny_model(tokenizer, seed=0), tokenizer, num_steps=1,
                       first_round_prompts=4)  # no dynamic sampling: every sampled group is trained
    assert without._first_round_prompts == 2


def test_first_round_prompts_must_not_be_negative():
    with pytest.raises(ValueError, match="first_round_prompts=-1 is invalid"):
        GRPOConfig(first_round_prompts=-1)
