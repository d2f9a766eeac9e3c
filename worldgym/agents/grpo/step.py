"""One optimizer step on a GRPO minibatch, the same code for one process and for every rank of a data-parallel
group; the :class:`~worldgym.agents.grpo.learner.Learner` supplies what differs.

**Shares.** Rank ``r`` of ``world_size`` runs rows ``learner.split(rows)[r]`` of the minibatch (one process: all
of them). DDP and FSDP2 *average* the gradients over the ranks, which equals the whole minibatch's gradient only
if each rank's loss is the whole minibatch's loss restricted to its rows. GRPO's losses are means with
batch-dependent normalisers: ``token_mean`` divides by the minibatch's trained tokens, ``seq_mean`` and
``dr_grpo`` by its sequences, the entropy bonus by its tokens. So the step sums the counts over the ranks first
and weights each part's terms by its share of the whole minibatch's (:func:`loss_shares`), times ``world_size``
to cancel the averaging. Logged metrics are combined the same way, so they equal one process's.

**Microbatches.** With ``microbatch_size`` each share runs in microbatches of that many rows, their gradients
accumulated (reduced once, in the last backward, where the learner can defer it: DDP's ``no_sync``). Where every
forward is a collective (FSDP2) every rank runs as many microbatches as the largest share needs, the smaller
shares padded with one-row repeats weighted 0.

**The auxiliary loss** (e.g. the dual-LoRA world model) joins the last microbatch's loss: every rank passes the
whole minibatch's rows and a :class:`~worldgym.agents.grpo.auxiliary.LossShard`, scores its share of the
examples and sums its counts over the ranks. With ``auxiliary_grad_ratio`` or ``auxiliary_projection`` it gets a
backward pass of its own after the policy's, and
:func:`~worldgym.agents.grpo.auxiliary.combine_auxiliary_gradient` projects and caps it against the policy's
reduced gradient, with norms and dot products summed over the ranks where the gradients are sharded. Every rank
then scores as many examples (``LossShard.equal_shares``), so every rank runs that backward pass.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.distributed.tensor import DTensor

from worldgym.agents.grpo.auxiliary import (
    AuxiliaryLoss,
    LossShard,
    combine_auxiliary_gradient,
    take_gradients,
)
from worldgym.agents.grpo.config import GRPOConfig
from worldgym.agents.grpo.echo import ECHO_SUMS, echo_means
from worldgym.agents.grpo.learner import Learner
from worldgym.agents.llm.allocator import release_free_heap_on_cpu
from worldgym.agents.llm.losses import PolicyLossOutput
from worldgym.errors import WorldgymError

__all__ = [
    "AuxiliaryGraphError",
    "Microbatch",
    "MinibatchLoss",
    "StepTrainer",
    "longest_sequence",
    "loss_shares",
    "microbatches",
    "step_on_minibatch",
]


class AuxiliaryGraphError(WorldgymError, RuntimeError):
    """An auxiliary loss gave a differentiable loss on some ranks and a constant on others, where every rank must
    run the same backward pass."""


@dataclass
class MinibatchLoss:
    """One minibatch's loss terms: ``policy_weight * (policy.loss - entropy_coef * entropy) + auxiliary``.

    The terms stay apart so that each part of a minibatch (a microbatch, a rank's share) can weight each by its
    share of the term's normaliser (:meth:`total`'s scales).
    """

    policy: PolicyLossOutput
    entropy: torch.Tensor  # mean over the minibatch's trained tokens
    entropy_coef: float
    auxiliary: torch.Tensor | None = None
    policy_weight: float = 1.0
    auxiliary_metrics: dict[str, float] = field(default_factory=dict)
    echo: torch.Tensor | None = None  # echo_coef x this part's share of the minibatch's echo loss
    echo_metrics: dict[str, float] = field(default_factory=dict)

    def total(self, policy_scale: float | None = None, token_scale: float | None = None,
              auxiliary_scale: float = 1.0) -> torch.Tensor:
        """The scalar to backpropagate; ``policy_scale`` multiplies the policy loss (KL included),
        ``token_scale`` the entropy term (a token mean) and ``auxiliary_scale`` the auxiliary and echo terms
        (each already this part's share of the minibatch's)."""
        policy = self.policy.loss if policy_scale is None else policy_scale * self.policy.loss
        entropy = self.entropy if token_scale is None else token_scale * self.entropy
        loss = self.policy_weight * (policy - self.entropy_coef * entropy)
        for term in (self.auxiliary, self.echo):
            if term is not None:
                loss = loss + auxiliary_scale * term
        return loss

    @property
    def metrics(self) -> dict[str, float]:
        """The policy loss's diagnostics (token means over the minibatch) and the echo loss's sums
        (:data:`~worldgym.agents.grpo.echo.ECHO_SUMS`)."""
        out = self.policy
        return {
            "loss/policy": out.policy_loss.item(),
            "loss/kl": out.kl.item(),
            "loss/entropy": self.entropy.item(),
            "loss/clip_fraction": out.clip_fraction.item(),
            "loss/ratio_mean": out.ratio_mean.item(),
            **self.echo_metrics,
        }


def loss_shares(aggregation: str, tokens: float, rows: int, total_tokens: float, total_rows: float
                ) -> tuple[float, float]:
    """``(policy_share, token_share)``: the weights that turn a part's mean loss terms (``tokens`` trained tokens
    in ``rows`` rows) into its share of the whole's (``total_tokens``, ``total_rows``). The policy loss is a token
    mean under ``token_mean`` and a per-row normaliser otherwise; the entropy is always a token mean.

    >>> loss_shares("token_mean", 30, 1, 120, 4), loss_shares("seq_mean", 30, 1, 120, 4)
    ((0.25, 0.25), (0.25, 0.25))
    >>> loss_shares("seq_mean", 90, 1, 120, 4)
    (0.25, 0.75)
    """
    token_share = tokens / max(total_tokens, 1.0)
    return (token_share if aggregation == "token_mean" else rows / total_rows), token_share


@dataclass(frozen=True)
class Microbatch:
    """The rows of one forward/backward pass; ``weighted`` is False for padding (a repeated row weighted 0)."""

    rows: torch.Tensor
    weighted: bool = True


def microbatches(rows: torch.Tensor, size: int, count: int = 0) -> list[Microbatch]:
    """``rows`` in microbatches of ``size`` (all at once when ``size`` is 0), padded to ``count`` microbatches
    with one-row repeats weighted 0.

    >>> [(m.rows.tolist(), m.weighted) for m in microbatches(torch.arange(3), 2, count=3)]
    [([0, 1], True), ([2], True), ([2], False)]
    """
    parts = [Microbatch(part) for part in (rows.split(size) if size else [rows])]
    return parts + [Microbatch(rows[-1:], weighted=False)] * (count - len(parts))


class StepTrainer(Protocol):
    """What the step uses of the trainer (:class:`~worldgym.agents.grpo.GRPOTrainer` and its subclasses)."""

    config: GRPOConfig
    trainable: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer
    auxiliary_loss: AuxiliaryLoss | None

    @property
    def policy_weight(self) -> float: ...

    def minibatch_loss(self, batch: dict[str, Any], advantages: torch.Tensor, rows: torch.Tensor,
                       with_auxiliary: bool = True, minibatch_rows: torch.Tensor | None = None) -> MinibatchLoss: ...

    def auxiliary_term(self, rows: torch.Tensor, shard: LossShard = ...
                       ) -> tuple[torch.Tensor | None, dict[str, float]]: ...

    def clip_and_step(self) -> torch.Tensor: ...

    def forward_memory(self, positions: int) -> AbstractContextManager[Any]: ...


def step_on_minibatch(trainer: StepTrainer, learner: Learner, batch: dict[str, Any], advantages: torch.Tensor,
                      rows: torch.Tensor) -> dict[str, float]:
    """One optimizer step on the minibatch ``rows`` of ``batch``: ``learner``'s share of it in microbatches, the
    auxiliary loss (projected and capped where the config says so), clip and step; returns the whole minibatch's
    metrics (the same on every rank).

    Raises:
        ValueError: a minibatch has fewer rows than there are ranks.
        AuxiliaryGraphError: the auxiliary loss has a gradient on some ranks only, where it gets a backward pass
            of its own.
    """
    config = trainer.config
    shares = learner.split(rows)
    local = shares[learner.rank]
    padded_count = (max(len(microbatches(share, config.microbatch_size)) for share in shares)
                    if learner.collective_forwards else 0)
    parts = microbatches(local, config.microbatch_size, padded_count)
    separate = _shapes_auxiliary_gradient(trainer)
    shard = LossShard(learner.rank, learner.world_size,
                      equal_shares=learner.collective_forwards or (separate and learner.world_size > 1),
                      reduce=learner.sum_counts)
    counts = learner.sum_counts(torch.tensor([_trained_tokens(batch, local), len(local)], dtype=torch.float64))
    trainer.optimizer.zero_grad(set_to_none=True)
    loss_sum, metric_sums = 0.0, {}
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        with nullcontext() if last else learner.without_gradient_sync():  # reduced in the last backward
            loss, terms, token_share = _part_backward(trainer, learner, batch, advantages, rows, part, counts, shard,
                                                      with_auxiliary=last and not separate)
        loss_sum += loss
        for key, value in terms.metrics.items():  # token means weighted by the part's share; echo sums added
            metric_sums[key] = metric_sums.get(key, 0.0) + (value if key in ECHO_SUMS else token_share * value)
    auxiliary_metrics = terms.auxiliary_metrics
    if separate:
        auxiliary_loss, auxiliary_metrics = _shaped_auxiliary_backward(trainer, learner, rows, shard)
        loss_sum += auxiliary_loss
    grad_norm = trainer.clip_and_step()
    combined = learner.sum_counts(torch.tensor([loss_sum / learner.world_size, *metric_sums.values()],
                                               dtype=torch.float64)).tolist()
    return {"loss/total": combined[0], **echo_means(dict(zip(metric_sums, combined[1:]))),
            "loss/grad_norm": _whole(grad_norm).item(), **auxiliary_metrics}


def _part_backward(
    trainer: StepTrainer, learner: Learner, batch: dict[str, Any], advantages: torch.Tensor, rows: torch.Tensor,
    part: Microbatch, counts: torch.Tensor, shard: LossShard, with_auxiliary: bool,
) -> tuple[float, MinibatchLoss, float]:
    """Forward and backward of one microbatch of the minibatch ``rows``, its terms weighted by its share of the
    whole minibatch's ``counts`` (trained tokens, rows) times ``world_size``, with the auxiliary loss's part
    where ``with_auxiliary``; returns its loss, terms and token share."""
    total_tokens, total_rows = counts.tolist()
    policy_share, token_share = (
        loss_shares(trainer.config.loss_aggregation, _trained_tokens(batch, part.rows), len(part.rows),
                    total_tokens, total_rows)
        if part.weighted else (0.0, 0.0)
    )
    scale = learner.world_size  # the wrapper averages the ranks' gradients

    def compute() -> tuple[torch.Tensor, MinibatchLoss]:
        terms = trainer.minibatch_loss(batch, advantages, part.rows, with_auxiliary=False, minibatch_rows=rows)
        if not part.weighted:
            terms.echo = None  # a padding repeat adds nothing
        if with_auxiliary:
            terms.auxiliary, terms.auxiliary_metrics = trainer.auxiliary_term(rows, shard)
        return terms.total(scale * policy_share, scale * token_share, scale), terms

    with trainer.forward_memory(len(part.rows) * longest_sequence(batch, part.rows)):
        loss, terms = learner.forward(compute)
    loss.backward()
    release_free_heap_on_cpu(trainer.config.device, trainer.config.cpu_release_heap)  # the pass's freed activations
    return loss.item(), terms, token_share


def _shaped_auxiliary_backward(trainer: StepTrainer, learner: Learner, rows: torch.Tensor, shard: LossShard
                               ) -> tuple[float, dict[str, float]]:
    """The auxiliary loss's own backward pass after the policy's, its gradient projected and capped against the
    policy's (:func:`combine_auxiliary_gradient`); returns its loss and metrics."""
    config, scale = trainer.config, learner.world_size
    auxiliary, metrics = learner.forward(lambda: trainer.auxiliary_term(rows, shard))
    _check_every_rank_has_a_graph(learner, auxiliary.requires_grad)
    if auxiliary.requires_grad:  # a constant (no example in these rows, or a weight of 0) has none
        policy_grads = take_gradients(trainer.trainable)
        (scale * auxiliary).backward()
        metrics = metrics | combine_auxiliary_gradient(trainer.trainable, policy_grads, config.auxiliary_grad_ratio,
                                                       project=config.auxiliary_projection,
                                                       sum_parts=learner.sum_gradient_parts)
    return scale * auxiliary.item(), metrics


