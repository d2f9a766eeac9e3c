"""Imagined phone calls: the world model answers the phone in a share of the groups; lookups stay the env's."""

from __future__ import annotations

import pytest

from worldgym.agents.dual_lora import DualLoRAConfig, DualLoRATrainer
from worldgym.agents.dual_lora.imagination import (
    UNRECOGNISED,
    PhoneCallImagination,
    _imagined_step,
    _tool_turn_opening,
    imagined_groups,
    read_reply,
    reply_opening,
    reply_stops,
)
from worldgym.agents.dual_lora.world_model import phone_call_examples
from worldgym.agents.grpo.trainer import _rollout_metrics
from worldgym.agents.llm.models import build_tiny_model
from worldgym.agents.llm.rollout import Episode, Turn

from .conftest import PhoningEngine, make_csr_env


def _trainer(tmp_path, tokenizer, **overrides):
    settings = dict(env_id="CSRPhone-v1", env_kwargs={"difficulty": 1}, max_turns=3,
                    num_steps=1, prompts_per_step=2, group_size=2, max_new_tokens=40, eval_every=0,
                    progress=False, imagined_fraction=0.5, imagined_reply_tokens=12,
                    output_dir=str(tmp_path / "run"))
    config = DualLoRAConfig(**{**settings, **overrides})
    return DualLoRATrainer(config, model=build_tiny_model(tokenizer, seed=0), tokenizer=tokenizer,
                           make_env=make_csr_env, make_engine=lambda policy: PhoningEngine(tokenizer))


def test_imagined_step_reads_the_reply():
    done = _imagined_step("Perfect, your request to close the account is complete. Thanks for calling!", 3,
                          "auth_request")
    assert done[1:4] == (1.0, True, False)
    assert done[4] | {} == {"tool": "make_phone_call", "response_type": "task_complete", "imagined": True,
                            "success": True, "task_complete": True, "turn": 3, "real_response_type": "auth_request"}
    garbled = _imagined_step("blah blah", 2, None)
    assert garbled[1:3] == (0.0, False) and garbled[4]["response_type"] == UNRECOGNISED
    assert "real_response_type" not in garbled[4]


def test_imagined_step_reads_a_loose_reply_only_by_nearest_template():
    loose = "Great news, I was able to cancel the plan. Is there anything I can do?"  # no template whole
    assert _imagined_step(loose, 4, None)[4]["response_type"] == UNRECOGNISED
    done = _imagined_step(loose, 4, None, "nearest")
    assert done[1:3] == (1.0, True) and done[4]["response_type"] == "task_complete"
    assert read_reply("blah blah", "nearest") == UNRECOGNISED


def test_imagined_successes_are_confirmed_by_the_envs_unseen_answer_to_their_last_call():
    done = "Perfect, your request to close the account is complete. Thanks for calling!"

    def episode(*steps: tuple[str, str | None]) -> Episode:
        results = [_imagined_step(text, i + 1, real) for i, (text, real) in enumerate(steps)]
        turns = [Turn(action="call", observation=r[0], reward=r[1], finish_reason="stop", info=r[4]) for r in results]
        return Episode(token_ids=[1, 2], action_mask=[0, 1], old_logprobs=[0.0, -1.0], prompt_length=1, group_id=0,
                       env_seed=0, reward=results[-1][1], turns=turns, terminated=results[-1][2],
                       success=bool(results[-1][2]), imagined=True)

    confirmed = episode(("blah", "auth_request"), (done, "task_complete"))
    false_success = episode((done, "auth_failed"))  # the env would have refused this call
    unjudged = episode((done, None))  # the env's copy had ended: not counted
    failed = episode(("blah", "auth_request"))
    metrics = _rollout_metrics([confirmed, false_success, unjudged, failed])
    assert metrics["rollout/imagined_success_rate"] == 0.75
    assert metrics["rollout/imagined_success_confirmed_rate"] == 0.5
    assert metrics["rollout/imagined_type_accuracy"] == 0.25  # 1 of the 4 judged steps
    assert "rollout/imagined_success_confirmed_rate" not in _rollout_metrics([failed])


def test_imagined_reply_reading_is_checked():
    with pytest.raises(ValueError, match="imagined_reply_reading"):
        DualLoRAConfig(imagined_reply_reading="fuzzy")


