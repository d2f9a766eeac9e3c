"""Time-major replay ring ``[T_cap, N, ...]`` with commit markers and generator-driven sequence sampling.

Index ``t`` stores the transition out of ``obs[t]``: ``obs[t]``, ``action[t]`` (int), ``reward[t]`` (the
reward received on *entering* ``obs[t]``, DreamerV3 convention), ``is_first[t]`` (``obs[t]`` starts an
episode), ``cont[t]`` (0 only when ``obs[t]`` is a true terminal; truncation keeps 1) and ``episode_id[t]``.

The writer appends whole env steps at ``written_t``; :meth:`ReplayRing.commit` publishes them by advancing
``committed_t``. The learner samples only committed steps, and never the ``safety_margin`` oldest slots, which
the writer may be overwriting while it runs ahead of the commit marker. The ring lives on any torch device, so
a CUDA env can write its buffers straight into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worldgym.errors import WorldgymError


@dataclass(frozen=True)
class FieldSpec:
    """Shape (per env, without ``[T, N]``) and dtype of one replay field."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def dreamer_schema(
    obs_shape: tuple[int, ...], obs_dtype: torch.dtype = torch.float32
) -> dict[str, FieldSpec]:
    """The transition-aligned schema; pixel obs use ``obs_shape=(1, 72, 20)`` and ``torch.uint8`` (packed)."""
    return {
        "obs": FieldSpec(tuple(obs_shape), obs_dtype),
        "action": FieldSpec((), torch.int64),
        "reward": FieldSpec((), torch.float32),
        "is_first": FieldSpec((), torch.float32),
        "cont": FieldSpec((), torch.float32),
        "episode_id": FieldSpec((), torch.int64),
    }


class ReplayNotReadyError(WorldgymError, RuntimeError):
    """Raised when sampling before enough committed steps exist."""