def _check_every_rank_has_a_graph(learner: Learner, has_graph: bool) -> None:
    """Raise where the ranks disagree on whether the auxiliary loss has a gradient (their backward passes would
    wait for each other forever)."""
    if learner.world_size == 1:
        return
    ranks_with_graph = int(learner.sum_counts(torch.tensor([float(has_graph)], dtype=torch.float64)).item())
    if 0 < ranks_with_graph < learner.world_size:
        raise AuxiliaryGraphError(
            f"the auxiliary loss is differentiable on {ranks_with_graph} of {learner.world_size} ranks: with "
            "auxiliary_grad_ratio or auxiliary_projection every rank runs its backward pass, so its loss(rows, "
            "shard) must score shard.padding() repeats (weighted 0) where its share is empty"
        )


def _shapes_auxiliary_gradient(trainer: StepTrainer) -> bool:
    """Whether the auxiliary loss's gradient is capped or projected against the policy's (it then gets a backward
    pass of its own); not when it trains alone, with nothing to yield to."""
    config = trainer.config
    shaped = config.auxiliary_grad_ratio is not None or config.auxiliary_projection
    return shaped and trainer.auxiliary_loss is not None and trainer.policy_weight > 0


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (the norm of sharded gradients), else the tensor."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _trained_tokens(batch: dict[str, Any], rows: torch.Tensor) -> float:
    """The trained tokens of ``rows`` (padding is 0 in the action mask)."""
    return float(batch["action_mask"][rows].sum())


def longest_sequence(batch: dict[str, Any], rows: torch.Tensor) -> int:
    """The longest sequence of ``rows`` (the width their forward pass runs at)."""
    return int(batch["attention_mask"][rows].sum(1).max()) if len(rows) else 0
