"""Replay ring: schema, commit markers, generator sampling, safety margin, non-strict sequences, state."""

import pytest
import torch

from worldgym.agents.dreamer_v3.pixels import pack_2bit, unpack_2bit
from worldgym.agents.dreamer_v3.replay import ReplayNotReadyError, ReplayRing, dreamer_schema

N = 3


def make_ring(capacity=20, margin=4, obs_shape=(2,), obs_dtype=torch.float32) -> ReplayRing:
    return ReplayRing(dreamer_schema(obs_shape, obs_dtype), capacity, N, margin)


def step_row(t: int, obs_shape=(2,)) -> dict[str, torch.Tensor]:
    """Row whose every field encodes its time index t (env i adds 1000 * i to obs)."""
    env = torch.arange(N)
    return {
        "obs": (t + 1000 * env).float().view(N, *[1] * len(obs_shape)).expand(N, *obs_shape).clone(),
        "action": torch.full((N,), t % 2),
        "reward": torch.full((N,), float(t)),
        "is_first": torch.tensor([float(t % 5 == 0)] * N),
        "cont": torch.ones(N),
        "episode_id": torch.full((N,), t // 5),
    }


def fill(ring: ReplayRing, steps: int, commit: bool = True) -> None:
    for t in range(ring.written_t, ring.written_t + steps):
        ring.write(step_row(t))
        if commit:
            ring.commit()


def test_schema_is_time_major():
    ring = make_ring()
    assert ring.storage["obs"].shape == (20, N, 2)
    assert ring.storage["action"].dtype == torch.int64 and ring.storage["episode_id"].dtype == torch.int64
    pixels = make_ring(obs_shape=(1, 72, 20), obs_dtype=torch.uint8)
    assert pixels.storage["obs"].shape == (20, N, 1, 72, 20) and pixels.storage["obs"].dtype == torch.uint8


def test_uncommitted_steps_are_never_sampled():
    ring = make_ring()
    fill(ring, 6)
    fill(ring, 3, commit=False)
    assert ring.committed_t == 6 and ring.written_t == 9
    batch, times = ring.sample(64, 4, torch.Generator().manual_seed(0))
    assert int(times.max()) <= 5
    assert torch.equal(batch["reward"], times.float())
    with pytest.raises(ReplayNotReadyError):
        ring.sample(1, 7, torch.Generator())


def test_sampling_is_deterministic_and_consistent():
    ring = make_ring()
    fill(ring, 15)
    a, ta = ring.sample(8, 5, torch.Generator().manual_seed(7))
    b, tb = ring.sample(8, 5, torch.Generator().manual_seed(7))
    assert torch.equal(ta, tb) and all(torch.equal(a[k], b[k]) for k in a)
    assert a["obs"].shape == (5, 8, 2) and a["action"].shape == (5, 8)
    # Consecutive time indices within a sequence, all from one env
    assert torch.equal(ta[1:] - ta[:-1], torch.ones(4, 8, dtype=torch.int64))
    env = (a["obs"][..., 0] - ta.float()) / 1000
    assert torch.equal(env, env[:1].expand_as(env))


def test_non_strict_sequences_cross_episode_starts():
    ring = make_ring()
    fill(ring, 15)
    batch, times = ring.sample(64, 6, torch.Generator().manual_seed(1))
    first_mid_sequence = batch["is_first"][1:].sum()
    assert first_mid_sequence > 0
    assert torch.equal(batch["is_first"], (times % 5 == 0).float())


def test_wrapped_ring_keeps_safety_margin_from_the_writer():
    ring = make_ring(capacity=20, margin=4)
    fill(ring, 50)
    lo, hi = ring.sample_window(3)
    assert (lo, hi) == (50 - 20 + 4, 47)
    _, times = ring.sample(512, 3, torch.Generator().manual_seed(2))
    assert int(times.min()) >= lo and int(times.max()) == 49
    # A lagging view of the marker (the learner's) bounds the newest sample
    _, lagged = ring.sample(512, 3, torch.Generator().manual_seed(2), committed_t=40)
    assert int(lagged.max()) <= 39
    with pytest.raises(ValueError, match="ahead of the ring's marker"):
        ring.sample_window(3, committed_t=51)


def test_writer_cannot_run_past_the_safety_margin():
    ring = make_ring(margin=4)
    fill(ring, 4, commit=False)
    with pytest.raises(RuntimeError, match="commit at least every safety_margin=4 steps"):
        ring.write(step_row(4))


def test_write_validates_fields():
    ring = make_ring()
    row = step_row(0)
    with pytest.raises(KeyError, match="missing replay fields \\['cont'\\]"):
        ring.write({k: v for k, v in row.items() if k != "cont"})
    with pytest.raises(ValueError, match="field 'obs' has shape"):
        ring.write(row | {"obs": torch.zeros(N, 3)})
    assert ring.written_t == 0


def test_packed_pixels_round_trip_through_the_ring():
    ring = make_ring(obs_shape=(1, 72, 20), obs_dtype=torch.uint8)
    gen = torch.Generator().manual_seed(3)
    frames = torch.randint(0, 4, (10, N, 1, 72, 80), generator=gen, dtype=torch.uint8)
    for t in range(10):
        ring.write(step_row(t) | {"obs": pack_2bit(frames[t])})
        ring.commit()
    batch, times = ring.sample(4, 3, gen)
    assert batch["obs"].shape == (3, 4, 1, 72, 20)
    for b in range(4):
        envs = [
            i for i in range(N) if torch.equal(unpack_2bit(batch["obs"][0, b]), frames[int(times[0, b]), i])
        ]
        assert envs, "sampled frame must equal a written frame of the same time index"


def test_state_dict_round_trip_and_mismatch():
    ring = make_ring()
    fill(ring, 12)
    fill(ring, 2, commit=False)
    other = make_ring()
    other.load_state_dict(ring.state_dict())
    assert other.committed_t == other.written_t == 12
    assert all(torch.equal(other.storage[k], ring.storage[k]) for k in ring.storage)
    with pytest.raises(ValueError, match="replay field 'obs': checkpoint has"):
        make_ring(obs_shape=(3,)).load_state_dict(ring.state_dict())


def test_in_place_writes_through_slot_views():
    copied, in_place = make_ring(), make_ring()
    for t in range(4):
        row = step_row(t)
        copied.write(row)
        for name, view in in_place.next_slot().items():
            view.copy_(row[name])  # what a device env kernel would write
        in_place.advance()
    assert all(torch.equal(copied.storage[k], in_place.storage[k]) for k in copied.storage)
    assert in_place.written_t == 4 and in_place.committed_t == 0
    with pytest.raises(RuntimeError, match="commit at least every safety_margin=4 steps"):
        in_place.next_slot()


def test_live_steps_are_read_and_restored_across_the_wrap():
    """A ring that wrapped reads its live steps out and refills an empty ring with them, other slots zero."""
    ring = make_ring(capacity=20, margin=4)
    fill(ring, 27)  # wrapped: holds steps [7, 27)
    assert ring.live_steps() == (11, 27)  # the 4 oldest are the writer's margin
    steps = ring.read_steps(11, 27)
    assert torch.equal(steps["reward"][:, 0], torch.arange(11, 27, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"steps \[6, 27\) are not in the ring"):
        ring.read_steps(6, 27)
    other = make_ring(capacity=20, margin=4)
    fill(other, 3)
    other.restore_steps(27, [(9, ring.read_steps(9, 20)), (20, ring.read_steps(20, 27))])
    assert (other.committed_t, other.written_t) == (27, 27)
    for name, data in ring.read_steps(9, 27).items():
        assert torch.equal(other.read_steps(9, 27)[name], data), name
    assert not other.read_steps(7, 9)["reward"].any()  # not given: emptied
    with pytest.raises(ValueError, match=r"replay field 'obs': segment has steps of \(3, 2\) torch.float32, ring expects \(3, 3\)"):
        make_ring(obs_shape=(3,)).restore_steps(27, [(9, ring.read_steps(9, 27))])
