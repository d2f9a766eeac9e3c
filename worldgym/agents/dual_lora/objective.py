"""``WorldModelObjective``: ``λ·L_wm`` as the GRPO trainer's auxiliary loss, with replay, λ schedule and
validation metrics."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from worldgym.agents.dual_lora.config import DualLoRAConfig
from worldgym.agents.dual_lora.replay import PhoneCallReplay
from worldgym.agents.dual_lora.schedule import LambdaController
from worldgym.agents.dual_lora.world_model import (
    PhoneCallExample,
    phone_call_examples,
    reply_metrics,
    score_observations,
    score_packed,
    wm_token_ids,
)
from worldgym.agents.grpo.auxiliary import SINGLE_PROCESS, LossShard
from worldgym.agents.llm.adapters import using_adapters
from worldgym.agents.llm.rollout import Episode

__all__ = ["WorldModelObjective"]

_EVAL_EPISODES = 4  # validation episodes scored per forward under "echo"


class WorldModelObjective:
    """The world model's loss on the phone calls of each step's training episodes (an
    :class:`~worldgym.agents.grpo.auxiliary.AuxiliaryLoss`).

    Each minibatch's world-model examples are the phone calls of its episodes (the recent ones), plus, with a
    replay buffer, ``wm_replay_fraction`` of them drawn from earlier steps; the loss is their mean
    cross-entropy (0 when the minibatch made no call), run through the world-model adapter and weighted by
    the step's λ.
    """

    def __init__(self, model: PeftModel, tokenizer: PreTrainedTokenizerBase, config: DualLoRAConfig):
        wm_token_ids(tokenizer)  # fail at construction, not at the first phone call
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.schedule = LambdaController(config)
        self.replay = PhoneCallReplay(config.wm_replay_capacity) if config.wm_replay_capacity else None
        self.rng = np.random.default_rng([config.seed, 17])
        self._step = 0
        self._lambda = self.schedule.value(0)
        self._rows: list[list[PhoneCallExample]] = []
        self._accuracies: list[float] = []

    @property
    def policy_weight(self) -> float:
        return self.schedule.policy_weight(self._step)

    def begin_step(self, episodes: Sequence[Episode], step: int) -> None:
        self._step, self._lambda = step, self.schedule.value(step)
        self._rows = phone_call_examples(episodes, self.tokenizer, self.config.wm_max_context_tokens)
        self._accuracies = []

    def loss(self, rows: Sequence[int], shard: LossShard = SINGLE_PROCESS
             ) -> tuple[torch.Tensor, dict[str, float]]:
        """λ times the mean cross-entropy of the minibatch's world-model examples (this ``shard``'s part of
        it: its examples' summed losses over the whole minibatch's kept count), and the whole minibatch's
        metrics.

        The examples are drawn on the whole minibatch (``wm_max_calls``, replay), so every rank draws the same
        ones from the same RNG; each rank then scores its share, and the counts behind the means are summed
        over the ranks.
        """
        recent = [example for row in rows for example in self._rows[row]]
        metrics = {"wm/lambda": self._lambda, "wm/calls": float(len(recent))}
        if self._lambda == 0 or not recent:
            return torch.zeros((), device=next(self.model.parameters()).device), metrics
        recent, past = self._draw(recent)
        examples = recent + past
        mine = shard.take([len(example.token_ids) for example in examples])
        padding = shard.padding(len(mine), len(examples))
        local_sum, totals = self._score_share(examples, mine, len(recent), padding,
                                              share_contexts=not shard.equal_shares)
        kept, loss_sum, accuracy_sum, skipped = shard.sum(totals).tolist()
        accuracy = accuracy_sum / len(recent)
        self._accuracies.append(accuracy)
        metrics |= {"loss/world_model": loss_sum / max(kept, 1.0), "wm/token_accuracy": accuracy,
                    "wm/trained_calls": float(len(recent)), "wm/replayed": float(len(past)),
                    "wm/skipped_confident": skipped}
        return self._lambda * local_sum / max(kept, 1.0), metrics

    def _draw(self, recent: list[PhoneCallExample]) -> tuple[list[PhoneCallExample], list[PhoneCallExample]]:
        """The minibatch's recent calls to train on (at most ``wm_max_calls``, drawn at random) and the
        replayed past calls that go with them."""
        config = self.config
        if config.wm_max_calls is not None and len(recent) > config.wm_max_calls:
            chosen = self.rng.choice(len(recent), size=config.wm_max_calls, replace=False)
            recent = [recent[i] for i in sorted(chosen.tolist())]
        fraction = config.wm_replay_fraction
        past = self.replay.sample(round(len(recent) * fraction / (1 - fraction)), self._step, self.rng) \
            if self.replay is not None else []
        return recent, past

    def _score_share(self, examples: list[PhoneCallExample], mine: list[int], num_recent: int,
                     padding: int = 0, share_contexts: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Score ``examples[i]`` for ``i`` in ``mine`` (the first ``num_recent`` examples are recent), then
        ``padding`` repeats weighted 0 (calls of one conversation in one forward where ``share_contexts``; ranks
        that run their forwards together, sharded ones, need one forward per call, as many on every rank): the
        differentiable sum of the losses kept (not skipped as confident), and the float64 sums to combine over
        ranks: ``[kept, kept losses, recent accuracies, skipped]``."""
        config = self.config
        device = next(self.model.parameters()).device
        scored = mine + [mine[0] if mine else 0] * padding
        if not scored:
            return torch.zeros((), device=device), torch.zeros(4, dtype=torch.float64)
        with using_adapters(self.model, [config.world_model_adapter], config.adapter_names):
            scores = score_packed(self.model, [examples[i] for i in scored], share_contexts)
        own = torch.arange(len(scored), device=device) < len(mine)
        confident = torch.zeros_like(own)
        if config.wm_confidence_skip is not None:
            confident = scores.mean_probability > config.wm_confidence_skip
        keep = own & ~confident
        local_sum = scores.loss[keep].sum()  # a graph even when none is kept: zero gradients, as one process
        recent = own & (torch.tensor(scored, device=device) < num_recent)
        totals = [keep.sum(), local_sum, scores.token_accuracy[recent].sum(), (own & confident).sum()]
        return local_sum, torch.tensor([total.item() for total in totals], dtype=torch.float64)

    def end_step(self) -> dict[str, float]:
        if self.replay is not None:
            self.replay.add([example for row in self._rows for example in row], self._step)
        if self._accuracies:
            self.schedule.observe_step(float(np.mean(self._accuracies)))
        return {"wm/replay_size": float(len(self.replay) if self.replay is not None else 0)}

    @torch.no_grad()
    def evaluate(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Teacher-forced world-model metrics on the validation episodes' phone calls, overall and by response
        type: token accuracy, exact-match reply, perplexity. Under "echo" the policy scores the replies in the
        episodes' own sequences (as it learns them); else the world-model adapter scores them behind the
        markers."""
        config = self.config
        was_training = self.model.training
        self.model.eval()
        try:
            with using_adapters(self.model, [config.world_model_adapter], config.adapter_names):
                if config.transfer == "echo":
                    response_types, scores = score_observations(
                        self.model, episodes, config.echo_tools, self.tokenizer.pad_token_id, _EVAL_EPISODES)
                else:
                    examples = [e for row in phone_call_examples(episodes, self.tokenizer,
                                                                 config.wm_max_context_tokens) for e in row]
                    response_types = [example.response_type for example in examples]
                    scores = score_packed(self.model, examples) if examples else None
        finally:
            self.model.train(was_training)
        if not response_types:
            return {"eval/wm_calls": 0.0}
        metrics = reply_metrics(response_types, scores)
        self.schedule.observe_validation(metrics["eval/wm_token_accuracy"])
        return metrics

    def state(self, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], dict[str, str]]:
        """The λ schedule and RNG, and the replay, whose calls not stored yet go to the store beside ``path``
        (its segments are the checkpoint's run files)."""
        replay_state, run_files = self.replay.save(path.parent) if self.replay is not None else (None, {})
        return {}, {"schedule": self.schedule.state(), "rng": self.rng.bit_generator.state,
                    "replay": replay_state}, run_files

    def load_state(self, tensors: dict[str, torch.Tensor], json_state: dict[str, Any], path: Path) -> None:
        """Restore :meth:`state` from the checkpoint at ``path`` (``tensors``: the replay of a checkpoint saved
        before the run-level store)."""
        self.schedule.load_state(json_state["schedule"])
        self.rng.bit_generator.state = json_state["rng"]
        if self.replay is not None and json_state["replay"] is not None:
            replay = {name[len("replay."):]: t for name, t in tensors.items() if name.startswith("replay.")}
            self.replay.load(path, json_state["replay"], replay)
