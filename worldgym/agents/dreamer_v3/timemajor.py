"""Time-major layout helpers: everything inside Dreamer is ``[T, B, ...]``; convert only at module edges."""

from __future__ import annotations

import torch


def to_batch_major(x: torch.Tensor) -> torch.Tensor:
    """``[T, B, ...] -> [B, T, ...]`` (a view; call ``.contiguous()`` if a kernel needs it).

    >>> to_batch_major(torch.zeros(5, 3, 2)).shape
    torch.Size([3, 5, 2])
    """
    if x.dim() < 2:
        raise ValueError(f"expected a tensor with at least 2 dims [T, B, ...], got shape {tuple(x.shape)}")
    return x.transpose(0, 1)


def to_time_major(x: torch.Tensor) -> torch.Tensor:
    """``[B, T, ...] -> [T, B, ...]``, the inverse of :func:`to_batch_major`."""
    if x.dim() < 2:
        raise ValueError(f"expected a tensor with at least 2 dims [B, T, ...], got shape {tuple(x.shape)}")
    return x.transpose(0, 1)


def flatten_time(x: torch.Tensor) -> torch.Tensor:
    """``[T, B, ...] -> [T * B, ...]`` for modules that take one batch dim (encoders, heads)."""
    if x.dim() < 2:
        raise ValueError(f"expected a tensor with at least 2 dims [T, B, ...], got shape {tuple(x.shape)}")
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def unflatten_time(x: torch.Tensor, time: int) -> torch.Tensor:
    """``[T * B, ...] -> [T, B, ...]``, the inverse of :func:`flatten_time`."""
    if x.shape[0] % time != 0:
        raise ValueError(f"leading dim {x.shape[0]} is not a multiple of time={time}")
    return x.reshape(time, x.shape[0] // time, *x.shape[1:])
