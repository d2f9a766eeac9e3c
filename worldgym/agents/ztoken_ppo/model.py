"""The Z-token policy: a causal LM, 5 digit heads at <ANSWER>, a value head, and masked token logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.distributions import Categorical
from transformers import PreTrainedModel

from worldgym.agents.ztoken_ppo.encoding import EncodedBatch
from worldgym.envs.ztoken.problems import NUM_DIGITS

Decoding = Literal["greedy", "sample"]


def masked_token_log_probs(logits: torch.Tensor, allowed_ids: torch.Tensor) -> torch.Tensor:
    """Log-softmax of full-vocabulary ``logits`` with every id outside ``allowed_ids`` masked to -inf.

    Returns ``[batch, len(allowed_ids)]`` log-probs in ``allowed_ids`` order (the env's action order). The
    rollout and the PPO update both call this one function, so the masking is identical in both.
    """
    blocked = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
    blocked[allowed_ids] = False
    masked = logits.float().masked_fill(blocked, float("-inf"))
    return torch.log_softmax(masked, dim=-1)[..., allowed_ids]


@dataclass
class PolicyOutput:
    """One forward pass: masked token log-probs, digit logits at <ANSWER> and at the last token, and V_t."""

    token_log_probs: torch.Tensor
    digit_logits: torch.Tensor
    last_digit_logits: torch.Tensor
    values: torch.Tensor


@dataclass
class ActionSample:
    """Actions chosen for a batch, with what PPO stores per step."""

    tokens: torch.Tensor
    digits: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    entropy: torch.Tensor
    digit_logits: torch.Tensor


class ZTokenPolicy(nn.Module):
    """Causal LM + five 10-way digit heads + value head ``Linear(h, h) -> Tanh -> Linear(h, 1)``.

    The next token is chosen from the LM logits at the last observed token, masked to {Z tokens, <ANSWER>}.
    The digit heads read the hidden state of ``<ANSWER>`` (appended by the encoder), or of the last token when
    the episode is truncated. The value head reads the last token, giving V_t at every generation step.
    """

    def __init__(self, lm: PreTrainedModel, action_token_ids: list[int], seed: int = 0) -> None:
        super().__init__()
        self.lm = lm
        hidden = int(lm.config.hidden_size)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.digit_heads = nn.ModuleList(nn.Linear(hidden, 10) for _ in range(NUM_DIGITS))
            self.value_head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.register_buffer(
            "action_token_ids", torch.tensor(action_token_ids, dtype=torch.long), persistent=False
        )

    @property
    def device(self) -> torch.device:
        """Where the weights live (inputs are moved here)."""
        return self.action_token_ids.device

    @property
    def answer_action(self) -> int:
        """Action index of ``<ANSWER>`` (the last one)."""
        return len(self.action_token_ids) - 1

    def _digits(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.stack([head(hidden) for head in self.digit_heads], dim=1)

    def _hidden_states(self, batch: EncodedBatch) -> torch.Tensor:
        """Final-layer hidden states ``[batch, seq, hidden]`` of the LM's base model (no LM head)."""
        out = self.lm.base_model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        )
        return out.last_hidden_state

    def forward(self, batch: EncodedBatch) -> PolicyOutput:
        """Run the LM once over ``question + Z tokens + <ANSWER>`` and read every head."""
        batch = batch.to(self.device)
        states = self._hidden_states(batch)
        rows = torch.arange(states.shape[0], device=states.device)
        last_hidden = states[rows, batch.last_index]
        answer_hidden = states[rows, batch.answer_index]
        logits = self.lm.get_output_embeddings()(last_hidden)
        return PolicyOutput(
            token_log_probs=masked_token_log_probs(logits, self.action_token_ids),
            digit_logits=self._digits(answer_hidden).float(),
            last_digit_logits=self._digits(last_hidden).float(),
            values=self.value_head(last_hidden).squeeze(-1).float(),
        )

    def teacher_forced(self, batch: EncodedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked token log-probs at every position ``[batch, seq, actions]`` and digit logits at <ANSWER>."""
        batch = batch.to(self.device)
        states = self._hidden_states(batch)
        logits = self.lm.get_output_embeddings()(states)
        rows = torch.arange(states.shape[0], device=states.device)
        digit_logits = self._digits(states[rows, batch.answer_index]).float()
        return masked_token_log_probs(logits, self.action_token_ids), digit_logits

    @torch.no_grad()
    def act(
        self,
        batch: EncodedBatch,
        generator: torch.Generator | None,
        token_decoding: Decoding = "sample",
        digit_decoding: Decoding = "sample",
    ) -> ActionSample:
        """Choose the next token and the digits for every row; log-probs follow :func:`joint_log_prob`."""
        out = self(batch)
        token_probs = out.token_log_probs.exp()
        if token_decoding == "sample":
            tokens = torch.multinomial(token_probs, 1, generator=generator).squeeze(-1)
        else:
            tokens = token_probs.argmax(-1)
        digit_probs = out.digit_logits.softmax(-1)
        if digit_decoding == "sample":
            answer_digits = torch.multinomial(digit_probs.reshape(-1, 10), 1, generator=generator)
            answer_digits = answer_digits.reshape(-1, NUM_DIGITS)
        else:
            answer_digits = digit_probs.argmax(-1)
        is_answer = tokens == self.answer_action
        digits = torch.where(is_answer[:, None], answer_digits, out.last_digit_logits.argmax(-1))
        include_digits = digit_decoding == "sample"
        log_probs = joint_log_prob(out, tokens, digits, self.answer_action, include_digits)
        entropy = joint_entropy(out, self.answer_action, include_digits)
        digit_logits = torch.where(is_answer[:, None, None], out.digit_logits, out.last_digit_logits)
        return ActionSample(tokens, digits, log_probs, out.values, entropy, digit_logits)


def joint_log_prob(
    out: PolicyOutput, tokens: torch.Tensor, digits: torch.Tensor, answer_action: int, include_digits: bool
) -> torch.Tensor:
    """``log pi(token) + [token == <ANSWER>] * sum_i log pi(digit_i)`` (digits only if ``include_digits``)."""
    log_prob = out.token_log_probs.gather(-1, tokens[:, None]).squeeze(-1)
    if include_digits:
        digit_lp = torch.log_softmax(out.digit_logits, -1).gather(-1, digits[..., None]).squeeze(-1).sum(-1)
        log_prob = log_prob + (tokens == answer_action).float() * digit_lp
    return log_prob


def joint_entropy(out: PolicyOutput, answer_action: int, include_digits: bool) -> torch.Tensor:
    """Entropy of the step's action: ``H(token) + p(<ANSWER>) * sum_i H(digit_i)`` (digits if sampled)."""
    token_entropy = -(out.token_log_probs.exp() * out.token_log_probs).sum(-1)
    if not include_digits:
        return token_entropy
    digit_entropy = Categorical(logits=out.digit_logits).entropy().sum(-1)
    return token_entropy + out.token_log_probs[:, answer_action].exp() * digit_entropy
