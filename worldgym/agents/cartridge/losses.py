"""Distillation losses between a teacher's and a student's next-token distributions on the same tokens.

Both sides are scored on the same completion tokens (``score_tokens`` returns the logits of the masked
positions in row-major order), so row ``n`` of ``teacher_logits`` and of ``student_logits`` predict the same
token even though the teacher's prompt (with the documents) is much longer than the student's.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["KLKind", "distillation_loss"]

KLKind = Literal["full", "topk", "sampled_reverse"]


def distillation_loss(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    kind: KLKind = "full",
    top_k: int = 32,
    tokens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss to minimise (mean over the ``N`` completion tokens) and its figures.

    Args:
        teacher_logits: ``[N, V]`` logits of the ``N`` completion positions; they carry no gradient.
        student_logits: ``[N, V]`` logits of the same positions.
        kind: ``"full"``: forward KL(teacher ‖ student) over the whole vocabulary; ``"topk"``: the same sum over
            the teacher's ``top_k`` most likely tokens at each position (the cartridges paper's estimator);
            ``"sampled_reverse"``: the reverse KL(student ‖ teacher) estimated on the sampled tokens ``tokens``
            (``[N]``), with the REINFORCE gradient ``(log p_s(y) - log p_t(y)) * ∇ log p_s(y)``.

    The figures: ``loss/kl``, the loss's value, and ``kl/full``, the forward KL over the vocabulary (no
    gradient), which every kind reports so that runs of different kinds compare on one figure.

    >>> t = torch.tensor([[2.0, 0.0, -1.0]])
    >>> loss, figures = distillation_loss(t, t.clone().requires_grad_())
    >>> round(loss.item(), 6), figures["kl/full"]
    (0.0, 0.0)
    """
    if teacher_logits.shape != student_logits.shape or teacher_logits.ndim != 2:
        raise ValueError(f"teacher and student logits must both be [N, V], got {tuple(teacher_logits.shape)} and "
                         f"{tuple(student_logits.shape)} (were they scored on the same completion tokens?)")
    if teacher_logits.shape[0] == 0:
        raise ValueError("no completion tokens to distil on (every sample was empty)")
    teacher_logp = torch.log_softmax(teacher_logits.detach().float(), -1)
    student_logp = torch.log_softmax(student_logits.float(), -1)
    teacher_p = teacher_logp.exp()
    full = (teacher_p * (teacher_logp - student_logp)).sum(-1)
    if kind == "full":
        loss = full.mean()
    elif kind == "topk":
        k = min(top_k, teacher_logp.shape[-1])
        top = teacher_logp.topk(k, dim=-1).indices
        gathered_t, gathered_s = teacher_logp.gather(-1, top), student_logp.gather(-1, top)
        loss = (gathered_t.exp() * (gathered_t - gathered_s)).sum(-1).mean()
    elif kind == "sampled_reverse":
        if tokens is None or tokens.shape != teacher_logits.shape[:1]:
            raise ValueError("sampled_reverse needs the sampled tokens, one per completion position")
        chosen_s = student_logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        chosen_t = teacher_logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        loss = ((chosen_s - chosen_t).detach() * chosen_s).mean()
    else:
        raise ValueError(f"kind={kind!r} is invalid: use 'full', 'topk' or 'sampled_reverse'")
    figures = {"kl/full": float(full.detach().mean()), "loss/kl": float(loss.detach())}
    return loss, figures
