"""2-bit pixel packing: four 2-bit Game Boy shades per byte, so a 72x80 frame is stored as ``[1, 72, 20]``."""

from __future__ import annotations

import numpy as np
import torch

PIXELS_PER_BYTE = 4
SHADES = 4
_SHIFTS = (0, 2, 4, 6)


def pack_2bit(frames: torch.Tensor) -> torch.Tensor:
    """Pack shades 0..3 ``[..., H, W]`` (uint8, ``W % 4 == 0``) into ``[..., H, W // 4]`` uint8.

    Pixel ``4 * j + k`` of a row lands in bits ``2k..2k+1`` of byte ``j``.

    >>> pack_2bit(torch.tensor([[1, 2, 3, 0]], dtype=torch.uint8)).tolist()
    [[57]]
    """
    if frames.dtype != torch.uint8:
        raise TypeError(f"frames must be uint8 shades, got {frames.dtype}")
    if frames.shape[-1] % PIXELS_PER_BYTE != 0:
        raise ValueError(f"frame width {frames.shape[-1]} must be a multiple of {PIXELS_PER_BYTE}")
    if frames.numel() and int(frames.max()) >= SHADES:
        raise ValueError(f"shades must be in 0..{SHADES - 1}, got max {int(frames.max())}")
    quads = frames.reshape(*frames.shape[:-1], frames.shape[-1] // PIXELS_PER_BYTE, PIXELS_PER_BYTE)
    packed = torch.zeros(quads.shape[:-1], dtype=torch.uint8, device=frames.device)
    for k, shift in enumerate(_SHIFTS):
        packed |= quads[..., k] << shift
    return packed


def unpack_2bit(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_2bit`: ``[..., H, W // 4]`` uint8 -> ``[..., H, W]`` uint8 shades 0..3."""
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed frames must be uint8, got {packed.dtype}")
    parts = [(packed >> shift) & 0b11 for shift in _SHIFTS]
    return torch.stack(parts, dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * PIXELS_PER_BYTE)


def shades_to_float(shades: torch.Tensor) -> torch.Tensor:
    """Map shades 0..3 to floats in [-0.5, 0.5] (the encoder's input and the decoder's target)."""
    return shades.float() / (SHADES - 1) - 0.5


def pack_frames(frames: np.ndarray) -> torch.Tensor:
    """Env obs transform: uint8 shades ``[N, H, W]`` or ``[N, C, H, W]`` -> packed ``[N, C, H, W/4]``."""
    tensor = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.uint8))
    if tensor.dim() == 3:
        tensor = tensor.unsqueeze(1)
    if tensor.dim() != 4:
        raise ValueError(f"expected frames [N, H, W] or [N, C, H, W], got shape {tuple(tensor.shape)}")
    return pack_2bit(tensor)
