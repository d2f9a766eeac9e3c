"""The world model's predicted reply beside the real one in the dual-LoRA agent's transcripts: for every phone
call of a validation episode, the reply the world-model adapter writes greedily from the conversation so far."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from worldgym.agents.dual_lora.config import DualLoRAConfig
from worldgym.agents.dual_lora.imagination import reply_opening
from worldgym.agents.dual_lora.world_model import PHONE_TOOL
from worldgym.agents.llm.adapters import using_adapters
from worldgym.agents.llm.engines import HFEngine, SamplingParams
from worldgym.agents.llm.rollout import Episode

__all__ = ["add_predicted_replies"]


def add_predicted_replies(records: Sequence[dict[str, Any]], episodes: Sequence[Episode], model: PeftModel,
                          tokenizer: PreTrainedTokenizerBase, config: DualLoRAConfig, engine: HFEngine) -> None:
    """Set ``predicted_reply`` on the tool message of every real phone call in ``records`` (the transcript
    records of ``episodes``, as :func:`~worldgym.agents.llm.transcripts.episode_record` writes them)."""
    opening, _ = reply_opening(tokenizer, config)
    calls = [(e, t) for e, episode in enumerate(episodes) for t, turn in enumerate(episode.turns)
             if turn.info.get("tool") == PHONE_TOOL and not turn.info.get("imagined")]
    if not calls:
        return
    prompts = [[*episodes[e].token_ids[:episodes[e].turns[t].action_span[1]], *opening] for e, t in calls]
    params = SamplingParams(temperature=0.0, max_new_tokens=config.imagined_reply_tokens)
    was_training = model.training
    model.eval()
    try:
        with using_adapters(model, [config.world_model_adapter], config.adapter_names):
            generations = engine.generate(prompts, params)
    finally:
        model.train(was_training)
    for (e, t), (generation,) in zip(calls, generations, strict=True):
        text = tokenizer.decode(generation.token_ids, skip_special_tokens=True).strip()
        records[e]["messages"][2 + 2 * t]["predicted_reply"] = text  # [prompt, (reply, answer) per turn]