class ReplayRing:
    """Fixed-capacity time-major ring buffer shared by an actor (writer) and a learner (sampler).

    Args:
        schema (dict[str, FieldSpec]): fields to store.
        capacity (int): time steps per env (``T_cap``).
        num_envs (int): envs written per step (``N``).
        safety_margin (int): how far the writer may run ahead of ``committed_t``.
        device (str | torch.device): where the storage lives.
    """

    def __init__(
        self,
        schema: dict[str, FieldSpec],
        capacity: int,
        num_envs: int,
        safety_margin: int,
        device: str | torch.device = "cpu",
    ) -> None:
        if capacity <= safety_margin:
            raise ValueError(f"capacity={capacity} must be > safety_margin={safety_margin}")
        if num_envs < 1:
            raise ValueError(f"num_envs={num_envs} must be >= 1")
        self.schema = dict(schema)
        self.capacity = capacity
        self.num_envs = num_envs
        self.safety_margin = safety_margin
        self.device = torch.device(device)
        self.storage = {
            name: torch.zeros((capacity, num_envs, *spec.shape), dtype=spec.dtype, device=self.device)
            for name, spec in schema.items()
        }
        self.written_t = 0
        self.committed_t = 0

    def next_slot(self) -> dict[str, torch.Tensor]:
        """Views ``[N, ...]`` of the slot at ``written_t`` for writers that fill it in place, then advance.

        A device-resident ring lets a CUDA env (e.g. the Game Boy env) write its frame buffers straight into
        these views, with no host round trip.
        """
        if self.written_t - self.committed_t >= self.safety_margin:
            raise RuntimeError(
                f"writer is {self.written_t - self.committed_t} steps ahead of committed_t; commit at least "
                f"every safety_margin={self.safety_margin} steps"
            )
        slot = self.written_t % self.capacity
        return {name: data[slot] for name, data in self.storage.items()}

    def advance(self) -> None:
        """Mark the slot returned by :meth:`next_slot` as written (still invisible until :meth:`commit`)."""
        if self.written_t - self.committed_t >= self.safety_margin:
            raise RuntimeError(f"advance without a slot: writer already {self.safety_margin} steps ahead")
        self.written_t += 1

    def write(self, step: dict[str, torch.Tensor]) -> None:
        """Copy one env step (every field, leading dim ``N``) into the slot at ``written_t`` and advance."""
        missing = set(self.schema) - set(step)
        if missing:
            raise KeyError(f"step is missing replay fields {sorted(missing)}")
        for name, spec in self.schema.items():
            expected = (self.num_envs, *spec.shape)
            if tuple(step[name].shape) != expected:
                raise ValueError(f"field {name!r} has shape {tuple(step[name].shape)}, expected {expected}")
        views = self.next_slot()
        for name, view in views.items():
            view.copy_(step[name], non_blocking=True)
        self.advance()

    def commit(self) -> int:
        """Publish every written step to the sampler; returns the new ``committed_t``."""
        self.committed_t = self.written_t
        return self.committed_t

    def sample_window(self, seq_len: int, committed_t: int | None = None) -> tuple[int, int]:
        """Range ``[lo, hi]`` of sequence start times drawable given a view of the commit marker.

        ``committed_t`` is the learner's view (default: the current marker); it may lag the marker but never
        lead it. Starts in ``[lo, hi]`` keep the whole sequence committed and out of the writer's next
        ``safety_margin`` slots.
        """
        view = self.committed_t if committed_t is None else committed_t
        if view > self.committed_t:
            raise ValueError(f"committed_t view {view} is ahead of the ring's marker {self.committed_t}")
        return self.live_steps()[0], view - seq_len

    def live_steps(self) -> tuple[int, int]:
        """Range ``[lo, committed_t)`` of the committed steps a sample may still read, now or later.

        The ``safety_margin`` oldest slots are out of it (the writer may be overwriting them), and ``lo`` only
        grows as the ring fills, so these steps are all a checkpoint needs to continue exactly.
        """
        return max(0, self.committed_t - self.capacity + self.safety_margin), self.committed_t

    def ready(self, seq_len: int, min_ready_steps: int, committed_t: int | None = None) -> bool:
        """True when ``min_ready_steps`` are committed and a sequence of ``seq_len`` fits the window."""
        view = self.committed_t if committed_t is None else committed_t
        lo, hi = self.sample_window(seq_len, view)
        return view >= min_ready_steps and hi >= lo

    def sample(
        self, batch_size: int, seq_len: int, generator: torch.Generator, committed_t: int | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Draw ``batch_size`` sequences ``[seq_len, B, ...]`` (non-strict: may cross episode starts).

        Returns the batch and the absolute time index ``[seq_len, B]`` of every sampled step. The generator
        must live on the ring's device; ``committed_t`` is the learner's view of the marker
        (see :meth:`sample_window`).
        """
        lo, hi = self.sample_window(seq_len, committed_t)
        if hi < lo:
            raise ReplayNotReadyError(
                f"need {seq_len} committed steps inside the sampling window [{lo}, {hi + seq_len}), "
                f"have committed_t={self.committed_t}"
            )
        uniform = torch.rand(batch_size, generator=generator, device=self.device)
        starts = lo + (uniform * (hi - lo + 1)).long().clamp_max(hi - lo)
        envs = torch.randint(self.num_envs, (batch_size,), generator=generator, device=self.device)
        times = starts.unsqueeze(0) + torch.arange(seq_len, device=self.device).unsqueeze(1)
        slots = times % self.capacity
        env_index = envs.unsqueeze(0).expand(seq_len, batch_size)
        batch = {name: data[slots, env_index] for name, data in self.storage.items()}
        return batch, times

    def fill(self) -> float:
        """Fraction of the ring holding committed data."""
        return min(self.committed_t, self.capacity) / self.capacity

    def read_steps(self, start: int, end: int) -> dict[str, torch.Tensor]:
        """Every committed field of the steps ``[start, end)``, ``[end - start, N, ...]`` on the CPU."""
        oldest = max(0, self.written_t - self.capacity)  # older slots hold steps written since
        if not oldest <= start <= end <= self.committed_t:
            raise ValueError(
                f"steps [{start}, {end}) are not in the ring, which holds the committed steps [{oldest}, "
                f"{self.committed_t})"
            )
        slots = torch.arange(start, end, device=self.device) % self.capacity
        return {name: data[slots].cpu().contiguous() for name, data in self.storage.items()}

    def restore_steps(self, committed_t: int, parts: list[tuple[int, dict[str, torch.Tensor]]]) -> None:
        """Empty the ring, then write ``parts`` (first step, fields ``[T, N, ...]``) and set both markers to
        ``committed_t``; steps outside ``[committed_t - capacity, committed_t)`` are skipped.

        Raises:
            ValueError: a field is missing or its shape or dtype differs from this ring's schema.
        """
        for _, fields in parts:
            for name, data in self.storage.items():
                saved = fields.get(name)
                if saved is None:
                    raise ValueError(f"replay segment lacks field {name!r}")
                if saved.shape[1:] != data.shape[1:] or saved.dtype != data.dtype:
                    raise ValueError(
                        f"replay field {name!r}: segment has steps of {tuple(saved.shape[1:])} {saved.dtype}, "
                        f"ring expects {tuple(data.shape[1:])} {data.dtype}"
                    )
        for data in self.storage.values():
            data.zero_()
        for first, fields in parts:
            lo, hi = max(first, committed_t - self.capacity), committed_t
            count = min(hi, first + next(iter(fields.values())).shape[0]) - lo
            if count <= 0:
                continue
            slots = torch.arange(lo, lo + count, device=self.device) % self.capacity
            for name, data in self.storage.items():
                data[slots] = fields[name][lo - first : lo - first + count].to(self.device)
        self.committed_t = self.written_t = committed_t

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """The whole storage and the marker (checkpoints of format 2; uncommitted steps never become visible)."""
        state: dict[str, torch.Tensor | int] = {f"storage.{k}": v for k, v in self.storage.items()}
        state["committed_t"] = self.committed_t
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor | int]) -> None:
        """Restore from :meth:`state_dict`; shapes and dtypes must match this ring's schema."""
        for name, data in self.storage.items():
            saved = state.get(f"storage.{name}")
            if not isinstance(saved, torch.Tensor):
                raise ValueError(f"replay checkpoint lacks field {name!r}")
            if saved.shape != data.shape or saved.dtype != data.dtype:
                raise ValueError(
                    f"replay field {name!r}: checkpoint has {tuple(saved.shape)} {saved.dtype}, "
                    f"ring expects {tuple(data.shape)} {data.dtype}"
                )
        for name, data in self.storage.items():
            data.copy_(state[f"storage.{name}"])
        self.committed_t = self.written_t = int(state["committed_t"])
