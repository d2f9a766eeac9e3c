"""Config validation: presets, pinned error messages, warnings and dict round trips."""

import re

import pytest

from worldgym.agents.dreamer_v3.config import (
    MODEL_SIZES,
    DreamerConfig,
    LossConfig,
    ModelConfig,
    ReplayConfig,
    ScheduleConfig,
    model_size,
)


def test_presets_grow_with_size():
    sizes = [model_size(name) for name in ("tiny", "XS", "S", "M")]
    assert [s.recurrent_size for s in sizes] == sorted(s.recurrent_size for s in sizes)
    assert model_size("XS").stochastic_size == 32 and model_size("XS").discrete_size == 32
    assert model_size("tiny", dense_units=7).dense_units == 7
    assert set(MODEL_SIZES) == {"tiny", "XS", "S", "M"}


def test_unknown_size_is_rejected():
    with pytest.raises(
        ValueError, match=re.escape("size='XXL' is invalid: use one of ['tiny', 'XS', 'S', 'M']")
    ):
        model_size("XXL")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"commit_stride": 0}, "commit_stride=0 is invalid: use a value >= 1"),
        ({"seq_len": 1, "min_ready_steps": 1, "safety_margin": 1}, "seq_len=1 is invalid: use a value >= 2"),
        ({"seq_len": 8, "min_ready_steps": 7}, "min_ready_steps=7 is invalid: use a value >= seq_len=8"),
        (
            {"seq_len": 8, "min_ready_steps": 8, "safety_margin": 4},
            "safety_margin=4 is invalid: use a value >= seq_len=8",
        ),
        ({"seq_len": 8, "min_ready_steps": 8, "safety_margin": 8, "capacity": 10}, "capacity=10 is invalid"),
    ],
)
def test_replay_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ReplayConfig(**kwargs)


def test_large_commit_stride_warns():
    with pytest.warns(UserWarning, match=re.escape("commit_stride=5 > seq_len/2=4.0")):
        ReplayConfig(seq_len=8, min_ready_steps=8, safety_margin=8, commit_stride=5)


def test_other_field_errors():
    with pytest.raises(ValueError, match=re.escape("unimix=1.0 is invalid")):
        ModelConfig(unimix=1.0)
    with pytest.raises(ValueError, match=re.escape("bins=256 is invalid: use an odd number >= 3 (255)")):
        ModelConfig(bins=256)
    with pytest.raises(ValueError, match=re.escape("replay_ratio=-1 is invalid")):
        ScheduleConfig(replay_ratio=-1)
    with pytest.raises(ValueError, match=re.escape("gamma=1.5 is invalid: use a value in (0, 1]")):
        LossConfig(gamma=1.5)
    with pytest.raises(
        ValueError, match=re.escape("obs_kind='rgb' is invalid: use one of ['vector', 'pixels']")
    ):
        DreamerConfig(obs_kind="rgb")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model must be a ModelConfig"):
        DreamerConfig(model={"recurrent_size": 3})  # type: ignore[arg-type]


def test_dict_round_trip_and_unknown_keys():
    cfg = DreamerConfig(model=model_size("tiny"), num_envs=3)
    assert DreamerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match=re.escape("unknown DreamerConfig keys ['nmu_envs']")):
        DreamerConfig.from_dict({"nmu_envs": 2})
    with pytest.raises(ValueError, match=re.escape("unknown model keys ['units']")):
        DreamerConfig.from_dict({"model": {"units": 2}})


def test_checkpoint_every_below_num_envs_is_rejected():
    with pytest.raises(ValueError, match=r"checkpoint_every=2 is invalid: use 0 \(only at the end\) or a value >= num_envs=4"):
        DreamerConfig(num_envs=4, checkpoint_every=2)
    with pytest.raises(ValueError, match="num_steps=10.5 is invalid"):
        DreamerConfig(num_steps=10.5)
