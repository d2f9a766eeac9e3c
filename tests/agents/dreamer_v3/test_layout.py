"""Time-major helpers, 2-bit pixel packing and the docstring examples of the package."""

import doctest
import importlib

import numpy as np
import pytest
import torch

from worldgym.agents.dreamer_v3.pixels import pack_2bit, pack_frames, shades_to_float, unpack_2bit
from worldgym.agents.dreamer_v3.timemajor import flatten_time, to_batch_major, to_time_major, unflatten_time


def test_time_major_round_trips():
    x = torch.arange(2 * 3 * 4).view(2, 3, 4)
    assert torch.equal(to_batch_major(x)[1, 0], x[0, 1])
    assert torch.equal(to_time_major(to_batch_major(x)), x)
    flat = flatten_time(x)
    assert flat.shape == (6, 4) and torch.equal(flat[4], x[1, 1])
    assert torch.equal(unflatten_time(flat, 2), x)
    with pytest.raises(ValueError, match="at least 2 dims"):
        to_batch_major(torch.zeros(3))
    with pytest.raises(ValueError, match="not a multiple of time=4"):
        unflatten_time(flat, 4)


def test_pack_unpack_game_boy_frame():
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 4, (5, 1, 72, 80), generator=gen, dtype=torch.uint8)
    packed = pack_2bit(frames)
    assert packed.shape == (5, 1, 72, 20) and packed.dtype == torch.uint8
    assert torch.equal(unpack_2bit(packed), frames)
    # Pixel 4j+k sits in bits 6-2k..7-2k of byte j (GameBoy-v0's packed_obs order)
    row = torch.tensor([[3, 0, 0, 0, 0, 0, 0, 2]], dtype=torch.uint8)
    assert pack_2bit(row).tolist() == [[192, 2]]
    assert shades_to_float(torch.tensor([0, 3], dtype=torch.uint8)).tolist() == [-0.5, 0.5]


def test_pack_rejects_bad_frames():
    with pytest.raises(ValueError, match="shades must be in 0..3"):
        pack_2bit(torch.full((1, 4), 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="multiple of 4"):
        pack_2bit(torch.zeros(1, 6, dtype=torch.uint8))
    with pytest.raises(TypeError, match="uint8"):
        pack_2bit(torch.zeros(1, 4))


@pytest.mark.parametrize(
    "module_name",
    [
        "worldgym.agents.dreamer_v3",
        "worldgym.agents.dreamer_v3.config",
        "worldgym.agents.dreamer_v3.distributions",
        "worldgym.agents.dreamer_v3.pixels",
        "worldgym.agents.dreamer_v3.scheduler",
        "worldgym.agents.dreamer_v3.timemajor",
    ],
)
def test_docstring_examples(module_name):
    result = doctest.testmod(importlib.import_module(module_name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_pack_frames_env_transform():
    frames = np.random.default_rng(0).integers(0, 4, (2, 72, 80), dtype=np.uint8)
    packed = pack_frames(frames)
    assert packed.shape == (2, 1, 72, 20)
    assert torch.equal(unpack_2bit(packed)[:, 0], torch.from_numpy(frames))
    with pytest.raises(ValueError, match="expected frames"):
        pack_frames(np.zeros((72, 80), dtype=np.uint8))