@pytest.mark.parametrize("transfer", ["separate", "echo"])
def test_imagined_groups_phone_the_world_model_not_the_env(tmp_path, csr_tokenizer, transfer):
    trainer = _trainer(tmp_path, csr_tokenizer, transfer=transfer)
    episodes, metrics = trainer.collect_batch()
    imagined = [e for e in episodes if e.imagined]
    assert [e.group_id for e in imagined] == [0, 0] and imagined_groups(2, 0.5) == 1
    assert metrics["rollout/imagined_episodes"] == 2 and metrics["rollout/real_episodes"] == 2
    assert metrics["rollout/real_episodes_sampled"] == 2 and metrics["rollout/episodes_sampled"] == 4
    for episode in imagined:
        calls = [t for t in episode.turns if t.info.get("tool") == "make_phone_call"]
        assert calls and all(t.info["imagined"] for t in calls)
        # the unseen copy of the env answered the same call: an unknown number
        assert calls[0].info["real_response_type"] == "invalid_number"
        assert episode.turns[0].info["response_type"] == "company_not_found"  # the env's own lookup
    # the env itself only ever got the lookups of imagined episodes; the world model never learns its own replies
    assert all(not t.info.get("imagined") for e in episodes if not e.imagined for t in e.turns)
    assert all(not row for row in phone_call_examples(imagined, csr_tokenizer))
    assert "rollout/imagined_type_accuracy" in metrics
    metrics = trainer.update(trainer.prepare(episodes))
    assert metrics["loss/total"] == metrics["loss/total"]  # a finite update on real and imagined episodes


def test_imagined_replies_reuse_the_conversation_up_to_the_last_call(tmp_path, csr_tokenizer):
    """From its second call on, an imagined episode's reply prefills only what came after its last call: the
    same episodes as prefilling every call's conversation whole."""
    runs = {}
    for reuse in (False, True):
        trainer = _trainer(tmp_path / str(reuse), csr_tokenizer, max_turns=4)
        trainer.collector.step_override = imagination = PhoneCallImagination(
            trainer.policy, csr_tokenizer, trainer.config, trainer.make_env().unwrapped.action_space,
            trainer.dtype, reuse_kv_cache=reuse)
        episodes, _ = trainer.collect_batch()
        runs[reuse] = [e.token_ids for e in episodes if e.imagined], imagination.engine.kv_cache
    assert runs[True][0] == runs[False][0] and runs[False][1] is None
    calls = [len([t for t in e.turns if t.info.get("imagined")]) for e in episodes if e.imagined]
    stats = runs[True][1].stats
    assert min(calls) >= 2 and stats.hit_rows == sum(calls) - len(calls)  # every call but each episode's first
    assert stats.reused_tokens > 0.8 * sum(len(t) for t in runs[True][0]) / 2


@pytest.mark.parametrize("transfer", ["separate", "echo"])
def test_a_reply_ends_at_its_end_marker_or_any_other_special_token(tmp_path, csr_tokenizer, transfer):
    """A reply is plain text: one that opens a chat turn instead has left the reply, and its engine stops."""
    trainer = _trainer(tmp_path, csr_tokenizer, transfer=transfer)
    opening, end = reply_opening(csr_tokenizer, trainer.config)
    stops = reply_stops(csr_tokenizer, trainer.config)
    assert stops[0] == end and csr_tokenizer.eos_token_id in stops
    assert csr_tokenizer.convert_tokens_to_ids("<|im_start|>") in stops
    if transfer == "separate":  # the markers that open the reply are the world model's input, not a stop
        assert not set(opening) & set(stops)
    assert trainer.collector.step_override.engine.eos_token_ids == stops


def test_tool_turn_opening_is_what_precedes_a_tool_result_in_an_episode(tmp_path, csr_tokenizer):
    trainer = _trainer(tmp_path, csr_tokenizer, imagined_fraction=0.0)
    episodes, _ = trainer.collect_batch()
    turn = episodes[0].turns[0]
    assert episodes[0].token_ids[turn.observation_span[0] : turn.content_span[0]] == \
        _tool_turn_opening(csr_tokenizer)


def test_imagined_config_is_checked():
    with pytest.raises(ValueError, match="imagined_fraction"):
        DualLoRAConfig(imagined_fraction=1.5)
    with pytest.raises(ValueError, match="imagined_fraction"):
        DualLoRAConfig(imagined_fraction=0.5, vectorization_mode="sync")
