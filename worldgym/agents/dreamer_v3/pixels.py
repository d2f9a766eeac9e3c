"""2-bit pixel packing: four 2-bit Game Boy shades per byte, so a 72x80 frame is stored as ``[1, 72, 20]``.

The bit order is GameBoy-v0's (``packed_obs=True``): the first pixel of each group of four sits in the high
bits, so the env's packed observations go into the replay as they are, without re-packing.
"""

from __future__ import annotations

import numpy as np
import torch

PIXELS_PER_BYTE = 4
SHADES = 4
_SHIFTS = (6, 4, 2, 0)  # pixel 4j+k -> bits (6-2k)..(7-2k) of byte j


def pack_2bit(frames: torch.Tensor) -> torch.Tensor:
    """Pack shades 0..3 ``[..., H, W]`` (uint8, ``W % 4 == 0``) into ``[..., H, W // 4]`` uint8.

    Pixel ``4 * j + k`` of a row lands in bits ``6-2k..7-2k`` of byte ``j`` (first pixel in the high bits).

    >>> pack_2bit(torch.tensor([[1, 2, 3, 0]], dtype=torch.uint8)).tolist()
    [[108]]
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


class PackedFrames:
    """Obs transform for envs that already pack 2 bits/pixel (GameBoy-v0 with ``packed_obs=True``).

    ``[N, H, W/4]`` packed bytes become ``[N, 1, H, W/4]`` (the channel dim) with no re-packing. With
    ``view``, a torch tensor aliasing the env's observation buffer (``GameBoyVecEnv.observation_tensor``,
    zero-copy, on the env's device), :meth:`read_view` returns the current frames straight from that buffer:
    on a CUDA env they then reach a CUDA replay without a host round trip.

    Args:
        view (torch.Tensor | None): the env's packed observation buffer ``[N, H, W/4]`` uint8.
    """

    def __init__(self, view: torch.Tensor | None = None) -> None:
        if view is not None and (view.dtype != torch.uint8 or view.dim() != 3):
            raise ValueError(
                f"view must be the env's packed uint8 buffer [N, H, W/4], got {view.dtype} "
                f"{tuple(view.shape)}"
            )
        self.view = view

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        """Host obs ``[N, H, W/4]`` -> ``[N, 1, H, W/4]`` uint8 (a copy, safe to keep after the next step)."""
        array = np.asarray(frames)
        if array.dtype != np.uint8 or array.ndim != 3:
            raise ValueError(
                f"expected packed uint8 frames [N, H, W/4], got {array.dtype} {array.shape}: create the env "
                "with packed_obs=True (or use pack_frames for unpacked shades)"
            )
        return torch.from_numpy(array.copy()).unsqueeze(1)

    def read_view(self) -> torch.Tensor | None:
        """The env buffer's current frames ``[N, 1, H, W/4]`` on its device (a device copy), or None."""
        return None if self.view is None else self.view.unsqueeze(1).clone()
